//! `parqivf._parqivf`: the Python extension, a thin pyo3 layer over the
//! Rust library. Every call converts its arguments, runs the library's own
//! function on a shared tokio runtime with the GIL released, and converts
//! the result (numpy arrays, `pyarrow` tables, or the JSON documents the CLI
//! prints, as dicts). Library errors become the typed exceptions below. The
//! Python package (`python/parqivf`) re-exports this module, and
//! `parqivf.ray` drives the distributed build's stages exposed here.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use arrow::array::{ArrayRef, Float32Array, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_pyarrow::{FromPyArrow, IntoPyArrow, ToPyArrow};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use parqivf::builder::distributed::{self, BuildPlan, Worker as StageWorker};
use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec};
use parqivf::format::manifest::FileEntry;
use parqivf::format::snapshot::SnapshotError;
use parqivf::format::warehouse::WarehouseError;
use parqivf::index::{IndexError, IndexOptions, Preload, QueryError, SearchParams, SearchResult};
use parqivf::probe::ProbeError;
use parqivf::probe::stats::SearchStats;
use parqivf::store::options::StoreOptions;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

create_exception!(
    _parqivf,
    ParqivfError,
    PyException,
    "Base class of every parqivf error."
);
create_exception!(
    _parqivf,
    InvalidArgument,
    ParqivfError,
    "A parameter or an input is invalid (the message names it and the numbers)."
);
create_exception!(
    _parqivf,
    DimensionMismatch,
    InvalidArgument,
    "Query vectors whose dimension differs from the index's."
);
create_exception!(
    _parqivf,
    InvalidFilter,
    InvalidArgument,
    "A filter that does not parse, names an unknown column, or mixes types."
);
create_exception!(
    _parqivf,
    NotFound,
    ParqivfError,
    "No index (or no object) at the location."
);
create_exception!(
    _parqivf,
    CorruptIndex,
    ParqivfError,
    "An index whose documents or postings break the format's rules."
);
create_exception!(
    _parqivf,
    Conflict,
    ParqivfError,
    "Another writer committed the index first; the operation can be run again."
);
create_exception!(
    _parqivf,
    SourceError,
    ParqivfError,
    "The source table cannot be read as asked (files, columns, types, values)."
);
create_exception!(
    _parqivf,
    StorageError,
    ParqivfError,
    "The object store failed (after its retries)."
);

/// The runtime every call blocks on (with the GIL released); the library
/// runs its CPU work on rayon, never on these threads.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("parqivf-io")
        .build()
        .expect("the tokio runtime starts")
});

/// Runs the future `make` returns to completion without the GIL.
fn block_on<T: Send, F: std::future::Future<Output = T>>(
    py: Python<'_>,
    make: impl FnOnce() -> F + Send,
) -> T {
    py.detach(|| RUNTIME.block_on(make()))
}

fn warehouse_error(e: &WarehouseError, message: String) -> PyErr {
    match e {
        WarehouseError::Conflict { .. } => Conflict::new_err(message),
        WarehouseError::NoSnapshot { .. } => NotFound::new_err(message),
        WarehouseError::Store(_) => StorageError::new_err(message),
        _ => CorruptIndex::new_err(message),
    }
}

fn snapshot_error(e: &SnapshotError, message: String) -> PyErr {
    match e {
        SnapshotError::Store {
            source: object_store::Error::NotFound { .. },
            ..
        } => NotFound::new_err(message),
        SnapshotError::Store { .. } => StorageError::new_err(message),
        SnapshotError::Warehouse(w) => warehouse_error(w, message),
        _ => CorruptIndex::new_err(message),
    }
}

fn build_error(e: &BuildError, message: String) -> PyErr {
    use BuildError as B;
    match e {
        B::BadParameter { .. }
        | B::NlistExceedsRows { .. }
        | B::TooFewDistinct { .. }
        | B::SortColumn { .. }
        | B::BadShape { .. }
        | B::Location(_)
        | B::Mutation { .. }
        | B::KMeans(_) => InvalidArgument::new_err(message),
        B::Warehouse(w) => warehouse_error(w, message),
        B::Store(_) | B::Spill { .. } | B::Probe(ProbeError::Store { .. }) => {
            StorageError::new_err(message)
        }
        // Postings that fail their checks (compaction reads every page).
        B::Probe(_) => CorruptIndex::new_err(message),
        B::Internal(_) | B::Arrow(_) | B::Postings(_) | B::Definition(_) => {
            ParqivfError::new_err(message)
        }
        _ => SourceError::new_err(message),
    }
}

