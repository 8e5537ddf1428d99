//! `refresh` and `compact`: keep an index in step with its table without a
//! full rebuild.
//!
//! ```text
//! refresh  current snapshot ─▶ what changed in the source since it was indexed
//!            DuckLake: row versions between the indexed snapshot and the target one
//!            Parquet:  the file set (path, size, ETag) against `source-files.json`
//!          ─▶ new rows: assigned to the EXISTING centroids (the build's assign and
//!             write stages) as a delta postings table in a fresh snapshot folder
//!          ─▶ removed rowids: merged into the snapshot's deletion object
//!          ─▶ index.json with `layers` (base, deltas, deletions), then the commit
//! compact  every live row of every layer ─▶ assigned again to the same centroids,
//!          written as a new base by the build's own stages (the bytes a fresh
//!          build given those centroids writes) ─▶ commit
//! ```
//!
//! Both publish like a build, through the one
//! [`crate::format::snapshot_writer::SnapshotWriter`]: nothing is visible
//! before the commit, a commit whose answer was lost is a success, a lost
//! race is [`crate::format::warehouse::WarehouseError::Conflict`] (run
//! again), and a failure deletes the new folder unless a version may name it.
//! Compaction reads the postings through the one postings reader
//! ([`PostingsReader::read_file`]), so a corrupt page fails it. A source that is gone or whose
//! vector or payload columns changed type is a typed error, and nothing is
//! published. The drift report compares the new rows' quantisation error
//! with the build's; `retrain_above` rebuilds instead when it grew more.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, FieldRef};
use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::Serialize;

use super::error::BuildError;
use super::job::BuildSummary;
use super::offload::blocking;
use super::progress::Phase;
use super::source::spec::{DUCKLAKE, SourceSpec};
use super::source::vector_source::{SourceDefinition, VectorBatch, VectorSource};
use super::spill::BucketSpill;
use super::spilled::{AssignError, assign_all, write_all, write_one_bucket};
use super::stages::{self, BuildParams, PostingsTarget};
use crate::format::definition::{IndexDefinition, IndexSource};
use crate::format::layers::{DELETIONS_FILE, DeletionsRef, DeltaRef, LayerRef, Layers};
use crate::format::pin::Pin;
use crate::format::postings_table::{RESERVED_COLUMNS, postings_schema};
use crate::format::snapshot::Snapshot;
use crate::format::snapshot_writer::SnapshotWriter;
use crate::format::source_files::{SOURCE_FILES_FILE, SourceFile, SourceFiles};
use crate::format::source_ids::SourceIds;
use crate::format::warehouse;
use crate::format::warehouse::Publisher;
use crate::probe::load::{IndexOptions, PostingsReader};
use crate::probe::rows::{DecodedRowGroup, Want};
use crate::store::options::StoreOptions;

/// What `refresh` reads besides the index.
#[derive(Debug, Clone, Default)]
pub struct RefreshParams {
    /// The source to read, when it differs from what `index.json` records
    /// (e.g. a DuckLake catalog with its credentials, or a moved table).
    /// Its columns must be the index's.
    pub source: Option<String>,
    /// DuckLake: the snapshot to bring the index to (default: the latest).
    pub snapshot: Option<u64>,
    /// DuckLake: the catalog's `data_path` override.
    pub data_path: Option<String>,
    /// Rebuild from scratch (new centroids) instead, when the new rows'
    /// quantisation error exceeds the build's by more than this fraction
    /// (0.1: 10 % more).
    pub retrain_above: Option<f64>,
    /// Store settings of the source.
    pub store_options: StoreOptions,
    /// When to fold the layers into a new base right after publishing.
    pub compact: CompactPolicy,
}

/// When a refresh, delete or upsert compacts right after publishing
/// (`--compact-above`): each delta adds requests to every cold query and
/// each deletion is a row read and dropped, so past a bound a compaction
/// pays for itself. `None` never triggers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompactPolicy {
    /// More delta tables than this.
    pub deltas_above: Option<usize>,
    /// More deleted rows than this fraction of the rows in all layers.
    pub deleted_above: Option<f64>,
}

impl CompactPolicy {
    /// Whether an index with `deltas` delta tables and `deleted` of `rows`
    /// rows deleted should be compacted now.
    pub fn due(&self, deltas: usize, deleted: u64, rows: u64) -> bool {
        self.deltas_above.is_some_and(|n| deltas > n)
            || self
                .deleted_above
                .is_some_and(|f| rows > 0 && deleted as f64 > f * rows as f64)
    }
}

/// How far the index's centroids have drifted from its rows.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Drift {
    /// Mean squared L2 distance of the built rows to their leaf centroids
    /// (absent for an index built before it was recorded).
    pub build_error: Option<f64>,
    /// The same for the rows this refresh added.
    pub new_error: Option<f64>,
    /// `new_error / build_error − 1`: 0 when new rows fit the centroids as
    /// well as the built ones.
    pub error_growth: Option<f64>,
    /// Imbalance factor `nlist · Σh² / (Σh)²` of the new rows over the
    /// lists (1 is perfectly even; a shifted distribution crowds a few lists).
    pub new_rows_imbalance: Option<f64>,
    /// Delta tables after the refresh (each adds files every cold probe reads).
    pub deltas: usize,
    /// Deleted rowids after the refresh.
    pub deletions: u64,
}

