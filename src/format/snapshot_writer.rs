//! The one writer of snapshots: every publisher (build, refresh, compact,
//! the distributed build's publish, and any later one) writes its new
//! snapshot folder through a [`SnapshotWriter`] and makes it current with
//! [`SnapshotWriter::commit`], or removes it with [`SnapshotWriter::abort`].
//!
//! ```text
//! SnapshotWriter::begin(store, index, publisher)   a fresh <index>/snapshots/<id>
//!   put(rel, bytes) …                              every object create-if-absent
//!   commit(parent)                                 pins, then versions/<parent + 1>.json, then the
//!                                                  advisory hint, copy and bundle (publish_bundle)
//!     ├─ created                       → Ok(commit)
//!     ├─ error, version names OUR folder → Ok(commit)   (the write landed, its answer was lost)
//!     ├─ error, version names another    → Conflict, our folder deleted (it can never be current)
//!     └─ error, version absent/unreadable → the error, folder KEPT (the write may still land;
//!                                           `gc` reclaims it once no version names it)
//!   abort()                                        delete the folder unless a version names it
//! ```
//!
//! The rule that makes publishing safe is the middle of that picture (see
//! [`crate::format::warehouse::commit_pinned`] and `docs/format.md`, "The
//! commit rule"): a commit whose response was lost is a success, and a folder
//! is deleted only when the commit log shows that no version names it.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::definition::INDEX_DEFINITION_FILE;
use super::open_bundle::{OPEN_BUNDLE_BYTES, OpenBundle, Part};
use super::pin::Pin;
use super::snapshot::{Snapshot, SnapshotError};
use super::warehouse::{self, Commit, FooterAhead, LatestCommit, Publisher, WarehouseError};
use crate::store::uri::RelativeLocation;

/// A snapshot folder: `<index>/snapshots/<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFolder {
    /// The index location.
    pub index: Path,
    /// The folder relative to `index`, as the commit records it
    /// (`snapshots/<id>`).
    pub name: String,
    /// The folder itself.
    pub path: Path,
}

impl SnapshotFolder {
    /// A fresh folder below `index`, named by the time and a random number
    /// (so no two publishers ever name the same folder).
    ///
    /// # Errors
    /// Never for the names it makes; as [`SnapshotFolder::at`].
    pub fn new(index: &Path) -> Result<Self, WarehouseError> {
        let name = format!(
            "snapshots/{:013}-{:016x}",
            warehouse::now_ms(),
            rand::random::<u64>()
        );
        Self::at(index, &name)
    }

    /// The folder `name` (relative, e.g. `snapshots/<id>`) below `index`, as
    /// every worker of one distributed build names it.
    ///
    /// # Errors
    /// [`WarehouseError::BadSnapshotPath`] when `name` is not a relative
    /// location below the index.
    pub fn at(index: &Path, name: &str) -> Result<Self, WarehouseError> {
        Ok(Self {
            index: index.clone(),
            name: name.to_string(),
            path: warehouse::snapshot_folder(index, name)?,
        })
    }

    /// `rel` (relative to the folder) as an object path.
    ///
    /// # Errors
    /// [`WarehouseError::BadSnapshotPath`] when `rel` is not relative.
    pub fn child(&self, rel: &str) -> Result<Path, WarehouseError> {
        RelativeLocation::parse(rel)
            .map(|r| r.resolve_path(&self.path))
            .map_err(|_| WarehouseError::BadSnapshotPath {
                path: self.path.to_string(),
                snapshot: rel.to_string(),
            })
    }
}

/// A snapshot being written, not yet current. Dropping it without
/// [`SnapshotWriter::commit`] or [`SnapshotWriter::abort`] leaves the folder
/// for `gc` (or, for a killed build, the next build's sweep).
#[derive(Debug)]
pub struct SnapshotWriter {
    store: Arc<dyn ObjectStore>,
    folder: SnapshotFolder,
    publisher: Publisher,
}

