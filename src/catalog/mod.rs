//! Source providers: the column-mapping model (which also validates each
//! file's column types against the table's), vector-column decoding, the
//! DuckLake catalog with its lake path resolution, and row lineage. Location
//! URIs and hive partitions live in `store::uri`, the index's own documents in
//! `format`.

pub mod ducklake;
pub mod lineage;
pub mod mapping;
pub mod paths;
pub mod vector_column;

use thiserror::Error;

/// Catalog errors.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error(transparent)]
    Uri(#[from] crate::store::uri::UriError),
    #[error(transparent)]
    Definition(#[from] crate::format::definition::DefinitionError),
    #[error(transparent)]
    VectorColumn(#[from] vector_column::VectorColumnError),
    #[error(transparent)]
    DuckLake(#[from] ducklake::DuckLakeError),
    #[error(transparent)]
    Mapping(#[from] mapping::MappingError),
    #[error(transparent)]
    Lineage(#[from] lineage::LineageError),
    #[error(transparent)]
    Path(#[from] paths::PathError),
}
