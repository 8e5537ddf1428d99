//! Reading one live file: its footer through the object store, its columns
//! through the column-mapping model, its lineage columns, and its delete
//! file's positions; rows beyond the snapshot's `partial_file_info` count and
//! deleted rows are dropped after lineage is computed. A request may also keep
//! only the row versions written after a snapshot (`snapshot_id > after`, for
//! changes between snapshots); the row's snapshot id is then read from the
//! file (embedded) or taken from its catalog entry, whether asked for or not.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use futures::TryStreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use url::Url;

use super::error::DuckLakeError;
use super::files::LiveFile;
use super::table::DuckLakeTable;
use crate::catalog::lineage::{self, LineageColumn, MissingRowId};
use crate::catalog::mapping::{ColumnMapping, ResolvedColumns};
use crate::catalog::paths;
use crate::store::parquet_reader::StoreReader;
use crate::store::uri::hive_partitions;

/// One requested output column.
#[derive(Debug, Clone)]
enum Wanted {
    Table(FieldRef),
    Lineage(LineageColumn),
}

/// The columns a scan produces, resolved once against the table.
#[derive(Debug)]
pub(super) struct Request {
    wanted: Vec<Wanted>,
    logical: Vec<FieldRef>,
    schema: SchemaRef,
    missing: MissingRowId,
    /// Keep only rows with `snapshot_id > after`.
    after: Option<i64>,
}

impl Request {
    pub(super) fn new(
        table: &DuckLakeTable,
        columns: &[&str],
        missing: MissingRowId,
    ) -> Result<Self, DuckLakeError> {
        let names = table.columns.names();
        let mut wanted = Vec::with_capacity(columns.len());
        for &name in columns {
            wanted.push(match LineageColumn::from_name(name) {
                Some(l) if !names.contains(&name) => Wanted::Lineage(l),
                _ => Wanted::Table(table.columns.field(name)?),
            });
        }
        let logical = wanted
            .iter()
            .filter_map(|w| match w {
                Wanted::Table(f) => Some(f.clone()),
                Wanted::Lineage(_) => None,
            })
            .collect();
        let fields: Vec<FieldRef> = wanted
            .iter()
            .map(|w| match w {
                Wanted::Table(f) => f.clone(),
                Wanted::Lineage(l) => Arc::new(Field::new(l.name(), l.data_type(), true)),
            })
            .collect();
        Ok(Self {
            wanted,
            logical,
            schema: Arc::new(Schema::new(fields)),
            missing,
            after: None,
        })
    }

    /// Keep only the row versions written after snapshot `after`
    /// (`snapshot_id > after`).
    pub(super) fn after(mut self, after: i64) -> Self {
        self.after = Some(after);
        self
    }
}

impl DuckLakeTable {
    /// Reads `columns` of every live row: table columns in their logical Arrow
    /// types (a `FLOAT[]` embedding is `List<Float32>`) and lineage columns
    /// (`rowid`, `snapshot_id`, `file_index`, `filename`, `file_row_number`),
    /// in the order asked, deleted rows excluded. A table column shadows a
    /// lineage column of the same name. `rowid` is NULL where a file has none.
    ///
    /// # Errors
    /// [`DuckLakeError::UnknownColumn`], IO, Parquet, mapping and lineage errors.
    pub async fn scan(
        &self,
        columns: &[&str],
    ) -> Result<Vec<arrow::array::RecordBatch>, DuckLakeError> {
        self.scan_with(columns, MissingRowId::Null).await
    }

    /// [`Self::scan`] with a policy for files without rowids
    /// ([`MissingRowId::Error`] for an index build).
    ///
    /// # Errors
    /// As [`Self::scan`], plus
    /// [`LineageError::MissingRowIdStart`](crate::catalog::lineage::LineageError::MissingRowIdStart).
    pub async fn scan_with(
        &self,
        columns: &[&str],
        missing: MissingRowId,
    ) -> Result<Vec<arrow::array::RecordBatch>, DuckLakeError> {
        let request = Request::new(self, columns, missing)?;
        let mut out = Vec::new();
        for file in &self.files {
            out.extend(read_file(self, &request, file).await?);
        }
        Ok(out)
    }

