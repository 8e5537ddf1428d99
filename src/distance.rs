//! Distance metrics (squared L2, inner product, cosine) on simsimd kernels.
//!
//! Every metric is oriented so that **smaller is closer**. [`Metric::distance`]
//! is the exact metric on raw vectors; [`Metric::prepared_distance`] is the
//! unchecked hot path of the scan and the centroid selection, on vectors
//! [`Metric::prepare`]d once (unit-normalised under cosine, so that cosine is
//! `1 − dot`). [`Metric::try_distance`] and [`check_matrix`] are the checked
//! entry points used at API boundaries, where a length mismatch or a NaN/∞ is
//! a typed [`DistanceError`], never a silently wrong number.
//!
//! # Precision, per kernel
//!
//! simsimd picks a SIMD path at run time ([`simd_path`] names it), so the
//! same call may run Haswell (AVX2) code on one machine and Sapphire Rapids
//! (AVX-512 FP16) code on the next. Each kernel's precision is therefore a
//! documented property that holds on **every** path, and the tests derive
//! their tolerances from it:
//!
//! | kernel | accumulation (every path) | error bound |
//! |---|---|---|
//! | f32 `l2sq`, `dot` (simsimd) | f32 lanes or wider, reduced in f64 | `(d + 2)·ε₃₂·Σ|terms|` |
//! | f32 cosine ([`Metric::distance`]) | f64, scalar lanes (no underflow for any finite f32) | `(d + 2)·ε₆₄·Σ|terms|`, then one f32 rounding |
//! | prepared cosine `1 − dot` | as f32 `dot`, on unit vectors | `(d + 2)·ε₃₂·Σ|aᵢbᵢ|` + the normalisation's `2·ε₃₂` |
//! | f16 (all metrics) | widened exactly to f32, then the f32 kernels | as f32 |
//! | i8 `l2sq`, `dot` (simsimd) | integers (i32) on every path | exact for `d < 2¹⁷` |
//! | i8 cosine | the exact integer sums, combined in f64 | one f64 `sqrt` and division |
//!
//! simsimd's own f16 kernels are not used: on AVX-512 FP16 CPUs they
//! accumulate in f16 (about 3 significant digits), and its cosine kernels
//! use a 12-bit reciprocal-square-root estimate and f32 norms that underflow
//! for vectors with components near 1e-20. ε₃₂ = 2⁻²³, ε₆₄ = 2⁻⁵².
//!
//! Batched many-to-many distances use the blocked-GEMM kernel in
//! [`crate::kmeans::assign`].

use half::slice::HalfFloatSliceExt;
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

impl std::str::FromStr for Metric {
    type Err = String;

    /// `l2`, `ip` (or `inner-product`) or `cosine`, as `index.json` spells them.
    fn from_str(s: &str) -> Result<Metric, String> {
        match s {
            "l2" => Ok(Metric::L2),
            "ip" | "inner-product" => Ok(Metric::InnerProduct),
            "cosine" => Ok(Metric::Cosine),
            _ => Err(format!("unknown metric {s:?}: expected l2, ip or cosine")),
        }
    }
}

