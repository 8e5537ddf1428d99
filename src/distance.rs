//! Distance metrics (squared L2, inner product, cosine) on simsimd kernels.
//!
//! Every metric is oriented so that **smaller is closer**. [`Metric::distance`]
//! is the unchecked hot path (one simsimd call per pair, runtime-dispatched to
//! the best SIMD level of the CPU); [`Metric::try_distance`] and
//! [`check_matrix`] are the checked entry points used at API boundaries, where
//! a length mismatch or a NaN/∞ is a typed [`DistanceError`], never a silently
//! wrong number. The same API serves `f16` ([`Metric::distance_f16`]) and `i8`
//! ([`Metric::distance_i8`]) codes. Batched many-to-many distances use the
//! blocked-GEMM kernel in [`crate::kmeans::assign`].

use serde::{Deserialize, Serialize};
use simsimd::SpatialSimilarity;
use thiserror::Error;

/// A distance metric. Every metric is oriented so that **smaller is closer**:
/// `L2` is the squared Euclidean distance, `InnerProduct` is `-dot(a, b)`,
/// `Cosine` is `1 - cos(a, b)` (1 when either vector is zero, 0 when both are).
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
    /// Distance between two vectors of equal length (unchecked hot path).
    ///
    /// Lengths are checked only with debug assertions; in release a length
    /// mismatch yields NaN (never a panic, never a plausible number). Use
    /// [`Metric::try_distance`] on untrusted input.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        let d = match self {
            Metric::L2 => f32::l2sq(a, b),
            Metric::InnerProduct => f32::dot(a, b).map(|d| -d),
            Metric::Cosine => <f32 as SpatialSimilarity>::cos(a, b),
        };
        d.map_or(f32::NAN, |d| d as f32)
    }

    /// Checked distance: both vectors must have length `dim` and hold only
    /// finite values.
    ///
    /// # Errors
    /// [`DistanceError::DimensionMismatch`] when a length differs from `dim`,
    /// [`DistanceError::NonFinite`] at the first NaN or ±∞ (in `a`, then `b`).
    pub fn try_distance(self, a: &[f32], b: &[f32], dim: usize) -> Result<f32, DistanceError> {
        check_matrix(a, dim)?;
        check_matrix(b, dim)?;
        if a.len() != dim || b.len() != dim {
            let actual = if a.len() != dim { a.len() } else { b.len() };
            return Err(DistanceError::DimensionMismatch {
                expected: dim,
                actual,
            });
        }
        Ok(self.distance(a, b))
    }

    /// Distance between two `f16` vectors of equal length (unchecked hot path,
    /// as [`Metric::distance`]).
    #[inline]
    pub fn distance_f16(self, a: &[half::f16], b: &[half::f16]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        let (a, b) = (as_simsimd_f16(a), as_simsimd_f16(b));
        let d = match self {
            Metric::L2 => simsimd::f16::l2sq(a, b),
            Metric::InnerProduct => simsimd::f16::dot(a, b).map(|d| -d),
            Metric::Cosine => <simsimd::f16 as SpatialSimilarity>::cos(a, b),
        };
        d.map_or(f32::NAN, |d| d as f32)
    }

    /// Distance between two `i8` code vectors of equal length (unchecked hot
    /// path, as [`Metric::distance`]); exact integer arithmetic for L2 and IP.
    #[inline]
    pub fn distance_i8(self, a: &[i8], b: &[i8]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        let d = match self {
            Metric::L2 => i8::l2sq(a, b),
            Metric::InnerProduct => i8::dot(a, b).map(|d| -d),
            Metric::Cosine => <i8 as SpatialSimilarity>::cos(a, b),
        };
        d.map_or(f32::NAN, |d| d as f32)
    }

    /// Distances from one query to every row of a row-major `data` matrix of
    /// width `query.len()`, written to `out` (one per row).
    ///
    /// # Errors
    /// [`DistanceError::DimensionMismatch`] when `data` is not a whole number
    /// of rows or `out` has the wrong length; [`DistanceError::NonFinite`]
    /// when the query or the data hold a NaN or ±∞.
    pub fn distances_to(
        self,
        query: &[f32],
        data: &[f32],
        out: &mut [f32],
    ) -> Result<(), DistanceError> {
        let dim = query.len();
        let rows = check_matrix(data, dim)?;
        check_matrix(query, dim)?;
        if out.len() != rows {
            return Err(DistanceError::DimensionMismatch {
                expected: rows,
                actual: out.len(),
            });
        }
        for (o, row) in out.iter_mut().zip(data.chunks_exact(dim)) {
            *o = self.distance(query, row);
        }
        Ok(())
    }

    /// Whether k-means under this metric is spherical (centroids normalised
    /// to unit length, assignment by largest inner product).
    pub fn is_spherical(self) -> bool {
        !matches!(self, Metric::L2)
    }
}

