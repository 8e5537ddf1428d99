//! One opened index snapshot: every small document a reader needs, read and
//! validated together. [`Snapshot::open`] is the only way `Index`, `verify`
//! and the server loader read a snapshot.
//!
//! ```text
//! Snapshot::open(store, folder)           index.json, then manifest.json + footers.json + centroids
//!                                         (+ quantizer.json with codes), one GET each, concurrently
//! Snapshot::open_commit(store, index, c)  the same for commit c's folder, every document checked against c's pins
//! Snapshot::open_current(store, location) the commit log's current snapshot (read once), or location itself
//!                                         when it is a bare snapshot folder (holding index.json)
//! ```
//!
//! Each parser checks its own document (versions first, then keys, then
//! values); this module checks only what no single document can: that the
//! documents agree (nlist, roots, cid-offsets, leaf count) and match their
//! pins. Never lists.

use crate::format::centroids::{self, CentroidsError};
use crate::format::definition::{DefinitionError, INDEX_DEFINITION_FILE, IndexDefinition};
use crate::format::footers::{FOOTERS_FILE, FooterPin, Footers, FootersError};
use crate::format::manifest::{Manifest, ManifestError};
use crate::format::quantizer::{self, QuantizerDocError};
use crate::format::warehouse::{self, Commit, PinError, WarehouseError, check_pin};
use crate::kmeans::Hierarchy;
use crate::quant::Quantizer;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use thiserror::Error;

