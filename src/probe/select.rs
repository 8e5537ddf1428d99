//! Centroid selection through the two-level hierarchy: rank the roots by
//! distance to the query, visit roots nearest first until they own at least
//! `root_factor × nprobe` leaves (all roots when that is never reached, or
//! when `root_factor` is 0), then keep the `nprobe` nearest leaves among those
//! roots. Ties order by the smaller id, so selection is deterministic.
//!
//! The default is 0, an exact coarse quantizer like FAISS's: on SIFT-like 1M×128
//! with nlist 1000 (R = 32), recall@10 at nprobe 16 is 0.928 exact against
//! 0.639 with `root_factor` 4, for a selection cost of nlist·d multiply-adds
//! per query (about 1 % of the scan at nprobe 16). Pruning roots pays only
//! when nlist is very large.
//!
//! With `nprobe = nlist` every root is visited and every leaf is kept, so the
//! search is exhaustive. Pure compute: no IO.

use crate::kmeans::{Hierarchy, LeafPanels};

/// What selection reads: the hierarchy (roots, `cid_offsets`, metric) and
/// its leaves in panels, from which every leaf distance here comes
/// ([`LeafPanels::distances`]), so that every selection ranks the lists
/// alike.
#[derive(Debug, Clone, Copy)]
pub struct Coarse<'a> {
    pub hierarchy: &'a Hierarchy,
    pub panels: &'a LeafPanels,
}

/// Default root oversampling: 0 = visit every root (exact leaf selection).
pub const DEFAULT_ROOT_FACTOR: usize = 0;

/// Lists up to which [`select_cids`] (every root visited) keeps the
/// nearest leaves sorted as it computes their distances, inserting the few
/// that beat the farthest kept, instead of collecting every distance and
/// selecting among them.
pub const FEW_LISTS: usize = 64;

/// The `nprobe` leaf CIDs nearest to `query`, sorted ascending.
/// `query.len()` must equal `h.dim` (checked by the caller).
pub fn select_cids(h: Coarse<'_>, query: &[f32], nprobe: usize, root_factor: usize) -> Vec<u32> {
    let mut cids = nearest_cids(h, query, nprobe, root_factor);
    cids.sort_unstable();
    cids
}

/// The cids of [`select_cids`], nearest first (by `(distance, cid)`): the
/// order in which a scan tightens its bound soonest.
pub fn nearest_cids(h: Coarse<'_>, query: &[f32], nprobe: usize, root_factor: usize) -> Vec<u32> {
    if root_factor == 0 {
        return with_every_distance(h, query, |every| every.nearest(nprobe));
    }
    nearest_of(leaf_distances(h, query, nprobe, root_factor), nprobe)
}

/// The cids of the `keep` nearest of `leaves`, nearest first.
fn nearest_of(mut leaves: Vec<Leaf>, keep: usize) -> Vec<u32> {
    let keep = keep.min(leaves.len());
    if keep < leaves.len() && keep > 0 {
        leaves.select_nth_unstable_by(keep - 1, nearest_first);
    }
    leaves.truncate(keep);
    leaves.sort_unstable_by(nearest_first);
    leaves.iter().map(|l| l.1).collect()
}

/// The distances from one query to every leaf of every root (leaf
/// `first + i` at `i`): what each selection with every root visited picks
/// from (one query's in a buffer of the thread, or [`each_query`]'s).
#[derive(Debug, Clone, Copy)]
pub struct EveryLeaf<'a> {
    distances: &'a [f32],
    first: usize,
}

impl EveryLeaf<'_> {
    /// [`nearest_cids`] with `root_factor` 0: the `keep` nearest cids,
    /// nearest first. Up to [`FEW_LISTS`], a run of 16 distances is compared with
    /// the farthest kept in one step, and only those not above it (or NaN)
    /// are looked at: once the selection is full, most runs have none.
    pub fn nearest(self, keep: usize) -> Vec<u32> {
        if keep <= FEW_LISTS {
            return nearest(self.distances, self.first, keep)
                .iter()
                .map(|l| l.1)
                .collect();
        }
        nearest_of(self.leaves(), keep)
    }

    /// [`leaves_within`] of these distances.
    pub fn within(self, gap: f32, cap: usize) -> (Vec<u32>, Option<f32>) {
        within(self.distances, self.first, gap, cap)
    }

    /// [`ranked_leaves`] of these distances.
    pub fn ranked(self) -> Vec<(f32, u32)> {
        let mut leaves = self.leaves();
        leaves.sort_unstable_by(nearest_first);
        leaves
    }

    /// `(distance, cid)` of every leaf, in cid order.
    fn leaves(self) -> Vec<Leaf> {
        self.distances
            .iter()
            .copied()
            .zip(self.first as u32..)
            .collect()
    }
}

