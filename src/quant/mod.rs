//! Quantised codes of residuals for the postings' `code` column (issue 12).
//!
//! A code encodes the residual `r = x − c` of a stored vector x to its leaf
//! centroid c. At query time the probe turns each probed list into a
//! query-side vector y (L2: `y = q − c`; inner product and cosine: `y = q`),
//! rotates it with [`Quantizer::rotate`], prepares it once with
//! [`Quantizer::prepare`], and [`Quantizer::score`] estimates `<r, y>` for every
//! code of the list; [`Quantizer::norm2`] gives the exact `||r||²`. The probe
//! then forms `L2 ≈ ||r||² + ||y||² − 2<r, y>` or `IP ≈ <c, q> + <r, q>` and
//! re-ranks its best candidates exactly from f32.
//!
//! Three schemes ([`Scheme`]):
//! - `sq8` — 8 bits per dimension with per-dimension ranges (`sq8.rs`);
//! - `rabitq4` — extended RaBitQ, 4 bits per dimension after a seeded random
//!   orthogonal rotation (`rabitq.rs`, `rotation.rs`);
//! - `pq4fs` — product quantisation, 16 centroids per pair of dimensions
//!   (2 bits a dimension), scored 32 codes at a time from a per-query u8
//!   table by the fast-scan kernel (`pq4.rs`, `fastscan.rs`).
//!
//! ## Code bytes (`code`: FIXED_LEN_BYTE_ARRAY of `code_bytes()` bytes)
//!
//! | bytes | content |
//! |---|---|
//! | 0..4 | `norm2`: f32 LE, `‖r‖²` of the f32 residual: f64 products summed in 8 f64 lanes (term k into lane k mod 8), lanes combined as ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), rounded once to f32 |
//! | 4..8 | `factor`: f32 LE. `sq8`: `‖r̂‖²` of the reconstruction (f64, summed in order, rounded once), informative only. `rabitq4`: `f = ‖o‖² / Σ(u_i − 7.5)·o_i` with `o = P·r` (both sums f64 as for `norm2`), 0 for a zero residual. `pq4fs`: the list term `‖r̂‖² + 2·<c, r̂>` with the leaf centroid c (f64, summed in order, rounded once) |
//! | 8.. | payload. `sq8`: `dim` bytes, byte i = `u_i` ∈ 0..=255. `rabitq4`: `padded_dim / 2` bytes, `padded_dim` = dim rounded up to a multiple of 64; for each 64-dim block b, byte `32b + j` (j < 32) holds `u_{64b+j}` in its low nibble and `u_{64b+32+j}` in its high nibble, `u` ∈ 0..=15, padding codes 0. `pq4fs`: `m / 2` bytes, `m` = dim/2 rounded up to even; byte p holds the centroid index of sub-quantiser 2p in its low nibble and 2p+1 in its high nibble |
//!
//! So `code_bytes()` is `8 + dim` for `sq8`, `8 + padded_dim / 2` for
//! `rabitq4` (72 bytes at dim 128, 200 at dim 384) and `8 + m / 2` for
//! `pq4fs` (40 at dim 128, 104 at dim 384).
//!
//! ## Estimates
//! - `sq8`: `<r̂, y> = Σ min_i·y_i + Σ (scale_i·y_i)·u_i`, exact for the
//!   reconstruction `r̂_i = min_i + scale_i·u_i` up to f32 rounding; per
//!   dimension `|r_i − r̂_i| ≤ scale_i / 2` inside the trained range.
//! - `rabitq4`: `<r, y> ≈ f·Σ(u_i − 7.5)·ỹ'_i` with `ỹ = P·y` quantised to int8
//!   (`ỹ'`). Documented bound (tested on Gaussian and anisotropic data at
//!   dims 128 and 384): `|est − <r, y>| ≤ 0.5·‖r‖·‖y‖/√dim` for at least 99%
//!   of pairs. Measured: all pairs within it, mean `|est − <r, y>|` ≈
//!   0.07–0.08·‖r‖·‖y‖/√dim, mean relative error of the implied L2 distance
//!   0.7% at dim 128 and 0.43% at dim 384. Every code fits its residual with
//!   cos(ô, o) ≥ 0.985 (mean 0.995), so `decode` is within
//!   tan θ ≤ 0.175·‖r‖ of r. See `tests.rs` for the derivation.
//!
//! ## Determinism
//! Encoding sums in fixed orders and never fuses a multiply-add, so every CPU
//! writes the same bytes (`parqivf verify` re-encodes a sample and compares
//! them). It runs an AVX2 build where the CPU has AVX2 (FMA deliberately not
//! enabled) and a portable build elsewhere: the same Rust code, vectorised
//! only across independent outputs or candidates, so each value sees the same
//! IEEE operations in the same order (the one substitution, `roundps` for the
//! add-and-subtract-2²³ rounding, is exact; see `rabitq.rs`). The test
//! `fast_encoding_equals_scalar_reference_byte_for_byte` checks both builds
//! against a plain scalar reference. Scoring picks AVX2 at run time; `rabitq4` scores
//! are bit-identical to the scalar fallback, `sq8` scores agree to f32 rounding.

