#!/usr/bin/env python3
"""Lance's IVF_PQ on an S3 endpoint, as scripts/bench/lance_vs_parqivf.sh uses it.

  lance_query.py build URI DATASET NLIST SUBVECTORS   write base.npy as a Lance
      dataset (id, vector) at URI and build IVF_PQ (L2) over `vector`
  lance_query.py query URI DATASET NPROBES REFINE N   one query per call: warm
      (one dataset object, caches kept) and cold (a new dataset object and
      session per query); prints one JSON line per mode with p50/p99 ms and
      recall@10 of the first N held-out queries

S3 settings come from the environment: AWS_ENDPOINT, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION (passed as Lance storage_options).
"""
import json
import os
import sys
import time

import lance
import numpy as np
import pyarrow as pa


def storage_options():
    return {
        "aws_endpoint": os.environ["AWS_ENDPOINT"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
        "allow_http": "true",
    }


def build(uri, data, nlist, subvectors):
    base = np.load(f"{data}/base.npy").astype(np.float32)
    n, dim = base.shape
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(base.reshape(-1)), dim)
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "vector": vectors})
    t = time.perf_counter()
    ds = lance.write_dataset(table, uri, storage_options=storage_options(), mode="overwrite")
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    ds.create_index(
        "vector",
        index_type="IVF_PQ",
        num_partitions=int(nlist),
        num_sub_vectors=int(subvectors),
        metric="L2",
    )
    print(json.dumps({"lance": lance.__version__, "rows": n, "dim": dim, "write_s": round(write_s, 2),
                      "index_s": round(time.perf_counter() - t, 2)}), flush=True)


def query(uri, data, nprobes, refine, n):
    q = np.load(f"{data}/query.npy").astype(np.float32)[: int(n)]
    gt = np.load(f"{data}/gt.npy")[: len(q), :10]

    def one(ds, v):
        t = time.perf_counter()
        got = ds.to_table(
            columns=["id"],
            nearest={"column": "vector", "q": v, "k": 10, "nprobes": int(nprobes),
                     "refine_factor": int(refine)},
        )
        return (time.perf_counter() - t) * 1000, got["id"].to_numpy()

    for mode in ("warm", "cold"):
        lat, hits = [], 0
        ds = lance.dataset(uri, storage_options=storage_options())
        if mode == "warm":
            one(ds, q[0])  # open the index once, as a server would
        for i, v in enumerate(q):
            if mode == "cold":
                t = time.perf_counter()
                ds = lance.dataset(uri, storage_options=storage_options())
                opened = (time.perf_counter() - t) * 1000
            else:
                opened = 0.0
            ms, ids = one(ds, v)
            lat.append(ms + opened)
            hits += len(set(ids.tolist()) & set(gt[i].tolist()))
        print(json.dumps({"label": f"lance {mode}", "nprobes": int(nprobes), "refine": int(refine),
                          "queries": len(q), "recall": round(hits / (10 * len(q)), 4),
                          "p50_ms": round(float(np.percentile(lat, 50)), 3),
                          "p99_ms": round(float(np.percentile(lat, 99)), 3)}), flush=True)


if __name__ == "__main__":
    {"build": build, "query": query}[sys.argv[1]](*sys.argv[2:])