/// Views `half::f16` values as simsimd's bit-identical `f16`.
fn as_simsimd_f16(x: &[half::f16]) -> &[simsimd::f16] {
    // SAFETY: both types are `#[repr(transparent)]` wrappers around the same
    // IEEE-754 binary16 `u16` bits, so size, alignment and validity agree.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<simsimd::f16>(), x.len()) }
}

/// Checks a row-major matrix of width `dim`: non-zero width, a whole number
/// of rows, every value finite. Returns the number of rows.
///
/// # Errors
/// [`DistanceError::ZeroDimension`] for `dim == 0`,
/// [`DistanceError::DimensionMismatch`] when `data.len()` is not a multiple of
/// `dim` (`actual` is the length of the incomplete last row),
/// [`DistanceError::NonFinite`] at the first NaN or ±∞ (flat position).
pub fn check_matrix(data: &[f32], dim: usize) -> Result<usize, DistanceError> {
    if dim == 0 {
        return Err(DistanceError::ZeroDimension);
    }
    if !data.len().is_multiple_of(dim) {
        return Err(DistanceError::DimensionMismatch {
            expected: dim,
            actual: data.len() % dim,
        });
    }
    if let Some(position) = data.iter().position(|v| !v.is_finite()) {
        return Err(DistanceError::NonFinite {
            position,
            value: data[position],
        });
    }
    Ok(data.len() / dim)
}

/// Squared L2 norm of every row of a row-major matrix of width `dim`.
pub fn squared_norms(data: &[f32], dim: usize) -> Vec<f32> {
    data.chunks_exact(dim)
        .map(|r| f32::dot(r, r).map_or(f32::NAN, |d| d as f32))
        .collect()
}

