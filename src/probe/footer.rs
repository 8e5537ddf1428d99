//! Footers of postings files: read with ONE ranged GET of the file's tail
//! (its length from the manifest's `size`, so no HEAD), decoded by parquet's
//! metadata push decoder, validated once by the footer contract
//! ([`check_footer`], the rules `verify` checks) and cached in a byte-bounded LRU.
//!
//! How much tail to read: a footer grows with the file's row groups, and one
//! row group holds one cid, so the manifest's cid range bounds it. The tail is
//! [`tail_estimate`]: 4 KiB plus, per cid of the range, the larger of 512 B
//! and the most footer bytes per cid seen so far in this index, capped by the
//! prefetch hint (default [`FOOTER_PREFETCH`], 64 KiB) and the file size. Our writer's footers are
//! ≈ 300 B per row group with no payload (measured: 26,752 B for 91 row
//! groups), so the first guess has ≥ 1.7× headroom and a small file does not
//! pull 64 KiB of row groups it will not use. A footer larger than the tail
//! costs a second GET for the missing bytes (the decoder says which), and
//! raises the learned per-cid figure for the next cold file.

use super::ProbeError;
use super::cache::ByteLru;
use crate::format::footers::FooterPin;
use crate::format::manifest::FileEntry;
use crate::format::postings_table::{FooterFacts, VECTOR_COLUMN, check_footer};
use crate::store::disk_cache::{CachedObject, TierIo, Units};
#[cfg(doc)]
use crate::store::parquet_reader::FOOTER_PREFETCH;
use parquet::DecodeResult;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataPushDecoder};
use parquet::file::page_index::offset_index::PageLocation;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// A decoded, validated footer of one postings file.
#[derive(Debug)]
pub struct Footer {
    /// Arrow view of the file metadata (what the row-group decoder needs).
    pub arrow: ArrowReaderMetadata,
    /// What the footer contract established: the column roots and the cid
    /// of each row group.
    pub facts: FooterFacts,
    /// The `vector` column's page locations of each row group, parsed from
    /// its offset index by the first load that read it and kept with the
    /// footer: a warm query reads and parses no offset index again.
    pub vector_pages: VectorPages,
    /// The file's units for the disk tier ([`cache_units`]).
    pub cache_units: Arc<Units>,
    /// Approximate memory held, for the cache bound (counting the page
    /// locations ahead, at 3 × their offset index's bytes).
    pub bytes: usize,
}

/// Per row group, its `vector` page locations once known.
pub type VectorPages = Arc<[OnceLock<Arc<[PageLocation]>>]>;

/// The footer cache: manifest file index → footer.
pub type FooterCache = ByteLru<usize, Footer>;

/// IO done to read one footer.
#[derive(Debug, Clone, Copy, Default)]
pub struct FooterIo {
    /// Store requests and the bytes they returned.
    pub requests: u64,
    pub bytes: u64,
    /// Blocks served by the disk cache, and their bytes.
    pub disk_hits: u64,
    pub disk_bytes: u64,
    /// The footer's exact length: metadata plus the 8-byte trailer.
    pub footer_len: u64,
}

impl FooterIo {
    fn add(&mut self, tier: TierIo) {
        self.requests += tier.store_requests;
        self.bytes += tier.store_bytes;
        self.disk_hits += tier.disk_hits;
        self.disk_bytes += tier.disk_bytes;
    }
}

/// Fixed part of the tail estimate.
const TAIL_BASE: u64 = 4096;
/// Least footer bytes assumed per cid of a file's range.
pub const TAIL_PER_CID: u64 = 512;

/// Bytes of tail to read for the footer of `entry`: `TAIL_BASE` plus
/// `max(TAIL_PER_CID, learned_per_cid)` per cid of its range, at most `hint`
/// and the file size.
pub fn tail_estimate(entry: &FileEntry, hint: u64, learned_per_cid: u64) -> u64 {
    let cids = u64::from(entry.max_cid.saturating_sub(entry.min_cid)) + 1;
    let per_cid = TAIL_PER_CID.max(learned_per_cid);
    TAIL_BASE
        .saturating_add(cids.saturating_mul(per_cid))
        .min(hint)
        .min(entry.size)
}

/// Footer bytes per cid of `entry`'s range, rounded up, for learning.
pub fn footer_per_cid(entry: &FileEntry, footer_len: u64) -> u64 {
    let cids = u64::from(entry.max_cid.saturating_sub(entry.min_cid)) + 1;
    footer_len.div_ceil(cids)
}

/// What [`read_footer`] starts from.
#[derive(Debug, Clone)]
pub enum FooterTail {
    /// Fetch this many bytes of the file's tail (see [`tail_estimate`]).
    Fetch(u64),
    /// The file's last bytes, already read (the open's `footers-ahead`):
    /// no request unless they are shorter than the pinned footer.
    Read(bytes::Bytes),
}

