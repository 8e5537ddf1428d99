//! The calibration's target stops (`calibration.json`'s `target-stops`,
//! [`crate::format::calibration::TargetStop`]): for each target recall on
//! a grid, the gap and the cap on the lists that reach it on the
//! calibration's queries while scanning the fewest rows.
//!
//! A target's gap quantile alone sends a query near a partition boundary
//! through dozens of lists for its last one or two neighbours, and those
//! lists cost more rows than the recall they add: on SIFT-like 1M (nlist
//! 1000), the gap alone probed 1–52 lists a query at target 0.95, and a
//! wider gap capped at 16 lists found as many neighbours with 19 % more
//! storage-resident queries a second (`docs/benchmarks.md`). So the build
//! searches the pairs: for each cap `c` on the `nprobe` grid, `F_c(g)` is
//! the share of the neighbours whose list's gap is at most `g` and whose
//! list is among the query's nearest `c`; the least `g` with
//! `F_c(g) ≥ R` is the cap's candidate for `R`. Each query then counts the
//! lists and rows every candidate probes ([`StopSearch::add`]), and each
//! target keeps the candidate with the fewest rows, then the fewest lists,
//! then the larger cap. The uncapped pair (`c = nlist`) is a candidate for
//! every reachable target, so no stop scans more than the gap alone. Pure
//! compute.

use crate::format::calibration::TargetStop;

/// The leaves, nearest first, by their distances `dist` (leaf `c` at `c`),
/// ranked by `(distance, cid)` as the probe ranks them.
pub(super) fn nearest_first(dist: &[f32]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..dist.len() as u32).collect();
    order.sort_by(|&a, &b| {
        dist[a as usize]
            .total_cmp(&dist[b as usize])
            .then(a.cmp(&b))
    });
    order
}

/// The target recalls a stop is chosen for: 0.5 to 0.9975 by 0.0025. A
/// reader interpolates between two with one cap; above the last, or where
/// a target is out of reach, it uses the gap quantile alone.
pub fn stop_recalls() -> Vec<f64> {
    (200..400).map(|i| f64::from(i) / 400.0).collect()
}

/// One candidate stop: the index of its target recall, its cap, and the
/// least gap that reaches the target under that cap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    recall: usize,
    cap: usize,
    gap: f32,
}

/// The candidates of one calibration, and the targets they are for.
#[derive(Debug, Clone)]
pub struct StopSearch {
    recalls: Vec<f64>,
    candidates: Vec<Candidate>,
}

/// The lists and rows of every candidate, summed over queries.
pub type Costs = Vec<(u64, u64)>;

impl StopSearch {
    /// The candidates for `recalls` (rising), from the neighbours found:
    /// `(gap, rank)` of each neighbour's list, out of `pairs` (queries × k:
    /// a neighbour not found counts as missed), under the caps `caps`.
    pub fn new(found: &[(f32, usize)], pairs: usize, caps: &[usize], recalls: Vec<f64>) -> Self {
        let mut candidates = Vec::new();
        for &cap in caps {
            let mut gaps: Vec<f32> = found.iter().filter(|f| f.1 < cap).map(|f| f.0).collect();
            gaps.sort_by(f32::total_cmp);
            for (recall, &r) in recalls.iter().enumerate() {
                // The neighbours a share r of the pairs is, at least one (a
                // hair below, so that 0.95 × 3120 asks for 2964, not 2965).
                let need = ((r * pairs as f64 - 1e-9).ceil() as usize).max(1);
                if let Some(&gap) = gaps.get(need - 1) {
                    candidates.push(Candidate { recall, cap, gap });
                }
            }
        }
        StopSearch {
            recalls,
            candidates,
        }
    }

    /// Zeroed sums for [`StopSearch::add`].
    pub fn zero(&self) -> Costs {
        vec![(0, 0); self.candidates.len()]
    }

    /// Add one query's lists and rows at every candidate to `sums`: from
    /// its distances `dist` to every leaf (leaf `c` at `c`) and the rows
    /// of each leaf `rows`, the lists within the candidate's gap of the
    /// nearest (ranked as the probe ranks them), at least one and at most
    /// its cap.
    pub fn add(&self, sums: &mut Costs, dist: &[f32], rows: &[u64]) {
        let order = nearest_first(dist);
        let d1 = order.first().map_or(0.0, |&c| dist[c as usize]);
        let gaps: Vec<f32> = order.iter().map(|&c| dist[c as usize] - d1).collect();
        let mut before = Vec::with_capacity(order.len() + 1);
        before.push(0u64);
        for &c in &order {
            let last = before.last().copied().unwrap_or(0);
            before.push(last + rows.get(c as usize).copied().unwrap_or(0));
        }
        for (sum, c) in sums.iter_mut().zip(&self.candidates) {
            let within = gaps.partition_point(|&g| g <= c.gap);
            let lists = within.clamp(1, c.cap.max(1)).min(order.len());
            sum.0 += lists as u64;
            sum.1 += before[lists];
        }
    }

