"""parqivf.ray: the build on Ray Data, on a local Ray and on a simulated
three-node cluster. Its output passes `verify` and the independent pyarrow
reader, and equals the single-node build's byte for byte (same seed)."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import parqivf
from conftest import NLIST, REPO, write_table

ray = pytest.importorskip("ray")
import parqivf.ray  # noqa: E402

RAY_ARGS = dict(include_dashboard=False, log_to_driver=False, object_store_memory=150 << 20)


def snapshot_files(index):
    """Every file of the index's only snapshot, relative to its folder."""
    (folder,) = (pathlib.Path(index) / "snapshots").iterdir()
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_same_as_single_node(table, data, out, single):
    built = parqivf.Index.open(str(out)).info
    assert built["version"] == 1 and built["rows"] == len(data)
    assert parqivf.verify(str(out))["ok"]
    postings = next((pathlib.Path(out) / "snapshots").iterdir()) / "postings"
    run = subprocess.run([sys.executable, str(REPO / "tests/interop/pyarrow_postings.py"), str(postings)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    ray_files, single_files = snapshot_files(out), snapshot_files(single)
    assert sorted(ray_files) == sorted(single_files)
    for name in single_files:
        assert ray_files[name] == single_files[name], f"{name} differs from the single-node build"
    q = data[::97]
    a = parqivf.Index.open(str(out)).search(q, k=10, nprobe=NLIST)
    b = parqivf.Index.open(str(single)).search(q, k=10, nprobe=NLIST)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.fixture(scope="module")
def single(tmp_path_factory, table):
    out = tmp_path_factory.mktemp("single") / "idx"
    # A distributed build measures no recall calibration: nor does this one.
    parqivf.build(str(table), str(out), nlist=NLIST, payload=["category", "title"], seed=42,
                  calibration_queries=0)
    return out


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, **RAY_ARGS)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def test_ray_build_on_local_ray_equals_the_single_node_build(local_ray, table, data, single, tmp_path):
    out = tmp_path / "idx"
    summary = parqivf.ray.build(str(table), str(out), nlist=NLIST, payload=["category", "title"], seed=42)
    assert summary["version"] == 1 and summary["rows"] == len(data) and summary["parts"] == 2
    assert summary["seconds"]["assign"] > 0 and summary["seconds"]["write"] > 0
    assert summary["shuffled-bytes"] > len(data) * data.shape[1] * 4
    check_same_as_single_node(table, data, out, single)


def test_a_failed_ray_build_publishes_nothing_and_cleans_up(local_ray, tmp_path, data):
    src = write_table(tmp_path / "t", data[:1000])
    out = tmp_path / "idx"
    # The table changes between the driver's plan and the workers' reads:
    # every actor refuses the source it finds, and nothing is committed.
    from parqivf import _parqivf

    real_plan = _parqivf.plan_from_samples

    def plan_then_change(*args, **kwargs):
        plan = real_plan(*args, **kwargs)
        write_table(tmp_path / "t", data[:1100], files=3)
        return plan

    _parqivf.plan_from_samples = plan_then_change
    try:
        with pytest.raises(Exception, match="changed since the build was planned"):
            parqivf.ray.build(str(src), str(out), nlist=8)
    finally:
        _parqivf.plan_from_samples = real_plan
    with pytest.raises(parqivf.NotFound):
        parqivf.Index.open(str(out))
    snapshots = out / "snapshots"
    assert not snapshots.exists() or not any(snapshots.iterdir()), list(snapshots.iterdir())


def test_ray_build_on_a_three_node_cluster(table, data, single, tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 100 << 20})
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=100 << 20)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        assert len([n for n in ray.nodes() if n["Alive"]]) == 3
        out = tmp_path / "idx"
        parqivf.ray.build(str(table), str(out), nlist=NLIST, payload=["category", "title"], seed=42)
        check_same_as_single_node(table, data, out, single)
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ray_build_takes_only_a_source_location(local_ray, tmp_path):
    with pytest.raises(TypeError, match="source location"):
        parqivf.ray.build(ray.data.range(10), str(tmp_path / "idx"), nlist=2)


def test_ray_publish_succeeds_when_the_answer_to_its_commit_is_lost(local_ray, table, data):
    """The lost-commit defect (issue 24) on the Ray publish: moto behind
    scripts/fault_proxy.py, which forwards the PUT of versions/N.json, reads
    moto's 200 and closes the connection; the client retries and gets 412.
    The build succeeds, its version is current, opens, verifies and answers
    like brute force."""
    import os
    import time

    from conftest import brute_force, s3_options

    options = s3_options()
    if options is None:
        if os.environ.get("PARQIVF_REQUIRE_INTEROP"):
            pytest.fail("scripts/test.sh exports the moto_server settings; they are missing")
        pytest.skip("no moto_server (run through scripts/test.sh)")
    proxy = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "fault_proxy.py"), "--upstream", options["AWS_ENDPOINT"],
         "--lose-response", r"PUT .*/versions/\d{20}\.json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    out = f"s3://{os.environ['PARQIVF_S3_BUCKET']}/ray-lost-{os.getpid()}-{time.time_ns()}/idx"
    try:
        endpoint = proxy.stdout.readline().strip().removeprefix("listening on ")
        assert endpoint.startswith("http://127.0.0.1:"), endpoint
        summary = parqivf.ray.build(str(table), out, nlist=NLIST, codes="none", concurrency=2,
                                    storage_options={**options, "AWS_ENDPOINT": endpoint})
    finally:
        proxy.terminate()
        log = proxy.communicate(timeout=10)[1]
    assert "lose-response" in log, log
    assert summary["version"] == 1
    idx = parqivf.Index.open(out, storage_options=options)
    assert idx.info["version"] == 1
    assert parqivf.verify(out, storage_options=options)["ok"]
    q = data[::97]
    ids, distances = idx.search(q, k=10, nprobe=NLIST)
    truth, truth_d = brute_force(data, q, 10)
    np.testing.assert_array_equal(ids, truth)
    np.testing.assert_allclose(distances, truth_d, rtol=1e-4, atol=1e-3)