mod error;
pub mod fastscan;
mod header;
mod kernels;
mod lane_dot;
mod pq4;
mod rabitq;
mod rotation;
mod sq8;
#[cfg(test)]
mod tests;
mod training_sample;

pub use error::QuantError;
use fastscan::{Blocks, Lut};
pub use header::HEADER_BYTES;
use lane_dot::lane_dot;
use pq4::Pq4;
pub use pq4::{SUB_DIMS as PQ_SUB_DIMS, sub_quantizers, training_rows as pq4_training_rows};
use rotation::Rotation;
use sq8::Sq8;
use std::fmt;
use std::str::FromStr;

/// Largest `rabitq4` dimension: the rotation is dim² f32 (64 MiB at 4096) and
/// takes O(dim³) f64 work to generate.
pub const MAX_RABITQ_DIM: usize = 4096;

/// Vectors [`Quantizer::encode_batch`] rotates before quantising them: the
/// rotated block (32 × dim f32) stays in L1/L2 until it is read back.
const ENCODE_BLOCK: usize = 32;

/// A quantisation scheme of the `code` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// 8-bit scalar quantisation, per-dimension ranges.
    Sq8,
    /// Extended RaBitQ, 4 bits per dimension, after a random rotation.
    RaBitQ4,
    /// Product quantisation, 4 bits per 2 dimensions, fast-scan.
    Pq4Fs,
}

impl Scheme {
    /// The name used in documents and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Sq8 => "sq8",
            Scheme::RaBitQ4 => "rabitq4",
            Scheme::Pq4Fs => "pq4fs",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = QuantError;

    fn from_str(s: &str) -> Result<Scheme, QuantError> {
        match s {
            "sq8" => Ok(Scheme::Sq8),
            "rabitq4" => Ok(Scheme::RaBitQ4),
            "pq4fs" => Ok(Scheme::Pq4Fs),
            _ => Err(QuantError::UnknownScheme { name: s.to_owned() }),
        }
    }
}

/// The codes of a build by name: a scheme, or `none` (no `code` column).
///
/// # Errors
/// A message naming the choices for any other name.
pub fn parse_codes(s: &str) -> Result<Option<Scheme>, String> {
    if s == "none" {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("unknown codes {s:?}: expected none, sq8, rabitq4 or pq4fs"))
}

/// The name [`parse_codes`] takes for `codes`.
pub const fn codes_name(codes: Option<Scheme>) -> &'static str {
    match codes {
        None => "none",
        Some(Scheme::Sq8) => "sq8",
        Some(Scheme::RaBitQ4) => "rabitq4",
        Some(Scheme::Pq4Fs) => "pq4fs",
    }
}

/// The parameters of one scheme: `sq8` ranges or the `rabitq4` rotation.
/// Clones share the rotation matrix.
#[derive(Clone, Debug)]
pub struct Quantizer {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Sq8(Sq8),
    RaBitQ4(Rotation),
    Pq4(Pq4),
}

/// A query-side vector prepared for [`Quantizer::score`] by the quantiser
/// that will score it.
#[derive(Clone, Debug)]
pub struct PreparedQuery {
    inner: Prepared,
}

#[derive(Clone, Debug)]
enum Prepared {
    Sq8 {
        weights: Vec<f32>,
        offset: f32,
    },
    RaBitQ4 {
        query: Vec<i8>,
        half_scale: f32,
        sum: i32,
    },
    Pq4(Lut),
}

/// Which scoring kernels run on this CPU: `"avx2"` or `"scalar"`.
pub fn simd_path() -> &'static str {
    if kernels::avx2_available() {
        "avx2"
    } else {
        "scalar"
    }
}

