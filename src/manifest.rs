//! The strict `manifest.json` model of an `ivf_postings` table.
//! SKELETON: owned by the format helper (issue 2), who makes parsing strict and
//! adds validation. The field names below are the shared contract.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The only manifest format version this reader understands.
pub const FORMAT_VERSION: u32 = 1;

/// `manifest.json`: the complete, ordered inventory of postings files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Manifest {
    pub format_version: u32,
    pub nlist: u32,
    pub ntotal: u64,
    /// R + 1 entries; root `r` owns CIDs `cid_offsets[r]..cid_offsets[r + 1]`.
    pub cid_offsets: Vec<u32>,
    pub files: Vec<FileEntry>,
}

/// One postings object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the manifest: `cid_bucket=NNNNNN/part-NNNNN.parquet`.
    pub path: String,
    pub cid_bucket: u32,
    /// Inclusive.
    pub min_cid: u32,
    /// Inclusive.
    pub max_cid: u32,
    pub rows: u64,
    pub size: u64,
    /// Lowercase hex sha256 of the whole object.
    pub sha256: String,
}

/// Manifest errors.
#[derive(Debug, Error)]
pub enum ManifestError {
    #[error("manifest is not valid JSON: {0}")]
    Json(String),
}
