//! Authentication and reload hardening over real TCP on 127.0.0.1: the bearer
//! token guards every endpoint but `/healthz` (401 with `WWW-Authenticate`),
//! a server without a token refuses reload and non-JSON bodies (what a
//! cross-origin browser request can send), start-up on a non-loopback address
//! needs a token (library and CLI), locations are shown only to token
//! holders, and concurrent reloads of an unchanged index open nothing while
//! reloads are coalesced and rate-limited.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parqivf::server::{ServeError, Server, ServerConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::server::{BruteForce, FakeLoader, Running, SOURCE_LOCATION, TOKEN, start, token};

const DIM: usize = 4;
const LOCATION: &str = "memory:///small";

fn config(with_token: bool) -> ServerConfig {
    ServerConfig {
        indexes: vec![("small".into(), LOCATION.into())],
        auth_token: if with_token { token() } else { None },
        ..ServerConfig::default()
    }
}

fn snapshot(n: u32) -> Arc<BruteForce> {
    Arc::new(BruteForce::random(50, DIM, 7, n))
}

async fn started(config: ServerConfig) -> (Running, Arc<FakeLoader>) {
    let loader = Arc::new(FakeLoader::default());
    loader.publish(LOCATION, snapshot(1));
    (start(config, Arc::clone(&loader)).await, loader)
}

