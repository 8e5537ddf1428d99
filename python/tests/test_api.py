"""The Python API over the Rust library: every function, its results
against brute force and the library's own answers, and every typed error."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parqivf
from conftest import DIM, NLIST, ROWS, brute_force, s3_options, vectors, write_table

SUMMARY_KEYS = {
    "index", "snapshot", "version", "rows", "skipped-rows", "dim", "nlist", "roots", "parts",
    "sample-rows", "calibration-queries", "objective", "postings-files", "postings-bytes", "spilled-bytes",
    "spill-events", "peak-rss-bytes", "seconds",
}


def test_build_returns_the_cli_summary(index):
    _, summary = index
    assert set(summary) == SUMMARY_KEYS
    assert summary["rows"] == ROWS and summary["dim"] == DIM and summary["nlist"] == NLIST
    assert summary["version"] == 1 and summary["parts"] == 2
    assert set(summary["seconds"]) == {"count", "sample", "train", "assign", "write", "publish", "calibrate", "total"}


def test_search_at_nprobe_nlist_is_exact(index, data):
    out, _ = index
    idx = parqivf.Index.open(str(out))
    q = data[:40] + 0.01
    ids, dist = idx.search(q, k=10, nprobe=NLIST)
    assert ids.dtype == np.int64 and dist.dtype == np.float32 and ids.shape == (40, 10)
    want_ids, want_d = brute_force(data, q, 10)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(dist, want_d, rtol=1e-4, atol=1e-3)


def test_every_serving_mode_gives_the_same_answer(coded_index, data):
    q = data[100:120]
    answers = []
    for preload in [None, "codes", "all"]:
        idx = parqivf.Index.open(str(coded_index), preload=preload)
        answers.append(idx.search(q, k=5, nprobe=8))
        assert idx.info["preloaded"] == (preload or "none")
    for ids, dist in answers[1:]:
        np.testing.assert_array_equal(ids, answers[0][0])
        np.testing.assert_array_equal(dist, answers[0][1])


def test_one_query_as_a_vector_and_non_contiguous_queries(index, data):
    idx = parqivf.Index.open(str(index[0]))
    one_ids, _ = idx.search(data[5], k=3, nprobe=NLIST)
    assert one_ids.shape == (1, 3) and one_ids[0, 0] == 5
    wide = np.zeros((4, DIM * 2), np.float32)
    wide[:, ::2] = data[:4]
    ids, _ = idx.search(wide[:, ::2], k=1, nprobe=NLIST)
    assert ids[:, 0].tolist() == [0, 1, 2, 3]
    ids, _ = idx.search(np.asfortranarray(data[:4]), k=1, nprobe=NLIST)
    assert ids[:, 0].tolist() == [0, 1, 2, 3]
    empty_ids, empty_d = idx.search(np.zeros((0, DIM), np.float32))
    assert empty_ids.shape == (0, 10) and empty_d.shape == (0, 10)


def test_filters_fill_k_and_pad_when_fewer_rows_match(index, data):
    idx = parqivf.Index.open(str(index[0]))
    q = data[:8]
    ids, dist = idx.search(q, k=10, nprobe=2, filter="category = 3")
    assert (ids % 10 == 3).all() and (ids >= 0).all()
    ids, _ = idx.search(q, k=10, nprobe=NLIST, filter="category = 3")
    want, _ = brute_force(data, q, 10, keep=np.arange(ROWS) % 10 == 3)
    np.testing.assert_array_equal(ids, want)
    ids, dist = idx.search(q, k=10, nprobe=NLIST, filter="title IN ('doc 1', 'doc 2')")
    assert sorted(ids[0, :2].tolist()) == [1, 2]
    assert (ids[:, 2:] == -1).all() and np.isinf(dist[:, 2:]).all()
    assert idx.stats["last_search"]["filter_plan"] in ("probe", "exhaustive")


def test_search_table_carries_typed_payload_and_joins_in_duckdb(index, data, table):
    duckdb = pytest.importorskip("duckdb")
    idx = parqivf.Index.open(str(index[0]))
    hits = idx.search_table(data[:3], k=4, nprobe=NLIST)
    assert isinstance(hits, pa.Table)
    assert hits.column_names == ["query", "rank", "rowid", "distance", "category", "title"]
    assert hits.schema.field("category").type == pa.int64()
    assert hits.num_rows == 12
    assert hits.column("rank").to_pylist()[:4] == [0, 1, 2, 3]
    ids, _ = idx.search(data[:3], k=4, nprobe=NLIST)
    assert hits.column("rowid").to_pylist() == ids.ravel().tolist()
    assert all(t == f"doc {r}" for t, r in zip(hits.column("title").to_pylist(), hits.column("rowid").to_pylist()))
    # rowid = rows of the files before + row number: DuckDB's file_row_number.
    joined = duckdb.sql(
        f"""
        WITH src AS (
          SELECT row_number() OVER (ORDER BY filename, file_row_number) - 1 AS rowid, title
          FROM read_parquet('{table}/*.parquet', filename=true, file_row_number=true))
        SELECT h.query, h.rank, src.title FROM hits h JOIN src USING (rowid) ORDER BY h.query, h.rank
        """
    ).fetchall()
    assert [t for _, _, t in joined] == hits.column("title").to_pylist()
    bare = idx.search_table(data[:1], k=2, payload=False)
    assert bare.column_names == ["query", "rank", "rowid", "distance"]


def test_search_releases_the_gil(coded_index):
    idx = parqivf.Index.open(str(coded_index), preload="all")
    q = vectors(rows=4000, seed=3)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0)

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = len(ticks)
    start = time.perf_counter()
    idx.search(q, k=10, nprobe=NLIST)
    took = time.perf_counter() - start
    during = len(ticks) - before
    stop.set()
    t.join()
    # A call that held the GIL would leave the spinning thread no turn at all.
    assert took > 0.01, took
    assert during > 10, (during, took)


def test_info_and_stats(coded_index):
    idx = parqivf.Index.open(str(coded_index))
    info = idx.info
    assert info["version"] == 1 and info["dim"] == DIM and info["nlist"] == NLIST
    assert info["rows"] == ROWS and info["codes"] == "pq4fs" and info["metric"] == "l2"
    assert info["definition"]["build"]["payload-columns"] == ["category", "title"]
    # What the open cost: the commit log's two advisory objects, two
    # versions and the pinned documents (rounds are exact only with latency).
    opened = info["open"]
    assert opened["requests"] >= 5 and opened["bytes"] > 0 and opened["rounds"] >= 1
    assert idx.stats["last_search"] is None
    idx.search(vectors(rows=2), nprobe=4)
    last = idx.stats["last_search"]
    assert last["lists_probed"] == 4 and last["requests"] > 0 and last["bytes"] > 0
    assert "Index(" in repr(idx)


def test_verify(coded_index, tmp_path):
    report = parqivf.verify(str(coded_index))
    assert report["ok"] and report["violations"] == [] and report["files-checked"] > 0
    assert report["advisories"] == []
    # A bundle left by another commit costs rounds, not answers: an advisory.
    stale = tmp_path / "stale"
    shutil.copytree(coded_index, stale)
    (stale / "versions" / "latest-bundle.bin").write_bytes(b"PQVFOB01")
    report = parqivf.verify(str(stale))
    assert report["ok"] and [a["kind"] for a in report["advisories"]] == ["open-ahead-stale"]
    broken = tmp_path / "broken"
    shutil.copytree(coded_index, broken)
    victim = sorted(broken.glob("snapshots/*/postings/*/part-*.parquet"))[0]
    data = bytearray(victim.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    victim.write_bytes(bytes(data))
    report = parqivf.verify(str(broken))
    assert not report["ok"]
    assert any(victim.name in json.dumps(v) for v in report["violations"])
    with pytest.raises(parqivf.CorruptIndex):
        idx = parqivf.Index.open(str(broken), preload="all")
        idx.search(vectors(rows=3), nprobe=NLIST)


def test_target_recall_and_its_estimate(coded_index, table, tmp_path, data):
    idx = parqivf.Index.open(str(coded_index))
    status = idx.info["calibration"]
    assert status["calibrated_rows"] == ROWS and not status["stale"]
    # The table's distribution (its seed's centres), not its rows.
    queries = vectors(rows=200, seed=7) + np.float32(0.01)
    truth, _ = brute_force(data, queries, 10)
    ids, _ = idx.search(queries, target_recall=0.9)
    recall = np.mean([len(set(i) & set(t)) / 10 for i, t in zip(ids, truth)])
    assert abs(recall - 0.9) <= 0.06, recall
    assert idx.stats["last_search"]["estimated_recall"] == pytest.approx(0.9, abs=0.02)
    table_hits = idx.search_table(queries[:3], target_recall=0.99, payload=False)
    assert table_hits.num_rows == 30
    with pytest.raises(parqivf.InvalidArgument, match="outside"):
        idx.search(queries[:1], target_recall=0.0)
    plain = tmp_path / "plain"
    # Exact Lloyd (`neighbours=0`) as the CLI's `--neighbours 0`.
    parqivf.build(str(table), str(plain), nlist=NLIST, calibration_queries=0, neighbours=0)
    bare = parqivf.Index.open(str(plain))
    assert bare.info["calibration"] is None
    with pytest.raises(parqivf.InvalidArgument, match="calibration"):
        bare.search(queries[:1], target_recall=0.9)
    # Naming neither: recall 0.95 where calibrated, 16 lists (at most nlist) where not.
    default_ids, _ = idx.search(queries)
    assert idx.stats["last_search"]["estimated_recall"] == pytest.approx(0.95, abs=0.02)
    named_ids, _ = idx.search(queries, target_recall=0.95)
    assert np.array_equal(default_ids, named_ids)
    bare.search(queries[:1])
    assert bare.stats["last_search"]["lists_probed"] == min(16, NLIST)
    with pytest.raises(parqivf.InvalidArgument, match="both choose the lists"):
        idx.search(queries[:1], nprobe=4, target_recall=0.9)


def test_errors_are_typed_and_name_the_numbers(index, tmp_path, table):
    idx = parqivf.Index.open(str(index[0]))
    with pytest.raises(parqivf.DimensionMismatch, match=f"dimension 8, the index has {DIM}"):
        idx.search(np.zeros((2, 8), np.float32))
    with pytest.raises(parqivf.DimensionMismatch):
        idx.search(np.zeros((2, 2, DIM), np.float32))
    with pytest.raises(TypeError, match="float32"):
        idx.search(np.zeros((2, DIM), np.float64))
    with pytest.raises(parqivf.InvalidFilter, match="category, title"):
        idx.search(np.zeros((1, DIM), np.float32), filter="nope = 1")
    with pytest.raises(parqivf.InvalidFilter, match="category"):
        idx.search(np.zeros((1, DIM), np.float32), filter="category = 'x'")
    with pytest.raises(parqivf.InvalidArgument, match=f"nprobe = {NLIST + 1} is outside 1..={NLIST}"):
        idx.search(np.zeros((1, DIM), np.float32), nprobe=NLIST + 1)
    with pytest.raises(parqivf.InvalidArgument, match="k must be at least 1"):
        idx.search(np.zeros((1, DIM), np.float32), k=0)
    with pytest.raises(parqivf.InvalidArgument, match="non-finite"):
        idx.search(np.full((1, DIM), np.nan, np.float32))
    with pytest.raises(parqivf.InvalidArgument, match="max_nprobe"):
        idx.search(np.zeros((1, DIM), np.float32), nprobe=4, max_nprobe=2, filter="category = 1")
    with pytest.raises(parqivf.InvalidArgument, match="preload"):
        parqivf.Index.open(str(index[0]), preload="everything")
    with pytest.raises(parqivf.NotFound, match="no published snapshot"):
        parqivf.Index.open(str(tmp_path / "nothing"))
    with pytest.raises(parqivf.SourceError, match="no source files match"):
        parqivf.build(str(tmp_path / "nowhere"), str(tmp_path / "o"), nlist=4)
    with pytest.raises(parqivf.SourceError, match="vec"):
        parqivf.build(str(table), str(tmp_path / "o"), nlist=4, column="vec")
    with pytest.raises(parqivf.InvalidArgument, match=f"nlist {ROWS + 1} is larger than the number of rows {ROWS}"):
        parqivf.build(str(table), str(tmp_path / "o"), nlist=ROWS + 1)
    with pytest.raises(parqivf.InvalidArgument, match="unknown metric"):
        parqivf.build(str(table), str(tmp_path / "o"), metric="hamming")
    with pytest.raises(parqivf.InvalidArgument, match="sort_by|--sort-by"):
        parqivf.build(str(table), str(tmp_path / "o"), nlist=4, sort_by="missing", payload=["title"])
    with pytest.raises(TypeError, match="unexpected keyword argument .nlists."):
        parqivf.build(str(table), str(tmp_path / "o"), nlists=4)
    assert not (tmp_path / "o").exists(), "a failed build published something"
    for cls in [parqivf.DimensionMismatch, parqivf.InvalidFilter]:
        assert issubclass(cls, parqivf.InvalidArgument)
    for cls in [parqivf.InvalidArgument, parqivf.NotFound, parqivf.CorruptIndex, parqivf.Conflict,
                parqivf.SourceError, parqivf.StorageError]:
        assert issubclass(cls, parqivf.ParqivfError)


def test_storage_options_are_checked_and_never_echo_values(table, tmp_path):
    with pytest.raises(parqivf.InvalidArgument, match="AWS_NOT_A_KEY"):
        parqivf.Index.open(str(tmp_path), storage_options={"AWS_NOT_A_KEY": "x"})
    with pytest.raises(parqivf.InvalidArgument) as e:
        parqivf.build(str(table), str(tmp_path / "o"), storage_options={"PARQIVF_RETRY_TIMEOUT": "s3cr3t"})
    assert "PARQIVF_RETRY_TIMEOUT" in str(e.value) and "s3cr3t" not in str(e.value)


def test_storage_options_reach_s3_without_the_environment(table, data, tmp_path):
    """A build and a search on S3 (moto) configured only by storage_options:
    run in a child process whose environment holds no AWS_* variable."""
    options = s3_options()
    if options is None:
        if os.environ.get("PARQIVF_REQUIRE_INTEROP"):
            pytest.fail("scripts/test.sh exports the moto_server settings; they are missing")
        pytest.skip("no moto_server (run through scripts/test.sh)")
    bucket = os.environ["PARQIVF_S3_BUCKET"]
    np.save(tmp_path / "q.npy", data[:5])
    code = f"""
