//! The seeded random orthogonal rotation of `rabitq4`: its bit-exact
//! generation and its fixed-order application.
//!
//! **Generation** (bit-identical on every machine, so a reader regenerates the
//! matrix from the seed alone and checks it against the stored sha256):
//! 1. A ChaCha8 stream (`rand_chacha::ChaCha8Rng::from_seed(key)`, the 32-byte
//!    key being the seed as 8 little-endian bytes followed by 24 zero bytes).
//! 2. Uniforms `u = (next_u64() >> 11) · 2⁻⁵³` in f64, exact in [0, 1).
//! 3. A dim×dim row-major matrix of approximately Gaussian entries, each the sum
//!    of 12 consecutive uniforms minus 6, summed left to right in f64.
//! 4. Modified Gram–Schmidt on the rows in f64, row by row: subtract from row i
//!    its projection on each earlier finished row j = 0, 1, …, i−1 in turn,
//!    then divide by the square root of its squared norm. Dot products sum
//!    term k into lane k mod 8 of 8 f64 lanes (zero-padded to a multiple of 8)
//!    and combine the lanes as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
//! 5. Conversion of every entry to f32 (round to nearest).
//!
//! Only +, −, ×, ÷ and sqrt are used, all correctly rounded IEEE 754 operations
//! that Rust never contracts or reassociates, so the bytes do not depend on the
//! CPU. `P·v` is then `o_i = <row_i, v>`.
//!
//! **Application**: `o_i = Σ_k P_ik·v_k` is summed k = 0, 1, …, dim−1 in
//! order for every output i, starting from 0.0 (product rounded, then sum
//! rounded: Rust never fuses, and FMA is never enabled). P is stored in panels
//! of 16 rows, column by column within a panel; the kernel holds 16 outputs of
//! each of 2 (portable build), 4 (AVX2 build) or 8 (AVX-512 build, the build
//! chosen at run time) vectors in accumulators and walks the panel's columns, so LLVM vectorises it across
//! outputs, which changes no rounding: every build, every x86-64 or ARM CPU,
//! and one vector or a batch give the same bits.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;

/// Outputs of one panel of the stored matrix, and of one accumulator block
/// of the kernels (two ymm or four xmm registers per vector).
const PANEL: usize = 16;
/// Vectors one pass of the portable kernel rotates, sharing each load of P
/// (8 SSE accumulators).
const PORTABLE_GROUP: usize = 2;
/// Vectors one pass of the AVX2 kernel rotates (8 ymm accumulators).
#[cfg(target_arch = "x86_64")]
const AVX2_GROUP: usize = 4;
/// Vectors one pass of the AVX-512 kernel rotates (8 zmm accumulators, a
/// panel's 16 outputs in one register).
#[cfg(target_arch = "x86_64")]
const AVX512_GROUP: usize = 8;

/// A dim×dim orthogonal matrix P, shared by clones.
#[derive(Clone)]
pub(crate) struct Rotation {
    dim: usize,
    seed: u64,
    /// P in panels of [`PANEL`] rows, the kernel's layout: with
    /// `full = dim − dim mod PANEL`, row i < full is at
    /// `panels[(i/PANEL)·PANEL·dim + k·PANEL + i mod PANEL] = P_ik`, and the
    /// last `t = dim − full` rows at `panels[full·dim + k·t + (i − full)]`, so
    /// each panel is read front to back and stays in L1 across a batch.
    panels: Arc<[f32]>,
    sha256: Arc<str>,
}

