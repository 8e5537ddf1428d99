//! Named indexes and their snapshots: which snapshot of an index is current,
//! and how a build makes its snapshot current without overwriting anything.
//!
//! An index *name* is a location (a folder on any object store). Under it:
//!
//! ```text
//! <index>/snapshots/<snapshot-id>/index.json …     immutable snapshots (written by builds)
//! <index>/versions/00000000000000000001.json       the commit log: created with create-if-absent
//! <index>/versions/00000000000000000002.json
//! <index>/versions/latest-hint.json                advisory pointer, overwritten, never trusted alone
//! <index>/versions/latest-commit.json              advisory copy of the latest commit, likewise
//! <index>/versions/latest-bundle.bin               advisory: that copy with its snapshot's documents and footers
//! ```
//!
//! A build writes every object of its snapshot first (postings, manifest,
//! centroids, `index.json`), then creates version `N + 1` with
//! create-if-absent. Two builds racing for `N + 1` get one winner; the loser
//! gets [`WarehouseError::Conflict`] and nothing is overwritten. A build that
//! dies before that step leaves an unreferenced snapshot folder and the
//! previous version stays current.
//!
//! The commit document **pins** the snapshot's small documents: for
//! `index.json`, the postings `manifest.json` and `footers.json`, and the
//! centroids object it records the path (relative to the snapshot), size and
//! sha256 ([`Pin`]). [`commit`] reads them back to compute the pins; a reader
//! ([`crate::format::snapshot::Snapshot::open_current`]) checks every document it reads against
//! its pin (one hash over kilobytes), so an edited or bit-flipped document is
//! a [`crate::format::pin::PinError`], never a different answer. Postings footers are pinned by
//! `footers.json` and pages carry CRC32s (see `docs/format.md`).
//!
//! Readers find the current version **without listing**: they read the hint
//! (missing means 0), then GET `N + 1`, `N + 2`, … until one is absent. The
//! hint only shortens that walk; a stale hint is harmless.
//!
//! An open reads the snapshot's documents while it checks that the latest
//! commit is current ([`current_ahead`]): `latest-commit.json`, written
//! beside the hint, names the snapshot, so its documents are read in the
//! same round as versions `N` and `N + 1`. The copy is only used when
//! version `N` equals it and `N + 1` is absent; otherwise the reader walks
//! on and reads the current snapshot's documents afterwards. The bundle
//! ([`OpenBundle`], read with the hint and the copy) holds those documents
//! already, so a reader may open the snapshot after the first round and
//! check versions `N` and `N + 1` ([`is_current`]) while it answers its
//! first query.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::format::definition::{INDEX_DEFINITION_FILE, IndexDefinition};
use crate::format::footers::Footers;
use crate::format::manifest::Manifest;
use crate::format::open_bundle::OpenBundle;
use crate::format::pin::Pin;
use crate::store::StoreError;
use crate::store::uri::RelativeLocation;

/// The version-document format this reader understands.
/// Version 2 added the required `pins`.
pub const COMMIT_FORMAT_VERSION: u32 = 2;

/// One entry of an index's commit log: `versions/<20-digit version>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Commit {
    pub format_version: u32,
    /// 1, 2, 3, … with no gaps.
    pub version: u64,
    /// Snapshot folder relative to the index location, e.g. `snapshots/<id>`.
    pub snapshot: String,
    /// The version this one replaced (`None` for the first).
    pub parent: Option<u64>,
    /// Milliseconds since the Unix epoch when the commit was made.
    pub committed_at_ms: u64,
    /// Size and sha256 of each small document of the snapshot, in the order
    /// of [`IndexDefinition::documents`].
    pub pins: Vec<Pin>,
}

/// The folder of `snapshot` (relative to the index, as a commit names it)
/// below `index`.
///
/// # Errors
/// [`WarehouseError::BadSnapshotPath`] (naming `index`) when `snapshot` is
/// not a relative location (empty, rooted, `.`/`..` segments, wildcards).
pub fn snapshot_folder(index: &Path, snapshot: &str) -> Result<Path, WarehouseError> {
    RelativeLocation::parse(snapshot)
        .map(|rel| rel.resolve_path(index))
        .map_err(|_| WarehouseError::BadSnapshotPath {
            path: index.to_string(),
            snapshot: snapshot.to_string(),
        })
}

/// Where one postings footer lies: an entry of `footers-ahead` in the
/// latest commit's copy (`versions/latest-commit.json`), so that an open
/// reads every footer in the round of the snapshot's documents instead of a
/// query reading its candidates' footers a round later. Advisory, like the
/// copy: a reader keeps a footer read this way only when its manifest and
/// `footers.json` give the same object and range, and checks it against its
/// pin as any footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FooterAhead {
    /// The postings object, relative to the snapshot folder.
    pub path: String,
    /// The footer's first byte (the object's size less the pinned footer
    /// size) and its length (the pinned footer size).
    pub offset: u64,
    pub length: u64,
}

/// Most footer bytes the latest commit's copy lists ahead: an index whose
/// footers are larger lists none, and its queries read their candidates'
/// footers (an open never reads megabytes a one-query process may not need).
pub const FOOTERS_AHEAD_BYTES: u64 = 4 << 20;

/// What a commit records of its snapshot: the pins of its documents, and
/// where its postings footers lie ([`FooterAhead`], for the copy only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotPins {
    pub pins: Vec<Pin>,
    pub footers_ahead: Vec<FooterAhead>,
}

impl From<Vec<Pin>> for SnapshotPins {
    fn from(pins: Vec<Pin>) -> Self {
        SnapshotPins {
            pins,
            ..SnapshotPins::default()
        }
    }
}

