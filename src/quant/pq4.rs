//! `pq4fs`: product quantisation with 16 centroids (4 bits) per pair of
//! dimensions, scored by the fast-scan kernel (`fastscan.rs`).
//!
//! The residual r is cut into `m` sub-vectors of [`SUB_DIMS`] (= 2)
//! consecutive dimensions, `m = dim / 2` rounded up to an even number (a
//! missing dimension reads as 0). Sub-quantiser s has its own 16 centroids
//! `C_s[0..16]` (2-d); a code keeps the index of the nearest one (squared
//! distance in f32 in a fixed order, the first on ties), so r reads back as
//! `r̂ = (C_0[u_0], …, C_{m−1}[u_{m−1}])`.
//!
//! **Training** ([`Pq4::train`]): per sub-quantiser, Lloyd's k-means on the
//! sample's 2-d sub-vectors (at most [`TRAIN_POINTS`] of them), seeded from
//! 16 distinct sample points drawn with the build seed, [`TRAIN_ITERATIONS`]
//! iterations, means summed in f64 in row order. A centroid that loses every
//! point keeps its place. Deterministic for the same sample and seed.
//!
//! **Scoring**: `<q, r̂> = Σ_s <q_s, C_s[u_s]>`: one table of 16 entries per
//! sub-quantiser, built once per query for every list, since the list's
//! own term is in the code: the header's `factor` bytes hold the list term
//! `‖r̂‖² + 2·<c, r̂>` (c the leaf centroid; f64 sums, rounded once), so
//! under L2 the distance to the reconstruction is
//! `‖q − c − r̂‖² = ‖q − c‖² + list term − 2·<q, r̂>`. Like FAISS's PQ, the
//! estimate is the distance to the reconstruction (its error near a true
//! neighbour is of the order of `‖r − r̂‖²`), not `‖r‖²` with an estimated
//! inner product (whose error `2·<q − c, r − r̂>` is of the first order).

use super::error::QuantError;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// Dimensions per sub-quantiser.
pub const SUB_DIMS: usize = 2;
/// Centroids per sub-quantiser (4 bits).
pub const CENTROIDS: usize = 16;
/// Most sample rows a sub-quantiser trains on: 512 per centroid (FAISS
/// trains a PQ on 256 per centroid, 4,096).
pub const TRAIN_POINTS: usize = 8_192;
/// Lloyd iterations per sub-quantiser.
pub const TRAIN_ITERATIONS: usize = 25;

/// Sub-quantisers of a `dim`-dimensional code: `dim / 2` rounded up to even.
pub fn sub_quantizers(dim: usize) -> usize {
    dim.div_ceil(SUB_DIMS).next_multiple_of(2)
}

/// The trained centroids: `m × 16 × 2` f32, sub-quantiser-major.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Pq4 {
    dim: usize,
    centroids: Vec<f32>,
}

impl Pq4 {
    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn centroids(&self) -> &[f32] {
        &self.centroids
    }

    /// Sub-quantisers.
    pub(crate) fn m(&self) -> usize {
        sub_quantizers(self.dim)
    }

    /// From stored centroids: `sub_quantizers(dim) × 16 × 2` finite values.
    pub(crate) fn from_centroids(dim: usize, centroids: Vec<f32>) -> Result<Pq4, QuantError> {
        if dim == 0 {
            return Err(QuantError::ZeroDim);
        }
        let expected = sub_quantizers(dim) * CENTROIDS * SUB_DIMS;
        if centroids.len() != expected {
            return Err(QuantError::CodebookLength {
                dim,
                len: centroids.len(),
                expected,
            });
        }
        if let Some(index) = centroids.iter().position(|x| !x.is_finite()) {
            return Err(QuantError::NonFiniteCentroid {
                index,
                value: centroids[index],
            });
        }
        Ok(Pq4 { dim, centroids })
    }

    /// Trains on row-major residuals (`n × dim`, finite, n ≥ 1): on their
    /// [`training_rows`] (all of them when `n ≤` [`TRAIN_POINTS`], so
    /// training on those rows alone gives the same centroids).
    pub(crate) fn train(residuals: &[f32], dim: usize, seed: u64) -> Result<Pq4, QuantError> {
        super::training_sample::check_sample("pq4fs", residuals, dim)?;
        let rows = training_rows(residuals.len() / dim, seed);
        let m = sub_quantizers(dim);
        let centroids: Vec<f32> = (0..m)
            .into_par_iter()
            .flat_map_iter(|s| {
                let points: Vec<[f32; 2]> = rows
                    .iter()
                    .map(|&r| sub_vector(&residuals[r * dim..(r + 1) * dim], s))
                    .collect();
                lloyd_2d(&points, seed.wrapping_add(s as u64 + 1))
                    .into_iter()
                    .flatten()
            })
            .collect();
        Pq4::from_centroids(dim, centroids)
    }

