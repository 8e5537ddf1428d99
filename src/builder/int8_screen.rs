//! An exact top-k for the recall calibration at int8 speed: every (row,
//! query) pair is first scored from 8-bit codes (`vpdpbusd`, AVX-512 VNNI:
//! four times the multiply-adds of an f32 FMA a cycle), and only a pair
//! whose score could still be below its query's bound is scored again in
//! f32 and offered to the [`Fold`]. The screen is rigorous: each code
//! score carries a bound on its distance from the f32 score, built from
//! the codes' own rounding errors, so a pair it drops could not have
//! entered the top-k. The answer is the f32 answer; only its cost changes.
//!
//! The codes: a vector `v` is `s·c + e` with `s = max|v|/127`, `c` its
//! rounded codes in −127..=127 and `e` the rest. For a row `x` and a query
//! `q`, `x·q − sₓ·s_q·(cₓ·c_q) = eₓ·q + x̂·e_q`, at most
//! `‖eₓ‖‖q‖ + ‖x̂‖‖e_q‖` (Cauchy–Schwarz), to which the screen adds the f32
//! rescoring's own rounding, `2(d + 8)·2⁻²⁴·‖x‖‖q‖`, a relative 2⁻⁸ on the
//! whole bound for the norms' rounding, and 2⁻²⁰ of the magnitudes in the
//! comparison. `vpdpbusd` multiplies unsigned by signed bytes, so the rows'
//! codes are stored as `c + 128` and `128·Σc_q` is taken back off.
//!
//! The scalar path computes the same integers and the same f32 operations
//! in the same order; it is the reference the tests hold the AVX-512 path
//! to, pair for pair.

use crate::distance::{Metric, squared_norm};
use crate::kmeans::assign::{Fold, Threshold};
use rayon::prelude::*;
use simsimd::SpatialSimilarity;

/// Queries per panel: two AVX-512 registers of 16 `i32` lanes.
pub(super) const LANES: usize = 32;
/// Rows per register block: 8 × 2 accumulators, 2 panel loads and a
/// broadcast fit the 32 AVX-512 registers.
const ROWS: usize = 8;
/// The most dimensions the screen takes: a row's codes (`c + 128` ≤ 255)
/// times a query's (|c| ≤ 127) summed over them stay inside `i32`
/// (`16384 · 255 · 127 < 2³¹`). The conversion of a sum to `f32` may round
/// past 2²⁴, which the bound's magnitude term covers.
pub(super) const MAX_DIM: usize = 16384;

/// How the screen runs on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScreenPath {
    /// `vpdpbusd` over 512-bit registers (AVX-512F, BW and VNNI).
    Avx512Vnni,
    /// The same integers, one pair at a time: the tests' reference.
    #[cfg_attr(not(test), allow(dead_code, reason = "the tests' reference"))]
    Scalar,
}

impl ScreenPath {
    /// The path this CPU runs fast; `None` without AVX-512 VNNI (the f32
    /// kernels are faster than a scalar screen).
    pub(super) fn detect() -> Option<Self> {
        Self::Avx512Vnni.is_supported().then_some(Self::Avx512Vnni)
    }

    /// Whether this CPU can run the path.
    pub(super) fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Self::Avx512Vnni => false,
            Self::Scalar => true,
        }
    }
}

/// A vector's codes: its scale, and the norms of its rounding error and
/// of its decoded value, rounded up.
struct Coded {
    scale: f32,
    error_norm: f32,
    decoded_norm: f32,
}

