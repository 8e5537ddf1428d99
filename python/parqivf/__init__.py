"""parqivf: an IVF vector index for the embedding columns of Parquet and
DuckLake tables, stored as plain Parquet that any engine can read.

A thin layer over the Rust library (the ``_parqivf`` extension)::

    import numpy as np, parqivf
    summary = parqivf.build("data/*.parquet", "idx", column="embedding", nlist=256)
    idx = parqivf.Index.open("idx")
    ids, distances = idx.search(np.asarray(queries, dtype=np.float32), k=10, nprobe=16)

``storage_options`` takes the keys of the ``AWS_*`` / ``PARQIVF_*``
configuration (e.g. ``{"AWS_ENDPOINT": ..., "PARQIVF_MAX_RETRIES": "3"}``);
they override the environment. The distributed build on Ray Data is
``parqivf.ray.build`` (``pip install parqivf[ray]``). See ``docs/python.md``.
"""

from ._parqivf import (
    Conflict,
    CorruptIndex,
    DimensionMismatch,
    Index,
    InvalidArgument,
    InvalidFilter,
    NotFound,
    ParqivfError,
    SourceError,
    StorageError,
    __version__,
    build,
    compact,
    delete,
    refresh,
    upsert,
    verify,
)

__all__ = [
    "Conflict",
    "CorruptIndex",
    "DimensionMismatch",
    "Index",
    "InvalidArgument",
    "InvalidFilter",
    "NotFound",
    "ParqivfError",
    "SourceError",
    "StorageError",
    "__version__",
    "build",
    "compact",
    "delete",
    "refresh",
    "upsert",
    "verify",
]
