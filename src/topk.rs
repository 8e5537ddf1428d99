//! Top-k selection, stable on ties (ties broken by the smaller rowid).
//!
//! A bounded max-heap ordered by `(distance.total_cmp, rowid)`: the result is
//! the k smallest `(distance, rowid)` pairs whatever order candidates arrive
//! in, so partial selections merged with [`TopK::merge`] equal one selection
//! over the union. NaN distances are normalised to positive NaN and rank after
//! every number. The names `TopK::new`, `push`, `merge`, `into_sorted` are the
//! shared contract used by the probe executor.
//!
//! [`Candidates`] keeps the same selection for a hot loop that offers many
//! candidates (the fast-scan of codes): it appends what its bound lets in
//! and selects the best `k` only when `2k` are held, so most candidates
//! cost an append instead of a heap sift.

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

impl Neighbor {
    /// A candidate, its NaN distance normalised to positive NaN (after
    /// every number).
    #[inline]
    fn new(distance: f32, rowid: i64, at: u64) -> Self {
        let distance = if distance.is_nan() {
            f32::NAN
        } else {
            distance
        };
        Neighbor {
            distance,
            rowid,
            at,
        }
    }
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
        self.offer(Neighbor::new(distance, rowid, at));
    }

    #[inline]
    fn offer(&mut self, n: Neighbor) {
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

/// The `k` best candidates of a stream, the same as a [`TopK`] offered
/// the same candidates ([`Candidates::into_top`]), for a loop that offers
/// many: a candidate whose distance is above [`Candidates::bound`] is
/// dropped (at least `k` kept ones are strictly better), any other is
/// appended; when `2k` are held, the best `k` are selected and the bound
/// becomes the `k`-th's distance.
#[derive(Debug, Clone)]
pub struct Candidates {
    k: usize,
    held: Vec<Neighbor>,
    /// The distance of the `k`-th best at the last selection; positive NaN
    /// (after every number in `total_cmp`) before the first.
    bound: f32,
}

impl Candidates {
    /// An empty selection of at most `k`; allocates on the first append.
    pub fn new(k: usize) -> Self {
        Candidates {
            k,
            held: Vec::new(),
            bound: f32::NAN,
        }
    }

    /// A distance above which a candidate is dropped: `+∞` until `k` are
    /// known to be better (then the `k`-th best distance at the last
    /// selection, which only decreases). A caller may skip, without
    /// offering them, the candidates above it.
    #[inline]
    pub fn bound(&self) -> f32 {
        if self.bound.is_nan() {
            f32::INFINITY
        } else {
            self.bound
        }
    }

    /// The `k` selected.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Select the best `k` now, so that [`Candidates::bound`] is the
    /// `k`-th best distance offered so far (once `k` were offered).
    pub fn settle(&mut self) {
        if self.k > 0 && self.held.len() >= self.k {
            self.held.select_nth_unstable(self.k - 1);
            self.held.truncate(self.k);
            self.bound = self.held[self.k - 1].distance;
        }
    }

    /// An empty selection of the same `k` that drops what this one drops:
    /// for candidates whose best `k` are later merged with this one's, as
    /// none it drops can be among them.
    pub fn empty_like(&self) -> Candidates {
        Candidates {
            k: self.k,
            held: Vec::new(),
            bound: self.bound,
        }
    }

    /// Offer one candidate found at `at` (see [`Neighbor::at`]).
    #[inline]
    pub fn push_at(&mut self, distance: f32, rowid: i64, at: u64) {
        self.offer(Neighbor::new(distance, rowid, at));
    }

    #[inline]
    fn offer(&mut self, n: Neighbor) {
        if self.k == 0 || n.distance.total_cmp(&self.bound).is_gt() {
            return;
        }
        self.held.push(n);
        if self.held.len() >= 2 * self.k {
            self.select();
        }
    }

    /// Keep the best `k` held, and bound by the `k`-th of them.
    fn select(&mut self) {
        if self.held.len() > self.k {
            self.settle();
        }
    }

    /// Merge another selection into this one.
    pub fn merge(&mut self, other: Candidates) {
        for n in other.held {
            self.offer(n);
        }
    }

    /// The best `k` as a [`TopK`].
    pub fn into_top(mut self) -> TopK {
        self.select();
        let mut top = TopK::new(self.k);
        for n in self.held {
            top.offer(n);
        }
        top
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

    /// 2,000 candidates with 50 distinct distances and one NaN, shuffled.
    fn many_ties_and_a_nan(rng: &mut ChaCha8Rng) -> Vec<(f32, i64)> {
        let mut all: Vec<(f32, i64)> = (0..2_000)
            .map(|i| (rng.random_range(0..50) as f32 * 0.25, i))
            .collect();
        all.push((f32::NAN, 5_000));
        all.shuffle(rng);
        all
    }

    /// `candidates` hold exactly `want`, distances (NaN included) and rowids.
    fn assert_selects(candidates: Candidates, want: &[(f32, i64)], k: usize) {
        let got: Vec<(f32, i64)> = candidates
            .into_top()
            .into_sorted()
            .into_iter()
            .map(|n| (n.distance, n.rowid))
            .collect();
        assert_eq!(got.len(), want.len(), "k {k}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                g.0.total_cmp(&w.0).is_eq() && g.1 == w.1,
                "k {k}: {g:?} {w:?}"
            );
        }
    }

    /// `Candidates` keeps what a `TopK` keeps, whatever the order, the
    /// merges and the ties, and its bound never drops a candidate that
    /// belongs in the answer.
    #[test]
    fn candidates_select_as_topk_does() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for k in [0, 1, 7, 40] {
            let all = many_ties_and_a_nan(&mut rng);
            let want = sorted_reference(all.clone(), k);
            let (mut a, mut b) = (Candidates::new(k), Candidates::new(k));
            for (i, &(d, r)) in all.iter().enumerate() {
                let c = if i % 5 == 0 { &mut a } else { &mut b };
                if d <= c.bound() || d.is_nan() {
                    c.push_at(d, r, r as u64);
                }
                assert!(k == 0 || c.bound() >= want[k - 1].0);
            }
            a.merge(b);
            assert_selects(a, &want, k);
        }
    }

    /// A selection started from another's settled bound, then merged with
    /// it, keeps what one selection over both would (ties and NaN too).
    #[test]
    fn a_selection_seeded_by_a_settled_one_merges_to_the_same_answer() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for (k, first) in [(0, 10), (1, 3), (7, 3), (40, 40), (40, 300), (40, 1_000)] {
            let all = many_ties_and_a_nan(&mut rng);
            let want = sorted_reference(all.clone(), k);
            let mut seed = Candidates::new(k);
            all[..first]
                .iter()
                .for_each(|&(d, r)| seed.push_at(d, r, r as u64));
            seed.settle();
            if k > 0 && first >= k {
                let mut firsts = all[..first].to_vec();
                firsts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let kth = firsts[k - 1].0;
                let kth = if kth.is_nan() { f32::INFINITY } else { kth };
                assert_eq!(seed.bound(), kth, "k {k}");
            }
            let mut rest = seed.empty_like();
            all[first..]
                .iter()
                .for_each(|&(d, r)| rest.push_at(d, r, r as u64));
            seed.merge(rest);
            assert_selects(seed, &want, k);
        }
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
