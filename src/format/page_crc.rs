//! Parquet page checksums: the CRC32 (ISO-HDLC, the zlib polynomial) of each
//! page's bytes after its header, stored in the page header's optional
//! `crc` field (thrift field 4), as the Parquet format defines it.
//!
//! parquet-rs 60 writes no page CRCs, so the postings writer passes every
//! finished row group through [`add_page_crcs`]: it walks the column chunks'
//! pages, re-encodes each `PageHeader` with field 4 inserted, and returns the
//! old → new offset of every page so the footer and offset index can be
//! rebuilt (see `writer.rs`). The reader checks a fetched column chunk with
//! [`check_column_chunk`] before decoding it; any other Parquet reader that
//! verifies page checksums (pyarrow's `page_checksum_verification=True`) checks
//! the same field. Only the thrift *compact* encoding of a `PageHeader` is
//! handled here: field headers, varints and a generic skip of nested values,
//! whose bytes are copied verbatim.

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::metadata::page_index::PageIndexBuilder;
use parquet::file::metadata::{
    OffsetIndexBuilder, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader,
    ParquetMetaDataWriter,
};
use parquet::file::page_index::offset_index::OffsetIndexMetaData;
use parquet::file::writer::TrackedWrite;
use std::sync::Arc;
use thiserror::Error;

/// Errors of reading page headers and checking their CRCs.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PageCrcError {
    /// The bytes at `offset` are not a thrift compact `PageHeader`.
    #[error("page {page} at byte {offset} of its column chunk: malformed page header: {reason}")]
    MalformedHeader {
        page: usize,
        offset: usize,
        reason: String,
    },
    /// A page header without the `crc` field (every postings page has one).
    #[error("page {page} at byte {offset} of its column chunk has no CRC32")]
    MissingCrc { page: usize, offset: usize },
    /// A data page of an encoding its reader does not take.
    #[error(
        "page {page} at byte {offset} of its column chunk: encoding {encoding:?} where {expected} was expected"
    )]
    Encoding {
        page: usize,
        offset: usize,
        encoding: Option<i64>,
        expected: &'static str,
    },
    /// The stored CRC differs from the CRC of the page's bytes.
    #[error(
        "page {page} at byte {offset} of its column chunk: CRC32 is {actual:08x}, its header says {expected:08x}"
    )]
    Mismatch {
        page: usize,
        offset: usize,
        expected: u32,
        actual: u32,
    },
}

/// CRC32 (ISO-HDLC) of `bytes`, the checksum Parquet page headers carry.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// One top-level field of a page header: its id, compact type and the span
/// of its value bytes.
#[derive(Debug, Clone, Copy)]
struct Field {
    id: i16,
    ty: u8,
    value: (usize, usize),
}

