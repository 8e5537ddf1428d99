//! Cosine end to end (issue #17, item 2): vectors of any finite magnitude
//! keep their direction through build and search, a zero vector is a typed
//! error (never a row at distance 0 that takes over every answer), and with
//! every list probed the answers equal brute force by the f64 cosine.

use crate::support;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::builder::{ArraySource, BuildError, BuildParams, ProgressMode, build};
use parqivf::distance::Metric;
use parqivf::format::definition::IndexDefinition;
use parqivf::index::{Index, IndexError, QueryError, SearchParams};

const DIM: usize = 16;
const N: usize = 2000;
const NLIST: u32 = 16;

fn params() -> BuildParams {
    BuildParams {
        nlist: NLIST,
        metric: Metric::Cosine,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

/// Random rows; row 7 scaled to 1e-30 and row 8 to 1e30 (both keep their
/// direction), the rest as drawn.
fn data() -> Vec<f32> {
    let mut v = support::fixtures::random_vectors(N, DIM, 5);
    v[7 * DIM..8 * DIM].iter_mut().for_each(|x| *x *= 1e-30);
    v[8 * DIM..9 * DIM].iter_mut().for_each(|x| *x *= 1e30);
    v
}

async fn built(data: Vec<f32>) -> Index {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(ArraySource::new(data, DIM, "generated").unwrap());
    build(src, store.clone(), &idx, &params()).await.unwrap();
    Index::open_current(store, &idx).await.unwrap()
}

/// Brute force by the f64 cosine on the raw rows: `(distance, rowid)`.
fn brute(data: &[f32], q: &[f32], k: usize) -> Vec<(f32, i64)> {
    let mut all: Vec<(f32, i64)> = data
        .chunks_exact(DIM)
        .enumerate()
        .map(|(i, r)| (Metric::Cosine.distance(q, r), i as i64))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.truncate(k);
    all
}

#[tokio::test]
async fn tiny_and_huge_rows_keep_their_direction_and_full_probe_equals_brute_force() {
    let data = data();
    let index = built(data.clone()).await;
    // Every list probed and every row re-ranked: the exact answer.
    let full = SearchParams {
        k: 10,
        nprobe: Some(NLIST as usize),
        rerank: Some(N.div_ceil(10)),
        ..SearchParams::default()
    };
    // The scan's `1 − dot` on unit vectors against the f64 cosine on raw
    // rows: each side errs by at most (d + 2)·ε₃₂ plus the normalisations'
    // 2·ε₃₂ each (see `distance`'s precision table).
    let tol = (DIM as f32 + 8.0) * f32::EPSILON;
    let mut tiny_first = 0;
    for qi in (0..N).step_by(97).chain([7, 8]) {
        let q: Vec<f32> = data[qi * DIM..(qi + 1) * DIM]
            .iter()
            .map(|x| x * 0.5 + 0.01)
            .collect();
        let got = index.search(&q, &full).await.unwrap().hits;
        let want = brute(&data, &q, 10);
        assert_eq!(got.len(), 10);
        for (rank, (h, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (h.distance - w.0).abs() <= tol,
                "query {qi} rank {rank}: {} vs {}",
                h.distance,
                w.0
            );
            // Same row unless the two are a near-tie.
            if h.rowid != w.1 {
                let theirs = Metric::Cosine.distance(&q, &data[h.rowid as usize * DIM..][..DIM]);
                assert!((theirs - w.0).abs() <= 2.0 * tol, "query {qi} rank {rank}");
            }
        }
        tiny_first += usize::from(got[0].rowid == 7 && qi != 7);
        // The same query scaled by 1e-30 has the same answer.
        let scaled: Vec<f32> = q.iter().map(|x| x * 1e-30).collect();
        let again = index.search(&scaled, &full).await.unwrap().hits;
        let ids = |h: &[parqivf::index::Hit]| h.iter().map(|h| h.rowid).collect::<Vec<_>>();
        assert_eq!(ids(&again), ids(&got), "query {qi} scaled by 1e-30");
    }
    assert_eq!(
        tiny_first, 0,
        "the 1e-30 row must not come first for other queries"
    );
    // Its own direction finds it, at distance ~0.
    let own = index
        .search(&data[7 * DIM..8 * DIM], &full)
        .await
        .unwrap()
        .hits;
    assert_eq!(own[0].rowid, 7);
    assert!(own[0].distance.abs() <= tol);
}

#[tokio::test]
async fn a_zero_query_is_a_typed_error() {
    let index = built(support::fixtures::random_vectors(500, DIM, 3)).await;
    let err = index
        .search(&[0.0; DIM], &SearchParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, IndexError::Query(QueryError::NoDirection { query: 0 })),
        "{err}"
    );
    // In a batch, the error names the zero query.
    let mut batch = support::fixtures::random_vectors(3, DIM, 4);
    batch[2 * DIM..].iter_mut().for_each(|x| *x = 0.0);
    let err = index
        .search_batch(&batch, &SearchParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, IndexError::Query(QueryError::NoDirection { query: 2 })),
        "{err}"
    );
}

#[tokio::test]
async fn a_zero_row_fails_the_build_and_publishes_nothing() {
    let mut data = support::fixtures::random_vectors(500, DIM, 6);
    data[41 * DIM..42 * DIM].iter_mut().for_each(|x| *x = 0.0);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(ArraySource::new(data, DIM, "generated").unwrap());
    let err = build(src, store.clone(), &idx, &params())
        .await
        .unwrap_err();
    assert!(
        matches!(err, BuildError::NoDirection { rowid: 41 }),
        "{err}"
    );
    assert!(
        parqivf::format::warehouse::current(&store, &idx)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_version_1_cosine_index_is_refused_not_scanned_with_the_wrong_formula() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(
        ArraySource::new(support::fixtures::random_vectors(300, DIM, 8), DIM, "g").unwrap(),
    );
    build(src, store.clone(), &idx, &params()).await.unwrap();
    let (_, snapshot) = parqivf::format::warehouse::current_snapshot(&store, &idx)
        .await
        .unwrap();
    let path = snapshot.clone().join("index.json");
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        v["format-version"],
        parqivf::format::definition::INDEX_FORMAT_VERSION,
        "cosine indexes are written as the current version (2 or later)"
    );
    v["format-version"] = 1.into();
    let err = IndexDefinition::from_json(serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.to_string().contains("rebuild the index"), "{err}");
    // The same document with metric l2 is a readable version-1 index.
    v["metric"] = "l2".into();
    IndexDefinition::from_json(serde_json::to_vec(&v).unwrap()).unwrap();
}

#[tokio::test]
async fn with_skip_invalid_a_zero_row_is_skipped_and_counted() {
    let mut data = support::fixtures::random_vectors(500, DIM, 6);
    data[41 * DIM..42 * DIM].iter_mut().for_each(|x| *x = 0.0);
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(
        ArraySource::new(data.clone(), DIM, "generated")
            .unwrap()
            .with_skip_invalid(true),
    );
    let summary = build(src, store.clone(), &idx, &params()).await.unwrap();
    assert_eq!((summary.rows, summary.skipped_rows), (499, 1));
    let index = Index::open_current(store, &idx).await.unwrap();
    let all = SearchParams {
        k: 500,
        nprobe: Some(NLIST as usize),
        ..SearchParams::default()
    };
    let hits = index.search(&data[..DIM], &all).await.unwrap().hits;
    assert_eq!(hits.len(), 499);
    assert!(hits.iter().all(|h| h.rowid != 41));
}
