#!/usr/bin/env python3
"""filter_faiss.py OUT_DIR BASE_NPY NLIST NPROBES [--reps 3] [--single-q 1000] [--nq 0]
                  [--selector batch] [--filters a,b] [--build-threads 2]

FAISS peer of parqivf's filtered search (issue 15) on the data of
filter_data.py (OUT_DIR holds filters.json, query.npy, gt_<name>.npy and ids_<name>.npy):
IndexIVFFlat (L2), trained as shared/bench/bench_faiss.py trains it
(index.train(base): faiss defaults, k-means on a sample of
max_points_per_centroid·nlist rows drawn with cp.seed, --build-threads
threads), then, with one search thread (faiss.omp_set_num_threads(1)), for
each filter and each nprobe a search with
    faiss.SearchParametersIVF(sel=faiss.IDSelectorBatch(ids), nprobe=nprobe)
of all queries in one call ("batch") and one query per call ("single").

Each (filter, nprobe, mode) prints one JSON line, tagged "faiss":
  recall       hits / Σ_q min(k, valid ids of gt row q) (gt rows are -1 padded
               where fewer than k rows match), as parqivf's benchmark mode;
  full-answers fraction of queries that returned min(k, matching rows) ids;
  qps          queries / best of --reps timed passes (one untimed warm-up
               first), as bench_faiss.py times; the selector is built once per
               filter, before, and is NOT in the QPS: its build time is
               reported separately as sel_build_ms;
  qps_cpu      queries / the best pass's process CPU time (one thread: robust
               to other load on a shared machine, as bench_faiss.py's *_cpu);
  other_cpu    cores' worth used by other processes meanwhile (common.OtherCpu).
--selector bitmap (or batch,bitmap) also runs faiss.IDSelectorBitmap, FAISS's
faster selector for dense id sets (n/8 bytes).
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "bench"))
import common  # noqa: E402  (shared/bench/common.py: OtherCpu)

import faiss  # noqa: E402

K = 10


def best_time(fn, reps):
    """(best wall s, best process CPU s, last output) of reps timed runs after a warm-up."""
    fn()  # warm-up
    best = best_cpu = float("inf")
    out = None
    for _ in range(max(1, reps)):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def score(I, gt):
    """(recall, full-answers) of result ids I against -1-padded gt."""
    valid = (gt[:, :K] >= 0).sum(axis=1)
    hits = 0
    full = 0
    for i in range(len(gt)):
        g = gt[i, :K]
        got = I[i][I[i] >= 0]
        hits += len(set(got.tolist()) & set(g[g >= 0].tolist()))
        full += len(got) >= valid[i]
    return hits / max(int(valid.sum()), 1), full / len(gt)


def make_selector(kind, ids, n):
    if kind == "batch":
        return faiss.IDSelectorBatch(ids), None
    mask = np.zeros(n, bool)
    mask[ids] = True
    bits = np.packbits(mask, bitorder="little")
    return faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits)), bits  # bits must outlive the selector


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("base_npy")
    ap.add_argument("nlist", type=int)
    ap.add_argument("nprobes")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--single-q", type=int, default=1000, help="queries in the one-per-call run (0 = skip)")
    ap.add_argument("--nq", type=int, default=0, help="use the first NQ queries (0 = all)")
    ap.add_argument("--build-threads", type=int, default=2)
    ap.add_argument("--selector", default="batch", help="batch, bitmap or batch,bitmap")
    ap.add_argument("--filters", default=None, help="comma list of filter names (default all)")
    ap.add_argument("--dataset", default=None, help="label (default: OUT_DIR's name less -filter)")
    a = ap.parse_args()
    label = a.dataset or os.path.basename(os.path.normpath(a.out_dir)).removesuffix("-filter")
    with open(os.path.join(a.out_dir, "filters.json")) as f:
        filters = json.load(f)
    if a.filters:
        keep = a.filters.split(",")
        filters = [x for x in filters if x["name"] in keep]
    query = np.ascontiguousarray(np.load(os.path.join(a.out_dir, "query.npy")), dtype=np.float32)
    if a.nq:
        query = query[: a.nq]
    base = np.ascontiguousarray(np.load(a.base_npy), dtype=np.float32)
    n, d = base.shape
    nprobes = [int(x) for x in a.nprobes.split(",")]
    print("faiss " + json.dumps(dict(
        dataset=label, faiss=faiss.__version__, compile=faiss.get_compile_options(),
        machine=platform.processor() or platform.machine(), n=n, d=d, nq=len(query), k=K,
        nlist=a.nlist, reps=a.reps, search_threads=1, build_threads=a.build_threads)), flush=True)

    faiss.omp_set_num_threads(a.build_threads)
    quant = faiss.IndexFlatL2(d)
    index = faiss.IndexIVFFlat(quant, d, a.nlist, faiss.METRIC_L2)
    t0 = time.perf_counter()
    index.train(base)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.add(base)
    t_add = time.perf_counter() - t0
    del base
    print("faiss " + json.dumps(dict(
        dataset=label, event="build", nlist=a.nlist, train_s=round(t_train, 3), add_s=round(t_add, 3),
        cp_seed=index.cp.seed, cp_niter=index.cp.niter,
        imbalance=round(float(index.invlists.imbalance_factor()), 3))), flush=True)
    faiss.omp_set_num_threads(1)

    for flt in filters:
        gt = np.load(os.path.join(a.out_dir, flt["gt"]))[: len(query)]
        assert gt.shape[0] == len(query), (flt["gt"], gt.shape, len(query))
        ids = np.load(os.path.join(a.out_dir, flt["ids"])).astype(np.int64)
        assert len(ids) == flt["matches"], (flt["ids"], len(ids), flt["matches"])
        for kind in a.selector.split(","):
            t0 = time.perf_counter()
            sel, keep_alive = make_selector(kind, ids, n)
            sel_ms = 1e3 * (time.perf_counter() - t0)
            for nprobe in nprobes:
                if nprobe > a.nlist:
                    continue
                params = faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)
                common_row = dict(dataset=label, filter=flt["name"], kind=flt["kind"],
                                  selectivity=flt["selectivity"], selector=kind, nlist=a.nlist, nprobe=nprobe,
                                  sel_build_ms=round(sel_ms, 3))
                mon = common.OtherCpu().start()
                t, c, (_, I) = best_time(lambda: index.search(query, K, params=params), a.reps)
                r, full = score(I, gt)
                print("faiss " + json.dumps(common_row | dict(
                    mode="batch", recall=round(r, 4), **{"full-answers": round(full, 4)}, qps=round(len(query) / t, 1),
                    qps_cpu=round(len(query) / c, 1), other_cpu=mon.stop())), flush=True)
                if a.single_q:
                    qs = query[: a.single_q]
                    res = np.empty((len(qs), K), np.int64)

                    def one_by_one():
                        for i in range(len(qs)):
                            _, res[i] = index.search(qs[i : i + 1], K, params=params)
                        return res

                    mon = common.OtherCpu().start()
                    t, c, I1 = best_time(one_by_one, max(1, a.reps - 1))
                    r, full = score(I1, gt[: len(qs)])
                    print("faiss " + json.dumps(common_row | dict(
                        mode="single", queries=len(qs), recall=round(r, 4), **{"full-answers": round(full, 4)},
                        qps=round(len(qs) / t, 1), qps_cpu=round(len(qs) / c, 1), lat_us=round(1e6 * t / len(qs), 1),
                        other_cpu=mon.stop())), flush=True)
            del sel, keep_alive


if __name__ == "__main__":
    main()
