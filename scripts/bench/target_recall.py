#!/usr/bin/env python3
"""--target-recall against fixed nprobe, on one index, one run, same binary
(docs/benchmarks.md, "Target recall").

1. `parqivf build` of a bench data set (gen_synth.py or gen_embed.py output:
   base.npy, query.npy, gt.npy) unless --index exists, with its build time
   and a second build with --calibration-queries 0 (the calibration's cost).
2. For each target (0.90, 0.95, 0.99): `parqivf search --target-recall`
   one query per call (`--threads 1 --batch-size 1`, best of --reps),
   its mean recall@10 against the exact ground truth, the mean estimate, the
   share of queries within 0.1 of the target, and the mean lists probed.
3. The fixed-nprobe curve on the same queries (nprobe grid), and, for each
   target, the QPS of the fixed nprobe reaching the same mean recall
   (log-linear interpolation between its neighbours on the curve): the
   ratio is what the per-query stop earns.
4. With --append F: the first (1 - F) of the rows are built, the rest
   upserted (a refresh appending F), then the estimate against the measured
   recall at each target, and whether the index calls the calibration stale.

Prints a JSON object per line, then a Markdown table.
"""

import argparse
import json
import os
import subprocess
import time

import numpy as np

BIN = os.environ.get("PARQIVF", "target/release/parqivf")


def run(args, **kw):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True, **kw)


def search(index, data, mode, extra):
    out = run([
        "search", "--index", index, "--queries", f"{data}/query.npy", "--groundtruth", f"{data}/gt.npy",
        "--threads", "1", "--batch-size", "1", "--preload", mode, "--warm", *extra,
    ]).stdout
    return json.loads(out.strip().splitlines()[-1])


def fixed_qps_at(curve, recall):
    """QPS of the fixed-nprobe curve at `recall` (log-linear between points)."""
    pts = sorted(curve, key=lambda p: p["recall"])
    for a, b in zip(pts, pts[1:]):
        if a["recall"] <= recall <= b["recall"]:
            t = (recall - a["recall"]) / max(b["recall"] - a["recall"], 1e-12)
            return float(np.exp(np.log(a["qps"]) + t * (np.log(b["qps"]) - np.log(a["qps"])))), \
                a["nprobe"] + t * (b["nprobe"] - a["nprobe"])
    return None, None


def build(data, index, nlist, calibration, base=None):
    t = time.perf_counter()
    run(["build", "--source", base or f"{data}/base.npy", "--out", index, "--nlist", str(nlist),
         "--calibration-queries", str(calibration), "--json"])
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--nlist", type=int, required=True)
    ap.add_argument("--work", default="/tmp/target-recall")
    ap.add_argument("--preload", default="codes", help="none|codes|all")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nprobes", default="2,4,6,8,12,16,24,32,48,64,96,128,160,200,256")
    ap.add_argument("--targets", default="0.9,0.95,0.99")
    ap.add_argument("--append", type=float, default=0.0)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    name = os.path.basename(a.data.rstrip("/"))
    index = f"{a.work}/{name}-{a.nlist}"
    rows = {}
    if a.append:
        base = np.load(f"{a.data}/base.npy")
        keep = int(len(base) * (1 - a.append))
        np.save(f"{a.work}/first.npy", base[:keep])
        np.save(f"{a.work}/rest.npy", base[keep:])
        np.save(f"{a.work}/rest_ids.npy", np.arange(keep, len(base), dtype=np.int64))
        index += f"-append{a.append}"
        if not os.path.exists(index):
            rows["build-s"] = build(a.data, index, a.nlist, 1000, base=f"{a.work}/first.npy")
            t = time.perf_counter()
            run(["upsert", "--index", index, "--ids", f"{a.work}/rest_ids.npy", "--vectors", f"{a.work}/rest.npy"])
            rows["upsert-s"] = time.perf_counter() - t
    elif not os.path.exists(index):
        rows["build-s"] = build(a.data, index, a.nlist, 1000)
        rows["build-uncalibrated-s"] = build(a.data, index + "-nocal", a.nlist, 0)
    if rows:
        print(json.dumps(rows))
    extra = ["--reps", str(a.reps)]
    curve = []
    for p in [int(x) for x in a.nprobes.split(",") if int(x) <= a.nlist]:
        r = search(index, a.data, a.preload, ["--nprobe", str(p), *extra])
        curve.append(r)
        print(json.dumps({k: r[k] for k in ["nprobe", "recall", "qps", "mean-estimated-recall", "bytes-per-query"]}))
    table = []
    for t in [float(x) for x in a.targets.split(",")]:
        r = search(index, a.data, a.preload, ["--target-recall", str(t), *extra])
        fixed, at = fixed_qps_at(curve, r["recall"])
        row = {
            "target": t, "recall": r["recall"], "estimate": r["mean-estimated-recall"],
            "within-0.1": r["within-0.1-of-target"], "lists": r["mean-lists-probed"],
            "qps": r["qps"], "fixed-nprobe-same-recall": at, "fixed-qps-same-recall": fixed,
            "ratio": (r["qps"] / fixed) if fixed else None, "bytes-per-query": r["bytes-per-query"],
        }
        print(json.dumps(row))
        table.append(row)
    print(f"\n{name}, nlist {a.nlist}, preload {a.preload}, one query per call, best of {a.reps}\n")
    print("| target | recall@10 | mean estimate | queries within 0.1 | mean lists | QPS | fixed nprobe at that recall | its QPS | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        f = lambda v, d: "—" if v is None else f"{v:.{d}f}"
        print(f"| {r['target']} | {r['recall']:.4f} | {r['estimate']:.4f} | {r['within-0.1']:.3f} | {r['lists']:.1f} | "
              f"{r['qps']:,.0f} | {f(r['fixed-nprobe-same-recall'], 1)} | {f(r['fixed-qps-same-recall'], 0)} | {f(r['ratio'], 2)}× |")


if __name__ == "__main__":
    main()
