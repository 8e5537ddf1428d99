//! The encodings of the postings' key columns, read straight from their
//! CRC-checked pages without a decoder:
//!
//! - `rowid` is DELTA_BINARY_PACKED. A list's rowids ascend, so a row costs
//!   the bits of its gap to the previous one (one or two bytes at a million
//!   rows), not eight.
//! - `cid` is RLE_DICTIONARY over a one-value dictionary (one CID per row
//!   group): a data page is a bit width of 0 and a run length, a few bytes
//!   however many rows it holds, not four bytes a row.
//!
//! Both are the Parquet format's own encodings, so any engine reads the
//! postings. Pure: the data bytes of one page in, values (or the first row
//! that breaks a rule) out; malformed data is a [`KeyColumnError`], never a
//! panic or a read past the page.

use thiserror::Error;

/// Why a page's data is not what its encoding says.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyColumnError {
    /// The data ends inside a value the encoding announced.
    #[error("{encoding} data of {len} bytes ends inside its {what} (at byte {at})")]
    Truncated {
        encoding: &'static str,
        what: &'static str,
        at: usize,
        len: usize,
    },
    /// A header field outside what the encoding allows.
    #[error("{encoding} data: {reason}")]
    Invalid {
        encoding: &'static str,
        reason: String,
    },
}

const DELTA: &str = "DELTA_BINARY_PACKED";

/// The most values of a miniblock that [`add_deltas`] reads from a padded
/// copy: parquet-rs writes INT64 in miniblocks of 64 (INT32 in 32).
const MINIBLOCK: usize = 64;
const DICTIONARY: &str = "RLE_DICTIONARY";

/// Reads the varints and byte runs of one page's data.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    encoding: &'static str,
}

impl<'a> Cursor<'a> {
    fn truncated(&self, what: &'static str) -> KeyColumnError {
        KeyColumnError::Truncated {
            encoding: self.encoding,
            what,
            at: self.pos,
            len: self.data.len(),
        }
    }

    fn invalid(&self, reason: String) -> KeyColumnError {
        KeyColumnError::Invalid {
            encoding: self.encoding,
            reason,
        }
    }

    /// An unsigned LEB128 varint of at most 10 bytes.
    fn varint(&mut self, what: &'static str) -> Result<u64, KeyColumnError> {
        let mut out = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self
                .data
                .get(self.pos)
                .ok_or_else(|| self.truncated(what))?;
            self.pos += 1;
            out |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(self.invalid(format!("{what} is a varint longer than 10 bytes")))
    }

    fn zigzag(&mut self, what: &'static str) -> Result<i64, KeyColumnError> {
        let v = self.varint(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// The next `n` bytes.
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], KeyColumnError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.truncated(what))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// At most `n` bytes: what is left when fewer.
    fn take_up_to(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.saturating_add(n).min(self.data.len());
        let out = &self.data[self.pos..end];
        self.pos = end;
        out
    }

    fn usize(&self, v: u64, what: &str) -> Result<usize, KeyColumnError> {
        usize::try_from(v).map_err(|_| self.invalid(format!("{what} {v} does not fit in memory")))
    }
}

/// Bits `bit .. bit + width` (width ≤ 64) of LSB-first bit-packed values;
/// bits past the end of `packed` read as zero.
#[inline]
fn bits(packed: &[u8], bit: usize, width: u32) -> u64 {
    let (byte, shift) = (bit / 8, bit % 8);
    let word = match packed.get(byte..byte + 16) {
        Some(w) => u128::from_le_bytes(w.try_into().unwrap_or_default()),
        None => {
            let mut w = [0u8; 16];
            let tail = packed.get(byte..).unwrap_or_default();
            w[..tail.len()].copy_from_slice(tail);
            u128::from_le_bytes(w)
        }
    };
    let v = (word >> shift) as u64;
    if width == 64 {
        v
    } else {
        v & ((1u64 << width) - 1)
    }
}

/// Writes `dst.len()` values of a miniblock: each the previous one (`last`)
/// plus `min_delta` plus the next LSB-first `width`-bit delta of `packed`
/// (width 0 to 64; bits past its end read as zero), with wrapping. Up to 64
/// deltas of at most 56 bits (a miniblock as writers make them) are
/// unpacked eight a step on AVX-512 VBMI ([`add_deltas_vbmi`]), else read
/// from a zero-padded copy, one unaligned 8-byte load each.
#[inline]
fn add_deltas(packed: &[u8], width: u32, min_delta: i64, last: &mut i64, dst: &mut [i64]) {
    add_deltas_on(DeltaPath::best(), packed, width, min_delta, last, dst);
}