    /// The data file at `file_index`, or [`DuckLakeError::NoSuchFile`].
    fn file(&self, file_index: usize) -> Result<&LiveFile, DuckLakeError> {
        self.files.get(file_index).ok_or(DuckLakeError::NoSuchFile {
            file: file_index,
            files: self.files.len(),
        })
    }

    /// How many rows file `file_index` yields at the snapshot (deletes and
    /// `partial_file_info` applied), from catalog metadata and the delete
    /// file; the data file's pages are not read.
    ///
    /// # Errors
    /// [`DuckLakeError::NoSuchFile`], an unreadable footer or delete file.
    pub async fn live_rows(&self, file_index: usize) -> Result<u64, DuckLakeError> {
        let file = self.file(file_index)?;
        live_rows(self, file).await
    }

    /// [`Self::scan_with`] restricted to the file at `file_index` (for builds
    /// that work per source file).
    ///
    /// # Errors
    /// As [`Self::scan_with`], plus [`DuckLakeError::NoSuchFile`].
    pub async fn scan_file(
        &self,
        file_index: usize,
        columns: &[&str],
        missing: MissingRowId,
    ) -> Result<Vec<arrow::array::RecordBatch>, DuckLakeError> {
        let file = self.file(file_index)?;
        let request = Request::new(self, columns, missing)?;
        read_file(self, &request, file).await
    }

    /// [`Self::scan_file`] keeping only the row versions written after
    /// snapshot `since` (`snapshot_id > since`): the new rows of a file that
    /// [`Self::changes_since`] lists. A file whose rows all carry its own
    /// `begin_snapshot <= since` is not read past its footer.
    ///
    /// # Errors
    /// As [`Self::scan_file`].
    pub async fn scan_file_since(
        &self,
        file_index: usize,
        columns: &[&str],
        missing: MissingRowId,
        since: i64,
    ) -> Result<Vec<arrow::array::RecordBatch>, DuckLakeError> {
        let file = self.file(file_index)?;
        let request = Request::new(self, columns, missing)?.after(since);
        read_file(self, &request, file).await
    }
}

fn store_error(location: &Url) -> impl Fn(parquet::errors::ParquetError) -> DuckLakeError + '_ {
    move |source| DuckLakeError::Parquet {
        path: paths::display(location),
        source,
    }
}

async fn open_builder(
    table: &DuckLakeTable,
    location: &Url,
    size: Option<u64>,
) -> Result<ParquetRecordBatchStreamBuilder<StoreReader>, DuckLakeError> {
    let reader = StoreReader::new(table.store.clone(), paths::object_path(location)?, size);
    ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(store_error(location))
}

/// The deleted positions listed by a delete file (`pos`, field id 2147483645).
async fn deleted_positions(
    table: &DuckLakeTable,
    file: &LiveFile,
    rows: u64,
) -> Result<HashSet<u64>, DuckLakeError> {
    let Some(delete) = &file.delete else {
        return Ok(HashSet::new());
    };
    let name = paths::display(&delete.location);
    let builder = open_builder(table, &delete.location, delete.size).await?;
    let index = builder
        .schema()
        .fields()
        .iter()
        .position(|f| f.name() == "pos" && f.data_type() == &DataType::Int64)
        .ok_or_else(|| DuckLakeError::DeleteFileSchema {
            delete_file: name.clone(),
        })?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [index]);
    let batches: Vec<RecordBatch> = builder
        .with_projection(mask)
        .build()
        .map_err(store_error(&delete.location))?
        .try_collect()
        .await
        .map_err(store_error(&delete.location))?;
    let mut positions = HashSet::new();
    for batch in &batches {
        let column = batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>();
        for pos in column.iter().flatten() {
            match u64::try_from(pos) {
                Ok(p) if p < rows => {
                    positions.insert(p);
                }
                _ => {
                    return Err(DuckLakeError::DeletePosition {
                        delete_file: name,
                        file: file.lineage.filename.clone(),
                        pos,
                        rows,
                    });
                }
            }
        }
    }
    Ok(positions)
}