impl SnapshotWriter {
    /// Start a new snapshot of the index at `index`, in a fresh folder.
    ///
    /// # Errors
    /// As [`SnapshotFolder::new`].
    pub fn begin(
        store: Arc<dyn ObjectStore>,
        index: &Path,
        publisher: Publisher,
    ) -> Result<Self, WarehouseError> {
        Ok(Self::resume(store, SnapshotFolder::new(index)?, publisher))
    }

    /// Go on writing the snapshot in `folder` (a distributed build: the
    /// driver names the folder, workers write into it, the driver commits).
    pub fn resume(
        store: Arc<dyn ObjectStore>,
        folder: SnapshotFolder,
        publisher: Publisher,
    ) -> Self {
        Self {
            store,
            folder,
            publisher,
        }
    }

    /// The folder being written.
    pub fn folder(&self) -> &SnapshotFolder {
        &self.folder
    }

    /// The store written to.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Write `bytes` at `rel` inside the folder, create-if-absent, and
    /// return its pin.
    ///
    /// # Errors
    /// [`WarehouseError::BadSnapshotPath`] for a `rel` that is not relative;
    /// storage errors (an existing object is `AlreadyExists`, never
    /// overwritten).
    pub async fn put(&self, rel: &str, bytes: Bytes) -> Result<Pin, WarehouseError> {
        let path = self.folder.child(rel)?;
        let pin = Pin::of(rel, &bytes);
        crate::store::commit::put_if_absent(self.store.as_ref(), &path, bytes).await?;
        Ok(pin)
    }

    /// Make the snapshot current as version `parent + 1` (`parent`: the
    /// version the publisher started from), pinning its documents (read back
    /// from storage).
    ///
    /// # Errors
    /// - [`WarehouseError::IncompleteSnapshot`] when a document is missing;
    ///   the folder is deleted, nothing was committed.
    /// - [`WarehouseError::Conflict`] when another publisher's version took
    ///   `parent + 1`; the folder is deleted (no version can name it).
    /// - Any other error leaves the outcome unknown (the write may still
    ///   land): the folder is kept, never deleted while a version may name it.
    pub async fn commit(self, parent: Option<u64>) -> Result<Commit, WarehouseError> {
        let pins = match warehouse::snapshot_pins(&self.store, &self.folder.path).await {
            Ok(pins) => pins,
            Err(e) => {
                let _ = self.abort().await;
                return Err(e);
            }
        };
        let footers_ahead = pins.footers_ahead.clone();
        let committed = warehouse::commit_pinned(
            &self.store,
            &self.folder.index,
            &self.folder.name,
            parent,
            warehouse::now_ms(),
            pins,
            self.publisher,
        )
        .await;
        match committed {
            Err(e @ WarehouseError::Conflict { .. }) => {
                let _ = self.abort().await;
                Err(e)
            }
            Ok(commit) => {
                // Advisory, like the copy: a failure costs readers a round.
                let _ =
                    publish_bundle(&self.store, &self.folder.index, &commit, footers_ahead).await;
                Ok(commit)
            }
            other => other,
        }
    }

    /// Commit when `written` (the result of writing the snapshot's objects)
    /// is `Ok`, else abort and return its error: publication and rollback in
    /// one call.
    ///
    /// # Errors
    /// `written`'s error, or [`SnapshotWriter::commit`]'s.
    pub async fn publish<T, E: From<WarehouseError>>(
        self,
        parent: Option<u64>,
        written: Result<T, E>,
    ) -> Result<(T, Commit), E> {
        match written {
            Ok(value) => Ok((value, self.commit(parent).await?)),
            Err(e) => {
                let _ = self.abort().await;
                Err(e)
            }
        }
    }

    /// Delete the folder, unless a version names it (then it is current or
    /// was, and stays). Returns whether it was deleted.
    ///
    /// # Errors
    /// Reading the commit log, listing or deleting fails.
    pub async fn abort(self) -> Result<bool, WarehouseError> {
        delete_unreferenced(&self.store, &self.folder).await
    }
}

