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

use super::PostingsError;
use super::page_crc::check_column_chunk;
use super::writer::child_path;
use crate::format::definition::INDEX_DEFINITION_FILE;
use crate::format::footers::{FOOTERS_FILE, FooterPin, Footers, read_footer_bytes};
use crate::format::manifest::{FORMAT_VERSION, FileEntry, Manifest, ManifestError};
use crate::format::postings_table::{CID_COLUMN, KV_FORMAT_VERSION, MANIFEST_FILE};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::async_reader::MetadataFetch;
use parquet::basic::{Repetition, Type as PhysicalType};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::statistics::Statistics;
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use thiserror::Error;

/// Objects checked at the same time.
const CONCURRENT_OBJECTS: usize = 8;
/// Tail bytes fetched with the first footer read (one GET for most footers).
const FOOTER_PREFETCH: usize = 64 * 1024;

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
}

impl VerifyReport {
    /// True when no rule is broken.
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
    #[error("{path}: footer holds {actual} rows, manifest says {expected}")]
    RowCountMismatch {
        path: String,
        expected: u64,
        actual: i64,
    },
    #[error("{path}: column `cid` must be INT32 REQUIRED, found {found}")]
    CidColumnInvalid { path: String, found: String },
    #[error("{path}: key-value {KV_FORMAT_VERSION} is {found:?}, expected \"{expected}\"")]
    FormatVersionMismatch {
        path: String,
        found: Option<String>,
        expected: u32,
    },
    #[error("{path}: row group {row_group} has no rows, hence no CID")]
    EmptyRowGroup { path: String, row_group: usize },
    #[error("{path}: row group {row_group} has no cid min/max statistics")]
    StatisticsMissing { path: String, row_group: usize },
    #[error("{path}: row group {row_group} cid statistics are not exact")]
    StatisticsInexact { path: String, row_group: usize },
    #[error("{path}: row group {row_group} has {nulls} null cids")]
    CidNulls {
        path: String,
        row_group: usize,
        nulls: u64,
    },
    #[error("{path}: row group {row_group} holds cids {min}..={max}, not exactly one")]
    MultipleCids {
        path: String,
        row_group: usize,
        min: i32,
        max: i32,
    },
    #[error("{path}: row group {row_group} cid {cid} is outside the file's [{min_cid}, {max_cid}]")]
    CidOutsideFile {
        path: String,
        row_group: usize,
        cid: i32,
        min_cid: u32,
        max_cid: u32,
    },
    #[error("{path}: row group {row_group} cid {cid} comes after cid {previous}")]
    RowGroupsUnordered {
        path: String,
        row_group: usize,
        previous: i32,
        cid: i32,
    },
    #[error("{path}: first row group's cid is {actual}, manifest min-cid is {expected}")]
    FirstCidMismatch {
        path: String,
        expected: u32,
        actual: i32,
    },
    #[error("{path}: last row group's cid is {actual}, manifest max-cid is {expected}")]
    LastCidMismatch {
        path: String,
        expected: u32,
        actual: i32,
    },
    #[error("{path}: object is not named by the manifest")]
    Orphan { path: String },
    #[error("{path}: footers.json does not exist")]
    FootersMissing { path: String },
    #[error("{error}")]
    FootersInvalid { path: String, error: String },
    #[error("{error}")]
    FooterPinMismatch { path: String, error: String },
    #[error("{path} row group {row_group} column {column}: {error}")]
    PageChecksum {
        path: String,
        row_group: usize,
        column: String,
        error: String,
    },
    /// The reader refuses the snapshot (`Index::open` with the commit's pins,
    /// then every footer): the error it gives.
    #[error("{path}: the snapshot cannot be searched: {error}")]
    SnapshotInvalid { path: String, error: String },
    /// The commit log cannot be read.
    #[error("{path}: {error}")]
    CommitInvalid { path: String, error: String },
    #[error("{path}: snapshot is not named by any version (gc deletes it after the grace period)")]
    UnreferencedSnapshot { path: String },
}

fn display<S: Serializer>(error: &ManifestError, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(error)
}

/// Checks the `ivf_postings` table at `table_root` in `store`.
///
/// # Errors
/// [`PostingsError::ObjectStore`] when an object cannot be read for a reason
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
    };
    let manifest_path = child_path(table_root, MANIFEST_FILE);
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
    let footers_path = child_path(table_root, FOOTERS_FILE);
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
        .map(|(i, file)| check_object(&store, table_root, file, pins.and_then(|p| p.get(i))))
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
    PostingsError::ObjectStore {
        path: path.to_string(),
        source,
    }
}