/// `f(i, every)` for each query `i` of `queries` (row-major, `h.dim`
/// values each), with its distances to every leaf: the queries go a few at
/// a time through one pass over the leaf panels
/// ([`LeafPanels::each_distances`]), the same distances as one query's
/// alone.
pub fn each_query(h: Coarse<'_>, queries: &[f32], mut f: impl FnMut(usize, EveryLeaf<'_>)) {
    let cids = every_cid(h);
    h.panels
        .each_distances(h.hierarchy.metric, queries, cids.clone(), |i, distances| {
            f(
                i,
                EveryLeaf {
                    distances,
                    first: cids.start,
                },
            );
        });
}

thread_local! {
    /// The distances from a query to every leaf, reused by the thread's
    /// next selection.
    static DISTANCES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f(every)` with the distances from `query` to every leaf of every root,
/// held in a buffer of the thread.
fn with_every_distance<T>(h: Coarse<'_>, query: &[f32], f: impl FnOnce(EveryLeaf<'_>) -> T) -> T {
    let cids = every_cid(h);
    DISTANCES.with_borrow_mut(|distances| {
        h.panels
            .distances(h.hierarchy.metric, query, cids.clone(), distances);
        f(EveryLeaf {
            distances,
            first: cids.start,
        })
    })
}

/// The `keep` nearest of `distances` (leaf `first + i` at `i`), by
/// `(distance, cid)`, nearest first; the run check the CPU offers.
fn nearest(distances: &[f32], first: usize, keep: usize) -> Vec<Leaf> {
    if keep == 0 {
        return Vec::new();
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F was detected just above.
        return unsafe { nearest_avx512(distances, first, keep) };
    }
    nearest_runs(distances, first, keep, not_above_scalar)
}

/// [`nearest_runs`] with [`not_above_avx512`].
///
/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn nearest_avx512(distances: &[f32], first: usize, keep: usize) -> Vec<Leaf> {
    nearest_runs(distances, first, keep, |run, bound| {
        // SAFETY: AVX-512 F is enabled here.
        unsafe { not_above_avx512(run, bound) }
    })
}

/// Leaves whose distances are compared with the bound at once.
const RUN: usize = 16;

/// The loop of [`nearest`]: `whole` gives, for a whole run of [`RUN`]
/// distances, bit j set when distance j is not above the bound (at most
/// it, or NaN); a last partial run goes through [`not_above_scalar`].
#[inline(always)]
fn nearest_runs(
    distances: &[f32],
    first: usize,
    keep: usize,
    whole: impl Fn(&[f32], f32) -> u32,
) -> Vec<Leaf> {
    let mut kept = Kept::new(keep);
    for (r, run) in distances.chunks(RUN).enumerate() {
        let bound = kept.bound();
        let mut maybe = if run.len() == RUN {
            whole(run, bound)
        } else {
            not_above_scalar(run, bound)
        };
        while maybe != 0 {
            let j = maybe.trailing_zeros() as usize;
            maybe &= maybe - 1;
            kept.offer((run[j], (first + r * RUN + j) as u32));
        }
    }
    kept.best
}

/// Bit j set when `!(run[j] > bound)`: at most the bound, or unordered
/// (a NaN distance or bound). The reference of the tests, and a last
/// partial run.
fn not_above_scalar(run: &[f32], bound: f32) -> u32 {
    run.iter().enumerate().fold(0, |bits, (j, &d)| {
        let above = d.partial_cmp(&bound) == Some(std::cmp::Ordering::Greater);
        bits | (u32::from(!above) << j)
    })
}

/// [`not_above_scalar`] of a whole run of [`RUN`] (16) distances in one
/// compare (`run` must hold 16; else the scalar check answers).
///
/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn not_above_avx512(run: &[f32], bound: f32) -> u32 {
    use std::arch::x86_64::*;
    if run.len() != RUN {
        return not_above_scalar(run, bound);
    }
    // SAFETY: `run` holds 16 f32; loadu needs no alignment.
    let d = unsafe { _mm512_loadu_ps(run.as_ptr()) };
    u32::from(_mm512_cmp_ps_mask::<_CMP_NGT_UQ>(d, _mm512_set1_ps(bound)))
}

/// The nearest leaves seen so far, sorted by `(distance, cid)`, at most
/// `keep`.
struct Kept {
    best: Vec<Leaf>,
    keep: usize,
}

impl Kept {
    fn new(keep: usize) -> Kept {
        Kept {
            best: Vec::with_capacity(keep + 1),
            keep,
        }
    }

    /// What a leaf's distance must not be above to be looked at: the
    /// farthest kept's once `keep` are kept, else NaN (every leaf); a NaN
    /// kept is NaN too, so every leaf is looked at then.
    fn bound(&self) -> f32 {
        match self.best.get(self.keep.wrapping_sub(1)) {
            Some(farthest) if self.best.len() == self.keep => farthest.0,
            _ => f32::NAN,
        }
    }

    /// Keeps `leaf` when it is nearer (by `(distance, cid)`) than the
    /// farthest kept, or fewer than `keep` are: one comparison, and an
    /// insertion for those that beat it.
    fn offer(&mut self, leaf: Leaf) {
        let keep = self.keep;
        if keep == 0
            || self.best.len() == keep && nearest_first(&leaf, &self.best[keep - 1]).is_ge()
        {
            return;
        }
        let at = self
            .best
            .partition_point(|b| nearest_first(b, &leaf).is_lt());
        self.best.insert(at, leaf);
        self.best.truncate(keep);
    }
}

/// `(distance, cid)` of a leaf.
type Leaf = (f32, u32);

/// The leaves within `gap` of the query's nearest leaf (`d − d₁ ≤ gap`,
/// every root visited), at most `cap` of them (the nearest; at least one),
/// sorted by cid, and the gap of the nearest leaf left out (`None`: none
/// was): a target recall's lists ([`super::target`]). Sorts only the leaves
/// kept, not all of them.
pub fn leaves_within(
    h: Coarse<'_>,
    query: &[f32],
    gap: f32,
    cap: usize,
) -> (Vec<u32>, Option<f32>) {
    with_every_distance(h, query, |every| every.within(gap, cap))
}

/// [`leaves_within`] of the distances to every leaf (leaf `first + i` at
/// `i`): a pass for the nearest, a pass for the nearest outside the gap,
/// and one that pairs only the few leaves within it (no pair is made for
/// the leaves left out).
fn within(distances: &[f32], first: usize, gap: f32, cap: usize) -> (Vec<u32>, Option<f32>) {
    let d1 = min_of(distances, |d| d);
    let is_within = |d: f32| d - d1 <= gap;
    let next = min_of(distances, |d| if is_within(d) { f32::INFINITY } else { d });
    let kept = distances
        .iter()
        .enumerate()
        .filter(|&(_, &d)| is_within(d))
        .map(|(i, &d)| (d, (first + i) as u32))
        .collect();
    capped(kept, d1, next, cap)
}

/// The nearest `cap` (at least one) of the leaves `kept` within the gap of
/// the nearest leaf's distance `d1`, sorted by cid, and the gap of the
/// nearest leaf left out: the nearer of `next` (the nearest outside the
/// gap) and the first beyond the cap; `None` when none was left out.
fn capped(mut kept: Vec<Leaf>, d1: f32, mut next: f32, cap: usize) -> (Vec<u32>, Option<f32>) {
    let cap = cap.max(1);
    if kept.len() > cap {
        kept.select_nth_unstable_by(cap, nearest_first);
        next = next.min(kept[cap].0);
        kept.truncate(cap);
    }
    let mut cids: Vec<u32> = kept.into_iter().map(|l| l.1).collect();
    cids.sort_unstable();
    (cids, next.is_finite().then_some(next - d1))
}

/// The least of `f(x)` over `xs` (NaN ignored, as by [`f32::min`];
/// infinity for none), in [`RUN`] independent lanes, so that the compiler
/// keeps them in one vector register instead of one serial chain of
/// minimums.
#[inline(always)]
fn min_of(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [f32::INFINITY; RUN];
    let (runs, rest) = xs.as_chunks::<RUN>();
    for run in runs {
        for (lane, &x) in lanes.iter_mut().zip(run) {
            *lane = lane.min(f(x));
        }
    }
    let rest = rest.iter().map(|&x| f(x));
    lanes.into_iter().chain(rest).fold(f32::INFINITY, f32::min)
}

/// Every leaf, `(distance, cid)`, nearest first (all roots visited): the
/// order in which a filtered search goes on probing when its first lists
/// hold fewer than `k` matches, and in which a target recall takes them.
/// Its first `nprobe` cids are those of [`select_cids`] with `root_factor`
/// 0.
pub fn ranked_leaves(h: Coarse<'_>, query: &[f32]) -> Vec<(f32, u32)> {
    with_every_distance(h, query, |every| every.ranked())
}

fn nearest_first(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// `(distance, cid)` of the leaves `cids`.
fn leaves_in(h: Coarse<'_>, query: &[f32], cids: std::ops::Range<usize>) -> Vec<Leaf> {
    let mut d = Vec::new();
    h.panels
        .distances(h.hierarchy.metric, query, cids.clone(), &mut d);
    d.into_iter().zip(cids.start as u32..).collect()
}

/// The cids of every leaf of every root.
fn every_cid(h: Coarse<'_>) -> std::ops::Range<usize> {
    let offsets = &h.hierarchy.cid_offsets;
    let nroots = offsets.len().saturating_sub(1);
    match (offsets.first(), offsets.get(nroots)) {
        (Some(&lo), Some(&hi)) if nroots > 0 => lo as usize..hi as usize,
        _ => 0..0,
    }
}

/// `(distance, cid)` of every leaf of the roots visited nearest first until
/// they own `root_factor × nprobe` leaves (`root_factor` ≥ 1; with 0 every
/// root is visited, which [`EveryLeaf`] serves).
fn leaf_distances(
    h: Coarse<'_>,
    query: &[f32],
    nprobe: usize,
    root_factor: usize,
) -> Vec<(f32, u32)> {
    let hierarchy = h.hierarchy;
    let dim = hierarchy.dim;
    let nroots = hierarchy.cid_offsets.len().saturating_sub(1);
    let mut roots: Vec<(f32, usize)> = hierarchy
        .roots
        .chunks_exact(dim)
        .take(nroots)
        .enumerate()
        .map(|(r, c)| (hierarchy.metric.prepared_distance(query, c), r))
        .collect();
    roots.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let want_leaves = nprobe.saturating_mul(root_factor);
    let mut leaves: Vec<(f32, u32)> = Vec::new();
    for (_, r) in roots {
        let offsets = &hierarchy.cid_offsets;
        let (lo, hi) = (offsets[r] as usize, offsets[r + 1] as usize);
        leaves.extend(leaves_in(h, query, lo..hi));
        if leaves.len() >= want_leaves {
            break;
        }
    }
    leaves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::Metric;

    /// A hierarchy's leaves in panels.
    fn panels(h: &Hierarchy) -> LeafPanels {
        LeafPanels::new(&h.leaves, h.dim)
    }

    /// Two roots on a line at 0 and 10, each with two leaves.
    fn hierarchy() -> Hierarchy {
        Hierarchy {
            dim: 1,
            metric: Metric::L2,
            roots: vec![0.0, 10.0],
            leaves: vec![-1.0, 1.0, 9.0, 11.0],
            cid_offsets: vec![0, 2, 4],
        }
    }

    #[test]
    fn nearest_root_first_then_nearest_leaves() {
        let (h, p) = (hierarchy(), panels(&hierarchy()));
        let c = Coarse {
            hierarchy: &h,
            panels: &p,
        };
        // factor 1, nprobe 1: only root 0 is visited; leaf 1 is nearest to 2.0.
        assert_eq!(select_cids(c, &[2.0], 1, 1), vec![1]);
        // nprobe 2 with factor 1: root 0 owns 2 leaves, enough.
        assert_eq!(select_cids(c, &[4.9], 2, 1), vec![0, 1]);
        // factor 2 widens to root 1, whose leaf 9.0 beats -1.0.
        assert_eq!(select_cids(c, &[4.9], 2, 2), vec![1, 2]);
    }

    #[test]
    fn every_leaf_ranked_nearest_first_begins_with_the_selected() {
        let (h, p) = (hierarchy(), panels(&hierarchy()));
        let c = Coarse {
            hierarchy: &h,
            panels: &p,
        };
        let ranked: Vec<u32> = ranked_leaves(c, &[4.9]).iter().map(|l| l.1).collect();
        assert_eq!(ranked, vec![1, 2, 0, 3]);
        let mut first_two = ranked[..2].to_vec();
        first_two.sort_unstable();
        assert_eq!(first_two, select_cids(c, &[4.9], 2, 0));
    }

    #[test]
    fn the_leaves_within_a_gap_and_the_next_one() {
        let (h, p) = (hierarchy(), panels(&hierarchy()));
        let c = Coarse {
            hierarchy: &h,
            panels: &p,
        };
        // Distances to 4.9: leaf 1 15.21, leaf 2 16.81, leaf 0 34.81, leaf 3 37.21.
        let (cids, next) = leaves_within(c, &[4.9], 2.0, 4);
        assert_eq!(cids, vec![1, 2]);
        assert!((next.unwrap() - 19.6).abs() < 1e-3);
        // The cap keeps the nearest.
        assert_eq!(leaves_within(c, &[4.9], 100.0, 3).0, vec![0, 1, 2]);
        assert_eq!(
            leaves_within(c, &[4.9], f32::INFINITY, 4),
            (vec![0, 1, 2, 3], None)
        );
        assert_eq!(leaves_within(c, &[4.9], 0.0, 4).0, vec![1]);
    }

    /// `within` (lanes of minimums, pairs made only for the leaves kept)
    /// keeps what the plain definition keeps: every leaf paired,
    /// partitioned by the gap, the rest's nearest folded in order, then
    /// the same cap. Distances with ties, NaNs, a partial last run, and
    /// gaps and caps that keep none, some and all.
    #[test]
    fn within_equals_partitioning_every_leaf() {
        use rand::{Rng, SeedableRng};
        fn reference(
            distances: &[f32],
            first: usize,
            gap: f32,
            cap: usize,
        ) -> (Vec<u32>, Option<f32>) {
            let leaves: Vec<Leaf> = distances.iter().copied().zip(first as u32..).collect();
            let d1 = leaves.iter().map(|l| l.0).fold(f32::INFINITY, f32::min);
            let (kept, rest): (Vec<Leaf>, Vec<Leaf>) =
                leaves.into_iter().partition(|l| l.0 - d1 <= gap);
            let next = rest.iter().map(|l| l.0).fold(f32::INFINITY, f32::min);
            capped(kept, d1, next, cap)
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for n in [0, 1, 15, 16, 17, 100, 1000] {
            let distances: Vec<f32> = (0..n)
                .map(|_| match rng.random_range(0..20) {
                    0 => f32::NAN,
                    _ => rng.random_range(0i32..40) as f32 / 4.0,
                })
                .collect();
            for gap in [0.0, 0.5, 3.0, f32::INFINITY] {
                for cap in [0, 1, 4, 2000] {
                    assert_eq!(
                        within(&distances, 7, gap, cap),
                        reference(&distances, 7, gap, cap),
                        "n {n} gap {gap} cap {cap}"
                    );
                }
            }
        }
    }

    /// With every root visited, the nearest leaves kept as they come (up
    /// to `FEW_LISTS`) and the selection among all distances (above) are
    /// the `nprobe` nearest by `(distance, cid)`, ties included.
    #[test]
    fn every_nprobe_selects_the_nearest_leaves_by_distance_then_cid() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let (dim, nlist) = (3, 300);
        // Small integer coordinates: many equal distances.
        let leaves: Vec<f32> = (0..nlist * dim)
            .map(|_| rng.random_range(-3i32..=3) as f32)
            .collect();
        let h = Hierarchy {
            dim,
            metric: Metric::L2,
            roots: vec![0.0; 3 * dim],
            leaves,
            cid_offsets: vec![0, 100, 180, nlist as u32],
        };
        let p = panels(&h);
        let c = Coarse {
            hierarchy: &h,
            panels: &p,
        };
        let mut queries = Vec::new();
        for _ in 0..20 {
            let q: Vec<f32> = (0..dim)
                .map(|_| rng.random_range(-3i32..=3) as f32)
                .collect();
            queries.extend_from_slice(&q);
            let mut all: Vec<(f32, u32)> = (0..nlist)
                .map(|c| {
                    (
                        Metric::L2.distance(&q, &h.leaves[c * dim..(c + 1) * dim]),
                        c as u32,
                    )
                })
                .collect();
            all.sort_by(nearest_first);
            for nprobe in [1, 2, 12, FEW_LISTS, FEW_LISTS + 1, 250, nlist] {
                let mut want: Vec<u32> = all[..nprobe].iter().map(|l| l.1).collect();
                assert_eq!(nearest_cids(c, &q, nprobe, 0), want, "nprobe {nprobe}");
                want.sort_unstable();
                assert_eq!(select_cids(c, &q, nprobe, 0), want, "nprobe {nprobe}");
            }
        }
        // The queries a few at a time through the panels select what each
        // selects alone.
        let mut seen = 0;
        each_query(c, &queries, |i, every| {
            let q = &queries[i * dim..][..dim];
            for nprobe in [1, 12, FEW_LISTS + 1, nlist] {
                assert_eq!(every.nearest(nprobe), nearest_cids(c, q, nprobe, 0));
            }
            assert_eq!(every.within(2.0, 50), leaves_within(c, q, 2.0, 50));
            assert_eq!(every.ranked(), ranked_leaves(c, q));
            seen += 1;
        });
        assert_eq!(seen, 20);
    }

    /// Every run check the CPU offers keeps the `keep` first of all the
    /// distances sorted by `(distance, cid)`: ties, infinities, NaN of
    /// either sign, partial last runs.
    #[test]
    fn nearest_is_the_sorted_prefix_on_every_path() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        type Path = (&'static str, fn(&[f32], usize, usize) -> Vec<Leaf>);
        let mut paths: Vec<Path> =
            vec![("scalar", |d, f, k| nearest_runs(d, f, k, not_above_scalar))];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F was detected just above.
            paths.push(("avx512", |d, f, k| unsafe { nearest_avx512(d, f, k) }));
        }
        let specials = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.0,
            -0.0,
        ];
        for n in [0, 1, 15, 16, 17, 100, 1000] {
            for _ in 0..20 {
                let distances: Vec<f32> = (0..n)
                    .map(|_| match rng.random_range(0..10) {
                        0 => specials[rng.random_range(0..specials.len())],
                        1..=4 => rng.random_range(0..8) as f32,
                        _ => rng.random_range(-100.0..100.0),
                    })
                    .collect();
                let first = rng.random_range(0..50);
                let mut all: Vec<Leaf> = distances
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| (d, (first + i) as u32))
                    .collect();
                all.sort_by(nearest_first);
                for keep in [0, 1, 2, 12, 40, n + 3] {
                    let want = &all[..keep.min(n)];
                    for (name, path) in &paths {
                        let got = path(&distances, first, keep);
                        assert!(
                            got.len() == want.len()
                                && got
                                    .iter()
                                    .zip(want)
                                    .all(|(g, w)| g.0.to_bits() == w.0.to_bits() && g.1 == w.1),
                            "{name} n {n} keep {keep}: {got:?} against {want:?}"
                        );
                    }
                    let got = nearest(&distances, first, keep);
                    assert_eq!(got.len(), want.len());
                }
            }
        }
        eprintln!(
            "selection run checks: {:?}",
            paths.iter().map(|p| p.0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn nprobe_nlist_selects_every_leaf() {
        let (h, p) = (hierarchy(), panels(&hierarchy()));
        let c = Coarse {
            hierarchy: &h,
            panels: &p,
        };
        assert_eq!(select_cids(c, &[100.0], 4, 1), vec![0, 1, 2, 3]);
    }
}