/// The typed exception of a library error, with its message.
fn py_error(e: impl Into<parqivf::Error>) -> PyErr {
    use parqivf::Error as E;
    let e = e.into();
    let message = e.to_string();
    match &e {
        E::Index(IndexError::Query(QueryError::DimensionMismatch { .. })) => {
            DimensionMismatch::new_err(message)
        }
        E::Index(IndexError::Filter(_)) | E::Probe(ProbeError::Filter { .. }) => {
            InvalidFilter::new_err(message)
        }
        E::Index(IndexError::Snapshot(s)) => snapshot_error(s, message),
        E::Index(_) | E::Distance(_) | E::KMeans(_) => InvalidArgument::new_err(message),
        E::Probe(ProbeError::Store { .. }) | E::Store(_) => StorageError::new_err(message),
        E::Probe(_) | E::Manifest(_) | E::Postings(_) => CorruptIndex::new_err(message),
        E::Warehouse(w) => warehouse_error(w, message),
        E::Build(b) => build_error(b, message),
        E::Catalog(_) => SourceError::new_err(message),
    }
}

fn py_build_error(e: BuildError) -> PyErr {
    py_error(e)
}

fn invalid(message: impl Into<String>) -> PyErr {
    InvalidArgument::new_err(message.into())
}

/// `storage_options` as [`StoreOptions`] (the `AWS_*` / `PARQIVF_*` keys).
fn store_options(options: Option<HashMap<String, String>>) -> PyResult<StoreOptions> {
    StoreOptions::from_map(options.unwrap_or_default()).map_err(|e| invalid(e.to_string()))
}

/// A serialisable value as the Python object its JSON is (dicts, lists…).
fn to_py<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| ParqivfError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The build's keyword arguments, one home for the Python API's parameter
/// list (`parqivf.build`, `parqivf.ray.build`): the source, the build
/// parameters (defaults as `parqivf build`), and the storage options.
struct BuildArgs {
    spec: SourceSpec,
    params: BuildParams,
    store: StoreOptions,
}

fn parsed<T>(key: &str, r: Result<T, String>) -> PyResult<T> {
    r.map_err(|e| invalid(format!("{key}: {e}")))
}

fn build_args(source: String, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<BuildArgs> {
    let mut spec = SourceSpec {
        source,
        column: "embedding".into(),
        ..SourceSpec::default()
    };
    let mut params = BuildParams {
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let mut store = StoreOptions::default();
    let Some(kwargs) = kwargs else {
        return Ok(BuildArgs {
            spec,
            params,
            store,
        });
    };
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        let text = || -> PyResult<String> { value.extract() };
        match key.as_str() {
            "column" => spec.column = text()?,
            "table" => spec.table = Some(text()?),
            "snapshot" => spec.snapshot = Some(value.extract()?),
            "data_path" => spec.data_path = Some(text()?),
            "id_column" => spec.id_column = Some(text()?),
            "payload" => spec.payload = value.extract()?,
            "skip_invalid" => spec.skip_invalid = value.extract()?,
            "content_hash" => spec.content_hash = value.extract()?,
            "nlist" => params.nlist = value.extract()?,
            "roots" => params.roots = Some(value.extract()?),
            "polish" => params.polish = value.extract()?,
            "metric" => params.metric = parsed(&key, text()?.parse())?,
            "niter" => params.niter = value.extract()?,
            "neighbours" => params.neighbours = value.extract()?,
            "max_points_per_centroid" => params.max_points_per_centroid = value.extract()?,
            "seed" => params.seed = value.extract()?,
            "assign" => params.assign = parsed(&key, text()?.parse())?,
            "codes" => params.codes = parsed(&key, parqivf::quant::parse_codes(&text()?))?,
            "memory_limit" => params.memory_limit = value.extract()?,
            "sort_by" => params.sort_by = Some(text()?),
            "calibration_queries" => params.calibration_queries = value.extract()?,
            "storage_options" => store = store_options(Some(value.extract()?))?,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument {key:?}"
                )));
            }
        }
    }
    Ok(BuildArgs {
        spec,
        params,
        store,
    })
}

