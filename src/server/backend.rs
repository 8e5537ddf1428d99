//! The seam between the HTTP service and the search library: the server talks
//! to an index only through [`SearchBackend`] (one opened snapshot) and
//! [`BackendLoader`] (opens the current snapshot of a named location). The
//! adapter from `index::Index` implements both; tests use an in-memory
//! brute-force backend. The request and answer types are the library's own
//! ([`SearchParams`], [`SearchResult`] with its [`crate::index::Hit`]s and
//! [`crate::index::SearchStats`]), so HTTP names follow them. Search is async:
//! a backend awaits its IO and runs its compute off the tokio workers (the
//! index on rayon); the server bounds how many searches run at once (see
//! `limits`).

use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

use crate::index::{SearchParams, SearchResult, SearchStats};

/// What `GET /v1/indexes/{name}` reports about one opened snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexInfo {
    /// Vector dimension; queries of any other length are rejected with 400.
    pub dim: usize,
    /// Distance metric name as written in the index definition (`l2`, `ip`, `cosine`).
    pub metric: String,
    /// Number of leaf lists; `nprobe` may not exceed it.
    pub nlist: usize,
    /// Number of indexed vectors.
    pub ntotal: u64,
    /// Identity of the opened snapshot (changes when a new one is published).
    pub snapshot: String,
    /// The index-provider definition document (`index.json`) as stored.
    pub definition: serde_json::Value,
    /// Cache and preload state.
    pub cache: CacheState,
    /// What opening the served snapshot cost (its documents' rounds,
    /// requests, bytes, hedges and time).
    pub open: crate::index::OpenStats,
    /// The build's recall calibration: rows measured, rows now, stale
    /// (absent for an index without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::probe::target::CalibrationStatus>,
}

/// Memory held by the backend's caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheState {
    /// Something is held in memory (`--preload codes|all`).
    pub preloaded: bool,
    /// What is held in memory: `none`, `codes` or `all`.
    pub preload: crate::index::Preload,
    /// Bytes currently held by the footer cache.
    pub footer_cache_bytes: u64,
    /// Bytes currently held by the decoded-postings cache (every posting
    /// after `--preload`).
    pub postings_cache_bytes: u64,
    /// The disk tier (`--cache-dir`), shared by every index of the process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::store::disk_cache::DiskCacheState>,
}

/// Why a backend could not answer or open. The class decides the HTTP status:
/// bad input is a 400, a storage fault a 503, a corrupt index a 500.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum BackendError {
    /// The request is invalid for this index (the server validates first; this
    /// is the backend's own check).
    #[error("bad request: {message}")]
    BadRequest {
        /// The rule broken ([`crate::index::QueryError::code`]).
        code: &'static str,
        message: String,
    },
    /// The request's filter does not parse, names an unknown payload column
    /// or compares a column with a literal of another type.
    #[error("invalid filter: {message}")]
    InvalidFilter { message: String },
    /// The object store failed or is unreachable; retrying may succeed.
    #[error("storage fault at {location}: {message}")]
    Storage { location: String, message: String },
    /// The stored index is inconsistent (e.g. a row-group cid contradicts its statistics).
    #[error("corrupt index at {location}: {message}")]
    Corrupt { location: String, message: String },
    /// Another publisher committed the version a change was writing; it
    /// changed nothing (retry).
    #[error("conflict at {location}: {message}")]
    Conflict { location: String, message: String },
}

/// A change by id (`POST /v1/indexes/{name}/delete|upsert`), published as
/// the next version of the index.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Delete the live rows with these ids.
    Delete { ids: Vec<i64> },
    /// Delete the live rows whose payload matches this SQL filter.
    DeleteWhere { filter: String },
    /// Write these rows (`ids.len()` vectors, row-major); each id's live row
    /// is replaced. `payload`: one JSON object per row with the index's
    /// payload columns.
    Upsert {
        ids: Vec<i64>,
        vectors: Vec<f32>,
        payload: Option<Vec<serde_json::Value>>,
    },
}

/// One opened, immutable index snapshot.
#[async_trait::async_trait]
pub trait SearchBackend: Send + Sync + 'static {
    /// Shape, snapshot identity and cache state. Called on async threads for
    /// every request, so it must be cheap (no IO, no blocking).
    fn info(&self) -> IndexInfo;

    /// Answers `queries.len() / dim` queries laid out row-major, one
    /// [`SearchResult`] per query in order. Called from an async task: it
    /// must not block the thread (await IO, run compute on rayon or the
    /// blocking pool).
    ///
    /// # Errors
    /// [`BackendError`] by class: bad request, storage fault, corrupt index.
    async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<SearchResult>, BackendError>;

    /// Fill the caches ahead of traffic (`POST …/warm`): what it read from
    /// each tier. A backend holding everything in memory reads nothing.
    ///
    /// # Errors
    /// [`BackendError`] by class, as a search's.
    async fn warm(&self) -> Result<SearchStats, BackendError> {
        Ok(SearchStats::default())
    }
}

/// Opens the snapshot currently published at a location.
#[async_trait::async_trait]
pub trait BackendLoader: Send + Sync + 'static {
    /// The identity ([`IndexInfo::snapshot`]) of the snapshot currently
    /// published at `location`, found without opening it (for the real index:
    /// one read of the commit log). A reload compares it with the served
    /// snapshot's and opens nothing when they are equal.
    ///
    /// # Errors
    /// As [`BackendLoader::load`].
    async fn current_snapshot(&self, location: &str) -> Result<String, BackendError>;

    /// Opens the current snapshot of `location`.
    ///
    /// # Errors
    /// [`BackendError::Storage`] when the store fails, [`BackendError::Corrupt`]
    /// or [`BackendError::BadRequest`] when the location holds no valid index.
    async fn load(&self, location: &str) -> Result<Arc<dyn SearchBackend>, BackendError>;

    /// Publishes `change` to the index at `location` as its next version and
    /// returns what was done (the library's summary, as JSON). The default
    /// refuses: a loader that serves something other than an index store
    /// cannot change it.
    ///
    /// # Errors
    /// [`BackendError::BadRequest`] for a change the index refuses,
    /// [`BackendError::Conflict`] for a lost race, and storage errors.
    async fn change(
        &self,
        location: &str,
        change: Change,
    ) -> Result<serde_json::Value, BackendError> {
        let _ = (location, change);
        Err(BackendError::BadRequest {
            code: "not_supported",
            message: "this server cannot change its indexes".into(),
        })
    }
}