    /// Writes the `m / 2` payload bytes of `residual` (byte p: sub-quantiser
    /// 2p in the low nibble, 2p+1 in the high) and returns the list term
    /// `‖r̂‖² + 2·<leaf, r̂>`.
    ///
    /// The nearest centroids are found by [`nearest`] or, where the CPU has
    /// AVX-512F, by [`nearest_avx512`], which returns the same index.
    pub(crate) fn encode(&self, residual: &[f32], leaf: &[f32], payload: &mut [u8]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if super::kernels::avx512_encode_available() {
            // SAFETY: AVX-512F was detected on this CPU just above.
            return unsafe { self.encode_avx512(residual, leaf, payload) };
        }
        self.encode_with(residual, leaf, payload, nearest)
    }

    /// [`Pq4::encode`] with [`nearest_avx512`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn encode_avx512(&self, residual: &[f32], leaf: &[f32], payload: &mut [u8]) -> f32 {
        // SAFETY: this function only runs where AVX-512F is present.
        self.encode_with(residual, leaf, payload, |c, x| unsafe {
            nearest_avx512(c, x)
        })
    }

    #[inline(always)]
    fn encode_with(
        &self,
        residual: &[f32],
        leaf: &[f32],
        payload: &mut [u8],
        nearest: impl Fn(&[[f32; 2]; CENTROIDS], [f32; 2]) -> u8,
    ) -> f32 {
        let (mut norm2, mut cross) = (0.0f64, 0.0f64);
        for (p, byte) in payload.iter_mut().enumerate() {
            let mut packed = 0u8;
            for half in 0..2 {
                let s = 2 * p + half;
                let code = nearest(self.sub_centroids(s), sub_vector(residual, s));
                let c = &self.sub_centroids(s)[usize::from(code)];
                let l = sub_vector(leaf, s);
                cross += f64::from(l[0]) * f64::from(c[0]) + f64::from(l[1]) * f64::from(c[1]);
                norm2 += f64::from(c[0]) * f64::from(c[0]) + f64::from(c[1]) * f64::from(c[1]);
                packed |= code << (4 * half);
            }
            *byte = packed;
        }
        (norm2 + 2.0 * cross) as f32
    }

    /// The 16 centroids of sub-quantiser `s`.
    fn sub_centroids(&self, s: usize) -> &[[f32; 2]; CENTROIDS] {
        let (points, _) = self.centroids.as_chunks::<2>();
        &points.as_chunks::<CENTROIDS>().0[s]
    }

    /// The `m × 16` tables of `<y_s, C_s[j]>` for a query-side vector y.
    pub(crate) fn tables(&self, y: &[f32], out: &mut [f32]) {
        for (s, table) in out.chunks_exact_mut(CENTROIDS).enumerate() {
            let ys = sub_vector(y, s);
            for (t, c) in table.iter_mut().zip(self.sub_centroids(s)) {
                *t = ys[0] * c[0] + ys[1] * c[1];
            }
        }
    }

    /// `r̂` of a payload (`dim` values).
    pub(crate) fn decode(&self, payload: &[u8], out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            let s = i / SUB_DIMS;
            let code = (payload[s / 2] >> (4 * (s % 2))) & 0x0F;
            *o = self.sub_centroids(s)[usize::from(code)][i % SUB_DIMS];
        }
    }
}

/// Dimensions 2s and 2s+1 of `v` (0 past its end).
#[inline(always)]
fn sub_vector(v: &[f32], s: usize) -> [f32; 2] {
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    [at(SUB_DIMS * s), at(SUB_DIMS * s + 1)]
}