/// Write the bundle of `commit` (`versions/latest-bundle.bin`,
/// [`bundle_bytes`]); without one, the last one (another commit's) is
/// deleted. Returns whether one was written.
///
/// # Errors
/// As [`bundle_bytes`], and the store refusing the write.
pub async fn publish_bundle(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    commit: &Commit,
    footers_ahead: Vec<FooterAhead>,
) -> Result<bool, SnapshotError> {
    let at = warehouse::latest_bundle_path(index);
    let store_err = |source| SnapshotError::Store {
        path: at.to_string(),
        source,
    };
    match bundle_bytes(store, index, commit, footers_ahead).await? {
        Some(bytes) => {
            store
                .put(&at, PutPayload::from(bytes))
                .await
                .map_err(store_err)?;
            Ok(true)
        }
        None => match store.delete(&at).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(e)),
        },
    }
}

/// The bytes of the bundle of `commit` ([`OpenBundle`]): every document an
/// open of its snapshot reads (the snapshot opened here,
/// [`Snapshot::open_recorded`]) and every postings footer, headed by the
/// copy `latest-commit.json` holds (`commit` and `footers_ahead`). Footers
/// that would take the bundle over [`OPEN_BUNDLE_BYTES`] are left out, then
/// the documents too: `None`, no bundle. What the snapshot writer publishes
/// and `verify` compares with what is published.
///
/// # Errors
/// The snapshot does not open, or a footer cannot be read.
pub async fn bundle_bytes(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    commit: &Commit,
    footers_ahead: Vec<FooterAhead>,
) -> Result<Option<Bytes>, SnapshotError> {
    use futures::{StreamExt, TryStreamExt};
    let store_err = |path: &Path| {
        let path = path.to_string();
        move |source| SnapshotError::Store { path, source }
    };
    // The documents the commit pins are read by every open: when they alone
    // are over the bound, none is read again here.
    let pinned: u64 = commit.pins.iter().map(|p| p.size).sum();
    if pinned > OPEN_BUNDLE_BYTES {
        return Ok(None);
    }
    let (snapshot, served) = Snapshot::open_recorded(store.as_ref(), index, commit.clone()).await?;
    let relative = |path: &Path| -> Option<String> {
        let parts: Vec<String> = path
            .prefix_match(index)?
            .map(|p| p.as_ref().to_string())
            .collect();
        Some(parts.join("/"))
    };
    let mut documents = Vec::new();
    for (path, bytes) in served {
        let Some(rel) = relative(&path) else { continue };
        if !documents.iter().any(|(p, _): &(Part, Bytes)| p.path == rel) {
            let length = bytes.len() as u64;
            documents.push((
                Part {
                    path: rel,
                    offset: None,
                    length,
                },
                bytes,
            ));
        }
    }
    let held: u64 = documents.iter().map(|(p, _)| p.length).sum();
    let ranges: Vec<(Path, String, std::ops::Range<u64>)> = snapshot
        .files
        .iter()
        .zip(&snapshot.postings_paths)
        .zip(&snapshot.footer_pins)
        .filter_map(|((file, path), pin)| {
            Some((path.clone(), relative(path)?, pin.range(file.size)?))
        })
        .collect();
    let footer_bytes: u64 = ranges.iter().map(|(_, _, r)| r.end - r.start).sum();
    let footers =
        if held + footer_bytes <= OPEN_BUNDLE_BYTES && ranges.len() == snapshot.files.len() {
            futures::stream::iter(ranges)
                .map(|(path, rel, range)| async move {
                    let bytes = store
                        .get_range(&path, range.clone())
                        .await
                        .map_err(store_err(&path))?;
                    let part = Part {
                        path: rel,
                        offset: Some(range.start),
                        length: range.end - range.start,
                    };
                    Ok::<_, SnapshotError>((part, bytes))
                })
                .buffered(16)
                .try_collect()
                .await?
        } else {
            Vec::new()
        };
    let copy = LatestCommit {
        commit: commit.clone(),
        footers_ahead,
    };
    let bundle = OpenBundle {
        // A copy that does not serialise (never) is null: readers ignore it.
        copy: serde_json::to_value(copy).unwrap_or_default(),
        documents,
        footers,
    };
    Ok(bundle.encode())
}

