//! The read-only catalog reader: snapshot selection, `schema.table`
//! lookup, columns, live data files, delete files and column mappings at a
//! snapshot. Every versioned row is filtered by the visibility rule
//! `begin_snapshot <= S AND (end_snapshot IS NULL OR end_snapshot > S)`.
//! Each statement and each row decoding is written once, for both catalog
//! databases ([`CatalogDb`]: SQLite opened `SQLITE_OPEN_READ_ONLY`,
//! PostgreSQL in a read-only transaction): the reader never writes.

use super::db::{Catalog, CatalogDb, CatalogRow, DbError, Param};
use super::error::DuckLakeError;
use crate::catalog::mapping::{ColumnMappingRow, MappingSet, NameMapping};

/// The visibility rule; `?1` is the snapshot.
const VISIBLE: &str = "begin_snapshot <= ?1 AND (end_snapshot IS NULL OR end_snapshot > ?1)";

/// A schema-qualified table visible at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    pub table_id: i64,
    pub schema_path: String,
    pub schema_path_is_relative: bool,
    pub table_path: String,
    pub table_path_is_relative: bool,
}

/// One `ducklake_column` row visible at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnRow {
    pub column_id: i64,
    pub column_name: String,
    pub column_type: String,
    pub parent_column: Option<i64>,
}

/// One `ducklake_data_file` row visible at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFileRow {
    pub data_file_id: i64,
    pub begin_snapshot: i64,
    pub path: String,
    pub path_is_relative: bool,
    pub file_format: Option<String>,
    pub record_count: Option<i64>,
    pub file_size_bytes: Option<i64>,
    pub row_id_start: Option<i64>,
    pub encryption_key: Option<String>,
    pub partial_file_info: Option<String>,
    pub mapping_id: Option<i64>,
}

/// One `ducklake_delete_file` row visible at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFileRow {
    pub delete_file_id: i64,
    pub data_file_id: i64,
    pub path: String,
    pub path_is_relative: bool,
    pub format: Option<String>,
    pub file_size_bytes: Option<i64>,
    pub encryption_key: Option<String>,
}

/// A read-only connection to a DuckLake catalog (SQLite or PostgreSQL).
/// Open it through [`Catalog`]'s dedicated reader thread.
pub struct CatalogReader {
    db: CatalogDb,
    catalog: String,
}

