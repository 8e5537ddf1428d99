//! k-means training: sampling, initialisation, Lloyd iterations, empty-cluster
//! repair, and the two-level hierarchy with its `cid-offsets`. Pure compute.
//! SKELETON: owned by the k-means helper (issue 3). The `Hierarchy` fields are
//! a shared contract (the probe and the writer read them).

use crate::distance::Metric;
use thiserror::Error;

/// A trained two-level hierarchy: `roots` (R × dim) and `leaves` (nlist × dim),
/// both row-major f32. Root `r` owns leaf CIDs `cid_offsets[r]..cid_offsets[r + 1]`;
/// `cid_offsets` has R + 1 entries, starts at 0 and ends at nlist.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    pub dim: usize,
    pub metric: Metric,
    pub roots: Vec<f32>,
    pub leaves: Vec<f32>,
    pub cid_offsets: Vec<u32>,
}

/// k-means errors.
#[derive(Debug, Error)]
pub enum KMeansError {
    #[error("k-means needs at least {k} points for k = {k}, got {n}")]
    TooFewPoints { n: usize, k: usize },
}
