//! The HTTP/JSON query service behind `parqivf serve` (axum on tokio).
//!
//! ```text
//!  client ──HTTP──▶ axum router ──▶ routes (parse + validate, JSON errors)
//!                                     │  Arc<dyn SearchBackend>  ◀── reload::Registry (RwLock<Arc<_>> per name,
//!                                     ▼                                 swapped by POST …/reload or a poll interval)
//!                     limits::QueryPool (429 when the queue is full, `workers` at once)
//!                                     │  an async task (IO awaited; compute on rayon)
//!                                     ▼
//!                     SearchBackend::search_batch  (index::Index adapter, or a test fake)
//! ```
//!
//! [`Server::bind`] refuses a non-loopback address without an auth token,
//! opens every index (a bad one is an error before anything listens) and binds
//! the address; [`Server::run`] serves until the shutdown future completes,
//! then lets in-flight requests finish. [`serve`] does all three. Endpoints
//! are documented in `docs/http.md` and `manifests/openapi.json`.
//!
//! Connections are accepted here rather than by `axum::serve`, which offers
//! neither a header read timeout nor a connection cap: an accept loop holds
//! one permit of a `max_connections` semaphore per open connection, and each
//! connection is served by hyper's HTTP/1 builder with its header read
//! timeout (see [`limits::ConnectionLimits`]), watched by hyper-util's
//! graceful shutdown. Around the routes (outermost first): request id, trace
//! span, metrics, error rendering (`api_error::finish`), bearer-token auth
//! ([`auth`]), and tower-http's body limit, which answers 413 from a declared
//! `Content-Length` before any of the body is read.

/// Share of the time `--recall-sample` re-runs may keep their worker busy
/// by default.
pub const DEFAULT_RECALL_CPU_SHARE: f64 = 0.05;

pub mod api_error;
pub mod auth;
pub mod backend;
pub mod body_vector;
pub mod index_backend;
pub mod limits;
pub mod metrics;
pub mod recall_sample;
pub mod reload;
mod routes;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderName;
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use state::AppState;

