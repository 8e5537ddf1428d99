//! k-means training: sampling, initialisation, Lloyd iterations, empty-cluster
//! repair, and the two-level hierarchy with its `cid-offsets`. Pure compute on
//! row-major `f32` slices plus a `dim`: no IO, no clock, and the random
//! generator is passed in, so the same seed gives bit-identical centroids (for
//! any thread count: parallel work is split into fixed-size tiles).
//!
//! - [`train`] (in `flat`): flat k-means, FAISS conventions (sampling, random
//!   init, niter 20, empty-cluster split).
//! - [`Hierarchy::train`] (in `hierarchy`): R roots, leaves per root in
//!   proportion to the root's share of the sample, trained in parallel;
//!   [`Hierarchy::train_bottom_up`]: flat k-means leaves, then roots over them.
//! - [`assign::nearest`]: the blocked-GEMM nearest-centroid kernel that the
//!   build job reuses.
//! - [`LeafPanels`] (in `leaf_panels`): the leaves in panels of 16, one
//!   query's distance to each of them: how the probe and the calibration
//!   rank lists.
//!
//! `docs/kmeans.md` describes the algorithm choices.

pub mod assign;
mod error;
mod flat;
mod hierarchy;
mod kernel;
mod leaf_panels;
pub mod sample;

pub use error::KMeansError;
pub use flat::{FULL_ITERATIONS, Init, KMeansParams, KMeansResult, imbalance_factor, train};
pub use hierarchy::{AssignMode, Hierarchy, HierarchyParams, HierarchyReport, Leaves};
pub use leaf_panels::LeafPanels;
