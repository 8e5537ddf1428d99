//! Search answers: exhaustive probing equals brute force exactly (ties by
//! rowid), recall at a partial nprobe, payloads, and typed errors for bad
//! input and unknown format versions.

use crate::support;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::index::{Index, IndexError, QueryError, SearchParams};
use std::sync::Arc;
use support::fixtures::{Layout, brute_force, dataset, hierarchy, rowids, write_index};

const DIM: usize = 8;
const N: usize = 3000;

async fn fixture(layout: Layout) -> (Arc<dyn ObjectStore>, Vec<f32>, Vec<i64>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = dataset(N, DIM, 7);
    let ids = rowids(N);
    let h = hierarchy(&data, DIM, 4, 32, 11);
    write_index(store.clone(), &Path::from("idx"), &h, &data, &ids, layout).await;
    (store, data, ids)
}

#[tokio::test]
async fn nprobe_nlist_equals_brute_force_with_ties_by_rowid() {
    let (store, data, ids) = fixture(Layout::default()).await;
    let index = Index::open(store, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        k: 10,
        nprobe: Some(32),
        ..SearchParams::default()
    };
    // Queries: dataset rows (row 42 has an exact duplicate, row 49: a tie at
    // distance 0), plus a perturbed row.
    let mut queries = Vec::new();
    for i in [42usize, 99, 7, 500, 1234, 2999] {
        queries.extend_from_slice(&data[i * DIM..(i + 1) * DIM]);
    }
    queries.extend(data[10 * DIM..11 * DIM].iter().map(|x| x + 0.25));
    let batch = index.search_batch(&queries, &params).await.unwrap();
    for (qi, q) in queries.chunks_exact(DIM).enumerate() {
        let expected = brute_force(index.hierarchy().metric, DIM, &data, &ids, q, 10);
        let got: Vec<(i64, f32)> = batch[qi]
            .hits
            .iter()
            .map(|h| (h.rowid, h.distance))
            .collect();
        assert_eq!(got, expected, "query {qi}");
        let single = index.search(q, &params).await.unwrap();
        assert_eq!(single.hits, batch[qi].hits);
    }
    // The tie: row 49 duplicates row 42; both at distance 0, smaller rowid first.
    let (a, b) = (ids[42], ids[49]);
    let first: Vec<i64> = batch[0].hits.iter().take(2).map(|h| h.rowid).collect();
    assert_eq!(first, vec![a.min(b), a.max(b)]);
    assert_eq!(batch[0].hits[1].distance, 0.0);
}

#[tokio::test]
async fn recall_at_10_on_a_small_clustered_set() {
    let (store, data, ids) = fixture(Layout::default()).await;
    let index = Index::open(store, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    let queries: Vec<f32> = (0..50)
        .flat_map(|i| {
            data[(i * 37) * DIM..(i * 37 + 1) * DIM]
                .iter()
                .map(|x| x + 0.1)
        })
        .collect();
    let results = index.search_batch(&queries, &params).await.unwrap();
    let mut found = 0;
    for (q, r) in queries.chunks_exact(DIM).zip(&results) {
        let truth: Vec<i64> = brute_force(index.hierarchy().metric, DIM, &data, &ids, q, 10)
            .iter()
            .map(|t| t.0)
            .collect();
        found += r.hits.iter().filter(|h| truth.contains(&h.rowid)).count();
    }
    let recall = found as f64 / 500.0;
    assert!(recall >= 0.95, "recall@10 at nprobe 8 of 32 is {recall}");
}

#[tokio::test]
async fn payload_only_when_asked() {
    let (store, _, _) = fixture(Layout {
        payload: true,
        ..Layout::default()
    })
    .await;
    let index = Index::open(store, &Path::from("idx")).await.unwrap();
    let q = vec![0.5f32; DIM];
    index.search(&q, &SearchParams::default()).await.unwrap(); // footers now cached
    let plain = index.search(&q, &SearchParams::default()).await.unwrap();
    assert!(plain.hits.iter().all(|h| h.payload.is_none()));
    let with = index
        .search(
            &q,
            &SearchParams {
                include_payload: true,
                ..SearchParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(with.hits.len(), 10);
    for h in &with.hits {
        let title = h
            .payload
            .as_ref()
            .and_then(|p| p.get("title"))
            .and_then(|t| t.as_str());
        assert_eq!(title, Some(format!("row-{}", h.rowid).as_str()));
    }
    assert!(
        with.stats.bytes > plain.stats.bytes,
        "payload column chunks are fetched only when asked"
    );
}

#[tokio::test]
async fn bad_queries_are_typed_errors() {
    let (store, _, _) = fixture(Layout::default()).await;
    let index = Index::open(store, &Path::from("idx")).await.unwrap();
    let p = SearchParams::default();
    let q = vec![0.0f32; DIM];
    assert!(matches!(
        index.search(&q[..DIM - 1], &p).await,
        Err(IndexError::Query(QueryError::DimensionMismatch {
            expected: DIM,
            actual: 7,
            ..
        }))
    ));
    let mut nan = q.clone();
    nan[3] = f32::NAN;
    assert!(matches!(
        index.search(&nan, &p).await,
        Err(IndexError::Query(QueryError::NonFinite {
            query: 0,
            position: 3,
            ..
        }))
    ));
    assert!(matches!(
        index.search(&q, &SearchParams { k: 0, ..p.clone() }).await,
        Err(IndexError::Query(QueryError::InvalidK))
    ));
    assert!(matches!(
        index
            .search(
                &q,
                &SearchParams {
                    nprobe: Some(33),
                    ..p.clone()
                }
            )
            .await,
        Err(IndexError::Query(QueryError::InvalidNprobe {
            nprobe: 33,
            nlist: 32
        }))
    ));
    let two = [q.clone(), q.clone()].concat();
    assert!(matches!(
        index.search_batch(&two[..DIM + 3], &p).await,
        Err(IndexError::Query(QueryError::DimensionMismatch {
            query: 1,
            actual: 3,
            ..
        }))
    ));
}
