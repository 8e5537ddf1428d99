"""What FAISS's exact refine costs in a batch, next to its fast-scan alone
(issue 26: where parqivf's re-rank stands against FAISS's, codes in RAM).

`IVF{nlist},PQ{d/2}x4fs,RFlat` is built on the data set (2 threads), then
on one thread a batch of all queries is searched, best of --reps, three
ways:
  - `k_factor` 4: the fast-scan keeps 4 × k candidates, `RFlat` ranks
    them exactly from the raw vectors in RAM (what
    `fastscan_batch_vs_faiss.py` times);
  - `k_factor` 1: no candidate beyond k (the refine of k vectors only);
  - the fast-scan index alone asked for 4 × k neighbours: the first way
    without its refine.
The refine's cost is the first less the third.

usage: faiss_refine_cost.py DATASET NLIST NPROBE [--k 10] [--reps 5] [--rounds 3]
  env: BENCH_DATA (./bench-data). Source scripts/bench/faiss_blas.sh first.
"""

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import faiss  # noqa: E402 (after the OpenMP setting)
import numpy as np  # noqa: E402


def best_of(reps, f):
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("nlist", type=int)
    ap.add_argument("nprobe", type=int)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    root = os.path.join(os.environ.get("BENCH_DATA", "bench-data"), a.dataset)
    xb = np.load(os.path.join(root, "base.npy"))
    xq = np.load(os.path.join(root, "query.npy"))
    gt = np.load(os.path.join(root, "gt.npy"))[:, : a.k]
    d = xb.shape[1]
    faiss.omp_set_num_threads(2)
    index = faiss.index_factory(d, f"IVF{a.nlist},PQ{d // 2}x4fs,RFlat")
    t = time.perf_counter()
    index.train(xb)
    index.add(xb)
    print(f"build {time.perf_counter() - t:.2f} s", flush=True)
    faiss.omp_set_num_threads(1)
    faiss.extract_index_ivf(index).nprobe = a.nprobe
    base = faiss.downcast_index(index.base_index)

    def recall(ids):
        return np.mean([len(set(ids[i, : a.k]) & set(gt[i])) / a.k for i in range(len(xq))])

    for r in range(a.rounds):
        index.k_factor = 4
        refined, (_, ids4) = best_of(a.reps, lambda: index.search(xq, a.k))
        index.k_factor = 1
        plain, (_, ids1) = best_of(a.reps, lambda: index.search(xq, a.k))
        scan, _ = best_of(a.reps, lambda: base.search(xq, 4 * a.k))
        n = len(xq)
        print(
            f"round {r}: k_factor 4 {refined * 1e3:.2f} ms (R {recall(ids4):.4f}), "
            f"k_factor 1 {plain * 1e3:.2f} ms (R {recall(ids1):.4f}), "
            f"fast-scan alone, {4 * a.k} neighbours {scan * 1e3:.2f} ms; "
            f"refine {(refined - scan) * 1e3:.2f} ms a batch of {n}, "
            f"{(refined - scan) / (n * 4 * a.k) * 1e9:.0f} ns a candidate",
            flush=True,
        )


if __name__ == "__main__":
    main()
