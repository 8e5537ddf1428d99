//! The source of a build as a user names it (`parqivf build --source …`,
//! Python's `parqivf.build(source, …)`, a distributed build's plan), and
//! [`open_source`], the one place that turns such a name into a
//! [`VectorSource`]:
//!
//! | `source` | opened as |
//! |---|---|
//! | `ducklake:sqlite:<catalog>`, `ducklake:postgres:<conninfo>` (with `table`) | [`DuckLakeSource`] |
//! | `<file>.npy`, `<file>.fvecs` | [`ArraySource`] (rowid = row number) |
//! | anything else: a Parquet root, file or `*` pattern (path or URI) | [`ParquetSource`] |

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ducklake::DuckLakeSource;
use super::parquet::{ParquetSource, ParquetSourceOptions};
use super::vector_source::{ArraySource, VectorSource};
use crate::builder::error::BuildError;
use crate::catalog::CatalogError;
use crate::catalog::ducklake::Catalog;
use crate::store::options::StoreOptions;

/// The DuckLake source prefix; `sqlite:<catalog file>` or
/// `postgres:<conninfo>` follows ([`Catalog::parse`]).
pub const DUCKLAKE: &str = "ducklake:";

/// What a build reads. Serialisable, so that a distributed build's workers
/// open the very source its driver trained on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceSpec {
    /// A Parquet table root or `*` pattern (path, `file://`, `s3://`…), a
    /// `.npy`/`.fvecs` file, `ducklake:sqlite:<catalog>` or
    /// `ducklake:postgres:<conninfo>` (libpq `key=value` pairs or a
    /// `postgresql://` URI; its password is never recorded or shown).
    pub source: String,
    /// The vector column.
    pub column: String,
    /// DuckLake: the table as `schema.table`.
    #[serde(default)]
    pub table: Option<String>,
    /// DuckLake: the snapshot (default: the latest).
    #[serde(default)]
    pub snapshot: Option<u64>,
    /// DuckLake: resolve the catalog's `data_path` against this instead of
    /// the catalog's folder. A relative local path is taken relative to the
    /// current directory, once, when the source is opened.
    #[serde(default)]
    pub data_path: Option<String>,
    /// Parquet: a BIGINT-compatible column holding each row's identity.
    #[serde(default)]
    pub id_column: Option<String>,
    /// Columns carried into the postings.
    #[serde(default)]
    pub payload: Vec<String>,
    /// Skip rows with NULL or non-finite vectors (counted) instead of failing.
    #[serde(default)]
    pub skip_invalid: bool,
    /// Parquet: record each file's sha256, so `refresh` sees a file
    /// rewritten in place with its size and mtime kept (each file is read
    /// once more, in full).
    #[serde(default)]
    pub content_hash: bool,
}

/// Opens the source `spec` names, its store configured by `options`.
///
/// # Errors
/// [`BuildError::BadParameter`] for a DuckLake source without a table or a
/// data path that cannot be made absolute; the errors of opening each kind
/// of source (no files, unreadable footers, missing or mistyped columns…).
pub async fn open_source(
    spec: &SourceSpec,
    options: &StoreOptions,
) -> Result<Arc<dyn VectorSource>, BuildError> {
    let src = spec.source.as_str();
    if let Some(catalog) = src.strip_prefix(DUCKLAKE) {
        let catalog =
            Catalog::parse(catalog).map_err(|e| BuildError::Catalog(CatalogError::from(e)))?;
        let src = format!("{DUCKLAKE}{}", catalog.spec());
        let table = spec
            .table
            .as_deref()
            .ok_or_else(|| BuildError::BadParameter {
                name: "table",
                reason: format!("the DuckLake source {src} needs a table as schema.table"),
            })?;
        let data_path = match spec.data_path.as_deref() {
            Some(p) if !p.contains("://") => Some(
                std::path::absolute(p)
                    .map_err(|e| BuildError::BadParameter {
                        name: "data_path",
                        reason: format!("{p}: {e}"),
                    })?
                    .display()
                    .to_string(),
            ),
            other => other.map(str::to_string),
        };
        let s = DuckLakeSource::open(
            &catalog,
            table,
            &spec.column,
            &spec.payload,
            spec.snapshot,
            data_path.as_deref(),
            spec.skip_invalid,
        )
        .await?;
        return Ok(Arc::new(s));
    }
    if src.ends_with(".npy") || src.ends_with(".fvecs") {
        let path = std::path::PathBuf::from(src);
        let v = tokio::task::spawn_blocking(move || crate::vector_file::read_vectors(&path))
            .await
            .map_err(|e| BuildError::Internal(format!("worker task failed: {e}")))?
            .map_err(|e| BuildError::Unreadable {
                path: src.to_string(),
                reason: crate::builder::error::reason_without(src, &e),
            })?;
        let s = ArraySource::new(v.data, v.dim, src)?.with_skip_invalid(spec.skip_invalid);
        return Ok(Arc::new(s));
    }
    let (store, pattern) = crate::store::location::open_pattern(src, options)
        .map_err(|e| BuildError::Store(e.into()))?;
    let s = ParquetSource::open(
        store,
        &pattern,
        ParquetSourceOptions {
            column: spec.column.clone(),
            id_column: spec.id_column.clone(),
            payload: spec.payload.clone(),
            skip_invalid: spec.skip_invalid,
            table_uri: src.contains("://").then(|| src.to_string()),
            content_hash: spec.content_hash,
        },
    )
    .await?;
    Ok(Arc::new(s))
}
