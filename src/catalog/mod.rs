//! The catalog mapping layer: location URIs, provider definitions, type
//! mapping, the column-mapping model, DuckLake catalog reading, path
//! resolution and row lineage.
//! SKELETON: shared by the URI/definitions helper and the DuckLake helper.

pub mod definition;
pub mod ducklake;
pub mod lineage;
pub mod mapping;
pub mod paths;

use thiserror::Error;

/// Catalog errors.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    DuckLake(#[from] ducklake::DuckLakeError),
    #[error(transparent)]
    Mapping(#[from] mapping::MappingError),
    #[error(transparent)]
    Lineage(#[from] lineage::LineageError),
    #[error(transparent)]
    Path(#[from] paths::PathError),
}
