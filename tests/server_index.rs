//! `parqivf serve` over a real index: a snapshot built by the build job,
//! opened through the commit log by `IndexLoader`, answers over TCP exactly
//! as the library does; a newly published version is picked up by reload.

use std::sync::Arc;

use object_store::path::Path;
use parqivf::build::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::index::{Index, SearchParams};
use parqivf::server::index_backend::IndexLoader;
use parqivf::server::{Server, ServerConfig};
use rand::{Rng, SeedableRng};

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
        nprobe: 4,
        ..SearchParams::default()
    };
    let ask = |q: Vec<f32>| {
        let client = client.clone();
        let url = format!("{base}/v1/indexes/docs/search");
        async move {
            let r = client
                .post(url)
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

    // Publish version 2 (different data), reload, and answers come from it.
    publish(&location, vectors(3000, dim, 2), dim).await;
    let r = client
        .post(format!("{base}/v1/indexes/docs/reload"))
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
