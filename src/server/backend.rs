//! The seam between the HTTP service and the search library: the server talks
//! to an index only through [`SearchBackend`] (one opened snapshot) and
//! [`BackendLoader`] (opens the current snapshot of a named location). The
//! adapter from `index::Index` implements both; tests use an in-memory
//! brute-force backend. Search is synchronous on purpose: the server always
//! calls it from its bounded blocking pool (see `limits`), never from an async
//! task, so a backend may compute (rayon) or block on IO freely.

use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

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
}

/// Memory held by the backend's caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheState {
    /// Every posting is held in memory (`--preload`).
    pub preloaded: bool,
    /// Bytes currently held by the footer cache.
    pub footer_cache_bytes: u64,
    /// Bytes currently held by the decoded-postings cache (every posting
    /// after `--preload`).
    pub postings_cache_bytes: u64,
}

/// Validated per-request search parameters, as handed to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchRequestParams {
    /// Number of neighbours per query, `1..=max_k`.
    pub k: usize,
    /// Number of leaf lists probed, `1..=nlist`.
    pub nprobe: usize,
    /// Whether hits must carry their payload columns.
    pub include_payload: bool,
}

/// One neighbour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Source row identity.
    pub rowid: i64,
    /// Distance under the index metric (smaller is nearer).
    pub distance: f32,
    /// Payload columns, present only when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Object-store and timing figures of one query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueryStats {
    /// Object-store requests issued (GET, HEAD, LIST).
    pub requests: u64,
    /// Bytes fetched from the object store.
    pub bytes: u64,
    /// Footers fetched from storage.
    pub footers_read: u64,
    /// Footers served by the footer cache.
    pub footers_from_cache: u64,
    /// Row groups fetched and scanned.
    pub row_groups_read: u64,
    /// Microseconds spent choosing the lists to probe.
    pub probe_us: u64,
    /// Microseconds spent planning row groups.
    pub plan_us: u64,
    /// Microseconds spent fetching.
    pub fetch_us: u64,
    /// Microseconds spent computing distances.
    pub scan_us: u64,
}

/// The answer to one query vector.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryAnswer {
    /// Hits, nearest first, ties by rowid.
    pub hits: Vec<Hit>,
    /// Per-query IO statistics (always collected; returned over HTTP on request).
    pub stats: QueryStats,
}

/// Why a backend could not answer or open. The class decides the HTTP status:
/// bad input is a 400, a storage fault a 503, a corrupt index a 500.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum BackendError {
    /// The request is invalid for this index (the server validates first; this
    /// is the backend's own check).
    #[error("bad request: {message}")]
    BadRequest { message: String },
    /// The object store failed or is unreachable; retrying may succeed.
    #[error("storage fault at {location}: {message}")]
    Storage { location: String, message: String },
    /// The stored index is inconsistent (e.g. a row-group cid contradicts its statistics).
    #[error("corrupt index at {location}: {message}")]
    Corrupt { location: String, message: String },
}

/// One opened, immutable index snapshot.
pub trait SearchBackend: Send + Sync + 'static {
    /// Shape, snapshot identity and cache state. Called on async threads for
    /// every request, so it must be cheap (no IO, no blocking).
    fn info(&self) -> IndexInfo;

    /// Answers `queries.len() / dim` queries laid out row-major, one
    /// [`QueryAnswer`] per query in order. Called on a blocking thread.
    ///
    /// # Errors
    /// [`BackendError`] by class: bad request, storage fault, corrupt index.
    fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchRequestParams,
    ) -> Result<Vec<QueryAnswer>, BackendError>;
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
}