impl Quantizer {
    /// `sq8` with ranges from the per-dimension min and max of a row-major
    /// sample of residuals.
    pub fn train_sq8(residuals: &[f32], dim: usize) -> Result<Quantizer, QuantError> {
        Ok(Quantizer {
            kind: Kind::Sq8(Sq8::train(residuals, dim)?),
        })
    }

    /// `sq8` from stored ranges: equal lengths ≥ 1, finite minimums, finite
    /// positive scales.
    pub fn sq8_from_ranges(min: Vec<f32>, scale: Vec<f32>) -> Result<Quantizer, QuantError> {
        Ok(Quantizer {
            kind: Kind::Sq8(Sq8::from_ranges(min, scale)?),
        })
    }

    /// `pq4fs` trained on a row-major sample of residuals with `seed`.
    pub fn train_pq4(residuals: &[f32], dim: usize, seed: u64) -> Result<Quantizer, QuantError> {
        Ok(Quantizer {
            kind: Kind::Pq4(Pq4::train(residuals, dim, seed)?),
        })
    }

    /// `pq4fs` from stored centroids (`sub_quantizers(dim) × 16 × 2`).
    pub fn pq4_from_centroids(dim: usize, centroids: Vec<f32>) -> Result<Quantizer, QuantError> {
        Ok(Quantizer {
            kind: Kind::Pq4(Pq4::from_centroids(dim, centroids)?),
        })
    }

    /// The `pq4fs` centroids, sub-quantiser-major (`m × 16 × 2`).
    pub fn pq4_centroids(&self) -> Option<&[f32]> {
        match &self.kind {
            Kind::Pq4(pq) => Some(pq.centroids()),
            _ => None,
        }
    }

    /// `rabitq4` with the rotation generated from `seed` (O(dim³): 0.04 s at
    /// dim 384, 0.5 s at 1024).
    pub fn rabitq4(dim: usize, seed: u64) -> Result<Quantizer, QuantError> {
        if dim == 0 {
            return Err(QuantError::ZeroDim);
        }
        if dim > MAX_RABITQ_DIM {
            return Err(QuantError::DimTooLarge {
                dim,
                max: MAX_RABITQ_DIM,
            });
        }
        Ok(Quantizer {
            kind: Kind::RaBitQ4(Rotation::generate(dim, seed)),
        })
    }

    pub fn scheme(&self) -> Scheme {
        match self.kind {
            Kind::Sq8(_) => Scheme::Sq8,
            Kind::RaBitQ4(_) => Scheme::RaBitQ4,
            Kind::Pq4(_) => Scheme::Pq4Fs,
        }
    }

    pub fn dim(&self) -> usize {
        match &self.kind {
            Kind::Sq8(sq8) => sq8.dim(),
            Kind::RaBitQ4(rotation) => rotation.dim(),
            Kind::Pq4(pq) => pq.dim(),
        }
    }

    /// Bytes per code: `8 + dim` (`sq8`), `8 + padded_dim / 2` (`rabitq4`)
    /// or `8 + m / 2` (`pq4fs`).
    pub fn code_bytes(&self) -> usize {
        HEADER_BYTES + self.payload_bytes()
    }

    fn payload_bytes(&self) -> usize {
        match &self.kind {
            Kind::Sq8(sq8) => sq8.dim(),
            Kind::RaBitQ4(rotation) => rabitq::payload_bytes(rotation.dim()),
            Kind::Pq4(pq) => pq.m() / 2,
        }
    }

    /// `(min, scale)` of `sq8`.
    pub fn sq8_ranges(&self) -> Option<(&[f32], &[f32])> {
        match &self.kind {
            Kind::Sq8(sq8) => Some((sq8.min(), sq8.scale())),
            _ => None,
        }
    }

    pub fn rotation_seed(&self) -> Option<u64> {
        match &self.kind {
            Kind::RaBitQ4(rotation) => Some(rotation.seed()),
            _ => None,
        }
    }

    /// Lower-case hex sha256 of the rotation's f32 little-endian bytes
    /// (row-major), for a reader to check it regenerated the same matrix.
    pub fn rotation_sha256(&self) -> Option<String> {
        match &self.kind {
            Kind::RaBitQ4(rotation) => Some(rotation.sha256().to_owned()),
            _ => None,
        }
    }

