//! Top-k selection, stable on ties (ties broken by the smaller rowid).
//!
//! A bounded max-heap ordered by `(distance.total_cmp, rowid)`: the result is
//! the k smallest `(distance, rowid)` pairs whatever order candidates arrive
//! in, so partial selections merged with [`TopK::merge`] equal one selection
//! over the union. NaN distances are normalised to positive NaN and rank after
//! every number. The names `TopK::new`, `push`, `merge`, `into_sorted` are the
//! shared contract used by the probe executor.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One candidate: smaller `distance` is better; equal distances order by
/// `rowid`. `at` is where the caller found it (e.g. a quantised scan's row
/// group and row, for the re-rank); it takes no part in the order, since
/// rowids are unique.
#[derive(Debug, Clone, Copy)]
pub struct Neighbor {
    pub distance: f32,
    pub rowid: i64,
    pub at: u64,
}

impl PartialEq for Neighbor {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
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
    /// An empty selection keeping at most `k` neighbours. It allocates on
    /// the first push: a scan task holds one per query of its batch, most
    /// of which probe none of its lists.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::new(),
        }
    }

    /// Offer one candidate.
    #[inline]
    pub fn push(&mut self, distance: f32, rowid: i64) {
        self.push_at(distance, rowid, 0);
    }

    /// Offer one candidate found at `at` (see [`Neighbor::at`]).
    #[inline]
    pub fn push_at(&mut self, distance: f32, rowid: i64, at: u64) {
        let distance = if distance.is_nan() {
            f32::NAN
        } else {
            distance
        };
        let n = Neighbor {
            distance,
            rowid,
            at,
        };
        if self.heap.len() < self.k {
            self.heap.push(n);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && n < *worst
        {
            *worst = n;
        }
    }

    /// The distance a candidate must beat (or tie with a smaller rowid) once
    /// `k` neighbours are kept; `None` while the selection is not full.
    pub fn threshold(&self) -> Option<f32> {
        if self.heap.len() < self.k {
            None
        } else {
            self.heap.peek().map(|n| n.distance)
        }
    }

    /// Neighbours kept so far.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// The kept neighbours, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &Neighbor> {
        self.heap.iter()
    }

    /// Whether nothing is kept (always for `k == 0`).
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Merge another selection into this one.
    pub fn merge(&mut self, other: TopK) {
        for n in other.heap {
            self.push_at(n.distance, n.rowid, n.at);
        }
    }

    /// The kept neighbours, best first.
    pub fn into_sorted(self) -> Vec<Neighbor> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn sorted_reference(mut all: Vec<(f32, i64)>, k: usize) -> Vec<(f32, i64)> {
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        all.truncate(k);
        all
    }

    #[test]
    fn keeps_the_k_smallest_and_breaks_ties_by_smaller_rowid_in_any_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        // Few distinct distances: many ties.
        let mut all: Vec<(f32, i64)> = (0..500)
            .map(|i| (rng.random_range(0..8) as f32, i))
            .collect();
        let want = sorted_reference(all.clone(), 37);
        for _ in 0..5 {
            all.shuffle(&mut rng);
            let mut t = TopK::new(37);
            all.iter().for_each(|&(d, r)| t.push(d, r));
            let got: Vec<(f32, i64)> = t
                .into_sorted()
                .into_iter()
                .map(|n| (n.distance, n.rowid))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn merge_equals_one_selection_over_the_union() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let all: Vec<(f32, i64)> = (0..300)
            .map(|i| (rng.random_range(0..20) as f32 * 0.5, i))
            .collect();
        let (mut a, mut b) = (TopK::new(10), TopK::new(10));
        for (i, &(d, r)) in all.iter().enumerate() {
            if i % 3 == 0 {
                a.push(d, r)
            } else {
                b.push(d, r)
            }
        }
        a.merge(b);
        let got: Vec<(f32, i64)> = a
            .into_sorted()
            .into_iter()
            .map(|n| (n.distance, n.rowid))
            .collect();
        assert_eq!(got, sorted_reference(all, 10));
    }

    #[test]
    fn nan_ranks_last_threshold_and_k_zero() {
        let mut t = TopK::new(2);
        assert_eq!(t.threshold(), None);
        t.push(-f32::NAN, 0);
        t.push(1.0, 5);
        assert_eq!(t.threshold().map(f32::is_nan), Some(true));
        t.push(3.0, 1);
        let got: Vec<i64> = t.clone().into_sorted().iter().map(|n| n.rowid).collect();
        assert_eq!(
            got,
            vec![5, 1],
            "a (negative) NaN must not beat real distances"
        );
        assert_eq!((t.threshold(), t.len()), (Some(3.0), 2));
        let mut z = TopK::new(0);
        z.push(0.0, 1);
        assert!(z.is_empty() && z.into_sorted().is_empty());
    }
}
