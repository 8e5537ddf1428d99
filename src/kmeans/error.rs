//! k-means errors ([`KMeansError`]).

use super::kernel::Kernel;
use crate::distance::DistanceError;
use thiserror::Error;

/// k-means errors.
#[derive(Debug, Error)]
pub enum KMeansError {
    #[error("k-means needs at least {k} points for k = {k}, got {n}")]
    TooFewPoints { n: usize, k: usize },
    #[error("k must be at least 1")]
    ZeroK,
    #[error("no centroids to assign to")]
    NoCentroids,
    #[error("hierarchy needs 1 ≤ roots ({roots}) ≤ nlist ({nlist})")]
    BadRoots { roots: usize, nlist: usize },
    #[error("data has dimension {actual}, the hierarchy has {expected}")]
    HierarchyDimension { expected: usize, actual: usize },
    #[error("hierarchical assignment needs 1 ≤ m ({m}) ≤ roots ({roots})")]
    BadProbe { m: usize, roots: usize },
    #[error("invalid input vectors: {0}")]
    Input(#[from] DistanceError),
    #[error("this CPU cannot run the {0:?} assignment kernel")]
    UnsupportedKernel(Kernel),
}
