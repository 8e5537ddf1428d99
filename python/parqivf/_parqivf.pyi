"""Type stubs of the Rust extension (python/src/lib.rs)."""

from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__version__: str

StorageOptions = Optional[Dict[str, str]]
Preload = Literal["none", "codes", "all"]

class ParqivfError(Exception):
    """Base class of every parqivf error."""

class InvalidArgument(ParqivfError):
    """A parameter or an input is invalid (the message names it and the numbers)."""

class DimensionMismatch(InvalidArgument):
    """Query vectors whose dimension differs from the index's."""

class InvalidFilter(InvalidArgument):
    """A filter that does not parse, names an unknown column, or mixes types."""

class NotFound(ParqivfError):
    """No index (or no object) at the location."""

class CorruptIndex(ParqivfError):
    """An index whose documents or postings break the format's rules."""

class Conflict(ParqivfError):
    """Another writer committed the index first; the operation can be run again."""

class SourceError(ParqivfError):
    """The source table cannot be read as asked (files, columns, types, values)."""

class StorageError(ParqivfError):
    """The object store failed (after its retries)."""

def build(
    source: str,
    out: str,
    *,
    column: str = "embedding",
    nlist: int = 1024,
    payload: Optional[Sequence[str]] = None,
    table: Optional[str] = None,
    snapshot: Optional[int] = None,
    data_path: Optional[str] = None,
    id_column: Optional[str] = None,
    sort_by: Optional[str] = None,
    roots: Optional[int] = None,
    polish: int = 4,
    metric: Literal["l2", "ip", "cosine"] = "l2",
    niter: int = 20,
    neighbours: int = 64,
    max_points_per_centroid: int = 256,
    seed: int = 1234,
    assign: str = "exact",
    codes: Literal["pq4fs", "rabitq4", "sq8", "none"] = "pq4fs",
    memory_limit: int = 2 << 30,
    skip_invalid: bool = False,
    content_hash: bool = False,
    calibration_queries: int = 1000,
    storage_options: StorageOptions = None,
) -> Dict[str, Any]:
    """Builds an index of ``source`` and publishes it as the next version at ``out``.

    ``source`` is what ``parqivf build --source`` takes: a Parquet table root
    or ``*`` pattern (path, ``file://``, ``s3://``…), a ``.npy``/``.fvecs``
    file, or ``ducklake:sqlite:<catalog>`` with ``table="schema.table"``.
    The other arguments are the CLI's flags, with its defaults. Returns the
    summary ``parqivf build --json`` prints. Nothing is published on error.

    Raises ``SourceError`` (unreadable source, missing or mistyped column…),
    ``InvalidArgument`` (bad parameter, ``nlist`` above the rows…),
    ``Conflict`` (another build committed first), ``StorageError``.
    """

def refresh(
    index: str,
    source: Optional[str] = None,
    snapshot: Optional[int] = None,
    data_path: Optional[str] = None,
    retrain_above: Optional[float] = None,
    storage_options: StorageOptions = None,
    memory_limit: Optional[int] = None,
    compact_above: Optional[int] = None,
) -> Dict[str, Any]:
    """Brings the index up to date with its table as the next version (the
    summary of ``parqivf refresh --json``): new rows as a delta table
    assigned to the existing centroids, removed rowids as deletions, and the
    drift. ``source`` overrides the recorded source (e.g. a PostgreSQL
    catalog with its credentials), ``snapshot`` is the DuckLake snapshot to
    reach, ``retrain_above`` rebuilds instead when the new rows' error grows
    by more than that fraction, ``memory_limit`` bounds the bytes held before
    spilling (as for ``build``). A lost race raises ``Conflict``; a source
    gone or changed raises ``SourceError``."""

def compact(
    index: str, storage_options: StorageOptions = None, memory_limit: Optional[int] = None
) -> Dict[str, Any]:
    """Merges the delta tables and deletions into a new base with the same
    centroids, as the next version (``parqivf compact --json``).
    ``memory_limit`` bounds the bytes held before spilling, as for ``build``
    and ``refresh``."""

def delete(
    index: str,
    ids: Optional[Union[np.ndarray, Sequence[int]]] = None,
    where: Optional[str] = None,
    storage_options: StorageOptions = None,
    memory_limit: Optional[int] = None,
    compact_above: Optional[int] = None,
) -> Dict[str, Any]:
    """Deletes the live rows with ``ids``, or whose payload matches the SQL
    filter ``where``, as the next version (``parqivf delete --json``:
    ``rows-removed``, ``ids-not-found``, ``version``). A lost race raises
    ``Conflict`` and deletes nothing. ``compact_above``: compact right after
    when the index then has more delta tables than this."""

def upsert(
    index: str,
    ids: Union[np.ndarray, Sequence[int]],
    vectors: np.ndarray,
    payload: Any = None,
    storage_options: StorageOptions = None,
    memory_limit: Optional[int] = None,
    compact_above: Optional[int] = None,
) -> Dict[str, Any]:
    """Writes rows by id as the next version: each id's live row is
    replaced, new ids are added (``parqivf upsert --json``). ``vectors`` is
    float32 ``(n, d)``; ``payload`` a ``pyarrow.Table`` or ``RecordBatch`` of
    the index's payload columns, one row per id. Needs an index with ids of
    its own (built with ``id_column``, or from a vector file)."""

def verify(location: str, storage_options: StorageOptions = None, orphans: bool = False) -> Dict[str, Any]:
    """Checks every rule of the format for a postings table, a snapshot or an
    index (its current snapshot): ``{"ok", "table-root", "files-checked",
    "violations"}``, each violation with its path and numbers. ``orphans``
    also lists the table for objects no manifest names."""

