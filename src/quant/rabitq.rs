//! `rabitq4`: extended-RaBitQ with 4 bits per dimension, on rotated residuals.
//!
//! **Encoding** of a rotated residual o = P·r (see `rotation.rs`): with
//! `Δ_max = max_i |o_i| / 7.5`, each of [`STEP_CANDIDATES`] steps
//! `Δ_k = Δ_max · (1 − k / 62)`, k = 0..31 (from no clipping down to half of
//! it), gives codes `u_i = round(clamp(o_i / Δ_k + 7.5, 0, 15))` (f32, ties
//! to even), the nearest of the levels `ô_i = (u_i − 7.5)·Δ_k`. The step with the largest cosine
//! `<ô, o> / (||ô||·||o||)` wins (the first one on ties; the search sums in
//! f32, the factor in f64). The stored factor is
//! `f = ||o||² / Σ_i (u_i − 7.5)·o_i`, so that `f·(u − 7.5) = ô·||o||²/<ô, o>`
//! and RaBitQ's estimator reads `<r, y> = <o, ỹ> ≈ f·Σ_i (u_i − 7.5)·ỹ_i` with
//! ỹ = P·y. A zero, subnormal-tiny or non-finite residual stores codes 8 and
//! factor 0 (its estimate is 0). All sums run in a fixed order in plain Rust, never fused (the
//! AVX2 build enables no FMA and vectorises only across candidates), so the
//! bytes are the same on every CPU.
//!
//! **Query side**: ỹ is quantised to int8 with `s = max_i |ỹ_i| / 127`,
//! `q_i = round(ỹ_i / s)`, and the estimate uses ỹ' = s·q throughout:
//! `f·Σ(u_i − 7.5)·s·q_i = f·(s/2)·(2·Σ u_i q_i − 15·Σ q_i)`, where the integer
//! sums are exact.

use super::lane_dot::lane_dot;

/// Number of steps tried per vector.
pub(crate) const STEP_CANDIDATES: usize = 32;

/// Bytes of packed nibbles for `dim` dimensions: dim padded to a multiple of
/// 64, two codes per byte.
pub(crate) fn payload_bytes(dim: usize) -> usize {
    dim.div_ceil(64) * 32
}

/// Quantises the rotated residual `o` (dim values) into `payload`
/// ([`payload_bytes`]) and returns the factor f. `levels` is scratch of at
/// least `dim` values.
#[inline(always)]
pub(crate) fn encode_rotated<const ROUND_INSTR: bool>(
    o: &[f32],
    levels: &mut [f32],
    payload: &mut [u8],
) -> f32 {
    let levels = &mut levels[..o.len()];
    let max_abs = o.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let norm2 = lane_dot(o, o);
    let max_step = max_abs / 7.5;
    // A normal step keeps every 1/step finite; NaN is skipped by `max` but
    // caught by the norm.
    let factor = if max_step.is_normal() && norm2.is_finite() {
        let steps: [f32; STEP_CANDIDATES] =
            std::array::from_fn(|k| max_step * (1.0 - k as f32 / 62.0));
        let scores = fit::<ROUND_INSTR>(o, steps.map(|step| 1.0 / step));
        let mut best = (f32::NEG_INFINITY, max_step);
        for (&score, &step) in scores.iter().zip(&steps) {
            if score > best.0 {
                best = (score, step);
            }
        }
        let inverse_step = 1.0 / best.1;
        for (c, &x) in levels.iter_mut().zip(o) {
            *c = level::<ROUND_INSTR>(x, inverse_step);
        }
        // > 0: each level is the one nearest o_i, so (u_i − 7.5)·o_i ≥ 0
        // except where |o_i| < 2⁻²²·Δ rounds onto the wrong side of 7.5, while
        // the largest |o_i| alone contributes 7.5·max|o_i| (no step clips it
        // below the top level).
        (norm2 / lane_dot(levels, o)) as f32
    } else {
        levels.fill(0.5);
        0.0
    };
    pack(levels, payload);
    factor
}

