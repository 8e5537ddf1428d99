//! Decoding one planned row group ([`Job`]), pure CPU: the checksum of every
//! page fetched, then the `cid`, `rowid`, `vector` and `code` columns read
//! straight from their uncompressed pages in the writer's encodings (the
//! key columns' in [`crate::format::key_columns`]), the rest through
//! parquet's push decoder. Every row's cid is checked
//! against its row group's exact statistics: a mismatch is
//! [`ProbeError::CorruptIndex`], never a wrong answer.

use super::ProbeError;
use super::footer::{Footer, VectorPages};
use super::rows::{DecodedRowGroup, Want};
use crate::format::key_columns::{delta_i64, first_bad_index};
use crate::format::page_crc::{
    DICTIONARY_PAGE, check_column_chunk, checked_pages, encoding, plain_values,
};
use crate::format::postings_table::{CID_COLUMN, CODE_COLUMN, ROWID_COLUMN, VECTOR_COLUMN};
use crate::store::byte_ranges::slice;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::buffer::{Buffer, ScalarBuffer};
use arrow::datatypes::{Int32Type, Int64Type};
use bytes::Bytes;
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use parquet::basic::Encoding;
use parquet::errors::ParquetError;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::page_index::index_reader::decode_offset_index;
use parquet::file::page_index::offset_index::PageLocation;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// One planned row group still to fetch, and how to decode it.
pub struct Job {
    pub file: usize,
    pub row_group: usize,
    cid: u32,
    want: Want,
    /// The decoder of the columns not read directly (payload, or chunks
    /// of another encoding); `None` when every column is direct.
    decoder: Option<ParquetPushDecoder>,
    /// The column chunks the decoder needs.
    pub ranges: Vec<Range<u64>>,
    /// The column whose chunk each range is (for checksum errors).
    columns: Vec<String>,
    /// The `vector` column's offset index, and the byte range of its chunk
    /// (which every page must lie in), when the codes are read and the
    /// footer does not hold its page locations yet.
    pub offset_index: Option<(Range<u64>, Range<u64>)>,
    /// Where the page locations are kept (the footer's slot of this row
    /// group), when the load wants them: filled from `offset_index`, or
    /// already there.
    pages_slot: Option<(VectorPages, usize)>,
    /// Column chunks read straight from their pages (`direct_column`):
    /// `cid`, `rowid`, `vector` and `code` when uncompressed in the
    /// encodings the writer uses (`is_direct`). Others go through the
    /// decoder.
    pub direct: Vec<(&'static str, Range<u64>)>,
    /// Rows of the row group (footer).
    rows: usize,
    /// Bytes a row of the column the scan reads: `code` where the codes
    /// are read, else `vector`; 0 where neither is.
    scan_width: u64,
}

/// The column-chunk bytes of a [`Job`], by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkBytes {
    /// `cid` and `rowid`.
    pub keys: u64,
    pub vectors: u64,
    pub codes: u64,
    pub payload: u64,
}

impl ChunkBytes {
    /// Every kind's.
    pub fn total(self) -> u64 {
        self.keys + self.vectors + self.codes + self.payload
    }
}

impl Job {
    /// The bytes of the column chunks it reads (not its offset index), by kind.
    pub fn chunk_bytes(&self) -> ChunkBytes {
        let mut bytes = ChunkBytes::default();
        let named = self
            .ranges
            .iter()
            .zip(self.columns.iter().map(String::as_str));
        let direct = self.direct.iter().map(|(c, r)| (r, *c));
        for (r, column) in named.chain(direct) {
            let len = r.end - r.start;
            match column {
                CID_COLUMN | ROWID_COLUMN => bytes.keys += len,
                VECTOR_COLUMN => bytes.vectors += len,
                CODE_COLUMN => bytes.codes += len,
                _ => bytes.payload += len,
            }
        }
        bytes
    }

    /// The fewest bytes its scan needs: a code (or a vector) a row
    /// ([`SearchStats::minimum_bytes`](super::stats::SearchStats::minimum_bytes)).
    pub fn minimum_bytes(&self) -> u64 {
        self.rows as u64 * self.scan_width
    }