impl Catalog {
    /// Runs `work` on a reader of this catalog, on a dedicated OS thread
    /// (never on the caller's, which may be a tokio worker). The reader is
    /// closed before this returns.
    ///
    /// # Errors
    /// Opening the catalog, and whatever `work` returns.
    pub(super) fn read<T: Send>(
        &self,
        work: impl FnOnce(&mut CatalogReader) -> Result<T, DuckLakeError> + Send,
    ) -> Result<T, DuckLakeError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let mut reader = CatalogReader::open(self)?;
                    work(&mut reader)
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl CatalogReader {
    /// Opens `catalog` read-only.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`] when the file is not a readable SQLite
    /// database, [`DuckLakeError::Postgres`] when the server cannot be
    /// reached or refuses the login.
    pub(super) fn open(catalog: &Catalog) -> Result<Self, DuckLakeError> {
        let name = catalog.to_string();
        let db = CatalogDb::open(catalog).map_err(|e| db_error(&name, e))?;
        Ok(Self { db, catalog: name })
    }

    /// Runs one catalog statement (placeholders `?N`), decoding each row.
    fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        decode: impl FnMut(&CatalogRow<'_, '_>) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DuckLakeError> {
        self.db
            .query(sql, params, decode)
            .map_err(|e| db_error(&self.catalog, e))
    }

    /// A statement returning exactly one `bigint` (`COUNT`, `MAX`).
    fn query_int(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<i64>, DuckLakeError> {
        Ok(self
            .query(sql, params, |r| r.get::<Option<i64>>(0))?
            .into_iter()
            .next()
            .flatten())
    }

    /// The requested snapshot, or the latest when `None`.
    ///
    /// # Errors
    /// [`DuckLakeError::NoSnapshots`], [`DuckLakeError::SnapshotNotFound`].
    pub fn snapshot(&mut self, requested: Option<u64>) -> Result<i64, DuckLakeError> {
        let latest = self.query_int("SELECT MAX(snapshot_id) FROM ducklake_snapshot", &[])?;
        let latest = latest.ok_or_else(|| DuckLakeError::NoSnapshots {
            catalog: self.catalog.clone(),
        })?;
        let Some(requested) = requested else {
            return Ok(latest);
        };
        let catalog = self.catalog.clone();
        let not_found = || DuckLakeError::SnapshotNotFound {
            catalog: catalog.clone(),
            requested,
            latest,
        };
        let id = i64::try_from(requested).map_err(|_| not_found())?;
        let exists = self.query_int(
            "SELECT COUNT(*) FROM ducklake_snapshot WHERE snapshot_id = ?1",
            &[Param::Int(id)],
        )?;
        if exists.unwrap_or(0) == 0 {
            Err(not_found())
        } else {
            Ok(id)
        }
    }

    /// `ducklake_metadata.data_path` (global scope).
    ///
    /// # Errors
    /// [`DuckLakeError::MissingDataPath`].
    pub fn data_path(&mut self) -> Result<String, DuckLakeError> {
        let rows = self.query(
            "SELECT value FROM ducklake_metadata WHERE key = 'data_path' AND scope IS NULL",
            &[],
            |r| r.get::<String>(0),
        )?;
        rows.into_iter()
            .next()
            .ok_or_else(|| DuckLakeError::MissingDataPath {
                catalog: self.catalog.clone(),
            })
    }

    /// The table `schema.table` visible at `snapshot`.
    ///
    /// # Errors
    /// [`DuckLakeError::TableNotFound`].
    pub fn table(
        &mut self,
        schema: &str,
        table: &str,
        snapshot: i64,
    ) -> Result<TableEntry, DuckLakeError> {
        let sql = "SELECT t.table_id, s.path, s.path_is_relative, t.path, t.path_is_relative \
             FROM ducklake_table t JOIN ducklake_schema s ON s.schema_id = t.schema_id \
             WHERE s.schema_name = ?2 AND t.table_name = ?3 \
               AND s.begin_snapshot <= ?1 AND (s.end_snapshot IS NULL OR s.end_snapshot > ?1) \
               AND t.begin_snapshot <= ?1 AND (t.end_snapshot IS NULL OR t.end_snapshot > ?1)";
        let params = [
            Param::Int(snapshot),
            Param::Text(schema),
            Param::Text(table),
        ];
        // A NULL flag counts as relative.
        let rows = self.query(sql, &params, |r| {
            Ok(TableEntry {
                table_id: r.get(0)?,
                schema_path: r.get::<Option<String>>(1)?.unwrap_or_default(),
                schema_path_is_relative: r.flag(2)? != Some(false),
                table_path: r.get::<Option<String>>(3)?.unwrap_or_default(),
                table_path_is_relative: r.flag(4)? != Some(false),
            })
        })?;
        rows.into_iter()
            .next()
            .ok_or_else(|| DuckLakeError::TableNotFound {
                table: format!("{schema}.{table}"),
                snapshot,
            })
    }

    /// The table's columns at `snapshot`, ordered by `column_order`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`].
    pub fn columns(
        &mut self,
        table_id: i64,
        snapshot: i64,
    ) -> Result<Vec<ColumnRow>, DuckLakeError> {
        let sql = format!(
            "SELECT column_id, column_name, column_type, parent_column FROM ducklake_column \
             WHERE table_id = ?2 AND {VISIBLE} ORDER BY column_order, column_id"
        );
        self.query(&sql, &[Param::Int(snapshot), Param::Int(table_id)], |r| {
            Ok(ColumnRow {
                column_id: r.get(0)?,
                column_name: r.get(1)?,
                column_type: r.get(2)?,
                parent_column: r.get(3)?,
            })
        })
    }

    /// The table's live data files at `snapshot`, ordered by `data_file_id`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`].
    pub fn data_files(
        &mut self,
        table_id: i64,
        snapshot: i64,
    ) -> Result<Vec<DataFileRow>, DuckLakeError> {
        let sql = format!(
            "SELECT data_file_id, begin_snapshot, path, path_is_relative, file_format, record_count, \
                    file_size_bytes, row_id_start, encryption_key, partial_file_info, mapping_id \
             FROM ducklake_data_file WHERE table_id = ?2 AND {VISIBLE} ORDER BY data_file_id"
        );
        self.query(&sql, &[Param::Int(snapshot), Param::Int(table_id)], |r| {
            Ok(DataFileRow {
                data_file_id: r.get(0)?,
                begin_snapshot: r.get(1)?,
                path: r.get(2)?,
                path_is_relative: r.flag(3)? != Some(false),
                file_format: r.get(4)?,
                record_count: r.get(5)?,
                file_size_bytes: r.get(6)?,
                row_id_start: r.get(7)?,
                encryption_key: r.get(8)?,
                partial_file_info: r.get(9)?,
                mapping_id: r.get(10)?,
            })
        })
    }

    /// The table's delete files visible at `snapshot`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`].
    pub fn delete_files(
        &mut self,
        table_id: i64,
        snapshot: i64,
    ) -> Result<Vec<DeleteFileRow>, DuckLakeError> {
        let sql = format!(
            "SELECT delete_file_id, data_file_id, path, path_is_relative, format, file_size_bytes, encryption_key \
             FROM ducklake_delete_file WHERE table_id = ?2 AND {VISIBLE} ORDER BY delete_file_id"
        );
        self.query(&sql, &[Param::Int(snapshot), Param::Int(table_id)], |r| {
            Ok(DeleteFileRow {
                delete_file_id: r.get(0)?,
                data_file_id: r.get(1)?,
                path: r.get(2)?,
                path_is_relative: r.flag(3)? != Some(false),
                format: r.get(4)?,
                file_size_bytes: r.get(5)?,
                encryption_key: r.get(6)?,
            })
        })
    }

    /// Whether the table has data inlined in the catalog (not read by this reader).
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`].
    pub fn has_inlined_data(&mut self, table_id: i64) -> Result<bool, DuckLakeError> {
        let n = self.query_int(
            "SELECT COUNT(*) FROM ducklake_inlined_data_tables WHERE table_id = ?1",
            &[Param::Int(table_id)],
        )?;
        Ok(n.unwrap_or(0) > 0)
    }

    /// Every column mapping of the catalog, folded and validated (RFC 0018).
    /// Mappings are unversioned: all are loaded whatever the snapshot.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Postgres`], [`DuckLakeError::Mapping`].
    pub fn mappings(&mut self) -> Result<MappingSet, DuckLakeError> {
        let columns = self.query(
            "SELECT mapping_id, table_id, type FROM ducklake_column_mapping ORDER BY mapping_id",
            &[],
            |r| {
                Ok(ColumnMappingRow {
                    mapping_id: r.get(0)?,
                    table_id: r.get(1)?,
                    map_type: r.get::<Option<String>>(2)?.unwrap_or_default(),
                })
            },
        )?;
        let names = self.query(
            "SELECT mapping_id, column_id, source_name, target_field_id, parent_column, is_partition \
             FROM ducklake_name_mapping ORDER BY mapping_id, column_id",
            &[],
            |r| {
                Ok((
                    r.get::<i64>(0)?,
                    NameMapping {
                        column_id: r.get(1)?,
                        source_name: r.get(2)?,
                        target_field_id: r.get(3)?,
                        parent_column: r.get(4)?,
                        is_partition: r.flag(5)?.unwrap_or(false),
                    },
                ))
            },
        )?;
        Ok(MappingSet::from_rows(columns, names)?)
    }
}

/// A database error, named by its catalog (password-free).
fn db_error(catalog: &str, e: DbError) -> DuckLakeError {
    match e {
        DbError::Sqlite(source) => DuckLakeError::Sqlite {
            catalog: catalog.to_string(),
            source,
        },
        DbError::Postgres(source) => DuckLakeError::Postgres {
            catalog: catalog.to_string(),
            source,
        },
    }
}
