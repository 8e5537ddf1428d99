//! Verification of a published `ivf_postings` table against every MUST of the
//! layout: the manifest parses strictly, and each object it names exists with
//! the recorded size, sha256 and footer row count, has a required INT32 `cid`
//! column, and holds exactly one non-null CID per row group with exact
//! statistics, inside the file's `[min-cid, max-cid]`, in non-decreasing
//! order, starting at `min-cid` and ending at `max-cid`.
//!
//! Discovery is by `manifest.json` alone: the postings prefix is listed only
//! when [`VerifyOptions::orphans`] asks for objects no entry names. Problems
//! with the table are [`Violation`]s in the [`VerifyReport`]; only a failure to
//! run at all (an IO error other than "not found") is an `Err`.

use crate::format::definition::{INDEX_DEFINITION_FILE, POSTINGS_LOCATION};
use crate::format::footers::{FOOTERS_FILE, FooterPin, Footers, read_footer_bytes};
use crate::format::manifest::{FileEntry, Manifest, ManifestError};
use crate::format::open_bundle::{OPEN_BUNDLE_BYTES, OpenBundle, Part};
use crate::format::postings_table::{FooterViolation, MANIFEST_FILE, check_footer};
use crate::format::snapshot::Snapshot;
use crate::format::snapshot_writer;
use crate::format::warehouse::{self, Commit, LatestCommit};
use crate::postings::PostingsError;
use crate::probe::ProbeError;
use crate::probe::engine::Engine;
use crate::probe::load::{IndexOptions, PostingsReader};
use crate::probe::rows::Want;
use crate::store::parquet_reader::StoreReader;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::async_reader::AsyncFileReader;
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;
use thiserror::Error;

/// Lists whose codes `verify` re-encodes from their vectors (evenly spaced
/// over the cids).
const CODE_SAMPLE_LISTS: usize = 8;

/// Objects checked at the same time.
const CONCURRENT_OBJECTS: usize = 8;

/// What to check beyond the manifest's own inventory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// LIST the table prefix and report objects no manifest entry names.
    pub orphans: bool,
}

/// The outcome of [`verify`]: every violation found, in manifest order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct VerifyReport {
    /// The table root that was checked.
    pub table_root: String,
    /// Manifest entries whose objects were checked.
    pub files_checked: usize,
    pub violations: Vec<Violation>,
    /// What costs readers time but never an answer: advisory objects that
    /// differ from what their writer writes now ([`Violation::OpenAheadStale`]).
    /// They do not fail the check.
    pub advisories: Vec<Violation>,
}

impl VerifyReport {
    /// True when no rule is broken (advisories aside).
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One broken rule, with the object path and the numbers involved.
#[derive(Debug, Error, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Violation {
    #[error("{path}: manifest.json does not exist")]
    ManifestMissing { path: String },
    #[error("{path}: {error}")]
    ManifestInvalid {
        path: String,
        #[serde(serialize_with = "display")]
        error: ManifestError,
    },
    #[error("{path}: object named by the manifest does not exist")]
    ObjectMissing { path: String },
    #[error("{path}: size is {actual} bytes, manifest says {expected}")]
    SizeMismatch {
        path: String,
        expected: u64,
        actual: u64,
    },
    #[error("{path}: sha256 is {actual}, manifest says {expected}")]
    Sha256Mismatch {
        path: String,
        expected: String,
        actual: String,
    },
    #[error("{path}: footer cannot be read: {error}")]
    FooterUnreadable { path: String, error: String },
    #[error("{path}: object is not named by the manifest")]
    Orphan { path: String },
    #[error("{path}: footers.json does not exist")]
    FootersMissing { path: String },
    #[error("{error}")]
    FootersInvalid { path: String, error: String },
    #[error("{error}")]
    FooterPinMismatch { path: String, error: String },
    /// The query's reader refuses a postings file (a row whose cid
    /// contradicts its row group, a page that does not decode).
    #[error("{path}: the postings cannot be read: {error}")]
    Unreadable { path: String, error: String },
    #[error("{path} row group {row_group} column {column}: {error}")]
    PageChecksum {
        path: String,
        row_group: usize,
        column: String,
        error: String,
    },
    /// The reader refuses the snapshot (its open with the commit's pins,
    /// then every footer): the error it gives.
    #[error("{path}: the snapshot cannot be searched: {error}")]
    SnapshotInvalid { path: String, error: String },
    /// The commit log cannot be read.
    #[error("{path}: {error}")]
    CommitInvalid { path: String, error: String },
    /// `source-files.json` or `source-ids.parquet` breaks a rule (a pin, the
    /// schema, an id owned twice, a file not recorded): a refresh would
    /// refuse the index.
    #[error("{path}: the source record is invalid: {error}")]
    SourceRecordInvalid { path: String, error: String },
    #[error("{path}: snapshot is not named by any version (gc deletes it after the grace period)")]
    UnreferencedSnapshot { path: String },
    /// A stored code differs from the code its vector re-encodes to.
    #[error(
        "{path} row group {row_group} row {row} (rowid {rowid}): the stored code differs from the re-encoded vector"
    )]
    CodeMismatch {
        path: String,
        row_group: usize,
        row: usize,
        rowid: i64,
    },
    /// The latest commit's copy or bundle differs from what the snapshot
    /// writer writes for the current commit (a writer that stopped between
    /// its commit and them, or an edit). Both are advisory: readers check
    /// them and fall back, so no answer is wrong, but every open pays the
    /// rounds they were written to save until the next commit rewrites
    /// them. Reported in [`VerifyReport::advisories`].
    #[error("{path}: {error}; readers pay the rounds it saves until the next commit rewrites it")]
    OpenAheadStale { path: String, error: String },
    /// A rule of the postings footer contract
    /// ([`crate::format::postings_table::check_footer`]).
    #[error(transparent)]
    #[serde(untagged)]
    Footer(FooterViolation),
}