/// Streams the object through sha256, then reads its footer.
async fn check_object(
    store: &Arc<dyn ObjectStore>,
    table_root: &Path,
    file: &FileEntry,
    pin: Option<&FooterPin>,
) -> Result<Vec<Violation>, PostingsError> {
    let location = child_path(table_root, &file.path);
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
    let fetch = RangeFetch {
        store: store.as_ref(),
        location: &location,
    };
    let footer = ParquetMetaDataReader::new()
        .with_prefetch_hint(Some(FOOTER_PREFETCH))
        .load_and_finish(fetch, size)
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
            found.extend(check_footer(&path, file, &metadata));
            found.extend(check_pages(store.as_ref(), &location, &metadata).await?);
        }
        Err(error) => found.push(Violation::FooterUnreadable {
            path,
            error: error.to_string(),
        }),
    }
    Ok(found)
}

/// The CRC32 of every page of every column chunk, row group by row group
/// (one `get_ranges` each).
async fn check_pages(
    store: &dyn ObjectStore,
    location: &Path,
    metadata: &ParquetMetaData,
) -> Result<Vec<Violation>, PostingsError> {
    let mut found = Vec::new();
    for (r, rg) in metadata.row_groups().iter().enumerate() {
        let ranges: Vec<Range<u64>> = rg
            .columns()
            .iter()
            .map(|c| {
                let (start, len) = c.byte_range();
                start..start.saturating_add(len)
            })
            .collect();
        let data = match store.get_ranges(location, &ranges).await {
            Ok(data) => data,
            Err(error) => {
                found.push(Violation::PageChecksum {
                    path: location.to_string(),
                    row_group: r,
                    column: "*".into(),
                    error: format!("column chunks cannot be read: {error}"),
                });
                continue;
            }
        };
        for (c, bytes) in rg.columns().iter().zip(&data) {
            if let Err(e) = check_column_chunk(bytes) {
                found.push(Violation::PageChecksum {
                    path: location.to_string(),
                    row_group: r,
                    column: c.column_path().string(),
                    error: e.to_string(),
                });
            }
        }
    }
    Ok(found)
}

/// Checks everything a reader relies on at `location`: an index (its current
/// snapshot, opened with the commit's pins), a snapshot folder (holding
/// `index.json`), or a bare postings table (holding `manifest.json`).
///
/// For a snapshot: the reader's own open (definition, manifest, footers.json,
/// centroids and their agreement: dim, nlist, roots, cid-offsets; every pin)
/// and every footer's reader validation, then [`verify`] of its postings
/// table. With [`VerifyOptions::orphans`] on an index, also LISTs
/// `snapshots/` for folders no version names.
///
/// # Errors
/// As [`verify`]: only a failure to run at all.
pub async fn verify_location(
    store: Arc<dyn ObjectStore>,
    location: &Path,
    options: VerifyOptions,
) -> Result<VerifyReport, PostingsError> {
    use crate::format::warehouse::{WarehouseError, current_snapshot, unreferenced_snapshots};
    let mut early = Vec::new();
    let (snapshot, pins, is_index) = match current_snapshot(&store, location).await {
        Ok((commit, snapshot)) => (snapshot, Some(commit.pins), true),
        Err(WarehouseError::NoSnapshot { .. }) => (location.clone(), None, false),
        Err(e) => {
            early.push(Violation::CommitInvalid {
                path: location.to_string(),
                error: e.to_string(),
            });
            (location.clone(), None, true)
        }
    };
    let definition = snapshot.clone().join(INDEX_DEFINITION_FILE);
    let has_definition = match store.head(&definition).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => is_index,
        Err(source) => return Err(store_error(&definition, source)),
    };
    let mut table = snapshot.clone();
    if has_definition {
        table = snapshot.clone().join("postings");
        let options = crate::index::IndexOptions::default();
        let opened = match &pins {
            Some(pins) => {
                crate::index::Index::open_pinned(store.clone(), &snapshot, options, pins).await
            }
            None => crate::index::Index::open_with_options(store.clone(), &snapshot, options).await,
        };
        let checked = match opened {
            Ok(index) => {
                if let Some((dir, _)) = index
                    .definition()
                    .tables
                    .ivf_postings
                    .location
                    .rsplit_once('/')
                {
                    table = child_path(&snapshot, dir);
                }
                index.warm().await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            early.push(Violation::SnapshotInvalid {
                path: snapshot.to_string(),
                error: e.to_string(),
            });
        }
    }
    let mut report = verify(store.clone(), &table, options).await?;
    early.append(&mut report.violations);
    report.violations = early;
    if options.orphans && is_index {
        match unreferenced_snapshots(&store, location).await {
            Ok(folders) => report.violations.extend(folders.into_iter().map(|f| {
                Violation::UnreferencedSnapshot {
                    path: child_path(location, &f.snapshot).to_string(),
                }
            })),
            Err(e) => report.violations.push(Violation::CommitInvalid {
                path: location.to_string(),
                error: e.to_string(),
            }),
        }
    }
    Ok(report)
}

