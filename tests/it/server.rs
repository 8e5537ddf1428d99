//! The HTTP service over real TCP on 127.0.0.1: every endpoint, every error
//! case with its status and JSON body, backpressure (429), storage faults,
//! reloads, start-up failures and graceful shutdown. These servers have a
//! bearer token (every request here carries it); `server_auth.rs` tests what
//! happens without it.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use parqivf::server::{BackendError, Limits, SearchParams, ServeError, Server, ServerConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::server::{
    BruteForce, FakeLoader, Gate, ROWID_STRIDE, Running, SOURCE_LOCATION, TOKEN, hits_of, pairs,
    start, token,
};

const DIM: usize = 4;

fn config() -> ServerConfig {
    ServerConfig {
        indexes: vec![("small".into(), "memory:///small".into())],
        limits: Limits {
            max_body_bytes: 2048,
            max_batch: 4,
            max_k: 20,
            default_k: 5,
            default_nprobe: Some(16),
            ..Limits::default()
        },
        queue: 8,
        workers: 2,
        auth_token: token(),
        reload_min_interval: Duration::ZERO,
        ..ServerConfig::default()
    }
}

fn small(snapshot: u32) -> Arc<BruteForce> {
    Arc::new(BruteForce::random(50, DIM, 7, snapshot))
}

async fn started() -> (Running, Arc<FakeLoader>, Arc<BruteForce>) {
    let loader = Arc::new(FakeLoader::default());
    let backend = small(1);
    loader.publish("memory:///small", Arc::clone(&backend));
    (start(config(), Arc::clone(&loader)).await, loader, backend)
}