/// Index of the centroid nearest `x` (squared distance in f32, first on
/// ties; a NaN distance never wins, and 0 when none is below infinity).
///
/// Branch-free, so that it vectorises: the 16 distances, their minimum by
/// a tree of selections, then the first index holding it. Each distance is
/// the same `a·a + b·b` in f32 as a scan with `<` would compute, and the
/// minimum of the same values is the same value, so the codes are those of
/// the scan ([`tests::nearest_equals_the_first_strict_minimum`]); a
/// mispredicted branch per sub-quantiser was a fifth of a build's CPU.
#[inline(always)]
fn nearest(centroids: &[[f32; 2]; CENTROIDS], x: [f32; 2]) -> u8 {
    let d: [f32; CENTROIDS] = std::array::from_fn(|j| {
        let (a, b) = (x[0] - centroids[j][0], x[1] - centroids[j][1]);
        let d = a * a + b * b;
        if d.is_nan() { f32::INFINITY } else { d }
    });
    let smaller = |a: f32, b: f32| if b < a { b } else { a };
    let m8: [f32; 8] = std::array::from_fn(|j| smaller(d[j], d[j + 8]));
    let m4: [f32; 4] = std::array::from_fn(|j| smaller(m8[j], m8[j + 4]));
    let min = smaller(smaller(m4[0], m4[2]), smaller(m4[1], m4[3]));
    let at = d
        .iter()
        .enumerate()
        .fold(0u32, |mask, (j, &v)| mask | (u32::from(v == min) << j));
    // `min` is one of the 16 (none is NaN): `at` has a bit set below 16.
    at.trailing_zeros() as u8
}

/// 16 2-d pairs as two registers: every pair's first value, then every
/// pair's second, in pair order.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
#[inline]
unsafe fn split_pairs_avx512(
    pairs: &[[f32; 2]; 16],
) -> (std::arch::x86_64::__m512, std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let flat = pairs.as_flattened();
    // SAFETY: `flat` holds 32 f32: two unaligned loads of 16.
    let (lo, hi) = unsafe {
        (
            _mm512_loadu_ps(flat.as_ptr()),
            _mm512_loadu_ps(flat.as_ptr().add(16)),
        )
    };
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    (
        _mm512_permutex2var_ps(lo, even, hi),
        _mm512_permutex2var_ps(lo, odd, hi),
    )
}

/// [`nearest`] in one AVX-512 register: the 16 centroids' coordinates
/// split into two registers, then the same `a·a + b·b` in f32 (no FMA), NaN
/// as infinity, the minimum and the first lane holding it. The minimum of
/// the same 16 values is the same value, so the index is [`nearest`]'s
/// (`tests::nearest_equals_the_first_strict_minimum` checks both).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
#[inline]
unsafe fn nearest_avx512(centroids: &[[f32; 2]; CENTROIDS], x: [f32; 2]) -> u8 {
    use std::arch::x86_64::*;
    // SAFETY: this function only runs where AVX-512F is present.
    let (cx, cy) = unsafe { split_pairs_avx512(centroids) };
    let a = _mm512_sub_ps(_mm512_set1_ps(x[0]), cx);
    let b = _mm512_sub_ps(_mm512_set1_ps(x[1]), cy);
    let d = _mm512_add_ps(_mm512_mul_ps(a, a), _mm512_mul_ps(b, b));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(d, d);
    let d = _mm512_mask_blend_ps(nan, d, _mm512_set1_ps(f32::INFINITY));
    let min = _mm512_reduce_min_ps(d);
    let at = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(d, _mm512_set1_ps(min));
    at.trailing_zeros() as u8
}

/// Labels each of `points` with its [`nearest`] centroid (16 points at a
/// time by [`label16_avx512`] where the CPU has AVX-512F: the same labels);
/// whether any label changed.
fn label(centroids: &[[f32; 2]; CENTROIDS], points: &[[f32; 2]], labels: &mut [u8]) -> bool {
    #[inline(always)]
    fn with(points: &[[f32; 2]], labels: &mut [u8], nearest: impl Fn([f32; 2]) -> u8) -> bool {
        let mut changed = false;
        for (l, &p) in labels.iter_mut().zip(points) {
            let j = nearest(p);
            changed |= *l != j;
            *l = j;
        }
        changed
    }
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f")]
    unsafe fn avx512(c: &[[f32; 2]; CENTROIDS], points: &[[f32; 2]], labels: &mut [u8]) -> bool {
        let mut changed = false;
        let (points16, rest) = points.as_chunks::<16>();
        let (labels16, rest_labels) = labels.split_at_mut(points16.len() * 16);
        for (p, l) in points16.iter().zip(labels16.as_chunks_mut::<16>().0) {
            // SAFETY: this function only runs where AVX-512F is present.
            let j = unsafe { label16_avx512(c, p) };
            changed |= *l != j;
            *l = j;
        }
        // SAFETY: as above.
        changed | with(rest, rest_labels, |p| unsafe { nearest_avx512(c, p) })
    }
    #[cfg(target_arch = "x86_64")]
    if super::kernels::avx512_encode_available() {
        // SAFETY: AVX-512F was detected on this CPU just above.
        return unsafe { avx512(centroids, points, labels) };
    }
    with(points, labels, |p| nearest(centroids, p))
}

