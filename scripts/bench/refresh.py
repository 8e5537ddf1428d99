#!/usr/bin/env python3
"""refresh against a full rebuild, on one Parquet table that changes.

One run, same data, same binary (docs/benchmarks.md, "Refresh"):

1. The table: the first --rows vectors of a bench data set (gen_synth.py or
   gen_embed.py output: base.npy, query.npy) as Parquet files of
   --file-rows rows (`id`, `vector`); 95 % of them at first.
2. `parqivf build`, then the change: the last 5 % of rows arrive as new
   files, one file is deleted and one is rewritten with new vectors (an
   update). `parqivf refresh` against `parqivf build` of the changed table:
   wall time of each, and exhaustive answers (nprobe = nlist) compared by id.
3. With --appends: from a base of --rows rows, append 5 %, 20 % and 50 %
   more (refreshed in steps) and compare recall@10 at --nprobe with a fresh
   build of the same rows, and the drift that refresh reports.
4. Cold query rounds and bytes (`search --stats`) with 0, 1 and 5 delta
   tables, then after `parqivf compact`.

With --id-column the table's ids are its own (`id = 7 * row + 3`, not
positions) and the index is built with `--id-column id`: the rowids an
answer returns are the ids, and a gone or rewritten file's rows are found
through `source-ids.parquet`. Step 2 then also times an append-only
refresh (one new file) against a fresh build.

Ground truth is brute force (numpy) by id; without --id-column rowids map
to ids through each snapshot's source-files.json.
"""

import argparse
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


ID_COLUMN = False


def table_ids(rows):
    """The ids of table rows `rows`: positions, or with --id-column ids of
    the table's own."""
    rows = np.asarray(rows, np.int64)
    return rows * 7 + 3 if ID_COLUMN else rows


def write_file(path, ids, vectors):
    ids = table_ids(ids)
    dim = vectors.shape[1]
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "vector": emb}), path)


def run(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def current_snapshot(index):
    versions = sorted(f for f in os.listdir(os.path.join(index, "versions")) if f[0].isdigit())
    commit = json.load(open(os.path.join(index, "versions", versions[-1])))
    return os.path.join(index, commit["snapshot"])


def rowid_to_id(index):
    """rowid -> id of the current snapshot, from its source-files.json."""
    if ID_COLUMN:
        return IDENTITY
    record = json.load(open(os.path.join(current_snapshot(index), "source-files.json")))
    mapping = {}
    for f in record["files"]:
        ids = pq.read_table("/" + f["path"], columns=["id"]).column("id").to_numpy()
        for i, v in enumerate(ids):
            mapping[f["first-rowid"] + i] = int(v)
    return mapping


class Identity(dict):
    def __missing__(self, key):
        return key


IDENTITY = Identity()


def search(binary, index, queries_npy, k, nprobe, stats=False):
    cmd = [binary, "search", "--index", index, "--queries", queries_npy, "--k", str(k),
           "--nprobe", str(nprobe), "--json"]
    if stats:
        cmd.append("--stats")
    _, out = run(cmd)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def answers_by_id(binary, index, queries_npy, k, nprobe):
    m = rowid_to_id(index)
    return [[m[r] for r in q["rowids"] if r >= 0] for q in search(binary, index, queries_npy, k, nprobe)]


def truth(table_ids, table_vecs, queries, k):
    d = (queries ** 2).sum(1)[:, None] - 2 * queries @ table_vecs.T + (table_vecs ** 2).sum(1)[None, :]
    top = np.argsort(d, axis=1)[:, :k]
    return [[int(table_ids[j]) for j in row] for row in top]


def recall(found, exact, k):
    return float(np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact)]))


def table_of(src):
    ids, vecs = [], []
    for name in sorted(os.listdir(src)):
        t = pq.read_table(os.path.join(src, name))
        ids.append(t.column("id").to_numpy())
        vecs.append(np.stack(t.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32))
    return np.concatenate(ids), np.concatenate(vecs)


