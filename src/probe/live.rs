//! Which loaded rows are live: in a refreshed snapshot, a row of layer `l`
//! whose rowid is deleted before a later layer is gone
//! ([`crate::format::layers::Deletions`]). Its mask is applied like a
//! filter's, before any distance reaches a top-k, so a query still returns
//! `k` live rows.

use std::sync::Arc;

use arrow::buffer::BooleanBuffer;

use super::rows::DecodedRowGroup;
use crate::format::layers::Deletions;

/// The deletions of a snapshot and where each layer's files start.
#[derive(Debug, Clone)]
pub struct LiveRows {
    pub deletions: Arc<Deletions>,
    /// Index of the first file of each layer (layer 0 first, ascending).
    pub layer_starts: Arc<[usize]>,
}

impl LiveRows {
    /// True when nothing is deleted (every mask is `None`).
    pub fn all_live(&self) -> bool {
        self.deletions.is_empty()
    }

    /// The layer of postings file `file`.
    pub fn layer_of(&self, file: usize) -> u32 {
        (self.layer_starts.partition_point(|&s| s <= file).max(1) - 1) as u32
    }

    /// The live rows of `rg`; `None` when all are.
    pub fn mask(&self, rg: &DecodedRowGroup) -> Option<BooleanBuffer> {
        if self.all_live() {
            return None;
        }
        let layer = self.layer_of(rg.file);
        let dead = rg
            .rowids
            .iter()
            .any(|&r| self.deletions.is_deleted(r, layer));
        dead.then(|| {
            BooleanBuffer::collect_bool(rg.rowids.len(), |i| {
                !self.deletions.is_deleted(rg.rowids[i], layer)
            })
        })
    }

    /// `mask` with the deleted rows of `rg` cleared.
    pub fn and(&self, rg: &DecodedRowGroup, mask: BooleanBuffer) -> BooleanBuffer {
        match self.mask(rg) {
            Some(live) => &mask & &live,
            None => mask,
        }
    }

    /// The live mask of each of `loaded`; empty (every row kept) when
    /// nothing is deleted.
    pub fn masks(&self, loaded: &[Arc<DecodedRowGroup>]) -> Vec<Option<BooleanBuffer>> {
        if self.all_live() {
            return Vec::new();
        }
        loaded.iter().map(|rg| self.mask(rg)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::buffer::ScalarBuffer;

    fn rg(file: usize, rowids: Vec<i64>) -> DecodedRowGroup {
        DecodedRowGroup {
            cid: 0,
            rowids,
            vectors: ScalarBuffer::from(Vec::<f32>::new()),
            codes: None,
            vector_pages: None,
            payload: None,
            file,
            row_group: 0,
            fast_codes: Default::default(),
        }
    }

    #[test]
    fn a_rowid_is_hidden_in_the_layers_before_its_bound_only() {
        // Files 0..3 are the base, 3..5 delta 1, 5.. delta 2.
        let live = LiveRows {
            deletions: Arc::new(Deletions::new().with(&[4], 1).with(&[7], 2)),
            layer_starts: vec![0, 3, 5].into(),
        };
        assert_eq!(
            (0..7).map(|f| live.layer_of(f)).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1, 2, 2]
        );
        let base = live.mask(&rg(1, vec![3, 4, 7])).unwrap();
        assert_eq!(base.iter().collect::<Vec<_>>(), [true, false, false]);
        let delta = live.mask(&rg(4, vec![4, 7])).unwrap();
        assert_eq!(delta.iter().collect::<Vec<_>>(), [true, false]);
        assert!(live.mask(&rg(6, vec![4, 7])).is_none());
        let filtered = live.and(&rg(0, vec![3, 4]), BooleanBuffer::from(vec![false, true]));
        assert_eq!(filtered.iter().collect::<Vec<_>>(), [false, false]);
        let none = LiveRows {
            deletions: Arc::new(Deletions::new()),
            layer_starts: vec![0].into(),
        };
        assert!(none.masks(&[Arc::new(rg(0, vec![1]))]).is_empty());
    }
}
