//! The postings writer's errors ([`PostingsError`]), also the table
//! checker's ([`crate::verify`]): each names the bucket, object and numbers.

use crate::store::StoreError;
use thiserror::Error;

/// Postings errors.
#[derive(Debug, Error)]
pub enum PostingsError {
    #[error("bucket {bucket}: postings input is not sorted by cid: {previous} then {next}")]
    Unsorted {
        bucket: u32,
        previous: u32,
        next: u32,
    },
    #[error("bucket {bucket}: cid {cid} is outside 0..=2147483647")]
    CidOutOfRange { bucket: u32, cid: i64 },
    #[error(
        "bucket {bucket}, batch {batch}: schema {actual} differs from the postings schema {expected}"
    )]
    SchemaMismatch {
        bucket: u32,
        batch: usize,
        expected: String,
        actual: String,
    },
    #[error("bucket {bucket} was already written")]
    BucketRepeated { bucket: u32 },
    #[error("bucket {bucket} does not fit six digits")]
    BucketOutOfRange { bucket: u32 },
    #[error("bucket {bucket} needs more than 100000 part files")]
    TooManyParts { bucket: u32 },
    #[error("vector dimension {dim} is not representable (1..=536870911)")]
    InvalidDim { dim: usize },
    #[error(
        "writer caps must be positive: max_rows_per_row_group {max_rows_per_row_group}, max_file_bytes {max_file_bytes}, vector_page_rows {vector_page_rows}"
    )]
    InvalidOptions {
        max_rows_per_row_group: usize,
        max_file_bytes: u64,
        vector_page_rows: usize,
    },
    #[error("payload field `{name}` reuses a fixed postings column name")]
    ReservedPayloadName { name: String },
    #[error("parquet error on {path}: {source}")]
    Parquet {
        path: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error(transparent)]
    Manifest(#[from] crate::format::manifest::ManifestError),
    #[error(transparent)]
    Footers(#[from] crate::format::footers::FootersError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PostingsError {
    /// The store failed on `path` ([`StoreError::ObjectStore`]).
    pub fn store(path: impl Into<String>, source: object_store::Error) -> Self {
        PostingsError::Store(StoreError::ObjectStore {
            path: path.into(),
            source,
        })
    }
}
