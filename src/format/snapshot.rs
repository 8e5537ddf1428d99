//! One opened index snapshot: every small document a reader needs, read and
//! validated together. [`Snapshot::open`] is the only way `Index`, `verify`
//! and the server loader read a snapshot.
//!
//! ```text
//! Snapshot::open(store, folder)           index.json, then manifest.json + footers.json + centroids
//!                                         (+ quantizer.json with codes, + calibration.json when
//!                                         measured), one GET each, concurrently
//! Snapshot::open_commit(store, index, c)  the same for commit c's folder, every document checked against c's pins
//! Snapshot::open_current(store, location) the commit log's current snapshot (read once), or location itself
//!                                         when it is a bare snapshot folder (holding index.json)
//! Snapshot::open_latest(store, location)  the latest commit's snapshot from its bundle after one round, with
//!                                         the check that it is current still to await (Opened::Ahead)
//! ```
//!
//! Each parser checks its own document (versions first, then keys, then
//! values); this module checks only what no single document can: that the
//! documents agree (nlist, roots, cid-offsets, leaf count) and match their
//! pins. Never lists.
//!
//! A refreshed snapshot ([`crate::format::layers`]) reads its base's
//! documents from the base folder, and every delta table's `manifest.json`
//! and `footers.json` and its deletion object, all in the same round as the
//! base's, each checked against the pins in its `index.json`.