pub use crate::index::{Hit, SearchParams, SearchResult, SearchStats};
pub use api_error::ApiError;
pub use auth::{AuthToken, AuthTokenError};
pub use backend::{BackendError, BackendLoader, CacheState, IndexInfo, SearchBackend};
pub use limits::{ConnectionLimits, Limits, QueryPool};
pub use reload::{OpenError, Registry, ReloadError, ReloadOutcome};
pub use routes::JSON_IN_PLACE_BYTES;

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
    /// Searches running at once (their compute on the rayon pool).
    pub workers: usize,
    /// Re-open every index's location this often and swap in a new snapshot.
    pub reload_interval: Option<Duration>,
    /// Connection cap and read timeouts.
    pub connections: ConnectionLimits,
    /// Bearer token required by every endpoint but `/healthz`; without one the
    /// server binds only to loopback and refuses `reload`.
    pub auth_token: Option<AuthToken>,
    /// Shortest time between two client-requested reloads of one index.
    pub reload_min_interval: Duration,
    /// Re-run a share of queries exhaustively and export measured recall
    /// (rate 0: off).
    pub recall_sampling: recall_sample::RecallSampling,
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
            connections: ConnectionLimits::default(),
            auth_token: None,
            reload_min_interval: Duration::from_secs(1),
            recall_sampling: recall_sample::RecallSampling {
                rate: 0.0,
                cpu_share: DEFAULT_RECALL_CPU_SHARE,
            },
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
    #[error(
        "refusing to listen on {addr} without authentication: it is not a loopback address, so \
         give a bearer token with --auth-token-file PATH or PARQIVF_AUTH_TOKEN"
    )]
    TokenRequired { addr: SocketAddr },
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
    /// [`ServeError`]: no or badly named indexes, a non-loopback address
    /// without an auth token ([`ServeError::TokenRequired`], checked before
    /// anything is opened or bound), an index that fails to open
    /// ([`ServeError::Open`] names it and its location), or a bind failure.
    pub async fn bind(
        config: ServerConfig,
        loader: Arc<dyn BackendLoader>,
    ) -> Result<Self, ServeError> {
        check_names(&config.indexes)?;
        if config.auth_token.is_none() && !config.addr.ip().is_loopback() {
            return Err(ServeError::TokenRequired { addr: config.addr });
        }
        let registry = Registry::open(&config.indexes, loader).await?;
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.addr,
                source,
            })?;
        let local_addr = listener.local_addr()?;
        let metrics = Arc::new(metrics::Metrics::default());
        let app = Arc::new(AppState {
            registry,
            limits: config.limits,
            connections: config.connections,
            pool: QueryPool::new(config.queue, config.workers),
            metrics: Arc::clone(&metrics),
            recall: (config.recall_sampling.rate > 0.0)
                .then(|| recall_sample::RecallSampler::start(config.recall_sampling, metrics)),
            auth: config.auth_token,
            reload_min_interval: config.reload_min_interval,
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

    /// Serves until `shutdown` completes; then stops accepting, closes idle
    /// connections and waits for in-flight requests to finish.
    ///
    /// # Errors
    /// None today: accept failures (e.g. out of file descriptors) are logged
    /// and retried; the `Result` is kept for listener failures to come.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let poller = self
            .reload_interval
            .map(|every| tokio::spawn(poll_reloads(Arc::clone(&self.app), every)));
        let limits = self.app.connections;
        tracing::info!(
            addr = %self.local_addr,
            max_connections = limits.max_connections,
            header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
            body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
            auth = self.app.auth.is_some(),
            "serving"
        );
        let service = TowerToHyperService::new(router(Arc::clone(&self.app)));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let graceful = GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            // A free slot first, then accept: beyond the cap, connections wait
            // in the kernel's listen backlog instead of costing a descriptor here.
            let slot = tokio::select! {
                biased;
                () = &mut shutdown => break,
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break, // never closed
                },
            };
            let (stream, peer) = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of descriptors or a connection reset before accept:
                        // back off briefly and go on serving the connections open.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            self.app.metrics.connection_opened();
            let connection =
                graceful.watch(http.serve_connection(TokioIo::new(stream), service.clone()));
            let app = Arc::clone(&self.app);
            tokio::spawn(async move {
                let result = connection.await;
                let header_timeout = match &result {
                    Err(err) if err.is_timeout() => {
                        tracing::debug!(%peer, "request head not received in time; connection closed");
                        true
                    }
                    Err(err) => {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                        false
                    }
                    Ok(()) => false,
                };
                app.metrics.connection_closed(header_timeout);
                drop(slot);
            });
        }
        drop(self.listener);
        graceful.shutdown().await;
        if let Some(poller) = poller {
            poller.abort();
        }
        tracing::info!("server stopped");
        Ok(())
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
            // The server's own schedule is not rate-limited; an unchanged
            // snapshot costs one read of the commit log.
            match app.registry.reload(&name, Duration::ZERO).await {
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
    let request_id = HeaderName::from_static(api_error::REQUEST_ID);
    // `Router::layer` wraps each route: the last layer added runs first.
    // Authentication per group of routes: `/healthz` is open, queries and
    // listings need the token when one is configured, `reload` needs one.
    let guarded = Router::new()
        .route(routes::METRICS, get(routes::metrics))
        .route(routes::INDEXES, get(routes::list_indexes))
        .route(routes::INDEX, get(routes::get_index))
        .route(routes::SEARCH, post(routes::search))
        .route_layer(axum::middleware::from_fn_with_state(
            app.auth.clone(),
            auth::require,
        ));
    let admin = Router::new()
        .route(routes::RELOAD, post(routes::reload))
        .route(routes::DELETE, post(routes::delete))
        .route(routes::UPSERT, post(routes::upsert))
        .route(routes::WARM, post(routes::warm))
        .route_layer(axum::middleware::from_fn_with_state(
            app.auth.clone(),
            auth::require_token,
        ));
    Router::new()
        .route(routes::HEALTHZ, get(routes::healthz))
        .merge(guarded)
        .merge(admin)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            api_error::finish,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            routes::record,
        ))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::extract::Request| {
                let id = request
                    .headers()
                    .get(api_error::REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %id)
            }),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
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
