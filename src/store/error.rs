//! The store's errors: [`StoreError`] (publication and object-store
//! failures) and [`LocationError`] (a location that cannot be opened).

use super::uri::UriError;
use std::path::PathBuf;
use thiserror::Error;

/// Store errors.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The object to publish already exists (create-if-absent lost the race).
    #[error("{path} already exists: another publisher won; nothing was overwritten")]
    AlreadyExists { path: String },
    /// The store cannot create-if-absent and the user did not accept the
    /// risk of publishing without it.
    #[error(
        "{store} does not support conditional put (If-None-Match: *), so {path} cannot be \
         published without risking a silent overwrite; refusing. Use a store with conditional \
         put, or pass --allow-unconditional-publish (PARQIVF_ALLOW_UNCONDITIONAL_PUBLISH=1) to \
         publish with HEAD-then-PUT and accept that concurrent publishers may overwrite each other"
    )]
    NoConditionalPut { path: String, store: String },
    #[error("object store error on {path}: {source}")]
    ObjectStore {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error(transparent)]
    Location(#[from] LocationError),
}

/// A location that cannot be opened.
#[derive(Debug, Error)]
pub enum LocationError {
    #[error("empty location")]
    Empty,
    #[error(transparent)]
    Uri(#[from] UriError),
    #[error("local path {path:?}: {reason}")]
    LocalPath { path: PathBuf, reason: String },
    #[error("cannot configure the {scheme} store for {location:?}: {source}")]
    Configure {
        scheme: &'static str,
        location: String,
        #[source]
        source: object_store::Error,
    },
}
