//! The rows of a filtered query ([`FilteredRows`]): the row groups read so
//! far, grouped by cid, each with the bitmap of its rows that satisfy the
//! filter (evaluated once per row group on rayon, with the filter's arrow
//! kernels over the payload columns), so that a query probing more lists
//! counts its matches without reading or evaluating any row twice. Also
//! what the re-rank never fetches: the `vector` pages without a match
//! ([`pruned_pages`]).

use super::ProbeError;
use super::executor::{DecodedRowGroup, on_rayon};
use crate::filter::Filter;
use arrow::buffer::BooleanBuffer;
use object_store::path::Path;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The row groups a filtered search has read, and their matches.
#[derive(Debug, Default)]
pub struct FilteredRows {
    /// Cids whose row groups were loaded (or all pruned by statistics).
    pub read: HashSet<u32>,
    pub loaded: Vec<Arc<DecodedRowGroup>>,
    /// The rows of `loaded[g]` that satisfy the filter.
    pub masks: Vec<Option<BooleanBuffer>>,
    /// Set bits of `masks[g]`.
    pub matched: Vec<u64>,
    /// Indexes in `loaded` of each cid's row groups.
    pub by_cid: HashMap<u32, Vec<usize>>,
}

impl FilteredRows {
    /// Take the row groups `fresh` loaded for `cids`, evaluating `filter`
    /// on each one's payload (on rayon).
    ///
    /// # Errors
    /// [`ProbeError::Filter`] for a row group read without its payload or
    /// one the filter's kernels fail on.
    pub async fn add(
        &mut self,
        cids: &[u32],
        fresh: Vec<Arc<DecodedRowGroup>>,
        filter: &Arc<Filter>,
        paths: &Arc<[Path]>,
    ) -> Result<(), ProbeError> {
        self.read.extend(cids);
        let (filter, paths, groups) = (Arc::clone(filter), Arc::clone(paths), fresh.clone());
        let masks = on_rayon(move || {
            groups
                .par_iter()
                .map(|rg| mask(&filter, &paths, rg))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        for (rg, m) in fresh.into_iter().zip(masks) {
            self.by_cid
                .entry(rg.cid)
                .or_default()
                .push(self.loaded.len());
            self.matched.push(m.count_set_bits() as u64);
            self.masks.push(Some(m));
            self.loaded.push(rg);
        }
        Ok(())
    }

    /// Matches and rows read among the row groups of `cids`.
    pub fn count(&self, cids: &[u32]) -> (u64, u64) {
        cids.iter()
            .filter_map(|c| self.by_cid.get(c))
            .flatten()
            .fold((0, 0), |(m, r), &g| {
                (m + self.matched[g], r + self.loaded[g].rowids.len() as u64)
            })
    }
}

/// The rows of `rg` that satisfy `filter`.
fn mask(
    filter: &Filter,
    paths: &[Path],
    rg: &DecodedRowGroup,
) -> Result<BooleanBuffer, ProbeError> {
    let path = || paths.get(rg.file).map_or_else(String::new, Path::to_string);
    let payload = rg.payload.as_ref().ok_or_else(|| ProbeError::Filter {
        path: path(),
        source: crate::filter::FilterError::Evaluate {
            column: filter.columns().join(", "),
            message: format!("row group {} was read without its payload", rg.row_group),
        },
    })?;
    let bits = filter
        .evaluate(payload)
        .map_err(|source| ProbeError::Filter {
            path: path(),
            source,
        })?;
    if bits.len() != rg.rowids.len() {
        return Err(ProbeError::Filter {
            path: path(),
            source: crate::filter::FilterError::Evaluate {
                column: filter.columns().join(", "),
                message: format!(
                    "row group {} has {} payload rows for {} rowids",
                    rg.row_group,
                    bits.len(),
                    rg.rowids.len()
                ),
            },
        });
    }
    Ok(bits)
}

/// `vector` pages of the `loaded` row groups (read with their offset
/// index) none of whose rows is set in their mask: a re-rank never fetches
/// them. 0 without masks.
pub fn pruned_pages(loaded: &[Arc<DecodedRowGroup>], masks: &[Option<BooleanBuffer>]) -> u64 {
    loaded
        .iter()
        .zip(masks)
        .filter_map(|(rg, m)| Some((rg.vector_pages.as_deref()?, m.as_ref()?, rg.rowids.len())))
        .map(|(pages, mask, rows)| {
            let starts = pages.iter().map(|p| p.first_row_index as usize);
            let ends = pages
                .iter()
                .skip(1)
                .map(|p| p.first_row_index as usize)
                .chain([rows]);
            starts
                .zip(ends)
                .filter(|&(s, e)| {
                    e > s && e <= mask.len() && mask.slice(s, e - s).count_set_bits() == 0
                })
                .count() as u64
        })
        .sum()
}
