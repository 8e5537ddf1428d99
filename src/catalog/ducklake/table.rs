//! A DuckLake table at one snapshot: the options it is opened with, the
//! catalog work of [`DuckLakeTable::open`] (snapshot, table, columns, live
//! files, delete files and mappings read on the catalog's reader thread; the
//! data root resolved; the store chosen) and the table's accessors. Scanning
//! the table is in `scan`, its changes between snapshots in `changes`.

use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStore;
use url::Url;

use super::columns::LogicalColumns;
use super::db::Catalog;
use super::error::DuckLakeError;
use super::files::{self, LiveFile};
use super::metadata::{ColumnRow, DataFileRow, DeleteFileRow, TableEntry};
use crate::catalog::mapping::MappingSet;
use crate::catalog::paths::{self, PathError, PathPart};

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
    pub(super) catalog: String,
    pub(super) name: String,
    pub(super) table_id: i64,
    pub(super) snapshot: i64,
    data_root: Url,
    pub(super) columns: LogicalColumns,
    pub(super) files: Vec<LiveFile>,
    pub(super) mappings: MappingSet,
    pub(super) store: Arc<dyn ObjectStore>,
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
}

/// What one catalog read returns (the reader thread's result).
struct CatalogRows {
    snapshot: i64,
    entry: TableEntry,
    data_path: Option<String>,
    columns: Vec<ColumnRow>,
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
