//! `refresh` of an index over a DuckLake table equals a fresh build at the
//! target snapshot: exhaustive answers (every row, nprobe = nlist) are the
//! same `(rowid, distance)` lists, across inserts, deletes, updates, files
//! added from outside, a merge of files and a rewrite that carries an
//! update through a compaction.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::refresh::{RefreshParams, compact, refresh};
use parqivf::builder::source::ducklake::DuckLakeSource;
use parqivf::builder::{BuildParams, ProgressMode, build};
use parqivf::index::{Index, SearchParams};

use crate::on_both_catalogs;
use crate::support::ducklake::{Kind, Lake};

const NLIST: u32 = 4;

fn params() -> BuildParams {
    BuildParams {
        nlist: NLIST,
        codes: None,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

async fn build_at(
    lake: &Lake,
    table: &str,
    snapshot: u64,
    store: &Arc<dyn ObjectStore>,
    at: &Path,
) {
    let source = DuckLakeSource::open(
        &lake.catalog,
        table,
        "embedding",
        &[],
        Some(snapshot),
        None,
        true,
    )
    .await
    .unwrap();
    build(Arc::new(source), store.clone(), at, &params())
        .await
        .unwrap();
}

/// Every row of the current version, ranked for a few queries.
async fn everything(store: &Arc<dyn ObjectStore>, at: &Path) -> Vec<Vec<(i64, u32)>> {
    let index = Index::open_current(store.clone(), at).await.unwrap();
    let mut out = Vec::new();
    for q in 0..4 {
        let query = vec![q as f32 * 3.0; 8];
        let r = index
            .search(
                &query,
                &SearchParams {
                    k: 10_000,
                    nprobe: Some(NLIST as usize),
                    ..SearchParams::default()
                },
            )
            .await
            .unwrap();
        out.push(
            r.hits
                .iter()
                .map(|h| (h.rowid, h.distance.to_bits()))
                .collect(),
        );
    }
    out
}

on_both_catalogs!(async refresh_equals_a_fresh_build_at_the_target_snapshot);
async fn refresh_equals_a_fresh_build_at_the_target_snapshot(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    // (table, indexed snapshot, target snapshot): inserts, deletes and
    // updates (docs 5 → 11), files added from outside and their deletes
    // and updates (docs 11 → 20), merged files (merged 33 → 34: nothing
    // changes), a rewrite and a merge after a delete and an update
    // (compacted 38 → 43, 39 → 43, 40 → 42).
    for (table, from, to) in [
        ("s1.docs", 5, 11),
        ("s1.docs", 11, 20),
        ("s1.merged", 33, 34),
        ("s1.compacted", 38, 43),
        ("s1.compacted", 39, 43),
        ("s1.compacted", 40, 42),
    ] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (idx, fresh) = (Path::from("idx"), Path::from("fresh"));
        build_at(&lake, table, from, &store, &idx).await;
        // A PostgreSQL catalog's credentials never reach index.json: give them.
        let source = match kind {
            Kind::Postgres => Some(format!("ducklake:postgres:{}", lake.target)),
            Kind::Sqlite => None,
        };
        let p = RefreshParams {
            source,
            snapshot: Some(to),
            ..RefreshParams::default()
        };
        let r = refresh(store.clone(), &idx, &p, &params()).await.unwrap();
        build_at(&lake, table, to, &store, &fresh).await;
        let case = format!("{table} {from} → {to}: {r:?}");
        if (table, from, to) == ("s1.merged", 33, 34)
            || (table, from, to) == ("s1.compacted", 40, 42)
        {
            assert_eq!((r.rows_added, r.rows_removed), (0, 0), "{case}");
        } else {
            assert!(r.rows_added + r.rows_removed > 0, "{case}");
        }
        assert_eq!(
            everything(&store, &idx).await,
            everything(&store, &fresh).await,
            "{case}"
        );
        if r.version.is_some() {
            compact(store.clone(), &idx, &params()).await.unwrap();
            assert_eq!(
                everything(&store, &idx).await,
                everything(&store, &fresh).await,
                "{case}: compacted"
            );
        }
    }
}
