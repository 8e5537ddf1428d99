//! The fast-scan kernel: sums of per-query lookup tables over 4-bit codes,
//! 32 vectors at a time, in the manner of FAISS's `IndexIVFPQFastScan`.
//!
//! A vector has `m` 4-bit codes (one per sub-quantiser, `m` even). A query
//! brings `m` tables of 16 f32 entries; the score of a vector is
//! `Σ_s table_s[code_s]`. [`Lut::quantize`] turns the tables into u8 once per
//! query: each table loses its minimum (summed into [`Lut::bias`]) and all
//! are scaled by one factor so the largest range is 255, rounded to nearest.
//! So a score is `bias + S / scale` with `S` the exact integer sum of the u8
//! entries, and `|score − Σ table_s[code_s]| ≤ m / (2·scale)` (each entry is
//! off by at most half a step).
//!
//! ## Block layout ([`Blocks`])
//! Vectors are grouped in blocks of [`BLOCK`] (= 32); a block holds `m / 2`
//! pairs of sub-quantisers, 32 bytes each, block-major then pair-major. In
//! the 32 bytes of pair p (sub-quantisers 2p and 2p+1), for j < 16:
//!
//! | byte | low nibble | high nibble |
//! |---|---|---|
//! | j | code 2p of vector j | code 2p of vector j + 16 |
//! | 16 + j | code 2p+1 of vector j | code 2p+1 of vector j + 16 |
//!
//! and the query's tables for the pair are 32 bytes: table 2p then 2p+1. One
//! `vpshufb` of the tables by the low nibbles then looks up sub-quantiser 2p
//! for vectors 0..16 in the low 128-bit lane and 2p+1 in the high lane, and
//! the high nibbles do the same for vectors 16..32. The u8 results add into
//! u16 lanes (`x`, and `x >> 8` for the odd vectors; the even ones are the
//! difference), flushed into u32 every `FLUSH_PAIRS` (256) pairs so that no
//! sum overflows (255 · 256 < 2¹⁶). The padding vectors of a last partial
//! block have codes 0.
//!
//! Three kernels compute the same exact integers: AVX-512 (two pairs per
//! instruction) and AVX2, chosen at run time, and a portable scalar one, the
//! reference of the tests.

use std::mem::MaybeUninit;

/// Vectors per block.
pub const BLOCK: usize = 32;

/// Pairs accumulated in u16 before the sums are widened to u32: each u16
/// lane takes one u8 per pair, and `255 × 256 = 65,280 < 65,536`.
const FLUSH_PAIRS: usize = 256;

/// Which fast-scan kernel runs on this CPU: `"avx512"`, `"avx2"` or
/// `"scalar"`.
pub fn kernel_path() -> &'static str {
    if avx512() {
        "avx512"
    } else if avx2() {
        "avx2"
    } else {
        "scalar"
    }
}

fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The codes of `n` vectors in the block layout of the module comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// Vectors (the last block is padded to [`BLOCK`]).
    pub n: usize,
    /// Pairs of sub-quantisers (`m / 2`).
    pub pairs: usize,
    /// `n.div_ceil(32) × pairs × 32` bytes.
    pub bytes: Vec<u8>,
}

impl Blocks {
    /// The bytes of the blocks of `n` codes of `pairs` pairs of
    /// sub-quantisers: 32 a pair a block of [`BLOCK`] codes, the last block
    /// padded.
    pub fn size(n: usize, pairs: usize) -> usize {
        n.div_ceil(BLOCK) * pairs * 32
    }

    /// The blocks of `n` row-major packed codes, `stride` bytes apart,
    /// starting `offset` bytes into each, where byte p of a code holds
    /// sub-quantiser 2p in its low nibble and 2p+1 in its high nibble
    /// (`pairs` bytes). `rows` must hold `n × stride` bytes.
    ///
    /// A block is built 16 pairs at a time by one transposing step (a
    /// 16 × 16 byte transpose per nibble), straight from the rows where the
    /// block is full and the run whole; otherwise (a last partial block,
    /// the last run when `pairs` is no multiple of 16) from a zero-padded
    /// copy of the run, so every run takes the same step and the padding
    /// codes are 0.
    pub fn from_rows(rows: &[u8], n: usize, stride: usize, offset: usize, pairs: usize) -> Blocks {
        assert!(
            n == 0 || (offset + pairs <= stride && rows.len() >= n * stride),
            "{n} codes of {stride} bytes with {pairs} pairs at {offset} in {} bytes",
            rows.len()
        );
        let len = Blocks::size(n, pairs);
        let mut bytes: Vec<u8> = Vec::with_capacity(len);
        let out = &mut bytes.spare_capacity_mut()[..len];
        let mut padded = [0u8; BLOCK * RUN_PAIRS];
        let mut part = [MaybeUninit::new(0u8); RUN_PAIRS * 32];
        #[cfg(target_arch = "x86_64")]
        let two_runs = transpose_path() == TransposePath::Avx512;
        if len > 0 {
            for (b, block) in out.chunks_exact_mut(pairs * 32).enumerate() {
                let (first, vectors) = (b * BLOCK, BLOCK.min(n - b * BLOCK));
                let mut p = 0;
                while p < pairs {
                    let at = |j: usize| (first + j) * stride + offset + p;
                    #[cfg(target_arch = "x86_64")]
                    if two_runs && vectors == BLOCK && pairs - p >= 2 * RUN_PAIRS {
                        let both = 2 * RUN_PAIRS;
                        let source = Rows::with_width(rows, at(0), stride, both);
                        let run = &mut block[p * 32..(p + both) * 32];
                        // SAFETY: AVX-512 F, BW and VL were detected; each
                        // row holds `both` readable bytes (`with_width`).
                        unsafe {
                            transpose_two_runs_avx512(source, run.try_into().expect("two runs"));
                        }
                        p += both;
                        continue;
                    }
                    let width = (pairs - p).min(RUN_PAIRS);
                    let run = &mut block[p * 32..(p + width) * 32];
                    let source = if vectors == BLOCK && width == RUN_PAIRS {
                        Rows::new(rows, at(0), stride)
                    } else {
                        padded.fill(0);
                        for (j, row) in padded.chunks_exact_mut(RUN_PAIRS).take(vectors).enumerate()
                        {
                            row[..width].copy_from_slice(&rows[at(j)..at(j) + width]);
                        }
                        Rows::new(&padded, 0, RUN_PAIRS)
                    };
                    if width == RUN_PAIRS {
                        transpose_run(source, run.try_into().expect("a whole run"));
                    } else {
                        transpose_run(source, &mut part);
                        run.copy_from_slice(&part[..width * 32]);
                    }
                    p += width;
                }
            }
        }
        // SAFETY: every byte of the `len` was written above: the blocks
        // (`pairs × 32` bytes each) cover them, and each block's runs
        // (16 pairs of 32 bytes, the last one `width` pairs) cover it.
        unsafe { bytes.set_len(len) };
        Blocks { n, pairs, bytes }
    }
}