/// `v`'s codes into `out` (`v.len()` values), as `c + offset`; `error` is
/// scratch of `v.len()` values. Plain loops over `f32` that vectorise.
///
/// The error's norm is taken in `f32`: each `x − s·c` is within 2⁻²³·|x|
/// of the real one, which the row's rescoring term covers (it is
/// `(d + 8)·2⁻²³·‖x‖`), and the sum of squares within `d·2⁻²⁴` relative,
/// which [`BOUND_ROOM`] covers up to [`MAX_DIM`]. The decoded norm is
/// `s·√Σc²`, with `Σc²` exact in integers.
fn code(v: &[f32], out: &mut [u8], offset: i32, error: &mut [f32]) -> Coded {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    let inverse = if max > 0.0 { 127.0 / max } else { 0.0 };
    let mut squares = 0i32;
    for ((x, o), e) in v.iter().zip(out.iter_mut()).zip(error.iter_mut()) {
        // Rounded to nearest by the 1.5·2²³ trick (|y| ≤ 127); any
        // rounding would do, as the bound uses the codes' actual error.
        let y = (x * inverse).clamp(-127.0, 127.0);
        let c = (y + ROUNDER) - ROUNDER;
        // SAFETY: `c` is a whole number within ±127.
        let code = unsafe { c.to_int_unchecked::<i32>() };
        squares += code * code;
        *e = x - scale * c;
        *o = (code + offset) as u8;
    }
    let error = &error[..v.len()];
    let error_norm = f32::dot(error, error).map_or(f64::INFINITY, f64::sqrt);
    Coded {
        scale,
        error_norm: up(error_norm),
        decoded_norm: up(f64::from(scale) * f64::from(squares).sqrt()),
    }
}

/// Adding and taking back 1.5·2²³ rounds an `f32` of magnitude below 2²²
/// to a whole number.
const ROUNDER: f32 = 12_582_912.0;

/// A norm rounded up to `f32`, so that a bound built from it stays a bound.
fn up(x: f64) -> f32 {
    let y = x as f32;
    if f64::from(y) < x { y.next_up() } else { y }
}

/// The rows of one [`super::calibrate::GroundTruth::observe`] call as codes
/// (`c + 128`, each row padded to a multiple of 4 bytes).
#[derive(Debug, Default)]
pub(super) struct ScreenRows {
    codes: Vec<u8>,
    stride: usize,
    terms: Vec<RowTerms>,
}

/// A row's terms of the bound.
#[derive(Debug, Clone, Copy)]
struct RowTerms {
    scale: f32,
    /// `‖eₓ‖ + 2(d + 8)·2⁻²⁴·‖x‖`: what multiplies `‖q‖` in the bound.
    error: f32,
    /// `‖x̂‖`: what multiplies `‖e_q‖`.
    decoded: f32,
}

impl ScreenRows {
    /// Codes `vectors` (row-major, `dim` wide) in place of what it held,
    /// on rayon, reusing its memory (a build codes every row, a part at a
    /// time).
    pub(super) fn fill(&mut self, vectors: &[f32], dim: usize) {
        let stride = dim.div_ceil(4) * 4;
        let n = vectors.len() / dim.max(1);
        self.stride = stride;
        self.codes.clear();
        self.codes.resize(n * stride, 128);
        let rescore = rescore_rounding(dim);
        let coded = self
            .codes
            .par_chunks_mut(stride.max(1))
            .zip(vectors.par_chunks(dim.max(1)))
            .map_init(
                || vec![0f32; dim],
                |scratch, (out, x)| {
                    let c = code(x, &mut out[..dim], 128, scratch);
                    let norm = f64::from(squared_norm(x)).sqrt();
                    RowTerms {
                        scale: c.scale,
                        error: up(f64::from(c.error_norm) + rescore * norm),
                        decoded: c.decoded_norm,
                    }
                },
            );
        self.terms.clear();
        self.terms.par_extend(coded);
    }
}

/// The relative rounding of an f32 dot product of `dim` terms in any order
/// (`(d − 1)·2⁻²⁴` to first order), doubled, with room to spare.
fn rescore_rounding(dim: usize) -> f64 {
    2.0 * (dim as f64 + 8.0) * f64::from(f32::EPSILON) / 2.0
}

/// A chunk of queries as packed code panels of [`LANES`], with each lane's
/// terms of the bound and its rank score's affine map.
pub(super) struct ScreenPanels<'a> {
    queries: &'a [f32],
    dim: usize,
    stride: usize,
    /// Panel `p` holds lane `l`'s codes `4i..4i + 4` at
    /// `(p·stride/4 + i)·4·LANES + 4l`.
    panels: Vec<i8>,
    /// Per lane, padded to whole panels: `128·Σc_q`.
    offset: Vec<i32>,
    scale: Vec<f32>,
    norm: Vec<f32>,
    error: Vec<f32>,
    /// The rank score `shift + slope·(x·q)`; padding has shift +∞.
    shift: Vec<f32>,
    slope: Vec<f32>,
}