/// How many rows of `file` are live at the snapshot, without reading its
/// data pages: the visible rows (`partial_file_info`, else all of the
/// catalog's `record_count`, else the footer's row count) minus the deleted
/// positions among them (from the small delete file).
pub(super) async fn live_rows(
    table: &DuckLakeTable,
    file: &LiveFile,
) -> Result<u64, DuckLakeError> {
    if file.visible_rows == Some(0) {
        return Ok(0);
    }
    let rows = match file.record_count {
        Some(rows) => rows,
        None => {
            let builder = open_builder(table, &file.location, file.size).await?;
            u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0)
        }
    };
    let visible = file.visible_rows.unwrap_or(rows).min(rows);
    let deleted = deleted_positions(table, file, rows).await?;
    Ok(visible - deleted.iter().filter(|&&p| p < visible).count() as u64)
}

/// Reads the live rows of `file`.
pub(super) async fn read_file(
    table: &DuckLakeTable,
    request: &Request,
    file: &LiveFile,
) -> Result<Vec<RecordBatch>, DuckLakeError> {
    let name = &file.lineage.filename;
    if file.visible_rows == Some(0) {
        return Ok(Vec::new());
    }
    let builder = open_builder(table, &file.location, file.size).await?;
    let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    if let Some(expected) = file.record_count.filter(|&n| n != rows) {
        return Err(DuckLakeError::RowCountMismatch {
            file: name.clone(),
            expected,
            actual: rows,
        });
    }
    let physical = builder.schema().clone();
    let mapping = match file.mapping_id {
        Some(mapping_id) => table
            .mappings
            .get(table.table_id, mapping_id)
            .cloned()
            .ok_or_else(|| DuckLakeError::UnknownMapping {
                file: name.clone(),
                table_id: table.table_id,
                mapping_id,
            })?,
        None => Arc::new(ColumnMapping::from_field_ids(&physical)),
    };
    let resolved = mapping.resolve(
        &request.logical,
        &physical,
        name,
        &hive_partitions(&paths::object_path(&file.location)?),
    )?;
    let embedded: Vec<(LineageColumn, usize)> = request
        .wanted
        .iter()
        .filter_map(|w| match w {
            Wanted::Lineage(l) => lineage::embedded_root(&physical, *l).map(|i| (*l, i)),
            Wanted::Table(_) => None,
        })
        .collect();
    // The row's snapshot id, when the request keeps only newer row versions.
    let snapshot_root = request
        .after
        .and_then(|_| lineage::embedded_root(&physical, LineageColumn::SnapshotId));
    if let Some(after) = request.after
        && snapshot_root.is_none()
        && file.lineage.begin_snapshot <= after
    {
        // Every row of the file has the file's snapshot: none is newer.
        return Ok(Vec::new());
    }
    let mut roots: Vec<usize> = resolved.physical_roots().to_vec();
    roots.extend(embedded.iter().map(|(_, i)| *i));
    roots.extend(snapshot_root);
    roots.sort_unstable();
    roots.dedup();
    let slot = |i: usize| roots.partition_point(|&r| r < i);
    let mapped_slots: Vec<usize> = resolved.physical_roots().iter().map(|&i| slot(i)).collect();

    let deleted = deleted_positions(table, file, rows).await?;
    let visible = file.visible_rows.unwrap_or(rows);
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
    let mut stream = builder
        .with_projection(mask)
        .build()
        .map_err(store_error(&file.location))?;
    let scan = FileScan {
        request,
        file,
        resolved: &resolved,
        embedded: &embedded,
        roots: &roots,
        mapped_slots: &mapped_slots,
        snapshot_root,
        visible,
        deleted: &deleted,
    };
    let mut out = Vec::new();
    let mut first_row = 0u64;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(store_error(&file.location))?
    {
        let len = batch.num_rows();
        let batch = scan.live_rows(&batch, first_row)?;
        first_row += len as u64;
        if batch.num_rows() > 0 {
            out.push(batch);
        }
    }
    if first_row != rows {
        return Err(DuckLakeError::RowCountMismatch {
            file: name.clone(),
            expected: rows,
            actual: first_row,
        });
    }
    Ok(out)
}