/// The 32 rows of a run, `stride` bytes apart from `start` in `bytes`,
/// each with at least [`RUN_PAIRS`] bytes: checked once, so that the
/// transposition reads them without a check per row.
#[derive(Clone, Copy)]
struct Rows<'a> {
    bytes: &'a [u8],
    start: usize,
    stride: usize,
    /// Readable bytes a row (at least [`RUN_PAIRS`]).
    width: usize,
}

impl<'a> Rows<'a> {
    fn new(bytes: &'a [u8], start: usize, stride: usize) -> Rows<'a> {
        Rows::with_width(bytes, start, stride, RUN_PAIRS)
    }

    /// Rows of `width` (≥ [`RUN_PAIRS`]) readable bytes each.
    fn with_width(bytes: &'a [u8], start: usize, stride: usize, width: usize) -> Rows<'a> {
        assert!(
            width >= RUN_PAIRS && start + (BLOCK - 1) * stride + width <= bytes.len(),
            "32 rows of {width} bytes, {stride} apart from {start}, in {} bytes",
            bytes.len()
        );
        Rows {
            bytes,
            start,
            stride,
            width,
        }
    }

    /// Where row `j` (< 32) starts: `width` readable bytes.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn row(&self, j: usize) -> *const u8 {
        debug_assert!(j < BLOCK);
        // SAFETY: `start + j·stride + width ≤ bytes.len()` for j < 32
        // (`with_width`).
        unsafe { self.bytes.as_ptr().add(self.start + j * self.stride) }
    }

    /// Byte `q` (< `width`) of row `j` (< 32).
    fn byte(&self, j: usize, q: usize) -> u8 {
        debug_assert!(j < BLOCK && q < self.width);
        self.bytes[self.start + j * self.stride + q]
    }
}

/// Pairs transposed at once by [`transpose_run`].
const RUN_PAIRS: usize = 16;

/// [`RUN_PAIRS`] pairs of one full block: row j's 16 code bytes start at
/// `rows.row(j)` (j < 32); `out` receives the 16 pairs' 32 bytes each
/// (module comment). With AVX2, both halves of every pair at once
/// ([`transpose_run_wide`]; compiled for AVX-512 VL where the CPU has it,
/// whose 32 registers hold the whole matrix), a portable loop elsewhere:
/// the same bytes on every path.
fn transpose_run(rows: Rows<'_>, out: &mut [MaybeUninit<u8>; RUN_PAIRS * 32]) {
    #[cfg(target_arch = "x86_64")]
    {
        match transpose_path() {
            // SAFETY: the path's features were detected.
            TransposePath::Avx512 => unsafe { transpose_run_avx512(rows, out) },
            // SAFETY: as above.
            TransposePath::Avx2 => unsafe { transpose_run_avx2(rows, out) },
            TransposePath::Scalar => transpose_run_scalar(rows, out),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        transpose_run_scalar(rows, out);
    }
}

/// The transposition [`transpose_run`] runs on this CPU.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransposePath {
    Avx512,
    Avx2,
    Scalar,
}

#[cfg(target_arch = "x86_64")]
fn transpose_path() -> TransposePath {
    if avx512() && is_x86_feature_detected!("avx512vl") {
        TransposePath::Avx512
    } else if avx2() {
        TransposePath::Avx2
    } else {
        TransposePath::Scalar
    }
}

/// [`transpose_run_wide`] compiled for AVX-512 VL.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn transpose_run_avx512(rows: Rows<'_>, out: &mut [MaybeUninit<u8>; RUN_PAIRS * 32]) {
    // SAFETY: AVX2 is enabled here.
    unsafe { transpose_run_wide(rows, out) }
}

/// [`transpose_run_wide`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_run_avx2(rows: Rows<'_>, out: &mut [MaybeUninit<u8>; RUN_PAIRS * 32]) {
    // SAFETY: AVX2 is enabled here.
    unsafe { transpose_run_wide(rows, out) }
}

/// [`transpose_run`] in 256-bit registers: register j holds, for pairs
/// 0..16, the low nibbles of rows j and j + 16 in its low lane and their
/// high nibbles in its high lane (each row's 16 bytes broadcast to both
/// lanes, then shifted by a per-lane count), so one 16 × 16 transpose in
/// each lane ([`transpose16_lanes`]) leaves pair q's 32 bytes in register q.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose_run_wide(rows: Rows<'_>, out: &mut [MaybeUninit<u8>; RUN_PAIRS * 32]) {
    use std::arch::x86_64::*;
    // SAFETY: AVX2 (the caller's); `row(j)` starts 16 readable bytes, and
    // loadu needs no alignment.
    let load = |j: usize| unsafe {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(rows.row(j).cast::<__m128i>()))
    };
    // SAFETY (all intrinsics below): AVX2, the caller's.
    unsafe {
        let nibble = _mm256_set1_epi8(0x0F);
        let top = _mm256_set1_epi8(0xF0u8 as i8);
        // Row j: as is in the low lane (low nibbles), >> 4 in the high one;
        // row j + 16: << 4 in the low lane, as is in the high one.
        let (right, left) = (_mm256_set_epi64x(4, 4, 0, 0), _mm256_set_epi64x(0, 0, 4, 4));
        let mut x = [_mm256_setzero_si256(); 16];
        for (j, x) in x.iter_mut().enumerate() {
            let a = _mm256_srlv_epi64(load(j), right);
            let z = _mm256_sllv_epi64(load(j + 16), left);
            *x = _mm256_or_si256(_mm256_and_si256(a, nibble), _mm256_and_si256(z, top));
        }
        for (pair, t) in out.chunks_exact_mut(32).zip(transpose16_lanes(x)) {
            // `pair` is 32 bytes; storeu needs no alignment.
            _mm256_storeu_si256(pair.as_mut_ptr().cast::<__m256i>(), t);
        }
    }
}