/// Builds an index of `source` and publishes it as the next version at `out`.
#[pyfunction]
#[pyo3(signature = (source, out, **kwargs))]
fn build<'py>(
    py: Python<'py>,
    source: String,
    out: String,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let args = build_args(source, kwargs)?;
    let summary = block_on(py, || async {
        let source = parqivf::builder::open_source(&args.spec, &args.store).await?;
        let (store, index) = parqivf::store::location::open_with(&out, &args.store)
            .map_err(|e| BuildError::Store(e.into()))?;
        parqivf::builder::build(source, store, &index, &args.params).await
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// Brings the index at `index` up to date with its table, as the next
/// version: new rows as a delta table, removed rowids as deletions.
#[pyfunction]
#[pyo3(signature = (index, source=None, snapshot=None, data_path=None, retrain_above=None, storage_options=None, memory_limit=None, compact_above=None))]
#[allow(clippy::too_many_arguments)]
fn refresh<'py>(
    py: Python<'py>,
    index: String,
    source: Option<String>,
    snapshot: Option<u64>,
    data_path: Option<String>,
    retrain_above: Option<f64>,
    storage_options: Option<HashMap<String, String>>,
    memory_limit: Option<usize>,
    compact_above: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = store_options(storage_options)?;
    let params = parqivf::builder::refresh::RefreshParams {
        source,
        snapshot,
        data_path,
        retrain_above,
        store_options: options.clone(),
        compact: compact_policy(compact_above),
    };
    let build = quiet_build(memory_limit);
    let summary = block_on(py, || async {
        let (store, path) = parqivf::store::location::open_with(&index, &options)
            .map_err(|e| BuildError::Store(e.into()))?;
        parqivf::builder::refresh::refresh(store, &path, &params, &build).await
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// `compact_above` (the CLI's `--compact-above`) as a policy.
fn compact_policy(compact_above: Option<usize>) -> parqivf::builder::refresh::CompactPolicy {
    parqivf::builder::refresh::CompactPolicy {
        deltas_above: compact_above,
        ..Default::default()
    }
}

/// Ids from a numpy integer array or a sequence of ints.
fn ids_of(ids: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if let Ok(a) = ids.extract::<numpy::PyReadonlyArray1<'_, i64>>() {
        return Ok(a.as_array().to_vec());
    }
    ids.extract::<Vec<i64>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "ids must be a 1-D int64 numpy array or a sequence of int, not {}",
            ids.get_type()
        ))
    })
}