/// Scales every row of a row-major matrix of width `dim` to unit L2 norm;
/// zero rows stay zero.
pub fn normalize_rows(data: &mut [f32], dim: usize) {
    for row in data.chunks_exact_mut(dim) {
        let norm = f32::dot(row, row).map_or(0.0, f64::sqrt);
        if norm > 0.0 {
            let inv = (1.0 / norm) as f32;
            row.iter_mut().for_each(|v| *v *= inv);
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
    #[error("vector dimension must be at least 1")]
    ZeroDimension,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const DIMS: [usize; 7] = [1, 3, 17, 128, 384, 768, 1000];

    /// f64 reference and the sum of the absolute values of its terms.
    fn reference(metric: Metric, a: &[f32], b: &[f32]) -> (f64, f64) {
        let (a, b): (Vec<f64>, Vec<f64>) = (
            a.iter().map(|&x| x as f64).collect(),
            b.iter().map(|&x| x as f64).collect(),
        );
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let abs_dot: f64 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
        match metric {
            Metric::L2 => {
                let s: f64 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
                (s, s)
            }
            Metric::InnerProduct => (-dot, abs_dot),
            Metric::Cosine => {
                let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
                let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
                (1.0 - dot / (na * nb), abs_dot / (na * nb))
            }
        }
    }

    /// The stated bound: summing `dim` f32 terms in any order errs by at most
    /// `(dim + 2)·ε_f32·Σ|terms|` (ε = 2⁻²³, twice the unit roundoff, covering
    /// the product/difference rounding). Cosine adds the norm/sqrt rounding:
    /// we allow a further 1e-6 absolute.
    fn bound(metric: Metric, dim: usize, sum_abs: f64) -> f64 {
        let b = (dim as f64 + 2.0) * f32::EPSILON as f64 * sum_abs;
        if metric == Metric::Cosine {
            b + 1e-6
        } else {
            b
        }
    }

    #[test]
    fn f32_kernels_match_f64_reference_within_stated_bound() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                for _ in 0..20 {
                    let a: Vec<f32> = (0..dim).map(|_| rng.random_range(-10.0..10.0)).collect();
                    let b: Vec<f32> = (0..dim).map(|_| rng.random_range(-10.0..10.0)).collect();
                    let got = metric.distance(&a, &b) as f64;
                    let (want, sum_abs) = reference(metric, &a, &b);
                    // The f64 → f32 result rounding adds half an ulp of the value.
                    let tol = bound(metric, dim, sum_abs) + want.abs() * f32::EPSILON as f64;
                    assert!(
                        (got - want).abs() <= tol,
                        "{metric:?} dim {dim}: got {got}, want {want}, tol {tol}"
                    );
                }
            }
        }
    }

    #[test]
    fn f16_and_i8_kernels_match_reference() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                let a: Vec<i8> = (0..dim).map(|_| rng.random_range(-100..=100)).collect();
                let b: Vec<i8> = (0..dim).map(|_| rng.random_range(-100..=100)).collect();
                let (af, bf): (Vec<f32>, Vec<f32>) = (
                    a.iter().map(|&x| x as f32).collect(),
                    b.iter().map(|&x| x as f32).collect(),
                );
                let (want, sum_abs) = reference(metric, &af, &bf);
                let tol = bound(metric, dim, sum_abs) + 1e-3 * want.abs().max(1e-3);
                let got = metric.distance_i8(&a, &b) as f64;
                assert!(
                    (got - want).abs() <= tol,
                    "i8 {metric:?} dim {dim}: got {got}, want {want}"
                );
                // Small integers are exact in f16, so the same reference holds.
                let (ah, bh): (Vec<half::f16>, Vec<half::f16>) = (
                    af.iter().map(|&x| half::f16::from_f32(x / 16.0)).collect(),
                    bf.iter().map(|&x| half::f16::from_f32(x / 16.0)).collect(),
                );
                let (af, bf): (Vec<f32>, Vec<f32>) = (
                    ah.iter().map(|x| x.to_f32()).collect(),
                    bh.iter().map(|x| x.to_f32()).collect(),
                );
                let (want, sum_abs) = reference(metric, &af, &bf);
                let got = metric.distance_f16(&ah, &bh) as f64;
                let tol = bound(metric, dim, sum_abs) + 1e-3 * want.abs().max(1e-3);
                assert!(
                    (got - want).abs() <= tol,
                    "f16 {metric:?} dim {dim}: got {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn checked_distance_rejects_mismatch_and_non_finite() {
        let m = Metric::L2;
        assert_eq!(
            m.try_distance(&[1.0, 2.0], &[1.0], 2),
            Err(DistanceError::DimensionMismatch {
                expected: 2,
                actual: 1
            })
        );
        assert_eq!(
            m.try_distance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 2),
            Err(DistanceError::DimensionMismatch {
                expected: 2,
                actual: 1
            })
        );
        assert!(matches!(
            m.try_distance(&[1.0, f32::NAN], &[1.0, 2.0], 2),
            Err(DistanceError::NonFinite { position: 1, .. })
        ));
        assert!(
            matches!(m.try_distance(&[1.0, 2.0], &[f32::INFINITY, 2.0], 2), Err(DistanceError::NonFinite { position: 0, value }) if value == f32::INFINITY)
        );
        assert_eq!(
            m.try_distance(&[], &[], 0),
            Err(DistanceError::ZeroDimension)
        );
        assert_eq!(m.try_distance(&[1.0, 2.0], &[3.0, 5.0], 2), Ok(13.0));
    }

    #[test]
    fn unchecked_mismatch_is_nan_in_release() {
        if cfg!(debug_assertions) {
            return; // the debug assertion fires instead
        }
        assert!(Metric::L2.distance(&[1.0, 2.0], &[1.0]).is_nan());
    }

    #[test]
    fn distances_to_checks_shapes_and_matches_pairwise() {
        let q = [1.0, 0.0];
        let data = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        let mut out = [0.0; 3];
        Metric::Cosine.distances_to(&q, &data, &mut out).unwrap();
        // simsimd's cosine uses a refined reciprocal square root: ~1e-7 off.
        assert!(
            out.iter()
                .zip([0.0, 1.0, 2.0])
                .all(|(a, b)| (a - b).abs() < 1e-6),
            "{out:?}"
        );
        Metric::InnerProduct
            .distances_to(&q, &data, &mut out)
            .unwrap();
        assert_eq!(out, [-1.0, 0.0, 1.0]);
        let mut short = [0.0; 2];
        assert_eq!(
            Metric::L2.distances_to(&q, &data, &mut short),
            Err(DistanceError::DimensionMismatch {
                expected: 3,
                actual: 2
            })
        );
        assert!(matches!(
            Metric::L2.distances_to(&q, &data[..5], &mut out),
            Err(DistanceError::DimensionMismatch {
                expected: 2,
                actual: 1
            })
        ));
    }

    #[test]
    fn normalize_rows_gives_unit_norm_and_keeps_zero_rows() {
        let mut m = vec![3.0, 4.0, 0.0, 0.0];
        normalize_rows(&mut m, 2);
        assert_eq!(m, vec![0.6, 0.8, 0.0, 0.0]);
        assert_eq!(squared_norms(&m, 2), vec![1.0, 0.0]);
    }
}
