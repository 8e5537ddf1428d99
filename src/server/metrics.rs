//! Prometheus metrics: request counts by route and status, a latency
//! histogram per route, queries answered and object-store requests and bytes
//! per index (summed from each query's IO stats, so they stay monotonic
//! across snapshot reloads), overload rejections, open connections and
//! connections closed by the header read timeout, and per-index gauges taken
//! from the backend's info at scrape time (cache bytes included). Rendered as Prometheus text
//! exposition format 0.0.4 by [`Metrics::render`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::backend::{IndexInfo, QueryStats};

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One per-index metric: name, help text, and how to read its value.
type Series<T> = (&'static str, &'static str, fn(&T) -> u64);

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct IndexCounters {
    queries: u64,
    store_requests: u64,
    store_bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    per_index: BTreeMap<String, IndexCounters>,
    reloads: BTreeMap<(String, &'static str), u64>,
}

/// Process-wide counters.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    header_timeouts: AtomicU64,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A poisoned lock only means another thread panicked mid-update of
        // plain counters; the counters are still usable.
        let mut guard = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Records an accepted connection.
    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a closed connection (`header_timeout`: closed by the header read timeout).
    pub fn connection_closed(&self, header_timeout: bool) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
        if header_timeout {
            self.header_timeouts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records one finished HTTP request.
    pub fn record_request(&self, route: &str, status: u16, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        self.with(|inner| {
            *inner
                .requests
                .entry((route.to_owned(), status))
                .or_default() += 1;
            let hist = inner.latency.entry(route.to_owned()).or_default();
            for (bucket, bound) in hist.buckets.iter_mut().zip(LATENCY_BUCKETS) {
                if seconds <= bound {
                    *bucket += 1;
                }
            }
            hist.count += 1;
            hist.sum_seconds += seconds;
        });
    }

    /// Records the answered queries of one search request on `index`.
    pub fn record_queries<'a>(&self, index: &str, stats: impl IntoIterator<Item = &'a QueryStats>) {
        self.with(|inner| {
            let counters = inner.per_index.entry(index.to_owned()).or_default();
            for s in stats {
                counters.queries += 1;
                counters.store_requests += s.requests;
                counters.store_bytes += s.bytes;
            }
        });
    }

    /// Records one reload attempt of `index` (`outcome`: swapped, unchanged,
    /// failed, coalesced — answered by a concurrent reload —, rate_limited).
    pub fn record_reload(&self, index: &str, outcome: &'static str) {
        self.with(|inner| {
            *inner
                .reloads
                .entry((index.to_owned(), outcome))
                .or_default() += 1
        });
    }

    /// Prometheus text for the counters plus gauges from the current `indexes`.
    pub fn render(&self, indexes: &[(String, IndexInfo)]) -> String {
        let mut out = String::new();
        self.with(|inner| {
            out.push_str("# HELP parqivf_http_requests_total HTTP requests by route and status.\n");
            out.push_str("# TYPE parqivf_http_requests_total counter\n");
            for ((route, status), n) in &inner.requests {
                let _ = writeln!(out, "parqivf_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}");
            }
            let connections: [(&str, &str, &str, &AtomicU64); 3] = [
                ("parqivf_http_connections_open", "gauge", "Connections open now.", &self.connections_open),
                ("parqivf_http_connections_total", "counter", "Connections accepted.", &self.connections_total),
                ("parqivf_http_header_timeouts_total", "counter", "Connections closed because no complete request head arrived within the header read timeout.", &self.header_timeouts),
            ];
            for (name, kind, help, value) in connections {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", value.load(Ordering::Relaxed));
            }
            out.push_str("# HELP parqivf_http_request_duration_seconds HTTP request latency by route.\n");
            out.push_str("# TYPE parqivf_http_request_duration_seconds histogram\n");
            for (route, hist) in &inner.latency {
                for (bound, n) in LATENCY_BUCKETS.iter().zip(hist.buckets) {
                    let _ = writeln!(
                        out,
                        "parqivf_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {n}"
                    );
                }
                let _ = writeln!(
                    out,
                    "parqivf_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                    hist.count
                );
                let _ = writeln!(out, "parqivf_http_request_duration_seconds_sum{{route=\"{route}\"}} {}", hist.sum_seconds);
                let _ = writeln!(out, "parqivf_http_request_duration_seconds_count{{route=\"{route}\"}} {}", hist.count);
            }
            let counters: [Series<IndexCounters>; 3] = [
                ("parqivf_queries_total", "Query vectors answered.", |c| c.queries),
                ("parqivf_object_store_requests_total", "Object-store requests issued by queries.", |c| c.store_requests),
                ("parqivf_object_store_bytes_total", "Bytes fetched from the object store by queries.", |c| c.store_bytes),
            ];
            for (name, help, get) in counters {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (index, c) in &inner.per_index {
                    let _ = writeln!(out, "{name}{{index=\"{index}\"}} {}", get(c));
                }
            }
            out.push_str("# HELP parqivf_index_reloads_total Reload attempts by outcome.\n");
            out.push_str("# TYPE parqivf_index_reloads_total counter\n");
            for ((index, outcome), n) in &inner.reloads {
                let _ = writeln!(out, "parqivf_index_reloads_total{{index=\"{index}\",outcome=\"{outcome}\"}} {n}");
            }
        });
        let gauges: [Series<IndexInfo>; 3] = [
            (
                "parqivf_index_vectors",
                "Vectors in the served snapshot.",
                |i| i.ntotal,
            ),
            (
                "parqivf_index_footer_cache_bytes",
                "Bytes held by the footer cache.",
                |i| i.cache.footer_cache_bytes,
            ),
            (
                "parqivf_index_postings_cache_bytes",
                "Bytes held by the decoded-postings cache (every posting when preloaded).",
                |i| i.cache.postings_cache_bytes,
            ),
        ];
        for (name, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (index, info) in indexes {
                let _ = writeln!(
                    out,
                    "{name}{{index=\"{index}\",snapshot=\"{}\"}} {}",
                    escape(&info.snapshot),
                    get(info)
                );
            }
        }
        out
    }
}