    /// Every byte range the job reads: decoder chunks, direct chunks and
    /// the offset index.
    pub fn all_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges
            .iter()
            .cloned()
            .chain(self.offset_index.iter().map(|(r, _)| r.clone()))
            .chain(self.direct.iter().map(|(_, r)| r.clone()))
    }

    /// The job of row group `rg` of file `file` (named `name`), reading
    /// what `want` asks: direct chunks where `is_direct`, a push
    /// decoder for the rest (which says which ranges it needs), and the
    /// `vector` offset index when [`Want::pages`]. With
    /// [`Want::partial_payload`] the payload read is `filter_columns`.
    ///
    /// # Errors
    /// [`ProbeError::Decode`] for a footer the decoder rejects, a missing
    /// column or offset index, or a planned range that is not one chunk.
    pub fn new(
        name: &str,
        footer: &Footer,
        (file, rg): (usize, usize),
        want: Want,
        filter_columns: &[String],
    ) -> Result<Job, ProbeError> {
        let err = |source| ProbeError::Decode {
            path: name.to_string(),
            row_group: rg,
            source,
        };
        let general = |msg: String| err(ParquetError::General(msg));
        let metadata = footer.arrow.metadata();
        let chunks = metadata.row_group(rg).columns();
        let chunk_of = |name: &str| chunks.iter().find(|c| c.column_path().parts() == [name]);
        let mut roots = Vec::new();
        let mut direct = Vec::new();
        for (column, root) in wanted_columns(footer, want).map_err(general)? {
            match chunk_of(column) {
                Some(c) if is_direct(column, c) => {
                    let (start, len) = c.byte_range();
                    direct.push((column, start..start + len));
                }
                _ => roots.push(root),
            }
        }
        if want.payload {
            roots.extend(&footer.facts.payload_roots);
        } else if want.filter_columns {
            let fields = footer.arrow.schema().fields();
            for column in filter_columns {
                let root = footer
                    .facts
                    .payload_roots
                    .iter()
                    .copied()
                    .find(|&r| fields.get(r).is_some_and(|f| f.name() == column));
                roots.push(root.ok_or_else(|| {
                    general(format!("no payload column {column} for the filter"))
                })?);
            }
        }
        let rows = metadata.row_group(rg).num_rows();
        let decoder = if roots.is_empty() {
            None
        } else {
            let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
            let decoder = ParquetPushDecoderBuilder::new_with_metadata(footer.arrow.clone())
                .with_projection(mask)
                .with_row_groups(vec![rg])
                .with_batch_size(usize::try_from(rows).unwrap_or(usize::MAX).max(1))
                .build()
                .map_err(err)?;
            Some(decoder)
        };
        let ranges: Vec<Range<u64>> = decoder
            .iter()
            .flat_map(|d| d.scan_plan().map(|p| p.range))
            .collect();
        // Each planned range must be exactly one column chunk: page checksums
        // are checked chunk by chunk.
        let columns = ranges
            .iter()
            .map(|r| {
                chunks
                    .iter()
                    .find(|c| {
                        let (start, len) = c.byte_range();
                        start == r.start && start + len == r.end
                    })
                    .map(|c| c.column_path().string())
                    .ok_or_else(|| general(format!("planned range {r:?} is not one column chunk")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pages_slot = want.pages().then(|| (Arc::clone(&footer.vector_pages), rg));
        let known = footer
            .vector_pages
            .get(rg)
            .and_then(OnceLock::get)
            .is_some();
        let offset_index = if want.pages() && !known {
            let chunk = chunk_of(VECTOR_COLUMN)
                .ok_or_else(|| general(format!("no {VECTOR_COLUMN} column chunk")))?;
            let (offset, length) = chunk
                .offset_index_offset()
                .zip(chunk.offset_index_length())
                .and_then(|(o, l)| Some((u64::try_from(o).ok()?, u64::try_from(l).ok()?)))
                .ok_or_else(|| {
                    general(format!("the {VECTOR_COLUMN} column has no offset index"))
                })?;
            let (start, len) = chunk.byte_range();
            Some((offset..offset + length, start..start + len))
        } else {
            None
        };
        let cid = footer.facts.row_group_cids.get(rg).copied();
        let width = |root: usize| match footer
            .arrow
            .schema()
            .fields()
            .get(root)
            .map(|f| f.data_type())
        {
            Some(arrow::datatypes::DataType::FixedSizeBinary(w)) => u64::try_from(*w).unwrap_or(0),
            _ => 0,
        };
        let scan_width = match (want.codes, footer.facts.code_root) {
            (true, Some(root)) => width(root),
            _ if want.vectors => width(footer.facts.vector_root),
            _ => 0,
        };
        Ok(Job {
            file,
            row_group: rg,
            cid: cid.unwrap_or(u32::MAX),
            want,
            decoder,
            ranges,
            columns,
            offset_index,
            pages_slot,
            direct,
            rows: usize::try_from(rows).unwrap_or(usize::MAX),
            scan_width,
        })
    }
}

/// Whether `column`'s chunk `c` is read straight from its pages
/// ([`direct_column`]): uncompressed, in encodings that read takes (the
/// writer's, and PLAIN `cid` and `rowid` of indexes written before them);
/// anything else goes through the decoder.
fn is_direct(column: &str, c: &ColumnChunkMetaData) -> bool {
    use parquet::basic::Encoding::{
        DELTA_BINARY_PACKED, PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY,
    };
    let (takes, dictionary): (&[Encoding], bool) = match column {
        CID_COLUMN => (&[PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY, RLE], true),
        ROWID_COLUMN => (&[PLAIN, DELTA_BINARY_PACKED, RLE], false),
        _ => (&[PLAIN, RLE], false),
    };
    c.compression() == parquet::basic::Compression::UNCOMPRESSED
        && (dictionary || c.dictionary_page_offset().is_none())
        && c.encodings().all(|e| takes.contains(&e))
}

/// The fixed columns `want` reads, with their root in the file schema.
fn wanted_columns(
    footer: &Footer,
    want: Want,
) -> Result<impl Iterator<Item = (&'static str, usize)>, String> {
    let facts = &footer.facts;
    let code = match want.codes {
        true => Some(
            facts
                .code_root
                .ok_or_else(|| format!("no {CODE_COLUMN} column"))?,
        ),
        false => None,
    };
    Ok([
        (CID_COLUMN, facts.cid_root),
        (ROWID_COLUMN, facts.rowid_root),
    ]
    .into_iter()
    .chain(want.vectors.then_some((VECTOR_COLUMN, facts.vector_root)))
    .chain(code.map(|root| (CODE_COLUMN, root))))
}

/// What a row group's decode has so far: the direct columns' values and
/// the decoder's batches.
#[derive(Default)]
struct Columns {
    rowids: Vec<i64>,
    cids_checked: bool,
    vectors: Vec<Buffer>,
    codes: Vec<Buffer>,
    payloads: Vec<RecordBatch>,
}

/// The errors of decoding one row group, naming its file and index.
struct Named<'a> {
    path: &'a str,
    row_group: usize,
}

impl Named<'_> {
    fn general(&self, msg: String) -> ProbeError {
        self.parquet(ParquetError::General(msg))
    }

    fn parquet(&self, source: ParquetError) -> ProbeError {
        ProbeError::Decode {
            path: self.path.to_string(),
            row_group: self.row_group,
            source,
        }
    }

    fn checksum(&self, column: &str, source: crate::format::page_crc::PageCrcError) -> ProbeError {
        ProbeError::PageChecksum {
            path: self.path.to_string(),
            row_group: self.row_group,
            column: column.to_string(),
            source,
        }
    }

    fn corrupt(&self, row: usize, found: i64, expected: u32) -> ProbeError {
        ProbeError::CorruptIndex {
            path: self.path.to_string(),
            row_group: self.row_group,
            row,
            found,
            expected: expected.into(),
        }
    }
}

/// Decode `job` (file `name`) from the fetched `data` of the coalesced
/// `ranges`: page CRCs, direct columns, decoder batches, the cid check and
/// the row count against the footer's.
///
/// # Errors
/// [`ProbeError::PageChecksum`], [`ProbeError::Decode`],
/// [`ProbeError::CorruptIndex`].
pub fn decode(
    name: &str,
    mut job: Job,
    dim: usize,
    ranges: &[Range<u64>],
    data: &[Bytes],
) -> Result<DecodedRowGroup, ProbeError> {
    let at = Named {
        path: name,
        row_group: job.row_group,
    };
    let fetched = |r: &Range<u64>| {
        slice(ranges, data, r).ok_or_else(|| at.general(format!("range {r:?} was not fetched")))
    };
    let mut bufs = Vec::with_capacity(job.ranges.len());
    for (r, column) in job.ranges.iter().zip(&job.columns) {
        let buf = fetched(r)?;
        check_column_chunk(&buf).map_err(|e| at.checksum(column, e))?;
        bufs.push(buf);
    }
    if let Some(decoder) = job.decoder.as_mut() {
        decoder
            .push_ranges(std::mem::take(&mut job.ranges), bufs)
            .map_err(|e| at.parquet(e))?;
    }
    let mut columns = Columns::default();
    for (column, r) in &job.direct {
        direct_column(&at, &job, column, &fetched(r)?, dim, &mut columns)?;
    }
    let direct_vectors = !columns.vectors.is_empty();
    let direct_codes = !columns.codes.is_empty();
    let direct_rowids = !columns.rowids.is_empty();
    let mut decoded_rows = 0;
    while let Some(decoder) = job.decoder.as_mut() {
        let batch = match decoder.try_decode().map_err(|e| at.parquet(e))? {
            DecodeResult::Data(b) => b,
            DecodeResult::Finished => break,
            DecodeResult::NeedsData(r) => {
                return Err(at.general(format!("needs unplanned ranges {r:?}")));
            }
        };
        let first_row = decoded_rows;
        decoded_rows += batch.num_rows();
        let wants = Wants {
            vectors: job.want.vectors && !direct_vectors,
            codes: job.want.codes && !direct_codes,
            rowids: !direct_rowids,
            payload: job.want.payload || job.want.filter_columns,
        };
        decoded_batch(&at, &job, &batch, first_row, dim, wants, &mut columns)?;
    }
    if columns.rowids.len() != job.rows {
        return Err(at.general(format!(
            "decoded {} rows, the footer says {}",
            columns.rowids.len(),
            job.rows
        )));
    }
    let vector_pages = match (&job.offset_index, &job.pages_slot) {
        (Some((range, chunk)), slot) => {
            let bytes = slice(ranges, data, range)
                .ok_or_else(|| at.general(format!("offset index {range:?} was not fetched")))?;
            let pages: Arc<[PageLocation]> =
                page_locations(&at, columns.rowids.len(), &bytes, chunk)?.into();
            if let Some((slots, rg)) = slot
                && let Some(slot) = slots.get(*rg)
            {
                let _ = slot.set(Arc::clone(&pages));
            }
            Some(pages)
        }
        (None, Some((slots, rg))) => slots.get(*rg).and_then(OnceLock::get).cloned(),
        (None, None) => None,
    };
    let payload = if job.want.payload || job.want.filter_columns {
        let schema = columns.payloads.first().map_or_else(
            || Arc::new(arrow::datatypes::Schema::empty()),
            RecordBatch::schema,
        );
        let batch = arrow::compute::concat_batches(&schema, &columns.payloads);
        Some(batch.map_err(|e| at.general(e.to_string()))?)
    } else {
        None
    };
    Ok(DecodedRowGroup {
        cid: job.cid,
        rowids: columns.rowids,
        vectors: f32_rows(columns.vectors),
        codes: job.want.codes.then(|| concat_buffers(columns.codes)),
        vector_pages,
        payload,
        file: job.file,
        row_group: job.row_group,
        fast_codes: Default::default(),
    })
}

/// One column chunk read straight from its pages (CRCs checked): `cid`
/// checked row by row against the row group's CID ([`check_cids`]),
/// `rowid` decoded ([`read_rowids`]), `vector` and `code` exactly `rows`
/// PLAIN values of the column's width.
fn direct_column(
    at: &Named<'_>,
    job: &Job,
    column: &str,
    chunk: &Bytes,
    dim: usize,
    out: &mut Columns,
) -> Result<(), ProbeError> {
    match column {
        CID_COLUMN => {
            check_cids(at, job, chunk)?;
            out.cids_checked = true;
            return Ok(());
        }
        ROWID_COLUMN => return read_rowids(at, chunk, job.rows, &mut out.rowids),
        _ => {}
    }
    let values = plain_values(chunk).map_err(|e| at.checksum(column, e))?;
    let width = (column == VECTOR_COLUMN).then_some(dim * 4);
    if job.rows == 0
        || !values.len().is_multiple_of(job.rows)
        || width.is_some_and(|w| values.len() != w * job.rows)
    {
        return Err(at.general(format!(
            "{column} pages hold {} value bytes for {} rows",
            values.len(),
            job.rows
        )));
    }
    match column {
        VECTOR_COLUMN => out.vectors.push(Buffer::from(values)),
        _ => out.codes.push(Buffer::from(values)),
    }
    Ok(())
}

/// Every `cid` of a chunk is the row group's: PLAIN data pages value by
/// value, dictionary-encoded ones (the writer's: a one-value dictionary)
/// index by index against the dictionary's values. A row holding another
/// CID is [`ProbeError::CorruptIndex`], naming it.
fn check_cids(at: &Named<'_>, job: &Job, chunk: &Bytes) -> Result<(), ProbeError> {
    let pages = checked_pages(chunk).map_err(|e| at.checksum(CID_COLUMN, e))?;
    let expected = i32::try_from(job.cid).unwrap_or(-1);
    let int = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (mut dictionary, mut row): (&[u8], usize) = (&[], 0);
    for p in &pages {
        let data = &chunk[p.data.clone()];
        let whole = data.len().is_multiple_of(4);
        match p.encoding {
            Some(encoding::PLAIN | encoding::PLAIN_DICTIONARY)
                if p.page_type == Some(DICTIONARY_PAGE) && whole =>
            {
                dictionary = data;
            }
            Some(encoding::PLAIN) if p.is_data() && whole => {
                if let Some(i) = data.chunks_exact(4).position(|c| int(c) != expected) {
                    return Err(at.corrupt(row + i, int(&data[i * 4..]).into(), job.cid));
                }
                row += data.len() / 4;
            }
            Some(encoding::PLAIN_DICTIONARY | encoding::RLE_DICTIONARY) if p.is_data() => {
                let value = |i: u64| {
                    let at = usize::try_from(i).ok()?.checked_mul(4)?;
                    dictionary.get(at..at + 4).map(int)
                };
                let rows = p
                    .num_values
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= job.rows.saturating_sub(row))
                    .ok_or_else(|| {
                        at.general(format!(
                            "{CID_COLUMN} page {} says {:?} values, {} of the row group's rows remain",
                            p.page,
                            p.num_values,
                            job.rows.saturating_sub(row)
                        ))
                    })?;
                let bad = first_bad_index(data, rows, |i| value(i) == Some(expected))
                    .map_err(|e| at.general(format!("{CID_COLUMN} page {}: {e}", p.page)))?;
                if let Some((r, i)) = bad {
                    return Err(match value(i) {
                        Some(found) => at.corrupt(row + r, found.into(), job.cid),
                        None => at.general(format!(
                            "{CID_COLUMN} row {} has dictionary index {i}, beyond its {} values",
                            row + r,
                            dictionary.len() / 4
                        )),
                    });
                }
                row += rows;
            }
            _ => {
                let expected = "PLAIN values or a dictionary of INT32";
                return Err(at.checksum(CID_COLUMN, p.unexpected(expected)));
            }
        }
    }
    if row != job.rows {
        return Err(at.general(format!(
            "{CID_COLUMN} pages hold {row} values for {} rows",
            job.rows
        )));
    }
    Ok(())
}

