#!/usr/bin/env python3
"""Python API overhead (issue 16): parqivf's Python `Index.search` against
the Rust CLI's timed search calls on the same index, queries and settings,
and FAISS's Python `search` on the same data, in one run.

Usage:
  python_overhead.py --bin target/release/parqivf --index IDX --data DIR \
      --nprobe 16 [--preload codes] [--nq 1000] [--single 1000] [--reps 3] [--rounds 5] [--faiss-nlist N]

DIR holds query.npy, gt.npy and base.npy (../shared/bench/gen_*.py). The CLI
and Python runs alternate for `--rounds` rounds (each the best of `--reps`
passes), and each figure is the median over the rounds: on a shared 2-core
machine one pass of either varies by ±15 %. It prints one JSON object:
  batch:  queries/s of one call with `nq` queries, for the CLI (`parqivf
          search --batch-size nq`, which times only the library call), for
          `idx.search`, and for FAISS IndexIVFFlat at the same nlist and
          nprobe; and the ratio python/cli;
  single: microseconds per one-query call (mean over `single` calls), CLI
          (`--batch-size 1`), Python and FAISS, and the difference python - cli;
  recall@k of each.
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import parqivf


def cli(bin_, index, queries, gt, k, nprobe, preload, reps, batch):
    out = subprocess.run(
        [bin_, "search", "--index", index, "--queries", queries, "--groundtruth", gt,
         "--k", str(k), "--nprobe", str(nprobe), "--preload", preload, "--reps", str(reps),
         "--batch-size", str(batch)],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def recall(ids, gt, k):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, gt)]))


def best(reps, fn):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--preload", default="codes")
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--single", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--faiss-nlist", type=int, default=0, help="0: the index's nlist")
    ap.add_argument("--no-faiss", action="store_true")
    a = ap.parse_args()

    data = Path(a.data)
    q = np.load(data / "query.npy").astype(np.float32)[: a.nq]
    gt = np.load(data / "gt.npy")[: len(q)]
    tmp = Path(tempfile.mkdtemp())
    np.save(tmp / "q.npy", q)
    np.save(tmp / "gt.npy", gt.astype(np.int32))
    ns = min(a.single, len(q))
    np.save(tmp / "q1.npy", q[:ns])
    np.save(tmp / "gt1.npy", gt[:ns].astype(np.int32))

    res = {"index": a.index, "queries": len(q), "k": a.k, "nprobe": a.nprobe, "preload": a.preload}

    idx = parqivf.Index.open(a.index, preload=a.preload)
    ids, _ = idx.search(q, k=a.k, nprobe=a.nprobe)
    rows = [q[i] for i in range(ns)]

    def singles():
        for r in rows:
            idx.search(r, k=a.k, nprobe=a.nprobe)

    singles()
    runs = {"cli_qps": [], "python_qps": [], "cli_us": [], "python_us": []}
    for _ in range(a.rounds):
        # Rust: the CLI times only `Index::search_batch` calls.
        c = cli(a.bin, a.index, str(tmp / "q.npy"), str(tmp / "gt.npy"), a.k, a.nprobe, a.preload, a.reps, len(q))
        c1 = cli(a.bin, a.index, str(tmp / "q1.npy"), str(tmp / "gt1.npy"), a.k, a.nprobe, a.preload, a.reps, 1)
        runs["cli_qps"].append(c["qps"])
        runs["cli_us"].append(1e6 / c1["qps"])
        runs["python_qps"].append(len(q) / best(a.reps, lambda: idx.search(q, k=a.k, nprobe=a.nprobe)))
        runs["python_us"].append(1e6 * best(a.reps, singles) / ns)
    med = {key: float(np.median(v)) for key, v in runs.items()}
    res["rounds"] = runs
    res["batch"] = {
        "cli_qps": med["cli_qps"],
        "python_qps": med["python_qps"],
        "python_over_cli": med["python_qps"] / med["cli_qps"],
    }
    res["single_us"] = {
        "cli": med["cli_us"],
        "python": med["python_us"],
        "python_minus_cli": med["python_us"] - med["cli_us"],
    }
    res["recall"] = {"cli": c["recall"], "python": recall(ids, gt, a.k)}

    if not a.no_faiss:
        import faiss

        base = np.load(data / "base.npy", mmap_mode="r").astype(np.float32)
        nlist = a.faiss_nlist or idx.info["nlist"]
        quantizer = faiss.IndexFlatL2(base.shape[1])
        f = faiss.IndexIVFFlat(quantizer, base.shape[1], nlist)
        t = time.perf_counter()
        f.train(base)
        f.add(base)
        res["faiss_build_s"] = time.perf_counter() - t
        f.nprobe = a.nprobe
        fids = f.search(q, a.k)[1]
        f_batch = float(np.median([best(a.reps, lambda: f.search(q, a.k)) for _ in range(a.rounds)]))
        frows = [q[i : i + 1] for i in range(ns)]

        def fsingles():
            for r in frows:
                f.search(r, a.k)

        fsingles()
        f_single = float(np.median([best(a.reps, fsingles) for _ in range(a.rounds)]))
        res["batch"]["faiss_qps"] = len(q) / f_batch
        res["single_us"]["faiss"] = 1e6 * f_single / ns
        res["recall"]["faiss"] = recall(fids, gt, a.k)
        res["faiss"] = f"IndexIVFFlat nlist {nlist}, {faiss.omp_get_max_threads()} threads, faiss {faiss.__version__}"
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