/// What a refresh did (printed by `parqivf refresh --json`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RefreshSummary {
    pub index: String,
    /// The version the refresh started from.
    pub from_version: u64,
    /// The version it committed (`None`: the index was up to date).
    pub version: Option<u64>,
    pub snapshot: Option<String>,
    /// The source state indexed before and after (a DuckLake snapshot id,
    /// or the number of Parquet files).
    pub source_before: String,
    pub source_after: String,
    pub rows_added: u64,
    /// Live rows deleted (a gone or changed file's, an update's old
    /// version, or a delete's).
    pub rows_removed: u64,
    /// Source rows not indexed because their vector was NULL, non-finite
    /// or (under cosine) zero, with `skip_invalid`.
    pub rows_skipped: u64,
    /// A delete's or upsert's ids that matched no live row (an upsert
    /// inserts them).
    pub ids_not_found: u64,
    /// New source files with no rows: recorded, nothing to index.
    pub empty_files: u64,
    pub drift: Drift,
    /// When `retrain_above` was passed: the full rebuild made instead.
    pub rebuilt: Option<BuildSummary>,
    /// When the compaction policy was due: the compaction run after the
    /// commit.
    pub compacted: Option<CompactSummary>,
    /// Why that compaction failed (the change itself is committed).
    pub compact_error: Option<String>,
    pub seconds: f64,
}

impl RefreshSummary {
    /// The summary of a refresh from `from_version` that found `changes`,
    /// before anything is written.
    fn start(index: &Path, from_version: u64, changes: &Changes, drift: &Drift) -> Self {
        RefreshSummary {
            index: index.to_string(),
            from_version,
            version: None,
            snapshot: None,
            source_before: changes.before.clone(),
            source_after: changes.after.clone(),
            rows_added: 0,
            rows_removed: changes.removed.len() as u64,
            rows_skipped: 0,
            ids_not_found: changes.ids_not_found,
            empty_files: changes.empty_files,
            drift: drift.clone(),
            rebuilt: None,
            compacted: None,
            compact_error: None,
            seconds: 0.0,
        }
    }
}

/// What changes in the index: the new rows (as a source) and the rowids
/// that are gone, with the source state after. A refresh finds them in the
/// source; a delete or upsert is given them.
pub(super) struct Changes {
    pub(super) added: Option<Arc<dyn VectorSource>>,
    /// New source files with no rows (recorded, nothing to index).
    pub(super) empty_files: u64,
    /// Live rowids deleted before the new layer (an update's old version
    /// among them, so the new one stays visible).
    pub(super) removed: Vec<i64>,
    /// The added rows replace live rows of the same id (an upsert): their
    /// ids are not checked against the index.
    pub(super) replaces: bool,
    /// A delete's or upsert's ids that matched no live row.
    pub(super) ids_not_found: u64,
    pub(super) source: IndexSource,
    pub(super) source_files: Option<SourceFiles>,
    /// With an id column: the ids each source file owns after the change
    /// (the added source's own files are recorded once their ids are read).
    pub(super) source_ids: Option<SourceIds>,
    pub(super) before: String,
    pub(super) after: String,
}

