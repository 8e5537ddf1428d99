//! The DuckLake provider as a build source: the table's live data files at a
//! snapshot are the parts; each part yields DuckLake's own `rowid` (embedded
//! `_ducklake_internal_row_id`, else `row_id_start + file_row_number`) and the
//! vector column and the payload columns, with deleted rows already excluded
//! by the catalog layer. A file without a rowid is an error here: every
//! posting must join back.

use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{FieldRef, Schema};
use async_trait::async_trait;

use super::BuildError;
use super::source::{
    SourceDefinition, VectorBatch, VectorSource, decode_vectors, ids_at, kept_rows,
};
use crate::catalog::CatalogError;
use crate::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use crate::catalog::lineage::MissingRowId;
use crate::format::definition::IndexSource;

/// A DuckLake table at one snapshot, read file by file.
pub struct DuckLakeSource {
    table: DuckLakeTable,
    column: String,
    /// Columns carried into the postings, with their logical types.
    payload: Vec<FieldRef>,
    dim: usize,
    skip_invalid: bool,
    skipped: AtomicU64,
}

fn lake(e: DuckLakeError) -> BuildError {
    BuildError::Catalog(CatalogError::from(e))
}

impl DuckLakeSource {
    /// Open `table` (`schema.table`) of `catalog` for the vector column
    /// `column`, carrying the `payload` columns. The catalog is read on a
    /// blocking thread, never on the async worker.
    ///
    /// # Errors
    /// Catalog, mapping and path errors; a column that is not in the table.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        catalog: &Catalog,
        table: &str,
        column: &str,
        payload: &[String],
        snapshot: Option<u64>,
        data_path: Option<&str>,
        skip_invalid: bool,
    ) -> Result<Self, BuildError> {
        let options = DuckLakeOptions {
            snapshot,
            data_path: data_path.map(str::to_string),
            store: None,
        };
        let (catalog, name) = (catalog.clone(), table.to_string());
        let table =
            tokio::task::spawn_blocking(move || DuckLakeTable::open(catalog, &name, &options))
                .await
                .map_err(|e| BuildError::Internal(format!("catalog task failed: {e}")))?
                .map_err(lake)?;
        table.columns().field(column).map_err(lake)?;
        let payload = payload
            .iter()
            .map(|name| table.columns().field(name).map_err(lake))
            .collect::<Result<Vec<_>, _>>()?;
        let mut source = Self {
            table,
            column: column.to_string(),
            payload,
            dim: 0,
            skip_invalid,
            skipped: AtomicU64::new(0),
        };
        source.dim = source.detect_dim().await?;
        Ok(source)
    }

    /// The catalog table being read.
    pub fn table(&self) -> &DuckLakeTable {
        &self.table
    }

    /// Rows skipped so far because of `skip_invalid`.
    pub fn skipped_rows(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// `rowid`, the vector column and the payload columns of one file.
    async fn read(&self, part: usize) -> Result<RecordBatch, BuildError> {
        let columns: Vec<&str> = ["rowid", self.column.as_str()]
            .into_iter()
            .chain(self.payload.iter().map(|f| f.name().as_str()))
            .collect();
        let batches = self
            .table
            .scan_file(part, &columns, MissingRowId::Error)
            .await
            .map_err(lake)?;
        let schema = match batches.first() {
            Some(b) => b.schema(),
            None => {
                return Ok(RecordBatch::new_empty(std::sync::Arc::new(
                    arrow::datatypes::Schema::empty(),
                )));
            }
        };
        concat_batches(&schema, &batches).map_err(|e| BuildError::Arrow(e.to_string()))
    }

    async fn detect_dim(&self) -> Result<usize, BuildError> {
        for part in 0..self.parts() {
            let batch = self.read(part).await?;
            if batch.num_rows() == 0 {
                continue;
            }
            let decoded =
                decode_vectors(batch.column(1).as_ref(), None, true, &self.part_name(part))?;
            if decoded.dim > 0 {
                return Ok(decoded.dim);
            }
        }
        Err(BuildError::EmptySource)
    }

    fn part_name(&self, part: usize) -> String {
        self.table
            .files()
            .get(part)
            .map_or_else(|| format!("file {part}"), |f| f.location.to_string())
    }
}

#[async_trait]
impl VectorSource for DuckLakeSource {
    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        self.table.files().len()
    }

    async fn part_rows(&self, part: usize) -> Result<u64, BuildError> {
        self.table.live_rows(part).await.map_err(lake)
    }

    async fn read_part(&self, part: usize) -> Result<VectorBatch, BuildError> {
        let path = self.part_name(part);
        let batch = self.read(part).await?;
        if batch.num_rows() == 0 {
            return Ok(VectorBatch {
                rowids: Vec::new(),
                vectors: Vec::new(),
                payload: None,
            });
        }
        // NULL vectors are rows without an embedding: skip them only when asked.
        let decoded = decode_vectors(
            batch.column(1).as_ref(),
            Some(self.dim),
            self.skip_invalid,
            &path,
        )?;
        self.skipped
            .fetch_add(decoded.skipped_rows.len() as u64, Ordering::Relaxed);
        let rowids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| BuildError::Internal("DuckLake rowid is not BIGINT".into()))?;
        let keep = kept_rows(batch.num_rows(), &decoded.skipped_rows);
        let out = ids_at(rowids, &keep, &path)?;
        let payload = if self.payload.is_empty() {
            None
        } else {
            let schema = std::sync::Arc::new(Schema::new(self.payload.clone()));
            let all = RecordBatch::try_new(schema, batch.columns()[2..].to_vec())
                .map_err(|e| BuildError::Arrow(format!("{path}: payload: {e}")))?;
            let kept = if keep.len() == all.num_rows() {
                all
            } else {
                take_record_batch(&all, &UInt32Array::from(keep))
                    .map_err(|e| BuildError::Arrow(e.to_string()))?
            };
            Some(kept)
        };
        Ok(VectorBatch {
            rowids: out,
            vectors: decoded.values,
            payload,
        })
    }

    fn payload_fields(&self) -> Vec<FieldRef> {
        self.payload.clone()
    }

    fn definition(&self) -> SourceDefinition {
        let (schema, table) = self
            .table
            .name()
            .split_once('.')
            .unwrap_or(("main", self.table.name()));
        SourceDefinition {
            source: IndexSource::Ducklake {
                catalog: self.table.catalog().to_string(),
                schema: schema.to_string(),
                table: table.to_string(),
                snapshot_id: self.table.snapshot(),
            },
            vector_column: self.column.clone(),
            id_column: None,
            payload_columns: self.payload.iter().map(|f| f.name().clone()).collect(),
            skip_invalid: self.skip_invalid,
        }
    }
}