/// The `rowid`s of a chunk of `rows` rows, page by page:
/// DELTA_BINARY_PACKED (the writer's) or PLAIN (indexes written before it).
fn read_rowids(
    at: &Named<'_>,
    chunk: &Bytes,
    rows: usize,
    out: &mut Vec<i64>,
) -> Result<(), ProbeError> {
    let pages = checked_pages(chunk).map_err(|e| at.checksum(ROWID_COLUMN, e))?;
    for p in &pages {
        let data = &chunk[p.data.clone()];
        match p.encoding {
            Some(encoding::DELTA_BINARY_PACKED) if p.is_data() => {
                let n = delta_i64(data, rows.saturating_sub(out.len()), out)
                    .map_err(|e| at.general(format!("{ROWID_COLUMN} page {}: {e}", p.page)))?;
                if p.num_values
                    .is_some_and(|v| usize::try_from(v).ok() != Some(n))
                {
                    return Err(at.general(format!(
                        "{ROWID_COLUMN} page {} holds {n} values, its header says {:?}",
                        p.page, p.num_values
                    )));
                }
            }
            Some(encoding::PLAIN) if p.is_data() && data.len().is_multiple_of(8) => {
                out.extend(
                    data.chunks_exact(8).map(|b| {
                        i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                    }),
                );
            }
            _ => {
                let expected = "DELTA_BINARY_PACKED or PLAIN INT64";
                return Err(at.checksum(ROWID_COLUMN, p.unexpected(expected)));
            }
        }
    }
    Ok(())
}