/// [`add_deltas`] on `path` where the CPU has it (the scalar path where
/// not).
#[inline]
fn add_deltas_on(
    path: DeltaPath,
    packed: &[u8],
    width: u32,
    min_delta: i64,
    last: &mut i64,
    dst: &mut [i64],
) {
    let mut value = *last;
    if width == 0 {
        for d in dst.iter_mut() {
            value = value.wrapping_add(min_delta);
            *d = value;
        }
    } else if dst.len() <= MINIBLOCK && width <= 56 {
        #[cfg(target_arch = "x86_64")]
        if path == DeltaPath::Vbmi && path.available() {
            // SAFETY: the CPU has the kernel's features (checked above).
            *last = unsafe { add_deltas_vbmi(packed, width, min_delta, value, dst) };
            return;
        }
        let mut padded = [0u8; MINIBLOCK * 7 + 8];
        let len = packed.len().min(MINIBLOCK * 7);
        padded[..len].copy_from_slice(&packed[..len]);
        let mask = (1u64 << width) - 1;
        for (i, d) in dst.iter_mut().enumerate() {
            let bit = i * width as usize;
            let at = (bit / 8).min(MINIBLOCK * 7);
            let word = u64::from_le_bytes(padded[at..at + 8].try_into().unwrap_or_default());
            value = value
                .wrapping_add(min_delta)
                .wrapping_add(((word >> (bit % 8)) & mask) as i64);
            *d = value;
        }
    } else {
        for (i, d) in dst.iter_mut().enumerate() {
            let delta = bits(packed, i * width as usize, width) as i64;
            value = value.wrapping_add(min_delta).wrapping_add(delta);
            *d = value;
        }
    }
    *last = value;
}

/// The ways [`add_deltas`] unpacks a miniblock of at most 64 deltas of at
/// most 56 bits, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaPath {
    /// One unaligned 8-byte load a delta from a zero-padded copy, added in
    /// a serial chain.
    Scalar,
    /// AVX-512 VBMI: eight deltas a step ([`add_deltas_vbmi`]).
    Vbmi,
}

impl DeltaPath {
    #[cfg(test)]
    const ALL: [DeltaPath; 2] = [DeltaPath::Scalar, DeltaPath::Vbmi];

    /// The fastest path this CPU has.
    fn best() -> DeltaPath {
        if DeltaPath::Vbmi.available() {
            DeltaPath::Vbmi
        } else {
            DeltaPath::Scalar
        }
    }

    fn available(self) -> bool {
        match self {
            DeltaPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            DeltaPath::Vbmi => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vbmi")
            }
            #[cfg(not(target_arch = "x86_64"))]
            DeltaPath::Vbmi => false,
        }
    }
}

