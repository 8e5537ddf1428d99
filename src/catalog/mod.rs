//! The catalog mapping layer: location URIs, provider definitions, type
//! mapping, the column-mapping model, DuckLake catalog reading, path
//! resolution and row lineage.
//! SKELETON: shared by the URI/definitions helper and the DuckLake helper.

pub mod definition;

use thiserror::Error;

/// Catalog errors.
#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("{0}")]
    Invalid(String),
}