/// A parsed page header (its fields go to the caller of [`parse_header`]).
#[derive(Debug, Clone)]
struct Header {
    /// Bytes of the header, stop byte included.
    len: usize,
    compressed_size: usize,
    crc: Option<u32>,
    /// Field 1, the `PageType` (0 data, 2 dictionary, 3 data v2).
    page_type: Option<i64>,
    /// `num_values` and `encoding` of the page's own header struct (field
    /// 5 `DataPageHeader`, 7 `DictionaryPageHeader`, 8 `DataPageHeaderV2`).
    num_values: Option<i64>,
    encoding: Option<i64>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

const MAX_DEPTH: usize = 32;

/// Why bytes are not a thrift compact `PageHeader`: a small value, so that
/// the parse of every page of a query returns in registers; its text goes
/// into [`PageCrcError::MalformedHeader`] only on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
enum Malformed {
    /// Cut short by the end of the bytes.
    #[error("truncated")]
    Truncated,
    #[error("varint longer than 10 bytes")]
    LongVarint,
    #[error("field id overflows")]
    FieldId,
    #[error("nesting too deep")]
    Nesting,
    #[error("length overflows")]
    Length,
    #[error("unknown compact type {0}")]
    UnknownType(u8),
    #[error("compressed_page_size {0} < 0")]
    NegativeSize(i64),
    #[error("no compressed_page_size")]
    NoSize,
}

impl Reader<'_> {
    #[inline]
    fn byte(&mut self) -> Result<u8, Malformed> {
        let b = *self.buf.get(self.pos).ok_or(Malformed::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// A ULEB128 varint of at most 10 bytes; the tenth holds bit 63 only
    /// (its higher bits are dropped, as thrift's own readers do). A loop
    /// that stops at the first byte without its high bit: most of a page
    /// header's varints are one or two bytes.
    #[inline]
    fn varint(&mut self) -> Result<u64, Malformed> {
        let mut out = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
            shift += 7;
            if shift == 63 {
                let last = self.byte()?;
                if last & 0x80 != 0 {
                    return Err(Malformed::LongVarint);
                }
                return Ok(out | (u64::from(last) << 63));
            }
        }
    }

    #[inline]
    fn zigzag(&mut self) -> Result<i64, Malformed> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn skip(&mut self, n: usize) -> Result<(), Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Malformed::Truncated)?;
        self.pos = end;
        Ok(())
    }

    /// Skip one value of compact type `ty`; `in_collection` says whether a
    /// boolean is a byte of its own (list elements) or lives in the type.
    /// An integer (the fields of a page header a reader passes over) is
    /// skipped in place; any other type out of line ([`Reader::skip_other`]).
    #[inline]
    fn skip_value(&mut self, ty: u8, in_collection: bool, depth: usize) -> Result<(), Malformed> {
        if matches!(ty, 4..=6) {
            return self.varint().map(|_| ());
        }
        self.skip_other(ty, in_collection, depth)
    }

    /// [`Reader::skip_value`] of a type other than an integer.
    #[inline(never)]
    fn skip_other(&mut self, ty: u8, in_collection: bool, depth: usize) -> Result<(), Malformed> {
        if depth > MAX_DEPTH {
            return Err(Malformed::Nesting);
        }
        match ty {
            1 | 2 if !in_collection => Ok(()),
            1..=3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(usize::try_from(n).map_err(|_| Malformed::Length)?)
            }
            9 | 10 => {
                let h = self.byte()?;
                let mut n = u64::from(h >> 4);
                if n == 15 {
                    n = self.varint()?;
                }
                for _ in 0..n {
                    self.skip_value(h & 0x0f, true, depth + 1)?;
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.skip_value(kv >> 4, true, depth + 1)?;
                        self.skip_value(kv & 0x0f, true, depth + 1)?;
                    }
                }
                Ok(())
            }
            12 => self.skip_struct(depth + 1),
            other => Err(Malformed::UnknownType(other)),
        }
    }

    #[inline]
    fn field_header(&mut self, last: i16) -> Result<Option<(i16, u8)>, Malformed> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let ty = b & 0x0f;
        let delta = b >> 4;
        let id = if delta == 0 {
            i16::try_from(self.zigzag()?).map_err(|_| Malformed::FieldId)?
        } else {
            last.checked_add(i16::from(delta))
                .ok_or(Malformed::FieldId)?
        };
        Ok(Some((id, ty)))
    }

    /// The `num_values` (field 1) and `encoding` (field `encoding`) of a
    /// page kind's header struct; its other fields skipped.
    fn page_struct(&mut self, encoding: i16) -> Result<(Option<i64>, Option<i64>), Malformed> {
        let (mut last, mut values, mut found) = (0, None, None);
        while let Some((id, ty)) = self.field_header(last)? {
            match (id, ty) {
                (1, 5) => values = Some(self.zigzag()?),
                (id, 5) if id == encoding => found = Some(self.zigzag()?),
                _ => self.skip_value(ty, false, 1)?,
            }
            last = id;
        }
        Ok((values, found))
    }

    fn skip_struct(&mut self, depth: usize) -> Result<(), Malformed> {
        let mut last = 0;
        while let Some((id, ty)) = self.field_header(last)? {
            self.skip_value(ty, false, depth)?;
            last = id;
        }
        Ok(())
    }
}

