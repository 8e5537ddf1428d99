//! The real backend: a published index opened with [`Index`], behind the
//! server's [`SearchBackend`] trait. The loader opens a location's current
//! snapshot with [`Index::open_with`] (one read of the commit log,
//! never listing, every document checked against the commit's pins), so a
//! reload picks up a newly published snapshot and `IndexInfo::snapshot`
//! names exactly the version opened. `IndexInfo` is computed once at load.
//! The snapshot identity is `v<version>:<snapshot folder>` from the commit log, or
//! `unversioned:<hash>` for a bare snapshot folder (a hash, so that the
//! identity never shows a local path or bucket to HTTP clients).

use std::sync::Arc;

use async_trait::async_trait;

use super::backend::{BackendError, BackendLoader, CacheState, Change, IndexInfo, SearchBackend};
use crate::Error;
use crate::builder::refresh::CompactPolicy;
use crate::builder::{BuildError, BuildParams, ProgressMode};
use crate::format::snapshot::SnapshotError;
use crate::format::warehouse::{self, Commit, WarehouseError};
use crate::index::{
    Index, IndexError, IndexOptions, Preload, SearchParams, SearchResult, SearchStats,
};

/// One opened snapshot.
pub struct IndexBackend {
    index: Arc<Index>,
    location: String,
    /// What `info` reports, computed once at load (only the cache state
    /// changes afterwards).
    info: IndexInfo,
}

fn classify(location: &str, e: Error) -> BackendError {
    let message = e.to_string();
    match e {
        Error::Index(IndexError::Query(q)) => BackendError::BadRequest {
            code: q.code(),
            message,
        },
        Error::Index(IndexError::Filter(_)) => BackendError::InvalidFilter { message },
        Error::Probe(crate::probe::ProbeError::Store { .. })
        | Error::Index(IndexError::Snapshot(
            SnapshotError::Store { .. } | SnapshotError::Warehouse(WarehouseError::Store(_)),
        ))
        | Error::Store(_)
        | Error::Warehouse(WarehouseError::Store(_)) => BackendError::Storage {
            location: location.to_string(),
            message,
        },
        _ => BackendError::Corrupt {
            location: location.to_string(),
            message,
        },
    }
}

#[async_trait]
impl SearchBackend for IndexBackend {
    fn info(&self) -> IndexInfo {
        let (footer, postings) = self.index.cache_bytes();
        IndexInfo {
            cache: CacheState {
                footer_cache_bytes: footer as u64,
                postings_cache_bytes: postings as u64,
                disk: self.index.disk_cache().map(|d| d.state()),
                ..self.info.cache
            },
            ..self.info.clone()
        }
    }

    async fn warm(&self) -> Result<SearchStats, BackendError> {
        self.index
            .warm()
            .await
            .map_err(|e| classify(&self.location, e.into()))
    }

    async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<SearchResult>, BackendError> {
        self.index
            .search_batch_shared(queries.to_vec(), params.clone())
            .await
            .map_err(|e| classify(&self.location, e.into()))
    }
}

/// Opens locations (`store::location` syntax) at their current snapshot.
#[derive(Debug, Clone, Default)]
pub struct IndexLoader {
    /// What to hold in memory after opening (`--preload`).
    pub preload: Preload,
    /// Read every footer after opening, so each query is one round of requests.
    pub warm: bool,
    /// Retries, timeouts and the publish opt-in for the stores opened.
    pub store: crate::store::options::StoreOptions,
    /// The reader's options of every opened index: its RAM tier of decoded
    /// postings (`--postings-cache-size`) and the disk tier it reads
    /// through (`--cache-dir`).
    pub options: IndexOptions,
}

/// The snapshot identity the server reports for the snapshot at `path`
/// that `commit` made current (`None`: `path` is a bare snapshot folder).
fn snapshot_label(path: &object_store::path::Path, commit: Option<&Commit>) -> String {
    match commit {
        Some(commit) => format!("v{}:{}", commit.version, commit.snapshot),
        None => {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(path.as_ref().as_bytes());
            format!("unversioned:{}", hex::encode(&digest[..6]))
        }
    }
}

/// [`IndexInfo`] of a freshly opened snapshot (empty caches).
fn index_info(index: &Index, label: String, preload: Preload) -> IndexInfo {
    let def = index.definition();
    IndexInfo {
        dim: def.dim as usize,
        metric: serde_json::to_value(def.metric)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        nlist: def.nlist as usize,
        ntotal: index.manifest().ntotal,
        snapshot: label,
        definition: serde_json::to_value(def).unwrap_or_default(),
        cache: CacheState {
            preloaded: preload != Preload::None,
            preload,
            ..CacheState::default()
        },
        calibration: index.calibration_status(),
        open: index.open_stats(),
    }
}

