//! Probe reader: choose centroids, intersect CIDs with manifest ranges, read
//! candidate footers, build an explicit row-group plan, execute it.
//! SKELETON: owned by the probe helper (issue 4).

use thiserror::Error;

/// Probe errors.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("corrupt index: {0}")]
    CorruptIndex(String),
}