    /// Encodes one residual (`dim` values) of a row of leaf `leaf` (its
    /// centroid, `dim` values; only `pq4fs` reads it) into `out`
    /// (`code_bytes()` bytes).
    pub fn encode(&self, residual: &[f32], leaf: &[f32], out: &mut [u8]) {
        debug_assert_eq!(residual.len(), self.dim());
        debug_assert_eq!(out.len(), self.code_bytes());
        match &self.kind {
            Kind::Sq8(sq8) => encode_sq8(sq8, residual, out),
            Kind::RaBitQ4(rotation) => encode_rabitq_batch(rotation, residual, out),
            Kind::Pq4(pq) => encode_pq4(pq, residual, leaf, out),
        }
    }

    /// Encodes row-major residuals (n × dim) into n consecutive codes, the same
    /// bytes as [`Quantizer::encode`] per vector; row i's leaf centroid is
    /// `leaves[cids[i]]` (`leaves` row-major, `dim` each). Single-threaded;
    /// callers parallelise over batches.
    pub fn encode_batch(&self, residuals: &[f32], leaves: &[f32], cids: &[u32], out: &mut [u8]) {
        let dim = self.dim();
        let code_bytes = self.code_bytes();
        debug_assert_eq!(residuals.len() % dim, 0);
        debug_assert_eq!(out.len(), residuals.len() / dim * code_bytes);
        match &self.kind {
            Kind::Sq8(sq8) => {
                for (r, code) in residuals
                    .chunks_exact(dim)
                    .zip(out.chunks_exact_mut(code_bytes))
                {
                    encode_sq8(sq8, r, code);
                }
            }
            Kind::RaBitQ4(rotation) => encode_rabitq_batch(rotation, residuals, out),
            Kind::Pq4(pq) => {
                for ((r, code), &cid) in residuals
                    .chunks_exact(dim)
                    .zip(out.chunks_exact_mut(code_bytes))
                    .zip(cids)
                {
                    let c = cid as usize;
                    encode_pq4(pq, r, &leaves[c * dim..(c + 1) * dim], code);
                }
            }
        }
    }

    /// `out = P·v` for `rabitq4`, a copy of `v` for `sq8` and `pq4fs` (`dim`
    /// values each).
    /// Fixed order (AVX2 or portable build, the same bits): the same bits on
    /// every CPU.
    pub fn rotate(&self, v: &[f32], out: &mut [f32]) {
        debug_assert_eq!(v.len(), self.dim());
        debug_assert_eq!(out.len(), self.dim());
        match &self.kind {
            Kind::Sq8(_) | Kind::Pq4(_) => out.iter_mut().zip(v).for_each(|(o, &x)| *o = x),
            Kind::RaBitQ4(rotation) => rotation.apply(v, out),
        }
    }

    /// Prepares the query-side vector y, already rotated by
    /// [`Quantizer::rotate`], for [`Quantizer::score`]: `sq8` weights and
    /// constant, or the `rabitq4` int8 query.
    pub fn prepare(&self, y_rotated: &[f32]) -> PreparedQuery {
        debug_assert_eq!(y_rotated.len(), self.dim());
        let inner = match &self.kind {
            Kind::Sq8(sq8) => {
                let (weights, offset) = sq8.prepare(y_rotated);
                Prepared::Sq8 { weights, offset }
            }
            Kind::RaBitQ4(_) => {
                let (query, half_scale, sum) = rabitq::prepare(y_rotated);
                Prepared::RaBitQ4 {
                    query,
                    half_scale,
                    sum,
                }
            }
            Kind::Pq4(pq) => Prepared::Pq4(pq4_lut(pq, y_rotated)),
        };
        PreparedQuery { inner }
    }

    /// Writes the `<r, y>` estimate of each of the `codes.len() / code_bytes()`
    /// codes into `out` (as many as both hold), with the fastest kernel this CPU
    /// runs. A query prepared by a quantiser of another scheme or dimension
    /// scores NaN (and fails a debug assertion).
    pub fn score(&self, query: &PreparedQuery, codes: &[u8], out: &mut [f32]) {
        let code_bytes = self.code_bytes();
        match (&self.kind, &query.inner) {
            (Kind::Sq8(sq8), Prepared::Sq8 { weights, offset }) if weights.len() == sq8.dim() => {
                kernels::sq8_scores(weights, *offset, codes, code_bytes, out)
            }
            (
                Kind::RaBitQ4(_),
                Prepared::RaBitQ4 {
                    query,
                    half_scale,
                    sum,
                },
            ) if query.len() == 2 * self.payload_bytes() => {
                kernels::rabitq_scores(query, *half_scale, *sum, codes, code_bytes, out)
            }
            (Kind::Pq4(pq), Prepared::Pq4(lut)) if lut.bytes.len() == pq.m() * 16 => {
                for (code, o) in codes.chunks_exact(code_bytes).zip(out) {
                    let payload = &code[HEADER_BYTES..];
                    *o = lut.value(lut.sum_packed(payload));
                }
            }
            _ => {
                debug_assert!(false, "query prepared for another quantiser");
                out.fill(f32::NAN);
            }
        }
    }

