"""Shared fixtures: a small Parquet table (two files, payload columns) and
indexes built from it by the Rust library through the Python API."""

import os
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import parqivf

ROWS, DIM, NLIST = 3000, 16, 24
REPO = pathlib.Path(__file__).resolve().parents[2]


def vectors(rows=ROWS, dim=DIM, seed=7):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, dim)).astype(np.float32) * 4
    x = centres[rng.integers(0, 12, rows)] + rng.standard_normal((rows, dim)).astype(np.float32)
    return x.astype(np.float32)


def write_table(folder, x, files=2):
    folder.mkdir(parents=True, exist_ok=True)
    n = len(x)
    table = pa.table(
        {
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]),
            "category": pa.array(np.arange(n) % 10, pa.int64()),
            "title": pa.array([f"doc {i}" for i in range(n)]),
        }
    )
    step = (n + files - 1) // files
    for f in range(files):
        pq.write_table(table.slice(f * step, step), folder / f"part-{f}.parquet")
    return folder


@pytest.fixture(scope="session")
def data():
    return vectors()


@pytest.fixture(scope="session")
def table(tmp_path_factory, data):
    return write_table(tmp_path_factory.mktemp("table") / "t", data)


@pytest.fixture(scope="session")
def index(tmp_path_factory, table):
    out = tmp_path_factory.mktemp("idx") / "flat"
    summary = parqivf.build(str(table), str(out), nlist=NLIST, codes="none",
                            payload=["category", "title"])
    return out, summary


@pytest.fixture(scope="session")
def coded_index(tmp_path_factory, table):
    out = tmp_path_factory.mktemp("idx") / "coded"
    parqivf.build(str(table), str(out), nlist=NLIST, payload=["category", "title"])
    return out


def brute_force(x, queries, k, keep=None):
    d = ((queries[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    if keep is not None:
        d[:, ~keep] = np.inf
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(d, order, 1)


def s3_options():
    """The moto_server settings scripts/test.sh exports, as storage_options."""
    keys = ["AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"]
    if not all(k in os.environ for k in keys) or "PARQIVF_S3_BUCKET" not in os.environ:
        return None
    return {k: os.environ[k] for k in keys}
