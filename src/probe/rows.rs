//! The unit a query reads and scans: one row group of one cid, decoded
//! ([`DecodedRowGroup`]), holding the columns a load asked for ([`Want`]),
//! the byte-bounded cache of them ([`RowGroupCache`]), and what a batch
//! ranks ([`ProbedRows`]).

use super::cache::ByteLru;
use crate::distance::Metric;
use crate::quant::Quantizer;
use crate::quant::fastscan::Blocks;
use arrow::array::RecordBatch;
use arrow::buffer::{BooleanBuffer, Buffer, ScalarBuffer};
use parquet::file::page_index::offset_index::PageLocation;
use std::sync::{Arc, OnceLock};

/// The rows of one decoded row group (one cid): the columns that were asked
/// for ([`Want`]).
#[derive(Debug)]
pub struct DecodedRowGroup {
    pub cid: u32,
    pub rowids: Vec<i64>,
    /// `rowids.len() × dim`, row-major, viewed in place in the decoded
    /// column's buffer where it is 4-byte aligned (one copy at most); empty
    /// when the vectors were not read.
    pub vectors: ScalarBuffer<f32>,
    /// `rowids.len() × code bytes`, row-major (the `code` column's buffer,
    /// not copied); `None` when the codes were not read.
    pub codes: Option<Buffer>,
    /// Where each data page of the `vector` column lies (its offset index),
    /// read with the codes when the vectors are not ([`Want::pages`]): what
    /// an exact re-rank fetches.
    pub vector_pages: Option<Arc<[PageLocation]>>,
    /// The payload columns, when they were asked for (only the filter's,
    /// when [`Want::partial_payload`]).
    pub payload: Option<RecordBatch>,
    /// Manifest index of the file, and row group within it (for errors).
    pub file: usize,
    pub row_group: usize,
    /// The codes in fast-scan blocks (a fast-scan scheme only), transposed
    /// from `codes` as a query's load decodes the row group
    /// ([`FastScan::prepare`], while its codes are still in the CPU's
    /// caches), else by the first scan that needs them, and kept with the
    /// row group.
    pub fast_codes: OnceLock<FastCodes>,
}

/// The codes of a row group in fast-scan blocks, with each row's constant
/// term: under L2 its list term `‖r̂‖² + 2·<c, r̂>` (so the estimate is
/// `‖q − c‖² + base − 2·<q, r̂>`, the distance to the reconstruction), else 0.
#[derive(Debug)]
pub struct FastCodes {
    pub blocks: Blocks,
    pub base: Vec<f32>,
}

impl FastCodes {
    /// Transposes the `n` row-major codes of a fast-scan scheme. CPU only.
    pub fn new(quantizer: &Quantizer, codes: &[u8], n: usize, metric: Metric) -> FastCodes {
        let width = quantizer.code_bytes();
        let base = if metric == Metric::L2 {
            codes
                .chunks_exact(width)
                .map(Quantizer::list_term)
                .collect()
        } else {
            vec![0.0; n]
        };
        FastCodes {
            blocks: quantizer.blocks(codes, n),
            base,
        }
    }

    /// Memory held.
    pub fn bytes(&self) -> usize {
        self.blocks.bytes.len() + self.base.len() * 4
    }

    /// The memory [`FastCodes::new`] takes for `n` codes of `pairs` pairs
    /// of sub-quantisers, before it is built.
    pub fn size(n: usize, pairs: usize) -> usize {
        Blocks::size(n, pairs) + n * 4
    }
}

/// The fast-scan scheme of an index, with its metric: what transposes a
/// row group's codes into [`FastCodes`].
#[derive(Debug)]
pub struct FastScan {
    quantizer: Quantizer,
    metric: Metric,
}