/// Defines `$name`, the transpose of a 16 × 16 byte matrix in each 128-bit
/// lane of 16 registers of type `$reg`: byte r of lane l of `out[c]` is
/// byte c of lane l of `x[r]` (four rounds of unpacks: 8, 16, 32, 64 bits,
/// written out so that every value stays in a register). The unpacks work
/// lane by lane at every register width, so one body serves AVX2
/// (`__m256i`, two lanes) and AVX-512 (`__m512i`, four).
macro_rules! transpose16_lanes {
    ($(#[$doc:meta])* $name:ident, $reg:ident, $zero:ident,
     $lo8:ident, $hi8:ident, $lo16:ident, $hi16:ident,
     $lo32:ident, $hi32:ident, $lo64:ident, $hi64:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[inline(always)]
        unsafe fn $name(x: [std::arch::x86_64::$reg; 16]) -> [std::arch::x86_64::$reg; 16] {
            use std::arch::x86_64::*;
            // SAFETY: the caller's features.
            unsafe {
                let (mut s1, mut s2) = ([$zero(); 16], [$zero(); 16]);
                let (mut s3, mut out) = ([$zero(); 16], [$zero(); 16]);
                s1[0] = $lo8(x[0], x[1]);
                s1[8] = $hi8(x[0], x[1]);
                s1[1] = $lo8(x[2], x[3]);
                s1[9] = $hi8(x[2], x[3]);
                s1[2] = $lo8(x[4], x[5]);
                s1[10] = $hi8(x[4], x[5]);
                s1[3] = $lo8(x[6], x[7]);
                s1[11] = $hi8(x[6], x[7]);
                s1[4] = $lo8(x[8], x[9]);
                s1[12] = $hi8(x[8], x[9]);
                s1[5] = $lo8(x[10], x[11]);
                s1[13] = $hi8(x[10], x[11]);
                s1[6] = $lo8(x[12], x[13]);
                s1[14] = $hi8(x[12], x[13]);
                s1[7] = $lo8(x[14], x[15]);
                s1[15] = $hi8(x[14], x[15]);
                s2[0] = $lo16(s1[0], s1[1]);
                s2[4] = $hi16(s1[0], s1[1]);
                s2[8] = $lo16(s1[8], s1[9]);
                s2[12] = $hi16(s1[8], s1[9]);
                s2[1] = $lo16(s1[2], s1[3]);
                s2[5] = $hi16(s1[2], s1[3]);
                s2[9] = $lo16(s1[10], s1[11]);
                s2[13] = $hi16(s1[10], s1[11]);
                s2[2] = $lo16(s1[4], s1[5]);
                s2[6] = $hi16(s1[4], s1[5]);
                s2[10] = $lo16(s1[12], s1[13]);
                s2[14] = $hi16(s1[12], s1[13]);
                s2[3] = $lo16(s1[6], s1[7]);
                s2[7] = $hi16(s1[6], s1[7]);
                s2[11] = $lo16(s1[14], s1[15]);
                s2[15] = $hi16(s1[14], s1[15]);
                s3[0] = $lo32(s2[0], s2[1]);
                s3[1] = $hi32(s2[0], s2[1]);
                s3[2] = $lo32(s2[2], s2[3]);
                s3[3] = $hi32(s2[2], s2[3]);
                s3[4] = $lo32(s2[4], s2[5]);
                s3[5] = $hi32(s2[4], s2[5]);
                s3[6] = $lo32(s2[6], s2[7]);
                s3[7] = $hi32(s2[6], s2[7]);
                s3[8] = $lo32(s2[8], s2[9]);
                s3[9] = $hi32(s2[8], s2[9]);
                s3[10] = $lo32(s2[10], s2[11]);
                s3[11] = $hi32(s2[10], s2[11]);
                s3[12] = $lo32(s2[12], s2[13]);
                s3[13] = $hi32(s2[12], s2[13]);
                s3[14] = $lo32(s2[14], s2[15]);
                s3[15] = $hi32(s2[14], s2[15]);
                out[0] = $lo64(s3[0], s3[2]);
                out[1] = $hi64(s3[0], s3[2]);
                out[2] = $lo64(s3[1], s3[3]);
                out[3] = $hi64(s3[1], s3[3]);
                out[4] = $lo64(s3[4], s3[6]);
                out[5] = $hi64(s3[4], s3[6]);
                out[6] = $lo64(s3[5], s3[7]);
                out[7] = $hi64(s3[5], s3[7]);
                out[8] = $lo64(s3[8], s3[10]);
                out[9] = $hi64(s3[8], s3[10]);
                out[10] = $lo64(s3[9], s3[11]);
                out[11] = $hi64(s3[9], s3[11]);
                out[12] = $lo64(s3[12], s3[14]);
                out[13] = $hi64(s3[12], s3[14]);
                out[14] = $lo64(s3[13], s3[15]);
                out[15] = $hi64(s3[13], s3[15]);
                out
            }
        }
    };
}

transpose16_lanes!(
    /// The 16 × 16 byte transposes of 16 256-bit registers.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    transpose16_lanes,
    __m256i, _mm256_setzero_si256,
    _mm256_unpacklo_epi8, _mm256_unpackhi_epi8, _mm256_unpacklo_epi16, _mm256_unpackhi_epi16,
    _mm256_unpacklo_epi32, _mm256_unpackhi_epi32, _mm256_unpacklo_epi64, _mm256_unpackhi_epi64
);

transpose16_lanes!(
    /// The 16 × 16 byte transposes of 16 512-bit registers.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW.
    transpose16_lanes_512,
    __m512i, _mm512_setzero_si512,
    _mm512_unpacklo_epi8, _mm512_unpackhi_epi8, _mm512_unpacklo_epi16, _mm512_unpackhi_epi16,
    _mm512_unpacklo_epi32, _mm512_unpackhi_epi32, _mm512_unpacklo_epi64, _mm512_unpackhi_epi64
);

/// Two adjacent runs of one full block at once, in 512-bit registers: row
/// j's 32 code bytes start at `rows.row(j)`; `out` receives the 32 pairs'
/// 32 bytes each, the same bytes as [`transpose_run`] on each run. Register
/// j holds, for pairs 0..16 of each run, the low nibbles of rows j and
/// j + 16 and then their high nibbles (lanes: first run's low, its high,
/// second run's low, its high), so one [`transpose16_lanes_512`] leaves
/// pair q of the first run in the low half of register q and pair q of the
/// second in its high half: half the unpacks a byte of
/// [`transpose_run_wide`].
///
/// # Safety
/// The CPU must support AVX2 and AVX-512 F, BW and VL, and every row must
/// hold `2 × RUN_PAIRS` readable bytes ([`Rows::with_width`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn transpose_two_runs_avx512(
    rows: Rows<'_>,
    out: &mut [MaybeUninit<u8>; 2 * RUN_PAIRS * 32],
) {
    use std::arch::x86_64::*;
    debug_assert!(rows.width >= 2 * RUN_PAIRS);
    // Lanes 0, 1 ← the row's first 16 bytes; 2, 3 ← its next 16.
    // SAFETY: `row(j)` starts 32 readable bytes (the caller's); loadu needs
    // no alignment.
    let load = |j: usize| unsafe {
        let v = _mm512_castsi256_si512(_mm256_loadu_si256(rows.row(j).cast::<__m256i>()));
        _mm512_shuffle_i64x2::<0b01_01_00_00>(v, v)
    };
    // SAFETY (all intrinsics below): the caller's features.
    unsafe {
        let nibble = _mm512_set1_epi8(0x0F);
        let top = _mm512_set1_epi8(0xF0u8 as i8);
        let right = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
        let left = _mm512_set_epi64(0, 0, 4, 4, 0, 0, 4, 4);
        let mut x = [_mm512_setzero_si512(); 16];
        for (j, x) in x.iter_mut().enumerate() {
            let a = _mm512_srlv_epi64(load(j), right);
            let z = _mm512_sllv_epi64(load(j + 16), left);
            *x = _mm512_or_si512(_mm512_and_si512(a, nibble), _mm512_and_si512(z, top));
        }
        let (first, second) = out.split_at_mut(RUN_PAIRS * 32);
        for ((a, b), t) in first
            .chunks_exact_mut(32)
            .zip(second.chunks_exact_mut(32))
            .zip(transpose16_lanes_512(x))
        {
            // `a` and `b` are 32 bytes; storeu needs no alignment.
            _mm256_storeu_si256(a.as_mut_ptr().cast::<__m256i>(), _mm512_castsi512_si256(t));
            _mm256_storeu_si256(
                b.as_mut_ptr().cast::<__m256i>(),
                _mm512_extracti64x4_epi64::<1>(t),
            );
        }
    }
}