impl<'a> ScreenPanels<'a> {
    /// `queries` (row-major, `dim` wide, at most [`MAX_DIM`]) with
    /// `metric`'s rank scores, as the packed f32 kernel has them (L2:
    /// `‖q‖² − 2·x·q`; otherwise `−x·q`).
    pub(super) fn new(queries: &'a [f32], dim: usize, metric: Metric) -> Self {
        let n = queries.len() / dim.max(1);
        let stride = dim.div_ceil(4) * 4;
        let padded = n.div_ceil(LANES) * LANES;
        let mut panels = vec![0i8; padded * stride];
        let (mut offset, mut scale, mut norm, mut error) = (
            vec![0i32; padded],
            vec![0f32; padded],
            vec![0f32; padded],
            vec![0f32; padded],
        );
        let (mut shift, mut slope) = (vec![f32::INFINITY; padded], vec![0f32; padded]);
        let (mut codes, mut scratch) = (vec![0u8; stride], vec![0f32; dim]);
        for (j, q) in queries.chunks_exact(dim.max(1)).enumerate().take(n) {
            let c = code(q, &mut codes[..dim], 0, &mut scratch);
            let (p, l) = (j / LANES, j % LANES);
            let mut sum = 0i32;
            for (i, &b) in codes[..dim].iter().enumerate() {
                let v = b as i8;
                sum += i32::from(v);
                panels[(p * stride / 4 + i / 4) * 4 * LANES + 4 * l + i % 4] = v;
            }
            offset[j] = 128 * sum;
            scale[j] = c.scale;
            let squared = squared_norm(q);
            norm[j] = up(f64::from(squared).sqrt());
            error[j] = c.error_norm;
            (shift[j], slope[j]) = match metric {
                Metric::L2 => (squared, -2.0),
                _ => (0.0, -1.0),
            };
        }
        ScreenPanels {
            queries,
            dim,
            stride,
            panels,
            offset,
            scale,
            norm,
            error,
            shift,
            slope,
        }
    }

    /// The queries with their padding: a [`Threshold::Lanes`] base must
    /// cover this many.
    pub(super) fn padded(&self) -> usize {
        self.shift.len()
    }

    /// Offers to `fold` every pair of a row of `x` (rows `first..` of
    /// `rows`, `dim` wide) and a query whose code score's lower bound is
    /// below the fold's threshold, at its f32 score: a panel of queries at
    /// a time, its rows in order, each row's queries ascending (so each
    /// query sees the rows in order, as from the f32 kernels).
    pub(super) fn fold<F: Fold + ?Sized>(
        &self,
        path: ScreenPath,
        rows: &ScreenRows,
        first: usize,
        x: &[f32],
        fold: &mut F,
    ) {
        let n = x.len() / self.dim.max(1);
        assert!(
            rows.stride == self.stride && first + n <= rows.terms.len(),
            "screen shapes"
        );
        match path {
            #[cfg(target_arch = "x86_64")]
            ScreenPath::Avx512Vnni => {
                assert!(path.is_supported(), "AVX-512 VNNI on this CPU");
                // SAFETY: the CPU has AVX-512F, BW and VNNI (checked), and
                // the shapes are as `vnni::tile` needs (checked above).
                unsafe { vnni::tile(self, rows, first, x, fold) }
            }
            _ => self.scalar(rows, first, x, fold),
        }
    }

    /// The scalar path: each pair's integers, then [`ScreenPanels::check`].
    fn scalar<F: Fold + ?Sized>(&self, rows: &ScreenRows, first: usize, x: &[f32], fold: &mut F) {
        let n = x.len() / self.dim.max(1);
        let mut dots = [0i32; LANES];
        for p in 0..self.padded() / LANES {
            for r in 0..n {
                let codes = &rows.codes[(first + r) * self.stride..(first + r + 1) * self.stride];
                for (l, dot) in dots.iter_mut().enumerate() {
                    let mut sum = 0i32;
                    for (i, &c) in codes.iter().enumerate() {
                        let q =
                            self.panels[(p * self.stride / 4 + i / 4) * 4 * LANES + 4 * l + i % 4];
                        sum += i32::from(c) * i32::from(q);
                    }
                    *dot = sum;
                }
                self.check(rows, first, x, r, p * LANES, &dots, fold);
            }
        }
    }

