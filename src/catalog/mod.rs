//! The catalog mapping layer: location URIs, provider definitions, type
//! mapping, the column-mapping model, DuckLake catalog reading, path
//! resolution and row lineage.

pub mod ducklake;
pub mod lineage;
pub mod mapping;
pub mod paths;
pub mod type_mapping;
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
    TypeMapping(#[from] type_mapping::TypeMappingError),
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
