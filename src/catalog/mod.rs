//! The catalog mapping layer: location URIs, provider definitions, type
//! mapping, the column-mapping model, DuckLake catalog reading, path
//! resolution and row lineage.
//! SKELETON: shared by the URI/definitions helper and the DuckLake helper.

pub mod definition;
pub mod type_mapping;
pub mod uri;
pub mod vector_column;

use thiserror::Error;

/// Catalog errors.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Uri(#[from] uri::UriError),
    #[error(transparent)]
    Definition(#[from] definition::DefinitionError),
    #[error(transparent)]
    TypeMapping(#[from] type_mapping::TypeMappingError),
    #[error(transparent)]
    VectorColumn(#[from] vector_column::VectorColumnError),
}