/// Ranged GETs of one object for the footer reader.
struct RangeFetch<'a> {
    store: &'a dyn ObjectStore,
    location: &'a Path,
}

impl MetadataFetch for RangeFetch<'_> {
    fn fetch(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            self.store
                .get_range(self.location, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        })
    }
}

/// Every footer rule for one object. Pure: no IO.
pub fn check_footer(path: &str, file: &FileEntry, metadata: &ParquetMetaData) -> Vec<Violation> {
    let path = || path.to_owned();
    let mut found = Vec::new();
    let meta = metadata.file_metadata();
    if u64::try_from(meta.num_rows()) != Ok(file.rows) {
        found.push(Violation::RowCountMismatch {
            path: path(),
            expected: file.rows,
            actual: meta.num_rows(),
        });
    }
    let version = meta
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|kv| kv.key == KV_FORMAT_VERSION))
        .and_then(|kv| kv.value.clone());
    if version.as_deref() != Some(FORMAT_VERSION.to_string().as_str()) {
        found.push(Violation::FormatVersionMismatch {
            path: path(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let schema = meta.schema_descr();
    let cid_index = schema
        .columns()
        .iter()
        .position(|c| c.path().parts() == [CID_COLUMN]);
    let Some(cid_index) = cid_index else {
        found.push(Violation::CidColumnInvalid {
            path: path(),
            found: "no cid column".into(),
        });
        return found;
    };
    let column = schema.column(cid_index);
    let repetition = column.self_type().get_basic_info().repetition();
    if column.physical_type() != PhysicalType::INT32 || repetition != Repetition::REQUIRED {
        found.push(Violation::CidColumnInvalid {
            path: path(),
            found: format!("{} {repetition}", column.physical_type()),
        });
        return found;
    }
    let mut previous: Option<i32> = None;
    let mut first_last: Option<(i32, i32)> = None;
    for (row_group, rg) in metadata.row_groups().iter().enumerate() {
        if rg.num_rows() == 0 {
            found.push(Violation::EmptyRowGroup {
                path: path(),
                row_group,
            });
            continue;
        }
        let stats = match rg.column(cid_index).statistics() {
            Some(Statistics::Int32(s)) => s,
            _ => {
                found.push(Violation::StatisticsMissing {
                    path: path(),
                    row_group,
                });
                continue;
            }
        };
        let (Some(&min), Some(&max)) = (stats.min_opt(), stats.max_opt()) else {
            found.push(Violation::StatisticsMissing {
                path: path(),
                row_group,
            });
            continue;
        };
        if !stats.min_is_exact() || !stats.max_is_exact() {
            found.push(Violation::StatisticsInexact {
                path: path(),
                row_group,
            });
        }
        if let Some(nulls) = stats.null_count_opt().filter(|&n| n > 0) {
            found.push(Violation::CidNulls {
                path: path(),
                row_group,
                nulls,
            });
        }
        if min != max {
            found.push(Violation::MultipleCids {
                path: path(),
                row_group,
                min,
                max,
            });
        }
        for cid in if min == max {
            vec![min]
        } else {
            vec![min, max]
        } {
            if i64::from(cid) < i64::from(file.min_cid) || i64::from(cid) > i64::from(file.max_cid)
            {
                found.push(Violation::CidOutsideFile {
                    path: path(),
                    row_group,
                    cid,
                    min_cid: file.min_cid,
                    max_cid: file.max_cid,
                });
            }
        }
        if let Some(previous) = previous
            && min < previous
        {
            found.push(Violation::RowGroupsUnordered {
                path: path(),
                row_group,
                previous,
                cid: min,
            });
        }
        previous = Some(max);
        let first = first_last.map_or(min, |(first, _)| first);
        first_last = Some((first, max));
    }
    if let Some((first, last)) = first_last {
        if i64::from(first) != i64::from(file.min_cid) {
            found.push(Violation::FirstCidMismatch {
                path: path(),
                expected: file.min_cid,
                actual: first,
            });
        }
        if i64::from(last) != i64::from(file.max_cid) {
            found.push(Violation::LastCidMismatch {
                path: path(),
                expected: file.max_cid,
                actual: last,
            });
        }
    }
    found
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