/// A change's [`BuildError`] by class: what the caller got wrong is a 400
/// with a stable code, a lost race a 409, the store a 503, the rest a 500.
fn classify_change(location: &str, e: BuildError) -> BackendError {
    let message = e.to_string();
    let bad = |code: &'static str| BackendError::BadRequest {
        code,
        message: message.clone(),
    };
    match e {
        BuildError::BadParameter { .. } | BuildError::BadShape { .. } => bad("invalid_change"),
        BuildError::DuplicateId { .. } => bad("duplicate_id"),
        BuildError::NonFiniteValue { .. } | BuildError::NoDirection { .. } => {
            bad("non_finite_value")
        }
        BuildError::Mutation { .. } => bad("not_supported"),
        BuildError::Warehouse(WarehouseError::Conflict { .. }) => BackendError::Conflict {
            location: location.to_string(),
            message,
        },
        BuildError::Store(_)
        | BuildError::Unreadable { .. }
        | BuildError::Warehouse(WarehouseError::Store(_)) => BackendError::Storage {
            location: location.to_string(),
            message,
        },
        _ => BackendError::Corrupt {
            location: location.to_string(),
            message,
        },
    }
}

/// JSON payload rows as a batch of the index's payload columns.
fn payload_batch(
    schema: arrow::datatypes::SchemaRef,
    rows: &[serde_json::Value],
) -> Result<arrow::array::RecordBatch, BuildError> {
    let bad = |e: arrow::error::ArrowError| BuildError::BadParameter {
        name: "payload",
        reason: e.to_string(),
    };
    let mut decoder = arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(rows.len().max(1))
        .build_decoder()
        .map_err(bad)?;
    decoder.serialize(rows).map_err(bad)?;
    Ok(decoder
        .flush()
        .map_err(bad)?
        .unwrap_or_else(|| arrow::array::RecordBatch::new_empty(schema)))
}

impl IndexLoader {
    fn open_store(
        &self,
        location: &str,
    ) -> Result<(Arc<dyn object_store::ObjectStore>, object_store::path::Path), BackendError> {
        crate::store::location::open_with(location, &self.store).map_err(|e| {
            BackendError::Storage {
                location: location.to_string(),
                message: e.to_string(),
            }
        })
    }
}

#[async_trait]
impl BackendLoader for IndexLoader {
    async fn change(
        &self,
        location: &str,
        change: Change,
    ) -> Result<serde_json::Value, BackendError> {
        use crate::builder::mutate;
        let (store, path) = self.open_store(location)?;
        let build = BuildParams {
            progress: ProgressMode::Quiet,
            ..BuildParams::default()
        };
        let policy = CompactPolicy::default();
        let done = match change {
            Change::Delete { ids } => mutate::delete(store, &path, &ids, &build, policy).await,
            Change::DeleteWhere { filter } => {
                mutate::delete_where(store, &path, &filter, &build, policy).await
            }
            Change::Upsert {
                ids,
                vectors,
                payload,
            } => {
                let payload = match payload {
                    Some(rows) => mutate::payload_schema(&store, &path)
                        .await
                        .and_then(|schema| payload_batch(schema, &rows))
                        .map(Some),
                    None => Ok(None),
                };
                match payload {
                    Ok(payload) => {
                        let rows = mutate::UpsertRows {
                            ids,
                            vectors,
                            payload,
                        };
                        mutate::upsert(store, &path, rows, &build, policy).await
                    }
                    Err(e) => Err(e),
                }
            }
        }
        .map_err(|e| classify_change(location, e))?;
        Ok(serde_json::to_value(done).unwrap_or_default())
    }

    async fn current_snapshot(&self, location: &str) -> Result<String, BackendError> {
        let (store, path) = self.open_store(location)?;
        let commit = warehouse::current(&store, &path)
            .await
            .map_err(|e| classify(location, e.into()))?;
        Ok(snapshot_label(&path, commit.as_ref()))
    }

    async fn load(&self, location: &str) -> Result<Arc<dyn SearchBackend>, BackendError> {
        let (store, path) = self.open_store(location)?;
        // One read of the commit log chooses the snapshot, and the label
        // names that same snapshot.
        let index = Index::open_with(store, &path, self.options.clone(), self.preload)
            .await
            .map_err(|e| classify(location, e.into()))?;
        if self.warm && self.preload == Preload::None {
            index
                .warm()
                .await
                .map_err(|e| classify(location, e.into()))?;
        }
        let label = snapshot_label(&path, index.commit());
        let info = index_info(&index, label, self.preload);
        Ok(Arc::new(IndexBackend {
            index: Arc::new(index),
            location: location.to_string(),
            info,
        }))
    }
}
