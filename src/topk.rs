//! Top-k selection, stable on ties (ties broken by the smaller rowid).
//! SKELETON (working, minimal): owned by the k-means/distance helper (issue 3),
//! who may optimise it. The names `TopK::new`, `push`, `merge`, `into_sorted`
//! are the shared contract used by the probe executor.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One candidate: smaller `distance` is better; equal distances order by `rowid`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    pub distance: f32,
    pub rowid: i64,
}

impl Eq for Neighbor {}
impl PartialOrd for Neighbor {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Neighbor {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.rowid.cmp(&other.rowid))
    }
}

/// A bounded max-heap keeping the `k` best neighbours seen so far.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Neighbor>,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    /// Offer one candidate.
    #[inline]
    pub fn push(&mut self, distance: f32, rowid: i64) {
        let n = Neighbor { distance, rowid };
        if self.heap.len() < self.k {
            self.heap.push(n);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && n < *worst
        {
            *worst = n;
        }
    }

    /// Merge another selection into this one.
    pub fn merge(&mut self, other: TopK) {
        for n in other.heap {
            self.push(n.distance, n.rowid);
        }
    }

    /// The kept neighbours, best first.
    pub fn into_sorted(self) -> Vec<Neighbor> {
        self.heap.into_sorted_vec()
    }
}
