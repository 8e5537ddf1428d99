//! The read-only SQLite catalog reader: snapshot selection, `schema.table`
//! lookup, columns, live data files, delete files and column mappings at a
//! snapshot. Every versioned row is filtered by the visibility rule
//! `begin_snapshot <= S AND (end_snapshot IS NULL OR end_snapshot > S)`.
//! The connection is opened `SQLITE_OPEN_READ_ONLY`: the reader never writes.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, params};

use super::DuckLakeError;
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

/// A read-only connection to a DuckLake catalog in SQLite.
#[derive(Debug)]
pub struct CatalogReader {
    conn: Connection,
    catalog: String,
}

impl CatalogReader {
    /// Opens `path` read-only.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`] when the file is not a readable SQLite database.
    pub fn open(path: &Path) -> Result<Self, DuckLakeError> {
        let catalog = path.display().to_string();
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|source| DuckLakeError::Sqlite {
                catalog: catalog.clone(),
                source,
            })?;
        Ok(Self { conn, catalog })
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> DuckLakeError + '_ {
        |source| DuckLakeError::Sqlite {
            catalog: self.catalog.clone(),
            source,
        }
    }

    /// The requested snapshot, or the latest when `None`.
    ///
    /// # Errors
    /// [`DuckLakeError::NoSnapshots`], [`DuckLakeError::SnapshotNotFound`].
    pub fn snapshot(&self, requested: Option<u64>) -> Result<i64, DuckLakeError> {
        let latest: Option<i64> = self
            .conn
            .query_row("SELECT MAX(snapshot_id) FROM ducklake_snapshot", [], |r| {
                r.get(0)
            })
            .map_err(self.sql())?;
        let latest = latest.ok_or_else(|| DuckLakeError::NoSnapshots {
            catalog: self.catalog.clone(),
        })?;
        let Some(requested) = requested else {
            return Ok(latest);
        };
        let not_found = || DuckLakeError::SnapshotNotFound {
            catalog: self.catalog.clone(),
            requested,
            latest,
        };
        let id = i64::try_from(requested).map_err(|_| not_found())?;
        let exists: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM ducklake_snapshot WHERE snapshot_id = ?1",
                [id],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        if exists == 0 {
            Err(not_found())
        } else {
            Ok(id)
        }
    }

    /// `ducklake_metadata.data_path` (global scope).
    ///
    /// # Errors
    /// [`DuckLakeError::MissingDataPath`].
    pub fn data_path(&self) -> Result<String, DuckLakeError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT value FROM ducklake_metadata WHERE key = 'data_path' AND scope IS NULL",
            )
            .map_err(self.sql())?;
        let mut rows = stmt.query([]).map_err(self.sql())?;
        match rows.next().map_err(self.sql())? {
            Some(row) => row.get(0).map_err(self.sql()),
            None => Err(DuckLakeError::MissingDataPath {
                catalog: self.catalog.clone(),
            }),
        }
    }

    /// The table `schema.table` visible at `snapshot`.
    ///
    /// # Errors
    /// [`DuckLakeError::TableNotFound`].
    pub fn table(
        &self,
        schema: &str,
        table: &str,
        snapshot: i64,
    ) -> Result<TableEntry, DuckLakeError> {
        let sql = "SELECT t.table_id, s.path, s.path_is_relative, t.path, t.path_is_relative \
             FROM ducklake_table t JOIN ducklake_schema s ON s.schema_id = t.schema_id \
             WHERE s.schema_name = ?2 AND t.table_name = ?3 \
               AND s.begin_snapshot <= ?1 AND (s.end_snapshot IS NULL OR s.end_snapshot > ?1) \
               AND t.begin_snapshot <= ?1 AND (t.end_snapshot IS NULL OR t.end_snapshot > ?1)";
        let mut stmt = self.conn.prepare(sql).map_err(self.sql())?;
        let mut rows = stmt
            .query(params![snapshot, schema, table])
            .map_err(self.sql())?;
        let Some(row) = rows.next().map_err(self.sql())? else {
            return Err(DuckLakeError::TableNotFound {
                table: format!("{schema}.{table}"),
                snapshot,
            });
        };
        let get =
            |i: usize| -> Result<Option<String>, DuckLakeError> { row.get(i).map_err(self.sql()) };
        let flag = |i: usize| -> Result<bool, DuckLakeError> {
            Ok(row.get::<_, Option<i64>>(i).map_err(self.sql())? != Some(0))
        };
        Ok(TableEntry {
            table_id: row.get(0).map_err(self.sql())?,
            schema_path: get(1)?.unwrap_or_default(),
            schema_path_is_relative: flag(2)?,
            table_path: get(3)?.unwrap_or_default(),
            table_path_is_relative: flag(4)?,
        })
    }

    /// The table's columns at `snapshot`, ordered by `column_order`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`].
    pub fn columns(&self, table_id: i64, snapshot: i64) -> Result<Vec<ColumnRow>, DuckLakeError> {
        let sql = format!(
            "SELECT column_id, column_name, column_type, parent_column FROM ducklake_column \
             WHERE table_id = ?2 AND {VISIBLE} ORDER BY column_order, column_id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params![snapshot, table_id], |r| {
                Ok(ColumnRow {
                    column_id: r.get(0)?,
                    column_name: r.get(1)?,
                    column_type: r.get(2)?,
                    parent_column: r.get(3)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// The table's live data files at `snapshot`, ordered by `data_file_id`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`].
    pub fn data_files(
        &self,
        table_id: i64,
        snapshot: i64,
    ) -> Result<Vec<DataFileRow>, DuckLakeError> {
        let sql = format!(
            "SELECT data_file_id, begin_snapshot, path, path_is_relative, file_format, record_count, \
                    file_size_bytes, row_id_start, encryption_key, partial_file_info, mapping_id \
             FROM ducklake_data_file WHERE table_id = ?2 AND {VISIBLE} ORDER BY data_file_id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params![snapshot, table_id], |r| {
                Ok(DataFileRow {
                    data_file_id: r.get(0)?,
                    begin_snapshot: r.get(1)?,
                    path: r.get(2)?,
                    path_is_relative: r.get::<_, Option<i64>>(3)? != Some(0),
                    file_format: r.get(4)?,
                    record_count: r.get(5)?,
                    file_size_bytes: r.get(6)?,
                    row_id_start: r.get(7)?,
                    encryption_key: r.get(8)?,
                    partial_file_info: r.get(9)?,
                    mapping_id: r.get(10)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// The table's delete files visible at `snapshot`.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`].
    pub fn delete_files(
        &self,
        table_id: i64,
        snapshot: i64,
    ) -> Result<Vec<DeleteFileRow>, DuckLakeError> {
        let sql = format!(
            "SELECT delete_file_id, data_file_id, path, path_is_relative, format, file_size_bytes, encryption_key \
             FROM ducklake_delete_file WHERE table_id = ?2 AND {VISIBLE} ORDER BY delete_file_id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params![snapshot, table_id], |r| {
                Ok(DeleteFileRow {
                    delete_file_id: r.get(0)?,
                    data_file_id: r.get(1)?,
                    path: r.get(2)?,
                    path_is_relative: r.get::<_, Option<i64>>(3)? != Some(0),
                    format: r.get(4)?,
                    file_size_bytes: r.get(5)?,
                    encryption_key: r.get(6)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Whether the table has data inlined in the catalog (not read by this reader).
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`].
    pub fn has_inlined_data(&self, table_id: i64) -> Result<bool, DuckLakeError> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM ducklake_inlined_data_tables WHERE table_id = ?1",
                [table_id],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        Ok(n > 0)
    }

    /// Every column mapping of the catalog, folded and validated (RFC 0018).
    /// Mappings are unversioned: all are loaded whatever the snapshot.
    ///
    /// # Errors
    /// [`DuckLakeError::Sqlite`], [`DuckLakeError::Mapping`].
    pub fn mappings(&self) -> Result<MappingSet, DuckLakeError> {
        let mut stmt = self
            .conn
            .prepare("SELECT mapping_id, table_id, type FROM ducklake_column_mapping ORDER BY mapping_id")
            .map_err(self.sql())?;
        let columns = stmt
            .query_map([], |r| {
                Ok(ColumnMappingRow {
                    mapping_id: r.get(0)?,
                    table_id: r.get(1)?,
                    map_type: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                })
            })
            .map_err(self.sql())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql())?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT mapping_id, column_id, source_name, target_field_id, parent_column, is_partition \
                 FROM ducklake_name_mapping ORDER BY mapping_id, column_id",
            )
            .map_err(self.sql())?;
        let names = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    NameMapping {
                        column_id: r.get(1)?,
                        source_name: r.get(2)?,
                        target_field_id: r.get(3)?,
                        parent_column: r.get(4)?,
                        is_partition: r.get::<_, Option<i64>>(5)?.unwrap_or(0) != 0,
                    },
                ))
            })
            .map_err(self.sql())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql())?;
        Ok(MappingSet::from_rows(columns, names)?)
    }
}
