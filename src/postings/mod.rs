//! Postings: the `ivf_postings` Parquet schema, the writer (one CID per row
//! group, rolling files, streaming sha256 and size), and verification.
//! SKELETON: owned by the format helper (issue 2).

pub mod schema;

use thiserror::Error;

/// Postings errors.
#[derive(Debug, Error)]
pub enum PostingsError {
    #[error("postings input is not sorted by cid: {previous} then {next}")]
    Unsorted { previous: u32, next: u32 },
}