    /// Row `r`'s integer dot products `dots` with the panel at query `j0`:
    /// the lanes whose lower bound is below the threshold are scored in
    /// f32 and offered. The operations are the vector path's, lane by lane.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn check<F: Fold + ?Sized>(
        &self,
        rows: &ScreenRows,
        first: usize,
        x: &[f32],
        r: usize,
        j0: usize,
        dots: &[i32],
        fold: &mut F,
    ) {
        let row = first + r;
        let RowTerms {
            scale: sx,
            error: ex,
            decoded: dx,
        } = rows.terms[row];
        let (base, t) = match fold.threshold(r, j0) {
            Threshold::Lanes(base, t) => (Some(base), t),
            Threshold::Row(t) => (None, t),
        };
        let mut pass = [false; LANES];
        for (l, pass) in pass.iter_mut().enumerate() {
            let j = j0 + l;
            let threshold = base.map_or(t, |b| b[l] - t);
            let lower = lower_bound(
                dots[l] - self.offset[j],
                (sx, ex, dx),
                (self.scale[j], self.norm[j], self.error[j]),
                (self.shift[j], self.slope[j], t),
            );
            *pass = lower < threshold;
        }
        for (l, _) in pass.iter().enumerate().filter(|p| *p.1) {
            self.offer(x, r, j0 + l, fold);
        }
    }

    /// The f32 score of row `r` of `x` against query `j`, offered.
    #[inline]
    fn offer<F: Fold + ?Sized>(&self, x: &[f32], r: usize, j: usize, fold: &mut F) {
        let d = self.dim;
        let dot = f32::dot(&x[r * d..(r + 1) * d], &self.queries[j * d..(j + 1) * d])
            .map_or(f32::NAN, |v| v as f32);
        fold.offer(r, j, self.shift[j] + self.slope[j] * dot);
    }
}

/// The lower bound of a pair's f32 rank score from its integer dot product
/// `dot`, the row's `(scale, error, decoded)`, the query's `(scale, norm,
/// error)` and its `(shift, slope)` with the threshold's own term `t`. The
/// vector path's operations, in its order.
#[inline(always)]
fn lower_bound(
    dot: i32,
    (sx, ex, dx): (f32, f32, f32),
    (sq, nq, eq): (f32, f32, f32),
    (shift, slope, t): (f32, f32, f32),
) -> f32 {
    let approx = dot as f32 * sq * sx;
    let s = shift + slope * approx;
    let bound = (ex * nq + dx * eq) * (slope.abs() * BOUND_ROOM);
    let room = (shift.abs() + (slope * approx).abs() + t.abs()) * MAGNITUDE_ROOM;
    s - (bound + room)
}

/// The relative room on the code bound, for its norms' rounding (at most
/// `d·2⁻²⁴ ≤ 2⁻¹⁰` up to [`MAX_DIM`]).
const BOUND_ROOM: f32 = 1.0 + 1.0 / 256.0;
/// The room for rounding in the comparison, relative to its magnitudes.
const MAGNITUDE_ROOM: f32 = 1.0 / (1 << 20) as f32;

