//! Request limits and the bounded query pool.
//!
//! Backpressure: a query first takes one of `queue` admission slots without
//! waiting — if none is free the request is answered 429 at once (no unbounded
//! queue builds up in memory). Holding a slot it waits (asynchronously) for one
//! of `workers` permits, then runs as its own tokio task holding both until it
//! ends (even if the client has gone): the search awaits its IO there and
//! hands its compute to rayon (see `Index::search_batch`), so the runtime's
//! workers never compute or block. At most `workers` searches run at once and
//! at most `queue - workers` wait behind them.
//!
//! [`ConnectionLimits`] bound what a client can hold without sending a
//! request: at most `max_connections` connections are open (further ones wait
//! in the listen backlog until one closes); a request head must arrive within
//! `header_read_timeout` of the connection becoming idle (hyper's header read
//! timeout, so a connection that trickles header lines, or an idle keep-alive
//! one, is closed); a body must arrive whole within `body_read_timeout` of its
//! head (else 408). With these, a slow client costs one slot for at most the
//! timeout, and legitimate clients keep being served.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::api_error::ApiError;

/// Limits on one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Largest accepted request body; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Most query vectors in one request.
    pub max_batch: usize,
    /// Largest accepted `k`.
    pub max_k: usize,
    /// `k` when the request omits it.
    pub default_k: usize,
    /// `nprobe` of a request that names neither `nprobe` nor
    /// `target_recall` (at most the index's `nlist`).
    pub default_nprobe: Option<usize>,
    /// `target_recall` of a request that names neither. Neither default:
    /// the index's own ([`crate::index::SearchParams::probe`]).
    pub default_target_recall: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            max_batch: 256,
            max_k: 1000,
            default_k: 10,
            default_nprobe: None,
            default_target_recall: None,
        }
    }
}

/// Limits on connections (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Longest wait for a complete request head on an open connection.
    pub header_read_timeout: Duration,
    /// Longest wait for a complete request body once its head arrived.
    pub body_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        }
    }
}

/// Admission slots plus run permits in front of each search task.
#[derive(Debug, Clone)]
pub struct QueryPool {
    queue: usize,
    admission: Arc<Semaphore>,
    workers: Arc<Semaphore>,
}

impl QueryPool {
    /// A pool admitting `queue` queries of which `workers` compute at once
    /// (both at least 1; `workers` is capped at `queue`).
    pub fn new(queue: usize, workers: usize) -> Self {
        let queue = queue.max(1);
        let workers = workers.clamp(1, queue);
        Self {
            queue,
            admission: Arc::new(Semaphore::new(queue)),
            workers: Arc::new(Semaphore::new(workers)),
        }
    }

    /// Runs `job` as its own task once admitted and given a run permit.
    ///
    /// # Errors
    /// [`ApiError`] 429 `overloaded` when every admission slot is taken, 500
    /// `internal` if the job panicked.
    pub async fn run<T, F>(&self, job: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let admitted = Arc::clone(&self.admission)
            .try_acquire_owned()
            .map_err(|_| ApiError::overloaded(self.queue))?;
        let worker = Arc::clone(&self.workers)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("query pool closed"))?;
        let result = tokio::spawn(async move {
            let _slots = (admitted, worker);
            job.await
        })
        .await;
        result.map_err(|err| ApiError::internal(format!("search task failed: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use tokio::sync::oneshot;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queue_rejects_at_once_and_frees_slots_after() {
        let pool = QueryPool::new(1, 1);
        let (entered_tx, entered_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        let busy = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(async move {
                    entered_tx.send(()).ok();
                    release_rx.await.ok();
                    7
                })
                .await
            })
        };
        entered_rx.await.ok();
        let rejected = pool.run(async { 1 }).await.unwrap_err();
        assert_eq!(rejected.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(rejected.code, "overloaded");
        release_tx.send(()).ok();
        assert_eq!(busy.await.ok().and_then(Result::ok), Some(7));
        assert_eq!(pool.run(async { 2 }).await.ok(), Some(2));
    }

    #[tokio::test]
    async fn panicking_job_is_a_500_not_a_crash() {
        let pool = QueryPool::new(2, 1);
        let err = pool
            .run::<u8, _>(async { panic!("boom") })
            .await
            .unwrap_err();
        assert_eq!(err.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(pool.run(async { 3 }).await.ok(), Some(3));
    }
}