/// The current snapshot of `index`, through its commit.
pub(super) async fn current(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<(warehouse::Commit, Snapshot), BuildError> {
    let commit = warehouse::current(store, index).await?.ok_or_else(|| {
        warehouse::WarehouseError::NoSnapshot {
            index: index.to_string(),
            first: warehouse::version_path(index, 1).to_string(),
        }
    })?;
    let snapshot = Snapshot::open_commit(store.as_ref(), index, commit.clone())
        .await
        .map_err(|e| BuildError::Refresh {
            index: index.to_string(),
            reason: e.to_string(),
        })?;
    Ok((commit, snapshot))
}

/// The ids live in `snapshot` that this change does not remove: what new
/// rows must not repeat. Read from the postings (rowid columns only,
/// checked as a query reads them).
///
/// # Errors
/// Postings read errors.
pub(super) async fn live_ids(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
    removed: &[i64],
) -> Result<std::collections::HashSet<i64>, BuildError> {
    let reader = PostingsReader::new(store.clone(), snapshot, IndexOptions::default());
    let removed: std::collections::HashSet<i64> = removed.iter().copied().collect();
    Ok(reader
        .live_rowids()
        .await?
        .into_iter()
        .filter(|id| !removed.contains(id))
        .collect())
}

/// The source `definition` records, as a [`SourceSpec`] (`source` overrides
/// its location).
fn spec_of(definition: &IndexDefinition, params: &RefreshParams) -> SourceSpec {
    let b = &definition.build;
    let mut spec = SourceSpec {
        column: b.vector_column.clone(),
        id_column: b.id_column.clone(),
        payload: b.payload_columns.clone(),
        skip_invalid: b.skip_invalid,
        data_path: params.data_path.clone(),
        snapshot: params.snapshot,
        ..SourceSpec::default()
    };
    match &definition.source {
        IndexSource::Parquet { location, .. } => spec.source = location.clone(),
        IndexSource::Ducklake {
            catalog,
            schema,
            table,
            ..
        } => {
            spec.source = if catalog.starts_with("postgres:") || catalog.starts_with("sqlite:") {
                format!("{DUCKLAKE}{catalog}")
            } else {
                format!("{DUCKLAKE}sqlite:{catalog}")
            };
            spec.table = Some(format!("{schema}.{table}"));
        }
        IndexSource::VectorFile { location } => spec.source = location.clone(),
    }
    if let Some(source) = &params.source {
        spec.source = source.clone();
    }
    spec
}

/// The error of a snapshot that cannot be refreshed as it is.
fn refused(snapshot: &Snapshot, reason: String) -> BuildError {
    BuildError::Refresh {
        index: snapshot.folder.to_string(),
        reason,
    }
}

/// What changed in `spec`'s source since `snapshot` indexed it.
async fn changes(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
    spec: &SourceSpec,
    params: &RefreshParams,
) -> Result<Changes, BuildError> {
    let refuse = |reason: String| refused(snapshot, reason);
    match &snapshot.definition.source {
        IndexSource::Ducklake { snapshot_id, .. } => {
            let catalog = spec
                .source
                .strip_prefix(DUCKLAKE)
                .ok_or_else(|| refuse(format!("{} is not a DuckLake source", spec.source)))?;
            let catalog = crate::catalog::ducklake::Catalog::parse(catalog)
                .map_err(|e| BuildError::Catalog(e.into()))?;
            let table = spec.table.clone().unwrap_or_default();
            let from = u64::try_from(*snapshot_id).unwrap_or(0);
            let (source, removed) = super::source::ducklake::DuckLakeSource::open_changes(
                &catalog,
                &table,
                &spec.column,
                &spec.payload,
                from,
                params.snapshot,
                spec.data_path.as_deref(),
                spec.skip_invalid,
            )
            .await?;
            let definition = source.definition();
            let to = match &definition.source {
                IndexSource::Ducklake { snapshot_id, .. } => *snapshot_id,
                _ => *snapshot_id,
            };
            Ok(Changes {
                added: (source.parts() > 0 && source.dim() > 0)
                    .then(|| Arc::new(source) as Arc<dyn VectorSource>),
                empty_files: 0,
                removed,
                replaces: false,
                ids_not_found: 0,
                source: definition.source,
                source_files: None,
                source_ids: None,
                before: format!("ducklake snapshot {snapshot_id}"),
                after: format!("ducklake snapshot {to}"),
            })
        }
        IndexSource::Parquet { .. } => parquet_changes(store, snapshot, spec, params).await,
        IndexSource::VectorFile { location } => Err(refuse(format!(
            "{location} is a vector file, not a table: there is nothing to follow; rebuild"
        ))),
    }
}

/// The file set a snapshot recorded of its Parquet source, and the ids
/// each file holds ([`Snapshot::source_record`]).
///
/// # Errors
/// [`BuildError::Refresh`] naming what is wrong with them.
pub(super) async fn recorded_files(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
) -> Result<Option<(SourceFiles, Option<SourceIds>)>, BuildError> {
    snapshot
        .source_record(store.as_ref())
        .await
        .map_err(|e| refused(snapshot, e.to_string()))
}

/// What changed in a Parquet source: its file set (path, size, ETag, and
/// the sha256 when recorded) listed against `source-files.json`. New files
/// are new rows (numbered from `next-rowid` on without an id column; 0-row
/// files are recorded and counted); a gone or changed file's rows are
/// deleted: its rowid range, or with an id column the ids
/// `source-ids.parquet` records for it. A changed file's ids that it still
/// holds are updates: deleted before the layer of their new version.
///
/// # Errors
/// No recorded file set, an id column without recorded ids and a file
/// gone, pin mismatches, listing and source errors.
async fn parquet_changes(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
    spec: &SourceSpec,
    params: &RefreshParams,
) -> Result<Changes, BuildError> {
    let refuse = |reason: String| refused(snapshot, reason);
    let (recorded, mut source_ids) = recorded_files(store, snapshot).await?.ok_or_else(|| {
        refuse(
            "the snapshot records no source-files.json (built before format version 3, \
             or by a distributed build): rebuild it once to refresh it later"
                .into(),
        )
    })?;
    let (src_store, pattern) =
        crate::store::location::open_pattern(&spec.source, &params.store_options)
            .map_err(|e| BuildError::Store(e.into()))?;
    let location = crate::store::uri::LocationUri::from_store_path(&pattern)
        .map_err(|e| BuildError::Catalog(e.into()))?;
    let listed = super::source::parquet::expand(src_store.as_ref(), &location).await?;
    // Content hashes, when the build recorded them: of the listed files that
    // size and ETag alone would call unchanged.
    let mut hashes = std::collections::HashMap::new();
    if recorded.hashed() {
        let no_hashes = std::collections::HashMap::new();
        for meta in &listed {
            let candidate = recorded.files.iter().find(|f| {
                f.path == meta.location.as_ref() && f.sha256.is_some() && {
                    let unhashed = SourceFile {
                        sha256: None,
                        ..(*f).clone()
                    };
                    unhashed.matches(meta, &no_hashes)
                }
            });
            if candidate.is_some() {
                let h = super::source::parquet::content_sha256(src_store.as_ref(), &meta.location)
                    .await?;
                hashes.insert(meta.location.to_string(), h);
            }
        }
    }
    let diff = recorded.diff(&listed, &hashes);
    let removed: Vec<i64> = match (&spec.id_column, &mut source_ids) {
        (None, _) => diff.removed.iter().flat_map(|f| f.rowids()).collect(),
        (Some(_), Some(ids)) => diff
            .removed
            .iter()
            .flat_map(|f| ids.remove_file(&f.path))
            .collect(),
        (Some(_), None) if diff.removed.is_empty() => Vec::new(),
        (Some(_), None) => {
            return Err(refuse(format!(
                "{} files are gone or changed ({}…), and this snapshot does not record \
                 which ids each file holds (it was built before source-ids.parquet, or by \
                 a distributed build): rebuild the index once to refresh it later",
                diff.removed.len(),
                diff.removed[0].path
            )));
        }
    };
    let (added, source_files, empty_files) = if diff.added.is_empty() {
        let mut kept = recorded.clone();
        kept.files = diff.kept.clone();
        (None, kept, 0)
    } else {
        let opened = super::source::parquet::ParquetSource::open_files(
            src_store,
            &pattern,
            diff.added.clone(),
            recorded.next_rowid,
            super::source::parquet::ParquetSourceOptions {
                column: spec.column.clone(),
                id_column: spec.id_column.clone(),
                payload: spec.payload.clone(),
                skip_invalid: spec.skip_invalid,
                table_uri: spec.source.contains("://").then(|| spec.source.clone()),
                content_hash: recorded.hashed(),
            },
        )
        .await;
        match opened {
            Ok(source) => {
                let files = source.source_files();
                let empty = files.files.iter().filter(|f| f.rows == 0).count();
                let record = recorded.after(diff.kept.clone(), files);
                let source = Arc::new(source) as Arc<dyn VectorSource>;
                (Some(source), record, empty as u64)
            }
            // Every new file has 0 rows: nothing to index, but they are
            // recorded, so the next refresh does not see them again.
            Err(BuildError::EmptySource) => {
                let empty = SourceFiles {
                    files: diff
                        .added
                        .iter()
                        .map(|m| SourceFile::of(m, recorded.next_rowid, 0))
                        .collect(),
                    ..recorded.clone()
                };
                let record = recorded.after(diff.kept.clone(), empty);
                (None, record, diff.added.len() as u64)
            }
            Err(e) => return Err(e),
        }
    };
    Ok(Changes {
        added,
        empty_files,
        removed,
        replaces: false,
        ids_not_found: 0,
        source: snapshot.definition.source.clone(),
        before: format!("{} files", recorded.files.len()),
        after: format!("{} files", source_files.files.len()),
        source_files: Some(source_files),
        source_ids,
    })
}

/// The new rows' columns must be the index's: same dimension, same payload
/// columns and types.
fn check_schema(
    index: &str,
    definition: &IndexDefinition,
    payload: &[FieldRef],
    source: &dyn VectorSource,
) -> Result<(), BuildError> {
    let changed = |what: &str, expected: String, found: String| BuildError::SchemaChanged {
        index: index.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    if source.dim() != definition.dim as usize {
        return Err(changed(
            "vector dimension",
            definition.dim.to_string(),
            source.dim().to_string(),
        ));
    }
    let names = |f: &[FieldRef]| {
        f.iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found = source.payload_fields();
    if found.len() != payload.len()
        || found
            .iter()
            .zip(payload)
            .any(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
    {
        return Err(changed("payload columns", names(payload), names(&found)));
    }
    Ok(())
}

/// The payload columns of the index's postings (from a footer of its base).
pub(super) async fn payload_fields(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
) -> Result<Vec<FieldRef>, BuildError> {
    let Some(path) = snapshot.postings_paths.first() else {
        return Ok(Vec::new());
    };
    let meta = store.head(path).await.map_err(|e| BuildError::Unreadable {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    let mut reader = crate::store::parquet_reader::StoreReader::new(
        store.clone(),
        path.clone(),
        Some(meta.size),
    );
    let footer = parquet::arrow::arrow_reader::ArrowReaderMetadata::load_async(
        &mut reader,
        Default::default(),
    )
    .await
    .map_err(|e| BuildError::Unreadable {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    Ok(footer
        .schema()
        .fields()
        .iter()
        .filter(|f| !RESERVED_COLUMNS.contains(&f.name().as_str()))
        .cloned()
        .collect())
}

/// Bring the index at `index` up to date with its source, as the next
/// version: a delta postings table for the new rows, the removed rowids in
/// the deletion object. `build` supplies the progress mode, memory limit
/// and writer options (its model parameters are the index's own).
///
/// # Errors
/// [`BuildError::Refresh`] for an index that cannot be refreshed (no
/// snapshot, a vector-file source, no recorded file set), [`BuildError::SchemaChanged`],
/// the source's errors (gone: `NoFiles`, `Unreadable`, catalog errors),
/// [`BuildError::IdAlreadyIndexed`] for a new row repeating a live id that
/// the refresh does not delete, storage errors, and
/// [`crate::format::warehouse::WarehouseError::Conflict`] when another
/// publisher committed first. Nothing is published on any error.
pub async fn refresh(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    params: &RefreshParams,
    build: &BuildParams,
) -> Result<RefreshSummary, BuildError> {
    let (commit, snapshot) = current(&store, index).await?;
    let spec = spec_of(&snapshot.definition, params);
    let changes = changes(&store, &snapshot, &spec, params).await?;
    let how = Apply {
        build,
        publisher: Publisher::Refresh,
        retrain: params.retrain_above.map(|limit| (limit, &spec, params)),
        compact: params.compact,
    };
    apply(store, index, (commit, snapshot), changes, how).await
}

/// How [`apply`] publishes.
pub(super) struct Apply<'a> {
    pub(super) build: &'a BuildParams,
    pub(super) publisher: Publisher,
    /// `retrain_above`, with the source to rebuild from.
    pub(super) retrain: Option<(f64, &'a SourceSpec, &'a RefreshParams)>,
    pub(super) compact: CompactPolicy,
}

/// Publish `changes` to the version `commit` of `index` as the next one:
/// the added rows assigned to the existing centroids as a delta table, the
/// removed rowids deleted before it, the file set and source ids after
/// the change; then compact when the policy is due. The one path of
/// refresh, delete and upsert.
///
/// # Errors
/// As [`refresh`].
pub(super) async fn apply(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    (commit, snapshot): (warehouse::Commit, Snapshot),
    mut changes: Changes,
    how: Apply<'_>,
) -> Result<RefreshSummary, BuildError> {
    let t0 = Instant::now();
    let mut drift = Drift {
        build_error: snapshot.definition.build.quantization_error,
        deltas: snapshot.layer_starts.len() - 1,
        deletions: snapshot.deletions.len() as u64,
        ..Drift::default()
    };
    let mut summary = RefreshSummary::start(index, commit.version, &changes, &drift);
    if changes.added.is_none()
        && changes.removed.is_empty()
        && changes.source == snapshot.definition.source
    {
        summary.seconds = super::job::secs(t0.elapsed());
        return Ok(summary);
    }

    // Only now a footer of the base: its payload columns, which new rows must match.
    let payload = payload_fields(&store, &snapshot).await?;
    if let Some(added) = &changes.added {
        check_schema(
            index.as_ref(),
            &snapshot.definition,
            &payload,
            added.as_ref(),
        )?;
    }

    let hierarchy = Arc::new(snapshot.hierarchy.clone());
    let quantizer = snapshot.quantizer.clone().map(Arc::new);
    let dim = snapshot.definition.dim as usize;
    let payload_plain: Vec<Field> = payload.iter().map(|f| f.as_ref().clone()).collect();
    let code_bytes = quantizer
        .as_deref()
        .map(crate::quant::Quantizer::code_bytes);
    let schema = postings_schema(dim, code_bytes, &payload_plain);
    let build = BuildParams {
        metric: snapshot.definition.metric,
        sort_by: snapshot.definition.build.sort_by.clone(),
        ..how.build.clone()
    };
    let mut spill = BucketSpill::new(schema.clone(), hierarchy.nroots(), build.memory_limit / 2)?;
    let error = match &changes.added {
        Some(source) => {
            // Ids from the data may repeat an indexed one: never two live
            // rows (an upsert's replace the ones it deletes).
            let indexed = if source.ids_may_repeat() && !changes.replaces {
                live_ids(&store, &snapshot, &changes.removed).await?
            } else {
                std::collections::HashSet::new()
            };
            let model = (&hierarchy, quantizer.as_ref());
            let declared = super::stages::count(source.as_ref()).await?;
            let error = assign_new(
                source.as_ref(),
                model,
                &schema,
                &build,
                &mut spill,
                &indexed,
            )
            .await?;
            summary.rows_skipped = declared.iter().sum::<u64>().saturating_sub(error.rows);
            error
        }
        None => AssignError::default(),
    };
    summary.rows_added = error.rows;
    drift.add_rows(&error);
    if let (Some(ids), Some(source)) = (&mut changes.source_ids, &changes.added)
        && source.source_files().is_some()
    {
        for (p, owned) in error.part_ids.iter().enumerate() {
            ids.insert(&source.part_name(p), owned.clone());
        }
    }
    if let Some((limit, spec, params)) = how.retrain
        && let Some(growth) = drift.error_growth
        && growth > limit
    {
        let built = rebuild(store, index, spec, params, &snapshot, &build).await?;
        summary.version = Some(built.version);
        summary.snapshot = Some(built.snapshot.clone());
        summary.rebuilt = Some(built);
        drift.deltas = 0;
        drift.deletions = 0;
        summary.drift = drift;
        summary.seconds = super::job::secs(t0.elapsed());
        return Ok(summary);
    }

    // A small change after a small last delta: both are written as one
    // small delta that replaces it, so small changes never pile up layers.
    let row_bytes = (4 * dim + code_bytes.unwrap_or(0)) as u64;
    let layers_now = snapshot.layer_starts.len() as u32;
    let mut rows = error.rows;
    let merge_tail = error.rows > 0
        && layers_now > 1
        && snapshot.definition.layers.as_ref().is_some_and(|l| {
            l.deltas
                .last()
                .is_some_and(|d| (d.rows + error.rows) * row_bytes <= SMALL_DELTA_BYTES)
        });
    if merge_tail {
        let tail: Vec<usize> =
            (snapshot.layer_starts[layers_now as usize - 1]..snapshot.files.len()).collect();
        let deletions = Arc::new(snapshot.deletions.with(&changes.removed, layers_now));
        let old = LiveSource::new(&store, &snapshot, payload.clone(), tail, deletions);
        let model = (&hierarchy, quantizer.as_ref());
        rows += old.assign(model, &schema, &build, &mut spill).await?.rows;
    }

    // The new snapshot folder: the delta table (maybe empty), the
    // deletions, the file set, then index.json and the commit.
    let writer = SnapshotWriter::begin(store.clone(), index, how.publisher)?;
    let mut delta = Delta::after(
        &commit,
        &snapshot,
        &changes,
        quantizer.as_deref(),
        payload_plain,
    );
    delta.small = rows * row_bytes <= SMALL_DELTA_BYTES;
    if merge_tail {
        delta.deltas.pop();
        delta.deletions = delta.deletions.clamped(layers_now - 1);
    }
    let written = write_delta(&writer, delta, &mut spill, &build).await;
    let folder = writer.folder().path.to_string();
    let (layers, committed) = writer.publish(Some(commit.version), written).await?;
    drift.deltas = layers.deltas.len();
    drift.deletions = layers.deletions.rows;
    summary.version = Some(committed.version);
    summary.snapshot = Some(folder);
    let rows: u64 = snapshot.files.iter().map(|f| f.rows).sum::<u64>() + summary.rows_added;
    if how.compact.due(drift.deltas, drift.deletions, rows) {
        // The change is committed whatever happens here: a failed
        // compaction is reported, not returned (run `compact` again).
        match compact(store, index, &build).await {
            Ok(c) => summary.compacted = Some(c),
            Err(e) => summary.compact_error = Some(e.to_string()),
        }
    }
    summary.drift = drift;
    summary.seconds = super::job::secs(t0.elapsed());
    Ok(summary)
}

/// The full rebuild `retrain_above` asks for: the source at the refresh's
/// target, the index's own model parameters (nlist, roots, seed,
/// iterations, codes), `build`'s for the rest.
///
/// # Errors
/// The source's and the build's.
async fn rebuild(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    spec: &SourceSpec,
    params: &RefreshParams,
    snapshot: &Snapshot,
    build: &BuildParams,
) -> Result<BuildSummary, BuildError> {
    let source = super::source::spec::open_source(
        &SourceSpec {
            snapshot: params.snapshot,
            ..spec.clone()
        },
        &params.store_options,
    )
    .await?;
    let d = &snapshot.definition;
    let rebuild = BuildParams {
        nlist: d.nlist,
        roots: Some(d.roots),
        seed: d.build.seed,
        niter: d.build.max_iterations as usize,
        codes: snapshot.quantizer.as_ref().map(|q| q.scheme()),
        ..build.clone()
    };
    super::job::build(source, store, index, &rebuild).await
}

/// What a refresh writes besides the new rows: the refreshed
/// `index.json` (its `layers` still to fill), the layers so far, the
/// deletions after this refresh, the file set, and the model the delta
/// table is written with.
struct Delta<'a> {
    definition: IndexDefinition,
    base: LayerRef,
    deltas: Vec<DeltaRef>,
    deletions: crate::format::layers::Deletions,
    source_files: Option<&'a SourceFiles>,
    source_ids: Option<&'a SourceIds>,
    quantizer: Option<&'a crate::quant::Quantizer>,
    payload: Vec<Field>,
    cid_offsets: Vec<u32>,
    /// Written as a small delta: one bucket, one file.
    small: bool,
}

/// A delta table up to this many bytes of vectors and codes is written as
/// one file in one bucket (its manifest's `cid-offsets` are `[0, nlist]`),
/// and a change that keeps the last delta this small rewrites it instead
/// of adding a layer: a cold probe then reads each small change in one
/// request per round, not one per root bucket.
pub const SMALL_DELTA_BYTES: u64 = 32 << 20;

impl<'a> Delta<'a> {
    /// What a refresh of `snapshot` (the version `commit`) that found
    /// `changes` writes: `index.json` of the current format naming the
    /// changed source, the base and deltas so far (a built snapshot becomes
    /// the base), the deletions with the removed rowids added.
    fn after(
        commit: &warehouse::Commit,
        snapshot: &Snapshot,
        changes: &'a Changes,
        quantizer: Option<&'a crate::quant::Quantizer>,
        payload: Vec<Field>,
    ) -> Self {
        let mut definition = snapshot.definition.clone();
        definition.format_version = crate::format::definition::INDEX_FORMAT_VERSION;
        definition.source = changes.source.clone();
        definition.source_files = changes
            .source_files
            .as_ref()
            .map(|_| SOURCE_FILES_FILE.to_string());
        let (base, deltas) = match &snapshot.definition.layers {
            Some(l) => (l.base.clone(), l.deltas.clone()),
            None => (
                LayerRef {
                    snapshot: commit.snapshot.clone(),
                    pins: commit.pins.clone(),
                },
                Vec::new(),
            ),
        };
        let layers_now = snapshot.layer_starts.len() as u32;
        Delta {
            definition,
            base,
            deltas,
            deletions: snapshot.deletions.with(&changes.removed, layers_now),
            source_files: changes.source_files.as_ref(),
            source_ids: changes.source_ids.as_ref(),
            quantizer,
            payload,
            cid_offsets: snapshot.hierarchy.cid_offsets.clone(),
            small: false,
        }
    }
}

/// Write a refresh's snapshot through `writer`: the rows of `spill` as a
/// delta postings table at the folder's default postings location (a
/// layer only when it has rows), the deletions, the file set, and
/// `index.json` naming every layer with its pins. Returns the layers.
///
/// # Errors
/// Writer, manifest, definition and storage errors.
async fn write_delta(
    writer: &SnapshotWriter,
    delta: Delta<'_>,
    spill: &mut BucketSpill,
    build: &BuildParams,
) -> Result<Layers, BuildError> {
    let Delta {
        mut definition,
        base,
        mut deltas,
        deletions,
        source_files,
        source_ids,
        quantizer,
        payload,
        cid_offsets,
        small,
    } = delta;
    let (store, folder) = (writer.store(), writer.folder());
    let mut plain = definition.clone();
    plain.layers = None;
    plain.source_files = None;
    let target = PostingsTarget::new(&plain, folder, quantizer, payload, build.writer.clone())?;
    let target = PostingsTarget {
        root: folder
            .child(crate::format::definition::POSTINGS_LOCATION)?
            .parent()
            .unwrap_or_default(),
        ..target
    };
    let (files, cid_offsets) = if small {
        let one_bucket = vec![0, definition.nlist];
        (
            write_one_bucket(store, &target, spill, build).await?,
            one_bucket,
        )
    } else {
        (
            write_all(store, &target, spill, build, |_| {}).await?,
            cid_offsets,
        )
    };
    let rows: u64 = files.iter().map(|f| f.rows).sum();
    let manifest = crate::postings::writer::manifest_of(files, definition.nlist, cid_offsets)?;
    crate::postings::writer::publish(store, &target.root, &manifest).await?;
    if rows > 0 {
        let mut pins = Vec::new();
        for rel in crate::format::definition::delta_documents() {
            let bytes = get(store, &folder.child(&rel)?).await?;
            pins.push(Pin::of(&rel, &bytes));
        }
        deltas.push(DeltaRef {
            snapshot: folder.name.clone(),
            rows,
            pins,
        });
    }
    let pin = writer.put(DELETIONS_FILE, deletions.encode()).await?;
    let record = source_files.map(|files| stages::FileRecord {
        files,
        ids: source_ids,
    });
    stages::put_source_files(writer, &definition, record).await?;
    let layers = Layers {
        base,
        deltas,
        deletions: DeletionsRef {
            rows: deletions.len() as u64,
            pin,
        },
    };
    definition.layers = Some(layers.clone());
    definition.validate()?;
    writer
        .put(
            crate::format::definition::INDEX_DEFINITION_FILE,
            Bytes::from(definition.to_json()),
        )
        .await?;
    Ok(layers)
}

async fn get(store: &Arc<dyn ObjectStore>, path: &Path) -> Result<Bytes, BuildError> {
    let unreadable = |e: object_store::Error| BuildError::Unreadable {
        path: path.to_string(),
        reason: e.to_string(),
    };
    store
        .get(path)
        .await
        .map_err(unreadable)?
        .bytes()
        .await
        .map_err(unreadable)
}

impl Drift {
    /// The new rows' error and imbalance, from their assignment.
    fn add_rows(&mut self, error: &AssignError) {
        if error.rows == 0 {
            return;
        }
        self.new_error = Some(error.mean());
        self.error_growth = self
            .build_error
            .filter(|&b| b > 0.0)
            .map(|b| error.mean() / b - 1.0);
        self.new_rows_imbalance = Some(imbalance(&error.lists));
    }
}

/// Assign the new rows of `source` to the existing `model` into `spill`
/// (the build's assign stage), none repeating an id of `indexed`.
///
/// # Errors
/// As [`assign_all`].
async fn assign_new(
    source: &dyn VectorSource,
    (hierarchy, quantizer): (
        &Arc<crate::kmeans::Hierarchy>,
        Option<&Arc<crate::quant::Quantizer>>,
    ),
    schema: &arrow::datatypes::SchemaRef,
    build: &BuildParams,
    spill: &mut BucketSpill,
    indexed: &std::collections::HashSet<i64>,
) -> Result<AssignError, BuildError> {
    let phase = Phase::start(build.progress, "assign", 0, "rows");
    let error = assign_all(
        source,
        Vec::new(),
        hierarchy,
        quantizer,
        schema,
        build,
        spill,
        indexed,
        &mut None,
        |n| phase.inc(n),
    )
    .await?;
    phase.finish();
    Ok(error)
}

/// `k · Σh² / (Σh)²` over the `k` lists (1: even).
fn imbalance(lists: &[u64]) -> f64 {
    let total: f64 = lists.iter().map(|&h| h as f64).sum();
    if total == 0.0 {
        return 1.0;
    }
    let squares: f64 = lists.iter().map(|&h| (h as f64) * (h as f64)).sum();
    lists.len() as f64 * squares / (total * total)
}

/// What a compaction did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CompactSummary {
    pub index: String,
    pub from_version: u64,
    /// `None`: nothing to compact (no delta, no deletion).
    pub version: Option<u64>,
    pub snapshot: Option<String>,
    /// Live rows written to the new base.
    pub rows: u64,
    /// Delta tables and deletions folded in.
    pub deltas: usize,
    pub deletions: u64,
    pub seconds: f64,
}

/// Every live row of a snapshot, postings file by file (base, then each
/// delta), deleted rows left out: the input of `compact`. Files are read
/// through the one postings reader ([`PostingsReader::read_file`]), so every footer is
/// checked against its pin, every page against its CRC32 and every row's
/// cid against its row group: a corrupt table fails compaction with the
/// object, row group and page named, instead of becoming a new base.
struct LiveSource {
    reader: Arc<PostingsReader>,
    /// The postings files read, by part (all of them for a compaction, the
    /// last layer's when a small delta is merged).
    files: Vec<usize>,
    rows: Vec<u64>,
    /// The snapshot has codes: they are read too, to check their pages.
    has_codes: bool,
    payload: Vec<FieldRef>,
    definition: SourceDefinition,
    /// The deletions applied (the snapshot's, or a change's on top of them).
    deletions: Arc<crate::format::layers::Deletions>,
}

impl LiveSource {
    /// Assign every row to `model`'s lists into `spill` ([`assign_new`];
    /// the rows are live ids already, so none is checked against the index).
    ///
    /// # Errors
    /// As [`assign_all`].
    async fn assign(
        &self,
        model: (
            &Arc<crate::kmeans::Hierarchy>,
            Option<&Arc<crate::quant::Quantizer>>,
        ),
        schema: &arrow::datatypes::SchemaRef,
        build: &BuildParams,
        spill: &mut BucketSpill,
    ) -> Result<AssignError, BuildError> {
        let none = std::collections::HashSet::new();
        assign_new(self, model, schema, build, spill, &none).await
    }

    /// The live rows of `files` of `snapshot`, without `deletions`.
    fn new(
        store: &Arc<dyn ObjectStore>,
        snapshot: &Snapshot,
        payload: Vec<FieldRef>,
        files: Vec<usize>,
        deletions: Arc<crate::format::layers::Deletions>,
    ) -> Self {
        let b = &snapshot.definition.build;
        LiveSource {
            rows: files.iter().map(|&f| snapshot.files[f].rows).collect(),
            files,
            has_codes: snapshot.quantizer.is_some(),
            reader: Arc::new(PostingsReader::new(
                store.clone(),
                snapshot,
                IndexOptions::default(),
            )),
            payload,
            definition: SourceDefinition {
                source: snapshot.definition.source.clone(),
                vector_column: b.vector_column.clone(),
                id_column: b.id_column.clone(),
                payload_columns: b.payload_columns.clone(),
                skip_invalid: b.skip_invalid,
            },
            deletions,
        }
    }
}

#[async_trait]
impl VectorSource for LiveSource {
    fn dim(&self) -> usize {
        self.reader.dim()
    }

    fn parts(&self) -> usize {
        self.rows.len()
    }

    async fn part_rows(&self, part: usize) -> Result<u64, BuildError> {
        Ok(self.rows.get(part).copied().unwrap_or(0))
    }

    async fn read_part(&self, part: usize) -> Result<VectorBatch, BuildError> {
        let want = Want {
            vectors: true,
            // Read to check their pages: compaction encodes new codes.
            codes: self.has_codes,
            payload: true,
            ..Want::default()
        };
        let file = self.files[part];
        let groups = self.reader.read_file(file, want).await?;
        let layer = self.reader.live().layer_of(file);
        let (deletions, payload, name) = (
            Arc::clone(&self.deletions),
            self.payload.clone(),
            self.part_name(part),
        );
        blocking(move || live_rows(&name, groups, &payload, layer, &deletions)).await
    }

    fn payload_fields(&self) -> Vec<FieldRef> {
        self.payload.clone()
    }

    fn definition(&self) -> SourceDefinition {
        self.definition.clone()
    }

    fn part_name(&self, part: usize) -> String {
        self.files
            .get(part)
            .and_then(|&f| self.reader.paths().get(f))
            .map_or_else(String::new, ToString::to_string)
    }
}

/// The live rows of one postings file's row groups (in row-group order), as
/// the build reads a source: rowid, vector, payload.
fn live_rows(
    path: &str,
    mut groups: Vec<Arc<DecodedRowGroup>>,
    payload: &[FieldRef],
    layer: u32,
    deletions: &crate::format::layers::Deletions,
) -> Result<VectorBatch, BuildError> {
    let bad = |e: String| BuildError::Unreadable {
        path: path.to_string(),
        reason: e,
    };
    groups.sort_by_key(|g| g.row_group);
    let mut out = VectorBatch {
        rowids: Vec::new(),
        vectors: Vec::new(),
        payload: None,
    };
    let schema = Arc::new(arrow::datatypes::Schema::new(payload.to_vec()));
    let mut payloads: Vec<RecordBatch> = Vec::new();
    for g in &groups {
        let dim = g.vectors.len() / g.rowids.len().max(1);
        let keep: Vec<u32> = (0..g.rowids.len())
            .filter(|&i| !deletions.is_deleted(g.rowids[i], layer))
            .map(|i| i as u32)
            .collect();
        for &i in &keep {
            let i = i as usize;
            out.rowids.push(g.rowids[i]);
            out.vectors
                .extend_from_slice(&g.vectors[i * dim..(i + 1) * dim]);
        }
        if !payload.is_empty() {
            let all = g
                .payload
                .as_ref()
                .ok_or_else(|| bad(format!("row group {} has no payload columns", g.row_group)))?;
            let columns = payload
                .iter()
                .map(|f| {
                    all.column_by_name(f.name())
                        .cloned()
                        .ok_or_else(|| bad(format!("no {} column", f.name())))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let all =
                RecordBatch::try_new(schema.clone(), columns).map_err(|e| bad(e.to_string()))?;
            payloads.push(
                arrow::compute::take_record_batch(&all, &arrow::array::UInt32Array::from(keep))
                    .map_err(|e| bad(e.to_string()))?,
            );
        }
    }
    if !payload.is_empty() {
        out.payload = Some(
            arrow::compute::concat_batches(&schema, &payloads).map_err(|e| bad(e.to_string()))?,
        );
    }
    Ok(out)
}

/// Merge every delta table and the deletions of the index at `index` into a
/// new base with the same centroids (and quantiser), published as the next
/// version: the build's assign and write stages over the live rows, so the
/// postings are the bytes a fresh build given those centroids writes.
///
/// # Errors
/// As [`refresh`]: storage errors, corrupt postings, and
/// [`crate::format::warehouse::WarehouseError::Conflict`].
pub async fn compact(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    build: &BuildParams,
) -> Result<CompactSummary, BuildError> {
    let t0 = Instant::now();
    let (commit, snapshot) = current(&store, index).await?;
    let mut summary = CompactSummary {
        index: index.to_string(),
        from_version: commit.version,
        version: None,
        snapshot: None,
        rows: 0,
        deltas: snapshot.layer_starts.len() - 1,
        deletions: snapshot.deletions.len() as u64,
        seconds: 0.0,
    };
    if snapshot.definition.layers.is_none() {
        summary.seconds = super::job::secs(t0.elapsed());
        return Ok(summary);
    }
    let payload = payload_fields(&store, &snapshot).await?;
    let b = snapshot.definition.build.clone();
    let hierarchy = Arc::new(snapshot.hierarchy.clone());
    let quantizer = snapshot.quantizer.clone().map(Arc::new);
    let payload_plain: Vec<Field> = payload.iter().map(|f| f.as_ref().clone()).collect();
    let code_bytes = quantizer
        .as_deref()
        .map(crate::quant::Quantizer::code_bytes);
    let dim = snapshot.definition.dim as usize;
    let schema = postings_schema(dim, code_bytes, &payload_plain);
    let build = BuildParams {
        metric: snapshot.definition.metric,
        sort_by: b.sort_by.clone(),
        ..build.clone()
    };
    let mut definition = snapshot.definition.clone();
    definition.layers = None;
    definition.format_version = crate::format::definition::INDEX_FORMAT_VERSION;
    // The source file set (and ids) of the current snapshot carries over unchanged.
    let recorded = recorded_files(&store, &snapshot).await?;
    let source = LiveSource::new(
        &store,
        &snapshot,
        payload.clone(),
        (0..snapshot.files.len()).collect(),
        Arc::clone(&snapshot.deletions),
    );
    let mut spill = BucketSpill::new(schema.clone(), hierarchy.nroots(), build.memory_limit / 2)?;
    let model = (&hierarchy, quantizer.as_ref());
    let error = source.assign(model, &schema, &build, &mut spill).await?;
    let writer = SnapshotWriter::begin(store.clone(), index, Publisher::Compact)?;
    let target = PostingsTarget::new(
        &definition,
        writer.folder(),
        quantizer.as_deref(),
        payload_plain,
        build.writer.clone(),
    )?;
    let written = async {
        let files = write_all(&store, &target, &mut spill, &build, |_| {}).await?;
        // The centroids are the compacted snapshot's: so is its calibration.
        let model = stages::Model {
            hierarchy: &hierarchy,
            quantizer: quantizer.as_deref(),
            calibration: snapshot.calibration.as_ref(),
            neighbours: None,
        };
        let record = recorded.as_ref().map(|(files, ids)| stages::FileRecord {
            files,
            ids: ids.as_ref(),
        });
        stages::publish(&writer, files, model, &definition, record)
            .await
            .map(|_| ())
    }
    .await;
    let folder = writer.folder().path.to_string();
    let ((), committed) = writer.publish(Some(commit.version), written).await?;
    summary.rows = error.rows;
    summary.version = Some(committed.version);
    summary.snapshot = Some(folder);
    summary.seconds = super::job::secs(t0.elapsed());
    Ok(summary)
}
