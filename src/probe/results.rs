//! Each query's answer ([`results`]): its top-k as hits, their payload rows
//! gathered from the loaded row groups into one Arrow batch in hit order
//! ([`payload_rows`]), and its stats: its own and the batch's IO. Rendering
//! the payload (JSON, Python) is the callers' part.

use super::ProbeError;
use super::query::{Hit, SearchResult};
use super::rows::DecodedRowGroup;
use super::stats::{FilterPlan, Scoring, SearchStats};
use crate::topk::TopK;
use arrow::array::RecordBatch;
use object_store::path::Path;
use std::sync::Arc;

/// The stats of one query that are its own (the IO is the batch's).
#[derive(Debug, Clone, Copy, Default)]
pub struct Own {
    pub probe_us: u64,
    pub estimated_recall: Option<f64>,
    pub rows_matched: u64,
    pub filter_plan: FilterPlan,
    pub filter_scoring: Scoring,
    pub capped: bool,
}

/// What a batch's answers are made of besides its top-k: the rows a query
/// could see, its own stats, and whether the payload is asked for.
#[derive(Debug)]
pub struct Answers<'a> {
    /// Each query's probed lists (sorted).
    pub probed: &'a [Vec<u32>],
    pub loaded: &'a [Arc<DecodedRowGroup>],
    pub own: Vec<Own>,
    pub include_payload: bool,
    /// The object path of each postings file (for errors).
    pub paths: &'a [Path],
}

/// Each query's hits (best first), with its payload rows when asked for, and
/// its stats: its own, and the batch's (`stats`). CPU only.
///
/// # Errors
/// [`ProbeError::PayloadMismatch`] as [`payload_rows`].
pub fn results(
    tops: Vec<TopK>,
    answers: Answers<'_>,
    stats: SearchStats,
) -> Result<Vec<SearchResult>, ProbeError> {
    tops.into_iter()
        .zip(answers.own)
        .zip(answers.probed)
        .map(|((top, own), cids)| {
            let top = top.into_sorted();
            let payload = if answers.include_payload {
                let rowids: Vec<i64> = top.iter().map(|n| n.rowid).collect();
                payload_rows(answers.paths, answers.loaded, cids, &rowids)?
            } else {
                None
            };
            let hits = top
                .into_iter()
                .map(|n| Hit {
                    rowid: n.rowid,
                    distance: n.distance,
                    payload: None,
                })
                .collect();
            let stats = SearchStats {
                probe_us: own.probe_us,
                lists_probed: cids.len() as u64,
                estimated_recall: own.estimated_recall,
                rows_matched: own.rows_matched,
                filter_plan: own.filter_plan,
                filter_scoring: own.filter_scoring,
                capped: own.capped,
                ..stats
            };
            Ok(SearchResult {
                hits,
                stats,
                payload,
            })
        })
        .collect()
}

/// The payload of each of `rowids` (rows of the probed `cids` among
/// `loaded`), as one batch with a row per rowid in order; `None` when the
/// index has no payload or a rowid is not among the loaded rows.
///
/// # Errors
/// [`ProbeError::PayloadMismatch`] naming a file of `paths` when the loaded
/// row groups' payloads differ in schema.
pub fn payload_rows(
    paths: &[Path],
    loaded: &[Arc<DecodedRowGroup>],
    cids: &[u32],
    rowids: &[i64],
) -> Result<Option<RecordBatch>, ProbeError> {
    let mut batches: Vec<&RecordBatch> = Vec::new();
    let mut file = 0;
    let mut slot: Vec<Option<usize>> = vec![None; loaded.len()];
    let mut at = Vec::with_capacity(rowids.len());
    for &rowid in rowids {
        let found = loaded.iter().enumerate().find_map(|(i, rg)| {
            if cids.binary_search(&rg.cid).is_err() {
                return None;
            }
            let batch = rg.payload.as_ref()?;
            let row = rg.rowids.iter().position(|&r| r == rowid)?;
            Some((i, batch, row))
        });
        if let Some((i, _, _)) = found {
            file = loaded[i].file;
        }
        let Some((i, batch, row)) = found else {
            return Ok(None);
        };
        let b = *slot[i].get_or_insert_with(|| {
            batches.push(batch);
            batches.len() - 1
        });
        at.push((b, row));
    }
    if batches.is_empty() {
        return Ok(None);
    }
    if batches[0].num_columns() == 0 {
        // No payload columns: a row per hit, and nothing in it.
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(at.len()));
        return RecordBatch::try_new_with_options(batches[0].schema(), Vec::new(), &options)
            .map(Some)
            .map_err(|e| ProbeError::PayloadMismatch {
                path: paths.get(file).map_or_else(String::new, Path::to_string),
                detail: e.to_string(),
            });
    }
    arrow::compute::interleave_record_batch(&batches, &at)
        .map(Some)
        .map_err(|e| ProbeError::PayloadMismatch {
            path: paths.get(file).map_or_else(String::new, Path::to_string),
            detail: e.to_string(),
        })
}
