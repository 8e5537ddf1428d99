"""Batch search with the codes in RAM against FAISS's 4-bit fast-scan with
exact refine, interleaved in one process (issue 26).

FAISS `IVF{nlist},PQ{d/2}x4fs,RFlat` is built once on the data set (2
threads), then each round searches all queries in one batch on one thread
(k_factor 4, best of 3) and runs the given parqivf command once, whose last
stdout line must be a JSON line with `qps` and `recall`: `parqivf search`'s
summary, or examples/serve_client.rs's against a running `parqivf serve`
(scripts/bench/serve_vs_faiss.sh). Rounds alternate, so
that a noisy host's drift hits both alike. Prints per round both QPS,
both recalls and the ratio.

With --single, FAISS searches one query per call instead (give the
parqivf command --batch-size 1, or serve_client its default of one query
a request): the same comparison for single queries.

NPROBE `auto` (or `auto:R`) is FAISS's cheapest setting for the recall
target: the smallest nprobe whose recall@10 over the queries is at least
R (default 0.95), found by bisection. A grid that steps over it (16 where
12 reaches 0.95 on SIFT-like 1M, 128 where 116 does on the embeddings)
makes FAISS probe more lists than the target needs, and the ratio
flatters parqivf.

usage: fastscan_batch_vs_faiss.py DATASET NLIST NPROBE|auto[:R] [--rounds N] [--single] -- PARQIVF_COMMAND...
  env: BENCH_DATA (./bench-data). Source scripts/bench/faiss_blas.sh first
  on a CPU that FAISS's OpenBLAS does not recognise.

example:
  python scripts/bench/fastscan_batch_vs_faiss.py synth-sift128-1000k-s1 1000 12 -- \
    target/release/parqivf search --index IDX --queries Q.npy --groundtruth GT.npy \
    --k 10 --threads 1 --preload codes --reps 5
"""

import argparse
import json
import os
import subprocess
import sys
import time

# FAISS's idle OpenMP workers otherwise spin for a while after each
# parallel region (the two-thread build): on a small host they would take
# the cores from the parqivf command started right after FAISS's timing.
# FAISS searches on one thread here, so its own figures do not change.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import faiss  # noqa: E402 (after the OpenMP setting)
import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("nlist", type=int)
    ap.add_argument("nprobe", help="an nprobe, or auto[:R] (module comment)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--single",
        action="store_true",
        help="FAISS one query per call (give parqivf --batch-size 1)",
    )
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("the parqivf command follows `--`")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    # A fixed nprobe, or the recall target `auto[:R]` searches for.
    auto, _, given = a.nprobe.partition(":")
    nprobe, target = None, None
    if auto == "auto":
        try:
            target = float(given or 0.95)
        except ValueError:
            ap.error(f"nprobe {a.nprobe!r}: the recall after `auto:` is not a number")
    elif a.nprobe.isdigit() and 1 <= int(a.nprobe) <= a.nlist:
        nprobe = int(a.nprobe)
    else:
        ap.error(f"nprobe {a.nprobe!r}: give 1..={a.nlist} or auto[:R]")
    data = os.path.join(os.environ.get("BENCH_DATA", "bench-data"), a.dataset)
    xb = np.load(os.path.join(data, "base.npy"))
    xq = np.load(os.path.join(data, "query.npy"))
    gt = np.load(os.path.join(data, "gt.npy"))[:, :10]
    d = xb.shape[1]
    faiss.omp_set_num_threads(2)
    index = faiss.index_factory(d, f"IVF{a.nlist},PQ{d // 2}x4fs,RFlat")
    index.train(xb)
    index.add(xb)
    faiss.omp_set_num_threads(1)

    def params_at(nprobe):
        return faiss.IndexRefineSearchParameters(
            k_factor=4, base_index_params=faiss.SearchParametersIVF(nprobe=nprobe)
        )

    def recall_of(ids):
        return np.mean([len(set(ids[i]) & set(gt[i])) / 10 for i in range(len(xq))])

    if target is not None:
        nprobe = cheapest_nprobe(
            lambda n: recall_of(index.search(xq, 10, params=params_at(n))[1]), a.nlist, target
        )
        print(f"FAISS's smallest nprobe with recall@10 >= {target}: {nprobe}", flush=True)
    params = params_at(nprobe)
    for r in range(a.rounds):
        best = 0.0
        for _ in range(3):
            t = time.perf_counter()
            if a.single:
                ids = np.vstack([index.search(q[None], 10, params=params)[1] for q in xq])
            else:
                _, ids = index.search(xq, 10, params=params)
            best = max(best, len(xq) / (time.perf_counter() - t))
        recall = recall_of(ids)
        out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(command)}: exit {out.returncode}\n{out.stderr[-2000:]}")
        ours = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"round {r + 1}: FAISS nprobe {nprobe} recall {recall:.4f} "
            f"{'single' if a.single else 'batch'} {best:.0f} QPS | "
            f"parqivf recall {ours['recall']} {ours['qps']:.0f} QPS "
            + (f"({ours['mean-lists-probed']} lists) " if "mean-lists-probed" in ours else "")
            + f"| ratio {ours['qps'] / best:.2f}",
            flush=True,
        )


def cheapest_nprobe(recall_at, nlist, target):
    """The smallest nprobe in 1..=nlist whose recall_at(nprobe) >= target
    (recall grows with nprobe), or nlist when none reaches it."""
    low, high = 1, nlist
    while low < high:
        mid = (low + high) // 2
        if recall_at(mid) >= target:
            high = mid
        else:
            low = mid + 1
    return low


if __name__ == "__main__":
    main()
