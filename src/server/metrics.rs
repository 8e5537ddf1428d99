//! Prometheus metrics: request counts by route and status, a latency
//! histogram per route, queries answered and object-store requests and bytes
//! per index (summed from each query's [`SearchStats`], so they stay monotonic
//! across snapshot reloads), reload attempts by outcome, overload rejections,
//! open connections and connections closed by the header read timeout, and
//! per-index gauges taken from the backend's info at scrape time (cache bytes
//! included), and the disk tier's bound, bytes, hit ratio and evictions.
//! Kept and rendered by the `prometheus-client` crate, as
//! Prometheus text exposition format 0.0.4 ([`Metrics::render`]).

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use super::backend::IndexInfo;
use crate::index::SearchStats;
use crate::store::disk_cache::DiskCacheState;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IndexLabels {
    index: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    index: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SnapshotLabels {
    index: String,
    snapshot: String,
}

type Latency = Family<RouteLabels, Histogram, fn() -> Histogram>;
type IndexGauge = Family<SnapshotLabels, Gauge<u64, AtomicU64>>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Upper bounds of the recall histogram buckets.
const RECALL_BUCKETS: [f64; 13] = [
    0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0,
];

type Recall = Family<IndexLabels, Histogram, fn() -> Histogram>;

fn recall_histogram() -> Histogram {
    Histogram::new(RECALL_BUCKETS)
}

/// Process-wide counters, registered once (the help texts get their final
/// period from the crate).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Latency,
    connections_open: Gauge,
    connections_total: Counter,
    header_timeouts: Counter,
    queries: Family<IndexLabels, Counter>,
    store_requests: Family<IndexLabels, Counter>,
    store_bytes: Family<IndexLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    recall_measured: Recall,
    recall_estimated: Recall,
    recall_skipped: Family<IndexLabels, Counter>,
}