async fn post(server: &Running, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(server.url(path))
        .header("content-type", "application/json")
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

async fn get_json(server: &Running, path: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

fn assert_error(got: (StatusCode, Value), status: StatusCode, code: &str) {
    assert_eq!(got.0, status, "body: {}", got.1);
    assert_eq!(got.1["error"]["code"], code, "body: {}", got.1);
    assert!(
        got.1["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "body: {}",
        got.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_index_listing() {
    let (server, _loader, _backend) = started().await;
    assert_eq!(
        get_json(&server, "/healthz").await,
        (
            StatusCode::OK,
            json!({"status": "ok", "indexes": ["small"]})
        )
    );

    let (status, list) = get_json(&server, "/v1/indexes").await;
    assert_eq!(status, StatusCode::OK);
    let expected = json!({
        "name": "small", "location": "memory:///small",
        "dim": 4, "metric": "l2", "nlist": 8, "ntotal": 50, "snapshot": "snap-1",
        "definition": {"provider": "parquet", "dim": 4,
            "source": {"provider": "parquet", "location": SOURCE_LOCATION, "table-identity": "t1"}},
        "cache": {"preloaded": true, "preload": "all", "footer_cache_bytes": 0, "postings_cache_bytes": 800},
        "open": {"rounds": 0, "requests": 0, "bytes": 0, "hedges": 0, "open_us": 0}
    });
    assert_eq!(list, json!({ "indexes": [expected.clone()] }));
    assert_eq!(
        get_json(&server, "/v1/indexes/small").await,
        (StatusCode::OK, expected)
    );
    assert_error(
        get_json(&server, "/v1/indexes/nope").await,
        StatusCode::NOT_FOUND,
        "unknown_index",
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_single_and_batch_equal_direct_results() {
    let (server, _loader, backend) = started().await;
    let q = [0.1f32, -0.2, 0.3, 0.0];
    let (status, body) = post(
        &server,
        "/v1/indexes/small/search",
        json!({"vector": q, "k": 7}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["index"].as_str(), body["snapshot"].as_str()),
        (Some("small"), Some("snap-1"))
    );
    let params = SearchParams {
        k: 7,
        nprobe: Some(8),
        include_payload: false,
        ..SearchParams::default()
    };
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(hits_of(&results[0]), pairs(&backend.answer(&q, &params)));
    assert!(results[0].get("stats").is_none() && results[0]["hits"][0].get("payload").is_none());
    // The same query packed (base64 of its little-endian floats) gets the
    // same answer.
    let (status, packed) = post(
        &server,
        "/v1/indexes/small/search",
        json!({"vector": support::server::pack(&q), "k": 7}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{packed}");
    assert_eq!(packed["results"], body["results"]);

    let batch = [
        [0.5f32, 0.5, 0.5, 0.5],
        [-1.0, 0.0, 1.0, 0.25],
        [0.0, 0.0, 0.0, 0.0],
    ];
    // A batch may mix numbers and packed vectors.
    let (status, body) = post(
        &server,
        "/v1/indexes/small/search",
        json!({"vectors": [json!(batch[0]), json!(support::server::pack(&batch[1])), json!(batch[2])],
               "include": ["payload", "stats"]})
        .to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let defaults = SearchParams {
        k: 5,
        nprobe: Some(8),
        include_payload: true,
        ..SearchParams::default()
    };
    for (query, result) in batch.iter().zip(results) {
        let direct = backend.answer(query, &defaults);
        assert_eq!(hits_of(result), pairs(&direct));
        let first = &direct.hits[0];
        assert_eq!(result["hits"][0]["payload"], json!(first.payload));
        assert_eq!(result["stats"], json!(direct.stats));
        assert_eq!(result["stats"]["bytes"], 800);
    }
    server.shutdown().await;
}

/// A batch whose body and answer are both over the size parsed and written
/// where they are awaited (`JSON_IN_PLACE_BYTES`): both go to rayon, and
/// the answers are the same as one query at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_parsed_and_answered_on_rayon_equals_direct_results() {
    let loader = Arc::new(FakeLoader::default());
    let backend = small(1);
    loader.publish("memory:///small", Arc::clone(&backend));
    let mut config = config();
    config.limits.max_body_bytes = 1 << 20;
    config.limits.max_batch = 1000;
    let server = start(config, loader).await;
    let many: Vec<[f32; 4]> = (0..600)
        .map(|i| {
            let x = i as f32 / 600.0;
            [x, -x, 0.5 - x, x * x]
        })
        .collect();
    let body = json!({"vectors": many, "k": 10}).to_string();
    assert!(body.len() > parqivf::server::JSON_IN_PLACE_BYTES);
    let (status, big) = post(&server, "/v1/indexes/small/search", body).await;
    assert_eq!(status, StatusCode::OK, "{big}");
    assert!(big.to_string().len() > parqivf::server::JSON_IN_PLACE_BYTES);
    let results = big["results"].as_array().unwrap();
    assert_eq!(results.len(), many.len());
    let params = SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    for (query, result) in many.iter().zip(results) {
        assert_eq!(hits_of(result), pairs(&backend.answer(query, &params)));
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_a_4xx_with_a_named_error() {
    let (server, _loader, _backend) = started().await;
    let search = "/v1/indexes/small/search";
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            json!({"vector": [1, 2, 3]}).to_string(),
            StatusCode::BAD_REQUEST,
            "wrong_dimension",
        ),
        (
            json!({"vectors": [[1, 2, 3, 4], [1, 2]]}).to_string(),
            StatusCode::BAD_REQUEST,
            "wrong_dimension",
        ),
        (
            r#"{"vector": [1, 2, 3, NaN]}"#.into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            r#"{"vector": [1, 2, 3, Infinity]}"#.into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            r#"{"vector": [1, 2, 3, 1e39]}"#.into(),
            StatusCode::BAD_REQUEST,
            "non_finite_value",
        ),
        (
            r#"{"vector": [1, 2, 3, -1e300]}"#.into(),
            StatusCode::BAD_REQUEST,
            "non_finite_value",
        ),
        (
            r#"{"vector": [1, 2, 3, 1e999]}"#.into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            json!({"vector": [1, 2, 3, 4], "k": 0}).to_string(),
            StatusCode::BAD_REQUEST,
            "k_zero",
        ),
        (
            json!({"vector": [1, 2, 3, 4], "k": 21}).to_string(),
            StatusCode::BAD_REQUEST,
            "k_too_large",
        ),
        (
            json!({"vector": [1, 2, 3, 4], "nprobe": 9}).to_string(),
            StatusCode::BAD_REQUEST,
            "nprobe_out_of_range",
        ),
        (
            json!({"vector": [1, 2, 3, 4], "nprobe": 0}).to_string(),
            StatusCode::BAD_REQUEST,
            "nprobe_out_of_range",
        ),
        (
            json!({"vectors": vec![[0, 0, 0, 0]; 5]}).to_string(),
            StatusCode::BAD_REQUEST,
            "too_many_vectors",
        ),
        (
            json!({"vectors": []}).to_string(),
            StatusCode::BAD_REQUEST,
            "empty_batch",
        ),
        (
            json!({"k": 3}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"vector": [1, 2, 3, 4], "top": 3}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"vector": "1,2,3,4"}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"vector": support::server::pack(&[1.0, 2.0, 3.0])}).to_string(),
            StatusCode::BAD_REQUEST,
            "wrong_dimension",
        ),
        (
            json!({"vector": support::server::pack(&[1.0, 2.0, 3.0, f32::NAN])}).to_string(),
            StatusCode::BAD_REQUEST,
            "non_finite_value",
        ),
        (
            // 17 bytes: four floats and one byte over.
            json!({"vector": "AAAAAAAAAAAAAAAAAAAAAAA="}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "{\"vector\": [1, 2,".into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        ("".into(), StatusCode::BAD_REQUEST, "malformed_json"),
        (
            format!("{{\"vector\": [{}]}}", vec!["0.125"; 600].join(",")),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
    ];
    for (body, status, code) in cases {
        let got = post(&server, search, body.clone()).await;
        assert_eq!(
            (got.0, got.1["error"]["code"].as_str()),
            (status, Some(code)),
            "request {body:.80}: {}",
            got.1
        );
        assert_error(got, status, code);
    }
    let valid = json!({"vector": [1, 2, 3, 4]}).to_string();
    assert_error(
        post(&server, "/v1/indexes/nope/search", valid.clone()).await,
        StatusCode::NOT_FOUND,
        "unknown_index",
    );
    assert_error(
        post(&server, "/v1/nothing", valid).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        get_json(&server, search).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
    // The server is still healthy after all of that.
    assert_eq!(get_json(&server, "/healthz").await.0, StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_faults_are_503_and_corrupt_indexes_500_without_internal_detail() {
    let loader = Arc::new(FakeLoader::default());
    let failing = |err: BackendError| {
        Arc::new(BruteForce {
            fail: Some(err),
            ..BruteForce::random(10, DIM, 1, 1)
        })
    };
    loader.publish(
        "memory:///down",
        failing(BackendError::Storage {
            location: "s3://b/idx".into(),
            message: "connection reset".into(),
        }),
    );
    loader.publish(
        "memory:///bad",
        failing(BackendError::Corrupt {
            location: "s3://b/idx/part-0.parquet".into(),
            message: "cid 9 outside 1..=2".into(),
        }),
    );
    let config = ServerConfig {
        indexes: vec![
            ("down".into(), "memory:///down".into()),
            ("bad".into(), "memory:///bad".into()),
        ],
        ..config()
    };
    let server = start(config, loader).await;
    let body = json!({"vector": [0, 0, 0, 0]}).to_string();
    // The cause and the location go to the log; the client gets the class and
    // a request id that finds them there.
    let response = reqwest::Client::new()
        .post(server.url("/v1/indexes/down/search"))
        .bearer_auth(TOKEN)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let header_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let down = (response.status(), response.json::<Value>().await.unwrap());
    assert_eq!(down.1["error"]["request_id"], header_id.as_str());
    assert!(!header_id.is_empty());
    let message = down.1["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("connection reset") && !message.contains("s3://"),
        "{message}"
    );
    assert_error(down, StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable");
    let bad = post(&server, "/v1/indexes/bad/search", body).await;
    let message = bad.1["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("part-0.parquet") && !message.contains("s3://"),
        "{message}"
    );
    assert_error(bad, StatusCode::INTERNAL_SERVER_ERROR, "corrupt_index");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_status_latency_and_store_io() {
    let (server, _loader, _backend) = started().await;
    let ok = json!({"vectors": [[0, 0, 0, 0], [1, 1, 1, 1]]}).to_string();
    assert_eq!(
        post(&server, "/v1/indexes/small/search", ok).await.0,
        StatusCode::OK
    );
    assert_eq!(
        post(&server, "/v1/indexes/small/search", "{").await.0,
        StatusCode::BAD_REQUEST
    );
    let text = reqwest::Client::new()
        .get(server.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let route = "route=\"/v1/indexes/{name}/search\"";
    for line in [
        format!("parqivf_http_requests_total{{{route},status=\"200\"}} 1"),
        format!("parqivf_http_requests_total{{{route},status=\"400\"}} 1"),
        format!("parqivf_http_request_duration_seconds_count{{{route}}} 2"),
        format!("parqivf_http_request_duration_seconds_bucket{{{route},le=\"+Inf\"}} 2"),
        "parqivf_queries_total{index=\"small\"} 2".to_owned(),
        "parqivf_object_store_requests_total{index=\"small\"} 4".to_owned(),
        "parqivf_object_store_bytes_total{index=\"small\"} 1600".to_owned(),
        "parqivf_index_vectors{index=\"small\",snapshot=\"snap-1\"} 50".to_owned(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_endpoint_swaps_to_the_published_snapshot_and_keeps_old_on_failure() {
    let (server, loader, _backend) = started().await;
    let reload = "/v1/indexes/small/reload";
    assert_eq!(
        post(&server, reload, "").await,
        (
            StatusCode::OK,
            json!({"previous": "snap-1", "snapshot": "snap-1", "changed": false})
        )
    );
    loader.publish("memory:///small", small(2));
    assert_eq!(
        post(&server, reload, "").await,
        (
            StatusCode::OK,
            json!({"previous": "snap-1", "snapshot": "snap-2", "changed": true})
        )
    );
    let (status, body) = post(
        &server,
        "/v1/indexes/small/search",
        json!({"vector": [0, 0, 0, 0]}).to_string(),
    )
    .await;
    assert_eq!(
        (status, body["snapshot"].as_str()),
        (StatusCode::OK, Some("snap-2"))
    );
    assert!(
        hits_of(&body["results"][0])
            .iter()
            .all(|(rowid, _)| rowid / ROWID_STRIDE == 2)
    );

    loader.break_location(
        "memory:///small",
        BackendError::Storage {
            location: "memory:///small".into(),
            message: "gone".into(),
        },
    );
    assert_error(
        post(&server, reload, "").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
    );
    assert_eq!(
        get_json(&server, "/v1/indexes/small").await.1["snapshot"],
        "snap-2"
    );
    assert_error(
        post(&server, "/v1/indexes/nope/reload", "").await,
        StatusCode::NOT_FOUND,
        "unknown_index",
    );
    let text = reqwest::Client::new()
        .get(server.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for outcome in ["unchanged", "swapped", "failed"] {
        assert!(
            text.contains(&format!(
                "parqivf_index_reloads_total{{index=\"small\",outcome=\"{outcome}\"}} 1"
            )),
            "{text}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_interval_picks_up_a_new_snapshot_without_a_request() {
    let loader = Arc::new(FakeLoader::default());
    loader.publish("memory:///small", small(1));
    let server = start(
        ServerConfig {
            reload_interval: Some(Duration::from_millis(20)),
            ..config()
        },
        Arc::clone(&loader),
    )
    .await;
    loader.publish("memory:///small", small(3));
    let mut snapshot = Value::Null;
    for _ in 0..300 {
        snapshot = get_json(&server, "/v1/indexes/small").await.1["snapshot"].clone();
        if snapshot == "snap-3" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(snapshot, "snap-3");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_429_immediately() {
    let gate = Arc::new(Gate::default());
    let loader = Arc::new(FakeLoader::default());
    loader.publish(
        "memory:///small",
        Arc::new(BruteForce {
            gate: Some(Arc::clone(&gate)),
            ..BruteForce::random(50, DIM, 7, 1)
        }),
    );
    let server = Arc::new(
        start(
            ServerConfig {
                queue: 2,
                workers: 1,
                ..config()
            },
            loader,
        )
        .await,
    );
    let body = json!({"vector": [0, 0, 0, 0]}).to_string();
    let blocked: Vec<_> = (0..2)
        .map(|_| {
            let (server, body) = (Arc::clone(&server), body.clone());
            tokio::spawn(async move { post(&server, "/v1/indexes/small/search", body).await })
        })
        .collect();
    // One search computes (blocked at the gate), the other waits for the worker.
    gate.wait_entered(1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let rejected = post(&server, "/v1/indexes/small/search", body.clone()).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "429 must not wait for the queue"
    );
    assert_error(rejected, StatusCode::TOO_MANY_REQUESTS, "overloaded");
    gate.open();
    for task in blocked {
        assert_eq!(task.await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(
        post(&server, "/v1/indexes/small/search", body).await.0,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_index_stops_start_up_with_its_name() {
    let loader = Arc::new(FakeLoader::default());
    loader.publish("memory:///small", small(1));
    loader.break_location(
        "memory:///broken",
        BackendError::Corrupt {
            location: "memory:///broken".into(),
            message: "bad manifest".into(),
        },
    );
    let config = ServerConfig {
        indexes: vec![
            ("small".into(), "memory:///small".into()),
            ("broken".into(), "memory:///broken".into()),
        ],
        ..config()
    };
    let err = Server::bind(config, loader)
        .await
        .err()
        .expect("bind fails");
    match &err {
        ServeError::Open(open) => {
            assert_eq!(
                (open.name.as_str(), open.location.as_str()),
                ("broken", "memory:///broken")
            );
            assert!(matches!(open.source, BackendError::Corrupt { .. }));
        }
        other => panic!("expected Open, got {other:?}"),
    }
    assert!(err.to_string().contains("broken") && err.to_string().contains("bad manifest"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_in_flight_requests_finish() {
    let gate = Arc::new(Gate::default());
    let loader = Arc::new(FakeLoader::default());
    let backend = Arc::new(BruteForce {
        gate: Some(Arc::clone(&gate)),
        ..BruteForce::random(50, DIM, 7, 1)
    });
    loader.publish("memory:///small", Arc::clone(&backend));
    let mut server = start(config(), loader).await;
    let url = server.url("/v1/indexes/small/search");
    let in_flight = tokio::spawn(async move {
        let response = reqwest::Client::new()
            .post(url)
            .bearer_auth(TOKEN)
            .body(json!({"vector": [0, 0, 0, 0]}).to_string())
            .send()
            .await?;
        Ok::<_, reqwest::Error>((response.status(), response.json::<Value>().await?))
    });
    gate.wait_entered(1).await;
    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !server.task.is_finished(),
        "server waits for the in-flight request"
    );
    gate.open();
    let (status, body) = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(status, StatusCode::OK);
    let params = SearchParams {
        k: 5,
        nprobe: Some(8),
        include_payload: false,
        ..SearchParams::default()
    };
    assert_eq!(
        hits_of(&body["results"][0]),
        pairs(&backend.answer(&[0.0; DIM], &params))
    );
    let addr = server.addr;
    server.shutdown().await;
    assert!(
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .is_err(),
        "no longer listening"
    );
}

/// A validator for one schema of `manifests/openapi.json`.
fn openapi_schema(name: &str) -> jsonschema::Validator {
    let mut doc: Value = serde_json::from_str(include_str!("../../manifests/openapi.json"))
        .expect("openapi.json parses");
    doc["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    doc["$ref"] = json!(format!("#/components/schemas/{name}"));
    jsonschema::validator_for(&doc).expect("schema compiles")
}

pub(crate) fn assert_matches(schema: &str, value: &Value) {
    let validator = openapi_schema(schema);
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{value} does not match {schema}: {errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_match_the_openapi_description() {
    let (server, _loader, _backend) = started().await;
    let request =
        json!({"vectors": [[0, 0, 0, 0], [1, 0, 0, 0]], "k": 3, "include": ["payload", "stats"]});
    assert_matches("SearchRequest", &request);
    let (status, body) = post(&server, "/v1/indexes/small/search", request.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_matches("SearchResponse", &body);
    let (_, plain) = post(
        &server,
        "/v1/indexes/small/search",
        json!({"vector": [0, 0, 0, 0]}).to_string(),
    )
    .await;
    assert_matches("SearchResponse", &plain);
    let packed = json!({"vectors": [support::server::pack(&[0.0; 4]), [1, 0, 0, 0]]});
    assert_matches("SearchRequest", &packed);
    assert_matches("IndexInfo", &get_json(&server, "/v1/indexes/small").await.1);
    for info in get_json(&server, "/v1/indexes").await.1["indexes"]
        .as_array()
        .unwrap()
    {
        assert_matches("IndexInfo", info);
    }
    assert_matches(
        "ReloadOutcome",
        &post(&server, "/v1/indexes/small/reload", "").await.1,
    );
    assert_matches(
        "Error",
        &post(&server, "/v1/indexes/small/search", "{").await.1,
    );
    assert_matches("Error", &get_json(&server, "/v1/indexes/nope").await.1);
    // The schema itself rejects what the server rejects.
    let bad_request = openapi_schema("SearchRequest");
    for bad in [
        json!({"vector": [1], "vectors": [[1]]}),
        json!({"k": 0, "vector": [1]}),
        json!({"vector": [1], "top": 1}),
        json!({"vector": "1,2,3,4"}),
    ] {
        assert!(
            !bad_request.is_valid(&bad),
            "{bad} should not match SearchRequest"
        );
    }
    server.shutdown().await;
}
