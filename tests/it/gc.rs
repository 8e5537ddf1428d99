//! `gc`: unreferenced snapshot folders older than the grace period are
//! deleted; snapshots any version names, and unreferenced ones inside the
//! grace period, are kept. The CLI's `parqivf gc --index … --older-than …`.

use crate::support;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::format::warehouse::Publisher;
use parqivf::format::warehouse::{commit_pinned, gc, unreferenced_snapshots};
use std::process::Command;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const HOUR_MS: u64 = 3_600_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn snapshot(store: &Arc<dyn ObjectStore>, index: &Path, id: &str) {
    for rel in [
        "index.json",
        "postings/manifest.json",
        "postings/cid_bucket=000000/part-00000.parquet",
    ] {
        let p = rel
            .split('/')
            .fold(index.clone().join("snapshots").join(id), |p, s| p.join(s));
        store
            .put(&p, PutPayload::from(vec![1u8; 10]))
            .await
            .unwrap();
    }
}

async fn present(store: &Arc<dyn ObjectStore>, index: &Path, id: &str) -> bool {
    store
        .head(&index.clone().join("snapshots").join(id).join("index.json"))
        .await
        .is_ok()
}

#[tokio::test]
async fn gc_deletes_only_old_unreferenced_snapshots() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = Path::from("idx");
    for id in ["a", "b", "orphan"] {
        snapshot(&store, &index, id).await;
    }
    commit_pinned(
        &store,
        &index,
        "snapshots/a",
        None,
        1,
        vec![],
        Publisher::Build,
    )
    .await
    .unwrap();
    commit_pinned(
        &store,
        &index,
        "snapshots/b",
        Some(1),
        2,
        vec![],
        Publisher::Build,
    )
    .await
    .unwrap();
    let unreferenced = unreferenced_snapshots(&store, &index).await.unwrap();
    assert_eq!(
        unreferenced
            .iter()
            .map(|f| f.snapshot.as_str())
            .collect::<Vec<_>>(),
        ["snapshots/orphan"]
    );
    assert_eq!(unreferenced[0].objects, 3);

    // Inside the grace period: kept.
    let report = gc(&store, &index, HOUR_MS, now_ms(), false).await.unwrap();
    assert_eq!(report.versions, 2);
    assert!(report.deleted.is_empty());
    assert_eq!(report.kept_recent.len(), 1);
    assert!(present(&store, &index, "orphan").await);

    // A dry run two hours later reports but deletes nothing.
    let report = gc(&store, &index, HOUR_MS, now_ms() + 2 * HOUR_MS, true)
        .await
        .unwrap();
    assert_eq!(report.deleted.len(), 1);
    assert!(present(&store, &index, "orphan").await);

    // For real: the orphan goes, every version's snapshot (even the old,
    // superseded "a") stays.
    let report = gc(&store, &index, HOUR_MS, now_ms() + 2 * HOUR_MS, false)
        .await
        .unwrap();
    assert_eq!(report.deleted[0].snapshot, "snapshots/orphan");
    assert!(!present(&store, &index, "orphan").await);
    assert!(present(&store, &index, "a").await && present(&store, &index, "b").await);
    assert!(
        unreferenced_snapshots(&store, &index)
            .await
            .unwrap()
            .is_empty()
    );
    let left = store
        .list(Some(&index.clone().join("snapshots").join("orphan")))
        .collect::<Vec<_>>()
        .await;
    assert!(left.is_empty(), "{left:?}");
}

use futures::StreamExt;

#[test]
fn cli_gc_deletes_an_unreferenced_snapshot_of_a_local_index() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("idx");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let index = Path::from("idx");
        snapshot(&store, &index, "kept").await;
        snapshot(&store, &index, "dropped").await;
        commit_pinned(
            &store,
            &index,
            "snapshots/kept",
            None,
            1,
            vec![],
            Publisher::Build,
        )
        .await
        .unwrap();
    });
    let run = |grace: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args([
                "gc",
                "--index",
                root.to_str().unwrap(),
                "--older-than",
                grace,
            ])
            .output()
            .unwrap();
        support::cli::stdout(out)
    };
    let out = run("1h");
    assert!(out.contains("kept snapshots/dropped"), "{out}");
    assert!(root.join("snapshots/dropped/index.json").exists());
    let out = run("0s");
    assert!(out.contains("deleted snapshots/dropped"), "{out}");
    assert!(!root.join("snapshots/dropped/index.json").exists());
    assert!(root.join("snapshots/kept/index.json").exists());
}