    /// Pairs of sub-quantisers of a fast-scan scheme (`pq4fs`): its codes
    /// are scored with [`Quantizer::blocks`] and [`Quantizer::query_lut`].
    pub fn fast_scan_pairs(&self) -> Option<usize> {
        match &self.kind {
            Kind::Pq4(pq) => Some(pq.m() / 2),
            _ => None,
        }
    }

    /// The fast-scan blocks of `n` row-major codes (`n × code_bytes()`
    /// bytes); without pairs for a scheme that is not fast-scan.
    pub fn blocks(&self, codes: &[u8], n: usize) -> Blocks {
        let pairs = self.fast_scan_pairs().unwrap_or(0);
        Blocks::from_rows(codes, n, self.code_bytes(), HEADER_BYTES, pairs)
    }

    /// The u8 tables of `<y, r̂>` for a query-side vector `y` (`dim`
    /// values) of a fast-scan scheme: built once per query for every list
    /// (L2 adds each code's [`Quantizer::list_term`]).
    pub fn query_lut(&self, y: &[f32]) -> Option<Lut> {
        match &self.kind {
            Kind::Pq4(pq) => Some(pq4_lut(pq, y)),
            _ => None,
        }
    }

    /// The stored list term `‖r̂‖² + 2·<c, r̂>` of a `pq4fs` code (its
    /// `factor` bytes): under L2 its estimate is
    /// `‖q − c‖² + list term − 2·<q, r̂>`, the distance to the reconstruction.
    pub fn list_term(code: &[u8]) -> f32 {
        match code {
            [_, _, _, _, a, b, c, d, ..] => f32::from_le_bytes([*a, *b, *c, *d]),
            _ => f32::NAN,
        }
    }

    /// The stored `‖r‖²` of a code (NaN if it is shorter than 4 bytes).
    pub fn norm2(code: &[u8]) -> f32 {
        match code {
            [a, b, c, d, ..] => f32::from_le_bytes([*a, *b, *c, *d]),
            _ => f32::NAN,
        }
    }

    /// The approximate residual a code stands for: `sq8` `r̂`; `rabitq4`
    /// `Pᵀ·(f·(u − 7.5))`, whose component along r is exactly `‖r‖` up to
    /// rounding (for tests and `verify`).
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        debug_assert_eq!(code.len(), self.code_bytes());
        debug_assert_eq!(out.len(), self.dim());
        let payload = &code[HEADER_BYTES..];
        match &self.kind {
            Kind::Sq8(sq8) => sq8.decode(payload, out),
            Kind::RaBitQ4(rotation) => {
                let factor = f32::from_le_bytes([code[4], code[5], code[6], code[7]]);
                let mut rotated = vec![0.0; rotation.dim()];
                rabitq::unpack_scaled(payload, factor, &mut rotated);
                rotation.apply_transpose(&rotated, out);
            }
            Kind::Pq4(pq) => pq.decode(payload, out),
        }
    }
}

/// The quantised tables of `<y, r̂>` of `pq4fs`.
fn pq4_lut(pq: &Pq4, y: &[f32]) -> Lut {
    let mut tables = vec![0.0; pq.m() * 16];
    pq.tables(y, &mut tables);
    Lut::quantize(&tables)
}

fn encode_pq4(pq: &Pq4, residual: &[f32], leaf: &[f32], code: &mut [u8]) {
    let (header, payload) = code.split_at_mut(HEADER_BYTES);
    let list_term = pq.encode(residual, leaf, payload);
    write_header(header, norm2(residual), list_term);
}

fn encode_sq8(sq8: &Sq8, residual: &[f32], code: &mut [u8]) {
    let (header, payload) = code.split_at_mut(HEADER_BYTES);
    let recon_norm2 = sq8.encode(residual, payload);
    write_header(header, norm2(residual), recon_norm2);
}

