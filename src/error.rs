//! The crate-wide error: one variant per module, each wrapping that module's
//! own typed error (which carries the object path and the numbers involved).
//! `anyhow` appears only at the CLI edge.

use thiserror::Error;

/// Any parqivf error.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Distance(#[from] crate::distance::DistanceError),
    #[error(transparent)]
    KMeans(#[from] crate::kmeans::KMeansError),
    #[error(transparent)]
    Manifest(#[from] crate::format::manifest::ManifestError),
    #[error(transparent)]
    Postings(#[from] crate::postings::PostingsError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
    #[error(transparent)]
    Build(#[from] crate::builder::BuildError),
    #[error(transparent)]
    Warehouse(#[from] crate::format::warehouse::WarehouseError),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
}

/// `Result` with the crate [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