/// Deletes the live rows with `ids` (or matching the SQL filter `where`)
/// from the index at `index`, as the next version.
#[pyfunction]
#[pyo3(signature = (index, ids=None, r#where=None, storage_options=None, memory_limit=None, compact_above=None))]
fn delete<'py>(
    py: Python<'py>,
    index: String,
    ids: Option<&Bound<'py, PyAny>>,
    r#where: Option<String>,
    storage_options: Option<HashMap<String, String>>,
    memory_limit: Option<usize>,
    compact_above: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = store_options(storage_options)?;
    let build = quiet_build(memory_limit);
    let policy = compact_policy(compact_above);
    enum Rows {
        Ids(Vec<i64>),
        Where(String),
    }
    let rows = match (ids, r#where) {
        (Some(ids), None) => Rows::Ids(ids_of(ids)?),
        (None, Some(filter)) => Rows::Where(filter),
        _ => return Err(invalid("give either ids or where")),
    };
    let summary = block_on(py, || async {
        let (store, path) = parqivf::store::location::open_with(&index, &options)
            .map_err(|e| BuildError::Store(e.into()))?;
        match rows {
            Rows::Ids(ids) => {
                parqivf::builder::mutate::delete(store, &path, &ids, &build, policy).await
            }
            Rows::Where(filter) => {
                parqivf::builder::mutate::delete_where(store, &path, &filter, &build, policy).await
            }
        }
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// Writes rows by id to the index at `index`, as the next version: each
/// id's live row is replaced. `vectors`: float32 `(n, d)`; `payload`: a
/// `pyarrow.Table` or `RecordBatch` of the index's payload columns.
#[pyfunction]
#[pyo3(signature = (index, ids, vectors, payload=None, storage_options=None, memory_limit=None, compact_above=None))]
#[allow(clippy::too_many_arguments)]
fn upsert<'py>(
    py: Python<'py>,
    index: String,
    ids: &Bound<'py, PyAny>,
    vectors: &Bound<'py, PyAny>,
    payload: Option<&Bound<'py, PyAny>>,
    storage_options: Option<HashMap<String, String>>,
    memory_limit: Option<usize>,
    compact_above: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = store_options(storage_options)?;
    let build = quiet_build(memory_limit);
    let policy = compact_policy(compact_above);
    let ids = ids_of(ids)?;
    let (vectors, _) = f32_rows(vectors, "vectors")?;
    let payload = match payload {
        None => None,
        Some(p) => {
            let (batches, schema) = match arrow_pyarrow::Table::from_pyarrow_bound(p) {
                Ok(t) => t.into_inner(),
                Err(_) => {
                    let b = RecordBatch::from_pyarrow_bound(p)?;
                    let schema = b.schema();
                    (vec![b], schema)
                }
            };
            Some(
                arrow::compute::concat_batches(&schema, &batches)
                    .map_err(|e| invalid(format!("payload: {e}")))?,
            )
        }
    };
    let rows = parqivf::builder::mutate::UpsertRows {
        ids,
        vectors,
        payload,
    };
    let summary = block_on(py, || async {
        let (store, path) = parqivf::store::location::open_with(&index, &options)
            .map_err(|e| BuildError::Store(e.into()))?;
        parqivf::builder::mutate::upsert(store, &path, rows, &build, policy).await
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// Merges the index's delta tables and deletions into a new base with the
/// same centroids, as the next version.
#[pyfunction]
#[pyo3(signature = (index, storage_options=None, memory_limit=None))]
fn compact<'py>(
    py: Python<'py>,
    index: String,
    storage_options: Option<HashMap<String, String>>,
    memory_limit: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = store_options(storage_options)?;
    let build = quiet_build(memory_limit);
    let summary = block_on(py, || async {
        let (store, path) = parqivf::store::location::open_with(&index, &options)
            .map_err(|e| BuildError::Store(e.into()))?;
        parqivf::builder::refresh::compact(store, &path, &build).await
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// The build parameters of `refresh` and `compact`: quiet, with the
/// assignment's memory bound (`memory_limit`, as the CLI's
/// `--memory-limit`, default [`parqivf::builder::BuildParams`]'s).
fn quiet_build(memory_limit: Option<usize>) -> parqivf::builder::BuildParams {
    let defaults = parqivf::builder::BuildParams::default();
    parqivf::builder::BuildParams {
        progress: parqivf::builder::ProgressMode::Quiet,
        memory_limit: memory_limit.unwrap_or(defaults.memory_limit),
        ..defaults
    }
}

/// Checks every rule of the format for a postings table, snapshot or index.
#[pyfunction]
#[pyo3(signature = (location, storage_options=None, orphans=false))]
fn verify<'py>(
    py: Python<'py>,
    location: String,
    storage_options: Option<HashMap<String, String>>,
    orphans: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let options = store_options(storage_options)?;
    let (store, path) = parqivf::store::location::open_with(&location, &options)
        .map_err(|e| py_error(parqivf::store::StoreError::from(e)))?;
    let report = block_on(py, || {
        parqivf::verify::verify_location(store, &path, parqivf::verify::VerifyOptions { orphans })
    })
    .map_err(py_error)?;
    let out = to_py(py, &report)?;
    out.set_item("ok", report.is_ok())?;
    Ok(out)
}

/// An opened index snapshot.
#[pyclass(frozen, module = "parqivf._parqivf")]
struct Index {
    inner: Arc<parqivf::index::Index>,
    location: String,
    version: Option<u64>,
    snapshot: String,
    last: Mutex<Option<SearchStats>>,
}

/// Vectors (queries, a sample) as one row-major f32 buffer and their count: a `(n, d)` array,
/// or one `(d,)` query.
fn f32_rows(queries: &Bound<'_, PyAny>, what: &str) -> PyResult<(Vec<f32>, usize)> {
    let array: PyReadonlyArrayDyn<'_, f32> = queries.extract().map_err(|_| {
        let dtype = queries
            .getattr("dtype")
            .map(|d| d.to_string())
            .unwrap_or_else(|_| queries.get_type().to_string());
        PyTypeError::new_err(format!(
            "{what} must be a float32 numpy array of shape (n, d) or (d,), not {dtype}; \
             convert with numpy.asarray(q, dtype=numpy.float32)"
        ))
    })?;
    let n = match array.ndim() {
        1 => 1,
        2 => array.shape()[0],
        d => {
            return Err(DimensionMismatch::new_err(format!(
                "{what} must have 1 or 2 dimensions, not {d}"
            )));
        }
    };
    // `as_slice` also accepts Fortran order, whose buffer is column-major:
    // only a C-ordered buffer is taken as it is.
    let data = match array.as_slice() {
        Ok(s) if array.is_c_contiguous() => s.to_vec(),
        _ => array.as_array().iter().copied().collect(),
    };
    Ok((data, n))
}

impl Index {
    /// The search parameters of `search` and `search_table` (without the payload).
    fn params(
        k: usize,
        nprobe: Option<usize>,
        filter: Option<String>,
        max_nprobe: Option<usize>,
        rerank: Option<usize>,
        target_recall: Option<f64>,
    ) -> SearchParams {
        let d = SearchParams::default();
        SearchParams {
            k,
            nprobe,
            filter,
            max_nprobe,
            target_recall,
            rerank: rerank.or(d.rerank),
            ..d
        }
    }

    fn run(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        params: &SearchParams,
    ) -> PyResult<Vec<SearchResult>> {
        let (data, n) = f32_rows(queries, "queries")?;
        let dim = self.inner.hierarchy().dim;
        if n == 0 {
            return Ok(Vec::new());
        }
        if data.len() != n * dim {
            return Err(DimensionMismatch::new_err(format!(
                "queries have dimension {}, the index has {dim}",
                data.len() / n
            )));
        }
        let (inner, params) = (self.inner.clone(), params.clone());
        let results = block_on(py, || inner.search_batch_shared(data, params)).map_err(py_error)?;
        if let Some(first) = results.first() {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(first.stats);
        }
        Ok(results)
    }
}

#[pymethods]
impl Index {
    /// Opens the current snapshot of the index at `location`.
    #[staticmethod]
    #[pyo3(signature = (location, storage_options=None, preload=None, postings_cache_bytes=0, cache_dir=None, cache_size=10 << 30))]
    fn open(
        py: Python<'_>,
        location: String,
        storage_options: Option<HashMap<String, String>>,
        preload: Option<String>,
        postings_cache_bytes: usize,
        cache_dir: Option<std::path::PathBuf>,
        cache_size: u64,
    ) -> PyResult<Index> {
        let options = store_options(storage_options)?;
        let disk_cache = match cache_dir {
            None => None,
            Some(dir) => Some(Arc::new(
                parqivf::store::disk_cache::DiskCache::open(dir, cache_size).map_err(
                    |e| match e {
                        parqivf::store::disk_cache::DiskCacheError::Io { .. } => {
                            StorageError::new_err(e.to_string())
                        }
                        _ => invalid(format!("cache_size: {e}")),
                    },
                )?,
            )),
        };
        let preload: Preload = match preload.as_deref() {
            None => Preload::None,
            Some(p) => p
                .parse()
                .map_err(|e: String| invalid(format!("preload: {e}")))?,
        };
        let (store, path) = parqivf::store::location::open_with(&location, &options)
            .map_err(|e| py_error(parqivf::store::StoreError::from(e)))?;
        let (inner, version, snapshot) = block_on(py, || async move {
            let options = IndexOptions {
                postings_cache_bytes,
                disk_cache,
                ..IndexOptions::default()
            };
            let index = parqivf::index::Index::open_with(store, &path, options, preload).await?;
            let version = index.commit().map(|c| c.version);
            let folder = index.folder().to_string();
            Ok::<_, parqivf::Error>((index, version, folder))
        })
        .map_err(py_error)?;
        Ok(Index {
            inner: Arc::new(inner),
            location,
            version,
            snapshot,
            last: Mutex::new(None),
        })
    }

    /// The `k` nearest rows of each query: `(ids, distances)`, both `(n, k)`,
    /// best first; a query with fewer than `k` results is padded with id -1
    /// and distance +inf.
    /// With `target_recall` (in (0, 1]) each query probes its nearest lists
    /// until the build's calibration predicts that share of its exact
    /// neighbours, instead of `nprobe` lists (`last_stats` has the estimate).
    /// With neither, the index's default: recall 0.95 where it has a
    /// calibration (the build makes one), else 16 lists.
    #[pyo3(signature = (queries, k=10, nprobe=None, filter=None, max_nprobe=None, rerank=None, target_recall=None))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        nprobe: Option<usize>,
        filter: Option<String>,
        max_nprobe: Option<usize>,
        rerank: Option<usize>,
        target_recall: Option<f64>,
    ) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>)> {
        let params = Self::params(k, nprobe, filter, max_nprobe, rerank, target_recall);
        let results = self.run(py, queries, &params)?;
        let n = results.len();
        let mut ids = vec![-1i64; n * k];
        let mut distances = vec![f32::INFINITY; n * k];
        for (q, r) in results.iter().enumerate() {
            for (j, hit) in r.hits.iter().enumerate() {
                ids[q * k + j] = hit.rowid;
                distances[q * k + j] = hit.distance;
            }
        }
        let shape = (n, k);
        let ids = Array2::from_shape_vec(shape, ids).map_err(|e| invalid(e.to_string()))?;
        let distances =
            Array2::from_shape_vec(shape, distances).map_err(|e| invalid(e.to_string()))?;
        Ok((ids.into_pyarray(py), distances.into_pyarray(py)))
    }

    /// The hits of each query as one `pyarrow.Table`: `query`, `rank`,
    /// `rowid`, `distance`, then the payload columns (with `payload=True`).
    #[pyo3(signature = (queries, k=10, nprobe=None, filter=None, max_nprobe=None, rerank=None, payload=true, target_recall=None))]
    #[allow(clippy::too_many_arguments)]
    fn search_table<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        nprobe: Option<usize>,
        filter: Option<String>,
        max_nprobe: Option<usize>,
        rerank: Option<usize>,
        payload: bool,
        target_recall: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = SearchParams {
            include_payload: payload,
            ..Self::params(k, nprobe, filter, max_nprobe, rerank, target_recall)
        };
        let results = self.run(py, queries, &params)?;
        let batch = hits_table(&results).map_err(|e| ParqivfError::new_err(e.to_string()))?;
        let table = arrow_pyarrow::Table::try_new(vec![batch.clone()], batch.schema())
            .map_err(|e| ParqivfError::new_err(e.to_string()))?;
        table.into_pyarrow(py)
    }

    /// Loads `"codes"` or `"all"` of the postings into memory.
    fn preload<'py>(&self, py: Python<'py>, what: String) -> PyResult<Bound<'py, PyAny>> {
        let what: Preload = what.parse().map_err(|e: String| invalid(e))?;
        let inner = self.inner.clone();
        let stats = block_on(py, || async move { inner.preload(what).await }).map_err(py_error)?;
        to_py(py, &stats)
    }

    /// What the index is: location, version, snapshot, `index.json`, sizes,
    /// and what opening it cost (`open`).
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let i = &self.inner;
        let manifest = i.manifest();
        let info = serde_json::json!({
            "location": self.location,
            "version": self.version,
            "snapshot": self.snapshot,
            "dim": i.hierarchy().dim,
            "nlist": manifest.nlist,
            "metric": i.definition().metric,
            "rows": manifest.files.iter().map(|f| f.rows).sum::<u64>(),
            "postings_files": manifest.files.len(),
            "postings_bytes": manifest.files.iter().map(|f| f.size).sum::<u64>(),
            "codes": i.quantizer().map(|q| q.scheme().name()),
            "preloaded": i.preloaded(),
            "calibration": i.calibration_status(),
            "open": i.open_stats(),
            "definition": i.definition(),
        });
        to_py(py, &info)
    }

    /// The statistics of the last search (IO and time of the whole call),
    /// and the bytes held in memory.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (footer_cache_bytes, postings_bytes) = self.inner.cache_bytes();
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        let stats = serde_json::json!({
            "last_search": last,
            "footer_cache_bytes": footer_cache_bytes,
            "postings_memory_bytes": postings_bytes,
        });
        to_py(py, &stats)
    }

    fn __repr__(&self) -> String {
        format!(
            "Index({:?}, version={}, dim={}, nlist={})",
            self.location,
            self.version.map_or("none".to_string(), |v| v.to_string()),
            self.inner.hierarchy().dim,
            self.inner.manifest().nlist
        )
    }
}

