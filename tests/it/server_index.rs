//! `parqivf serve` over a real index: a snapshot built by the build job,
//! opened through the commit log by `IndexLoader`, answers over TCP exactly
//! as the library does; a newly published version is picked up by reload
//! (and an unchanged one is not re-opened); `/v1/indexes/{name}` and
//! `/metrics` report the bytes the footer and postings caches really hold.

use parqivf::index::Preload;
use std::sync::Arc;

use object_store::path::Path;
use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::index::{Index, SearchParams};
use parqivf::server::index_backend::IndexLoader;
use parqivf::server::{AuthToken, Server, ServerConfig};
use rand::{Rng, SeedableRng};

const TOKEN: &str = "index-test-token-0123456789";

fn vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect()
}

/// The rowids of the first result of a search response, best first.
fn rowids(body: &serde_json::Value) -> Vec<i64> {
    body["results"][0]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["rowid"].as_i64().unwrap())
        .collect()
}

async fn publish(location: &str, data: Vec<f32>, dim: usize) {
    let (store, idx) = parqivf::store::location::open(location).unwrap();
    let params = BuildParams {
        nlist: 16,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let src = Arc::new(ArraySource::new(data, dim, "generated").unwrap());
    build(src, store, &idx, &params).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_equal_the_library_and_reload_picks_up_new_versions() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("idx").display().to_string();
    let dim = 8;
    publish(&location, vectors(2000, dim, 1), dim).await;

    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![("docs".into(), location.clone())],
        auth_token: Some(AuthToken::new(TOKEN).unwrap()),
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(IndexLoader::default()))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let queries = vectors(5, dim, 9);

    let (store, idx) = parqivf::store::location::open(&location).unwrap();
    let library = Index::open_current(store.clone(), &idx).await.unwrap();
    let sp = SearchParams {
        k: 5,
        nprobe: Some(4),
        ..SearchParams::default()
    };
    let ask = |q: Vec<f32>| {
        let client = client.clone();
        let url = format!("{base}/v1/indexes/docs/search");
        async move {
            let r = client
                .post(url)
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({ "vector": q, "k": 5, "nprobe": 4 }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    for q in queries.chunks(dim) {
        let body = ask(q.to_vec()).await;
        let want = library.search(q, &sp).await.unwrap();
        let got = rowids(&body);
        assert_eq!(got, want.hits.iter().map(|h| h.rowid).collect::<Vec<_>>());
        assert!(body["snapshot"].as_str().unwrap().starts_with("v1:"));
    }

    // Nothing published: a reload changes nothing.
    let r = client
        .post(format!("{base}/v1/indexes/docs/reload"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let outcome: serde_json::Value = r.json().await.unwrap();
    assert_eq!(outcome["changed"], false, "{outcome}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await; // the reload rate limit

    // Publish version 2 (different data), reload, and answers come from it.
    publish(&location, vectors(3000, dim, 2), dim).await;
    let r = client
        .post(format!("{base}/v1/indexes/docs/reload"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "reload: {}", r.status());
    let body = ask(queries[..dim].to_vec()).await;
    assert!(
        body["snapshot"].as_str().unwrap().starts_with("v2:"),
        "{body}"
    );
    let v2 = Index::open_current(store, &Path::from(idx.as_ref()))
        .await
        .unwrap();
    let want = v2.search(&queries[..dim], &sp).await.unwrap();
    let got = rowids(&body);
    assert_eq!(got, want.hits.iter().map(|h| h.rowid).collect::<Vec<_>>());

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// GETs `path` with the token.
async fn get_text(base: &str, path: &str) -> String {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of `name{index="docs",...}` in Prometheus text.
fn gauge(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{index=\"docs\"")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_bytes_are_the_ones_the_index_holds() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("idx").display().to_string();
    let (n, dim) = (2000, 8);
    publish(&location, vectors(n, dim, 3), dim).await;
    for (preload, warm) in [
        (Preload::None, true),
        (Preload::All, false),
        (Preload::Codes, false),
    ] {
        let config = ServerConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            indexes: vec![("docs".into(), location.clone())],
            auth_token: Some(AuthToken::new(TOKEN).unwrap()),
            ..ServerConfig::default()
        };
        let loader = IndexLoader {
            preload,
            warm,
            ..IndexLoader::default()
        };
        let server = Server::bind(config, Arc::new(loader)).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        let info: serde_json::Value =
            serde_json::from_str(&get_text(&base, "/v1/indexes/docs").await).unwrap();
        // What the open cost: a local folder opens in rounds too.
        let open = &info["open"];
        assert!(
            open["rounds"].as_u64().unwrap() >= 1 && open["bytes"].as_u64().unwrap() > 0,
            "{open}"
        );
        assert!(open["requests"].as_u64().unwrap() >= open["rounds"].as_u64().unwrap());
        let cache = &info["cache"];
        let footer = cache["footer_cache_bytes"].as_u64().unwrap();
        let postings = cache["postings_cache_bytes"].as_u64().unwrap();
        let metrics = get_text(&base, "/metrics").await;
        assert_eq!(gauge(&metrics, "parqivf_index_footer_cache_bytes"), footer);
        assert_eq!(
            gauge(&metrics, "parqivf_index_postings_cache_bytes"),
            postings
        );
        assert_eq!(cache["preloaded"], preload != Preload::None);
        assert_eq!(cache["preload"], serde_json::to_value(preload).unwrap());
        if preload == Preload::All {
            // Every posting decoded: at least a rowid and a vector per row.
            assert!(
                postings >= (n * (8 + 4 * dim)) as u64,
                "preloaded {n} x {dim} but the postings cache holds {postings} bytes"
            );
        } else if preload == Preload::Codes {
            // Rowids and codes, no vectors.
            assert!(
                postings >= (n * 8) as u64 && postings < (n * (8 + 4 * dim + 64)) as u64,
                "preloaded codes of {n} x {dim} but the postings cache holds {postings} bytes"
            );
        } else {
            // --warm read every footer (about 1 KiB per row group) and decoded nothing.
            assert!(footer > 0, "warmed but the footer cache holds 0 bytes");
            assert_eq!(postings, 0);
        }
        stop.send(()).unwrap();
        running.await.unwrap().unwrap();
    }
}