/// Sends `method path` with an optional bearer token, content type and body.
async fn send(
    server: &Running,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    content_type: Option<&str>,
    body: &str,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let client = reqwest::Client::new();
    let mut request = client
        .request(method.parse().unwrap(), server.url(path))
        .timeout(Duration::from_secs(10))
        .body(body.to_owned());
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    if let Some(kind) = content_type {
        request = request.header("content-type", kind);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn search_body() -> String {
    json!({"vector": [0.0, 0.0, 0.0, 0.0], "k": 3}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_endpoint_but_healthz() {
    let (server, loader) = started(config(true)).await;
    let search = search_body();
    let endpoints: [(&str, &str, &str); 5] = [
        ("GET", "/v1/indexes", ""),
        ("GET", "/v1/indexes/small", ""),
        ("GET", "/metrics", ""),
        ("POST", "/v1/indexes/small/search", &search),
        ("POST", "/v1/indexes/small/reload", ""),
    ];
    for (method, path, body) in endpoints {
        let json = Some("application/json");
        let (status, headers, error) = send(&server, method, path, None, json, body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {error}");
        assert_eq!(error["error"]["code"], "unauthorized", "{error}");
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"parqivf\"");
        let wrong = "not-the-token-0123456789";
        let (status, headers, error) = send(&server, method, path, Some(wrong), json, body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {error}");
        assert_eq!(error["error"]["code"], "invalid_token", "{error}");
        assert!(
            headers["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer ")
        );
        let (status, _, answer) = send(&server, method, path, Some(TOKEN), json, body).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}: {answer}");
    }
    let (status, _, health) = send(&server, "GET", "/healthz", None, None, "").await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")));

    // A cross-origin "simple" request (text/plain, no credentials) reloads nothing.
    let probes = loader.probes.load(Ordering::SeqCst);
    let (status, _, _) = send(
        &server,
        "POST",
        "/v1/indexes/small/reload",
        None,
        Some("text/plain"),
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(loader.probes.load(Ordering::SeqCst), probes);

    // Token holders see where the index and its source table live.
    let (_, _, listing) = send(&server, "GET", "/v1/indexes", Some(TOKEN), None, "").await;
    let index = &listing["indexes"][0];
    assert_eq!(index["location"], LOCATION, "{listing}");
    assert_eq!(
        index["definition"]["source"]["location"], SOURCE_LOCATION,
        "{listing}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_reload_is_disabled_and_locations_are_hidden() {
    let (server, loader) = started(config(false)).await;
    let json = Some("application/json");
    let (status, _, answer) = send(
        &server,
        "POST",
        "/v1/indexes/small/search",
        None,
        json,
        &search_body(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let (probes, loads) = (
        loader.probes.load(Ordering::SeqCst),
        loader.loads.load(Ordering::SeqCst),
    );
    for content_type in [None, Some("text/plain"), json] {
        let (status, _, error) = send(
            &server,
            "POST",
            "/v1/indexes/small/reload",
            None,
            content_type,
            "",
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
        assert_eq!(error["error"]["code"], "reload_disabled");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--auth-token-file"),
            "{error}"
        );
    }
    assert_eq!(
        (
            loader.probes.load(Ordering::SeqCst),
            loader.loads.load(Ordering::SeqCst)
        ),
        (probes, loads),
        "a refused reload touched the store"
    );

    // What a browser may send cross-origin without a preflight is refused.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, _, error) = send(
            &server,
            "POST",
            "/v1/indexes/small/search",
            None,
            Some(content_type),
            &search_body(),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type}: {error}"
        );
        assert_eq!(error["error"]["code"], "unsupported_media_type");
    }

    for path in ["/v1/indexes", "/v1/indexes/small"] {
        let (status, _, listing) = send(&server, "GET", path, None, None, "").await;
        assert_eq!(status, StatusCode::OK);
        let text = listing.to_string();
        assert!(
            !text.contains(LOCATION)
                && !text.contains(SOURCE_LOCATION)
                && !text.contains("\"source\""),
            "{path} shows a location to an unauthenticated client: {text}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_needs_a_token() {
    // TEST-NET addresses (RFC 5737, RFC 3849): never local, so nothing can
    // listen on them even if the check were missing.
    for addr in ["192.0.2.1:8080", "[2001:db8::1]:8080"] {
        let loader = Arc::new(FakeLoader::default());
        loader.publish(LOCATION, snapshot(1));
        let refused = Server::bind(
            ServerConfig {
                addr: addr.parse().unwrap(),
                ..config(false)
            },
            Arc::clone(&loader) as _,
        )
        .await
        .err()
        .expect("refused");
        assert!(
            matches!(refused, ServeError::TokenRequired { .. }),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("--auth-token-file"),
            "{refused}"
        );
        assert_eq!(
            loader.loads.load(Ordering::SeqCst),
            0,
            "opened before refusing"
        );

        // With a token the check passes (and binding then fails: not our address).
        let other = Server::bind(
            ServerConfig {
                addr: addr.parse().unwrap(),
                ..config(true)
            },
            loader,
        )
        .await
        .err()
        .expect("not bindable");
        assert!(matches!(other, ServeError::Bind { .. }), "{other:?}");
    }
}

#[test]
fn the_cli_exits_2_on_a_non_loopback_address_without_a_token() {
    let run = |env_token: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"));
        command.args([
            "serve",
            "--index",
            "a=memory:///nothing",
            "--addr",
            "192.0.2.1:8080",
        ]);
        command.env_remove("PARQIVF_AUTH_TOKEN");
        if let Some(token) = env_token {
            command.env("PARQIVF_AUTH_TOKEN", token);
        }
        let output = command.output().expect("parqivf runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("192.0.2.1:8080") && stderr.contains("--auth-token-file"),
        "{stderr}"
    );
    let (code, stderr) = run(Some("short"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("at least 16"), "{stderr}");
}

async fn reload_all(server: &Running, n: usize) -> Vec<(StatusCode, Value)> {
    let server = Arc::new(server.url(""));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let base = Arc::clone(&server);
            tokio::spawn(async move {
                let response = reqwest::Client::new()
                    .post(format!("{base}/v1/indexes/small/reload"))
                    .bearer_auth(TOKEN)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .expect("reload sent");
                let status = response.status();
                (status, response.json::<Value>().await.expect("JSON"))
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_reloads_of_an_unchanged_index_open_nothing() {
    let (server, loader) = started(config(true)).await;
    // A slow store, so the reloads really overlap.
    loader.delay_ms.store(500, Ordering::SeqCst);
    let opened = loader.loads.load(Ordering::SeqCst);
    let answers = reload_all(&server, 20).await;
    for (status, body) in &answers {
        assert_eq!(*status, StatusCode::OK, "{body}");
        assert_eq!(
            body,
            &json!({"previous": "snap-1", "snapshot": "snap-1", "changed": false})
        );
    }
    assert_eq!(
        loader.loads.load(Ordering::SeqCst),
        opened,
        "an unchanged index was re-opened"
    );
    assert_eq!(
        loader.probes.load(Ordering::SeqCst),
        1,
        "concurrent reloads were not coalesced"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reloads_of_a_new_snapshot_open_it_once_then_are_rate_limited() {
    let (server, loader) = started(ServerConfig {
        reload_min_interval: Duration::from_millis(1500),
        ..config(true)
    })
    .await;
    loader.delay_ms.store(500, Ordering::SeqCst);
    loader.publish(LOCATION, snapshot(2));
    let opened = loader.loads.load(Ordering::SeqCst);
    for (status, body) in reload_all(&server, 20).await {
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body,
            json!({"previous": "snap-1", "snapshot": "snap-2", "changed": true})
        );
    }
    assert_eq!(loader.loads.load(Ordering::SeqCst), opened + 1);

    // Right after: refused with Retry-After, nothing touched.
    let probes = loader.probes.load(Ordering::SeqCst);
    let (status, headers, error) = send(
        &server,
        "POST",
        "/v1/indexes/small/reload",
        Some(TOKEN),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert_eq!(error["error"]["code"], "reload_rate_limited");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!(loader.probes.load(Ordering::SeqCst), probes);

    loader.delay_ms.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let (status, _, outcome) = send(
        &server,
        "POST",
        "/v1/indexes/small/reload",
        Some(TOKEN),
        None,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["changed"], false);
    assert_eq!(loader.loads.load(Ordering::SeqCst), opened + 1);

    let (_, _, metrics) = send(&server, "GET", "/metrics", Some(TOKEN), None, "").await;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    for line in [
        "parqivf_index_reloads_total{index=\"small\",outcome=\"swapped\"} 1",
        "parqivf_index_reloads_total{index=\"small\",outcome=\"coalesced\"} 19",
        "parqivf_index_reloads_total{index=\"small\",outcome=\"rate_limited\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} missing:\n{metrics}"
        );
    }
    server.shutdown().await;
}