/// Parse the page header at the start of `buf`, handing each top-level
/// field to `field` (in order; the rewriter keeps them, a reader drops them).
fn parse_header(buf: &[u8], mut field: impl FnMut(Field)) -> Result<Header, Malformed> {
    let mut r = Reader { buf, pos: 0 };
    let mut last = 0;
    let mut compressed = None;
    let mut crc = None;
    let mut page_type = None;
    let (mut num_values, mut encoding) = (None, None);
    while let Some((id, ty)) = r.field_header(last)? {
        let start = r.pos;
        if id == 1 && ty == 5 {
            page_type = Some(r.zigzag()?);
        } else if matches!(id, 5 | 7 | 8) && ty == 12 {
            // The encoding is field 2 of a data or dictionary page header,
            // field 4 of a data page v2 header.
            (num_values, encoding) = r.page_struct(if id == 8 { 4 } else { 2 })?;
        } else if (id == 3 || id == 4) && ty == 5 {
            let v = r.zigzag()?;
            if id == 3 {
                compressed = Some(usize::try_from(v).map_err(|_| Malformed::NegativeSize(v))?);
            } else {
                crc = Some(v as u32);
            }
        } else {
            r.skip_value(ty, false, 0)?;
        }
        field(Field {
            id,
            ty,
            value: (start, r.pos),
        });
        last = id;
    }
    Ok(Header {
        len: r.pos,
        compressed_size: compressed.ok_or(Malformed::NoSize)?,
        crc,
        page_type,
        num_values,
        encoding,
    })
}

impl Header {
    /// Check that the page's `data` (the bytes after this header) has the
    /// CRC the header carries; `page` and `offset` name it in the error.
    fn check(&self, data: &[u8], page: usize, offset: usize) -> Result<(), PageCrcError> {
        let expected = self.crc.ok_or(PageCrcError::MissingCrc { page, offset })?;
        let actual = crc32(data);
        if actual != expected {
            return Err(PageCrcError::Mismatch {
                page,
                offset,
                expected,
                actual,
            });
        }
        Ok(())
    }
}

