//! The DuckLake provider as a build source: the table's live data files at a
//! snapshot are the parts; each part yields DuckLake's own `rowid` (embedded
//! `_ducklake_internal_row_id`, else `row_id_start + file_row_number`) and the
//! vector column and the payload columns, with deleted rows already excluded
//! by the catalog layer. A file without a rowid is an error here: every
//! posting must join back.
//!
//! [`DuckLakeSource::open_changes`] opens only the row versions a table gained
//! between two snapshots ([`DuckLakeTable::changes_since`]): its parts are the
//! files holding such rows, each read keeps only rows with
//! `snapshot_id > from`, and the rowids removed come back beside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{FieldRef, Schema};
use async_trait::async_trait;

use super::vector_source::{
    SourceDefinition, VectorBatch, VectorSource, decode_vectors, ids_at, kept_rows,
};
use crate::builder::error::BuildError;
use crate::catalog::CatalogError;
use crate::catalog::ducklake::{
    Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable, NewRowFile,
};
use crate::catalog::lineage::MissingRowId;
use crate::format::definition::IndexSource;

/// A DuckLake table at one snapshot, read file by file: all its rows, or
/// only the row versions newer than an earlier snapshot.
pub struct DuckLakeSource {
    table: Arc<DuckLakeTable>,
    column: String,
    /// Columns carried into the postings, with their logical types.
    payload: Vec<FieldRef>,
    dim: usize,
    skip_invalid: bool,
    skipped: AtomicU64,
    parts: Parts,
}

/// Which rows of which files the parts are.
enum Parts {
    /// Every live file, every live row: part `i` is file `i`.
    All,
    /// The files holding rows with `snapshot_id > since`, only those rows.
    Since { since: i64, files: Vec<NewRowFile> },
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
        Self::new(Arc::new(table), column, payload, skip_invalid, Parts::All).await
    }

    /// Open the row versions `table` (`schema.table`) of `catalog` gained from
    /// snapshot `from_snapshot` to `to_snapshot` (default: the latest), with
    /// the rowids it lost (ascending); see [`DuckLakeTable::changes_since`].
    /// Both snapshots are read from the catalog on a blocking thread. The
    /// definition records the `to` snapshot. When no new row carries a
    /// vector, the source has dimension 0.
    ///
    /// # Errors
    /// As [`Self::open`] (also for the table at `from_snapshot`), and the
    /// errors of [`DuckLakeTable::changes_since`].
    #[allow(clippy::too_many_arguments)]
    pub async fn open_changes(
        catalog: &Catalog,
        table: &str,
        column: &str,
        payload: &[String],
        from_snapshot: u64,
        to_snapshot: Option<u64>,
        data_path: Option<&str>,
        skip_invalid: bool,
    ) -> Result<(Self, Vec<i64>), BuildError> {
        let options = |snapshot| DuckLakeOptions {
            snapshot,
            data_path: data_path.map(str::to_string),
            store: None,
        };
        let (older_options, options) = (options(Some(from_snapshot)), options(to_snapshot));
        let (catalog, name) = (catalog.clone(), table.to_string());
        let (older, table) = tokio::task::spawn_blocking(move || {
            Ok::<_, DuckLakeError>((
                DuckLakeTable::open(catalog.clone(), &name, &older_options)?,
                DuckLakeTable::open(catalog, &name, &options)?,
            ))
        })
        .await
        .map_err(|e| BuildError::Internal(format!("catalog task failed: {e}")))?
        .map_err(lake)?;
        Self::changes(Arc::new(table), &older, column, payload, skip_invalid).await
    }

    /// [`Self::open_changes`] for tables already open: the row versions
    /// `table` gained since `older` (the same table at an earlier snapshot),
    /// and the rowids it lost.
    ///
    /// # Errors
    /// As [`Self::open_changes`].
    pub async fn changes(
        table: Arc<DuckLakeTable>,
        older: &DuckLakeTable,
        column: &str,
        payload: &[String],
        skip_invalid: bool,
    ) -> Result<(Self, Vec<i64>), BuildError> {
        let changes = table.changes_since(older).await.map_err(lake)?;
        let parts = Parts::Since {
            since: changes.from,
            files: changes.new_row_files,
        };
        let source = Self::new(table, column, payload, skip_invalid, parts).await?;
        Ok((source, changes.removed))
    }

    async fn new(
        table: Arc<DuckLakeTable>,
        column: &str,
        payload: &[String],
        skip_invalid: bool,
        parts: Parts,
    ) -> Result<Self, BuildError> {
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
            parts,
        };
        source.dim = match source.detect_dim().await {
            Err(BuildError::EmptySource) if matches!(source.parts, Parts::Since { .. }) => 0,
            other => other?,
        };
        Ok(source)
    }

    /// For a source of changes, the snapshot whose newer row versions it
    /// yields (`snapshot_id > since`); `None` for a whole table.
    pub fn since(&self) -> Option<i64> {
        match &self.parts {
            Parts::All => None,
            Parts::Since { since, .. } => Some(*since),
        }
    }

    /// The index in [`DuckLakeTable::files`] of part `part`'s file.
    pub fn part_file(&self, part: usize) -> Option<usize> {
        match &self.parts {
            Parts::All => (part < self.table.files().len()).then_some(part),
            Parts::Since { files, .. } => files.get(part).map(|f| f.file_index),
        }
    }

    fn file_index(&self, part: usize) -> Result<usize, BuildError> {
        self.part_file(part).ok_or_else(|| {
            BuildError::Internal(format!(
                "part {part} of a source with {} parts",
                self.parts()
            ))
        })
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
        let file = self.file_index(part)?;
        let batches = match &self.parts {
            Parts::All => {
                self.table
                    .scan_file(file, &columns, MissingRowId::Error)
                    .await
            }
            Parts::Since { since, .. } => {
                self.table
                    .scan_file_since(file, &columns, MissingRowId::Error, *since)
                    .await
            }
        }
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
        self.part_file(part)
            .and_then(|i| self.table.files().get(i))
            .map_or_else(|| format!("file {part}"), |f| f.location.to_string())
    }
}

#[async_trait]
impl VectorSource for DuckLakeSource {
    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        match &self.parts {
            Parts::All => self.table.files().len(),
            Parts::Since { files, .. } => files.len(),
        }
    }

    async fn part_rows(&self, part: usize) -> Result<u64, BuildError> {
        match &self.parts {
            Parts::All => self.table.live_rows(part).await.map_err(lake),
            Parts::Since { files, .. } => match files.get(part) {
                Some(f) => Ok(f.rows),
                None => self.file_index(part).map(|_| 0),
            },
        }
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
        // Dimension 0: no new row of a changes source carries a vector.
        let decoded = decode_vectors(
            batch.column(1).as_ref(),
            (self.dim > 0).then_some(self.dim),
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