/// One row per hit: query, rank, rowid, distance, then the payload.
fn hits_table(results: &[SearchResult]) -> Result<RecordBatch, arrow::error::ArrowError> {
    let (mut query, mut rank, mut rowid, mut distance) = (vec![], vec![], vec![], vec![]);
    for (q, r) in results.iter().enumerate() {
        for (j, hit) in r.hits.iter().enumerate() {
            query.push(q as i64);
            rank.push(j as i32);
            rowid.push(hit.rowid);
            distance.push(hit.distance);
        }
    }
    let mut fields = vec![
        Field::new("query", DataType::Int64, false),
        Field::new("rank", DataType::Int32, false),
        Field::new("rowid", DataType::Int64, false),
        Field::new("distance", DataType::Float32, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(query)),
        Arc::new(Int32Array::from(rank)),
        Arc::new(Int64Array::from(rowid)),
        Arc::new(Float32Array::from(distance)),
    ];
    let payloads: Vec<&RecordBatch> = results.iter().filter_map(|r| r.payload.as_ref()).collect();
    if let Some(first) = payloads.first() {
        let payload = arrow::compute::concat_batches(first.schema_ref(), payloads.iter().copied())?;
        fields.extend(payload.schema().fields().iter().map(|f| f.as_ref().clone()));
        columns.extend(payload.columns().iter().cloned());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// The declared rows of each part of the source (the first step of a
/// distributed build).
#[pyfunction]
#[pyo3(signature = (source, **kwargs))]
fn count_source(
    py: Python<'_>,
    source: String,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<u64>> {
    let args = build_args(source, kwargs)?;
    block_on(py, || distributed::count_source(&args.spec, &args.store)).map_err(py_build_error)
}

/// A worker's reader of the training sample (`parqivf.ray`).
#[pyclass(frozen, module = "parqivf._parqivf")]
struct SampleReader {
    inner: Arc<distributed::SampleReader>,
}

#[pymethods]
impl SampleReader {
    #[new]
    #[pyo3(signature = (source, part_rows, **kwargs))]
    fn new(
        py: Python<'_>,
        source: String,
        part_rows: Vec<u64>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<SampleReader> {
        let args = build_args(source, kwargs)?;
        let inner = block_on(py, || {
            distributed::SampleReader::open(&args.spec, &args.params, part_rows, &args.store)
        })
        .map_err(py_build_error)?;
        Ok(SampleReader {
            inner: Arc::new(inner),
        })
    }

    /// Part `part` read: `(rows it yielded, its sampled vectors (m, d) float32)`.
    fn sample_part<'py>(
        &self,
        py: Python<'py>,
        part: usize,
    ) -> PyResult<(u64, Bound<'py, PyArray2<f32>>)> {
        let inner = self.inner.clone();
        let sample = block_on(py, || async move { inner.sample_part(part).await })
            .map_err(py_build_error)?;
        let dim = self.inner.dim();
        let n = sample.vectors.len() / dim.max(1);
        let vectors = Array2::from_shape_vec((n, dim), sample.vectors)
            .map_err(|e| ParqivfError::new_err(e.to_string()))?;
        Ok((sample.rows, vectors.into_pyarray(py)))
    }
}

/// Trains on every part's sample (in part order: `(rows, vectors)` from
/// `SampleReader.sample_part`) and plans a distributed build: the plan's
/// bytes, shipped to every task.
#[pyfunction]
#[pyo3(signature = (source, out, part_rows, samples, count_seconds=0.0, sample_seconds=0.0, **kwargs))]
#[allow(clippy::too_many_arguments)]
fn plan_from_samples<'py>(
    py: Python<'py>,
    source: String,
    out: String,
    part_rows: Vec<u64>,
    samples: Vec<(u64, Bound<'py, PyAny>)>,
    count_seconds: f64,
    sample_seconds: f64,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let args = build_args(source, kwargs)?;
    let samples = samples
        .iter()
        .map(|(rows, vectors)| {
            let (vectors, _) = f32_rows(vectors, "sample vectors")?;
            Ok(parqivf::builder::stages::PartSample {
                rows: *rows,
                vectors,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let seconds = (count_seconds, sample_seconds);
    let plan = block_on(py, || {
        distributed::plan_from_samples(
            &args.spec,
            &out,
            &args.params,
            &args.store,
            part_rows,
            samples,
            seconds,
        )
    })
    .map_err(py_build_error)?;
    Ok(PyBytes::new(py, &plan.to_bytes()))
}

/// Counts, samples and trains on this machine and plans a distributed
/// build: the plan's bytes, shipped to every task.
#[pyfunction]
#[pyo3(signature = (source, out, **kwargs))]
fn plan_build<'py>(
    py: Python<'py>,
    source: String,
    out: String,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let args = build_args(source, kwargs)?;
    let plan = block_on(py, || {
        distributed::plan(&args.spec, &out, &args.params, &args.store)
    })
    .map_err(py_build_error)?;
    Ok(PyBytes::new(py, &plan.to_bytes()))
}

fn parse_plan(plan: &[u8]) -> PyResult<BuildPlan> {
    BuildPlan::from_bytes(plan).map_err(py_build_error)
}

/// What a plan holds: its parts, roots, index and snapshot folder.
#[pyfunction]
fn plan_info<'py>(py: Python<'py>, plan: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let plan = parse_plan(plan)?;
    let info = serde_json::json!({
        "parts": plan.parts(),
        "roots": plan.roots(),
        "index": plan.index(),
        "snapshot": plan.snapshot(),
        "root_column": distributed::ROOT_COLUMN,
        "definition": plan.definition(),
    });
    to_py(py, &info)
}

/// Publishes a distributed build from every bucket's manifest entries
/// (JSON), and commits it.
#[pyfunction]
#[pyo3(signature = (plan, files, storage_options=None, assign_seconds=0.0, write_seconds=0.0))]
fn publish_build<'py>(
    py: Python<'py>,
    plan: &[u8],
    files: Vec<String>,
    storage_options: Option<HashMap<String, String>>,
    assign_seconds: f64,
    write_seconds: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let plan = parse_plan(plan)?;
    let options = store_options(storage_options)?;
    let files = files
        .iter()
        .map(|f| serde_json::from_str::<FileEntry>(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("files: {e}")))?;
    let summary = block_on(py, || {
        distributed::publish(&plan, files, &options, assign_seconds, write_seconds)
    })
    .map_err(py_build_error)?;
    to_py(py, &summary)
}

/// Deletes the snapshot folder of a distributed build that failed.
#[pyfunction]
#[pyo3(signature = (plan, storage_options=None))]
fn abort_build(
    py: Python<'_>,
    plan: &[u8],
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<()> {
    let plan = parse_plan(plan)?;
    let options = store_options(storage_options)?;
    block_on(py, || distributed::abort(&plan, &options)).map_err(py_build_error)
}

/// A distributed build's worker: the source and model of one plan, opened
/// once per process.
#[pyclass(frozen, module = "parqivf._parqivf")]
struct BuildWorker {
    inner: Arc<StageWorker>,
}

#[pymethods]
impl BuildWorker {
    #[new]
    #[pyo3(signature = (plan, storage_options=None))]
    fn new(
        py: Python<'_>,
        plan: &[u8],
        storage_options: Option<HashMap<String, String>>,
    ) -> PyResult<BuildWorker> {
        let plan = parse_plan(plan)?;
        let options = store_options(storage_options)?;
        let inner = block_on(py, || StageWorker::open(plan, &options)).map_err(py_build_error)?;
        Ok(BuildWorker {
            inner: Arc::new(inner),
        })
    }

    /// Part `part` read, assigned and encoded: a `pyarrow.RecordBatch` of
    /// postings rows and their root bucket.
    fn assign_part<'py>(&self, py: Python<'py>, part: usize) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        let batch = block_on(py, || async move { inner.assign_part(part).await })
            .map_err(py_build_error)?;
        batch.to_pyarrow(py)
    }

    /// Writes root bucket `bucket` from its rows (a `pyarrow.Table` or
    /// `RecordBatch`): its postings files' manifest entries, as JSON.
    fn write_bucket(
        &self,
        py: Python<'_>,
        bucket: u32,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<String>> {
        let batches = match arrow_pyarrow::Table::from_pyarrow_bound(rows) {
            Ok(t) => t.into_inner().0,
            Err(_) => vec![RecordBatch::from_pyarrow_bound(rows)?],
        };
        let inner = self.inner.clone();
        let files = block_on(
            py,
            || async move { inner.write_bucket(bucket, batches).await },
        )
        .map_err(py_build_error)?;
        files
            .iter()
            .map(|f| serde_json::to_string(f).map_err(|e| ParqivfError::new_err(e.to_string())))
            .collect()
    }
}

#[pymodule]
fn _parqivf(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ParqivfError", py.get_type::<ParqivfError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("DimensionMismatch", py.get_type::<DimensionMismatch>())?;
    m.add("InvalidFilter", py.get_type::<InvalidFilter>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("CorruptIndex", py.get_type::<CorruptIndex>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("SourceError", py.get_type::<SourceError>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add_class::<Index>()?;
    m.add_class::<BuildWorker>()?;
    m.add_class::<SampleReader>()?;
    m.add_function(wrap_pyfunction!(count_source, m)?)?;
    m.add_function(wrap_pyfunction!(plan_from_samples, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(refresh, m)?)?;
    m.add_function(wrap_pyfunction!(compact, m)?)?;
    m.add_function(wrap_pyfunction!(delete, m)?)?;
    m.add_function(wrap_pyfunction!(upsert, m)?)?;
    m.add_function(wrap_pyfunction!(plan_build, m)?)?;
    m.add_function(wrap_pyfunction!(plan_info, m)?)?;
    m.add_function(wrap_pyfunction!(publish_build, m)?)?;
    m.add_function(wrap_pyfunction!(abort_build, m)?)?;
    Ok(())
}