/// [`nearest`] of 16 points at once, a point per lane: the centroids in
/// order, each one's `a·a + b·b` in f32 (no FMA, the same value as
/// [`nearest`]'s), kept where strictly below the lane's best so far, so the
/// first centroid holding the minimum wins. A NaN distance is never below;
/// centroid 0's NaN reads as infinity, as in [`nearest`], so a lane with no
/// distance below infinity keeps 0. Training labels 8,192 points for each
/// of 25 iterations and 192 sub-quantisers (at 384-d): a lane per point
/// does the 16 comparisons without [`nearest_avx512`]'s horizontal
/// minimum per point.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
#[inline]
unsafe fn label16_avx512(centroids: &[[f32; 2]; CENTROIDS], points: &[[f32; 2]; 16]) -> [u8; 16] {
    use std::arch::x86_64::*;
    // SAFETY: this function only runs where AVX-512F is present.
    let (xs, ys) = unsafe { split_pairs_avx512(points) };
    let distance = |c: [f32; 2]| {
        let a = _mm512_sub_ps(xs, _mm512_set1_ps(c[0]));
        let b = _mm512_sub_ps(ys, _mm512_set1_ps(c[1]));
        _mm512_add_ps(_mm512_mul_ps(a, a), _mm512_mul_ps(b, b))
    };
    let d0 = distance(centroids[0]);
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(d0, d0);
    let mut best = _mm512_mask_blend_ps(nan, d0, _mm512_set1_ps(f32::INFINITY));
    let mut at = _mm512_setzero_si512();
    for (j, &c) in centroids.iter().enumerate().skip(1) {
        let d = distance(c);
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(d, best);
        best = _mm512_mask_mov_ps(best, below, d);
        at = _mm512_mask_mov_epi32(at, below, _mm512_set1_epi32(j as i32));
    }
    let mut out = [0u8; 16];
    // SAFETY: 16 bytes stored into `out`.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(at)) };
    out
}

/// The rows of an `n`-row sample that train the sub-quantisers: all of them
/// up to `TRAIN_POINTS` (8,192), else that many drawn with `seed`, in
/// ascending order. A caller that has yet to compute the residuals computes
/// only these rows'.
pub fn training_rows(n: usize, seed: u64) -> Vec<usize> {
    if n <= TRAIN_POINTS {
        return (0..n).collect();
    }
    let mut rows = sample(&mut ChaCha8Rng::seed_from_u64(seed), n, TRAIN_POINTS).into_vec();
    rows.sort_unstable();
    rows
}