/// `u_i − 7.5` for the nearest level, `u_i = round(clamp(o_i/Δ + 7.5, 0, 15))`
/// with ties to even, rounding by adding and subtracting 2²³: plain IEEE
/// arithmetic, no libm call and no integer conversion, and the two selects
/// compile to maxps/minps, so the search vectorises. With `ROUND_INSTR` (only
/// where SSE4.1 is enabled, as in the AVX2 build) the rounding is
/// `round_ties_even` instead, one `roundps`: for v in [0, 15], v + 2²³ lies in
/// [2²³, 2²³ + 15] where the spacing is 1, so adding 2²³ rounds v to the
/// nearest integer, ties to even (2²³ is even), and subtracting it is exact —
/// the same value bit for bit.
#[inline(always)]
fn level<const ROUND_INSTR: bool>(x: f32, inverse_step: f32) -> f32 {
    const ROUNDER: f32 = 8_388_608.0;
    let v = x * inverse_step + 7.5;
    let v = if v > 0.0 { v } else { 0.0 };
    let v = if v < 15.0 { v } else { 15.0 };
    let rounded = if ROUND_INSTR {
        v.round_ties_even()
    } else {
        v + ROUNDER - ROUNDER
    };
    rounded - 7.5
}

/// Candidates [`fit`] scores in one pass over o.
const FIT_CHUNK: usize = 16;

/// The search's score of each step 1/`inverse_steps[k]`: `<c, o>² / ‖c‖²`
/// with c_i = u_i − 7.5 (cos² up to the common factor ‖o‖²), each sum in f32
/// over i in order. The inner loop runs across the candidates (16 at a time), so it
/// vectorises without reassociating any sum.
#[inline(always)]
fn fit<const ROUND_INSTR: bool>(
    o: &[f32],
    inverse_steps: [f32; STEP_CANDIDATES],
) -> [f32; STEP_CANDIDATES] {
    let mut dot = [0.0f32; STEP_CANDIDATES];
    let mut sq = [0.0f32; STEP_CANDIDATES];
    // Half the candidates per pass over o keeps the accumulators, steps and
    // constants in 16 registers; each sum still runs over i in order.
    for ((dot, sq), inverse_steps) in dot
        .as_chunks_mut::<FIT_CHUNK>()
        .0
        .iter_mut()
        .zip(sq.as_chunks_mut::<FIT_CHUNK>().0)
        .zip(inverse_steps.as_chunks::<FIT_CHUNK>().0)
    {
        for &x in o {
            for ((d, s), &inverse_step) in dot.iter_mut().zip(sq.iter_mut()).zip(inverse_steps) {
                let c = level::<ROUND_INSTR>(x, inverse_step);
                *d += c * x;
                *s += c * c;
            }
        }
    }
    std::array::from_fn(|k| dot[k] * dot[k] / sq[k])
}

/// Packs the codes `u_i = levels_i + 7.5` (dim of them, the rest zero): for
/// each 64-dim block b, byte 32b + j holds u[64b + j] in its low nibble and
/// u[64b + 32 + j] in its high nibble.
#[inline(always)]
fn pack(levels: &[f32], payload: &mut [u8]) {
    let code = |i: usize| levels.get(i).map_or(0, |&c| (c + 7.5) as u8);
    for (b, block) in payload.chunks_exact_mut(32).enumerate() {
        for (j, byte) in block.iter_mut().enumerate() {
            *byte = code(64 * b + j) | code(64 * b + 32 + j) << 4;
        }
    }
}

/// The codes of the first `out.len()` dimensions of `payload`, as
/// `f·(u_i − 7.5)` (the rotated residual estimate).
pub(crate) fn unpack_scaled(payload: &[u8], factor: f32, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        let byte = payload[i / 64 * 32 + i % 32];
        let u = if i % 64 < 32 { byte & 0x0F } else { byte >> 4 };
        *o = factor * (f32::from(u) - 7.5);
    }
}

/// The int8 query (padded with zeros to a multiple of 64), half its scale
/// `s/2`, and `Σ q_i`. A zero query gets scale 0 and all-zero codes.
pub(crate) fn prepare(y_rotated: &[f32]) -> (Vec<i8>, f32, i32) {
    let max_abs = y_rotated.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let (scale, inverse) = if max_abs > 0.0 && max_abs.is_finite() {
        (max_abs / 127.0, 127.0 / max_abs)
    } else {
        (0.0, 0.0)
    };
    let mut query = vec![0i8; payload_bytes(y_rotated.len()) * 2];
    for (q, &y) in query.iter_mut().zip(y_rotated) {
        // Rounds half away from zero like `f32::round`, without its libm
        // call: the truncating cast vectorises (|y · inverse| <= 127).
        let x = y * inverse;
        *q = (x + 0.5f32.copysign(x)).clamp(-127.0, 127.0) as i8;
    }
    let sum = query.iter().map(|&q| i32::from(q)).sum();
    (query, scale / 2.0, sum)
}
