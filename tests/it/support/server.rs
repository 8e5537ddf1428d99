//! Test support for the HTTP service: a brute-force in-memory
//! [`SearchBackend`] whose snapshot number is encoded in every rowid
//! (`rowid = snapshot * ROWID_STRIDE + row`), a loader with publishable
//! snapshots and injectable failures (counting opens and snapshot probes), and
//! a helper that starts the server on 127.0.0.1:0 in-process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parqivf::probe::query::{IndexShape, QueryPlan};
use parqivf::server::{
    AuthToken, BackendError, BackendLoader, CacheState, Hit, IndexInfo, SearchBackend,
    SearchParams, SearchResult, SearchStats, Server, ServerConfig,
};

/// The bearer token of the test servers that have one.
pub use parqivf::server::body_vector::pack;

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// `TOKEN` as the server's configured token.
pub fn token() -> Option<AuthToken> {
    Some(AuthToken::new(TOKEN).expect("valid test token"))
}

/// The source location every fake index's definition names (shown only to
/// authenticated clients).
pub const SOURCE_LOCATION: &str = "s3://private-bucket/tables/docs";

/// Rowids of snapshot `s` lie in `[s * ROWID_STRIDE, (s + 1) * ROWID_STRIDE)`.
pub const ROWID_STRIDE: i64 = 1_000_000;

/// Holds searches (asynchronously) until opened; counts searches that reached it.
#[derive(Default)]
pub struct Gate {
    open: AtomicBool,
    wake: tokio::sync::Notify,
    pub entered: AtomicUsize,
}

impl Gate {
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    async fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        loop {
            // Registered before the check, so an `open` in between still wakes it.
            let woken = self.wake.notified();
            if self.open.load(Ordering::SeqCst) {
                return;
            }
            woken.await;
        }
    }

    /// Waits (bounded) until `n` searches are blocked at the gate.
    pub async fn wait_entered(&self, n: usize) {
        for _ in 0..500 {
            if self.entered.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "only {} searches reached the gate",
            self.entered.load(Ordering::SeqCst)
        );
    }
}

/// Exact L2² search over vectors held in memory.
pub struct BruteForce {
    pub dim: usize,
    pub nlist: usize,
    pub snapshot: u32,
    pub vectors: Vec<f32>,
    pub gate: Option<Arc<Gate>>,
    pub fail: Option<BackendError>,
}

impl BruteForce {
    /// `n` seeded random vectors of `dim` (same data for the same seed).
    pub fn random(n: usize, dim: usize, seed: u64, snapshot: u32) -> Self {
        let vectors = super::fixtures::random_vectors(n, dim, seed);
        Self {
            dim,
            nlist: 8,
            snapshot,
            vectors,
            gate: None,
            fail: None,
        }
    }

    pub fn rowid(&self, row: usize) -> i64 {
        i64::from(self.snapshot) * ROWID_STRIDE + row as i64
    }

    /// The exact answer to one query (what the HTTP answer must equal).
    pub fn answer(&self, query: &[f32], params: &SearchParams) -> SearchResult {
        let mut scored: Vec<(f32, i64)> = self
            .vectors
            .chunks_exact(self.dim)
            .enumerate()
            .map(|(row, v)| {
                (
                    v.iter()
                        .zip(query)
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f32>(),
                    self.rowid(row),
                )
            })
            .collect();
        scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        scored.truncate(params.k);
        let hits = scored
            .into_iter()
            .map(|(distance, rowid)| Hit {
                rowid,
                distance,
                payload: params.include_payload.then(|| {
                    let mut m = serde_json::Map::new();
                    m.insert("label".into(), format!("row-{rowid}").into());
                    m
                }),
            })
            .collect();
        let bytes = (self.vectors.len() * 4) as u64;
        SearchResult {
            hits,
            stats: SearchStats {
                requests: 2,
                bytes,
                row_groups_read: 1,
                ..SearchStats::default()
            },
            payload: None,
        }
    }
}