/// Names the matrix instead of printing dim² numbers.
impl fmt::Debug for Rotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rotation")
            .field("dim", &self.dim)
            .field("seed", &self.seed)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Rotation {
    /// Generates the matrix for `seed` (see the module comment). O(dim³) f64
    /// work, most of it the Gram-Schmidt ([`orthonormalize`], whose times
    /// are given there).
    pub(crate) fn generate(dim: usize, seed: u64) -> Rotation {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        let mut m: Vec<f64> = (0..dim * dim)
            .map(|_| {
                let mut sum = 0.0f64;
                for _ in 0..12 {
                    sum += (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                }
                sum - 6.0
            })
            .collect();
        orthonormalize(&mut m, dim);
        let mut hasher = Sha256::new();
        for x in &m {
            hasher.update((*x as f32).to_le_bytes());
        }
        let mut panels = vec![0.0f32; dim * dim];
        for i in 0..dim {
            for k in 0..dim {
                panels[panel_index(dim, i, k)] = m[i * dim + k] as f32;
            }
        }
        Rotation {
            dim,
            seed,
            panels: panels.into(),
            sha256: hex::encode(hasher.finalize()).into(),
        }
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Lower-case hex sha256 of P as f32 little-endian bytes, row-major.
    pub(crate) fn sha256(&self) -> &str {
        &self.sha256
    }

    /// `P_ik`.
    pub(crate) fn entry(&self, i: usize, k: usize) -> f32 {
        self.panels[panel_index(self.dim, i, k)]
    }

    /// `out = P·v` for one vector, in the fixed order.
    pub(crate) fn apply(&self, v: &[f32], out: &mut [f32]) {
        self.apply_many(v, out);
    }

    /// `out[v] = P·vectors[v]` for row-major `vectors` (n × dim) into row-major
    /// `out`, with the fastest kernel this CPU runs. Every kernel computes
    /// every output with the same operations in the same order (see the
    /// module comment), so the bits do not depend on the kernel.
    pub(crate) fn apply_many(&self, vectors: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::kernels::avx512_encode_available() {
            // SAFETY: AVX-512F and AVX2 were detected on this CPU just above.
            unsafe { self.apply_many_avx512(vectors, out) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if super::kernels::avx2_encode_available() {
            // SAFETY: AVX2 was detected on this CPU just above.
            unsafe { self.apply_many_avx2(vectors, out) };
            return;
        }
        self.apply_many_portable(vectors, out);
    }

    /// [`Rotation::apply_many`] compiled for the baseline target.
    pub(crate) fn apply_many_portable(&self, vectors: &[f32], out: &mut [f32]) {
        self.apply_many_inline::<PORTABLE_GROUP>(vectors, out);
    }

    /// [`Rotation::apply_many`] compiled with AVX2 (and without FMA, so every
    /// product is rounded before it is added, as in the portable kernel).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn apply_many_avx2(&self, vectors: &[f32], out: &mut [f32]) {
        self.apply_many_inline::<AVX2_GROUP>(vectors, out);
    }

    /// [`Rotation::apply_many`] compiled with AVX-512F (again without FMA).
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f")]
    pub(crate) unsafe fn apply_many_avx512(&self, vectors: &[f32], out: &mut [f32]) {
        self.apply_many_inline::<AVX512_GROUP>(vectors, out);
    }

    /// The kernel, inlined into its caller so that it is compiled for the
    /// caller's target features. For each panel of [`PANEL`] outputs, groups
    /// of `G` vectors share each load of the panel's column slice; each output
    /// is accumulated from 0.0 over k = 0, 1, …, dim−1 as `acc += P_ik·v_k`
    /// (product rounded, then sum rounded), lane-wise across outputs, so
    /// neither `G` nor the loop order changes a bit.
    #[inline(always)]
    pub(crate) fn apply_many_inline<const G: usize>(&self, vectors: &[f32], out: &mut [f32]) {
        let dim = self.dim;
        let full = dim - dim % PANEL;
        for (b, panel) in self.panels[..full * dim]
            .chunks_exact(PANEL * dim)
            .enumerate()
        {
            let start = b * PANEL;
            let mut groups = vectors.chunks_exact(G * dim);
            let mut outs = out.chunks_exact_mut(G * dim);
            for (group, out) in (&mut groups).zip(&mut outs) {
                apply_panel::<G>(panel, dim, start, group, out);
            }
            for (v, o) in groups
                .remainder()
                .chunks_exact(dim)
                .zip(outs.into_remainder().chunks_exact_mut(dim))
            {
                apply_panel::<1>(panel, dim, start, v, o);
            }
        }
        let t = dim - full;
        if t > 0 {
            let tail = &self.panels[full * dim..];
            for (v, o) in vectors.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
                let rest = &mut o[full..];
                rest.fill(0.0);
                for (column, &x) in tail.chunks_exact(t).zip(v) {
                    for (o, p) in rest.iter_mut().zip(column) {
                        *o += p * x;
                    }
                }
            }
        }
    }

    /// `out = Pᵀ·v` (the inverse rotation), for decoding.
    pub(crate) fn apply_transpose(&self, v: &[f32], out: &mut [f32]) {
        for (k, o) in out.iter_mut().enumerate() {
            *o = v
                .iter()
                .enumerate()
                .map(|(i, x)| self.entry(i, k) * x)
                .sum();
        }
    }
}

/// Where `P_ik` is stored in [`Rotation::panels`].
fn panel_index(dim: usize, i: usize, k: usize) -> usize {
    let full = dim - dim % PANEL;
    if i < full {
        i / PANEL * PANEL * dim + k * PANEL + i % PANEL
    } else {
        full * dim + k * (dim - full) + (i - full)
    }
}

/// Outputs `start..start + PANEL` of `P·v` for `G` row-major vectors (see
/// [`Rotation::apply_many_inline`]), from their panel (`dim` slices of
/// [`PANEL`] values, column k first to last).
#[inline(always)]
fn apply_panel<const G: usize>(
    panel: &[f32],
    dim: usize,
    start: usize,
    vectors: &[f32],
    out: &mut [f32],
) {
    let xs: [&[f32]; G] = std::array::from_fn(|v| &vectors[v * dim..][..dim]);
    let mut acc = [[0.0f32; PANEL]; G];
    for (k, p) in panel.as_chunks::<PANEL>().0.iter().enumerate() {
        for (acc, x) in acc.iter_mut().zip(&xs) {
            let x = x[k];
            for l in 0..PANEL {
                acc[l] += p[l] * x;
            }
        }
    }
    for (v, acc) in acc.iter().enumerate() {
        out[v * dim + start..][..PANEL].copy_from_slice(acc);
    }
}

/// Gram-Schmidt over the rows of the `dim × dim` matrix `m`, in place
/// (each row less its projections on the rows before it, in order, then
/// divided by its norm). The widest vectors the CPU has, chosen at run
/// time: the arithmetic is the same element by element at every width
/// (no reassociation, no fused multiply-add), so the matrix, and its
/// sha256, are the same bits on every CPU (`rotation_sha256_is_pinned`);
/// only its time changes. Each open of a `rabitq4` index pays it: at 384-d
/// 49 ms row by row, 26 ms with AVX2 and 15 ms with AVX-512; at 768-d 405,
/// 210 and 116 ms (one core of a 2-core EPYC shared with other work).
fn orthonormalize(m: &mut [f64], dim: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            return unsafe { orthonormalize_avx512(m, dim) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { orthonormalize_avx2(m, dim) };
        }
    }
    orthonormalize_rows(m, dim);
}

/// [`orthonormalize_rows`] with AVX-512: each dot product's eight lanes in
/// one register, lane `l` summing terms `k ≡ l (mod 8)` in order, then the
/// zero-padded tail chunk, then the lanes combined in
/// [`super::lane_dot::lane_dot`]'s order: the same operations on the same
/// values, so the same bits. Rows go through [`orthonormalize_blocked`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn orthonormalize_avx512(m: &mut [f64], dim: usize) {
    use std::arch::x86_64::*;
    let chunks = dim / 8;
    let mask: __mmask8 = ((1u32 << (dim % 8)) - 1) as __mmask8;
    let dot = |a: &[f64], b: &[f64]| -> f64 {
        // SAFETY: `a` and `b` hold `dim` values; the masked loads read only
        // the tail's `dim % 8`.
        unsafe {
            let (a, b) = (a.as_ptr(), b.as_ptr());
            let mut acc = _mm512_setzero_pd();
            for c in 0..chunks {
                let x = _mm512_loadu_pd(a.add(c * 8));
                let y = _mm512_loadu_pd(b.add(c * 8));
                acc = _mm512_add_pd(acc, _mm512_mul_pd(x, y));
            }
            let x = _mm512_maskz_loadu_pd(mask, a.add(chunks * 8));
            let y = _mm512_maskz_loadu_pd(mask, b.add(chunks * 8));
            acc = _mm512_add_pd(acc, _mm512_mul_pd(x, y));
            let mut l = [0.0f64; 8];
            _mm512_storeu_pd(l.as_mut_ptr(), acc);
            ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
        }
    };
    let sub = |row: &mut [f64], basis: &[f64], proj: f64| {
        // SAFETY: `row` and `basis` hold `dim` values each.
        unsafe {
            let p = _mm512_set1_pd(proj);
            for c in 0..chunks {
                let at = row.as_mut_ptr().add(c * 8);
                let b = _mm512_loadu_pd(basis.as_ptr().add(c * 8));
                _mm512_storeu_pd(at, _mm512_sub_pd(_mm512_loadu_pd(at), _mm512_mul_pd(p, b)));
            }
        }
        for (x, b) in row[chunks * 8..].iter_mut().zip(&basis[chunks * 8..]) {
            *x -= proj * b;
        }
    };
    orthonormalize_blocked(m, dim, dot, sub);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn orthonormalize_avx2(m: &mut [f64], dim: usize) {
    let sub = |row: &mut [f64], basis: &[f64], proj: f64| {
        for (x, b) in row.iter_mut().zip(basis) {
            *x -= proj * b;
        }
    };
    orthonormalize_blocked(m, dim, super::lane_dot::lane_dot, sub);
}

/// [`orthonormalize_rows`] four rows at a time: the rows of a block are
/// taken through the rows before it together (four independent chains of
/// dot product and subtraction, which the CPU overlaps), then through each
/// other in order. Each row still meets its bases in the same order, so
/// the result is the same bits.
#[inline(always)]
fn orthonormalize_blocked(
    m: &mut [f64],
    dim: usize,
    dot: impl Fn(&[f64], &[f64]) -> f64,
    sub: impl Fn(&mut [f64], &[f64], f64),
) {
    const BLOCK: usize = 4;
    let mut first = 0;
    while first < dim {
        let rows = BLOCK.min(dim - first);
        let (done, rest) = m.split_at_mut(first * dim);
        let block = &mut rest[..rows * dim];
        for basis in done.chunks_exact(dim) {
            for row in block.chunks_exact_mut(dim) {
                let proj = dot(row, basis);
                sub(row, basis, proj);
            }
        }
        for r in 0..rows {
            let (before, from) = block.split_at_mut(r * dim);
            let row = &mut from[..dim];
            for basis in before.chunks_exact(dim) {
                let proj = dot(row, basis);
                sub(row, basis, proj);
            }
            let norm = dot(row, row).sqrt();
            for x in row.iter_mut() {
                *x /= norm;
            }
        }
        first += rows;
    }
}

/// The reference Gram-Schmidt, row by row (the other widths are tested
/// equal to it), and the path of a CPU without AVX2.
#[inline(always)]
fn orthonormalize_rows(m: &mut [f64], dim: usize) {
    for i in 0..dim {
        let (done, rest) = m.split_at_mut(i * dim);
        let row = &mut rest[..dim];
        for basis in done.chunks_exact(dim) {
            let proj = super::lane_dot::lane_dot(row, basis);
            for (x, b) in row.iter_mut().zip(basis) {
                *x -= proj * b;
            }
        }
        let norm = super::lane_dot::lane_dot(row, row).sqrt();
        for x in row.iter_mut() {
            *x /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f32 unit roundoff.
    const U32: f64 = f32::EPSILON as f64 / 2.0;

    /// PPᵀ = I (rows orthonormal) and, P being square, PᵀP = I. Bound: the f64
    /// matrix is orthogonal to ~dim²·2⁻⁵³ (MGS on a Gaussian matrix); rounding
    /// each entry to f32 multiplies it by (1+δ), |δ| ≤ u = 2⁻²⁴, so a Gram entry
    /// moves by at most (2u + u²)·Σ|p_ik||p_jk| ≤ (2u + u²)·1 (Cauchy–Schwarz on
    /// unit rows); the f64 check adds ≤ dim·2⁻⁵³. Bound used: 2u + u² + 1e-9.
    /// Every width of the Gram-Schmidt gives the baseline's bits exactly
    /// (the rotation is pinned by its sha256 in every `rabitq4` index).
    #[test]
    fn every_width_of_the_orthonormalisation_gives_the_same_bits() {
        for dim in [1, 3, 8, 13, 64, 130] {
            let start: Vec<f64> = (0..dim * dim)
                .map(|k| ((k * 7919 % 1009) as f64 - 504.0) / 97.0)
                .collect();
            let mut want = start.clone();
            orthonormalize_rows(&mut want, dim);
            let bits = |m: &[f64]| m.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            #[cfg(target_arch = "x86_64")]
            {
                let mut ran = vec!["scalar"];
                if is_x86_feature_detected!("avx2") {
                    let mut got = start.clone();
                    // SAFETY: the CPU has AVX2 (checked above).
                    unsafe { orthonormalize_avx2(&mut got, dim) };
                    assert_eq!(bits(&got), bits(&want), "avx2, dim {dim}");
                    ran.push("avx2");
                }
                if is_x86_feature_detected!("avx512f") {
                    let mut got = start.clone();
                    // SAFETY: the CPU has AVX-512F (checked above).
                    unsafe { orthonormalize_avx512(&mut got, dim) };
                    assert_eq!(bits(&got), bits(&want), "avx512, dim {dim}");
                    ran.push("avx512");
                }
                println!("dim {dim}: orthonormalisation paths run: {ran:?}");
            }
            let mut dispatched = start.clone();
            orthonormalize(&mut dispatched, dim);
            assert_eq!(bits(&dispatched), bits(&want), "dispatched, dim {dim}");
        }
    }

    #[test]
    fn rotation_is_orthogonal_within_f32_rounding() {
        let bound = 2.0 * U32 + U32 * U32 + 1e-9;
        for (dim, seed) in [(1, 3), (8, 1), (37, 2), (128, 7), (384, 9)] {
            let rot = Rotation::generate(dim, seed);
            let m: Vec<f32> = (0..dim * dim)
                .map(|k| rot.entry(k / dim, k % dim))
                .collect();
            let mut worst = 0.0f64;
            for i in 0..dim {
                for j in 0..dim {
                    let rows: f64 = (0..dim)
                        .map(|k| m[i * dim + k] as f64 * m[j * dim + k] as f64)
                        .sum();
                    let cols: f64 = (0..dim)
                        .map(|k| m[k * dim + i] as f64 * m[k * dim + j] as f64)
                        .sum();
                    let target = if i == j { 1.0 } else { 0.0 };
                    worst = worst.max((rows - target).abs()).max((cols - target).abs());
                }
            }
            assert!(
                worst <= bound,
                "dim {dim}: |PPᵀ − I| = {worst:e} > {bound:e}"
            );
        }
    }

    #[test]
    fn rotation_is_a_function_of_the_seed() {
        let a = Rotation::generate(64, 42);
        let b = Rotation::generate(64, 42);
        let c = Rotation::generate(64, 43);
        assert_eq!(a.panels, b.panels);
        assert_eq!(a.sha256(), b.sha256());
        assert_ne!(a.panels, c.panels);
        assert_ne!(a.sha256(), c.sha256());
    }

    /// Pinned bytes: this fails if generation changes on this machine or differs
    /// on another one (CI runs it on every platform), which would make readers
    /// regenerate a different matrix than the writer used.
    #[test]
    fn rotation_sha256_is_pinned() {
        assert_eq!(
            Rotation::generate(8, 1).sha256(),
            "0b92998f6ecef613570f895f0710c9123616c9de09bb848434d9c80a7160cf68"
        );
        // 147 456 entries: a platform whose f64 arithmetic differed anywhere
        // would very likely flip at least one f32 rounding here.
        assert_eq!(
            Rotation::generate(384, 1).sha256(),
            "09952c67d99df56585e0266466a69a7671066532aa4aa3eaf3cf712fb5194925"
        );
    }

    #[test]
    fn apply_many_equals_apply_bit_for_bit() {
        for dim in [1, 5, 8, 13, 100, 128] {
            let rot = Rotation::generate(dim, 5);
            let n = 11;
            let vs: Vec<f32> = (0..n * dim)
                .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
                .collect();
            let mut many = vec![0.0; n * dim];
            rot.apply_many(&vs, &mut many);
            for (v, o) in vs.chunks_exact(dim).zip(many.chunks_exact(dim)) {
                let mut one = vec![0.0; dim];
                rot.apply(v, &mut one);
                assert_eq!(
                    one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    o.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    "dim {dim}"
                );
            }
        }
    }

    /// PᵀP = I, so Pᵀ·(P·v) = v up to f32 rounding of the two products
    /// (each |error| ≤ dim·u·||v||-ish); a loose 1e-4 relative check.
    #[test]
    fn transpose_inverts_apply() {
        let dim = 96;
        let rot = Rotation::generate(dim, 11);
        let v: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
        let (mut o, mut back) = (vec![0.0; dim], vec![0.0; dim]);
        rot.apply(&v, &mut o);
        rot.apply_transpose(&o, &mut back);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        for (a, b) in v.iter().zip(&back) {
            assert!((a - b).abs() <= 1e-4 * norm, "{a} vs {b}");
        }
    }
}
