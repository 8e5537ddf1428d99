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

use super::{DuckLakeError, DuckLakeTable, LiveFile};
use crate::catalog::lineage::{self, LineageColumn, MissingRowId};
use crate::catalog::mapping::ColumnMapping;
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
    let arrow_error = |source| DuckLakeError::Arrow {
        path: name.clone(),
        source,
    };

    let mut out = Vec::new();
    let mut first_row = 0u64;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(store_error(&file.location))?
    {
        let len = batch.num_rows();
        let logical = resolved.assemble(&batch.project(&mapped_slots).map_err(arrow_error)?)?;
        let mut logical = logical.into_iter();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(request.wanted.len());
        for w in &request.wanted {
            columns.push(match w {
                Wanted::Table(f) => logical.next().ok_or_else(|| {
                    arrow_error(arrow::error::ArrowError::SchemaError(format!(
                        "column {} not assembled",
                        f.name()
                    )))
                })?,
                Wanted::Lineage(l) => {
                    let embedded = embedded
                        .iter()
                        .find(|(c, _)| c == l)
                        .map(|(_, i)| batch.column(slot(*i)));
                    lineage::materialize(
                        *l,
                        &file.lineage,
                        embedded,
                        first_row,
                        len,
                        request.missing,
                    )?
                }
            });
        }
        let newer = match request.after {
            Some(after) => {
                let ids = lineage::materialize(
                    LineageColumn::SnapshotId,
                    &file.lineage,
                    snapshot_root.map(|i| batch.column(slot(i))),
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
                Some(r < visible && !deleted.contains(&r) && newer.as_ref().is_none_or(|n| n[i]))
            })
            .collect();
        first_row += len as u64;
        let options = RecordBatchOptions::new().with_row_count(Some(len));
        let batch = RecordBatch::try_new_with_options(request.schema.clone(), columns, &options)
            .map_err(arrow_error)?;
        let batch = filter_record_batch(&batch, &keep).map_err(arrow_error)?;
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
