//! Distance metrics (squared L2, inner product, cosine) on simsimd.
//! SKELETON: issue 3 (k-means helper) owns this file and replaces the scalar
//! bodies below with simsimd kernels, checked entry points and tests. The
//! public names `Metric`, `Metric::distance`, `DistanceError` are shared
//! contracts that other modules already call.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A distance metric. Every metric is oriented so that **smaller is closer**:
/// `L2` is the squared Euclidean distance, `InnerProduct` is `-dot(a, b)`,
/// `Cosine` is `1 - cos(a, b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    #[default]
    L2,
    #[serde(rename = "ip")]
    InnerProduct,
    Cosine,
}

impl Metric {
    /// Distance between two vectors of equal length (unchecked hot path;
    /// lengths are checked only with debug assertions).
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        match self {
            Metric::L2 => a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum(),
            Metric::InnerProduct => -a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>(),
            Metric::Cosine => {
                let (mut d, mut na, mut nb) = (0f32, 0f32, 0f32);
                for (x, y) in a.iter().zip(b) {
                    d += x * y;
                    na += x * x;
                    nb += y * y;
                }
                1.0 - d / (na.sqrt() * nb.sqrt())
            }
        }
    }
}

/// Errors at the distance API boundary.
#[derive(Debug, Error, PartialEq)]
pub enum DistanceError {
    #[error("dimension mismatch: expected {expected}, got {actual}")]
    DimensionMismatch { expected: usize, actual: usize },
    #[error("non-finite value {value} at position {position}")]
    NonFinite { position: usize, value: f32 },
}
