//! The DuckLake provider's error type: every failure of opening a catalog,
//! reading its metadata, planning a table's files, scanning them and comparing
//! snapshots, each naming the catalog, table or file involved.

use thiserror::Error;

use crate::catalog::lineage::LineageError;
use crate::catalog::mapping::MappingError;
use crate::catalog::paths::PathError;

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
    /// [`DuckLakeTable::changes_since`](crate::catalog::ducklake::DuckLakeTable::changes_since)
    /// was given another table (another catalog, or another `table_id`: a
    /// table dropped and created again).
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
    /// [`DuckLakeTable::changes_since`](crate::catalog::ducklake::DuckLakeTable::changes_since)
    /// was given a later snapshot than its own.
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
