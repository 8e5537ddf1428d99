//! Deletes and upserts by id, without a source change: `parqivf delete`,
//! `parqivf upsert`, `POST /v1/indexes/{name}/delete|upsert`, Python's
//! `parqivf.delete`/`upsert`, and [`crate::index::Index::delete`]/`upsert`.
//!
//! Each is a set of changes published by refresh's one path
//! (`refresh::apply`): a delete adds the live ids it names to the
//! deletion object; an upsert writes its rows as a delta table and deletes
//! the live rows of the same ids before it, so the newest version wins.
//! Both publish the next version create-if-absent: in a race exactly one
//! wins, and the loser is a [`crate::format::warehouse::WarehouseError::Conflict`]
//! that deleted nothing a version names.
//!
//! With an id column, `source-ids.parquet` records which source file owns
//! each id; deleted and upserted ids are taken from their files, so a later
//! refresh that drops a file does not delete an upsert's newer row. An
//! upsert needs ids of the table's own: it is refused for an index whose
//! rowids are file positions (a refresh numbers new rows itself) or row
//! lineage (a DuckLake table: write to the table and refresh).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::RecordBatch;
use object_store::ObjectStore;
use object_store::path::Path;

use super::error::BuildError;
use super::refresh::{
    Apply, Changes, CompactPolicy, RefreshSummary, apply, current, live_ids, payload_fields,
    recorded_files,
};
use super::source::vector_source::{ArraySource, VectorSource};
use super::stages::BuildParams;
use crate::filter::Filter;
use crate::format::definition::IndexSource;
use crate::format::snapshot::Snapshot;
use crate::format::warehouse::Publisher;
use crate::probe::load::{IndexOptions, PostingsReader};
use crate::probe::rows::Want;

/// Rows to write by id: `ids.len()` vectors, row-major, and optionally the
/// payload columns of the index, one row per id (without them, every
/// payload column of the new rows is NULL).
#[derive(Debug, Clone)]
pub struct UpsertRows {
    pub ids: Vec<i64>,
    pub vectors: Vec<f32>,
    pub payload: Option<RecordBatch>,
}

impl UpsertRows {
    /// Every row of `source` (a Parquet file of the index's columns, for
    /// `parqivf upsert --from`), its ids from its id column.
    ///
    /// # Errors
    /// The source's errors; [`BuildError::BadParameter`] when it has no id
    /// column.
    pub async fn read(source: &dyn VectorSource) -> Result<UpsertRows, BuildError> {
        if !source.ids_may_repeat() {
            return Err(BuildError::BadParameter {
                name: "from",
                reason: "the rows need an id column".into(),
            });
        }
        let mut rows = UpsertRows {
            ids: Vec::new(),
            vectors: Vec::new(),
            payload: None,
        };
        let mut payloads = Vec::new();
        for part in 0..source.parts() {
            let batch = source.read_part(part).await?;
            rows.ids.extend(batch.rowids);
            rows.vectors.extend(batch.vectors);
            payloads.extend(batch.payload);
        }
        let fields = source.payload_fields();
        if !fields.is_empty() {
            let schema = Arc::new(arrow::datatypes::Schema::new(fields));
            rows.payload = Some(
                arrow::compute::concat_batches(&schema, &payloads)
                    .map_err(|e| BuildError::Arrow(e.to_string()))?,
            );
        }
        Ok(rows)
    }
}

/// Delete the live rows with these ids from the index at `index`, as the
/// next version (ids that match no live row are counted in
/// [`RefreshSummary::ids_not_found`]; when none matches, nothing is
/// published). `compact` as for refresh.
///
/// # Errors
/// No snapshot, unreadable postings, storage errors, and
/// [`crate::format::warehouse::WarehouseError::Conflict`] when another
/// publisher committed first.
pub async fn delete(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    ids: &[i64],
    build: &BuildParams,
    compact: CompactPolicy,
) -> Result<RefreshSummary, BuildError> {
    let current = current(&store, index).await?;
    delete_in(store, index, current, ids, build, compact).await
}

/// [`delete`] of `ids` from the version `commit` of `index`, opened.
async fn delete_in(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    (commit, snapshot): (crate::format::warehouse::Commit, Snapshot),
    ids: &[i64],
    build: &BuildParams,
    compact: CompactPolicy,
) -> Result<RefreshSummary, BuildError> {
    let live = live_ids(&store, &snapshot, &[]).await?;
    let (removed, missing) = split_live(ids, &live);
    let changes = unchanged_source(&store, &snapshot, removed, missing, None).await?;
    let how = Apply {
        build,
        publisher: Publisher::Delete,
        retrain: None,
        compact,
    };
    apply(store, index, (commit, snapshot), changes, how).await
}

