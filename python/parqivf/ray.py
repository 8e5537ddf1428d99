"""The parqivf build distributed on Ray Data.

The stages are the Rust functions the single-node build composes
(``src/builder/distributed.rs``); this module only moves data between them:

1. **count** (driver): the rows of each part, from metadata.
2. **sample** (``map_batches`` over the parts, an actor pool): each actor
   reads whole parts and keeps the rows at the seeded sample positions,
   which it derives from the counts alone; only the sample travels back.
3. **train** (driver): the centroid hierarchy and the codes' quantiser, on
   the parts' samples in part order. The plan (centroids included, no
   credentials) is put in Ray's object store once.
4. **assign** (``map_batches`` over the source's parts, an actor pool): each
   actor opens the source and the plan once, then reads, assigns and
   encodes whole parts in Rust, yielding postings rows and their root bucket.
5. **shuffle** (``groupby`` on the root bucket): Ray's shuffle brings each
   bucket's rows together.
6. **write** (``map_groups``, an actor pool): each bucket's rows are sorted
   and written by the Rust postings writer straight to the object store.
7. **publish** (driver): centroids, manifest and ``index.json``, one commit.

Nothing is visible before the commit, and a retried task writes the same
bytes to the same paths, so Ray's task retries are safe. If any stage
fails, the driver deletes the snapshot folder and re-raises. With the same
source, parameters and seed, the result equals ``parqivf.build``'s.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import numpy as np

import pyarrow as pa
import ray

from . import _parqivf

__all__ = ["build"]


def _resolve(plan: Any) -> bytes:
    """The plan's bytes, fetched once per actor from Ray's object store."""
    return ray.get(plan) if isinstance(plan, ray.ObjectRef) else plan


class _Sample:
    """Actor: reads whole parts and keeps their sampled rows."""

    def __init__(self, source: str, part_rows: List[int], kwargs: Dict[str, Any]):
        self.reader = _parqivf.SampleReader(source, part_rows, **kwargs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        parts = batch.column("part").to_pylist()
        samples = [self.reader.sample_part(p) for p in parts]
        return pa.table({
            "part": pa.array(parts, pa.int64()),
            "rows": pa.array([rows for rows, _ in samples], pa.int64()),
            "dim": pa.array([v.shape[1] for _, v in samples], pa.int64()),
            "vectors": pa.array([v.tobytes() for _, v in samples], pa.large_binary()),
        })


class _Assign:
    """Actor: reads, assigns and encodes whole parts of the source."""

    def __init__(self, plan: Any, storage_options: Optional[Dict[str, str]]):
        self.worker = _parqivf.BuildWorker(_resolve(plan), storage_options)

    def __call__(self, batch: pa.Table) -> pa.Table:
        parts = batch.column("part").to_pylist()
        return pa.Table.from_batches([self.worker.assign_part(p) for p in parts])


class _Write:
    """Actor: writes one root bucket's rows as its postings files."""

    def __init__(self, plan: Any, storage_options: Optional[Dict[str, str]], root: str):
        self.worker = _parqivf.BuildWorker(_resolve(plan), storage_options)
        self.root = root

    def __call__(self, rows: pa.Table) -> pa.Table:
        bucket = rows.column(self.root)[0].as_py()
        files = self.worker.write_bucket(bucket, rows)
        return pa.table({"bucket": pa.array([bucket] * len(files), pa.uint32()),
                         "file": pa.array(files, pa.string())})


def build(
    dataset_or_paths: str,
    out: str,
    *,
    storage_options: Optional[Dict[str, str]] = None,
    concurrency: Optional[int] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """Builds an index of ``dataset_or_paths`` on Ray and publishes it at ``out``.

    ``dataset_or_paths`` is a source as ``parqivf.build`` takes it: a Parquet
    table root or ``*`` pattern (local path, ``file://``, ``s3://``…), a
    ``.npy``/``.fvecs`` file, or ``ducklake:sqlite:<catalog>`` with
    ``table=``. Every worker must reach it, and ``out``, with the same path
    or URI. The keyword arguments are ``parqivf.build``'s (``column``,
    ``nlist``, ``payload``, ``metric``, ``codes``, ``seed``, …).
    ``concurrency`` caps the actors of each stage (default: the cluster's
    CPUs). Ray must be initialised (``ray.init``) or it is started locally.

    Returns the build summary (as ``parqivf.build``), with
    ``seconds.assign`` and ``seconds.write`` the wall times of the assign
    and the shuffle-and-write stages, and ``shuffled-bytes`` the size of the
    assigned rows that the shuffle moved.
    """
    if not isinstance(dataset_or_paths, str):
        raise TypeError(
            "parqivf.ray.build takes a source location (a Parquet root or pattern, a "
            f".npy/.fvecs file, or ducklake:sqlite:...), not {type(dataset_or_paths).__name__}"
        )
    if not ray.is_initialized():
        ray.init()
    if concurrency is None:
        concurrency = max(1, int(ray.cluster_resources().get("CPU", 1)))
    source = dataset_or_paths
    options = dict(kwargs, storage_options=storage_options)
    t = time.perf_counter()
    part_rows = _parqivf.count_source(source, **options)
    count_seconds = time.perf_counter() - t
    t = time.perf_counter()
    parts = ray.data.from_items(
        [{"part": p} for p in range(len(part_rows))],
        override_num_blocks=max(1, min(len(part_rows), 4 * concurrency)),
    )
    sampled = parts.map_batches(
        _Sample,
        batch_size=1,
        batch_format="pyarrow",
        fn_constructor_args=(source, part_rows, options),
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=min(concurrency, len(part_rows))),
    ).take_all()
    sampled.sort(key=lambda r: r["part"])
    samples = [
        (r["rows"], np.frombuffer(r["vectors"], np.float32).reshape(-1, r["dim"]))
        for r in sampled
    ]
    sample_seconds = time.perf_counter() - t
    plan = _parqivf.plan_from_samples(
        source, out, part_rows, samples, count_seconds, sample_seconds, **options
    )
    del samples, sampled
    info = _parqivf.plan_info(plan)
    try:
        plan_ref = ray.put(plan)
        t = time.perf_counter()
        assigned = parts.map_batches(
            _Assign,
            batch_size=1,
            batch_format="pyarrow",
            fn_constructor_args=(plan_ref, storage_options),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=min(concurrency, info["parts"])),
        ).materialize()
        assign_seconds = time.perf_counter() - t
        shuffled = assigned.size_bytes()
        t = time.perf_counter()
        root = info["root_column"]
        # One shuffle partition per root bucket at most: Ray's default (200)
        # would split a few buckets' rows into many small blocks.
        partitions = max(1, min(info["roots"], 4 * concurrency))
        written = assigned.groupby(root, num_partitions=partitions).map_groups(
            _Write,
            batch_format="pyarrow",
            fn_constructor_args=(plan_ref, storage_options, root),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=min(concurrency, info["roots"])),
        )
        files = [row["file"] for row in written.take_all()]
        write_seconds = time.perf_counter() - t
    except BaseException:
        _parqivf.abort_build(plan, storage_options)
        raise
    # Publishing cleans up after itself, up to the commit (after which the
    # snapshot may be current and is never deleted).
    summary = _parqivf.publish_build(plan, files, storage_options, assign_seconds, write_seconds)
    summary["shuffled-bytes"] = shuffled
    return summary