/// The AVX-512 VNNI path.
#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{Fold, LANES, ROWS, ScreenPanels, ScreenRows};
    use std::arch::x86_64::*;

    /// Every row of `x` against every panel, [`ROWS`] rows a block.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, BW and VNNI; `rows` must hold rows
    /// `first..first + x.len() / dim` at the panels' stride.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile<F: Fold + ?Sized>(
        panels: &ScreenPanels<'_>,
        rows: &ScreenRows,
        first: usize,
        x: &[f32],
        fold: &mut F,
    ) {
        let n = x.len() / panels.dim.max(1);
        let full = n / ROWS * ROWS;
        for p in 0..panels.padded() / LANES {
            for r0 in (0..full).step_by(ROWS) {
                // SAFETY: rows r0..r0 + ROWS exist; the caller's promise.
                unsafe { block::<ROWS, F>(panels, rows, first, x, r0, p, fold) };
            }
            // SAFETY (every arm): rows full..n exist.
            unsafe {
                match n - full {
                    0 => {}
                    1 => block::<1, F>(panels, rows, first, x, full, p, fold),
                    2 => block::<2, F>(panels, rows, first, x, full, p, fold),
                    3 => block::<3, F>(panels, rows, first, x, full, p, fold),
                    4 => block::<4, F>(panels, rows, first, x, full, p, fold),
                    5 => block::<5, F>(panels, rows, first, x, full, p, fold),
                    6 => block::<6, F>(panels, rows, first, x, full, p, fold),
                    _ => block::<7, F>(panels, rows, first, x, full, p, fold),
                }
            }
        }
    }

    /// `R` rows from `r0` against panel `p`: the integer dot products in
    /// registers, each lane's lower bound as [`super::lower_bound`] computes
    /// it, and the lanes below their threshold scored in f32 and offered.
    ///
    /// # Safety
    /// As [`tile`], with rows `r0..r0 + R` inside `x`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn block<const R: usize, F: Fold + ?Sized>(
        panels: &ScreenPanels<'_>,
        rows: &ScreenRows,
        first: usize,
        x: &[f32],
        r0: usize,
        p: usize,
        fold: &mut F,
    ) {
        let stride = panels.stride;
        let words = stride / 4;
        let panel = &panels.panels[p * words * 4 * LANES..(p + 1) * words * 4 * LANES];
        let codes: [&[u8]; R] = std::array::from_fn(|r| {
            let row = first + r0 + r;
            &rows.codes[row * stride..(row + 1) * stride]
        });
        let mut acc = [[_mm512_setzero_si512(); 2]; R];
        let pp = panel.as_ptr();
        for w in 0..words {
            // SAFETY: w < words: the panel holds words·4·LANES bytes and
            // each row's codes `stride` = 4·words bytes.
            unsafe {
                let c0 = _mm512_loadu_si512(pp.add(w * 4 * LANES).cast());
                let c1 = _mm512_loadu_si512(pp.add(w * 4 * LANES + 64).cast());
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let word = codes[r].as_ptr().add(4 * w).cast::<i32>().read_unaligned();
                    let xv = _mm512_set1_epi32(word);
                    acc_r[0] = _mm512_dpbusd_epi32(acc_r[0], xv, c0);
                    acc_r[1] = _mm512_dpbusd_epi32(acc_r[1], xv, c1);
                }
            }
        }
        let j0 = p * LANES;
        let lane = |v: &[f32]| -> [__m512; 2] {
            // SAFETY: every per-lane vector is padded to whole panels.
            unsafe {
                [
                    _mm512_loadu_ps(v.as_ptr().add(j0)),
                    _mm512_loadu_ps(v.as_ptr().add(j0 + 16)),
                ]
            }
        };
        let (sq, nq, eq) = (lane(&panels.scale), lane(&panels.norm), lane(&panels.error));
        let (shift, slope) = (lane(&panels.shift), lane(&panels.slope));
        // SAFETY: as above.
        let offset = unsafe {
            [
                _mm512_loadu_si512(panels.offset.as_ptr().add(j0).cast()),
                _mm512_loadu_si512(panels.offset.as_ptr().add(j0 + 16).cast()),
            ]
        };
        let abs = |v: __m512| _mm512_abs_ps(v);
        let room = _mm512_set1_ps(super::BOUND_ROOM);
        let magnitude = _mm512_set1_ps(super::MAGNITUDE_ROOM);
        for (r, acc_r) in acc.iter().enumerate() {
            let row = first + r0 + r;
            let terms = rows.terms[row];
            let (sx, ex, dx) = (
                _mm512_set1_ps(terms.scale),
                _mm512_set1_ps(terms.error),
                _mm512_set1_ps(terms.decoded),
            );
            let (base, t) = match fold.threshold(r0 + r, j0) {
                super::Threshold::Lanes(base, t) => (Some(base), t),
                super::Threshold::Row(t) => (None, t),
            };
            let tv = _mm512_set1_ps(t);
            let mut mask = 0u32;
            for h in 0..2 {
                // The scalar `lower_bound`, lane by lane, in its order.
                let dot = _mm512_sub_epi32(acc_r[h], offset[h]);
                let approx = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), sq[h]), sx);
                let sloped = _mm512_mul_ps(slope[h], approx);
                let s = _mm512_add_ps(shift[h], sloped);
                let bound = _mm512_mul_ps(
                    _mm512_add_ps(_mm512_mul_ps(ex, nq[h]), _mm512_mul_ps(dx, eq[h])),
                    _mm512_mul_ps(abs(slope[h]), room),
                );
                let spread = _mm512_mul_ps(
                    _mm512_add_ps(_mm512_add_ps(abs(shift[h]), abs(sloped)), abs(tv)),
                    magnitude,
                );
                let lower = _mm512_sub_ps(s, _mm512_add_ps(bound, spread));
                let threshold = match base {
                    Some(b) => {
                        assert!(b.len() >= LANES, "a lane threshold per lane");
                        // SAFETY: `base` holds at least LANES values.
                        _mm512_sub_ps(unsafe { _mm512_loadu_ps(b.as_ptr().add(16 * h)) }, tv)
                    }
                    None => tv,
                };
                mask |= u32::from(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(lower, threshold)) << (16 * h);
            }
            while mask != 0 {
                let l = mask.trailing_zeros() as usize;
                panels.offer(x, r0 + r, j0 + l, fold);
                mask &= mask - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Records every pair offered, and offers under fixed thresholds.
    struct Record {
        thresholds: Vec<f32>,
        term: f32,
        offered: Vec<(usize, usize, f32)>,
    }

    impl Fold for Record {
        fn threshold(&self, _: usize, j0: usize) -> Threshold<'_> {
            Threshold::Lanes(&self.thresholds[j0..], self.term)
        }

        fn offer(&mut self, r: usize, j: usize, s: f32) {
            self.offered.push((r, j, s));
        }
    }

    fn data(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    #[test]
    fn no_pair_below_its_threshold_in_f32_is_dropped_and_the_paths_agree() {
        for dim in [1, 5, 37, 128] {
            let (x, q) = (data(45, dim, 1), data(40, dim, 2));
            let mut rows = ScreenRows::default();
            rows.fill(&x, dim);
            for metric in [Metric::L2, Metric::InnerProduct] {
                let panels = ScreenPanels::new(&q, dim, metric);
                // Every pair's f32 score, and thresholds that keep about
                // half of them.
                let score = |r: usize, j: usize| {
                    let dot = f32::dot(&x[r * dim..(r + 1) * dim], &q[j * dim..(j + 1) * dim])
                        .unwrap() as f32;
                    panels.shift[j] + panels.slope[j] * dot
                };
                let mut thresholds = vec![f32::NEG_INFINITY; panels.padded()];
                for (j, t) in thresholds.iter_mut().enumerate().take(40) {
                    let mut s: Vec<f32> = (0..45).map(|r| score(r, j)).collect();
                    s.sort_by(f32::total_cmp);
                    *t = s[22];
                }
                let run = |path: ScreenPath| {
                    let mut rec = Record {
                        thresholds: thresholds.clone(),
                        term: 0.0,
                        offered: Vec::new(),
                    };
                    panels.fold(path, &rows, 0, &x, &mut rec);
                    rec.offered
                };
                let scalar = run(ScreenPath::Scalar);
                for r in 0..45 {
                    for (j, &t) in thresholds.iter().enumerate().take(40) {
                        if score(r, j) < t {
                            assert!(
                                scalar.iter().any(|o| (o.0, o.1) == (r, j)),
                                "d {dim} {metric:?}: pair ({r}, {j}) below its threshold was dropped"
                            );
                        }
                    }
                }
                assert!(
                    scalar.len() < 45 * 40,
                    "d {dim} {metric:?}: the screen dropped nothing"
                );
                assert!(scalar.iter().all(|o| o.2 == score(o.0, o.1)));
                if ScreenPath::Avx512Vnni.is_supported() {
                    assert_eq!(run(ScreenPath::Avx512Vnni), scalar, "d {dim} {metric:?}");
                    println!("int8 screen: the AVX-512 VNNI path ran (d {dim}, {metric:?})");
                } else {
                    println!("int8 screen: no AVX-512 VNNI here; the scalar path alone ran");
                }
            }
        }
    }
}