/// Delete the live rows whose payload matches the SQL filter `filter`
/// (the query filter's grammar, over the index's payload columns).
///
/// # Errors
/// [`BuildError::BadParameter`] for a filter that does not parse or names
/// no payload column; as [`delete`].
pub async fn delete_where(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    filter: &str,
    build: &BuildParams,
    compact: CompactPolicy,
) -> Result<RefreshSummary, BuildError> {
    let current = current(&store, index).await?;
    let ids = matching_ids(&store, &current.1, filter).await?;
    delete_in(store, index, current, &ids, build, compact).await
}

/// Write `rows` to the index at `index` as the next version: each id's
/// live row (if any) is deleted and the new one added, in one delta table.
///
/// # Errors
/// [`BuildError::Mutation`] for an index whose rowids are not ids of the
/// table's own; [`BuildError::BadParameter`] for a wrong dimension, row
/// count or payload columns; [`BuildError::DuplicateId`] for an id given
/// twice; non-finite values; as [`delete`].
pub async fn upsert(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    rows: UpsertRows,
    build: &BuildParams,
    compact: CompactPolicy,
) -> Result<RefreshSummary, BuildError> {
    let (commit, snapshot) = current(&store, index).await?;
    check_upsert(index, &snapshot)?;
    let dim = snapshot.definition.dim as usize;
    if rows.vectors.len() != rows.ids.len() * dim {
        return Err(BuildError::BadParameter {
            name: "vectors",
            reason: format!(
                "{} values for {} ids of dimension {dim} (expected {})",
                rows.vectors.len(),
                rows.ids.len(),
                rows.ids.len() * dim
            ),
        });
    }
    let payload = payload_fields(&store, &snapshot).await?;
    let mut rows = rows;
    if rows.payload.is_none() && !payload.is_empty() {
        // No payload given: the rows carry NULL in every payload column.
        let schema = Arc::new(arrow::datatypes::Schema::new(payload.clone()));
        let columns = payload
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), rows.ids.len()))
            .collect();
        rows.payload = Some(
            RecordBatch::try_new(schema, columns).map_err(|e| BuildError::Arrow(e.to_string()))?,
        );
    }
    let given: Vec<String> = rows.payload.as_ref().map_or_else(Vec::new, |p| {
        p.schema()
            .fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect()
    });
    let expected: Vec<String> = payload
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    if given != expected {
        return Err(BuildError::BadParameter {
            name: "payload",
            reason: format!(
                "the index's payload columns are [{}], the upsert gives [{}]",
                expected.join(", "),
                given.join(", ")
            ),
        });
    }
    let live = live_ids(&store, &snapshot, &[]).await?;
    let (removed, missing) = split_live(&rows.ids, &live);
    let taken = rows.ids.clone();
    let source = ArraySource::new(rows.vectors, dim, format!("upsert into {index}"))?
        .with_ids(rows.ids, rows.payload)?;
    let mut changes = unchanged_source(&store, &snapshot, removed, missing, Some(&taken)).await?;
    changes.added = Some(Arc::new(source));
    changes.replaces = true;
    let how = Apply {
        build,
        publisher: Publisher::Upsert,
        retrain: None,
        compact,
    };
    apply(store, index, (commit, snapshot), changes, how).await
}