def build(binary, src, index, nlist, codes="rabitq4"):
    shutil.rmtree(index, ignore_errors=True)
    ids = ["--id-column", "id"] if ID_COLUMN else ["--payload", "id"]
    wall, out = run([binary, "build", "--source", src, "--out", index, "--column", "vector",
                     *ids, "--nlist", str(nlist), "--codes", codes, "--json"])
    return wall, json.loads(out)


def refresh(binary, index):
    wall, out = run([binary, "refresh", "--index", index, "--json"])
    return wall, json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--file-rows", type=int, default=1000)
    ap.add_argument("--nlist", type=int, default=256)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--appends", action="store_true")
    ap.add_argument("--rounds", action="store_true")
    ap.add_argument("--bin", default="target/release/parqivf")
    ap.add_argument("--work", required=True)
    ap.add_argument("--id-column", action="store_true")
    a = ap.parse_args()
    global ID_COLUMN
    ID_COLUMN = a.id_column

    base = np.load(os.path.join(a.data, "base.npy"), mmap_mode="r")
    queries = np.ascontiguousarray(np.load(os.path.join(a.data, "query.npy"))[: a.queries], dtype=np.float32)
    os.makedirs(a.work, exist_ok=True)
    qpath = os.path.join(a.work, "queries.npy")
    np.save(qpath, queries)
    report = {"rows": a.rows, "file_rows": a.file_rows, "nlist": a.nlist, "data": a.data}

    # 2. 5 % new rows, one file deleted, one file updated.
    src = os.path.join(a.work, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    n_old = int(a.rows * 0.95) // a.file_rows * a.file_rows
    for s in range(0, n_old, a.file_rows):
        write_file(os.path.join(src, f"part-{s // a.file_rows:05d}.parquet"),
                   np.arange(s, s + a.file_rows), np.asarray(base[s:s + a.file_rows], np.float32))
    index = os.path.join(a.work, "index")
    # Without codes, an exhaustive search is exact: refresh must equal a fresh build.
    report["base_build_s"], _ = build(a.bin, src, index, a.nlist, codes="none")
    if ID_COLUMN:
        # An append alone: one new file, refreshed, against a fresh build.
        e = min(n_old + a.file_rows, a.rows)
        write_file(os.path.join(src, f"part-{n_old // a.file_rows:05d}.parquet"),
                   np.arange(n_old, e), np.asarray(base[n_old:e], np.float32))
        report["append_refresh_s"], r = refresh(a.bin, index)
        report["append_rebuild_s"], _ = build(a.bin, src, os.path.join(a.work, "fresh"), a.nlist,
                                              codes="none")
        report["append_refresh_over_rebuild"] = report["append_refresh_s"] / report["append_rebuild_s"]
        n_old = e
    for s in range(n_old, a.rows, a.file_rows):
        e = min(s + a.file_rows, a.rows)
        write_file(os.path.join(src, f"part-{s // a.file_rows:05d}.parquet"),
                   np.arange(s, e), np.asarray(base[s:e], np.float32))
    os.remove(os.path.join(src, "part-00001.parquet"))
    upd = np.asarray(base[2 * a.file_rows:3 * a.file_rows], np.float32)[::-1].copy()
    write_file(os.path.join(src, "part-00002.parquet"), np.arange(2 * a.file_rows, 3 * a.file_rows), upd)
    report["refresh_s"], r = refresh(a.bin, index)
    report["refresh"] = r
    fresh = os.path.join(a.work, "fresh")
    report["rebuild_s"], _ = build(a.bin, src, fresh, a.nlist, codes="none")
    report["refresh_over_rebuild"] = report["refresh_s"] / report["rebuild_s"]
    ids, vecs = table_of(src)
    exact = truth(ids, vecs, queries, 10)
    report["rows_after"] = int(len(ids))
    m_r, m_f = rowid_to_id(index), rowid_to_id(fresh)
    res_r = search(a.bin, index, qpath, 10, a.nlist)
    res_f = search(a.bin, fresh, qpath, 10, a.nlist)
    # Equal distances, and equal ids up to the order of equal distances.
    same = [q["distances"] == p["distances"]
            and sorted(zip(q["distances"], (m_r[r] for r in q["rowids"])))
            == sorted(zip(p["distances"], (m_f[r] for r in p["rowids"])))
            for q, p in zip(res_r, res_f)]
    report["exhaustive_refresh_equals_fresh"] = float(np.mean(same))
    report["exhaustive_recall_refresh"] = recall([[m_r[r] for r in q["rowids"]] for q in res_r], exact, 10)
    report["exhaustive_recall_fresh"] = recall([[m_f[r] for r in q["rowids"]] for q in res_f], exact, 10)
    print(json.dumps({k: v for k, v in report.items() if k != "refresh"}, indent=1), flush=True)

    # 3. Appends of 5 %, 20 % and 50 %, refreshed in steps, against fresh builds.
    if a.appends:
        curve = []
        total = base.shape[0]
        src = os.path.join(a.work, "src-append")
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        for s in range(0, a.rows, a.file_rows):
            write_file(os.path.join(src, f"part-{s // a.file_rows:05d}.parquet"),
                       np.arange(s, s + a.file_rows), np.asarray(base[s:s + a.file_rows], np.float32))
        index = os.path.join(a.work, "index-append")
        build(a.bin, src, index, a.nlist)
        have = a.rows
        for share in (0.05, 0.20, 0.50):
            want = min(int(a.rows * (1 + share)), total)
            for s in range(have, want, a.file_rows):
                e = min(s + a.file_rows, want)
                write_file(os.path.join(src, f"part-{s // a.file_rows:05d}.parquet"),
                           np.arange(s, e), np.asarray(base[s:e], np.float32))
            have = want
            _, r = refresh(a.bin, index)
            fresh = os.path.join(a.work, "fresh-append")
            build(a.bin, src, fresh, a.nlist)
            ids, vecs = table_of(src)
            exact = truth(ids, vecs, queries, 10)
            row = {
                "appended": share,
                "recall_refresh": recall(answers_by_id(a.bin, index, qpath, 10, a.nprobe), exact, 10),
                "recall_fresh": recall(answers_by_id(a.bin, fresh, qpath, 10, a.nprobe), exact, 10),
                "error_growth": r["drift"]["error-growth"],
                "imbalance_new_rows": r["drift"]["new-rows-imbalance"],
            }
            curve.append(row)
            print(json.dumps(row), flush=True)
        report["appends"] = curve

    # 4. Cold rounds with 0, 1 and 5 delta tables, then compacted.
    if a.rounds:
        src = os.path.join(a.work, "src-rounds")
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        for s in range(0, a.rows, a.file_rows):
            write_file(os.path.join(src, f"part-{s // a.file_rows:05d}.parquet"),
                       np.arange(s, s + a.file_rows), np.asarray(base[s:s + a.file_rows], np.float32))
        index = os.path.join(a.work, "index-rounds")
        build(a.bin, src, index, a.nlist)

        singles = []
        for i in range(5):
            p = os.path.join(a.work, f"query-{i}.npy")
            np.save(p, queries[i:i + 1])
            singles.append(p)

        def cold():
            """One query per process: every footer and row group read from storage."""
            st = [search(a.bin, index, p, 10, a.nprobe, stats=True)[0]["stats"] for p in singles]
            return {k: float(np.mean([s[k] for s in st]))
                    for k in ("rounds", "requests", "bytes", "candidate-files", "footers-read") if k in st[0]}

        rounds = {"deltas_0": cold()}
        nxt = a.rows
        for d in range(1, 6):
            write_file(os.path.join(src, f"part-{nxt // a.file_rows:05d}.parquet"),
                       np.arange(nxt, nxt + a.file_rows), np.asarray(base[nxt:nxt + a.file_rows], np.float32))
            nxt += a.file_rows
            refresh(a.bin, index)
            if d in (1, 5):
                rounds[f"deltas_{d}"] = cold()
        wall, out = run([a.bin, "compact", "--index", index, "--json"])
        rounds["compacted"] = cold()
        rounds["compact_s"] = wall
        report["cold"] = rounds
        print(json.dumps(rounds, indent=1), flush=True)

    with open(os.path.join(a.work, "report.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