impl FastScan {
    /// The scheme of an index whose `quantizer` is a fast-scan one; `None`
    /// for any other (or none).
    pub fn of(quantizer: Option<&Quantizer>, metric: Metric) -> Option<Arc<FastScan>> {
        let quantizer = quantizer.filter(|q| q.fast_scan_pairs().is_some())?;
        Some(Arc::new(FastScan {
            quantizer: quantizer.clone(),
            metric,
        }))
    }

    /// What `rg` weighs in a cache of decoded row groups: its bytes, with
    /// the blocks its first scan will add if they are not built yet, so
    /// that a row group transposed after it was cached (one read with
    /// payload columns) never takes the cache past its bound.
    pub fn weight(&self, rg: &DecodedRowGroup) -> usize {
        let pending = rg.codes.is_some() && rg.fast_codes.get().is_none();
        let pairs = self.quantizer.fast_scan_pairs().unwrap_or(0);
        rg.bytes()
            + if pending {
                FastCodes::size(rg.rowids.len(), pairs)
            } else {
                0
            }
    }

    /// Transposes `rg`'s codes, if it has some and they are not yet
    /// transposed. CPU only.
    pub fn prepare(&self, rg: &DecodedRowGroup) {
        if let Some(codes) = &rg.codes {
            rg.fast_codes.get_or_init(|| {
                FastCodes::new(&self.quantizer, codes, rg.rowids.len(), self.metric)
            });
        }
    }
}

/// The columns of a row group a load reads (`cid` and `rowid` always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// The f32 `vector` column.
    pub vectors: bool,
    /// The `code` column and the `vector` column's offset index.
    pub codes: bool,
    /// The payload columns.
    pub payload: bool,
    /// Only the filter's payload columns (when `payload` is not set): what
    /// a filtered query reads to count its matches before it scores. Such
    /// a row group is never kept in the decoded-postings cache.
    pub filter_columns: bool,
    /// The `vector` column's offset index even without the codes (a
    /// filtered query that may score its matches from their pages).
    pub offsets: bool,
}

impl Want {
    /// Whether the `vector` column's offset index is read: with the codes
    /// or when asked, unless the vectors themselves are (a re-rank then
    /// reads no page).
    pub fn pages(self) -> bool {
        (self.codes || self.offsets) && !self.vectors
    }

    /// Whether the payload read is only the filter's columns.
    pub fn partial_payload(self) -> bool {
        self.filter_columns && !self.payload
    }
}

impl DecodedRowGroup {
    /// Approximate memory held (the decoded-postings cache bound).
    pub fn bytes(&self) -> usize {
        self.rowids.len() * 8
            + self.vectors.len() * 4
            + self.codes.as_ref().map_or(0, Buffer::len)
            + self.vector_pages.as_ref().map_or(0, |p| p.len() * 24)
            + self.fast_codes.get().map_or(0, FastCodes::bytes)
            + self
                .payload
                .as_ref()
                .map_or(0, RecordBatch::get_array_memory_size)
            + 64
    }

    /// Whether it holds every column `want` asks for.
    pub fn has(&self, want: Want) -> bool {
        // A row group has rows (footer contract): no vectors read is empty.
        (!want.vectors || !self.vectors.is_empty())
            && (!want.codes || self.codes.is_some())
            && (!want.pages() || self.vector_pages.is_some())
            && (!(want.payload || want.filter_columns) || self.payload.is_some())
    }
}

/// The decoded-postings cache: (manifest file index, row group) → rows.
pub type RowGroupCache = ByteLru<(usize, usize), DecodedRowGroup>;

/// What the rank of a batch reads: the prepared queries (row-major), each
/// query's probed cids (sorted), the row groups loaded for them and, per row
/// group, the rows a query may see (a filter's matches and the live rows;
/// `None` or an empty `masks`: every row).
#[derive(Debug, Clone, Copy)]
pub struct ProbedRows<'a> {
    pub queries: &'a [f32],
    pub cids: &'a [&'a [u32]],
    pub loaded: &'a [Arc<DecodedRowGroup>],
    pub masks: &'a [Option<BooleanBuffer>],
}