/// Read, decode and validate the footer of `path` (manifest entry `entry`),
/// from `tail`: bytes the open read ahead, or a fetch of the estimated tail
/// (see [`tail_estimate`]), at least the pinned footer length, so one GET
/// always suffices. The footer bytes are checked
/// against `pin` (its `footers.json` entry) before they are decoded: a footer
/// that still parses after a flipped byte never steers the planner.
///
/// # Errors
/// [`ProbeError::Store`] (e.g. a missing object), [`ProbeError::FooterPin`],
/// [`ProbeError::Footer`], and [`ProbeError::FooterContract`] for a footer
/// that breaks [`check_footer`].
pub async fn read_footer(
    object: &CachedObject<'_>,
    entry: &FileEntry,
    pin: &FooterPin,
    dim: usize,
    code_bytes: Option<usize>,
    tail: FooterTail,
) -> Result<(Footer, FooterIo), ProbeError> {
    let name = object.path.to_string();
    let footer_err = |source| ProbeError::Footer {
        path: name.clone(),
        source,
    };
    let store_err = |source| ProbeError::Store {
        path: name.clone(),
        source,
    };
    let size = entry.size;
    let mut io = FooterIo::default();
    let mut decoder = ParquetMetaDataPushDecoder::try_new(size)
        .map_err(footer_err)?
        .with_page_index_policy(PageIndexPolicy::Skip);
    let (tail, bytes) = match tail {
        FooterTail::Read(bytes)
            if (pin.footer_size.max(8)..=size).contains(&(bytes.len() as u64)) =>
        {
            (size.saturating_sub(bytes.len() as u64)..size, bytes)
        }
        FooterTail::Read(_) => fetch_tail(object, &mut io, pin.footer_size, size).await?,
        FooterTail::Fetch(tail) => {
            let tail = tail.max(pin.footer_size).min(size);
            fetch_tail(object, &mut io, tail, size).await?
        }
    };
    let footer = bytes
        .len()
        .checked_sub(usize::try_from(pin.footer_size).unwrap_or(usize::MAX))
        .map_or(&bytes[..], |start| &bytes[start..]);
    pin.check(&name, footer)?;
    if let Some(t) = bytes.len().checked_sub(8).and_then(|i| bytes.get(i..i + 4)) {
        let metadata_len = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        io.footer_len = u64::from(metadata_len) + 8;
    }
    decoder.push_range(tail, bytes).map_err(footer_err)?;
    let metadata = loop {
        match decoder.try_decode().map_err(footer_err)? {
            DecodeResult::Data(m) => break m,
            DecodeResult::NeedsData(ranges) => {
                let (data, tier) = object.get_ranges(&ranges).await.map_err(store_err)?;
                io.add(tier);
                decoder.push_ranges(ranges, data).map_err(footer_err)?;
            }
            DecodeResult::Finished => {
                return Err(footer_err(parquet::errors::ParquetError::General(
                    "metadata decoder finished without metadata".into(),
                )));
            }
        }
    };
    let bytes = metadata.memory_size();
    let arrow = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
        .map_err(footer_err)?;
    let footer = validate(&name, entry, arrow, dim, code_bytes, bytes)?;
    Ok((footer, io))
}

/// The last `tail` bytes of `object` (of `size` bytes; at least 8), and
/// their range.
async fn fetch_tail(
    object: &CachedObject<'_>,
    io: &mut FooterIo,
    tail: u64,
    size: u64,
) -> Result<(Range<u64>, bytes::Bytes), ProbeError> {
    let range = size.saturating_sub(tail.max(8))..size;
    let (mut read, tier) = object
        .get_ranges(std::slice::from_ref(&range))
        .await
        .map_err(|source| ProbeError::Store {
            path: object.path.to_string(),
            source,
        })?;
    io.add(tier);
    Ok((range, read.pop().unwrap_or_default()))
}

fn validate(
    path: &str,
    entry: &FileEntry,
    arrow: ArrowReaderMetadata,
    dim: usize,
    code_bytes: Option<usize>,
    bytes: usize,
) -> Result<Footer, ProbeError> {
    let facts = check_footer(path, entry, arrow.metadata(), Some(dim), code_bytes)
        .map_err(ProbeError::FooterContract)?;
    let metadata = arrow.metadata();
    let page_index_bytes: usize = metadata
        .row_groups()
        .iter()
        .filter_map(|rg| {
            let vector = rg
                .columns()
                .iter()
                .find(|c| c.column_path().parts() == [VECTOR_COLUMN]);
            vector?.offset_index_length()
        })
        .map(|l| usize::try_from(l).unwrap_or(0))
        .sum();
    let cache_units = Arc::new(cache_units(metadata));
    Ok(Footer {
        bytes: bytes + facts.row_group_cids.len() * 4 + 3 * page_index_bytes + cache_units.bytes(),
        cache_units,
        vector_pages: (0..metadata.num_row_groups())
            .map(|_| OnceLock::new())
            .collect(),
        arrow,
        facts,
    })
}

/// How the disk tier keeps a postings file ([`Units`]): each column chunk
/// and page index is a span; a `vector` chunk is read page by page (the
/// re-rank), every other span whole. So a query's read of a chunk is one
/// entry, served without a copy. Pure.
pub fn cache_units(metadata: &ParquetMetaData) -> Units {
    let mut spans: Vec<(Range<u64>, bool)> = Vec::new();
    for rg in metadata.row_groups() {
        for column in rg.columns() {
            let (start, len) = column.byte_range();
            let whole = column.column_path().parts() != [VECTOR_COLUMN];
            spans.push((start..start.saturating_add(len), whole));
            let indexes = [
                (column.offset_index_offset(), column.offset_index_length()),
                (column.column_index_offset(), column.column_index_length()),
            ];
            for (offset, length) in indexes {
                if let (Some(o), Some(l)) = (offset, length)
                    && let (Ok(o), Ok(l)) = (u64::try_from(o), u64::try_from(l))
                {
                    spans.push((o..o.saturating_add(l), true));
                }
            }
        }
    }
    Units::new(spans)
}