fn display<S: Serializer>(error: &ManifestError, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(error)
}

/// Checks the `ivf_postings` table at `table_root` in `store`.
///
/// # Errors
/// [`PostingsError::Store`] when an object cannot be read for a reason
/// other than its absence (the check could not run). Everything wrong with
/// the table itself is a [`Violation`] in the report.
pub async fn verify(
    store: Arc<dyn ObjectStore>,
    table_root: &Path,
    options: VerifyOptions,
) -> Result<VerifyReport, PostingsError> {
    let mut report = VerifyReport {
        table_root: table_root.to_string(),
        files_checked: 0,
        violations: Vec::new(),
        advisories: Vec::new(),
    };
    let manifest_path = table_root.clone().join(MANIFEST_FILE);
    let bytes = match store.get(&manifest_path).await {
        Ok(got) => got.bytes().await,
        Err(e) => Err(e),
    };
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(object_store::Error::NotFound { .. }) => {
            report.violations.push(Violation::ManifestMissing {
                path: manifest_path.to_string(),
            });
            return Ok(report);
        }
        Err(source) => return Err(store_error(&manifest_path, source)),
    };
    let manifest = match Manifest::parse(&bytes) {
        Ok(manifest) => manifest,
        Err(error) => {
            report.violations.push(Violation::ManifestInvalid {
                path: manifest_path.to_string(),
                error,
            });
            return Ok(report);
        }
    };
    let footers_path = crate::format::footers::footers_path(table_root);
    let pins: Option<Vec<FooterPin>> = match store.get(&footers_path).await {
        Ok(got) => {
            let bytes = got
                .bytes()
                .await
                .map_err(|source| store_error(&footers_path, source))?;
            match Footers::parse(footers_path.as_ref(), &bytes, &manifest) {
                Ok(f) => Some(f.files),
                Err(e) => {
                    report.violations.push(Violation::FootersInvalid {
                        path: footers_path.to_string(),
                        error: e.to_string(),
                    });
                    None
                }
            }
        }
        Err(object_store::Error::NotFound { .. }) => {
            report.violations.push(Violation::FootersMissing {
                path: footers_path.to_string(),
            });
            None
        }
        Err(source) => return Err(store_error(&footers_path, source)),
    };
    let pins = pins.as_deref();
    let per_file: Vec<Vec<Violation>> = futures::stream::iter(manifest.files.iter().enumerate())
        .map(|(i, file)| check_object(&store, table_root, i, file, pins.and_then(|p| p.get(i))))
        .buffered(CONCURRENT_OBJECTS)
        .try_collect()
        .await?;
    report.files_checked = manifest.files.len();
    report.violations.extend(per_file.into_iter().flatten());
    if options.orphans {
        report
            .violations
            .extend(find_orphans(store.as_ref(), table_root, &manifest).await?);
    }
    Ok(report)
}

fn store_error(path: &Path, source: object_store::Error) -> PostingsError {
    PostingsError::store(path.to_string(), source)
}