/// [`transpose_run`] byte by byte (the reference of the tests).
fn transpose_run_scalar(rows: Rows<'_>, out: &mut [MaybeUninit<u8>; RUN_PAIRS * 32]) {
    for (q, pair) in out.chunks_exact_mut(32).enumerate() {
        for j in 0..16 {
            let (a, z) = (rows.byte(j, q), rows.byte(j + 16, q));
            pair[j].write((a & 0x0F) | (z << 4));
            pair[16 + j].write((a >> 4) | (z & 0xF0));
        }
    }
}

/// A query's tables quantised to u8, in the pair layout of the module
/// comment: `pairs × 32` bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Lut {
    pub bytes: Vec<u8>,
    /// `Σ_s min_j table_s[j]`.
    pub bias: f32,
    /// `1 / scale`: an integer sum `S` stands for `bias + S · step`.
    pub step: f32,
}

impl Lut {
    /// Quantises `m × 16` f32 tables (row-major; `m` even). Non-finite
    /// entries make every table entry 0 and `step` NaN, so every score is
    /// NaN rather than a silently wrong number.
    ///
    /// Built for the widest vectors this CPU has (chosen at run time): every
    /// step is per entry or a fixed tree, so each build gives the same
    /// bytes, bias and step (`every_build_quantizes_to_the_same_table`).
    pub fn quantize(tables: &[f32]) -> Lut {
        #[cfg(target_arch = "x86_64")]
        {
            if avx512() {
                // SAFETY: AVX-512 F and BW were detected just now.
                return unsafe { quantize_avx512(tables) };
            }
            if avx2() {
                // SAFETY: AVX2 was detected just now.
                return unsafe { quantize_avx2(tables) };
            }
        }
        quantize_inline(tables)
    }

    /// `bias + sum · step`: the score an integer sum stands for.
    #[inline(always)]
    pub fn value(&self, sum: u32) -> f32 {
        self.bias + sum as f32 * self.step
    }

    /// The exact integer sum of one vector's packed codes, as a row holds
    /// them: byte p has sub-quantiser 2p in its low nibble and 2p+1 in its
    /// high nibble (`m / 2` bytes).
    pub fn sum_packed(&self, packed: &[u8]) -> u32 {
        self.bytes
            .chunks_exact(32)
            .zip(packed)
            .map(|(tables, &byte)| {
                u32::from(tables[usize::from(byte & 0x0F)])
                    + u32::from(tables[16 + usize::from(byte >> 4)])
            })
            .sum()
    }
}

/// [`Lut::quantize`] compiled with AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_avx512(tables: &[f32]) -> Lut {
    quantize_inline(tables)
}

/// [`Lut::quantize`] compiled with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_avx2(tables: &[f32]) -> Lut {
    quantize_inline(tables)
}

/// [`Lut::quantize`]'s body, inlined into each build.
#[inline(always)]
fn quantize_inline(tables: &[f32]) -> Lut {
    debug_assert_eq!(tables.len() % 32, 0);
    let mut bytes = vec![0u8; tables.len()];
    // Without a branch or an early exit, so that each loop vectorises.
    let finite = tables.iter().fold(true, |ok, x| ok & x.is_finite());
    let (tables16, _) = tables.as_chunks::<16>();
    // With every entry finite, the tree's minimum and maximum are those
    // of a scan (a signed zero aside, which changes no byte or sum).
    let mins: Vec<f32> = tables16
        .iter()
        .map(|t| fold16(t, |a, b| if b < a { b } else { a }))
        .collect();
    let widest = tables16
        .iter()
        .zip(&mins)
        .map(|(t, &lo)| fold16(t, |a, b| if b > a { b } else { a }) - lo)
        .fold(0.0f32, |w, range| if range > w { range } else { w });
    let bias: f64 = mins.iter().map(|&lo| f64::from(lo)).sum();
    if !finite || !widest.is_finite() {
        return Lut {
            bytes,
            bias: f32::NAN,
            step: f32::NAN,
        };
    }
    let scale = if widest > 0.0 { 255.0 / widest } else { 0.0 };
    for ((out, t), &lo) in bytes
        .chunks_exact_mut(16)
        .zip(tables.chunks_exact(16))
        .zip(&mins)
    {
        for (o, &x) in out.iter_mut().zip(t) {
            *o = round_to_byte((x - lo) * scale);
        }
    }
    Lut {
        bytes,
        bias: bias as f32,
        step: if scale > 0.0 { 1.0 / scale } else { 0.0 },
    }
}

/// The 16 entries of a table reduced by `pick` (a minimum or a maximum) as
/// a tree of 8, 4, 2 and 1 selections, which vectorises.
#[inline(always)]
fn fold16(t: &[f32; 16], pick: impl Fn(f32, f32) -> f32) -> f32 {
    let t8: [f32; 8] = std::array::from_fn(|j| pick(t[j], t[j + 8]));
    let t4: [f32; 4] = std::array::from_fn(|j| pick(t8[j], t8[j + 4]));
    pick(pick(t4[0], t4[2]), pick(t4[1], t4[3]))
}

/// `v.round().clamp(0.0, 255.0) as u8` (half away from zero; NaN is 0),
/// without a branch or the libm call that `round` is on a CPU baseline
/// without SSE4.1, so that a table's loop vectorises: within 0..=255 the
/// fraction `v − trunc(v)` is exact, so comparing it with ½ rounds as
/// `round` does.
#[inline(always)]
fn round_to_byte(v: f32) -> u8 {
    // NaN and every value below 0 become 0 here, so both casts below see a
    // value in 0..=255 and need none of a saturating cast's checks, which
    // kept the loop from vectorising.
    let v = if v >= 0.0 { v.min(255.0) } else { 0.0 };
    // SAFETY: `v` is finite and in 0..=255, where the cast truncates exactly.
    let whole = unsafe { v.to_int_unchecked::<i32>() } as f32;
    let rounded = whole + if v - whole >= 0.5 { 1.0 } else { 0.0 };
    // SAFETY: `rounded` is a whole number in 0..=255.
    unsafe { rounded.to_int_unchecked::<i32>() as u8 }
}

