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
    /// Opening or querying an index (its probe errors are [`Error::Probe`]).
    #[error(transparent)]
    Index(crate::index::IndexError),
}

impl From<crate::index::IndexError> for Error {
    /// A probe error met through the index is a probe error: one variant
    /// for it, whichever API reached the postings.
    fn from(e: crate::index::IndexError) -> Self {
        match e {
            crate::index::IndexError::Probe(p) => Error::Probe(p),
            other => Error::Index(other),
        }
    }
}

/// `Result` with the crate [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
