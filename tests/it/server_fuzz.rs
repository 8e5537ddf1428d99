//! Property-based fuzzing of the HTTP request body (issue #17): random and
//! mutated JSON bodies, posted over real TCP on 127.0.0.1 to the search and
//! reload endpoints of a server with a fake backend. The property: every
//! answer is a 2xx or a 4xx with a JSON error body (never a 5xx, never a
//! dropped connection), and the server still answers a valid query
//! afterwards. `PARQIVF_FUZZ_CASES` sets the cases (default 300: each case
//! is a round trip).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use parqivf::server::{Limits, ServerConfig};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use support::server::{BruteForce, FakeLoader, TOKEN, start, token};

const DIM: usize = 4;

fn cases() -> u32 {
    std::env::var("PARQIVF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// Any JSON value, with the numbers a request parser trips on.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![Just(u64::MAX), Just(0u64), Just(1u64), Just(1u64 << 53)].prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        prop_oneof![Just(f64::MAX), Just(f64::MIN_POSITIVE), Just(1e-45)].prop_map(Value::from),
        "[a-z]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("vector".to_string()),
                    Just("vectors".to_string()),
                    Just("k".to_string()),
                    Just("nprobe".to_string()),
                    Just("include".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A body: structured JSON, a valid request with one field replaced, or raw bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let valid =
        json!({ "vector": [0.1, 0.2, 0.3, 0.4], "k": 3, "nprobe": 2, "include": ["stats"] });
    prop_oneof![
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        (
            prop::sample::select(vec!["vector", "vectors", "k", "nprobe", "include"]),
            json_value()
        )
            .prop_map(move |(key, with)| {
                let mut v = valid.clone();
                v[key] = with;
                serde_json::to_vec(&v).unwrap()
            }),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_body_makes_the_server_fail() {
    let loader = Arc::new(FakeLoader::default());
    loader.publish(
        "memory:///small",
        Arc::new(BruteForce::random(50, DIM, 7, 1)),
    );
    let config = ServerConfig {
        indexes: vec![("small".into(), "memory:///small".into())],
        limits: Limits {
            max_body_bytes: 4096,
            max_batch: 4,
            max_k: 20,
            default_k: 5,
            default_nprobe: Some(16),
            ..Limits::default()
        },
        queue: 64,
        workers: 2,
        auth_token: token(),
        reload_min_interval: Duration::ZERO,
        ..ServerConfig::default()
    };
    let server = start(config, loader).await;
    let client = reqwest::Client::new();
    let search = server.url("/v1/indexes/small/search");
    let reload = server.url("/v1/indexes/small/reload");

    // Draw the bodies first (the runner is synchronous), then send them.
    let mut runner = TestRunner::new(Config::with_cases(cases()));
    let strategy = body();
    let bodies: Vec<Vec<u8>> = (0..cases())
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    let (mut ok, mut rejected) = (0usize, 0usize);
    for (i, b) in bodies.iter().enumerate() {
        let url = if i % 10 == 9 { &reload } else { &search };
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .bearer_auth(TOKEN)
            .body(b.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("case {i}: connection failed: {e}; body {b:?}"));
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(
            status.is_success() || status.is_client_error(),
            "case {i}: status {status} for body {:?}: {text}",
            String::from_utf8_lossy(b)
        );
        if status.is_client_error() {
            let error: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("case {i}: a 4xx body is JSON: {text}"));
            assert!(
                error["error"].is_object() || error["error"].is_string(),
                "{text}"
            );
            rejected += 1;
        } else {
            ok += 1;
        }
    }
    eprintln!(
        "http body fuzz: {} bodies, {ok} answered, {rejected} rejected with 4xx, 0 server errors",
        bodies.len()
    );
    let valid = client
        .post(&search)
        .bearer_auth(TOKEN)
        .json(&json!({ "vector": [0.1, 0.2, 0.3, 0.4], "k": 3 }))
        .send()
        .await
        .unwrap();
    assert!(valid.status().is_success());
    server.shutdown().await;
}
