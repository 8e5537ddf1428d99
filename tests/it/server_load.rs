//! Bounded load test on loopback: 32 concurrent clients send 3 200 search
//! requests in all; every one must succeed and equal the backend's direct
//! answer. Prints p50/p99 latency and QPS (recorded in docs/benchmarks.md):
//! `cargo test --release --test server_load -- --nocapture`.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parqivf::server::{Limits, SearchBackend, SearchParams, ServerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::server::{BruteForce, FakeLoader, hits_of, pairs, start};

const CLIENTS: usize = 32;
const REQUESTS_PER_CLIENT: usize = 100;
const DIM: usize = 32;
const K: usize = 10;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// 3 200 requests from 32 clients against an `n`-vector brute-force index.
async fn load(n: usize) {
    let backend = Arc::new(BruteForce::random(n, DIM, 42, 1));
    let loader = Arc::new(FakeLoader::default());
    loader.publish("memory:///load", Arc::clone(&backend));
    let config = ServerConfig {
        indexes: vec![("load".into(), "memory:///load".into())],
        limits: Limits {
            max_k: K,
            default_k: K,
            ..Limits::default()
        },
        queue: 2 * CLIENTS,
        ..ServerConfig::default()
    };
    let server = start(config, loader).await;
    let url = server.url("/v1/indexes/load/search");

    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let queries: Arc<Vec<Vec<f32>>> = Arc::new(
        (0..256)
            .map(|_| (0..DIM).map(|_| rng.random_range(-1.0f32..1.0)).collect())
            .collect(),
    );
    let params = SearchParams {
        k: K,
        nprobe: Some(8),
        include_payload: false,
        ..SearchParams::default()
    };
    let direct_started = Instant::now();
    let expected: Arc<Vec<Vec<(i64, f32)>>> = Arc::new(
        queries
            .iter()
            .map(|q| pairs(&backend.answer(q, &params)))
            .collect(),
    );
    let direct_per_query = direct_started.elapsed() / queries.len() as u32;
    let info = backend.info();
    assert_eq!(info.dim, DIM);

    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (url, queries, expected) =
                (url.clone(), Arc::clone(&queries), Arc::clone(&expected));
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut latencies = Vec::with_capacity(REQUESTS_PER_CLIENT);
                for i in 0..REQUESTS_PER_CLIENT {
                    let q = (c * REQUESTS_PER_CLIENT + i) % queries.len();
                    let body = json!({"vector": queries[q], "k": K}).to_string();
                    let sent = Instant::now();
                    let response = client
                        .post(&url)
                        .body(body)
                        .send()
                        .await
                        .expect("request sent");
                    let status = response.status();
                    let body: Value = response.json().await.expect("JSON body");
                    latencies.push(sent.elapsed());
                    assert_eq!(status, StatusCode::OK, "{body}");
                    assert_eq!(hits_of(&body["results"][0]), expected[q], "query {q}");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(CLIENTS * REQUESTS_PER_CLIENT);
    for client in clients {
        let done = tokio::time::timeout(Duration::from_secs(120), client)
            .await
            .expect("load test bounded to 120 s");
        latencies.extend(done.expect("client saw 0 errors"));
    }
    let wall = started.elapsed();
    assert_eq!(latencies.len(), CLIENTS * REQUESTS_PER_CLIENT);
    latencies.sort();
    println!(
        "server_load: {} requests, {CLIENTS} clients, n={n} dim={DIM} k={K}: {:.0} QPS, p50 {:.2} ms, p99 {:.2} ms; \
         direct backend {:.3} ms/query on one thread",
        latencies.len(),
        latencies.len() as f64 / wall.as_secs_f64(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        direct_per_query.as_secs_f64() * 1e3,
    );
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = format!(
        "parqivf_queries_total{{index=\"load\"}} {}",
        CLIENTS * REQUESTS_PER_CLIENT
    );
    assert!(metrics.lines().any(|l| l == line), "{metrics}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_get_exact_answers_without_errors() {
    load(2_000).await;
}

/// A 16-vector index makes the search nearly free, so this run measures the
/// HTTP, JSON and queueing overhead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_overhead_with_a_tiny_index() {
    load(16).await;
}
