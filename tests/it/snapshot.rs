//! `Snapshot::open*`: the one way a snapshot is read. It records the commit
//! log version it opened (and the server's snapshot label is that version),
//! checks every document against the commit's pins (also in the server
//! loader), and each parser reports a future format version before anything
//! else in the document (an unknown key included).

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::format::definition::DefinitionError;
use parqivf::format::footers::FootersError;
use parqivf::format::manifest::ManifestError;
use parqivf::format::pin::PinError;
use parqivf::format::snapshot::{Snapshot, SnapshotError};
use parqivf::format::warehouse::{self, WarehouseError};
use parqivf::server::backend::{BackendError, BackendLoader};
use parqivf::server::index_backend::IndexLoader;

const DIM: usize = 4;

fn vectors(n: usize, seed: u64) -> Vec<f32> {
    (0..n * DIM)
        .map(|i| ((i as u64 * 2_654_435_761 + seed * 97) % 1000) as f32 / 1000.0)
        .collect()
}

/// Builds (and commits) one more version of the index at `location`.
async fn publish(location: &str, seed: u64) -> (Arc<dyn ObjectStore>, Path) {
    let (store, idx) = parqivf::store::location::open(location).unwrap();
    let params = BuildParams {
        nlist: 4,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let src = Arc::new(ArraySource::new(vectors(200, seed), DIM, "generated").unwrap());
    build(src, Arc::clone(&store), &idx, &params).await.unwrap();
    (store, idx)
}

async fn read(store: &dyn ObjectStore, path: &Path) -> serde_json::Value {
    let bytes = store.get(path).await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

async fn write(store: &dyn ObjectStore, path: &Path, value: &serde_json::Value) {
    let bytes = serde_json::to_vec_pretty(value).unwrap();
    store.put(path, PutPayload::from(bytes)).await.unwrap();
}

#[tokio::test]
async fn open_current_records_the_version_it_opened_and_the_label_names_it() {
    let location = "memory://snapshot-version/idx";
    publish(location, 1).await;
    let (store, idx) = publish(location, 2).await;
    let snapshot = Snapshot::open_current(&store, &idx).await.unwrap();
    let commit = snapshot.commit.clone().unwrap();
    assert_eq!(snapshot.version(), Some(2));
    assert_eq!(
        snapshot.folder,
        warehouse::snapshot_folder(&idx, &commit.snapshot).unwrap()
    );
    assert_eq!(
        snapshot.postings_root,
        snapshot.folder.clone().join("postings")
    );
    let loader = IndexLoader::default();
    let backend = loader.load(location).await.unwrap();
    assert_eq!(
        backend.info().snapshot,
        format!("v2:{}", commit.snapshot),
        "the label names the version the loader opened"
    );
    assert_eq!(
        loader.current_snapshot(location).await.unwrap(),
        backend.info().snapshot
    );
    // `info` reports index.json as stored.
    let stored = read(store.as_ref(), &snapshot.folder.clone().join("index.json")).await;
    assert_eq!(backend.info().definition, stored);
}

#[tokio::test]
async fn a_bare_snapshot_folder_opens_unversioned() {
    let location = "memory://snapshot-bare/idx";
    let (store, idx) = publish(location, 3).await;
    let folder = Snapshot::open_current(&store, &idx).await.unwrap().folder;
    let bare = Snapshot::open_current(&store, &folder).await.unwrap();
    assert_eq!(bare.version(), None);
    assert_eq!(bare.folder, folder);
    match Snapshot::open_current(&store, &Path::from("nothing/here")).await {
        Err(SnapshotError::Warehouse(WarehouseError::NoSnapshot { .. })) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// The loader opened the commit's folder without its pins: an edited (still
/// valid) manifest was served. Now it is refused as corrupt.
#[tokio::test]
async fn the_loader_checks_the_commit_pins() {
    let location = "memory://snapshot-pins/idx";
    let (store, idx) = publish(location, 4).await;
    let folder = Snapshot::open_current(&store, &idx).await.unwrap().folder;
    let manifest = folder.clone().join("postings").join("manifest.json");
    let value = read(store.as_ref(), &manifest).await;
    // Same document, other bytes: only the pin can tell.
    let compact = serde_json::to_vec(&value).unwrap();
    store
        .put(&manifest, PutPayload::from(compact))
        .await
        .unwrap();
    assert!(Snapshot::open(store.as_ref(), &folder).await.is_ok());
    // The latest commit's bundle holds the pinned bytes: an open from it
    // reads the edited object not at all, and serves the pinned manifest.
    let pinned = Snapshot::open_current(&store, &idx).await.unwrap();
    assert_eq!(
        serde_json::to_value(&pinned.manifest).unwrap(),
        value,
        "the pinned manifest"
    );
    // Without it, the edited object is read, and refused.
    let bundle = idx.clone().join("versions").join("latest-bundle.bin");
    store.delete(&bundle).await.unwrap();
    match Snapshot::open_current(&store, &idx).await {
        Err(SnapshotError::Pin(PinError::Mismatch { object, .. })) => {
            assert_eq!(object, manifest.to_string());
        }
        other => panic!("unexpected {other:?}"),
    }
    match IndexLoader::default().load(location).await {
        Err(BackendError::Corrupt { message, .. }) => {
            assert!(message.contains("manifest.json"), "{message}");
        }
        Err(other) => panic!("unexpected {other:?}"),
        Ok(_) => panic!("an edited manifest was served"),
    }
}

#[tokio::test]
async fn a_future_version_is_reported_before_an_unknown_key() {
    let location = "memory://snapshot-future/idx";
    let (store, idx) = publish(location, 5).await;
    let snapshot = Snapshot::open_current(&store, &idx).await.unwrap();
    let folder = snapshot.folder.clone();
    let documents = [
        folder.clone().join("index.json"),
        folder.clone().join("postings").join("manifest.json"),
        folder.clone().join("postings").join("footers.json"),
    ];
    for path in &documents {
        let original = read(store.as_ref(), path).await;
        let mut future = original.clone();
        future["format-version"] = 99.into();
        future["a-key-of-version-99"] = true.into();
        write(store.as_ref(), path, &future).await;
        let err = Snapshot::open(store.as_ref(), &folder).await.unwrap_err();
        let ok = match &err {
            SnapshotError::Definition {
                path: p,
                source: DefinitionError::Incompatible { key, found, .. },
            } => p == path.as_ref() && *key == "format-version" && found == "99",
            SnapshotError::Manifest {
                path: p,
                source: ManifestError::Incompatible { found: 99, .. },
            } => p == path.as_ref(),
            SnapshotError::Footers(FootersError::Incompatible {
                path: p, found: 99, ..
            }) => p == path.as_ref(),
            _ => false,
        };
        assert!(ok, "{path}: {err:?}");
        write(store.as_ref(), path, &original).await;
    }
    // The commit document too.
    let commit = warehouse::version_path(&idx, 2);
    let mut future = read(store.as_ref(), &warehouse::version_path(&idx, 1)).await;
    future["format-version"] = 99.into();
    future["version"] = 2.into();
    future["a-key-of-version-99"] = true.into();
    write(store.as_ref(), &commit, &future).await;
    match Snapshot::open_current(&store, &idx).await {
        Err(SnapshotError::Warehouse(WarehouseError::Incompatible {
            found: 99, path, ..
        })) => {
            assert_eq!(path, commit.to_string());
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// `verify` compares the latest commit's copy and bundle with what the
/// snapshot writer writes for the current commit. Each way they go stale
/// or are edited is an advisory naming the object and the versions, which
/// does not fail the check (readers fall back: time lost, never an
/// answer); a missing one is nothing (older writers wrote none). Readers
/// answer from the current commit throughout.
#[tokio::test]
async fn verify_reports_a_stale_or_edited_copy_and_bundle() {
    use parqivf::verify::{VerifyOptions, Violation, verify_location};
    let location = "memory://verify-open-ahead/idx";
    let (store, idx) = publish(location, 5).await;
    let versions = idx.clone().join("versions");
    let copy_at = versions.clone().join("latest-commit.json");
    let bundle_at = versions.join("latest-bundle.bin");
    let get = |path: &Path| {
        let (store, path) = (Arc::clone(&store), path.clone());
        async move { store.get(&path).await.unwrap().bytes().await.unwrap() }
    };
    let put = |path: &Path, bytes: Vec<u8>| {
        let (store, path) = (Arc::clone(&store), path.clone());
        async move { store.put(&path, PutPayload::from(bytes)).await.unwrap() }
    };
    let stale = || async {
        let report = verify_location(Arc::clone(&store), &idx, VerifyOptions::default())
            .await
            .unwrap();
        assert!(report.is_ok(), "{:?}", report.violations);
        let mut found = Vec::new();
        for v in report.advisories {
            match v {
                Violation::OpenAheadStale { path, error } => found.push((path, error)),
                other => panic!("unexpected {other}"),
            }
        }
        found
    };
    let (copy_v1, bundle_v1) = (get(&copy_at).await, get(&bundle_at).await);
    assert_eq!(stale().await, vec![]);
    publish(location, 6).await;
    assert_eq!(stale().await, vec![]);
    let (copy_v2, bundle_v2) = (get(&copy_at).await, get(&bundle_at).await);

    // Version 1's copy and bundle, as a writer that died between its
    // commit and them would leave them.
    put(&copy_at, copy_v1.to_vec()).await;
    put(&bundle_at, bundle_v1.to_vec()).await;
    let found = stale().await;
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, copy_at.to_string());
    assert!(
        found[0].1.contains("holds version 1")
            && found[0].1.contains("current commit is version 2"),
        "{}",
        found[0].1
    );
    assert_eq!(found[1].0, bundle_at.to_string());
    assert!(
        found[1]
            .1
            .contains("the bundle of version 1, the current commit is version 2"),
        "{}",
        found[1].1
    );
    let opened = Snapshot::open_current(&store, &idx).await.unwrap();
    assert_eq!(opened.version(), Some(2));

    // Version 2's, with one byte of the last footer changed.
    put(&copy_at, copy_v2.to_vec()).await;
    let mut edited = bundle_v2.to_vec();
    *edited.last_mut().unwrap() ^= 0xff;
    put(&bundle_at, edited).await;
    let found = stale().await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.contains("differs from the bundle of version 2"),
        "{}",
        found[0].1
    );
    // Not a bundle at all.
    put(&bundle_at, b"PQVF".to_vec()).await;
    assert!(stale().await[0].1.contains("are not a bundle"));

    // A copy whose footers-ahead lost an entry.
    put(&bundle_at, bundle_v2.to_vec()).await;
    let mut copy: serde_json::Value = serde_json::from_slice(&copy_v2).unwrap();
    let ahead = copy["footers-ahead"].as_array_mut().unwrap();
    let listed = ahead.len();
    assert!(listed >= 1);
    ahead.pop();
    put(&copy_at, serde_json::to_vec(&copy).unwrap()).await;
    let found = stale().await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].1.contains(&format!(
            "footers-ahead ({} entries) are not where the snapshot's {listed} footers lie",
            listed - 1
        )),
        "{}",
        found[0].1
    );
    assert_eq!(
        Snapshot::open_current(&store, &idx)
            .await
            .unwrap()
            .version(),
        Some(2)
    );

    // Neither: nothing to report.
    store.delete(&copy_at).await.unwrap();
    store.delete(&bundle_at).await.unwrap();
    assert_eq!(stale().await, vec![]);
}