/// [`add_deltas`] for `dst.len() <= 64` deltas of `width` 1 to 56 bits,
/// eight a step, returning the last value. The eight deltas of step `j`
/// start at bit `8·j·width`, byte `j·width`, so one 64-byte masked load
/// from there (bytes past `packed` read as zero, as in the scalar path)
/// holds them all (`7·56/8 + 8 ≤ 64`), and the same byte permutation and
/// shifts place each in its 64-bit lane at every step. The lanes' prefix
/// sum (three shifted adds) plus the previous step's last value gives the
/// values: the same sums modulo 2⁶⁴ as the serial chain, so the same
/// values bit for bit.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VBMI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn add_deltas_vbmi(
    packed: &[u8],
    width: u32,
    min_delta: i64,
    last: i64,
    dst: &mut [i64],
) -> i64 {
    use std::arch::x86_64::*;
    debug_assert!((1..=56).contains(&width) && dst.len() <= MINIBLOCK);
    let w = width as usize;
    let mut bytes = [0u8; 64];
    let mut shifts = [0u64; 8];
    for (lane, shift) in shifts.iter_mut().enumerate() {
        let bit = lane * w;
        for (t, b) in bytes[lane * 8..lane * 8 + 8].iter_mut().enumerate() {
            *b = (bit / 8 + t) as u8;
        }
        *shift = (bit % 8) as u64;
    }
    // SAFETY: both arrays are 64 bytes.
    let (bytes, shifts) = unsafe {
        (
            _mm512_loadu_si512(bytes.as_ptr().cast()),
            _mm512_loadu_si512(shifts.as_ptr().cast()),
        )
    };
    let mask = _mm512_set1_epi64(((1u64 << w) - 1) as i64);
    let min = _mm512_set1_epi64(min_delta);
    let zero = _mm512_setzero_si512();
    let mut carry = _mm512_set1_epi64(last);
    for (step, out) in dst.chunks_mut(8).enumerate() {
        let at = (step * w).min(packed.len());
        let have = (packed.len() - at).min(64);
        let load = if have == 64 {
            u64::MAX
        } else {
            (1u64 << have) - 1
        };
        // SAFETY: the load mask covers only `packed[at..at + have]`.
        let window = unsafe { _mm512_maskz_loadu_epi8(load, packed.as_ptr().add(at).cast()) };
        let words = _mm512_permutexvar_epi8(bytes, window);
        let mut x = _mm512_add_epi64(
            _mm512_and_si512(_mm512_srlv_epi64(words, shifts), mask),
            min,
        );
        x = _mm512_add_epi64(x, _mm512_alignr_epi64::<7>(x, zero));
        x = _mm512_add_epi64(x, _mm512_alignr_epi64::<6>(x, zero));
        x = _mm512_add_epi64(x, _mm512_alignr_epi64::<4>(x, zero));
        x = _mm512_add_epi64(x, carry);
        let n = out.len();
        // SAFETY: the store mask covers only `out`'s `n` values.
        unsafe { _mm512_mask_storeu_epi64(out.as_mut_ptr(), ((1u16 << n) - 1) as u8, x) };
        carry = _mm512_permutexvar_epi64(_mm512_set1_epi64(n as i64 - 1), x);
    }
    _mm_cvtsi128_si64(_mm512_castsi512_si128(carry))
}

/// Appends the values of one page's DELTA_BINARY_PACKED data (INT64) to
/// `out`, and returns how many there were (at most `limit`, the rows the
/// page may hold: a corrupt count of bit width 0 costs no bytes): the header (block size, its
/// miniblocks, the count, the first value), then blocks of a minimum delta,
/// one bit width a miniblock and the miniblocks, each delta added to the
/// previous value with wrapping, as the format defines.
///
/// # Errors
/// [`KeyColumnError`] for a header the format forbids, more than `limit`
/// values, a bit width above 64, or data that ends before its values do.
pub fn delta_i64(data: &[u8], limit: usize, out: &mut Vec<i64>) -> Result<usize, KeyColumnError> {
    let mut c = Cursor {
        data,
        pos: 0,
        encoding: DELTA,
    };
    let block = c.varint("block size")?;
    let miniblocks = c.varint("miniblock count")?;
    let total = c.varint("value count")?;
    let first = c.zigzag("first value")?;
    if block == 0
        || !block.is_multiple_of(128)
        || miniblocks == 0
        || !block.is_multiple_of(miniblocks)
    {
        return Err(c.invalid(format!(
            "a block of {block} values in {miniblocks} miniblocks (a multiple of 128 in miniblocks of a multiple of 32 values)"
        )));
    }
    let per_miniblock = block / miniblocks;
    if !per_miniblock.is_multiple_of(32) {
        return Err(c.invalid(format!(
            "miniblocks of {per_miniblock} values (a multiple of 32)"
        )));
    }
    let (total, per_miniblock) = (
        c.usize(total, "value count")?,
        c.usize(per_miniblock, "miniblock")?,
    );
    let miniblocks = c.usize(miniblocks, "miniblock count")?;
    if total > limit {
        return Err(c.invalid(format!("{total} values where at most {limit} rows remain")));
    }
    if total == 0 {
        return Ok(0);
    }
    out.reserve(total);
    out.push(first);
    let (mut last, mut left) = (first, total - 1);
    while left > 0 {
        let min_delta = c.zigzag("block minimum delta")?;
        let widths = c.take(miniblocks, "miniblock bit widths")?;
        // The widths of miniblocks past the last value may be anything, and
        // those miniblocks have no bytes.
        for &width in widths {
            if left == 0 {
                break;
            }
            if width > 64 {
                return Err(c.invalid(format!("a miniblock bit width of {width}")));
            }
            let n = left.min(per_miniblock);
            let width = u32::from(width);
            // A miniblock is padded to its full size; a last one cut to
            // the bytes of its values is taken too.
            let needed = (n * width as usize).div_ceil(8);
            let packed = c.take_up_to(per_miniblock * width as usize / 8);
            if packed.len() < needed {
                return Err(c.truncated("last miniblock"));
            }
            let start = out.len();
            out.resize(start + n, 0);
            add_deltas(packed, width, min_delta, &mut last, &mut out[start..]);
            left -= n;
        }
    }
    Ok(total)
}

