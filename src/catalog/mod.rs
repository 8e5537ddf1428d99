//! The catalog mapping layer: location URIs, provider definitions, type
//! mapping, the column-mapping model, DuckLake catalog reading, path
//! resolution and row lineage.

pub mod definition;
pub mod ducklake;
pub mod lineage;
pub mod mapping;
pub mod paths;
pub mod type_mapping;
pub mod uri;
pub mod vector_column;

use thiserror::Error;

/// Catalog errors.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error(transparent)]
    Uri(#[from] uri::UriError),
    #[error(transparent)]
    Definition(#[from] definition::DefinitionError),
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