/// A per-index gauge: name, help text, and how to read it from the index info.
type GaugeReader = (&'static str, &'static str, fn(&IndexInfo) -> u64);

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            latency: Latency::new_with_constructor(latency_histogram),
            connections_open: Gauge::default(),
            connections_total: Counter::default(),
            header_timeouts: Counter::default(),
            queries: Family::default(),
            store_requests: Family::default(),
            store_bytes: Family::default(),
            reloads: Family::default(),
            recall_measured: Recall::new_with_constructor(recall_histogram),
            recall_estimated: Recall::new_with_constructor(recall_histogram),
            recall_skipped: Family::default(),
        };
        let mut registry = Registry::default();
        // Counters are registered without their `_total`, which the encoder adds.
        registry.register(
            "parqivf_http_requests",
            "HTTP requests by route and status",
            m.requests.clone(),
        );
        registry.register(
            "parqivf_http_connections_open",
            "Connections open now",
            m.connections_open.clone(),
        );
        registry.register(
            "parqivf_http_connections",
            "Connections accepted",
            m.connections_total.clone(),
        );
        registry.register(
            "parqivf_http_header_timeouts",
            "Connections closed because no complete request head arrived within the header read timeout",
            m.header_timeouts.clone(),
        );
        registry.register(
            "parqivf_http_request_duration_seconds",
            "HTTP request latency by route",
            m.latency.clone(),
        );
        registry.register(
            "parqivf_queries",
            "Query vectors answered",
            m.queries.clone(),
        );
        registry.register(
            "parqivf_object_store_requests",
            "Object-store requests issued by queries",
            m.store_requests.clone(),
        );
        registry.register(
            "parqivf_object_store_bytes",
            "Bytes fetched from the object store by queries",
            m.store_bytes.clone(),
        );
        registry.register(
            "parqivf_index_reloads",
            "Reload attempts by outcome",
            m.reloads.clone(),
        );
        registry.register(
            "parqivf_recall_measured",
            "Recall@k of sampled queries against an exhaustive re-run (serve --recall-sample)",
            m.recall_measured.clone(),
        );
        registry.register(
            "parqivf_recall_estimated",
            "The calibration's recall estimate of the same sampled queries",
            m.recall_estimated.clone(),
        );
        registry.register(
            "parqivf_recall_samples_skipped",
            "Sampled queries not re-run (queue full, or the re-run failed)",
            m.recall_skipped.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Records an accepted connection.
    pub fn connection_opened(&self) {
        self.connections_open.inc();
        self.connections_total.inc();
    }

    /// Records a closed connection (`header_timeout`: closed by the header read timeout).
    pub fn connection_closed(&self, header_timeout: bool) {
        self.connections_open.dec();
        if header_timeout {
            self.header_timeouts.inc();
        }
    }

    /// Records one finished HTTP request.
    pub fn record_request(&self, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Records the answered queries of one search request on `index`.
    pub fn record_queries<'a>(
        &self,
        index: &str,
        stats: impl IntoIterator<Item = &'a SearchStats>,
    ) {
        let labels = IndexLabels {
            index: index.to_owned(),
        };
        let (mut queries, mut requests, mut bytes) = (0, 0, 0);
        for s in stats {
            queries += 1;
            requests += s.requests;
            bytes += s.bytes;
        }
        self.queries.get_or_create(&labels).inc_by(queries);
        self.store_requests.get_or_create(&labels).inc_by(requests);
        self.store_bytes.get_or_create(&labels).inc_by(bytes);
    }

    /// Records the measured recall of one sampled query of `index`, and its
    /// estimate when the index has one.
    pub fn record_recall(&self, index: &str, measured: f64, estimated: Option<f64>) {
        let labels = IndexLabels {
            index: index.to_owned(),
        };
        self.recall_measured
            .get_or_create(&labels)
            .observe(measured);
        if let Some(e) = estimated {
            self.recall_estimated.get_or_create(&labels).observe(e);
        }
    }

    /// Records a sampled query of `index` that was not re-run.
    pub fn record_recall_skipped(&self, index: &str) {
        self.recall_skipped
            .get_or_create(&IndexLabels {
                index: index.to_owned(),
            })
            .inc();
    }

    /// Records one reload attempt of `index` (`outcome`: swapped, unchanged,
    /// failed, coalesced — answered by a concurrent reload —, rate_limited).
    pub fn record_reload(&self, index: &str, outcome: &'static str) {
        self.reloads
            .get_or_create(&ReloadLabels {
                index: index.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Prometheus text for the counters plus gauges from the current
    /// `indexes` (registered afresh for each scrape, so a dropped index or
    /// replaced snapshot leaves no stale series).
    pub fn render(&self, indexes: &[(String, IndexInfo)]) -> String {
        let gauges: [GaugeReader; 3] = [
            (
                "parqivf_index_vectors",
                "Vectors in the served snapshot",
                |i| i.ntotal,
            ),
            (
                "parqivf_index_footer_cache_bytes",
                "Bytes held by the footer cache",
                |i| i.cache.footer_cache_bytes,
            ),
            (
                "parqivf_index_postings_cache_bytes",
                "Bytes held by the decoded-postings cache (every posting when preloaded)",
                |i| i.cache.postings_cache_bytes,
            ),
        ];
        let mut scrape = Registry::default();
        for (name, help, get) in gauges {
            let family = IndexGauge::default();
            for (index, info) in indexes {
                family
                    .get_or_create(&SnapshotLabels {
                        index: index.clone(),
                        snapshot: info.snapshot.clone(),
                    })
                    .set(get(info));
            }
            scrape.register(name, help, family);
        }
        if let Some(disk) = indexes.iter().find_map(|(_, i)| i.cache.disk) {
            register_disk_cache(&mut scrape, &disk);
        }
        register_hedges(&mut scrape, crate::store::hedge::totals());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        let _ = prometheus_text::encode(&mut out, &scrape);
        out
    }
}

/// The remote stores' gets and hedges since start (process-wide; zero
/// when every index is local).
fn register_hedges(scrape: &mut Registry, t: crate::store::hedge::HedgeTotals) {
    for (name, help, v) in [
        (
            "parqivf_object_store_gets_sent",
            "Gets sent to a remote store (first copies)",
            t.gets,
        ),
        (
            "parqivf_object_store_hedges_sent",
            "Second copies of slow remote-store gets (sent after the observed p95)",
            t.hedges,
        ),
        (
            "parqivf_object_store_hedges_won",
            "Gets answered by their second copy",
            t.hedges_won,
        ),
    ] {
        let c: Counter = Counter::default();
        c.inc_by(v);
        scrape.register(name, help, c);
    }
}

/// The disk tier's figures (one folder per process, so no index label):
/// bound and bytes held, hit ratio, and this process's hits, misses,
/// writes, evictions and rejected entries.
fn register_disk_cache(scrape: &mut Registry, d: &DiskCacheState) {
    let gauge = |v: u64| {
        let g: Gauge<u64, AtomicU64> = Gauge::default();
        g.set(v);
        g
    };
    let counter = |v: u64| {
        let c: Counter = Counter::default();
        c.inc_by(v);
        c
    };
    let lookups = d.hits + d.misses;
    let ratio: Gauge<f64, AtomicU64> = Gauge::default();
    ratio.set(if lookups == 0 {
        0.0
    } else {
        d.hits as f64 / lookups as f64
    });
    scrape.register(
        "parqivf_disk_cache_capacity_bytes",
        "The disk cache's bound (--cache-size)",
        gauge(d.capacity_bytes),
    );
    scrape.register(
        "parqivf_disk_cache_bytes",
        "Bytes the disk cache folder held at the last write or eviction, every process's entries",
        gauge(d.usage_bytes),
    );
    scrape.register(
        "parqivf_disk_cache_hit_ratio",
        "Blocks served by the disk cache over blocks looked up, since start",
        ratio,
    );
    let counters = [
        (
            "parqivf_disk_cache_hits",
            "Blocks served by the disk cache",
            d.hits,
        ),
        (
            "parqivf_disk_cache_misses",
            "Blocks looked up and fetched from the store",
            d.misses,
        ),
        (
            "parqivf_disk_cache_hit_bytes",
            "Bytes served by the disk cache",
            d.hit_bytes,
        ),
        (
            "parqivf_disk_cache_written_bytes",
            "Bytes written to the disk cache",
            d.written_bytes,
        ),
        (
            "parqivf_disk_cache_evictions",
            "Entries removed to stay within the bound",
            d.evictions,
        ),
        (
            "parqivf_disk_cache_evicted_bytes",
            "Bytes removed to stay within the bound",
            d.evicted_bytes,
        ),
        (
            "parqivf_disk_cache_corrupt",
            "Entries that failed their checksum or key (removed)",
            d.corrupt,
        ),
        (
            "parqivf_disk_cache_write_errors",
            "Entries that could not be written",
            d.write_errors,
        ),
        (
            "parqivf_disk_cache_fill_requests",
            "Requests sent to fill blocks behind reads that fetched only their own bytes",
            d.fill_requests,
        ),
        (
            "parqivf_disk_cache_fill_bytes",
            "Bytes fetched to fill blocks behind reads",
            d.fill_bytes,
        ),
    ];
    for (name, help, v) in counters {
        scrape.register(name, help, counter(v));
    }
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
        let a = SearchStats {
            requests: 3,
            bytes: 100,
            ..SearchStats::default()
        };
        let b = SearchStats {
            requests: 2,
            bytes: 50,
            ..SearchStats::default()
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
    fn help_and_type_lines_and_escaped_scrape_gauges() {
        let m = Metrics::default();
        // A family prints its HELP/TYPE lines once it has a series.
        m.record_request("/healthz", 200, Duration::ZERO);
        m.record_reload("x", "swapped");
        let info = IndexInfo {
            dim: 2,
            metric: "l2".into(),
            nlist: 4,
            ntotal: 10,
            snapshot: "v1:a\"b\\c".into(),
            definition: serde_json::Value::Null,
            cache: super::super::backend::CacheState::default(),
            calibration: None,
            open: Default::default(),
        };
        let text = m.render(&[("x".into(), info)]);
        for line in [
            "# HELP parqivf_http_requests_total HTTP requests by route and status.",
            "# TYPE parqivf_http_requests_total counter",
            "# TYPE parqivf_http_connections_open gauge",
            "# TYPE parqivf_http_request_duration_seconds histogram",
            "# TYPE parqivf_index_reloads_total counter",
            "parqivf_index_reloads_total{index=\"x\",outcome=\"swapped\"} 1",
            "# HELP parqivf_index_vectors Vectors in the served snapshot.",
            "# TYPE parqivf_index_vectors gauge",
            "parqivf_index_vectors{index=\"x\",snapshot=\"v1:a\\\"b\\\\c\"} 10",
            "# TYPE parqivf_object_store_hedges_sent_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