/// The first of the `rows` dictionary indices of one page's RLE_DICTIONARY
/// data (a bit-width byte, then RLE / bit-packed hybrid runs) for which
/// `good` is false, with its row in the page; `None` when all are good.
///
/// # Errors
/// [`KeyColumnError`] for a bit width above 32 or data that ends before
/// `rows` indices.
pub fn first_bad_index(
    data: &[u8],
    rows: usize,
    good: impl Fn(u64) -> bool,
) -> Result<Option<(usize, u64)>, KeyColumnError> {
    let mut c = Cursor {
        data,
        pos: 0,
        encoding: DICTIONARY,
    };
    let width = c.take(1, "bit width")?[0];
    if width > 32 {
        return Err(c.invalid(format!("an index bit width of {width}")));
    }
    let (width, value_bytes) = (u32::from(width), usize::from(width).div_ceil(8));
    let mut row = 0;
    while row < rows {
        let header = c.varint("run header")?;
        let count = c.usize(header >> 1, "run length")?;
        if header & 1 == 0 {
            // An RLE run: one value for `count` rows.
            let mut value = [0u8; 8];
            value[..value_bytes].copy_from_slice(c.take(value_bytes, "RLE run value")?);
            let value = u64::from_le_bytes(value);
            if count > 0 && !good(value) {
                return Ok(Some((row, value)));
            }
            row = row.saturating_add(count);
        } else {
            // Bit-packed: `count` groups of 8 values; the last may be padding.
            let values = count.saturating_mul(8);
            let packed = c.take(count.saturating_mul(width as usize), "bit-packed run")?;
            if width == 0 {
                // Every value is 0.
                if values > 0 && !good(0) {
                    return Ok(Some((row, 0)));
                }
                row = row.saturating_add(values);
                continue;
            }
            for i in 0..values.min(rows - row) {
                let value = bits(packed, i * width as usize, width);
                if !good(value) {
                    return Ok(Some((row + i, value)));
                }
            }
            row = row.saturating_add(values);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Encoding;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::serialized_reader::ReadOptionsBuilder;
    use std::sync::Arc;

    /// The raw data of every page of column 0 of a one-column file written
    /// by parquet-rs with `props`, as `(is dictionary page, values, data)`.
    fn pages_written(
        column: Arc<dyn arrow::array::Array>,
        props: WriterProperties,
    ) -> Vec<(bool, usize, Vec<u8>)> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "c",
            column.data_type().clone(),
            false,
        )]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let reader = SerializedFileReader::new_with_options(
            bytes::Bytes::from(buf),
            ReadOptionsBuilder::new().build(),
        )
        .unwrap();
        let mut pages = Vec::new();
        for rg in 0..reader.num_row_groups() {
            let mut column = reader
                .get_row_group(rg)
                .unwrap()
                .get_column_page_reader(0)
                .unwrap();
            while let Some(page) = column.get_next_page().unwrap() {
                let dictionary = page.page_type() == parquet::basic::PageType::DICTIONARY_PAGE;
                pages.push((
                    dictionary,
                    page.num_values() as usize,
                    page.buffer().to_vec(),
                ));
            }
        }
        pages
    }

    /// A seeded xorshift64 stream.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    fn delta_props(page_rows: usize) -> WriterProperties {
        WriterProperties::builder()
            .set_dictionary_enabled(false)
            .set_encoding(Encoding::DELTA_BINARY_PACKED)
            .set_data_page_row_count_limit(page_rows)
            .set_write_batch_size(page_rows)
            .build()
    }

    /// Every page parquet-rs writes decodes to its values: ascending rowids
    /// with gaps of every width, a run of equal values, both extremes of
    /// i64 (deltas that wrap), partial last blocks and miniblocks.
    #[test]
    fn delta_decodes_what_parquet_writes() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut cases: Vec<Vec<i64>> = vec![
            vec![],
            vec![42],
            vec![7; 300],
            vec![i64::MIN, i64::MAX, 0, -1, i64::MAX, i64::MIN, 5],
            (0..1000).map(|i| i * 3 - 500).collect(),
        ];
        for width in [1u32, 7, 13, 31, 40, 57, 63] {
            let mut v = 1_000_000i64;
            cases.push(
                (0..777)
                    .map(|_| {
                        v = v.wrapping_add((next() >> (64 - width)) as i64);
                        v
                    })
                    .collect(),
            );
        }
        cases.push((0..513).map(|_| next() as i64).collect());
        for values in cases {
            for page_rows in [128, 1000, 20_000] {
                let column = Arc::new(Int64Array::from(values.clone()));
                let mut decoded = Vec::new();
                for (dictionary, n, data) in pages_written(column, delta_props(page_rows)) {
                    assert!(!dictionary);
                    assert_eq!(delta_i64(&data, usize::MAX, &mut decoded).unwrap(), n);
                }
                assert_eq!(
                    decoded,
                    values,
                    "{} values, pages of {page_rows}",
                    values.len()
                );
            }
        }
    }

    /// Every path of a miniblock's unpacking equals the bit-by-bit
    /// definition, bit for bit: every width it takes (1 to 56), every
    /// length up to 64, random deltas, minimums and starting values that
    /// wrap, and packed bytes cut to exactly what the values need (the
    /// rest reads as zero).
    #[test]
    fn every_delta_path_equals_the_definition() {
        let mut next = xorshift(0x6a09_e667_f3bc_c908);
        let mut ran = Vec::new();
        for path in DeltaPath::ALL {
            if !path.available() {
                continue;
            }
            ran.push(path);
            for width in 1..=56u32 {
                for n in 1..=MINIBLOCK {
                    let full: Vec<u8> = (0..MINIBLOCK * 7).map(|_| next() as u8).collect();
                    let cut = [full.len(), (n * width as usize).div_ceil(8)];
                    for len in cut {
                        let packed = &full[..len];
                        let min_delta = next() as i64 >> (next() % 64);
                        let start = next() as i64;
                        let mut expected = vec![0i64; n];
                        let mut value = start;
                        for (i, e) in expected.iter_mut().enumerate() {
                            let delta = bits(packed, i * width as usize, width) as i64;
                            value = value.wrapping_add(min_delta).wrapping_add(delta);
                            *e = value;
                        }
                        let mut got = vec![0i64; n];
                        let mut last = start;
                        add_deltas_on(path, packed, width, min_delta, &mut last, &mut got);
                        assert_eq!(got, expected, "{path:?}, width {width}, {n} values");
                        assert_eq!(last, value, "{path:?}, width {width}, {n} values");
                    }
                }
            }
        }
        eprintln!("delta unpacking paths checked: {ran:?}");
        assert!(ran.contains(&DeltaPath::Scalar));
    }

    /// Miniblocks of 128 values (one a block) go through the bit-by-bit
    /// path: deltas 1, 0, 1, 0, … then a block of width 0.
    #[test]
    fn delta_long_miniblocks() {
        let mut data = vec![0x80, 1, 1, 0x82, 1, 10]; // 128 × 1, 130 values, first 5
        data.extend([0, 1]); // min delta 0, width 1
        data.extend([0b0101_0101; 16]);
        data.extend([4, 0]); // min delta 2, width 0, no bytes
        let mut expected = vec![5i64];
        for i in 0..128 {
            expected.push(expected[i] + i64::from(i % 2 == 0));
        }
        expected.push(expected[128] + 2);
        let mut out = Vec::new();
        assert_eq!(delta_i64(&data, 130, &mut out).unwrap(), 130);
        let err = delta_i64(&data, 129, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("130 values where at most 129 rows remain"),
            "{err}"
        );
        assert_eq!(out, expected);
    }

    /// Any bytes, a written page with bytes flipped or cut: an error or
    /// values, never a panic, and never more values than the limit.
    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let values: Vec<i64> = (0..700).map(|i| i * 977 + (i * i) % 13).collect();
        let column = Arc::new(Int64Array::from(values));
        let (_, _, page) = pages_written(column, delta_props(1000)).remove(0);
        for round in 0..20_000 {
            let mut data = if round % 4 == 0 {
                (0..next() % 64).map(|_| next() as u8).collect()
            } else {
                page.clone()
            };
            for _ in 0..1 + next() % 4 {
                if !data.is_empty() {
                    let at = next() as usize % data.len();
                    data[at] ^= (next() as u8) | 1;
                }
            }
            if round % 3 == 0 {
                data.truncate(next() as usize % (data.len() + 1));
            }
            let mut out = Vec::new();
            if let Ok(n) = delta_i64(&data, 5000, &mut out) {
                assert!(n == out.len() && n <= 5000);
            }
            let rows = next() as usize % 5000;
            let _ = first_bad_index(&data, rows, |i| i % 3 != 2);
        }
    }

    #[test]
    fn delta_errors_name_what_is_wrong() {
        let values: Vec<i64> = (0..300).map(|i| i * 1000 + (i * i) % 7).collect();
        let column = Arc::new(Int64Array::from(values.clone()));
        let (_, _, data) = pages_written(column, delta_props(1000)).remove(0);
        // Cut anywhere: an error naming the truncation, or (inside the last
        // miniblock's padding) every value.
        for cut in 0..data.len() {
            let mut out = Vec::new();
            match delta_i64(&data[..cut], values.len(), &mut out) {
                Ok(n) => assert_eq!((n, out), (values.len(), values.clone()), "cut at {cut}"),
                Err(err) => {
                    assert!(
                        matches!(err, KeyColumnError::Truncated { .. }),
                        "cut at {cut}: {err}"
                    )
                }
            }
        }
        let mut out = Vec::new();
        assert!(delta_i64(&data[..data.len() / 2], 300, &mut out).is_err());
        for (bytes, expected) in [
            (vec![100, 4, 1, 0], "a block of 100 values"),
            (vec![0x80, 1, 8, 1, 0], "miniblocks of 16 values"),
            (
                vec![0x80, 1, 3, 1, 0],
                "a block of 128 values in 3 miniblocks",
            ),
            (vec![0x80, 1, 1, 2, 0, 0, 65], "a miniblock bit width of 65"),
        ] {
            let err = delta_i64(&bytes, 10, &mut out).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    /// A one-value dictionary: parquet-rs writes bit width 0 and every
    /// index reads 0; a two-value one finds the first row of the other.
    #[test]
    fn dictionary_indices_as_parquet_writes_them() {
        let props = WriterProperties::builder()
            .set_dictionary_enabled(true)
            .set_data_page_row_count_limit(1000)
            .set_write_batch_size(1000)
            .build();
        let one = Arc::new(Int32Array::from(vec![17; 2500]));
        let pages = pages_written(one, props.clone());
        assert!(pages[0].0, "a dictionary page first");
        let mut rows = 0;
        for (_, n, data) in &pages[1..] {
            assert_eq!(data[0], 0, "bit width 0");
            assert_eq!(first_bad_index(data, *n, |i| i == 0).unwrap(), None);
            rows += n;
        }
        assert_eq!(rows, 2500);
        let mut values = vec![17; 2500];
        values[1777] = 18;
        let pages = pages_written(Arc::new(Int32Array::from(values)), props);
        let found: Vec<_> = pages[1..]
            .iter()
            .map(|(_, n, data)| first_bad_index(data, *n, |i| i == 0).unwrap())
            .collect();
        assert_eq!(found, vec![None, Some((777, 1)), None]);
    }

    #[test]
    fn dictionary_runs_by_hand() {
        // Width 2: an RLE run of 3 × 1, then one bit-packed group of
        // 8 values (0,1,2,3,0,1,2,3) of which 6 are rows.
        let data = [2u8, 3 << 1, 1, (1 << 1) | 1, 0b1110_0100, 0b1110_0100];
        assert_eq!(first_bad_index(&data, 9, |i| i < 4).unwrap(), None);
        assert_eq!(first_bad_index(&data, 9, |i| i != 2).unwrap(), Some((5, 2)));
        assert_eq!(first_bad_index(&data, 9, |i| i != 1).unwrap(), Some((0, 1)));
        let err = first_bad_index(&data[..5], 9, |_| true).unwrap_err();
        assert!(
            matches!(
                err,
                KeyColumnError::Truncated {
                    what: "bit-packed run",
                    ..
                }
            ),
            "{err}"
        );
        let err = first_bad_index(&data[..4], 11, |_| true).unwrap_err();
        assert!(err.to_string().contains("bit-packed run"), "{err}");
        assert!(
            first_bad_index(&[33], 1, |_| true)
                .unwrap_err()
                .to_string()
                .contains("bit width of 33")
        );
    }
}