/// Read the snapshot's documents back and pin them, with the footers a
/// reader may read ahead ([`footers_ahead`]).
///
/// # Errors
/// [`WarehouseError::IncompleteSnapshot`] when `index.json` is missing or
/// invalid or a document it names is absent; storage failures.
pub async fn snapshot_pins(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Path,
) -> Result<SnapshotPins, WarehouseError> {
    let incomplete = |reason: String| WarehouseError::IncompleteSnapshot {
        snapshot: snapshot.to_string(),
        reason,
    };
    let def_path = snapshot.clone().join(INDEX_DEFINITION_FILE);
    let def = get_opt(store.as_ref(), &def_path)
        .await?
        .ok_or_else(|| incomplete(format!("{def_path} is missing")))?;
    let definition =
        IndexDefinition::from_json(&def).map_err(|e| incomplete(format!("{def_path}: {e}")))?;
    let mut pins = Vec::new();
    let mut documents = Vec::new();
    for rel in definition.documents() {
        let path = RelativeLocation::parse(&rel)
            .map_err(|e| incomplete(format!("{def_path}: {rel:?}: {e}")))?
            .resolve_path(snapshot);
        let bytes = if rel == INDEX_DEFINITION_FILE {
            def.clone()
        } else {
            get_opt(store.as_ref(), &path)
                .await?
                .ok_or_else(|| incomplete(format!("{path} is missing")))?
        };
        pins.push(Pin::of(&rel, &bytes));
        documents.push(bytes);
    }
    let footers_ahead = footers_ahead(&definition, &documents);
    Ok(SnapshotPins {
        pins,
        footers_ahead,
    })
}

/// Where the footers of a built snapshot's postings lie (relative to the
/// snapshot folder), from its documents' bytes in the order of
/// [`IndexDefinition::documents`]; none for a refreshed snapshot (its
/// tables are the base's and the deltas'), for documents that do not parse,
/// and when they hold more than [`FOOTERS_AHEAD_BYTES`]. Pure.
pub fn footers_ahead(definition: &IndexDefinition, documents: &[Bytes]) -> Vec<FooterAhead> {
    let ahead = || -> Option<Vec<FooterAhead>> {
        if definition.layers.is_some() {
            return None;
        }
        let names = definition.documents();
        let (manifest_at, manifest, footers) =
            (names.get(1)?, documents.get(1)?, documents.get(2)?);
        let manifest = Manifest::parse(manifest).ok()?;
        let footers = Footers::parse(names.get(2)?, footers, &manifest).ok()?;
        let root = manifest_at.rsplit_once('/').map(|(dir, _)| dir);
        let mut total = 0u64;
        manifest
            .files
            .iter()
            .zip(&footers.files)
            .map(|(file, pin)| {
                total = total.checked_add(pin.footer_size)?;
                (total <= FOOTERS_AHEAD_BYTES).then(|| FooterAhead {
                    path: root.map_or_else(|| file.path.clone(), |r| format!("{r}/{}", file.path)),
                    offset: file.size.saturating_sub(pin.footer_size),
                    length: pin.footer_size,
                })
            })
            .collect()
    };
    ahead().unwrap_or_default()
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Hint {
    version: u64,
}

/// `versions/latest-commit.json`: the latest commit document, and where its
/// snapshot's postings footers lie (`footers-ahead`, omitted when empty).
/// Also the header of the bundle ([`OpenBundle`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LatestCommit {
    #[serde(flatten)]
    pub commit: Commit,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub footers_ahead: Vec<FooterAhead>,
}

impl LatestCommit {
    /// The document's bytes, as `latest-commit.json` holds them.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// The copy in `bytes`, `None` unless it is a commit document (of a
    /// version ≥ 1) with, at most, valid `footers-ahead`.
    pub fn parse(bytes: &[u8]) -> Option<LatestCommit> {
        let mut doc: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let footers_ahead = match doc.as_object_mut()?.remove("footers-ahead") {
            Some(ahead) => serde_json::from_value(ahead).ok()?,
            None => Vec::new(),
        };
        let commit: Commit = serde_json::from_value(doc).ok()?;
        (1..u64::MAX)
            .contains(&commit.version)
            .then_some(LatestCommit {
                commit,
                footers_ahead,
            })
    }
}

/// Who publishes: what a [`WarehouseError::Conflict`] tells its user to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publisher {
    /// `parqivf build` and the distributed build.
    Build,
    /// `parqivf refresh`.
    Refresh,
    /// `parqivf compact`.
    Compact,
    /// `parqivf delete` and `Index::delete`.
    Delete,
    /// `parqivf upsert` and `Index::upsert`.
    Upsert,
}

impl Publisher {
    /// The command's name, as the user typed it.
    pub fn command(self) -> &'static str {
        match self {
            Publisher::Build => "build",
            Publisher::Refresh => "refresh",
            Publisher::Compact => "compact",
            Publisher::Delete => "delete",
            Publisher::Upsert => "upsert",
        }
    }

    /// What the loser of a race should do next.
    pub fn advice(self) -> &'static str {
        match self {
            Publisher::Build => "build again to publish on top of it",
            Publisher::Refresh => "run refresh again: it starts from the new version",
            Publisher::Compact => "run compact again on the new version",
            Publisher::Delete => {
                "delete again: nothing was deleted, and it applies to the new version"
            }
            Publisher::Upsert => {
                "upsert again: nothing was written, and it applies to the new version"
            }
        }
    }
}

impl std::fmt::Display for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.command())
    }
}

