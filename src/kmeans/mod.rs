//! k-means training: sampling, initialisation, Lloyd iterations, empty-cluster
//! repair, and the two-level hierarchy with its `cid-offsets`. Pure compute on
//! row-major `f32` slices plus a `dim`: no IO, no clock, and the random
//! generator is passed in, so the same seed gives bit-identical centroids (for
//! any thread count: parallel work is split into fixed-size tiles).
//!
//! - [`train`] (in `flat`): flat k-means, FAISS conventions (sampling, random
//!   init, niter 20, empty-cluster split).
//! - [`Hierarchy::train`] (in `hierarchy`): R roots, leaves per root in
//!   proportion to the root's share of the sample, trained in parallel.
//! - [`assign::nearest`]: the blocked-GEMM nearest-centroid kernel that the
//!   build job and the probe reuse.
//!
//! `docs/kmeans.md` describes the algorithm choices.

pub mod assign;
mod flat;
mod hierarchy;
pub mod sample;

pub use flat::train;
pub use hierarchy::{AssignMode, HierarchyParams, HierarchyReport};

use crate::distance::{DistanceError, Metric};
use thiserror::Error;

/// A trained two-level hierarchy: `roots` (R × dim) and `leaves` (nlist × dim),
/// both row-major f32. Root `r` owns leaf CIDs `cid_offsets[r]..cid_offsets[r + 1]`;
/// `cid_offsets` has R + 1 entries, starts at 0 and ends at nlist.
///
/// ```text
/// roots:        r0            r1        r2
/// cid_offsets:  0             3         4            6
/// leaves:       [l0 l1 l2]    [l3]      [l4 l5]
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    pub dim: usize,
    pub metric: Metric,
    pub roots: Vec<f32>,
    pub leaves: Vec<f32>,
    pub cid_offsets: Vec<u32>,
}

/// How the initial centroids are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Init {
    /// k distinct sample points chosen uniformly (FAISS's default).
    #[default]
    Random,
    /// D² sampling (Arthur & Vassilvitskii); slower, better spread.
    KMeansPlusPlus,
}

/// Flat k-means parameters. `Default` follows FAISS's `ClusteringParameters`.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansParams {
    /// Number of centroids.
    pub k: usize,
    /// Maximum Lloyd iterations (FAISS: 20).
    pub niter: usize,
    /// The training sample is at most `max_points_per_centroid · k` points (FAISS: 256).
    pub max_points_per_centroid: usize,
    /// Below `min_points_per_centroid · k` points the result carries a warning (FAISS: 39).
    pub min_points_per_centroid: usize,
    pub init: Init,
    /// Stop when the objective improves by less than this fraction in one
    /// iteration. 0 (the default, as FAISS) always runs `niter` iterations.
    pub tol: f64,
    /// L2 only: skip points whose nearest centroid provably did not change
    /// (Hamerly bounds). Same result as plain Lloyd up to rounding at
    /// near-ties; default on.
    pub bounds: bool,
}

impl Default for KMeansParams {
    fn default() -> Self {
        Self {
            k: 256,
            niter: 20,
            max_points_per_centroid: 256,
            min_points_per_centroid: 39,
            init: Init::Random,
            tol: 0.0,
            bounds: true,
        }
    }
}

/// The outcome of flat k-means.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansResult {
    /// k × dim, row-major (unit rows in spherical mode).
    pub centroids: Vec<f32>,
    /// Sum of the metric's distances of the training points to their assigned
    /// centroid, from the last assignment (L2: sum of squared distances).
    pub objective: f64,
    /// Objective after each iteration.
    pub objective_history: Vec<f64>,
    /// Lloyd iterations run.
    pub iterations: usize,
    /// k·Σh²/(Σh)² over the last assignment's cluster sizes h (1 = perfectly even).
    pub imbalance: f64,
    /// Empty clusters repaired by splitting, over all iterations.
    pub splits: usize,
    /// Points actually trained on (after sampling).
    pub train_points: usize,
    /// Set when the sample has fewer than `min_points_per_centroid · k` points.
    pub warning: Option<String>,
}

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
    UnsupportedKernel(assign::Kernel),
}

/// k·Σh²/(Σh)² for cluster sizes `h`.
pub fn imbalance_factor(hist: &[usize]) -> f64 {
    let total: f64 = hist.iter().map(|&h| h as f64).sum();
    if total == 0.0 {
        return 1.0;
    }
    let sq: f64 = hist.iter().map(|&h| (h as f64) * (h as f64)).sum();
    hist.len() as f64 * sq / (total * total)
}