class Index:
    """An opened index snapshot: thread-safe, and every call releases the GIL."""

    @staticmethod
    def open(
        location: str,
        storage_options: StorageOptions = None,
        preload: Optional[Preload] = None,
        postings_cache_bytes: int = 0,
        cache_dir: Optional[str] = None,
        cache_size: int = 10 << 30,
    ) -> "Index":
        """Opens the current snapshot of the index at ``location`` (one read
        of the commit log and of each document; never lists). ``preload``
        holds ``"codes"`` (codes, rowids, page offsets, payload) or
        ``"all"`` (also the vectors) in memory; ``None`` reads postings from
        storage per query. ``cache_dir`` keeps the postings bytes read from
        the store in that local folder, at most ``cache_size`` bytes on disk,
        across queries, restarts and processes (as ``--cache-dir``).
        Raises ``NotFound`` or ``CorruptIndex``."""

    def search(
        self,
        queries: npt.NDArray[np.float32],
        k: int = 10,
        nprobe: Optional[int] = None,
        filter: Optional[str] = None,
        max_nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
        target_recall: Optional[float] = None,
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The ``k`` nearest rows of each query (``(n, d)`` or ``(d,)``
        float32): ``(ids, distances)``, both ``(n, k)``, best first, smaller
        distances closer. A query with fewer than ``k`` results is padded with
        id ``-1`` and distance ``+inf``. ``filter`` is a SQL ``WHERE``
        expression over the payload columns; a filtered query probes further
        until ``k`` rows match or ``max_nprobe`` lists are probed.
        ``rerank`` re-ranks ``rerank × k`` code candidates exactly (default:
        the factor the build measured for the index's codes, else 4); 0
        returns the codes' estimates. ``target_recall`` (in
        (0, 1]) instead of ``nprobe``: each query probes its nearest lists
        until the build's calibration predicts that share of its exact
        neighbours (``last_stats["estimated_recall"]``). With neither, the
        index's default: recall 0.95 where it has a calibration (the build
        makes one), else 16 lists. Raises ``DimensionMismatch``,
        ``InvalidFilter``, ``InvalidArgument``, ``CorruptIndex``, ``StorageError``."""

    def search_table(
        self,
        queries: npt.NDArray[np.float32],
        k: int = 10,
        nprobe: Optional[int] = None,
        filter: Optional[str] = None,
        max_nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
        payload: bool = True,
        target_recall: Optional[float] = None,
    ) -> pa.Table:
        """As ``search``, as one row per hit: ``query`` (int64), ``rank``
        (int32), ``rowid`` (int64), ``distance`` (float32), then the payload
        columns with their stored types (``payload=True``)."""

    def preload(self, what: Preload) -> Dict[str, Any]:
        """Loads ``"codes"`` or ``"all"`` into memory; returns the IO it took."""

    @property
    def info(self) -> Dict[str, Any]:
        """Location, version, snapshot, dim, nlist, metric, rows, postings
        files and bytes, codes, what is preloaded, ``open`` (what opening
        the index cost: rounds, requests, bytes, hedges, ``open_us``) and
        ``index.json``."""

    @property
    def stats(self) -> Dict[str, Any]:
        """``last_search``: the statistics of the last search call (requests,
        bytes, rounds, lists probed, filter plan…; ``None`` before any), and
        the bytes held by the footer cache and by preloaded postings."""

# The distributed build's stages (used by parqivf.ray).

def plan_build(source: str, out: str, **kwargs: Any) -> bytes:
    """Counts, samples and trains on this machine: the plan every task receives."""

def plan_info(plan: bytes) -> Dict[str, Any]:
    """The plan's parts, roots, index, snapshot folder, shuffle key and definition."""

def publish_build(
    plan: bytes,
    files: List[str],
    storage_options: StorageOptions = None,
    assign_seconds: float = 0.0,
    write_seconds: float = 0.0,
) -> Dict[str, Any]:
    """Publishes and commits the planned snapshot from every bucket's files."""

def abort_build(plan: bytes, storage_options: StorageOptions = None) -> None:
    """Deletes the snapshot folder of a failed distributed build."""

class BuildWorker:
    """One plan's source and model, opened on a worker."""

    def __init__(self, plan: bytes, storage_options: StorageOptions = None) -> None: ...
    def assign_part(self, part: int) -> pa.RecordBatch:
        """Part ``part`` read, assigned and encoded, with its root bucket column."""
    def write_bucket(self, bucket: int, rows: Union[pa.Table, pa.RecordBatch]) -> List[str]:
        """Writes one root bucket's rows; its files' manifest entries as JSON."""

def count_source(source: str, **kwargs: Any) -> List[int]:
    """The declared rows of each part of the source (the driver's first step)."""

class SampleReader:
    """One worker's reader of the training sample: the source, and the seeded
    sample positions derived from the counts."""

    def __init__(self, source: str, part_rows: List[int], **kwargs: Any) -> None: ...
    def sample_part(self, part: int) -> Tuple[int, npt.NDArray[np.float32]]:
        """Part ``part`` read: the rows it yielded and its sampled vectors ``(m, d)``."""

def plan_from_samples(
    source: str,
    out: str,
    part_rows: List[int],
    samples: List[Tuple[int, npt.NDArray[np.float32]]],
    count_seconds: float = 0.0,
    sample_seconds: float = 0.0,
    **kwargs: Any,
) -> bytes:
    """Trains on every part's sample, in part order, and returns the plan."""
