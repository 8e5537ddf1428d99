//! The payload of the hits: each hit's row of the loaded row groups'
//! payload columns, gathered into one Arrow batch in hit order
//! ([`payload_rows`]). Rendering it (JSON, Python) is the callers' part.

use super::ProbeError;
use super::rows::DecodedRowGroup;
use arrow::array::RecordBatch;
use object_store::path::Path;
use std::sync::Arc;

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