/// `out[v] = Σ_s lut[s][code_s(v)]` for every vector of `blocks`, exact
/// integers, with the fastest kernel this CPU runs. `out` receives
/// `n.div_ceil(32) × 32` sums (the padding vectors' too).
pub fn scan(lut: &Lut, blocks: &Blocks, out: &mut Vec<u32>) {
    scan_many(&[lut], blocks, std::slice::from_mut(out));
}

/// Queries [`scan_many`] scores in one pass over the blocks: each pass
/// loads and splits a block's codes once for all of them.
pub const QUERIES: usize = 4;

/// How many blocks ahead of the one it scores a SIMD kernel asks the CPU
/// to fetch, a line for each line it reads. A list's blocks are
/// contiguous, but the hardware prefetcher stops at every 4 KiB page
/// (four blocks of 32 vectors at 128-d), so without it each page's first
/// lines are waited for.
const PREFETCH_BLOCKS: usize = 2;

/// Block `b + PREFETCH_BLOCKS` of `blocks` (`bytes` a block), if there is
/// one.
#[inline(always)]
fn ahead(blocks: &[u8], bytes: usize, b: usize) -> Option<&[u8]> {
    let at = (b + PREFETCH_BLOCKS) * bytes;
    blocks.get(at..at + bytes)
}

/// Hints the caches to fetch the line of `ahead` (see [`ahead`]) at `at`.
#[inline(always)]
fn prefetch_line(ahead: Option<&[u8]>, at: usize) {
    if let Some(line) = ahead.and_then(|a| a.get(at..at + 1)) {
        crate::distance::prefetch(line);
    }
}

/// [`scan`] for several queries over the same blocks: `outs[i]` receives
/// what `scan(luts[i], blocks, outs[i])` would (extra `outs` are left
/// alone). The queries go [`QUERIES`] at a time with AVX-512 and two at a
/// time with AVX2 (16 vector registers), so a block's codes are loaded and
/// split into nibbles once per pass instead of once per query.
pub fn scan_many(luts: &[&Lut], blocks: &Blocks, outs: &mut [Vec<u32>]) {
    let sums = blocks.n.div_ceil(BLOCK) * BLOCK;
    // The SIMD kernels store each block's sums at its first flush; the
    // scalar one (and no pair at all) adds to zeros.
    #[cfg(target_arch = "x86_64")]
    let stored = blocks.pairs > 0 && (avx512() || avx2());
    #[cfg(not(target_arch = "x86_64"))]
    let stored = false;
    let fits = luts.iter().all(|l| l.bytes.len() == blocks.pairs * 32);
    debug_assert!(fits, "tables for another code width");
    for out in outs.iter_mut().take(luts.len()) {
        if !(stored && fits) {
            out.clear();
        }
        out.resize(sums, 0);
    }
    if !fits {
        return;
    }
    let (bytes, pairs) = (&blocks.bytes[..], blocks.pairs);
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        for (luts, outs) in luts.chunks(QUERIES).zip(outs.chunks_mut(QUERIES)) {
            // SAFETY: AVX-512 F and BW were detected on this CPU just above.
            unsafe {
                match luts.len() {
                    1 => scan_avx512::<1>(luts, bytes, pairs, outs),
                    2 => scan_avx512::<2>(luts, bytes, pairs, outs),
                    3 => scan_avx512::<3>(luts, bytes, pairs, outs),
                    _ => scan_avx512::<4>(luts, bytes, pairs, outs),
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        for (luts, outs) in luts.chunks(2).zip(outs.chunks_mut(2)) {
            // SAFETY: AVX2 was detected on this CPU just above.
            unsafe {
                match luts.len() {
                    1 => scan_avx2::<1>(luts, bytes, pairs, outs),
                    _ => scan_avx2::<2>(luts, bytes, pairs, outs),
                }
            }
        }
        return;
    }
    for (lut, out) in luts.iter().zip(outs) {
        scan_scalar(&lut.bytes, bytes, pairs, out);
    }
}

/// The portable kernel (the reference of the tests).
pub(crate) fn scan_scalar(lut: &[u8], blocks: &[u8], pairs: usize, out: &mut [u32]) {
    if pairs == 0 {
        return;
    }
    for (block, sums) in blocks
        .chunks_exact(pairs * 32)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        for (pair, tables) in block.chunks_exact(32).zip(lut.chunks_exact(32)) {
            for j in 0..16 {
                let (even, odd) = (pair[j], pair[16 + j]);
                let (t0, t1) = (&tables[..16], &tables[16..]);
                sums[j] += u32::from(t0[usize::from(even & 0x0F)])
                    + u32::from(t1[usize::from(odd & 0x0F)]);
                sums[j + 16] +=
                    u32::from(t0[usize::from(even >> 4)]) + u32::from(t1[usize::from(odd >> 4)]);
            }
        }
    }
}

/// The `Q` tables of a SIMD kernel's call, when its shapes hold: `Q`
/// tables, `outs` with a sum for every vector of every block, and pairs to
/// scan (else nothing is scanned).
#[cfg(target_arch = "x86_64")]
fn tables<'a, const Q: usize>(
    luts: &[&'a Lut],
    blocks: &[u8],
    pairs: usize,
    outs: &[Vec<u32>],
) -> Option<[&'a [u8]; Q]> {
    let sums = blocks.len() / (pairs * 32).max(1) * BLOCK;
    if pairs == 0 || luts.len() < Q || outs.iter().take(Q).filter(|o| o.len() >= sums).count() < Q {
        debug_assert!(pairs == 0, "{Q} tables and outs of {sums} sums");
        return None;
    }
    Some(std::array::from_fn(|i| &luts[i].bytes[..]))
}

/// The AVX2 kernel, for `Q` queries (`luts` and `outs` hold `Q` each, every
/// out a whole number of blocks of sums).
///
/// Per pair and half block, the looked-up bytes are added as u16 lanes
/// (`x`, the even vector in the low byte and the odd one in the high) and
/// shifted (`x >> 8`, the odd vector alone), as FAISS does: the even sums
/// are then `Σx − (Σ(x >> 8) << 8)`, exact modulo 2¹⁶ and so exact, since
/// each is below 2¹⁶ ([`FLUSH_PAIRS`]).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scan_avx2<const Q: usize>(
    luts: &[&Lut],
    blocks: &[u8],
    pairs: usize,
    outs: &mut [Vec<u32>],
) {
    use std::arch::x86_64::*;
    let Some(luts) = tables::<Q>(luts, blocks, pairs, outs) else {
        return;
    };
    let nibble = _mm256_set1_epi8(0x0F);
    for (b, block) in blocks.chunks_exact(pairs * 32).enumerate() {
        let ahead = ahead(blocks, pairs * 32, b);
        let mut start = 0;
        while start < pairs {
            let end = (start + FLUSH_PAIRS).min(pairs);
            // Per query: [vectors 0..16 both, 0..16 odd, 16..32 both, 16..32 odd].
            let mut acc = [[_mm256_setzero_si256(); 4]; Q];
            for p in start..end {
                if p % 2 == 0 {
                    prefetch_line(ahead, p * 32);
                }
                // SAFETY: `block` and every table hold `pairs × 32` bytes and
                // p < pairs; loadu needs no alignment.
                let codes = unsafe { _mm256_loadu_si256(block.as_ptr().add(p * 32).cast()) };
                let (low_codes, high_codes) = (
                    _mm256_and_si256(codes, nibble),
                    _mm256_and_si256(_mm256_srli_epi16(codes, 4), nibble),
                );
                for (acc, lut) in acc.iter_mut().zip(luts) {
                    // SAFETY: as above.
                    let tables = unsafe { _mm256_loadu_si256(lut.as_ptr().add(p * 32).cast()) };
                    let low = _mm256_shuffle_epi8(tables, low_codes);
                    let high = _mm256_shuffle_epi8(tables, high_codes);
                    acc[0] = _mm256_add_epi16(acc[0], low);
                    acc[1] = _mm256_add_epi16(acc[1], _mm256_srli_epi16(low, 8));
                    acc[2] = _mm256_add_epi16(acc[2], high);
                    acc[3] = _mm256_add_epi16(acc[3], _mm256_srli_epi16(high, 8));
                }
            }
            for (acc, out) in acc.into_iter().zip(outs.iter_mut()) {
                add_half_blocks(acc, &mut out[b * BLOCK..(b + 1) * BLOCK], start == 0);
            }
            start = end;
        }
    }
}