/// Streams the object through sha256, then reads its footer.
async fn check_object(
    store: &Arc<dyn ObjectStore>,
    table_root: &Path,
    index: usize,
    file: &FileEntry,
    pin: Option<&FooterPin>,
) -> Result<Vec<Violation>, PostingsError> {
    let location = match file.object_path(index, table_root) {
        Ok(location) => location,
        Err(error) => {
            return Ok(vec![Violation::ManifestInvalid {
                path: table_root.clone().join(MANIFEST_FILE).to_string(),
                error,
            }]);
        }
    };
    let path = location.to_string();
    let mut found = Vec::new();
    let mut stream = match store.get(&location).await {
        Ok(got) => got.into_stream(),
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(vec![Violation::ObjectMissing { path }]);
        }
        Err(source) => return Err(store_error(&location, source)),
    };
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| store_error(&location, source))?;
        hasher.update(&chunk);
        size += chunk.len() as u64;
    }
    if size != file.size {
        found.push(Violation::SizeMismatch {
            path: path.clone(),
            expected: file.size,
            actual: size,
        });
    }
    let sha256 = hex::encode(hasher.finalize());
    if sha256 != file.sha256 {
        found.push(Violation::Sha256Mismatch {
            path: path.clone(),
            expected: file.sha256.clone(),
            actual: sha256,
        });
    }
    let footer = StoreReader::new(Arc::clone(store), location.clone(), Some(size))
        .get_metadata(None)
        .await;
    if let Some(pin) = pin {
        match read_footer_bytes(store.as_ref(), &location, size).await {
            Ok(bytes) => {
                if let Err(e) = pin.check(&path, &bytes) {
                    found.push(Violation::FooterPinMismatch {
                        path: path.clone(),
                        error: e.to_string(),
                    });
                }
            }
            Err(e) => found.push(Violation::FooterUnreadable {
                path: path.clone(),
                error: e.to_string(),
            }),
        }
    }
    match footer {
        Ok(metadata) => {
            if let Err(violations) = check_footer(&path, file, &metadata, None, None) {
                found.extend(violations.into_iter().map(Violation::Footer));
            }
        }
        Err(error) => found.push(Violation::FooterUnreadable {
            path,
            error: error.to_string(),
        }),
    }
    Ok(found)
}

/// Every postings file of a snapshot read through the query's reader, every
/// column (each footer against its pin, each page against its CRC32, each
/// row's cid against its row group), one file at a time: a file it refuses
/// is a violation.
async fn reader_violations(reader: &PostingsReader, codes: bool) -> Vec<Violation> {
    let want = Want {
        vectors: true,
        codes,
        payload: true,
        ..Want::default()
    };
    let mut found = Vec::new();
    for file in 0..reader.files().len() {
        found.extend(reader.read_file(file, want).await.err().map(|e| match e {
            ProbeError::PageChecksum {
                path,
                row_group,
                column,
                source,
            } => Violation::PageChecksum {
                path,
                row_group,
                column,
                error: source.to_string(),
            },
            other => Violation::Unreadable {
                path: reader.path(file).to_string(),
                error: other.to_string(),
            },
        }));
    }
    found
}

