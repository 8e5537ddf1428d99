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
//! order for every output i (product rounded, then sum rounded: Rust never
//! fuses), in plain Rust without runtime dispatch or FMA. The kernel holds 32
//! outputs in accumulators and walks the columns of P, so LLVM vectorises it
//! across outputs, which changes no rounding: encoding is the same on every
//! x86-64 or ARM CPU, and one vector or a batch give the same bytes.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;

/// Outputs one pass of [`Rotation::apply`] accumulates (8 SSE registers).
const BLOCK: usize = 32;
/// Outputs per vector one pass of [`Rotation::apply_many`] accumulates for
/// each of its two vectors.
const PAIR_BLOCK: usize = 16;

/// A dim×dim orthogonal matrix P, shared by clones.
#[derive(Clone)]
pub(crate) struct Rotation {
    dim: usize,
    seed: u64,
    /// P column-major (`columns[k·dim + i] = P_ik`), the kernel's layout.
    columns: Arc<[f32]>,
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
    /// work: measured 0.04 s at dim 384, 0.2 s at 768, 0.5 s at 1024 (one
    /// core, shared).
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
        for i in 0..dim {
            let (done, rest) = m.split_at_mut(i * dim);
            let row = &mut rest[..dim];
            for basis in done.chunks_exact(dim) {
                let proj = dot_f64(row, basis);
                for (x, b) in row.iter_mut().zip(basis) {
                    *x -= proj * b;
                }
            }
            let norm = dot_f64(row, row).sqrt();
            for x in row.iter_mut() {
                *x /= norm;
            }
        }
        let mut hasher = Sha256::new();
        for x in &m {
            hasher.update((*x as f32).to_le_bytes());
        }
        let columns = (0..dim * dim)
            .map(|k| m[k % dim * dim + k / dim] as f32)
            .collect();
        Rotation {
            dim,
            seed,
            columns,
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
    #[cfg(test)]
    fn entry(&self, i: usize, k: usize) -> f32 {
        self.columns[k * self.dim + i]
    }

    /// `out = P·v` for one vector, in the fixed order.
    pub(crate) fn apply(&self, v: &[f32], out: &mut [f32]) {
        let dim = self.dim;
        let mut blocks = out.chunks_exact_mut(BLOCK);
        for (b, block) in (&mut blocks).enumerate() {
            let mut acc = [0.0f32; BLOCK];
            for (column, &x) in self.columns.chunks_exact(dim).zip(v) {
                if let Some(p) = column[b * BLOCK..].first_chunk::<BLOCK>() {
                    for l in 0..BLOCK {
                        acc[l] += p[l] * x;
                    }
                }
            }
            block.copy_from_slice(&acc);
        }
        self.apply_tail(v, blocks.into_remainder());
    }

    /// `out[v] = P·vectors[v]` for row-major `vectors` (n × dim) into row-major
    /// `out`: the same bytes as [`Rotation::apply`] per vector, as every output
    /// has one fixed summation order. Vectors go in pairs that share each load
    /// of P, halving its traffic from L2/L3.
    pub(crate) fn apply_many(&self, vectors: &[f32], out: &mut [f32]) {
        let dim = self.dim;
        let mut pairs = vectors.chunks_exact(2 * dim);
        let mut outs = out.chunks_exact_mut(2 * dim);
        for (pair, out) in (&mut pairs).zip(&mut outs) {
            let (a, b) = pair.split_at(dim);
            let (out_a, out_b) = out.split_at_mut(dim);
            let mut blocks_a = out_a.chunks_exact_mut(PAIR_BLOCK);
            let mut blocks_b = out_b.chunks_exact_mut(PAIR_BLOCK);
            for (k, (block_a, block_b)) in (&mut blocks_a).zip(&mut blocks_b).enumerate() {
                let (mut acc_a, mut acc_b) = ([0.0f32; PAIR_BLOCK], [0.0f32; PAIR_BLOCK]);
                for ((column, &x_a), &x_b) in self.columns.chunks_exact(dim).zip(a).zip(b) {
                    if let Some(p) = column[k * PAIR_BLOCK..].first_chunk::<PAIR_BLOCK>() {
                        for l in 0..PAIR_BLOCK {
                            acc_a[l] += p[l] * x_a;
                            acc_b[l] += p[l] * x_b;
                        }
                    }
                }
                block_a.copy_from_slice(&acc_a);
                block_b.copy_from_slice(&acc_b);
            }
            self.apply_tail(a, blocks_a.into_remainder());
            self.apply_tail(b, blocks_b.into_remainder());
        }
        for (v, o) in pairs
            .remainder()
            .chunks_exact(dim)
            .zip(outs.into_remainder().chunks_exact_mut(dim))
        {
            self.apply(v, o);
        }
    }

    /// The last `rest.len()` outputs of `P·v`, in the same order.
    fn apply_tail(&self, v: &[f32], rest: &mut [f32]) {
        let start = self.dim - rest.len();
        rest.fill(0.0);
        for (column, &x) in self.columns.chunks_exact(self.dim).zip(v) {
            for (o, p) in rest.iter_mut().zip(&column[start..]) {
                *o += p * x;
            }
        }
    }

    /// `out = Pᵀ·v` (the inverse rotation), for decoding.
    pub(crate) fn apply_transpose(&self, v: &[f32], out: &mut [f32]) {
        for (o, column) in out.iter_mut().zip(self.columns.chunks_exact(self.dim)) {
            *o = column.iter().zip(v).map(|(p, x)| p * x).sum();
        }
    }
}

/// f64 dot product for generation: term k into lane k mod 8 (the tail
/// zero-padded), lanes combined as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
/// Independent lanes let it vectorise without reassociating anything.
fn dot_f64(a: &[f64], b: &[f64]) -> f64 {
    let padded =
        |x: &[f64]| -> [f64; 8] { std::array::from_fn(|l| x.get(l).copied().unwrap_or(0.0)) };
    let (a_chunks, a_tail) = a.as_chunks::<8>();
    let (b_chunks, b_tail) = b.as_chunks::<8>();
    let mut lanes = [0.0f64; 8];
    for (x, y) in a_chunks
        .iter()
        .zip(b_chunks)
        .chain([(&padded(a_tail), &padded(b_tail))])
    {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
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
        assert_eq!(a.columns, b.columns);
        assert_eq!(a.sha256(), b.sha256());
        assert_ne!(a.columns, c.columns);
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