/// Escapes a Prometheus label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counts_by_status() {
        let m = Metrics::default();
        m.record_request("/healthz", 200, Duration::from_micros(300));
        m.record_request("/healthz", 200, Duration::from_millis(30));
        m.record_request("/healthz", 404, Duration::from_secs(20));
        let text = m.render(&[]);
        assert!(
            text.contains("parqivf_http_requests_total{route=\"/healthz\",status=\"200\"} 2\n")
        );
        assert!(
            text.contains("parqivf_http_requests_total{route=\"/healthz\",status=\"404\"} 1\n")
        );
        assert!(text.contains("_bucket{route=\"/healthz\",le=\"0.0005\"} 1\n"));
        assert!(text.contains("_bucket{route=\"/healthz\",le=\"0.05\"} 2\n"));
        assert!(text.contains("_bucket{route=\"/healthz\",le=\"10\"} 2\n"));
        assert!(text.contains("_bucket{route=\"/healthz\",le=\"+Inf\"} 3\n"));
        assert!(
            text.contains("parqivf_http_request_duration_seconds_count{route=\"/healthz\"} 3\n")
        );
    }

    #[test]
    fn store_counters_sum_query_stats() {
        let m = Metrics::default();
        let a = QueryStats {
            requests: 3,
            bytes: 100,
            ..QueryStats::default()
        };
        let b = QueryStats {
            requests: 2,
            bytes: 50,
            ..QueryStats::default()
        };
        m.record_queries("x", [&a, &b]);
        m.record_queries("x", [&a]);
        let text = m.render(&[]);
        assert!(text.contains("parqivf_queries_total{index=\"x\"} 3\n"));
        assert!(text.contains("parqivf_object_store_requests_total{index=\"x\"} 8\n"));
        assert!(text.contains("parqivf_object_store_bytes_total{index=\"x\"} 250\n"));
    }

    #[test]
    fn connection_gauge_and_timeouts() {
        let m = Metrics::default();
        m.connection_opened();
        m.connection_opened();
        m.connection_closed(true);
        let text = m.render(&[]);
        assert!(
            text.contains("\nparqivf_http_connections_open 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nparqivf_http_connections_total 2\n"),
            "{text}"
        );
        assert!(
            text.contains("\nparqivf_http_header_timeouts_total 1\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
