//! Object-store wiring: locations (`file://`, plain paths, `memory://`, `s3://`)
//! to `Arc<dyn ObjectStore>` plus a prefix, and create-if-absent publication.

pub mod commit;
pub mod location;
pub mod parquet_reader;

pub mod counting;

use thiserror::Error;

/// Store errors.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The object to publish already exists (create-if-absent lost the race).
    #[error("{path} already exists: another publisher won; nothing was overwritten")]
    AlreadyExists { path: String },
    #[error("object store error on {path}: {source}")]
    ObjectStore {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error(transparent)]
    Location(#[from] location::LocationError),
}
