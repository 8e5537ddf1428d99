//! Orphan Parquet files (on disk, absent from the catalog: the fixture has 7,
//! listed in `ducklake_files_scheduled_for_deletion`) are never opened. Every
//! request goes through the counting `ObjectStore` wrapper; the scan of every
//! table at every snapshot touches only locations the catalog lists, never
//! lists a prefix, and never touches an orphan.

use std::sync::Arc;

use crate::on_both_catalogs;
use crate::support::ducklake::*;
use parqivf::catalog::ducklake::{DuckLakeOptions, DuckLakeTable};
use parqivf::catalog::paths;
use parqivf::store::counting::CountingStore;

on_both_catalogs!(async orphan_files_are_never_opened);
async fn orphan_files_are_never_opened(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    lake.rewrite_outside(&dir.path().join("outside/o.parquet"));
    let root = dir.path().canonicalize().unwrap().join("data");

    // The orphans, from the catalog's own list; they are on disk.
    let orphans: Vec<String> = lake
        .strings("SELECT path FROM ducklake_files_scheduled_for_deletion")
        .into_iter()
        .map(|p| {
            object_store::path::Path::from_filesystem_path(root.join(p))
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(orphans.len(), 7);
    for o in &orphans {
        assert!(std::path::Path::new("/").join(o).exists(), "{o} is on disk");
    }

    let store = Arc::new(CountingStore::new(Arc::new(
        object_store::local::LocalFileSystem::new(),
    )));
    let expected = expected();
    let latest = expected["latest_snapshot"].as_u64().unwrap();
    let mut listed = std::collections::HashSet::new();
    for table in TABLES {
        for snapshot in 0..=latest {
            let options = DuckLakeOptions {
                snapshot: Some(snapshot),
                store: Some(store.clone()),
                ..Default::default()
            };
            let Ok(t) = DuckLakeTable::open(&lake.catalog, table, &options) else {
                continue;
            };
            for location in t.locations() {
                listed.insert(paths::object_path(location).unwrap().to_string());
            }
            t.scan(&["rowid", "id", "embedding"]).await.unwrap();
        }
    }
    let reads = store.read_paths();
    assert!(!reads.is_empty());
    assert_eq!(
        store.counts().list_requests,
        0,
        "the scan never lists a prefix"
    );
    for read in &reads {
        assert!(!orphans.contains(read), "orphan {read} was opened");
        assert!(
            listed.contains(read),
            "{read} is not a file the catalog lists"
        );
    }
    // And every file the catalog lists was read at some snapshot.
    let read: std::collections::HashSet<&String> = reads.iter().collect();
    for l in &listed {
        assert!(read.contains(l), "{l} listed but never read");
    }
}