impl Malformed {
    /// The error of the page at `offset` (the `page`-th of its chunk).
    fn at(self, page: usize, offset: usize) -> PageCrcError {
        PageCrcError::MalformedHeader {
            page,
            offset,
            reason: self.to_string(),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_field_header(out: &mut Vec<u8>, last: i16, id: i16, ty: u8) {
    let delta = id - last;
    if (1..=15).contains(&delta) {
        out.push(((delta as u8) << 4) | ty);
    } else {
        out.push(ty);
        put_varint(out, ((i64::from(id) << 1) ^ (i64::from(id) >> 63)) as u64);
    }
}

/// Re-encode a header of `fields` (whose bytes are `src`) with `crc` as
/// field 4.
fn encode_with_crc(src: &[u8], fields: &[Field], crc: u32, out: &mut Vec<u8>) {
    let mut last = 0;
    let mut crc_written = false;
    let crc_value = i64::from(crc as i32);
    let write_crc = |out: &mut Vec<u8>, last: &mut i16| {
        put_field_header(out, *last, 4, 5);
        put_varint(out, ((crc_value << 1) ^ (crc_value >> 63)) as u64);
        *last = 4;
    };
    for f in fields {
        if f.id == 4 {
            continue;
        }
        if f.id > 4 && !crc_written {
            write_crc(out, &mut last);
            crc_written = true;
        }
        put_field_header(out, last, f.id, f.ty);
        out.extend_from_slice(&src[f.value.0..f.value.1]);
        last = f.id;
    }
    if !crc_written {
        write_crc(out, &mut last);
    }
    out.push(0);
}

/// The pages of a stretch of column chunks, rewritten with CRCs.
#[derive(Debug, Default)]
pub struct Rewritten {
    pub bytes: Vec<u8>,
    /// `(old offset, new offset)` of every page start and of the end, both
    /// relative to the start of the input, ascending.
    pub offsets: Vec<(u64, u64)>,
}

/// Insert a CRC32 into every page header of `pages`, a sequence of whole
/// pages (one or more column chunks back to back, as one row group is
/// written). Existing CRCs are recomputed.
///
/// # Errors
/// [`PageCrcError::MalformedHeader`] when the bytes are not whole pages.
pub fn add_page_crcs(pages: &[u8]) -> Result<Rewritten, PageCrcError> {
    let (out, consumed) = add_page_crcs_prefix(pages)?;
    if consumed != pages.len() {
        return Err(PageCrcError::MalformedHeader {
            page: out.offsets.len().saturating_sub(1),
            offset: consumed,
            reason: "the last page is cut short".into(),
        });
    }
    Ok(out)
}

/// [`add_page_crcs`] over the whole pages at the start of `pages`; a last
/// page cut short is left out. Returns the rewritten pages and how many
/// input bytes they consumed (for a writer that streams its output).
///
/// # Errors
/// [`PageCrcError::MalformedHeader`] for a header that is not a thrift
/// compact `PageHeader`.
pub fn add_page_crcs_prefix(pages: &[u8]) -> Result<(Rewritten, usize), PageCrcError> {
    // A page grows by its CRC field, at most 6 bytes (a one-byte field
    // header and an i32's varint): an eighth more holds every page of 48
    // bytes or more without a reallocation. Postings at 128-d and above
    // are one 512-byte-or-larger page a row, 1 % larger each: growing the
    // buffer copied it whole (3 % of the write stage of a SIFT-like
    // build). Capacity never touched costs no memory.
    let mut out = Rewritten {
        bytes: Vec::with_capacity(pages.len() + pages.len() / 8 + 64),
        offsets: Vec::new(),
    };
    let mut pos = 0;
    let mut page = 0;
    let mut fields = Vec::new();
    while pos < pages.len() {
        fields.clear();
        let header = match parse_header(&pages[pos..], |f| fields.push(f)) {
            Ok(h) => h,
            Err(Malformed::Truncated) => break,
            Err(reason) => return Err(reason.at(page, pos)),
        };
        let data_start = pos + header.len;
        let Some(data_end) = data_start
            .checked_add(header.compressed_size)
            .filter(|&e| e <= pages.len())
        else {
            break;
        };
        out.offsets.push((pos as u64, out.bytes.len() as u64));
        let data = &pages[data_start..data_end];
        encode_with_crc(
            &pages[pos..data_start],
            &fields,
            crc32(data),
            &mut out.bytes,
        );
        out.bytes.extend_from_slice(data);
        pos = data_end;
        page += 1;
    }
    out.offsets.push((pos as u64, out.bytes.len() as u64));
    Ok((out, pos))
}

/// Check the CRC of every page of one fetched column chunk.
///
/// # Errors
/// [`PageCrcError`] naming the page (0-based within the chunk, dictionary
/// page included) for a malformed header, a missing CRC or a mismatch.
pub fn check_column_chunk(chunk: &[u8]) -> Result<usize, PageCrcError> {
    walk_pages(chunk, |_, _, _, _| Ok(()))
}

/// Walk the pages of `chunk`, checking each one's CRC, and hand `visit` its
/// header, the range of its data, its index and its offset. Returns the
/// number of pages.
fn walk_pages(
    chunk: &[u8],
    mut visit: impl FnMut(&Header, std::ops::Range<usize>, usize, usize) -> Result<(), PageCrcError>,
) -> Result<usize, PageCrcError> {
    let mut pos = 0;
    let mut page = 0;
    while pos < chunk.len() {
        let header = parse_header(&chunk[pos..], |_| {}).map_err(|e| e.at(page, pos))?;
        let start = pos + header.len;
        let end = start
            .checked_add(header.compressed_size)
            .filter(|&e| e <= chunk.len())
            .ok_or_else(|| PageCrcError::MalformedHeader {
                page,
                offset: pos,
                reason: "page runs past the end of the column chunk".into(),
            })?;
        header.check(&chunk[start..end], page, pos)?;
        visit(&header, start..end, page, pos)?;
        pos = end;
        page += 1;
    }
    Ok(page)
}

/// The `Encoding` numbers of the Parquet format that the postings' direct
/// reads meet.
pub mod encoding {
    pub const PLAIN: i64 = 0;
    pub const PLAIN_DICTIONARY: i64 = 2;
    pub const DELTA_BINARY_PACKED: i64 = 5;
    pub const RLE_DICTIONARY: i64 = 8;
}

/// The `PageType` numbers: a data page (v1 or v2) and a dictionary page.
pub const DATA_PAGE: i64 = 0;
pub const DICTIONARY_PAGE: i64 = 2;
pub const DATA_PAGE_V2: i64 = 3;

/// One page of a column chunk whose CRC checked: what its header says and
/// where its data lies in the chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedPage {
    /// Its index in the chunk (dictionary page included) and its offset.
    pub page: usize,
    pub offset: usize,
    /// `PageType` ([`DATA_PAGE`], [`DICTIONARY_PAGE`], [`DATA_PAGE_V2`]).
    pub page_type: Option<i64>,
    /// The values and their `Encoding` ([`encoding`]) as its header says.
    pub num_values: Option<i64>,
    pub encoding: Option<i64>,
    /// Its data (the bytes after the header) within the chunk.
    pub data: std::ops::Range<usize>,
}

impl CheckedPage {
    /// A data page of either version.
    pub fn is_data(&self) -> bool {
        matches!(self.page_type, Some(DATA_PAGE | DATA_PAGE_V2))
    }

    /// [`PageCrcError::Encoding`] for this page.
    pub fn unexpected(&self, expected: &'static str) -> PageCrcError {
        PageCrcError::Encoding {
            page: self.page,
            offset: self.offset,
            encoding: self.encoding,
            expected,
        }
    }
}

/// Every page of a fetched column chunk, each one's CRC checked.
///
/// # Errors
/// [`PageCrcError`] for a malformed header, a missing or wrong CRC.
pub fn checked_pages(chunk: &[u8]) -> Result<Vec<CheckedPage>, PageCrcError> {
    let mut pages = Vec::new();
    walk_pages(chunk, |header, data, page, offset| {
        pages.push(CheckedPage {
            page,
            offset,
            page_type: header.page_type,
            num_values: header.num_values,
            encoding: header.encoding,
            data,
        });
        Ok(())
    })?;
    Ok(pages)
}

/// The values of a fetched column chunk of a REQUIRED, flat, PLAIN and
/// uncompressed column (what the postings writer makes of `vector` and
/// `code`), after checking every page's CRC: the data sections of its data
/// pages, in order, which hold the values and nothing else (such a column
/// has no level bytes). One page is a slice of `chunk` (no copy); several
/// are concatenated (one copy).
///
/// # Errors
/// [`PageCrcError`] for a malformed header, a missing or wrong CRC, a
/// page that is not a data page (a dictionary page), or one whose header
/// names an encoding other than PLAIN.
pub fn plain_values(chunk: &Bytes) -> Result<Bytes, PageCrcError> {
    let pages = checked_pages(chunk)?;
    for p in &pages {
        if !p.is_data() {
            return Err(PageCrcError::MalformedHeader {
                page: p.page,
                offset: p.offset,
                reason: format!("page type {:?} is not a data page", p.page_type),
            });
        }
        if p.encoding.is_some_and(|e| e != encoding::PLAIN) {
            return Err(p.unexpected("PLAIN"));
        }
    }
    Ok(match pages.as_slice() {
        [one] => chunk.slice(one.data.clone()),
        _ => {
            let mut out = Vec::with_capacity(pages.iter().map(|p| p.data.len()).sum());
            for p in &pages {
                out.extend_from_slice(&chunk[p.data.clone()]);
            }
            Bytes::from(out)
        }
    })
}

/// The data of one fetched page (its bytes from the offset index's
/// `offset` for `compressed_page_size`), after checking its CRC: the bytes
/// after the header, which for an uncompressed PLAIN page of a required
/// column are the values themselves.
///
/// # Errors
/// [`PageCrcError`] (page 0) for a malformed header, a missing CRC, a
/// mismatch, or a page whose header and data do not fill `page` exactly.
pub fn checked_page(page: &[u8]) -> Result<&[u8], PageCrcError> {
    let header = parse_header(page, |_| {}).map_err(|e| e.at(0, 0))?;
    if header.len.checked_add(header.compressed_size) != Some(page.len()) {
        return Err(PageCrcError::MalformedHeader {
            page: 0,
            offset: 0,
            reason: format!(
                "header of {} bytes and {} data bytes do not fill the {}-byte page",
                header.len,
                header.compressed_size,
                page.len()
            ),
        });
    }
    let data = &page[header.len..];
    header.check(data, 0, 0)?;
    Ok(data)
}

/// The new offset of parquet offset `old` (a page start or a stretch end)
/// in `offsets` (see [`Rewritten::offsets`], made absolute).
fn remap(offsets: &[(u64, u64)], old: i64) -> Result<i64, ParquetError> {
    let key = u64::try_from(old).unwrap_or(u64::MAX);
    let i = offsets.partition_point(|&(o, _)| o < key);
    match offsets.get(i) {
        Some(&(o, n)) if o == key => Ok(n as i64),
        _ => Err(ParquetError::General(format!(
            "offset {old} is not a page boundary"
        ))),
    }
}

/// `metadata` with every page offset moved by `offsets` (absolute
/// `(old, new)` pairs of every page start and row-group end): column chunk
/// offsets and sizes, row-group offsets, and the offset index. The page
/// index locations are left for [`write_footer`] to fill in.
///
/// # Errors
/// A [`ParquetError`] when an offset is not a known page boundary.
pub fn remap_metadata(
    metadata: ParquetMetaData,
    offsets: &[(u64, u64)],
) -> Result<ParquetMetaData, ParquetError> {
    let mut builder = metadata.into_builder();
    let page_index = builder.take_page_index();
    let row_groups = builder.take_row_groups();
    let ncols = row_groups.first().map_or(0, |rg| rg.num_columns());
    let mut index = PageIndexBuilder::new(row_groups.len(), ncols);
    let mut out = Vec::with_capacity(row_groups.len());
    for (r, rg) in row_groups.into_iter().enumerate() {
        let mut rgb = rg.into_builder();
        let columns = rgb.take_columns();
        let mut new_columns = Vec::with_capacity(columns.len());
        let mut first: Option<i64> = None;
        for (c, col) in columns.into_iter().enumerate() {
            let (start, len) = col.byte_range();
            let new_start = remap(offsets, start as i64)?;
            let new_end = remap(offsets, (start + len) as i64)?;
            first = Some(first.map_or(new_start, |f| f.min(new_start)));
            let dictionary = match col.dictionary_page_offset() {
                Some(d) => Some(remap(offsets, d)?),
                None => None,
            };
            let data = remap(offsets, col.data_page_offset())?;
            new_columns.push(
                col.into_builder()
                    .set_data_page_offset(data)
                    .set_dictionary_page_offset(dictionary)
                    .set_total_compressed_size(new_end - new_start)
                    .set_offset_index_offset(None)
                    .set_offset_index_length(None)
                    .set_column_index_offset(None)
                    .set_column_index_length(None)
                    .build()?,
            );
            if let Some(pi) = page_index.as_deref() {
                if let Some(ci) = pi.column_index(r, c) {
                    index.put_column_index(ci.clone(), r, c);
                }
                if let Some(oi) = pi.offset_index(r, c) {
                    index.put_offset_index(remap_offset_index(offsets, oi)?, r, c);
                }
            }
        }
        let mut rgb = rgb.set_column_metadata(new_columns);
        if let Some(f) = first {
            rgb = rgb.set_file_offset(f);
        }
        out.push(rgb.build()?);
    }
    Ok(builder
        .set_row_groups(out)
        .set_page_index(Some(Arc::new(index.build())))
        .build())
}

fn remap_offset_index(
    offsets: &[(u64, u64)],
    oi: &OffsetIndexMetaData,
) -> Result<OffsetIndexMetaData, ParquetError> {
    let locations = oi.page_locations();
    let mut b = OffsetIndexBuilder::new();
    for (i, loc) in locations.iter().enumerate() {
        let start = remap(offsets, loc.offset)?;
        let end = remap(offsets, loc.offset + i64::from(loc.compressed_page_size))?;
        let next_row = locations
            .get(i + 1)
            .map_or(loc.first_row_index, |n| n.first_row_index);
        b.append_row_count(next_row - loc.first_row_index);
        let size = i32::try_from(end - start)
            .map_err(|_| ParquetError::General("page larger than 2 GiB".into()))?;
        b.append_offset_and_size(start, size);
    }
    if let Some(bytes) = oi.unencoded_byte_array_data_bytes() {
        for &v in bytes {
            b.append_unencoded_byte_array_data_bytes(Some(v));
        }
    }
    Ok(b.build())
}

/// Serialise the page indexes and footer of `metadata` as they follow
/// `at` bytes of data (their recorded offsets count from the object start).
///
/// # Errors
/// A [`ParquetError`] from the metadata writer.
pub fn write_footer(metadata: &ParquetMetaData, at: u64) -> Result<Vec<u8>, ParquetError> {
    let mut tail = Vec::new();
    let mut tracked = TrackedWrite::new(SkipPrefix {
        skip: at,
        out: &mut tail,
    });
    // TrackedWrite counts from 0: feed it `at` bytes the sink drops.
    let zeros = [0u8; 64 * 1024];
    let mut left = at;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        std::io::Write::write_all(&mut tracked, &zeros[..n])?;
        left -= n as u64;
    }
    ParquetMetaDataWriter::new_with_tracked(tracked, metadata).finish()?;
    Ok(tail)
}

/// A sink that drops its first `skip` bytes and keeps the rest.
struct SkipPrefix<'a> {
    skip: u64,
    out: &'a mut Vec<u8>,
}

