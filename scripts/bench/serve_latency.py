#!/usr/bin/env python3
"""serve_latency.py URL QUERIES.npy GT.npy [--k 10] [--nprobe N] [--rerank R] [--n 300] [--token T]
    [--warm-novel M | --no-warming]
One query per HTTP request to a running `parqivf serve`, sequentially on one
keep-alive connection (the storage-resident target of issue 12): a warming
pass, then the measured pass over the first N queries; prints one JSON line
with p50/p99 latency in ms, QPS and recall@k against GT. With
--idle-floor MS it also measures the host's own floor for a request that
waits MS first: GET /healthz, 100 times on the same connection, each after
the client slept MS (the server and client idle meanwhile, as during a
query's round of that time to first byte), and adds its p50 as
idle_floor_p50_ms: what any server pays on this host to answer after an
idle wait, beyond the wait itself. The warming pass
sends the same N queries, or with --warm-novel M the M queries after them,
so that a cache of postings lists is measured on queries it never saw, or
with --no-warming none (a first pass over empty caches)."""
import argparse, http.client, json, time, urllib.parse
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("url"); ap.add_argument("queries"); ap.add_argument("gt")
ap.add_argument("--k", type=int, default=10); ap.add_argument("--nprobe", type=int, default=None,
                help="lists a query probes; without it the server's default (the index's recall target)")
ap.add_argument("--rerank", type=int, default=None); ap.add_argument("--n", type=int, default=300)
ap.add_argument("--label", default="")
ap.add_argument("--token", default=None, help="bearer token of a server started with one")
ap.add_argument("--warm-novel", type=int, default=0,
                help="warm with the M queries after the measured ones instead of the measured ones")
ap.add_argument("--idle-floor", type=float, default=None, metavar="MS",
                help="also measure GET /healthz after MS ms of idling (the host's wake-up floor)")
ap.add_argument("--no-warming", action="store_true",
                help="no warming pass: measure the first pass over the server's caches")
a = ap.parse_args()
every = np.load(a.queries).astype(np.float32)
q = every[: a.n]
warming = every[a.n : a.n + a.warm_novel] if a.warm_novel else q
gt = np.load(a.gt)[: a.n, : a.k]
u = urllib.parse.urlparse(a.url)
conn = http.client.HTTPConnection(u.hostname, u.port)
lat, hits = [], 0
headers = {"Content-Type": "application/json"}
if a.token:
    headers["Authorization"] = f"Bearer {a.token}"
for warm in ((False,) if a.no_warming else (True, False)):
    for i in range(len(warming if warm else q)):
        body = {"vector": (warming if warm else q)[i].tolist(), "k": a.k}
        if a.nprobe is not None:
            body["nprobe"] = a.nprobe
        if a.rerank is not None:
            body["rerank"] = a.rerank
        data = json.dumps(body)
        t = time.perf_counter()
        conn.request("POST", u.path, body=data, headers=headers)
        resp = conn.getresponse(); out = resp.read()
        dt = time.perf_counter() - t
        if resp.status != 200:
            raise SystemExit(f"HTTP {resp.status}: {out[:300]!r}")
        if not warm:
            lat.append(dt)
            ids = [h["rowid"] for h in json.loads(out)["results"][0]["hits"]]
            hits += len(set(ids) & set(gt[i].tolist()))
lat = np.array(lat) * 1000
out = {"label": a.label, "nprobe": a.nprobe, "rerank": a.rerank, "queries": len(q),
       "p50_ms": round(float(np.percentile(lat, 50)), 3), "p99_ms": round(float(np.percentile(lat, 99)), 3),
       "qps": round(len(q) / (lat.sum() / 1000), 1), "recall": round(hits / (len(q) * a.k), 4)}
if a.idle_floor is not None:
    floor = []
    for _ in range(100):
        time.sleep(a.idle_floor / 1000)
        t = time.perf_counter()
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        floor.append((time.perf_counter() - t) * 1000)
    out["idle_floor_p50_ms"] = round(float(np.percentile(floor, 50)), 3)
print(json.dumps(out), flush=True)
