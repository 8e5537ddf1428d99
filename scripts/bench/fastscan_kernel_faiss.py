"""FAISS's 4-bit fast-scan rate on one thread, over the same code bytes as
`cargo bench --bench codes -- fastscan` (issue 26, "the kernel ... next to
FAISS's rate on the same codes").

`faiss.IndexPQFastScan(d, d / 2, 4)` (the code of `pq4fs`: d / 2
sub-quantisers of 4 bits, d / 4 bytes a vector) is trained on the data
set's first rows, then filled with the base rows, repeated, until its codes
hold 64 MiB, the size of the criterion bench's blocks (past the caches).
FAISS's flat fast-scan index has no lists: a search scores every code, so
codes per second are `ntotal × queries / seconds`. Each search also keeps
its top k (k = 10, FAISS's SIMD result handler), which the criterion
kernel does not; the figure is therefore a bound from below on FAISS's
kernel alone.

Modes, one thread (`omp_set_num_threads(1)`), best of --reps:
  - 1 query a call (`search(xq[i:i+1])`), the first --queries queries;
  - batches of 4 and of 32 queries a call (FAISS scores several queries per
    block load).

usage: fastscan_kernel_faiss.py DATASET [--reps 5] [--queries 20]
  env: BENCH_DATA (./bench-data). Source scripts/bench/faiss_blas.sh first.
"""

import argparse
import os
import time

import faiss
import numpy as np

CODE_BYTES = 64 << 20
TRAIN_ROWS = 65_536


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--queries", type=int, default=20)
    a = ap.parse_args()
    data = os.path.join(os.environ.get("BENCH_DATA", "bench-data"), a.dataset)
    xb = np.load(os.path.join(data, "base.npy"), mmap_mode="r")
    xq = np.ascontiguousarray(np.load(os.path.join(data, "query.npy"))[: max(a.queries, 32)])
    d = xb.shape[1]
    m = d // 2
    per_code = m // 2
    n = CODE_BYTES // per_code // 32 * 32
    faiss.omp_set_num_threads(2)
    index = faiss.IndexPQFastScan(d, m, 4)
    index.train(np.ascontiguousarray(xb[:TRAIN_ROWS]))
    added = 0
    while added < n:
        take = min(n - added, xb.shape[0])
        index.add(np.ascontiguousarray(xb[:take]))
        added += take
    faiss.omp_set_num_threads(1)
    gib = 1 << 30
    print(
        f"# faiss {faiss.__version__} IndexPQFastScan d={d} M={m} nbits=4: "
        f"{per_code} bytes a code, {index.ntotal} codes, "
        f"{index.ntotal * per_code / (1 << 20):.1f} MiB, one thread, k=10"
    )

    def best(run):
        times = []
        for _ in range(a.reps):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        return min(times)

    single = best(lambda: [index.search(xq[i : i + 1], 10) for i in range(a.queries)])
    rate = index.ntotal * a.queries / single
    print(
        f"1 query a call: {single / a.queries * 1e3:.2f} ms a query, "
        f"{rate / 1e6:.0f} M codes/s, {rate * per_code / gib:.1f} GiB/s of codes"
    )
    for batch in (4, 32):
        t = best(lambda: index.search(xq[:batch], 10))
        rate = index.ntotal * batch / t
        print(
            f"{batch} queries a call: {t * 1e3:.2f} ms a call, {rate / 1e6:.0f} M code-query "
            f"scores/s, {index.ntotal * per_code / t / gib:.1f} GiB/s of codes read"
        )


if __name__ == "__main__":
    main()