/// What the batches of one file need to become the request's rows.
struct FileScan<'a> {
    request: &'a Request,
    file: &'a LiveFile,
    resolved: &'a ResolvedColumns,
    /// The lineage columns the file embeds, with their root.
    embedded: &'a [(LineageColumn, usize)],
    /// The physical roots read, ascending (a batch's columns, in order).
    roots: &'a [usize],
    /// Where each mapped table column lies in a batch.
    mapped_slots: &'a [usize],
    /// The root of the embedded row snapshot ids, when the request keeps
    /// only newer row versions and the file has them.
    snapshot_root: Option<usize>,
    /// Rows of the file the snapshot sees.
    visible: u64,
    /// Deleted row positions.
    deleted: &'a HashSet<u64>,
}

impl FileScan<'_> {
    /// The batch's slot of physical root `i`.
    fn slot(&self, i: usize) -> usize {
        self.roots.partition_point(|&r| r < i)
    }

    fn arrow_error(&self, source: arrow::error::ArrowError) -> DuckLakeError {
        DuckLakeError::Arrow {
            path: self.file.lineage.filename.clone(),
            source,
        }
    }

    /// The rows of `batch` (the file's rows from `first_row` on) that are
    /// visible, not deleted and, when asked, newer than the request's
    /// snapshot, as the request's columns: table columns assembled through
    /// the mapping, lineage columns read or materialised.
    fn live_rows(&self, batch: &RecordBatch, first_row: u64) -> Result<RecordBatch, DuckLakeError> {
        let (request, file, len) = (self.request, self.file, batch.num_rows());
        let projected = batch
            .project(self.mapped_slots)
            .map_err(|e| self.arrow_error(e))?;
        let mut logical = self.resolved.assemble(&projected)?.into_iter();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(request.wanted.len());
        for w in &request.wanted {
            columns.push(match w {
                Wanted::Table(f) => logical.next().ok_or_else(|| {
                    self.arrow_error(arrow::error::ArrowError::SchemaError(format!(
                        "column {} not assembled",
                        f.name()
                    )))
                })?,
                Wanted::Lineage(l) => {
                    let embedded = self
                        .embedded
                        .iter()
                        .find(|(c, _)| c == l)
                        .map(|(_, i)| batch.column(self.slot(*i)));
                    let missing = request.missing;
                    lineage::materialize(*l, &file.lineage, embedded, first_row, len, missing)?
                }
            });
        }
        let newer = match request.after {
            Some(after) => {
                let ids = lineage::materialize(
                    LineageColumn::SnapshotId,
                    &file.lineage,
                    self.snapshot_root.map(|i| batch.column(self.slot(i))),
                    first_row,
                    len,
                    request.missing,
                )?;
                let ids = ids.as_primitive::<arrow::datatypes::Int64Type>();
                Some(
                    (0..len)
                        .map(|i| ids.is_valid(i) && ids.value(i) > after)
                        .collect::<Vec<_>>(),
                )
            }
            None => None,
        };
        let keep: BooleanArray = (first_row..first_row + len as u64)
            .enumerate()
            .map(|(i, r)| {
                let live = r < self.visible && !self.deleted.contains(&r);
                Some(live && newer.as_ref().is_none_or(|n| n[i]))
            })
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(len));
        let batch = RecordBatch::try_new_with_options(request.schema.clone(), columns, &options)
            .map_err(|e| self.arrow_error(e))?;
        filter_record_batch(&batch, &keep).map_err(|e| self.arrow_error(e))
    }
}
