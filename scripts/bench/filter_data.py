#!/usr/bin/env python3
"""filter_data.py DATASET_DIR OUT_DIR [--queries 1000] [--seed 7] [--threads 2]

Filtered-search benchmark data (issue 15) from a shared/bench dataset folder
(base.npy, query.npy, meta.json; see shared/bench/README.md):

  OUT_DIR/base.parquet   the base vectors as `vector` FixedSizeList<float32>[d]
                         (a type the build decodes, src/catalog/vector_column.rs)
                         plus three payload columns, row groups of 65,536 rows:
      category  int32         uniform over 0..999, seeded: uncorrelated with
                              the vector and with the row order;
      ts        timestamp[us] 2024-01-01 + one second per row + a jitter in
                              [0, 1 s): strictly increasing with the row
                              number, as in an append-only table (a filter on
                              it selects a contiguous run of rowids);
      region    int32         index of the nearest (L2) of 100 base rows drawn
                              at random (seeded): correlated with the vector.
  OUT_DIR/query.npy      the first --queries queries
  OUT_DIR/filters.json   [{name, sql, kind, column, target, selectivity,
                          matches, gt, ids}] for 50 %, 10 %, 1 %, 0.1 % on
                          each column kind (kind: random = category,
                          sorted = ts, correlated = region)
  OUT_DIR/gt_<name>.npy  int32 (nq, 10): the exact filtered top-10 (squared
                          L2, ties by the smaller rowid), -1 where fewer than
                          10 rows match
  OUT_DIR/ids_<name>.npy int64: the matching rowids, ascending
  OUT_DIR/meta.json      source, seed, shapes, timings, region sizes, checks

Rowids: the file is written without an id column, so `parqivf build` gives
each row rowid = (rows of the files before it, in path order) +
file_row_number (src/builder/parquet_source.rs, "Row identity"): with one file
the 0-based row position, i.e. the row index into base.npy used here.

The metric is L2 (squared), as meta.json of both shared datasets says; the
embeddings are unit norm, so L2 ranks as cosine does. Filtered ground truth
brute-forces the matching subset with shared/bench/common.py exact_knn (faiss
IndexFlatL2 for candidates, float64 re-rank, ties by smaller id), then maps
subset positions back to rowids; it is cross-checked against the dataset's
unfiltered top-100 (gt.npy) where that holds 10 matching rows.

Deterministic for a seed. Needs numpy, pyarrow, faiss-cpu.
"""
import argparse
import datetime as dt
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "bench"))
import common  # noqa: E402  (shared/bench/common.py: exact_knn)

import faiss  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

K = 10
ROW_GROUP = 65_536
N_REGIONS = 100
EPOCH = np.datetime64("2024-01-01T00:00:00", "us")
TARGETS = [("50", 0.5), ("10", 0.1), ("1", 0.01), ("01", 0.001)]


def nearest_region(base, centers, chunk=65_536):
    """argmin_j ||x - c_j||² per row, in float64 (no float32 ties), by chunks."""
    c = centers.astype(np.float64)
    cn = np.einsum("ij,ij->i", c, c)
    out = np.empty(len(base), np.int32)
    for s in range(0, len(base), chunk):
        x = base[s : s + chunk].astype(np.float64)
        out[s : s + chunk] = np.argmin(cn[None, :] - 2.0 * (x @ c.T), axis=1)
    return out


def ts_literal(us):
    """TIMESTAMP 'YYYY-MM-DD HH:MM:SS.ffffff' of µs since the epoch (no time zone)."""
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(us))
    return "TIMESTAMP '" + t.strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