/// Errors of the commit protocol.
#[derive(Debug, Error)]
pub enum WarehouseError {
    /// Another publisher's version took `version` (it names `theirs`): this
    /// publisher's snapshot can never become current.
    #[error(
        "index {index}: version {version} was committed first by another publisher (it names \
         {theirs}); nothing was overwritten and this {publisher}'s snapshot was removed: {}",
        publisher.advice()
    )]
    Conflict {
        index: String,
        version: u64,
        theirs: String,
        publisher: Publisher,
    },
    #[error("index {index}: no published snapshot (no {first} and no index.json)")]
    NoSnapshot { index: String, first: String },
    #[error("{path}: invalid commit document: {reason}")]
    InvalidCommit { path: String, reason: String },
    #[error("{path}: commit format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: u32,
        supported: u32,
    },
    #[error("{path}: snapshot path {snapshot:?} must be a relative path below the index")]
    BadSnapshotPath { path: String, snapshot: String },
    #[error("snapshot {snapshot} cannot be committed: {reason}")]
    IncompleteSnapshot { snapshot: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn versions_dir(index: &Path) -> Path {
    index.clone().join("versions")
}

/// The path of version `v`'s commit document.
pub fn version_path(index: &Path, v: u64) -> Path {
    versions_dir(index).join(format!("{v:020}.json"))
}

fn hint_path(index: &Path) -> Path {
    versions_dir(index).join("latest-hint.json")
}

/// The path of the latest commit's copy ([`LatestCommit`]).
pub fn latest_commit_path(index: &Path) -> Path {
    versions_dir(index).join("latest-commit.json")
}

/// The path of the latest commit's bundle ([`OpenBundle`]).
pub fn latest_bundle_path(index: &Path) -> Path {
    versions_dir(index).join("latest-bundle.bin")
}

async fn get_opt(store: &dyn ObjectStore, path: &Path) -> Result<Option<Bytes>, StoreError> {
    match store.get(path).await {
        Ok(r) => r
            .bytes()
            .await
            .map(Some)
            .map_err(|source| StoreError::ObjectStore {
                path: path.to_string(),
                source,
            }),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err(StoreError::ObjectStore {
            path: path.to_string(),
            source,
        }),
    }
}

fn parse_commit(path: &Path, bytes: &[u8], expect: u64) -> Result<Commit, WarehouseError> {
    let invalid = |reason: String| WarehouseError::InvalidCommit {
        path: path.to_string(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if let Some(found) = value.get("format-version").and_then(|v| v.as_u64())
        && found != u64::from(COMMIT_FORMAT_VERSION)
    {
        return Err(WarehouseError::Incompatible {
            path: path.to_string(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: COMMIT_FORMAT_VERSION,
        });
    }
    let c: Commit = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if c.version != expect {
        return Err(invalid(format!(
            "holds version {} but is named {expect}",
            c.version
        )));
    }
    if RelativeLocation::parse(&c.snapshot).is_err() {
        return Err(WarehouseError::BadSnapshotPath {
            path: path.to_string(),
            snapshot: c.snapshot,
        });
    }
    Ok(c)
}

/// The current commit of the index at `index`, or `None` when nothing was
/// ever committed there. Never lists: one GET for the hint, then the hinted
/// version and the next one together (one round when the hint is current),
/// then one GET per version past them.
///
/// # Errors
/// Storage failures, and commit documents that do not parse.
pub async fn current(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<Option<Commit>, WarehouseError> {
    let hint = get_opt(store.as_ref(), &hint_path(index)).await?;
    walk_from(store.as_ref(), index, hinted_version(hint.as_deref())).await
}

/// What an open reads first, all at once ([`read_latest`]): the hint, the
/// latest commit's copy and its bundle.
#[derive(Debug, Default)]
pub struct Latest {
    hint: Option<Bytes>,
    copy: Option<LatestCommit>,
    bundle: Option<OpenBundle>,
}

impl Latest {
    /// The copy and its bundle, when the bundle's copy parses to the same
    /// commit and footers: the latest commit's snapshot as a reader may open
    /// it ahead of the check ([`is_current`]).
    pub fn bundle(&self) -> Option<(&LatestCommit, &OpenBundle)> {
        let (copy, bundle) = (self.copy.as_ref()?, self.bundle.as_ref()?);
        let theirs = LatestCommit::parse(&serde_json::to_vec(&bundle.copy).ok()?)?;
        (theirs == *copy).then_some((copy, bundle))
    }
}

/// Read the hint, the latest commit's copy and its bundle of `index`
/// together: one round. Each is advisory: one that is missing or does not
/// parse is `None`.
///
/// # Errors
/// Storage failures other than a missing object.
pub async fn read_latest(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<Latest, WarehouseError> {
    let store = store.as_ref();
    let paths = [
        hint_path(index),
        latest_commit_path(index),
        latest_bundle_path(index),
    ];
    let (hint, copy, bundle) = futures::try_join!(
        get_opt(store, &paths[0]),
        get_opt(store, &paths[1]),
        get_opt(store, &paths[2]),
    )?;
    Ok(Latest {
        hint,
        copy: copy.and_then(|b| LatestCommit::parse(&b)),
        bundle: bundle.and_then(|b| OpenBundle::parse(&b)),
    })
}

/// What versions `N` and `N + 1` say of a copy of version `N`.
enum CopyCheck {
    /// `N + 1` is absent: version `N` (which may differ from the copy) is
    /// current.
    Latest(Commit),
    /// `N + 1` exists (both parse): the copy is stale.
    Newer,
    /// Version `N` does not exist.
    Missing,
}

/// Read versions `N` and `N + 1` of `copy` together: one round.
async fn check_copy(
    store: &dyn ObjectStore,
    index: &Path,
    copy: &Commit,
) -> Result<CopyCheck, WarehouseError> {
    let v = copy.version;
    let (at_path, next_path) = (version_path(index, v), version_path(index, v + 1));
    let (at, next) = futures::try_join!(get_opt(store, &at_path), get_opt(store, &next_path))?;
    Ok(match (at, next) {
        (Some(b), None) => CopyCheck::Latest(parse_commit(&at_path, &b, v)?),
        (Some(b), Some(n)) => {
            parse_commit(&at_path, &b, v)?;
            parse_commit(&next_path, &n, v + 1)?;
            CopyCheck::Newer
        }
        (None, _) => CopyCheck::Missing,
    })
}

/// Whether `commit` is the current commit of `index`: its version holds it
/// and the next version is absent (one round: versions `N` and `N + 1`
/// together). What an open from the bundle waits for before it answers.
///
/// # Errors
/// Storage failures, and commit documents that do not parse.
pub async fn is_current(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    commit: &Commit,
) -> Result<bool, WarehouseError> {
    Ok(matches!(
        check_copy(store.as_ref(), index, commit).await?,
        CopyCheck::Latest(at) if at == *commit
    ))
}

/// The current commit, as [`current`], and `ahead(commit, footers_ahead)`'s
/// answer when the latest commit's copy (`latest-commit.json`, with the
/// [`FooterAhead`]s it lists) was current: `ahead` starts in the same round
/// as the check of that copy (versions `N` and `N + 1`), so an open that
/// reads the snapshot's documents and footers there costs two rounds
/// instead of three. `None` for the answer when the copy is
/// missing, unreadable or stale (its answer is dropped), and the walk goes
/// on as [`current`]'s.
///
/// # Errors
/// As [`current`].
pub async fn current_ahead<T, F, Fut>(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    ahead: F,
) -> Result<(Option<Commit>, Option<T>), WarehouseError>
where
    F: FnOnce(Commit, Vec<FooterAhead>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let latest = read_latest(store, index).await?;
    current_ahead_from(store, index, latest, ahead).await
}

/// [`current_ahead`] after its first round, `latest` ([`read_latest`]).
///
/// # Errors
/// As [`current`].
pub async fn current_ahead_from<T, F, Fut>(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    latest: Latest,
    ahead: F,
) -> Result<(Option<Commit>, Option<T>), WarehouseError>
where
    F: FnOnce(Commit, Vec<FooterAhead>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let store = store.as_ref();
    let Some(LatestCommit {
        commit: copy,
        footers_ahead,
    }) = latest.copy
    else {
        let commit = walk_from(store, index, hinted_version(latest.hint.as_deref())).await?;
        return Ok((commit, None));
    };
    let (check, early) = futures::join!(
        check_copy(store, index, &copy),
        ahead(copy.clone(), footers_ahead)
    );
    match check? {
        CopyCheck::Latest(at) => {
            let early = (at == copy).then_some(early);
            Ok((Some(at), early))
        }
        // A newer commit: walk on from it (the copy's answer is stale).
        CopyCheck::Newer => Ok((walk_from(store, index, copy.version + 1).await?, None)),
        // A copy naming a version that does not exist: walk from the start.
        CopyCheck::Missing => Ok((walk_from(store, index, 0).await?, None)),
    }
}

/// The version a hint names (0 for none, or one that does not parse).
fn hinted_version(hint: Option<&[u8]>) -> u64 {
    hint.and_then(|b| serde_json::from_slice::<Hint>(b).ok())
        .map_or(0, |h| h.version)
}

/// The current commit, starting from version `hint` (0: from the start):
/// `hint` and the next version together, then one GET per version past
/// them.
async fn walk_from(
    store: &dyn ObjectStore,
    index: &Path,
    hint: u64,
) -> Result<Option<Commit>, WarehouseError> {
    let mut found: Option<Commit> = None;
    // A hint may point past a version that does not exist (never written as
    // such, but be robust): then walk from the start, as for a hint with no
    // next version number.
    let mut v = if hint == u64::MAX { 0 } else { hint };
    if v > 0 {
        // The hinted version and the next one at once: the next is usually
        // absent, which ends the walk in this one round.
        let (p, next) = (version_path(index, v), version_path(index, v + 1));
        let (at, after) = futures::try_join!(get_opt(store, &p), get_opt(store, &next))?;
        match (at, after) {
            (Some(b), None) => return Ok(Some(parse_commit(&p, &b, v)?)),
            (Some(b), Some(n)) => {
                parse_commit(&p, &b, v)?;
                found = Some(parse_commit(&next, &n, v + 1)?);
                v += 1;
            }
            (None, _) => v = 0,
        }
    }
    loop {
        let next = v + 1;
        let p = version_path(index, next);
        match get_opt(store, &p).await? {
            Some(b) => {
                found = Some(parse_commit(&p, &b, next)?);
                v = next;
            }
            None => return Ok(found),
        }
    }
}

/// The snapshot folder of the current version (`<index>/<snapshot>`).
///
/// # Errors
/// [`WarehouseError::NoSnapshot`] when nothing was committed.
pub async fn current_snapshot(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<(Commit, Path), WarehouseError> {
    match current(store, index).await? {
        Some(c) => {
            let folder = snapshot_folder(index, &c.snapshot)?;
            Ok((c, folder))
        }
        None => Err(WarehouseError::NoSnapshot {
            index: index.to_string(),
            first: version_path(index, 1).to_string(),
        }),
    }
}

/// Make `snapshot` (relative to `index`) current as version `parent + 1`,
/// pinning its documents (read back from storage, see [`snapshot_pins`]):
/// what test fixtures call; publishers go through
/// [`crate::format::snapshot_writer::SnapshotWriter::commit`].
///
/// # Errors
/// As [`commit_pinned`], and [`WarehouseError::IncompleteSnapshot`] when a
/// document is missing.
pub async fn commit(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    snapshot: &str,
    parent: Option<u64>,
    committed_at_ms: u64,
) -> Result<Commit, WarehouseError> {
    let folder = snapshot_folder(index, snapshot)?;
    let pins = snapshot_pins(store, &folder).await?;
    commit_pinned(
        store,
        index,
        snapshot,
        parent,
        committed_at_ms,
        pins,
        Publisher::Build,
    )
    .await
}

/// Create version `parent + 1` naming `snapshot` with `pins`, create-if-absent,
/// then the advisory hint and copy (the copy with the pins' `footers_ahead`).
///
/// **The commit rule.** When the create fails, for any reason, the version
/// document is read back: a store may have applied the write and lost its
/// answer (a conditional PUT retried after a dropped connection then reports
/// `AlreadyExists` for its own object).
/// - It names `snapshot`: the commit landed, and this is a success.
/// - It names another snapshot: another publisher won,
///   [`WarehouseError::Conflict`]; only then may the caller delete its folder.
/// - It is absent or cannot be read: the outcome is unknown and the original
///   error is returned; the caller must keep its folder.
///
/// # Errors
/// [`WarehouseError::Conflict`] as above (nothing is overwritten); storage
/// errors of unknown outcome; [`WarehouseError::InvalidCommit`].
pub async fn commit_pinned(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    snapshot: &str,
    parent: Option<u64>,
    committed_at_ms: u64,
    pins: impl Into<SnapshotPins>,
    publisher: Publisher,
) -> Result<Commit, WarehouseError> {
    let SnapshotPins {
        pins,
        footers_ahead,
    } = pins.into();
    let version = parent.unwrap_or(0) + 1;
    let c = Commit {
        format_version: COMMIT_FORMAT_VERSION,
        version,
        snapshot: snapshot.to_string(),
        parent,
        committed_at_ms,
        pins,
    };
    let path = version_path(index, version);
    let mut bytes = serde_json::to_vec_pretty(&c).map_err(|e| WarehouseError::InvalidCommit {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    let committed = match crate::store::commit::put_if_absent(
        store.as_ref(),
        &path,
        Bytes::from(bytes),
    )
    .await
    {
        Ok(_) => c,
        Err(failed) => match get_opt(store.as_ref(), &path).await {
            Ok(Some(found)) => {
                let found = parse_commit(&path, &found, version)?;
                if found.snapshot != snapshot {
                    return Err(WarehouseError::Conflict {
                        index: index.to_string(),
                        version,
                        theirs: found.snapshot,
                        publisher,
                    });
                }
                found
            }
            Ok(None) | Err(_) => return Err(failed.into()),
        },
    };
    // Advisory: a failure here only makes the next reader walk a little
    // further, or read its documents a round later. The bundle of the new
    // commit follows from its snapshot writer
    // ([`crate::format::snapshot_writer::publish_bundle`]).
    let hint = serde_json::to_vec(&Hint { version }).unwrap_or_default();
    let copy = LatestCommit {
        commit: committed.clone(),
        footers_ahead,
    };
    let (hint_at, latest_at) = (hint_path(index), latest_commit_path(index));
    let _ = futures::join!(
        store.put(&hint_at, PutPayload::from(hint)),
        store.put(&latest_at, PutPayload::from(copy.to_json())),
    );
    Ok(committed)
}

/// Milliseconds since the Unix epoch (0 before it): the clock of commits and
/// snapshot names.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Every commit of the index, version 1 up to the current one, by GET
/// (never a LIST): what [`gc`] must keep.
///
/// # Errors
/// Storage failures and commit documents that do not parse.
pub async fn history(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<Vec<Commit>, WarehouseError> {
    let mut out = Vec::new();
    loop {
        let v = out.len() as u64 + 1;
        let p = version_path(index, v);
        match get_opt(store.as_ref(), &p).await? {
            Some(b) => out.push(parse_commit(&p, &b, v)?),
            None => return Ok(out),
        }
    }
}

/// A snapshot folder found by listing `<index>/snapshots/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct UnreferencedSnapshot {
    /// Relative to the index, as commit documents name it: `snapshots/<id>`.
    pub snapshot: String,
    pub objects: usize,
    pub bytes: u64,
    /// Last modification of its newest object, ms since the Unix epoch.
    pub newest_ms: i64,
}

/// Snapshot folders under `<index>/snapshots/` that no version names, oldest
/// first. This LISTs: a maintenance operation (`verify --orphans`, `gc`),
/// never part of the read path.
///
/// # Errors
/// Storage failures and commit documents that do not parse.
pub async fn unreferenced_snapshots(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<Vec<UnreferencedSnapshot>, WarehouseError> {
    let named: std::collections::HashSet<String> = history(store, index)
        .await?
        .into_iter()
        .map(|c| c.snapshot)
        .collect();
    let prefix = index.clone().join("snapshots");
    let listed: Vec<object_store::ObjectMeta> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|source| StoreError::ObjectStore {
            path: prefix.to_string(),
            source,
        })?;
    let mut folders: std::collections::BTreeMap<String, UnreferencedSnapshot> = Default::default();
    for meta in listed {
        let Some(mut parts) = meta.location.prefix_match(&prefix) else {
            continue;
        };
        let Some(id) = parts.next() else { continue };
        let snapshot = format!("snapshots/{}", id.as_ref());
        let f = folders
            .entry(snapshot.clone())
            .or_insert_with(|| UnreferencedSnapshot {
                snapshot,
                objects: 0,
                bytes: 0,
                newest_ms: i64::MIN,
            });
        f.objects += 1;
        f.bytes += meta.size;
        f.newest_ms = f.newest_ms.max(meta.last_modified.timestamp_millis());
    }
    let mut out: Vec<UnreferencedSnapshot> = folders
        .into_values()
        .filter(|f| !named.contains(&f.snapshot))
        .collect();
    out.sort_by_key(|f| (f.newest_ms, f.snapshot.clone()));
    Ok(out)
}

/// What [`gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcReport {
    /// Versions read (every snapshot they name was kept).
    pub versions: usize,
    /// Unreferenced snapshots older than the grace period: deleted (or, in a
    /// dry run, that would be).
    pub deleted: Vec<UnreferencedSnapshot>,
    /// Unreferenced snapshots still inside the grace period (perhaps a build
    /// that has not committed yet): kept.
    pub kept_recent: Vec<UnreferencedSnapshot>,
}

/// Delete the snapshot folders no version names whose newest object is older
/// than `grace` at `now_ms`. A snapshot any version names is never touched:
/// the commit log is read again just before deleting, and a folder that a
/// version names by then is kept. Each folder's `index.json` goes first, so
/// a late [`commit`] of it fails (it reads the documents back) instead of
/// publishing a half-deleted snapshot.
///
/// # Errors
/// Storage failures and commit documents that do not parse.
pub async fn gc(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    grace_ms: u64,
    now_ms: u64,
    dry_run: bool,
) -> Result<GcReport, WarehouseError> {
    let candidates = unreferenced_snapshots(store, index).await?;
    let cutoff = i64::try_from(now_ms.saturating_sub(grace_ms)).unwrap_or(i64::MAX);
    let (old, recent): (Vec<_>, Vec<_>) =
        candidates.into_iter().partition(|f| f.newest_ms < cutoff);
    let commits = history(store, index).await?;
    let named: std::collections::HashSet<&str> =
        commits.iter().map(|c| c.snapshot.as_str()).collect();
    let old: Vec<UnreferencedSnapshot> = old
        .into_iter()
        .filter(|f| !named.contains(f.snapshot.as_str()))
        .collect();
    if !dry_run {
        for f in &old {
            let folder = snapshot_folder(index, &f.snapshot)?;
            let first = folder.clone().join(INDEX_DEFINITION_FILE);
            crate::store::folder::delete_folder(store, &folder, Some(&first)).await?;
        }
    }
    Ok(GcReport {
        versions: commits.len(),
        deleted: old,
        kept_recent: recent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn mem() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[tokio::test]
    async fn empty_index_has_no_current_version() {
        let s = mem();
        let idx = Path::from("idx");
        assert!(current(&s, &idx).await.unwrap().is_none());
        assert!(matches!(
            current_snapshot(&s, &idx).await,
            Err(WarehouseError::NoSnapshot { .. })
        ));
    }

    /// Versions 1 (`snapshots/a`) and 2 (`snapshots/b`) of `idx`.
    async fn two_commits(s: &Arc<dyn ObjectStore>, idx: &Path) -> (Commit, Commit) {
        let c1 = commit_pinned(s, idx, "snapshots/a", None, 1, vec![], Publisher::Build)
            .await
            .unwrap();
        let c2 = commit_pinned(s, idx, "snapshots/b", Some(1), 2, vec![], Publisher::Build)
            .await
            .unwrap();
        (c1, c2)
    }

    #[tokio::test]
    async fn commits_chain_and_current_follows_without_hint() {
        let s = mem();
        let idx = Path::from("idx");
        let (c1, c2) = two_commits(&s, &idx).await;
        assert_eq!(c1.version, 1);
        assert_eq!(c2.parent, Some(1));
        // Remove the hint: readers still find version 2 by walking.
        s.delete(&hint_path(&idx)).await.unwrap();
        let (c, p) = current_snapshot(&s, &idx).await.unwrap();
        assert_eq!(c.version, 2);
        assert_eq!(p.as_ref(), "idx/snapshots/b");
    }

    #[tokio::test]
    async fn stale_hint_is_harmless() {
        let s = mem();
        let idx = Path::from("idx");
        two_commits(&s, &idx).await;
        s.put(
            &hint_path(&idx),
            PutPayload::from(br#"{"version":1}"#.to_vec()),
        )
        .await
        .unwrap();
        assert_eq!(current(&s, &idx).await.unwrap().unwrap().version, 2);
        // A hint past the end walks from the start.
        s.put(
            &hint_path(&idx),
            PutPayload::from(br#"{"version":9}"#.to_vec()),
        )
        .await
        .unwrap();
        assert_eq!(current(&s, &idx).await.unwrap().unwrap().version, 2);
        // The largest version number has no next one: also walked from the start.
        s.put(
            &hint_path(&idx),
            PutPayload::from(format!(r#"{{"version":{}}}"#, u64::MAX).into_bytes()),
        )
        .await
        .unwrap();
        assert_eq!(current(&s, &idx).await.unwrap().unwrap().version, 2);
    }

    /// `current_ahead` with an `ahead` that reports the snapshot it read
    /// ahead for.
    async fn ahead(s: &Arc<dyn ObjectStore>, idx: &Path) -> (u64, Option<String>) {
        let (c, early) = current_ahead(s, idx, |c, _| async move { c.snapshot })
            .await
            .unwrap();
        (c.unwrap().version, early)
    }

    #[tokio::test]
    async fn the_latest_commits_copy_is_used_only_when_it_is_current() {
        let s = mem();
        let idx = Path::from("idx");
        let (_, c2) = two_commits(&s, &idx).await;
        // Current: its snapshot was read ahead.
        assert_eq!(ahead(&s, &idx).await, (2, Some("snapshots/b".into())));
        let put = |bytes: Vec<u8>| {
            let s = Arc::clone(&s);
            let at = latest_commit_path(&idx);
            async move { s.put(&at, PutPayload::from(bytes)).await.unwrap() }
        };
        // Stale (a writer lost the race to overwrite it): walked on, and
        // what was read ahead for version 1 is dropped.
        let c1 = get_opt(s.as_ref(), &version_path(&idx, 1)).await.unwrap();
        put(c1.unwrap().to_vec()).await;
        assert_eq!(ahead(&s, &idx).await, (2, None));
        // A copy that differs from the version it names, one naming a
        // version that does not exist, and one that does not parse: the
        // walk finds version 2 and nothing read ahead is used.
        let mut forged = c2.clone();
        forged.snapshot = "snapshots/forged".into();
        put(serde_json::to_vec(&forged).unwrap()).await;
        assert_eq!(ahead(&s, &idx).await, (2, None));
        let mut missing = c2.clone();
        missing.version = 7;
        put(serde_json::to_vec(&missing).unwrap()).await;
        assert_eq!(ahead(&s, &idx).await, (2, None));
        put(b"{not json".to_vec()).await;
        assert_eq!(ahead(&s, &idx).await, (2, None));
        s.delete(&latest_commit_path(&idx)).await.unwrap();
        assert_eq!(ahead(&s, &idx).await, (2, None));
    }

    /// The copy carries the commit's `footers-ahead` to `ahead`; a version
    /// document never has them, and a copy whose `footers-ahead` does not
    /// parse is not used at all.
    #[tokio::test]
    async fn the_copy_lists_the_footers_ahead_and_the_version_does_not() {
        let s = mem();
        let idx = Path::from("idx");
        let listed = vec![FooterAhead {
            path: "postings/p.parquet".into(),
            offset: 100,
            length: 28,
        }];
        let pinned = SnapshotPins {
            pins: vec![],
            footers_ahead: listed.clone(),
        };
        commit_pinned(&s, &idx, "snapshots/a", None, 1, pinned, Publisher::Build)
            .await
            .unwrap();
        let (c, early) = current_ahead(&s, &idx, |_, f| async move { f })
            .await
            .unwrap();
        assert_eq!((c.unwrap().version, early), (1, Some(listed)));
        let version = get_opt(s.as_ref(), &version_path(&idx, 1)).await.unwrap();
        let version: serde_json::Value = serde_json::from_slice(&version.unwrap()).unwrap();
        assert!(version.get("footers-ahead").is_none(), "{version}");
        let copy = get_opt(s.as_ref(), &latest_commit_path(&idx))
            .await
            .unwrap();
        let mut copy: serde_json::Value = serde_json::from_slice(&copy.unwrap()).unwrap();
        copy["footers-ahead"][0]["offset"] = serde_json::json!(-1);
        let at = latest_commit_path(&idx);
        s.put(&at, PutPayload::from(serde_json::to_vec(&copy).unwrap()))
            .await
            .unwrap();
        let (c, early) = current_ahead(&s, &idx, |_, f| async move { f })
            .await
            .unwrap();
        assert_eq!((c.unwrap().version, early), (1, None));
    }

    /// A reader uses the bundle only while it is the copy's; `is_current`
    /// holds for the latest commit only.
    #[tokio::test]
    async fn the_bundle_is_used_only_while_it_is_the_copys() {
        use crate::format::open_bundle::Part;
        let s = mem();
        let idx = Path::from("idx");
        let c1 = commit_pinned(&s, &idx, "snapshots/a", None, 1, vec![], Publisher::Build)
            .await
            .unwrap();
        let doc = Bytes::from_static(b"{}");
        let bundle = |commit: &Commit| OpenBundle {
            copy: serde_json::to_value(LatestCommit {
                commit: commit.clone(),
                footers_ahead: vec![],
            })
            .unwrap(),
            documents: vec![(
                Part {
                    path: "snapshots/a/index.json".into(),
                    offset: None,
                    length: 2,
                },
                doc.clone(),
            )],
            footers: vec![],
        };
        let put = |b: OpenBundle| {
            let s = Arc::clone(&s);
            let at = latest_bundle_path(&idx);
            async move {
                s.put(&at, PutPayload::from(b.encode().unwrap()))
                    .await
                    .unwrap()
            }
        };
        put(bundle(&c1)).await;
        let latest = read_latest(&s, &idx).await.unwrap();
        assert_eq!(latest.bundle().map(|(copy, _)| &copy.commit), Some(&c1));
        assert!(is_current(&s, &idx, &c1).await.unwrap());
        // Another commit: the copy moved, the bundle did not (a writer
        // that has not written it yet): not used.
        let c2 = commit_pinned(
            &s,
            &idx,
            "snapshots/b",
            Some(1),
            2,
            vec![],
            Publisher::Build,
        )
        .await
        .unwrap();
        assert!(read_latest(&s, &idx).await.unwrap().bundle().is_none());
        assert!(!is_current(&s, &idx, &c1).await.unwrap());
        assert!(is_current(&s, &idx, &c2).await.unwrap());
        put(bundle(&c2)).await;
        assert!(read_latest(&s, &idx).await.unwrap().bundle().is_some());
    }

    /// The footers of a built snapshot are listed all or none: none when
    /// they total more than [`FOOTERS_AHEAD_BYTES`] or the documents do not
    /// parse.
    #[test]
    fn footers_ahead_are_all_or_none() {
        use crate::format::footers::{FOOTERS_FORMAT_VERSION, FooterPin};
        use crate::format::manifest::FileEntry;
        let definition: IndexDefinition = IndexDefinition::from_json(include_bytes!(
            "../../manifests/examples/index-definition.json"
        ))
        .unwrap();
        let names = definition.documents();
        let documents = |footer_sizes: &[u64]| -> Vec<Bytes> {
            let files: Vec<FileEntry> = footer_sizes
                .iter()
                .enumerate()
                .map(|(i, _)| FileEntry {
                    path: format!("cid_bucket={i:06}/part-00000.parquet"),
                    cid_bucket: i as u32,
                    min_cid: i as u32,
                    max_cid: i as u32,
                    rows: 1,
                    size: 10 << 20,
                    sha256: "0".repeat(64),
                })
                .collect();
            let manifest = Manifest {
                format_version: crate::format::manifest::FORMAT_VERSION,
                nlist: footer_sizes.len() as u32,
                ntotal: footer_sizes.len() as u64,
                cid_offsets: (0..=footer_sizes.len() as u32).collect(),
                files: files.clone(),
            };
            let footers = Footers {
                format_version: FOOTERS_FORMAT_VERSION,
                files: files
                    .iter()
                    .zip(footer_sizes)
                    .map(|(f, &size)| FooterPin {
                        path: f.path.clone(),
                        footer_size: size,
                        footer_sha256: "0".repeat(64),
                    })
                    .collect(),
            };
            let mut docs = vec![Bytes::new(); names.len()];
            docs[1] = Bytes::from(manifest.to_json_bytes());
            docs[2] = Bytes::from(footers.to_json_bytes());
            docs
        };
        let ahead = footers_ahead(&definition, &documents(&[1000, 2000]));
        let manifest_dir = names[1].rsplit_once('/').map_or("", |(d, _)| d);
        assert_eq!(
            ahead,
            vec![
                FooterAhead {
                    path: format!("{manifest_dir}/cid_bucket=000000/part-00000.parquet"),
                    offset: (10 << 20) - 1000,
                    length: 1000,
                },
                FooterAhead {
                    path: format!("{manifest_dir}/cid_bucket=000001/part-00000.parquet"),
                    offset: (10 << 20) - 2000,
                    length: 2000,
                },
            ]
        );
        let half = FOOTERS_AHEAD_BYTES / 2;
        assert_eq!(
            footers_ahead(&definition, &documents(&[half, half])).len(),
            2
        );
        assert!(footers_ahead(&definition, &documents(&[half, half + 1])).is_empty());
        assert!(footers_ahead(&definition, &[]).is_empty());
    }

    #[tokio::test]
    async fn racing_commits_have_one_winner_and_overwrite_nothing() {
        let s = mem();
        let idx = Path::from("idx");
        let mut tasks = Vec::new();
        for i in 0..16 {
            let s = s.clone();
            let idx = idx.clone();
            tasks.push(tokio::spawn(async move {
                commit_pinned(
                    &s,
                    &idx,
                    &format!("snapshots/s{i}"),
                    None,
                    i,
                    vec![],
                    Publisher::Build,
                )
                .await
            }));
        }
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(c) => winners.push(c),
                Err(WarehouseError::Conflict { version: 1, .. }) => conflicts += 1,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1);
        assert_eq!(conflicts, 15);
        let cur = current(&s, &idx).await.unwrap().unwrap();
        assert_eq!(cur, winners[0]);
    }

    #[tokio::test]
    async fn a_commit_that_landed_is_a_success_and_only_another_snapshot_is_a_conflict() {
        use crate::store::fault::{Fault, FaultStore, Op};
        let idx = Path::from("idx");
        for fault in [Fault::LoseResponse, Fault::ErrorAfter] {
            let inner = mem();
            let s: Arc<dyn ObjectStore> =
                Arc::new(FaultStore::new(inner.clone()).on(Op::Put, "versions/000", 0, fault));
            let c = commit_pinned(&s, &idx, "snapshots/a", None, 7, vec![], Publisher::Refresh)
                .await
                .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
            assert_eq!((c.version, c.snapshot.as_str()), (1, "snapshots/a"));
            assert_eq!(current(&inner, &idx).await.unwrap().unwrap(), c);
            // The loser of a real race: told so, with the winner named.
            let e = commit_pinned(&s, &idx, "snapshots/b", None, 8, vec![], Publisher::Refresh)
                .await
                .unwrap_err();
            assert!(
                matches!(&e, WarehouseError::Conflict { version: 1, theirs, .. } if theirs == "snapshots/a"),
                "{e}"
            );
            assert!(e.to_string().contains("run refresh again"), "{e}");
        }
        // An error before the write: the outcome is the store's error, not a conflict.
        let inner = mem();
        let s: Arc<dyn ObjectStore> = Arc::new(FaultStore::new(inner.clone()).on(
            Op::Put,
            "versions/000",
            0,
            Fault::FailBefore,
        ));
        let e = commit_pinned(&s, &idx, "snapshots/a", None, 1, vec![], Publisher::Build)
            .await
            .unwrap_err();
        assert!(matches!(e, WarehouseError::Store(_)), "{e}");
        assert!(current(&inner, &idx).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn rejects_escaping_snapshot_paths_and_unknown_versions() {
        let s = mem();
        let idx = Path::from("idx");
        let p = version_path(&idx, 1);
        s.put(
            &p,
            PutPayload::from(
                br#"{"format-version":2,"version":1,"snapshot":"../other","parent":null,"committed-at-ms":0,"pins":[]}"#
                    .to_vec(),
            ),
        )
        .await
        .unwrap();
        assert!(matches!(
            current(&s, &idx).await,
            Err(WarehouseError::BadSnapshotPath { .. })
        ));
        s.put(
            &p,
            PutPayload::from(
                br#"{"format-version":7,"version":1,"snapshot":"snapshots/a","parent":null,"committed-at-ms":0,"pins":[]}"#
                    .to_vec(),
            ),
        )
        .await
        .unwrap();
        assert!(matches!(
            current(&s, &idx).await,
            Err(WarehouseError::Incompatible {
                found: 7,
                supported: 2,
                ..
            })
        ));
    }
}