/// Delete the snapshot folder `folder` unless a version of its index names
/// it: the only way a snapshot folder is removed (by a publisher that did
/// not commit, a build sweeping a killed one's folder, and `gc`). Its
/// `index.json` goes first, so a commit racing with the deletion fails when
/// it reads the documents back instead of publishing a half-deleted
/// snapshot. Returns whether it was deleted.
///
/// # Errors
/// Reading the commit log (a folder is never deleted when that fails),
/// listing or deleting.
pub async fn delete_unreferenced(
    store: &Arc<dyn ObjectStore>,
    folder: &SnapshotFolder,
) -> Result<bool, WarehouseError> {
    let named = warehouse::history(store, &folder.index)
        .await?
        .iter()
        .any(|c| c.snapshot == folder.name);
    if named {
        return Ok(false);
    }
    let first = folder.path.clone().join(INDEX_DEFINITION_FILE);
    crate::store::folder::delete_folder(store, &folder.path, Some(&first)).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn mem() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[tokio::test]
    async fn a_folder_a_version_names_is_never_deleted() {
        let store = mem();
        let index = Path::from("idx");
        let named = SnapshotFolder::at(&index, "snapshots/a").unwrap();
        let unnamed = SnapshotFolder::at(&index, "snapshots/b").unwrap();
        for f in [&named, &unnamed] {
            let w = SnapshotWriter::resume(store.clone(), f.clone(), Publisher::Build);
            w.put("x", Bytes::from_static(b"x")).await.unwrap();
        }
        warehouse::commit_pinned(
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
        assert!(!delete_unreferenced(&store, &named).await.unwrap());
        assert!(delete_unreferenced(&store, &unnamed).await.unwrap());
        assert!(store.head(&named.child("x").unwrap()).await.is_ok());
        assert!(store.head(&unnamed.child("x").unwrap()).await.is_err());
    }

    /// A commit whose pinned documents alone are over the bound gets no
    /// bundle, and the last one goes, without its snapshot being read (here
    /// it does not even exist).
    #[tokio::test]
    async fn a_commit_over_the_bound_gets_no_bundle_and_reads_nothing() {
        let store = mem();
        let index = Path::from("idx");
        let at = warehouse::latest_bundle_path(&index);
        store
            .put(&at, PutPayload::from_static(b"old"))
            .await
            .unwrap();
        let mut pin = Pin::of("centroids/centroids.parquet", b"");
        pin.size = OPEN_BUNDLE_BYTES + 1;
        let commit = Commit {
            format_version: warehouse::COMMIT_FORMAT_VERSION,
            version: 1,
            snapshot: "snapshots/missing".into(),
            parent: None,
            committed_at_ms: 1,
            pins: vec![pin],
        };
        assert!(
            !publish_bundle(&store, &index, &commit, vec![])
                .await
                .unwrap()
        );
        assert!(store.head(&at).await.is_err(), "the last bundle is gone");
    }

    #[test]
    fn folders_are_relative_below_the_index() {
        let f = SnapshotFolder::at(&Path::from("i"), "snapshots/s").unwrap();
        assert_eq!(f.path.as_ref(), "i/snapshots/s");
        assert!(matches!(
            SnapshotFolder::at(&Path::from("i"), "../elsewhere"),
            Err(WarehouseError::BadSnapshotPath { .. })
        ));
        let a = SnapshotFolder::new(&Path::from("i")).unwrap();
        let b = SnapshotFolder::new(&Path::from("i")).unwrap();
        assert_ne!(a.name, b.name);
        assert!(a.name.starts_with("snapshots/"));
    }
}