/// Checks everything a reader relies on at `location`: an index (its current
/// snapshot, opened with the commit's pins), a snapshot folder (holding
/// `index.json`), or a bare postings table (holding `manifest.json`).
///
/// For a snapshot: the reader's own open (definition, manifest, footers.json,
/// centroids, quantizer.json and their agreement: dim, nlist, roots,
/// cid-offsets, code width; every pin) and every footer's reader validation;
/// in an index with codes, the vectors of a sample of lists re-encoded to
/// their stored codes; then [`verify`] of its postings table, and of every
/// delta table of a refreshed snapshot. For an index, also its latest
/// commit's copy and bundle ([`Violation::OpenAheadStale`]). With [`VerifyOptions::orphans`] on an index, also LISTs
/// `snapshots/` for folders no version names.
///
/// # Errors
/// As [`verify`]: only a failure to run at all.
pub async fn verify_location(
    store: Arc<dyn ObjectStore>,
    location: &Path,
    options: VerifyOptions,
) -> Result<VerifyReport, PostingsError> {
    let mut early = Vec::new();
    let commit_invalid = |error: String| Violation::CommitInvalid {
        path: location.to_string(),
        error,
    };
    // One read of the commit log: the snapshot it names is the one checked.
    let (folder, commit, is_index) = match warehouse::current(&store, location).await {
        Ok(Some(commit)) => match warehouse::snapshot_folder(location, &commit.snapshot) {
            Ok(folder) => (folder, Some(commit), true),
            Err(e) => {
                early.push(commit_invalid(e.to_string()));
                (location.clone(), None, true)
            }
        },
        Ok(None) => (location.clone(), None, false),
        Err(e) => {
            early.push(commit_invalid(e.to_string()));
            (location.clone(), None, true)
        }
    };
    let definition = folder.clone().join(INDEX_DEFINITION_FILE);
    let has_definition = match store.head(&definition).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => is_index,
        Err(source) => return Err(store_error(&definition, source)),
    };
    let mut tables = vec![folder.clone()];
    let advisories = match &commit {
        Some(commit) => open_ahead_violations(&store, location, commit).await?,
        None => Vec::new(),
    };
    if has_definition {
        let opened = match commit {
            Some(commit) => Snapshot::open_commit(store.as_ref(), location, commit).await,
            None => Snapshot::open(store.as_ref(), &folder).await,
        };
        let checked = match opened {
            Ok(snapshot) => {
                if let Err(e) = snapshot.source_record(store.as_ref()).await {
                    early.push(Violation::SourceRecordInvalid {
                        path: folder.to_string(),
                        error: e.to_string(),
                    });
                }
                // A refreshed snapshot: the base table and every delta table.
                tables = snapshot.table_roots.clone();
                let reader = PostingsReader::new(store.clone(), &snapshot, IndexOptions::default());
                let codes = snapshot.quantizer.is_some();
                let engine = Engine::new(reader, snapshot.hierarchy, snapshot.quantizer, None);
                match engine.reader().warm().await {
                    Ok(_) => {
                        early.extend(reader_violations(engine.reader(), codes).await);
                        engine.reencode_sample(CODE_SAMPLE_LISTS).await.map(|bad| {
                            early.extend(bad.into_iter().map(|m| Violation::CodeMismatch {
                                path: m.path,
                                row_group: m.row_group,
                                row: m.row,
                                rowid: m.rowid,
                            }))
                        })
                    }
                    Err(e) => Err(e),
                }
                .map_err(|e| e.to_string())
            }
            Err(e) => {
                // Still check the postings table where a snapshot keeps it.
                tables = vec![
                    POSTINGS_LOCATION
                        .rsplit_once('/')
                        .map_or(folder.clone(), |(dir, _)| folder.clone().join(dir)),
                ];
                Err(e.to_string())
            }
        };
        if let Err(e) = checked {
            early.push(Violation::SnapshotInvalid {
                path: folder.to_string(),
                error: e.to_string(),
            });
        }
    }
    let mut report = verify(store.clone(), &tables[0], options).await?;
    early.append(&mut report.violations);
    for table in &tables[1..] {
        let mut delta = verify(store.clone(), table, options).await?;
        report.files_checked += delta.files_checked;
        early.append(&mut delta.violations);
    }
    report.violations = early;
    report.advisories = advisories;
    if options.orphans && is_index {
        match warehouse::unreferenced_snapshots(&store, location).await {
            Ok(folders) => {
                for f in folders {
                    match warehouse::snapshot_folder(location, &f.snapshot) {
                        Ok(path) => report.violations.push(Violation::UnreferencedSnapshot {
                            path: path.to_string(),
                        }),
                        Err(e) => report.violations.push(commit_invalid(e.to_string())),
                    }
                }
            }
            Err(e) => report.violations.push(commit_invalid(e.to_string())),
        }
    }
    Ok(report)
}