import json, numpy as np, parqivf
opts = json.loads({json.dumps(json.dumps(options))})
out = "s3://{bucket}/python-{os.getpid()}-{time.time_ns()}/idx"
s = parqivf.build({str(table)!r}, out, nlist=8, storage_options=opts)
idx = parqivf.Index.open(out, storage_options=opts)
ids, _ = idx.search(np.load({str(tmp_path / 'q.npy')!r}), k=1, nprobe=8)
assert parqivf.verify(out, storage_options=opts)["ok"]
try:
    parqivf.Index.open(out)
except parqivf.ParqivfError as e:
    print("without options:", type(e).__name__)
print(json.dumps({{"version": s["version"], "ids": ids[:, 0].tolist()}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == {"version": 1, "ids": [0, 1, 2, 3, 4]}
    assert "without options:" in run.stdout
    assert options["AWS_SECRET_ACCESS_KEY"] not in run.stdout + run.stderr


def test_stage_functions_publish_once_and_a_stale_plan_conflicts(table, data, tmp_path):
    """The distributed stages without Ray: plan, assign every part, write
    every bucket, publish. A plan whose parent moved on gets Conflict."""
    from parqivf import _parqivf

    out = str(tmp_path / "idx")
    plan = _parqivf.plan_build(str(table), out, nlist=NLIST, codes="none", payload=["category"])
    info = _parqivf.plan_info(plan)
    assert info["parts"] == 2 and info["roots"] >= 1
    worker = _parqivf.BuildWorker(plan)
    rows = pa.Table.from_batches([worker.assign_part(p) for p in range(info["parts"])])
    assert rows.num_rows == ROWS and info["root_column"] in rows.column_names
    files = []
    for bucket in sorted(set(rows.column(info["root_column"]).to_pylist())):
        mask = pa.compute.equal(rows.column(info["root_column"]), bucket)
        files += worker.write_bucket(bucket, rows.filter(mask))
    with pytest.raises(parqivf.InvalidArgument, match="part 2 is outside 0..2"):
        worker.assign_part(2)
    with pytest.raises(parqivf.ParqivfError, match="bucket 99 was given a row of bucket"):
        worker.write_bucket(99, rows.slice(0, 1))
    with pytest.raises(parqivf.InvalidArgument, match="plan"):
        _parqivf.plan_info(b"not a plan")
    # Another build commits first: this plan's commit must not overwrite it.
    parqivf.build(str(table), out, nlist=4, codes="none")
    with pytest.raises(parqivf.Conflict, match="version 1"):
        _parqivf.publish_build(plan, files)
    assert parqivf.Index.open(out).info["nlist"] == 4
    snapshot = tmp_path / "idx" / info["snapshot"]
    assert not snapshot.exists(), "the losing snapshot folder was left behind"
    # Planned again, it publishes as version 2 and answers exactly.
    plan = _parqivf.plan_build(str(table), out, nlist=NLIST, codes="none")
    worker = _parqivf.BuildWorker(plan)
    rows = pa.Table.from_batches([worker.assign_part(p) for p in range(2)])
    files = []
    for bucket in sorted(set(rows.column(info["root_column"]).to_pylist())):
        files += worker.write_bucket(bucket, rows.filter(pa.compute.equal(rows.column(info["root_column"]), bucket)))
    summary = _parqivf.publish_build(plan, files)
    assert summary["version"] == 2 and summary["rows"] == ROWS
    ids, _ = parqivf.Index.open(out).search(data[:5], k=1, nprobe=NLIST)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_a_worker_refuses_a_source_that_changed_after_planning(tmp_path, data):
    from parqivf import _parqivf

    src = write_table(tmp_path / "t", data[:1000])
    plan = _parqivf.plan_build(str(src), str(tmp_path / "idx"), nlist=8)
    write_table(tmp_path / "t", data[:1200], files=3)
    with pytest.raises(parqivf.SourceError, match="changed since the build was planned"):
        _parqivf.BuildWorker(plan)


def test_refresh_and_compact_follow_the_table(tmp_path, data):
    """A file added and one removed: refresh answers like brute force over
    the table as it is now (rowids of a Parquet source are numbered per file,
    so answers are compared by the carried `title`), compact folds the
    delta and the deletions into one base, and an index that does not exist
    is NotFound."""
    folder = write_table(tmp_path / "t", data[:600], files=3)
    out = tmp_path / "idx"
    parqivf.build(str(folder), str(out), nlist=NLIST, codes="none", payload=["title"])
    up_to_date = parqivf.refresh(str(out))
    assert up_to_date["version"] is None
    extra = vectors(rows=100, seed=11)
    pq.write_table(
        pa.table({
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(extra.ravel()), DIM),
            "category": pa.array(np.arange(100) % 10, pa.int64()),
            "title": pa.array([f"new {i}" for i in range(100)]),
        }),
        folder / "part-9.parquet",
    )
    (folder / "part-0.parquet").unlink()
    summary = parqivf.refresh(str(out), memory_limit=64 << 20)
    assert summary["version"] == 2 and summary["rows-added"] == 100 and summary["rows-removed"] == 200
    assert summary["drift"]["deltas"] == 1 and summary["drift"]["deletions"] == 200

    now = pq.read_table(folder)
    x = np.stack(now.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    titles = now.column("title").to_pylist()
    q = data[:20] + 0.01

    def answer():
        t = parqivf.Index.open(str(out)).search_table(q, k=5, nprobe=NLIST)
        return [t.column("title").to_pylist()[i * 5:(i + 1) * 5] for i in range(len(q))]

    want, _ = brute_force(x, q, 5)
    assert answer() == [[titles[j] for j in row] for row in want]
    compacted = parqivf.compact(str(out), memory_limit=64 << 20)
    assert compacted["version"] == 3 and compacted["rows"] == 500
    assert answer() == [[titles[j] for j in row] for row in want]
    with pytest.raises(parqivf.NotFound):
        parqivf.refresh(str(tmp_path / "nothing-here"))


def test_delete_and_upsert_by_id_answer_like_brute_force(tmp_path, data):
    """A table with its own ids: delete 1 % by id and one row by a payload
    filter, upsert 1 % (half replace live rows, half are new, each with its
    payload); exhaustive answers equal brute force over the rows as they
    are now, and the ids come back as the table's. A positional index
    refuses an upsert, and a repeated id is an InvalidArgument."""
    n = 600
    x = data[:n]
    ids = np.arange(n, dtype=np.int64) * 3 + 1000
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(
        pa.table({
            "id": pa.array(ids),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM),
            "title": pa.array([f"doc {i}" for i in range(n)]),
        }),
        folder / "part-0.parquet",
    )
    out = str(tmp_path / "idx")
    parqivf.build(str(folder), out, nlist=NLIST, codes="none", id_column="id", payload=["title"])
    rows = {int(i): (x[j], f"doc {j}") for j, i in enumerate(ids)}

    gone = ids[::100]
    s = parqivf.delete(out, ids=gone)
    assert s["version"] == 2 and s["rows-removed"] == len(gone) and s["ids-not-found"] == 0
    for i in gone:
        del rows[int(i)]
    s = parqivf.delete(out, where="title = 'doc 7'")
    assert s["version"] == 3 and s["rows-removed"] == 1
    del rows[int(ids[7])]

    replaced = ids[1::200]
    new = np.arange(len(replaced), dtype=np.int64) + 10**9
    up_ids = np.concatenate([replaced, new])
    up_x = vectors(rows=len(up_ids), seed=99)
    titles = [f"up {i}" for i in up_ids]
    s = parqivf.upsert(out, up_ids, up_x, payload=pa.table({"title": pa.array(titles)}))
    assert s["version"] == 4 and s["rows-added"] == len(up_ids) and s["rows-removed"] == len(replaced)
    for i, v, t in zip(up_ids, up_x, titles):
        rows[int(i)] = (v, t)

    keys = np.array(sorted(rows), dtype=np.int64)
    xs = np.stack([rows[int(i)][0] for i in keys]).astype(np.float32)
    q = data[:20] + 0.01
    got_ids, _ = parqivf.Index.open(out).search(q, k=10, nprobe=NLIST)
    want, _ = brute_force(xs, q, 10)
    assert (got_ids == keys[want]).all()
    t = parqivf.Index.open(out).search_table(q[:1], k=10, nprobe=NLIST)
    assert t.column("title").to_pylist() == [rows[int(i)][1] for i in keys[want[0]]]

    with pytest.raises(parqivf.ParqivfError, match="appears more than once"):
        parqivf.upsert(out, np.array([5, 5]), vectors(rows=2, seed=1))
    positional = str(tmp_path / "positional")
    parqivf.build(str(folder), positional, nlist=NLIST, codes="none")
    with pytest.raises(parqivf.InvalidArgument, match="--id-column"):
        parqivf.upsert(positional, np.array([5]), vectors(rows=1, seed=1))
