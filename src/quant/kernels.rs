//! Code-scoring kernels: a u8×f32 dot product for `sq8` and a 4-bit × int8
//! integer dot product for `rabitq4`, each with a portable scalar version and an
//! AVX2 version chosen at run time on x86-64. Every kernel scores a run of
//! fixed-width codes (`code_bytes` apart, payload after the 8-byte header) into
//! `out`, one estimate per code.
//!
//! The `rabitq4` integer sum is exact, and both versions then apply the same
//! f32 operations ([`rabitq_finish`]), so AVX2 and scalar return identical bits.
//! The `sq8` versions sum f32 products in different orders (and AVX2 fuses the
//! multiply-add), so they agree only to f32 rounding (see the tests).

use super::header::HEADER_BYTES;

/// Whether the AVX2 encoding kernels run on this CPU. They need AVX2 only:
/// they must not fuse multiply-adds, so they never enable FMA.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_encode_available() -> bool {
    is_x86_feature_detected!("avx2")
}

/// Whether the AVX-512 encoding kernels run on this CPU: AVX-512F (with the
/// AVX2 it implies), again without FMA. The same code as the AVX2 build,
/// with 16-lane registers: twice the values an instruction, the same
/// operations on each value.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512_encode_available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx2")
}

/// Whether the AVX2 kernels run on this CPU (`sq8` also needs FMA).
pub(crate) fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[k] = offset + Σ_i weights[i]·u_i` for code k, dispatched.
pub(crate) fn sq8_scores(
    weights: &[f32],
    offset: f32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2_available() {
        // SAFETY: AVX2 and FMA were detected on this CPU just above.
        unsafe { sq8_scores_avx2(weights, offset, codes, code_bytes, out) };
        return;
    }
    sq8_scores_scalar(weights, offset, codes, code_bytes, out);
}

/// `out[k] = rabitq_finish(Σ_i u_i·query[i], code k)`, dispatched. `query` is
/// padded to a multiple of 64 with zeros; each payload holds `query.len() / 2`
/// bytes in the nibble layout of the module comment.
pub(crate) fn rabitq_scores(
    query: &[i8],
    half_scale: f32,
    query_sum: i32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2_available() {
        // SAFETY: AVX2 was detected on this CPU just above.
        unsafe { rabitq_scores_avx2(query, half_scale, query_sum, codes, code_bytes, out) };
        return;
    }
    rabitq_scores_scalar(query, half_scale, query_sum, codes, code_bytes, out);
}

/// The f32 factor stored at bytes 4..8 of a code.
#[inline(always)]
fn factor(code: &[u8]) -> f32 {
    f32::from_le_bytes([code[4], code[5], code[6], code[7]])
}

/// `<ô_scaled, ỹ'>` from the exact integer sum: with ỹ' = 2·half_scale·q and
/// ô ∝ u − 7.5, Σ(u_i − 7.5)·ỹ'_i = half_scale·(2·Σu_i q_i − 15·Σq_i), times the
/// code's factor. The integer part is exact (|2·dot| ≤ 2·15·127·padded_dim),
/// and below 2²⁴ up to `MAX_RABITQ_DIM`, so even its conversion to f32 is.
#[inline(always)]
fn rabitq_finish(dot: i32, half_scale: f32, query_sum: i32, code: &[u8]) -> f32 {
    let centred = 2 * i64::from(dot) - 15 * i64::from(query_sum);
    centred as f32 * half_scale * factor(code)
}

pub(crate) fn sq8_scores_scalar(
    weights: &[f32],
    offset: f32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    let dim = weights.len();
    for (code, o) in codes.chunks_exact(code_bytes).zip(out) {
        let payload = &code[HEADER_BYTES..HEADER_BYTES + dim];
        let mut acc = [0.0f32; 4];
        let (w_chunks, w_tail) = weights.as_chunks::<4>();
        let (p_chunks, p_tail) = payload.as_chunks::<4>();
        for (w, p) in w_chunks.iter().zip(p_chunks) {
            for l in 0..4 {
                acc[l] += w[l] * f32::from(p[l]);
            }
        }
        let tail: f32 = w_tail
            .iter()
            .zip(p_tail)
            .map(|(w, &p)| w * f32::from(p))
            .sum();
        *o = offset + ((acc[0] + acc[1]) + (acc[2] + acc[3]) + tail);
    }
}