def greedy_regions(sizes, target, rng, tries=256):
    """Regions taken in a random order, each kept if it brings the total
    closer to target; the best of `tries` seeded orders (region sizes are
    lumpy: one region can hold > 10 % of the rows)."""
    best, best_err = None, None
    for _ in range(tries):
        chosen, total = [], 0
        for r in rng.permutation(len(sizes)):
            if abs(total + sizes[r] - target) < abs(total - target):
                chosen.append(int(r))
                total += int(sizes[r])
        if best is None or abs(total - target) < best_err:
            best, best_err = sorted(chosen), abs(total - target)
    return best


def filtered_knn(base, query, ids, k=K):
    """Exact top-k among rows `ids` (ascending), as rowids; -1 padded."""
    nq = len(query)
    out = np.full((nq, k), -1, np.int32)
    if len(ids) == 0:
        return out
    sub = base[ids]
    if len(ids) >= k:
        _, pos = common.exact_knn(sub, query, k=k)
        out[:] = ids[pos]
        return out
    # fewer rows than k: all of them, ranked in float64 (distance, rowid)
    diff = sub[None, :, :].astype(np.float64) - query[:, None, :].astype(np.float64)
    d2 = np.einsum("qij,qij->qi", diff, diff)
    for i in range(nq):
        o = np.lexsort((ids, d2[i]))
        out[i, : len(ids)] = ids[o]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2, help="faiss/BLAS threads for the ground truth")
    a = ap.parse_args()
    faiss.omp_set_num_threads(a.threads)
    t_all = time.perf_counter()
    times = {}
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.dataset_dir, "meta.json")) as f:
        src_meta = json.load(f)
    if not str(src_meta.get("metric", "L2")).startswith("L2"):
        sys.exit(f"{a.dataset_dir}: metric {src_meta.get('metric')!r}, this script computes L2 ground truth")
    t = time.perf_counter()
    base = np.ascontiguousarray(np.load(os.path.join(a.dataset_dir, "base.npy")), dtype=np.float32)
    query = np.ascontiguousarray(np.load(os.path.join(a.dataset_dir, "query.npy"))[: a.queries], dtype=np.float32)
    gt_all = np.load(os.path.join(a.dataset_dir, "gt.npy"))[: a.queries]
    n, d = base.shape
    nq = len(query)
    times["load_s"] = time.perf_counter() - t

    # --- payload columns (draw order fixed: category, ts jitter, region centers)
    t = time.perf_counter()
    rng = np.random.default_rng(a.seed)
    category = rng.integers(0, 1000, n, dtype=np.int32)
    jitter = rng.integers(0, 1_000_000, n, dtype=np.int64)  # < 1 s: keeps ts strictly increasing
    ts_us = EPOCH.astype(np.int64) + np.arange(n, dtype=np.int64) * 1_000_000 + jitter
    assert (np.diff(ts_us) > 0).all()
    center_rows = np.sort(rng.choice(n, N_REGIONS, replace=False))
    region = nearest_region(base, base[center_rows])
    region_sizes = np.bincount(region, minlength=N_REGIONS)
    times["payload_s"] = time.perf_counter() - t

    # --- base.parquet
    t = time.perf_counter()
    vec = pa.FixedSizeListArray.from_arrays(pa.array(base.reshape(-1), type=pa.float32()), d)
    table = pa.table({
        "vector": vec,
        "category": pa.array(category, type=pa.int32()),
        "ts": pa.array(ts_us.view("datetime64[us]"), type=pa.timestamp("us")),
        "region": pa.array(region, type=pa.int32()),
    })
    pq.write_table(
        table, os.path.join(a.out_dir, "base.parquet"), row_group_size=ROW_GROUP,
        use_dictionary=["category", "region"],           # not the float vectors
        write_statistics=["category", "ts", "region"],    # min/max per row group for the payload
    )
    del table, vec
    np.save(os.path.join(a.out_dir, "query.npy"), query)
    times["parquet_s"] = time.perf_counter() - t

    # --- filters: (name, sql, kind, column, target, mask)
    filters = []
    for tag, p in TARGETS:
        sql = {"50": "category < 500", "10": "category < 100", "1": "category < 10", "01": "category = 7"}[tag]
        mask = {"50": category < 500, "10": category < 100, "1": category < 10, "01": category == 7}[tag]
        filters.append((f"cat{tag}", sql, "random", "category", p, mask))
    for tag, p in TARGETS:
        # a window of round(p·n) consecutive rows centred on the middle row:
        # both bounds are row values, so the count is exact
        m = max(1, int(round(p * n)))
        lo = (n - m) // 2
        hi = lo + m
        sql = f"ts >= {ts_literal(ts_us[lo])}"
        mask = ts_us >= ts_us[lo]
        if hi < n:
            sql += f" AND ts < {ts_literal(ts_us[hi])}"
            mask &= ts_us < ts_us[hi]
        filters.append((f"ts{tag}", sql, "sorted", "ts", p, mask))
    greedy_rng = np.random.default_rng(a.seed + 1)
    r1 = int(np.argmin(np.abs(region_sizes - 0.01 * n)))  # the region closest to 1 %
    for tag, p in TARGETS:
        if tag == "01":
            sql = f"region = {r1} AND category < 100"
            mask = (region == r1) & (category < 100)
        else:
            regs = [r1] if tag == "1" else greedy_regions(region_sizes, p * n, greedy_rng)
            sql = f"region = {regs[0]}" if len(regs) == 1 else f"region IN ({', '.join(map(str, regs))})"
            mask = np.isin(region, regs)
        filters.append((f"reg{tag}", sql, "correlated", "region", p, mask))

    # --- exact filtered top-10
    t = time.perf_counter()
    out, check = [], {}
    for name, sql, kind, column, p, mask in filters:
        ids = np.flatnonzero(mask)
        gt = filtered_knn(base, query, ids)
        np.save(os.path.join(a.out_dir, f"gt_{name}.npy"), gt)
        np.save(os.path.join(a.out_dir, f"ids_{name}.npy"), ids.astype(np.int64))
        # cross-check: where the unfiltered top-100 holds >= 10 matching rows,
        # their first 10 are the filtered top-10
        ok = bad = 0
        for i in range(nq):
            m = gt_all[i][mask[gt_all[i]]]
            if len(m) >= K:
                if np.array_equal(m[:K], gt[i]):
                    ok += 1
                else:
                    bad += 1
        check[name] = {"checked": ok + bad, "mismatched": bad}
        if bad:
            print(f"WARNING {name}: {bad} of {ok + bad} queries disagree with gt.npy's top-100", file=sys.stderr)
        out.append(dict(name=name, sql=sql, kind=kind, column=column, target=p,
                        selectivity=round(len(ids) / n, 6), matches=int(len(ids)), gt=f"gt_{name}.npy",
                        ids=f"ids_{name}.npy"))
        print(json.dumps(out[-1] | {"checked_vs_gt": check[name]}), flush=True)
    times["groundtruth_s"] = time.perf_counter() - t
    with open(os.path.join(a.out_dir, "filters.json"), "w") as f:
        json.dump(out, f, indent=1)
    times["total_s"] = time.perf_counter() - t_all
    meta = dict(
        source=os.path.abspath(a.dataset_dir), source_name=src_meta.get("name"), metric="L2 (squared)",
        n=n, d=d, nq=nq, k=K, seed=a.seed, row_group_rows=ROW_GROUP, faiss=faiss.__version__,
        numpy=np.__version__, pyarrow=pa.__version__, threads=a.threads,
        region_centers=center_rows.tolist(), region_sizes=region_sizes.tolist(),
        ts_first=str(ts_us[:1].view("datetime64[us]")[0]), ts_last=str(ts_us[-1:].view("datetime64[us]")[0]),
        checks=check, **{k: round(v, 2) for k, v in times.items()},
    )
    with open(os.path.join(a.out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("n", "d", "nq", "seed", *times)}), flush=True)


if __name__ == "__main__":
    main()
