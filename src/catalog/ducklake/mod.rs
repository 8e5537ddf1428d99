//! The DuckLake provider: a table of a DuckLake catalog (metadata in SQLite
//! or PostgreSQL, Parquet data) read at a snapshot, through the column-mapping model, with
//! deletes applied and row lineage attached.
//!
//! ```text
//! meta.sqlite / PostgreSQL ──db + metadata──► snapshot, table, columns, files, deletes, mappings
//!                              │ files::plan (paths resolved, partial_file_info)
//!                              ▼
//! Arc<dyn ObjectStore> ──scan──► per file: footer → ColumnMapping::resolve →
//!                                 batches → logical columns + lineage → minus deleted rows
//! ```
//!
//! [`DuckLakeTable::open`] does all catalog work up front, on a dedicated
//! thread (the catalog is opened read-only and closed again); [`DuckLakeTable::scan`] and
//! [`DuckLakeTable::scan_file`] read only the files the catalog lists.
//! [`DuckLakeTable::changes_since`] compares two snapshots of a table by row
//! version (`changes`).

mod changes;
mod columns;
mod db;
mod files;
mod metadata;
mod scan;

use std::path::Path;
use std::sync::Arc;

use metadata::{DataFileRow, DeleteFileRow, TableEntry};

use object_store::ObjectStore;
use thiserror::Error;
use url::Url;

pub use changes::{NewRowFile, TableChanges};
pub use columns::LogicalColumns;
pub use db::{Catalog, PgCatalog};
pub use files::{DeleteFile, LiveFile, visible_rows};
pub use metadata::CatalogReader;

use super::lineage::{LineageError, MissingRowId};
use super::mapping::{MappingError, MappingSet};
use super::paths::{self, PathError, PathPart};

