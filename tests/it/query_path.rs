//! The query path end to end: the async search leaves its tokio thread free
//! (selection, decoding and scanning run on rayon), and HTTP sets every
//! search parameter of the library under its own name and answers with the
//! library's one stats type.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::index::{Index, SearchParams, SearchStats};
use parqivf::server::index_backend::IndexLoader;
use parqivf::server::{Server, ServerConfig};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const DIM: usize = 16;
const NLIST: u32 = 16;

fn vectors(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n * DIM)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect()
}

/// Build and publish an index of `n` random vectors at the local `location`.
async fn publish(location: &str, n: usize) {
    let (store, idx) = parqivf::store::location::open(location).unwrap();
    let params = BuildParams {
        nlist: NLIST,
        roots: Some(4),
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let src = Arc::new(ArraySource::new(vectors(n, 1), DIM, "generated").unwrap());
    build(src, store, &idx, &params).await.unwrap();
}

async fn open(location: &str) -> Index {
    let (store, idx) = parqivf::store::location::open(location).unwrap();
    Index::open_current(store, &idx).await.unwrap()
}

fn rowids(hits: &[parqivf::index::Hit]) -> Vec<i64> {
    hits.iter().map(|h| h.rowid).collect()
}

/// On a `current_thread` runtime, a compute-heavy batch (every list probed,
/// no IO: the index is preloaded) must leave the one thread free: a ticker
/// task on the same runtime keeps running while the search is in flight.
/// When the search computed on the calling task, the search future finished
/// in its first poll and the ticker never ran meanwhile.
#[test]
fn search_leaves_a_current_thread_runtime_free_while_it_computes() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("idx").display().to_string();
    let multi = tokio::runtime::Runtime::new().unwrap();
    multi.block_on(publish(&location, 4000));
    let queries = vectors(1500, 7);
    let params = SearchParams {
        k: 10,
        nprobe: Some(NLIST as usize),
        ..SearchParams::default()
    };
    let expected = multi.block_on(async {
        let index = open(&location).await;
        index.search_batch(&queries, &params).await.unwrap()
    });

    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (got, ticks) = single.block_on(async {
        let index = open(&location).await;
        index.preload(parqivf::index::Preload::All).await.unwrap();
        let ticks = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = tokio::spawn({
            let (ticks, stop) = (Arc::clone(&ticks), Arc::clone(&stop));
            async move {
                while !stop.load(Ordering::SeqCst) {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            }
        });
        tokio::task::yield_now().await; // the ticker is running
        let before = ticks.load(Ordering::SeqCst);
        let got = index.search_batch(&queries, &params).await.unwrap();
        let during = ticks.load(Ordering::SeqCst) - before;
        stop.store(true, Ordering::SeqCst);
        ticker.await.unwrap();
        (got, during)
    });
    assert!(
        ticks > 0,
        "the ticker never ran while a {}-query batch was searched",
        queries.len() / DIM
    );
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(rowids(&g.hits), rowids(&e.hits));
        assert_eq!((g.stats.requests, g.stats.bytes), (0, 0), "preloaded");
    }
}

/// Starts the server on 127.0.0.1:0 over `location` as index `docs`.
async fn serve(location: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![("docs".into(), location.to_string())],
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(IndexLoader::default()))
        .await
        .unwrap();
    let base = format!("http://{}/v1/indexes/docs/search", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    (base, stop)
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn http_rowids(result: &Value) -> Vec<i64> {
    result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["rowid"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sets_every_search_parameter_and_returns_the_library_stats() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("idx").display().to_string();
    publish(&location, 2000).await;
    let library = open(&location).await;
    let (url, stop) = serve(&location).await;

    // root_factor reaches the index: with 1 root's worth of leaves the answer
    // differs from exact selection for some query, and HTTP equals the
    // library for both.
    let queries = vectors(40, 3);
    let mut differ = 0;
    for q in queries.chunks(DIM) {
        for root_factor in [0, 1] {
            let sp = SearchParams {
                k: 5,
                nprobe: Some(2),
                root_factor,
                include_payload: true,
                ..SearchParams::default()
            };
            let want = library.search(q, &sp).await.unwrap();
            let body = json!({
                "vector": q, "k": 5, "nprobe": 2, "root_factor": root_factor,
                "include_payload": true,
            });
            let (status, got) = post(&url, body).await;
            assert_eq!(status, 200, "{got}");
            let result = &got["results"][0];
            assert_eq!(http_rowids(result), rowids(&want.hits));
            assert!(
                result["hits"][0].get("payload").is_some(),
                "include_payload asks for payloads: {result}"
            );
        }
        let exact = SearchParams {
            k: 5,
            nprobe: Some(2),
            ..SearchParams::default()
        };
        let pruned = SearchParams {
            root_factor: 1,
            ..exact.clone()
        };
        let a = library.search(q, &exact).await.unwrap();
        let b = library.search(q, &pruned).await.unwrap();
        differ += usize::from(rowids(&a.hits) != rowids(&b.hits));
    }
    assert!(differ > 0, "root_factor 1 never changed an answer");

    // Out of range: a 400 naming the field and the numbers.
    let (status, err) = post(
        &url,
        json!({ "vector": &queries[..DIM], "root_factor": NLIST + 1 }),
    )
    .await;
    assert_eq!(status, 400, "{err}");
    let text = err.to_string();
    assert!(text.contains("root_factor_out_of_range"), "{text}");
    assert!(
        text.contains("root_factor = 17") && text.contains("16"),
        "{text}"
    );

    // Stats: exactly the library's field names (`footers_cached`, …).
    let (status, got) = post(
        &url,
        json!({ "vector": &queries[..DIM], "include": ["stats"] }),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let stats = &got["results"][0]["stats"];
    assert_eq!(
        keys(stats),
        // A calibrated index (the build's default) adds its estimate.
        keys(
            &serde_json::to_value(SearchStats {
                estimated_recall: Some(0.5),
                ..SearchStats::default()
            })
            .unwrap()
        )
    );
    assert!(stats.get("footers_cached").is_some() && stats.get("footers_from_cache").is_none());
    stop.send(()).unwrap();
}