/// A snapshot that cannot be opened.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("object store error on {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
    /// `index.json` breaks a rule of the strict definition parser (an
    /// unknown version is [`DefinitionError::Incompatible`]).
    #[error("{path}: {source}")]
    Definition {
        path: String,
        #[source]
        source: DefinitionError,
    },
    /// `manifest.json` breaks a rule of the strict manifest parser (an
    /// unknown version is [`ManifestError::Incompatible`]).
    #[error("{path}: {source}")]
    Manifest {
        path: String,
        #[source]
        source: ManifestError,
    },
    /// `footers.json` is invalid or does not follow the manifest.
    #[error(transparent)]
    Footers(#[from] FootersError),
    #[error(transparent)]
    Centroids(#[from] CentroidsError),
    #[error(transparent)]
    Quantizer(#[from] QuantizerDocError),
    /// A document differs from, or lacks, its pin in the commit document.
    #[error(transparent)]
    Pin(#[from] PinError),
    /// Two documents disagree: `path` holds `found` where `index.json` (or,
    /// for the centroids' `cid-offsets`, the manifest) says `expected`.
    #[error("{path}: {what} is {found}, expected {expected}")]
    Mismatch {
        path: String,
        what: &'static str,
        expected: u64,
        found: u64,
    },
    /// The commit log cannot be read, or names no snapshot and `location`
    /// holds no `index.json` either.
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
}

/// Every small document of one snapshot, validated and in agreement.
#[derive(Debug)]
pub struct Snapshot {
    /// The snapshot folder (holding `index.json`).
    pub folder: Path,
    /// The commit that made this snapshot current, when it was opened through
    /// the commit log; its pins were checked.
    pub commit: Option<Commit>,
    pub definition: IndexDefinition,
    /// The `ivf_postings` table root (the folder holding `manifest.json`).
    pub postings_root: Path,
    pub manifest: Manifest,
    /// The object path of each manifest file, in manifest order.
    pub postings_paths: Vec<Path>,
    /// The footer pin of each manifest file (`footers.json`), in manifest order.
    pub footer_pins: Vec<FooterPin>,
    pub hierarchy: Hierarchy,
    /// The quantiser of the postings' `code` column (`quantizer.json`), in
    /// an index built with codes.
    pub quantizer: Option<Quantizer>,
}

async fn get(store: &dyn ObjectStore, path: &Path) -> Result<Bytes, SnapshotError> {
    let err = |source| SnapshotError::Store {
        path: path.to_string(),
        source,
    };
    store
        .get(path)
        .await
        .map_err(err)?
        .bytes()
        .await
        .map_err(err)
}

impl Snapshot {
    /// The commit log version this snapshot was opened at (`None` for a bare
    /// snapshot folder).
    pub fn version(&self) -> Option<u64> {
        self.commit.as_ref().map(|c| c.version)
    }

    /// Open the snapshot in `folder`, unpinned.
    ///
    /// # Errors
    /// See [`SnapshotError`]: a missing document is `Store`, an invalid one
    /// its parser's error, documents that disagree `Mismatch`.
    pub async fn open(store: &dyn ObjectStore, folder: &Path) -> Result<Snapshot, SnapshotError> {
        Self::read(store, folder, None).await
    }

    /// Open the snapshot `commit` names below `index`, checking every
    /// document against the commit's pins.
    ///
    /// # Errors
    /// [`SnapshotError::Pin`] for a document that differs from or lacks its
    /// pin, a bad snapshot path as `Warehouse`, and the errors of
    /// [`Snapshot::open`].
    pub async fn open_commit(
        store: &dyn ObjectStore,
        index: &Path,
        commit: Commit,
    ) -> Result<Snapshot, SnapshotError> {
        let folder = warehouse::snapshot_folder(index, &commit.snapshot)?;
        Self::read(store, &folder, Some(commit)).await
    }

    /// Open the snapshot the commit log of `location` makes current (the log
    /// is read once, and the version read is the one opened), or, when
    /// nothing was committed there and `location` holds `index.json`, that
    /// bare snapshot.
    ///
    /// # Errors
    /// [`WarehouseError::NoSnapshot`] (as `Warehouse`) when neither exists,
    /// and the errors of [`Snapshot::open_commit`].
    pub async fn open_current(
        store: &Arc<dyn ObjectStore>,
        location: &Path,
    ) -> Result<Snapshot, SnapshotError> {
        match warehouse::current(store, location).await? {
            Some(commit) => Self::open_commit(store.as_ref(), location, commit).await,
            None => match Self::open(store.as_ref(), location).await {
                Err(SnapshotError::Store {
                    source: object_store::Error::NotFound { .. },
                    path,
                }) if path == location.clone().join(INDEX_DEFINITION_FILE).as_ref() => {
                    Err(WarehouseError::NoSnapshot {
                        index: location.to_string(),
                        first: warehouse::version_path(location, 1).to_string(),
                    }
                    .into())
                }
                other => other,
            },
        }
    }

    async fn read(
        store: &dyn ObjectStore,
        folder: &Path,
        commit: Option<Commit>,
    ) -> Result<Snapshot, SnapshotError> {
        let pinned = |rel: &str, path: &Path, bytes: &[u8]| match &commit {
            Some(c) => check_pin(&c.pins, rel, path.as_ref(), bytes),
            None => Ok(()),
        };
        let def_path = folder.clone().join(INDEX_DEFINITION_FILE);
        let bytes = get(store, &def_path).await?;
        pinned(INDEX_DEFINITION_FILE, &def_path, &bytes)?;
        let definition_err = |source| SnapshotError::Definition {
            path: def_path.to_string(),
            source,
        };
        let definition = IndexDefinition::from_json(&bytes).map_err(definition_err)?;
        let manifest_path = definition
            .postings_manifest_path(folder)
            .map_err(definition_err)?;
        let centroids_path = definition.centroids_path(folder).map_err(definition_err)?;
        let postings_root = definition.postings_root(folder).map_err(definition_err)?;
        let footers_path = postings_root.clone().join(FOOTERS_FILE);
        let quantizer_path = definition.quantizer_path(folder).map_err(definition_err)?;
        let documents = warehouse::snapshot_documents(&definition);
        let (m, c, f, q) = futures::join!(
            get(store, &manifest_path),
            get(store, &centroids_path),
            get(store, &footers_path),
            async {
                match &quantizer_path {
                    Some(path) => get(store, path).await.map(Some),
                    None => Ok(None),
                }
            },
        );
        let (m, c, f, q) = (m?, c?, f?, q?);
        pinned(&documents[1], &manifest_path, &m)?;
        pinned(&documents[2], &footers_path, &f)?;
        pinned(&documents[3], &centroids_path, &c)?;
        let quantizer = match (&quantizer_path, q, documents.get(4)) {
            (Some(path), Some(bytes), Some(rel)) => {
                pinned(rel, path, &bytes)?;
                Some(quantizer::decode(
                    path.as_ref(),
                    &bytes,
                    definition.dim as usize,
                )?)
            }
            _ => None,
        };
        let manifest = Manifest::parse(&m).map_err(|source| SnapshotError::Manifest {
            path: manifest_path.to_string(),
            source,
        })?;
        let footer_pins = Footers::parse(footers_path.as_ref(), &f, &manifest)?.files;
        let postings_paths = manifest
            .files
            .iter()
            .enumerate()
            .map(|(i, file)| file.object_path(i, &postings_root))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| SnapshotError::Manifest {
                path: manifest_path.to_string(),
                source,
            })?;
        let dim = definition.dim as usize;
        let hierarchy = centroids::decode(centroids_path.as_ref(), c, dim, definition.metric)?;
        check_agreement(
            &definition,
            &manifest_path,
            &manifest,
            &centroids_path,
            &hierarchy,
        )?;
        Ok(Snapshot {
            folder: folder.clone(),
            commit,
            definition,
            postings_root,
            postings_paths,
            manifest,
            footer_pins,
            hierarchy,
            quantizer,
        })
    }
}

/// What no single parser can check: `index.json`, the manifest and the
/// centroids describe the same partition (the manifest's own `cid-offsets`
/// already end at its `nlist`, and its files are ordered).
fn check_agreement(
    definition: &IndexDefinition,
    manifest_path: &Path,
    manifest: &Manifest,
    centroids_path: &Path,
    hierarchy: &Hierarchy,
) -> Result<(), SnapshotError> {
    let mismatch = |path: &Path, what, expected: usize, found: usize| SnapshotError::Mismatch {
        path: path.to_string(),
        what,
        expected: expected as u64,
        found: found as u64,
    };
    let nlist = definition.nlist as usize;
    let checks = [
        (manifest_path, "nlist", nlist, manifest.nlist as usize),
        (
            manifest_path,
            "roots",
            definition.roots as usize,
            manifest.cid_offsets.len() - 1,
        ),
        (
            centroids_path,
            "leaf count",
            nlist,
            hierarchy.leaves.len() / hierarchy.dim,
        ),
    ];
    for (path, what, expected, found) in checks {
        if expected != found {
            return Err(mismatch(path, what, expected, found));
        }
    }
    let at = |o: &[u32], r: usize| o.get(r).copied().unwrap_or(0) as usize;
    let roots = manifest.cid_offsets.len().max(hierarchy.cid_offsets.len());
    if let Some(r) =
        (0..roots).find(|&r| hierarchy.cid_offsets.get(r) != manifest.cid_offsets.get(r))
    {
        return Err(mismatch(
            centroids_path,
            "cid-offsets entry",
            at(&manifest.cid_offsets, r),
            at(&hierarchy.cid_offsets, r),
        ));
    }
    Ok(())
}
