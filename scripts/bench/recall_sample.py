#!/usr/bin/env python3
"""`serve --recall-sample`: does it measure what an offline measurement does,
and what does it cost? (docs/benchmarks.md, "Target recall")

1. Accuracy: `parqivf serve --recall-sample 1 --recall-sample-cpu 1`, then
   --n queries (the query set repeated as needed), one per request, with
   --target-recall; the served answers' recall@10 against the exact ground
   truth (offline) next to the mean of `parqivf_recall_measured` once every
   sample is re-run.
2. Cost: the same index served three times (no sampling, then
   `--recall-sample 0.01` with the default CPU share), each loaded by
   --clients concurrent clients for --seconds: QPS of each.

Prints JSON lines.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

import numpy as np

BIN = os.environ.get("PARQIVF", "target/release/parqivf")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve(index, extra):
    port = free_port()
    p = subprocess.Popen([BIN, "serve", "--index", f"x={index}", "--addr", f"127.0.0.1:{port}", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz")
            return p, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit("serve did not start")


def ask(conn, body):
    conn.request("POST", "/v1/indexes/x/search", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.read()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {out[:300]!r}")
    return json.loads(out)["results"][0]


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(name) and 'index="x"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--preload", default="codes")
    a = ap.parse_args()
    q = np.load(f"{a.data}/query.npy").astype(np.float32)
    gt = np.load(f"{a.data}/gt.npy")[:, :10]
    base = ["--preload", a.preload]
    body = lambda i: {"vector": q[i % len(q)].tolist(), "k": 10, "target_recall": a.target_recall}

    p, port = serve(a.index, [*base, "--recall-sample", "1", "--recall-sample-cpu", "1"])
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        hits = 0
        done = lambda: metric(port, "parqivf_recall_measured_count") + metric(port, "parqivf_recall_samples_skipped_total")
        for i in range(a.n):
            ids = [h["rowid"] for h in ask(conn, body(i))["hits"]]
            hits += len(set(ids) & set(gt[i % len(q)].tolist()))
            # Paced so that the sampler's queue never fills: every query is re-run.
            if i % 32 == 31:
                while done() < i + 1:
                    time.sleep(0.05)
        offline = hits / (a.n * 10)
        t = time.perf_counter()
        while done() < a.n and time.perf_counter() - t < 600:
            time.sleep(0.5)
        count = metric(port, "parqivf_recall_measured_count")
        measured = metric(port, "parqivf_recall_measured_sum") / max(count, 1)
        estimated = metric(port, "parqivf_recall_estimated_sum") / max(metric(port, "parqivf_recall_estimated_count"), 1)
        print(json.dumps({"queries": a.n, "samples": count,
                          "skipped": metric(port, "parqivf_recall_samples_skipped_total"), "offline-recall": offline, "sampled-recall": measured,
                          "difference": measured - offline, "mean-estimate": estimated}), flush=True)
    finally:
        p.terminate()
        p.wait()

    for label, extra in [("no sampling", []), ("--recall-sample 0.01", ["--recall-sample", "0.01"]),
                         ("no sampling (again)", [])]:
        p, port = serve(a.index, [*base, *extra])
        try:
            done = [0] * a.clients
            stop = time.perf_counter() + a.seconds

            def client(c):
                conn = http.client.HTTPConnection("127.0.0.1", port)
                i = c
                while time.perf_counter() < stop:
                    ask(conn, body(i))
                    done[c] += 1
                    i += a.clients

            # Warm up, then measure.
            warm = http.client.HTTPConnection("127.0.0.1", port)
            for i in range(200):
                ask(warm, body(i))
            threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            qps = sum(done) / (time.perf_counter() - t)
            print(json.dumps({"mode": label, "clients": a.clients, "qps": qps,
                              "samples": metric(port, "parqivf_recall_measured_count")}), flush=True)
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