impl std::io::Write for SkipPrefix<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let dropped = self.skip.min(buf.len() as u64) as usize;
        self.skip -= dropped as u64;
        self.out.extend_from_slice(&buf[dropped..]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A whole Parquet file (written by any writer, page index included or not)
/// with a CRC32 in every page header: the pages are rewritten in place and
/// the footer rebuilt. Used for postings written outside
/// [`crate::postings::PostingsWriter`] (which does the same row group by row group).
///
/// # Errors
/// A [`ParquetError`] for a file that does not parse.
pub fn add_page_crcs_to_file(file: &[u8]) -> Result<Vec<u8>, ParquetError> {
    let bytes = Bytes::copy_from_slice(file);
    let metadata = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Optional)
        .parse_and_finish(&bytes)?;
    let end = metadata
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .map(|c| {
            let (s, l) = c.byte_range();
            s + l
        })
        .max()
        .unwrap_or(4) as usize;
    let pages = file
        .get(4..end)
        .ok_or_else(|| ParquetError::General("column chunks run past the file".into()))?;
    let rewritten = add_page_crcs(pages).map_err(|e| ParquetError::General(e.to_string()))?;
    let offsets: Vec<(u64, u64)> = rewritten
        .offsets
        .iter()
        .map(|&(o, n)| (o + 4, n + 4))
        .collect();
    let metadata = remap_metadata(metadata, &offsets)?;
    let mut out = file[..4].to_vec();
    out.extend_from_slice(&rewritten.bytes);
    let tail = write_footer(&metadata, out.len() as u64)?;
    out.extend_from_slice(&tail);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 data page header: type 0, sizes, and a nested data_page_header
    /// (field 5) holding num_values, encodings and a statistics struct with
    /// binaries, like the ones parquet-rs writes.
    fn header(compressed: i64, long_ids: bool) -> Vec<u8> {
        let zz = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
        let mut h = Vec::new();
        h.push(0x15);
        put_varint(&mut h, zz(0)); // type
        h.push(0x15);
        put_varint(&mut h, zz(compressed)); // uncompressed
        h.push(0x15);
        put_varint(&mut h, zz(compressed)); // compressed
        if long_ids {
            h.push(0x0c); // field 5 in the long form
            put_varint(&mut h, zz(5));
        } else {
            h.push(0x2c); // field 5, delta 2
        }
        h.push(0x15);
        put_varint(&mut h, zz(3)); // num_values
        h.push(0x15);
        put_varint(&mut h, zz(0)); // encoding
        h.push(0x15);
        put_varint(&mut h, zz(3));
        h.push(0x15);
        put_varint(&mut h, zz(3));
        h.push(0x1c); // statistics struct (field 5, delta 1)
        h.push(0x58); // field 5 binary (max_value)
        h.extend_from_slice(&[4, 1, 2, 3, 4]);
        h.push(0x18); // field 6 binary (min_value)
        h.extend_from_slice(&[4, 1, 2, 3, 4]);
        h.push(0x19); // field 7: list<...> of 2 i32
        h.push(0x25);
        h.extend_from_slice(&[2, 4]);
        h.push(0); // end statistics
        h.push(0); // end data page header
        h.push(0); // end page header
        h
    }

    fn page(data: &[u8], long_ids: bool) -> Vec<u8> {
        let mut p = header(data.len() as i64, long_ids);
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn crcs_are_inserted_offsets_mapped_and_checked() {
        for long_ids in [false, true] {
            let mut pages = page(b"hello world", long_ids);
            let second = pages.len() as u64;
            pages.extend(page(&[7u8; 300], long_ids));
            let r = add_page_crcs(&pages).unwrap();
            assert_eq!(r.offsets.len(), 3);
            assert_eq!(r.offsets[0], (0, 0));
            assert_eq!(r.offsets[1].0, second);
            assert_eq!(r.offsets[2].1, r.bytes.len() as u64);
            assert!(matches!(
                check_column_chunk(&pages),
                Err(PageCrcError::MissingCrc { page: 0, .. })
            ));
            assert_eq!(check_column_chunk(&r.bytes), Ok(2));
            // The rewritten header parses to the same fields plus the crc.
            let mut ids = Vec::new();
            let h = parse_header(&r.bytes, |f| ids.push(f.id)).unwrap();
            assert_eq!(h.crc, Some(crc32(b"hello world")));
            assert_eq!(ids, vec![1, 2, 3, 4, 5]);
            // Rewriting again is stable.
            assert_eq!(add_page_crcs(&r.bytes).unwrap().bytes, r.bytes);
            // Every flipped data byte of the second page is a mismatch on page 1.
            let start = r.offsets[1].1 as usize
                + parse_header(&r.bytes[r.offsets[1].1 as usize..], |_| {})
                    .unwrap()
                    .len;
            let mut bad = r.bytes.clone();
            bad[start + 17] ^= 0x40;
            assert!(matches!(
                check_column_chunk(&bad),
                Err(PageCrcError::Mismatch { page: 1, .. })
            ));
        }
    }

    #[test]
    fn garbage_is_a_malformed_header_not_a_panic() {
        for bytes in [
            &[0xffu8; 3][..],
            &[0x15, 0x80][..],
            &[0x1c][..],
            &[0x0d, 1, 1][..],
        ] {
            assert!(matches!(
                check_column_chunk(bytes),
                Err(PageCrcError::MalformedHeader { .. })
            ));
        }
        assert_eq!(check_column_chunk(&[]), Ok(0));
    }

    #[test]
    fn a_varint_of_every_length_reads_back_and_an_eleventh_byte_is_malformed() {
        let read = |bytes: &[u8]| {
            let mut r = Reader { buf: bytes, pos: 0 };
            r.varint().map(|v| (v, r.pos))
        };
        // Every bit position, so every length from 1 to 10 bytes, and the
        // values on both sides of each length's bound.
        let mut values = vec![0, u64::MAX];
        for bit in 0..64 {
            values.extend([1u64 << bit, (1u64 << bit) - 1, (1u64 << bit) + 1]);
        }
        for v in values {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, v);
            bytes.push(0x55); // the next field's byte, not read
            assert_eq!(read(&bytes), Ok((v, bytes.len() - 1)), "{v:#x}");
        }
        // Ten bytes hold 64 bits: the tenth's bits above bit 63 are dropped.
        let mut ten = vec![0xff; 9];
        ten.push(0x7f);
        assert_eq!(read(&ten), Ok((u64::MAX, 10)));
        // A continuation bit on the tenth byte, or bytes that end first.
        assert_eq!(read(&[0xff; 11]), Err(Malformed::LongVarint));
        assert_eq!(read(&[0x80; 10]), Err(Malformed::LongVarint));
        assert_eq!(read(&[0x80, 0x80]), Err(Malformed::Truncated));
        assert_eq!(read(&[]), Err(Malformed::Truncated));
    }

    #[test]
    fn crc32_is_the_zlib_crc() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