impl Metric {
    /// Distance between two raw vectors of equal length (unchecked).
    ///
    /// Cosine is computed in f64 from `a·b`, `‖a‖²` and `‖b‖²`, so vectors of
    /// any finite magnitude (1e-30 as well as 1e30) get their true cosine; it
    /// is 1 when exactly one vector is zero and 0 when both are. The scan
    /// uses [`Metric::prepared_distance`] instead.
    ///
    /// Lengths are checked only with debug assertions; in release a length
    /// mismatch yields NaN (never a panic, never a plausible number). Use
    /// [`Metric::try_distance`] on untrusted input.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        if a.len() != b.len() {
            return f32::NAN;
        }
        match self {
            Metric::L2 | Metric::InnerProduct => self.prepared_distance(a, b),
            Metric::Cosine => {
                let (ab, aa, bb) = dot3_f64(a, b);
                cosine_from_sums(ab, aa, bb)
            }
        }
    }

    /// The scan's distance between two vectors [`Metric::prepare`]d for this
    /// metric (unchecked hot path, one simsimd call): `‖a − b‖²`, `−a·b`, or
    /// under cosine `1 − a·b`, which is the cosine distance because prepared
    /// vectors have unit length.
    ///
    /// A length mismatch yields NaN in release (debug-asserted).
    #[inline]
    pub fn prepared_distance(self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        let d = match self {
            Metric::L2 => f32::l2sq(a, b),
            Metric::InnerProduct => f32::dot(a, b).map(|d| -d),
            Metric::Cosine => f32::dot(a, b).map(|d| 1.0 - d),
        };
        d.map_or(f32::NAN, |d| d as f32)
    }

    /// Prepares a vector for [`Metric::prepared_distance`]: under cosine it
    /// is scaled to unit length (see [`normalize`]); other metrics leave it
    /// unchanged. Stored vectors are prepared at build time, queries at
    /// search time.
    ///
    /// # Errors
    /// [`DistanceError::NoDirection`] under cosine when every component is
    /// zero: such a vector has no cosine to anything.
    pub fn prepare(self, v: &mut [f32]) -> Result<(), DistanceError> {
        match self {
            Metric::Cosine => normalize(v),
            Metric::L2 | Metric::InnerProduct => Ok(()),
        }
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

    /// Distance between two `f16` vectors of equal length (unchecked, as
    /// [`Metric::distance`]). The values are widened to f32, which is exact,
    /// in blocks on the stack, and the f32 kernels accumulate: f32 precision
    /// on every CPU (simsimd's AVX-512 FP16 kernel would accumulate in f16).
    pub fn distance_f16(self, a: &[half::f16], b: &[half::f16]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        if a.len() != b.len() {
            return f32::NAN;
        }
        const BLOCK: usize = 256;
        let (mut wa, mut wb) = ([0f32; BLOCK], [0f32; BLOCK]);
        let (mut s, mut aa, mut bb) = (0f64, 0f64, 0f64);
        for (ca, cb) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
            let (fa, fb) = (&mut wa[..ca.len()], &mut wb[..cb.len()]);
            ca.convert_to_f32_slice(fa);
            cb.convert_to_f32_slice(fb);
            match self {
                Metric::L2 => s += f32::l2sq(fa, fb).unwrap_or(f64::NAN),
                Metric::InnerProduct => s += f32::dot(fa, fb).unwrap_or(f64::NAN),
                Metric::Cosine => {
                    let (ab, a2, b2) = dot3_f64(fa, fb);
                    (s, aa, bb) = (s + ab, aa + a2, bb + b2);
                }
            }
        }
        match self {
            Metric::L2 => s as f32,
            Metric::InnerProduct => -s as f32,
            Metric::Cosine => cosine_from_sums(s, aa, bb),
        }
    }

    /// Distance between two `i8` code vectors of equal length (unchecked, as
    /// [`Metric::distance`]). `l2sq` and `dot` are exact integer sums on
    /// every simsimd path; cosine combines the exact sums in f64 (simsimd's
    /// own i8 cosine uses a reciprocal-square-root estimate).
    pub fn distance_i8(self, a: &[i8], b: &[i8]) -> f32 {
        debug_assert_eq!(a.len(), b.len());
        if a.len() != b.len() {
            return f32::NAN;
        }
        let sum = |d: Option<f64>| d.unwrap_or(f64::NAN);
        match self {
            Metric::L2 => sum(i8::l2sq(a, b)) as f32,
            Metric::InnerProduct => -sum(i8::dot(a, b)) as f32,
            Metric::Cosine => {
                cosine_from_sums(sum(i8::dot(a, b)), sum(i8::dot(a, a)), sum(i8::dot(b, b)))
            }
        }
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

/// The SIMD path simsimd dispatches to on this CPU, most capable first
/// (`sierra`, `turin`, `sapphire`, `genoa`, `ice`, `skylake`, `haswell` on
/// x86-64; `sve…`, `neon…` on Arm), or `serial`. Logged by the tests so that
/// a failure names the path it ran on.
pub fn simd_path() -> &'static str {
    use simsimd::capabilities as c;
    type Probe = (&'static str, fn() -> bool);
    let paths: [Probe; 15] = [
        ("sierra", c::uses_sierra),
        ("turin", c::uses_turin),
        ("sapphire", c::uses_sapphire),
        ("genoa", c::uses_genoa),
        ("ice", c::uses_ice),
        ("skylake", c::uses_skylake),
        ("haswell", c::uses_haswell),
        ("sve_bf16", c::uses_sve_bf16),
        ("sve_f16", c::uses_sve_f16),
        ("sve_i8", c::uses_sve_i8),
        ("sve", c::uses_sve),
        ("neon_f16", c::uses_neon_f16),
        ("neon_bf16", c::uses_neon_bf16),
        ("neon_i8", c::uses_neon_i8),
        ("neon", c::uses_neon),
    ];
    paths
        .into_iter()
        .find(|(_, uses)| uses())
        .map_or("serial", |(name, _)| name)
}

/// `(a·b, a·a, b·b)` accumulated in f64 over four independent lanes (which
/// the compiler vectorises). Products of finite f32 values neither
/// underflow nor overflow in f64.
fn dot3_f64(a: &[f32], b: &[f32]) -> (f64, f64, f64) {
    let (mut ab, mut aa, mut bb) = ([0f64; 4], [0f64; 4], [0f64; 4]);
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            let (x, y) = (f64::from(x[l]), f64::from(y[l]));
            ab[l] += x * y;
            aa[l] += x * x;
            bb[l] += y * y;
        }
    }
    for (l, (&x, &y)) in ra.iter().zip(rb).enumerate() {
        let (x, y) = (f64::from(x), f64::from(y));
        ab[l] += x * y;
        aa[l] += x * x;
        bb[l] += y * y;
    }
    let sum = |v: [f64; 4]| (v[0] + v[1]) + (v[2] + v[3]);
    (sum(ab), sum(aa), sum(bb))
}