/// The latest commit's copy (`versions/latest-commit.json`) and bundle
/// (`versions/latest-bundle.bin`) of the index at `location`, whose current
/// commit is `commit`, against what the snapshot writer writes for it
/// ([`warehouse::snapshot_pins`]' footers ahead,
/// [`snapshot_writer::bundle_bytes`]). A missing one is no violation: older
/// writers wrote none, and a snapshot too large for a bundle has none. A
/// snapshot that does not open is reported by the checks after this one.
///
/// # Errors
/// Storage failures other than a missing object.
async fn open_ahead_violations(
    store: &Arc<dyn ObjectStore>,
    location: &Path,
    commit: &Commit,
) -> Result<Vec<Violation>, PostingsError> {
    let mut found = Vec::new();
    let Ok(folder) = warehouse::snapshot_folder(location, &commit.snapshot) else {
        return Ok(found);
    };
    let Ok(expected) = warehouse::snapshot_pins(store, &folder).await else {
        return Ok(found);
    };
    let version = commit.version;
    let copy_path = warehouse::latest_commit_path(location);
    let mut stale = |path: &Path, error: String| {
        found.push(Violation::OpenAheadStale {
            path: path.to_string(),
            error,
        })
    };
    if let Some(bytes) = get_opt(store.as_ref(), &copy_path).await? {
        match LatestCommit::parse(&bytes) {
            None => stale(&copy_path, "it is not a commit document".into()),
            Some(copy) if copy.commit != *commit => stale(
                &copy_path,
                format!(
                    "it holds version {} ({}), the current commit is version {version} ({})",
                    copy.commit.version, copy.commit.snapshot, commit.snapshot
                ),
            ),
            Some(copy) if copy.footers_ahead != expected.footers_ahead => stale(
                &copy_path,
                format!(
                    "its footers-ahead ({} entries) are not where the snapshot's {} footers lie",
                    copy.footers_ahead.len(),
                    expected.footers_ahead.len()
                ),
            ),
            Some(_) => {}
        }
    }
    let bundle_path = warehouse::latest_bundle_path(location);
    if let Some(bytes) = get_opt(store.as_ref(), &bundle_path).await? {
        let Ok(want) =
            snapshot_writer::bundle_bytes(store, location, commit, expected.footers_ahead).await
        else {
            return Ok(found);
        };
        let same = |want: &bytes::Bytes, theirs: &OpenBundle| {
            OpenBundle::parse(want).is_some_and(|want| same_bundle(&want, theirs))
        };
        let error = match (want, OpenBundle::parse(&bytes)) {
            (_, None) => Some(format!("its {} bytes are not a bundle", bytes.len())),
            (Some(want), Some(theirs)) if same(&want, &theirs) => None,
            (None, Some(_)) => Some(format!(
                "version {version}'s documents and footers are over {OPEN_BUNDLE_BYTES} bytes: it has no bundle"
            )),
            (Some(_), Some(theirs)) => Some(
                match LatestCommit::parse(&serde_json::to_vec(&theirs.copy).unwrap_or_default()) {
                    Some(copy) if copy.commit != *commit => format!(
                        "it is the bundle of version {}, the current commit is version {version}",
                        copy.commit.version
                    ),
                    _ => format!(
                        "it differs from the bundle of version {version} (a document, a footer or the copy it holds)"
                    ),
                },
            ),
        };
        if let Some(error) = error {
            stale(&bundle_path, error);
        }
    }
    Ok(found)
}

/// Whether two bundles hold the same copy and the same parts (in any
/// order: an open reads its documents concurrently, so the order of a
/// bundle's parts is the order they arrived in).
fn same_bundle(a: &OpenBundle, b: &OpenBundle) -> bool {
    let sorted = |parts: &[(Part, bytes::Bytes)]| {
        let mut parts = parts.to_vec();
        parts.sort_by(|x, y| (&x.0.path, x.0.offset).cmp(&(&y.0.path, y.0.offset)));
        parts
    };
    a.copy == b.copy
        && sorted(&a.documents) == sorted(&b.documents)
        && sorted(&a.footers) == sorted(&b.footers)
}

/// The object at `path`, `None` when it does not exist.
async fn get_opt(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<bytes::Bytes>, PostingsError> {
    match store.get(path).await {
        Ok(got) => got.bytes().await.map(Some),
        Err(e) => Err(e),
    }
    .or_else(|e| match e {
        object_store::Error::NotFound { .. } => Ok(None),
        source => Err(store_error(path, source)),
    })
}

/// LISTs the table prefix (only on request) for objects no entry names.
async fn find_orphans(
    store: &dyn ObjectStore,
    table_root: &Path,
    manifest: &Manifest,
) -> Result<Vec<Violation>, PostingsError> {
    let named: HashSet<&str> = manifest
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain([MANIFEST_FILE, FOOTERS_FILE])
        .collect();
    let prefix = (!table_root.as_ref().is_empty()).then_some(table_root);
    let listed: Vec<_> = store
        .list(prefix)
        .try_collect()
        .await
        .map_err(|source| store_error(table_root, source))?;
    let mut orphans: Vec<Violation> = listed
        .into_iter()
        .filter_map(|meta| {
            let relative: Vec<String> = meta
                .location
                .prefix_match(table_root)?
                .map(|part| part.as_ref().to_owned())
                .collect();
            (!named.contains(relative.join("/").as_str())).then(|| Violation::Orphan {
                path: meta.location.to_string(),
            })
        })
        .collect();
    orphans.sort_by_key(ToString::to_string);
    Ok(orphans)
}
