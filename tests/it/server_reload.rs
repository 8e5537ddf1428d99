//! Snapshot swaps while clients query: no request fails, and every answer
//! comes entirely from one snapshot — the one its `snapshot` field names —
//! and equals that snapshot's direct answer. A request already running when a
//! swap happens finishes on the old snapshot.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parqivf::server::{Limits, SearchParams, ServerConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::server::{
    BruteForce, FakeLoader, Gate, ROWID_STRIDE, TOKEN, hits_of, pairs, start, token,
};

const DIM: usize = 8;
const LOCATION: &str = "memory:///live";

fn config() -> ServerConfig {
    ServerConfig {
        indexes: vec![("live".into(), LOCATION.into())],
        limits: Limits {
            max_k: 10,
            default_k: 10,
            ..Limits::default()
        },
        queue: 64,
        workers: 2,
        // Reload needs the token; this test reloads every 30 ms on purpose.
        auth_token: token(),
        reload_min_interval: Duration::ZERO,
        ..ServerConfig::default()
    }
}

fn snapshot(n: u32) -> Arc<BruteForce> {
    // Different data per snapshot, rowids tagged with the snapshot number.
    Arc::new(BruteForce::random(200, DIM, u64::from(n), n))
}

async fn search(client: &reqwest::Client, url: &str, query: &[f32]) -> (StatusCode, Value) {
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .body(json!({"vector": query, "k": 10}).to_string())
        .send()
        .await
        .expect("sent");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_load_never_fail_or_mix_snapshots() {
    const SNAPSHOTS: u32 = 15;
    let backends: BTreeMap<u32, Arc<BruteForce>> =
        (1..=SNAPSHOTS).map(|n| (n, snapshot(n))).collect();
    let loader = Arc::new(FakeLoader::default());
    loader.publish(LOCATION, Arc::clone(&backends[&1]));
    let server = start(config(), Arc::clone(&loader)).await;
    let url = server.url("/v1/indexes/live/search");
    let stop = Arc::new(AtomicBool::new(false));
    let params = SearchParams {
        k: 10,
        nprobe: Some(8),
        include_payload: false,
        ..SearchParams::default()
    };

    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (url, stop, backends, params) = (
                url.clone(),
                Arc::clone(&stop),
                backends.clone(),
                params.clone(),
            );
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut seen = Vec::new();
                let mut i = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let query: Vec<f32> = (0..DIM)
                        .map(|d| ((c * 31 + i * 7 + d as u32) % 17) as f32 / 8.0 - 1.0)
                        .collect();
                    let (status, body) = search(&client, &url, &query).await;
                    assert_eq!(status, StatusCode::OK, "{body}");
                    let name = body["snapshot"].as_str().expect("snapshot");
                    let n: u32 = name
                        .strip_prefix("snap-")
                        .and_then(|n| n.parse().ok())
                        .expect("snapshot number");
                    let hits = hits_of(&body["results"][0]);
                    assert!(
                        hits.iter()
                            .all(|(rowid, _)| rowid / ROWID_STRIDE == i64::from(n)),
                        "mixed answer {body}"
                    );
                    assert_eq!(hits, pairs(&backends[&n].answer(&query, &params)));
                    seen.push(n);
                    i += 1;
                }
                seen
            })
        })
        .collect();

    let admin = reqwest::Client::new();
    for n in 2..=SNAPSHOTS {
        tokio::time::sleep(Duration::from_millis(30)).await;
        loader.publish(LOCATION, Arc::clone(&backends[&n]));
        let response = admin
            .post(server.url("/v1/indexes/live/reload"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("reload sent");
        assert_eq!(response.status(), StatusCode::OK);
        let outcome: Value = response.json().await.unwrap();
        assert_eq!(outcome["snapshot"], format!("snap-{n}"));
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    stop.store(true, Ordering::SeqCst);

    let mut answers = 0;
    let mut distinct = std::collections::BTreeSet::new();
    for client in clients {
        let seen = tokio::time::timeout(Duration::from_secs(60), client)
            .await
            .expect("bounded")
            .expect("no failed request");
        // Each client only ever moves forward through snapshots.
        assert!(
            seen.windows(2).all(|w| w[0] <= w[1]),
            "a client went back to an older snapshot: {seen:?}"
        );
        answers += seen.len();
        distinct.extend(seen);
    }
    assert!(answers >= 16, "only {answers} answers");
    assert!(distinct.len() >= 3, "answers came from only {distinct:?}");
    assert!(
        distinct.contains(&SNAPSHOTS),
        "the last snapshot was never served"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_request_finishes_on_the_old_snapshot() {
    let gate = Arc::new(Gate::default());
    let old = Arc::new(BruteForce {
        gate: Some(Arc::clone(&gate)),
        ..BruteForce::random(200, DIM, 1, 1)
    });
    let new = snapshot(2);
    let loader = Arc::new(FakeLoader::default());
    loader.publish(LOCATION, Arc::clone(&old));
    let server = start(config(), Arc::clone(&loader)).await;
    let url = server.url("/v1/indexes/live/search");
    let query = [0.25f32; DIM];

    let blocked = {
        let url = url.clone();
        tokio::spawn(async move { search(&reqwest::Client::new(), &url, &query).await })
    };
    gate.wait_entered(1).await;
    loader.publish(LOCATION, Arc::clone(&new));
    let reload = reqwest::Client::new()
        .post(server.url("/v1/indexes/live/reload"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(reload.json::<Value>().await.unwrap()["changed"], true);

    let params = SearchParams {
        k: 10,
        nprobe: Some(8),
        include_payload: false,
        ..SearchParams::default()
    };
    let (status, fresh) = search(&reqwest::Client::new(), &url, &query).await;
    assert_eq!(
        (status, fresh["snapshot"].as_str()),
        (StatusCode::OK, Some("snap-2"))
    );
    assert_eq!(
        hits_of(&fresh["results"][0]),
        pairs(&new.answer(&query, &params))
    );

    gate.open();
    let (status, finished) = blocked.await.unwrap();
    assert_eq!(
        (status, finished["snapshot"].as_str()),
        (StatusCode::OK, Some("snap-1"))
    );
    assert_eq!(
        hits_of(&finished["results"][0]),
        pairs(&old.answer(&query, &params))
    );
    server.shutdown().await;
}