/// 16 centroids of 2-d points: Lloyd from 16 distinct points drawn with
/// `seed` (repeated when there are fewer).
fn lloyd_2d(points: &[[f32; 2]], seed: u64) -> [[f32; 2]; CENTROIDS] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let take = CENTROIDS.min(points.len());
    let drawn = sample(&mut rng, points.len(), take).into_vec();
    let mut centroids: [[f32; 2]; CENTROIDS] = std::array::from_fn(|j| points[drawn[j % take]]);
    let mut labels = vec![0u8; points.len()];
    for _ in 0..TRAIN_ITERATIONS {
        let changed = label(&centroids, points, &mut labels);
        let mut sums = [[0.0f64; 3]; CENTROIDS];
        for (&l, p) in labels.iter().zip(points) {
            let s = &mut sums[usize::from(l)];
            s[0] += f64::from(p[0]);
            s[1] += f64::from(p[1]);
            s[2] += 1.0;
        }
        for (c, s) in centroids.iter_mut().zip(&sums) {
            if s[2] > 0.0 {
                *c = [(s[0] / s[2]) as f32, (s[1] / s[2]) as f32];
            }
        }
        if !changed {
            break;
        }
    }
    centroids
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// The scan `nearest` replaces: the first index with a strictly smaller
    /// distance than every earlier one (NaN never smaller), 0 when none is
    /// below infinity.
    fn first_strict_minimum(centroids: &[[f32; 2]; CENTROIDS], x: [f32; 2]) -> u8 {
        let mut best = (f32::INFINITY, 0u8);
        for (j, c) in centroids.iter().enumerate() {
            let (a, b) = (x[0] - c[0], x[1] - c[1]);
            let d = a * a + b * b;
            if d < best.0 {
                best = (d, j as u8);
            }
        }
        best.1
    }

    /// Whether this CPU runs the AVX-512 searches.
    fn avx512_runs() -> bool {
        #[cfg(target_arch = "x86_64")]
        return super::super::kernels::avx512_encode_available();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// A value in -4..4 on a coarse `grid` (0: none), so that rounds with a
    /// grid make ties.
    fn on_grid(rng: &mut ChaCha8Rng, grid: f32) -> f32 {
        let v: f32 = rng.random_range(-4.0..4.0);
        if grid > 0.0 {
            (v / grid).round() * grid
        } else {
            v
        }
    }

    /// 16 centroids on `grid`.
    fn centroids_on_grid(rng: &mut ChaCha8Rng, grid: f32) -> [[f32; 2]; CENTROIDS] {
        std::array::from_fn(|_| [on_grid(rng, grid), on_grid(rng, grid)])
    }

    #[test]
    fn nearest_equals_the_first_strict_minimum() {
        // Both searches where the CPU runs the AVX-512 one.
        let avx512 = avx512_runs();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for round in 0..20_000 {
            // Coarse grids make ties; some rounds put infinities and NaNs in.
            let grid = [0.0, 1.0, 0.25, 1e-3][round % 4];
            let mut centroids = centroids_on_grid(&mut rng, grid);
            let mut x = [on_grid(&mut rng, grid), on_grid(&mut rng, grid)];
            match round % 16 {
                11 => centroids[rng.random_range(0..CENTROIDS)][0] = f32::INFINITY,
                12 => x[1] = f32::NEG_INFINITY,
                13 => x[0] = f32::NAN,
                14 => centroids[rng.random_range(0..CENTROIDS)][1] = f32::NAN,
                15 => x[1] = f32::MAX,
                _ => {}
            }
            let want = first_strict_minimum(&centroids, x);
            assert_eq!(nearest(&centroids, x), want, "{centroids:?} {x:?}");
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                // SAFETY: AVX-512F was detected on this CPU.
                let fast = unsafe { nearest_avx512(&centroids, x) };
                assert_eq!(fast, want, "avx512: {centroids:?} {x:?}");
            }
        }
        println!(
            "pq4 nearest: portable{}",
            if avx512 { " and avx512" } else { "" }
        );
        let copies = [[1.0f32, 2.0]; CENTROIDS];
        assert_eq!(nearest(&copies, [0.0, 0.0]), 0, "ties go to the first");
        assert_eq!(nearest(&copies, [f32::INFINITY, 0.0]), 0);
    }

    /// The training's labels, 16 points a lane each where the CPU has
    /// AVX-512F and one by one after the last full 16, are the first strict
    /// minimum of every point, ties, infinities and NaNs included; and
    /// "changed" says whether any label changed.
    #[test]
    fn labels_of_16_points_at_once_are_the_first_strict_minimum() {
        let avx512 = avx512_runs();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for round in 0..3_000 {
            let grid = [0.0, 1.0, 0.25, 1e-3][round % 4];
            let mut centroids = centroids_on_grid(&mut rng, grid);
            match round % 8 {
                5 => centroids[rng.random_range(0..CENTROIDS)][0] = f32::INFINITY,
                6 => centroids[rng.random_range(0..CENTROIDS)][1] = f32::NAN,
                7 => centroids[0] = [f32::NAN, 0.0],
                _ => {}
            }
            let n = [37, 16, 5, 48][round % 4];
            let points: Vec<[f32; 2]> = (0..n)
                .map(|i| match (round + i) % 13 {
                    11 => [f32::NAN, on_grid(&mut rng, grid)],
                    12 => [on_grid(&mut rng, grid), f32::NEG_INFINITY],
                    _ => [on_grid(&mut rng, grid), on_grid(&mut rng, grid)],
                })
                .collect();
            let want: Vec<u8> = points
                .iter()
                .map(|&p| first_strict_minimum(&centroids, p))
                .collect();
            let mut labels = want.clone();
            assert!(
                !label(&centroids, &points, &mut labels),
                "round {round}: nothing changed"
            );
            let mut labels = vec![CENTROIDS as u8; n];
            assert!(
                label(&centroids, &points, &mut labels),
                "round {round}: all changed"
            );
            assert_eq!(labels, want, "round {round}: {centroids:?} {points:?}");
            #[cfg(target_arch = "x86_64")]
            if avx512 && n >= 16 {
                let first: &[[f32; 2]; 16] = points[..16].try_into().unwrap();
                // SAFETY: AVX-512F was detected on this CPU.
                let lanes = unsafe { label16_avx512(&centroids, first) };
                assert_eq!(
                    lanes[..],
                    want[..16],
                    "round {round}: {centroids:?} {first:?}"
                );
            }
        }
        println!(
            "pq4 training labels: {}",
            if avx512 {
                "16 lanes (avx512) and portable"
            } else {
                "portable"
            }
        );
    }
}