/// The columns a decoder batch must supply (those not read directly).
#[derive(Clone, Copy)]
struct Wants {
    vectors: bool,
    codes: bool,
    rowids: bool,
    payload: bool,
}

/// Take one decoder batch (rows from `first_row` on): the cid check unless
/// the cids were read directly, then the columns `wants` names.
fn decoded_batch(
    at: &Named<'_>,
    job: &Job,
    batch: &RecordBatch,
    first_row: usize,
    dim: usize,
    wants: Wants,
    out: &mut Columns,
) -> Result<(), ProbeError> {
    let column = |n: &str| {
        batch
            .column_by_name(n)
            .ok_or_else(|| at.general(format!("no column {n}")))
    };
    if !out.cids_checked {
        let cids = column(CID_COLUMN)?
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| at.general("cid is not Int32".into()))?;
        let expected = i32::try_from(job.cid).ok();
        if let Some((i, c)) = cids.iter().enumerate().find(|(_, c)| *c != expected) {
            return Err(at.corrupt(first_row + i, c.map_or(-1, i64::from), job.cid));
        }
    }
    let fixed = |n: &str, width: Option<usize>| -> Result<Buffer, ProbeError> {
        let a = column(n)?
            .as_fixed_size_binary_opt()
            .filter(|a| width.is_none_or(|w| a.value_length() as usize == w))
            .filter(|a| a.null_count() == 0)
            .ok_or_else(|| at.general(format!("{n} is not a required FixedSizeBinary")))?;
        let bytes = a.len() * a.value_length() as usize;
        let values = a.values();
        if values.len() < bytes {
            let held = values.len();
            return Err(at.general(format!("{n} buffer holds {held} of {bytes} bytes")));
        }
        Ok(values.slice_with_length(0, bytes))
    };
    if wants.vectors {
        out.vectors.push(fixed(VECTOR_COLUMN, Some(dim * 4))?);
    }
    if wants.codes {
        out.codes.push(fixed(CODE_COLUMN, None)?);
    }
    if wants.rowids {
        let rowids = column(ROWID_COLUMN)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| at.general("rowid is not Int64".into()))?;
        out.rowids.extend(rowids.values().iter());
    }
    if wants.payload {
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| {
                let n = batch.schema_ref().field(i).name().as_str();
                ![CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN, CODE_COLUMN].contains(&n)
            })
            .collect();
        let payload = batch
            .project(&keep)
            .map_err(|e| at.general(e.to_string()))?;
        out.payloads.push(payload);
    }
    Ok(())
}