/// The AVX-512 kernel, for `Q` queries: two pairs per instruction (a
/// 512-bit `vpshufb` looks up each 128-bit lane in its own 16 bytes, and
/// two pairs' codes and tables are 64 contiguous bytes), the two halves
/// summed at each flush; then as [`scan_avx2`].
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
pub(crate) unsafe fn scan_avx512<const Q: usize>(
    luts: &[&Lut],
    blocks: &[u8],
    pairs: usize,
    outs: &mut [Vec<u32>],
) {
    use std::arch::x86_64::*;
    let Some(luts) = tables::<Q>(luts, blocks, pairs, outs) else {
        return;
    };
    let nibble = _mm512_set1_epi8(0x0F);
    // Two pairs' 64 bytes from `at` while p + 1 < end, else one pair's 32
    // (the upper half zero: table 0 looked up, adding 0).
    // SAFETY (of the callers): `at` holds `pairs × 32` bytes and p < end ≤ pairs.
    let load = |at: &[u8], p: usize, both: bool| unsafe {
        if both {
            _mm512_loadu_si512(at.as_ptr().add(p * 32).cast())
        } else {
            _mm512_zextsi256_si512(_mm256_loadu_si256(at.as_ptr().add(p * 32).cast()))
        }
    };
    for (b, block) in blocks.chunks_exact(pairs * 32).enumerate() {
        let ahead = ahead(blocks, pairs * 32, b);
        let mut start = 0;
        while start < pairs {
            let end = (start + FLUSH_PAIRS).min(pairs);
            let mut acc = [[_mm512_setzero_si512(); 4]; Q];
            let mut p = start;
            while p < end {
                prefetch_line(ahead, p * 32);
                let both = p + 1 < end;
                let codes = load(block, p, both);
                let (low_codes, high_codes) = (
                    _mm512_and_si512(codes, nibble),
                    _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble),
                );
                for (acc, lut) in acc.iter_mut().zip(luts) {
                    let tables = load(lut, p, both);
                    let low = _mm512_shuffle_epi8(tables, low_codes);
                    let high = _mm512_shuffle_epi8(tables, high_codes);
                    acc[0] = _mm512_add_epi16(acc[0], low);
                    acc[1] = _mm512_add_epi16(acc[1], _mm512_srli_epi16(low, 8));
                    acc[2] = _mm512_add_epi16(acc[2], high);
                    acc[3] = _mm512_add_epi16(acc[3], _mm512_srli_epi16(high, 8));
                }
                p += 2;
            }
            // Each u16 lane took one byte per pair of the flush: the two
            // halves add without overflow ([`FLUSH_PAIRS`]).
            let fold = |a: __m512i| {
                _mm256_add_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64::<1>(a))
            };
            for (acc, out) in acc.into_iter().zip(outs.iter_mut()) {
                add_half_blocks(
                    acc.map(fold),
                    &mut out[b * BLOCK..(b + 1) * BLOCK],
                    start == 0,
                );
            }
            start = end;
        }
    }
}

