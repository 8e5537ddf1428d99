//! Publication: manifest.json is created only if absent. 16 concurrent
//! publishers on LocalFileSystem and InMemory give exactly one success and 15
//! typed conflicts, and the stored manifest is the winner's.

use crate::support;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::format::manifest::{Manifest, ManifestError};
use parqivf::postings::{PostingsError, WriterOptions, publish};
use parqivf::store::StoreError;
use std::sync::Arc;
use tokio::sync::Barrier;

const PUBLISHERS: usize = 16;

/// Publisher `i`'s manifest: the real one with its first file's sha256
/// changed, so every publisher's bytes differ.
fn variant(base: &Manifest, i: usize) -> Manifest {
    let mut m = base.clone();
    m.files[0].sha256 = format!("{i:064x}");
    m
}

async fn race(store: Arc<dyn ObjectStore>) {
    let root = Path::from("race");
    let written = support::postings::write_table(
        Arc::clone(&store),
        &Path::from("source"),
        4,
        WriterOptions::default(),
    )
    .await;
    // Every data object is complete before publication (publish reads the
    // footers back for footers.json).
    for f in &written.files {
        store
            .copy(
                &Path::from(format!("source/{}", f.path)),
                &Path::from(format!("race/{}", f.path)),
            )
            .await
            .unwrap();
    }
    let barrier = Arc::new(Barrier::new(PUBLISHERS));
    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|i| {
            let (store, root, barrier) = (Arc::clone(&store), root.clone(), Arc::clone(&barrier));
            let manifest = variant(&written, i);
            tokio::spawn(async move {
                barrier.wait().await;
                publish(&store, &root, &manifest).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(_) => winners.push(i),
            Err(PostingsError::Store(StoreError::AlreadyExists { path })) => {
                assert_eq!(path, "race/manifest.json");
            }
            Err(other) => panic!("publisher {i}: unexpected error {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one publisher wins: {winners:?}");
    let stored = store
        .get(&Path::from("race/manifest.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        stored.to_vec(),
        variant(&written, winners[0]).to_json_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_publishers_in_memory() {
    race(Arc::new(InMemory::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_publishers_on_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    race(Arc::new(
        LocalFileSystem::new_with_prefix(dir.path()).unwrap(),
    ))
    .await;
}

#[tokio::test]
async fn an_invalid_manifest_is_never_published() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("t");
    let mut manifest = support::postings::write_table(
        Arc::clone(&store),
        &Path::from("src"),
        4,
        WriterOptions::default(),
    )
    .await;
    manifest.ntotal += 1;
    let err = publish(&store, &root, &manifest).await;
    assert!(matches!(
        err,
        Err(PostingsError::Manifest(ManifestError::RowsSum { .. }))
    ));
    let absent = store.head(&Path::from("t/manifest.json")).await;
    assert!(matches!(absent, Err(object_store::Error::NotFound { .. })));
}