/// The page locations of an offset index read for a row group of `rows`
/// rows, checked: pages start at row 0, ascending, inside the rows, and lie
/// inside the column chunk `chunk`.
fn page_locations(
    at: &Named<'_>,
    rows: usize,
    bytes: &[u8],
    chunk: &Range<u64>,
) -> Result<Vec<PageLocation>, ProbeError> {
    let err = |msg: String| at.general(format!("{VECTOR_COLUMN} offset index: {msg}"));
    let index = decode_offset_index(bytes).map_err(|e| err(e.to_string()))?;
    let pages = index.page_locations().clone();
    let mut next_row = 0i64;
    for (i, p) in pages.iter().enumerate() {
        let end = p.offset.checked_add(i64::from(p.compressed_page_size));
        let inside = p.compressed_page_size > 0
            && u64::try_from(p.offset).is_ok_and(|o| o >= chunk.start)
            && end
                .and_then(|e| u64::try_from(e).ok())
                .is_some_and(|e| e <= chunk.end);
        let ordered = if i == 0 {
            p.first_row_index == 0
        } else {
            p.first_row_index > next_row
        };
        if !inside || !ordered || p.first_row_index >= rows as i64 {
            return Err(err(format!(
                "page {i} (offset {}, {} bytes, first row {}) is not inside the chunk {chunk:?} and rows 0..{rows} in order",
                p.offset, p.compressed_page_size, p.first_row_index
            )));
        }
        next_row = p.first_row_index;
    }
    if pages.is_empty() {
        return Err(err("no pages".into()));
    }
    Ok(pages)
}

/// One buffer of the decoded parts: the part itself when there is one (no
/// copy), else their concatenation.
fn concat_buffers(mut parts: Vec<Buffer>) -> Buffer {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    let mut out = arrow::buffer::MutableBuffer::new(parts.iter().map(Buffer::len).sum());
    for p in &parts {
        out.extend_from_slice(p.as_slice());
    }
    out.into()
}

/// Little-endian f32 values viewed in place in the decoded bytes when they
/// are 4-byte aligned (the usual case: arrow allocates 64-byte aligned
/// buffers), else copied once.
fn f32_rows(parts: Vec<Buffer>) -> ScalarBuffer<f32> {
    let bytes = concat_buffers(parts);
    let in_place = cfg!(target_endian = "little") && bytes.as_ptr().align_offset(4) == 0;
    if in_place {
        let len = bytes.len() / 4;
        return ScalarBuffer::new(bytes, 0, len);
    }
    bytes
        .as_slice()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect::<Vec<f32>>()
        .into()
}