/// Adds a flush's u16 accumulators to the 32 sums of a block, or stores
/// them there at its `first` flush (what was there before is ignored).
/// `acc[2h]` holds `x` and `acc[2h + 1]` `x >> 8` summed for vectors
/// `16h..16h + 16` (see [`scan_avx2`]); u16 lane k < 8 of either is
/// sub-quantiser 2p of the vector pair (2k, 2k + 1), lane k + 8
/// sub-quantiser 2p + 1 of the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn add_half_blocks(acc: [std::arch::x86_64::__m256i; 4], sums: &mut [u32], first: bool) {
    use std::arch::x86_64::*;
    for (h, half) in sums.chunks_exact_mut(16).enumerate() {
        let (all, odd) = (acc[2 * h], acc[2 * h + 1]);
        let even = _mm256_sub_epi16(all, _mm256_slli_epi16(odd, 8));
        // Both sub-quantisers of a pair added, widened to u32: vectors 2k
        // (even) and 2k + 1 (odd) for k < 8.
        let widen = |x: __m256i| {
            _mm256_add_epi32(
                _mm256_cvtepu16_epi32(_mm256_castsi256_si128(x)),
                _mm256_cvtepu16_epi32(_mm256_extracti128_si256::<1>(x)),
            )
        };
        let (even, odd) = (widen(even), widen(odd));
        // [0 1 2 3 | 8 9 10 11] and [4 5 6 7 | 12 13 14 15].
        let (lo, hi) = (
            _mm256_unpacklo_epi32(even, odd),
            _mm256_unpackhi_epi32(even, odd),
        );
        let low = _mm256_permute2x128_si256::<0x20>(lo, hi);
        let high = _mm256_permute2x128_si256::<0x31>(lo, hi);
        let ptr = half.as_mut_ptr().cast::<__m256i>();
        // SAFETY: `half` is 16 u32 (64 bytes); loadu/storeu need no alignment.
        unsafe {
            let add = |ptr: *mut __m256i, x: __m256i| {
                if first {
                    x
                } else {
                    _mm256_add_epi32(_mm256_loadu_si256(ptr), x)
                }
            };
            _mm256_storeu_si256(ptr, add(ptr, low));
            let ptr = ptr.add(1);
            _mm256_storeu_si256(ptr, add(ptr, high));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Row-major packed codes of `n` vectors with `pairs` bytes each.
    fn random_rows(n: usize, pairs: usize, seed: u64) -> Vec<u8> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n * pairs).map(|_| rng.random()).collect()
    }

    fn random_lut(pairs: usize, seed: u64) -> Lut {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let tables: Vec<f32> = (0..pairs * 32)
            .map(|_| rng.random_range(-3.0f32..5.0))
            .collect();
        Lut::quantize(&tables)
    }

    /// The code of sub-quantiser `s` of vector `v`, as the layout says.
    fn code_at(blocks: &Blocks, v: usize, s: usize) -> u8 {
        let (b, j) = (v / BLOCK, v % BLOCK);
        let pair = &blocks.bytes[(b * blocks.pairs + s / 2) * 32..][..32];
        let byte = pair[16 * (s % 2) + j % 16];
        if j < 16 { byte & 0x0F } else { byte >> 4 }
    }

    /// Every transposition this CPU runs writes the bytes of the portable
    /// one, whatever the stride and the start.
    #[test]
    fn every_transposition_path_gives_the_same_bytes() {
        let bytes = random_rows(40 * 37 + 5, 1, 8);
        let mut ran = vec!["scalar"];
        for (start, stride) in [(0, 16), (3, 37), (5, 40)] {
            let rows = Rows::new(&bytes, start, stride);
            let mut want = [MaybeUninit::new(0u8); RUN_PAIRS * 32];
            transpose_run_scalar(rows, &mut want);
            let want = want.map(|b| unsafe { b.assume_init() });
            #[cfg(target_arch = "x86_64")]
            {
                type Path = fn(Rows<'_>, &mut [MaybeUninit<u8>; RUN_PAIRS * 32]);
                let mut paths: Vec<(&str, Path)> = Vec::new();
                if avx2() {
                    // SAFETY: AVX2 was detected.
                    paths.push(("avx2", |r, o| unsafe { transpose_run_avx2(r, o) }));
                }
                if transpose_path() == TransposePath::Avx512 {
                    // SAFETY: AVX-512 F, BW and VL were detected.
                    paths.push(("avx512", |r, o| unsafe { transpose_run_avx512(r, o) }));
                }
                for (name, path) in paths {
                    let mut got = [MaybeUninit::new(0xAAu8); RUN_PAIRS * 32];
                    path(rows, &mut got);
                    let got = got.map(|b| unsafe { b.assume_init() });
                    assert_eq!(got, want, "{name}, rows {stride} apart from {start}");
                    if !ran.contains(&name) {
                        ran.push(name);
                    }
                }
                // Two runs at once: the portable run of each half.
                if transpose_path() == TransposePath::Avx512 && stride >= 2 * RUN_PAIRS {
                    let wide = Rows::with_width(&bytes, start, stride, 2 * RUN_PAIRS);
                    let mut got = [MaybeUninit::new(0xAAu8); 2 * RUN_PAIRS * 32];
                    // SAFETY: AVX-512 F, BW and VL were detected; rows of 32 bytes.
                    unsafe { transpose_two_runs_avx512(wide, &mut got) };
                    let got = got.map(|b| unsafe { b.assume_init() });
                    let mut second = [MaybeUninit::new(0u8); RUN_PAIRS * 32];
                    let next = Rows::new(&bytes, start + RUN_PAIRS, stride);
                    transpose_run_scalar(next, &mut second);
                    let second = second.map(|b| unsafe { b.assume_init() });
                    assert_eq!(got[..RUN_PAIRS * 32], want, "two runs, rows {stride} apart");
                    assert_eq!(
                        got[RUN_PAIRS * 32..],
                        second,
                        "two runs, rows {stride} apart"
                    );
                    if !ran.contains(&"avx512, two runs") {
                        ran.push("avx512, two runs");
                    }
                }
            }
        }
        eprintln!("transposition paths checked: {ran:?}");
    }

    #[test]
    fn blocks_hold_every_code_where_the_layout_says() {
        // Full blocks of 16 and 32 pairs are transposed from the rows, the
        // rest (every partial block, a last run of fewer than 16 pairs)
        // from a padded copy.
        for (n, pairs) in [
            (1, 1),
            (31, 2),
            (32, 3),
            (33, 4),
            (100, 64),
            (64, 16),
            (96, 40),
        ] {
            // Packed rows, and rows with other bytes around the codes (a
            // header before, as a `code` column holds them).
            for (offset, after) in [(0, 0), (8, 3)] {
                let stride = offset + pairs + after;
                let rows = random_rows(n, stride, 5);
                let blocks = Blocks::from_rows(&rows, n, stride, offset, pairs);
                assert_eq!(blocks.bytes.len(), n.div_ceil(32) * pairs * 32);
                for v in 0..n {
                    for s in 0..2 * pairs {
                        let byte = rows[v * stride + offset + s / 2];
                        let code = if s % 2 == 0 { byte & 0x0F } else { byte >> 4 };
                        assert_eq!(
                            code_at(&blocks, v, s),
                            code,
                            "n {n} stride {stride} vector {v} sub-quantiser {s}"
                        );
                    }
                }
                // Padding vectors have codes 0.
                for v in n..n.div_ceil(32) * 32 {
                    assert!((0..2 * pairs).all(|s| code_at(&blocks, v, s) == 0));
                }
            }
        }
    }

    /// Every kernel this CPU runs returns the exact sums of a plain loop
    /// over the row-major codes, including past a u16 flush (600 pairs),
    /// for one query and for several at once.
    #[test]
    fn kernels_equal_the_scalar_reference_exactly() {
        let mut paths = vec!["scalar"];
        if avx2() {
            paths.push("avx2");
        }
        if avx512() {
            paths.push("avx512");
        }
        // Odd pair counts leave the AVX-512 kernel a single last pair.
        for (n, pairs) in [
            (1, 1),
            (32, 8),
            (45, 64),
            (97, 192),
            (64, 600),
            (33, 7),
            (40, 257),
        ] {
            let rows = random_rows(n, pairs, n as u64);
            let blocks = Blocks::from_rows(&rows, n, pairs, 0, pairs);
            let lut = random_lut(pairs, 7 + pairs as u64);
            let reference: Vec<u32> = (0..n)
                .map(|v| lut.sum_packed(&rows[v * pairs..(v + 1) * pairs]))
                .collect();
            let padded = n.div_ceil(32) * 32;
            let mut scalar = vec![0u32; padded];
            scan_scalar(&lut.bytes, &blocks.bytes, pairs, &mut scalar);
            assert_eq!(&scalar[..n], &reference[..], "scalar, n {n}, pairs {pairs}");
            // Several queries at once: each query's sums are its own scan's.
            let luts: Vec<Lut> = (0..6)
                .map(|i| random_lut(pairs, 100 * i + pairs as u64))
                .collect();
            let expected: Vec<Vec<u32>> = luts
                .iter()
                .map(|lut| {
                    let mut sums = vec![0u32; padded];
                    scan_scalar(&lut.bytes, &blocks.bytes, pairs, &mut sums);
                    sums
                })
                .collect();
            let refs: Vec<&Lut> = luts.iter().collect();
            // Outs holding other sums: a kernel must not add to them.
            let fresh = |q: usize| vec![vec![0xDEAD_BEEFu32; padded]; q];
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                let mut fast = fresh(2);
                // SAFETY: AVX2 was detected.
                unsafe { scan_avx2::<1>(&refs, &blocks.bytes, pairs, &mut fast) };
                assert_eq!(fast[0], expected[0], "avx2, n {n}, pairs {pairs}");
                let mut fast = fresh(2);
                // SAFETY: as above.
                unsafe { scan_avx2::<2>(&refs, &blocks.bytes, pairs, &mut fast) };
                assert_eq!(fast, expected[..2], "avx2 × 2, n {n}, pairs {pairs}");
            }
            #[cfg(target_arch = "x86_64")]
            if avx512() {
                for q in 1..=QUERIES {
                    let mut fast = fresh(q);
                    // SAFETY: AVX-512 F and BW were detected.
                    unsafe {
                        match q {
                            1 => scan_avx512::<1>(&refs, &blocks.bytes, pairs, &mut fast),
                            2 => scan_avx512::<2>(&refs, &blocks.bytes, pairs, &mut fast),
                            3 => scan_avx512::<3>(&refs, &blocks.bytes, pairs, &mut fast),
                            _ => scan_avx512::<4>(&refs, &blocks.bytes, pairs, &mut fast),
                        }
                    }
                    assert_eq!(fast, expected[..q], "avx512 × {q}, n {n}, pairs {pairs}");
                }
            }
            let mut dispatched = Vec::new();
            scan(&lut, &blocks, &mut dispatched);
            assert_eq!(dispatched, scalar);
            for q in 1..=luts.len() {
                let mut many = fresh(q);
                many.push(vec![7; 3]);
                scan_many(&refs[..q], &blocks, &mut many);
                assert_eq!(
                    many[..q],
                    expected[..q],
                    "{q} queries, n {n}, pairs {pairs}"
                );
                assert_eq!(many[q], [7; 3], "an extra out is left alone");
            }
        }
        eprintln!(
            "fast-scan kernels checked: {paths:?} (dispatch runs {})",
            kernel_path()
        );
    }

    /// The quantised sum is within `m / (2·scale)` of the f32 sum.
    #[test]
    fn quantised_tables_stay_within_half_a_step_per_table() {
        let pairs = 48;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let tables: Vec<f32> = (0..pairs * 32)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let lut = Lut::quantize(&tables);
        let m = 2 * pairs;
        for _ in 0..200 {
            let codes: Vec<u8> = (0..m).map(|_| rng.random_range(0..16)).collect();
            let exact: f64 = (0..m)
                .map(|s| f64::from(tables[s * 16 + usize::from(codes[s])]))
                .sum();
            let packed: Vec<u8> = codes.chunks_exact(2).map(|c| c[0] | c[1] << 4).collect();
            let approx = f64::from(lut.value(lut.sum_packed(&packed)));
            let bound = m as f64 * f64::from(lut.step) / 2.0 + 1e-4;
            assert!(
                (approx - exact).abs() <= bound,
                "{approx} vs {exact}, bound {bound}"
            );
        }
    }

    #[test]
    fn rounding_equals_round() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let edges = [
            0.0,
            -0.0,
            -3.0,
            0.5,
            1.5,
            2.5,
            0.49999997,
            254.5,
            254.99998,
            255.0,
            255.49998,
            255.5,
            8_388_607.5,
            1e9,
            f32::INFINITY,
        ];
        let random = (0..100_000).map(|_| rng.random_range(0.0f32..300.0));
        for v in edges.into_iter().chain(random) {
            assert_eq!(round_to_byte(v), v.round().clamp(0.0, 255.0) as u8, "{v}");
        }
        assert_eq!(round_to_byte(f32::NAN), 0);
    }

    /// Every build of the quantisation gives the baseline's bytes, bias
    /// and step, bit for bit (random, tied, constant, tiny, huge and
    /// non-finite tables), and prints which builds ran.
    #[test]
    fn every_build_quantizes_to_the_same_table() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let mut cases: Vec<Vec<f32>> = (0..40)
            .map(|i| {
                let scale = 10f32.powi(i % 9 - 4);
                (0..(1 + i % 5) * 32)
                    .map(|_| rng.random_range(-1.0f32..1.0) * scale)
                    .collect()
            })
            .collect();
        cases.push((0..64).map(|i| (i % 3) as f32).collect());
        cases.push(vec![2.0; 32]);
        cases.push([f32::MAX, -f32::MAX].repeat(16));
        let mut special = vec![0.5f32; 64];
        special[7] = f32::INFINITY;
        cases.push(special.clone());
        special[7] = f32::NAN;
        cases.push(special);
        type Build = fn(&[f32]) -> Lut;
        let mut builds: Vec<(&str, Build)> = vec![("dispatched", Lut::quantize)];
        #[cfg(target_arch = "x86_64")]
        {
            if avx2() {
                // SAFETY: AVX2 was detected just above.
                builds.push(("AVX2", |t| unsafe { quantize_avx2(t) }));
            }
            if avx512() {
                // SAFETY: AVX-512 F and BW were detected just above.
                builds.push(("AVX-512", |t| unsafe { quantize_avx512(t) }));
            }
        }
        let bits = |l: &Lut| (l.bytes.clone(), l.bias.to_bits(), l.step.to_bits());
        for (name, build) in builds {
            for (i, tables) in cases.iter().enumerate() {
                assert_eq!(
                    bits(&build(tables)),
                    bits(&quantize_inline(tables)),
                    "{name}, case {i}"
                );
            }
            println!("table quantisation: the {name} build ran");
        }
    }

    #[test]
    fn constant_and_non_finite_tables_are_handled() {
        let flat = Lut::quantize(&[2.0; 32]);
        assert_eq!(flat.step, 0.0);
        assert_eq!(flat.value(0), 4.0);
        let mut bad = [0.0f32; 32];
        bad[3] = f32::NAN;
        assert!(Lut::quantize(&bad).value(0).is_nan());
    }
}