#[async_trait::async_trait]
impl SearchBackend for BruteForce {
    fn info(&self) -> IndexInfo {
        IndexInfo {
            dim: self.dim,
            metric: "l2".into(),
            nlist: self.nlist,
            ntotal: (self.vectors.len() / self.dim) as u64,
            snapshot: format!("snap-{}", self.snapshot),
            definition: serde_json::json!({
                "provider": "parquet",
                "dim": self.dim,
                "source": { "provider": "parquet", "location": SOURCE_LOCATION, "table-identity": "t1" }
            }),
            cache: CacheState {
                preloaded: true,
                preload: parqivf::index::Preload::All,
                footer_cache_bytes: 0,
                postings_cache_bytes: 4 * self.vectors.len() as u64,
                disk: None,
            },
            calibration: None,
            open: Default::default(),
        }
    }

    async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<SearchResult>, BackendError> {
        if let Some(gate) = &self.gate {
            gate.pass().await;
        }
        if let Some(err) = &self.fail {
            return Err(err.clone());
        }
        // The index's own checks, as the real backend makes them.
        let shape = IndexShape {
            dim: self.dim,
            nlist: self.nlist,
            metric: parqivf::distance::Metric::L2,
            has_codes: false,
            calibrated: false,
            rerank: parqivf::index::DEFAULT_RERANK,
            rerank_k: 0,
        };
        QueryPlan::new(queries, params, shape).map_err(|e| BackendError::BadRequest {
            code: e.code(),
            message: e.to_string(),
        })?;
        Ok(queries
            .chunks_exact(self.dim)
            .map(|q| self.answer(q, params))
            .collect())
    }
}

/// Locations → currently published snapshot (or an error to return on open).
#[derive(Default)]
pub struct FakeLoader {
    published: Mutex<HashMap<String, Result<Arc<BruteForce>, BackendError>>>,
    /// Snapshots opened (`load` calls).
    pub loads: AtomicUsize,
    /// Snapshot identities asked for (`current_snapshot` calls).
    pub probes: AtomicUsize,
    /// Milliseconds each `load` and `current_snapshot` takes (a slow store).
    pub delay_ms: AtomicU64,
}

impl FakeLoader {
    pub fn publish(&self, location: &str, backend: Arc<BruteForce>) {
        self.published
            .lock()
            .unwrap()
            .insert(location.to_owned(), Ok(backend));
    }

    pub fn break_location(&self, location: &str, err: BackendError) {
        self.published
            .lock()
            .unwrap()
            .insert(location.to_owned(), Err(err));
    }
}

impl FakeLoader {
    async fn published(&self, location: &str) -> Result<Arc<BruteForce>, BackendError> {
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        match self.published.lock().unwrap().get(location) {
            Some(Ok(backend)) => Ok(Arc::clone(backend)),
            Some(Err(err)) => Err(err.clone()),
            None => Err(BackendError::Storage {
                location: location.to_owned(),
                message: "not found".into(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl BackendLoader for FakeLoader {
    async fn current_snapshot(&self, location: &str) -> Result<String, BackendError> {
        self.probes.fetch_add(1, Ordering::SeqCst);
        Ok(self.published(location).await?.info().snapshot)
    }

    async fn load(&self, location: &str) -> Result<Arc<dyn SearchBackend>, BackendError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        Ok(self.published(location).await? as Arc<dyn SearchBackend>)
    }
}

/// A server running in-process until `stop` is sent.
pub struct Running {
    pub addr: SocketAddr,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<Result<(), parqivf::server::ServeError>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Signals shutdown and waits (bounded) for the server to stop.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within 10 s")
            .expect("server task")
            .expect("server ran without error");
    }
}

/// Binds `config` (its address replaced by 127.0.0.1:0) and serves in a task.
pub async fn start(mut config: ServerConfig, loader: Arc<FakeLoader>) -> Running {
    config.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = Server::bind(config, loader).await.expect("server binds");
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        stopped.await.ok();
    }));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

/// `(rowid, distance)` pairs of an HTTP result object.
pub fn hits_of(result: &serde_json::Value) -> Vec<(i64, f32)> {
    result["hits"]
        .as_array()
        .expect("hits array")
        .iter()
        .map(|h| {
            (
                h["rowid"].as_i64().expect("rowid"),
                h["distance"].as_f64().expect("distance") as f32,
            )
        })
        .collect()
}

/// `(rowid, distance)` pairs of a direct backend answer.
pub fn pairs(answer: &SearchResult) -> Vec<(i64, f32)> {
    answer.hits.iter().map(|h| (h.rowid, h.distance)).collect()
}
