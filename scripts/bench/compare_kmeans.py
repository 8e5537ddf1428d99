"""faiss.Kmeans and `parqivf train` side by side, interleaved, on one dataset.

For each k: FAISS then parqivf (then, with --reps 2, parqivf then FAISS), same
niter, same sampling rule (max_points_per_centroid 256 -> 256*k points), same
thread count. Each run records wall time of training only, the final training
objective, the objective of assigning ALL base rows (`obj_all`, comparable
across the two samplings), the CPU used by other processes during the run
(`other_cpu`, in cores) and the load average. With --roots R it also times
the two-level build (nlist = max k, R roots) with the same settings.

Does not wait for a quiet CPU by default (the shared machine is rarely quiet);
--quiet-timeout S waits up to S seconds before each run, like common.wait_quiet.

usage: compare_kmeans.py DATASET --bin target/release/parqivf [--k 1024,4096]
       [--threads 2] [--niter 20] [--reps 1] [--roots 64] [--compare-assign 1,2,4]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.environ.get("BENCH_SCRIPTS", "/work/shared/bench"))
import common  # noqa: E402

import faiss  # noqa: E402

RESULTS = os.environ.get("BENCH_RESULTS", os.path.abspath("bench-results"))


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_faiss(base, k, a):
    faiss.omp_set_num_threads(a.threads)
    km = faiss.Kmeans(base.shape[1], k, niter=a.niter, seed=a.seed, verbose=False)
    mon = common.OtherCpu().start()
    t0 = time.perf_counter()
    km.train(base)
    t = time.perf_counter() - t0
    other = mon.stop()
    t0 = time.perf_counter()
    dist, _ = km.index.search(base, 1)
    ta = time.perf_counter() - t0
    return dict(impl="faiss", k=k, train_s=round(t, 3), obj_train=float(km.obj[-1]),
                obj_all=float(dist.astype(np.float64).sum()), assign_all_s=round(ta, 3),
                train_points=min(base.shape[0], km.cp.max_points_per_centroid * k),
                other_cpu=other, load=loadavg())


def run_parqivf(path, k, a, roots=None):
    cmd = [a.bin, "train", "--data", path, "--k", str(k), "--niter", str(a.niter),
           "--threads", str(a.threads), "--seed", str(a.seed), "--eval-all", "--json"]
    if roots:
        cmd += ["--roots", str(roots)]
        if a.compare_assign:
            cmd += ["--compare-assign", a.compare_assign]
    mon = common.OtherCpu().start()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    other = mon.stop()  # includes our own child: subtract its cores below
    r = json.loads(out)
    r.update(impl="parqivf" + (f"-R{roots}" if roots else ""), other_cpu_incl_child=other, load=loadavg())
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--k", default="1024,4096")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--niter", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--roots", type=int, default=0)
    ap.add_argument("--compare-assign", default="")
    ap.add_argument("--skip-faiss", action="store_true")
    ap.add_argument("--quiet-timeout", type=float, default=0)
    a = ap.parse_args()
    path = os.path.join(common.ds_dir(a.dataset), "base.npy")
    base = np.ascontiguousarray(np.load(path), dtype=np.float32)
    os.makedirs(RESULTS, exist_ok=True)
    out_path = os.path.join(RESULTS, f"compare_kmeans_{a.dataset}.json")
    rows = []

    def record(r):
        print(json.dumps(r), flush=True)
        rows.append(r)
        with open(out_path, "w") as f:
            json.dump(dict(dataset=a.dataset, faiss=faiss.__version__, threads=a.threads,
                           niter=a.niter, runs=rows), f, indent=1)

    def quiet():
        if a.quiet_timeout > 0:
            common.wait_quiet(timeout=a.quiet_timeout)

    for k in [int(x) for x in a.k.split(",")]:
        for rep in range(a.reps):
            order = ["faiss", "parqivf"] if rep % 2 == 0 else ["parqivf", "faiss"]
            for impl in order:
                if impl == "faiss" and a.skip_faiss:
                    continue
                quiet()
                record(run_faiss(base, k, a) if impl == "faiss" else run_parqivf(path, k, a))
    if a.roots:
        quiet()
        record(run_parqivf(path, max(int(x) for x in a.k.split(",")), a, roots=a.roots))
    for k in sorted({r["k"] for r in rows}):
        f = [r for r in rows if r["k"] == k and r["impl"] == "faiss"]
        p = [r for r in rows if r["k"] == k and r["impl"] == "parqivf"]
        if f and p:
            ft = min(r["train_s"] for r in f)
            pt = min(r["train_s"] for r in p)
            print(f"k={k}: time parqivf/faiss = {pt / ft:.3f} (best of {len(p)}/{len(f)}); "
                  f"obj_train ratio = {p[0]['objective'] / f[0]['obj_train']:.4f}; "
                  f"obj_all ratio = {p[0]['obj_all'] / f[0]['obj_all']:.4f}")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