/// `v·v` accumulated in f64 over four lanes, as [`dot3_f64`].
fn sum_squares_f64(v: &[f32]) -> f64 {
    let mut acc = [0f64; 4];
    let chunks = v.chunks_exact(4);
    let rest = chunks.remainder();
    for x in chunks {
        for l in 0..4 {
            acc[l] += f64::from(x[l]) * f64::from(x[l]);
        }
    }
    for (l, &x) in rest.iter().enumerate() {
        acc[l] += f64::from(x) * f64::from(x);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// `1 − a·b / (‖a‖·‖b‖)` from the three sums, clamped to `[0, 2]`: 1 when
/// exactly one vector is zero, 0 when both are.
fn cosine_from_sums(ab: f64, aa: f64, bb: f64) -> f32 {
    match (aa > 0.0, bb > 0.0) {
        (true, true) => (1.0 - ab / (aa.sqrt() * bb.sqrt())).clamp(0.0, 2.0) as f32,
        (false, false) => 0.0,
        _ => 1.0,
    }
}

/// Scales `v` to unit L2 norm. The norm is accumulated in f64, where the
/// squares of finite f32 values neither underflow nor overflow, so a vector
/// of components near 1e-30 (or 1e30) keeps its direction. The result has
/// norm `1 ± 2·ε₃₂`.
///
/// # Errors
/// [`DistanceError::NoDirection`] when every component is zero (or the
/// vector holds a NaN or ±∞, which has no direction either).
pub fn normalize(v: &mut [f32]) -> Result<(), DistanceError> {
    let norm2 = sum_squares_f64(v);
    if !(norm2 > 0.0 && norm2.is_finite()) {
        return Err(DistanceError::NoDirection { norm2 });
    }
    let inv = 1.0 / norm2.sqrt();
    v.iter_mut().for_each(|x| *x = (f64::from(*x) * inv) as f32);
    Ok(())
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
    if let Some(position) = first_non_finite(data) {
        return Err(DistanceError::NonFinite {
            position,
            value: data[position],
        });
    }
    Ok(data.len() / dim)
}

/// Values a task of [`first_non_finite`] scans: below it, one scan.
const CHECK_RUN: usize = 1 << 16;

/// The position of the first NaN or infinite value of `data`: runs of
/// [`CHECK_RUN`] values scanned on rayon (a k-means sample is hundreds of
/// MB), the first run holding one searched again.
pub(crate) fn first_non_finite(data: &[f32]) -> Option<usize> {
    use rayon::prelude::*;
    let bad = |v: &f32| !v.is_finite();
    if data.len() <= CHECK_RUN {
        return data.iter().position(bad);
    }
    let run = data
        .par_chunks(CHECK_RUN)
        .position_first(|run| run.iter().any(bad))?;
    let start = run * CHECK_RUN;
    data[start..].iter().position(bad).map(|i| start + i)
}

/// Hints the CPU to bring `values` into its caches, a line at a time (no
/// effect elsewhere than x86-64): what a loop over scattered rows calls a
/// few rows ahead of the one it reads.
#[inline(always)]
pub fn prefetch<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in values.chunks(64 / size_of::<T>().max(1)) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of x86-64; a prefetch reads nothing and
        // cannot fault, and the address is inside `values`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

/// Squared L2 norm of every row of a row-major matrix of width `dim`.
pub fn squared_norms(data: &[f32], dim: usize) -> Vec<f32> {
    data.chunks_exact(dim).map(squared_norm).collect()
}

/// The squared L2 norm of one row, as [`squared_norms`] computes it.
#[inline]
pub fn squared_norm(row: &[f32]) -> f32 {
    f32::dot(row, row).map_or(f32::NAN, |d| d as f32)
}

/// Scales every row of a row-major matrix of width `dim` to unit L2 norm
/// (as [`normalize`]); zero rows stay zero.
pub fn normalize_rows(data: &mut [f32], dim: usize) {
    for row in data.chunks_exact_mut(dim) {
        // A zero row has no direction and stays as it is.
        let _ = normalize(row);
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
    #[error(
        "the vector has no direction (squared norm {norm2}): cosine distance is undefined for a zero vector"
    )]
    NoDirection { norm2: f64 },
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

    const EPS32: f64 = f32::EPSILON as f64;
    const EPS64: f64 = f64::EPSILON;

    /// The f32 kernels' documented bound (module docs): summing `dim` terms
    /// in any order with f32 or wider accumulators errs by at most
    /// `(dim + 2)·ε₃₂·Σ|terms|` (ε = 2⁻²³ is twice the unit roundoff, which
    /// also covers the product/difference rounding), and the f64 → f32
    /// result rounding adds half an ulp of the value.
    fn f32_bound(dim: usize, sum_abs: f64, want: f64) -> f64 {
        (dim as f64 + 2.0) * EPS32 * sum_abs + want.abs() * EPS32 / 2.0
    }

    /// The f64 cosine's bound: f64 sums, one f64 sqrt, division and `1 − x`
    /// (a few ε₆₄), then the f32 rounding of the result.
    fn cosine_f64_bound(dim: usize, sum_abs_normalised: f64, want: f64) -> f64 {
        (dim as f64 + 8.0) * EPS64 * (1.0 + sum_abs_normalised) + want.abs() * EPS32 / 2.0
    }

    fn random(rng: &mut ChaCha8Rng, dim: usize, scale: f32) -> Vec<f32> {
        (0..dim)
            .map(|_| rng.random_range(-10.0f32..10.0) * scale)
            .collect()
    }

    #[test]
    fn f32_kernels_match_f64_reference_within_stated_bound() {
        eprintln!("simsimd path: {}", simd_path());
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                for _ in 0..20 {
                    let (a, b) = (random(&mut rng, dim, 1.0), random(&mut rng, dim, 1.0));
                    let got = metric.distance(&a, &b) as f64;
                    let (want, sum_abs) = reference(metric, &a, &b);
                    let tol = match metric {
                        Metric::Cosine => cosine_f64_bound(dim, sum_abs, want),
                        _ => f32_bound(dim, sum_abs, want),
                    };
                    assert!(
                        (got - want).abs() <= tol,
                        "{metric:?} dim {dim} on {}: got {got}, want {want}, tol {tol}",
                        simd_path()
                    );
                }
            }
        }
    }

    #[test]
    fn prepared_distance_matches_reference_on_prepared_vectors() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                let (mut a, mut b) = (random(&mut rng, dim, 1.0), random(&mut rng, dim, 1.0));
                let (want, sum_abs) = reference(metric, &a, &b);
                metric.prepare(&mut a).unwrap();
                metric.prepare(&mut b).unwrap();
                let got = metric.prepared_distance(&a, &b) as f64;
                // Prepared cosine is `1 − â·b̂` by the f32 dot: its bound on
                // unit vectors, plus each normalisation's 2·ε₃₂ relative
                // error on the dot.
                let tol = f32_bound(dim, sum_abs, want)
                    + if metric == Metric::Cosine {
                        4.0 * EPS32
                    } else {
                        0.0
                    };
                assert!(
                    (got - want).abs() <= tol,
                    "{metric:?} dim {dim} on {}: got {got}, want {want}, tol {tol}",
                    simd_path()
                );
            }
        }
    }

    #[test]
    fn f16_kernels_accumulate_in_f32_on_every_path() {
        eprintln!("simsimd path: {}", simd_path());
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                // Values that f16 holds exactly, so the reference is exact.
                let (ah, bh): (Vec<half::f16>, Vec<half::f16>) = (
                    (0..dim)
                        .map(|_| half::f16::from_f32(rng.random_range(-100i32..=100) as f32 / 16.0))
                        .collect(),
                    (0..dim)
                        .map(|_| half::f16::from_f32(rng.random_range(-100i32..=100) as f32 / 16.0))
                        .collect(),
                );
                let (af, bf): (Vec<f32>, Vec<f32>) = (
                    ah.iter().map(|x| x.to_f32()).collect(),
                    bh.iter().map(|x| x.to_f32()).collect(),
                );
                let (want, sum_abs) = reference(metric, &af, &bf);
                let got = metric.distance_f16(&ah, &bh) as f64;
                let tol = match metric {
                    Metric::Cosine => cosine_f64_bound(dim, sum_abs, want) + dim as f64 * EPS32,
                    _ => f32_bound(dim, sum_abs, want),
                };
                assert!(
                    (got - want).abs() <= tol,
                    "f16 {metric:?} dim {dim} on {}: got {got}, want {want}, tol {tol}",
                    simd_path()
                );
            }
        }
    }

    #[test]
    fn i8_kernels_are_exact_integer_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(10);
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            for dim in DIMS {
                let a: Vec<i8> = (0..dim).map(|_| rng.random_range(-128..=127)).collect();
                let b: Vec<i8> = (0..dim).map(|_| rng.random_range(-128..=127)).collect();
                let (af, bf): (Vec<f32>, Vec<f32>) = (
                    a.iter().map(|&x| x as f32).collect(),
                    b.iter().map(|&x| x as f32).collect(),
                );
                let (want, sum_abs) = reference(metric, &af, &bf);
                let got = metric.distance_i8(&a, &b) as f64;
                // Exact sums: only the final f32 rounding (and for cosine the
                // f64 combination) remain.
                let tol = match metric {
                    Metric::Cosine => cosine_f64_bound(dim, sum_abs, want),
                    _ => want.abs() * EPS32 / 2.0,
                };
                assert!(
                    (got - want).abs() <= tol,
                    "i8 {metric:?} dim {dim} on {}: got {got}, want {want}, tol {tol}",
                    simd_path()
                );
            }
        }
    }

    #[test]
    fn cosine_keeps_the_direction_of_tiny_and_huge_vectors() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for dim in [3, 128, 384] {
            let (a, b) = (random(&mut rng, dim, 1.0), random(&mut rng, dim, 1.0));
            let (want, sum_abs) = reference(Metric::Cosine, &a, &b);
            for scale in [1e-30f32, 1e-20, 1e20, 1e30] {
                let tiny: Vec<f32> = a.iter().map(|x| x * scale).collect();
                let got = Metric::Cosine.distance(&tiny, &b) as f64;
                // Scaling by a power of ten rounds each component once more.
                let tol = cosine_f64_bound(dim, sum_abs, want) + 2.0 * EPS32;
                assert!(
                    (got - want).abs() <= tol,
                    "dim {dim} scale {scale}: got {got}, want {want}"
                );
                let mut prepared = tiny.clone();
                Metric::Cosine.prepare(&mut prepared).unwrap();
                let norm = prepared.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>();
                assert!(
                    (norm.sqrt() - 1.0).abs() <= 2.0 * EPS32,
                    "scale {scale}: {norm}"
                );
            }
        }
        // The reported failure: a row near 1e-30 never comes first at 0.
        let q = [1.0f32, 0.0, 0.0];
        let tiny = [0.0f32, 1e-30, 0.0];
        assert_eq!(Metric::Cosine.distance(&q, &tiny), 1.0);
    }

    #[test]
    fn a_zero_vector_has_no_direction() {
        let mut zero = vec![0.0f32; 8];
        assert_eq!(
            Metric::Cosine.prepare(&mut zero),
            Err(DistanceError::NoDirection { norm2: 0.0 })
        );
        let mut subnormal = vec![f32::from_bits(1); 8];
        Metric::Cosine.prepare(&mut subnormal).unwrap();
        assert!((subnormal[0] - (1.0 / 8f32.sqrt())).abs() <= f32::EPSILON);
        assert_eq!(Metric::L2.prepare(&mut zero), Ok(()));
        assert_eq!(Metric::Cosine.distance(&zero, &[1.0; 8]), 1.0);
        assert_eq!(Metric::Cosine.distance(&zero, &zero), 0.0);
    }

    /// A matrix past one scan's run is checked in runs on rayon: still the
    /// first non-finite value by position, wherever the runs split.
    #[test]
    fn check_matrix_names_the_first_non_finite_value_of_a_large_matrix() {
        let len = 3 * CHECK_RUN + 7;
        assert_eq!(check_matrix(&vec![1.0; len], 1), Ok(len));
        for bad in [0, CHECK_RUN - 1, CHECK_RUN, 2 * CHECK_RUN + 5, len - 1] {
            let mut data = vec![1.0f32; len];
            data[bad] = f32::NEG_INFINITY;
            // A later one, in the same run and in the last.
            for later in [bad + 1, len - 1]
                .into_iter()
                .filter(|&l| l > bad && l < len)
            {
                data[later] = f32::NAN;
            }
            assert_eq!(
                check_matrix(&data, 1),
                Err(DistanceError::NonFinite {
                    position: bad,
                    value: f32::NEG_INFINITY
                }),
                "first at {bad}"
            );
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
