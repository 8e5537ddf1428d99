//! The HTTP/JSON query service behind `parqivf serve` (axum on tokio).
//!
//! ```text
//!  client ──HTTP──▶ axum router ──▶ routes (parse + validate, JSON errors)
//!                                     │  Arc<dyn SearchBackend>  ◀── reload::Registry (RwLock<Arc<_>> per name,
//!                                     ▼                                 swapped by POST …/reload or a poll interval)
//!                     limits::QueryPool (429 when the queue is full)
//!                                     │  spawn_blocking
//!                                     ▼
//!                     SearchBackend::search_batch  (index::Index adapter, or a test fake)
//! ```
//!
//! [`Server::bind`] opens every index (a bad one is an error before anything
//! listens) and binds the address; [`Server::run`] serves until the shutdown
//! future completes, then lets in-flight requests finish. [`serve`] does both.
//! Endpoints are documented in `docs/http.md` and `manifests/openapi.json`.

pub mod api_error;
pub mod backend;
pub mod index_backend;
pub mod limits;
pub mod metrics;
pub mod reload;
mod routes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use thiserror::Error;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

pub use api_error::ApiError;
pub use backend::{
    BackendError, BackendLoader, CacheState, Hit, IndexInfo, QueryAnswer, QueryStats,
    SearchBackend, SearchRequestParams,
};
pub use limits::{Limits, QueryPool};
pub use reload::{OpenError, Registry, ReloadOutcome};

/// Everything `parqivf serve` can be told.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub addr: SocketAddr,
    /// `(name, location)` of every served index, names unique.
    pub indexes: Vec<(String, String)>,
    /// Per-request limits.
    pub limits: Limits,
    /// Admission slots: queries running or waiting; beyond this, 429.
    pub queue: usize,
    /// Queries computing at once on the blocking pool.
    pub workers: usize,
    /// Re-open every index's location this often and swap in a new snapshot.
    pub reload_interval: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            indexes: Vec::new(),
            limits: Limits::default(),
            queue: 64,
            workers: std::thread::available_parallelism().map_or(1, usize::from),
            reload_interval: None,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("no index to serve: give at least one --index name=<location>")]
    NoIndexes,
    #[error("index name {name:?} is not usable in a URL path: use 1 to 64 of [A-Za-z0-9._-]")]
    BadName { name: String },
    #[error("index name {name:?} is given twice")]
    DuplicateName { name: String },
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// State shared by every handler.
struct AppState {
    registry: Registry,
    limits: Limits,
    pool: QueryPool,
    metrics: metrics::Metrics,
}

/// A server with its indexes open and its address bound, not yet serving.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    app: Arc<AppState>,
    reload_interval: Option<Duration>,
}

fn check_names(indexes: &[(String, String)]) -> Result<(), ServeError> {
    if indexes.is_empty() {
        return Err(ServeError::NoIndexes);
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in indexes {
        let usable = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !usable {
            return Err(ServeError::BadName { name: name.clone() });
        }
        if !seen.insert(name) {
            return Err(ServeError::DuplicateName { name: name.clone() });
        }
    }
    Ok(())
}

impl Server {
    /// Opens every configured index through `loader`, then binds `config.addr`.
    ///
    /// # Errors
    /// [`ServeError`]: no or badly named indexes, an index that fails to open
    /// ([`ServeError::Open`] names it and its location), or a bind failure.
    pub async fn bind(
        config: ServerConfig,
        loader: Arc<dyn BackendLoader>,
    ) -> Result<Self, ServeError> {
        check_names(&config.indexes)?;
        let registry = Registry::open(&config.indexes, loader).await?;
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.addr,
                source,
            })?;
        let local_addr = listener.local_addr()?;
        let app = Arc::new(AppState {
            registry,
            limits: config.limits,
            pool: QueryPool::new(config.queue, config.workers),
            metrics: metrics::Metrics::default(),
        });
        Ok(Self {
            listener,
            local_addr,
            app,
            reload_interval: config.reload_interval,
        })
    }

    /// The bound address (the real port when configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes; then stops accepting and waits for
    /// in-flight requests to finish.
    ///
    /// # Errors
    /// [`ServeError::Io`] if the listener fails.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let poller = self
            .reload_interval
            .map(|every| tokio::spawn(poll_reloads(Arc::clone(&self.app), every)));
        tracing::info!(addr = %self.local_addr, "serving");
        let result = axum::serve(self.listener, router(self.app))
            .with_graceful_shutdown(shutdown)
            .await;
        if let Some(poller) = poller {
            poller.abort();
        }
        tracing::info!("server stopped");
        Ok(result?)
    }
}

/// Opens the indexes, binds, and serves until `shutdown` completes.
///
/// # Errors
/// See [`Server::bind`] and [`Server::run`].
pub async fn serve(
    config: ServerConfig,
    loader: Arc<dyn BackendLoader>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::bind(config, loader).await?.run(shutdown).await
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}

/// Re-opens every index each `every`, swapping in new snapshots; failures are
/// logged and the old snapshot stays in service.
async fn poll_reloads(app: Arc<AppState>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let names: Vec<String> = app.registry.names().map(str::to_owned).collect();
        for name in names {
            match app.registry.reload(&name).await {
                Some(Ok(outcome)) => app.metrics.record_reload(
                    &name,
                    if outcome.changed {
                        "swapped"
                    } else {
                        "unchanged"
                    },
                ),
                Some(Err(err)) => {
                    tracing::warn!(index = %name, error = %err, "periodic reload failed; keeping the old snapshot");
                    app.metrics.record_reload(&name, "failed");
                }
                None => {}
            }
        }
    }
}

fn router(app: Arc<AppState>) -> Router {
    let body_limit = app.limits.max_body_bytes;
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(routes::metrics))
        .route("/v1/indexes", get(routes::list_indexes))
        .route("/v1/indexes/{name}", get(routes::get_index))
        .route("/v1/indexes/{name}/search", post(routes::search))
        .route("/v1/indexes/{name}/reload", post(routes::reload))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            routes::record,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|n| (n.to_string(), "memory:///x".to_string()))
            .collect()
    }

    #[test]
    fn index_names_must_be_present_unique_and_path_safe() {
        assert!(matches!(check_names(&[]), Err(ServeError::NoIndexes)));
        assert!(matches!(
            check_names(&named(&["a/b"])),
            Err(ServeError::BadName { .. })
        ));
        assert!(matches!(
            check_names(&named(&[""])),
            Err(ServeError::BadName { .. })
        ));
        assert!(
            matches!(check_names(&named(&["a", "a"])), Err(ServeError::DuplicateName { name }) if name == "a")
        );
        assert!(check_names(&named(&["sift-1m", "docs_v2.1"])).is_ok());
    }
}