pub(crate) fn rabitq_scores_scalar(
    query: &[i8],
    half_scale: f32,
    query_sum: i32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    let payload_bytes = query.len() / 2;
    for (code, o) in codes.chunks_exact(code_bytes).zip(out) {
        let payload = &code[HEADER_BYTES..HEADER_BYTES + payload_bytes];
        let mut dot = 0i32;
        for (bytes, q) in payload.chunks_exact(32).zip(query.chunks_exact(64)) {
            let (q_low, q_high) = q.split_at(32);
            for ((&byte, &ql), &qh) in bytes.iter().zip(q_low).zip(q_high) {
                dot +=
                    i32::from(byte & 0x0F) * i32::from(ql) + i32::from(byte >> 4) * i32::from(qh);
            }
        }
        *o = rabitq_finish(dot, half_scale, query_sum, code);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn sq8_scores_avx2(
    weights: &[f32],
    offset: f32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let dim = weights.len();
    let w = weights.as_ptr();
    for (code, o) in codes.chunks_exact(code_bytes).zip(out) {
        let payload = &code[HEADER_BYTES..HEADER_BYTES + dim];
        let p = payload.as_ptr();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads below): `payload` and `weights` both hold `dim`
        // elements, and every load reads 8 elements at i + 8k with
        // i + 8k + 8 ≤ dim by the loop conditions; loadl/loadu need no alignment.
        while i + 32 <= dim {
            for (k, a) in acc.iter_mut().enumerate() {
                let (bytes, ws) = unsafe {
                    (
                        _mm_loadl_epi64(p.add(i + 8 * k).cast::<__m128i>()),
                        _mm256_loadu_ps(w.add(i + 8 * k)),
                    )
                };
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), ws, *a);
            }
            i += 32;
        }
        while i + 8 <= dim {
            // SAFETY: as above, i + 8 ≤ dim.
            let (bytes, ws) = unsafe {
                (
                    _mm_loadl_epi64(p.add(i).cast::<__m128i>()),
                    _mm256_loadu_ps(w.add(i)),
                )
            };
            acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), ws, acc[0]);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
        let half = _mm_add_ps(half, _mm_movehl_ps(half, half));
        let half = _mm_add_ss(half, _mm_movehdup_ps(half));
        let tail: f32 = weights[i..]
            .iter()
            .zip(&payload[i..])
            .map(|(w, &u)| w * f32::from(u))
            .sum();
        *o = offset + (_mm_cvtss_f32(half) + tail);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) fn rabitq_scores_avx2(
    query: &[i8],
    half_scale: f32,
    query_sum: i32,
    codes: &[u8],
    code_bytes: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let payload_bytes = query.len() / 2;
    for (code, o) in codes.chunks_exact(code_bytes).zip(out) {
        let acc = nibble_dot_lanes(query, &code[HEADER_BYTES..HEADER_BYTES + payload_bytes]);
        let half = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256(acc, 1),
        );
        let half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0b01_00_11_10));
        let half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0b10_11_00_01));
        *o = rabitq_finish(_mm_cvtsi128_si32(half), half_scale, query_sum, code);
    }
}

/// Eight i32 lanes whose sum is `Σ u_i·query[i]` for one payload of
/// `query.len() / 2` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn nibble_dot_lanes(query: &[i8], payload: &[u8]) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let low_nibbles = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_si256();
    for (bytes, q) in payload.chunks_exact(32).zip(query.chunks_exact(64)) {
        // SAFETY: `bytes` holds 32 bytes and `q` 64, so the three 32-byte
        // loads are in bounds; loadu needs no alignment.
        let (bytes, q_low, q_high) = unsafe {
            (
                _mm256_loadu_si256(bytes.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(q.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(q.as_ptr().add(32).cast::<__m256i>()),
            )
        };
        let low = _mm256_and_si256(bytes, low_nibbles);
        let high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
        // u8 × i8 pairs: |2·15·127| = 3810 each, 7620 after the add, far
        // below i16 saturation (32767).
        let pairs = _mm256_add_epi16(
            _mm256_maddubs_epi16(low, q_low),
            _mm256_maddubs_epi16(high, q_high),
        );
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
    }
    acc
}