    /// Each target's cheapest candidate, over `queries` queries whose
    /// costs `sums` holds: the fewest rows, then lists, then the larger
    /// cap. A target no candidate reaches has no stop.
    pub fn choose(&self, sums: &Costs, queries: usize) -> Vec<TargetStop> {
        let q = queries.max(1) as f64;
        let mut best: Vec<Option<(Candidate, (u64, u64))>> = vec![None; self.recalls.len()];
        for (c, &cost) in self.candidates.iter().zip(sums) {
            let slot = &mut best[c.recall];
            let better = match slot {
                None => true,
                Some((b, bc)) => {
                    (cost.1, cost.0, std::cmp::Reverse(c.cap))
                        < (bc.1, bc.0, std::cmp::Reverse(b.cap))
                }
            };
            if better {
                *slot = Some((*c, cost));
            }
        }
        best.into_iter()
            .flatten()
            .map(|(c, (lists, rows))| TargetStop {
                recall: self.recalls[c.recall],
                gap: c.gap,
                cap: c.cap as u32,
                lists: lists as f64 / q,
                rows: rows as f64 / q,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two queries on a line of four leaves at 0, 1, 2 and 10, with 10,
    /// 1, 1 and 1 rows: the nearest list is the big one.
    fn search(recalls: Vec<f64>) -> (StopSearch, Costs) {
        // Neighbours (gap, rank): most in the nearest list, one in the
        // third, one in the fourth (far, rank 3).
        let found = [(0.0, 0), (0.0, 0), (2.0, 2), (10.0, 3)];
        let s = StopSearch::new(&found, 4, &[1, 2, 4], recalls);
        let mut sums = s.zero();
        for q in [[0.0f32, 1.0, 2.0, 10.0], [0.0, 1.0, 2.0, 10.0]] {
            s.add(&mut sums, &q, &[10, 1, 1, 1]);
        }
        (s, sums)
    }

    #[test]
    fn each_target_takes_its_cheapest_pair() {
        let (s, sums) = search(vec![0.5, 0.75, 1.0]);
        let stops = s.choose(&sums, 2);
        // 0.5: one list (10 rows), any cap: the largest cap wins the tie.
        assert_eq!((stops[0].recall, stops[0].gap, stops[0].cap), (0.5, 0.0, 4));
        assert_eq!((stops[0].lists, stops[0].rows), (1.0, 10.0));
        // 0.75 needs the third list: gap 2 under cap 4 (three lists, 12
        // rows); cap 2 never reaches it (rank 2), cap 1 neither.
        assert_eq!((stops[1].gap, stops[1].cap, stops[1].rows), (2.0, 4, 12.0));
        // 1.0: every list.
        assert_eq!((stops[2].gap, stops[2].cap, stops[2].lists), (10.0, 4, 4.0));
    }

    #[test]
    fn a_cap_wins_where_it_scans_fewer_rows() {
        // A query whose second-nearest list is huge and holds no
        // neighbour: three of the four neighbours lie in the nearest list,
        // so up to 0.75 every cap's gap is 0 (one list, a tie: the largest
        // cap is kept); 1.0 needs the third list, through the huge one.
        let found = [(0.0, 0), (0.0, 0), (0.0, 0), (3.0, 2)];
        let s = StopSearch::new(&found, 4, &[1, 2, 3], vec![0.5, 0.75, 1.0]);
        let mut sums = s.zero();
        s.add(&mut sums, &[0.0, 1.0, 3.0], &[5, 100, 5]);
        let stops = s.choose(&sums, 1);
        assert_eq!((stops[1].gap, stops[1].cap, stops[1].rows), (0.0, 3, 5.0));
        // 1.0 needs gap 3 (all three lists); the cap of 3 is nlist.
        assert_eq!((stops[2].gap, stops[2].rows), (3.0, 110.0));
        // Where a cap stops a query the wider gap would take further, a
        // capped pair is cheaper: neighbours at gap 1 in rank 1 for one
        // query, far lists cheap but many.
        let found = [(0.0, 0), (1.0, 1), (1.0, 1), (1.0, 1)];
        let s = StopSearch::new(&found, 4, &[2, 4], vec![1.0]);
        let mut sums = s.zero();
        // All four leaves within gap 1, but only the nearest two hold
        // neighbours: cap 2 probes two.
        s.add(&mut sums, &[0.0, 0.5, 1.0, 1.0], &[1, 1, 50, 50]);
        let stops = s.choose(&sums, 1);
        assert_eq!((stops[0].cap, stops[0].lists, stops[0].rows), (2, 2.0, 2.0));
    }

    #[test]
    fn a_target_out_of_reach_has_no_stop() {
        // Half the pairs were never found: 0.75 is out of reach.
        let found = [(0.0, 0), (0.0, 0)];
        let s = StopSearch::new(&found, 4, &[1, 2], vec![0.5, 0.75]);
        let mut sums = s.zero();
        s.add(&mut sums, &[0.0, 1.0], &[1, 1]);
        let stops = s.choose(&sums, 1);
        assert_eq!(stops.len(), 1);
        assert_eq!(stops[0].recall, 0.5);
    }

    #[test]
    fn the_grid_rises_to_just_below_one() {
        let r = stop_recalls();
        assert_eq!((r[0], r[r.len() - 1], r.len()), (0.5, 0.9975, 200));
        assert!(r.windows(2).all(|w| w[1] > w[0]));
    }
}
