//! Recall watched in production (`serve --recall-sample F`): a share `F`
//! of the queries answered (every `1/F`-th, counted, so the share is
//! exact) is searched again exhaustively in the background: every list,
//! `100 × k` candidates re-ranked by their exact distance, the same filter.
//! The share of that reference's top-k the served answer held is the
//! query's measured recall; it is exported next to the answer's estimate
//! (Prometheus histograms `parqivf_recall_measured` and
//! `parqivf_recall_estimated`), and a warning is logged when their means
//! over the last [`WINDOW`] samples differ by more than [`DIVERGENCE`].
//!
//! The cost is bounded: one re-run at a time, queued at most [`QUEUE`]
//! deep (a full queue skips the sample, counted), and after each re-run
//! the worker rests so that it is busy at most `cpu_share` of the time.
//! The re-runs go through the backend like any search, but never through
//! the request pool, so they take no admission slot.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::backend::SearchBackend;
use super::metrics::Metrics;
use crate::index::{SearchParams, SearchResult};

/// Candidates re-ranked per neighbour by the reference search.
pub const REFERENCE_RERANK: usize = 100;
/// Samples waiting at most; more are skipped.
pub const QUEUE: usize = 64;
/// Samples whose mean measured and estimated recall are compared.
pub const WINDOW: usize = 200;
/// The difference of the two means that is logged as a warning.
pub const DIVERGENCE: f64 = 0.05;

/// What `--recall-sample` asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallSampling {
    /// Share of queries re-run (0 off, 1 every query).
    pub rate: f64,
    /// Share of the time the re-runs may keep the worker busy.
    pub cpu_share: f64,
}

/// One answered query to re-run.
struct Sample {
    index: String,
    backend: Arc<dyn SearchBackend>,
    query: Vec<f32>,
    params: SearchParams,
    served: Vec<i64>,
    estimate: Option<f64>,
}

/// The sampler: which queries to re-run, and the queue to its worker.
pub(super) struct RecallSampler {
    rate: f64,
    seen: AtomicU64,
    tx: mpsc::Sender<Sample>,
}

impl RecallSampler {
    /// The sampler, its worker spawned on the current runtime.
    pub(super) fn start(sampling: RecallSampling, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(worker(rx, sampling.cpu_share.clamp(0.001, 1.0), metrics));
        RecallSampler {
            rate: sampling.rate.clamp(0.0, 1.0),
            seen: AtomicU64::new(0),
            tx,
        }
    }

    /// Offer the answers of one request; the sampled ones are queued.
    pub(super) fn offer(
        &self,
        index: &str,
        backend: &Arc<dyn SearchBackend>,
        queries: &[f32],
        params: &SearchParams,
        answers: &[SearchResult],
        metrics: &Metrics,
    ) {
        let dim = queries.len() / answers.len().max(1);
        for (query, answer) in queries.chunks_exact(dim.max(1)).zip(answers) {
            // Query n is sampled when ⌊(n+1)·rate⌋ passes an integer.
            let n = self.seen.fetch_add(1, Ordering::Relaxed) as f64;
            if ((n + 1.0) * self.rate).floor() <= (n * self.rate).floor() {
                continue;
            }
            let sample = Sample {
                index: index.to_string(),
                backend: Arc::clone(backend),
                query: query.to_vec(),
                params: params.clone(),
                served: answer.hits.iter().map(|h| h.rowid).collect(),
                estimate: answer.stats.estimated_recall,
            };
            if self.tx.try_send(sample).is_err() {
                metrics.record_recall_skipped(index);
            }
        }
    }
}

/// The share of `reference` that `served` holds (1 for an empty reference).
pub fn recall(served: &[i64], reference: &[i64]) -> f64 {
    if reference.is_empty() {
        return 1.0;
    }
    let found = reference.iter().filter(|id| served.contains(id)).count();
    found as f64 / reference.len() as f64
}

/// Re-runs samples one at a time, resting to stay within `cpu_share`.
async fn worker(mut rx: mpsc::Receiver<Sample>, cpu_share: f64, metrics: Arc<Metrics>) {
    let mut window: VecDeque<(f64, f64)> = VecDeque::with_capacity(WINDOW);
    let mut warned_at = 0usize;
    let mut count = 0usize;
    while let Some(s) = rx.recv().await {
        let t = Instant::now();
        let nlist = s.backend.info().nlist;
        let params = SearchParams {
            nprobe: Some(nlist.max(1)),
            target_recall: None,
            max_nprobe: None,
            rerank: Some(REFERENCE_RERANK),
            include_payload: false,
            ..s.params.clone()
        };
        match s.backend.search_batch(&s.query, &params).await {
            Ok(mut reference) if reference.len() == 1 => {
                let ids: Vec<i64> = reference.remove(0).hits.iter().map(|h| h.rowid).collect();
                let measured = recall(&s.served, &ids);
                metrics.record_recall(&s.index, measured, s.estimate);
                if let Some(e) = s.estimate {
                    if window.len() == WINDOW {
                        window.pop_front();
                    }
                    window.push_back((measured, e));
                    count += 1;
                    let n = window.len() as f64;
                    let (m, e) = window
                        .iter()
                        .fold((0.0, 0.0), |(a, b), (m, e)| (a + m / n, b + e / n));
                    if window.len() >= WINDOW / 4
                        && (m - e).abs() > DIVERGENCE
                        && count >= warned_at + WINDOW
                    {
                        warned_at = count;
                        tracing::warn!(
                            index = %s.index,
                            measured = m,
                            estimated = e,
                            samples = window.len(),
                            "measured recall differs from the estimate by more than {DIVERGENCE}: the calibration may be stale (build again or compact --retrain)"
                        );
                    }
                }
            }
            Ok(_) => metrics.record_recall_skipped(&s.index),
            Err(e) => {
                metrics.record_recall_skipped(&s.index);
                tracing::debug!(index = %s.index, error = %e, "recall sample failed");
            }
        }
        let busy = t.elapsed().as_secs_f64();
        let rest = busy * (1.0 - cpu_share) / cpu_share;
        if rest > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(rest.min(60.0))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_is_the_share_of_the_reference_served() {
        assert_eq!(recall(&[1, 2, 3], &[3, 4]), 0.5);
        assert_eq!(recall(&[], &[]), 1.0);
        assert_eq!(recall(&[9], &[1]), 0.0);
    }
}