/// DuckLake provider errors; each names the catalog, table or file involved.
#[derive(Debug, Error)]
pub enum DuckLakeError {
    #[error("catalog {catalog}: {source}")]
    Sqlite {
        catalog: String,
        #[source]
        source: rusqlite::Error,
    },
    /// `catalog` is the conninfo without its password.
    #[error("catalog {catalog}: {source}")]
    Postgres {
        catalog: String,
        #[source]
        source: postgres::Error,
    },
    /// `conninfo` has its password removed.
    #[error("PostgreSQL conninfo `{conninfo}` does not parse: {reason}")]
    Conninfo { conninfo: String, reason: String },
    #[error(
        "unknown DuckLake catalog kind `{kind}` (expected `sqlite:<file>` or `postgres:<conninfo>`)"
    )]
    CatalogKind { kind: String },
    #[error(
        "catalog {catalog} has the relative data_path `{data_path}`, and a PostgreSQL catalog has no folder to resolve it against; pass an absolute data path"
    )]
    RelativeDataPath { catalog: String, data_path: String },
    #[error("catalog {catalog} has no snapshots")]
    NoSnapshots { catalog: String },
    #[error("catalog {catalog} has no snapshot {requested} (latest is {latest})")]
    SnapshotNotFound {
        catalog: String,
        requested: u64,
        latest: i64,
    },
    #[error("catalog {catalog} has no data_path in ducklake_metadata")]
    MissingDataPath { catalog: String },
    #[error("catalog {catalog}: cannot use its folder as the base for data_path: {source}")]
    CatalogFolder {
        catalog: String,
        #[source]
        source: std::io::Error,
    },
    #[error("table `{table}` is not `schema.table` or `table`")]
    BadTableName { table: String },
    #[error("table {table} does not exist at snapshot {snapshot}")]
    TableNotFound { table: String, snapshot: i64 },
    #[error("table {table} has no column `{column}` (columns: {available})")]
    UnknownColumn {
        table: String,
        column: String,
        available: String,
    },
    #[error(
        "table {table}: column `{column}` has type `{column_type}`, which this reader does not support"
    )]
    UnsupportedType {
        table: String,
        column: String,
        column_type: String,
    },
    #[error("table {table} has data inlined in the catalog, which this reader does not read")]
    InlinedData { table: String },
    #[error("{file}: file format `{format}` is not parquet")]
    UnsupportedFileFormat { file: String, format: String },
    #[error("{file} is encrypted, which this reader does not support")]
    Encrypted { file: String },
    #[error("data file {data_file_id} has several visible delete files: {delete_file_ids:?}")]
    MultipleDeleteFiles {
        data_file_id: i64,
        delete_file_ids: Vec<i64>,
    },
    #[error("{file}: malformed partial_file_info `{value}`")]
    PartialFileInfo { file: String, value: String },
    #[error("{file}: mapping {mapping_id} of table {table_id} does not exist")]
    UnknownMapping {
        file: String,
        table_id: i64,
        mapping_id: i64,
    },
    #[error("{file}: the catalog says {expected} rows, the file has {actual}")]
    RowCountMismatch {
        file: String,
        expected: u64,
        actual: u64,
    },
    #[error("{delete_file}: deleted position {pos} is outside data file {file} ({rows} rows)")]
    DeletePosition {
        delete_file: String,
        file: String,
        pos: i64,
        rows: u64,
    },
    #[error("{delete_file}: no integer `pos` column")]
    DeleteFileSchema { delete_file: String },
    #[error("data file {file} of the scan does not exist (the table has {files} files)")]
    NoSuchFile { file: usize, files: usize },
    #[error("{path}: {source}")]
    ObjectStore {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Parquet {
        path: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{path}: {source}")]
    Arrow {
        path: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// [`DuckLakeTable::changes_since`] was given another table (another
    /// catalog, or another `table_id`: a table dropped and created again).
    #[error(
        "changes of table {table} (table_id {table_id}, {catalog}) cannot be taken against table {other} (table_id {other_table_id}, {other_catalog}): not the same table"
    )]
    DifferentTable {
        catalog: String,
        table: String,
        table_id: i64,
        other_catalog: String,
        other: String,
        other_table_id: i64,
    },
    /// [`DuckLakeTable::changes_since`] was given a later snapshot than its own.
    #[error(
        "changes of table {table}: the older side is at snapshot {from}, later than snapshot {to}"
    )]
    SnapshotOrder { table: String, from: i64, to: i64 },
    /// Changes between snapshots need every row's rowid, and this file has none.
    #[error(
        "changes of table {table} from snapshot {from} to {to}: {file} has no rowid (it embeds no _ducklake_internal_row_id and the catalog has no row_id_start)"
    )]
    MissingRowId {
        table: String,
        from: i64,
        to: i64,
        file: String,
    },
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Mapping(#[from] MappingError),
    #[error(transparent)]
    Lineage(#[from] LineageError),
}

/// How to open a table.
#[derive(Debug, Clone, Default)]
pub struct DuckLakeOptions {
    /// The snapshot to read; `None` = the latest.
    pub snapshot: Option<u64>,
    /// Replaces the catalog's `data_path` (like DuckDB's `DATA_PATH`): an
    /// absolute path or a URL. `None`: the catalog's `data_path`, resolved
    /// against the catalog file's folder when relative.
    pub data_path: Option<String>,
    /// The store every file is read through (an IO-accounting wrapper, a
    /// configured S3 client, …). `None`: `LocalFileSystem` for `file://`
    /// locations, `object_store::parse_url_opts` with the process's `AWS_*`
    /// variables otherwise.
    pub store: Option<Arc<dyn ObjectStore>>,
}

/// A DuckLake table at one snapshot, ready to scan.
#[derive(Debug)]
pub struct DuckLakeTable {
    catalog: String,
    name: String,
    table_id: i64,
    snapshot: i64,
    data_root: Url,
    columns: LogicalColumns,
    files: Vec<LiveFile>,
    mappings: MappingSet,
    store: Arc<dyn ObjectStore>,
}

impl DuckLakeTable {
    /// Opens `table` (`schema.table`, or `table` in schema `main`) of
    /// `catalog` (a SQLite file's path, or a [`Catalog`]) at
    /// `options.snapshot` (default: latest). The catalog is read on a
    /// dedicated thread; call this off async workers (it blocks).
    ///
    /// # Errors
    /// Catalog errors ([`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`],
    /// [`DuckLakeError::SnapshotNotFound`], [`DuckLakeError::TableNotFound`],
    /// [`DuckLakeError::InlinedData`], …), mapping validation errors
    /// ([`DuckLakeError::Mapping`]) and path errors.
    pub fn open(
        catalog: impl Into<Catalog>,
        table: &str,
        options: &DuckLakeOptions,
    ) -> Result<Self, DuckLakeError> {
        let catalog: Catalog = catalog.into();
        let (schema_name, table_name) = match table.split_once('.') {
            Some((s, t)) if !s.is_empty() && !t.is_empty() => (s, t),
            None if !table.is_empty() => ("main", table),
            _ => {
                return Err(DuckLakeError::BadTableName {
                    table: table.to_string(),
                });
            }
        };
        let name = format!("{schema_name}.{table_name}");
        let wants_data_path = options.data_path.is_none();
        let rows = catalog.read(|reader| {
            let snapshot = reader.snapshot(options.snapshot)?;
            let entry = reader.table(schema_name, table_name, snapshot)?;
            if reader.has_inlined_data(entry.table_id)? {
                return Err(DuckLakeError::InlinedData {
                    table: name.clone(),
                });
            }
            Ok(CatalogRows {
                data_path: if wants_data_path {
                    Some(reader.data_path()?)
                } else {
                    None
                },
                columns: reader.columns(entry.table_id, snapshot)?,
                data_files: reader.data_files(entry.table_id, snapshot)?,
                delete_files: reader.delete_files(entry.table_id, snapshot)?,
                mappings: reader.mappings()?,
                snapshot,
                entry,
            })
        })?;
        let snapshot = rows.snapshot;
        let data_root = match (&options.data_path, &rows.data_path) {
            (Some(path), _) => paths::resolve(
                &paths::absolute(path)?,
                PathPart {
                    path: "",
                    is_relative: true,
                },
            )?,
            (None, data_path) => {
                let data_path = data_path.as_deref().unwrap_or_default();
                let base = catalog_base(&catalog, data_path)?;
                let root = paths::resolve(
                    &base,
                    PathPart {
                        path: data_path,
                        is_relative: !is_absolute(data_path),
                    },
                )?;
                paths::resolve(
                    &root,
                    PathPart {
                        path: "",
                        is_relative: true,
                    },
                )?
            }
        };
        let columns = LogicalColumns::new(&name, rows.columns);
        let files = files::plan(
            &data_root,
            &rows.entry,
            snapshot,
            rows.data_files,
            rows.delete_files,
        )?;
        let store = match &options.store {
            Some(store) => store.clone(),
            None => default_store(&data_root, &files)?,
        };
        Ok(Self {
            catalog: catalog.to_string(),
            name,
            table_id: rows.entry.table_id,
            snapshot,
            data_root,
            columns,
            files,
            mappings: rows.mappings,
            store,
        })
    }

    /// The catalog this table was read from: the SQLite file's path, or
    /// `postgres:<conninfo without password>`.
    pub fn catalog(&self) -> &str {
        &self.catalog
    }

    /// `schema.table`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The snapshot read.
    pub fn snapshot(&self) -> i64 {
        self.snapshot
    }

    /// The resolved data root (`data_path` or its override), a folder URL.
    pub fn data_root(&self) -> &Url {
        &self.data_root
    }

    /// The logical columns at the snapshot.
    pub fn columns(&self) -> &LogicalColumns {
        &self.columns
    }

    /// The live data files, in scan order (`file_index` is the position here).
    pub fn files(&self) -> &[LiveFile] {
        &self.files
    }

    /// Every location a scan may read: data files and their delete files.
    pub fn locations(&self) -> Vec<&Url> {
        self.files
            .iter()
            .flat_map(|f| {
                std::iter::once(&f.location).chain(f.delete.as_ref().map(|d| &d.location))
            })
            .collect()
    }

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
    /// As [`Self::scan`], plus [`LineageError::MissingRowIdStart`].
    pub async fn scan_with(
        &self,
        columns: &[&str],
        missing: MissingRowId,
    ) -> Result<Vec<arrow::array::RecordBatch>, DuckLakeError> {
        let request = scan::Request::new(self, columns, missing)?;
        let mut out = Vec::new();
        for file in &self.files {
            out.extend(scan::read_file(self, &request, file).await?);
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
        scan::live_rows(self, file).await
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
        let request = scan::Request::new(self, columns, missing)?;
        scan::read_file(self, &request, file).await
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
        let request = scan::Request::new(self, columns, missing)?.after(since);
        scan::read_file(self, &request, file).await
    }
}

/// What one catalog read returns (the reader thread's result).
struct CatalogRows {
    snapshot: i64,
    entry: TableEntry,
    data_path: Option<String>,
    columns: Vec<metadata::ColumnRow>,
    data_files: Vec<DataFileRow>,
    delete_files: Vec<DeleteFileRow>,
    mappings: MappingSet,
}

/// The base a catalog's `data_path` resolves against: the SQLite file's
/// folder. A PostgreSQL catalog has none, so its `data_path` must be
/// absolute (DuckDB would use its working directory; this reader never
/// reads relative to the process's).
fn catalog_base(catalog: &Catalog, data_path: &str) -> Result<Url, DuckLakeError> {
    match catalog {
        Catalog::Sqlite(path) => {
            let folder = std::fs::canonicalize(path)
                .map(|p| p.parent().map_or_else(|| p.clone(), Path::to_path_buf))
                .map_err(|source| DuckLakeError::CatalogFolder {
                    catalog: catalog.to_string(),
                    source,
                })?;
            Ok(paths::local_dir_url(&folder)?)
        }
        Catalog::Postgres(_) if is_absolute(data_path) => {
            paths::absolute(data_path).map_err(Into::into)
        }
        Catalog::Postgres(_) => Err(DuckLakeError::RelativeDataPath {
            catalog: catalog.to_string(),
            data_path: data_path.to_string(),
        }),
    }
}

fn is_absolute(path: &str) -> bool {
    paths::absolute(path).is_ok()
}

/// The store for the table's files when none is injected: one store for the
/// origin (scheme + authority) of the data root, which every file must share.
fn default_store(
    data_root: &Url,
    files: &[LiveFile],
) -> Result<Arc<dyn ObjectStore>, DuckLakeError> {
    let origin = |u: &Url| {
        (
            u.scheme().to_string(),
            u.host_str().map(str::to_string),
            u.port(),
        )
    };
    let root = files.first().map(|f| &f.location).unwrap_or(data_root);
    if let Some(other) = files
        .iter()
        .flat_map(|f| std::iter::once(&f.location).chain(f.delete.as_ref().map(|d| &d.location)))
        .find(|u| origin(u) != origin(root))
    {
        return Err(DuckLakeError::Path(PathError::Invalid {
            path: other.to_string(),
            reason: format!("not in the same store as {root}; pass DuckLakeOptions::store"),
        }));
    }
    if root.scheme() == "file" {
        return Ok(Arc::new(object_store::local::LocalFileSystem::new()));
    }
    let env = std::env::vars().filter(|(k, _)| k.starts_with("AWS_"));
    let (store, _) =
        object_store::parse_url_opts(root, env).map_err(|source| DuckLakeError::ObjectStore {
            path: root.to_string(),
            source,
        })?;
    Ok(Arc::from(store))
}
