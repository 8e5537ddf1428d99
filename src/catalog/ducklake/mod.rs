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
mod error;
mod files;
mod metadata;
mod scan;
mod table;

pub use changes::{NewRowFile, TableChanges};
pub use columns::LogicalColumns;
pub use db::{Catalog, PgCatalog};
pub use error::DuckLakeError;
pub use files::{DeleteFile, LiveFile, visible_rows};
pub use metadata::CatalogReader;
pub use table::{DuckLakeOptions, DuckLakeTable};