/// The payload columns of the current version of the index at `index`:
/// what [`UpsertRows::payload`] must hold.
///
/// # Errors
/// No snapshot, unreadable documents or footers.
pub async fn payload_schema(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<arrow::datatypes::SchemaRef, BuildError> {
    let (_, snapshot) = current(store, index).await?;
    let fields = payload_fields(store, &snapshot).await?;
    Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
}

/// An upsert needs the table's own ids.
fn check_upsert(index: &Path, snapshot: &Snapshot) -> Result<(), BuildError> {
    let refuse = |reason: &str| BuildError::Mutation {
        index: index.to_string(),
        operation: "upsert",
        reason: reason.to_string(),
    };
    match &snapshot.definition.source {
        IndexSource::VectorFile { .. } => Ok(()),
        IndexSource::Parquet { .. } if snapshot.definition.build.id_column.is_some() => Ok(()),
        IndexSource::Parquet { .. } => Err(refuse(
            "its rowids are positions in the source files, which a refresh numbers \
             itself; build it with --id-column to upsert by id",
        )),
        IndexSource::Ducklake { .. } => Err(refuse(
            "its rowids are the DuckLake table's row lineage: write the rows to the \
             table and run refresh",
        )),
    }
}

/// `ids` (deduplicated) split into those live in the index (to delete)
/// and the count of the others.
fn split_live(ids: &[i64], live: &HashSet<i64>) -> (Vec<i64>, u64) {
    let mut wanted = ids.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let (removed, missing): (Vec<i64>, Vec<i64>) =
        wanted.into_iter().partition(|id| live.contains(id));
    (removed, missing.len() as u64)
}

/// The changes of a delete or upsert: `removed` deleted, the source and its
/// file set as they are, and the ids in `removed` (and `taken`, an
/// upsert's) no longer owned by their source files.
async fn unchanged_source(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
    removed: Vec<i64>,
    ids_not_found: u64,
    taken: Option<&[i64]>,
) -> Result<Changes, BuildError> {
    let (source_files, source_ids) = match recorded_files(store, snapshot).await? {
        Some((files, ids)) => {
            let ids = ids.map(|mut ids| {
                ids.disown(&removed);
                if let Some(taken) = taken {
                    ids.disown(taken);
                }
                ids
            });
            (Some(files), ids)
        }
        None => (None, None),
    };
    let state = match &source_files {
        Some(f) => format!("{} files", f.files.len()),
        None => "unchanged".to_string(),
    };
    Ok(Changes {
        added: None,
        empty_files: 0,
        removed,
        replaces: false,
        ids_not_found,
        source: snapshot.definition.source.clone(),
        source_files,
        source_ids,
        before: state.clone(),
        after: state,
    })
}

/// The live rowids of `snapshot` whose payload matches `filter`: every
/// postings file's rowid and payload columns, read through the one
/// postings reader.
async fn matching_ids(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Snapshot,
    filter: &str,
) -> Result<Vec<i64>, BuildError> {
    let payload = payload_fields(store, snapshot).await?;
    let schema = arrow::datatypes::Schema::new(payload);
    let filter = Filter::parse(filter, &schema).map_err(|e| BuildError::BadParameter {
        name: "where",
        reason: e.to_string(),
    })?;
    let reader = PostingsReader::new(store.clone(), snapshot, IndexOptions::default());
    let want = Want {
        payload: true,
        ..Want::default()
    };
    let mut ids = Vec::new();
    for file in 0..reader.paths().len() {
        let groups = reader.read_file(file, want).await?;
        let (filter, live) = (filter.clone(), reader.live().clone());
        let matched = super::offload::blocking(move || {
            let mut out = Vec::new();
            for g in &groups {
                let Some(batch) = &g.payload else { continue };
                let hits = filter
                    .evaluate(batch)
                    .map_err(|e| BuildError::BadParameter {
                        name: "where",
                        reason: e.to_string(),
                    })?;
                let hits = live.and(g, hits);
                out.extend(hits.set_indices().map(|i| g.rowids[i]));
            }
            Ok(out)
        })
        .await?;
        ids.extend(matched);
    }
    Ok(ids)
}

/// The index location of a snapshot opened through its commit log (the
/// folder `snapshots/<id>` removed), for the methods below.
fn index_location(index: &crate::index::Index) -> Result<Path, BuildError> {
    let commit = index.commit().ok_or_else(|| BuildError::Mutation {
        index: index.folder().to_string(),
        operation: "change",
        reason: "it was opened as a bare snapshot folder, not through its commit log: \
                 open the index location"
            .into(),
    })?;
    let folder = index.folder().as_ref();
    let root = folder
        .strip_suffix(commit.snapshot.as_str())
        .map(|r| r.trim_end_matches('/'))
        .unwrap_or_default();
    Ok(Path::from(root))
}

impl crate::index::Index {
    /// [`delete`] on the index this snapshot belongs to: the next version
    /// after its *current* one (reopen to search it).
    ///
    /// # Errors
    /// As [`delete`]; [`BuildError::Mutation`] for a bare snapshot folder.
    pub async fn delete(
        &self,
        ids: &[i64],
        build: &BuildParams,
    ) -> Result<RefreshSummary, BuildError> {
        let store = self.reader().store().clone();
        delete(
            store,
            &index_location(self)?,
            ids,
            build,
            CompactPolicy::default(),
        )
        .await
    }

    /// [`upsert`] on the index this snapshot belongs to (see [`Self::delete`]).
    ///
    /// # Errors
    /// As [`upsert`].
    pub async fn upsert(
        &self,
        rows: UpsertRows,
        build: &BuildParams,
    ) -> Result<RefreshSummary, BuildError> {
        let store = self.reader().store().clone();
        upsert(
            store,
            &index_location(self)?,
            rows,
            build,
            CompactPolicy::default(),
        )
        .await
    }
}
