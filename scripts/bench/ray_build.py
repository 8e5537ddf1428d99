#!/usr/bin/env python3
"""The Ray build next to the single-node build on the same Parquet table,
in one run (issue 16), with the per-stage times and the single-worker rates
that docs/distributed.md's cost model rests on.

Usage:
  ray_build.py --base DIR/base.npy --out WORK [--files 16] [--nlist 1000]
               [--cpus 2] [--queries DIR/query.npy --gt DIR/gt.npy] [--dim-label sift128]
  ray_build.py --synthetic ROWSxDIM --out WORK ...     (random clustered data)

It writes the vectors as `--files` Parquet files (FixedSizeList<float32>),
builds them with `parqivf.build` (in this process: the CLI's code path) and
with `parqivf.ray.build` on a local Ray with `--cpus` CPUs, checks that both
give the same answers at nprobe = nlist on the first 100 queries, reports
recall@10 at nprobe 16 when ground truth is given, and prints one JSON object.
"""
import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import parqivf
import parqivf.ray
import ray


def write_parquet(x, folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    step = (len(x) + files - 1) // files
    for f in range(files):
        part = np.ascontiguousarray(x[f * step : (f + 1) * step], dtype=np.float32)
        col = pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), x.shape[1])
        pq.write_table(pa.table({"embedding": col}), folder / f"part-{f:04d}.parquet",
                       compression="none", row_group_size=65536)


def synthetic(spec, seed=1):
    rows, dim = (int(v) for v in spec.split("x"))
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((256, dim)).astype(np.float32)
    out = np.empty((rows, dim), np.float32)
    for s in range(0, rows, 65536):
        n = min(65536, rows - s)
        out[s : s + n] = centres[rng.integers(0, 256, n)] + 0.5 * rng.standard_normal((n, dim), dtype=np.float32)
    return out


def recall(ids, gt, k=10):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, gt)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--synthetic")
    ap.add_argument("--out", required=True)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--nlist", type=int, default=1000)
    ap.add_argument("--codes", default="rabitq4")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--queries")
    ap.add_argument("--gt")
    a = ap.parse_args()

    work = Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    x = np.load(a.base, mmap_mode="r") if a.base else synthetic(a.synthetic)
    src = work / "table"
    write_parquet(x, src, a.files)
    res = {"rows": len(x), "dim": x.shape[1], "files": a.files, "nlist": a.nlist, "codes": a.codes,
           "table_bytes": sum(p.stat().st_size for p in src.iterdir())}

    t = time.perf_counter()
    single = parqivf.build(str(src), str(work / "single"), nlist=a.nlist, codes=a.codes)
    res["single_node"] = {"wall_s": time.perf_counter() - t, "seconds": single["seconds"]}

    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    t = time.perf_counter()
    dist = parqivf.ray.build(str(src), str(work / "ray"), nlist=a.nlist, codes=a.codes)
    res["ray"] = {"wall_s": time.perf_counter() - t, "seconds": dist["seconds"],
                  "shuffled_bytes": dist["shuffled-bytes"], "cpus": a.cpus}
    ray.shutdown()

    s = res["ray"]["seconds"]
    # Per worker (CPU): rows each worker assigned or wrote per second.
    res["rates_per_worker"] = {
        "assign_rows_s": len(x) / s["assign"] / a.cpus,
        "write_rows_s": len(x) / s["write"] / a.cpus,
        "train_s": s["train"],
        "sample_rows": dist["sample-rows"],
        "shuffled_bytes_per_row": dist["shuffled-bytes"] / len(x),
        "postings_bytes_per_row": dist["postings-bytes"] / len(x),
    }
    q = np.load(a.queries).astype(np.float32)[:100] if a.queries else np.asarray(x[:100], np.float32) + 0.01
    one = parqivf.Index.open(str(work / "single"))
    two = parqivf.Index.open(str(work / "ray"))
    a1, a2 = one.search(q, k=10, nprobe=a.nlist), two.search(q, k=10, nprobe=a.nlist)
    res["same_answers_at_nprobe_nlist"] = bool((a1[0] == a2[0]).all() and (a1[1] == a2[1]).all())
    if a.gt:
        gt = np.load(a.gt)
        qq = np.load(a.queries).astype(np.float32)
        res["recall@10_nprobe16"] = {
            "single": recall(one.search(qq, k=10, nprobe=16)[0], gt),
            "ray": recall(two.search(qq, k=10, nprobe=16)[0], gt),
        }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