/// `rabitq4` codes of row-major residuals, with the fastest kernels this CPU
/// runs: AVX-512 or AVX2 where present (without FMA), else the portable build
/// of the same code. All do the same IEEE operations in the same order for
/// every output value, so they write the same bytes.
fn encode_rabitq_batch(rotation: &Rotation, residuals: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if kernels::avx512_encode_available() {
        // SAFETY: AVX-512F and AVX2 were detected on this CPU just above.
        unsafe { encode_rabitq_batch_avx512(rotation, residuals, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernels::avx2_encode_available() {
        // SAFETY: AVX2 was detected on this CPU just above.
        unsafe { encode_rabitq_batch_avx2(rotation, residuals, out) };
        return;
    }
    encode_rabitq_batch_portable(rotation, residuals, out);
}

/// [`encode_rabitq_batch`] compiled for the baseline target.
fn encode_rabitq_batch_portable(rotation: &Rotation, residuals: &[f32], out: &mut [u8]) {
    encode_rabitq_batch_inline::<false>(rotation, residuals, out, |block, rotated| {
        rotation.apply_many_portable(block, rotated)
    });
}

/// [`encode_rabitq_batch`] compiled with AVX2 and without FMA.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn encode_rabitq_batch_avx2(rotation: &Rotation, residuals: &[f32], out: &mut [u8]) {
    encode_rabitq_batch_inline::<true>(rotation, residuals, out, |block, rotated| {
        // SAFETY: this function only runs where AVX2 is present.
        unsafe { rotation.apply_many_avx2(block, rotated) }
    });
}

/// [`encode_rabitq_batch`] compiled with AVX-512F and without FMA: the
/// step search's 16 candidates a pass fill one register. (All 32 in one
/// pass measured no faster: the search is bound by its arithmetic.)
///
/// # Safety
/// The CPU must support AVX-512F and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn encode_rabitq_batch_avx512(rotation: &Rotation, residuals: &[f32], out: &mut [u8]) {
    encode_rabitq_batch_inline::<true>(rotation, residuals, out, |block, rotated| {
        // SAFETY: this function only runs where AVX-512F and AVX2 are present.
        unsafe { rotation.apply_many_avx512(block, rotated) }
    });
}

/// Rotates blocks of [`ENCODE_BLOCK`] residuals with `rotate`, then quantises
/// each; inlined so that the quantisation compiles for the caller's target.
#[inline(always)]
fn encode_rabitq_batch_inline<const ROUND_INSTR: bool>(
    rotation: &Rotation,
    residuals: &[f32],
    out: &mut [u8],
    mut rotate: impl FnMut(&[f32], &mut [f32]),
) {
    let dim = rotation.dim();
    let code_bytes = HEADER_BYTES + rabitq::payload_bytes(dim);
    let mut rotated = vec![0.0; ENCODE_BLOCK * dim];
    let mut levels = vec![0.0; dim];
    for (block, codes) in residuals
        .chunks(ENCODE_BLOCK * dim)
        .zip(out.chunks_mut(ENCODE_BLOCK * code_bytes))
    {
        let rotated = &mut rotated[..block.len()];
        rotate(block, rotated);
        for ((r, o), code) in block
            .chunks_exact(dim)
            .zip(rotated.chunks_exact(dim))
            .zip(codes.chunks_exact_mut(code_bytes))
        {
            encode_rabitq::<ROUND_INSTR>(r, o, &mut levels, code);
        }
    }
}

#[inline(always)]
fn encode_rabitq<const ROUND_INSTR: bool>(
    residual: &[f32],
    rotated: &[f32],
    levels: &mut [f32],
    code: &mut [u8],
) {
    let (header, payload) = code.split_at_mut(HEADER_BYTES);
    let factor = rabitq::encode_rotated::<ROUND_INSTR>(rotated, levels, payload);
    write_header(header, norm2(residual), factor);
}

#[inline(always)]
fn write_header(header: &mut [u8], norm2: f32, factor: f32) {
    header[..4].copy_from_slice(&norm2.to_le_bytes());
    header[4..].copy_from_slice(&factor.to_le_bytes());
}

/// `‖r‖²` as stored: f64 lane sum rounded once; NaN canonicalised so the
/// bytes do not depend on the CPU's NaN propagation.
#[inline(always)]
fn norm2(residual: &[f32]) -> f32 {
    let n = lane_dot(residual, residual) as f32;
    if n.is_nan() { f32::NAN } else { n }
}