use crate::format::calibration::{Calibration, CalibrationError};
use crate::format::centroids::{self, CentroidsError};
use crate::format::definition::{DefinitionError, INDEX_DEFINITION_FILE, IndexDefinition};
use crate::format::footers::{FooterPin, Footers, FootersError};
use crate::format::layers::{Deletions, LayersError};
use crate::format::manifest::{FileEntry, Manifest, ManifestError};
use crate::format::open_bundle::OpenBundle;
use crate::format::pin::{Pin, PinError, check_pin};
use crate::format::quantizer::{self, QuantizerDocError};
use crate::format::source_files::SourceFiles;
use crate::format::source_ids::SourceIds;
use crate::format::warehouse::{self, Commit, FooterAhead, WarehouseError};
use crate::kmeans::Hierarchy;
use crate::quant::Quantizer;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::HashMap;
use std::ops::Range;
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
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
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
    /// The deletion object of a refreshed snapshot is invalid.
    #[error(transparent)]
    Layers(#[from] LayersError),
    /// `source-files.json` is invalid.
    #[error(transparent)]
    SourceFiles(#[from] crate::format::source_files::SourceFilesError),
    /// `source-ids.parquet` is invalid, or names a file `source-files.json`
    /// does not record.
    #[error(transparent)]
    SourceIds(#[from] crate::format::source_ids::SourceIdsError),
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
    /// The base `ivf_postings` table root (the folder holding `manifest.json`).
    pub postings_root: Path,
    /// The base postings manifest (`nlist`, `cid-offsets`, the base files).
    pub manifest: Manifest,
    /// Every postings file a reader probes: the base manifest's files, then
    /// each delta table's ([`Snapshot::layer_starts`]), each in manifest order.
    pub files: Vec<FileEntry>,
    /// Where each layer's files start in [`Snapshot::files`]: `[0]` for a
    /// built snapshot, then one entry per delta table.
    pub layer_starts: Vec<usize>,
    /// The deleted rowids (empty for a built snapshot).
    pub deletions: Arc<Deletions>,
    /// The folder of each postings table (the base's, then each delta's).
    pub table_roots: Vec<Path>,
    /// The object path of each file of [`Snapshot::files`], same order.
    pub postings_paths: Vec<Path>,
    /// The footer pin of each file of [`Snapshot::files`], same order.
    pub footer_pins: Vec<FooterPin>,
    /// The footer of each file of [`Snapshot::files`] when the open read it
    /// with the documents (the latest commit's `footers-ahead`, at exactly
    /// the range the manifest and its pin give), same order; not yet
    /// checked against its pin (the reader checks it as any footer).
    pub footers_ahead: Vec<Option<Bytes>>,
    pub hierarchy: Hierarchy,
    /// The quantiser of the postings' `code` column (`quantizer.json`), in
    /// an index built with codes.
    pub quantizer: Option<Quantizer>,
    /// How recall grows with the lists probed (`calibration.json`), when
    /// the build measured it.
    pub calibration: Option<Calibration>,
}

/// A snapshot as [`Snapshot::open_latest`] opened it.
#[derive(Debug)]
pub enum Opened {
    /// Confirmed current through the commit log (or a bare snapshot folder).
    Current(Snapshot),
    /// Read from the latest commit's bundle before the commit log confirmed
    /// that commit is current: no answer from it may be given before
    /// [`Pending::is_current`] says `true`.
    Ahead(Snapshot, Pending),
}

/// The check an open from the bundle still owes: versions `N` and `N + 1`
/// of the commit it opened (one round, [`warehouse::is_current`]), to run
/// alongside the first query.
pub struct Pending {
    check: futures::future::BoxFuture<'static, Result<bool, WarehouseError>>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

impl Pending {
    fn new(store: Arc<dyn ObjectStore>, location: Path, commit: Commit) -> Self {
        Pending {
            check: Box::pin(async move { warehouse::is_current(&store, &location, &commit).await }),
        }
    }

    /// Whether the commit opened is still the current one. When `false`, a
    /// newer commit exists (or version `N` no longer holds it): open again.
    ///
    /// # Errors
    /// Storage failures, and commit documents that do not parse.
    pub async fn is_current(self) -> Result<bool, SnapshotError> {
        Ok(self.check.await?)
    }
}

/// Where a snapshot's documents are read from: the store, and the ones a
/// commit pins, read ahead all at once with `index.json`
/// ([`Documents::read_ahead`]), so an open costs one round for them
/// instead of two (`index.json`, then what it names).
struct Documents<'a> {
    store: &'a dyn ObjectStore,
    early: HashMap<Path, Bytes>,
    /// Postings footers read with them ([`FooterAhead`]): object → its
    /// range and bytes.
    footers: HashMap<Path, (Range<u64>, Bytes)>,
    /// Whether a footer is checked against its pin before it is kept: one
    /// from the bundle (an advisory copy, whose bad footer is read from its
    /// object instead), not one read from the object itself (the reader
    /// checks it, and a bad one is the object's error).
    check_footers: bool,
    /// Every document served, in order, when recorded (what the bundle of
    /// this snapshot holds, [`Snapshot::open_recorded`]).
    served: Option<std::sync::Mutex<Vec<(Path, Bytes)>>>,
}

impl<'a> Documents<'a> {
    fn direct(store: &'a dyn ObjectStore) -> Self {
        Documents {
            store,
            early: HashMap::new(),
            footers: HashMap::new(),
            check_footers: false,
            served: None,
        }
    }

    /// `index.json` and every document `commit` pins below `folder`, and
    /// the footers `footers` lists, all at once. A read that fails is left
    /// out: the document's own read later reports it as it would without
    /// the read-ahead (a footer's, the query that needs it).
    async fn read_ahead(
        store: &'a dyn ObjectStore,
        folder: &Path,
        commit: &Commit,
        footers: &[FooterAhead],
    ) -> Self {
        let footers = footers.iter().filter_map(|f| {
            let path = crate::store::uri::RelativeLocation::parse(&f.path).ok()?;
            Some((
                path.resolve_path(folder),
                f.offset..f.offset.checked_add(f.length)?,
            ))
        });
        let footers = futures::future::join_all(footers.map(|(path, range)| async move {
            let bytes = store.get_range(&path, range.clone()).await.ok()?;
            Some((path, (range, bytes)))
        }));
        let (documents, footers) = futures::join!(Self::pinned(store, folder, commit), footers);
        Documents {
            footers: footers.into_iter().flatten().collect(),
            ..documents
        }
    }

    /// The documents and, when `footers`, the footers of `bundle` (paths
    /// relative to the index `location`): no request. Each document is
    /// checked against its pin as when read on its own; each footer against
    /// its pin in `footers.json` before it is kept ([`Documents::footer`]).
    fn from_bundle(
        store: &'a dyn ObjectStore,
        location: &Path,
        bundle: &OpenBundle,
        footers: bool,
    ) -> Self {
        let resolve = |rel: &str| {
            Some(
                crate::store::uri::RelativeLocation::parse(rel)
                    .ok()?
                    .resolve_path(location),
            )
        };
        let early = bundle
            .documents
            .iter()
            .filter_map(|(part, bytes)| Some((resolve(&part.path)?, bytes.clone())))
            .collect();
        let footers = bundle
            .footers
            .iter()
            .take(if footers { usize::MAX } else { 0 })
            .filter_map(|(part, bytes)| {
                let offset = part.offset?;
                let range = offset..offset.checked_add(part.length)?;
                Some((resolve(&part.path)?, (range, bytes.clone())))
            })
            .collect();
        Documents {
            early,
            footers,
            check_footers: true,
            ..Documents::direct(store)
        }
    }

    /// `index.json` and every document `commit` pins below `folder`, all at
    /// once (see [`Documents::read_ahead`]).
    async fn pinned(store: &'a dyn ObjectStore, folder: &Path, commit: &Commit) -> Self {
        let mut paths = vec![folder.clone().join(INDEX_DEFINITION_FILE)];
        for pin in &commit.pins {
            if let Ok(rel) = crate::store::uri::RelativeLocation::parse(&pin.path) {
                let path = rel.resolve_path(folder);
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
        let direct = Documents::direct(store);
        let got = futures::future::join_all(paths.iter().map(|p| direct.get(p))).await;
        Documents {
            early: paths
                .into_iter()
                .zip(got)
                .filter_map(|(p, b)| Some((p, b.ok()?)))
                .collect(),
            ..direct
        }
    }

    /// The footer of `file` (at `path`, pinned by `pin`) when it was read
    /// ahead as exactly the range its manifest entry and pin give (and, from
    /// the bundle, matches its pin).
    fn footer(&self, path: &Path, file: &FileEntry, pin: &FooterPin) -> Option<Bytes> {
        let (range, bytes) = self.footers.get(path)?;
        let expected = pin.range(file.size)?;
        let pinned = !self.check_footers || pin.check(path.as_ref(), bytes).is_ok();
        (*range == expected && bytes.len() as u64 == pin.footer_size && pinned)
            .then(|| bytes.clone())
    }

    async fn get(&self, path: &Path) -> Result<Bytes, SnapshotError> {
        let bytes = match self.early.get(path) {
            Some(bytes) => bytes.clone(),
            None => {
                let err = |source| SnapshotError::Store {
                    path: path.to_string(),
                    source,
                };
                self.store
                    .get(path)
                    .await
                    .map_err(err)?
                    .bytes()
                    .await
                    .map_err(err)?
            }
        };
        if let Some(served) = &self.served {
            let mut served = served.lock().unwrap_or_else(|e| e.into_inner());
            served.push((path.clone(), bytes.clone()));
        }
        Ok(bytes)
    }
}

impl Snapshot {
    /// What this snapshot records of its Parquet source: `source-files.json`
    /// (checked against the commit's pin) and, with an id column,
    /// `source-ids.parquet` (checked against the file set's pin, every path
    /// a recorded file). `None` for a snapshot that records none.
    ///
    /// # Errors
    /// Storage errors, pin mismatches, malformed documents.
    pub async fn source_record(
        &self,
        store: &dyn ObjectStore,
    ) -> Result<Option<(SourceFiles, Option<SourceIds>)>, SnapshotError> {
        let Some(rel) = self.definition.source_files.as_deref() else {
            return Ok(None);
        };
        let pins = self.commit.as_ref().map(|c| c.pins.as_slice());
        let docs = Documents::direct(store);
        let bytes = get_pinned(&docs, &self.folder, rel, pins).await?;
        let path = self.folder.clone().join(rel);
        let files = SourceFiles::parse(path.as_ref(), &bytes)?;
        let Some(pin) = &files.ids else {
            return Ok(Some((files, None)));
        };
        let bytes = get_pinned(
            &docs,
            &self.folder,
            &pin.path,
            Some(std::slice::from_ref(pin)),
        )
        .await?;
        let ids_path = self.folder.clone().join(pin.path.as_str());
        let ids = SourceIds::decode(ids_path.as_ref(), bytes)?;
        if let Some(stray) = ids.files().find(|f| {
            files
                .files
                .binary_search_by(|r| r.path.as_str().cmp(f))
                .is_err()
        }) {
            return Err(crate::format::source_ids::SourceIdsError::Stray {
                path: ids_path.to_string(),
                file: stray.to_string(),
            }
            .into());
        }
        Ok(Some((files, Some(ids))))
    }

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
    /// bare snapshot. The documents of the latest commit's snapshot are read
    /// while the log is checked ([`warehouse::current_ahead`]): two rounds
    /// when that commit is current.
    ///
    /// # Errors
    /// [`WarehouseError::NoSnapshot`] (as `Warehouse`) when neither exists,
    /// and the errors of [`Snapshot::open_commit`].
    pub async fn open_current(
        store: &Arc<dyn ObjectStore>,
        location: &Path,
    ) -> Result<Snapshot, SnapshotError> {
        Self::open_current_with(store, location, true).await
    }

    /// [`Snapshot::open_current`], reading the postings footers the latest
    /// commit's copy lists ([`FooterAhead`]) with the documents only when
    /// `footers_ahead` (a reader of a local folder, whose queries map their
    /// footers, saves nothing by reading them all at open). Two rounds when
    /// the latest commit is current: the hint, the copy and the bundle; then
    /// its check ([`Snapshot::open_latest`], confirmed here).
    ///
    /// # Errors
    /// As [`Snapshot::open_current`].
    pub async fn open_current_with(
        store: &Arc<dyn ObjectStore>,
        location: &Path,
        footers_ahead: bool,
    ) -> Result<Snapshot, SnapshotError> {
        match Self::open_latest(store, location, footers_ahead).await? {
            Opened::Current(snapshot) => Ok(snapshot),
            Opened::Ahead(snapshot, pending) => {
                if pending.is_current().await? {
                    return Ok(snapshot);
                }
                let latest = warehouse::read_latest(store, location).await?;
                Self::open_current_from(store, location, footers_ahead, latest).await
            }
        }
    }

    /// The snapshot of the latest commit, opened after one round (the hint,
    /// the copy and the bundle, [`warehouse::read_latest`]) when the bundle
    /// holds its documents: [`Opened::Ahead`], with the check that the
    /// commit is still current to be awaited before any answer from it is
    /// given. Otherwise (no bundle, a stale one, a document in it that fails
    /// its pin, a bare snapshot folder) the confirmed open of
    /// [`Snapshot::open_current_with`]: [`Opened::Current`].
    ///
    /// # Errors
    /// As [`Snapshot::open_current`].
    pub async fn open_latest(
        store: &Arc<dyn ObjectStore>,
        location: &Path,
        footers_ahead: bool,
    ) -> Result<Opened, SnapshotError> {
        let latest = warehouse::read_latest(store, location).await?;
        if let Some((copy, bundle)) = latest.bundle() {
            let commit = copy.commit.clone();
            if let Ok(folder) = warehouse::snapshot_folder(location, &commit.snapshot) {
                let docs = Documents::from_bundle(store.as_ref(), location, bundle, footers_ahead);
                // An error here (a document that fails its pin, a snapshot
                // deleted after its commit was replaced) is the confirmed
                // open's to report, or not.
                if let Ok(snapshot) =
                    Self::read_with(store.as_ref(), &folder, Some(commit.clone()), Some(docs)).await
                {
                    let pending = Pending::new(Arc::clone(store), location.clone(), commit);
                    return Ok(Opened::Ahead(snapshot, pending));
                }
            }
        }
        Self::open_current_from(store, location, footers_ahead, latest)
            .await
            .map(Opened::Current)
    }

    /// [`Snapshot::open_current_with`] after its first round, `latest`.
    async fn open_current_from(
        store: &Arc<dyn ObjectStore>,
        location: &Path,
        footers_ahead: bool,
        latest: warehouse::Latest,
    ) -> Result<Snapshot, SnapshotError> {
        let read_ahead = |c: Commit, footers: Vec<FooterAhead>| async move {
            let folder = warehouse::snapshot_folder(location, &c.snapshot).ok()?;
            let footers = if footers_ahead { &footers[..] } else { &[] };
            Some(Documents::read_ahead(store.as_ref(), &folder, &c, footers).await)
        };
        match warehouse::current_ahead_from(store, location, latest, read_ahead).await? {
            (Some(commit), early) => {
                let folder = warehouse::snapshot_folder(location, &commit.snapshot)?;
                Self::read_with(store.as_ref(), &folder, Some(commit), early.flatten()).await
            }
            (None, _) => match Self::open(store.as_ref(), location).await {
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
        Self::read_with(store, folder, commit, None).await
    }

    /// [`Snapshot::read`] with the documents already read ahead for
    /// `commit` (`None`: read them here).
    async fn read_with<'a>(
        store: &'a dyn ObjectStore,
        folder: &Path,
        commit: Option<Commit>,
        early: Option<Documents<'a>>,
    ) -> Result<Snapshot, SnapshotError> {
        let docs = match (early, &commit) {
            (Some(docs), _) => docs,
            (None, Some(c)) => Documents::pinned(store, folder, c).await,
            (None, None) => Documents::direct(store),
        };
        Self::read_docs(&docs, folder, commit).await
    }

    /// Open the snapshot `commit` names below `index`, as
    /// [`Snapshot::open_commit`], with every document the open read (its
    /// path and bytes, in the order read): what the bundle of this commit
    /// holds ([`crate::format::snapshot_writer::publish_bundle`]).
    ///
    /// # Errors
    /// As [`Snapshot::open_commit`].
    pub async fn open_recorded(
        store: &dyn ObjectStore,
        index: &Path,
        commit: Commit,
    ) -> Result<(Snapshot, Vec<(Path, Bytes)>), SnapshotError> {
        let folder = warehouse::snapshot_folder(index, &commit.snapshot)?;
        let docs = Documents {
            served: Some(Default::default()),
            ..Documents::direct(store)
        };
        let snapshot = Self::read_docs(&docs, &folder, Some(commit)).await?;
        let served = docs.served.unwrap_or_default();
        let served = served.into_inner().unwrap_or_else(|e| e.into_inner());
        Ok((snapshot, served))
    }

    /// The snapshot a build has written into `folder` and not yet
    /// described: its postings table (`manifest.json` and `footers.json`,
    /// read unpinned) with the `definition` and model the build holds in
    /// memory. What the build searches before it writes `calibration.json`
    /// and `index.json` ([`crate::builder::calibrate::rerank_of`]); never
    /// a reader's open.
    ///
    /// # Errors
    /// Storage errors and malformed table documents.
    pub async fn unpublished(
        store: &dyn ObjectStore,
        folder: &Path,
        definition: IndexDefinition,
        hierarchy: Hierarchy,
        quantizer: Option<Quantizer>,
        calibration: Option<Calibration>,
    ) -> Result<Snapshot, SnapshotError> {
        let definition_err = |source| SnapshotError::Definition {
            path: folder.clone().join(INDEX_DEFINITION_FILE).to_string(),
            source,
        };
        let documents = definition.documents();
        let manifest_path = definition
            .postings_manifest_path(folder)
            .map_err(definition_err)?;
        let postings_root = definition.postings_root(folder).map_err(definition_err)?;
        let docs = Documents::direct(store);
        let table = read_table(&docs, &manifest_path, &documents[1], &documents[2], None).await?;
        Ok(Snapshot {
            folder: folder.clone(),
            commit: None,
            definition,
            postings_root,
            files: table.manifest.files.clone(),
            footers_ahead: vec![None; table.manifest.files.len()],
            manifest: table.manifest,
            layer_starts: vec![0],
            deletions: Arc::default(),
            table_roots: vec![table.root],
            postings_paths: table.paths,
            footer_pins: table.footer_pins,
            hierarchy,
            quantizer,
            calibration,
        })
    }

    /// The snapshot in `folder`, every document read through `docs`.
    async fn read_docs(
        docs: &Documents<'_>,
        folder: &Path,
        commit: Option<Commit>,
    ) -> Result<Snapshot, SnapshotError> {
        let def_path = folder.clone().join(INDEX_DEFINITION_FILE);
        let bytes = docs.get(&def_path).await?;
        if let Some(c) = &commit {
            check_pin(&c.pins, INDEX_DEFINITION_FILE, def_path.as_ref(), &bytes)?;
        }
        let definition_err = |source| SnapshotError::Definition {
            path: def_path.to_string(),
            source,
        };
        let definition = IndexDefinition::from_json(&bytes).map_err(definition_err)?;
        // A built snapshot is its own base, pinned by its commit; a refreshed
        // one names its base, pinned in `layers`.
        let (base_folder, base_pins): (Path, Option<&[Pin]>) = match &definition.layers {
            Some(layers) => (
                sibling(folder, &layers.base.snapshot)?,
                Some(&layers.base.pins),
            ),
            None => (folder.clone(), commit.as_ref().map(|c| c.pins.as_slice())),
        };
        let mut base_definition = definition.clone();
        base_definition.layers = None;
        base_definition.source_files = None;
        let documents = base_definition.documents();
        let manifest_path = definition
            .postings_manifest_path(&base_folder)
            .map_err(definition_err)?;
        let centroids_path = definition
            .centroids_path(&base_folder)
            .map_err(definition_err)?;
        let postings_root = definition
            .postings_root(&base_folder)
            .map_err(definition_err)?;
        let quantizer_path = definition
            .quantizer_path(&base_folder)
            .map_err(definition_err)?;
        let base = async {
            let (table, c, q, cal) = futures::join!(
                read_table(
                    docs,
                    &manifest_path,
                    &documents[1],
                    &documents[2],
                    base_pins
                ),
                get_pinned(docs, &base_folder, &documents[3], base_pins),
                async {
                    match (&definition.quantizer, documents.get(4)) {
                        (Some(_), Some(rel)) => get_pinned(docs, &base_folder, rel, base_pins)
                            .await
                            .map(Some),
                        _ => Ok(None),
                    }
                },
                async {
                    match &definition.calibration {
                        Some(rel) => get_pinned(docs, &base_folder, rel, base_pins)
                            .await
                            .map(Some),
                        None => Ok(None),
                    }
                },
            );
            Ok::<_, SnapshotError>((table?, c?, q?, cal?))
        };
        let layered = read_layers(docs, folder, &definition);
        let ((base_table, c, q, cal), (deltas, deletions)) = futures::try_join!(base, layered)?;
        let calibration = match (definition.calibration_path(&base_folder), cal) {
            (Ok(Some(path)), Some(bytes)) => Some(Calibration::parse(
                path.as_ref(),
                &bytes,
                definition.nlist as usize,
            )?),
            (Err(source), _) => return Err(definition_err(source)),
            _ => None,
        };
        let quantizer = match (&quantizer_path, q) {
            (Some(path), Some(bytes)) => Some(quantizer::decode(
                path.as_ref(),
                &bytes,
                definition.dim as usize,
            )?),
            _ => None,
        };
        let dim = definition.dim as usize;
        let hierarchy = centroids::decode(centroids_path.as_ref(), c, dim, definition.metric)?;
        check_agreement(
            &definition,
            &manifest_path,
            &base_table.manifest,
            &centroids_path,
            &hierarchy,
        )?;
        let mut files = base_table.manifest.files.clone();
        let mut footers_ahead: Vec<Option<Bytes>> = files
            .iter()
            .zip(&base_table.paths)
            .zip(&base_table.footer_pins)
            .map(|((file, path), pin)| docs.footer(path, file, pin))
            .collect();
        let mut postings_paths = base_table.paths;
        let mut footer_pins = base_table.footer_pins;
        let mut layer_starts = vec![0];
        let mut table_roots = vec![base_table.root.clone()];
        for delta in deltas {
            table_roots.push(delta.root.clone());
            let delta_manifest = delta.root.clone().join("manifest.json");
            // A delta has the base's buckets, or (a small delta, one file)
            // one bucket holding every list.
            let one_bucket = [0, base_table.manifest.nlist];
            if delta.manifest.nlist != base_table.manifest.nlist
                || (delta.manifest.cid_offsets != base_table.manifest.cid_offsets
                    && delta.manifest.cid_offsets != one_bucket)
            {
                return Err(SnapshotError::Mismatch {
                    path: delta_manifest.to_string(),
                    what: "nlist or cid-offsets of a delta table",
                    expected: u64::from(base_table.manifest.nlist),
                    found: u64::from(delta.manifest.nlist),
                });
            }
            layer_starts.push(files.len());
            footers_ahead.extend(
                delta
                    .manifest
                    .files
                    .iter()
                    .zip(&delta.paths)
                    .zip(&delta.footer_pins)
                    .map(|((file, path), pin)| docs.footer(path, file, pin)),
            );
            files.extend(delta.manifest.files);
            postings_paths.extend(delta.paths);
            footer_pins.extend(delta.footer_pins);
        }
        Ok(Snapshot {
            folder: folder.clone(),
            commit,
            definition,
            postings_root,
            postings_paths,
            manifest: base_table.manifest,
            files,
            layer_starts,
            deletions: Arc::new(deletions),
            table_roots,
            footer_pins,
            footers_ahead,
            hierarchy,
            quantizer,
            calibration,
        })
    }
}

/// One postings table read: its manifest, the object path and footer pin
/// of each file.
struct Table {
    root: Path,
    manifest: Manifest,
    paths: Vec<Path>,
    footer_pins: Vec<FooterPin>,
}

/// GET `folder/rel`, checked against its pin in `pins` when given.
async fn get_pinned(
    docs: &Documents<'_>,
    folder: &Path,
    rel: &str,
    pins: Option<&[Pin]>,
) -> Result<Bytes, SnapshotError> {
    let path = crate::store::uri::RelativeLocation::parse(rel)
        .map_err(|_| WarehouseError::BadSnapshotPath {
            path: folder.to_string(),
            snapshot: rel.to_string(),
        })?
        .resolve_path(folder);
    let bytes = docs.get(&path).await?;
    if let Some(pins) = pins {
        check_pin(pins, rel, path.as_ref(), &bytes)?;
    }
    Ok(bytes)
}

/// The postings table at `root` (its `manifest.json` and `footers.json`,
/// named `manifest_rel` and `footers_rel` relative to the pins' folder).
async fn read_table(
    docs: &Documents<'_>,
    manifest_path: &Path,
    manifest_rel: &str,
    footers_rel: &str,
    pins: Option<&[Pin]>,
) -> Result<Table, SnapshotError> {
    let root = &manifest_path.parent().unwrap_or_default();
    let footers_path = crate::format::footers::footers_path(root);
    let check = |rel: &str, path: &Path, bytes: &[u8]| match pins {
        Some(pins) => check_pin(pins, rel, path.as_ref(), bytes),
        None => Ok(()),
    };
    let (m, f) = futures::join!(docs.get(manifest_path), docs.get(&footers_path));
    let (m, f) = (m?, f?);
    check(manifest_rel, manifest_path, &m)?;
    check(footers_rel, &footers_path, &f)?;
    let manifest = Manifest::parse(&m).map_err(|source| SnapshotError::Manifest {
        path: manifest_path.to_string(),
        source,
    })?;
    let footer_pins = Footers::parse(footers_path.as_ref(), &f, &manifest)?.files;
    let paths = manifest
        .files
        .iter()
        .enumerate()
        .map(|(i, file)| file.object_path(i, root))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| SnapshotError::Manifest {
            path: manifest_path.to_string(),
            source,
        })?;
    Ok(Table {
        root: root.clone(),
        manifest,
        paths,
        footer_pins,
    })
}

/// The folder of `snapshot` (`snapshots/<id>`, index-relative) beside the
/// snapshot `folder` (`<index>/snapshots/<id>`).
fn sibling(folder: &Path, snapshot: &str) -> Result<Path, SnapshotError> {
    let parts: Vec<_> = folder.parts().collect();
    let bad = || WarehouseError::BadSnapshotPath {
        path: folder.to_string(),
        snapshot: snapshot.to_string(),
    };
    if parts.len() < 2 || parts[parts.len() - 2].as_ref() != "snapshots" {
        return Err(bad().into());
    }
    let index = Path::from_iter(parts[..parts.len() - 2].iter().cloned());
    Ok(warehouse::snapshot_folder(&index, snapshot).map_err(|_| bad())?)
}

/// The delta tables and deletions a refreshed snapshot names (none for a
/// built one), read concurrently.
async fn read_layers(
    docs: &Documents<'_>,
    folder: &Path,
    definition: &IndexDefinition,
) -> Result<(Vec<Table>, Deletions), SnapshotError> {
    let Some(layers) = &definition.layers else {
        return Ok((Vec::new(), Deletions::new()));
    };
    let documents = crate::format::definition::delta_documents();
    let deltas = futures::future::try_join_all(layers.deltas.iter().map(|d| {
        let documents = &documents;
        async move {
            let delta = sibling(folder, &d.snapshot)?;
            let manifest = delta.clone().join("postings").join("manifest.json");
            let table =
                read_table(docs, &manifest, &documents[0], &documents[1], Some(&d.pins)).await?;
            let rows: u64 = table.manifest.files.iter().map(|f| f.rows).sum();
            if rows != d.rows {
                return Err(SnapshotError::Mismatch {
                    path: manifest.to_string(),
                    what: "rows of a delta table",
                    expected: d.rows,
                    found: rows,
                });
            }
            Ok(table)
        }
    }));
    let deletions = async {
        let pin = &layers.deletions.pin;
        let bytes = get_pinned(docs, folder, &pin.path, Some(std::slice::from_ref(pin))).await?;
        let path = folder.clone().join(pin.path.as_str());
        Deletions::decode(path.as_ref(), bytes, layers.deletions.rows, layers.count())
            .map_err(SnapshotError::from)
    };
    futures::try_join!(deltas, deletions)
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
