#!/usr/bin/env python3
"""refresh against a full rebuild on a DuckLake table (SQLite catalog),
built the way the shared fixture was: by DuckDB 1.4.4 with its ducklake
and sqlite extensions from PyPI (`pip install duckdb==1.4.4
duckdb-extension-ducklake==1.4.4 duckdb-extension-sqlite-scanner==1.4.4`,
loaded from site-packages, nothing downloaded).

1. The table `s1.docs(id BIGINT, embedding FLOAT[])` gets the first 95 % of
   --rows vectors of a bench data set in inserts of --batch rows.
2. `parqivf build --source ducklake:sqlite:<catalog> --table s1.docs`.
3. New snapshots: the last 5 % inserted, 1 % deleted, 1 % updated (new
   vectors, same rowids).
4. `parqivf refresh` against `parqivf build` at the new snapshot: wall time of
   each, and exhaustive answers (nprobe = nlist, no codes): the same rowids
   and distances.
"""

import argparse
import glob
import json
import os
import shutil
import site
import subprocess
import time

import duckdb
import numpy as np


def ext_path(pkg, name):
    for root in list(site.getsitepackages()) + [site.getusersitepackages()]:
        hits = sorted(glob.glob(os.path.join(root, pkg, "extensions", f"v{duckdb.__version__}",
                                             f"{name}.duckdb_extension")))
        if hits:
            return hits[-1]
    raise SystemExit(f"no {pkg} extension for duckdb {duckdb.__version__}")


def run(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def insert(con, ids, vectors):
    import pyarrow as pa
    emb = pa.ListArray.from_arrays(
        pa.array(np.arange(0, len(ids) * vectors.shape[1] + 1, vectors.shape[1]), pa.int32()),
        pa.array(vectors.reshape(-1), pa.float32()))
    batch = pa.table({"id": pa.array(ids, pa.int64()), "embedding": emb})
    con.register("batch", batch)
    con.execute("INSERT INTO lake.s1.docs SELECT id, embedding FROM batch")
    con.unregister("batch")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--nlist", type=int, default=256)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--bin", default="target/release/parqivf")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()

    base = np.load(os.path.join(a.data, "base.npy"), mmap_mode="r")
    queries = np.ascontiguousarray(np.load(os.path.join(a.data, "query.npy"))[: a.queries], dtype=np.float32)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    qpath = os.path.join(a.work, "queries.npy")
    np.save(qpath, queries)
    catalog = os.path.join(a.work, "meta.sqlite")
    con = duckdb.connect()
    con.execute(f"LOAD '{ext_path('duckdb_extension_ducklake', 'ducklake')}'")
    con.execute(f"LOAD '{ext_path('duckdb_extension_sqlite_scanner', 'sqlite_scanner')}'")
    con.execute(f"ATTACH 'ducklake:sqlite:{catalog}' AS lake (DATA_PATH '{a.work}/data/')")
    con.execute("CREATE SCHEMA lake.s1")
    con.execute("CREATE TABLE lake.s1.docs(id BIGINT, embedding FLOAT[])")
    n_old = int(a.rows * 0.95)
    for s in range(0, n_old, a.batch):
        e = min(s + a.batch, n_old)
        insert(con, np.arange(s, e), np.asarray(base[s:e], np.float32))
    common = ["--source", f"ducklake:sqlite:{catalog}", "--table", "s1.docs", "--column", "embedding",
              "--nlist", str(a.nlist), "--codes", "none", "--json"]
    index, fresh = os.path.join(a.work, "index"), os.path.join(a.work, "fresh")
    report = {"rows": a.rows, "nlist": a.nlist, "data": a.data}
    report["base_build_s"], _ = run([a.bin, "build", "--out", index] + common)

    # 5 % new rows, 1 % deleted, 1 % updated, each its own snapshot.
    for s in range(n_old, a.rows, a.batch):
        e = min(s + a.batch, a.rows)
        insert(con, np.arange(s, e), np.asarray(base[s:e], np.float32))
    k = a.rows // 100
    con.execute(f"DELETE FROM lake.s1.docs WHERE id < {k}")
    upd = np.asarray(base[k:2 * k], np.float32)[::-1].copy()
    import pyarrow as pa
    emb = pa.ListArray.from_arrays(pa.array(np.arange(0, k * upd.shape[1] + 1, upd.shape[1]), pa.int32()),
                                   pa.array(upd.reshape(-1), pa.float32()))
    con.register("upd", pa.table({"id": pa.array(np.arange(k, 2 * k), pa.int64()), "embedding": emb}))
    con.execute("UPDATE lake.s1.docs SET embedding = upd.embedding FROM upd WHERE docs.id = upd.id")
    con.close()

    report["refresh_s"], out = run([a.bin, "refresh", "--index", index, "--json"])
    report["refresh"] = json.loads(out)
    report["rebuild_s"], _ = run([a.bin, "build", "--out", fresh] + common)
    report["refresh_over_rebuild"] = report["refresh_s"] / report["rebuild_s"]

    def answers(idx):
        _, out = run([a.bin, "search", "--index", idx, "--queries", qpath, "--k", "10",
                      "--nprobe", str(a.nlist), "--json"])
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    r, f = answers(index), answers(fresh)
    report["exhaustive_refresh_equals_fresh"] = float(np.mean(
        [x["rowids"] == y["rowids"] and x["distances"] == y["distances"] for x, y in zip(r, f)]))
    print(json.dumps({k: v for k, v in report.items() if k != "refresh"}, indent=1))
    print(json.dumps(report["refresh"], indent=1))
    with open(os.path.join(a.work, "report.json"), "w") as fh:
        json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
