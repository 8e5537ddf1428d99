//! Recall you can ask for: a [`RecallModel`] reads the build's
//! [`Calibration`] and turns a target recall into a per-query stop, and
//! the lists a query probed into an estimate of its recall.
//!
//! The feature is each list's *gap*, `d(q, cⱼ) − d₁`, its leaf centroid's
//! distance beyond the query's nearest one (the calibration document says
//! why). With `F` the share of the calibration's true neighbours whose
//! list's gap is at most `g`:
//!
//! - **Target `R`:** a query probes, nearest first, every list whose gap
//!   is at most `g`, at most `c` lists. A query in a cluster's centre has
//!   few lists within the gap and stops early; one near a boundary has
//!   many and goes further, up to the cap. The pair `(g, c)` is the
//!   calibration's stop for `R` (`target-stops`): with `F_c` the share
//!   of the neighbours whose list's gap is at most `g` *and* whose list is
//!   among the nearest `c`, the build took, of the pairs with
//!   `F_c(g) = R`, the one scanning the fewest rows. The last few
//!   neighbours of a boundary query cost more lists than they add recall,
//!   so a cap with a wider gap finds as many for less. On average over
//!   queries it finds a share `R`, because that is how `F_c` was measured.
//!   A calibration without stops (before version 3) gives `(F⁻¹(R), ∞)`.
//!   The caller's `max_nprobe` caps it further.
//! - **Estimate:** under a target, the target itself (a query the
//!   caller's cap stopped, `F` of the first gap it left, if lower).
//!   At a fixed `nprobe`, the calibration's mean recall at that `nprobe`
//!   (`recall-by-nprobe`, interpolated). Both are means over queries like
//!   the calibration's: `F(g)` is what a *threshold* `g` finds on average,
//!   not what one query finds, so the estimate is not per-query truth; a
//!   per-query gap alone over-estimated easy queries on both data sets.
//!
//! The estimate is of recall against the exact answer with the same
//! filter, and assumes the queries look like the index's rows (the
//! calibration sample). With codes, the re-rank loses a little more
//! (`docs/query.md`). Pure compute.

use crate::format::calibration::Calibration;

/// The share of rows added or removed since the calibration past which
/// it is called stale: the partitions it measured may no longer hold the
/// rows as they did (a refresh appending 20 % of rows like the others'
/// kept the estimate within 0.01 in `docs/benchmarks.md`).
pub const STALE_CHANGE: f64 = 0.25;

/// Whether an index's calibration still describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CalibrationStatus {
    /// Rows when it was measured.
    pub calibrated_rows: u64,
    /// Live rows now.
    pub rows: u64,
    pub queries: u32,
    /// The rows changed by more than [`STALE_CHANGE`] of `calibrated_rows`:
    /// target recalls and estimates may be off; build again (or `compact
    /// --retrain`) to measure again.
    pub stale: bool,
}

impl CalibrationStatus {
    /// The status of `calibration` over an index now holding `rows` live rows.
    pub fn new(calibration: &Calibration, rows: u64) -> Self {
        let then = calibration.rows.max(1) as f64;
        CalibrationStatus {
            calibrated_rows: calibration.rows,
            rows,
            queries: calibration.queries,
            stale: (rows as f64 - then).abs() / then > STALE_CHANGE,
        }
    }
}

/// A query's lists under a target recall, and its estimated recall.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetLists {
    /// The lists to probe, nearest first.
    pub cids: Vec<u32>,
    pub estimated_recall: f64,
}

/// The calibration of one index, ready for queries.
#[derive(Debug, Clone)]
pub struct RecallModel {
    calibration: Calibration,
}

impl RecallModel {
    /// The model of a parsed (valid) calibration.
    pub fn new(calibration: Calibration) -> Self {
        RecallModel { calibration }
    }

    /// The ascending gap quantiles (at least 2: the parser checked).
    fn gaps(&self) -> &[f32] {
        &self.calibration.neighbour_gaps
    }

    /// The document it was made from.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// The largest gap probed for a target recall in `(0, 1]`: `F⁻¹`,
    /// interpolated between quantiles; `+∞` for 1 (every list may hold a
    /// neighbour the sample did not see).
    fn gap_for(&self, target: f64) -> f32 {
        if target >= 1.0 {
            return f32::INFINITY;
        }
        let gaps = self.gaps();
        let n = gaps.len() - 1;
        let at = target.clamp(0.0, 1.0) * n as f64;
        let i = (at.floor() as usize).min(n - 1);
        let frac = (at - i as f64) as f32;
        gaps[i] + (gaps[i + 1] - gaps[i]) * frac
    }

    /// `F(gap)`: the share of calibration neighbours in lists whose gap is
    /// below `gap`, interpolated between quantiles (1 past the last).
    fn share_below(&self, gap: f32) -> f64 {
        let gaps = self.gaps();
        let n = gaps.len() - 1;
        // The first quantile ≥ gap: the share below lies between its
        // neighbour's and its own.
        let i = gaps.partition_point(|&g| g < gap);
        if i == 0 {
            return 0.0;
        }
        if i > n {
            return 1.0;
        }
        let (lo, hi) = (gaps[i - 1], gaps[i]);
        let frac = if hi > lo {
            f64::from((gap - lo) / (hi - lo))
        } else {
            1.0
        };
        ((i - 1) as f64 + frac) / n as f64
    }

    /// The estimated recall of a query that probed its nearest `lists`
    /// lists: the calibration's mean recall at that `nprobe`, interpolated
    /// between its points (1 at `nlist`).
    pub fn recall_at(&self, lists: usize) -> f64 {
        let points = &self.calibration.recall_by_nprobe;
        let x = lists as f64;
        let mut before = (0.0, 0.0);
        for p in points {
            let (px, py) = (f64::from(p.nprobe), p.recall);
            if x <= px {
                let (bx, by) = before;
                return by + (py - by) * (x - bx) / (px - bx).max(f64::MIN_POSITIVE);
            }
            before = (px, py);
        }
        points.last().map_or(1.0, |p| p.recall)
    }

    /// Where a query under `target` stops, with the caller's `cap` on its
    /// lists: the calibration's stop for the target
    /// ([`Calibration::target_stops`]: the first entry whose recall
    /// reaches it, its gap interpolated from the entry below when both
    /// share a cap), else (a document without stops, or a target above
    /// them) the target's gap quantile alone, uncapped. `+∞` for a target
    /// of 1.
    pub fn stop_for(&self, target: f64, cap: usize) -> Stop {
        let cap = cap.max(1);
        let uncapped = |gap| Stop {
            gap,
            cap,
            calibrated_cap: false,
        };
        if target >= 1.0 {
            return uncapped(f32::INFINITY);
        }
        let stops = &self.calibration.target_stops;
        let i = stops.partition_point(|s| s.recall < target);
        let Some(at) = stops.get(i) else {
            return uncapped(self.gap_for(target));
        };
        let gap = match i.checked_sub(1).map(|b| &stops[b]) {
            Some(below) if below.cap == at.cap => {
                let frac = ((target - below.recall) / (at.recall - below.recall)) as f32;
                below.gap + (at.gap - below.gap) * frac
            }
            _ => at.gap,
        };
        let calibrated = at.cap as usize;
        Stop {
            gap,
            cap: cap.min(calibrated),
            calibrated_cap: calibrated <= cap,
        }
    }

    /// The estimated recall of a query under `target` that stopped at
    /// `stop`, whose nearest list left out has gap `next` (`None`: it
    /// probed every list). Stopped by the gap or the calibration's cap:
    /// the target, as calibrated; by the caller's cap below the
    /// calibration's (a list within the gap was left out): the share below
    /// the gap it left, at most the target.
    pub fn target_estimate(&self, target: f64, stop: &Stop, next: Option<f32>) -> f64 {
        match next {
            None => 1.0,
            Some(g) if !stop.calibrated_cap && g <= stop.gap => self.share_below(g).min(target),
            Some(_) => target,
        }
    }

    /// The lists of a query whose leaves, nearest first, are `ranked`
    /// (`(distance, cid)`), for `target` with the caller's `cap`: every
    /// list within its stop's gap, at least one, at most its cap.
    pub fn lists_for(&self, ranked: &[(f32, u32)], target: f64, cap: usize) -> TargetLists {
        let stop = self.stop_for(target, cap);
        let d1 = ranked.first().map_or(0.0, |l| l.0);
        let within = ranked.iter().take_while(|l| l.0 - d1 <= stop.gap).count();
        let probed = within.clamp(1, stop.cap).min(ranked.len());
        TargetLists {
            cids: ranked[..probed].iter().map(|l| l.1).collect(),
            estimated_recall: self.target_estimate(
                target,
                &stop,
                ranked.get(probed).map(|l| l.0 - d1),
            ),
        }
    }
}

/// Where a query under a target recall stops ([`RecallModel::stop_for`]):
/// after the lists within `gap` of its nearest, at least one, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stop {
    pub gap: f32,
    pub cap: usize,
    /// `cap` is the calibration's, chosen with `gap` for the target (not
    /// the caller's, lower).
    pub calibrated_cap: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::calibration::{FEATURE_LEAF_DISTANCE_GAP, RecallPoint};

    fn model(gaps: Vec<f32>) -> RecallModel {
        RecallModel::new(Calibration {
            format_version: 1,
            k: 10,
            queries: 1,
            rows: 1,
            feature: FEATURE_LEAF_DISTANCE_GAP.into(),
            neighbour_gaps: gaps,
            recall_by_nprobe: vec![RecallPoint {
                nprobe: 1,
                recall: 1.0,
            }],
            rerank: None,
            target_stops: Vec::new(),
        })
    }

    #[test]
    fn the_gap_and_the_share_are_inverse() {
        // Quartiles: a quarter of the neighbours lie within each step.
        let m = model(vec![0.0, 1.0, 2.0, 4.0, 8.0]);
        assert_eq!(m.gap_for(0.5), 2.0);
        assert_eq!(m.gap_for(0.625), 3.0);
        assert_eq!(m.gap_for(1.0), f32::INFINITY);
        for t in [0.1, 0.25, 0.5, 0.6, 0.9] {
            assert!((m.share_below(m.gap_for(t)) - t).abs() < 1e-6, "{t}");
        }
        assert_eq!(m.share_below(0.0), 0.0);
        assert_eq!(m.share_below(100.0), 1.0);
    }

    #[test]
    fn a_fixed_nprobe_is_estimated_by_the_calibrated_curve() {
        let mut m = model(vec![0.0, 1.0]);
        m.calibration.recall_by_nprobe = vec![
            RecallPoint {
                nprobe: 2,
                recall: 0.5,
            },
            RecallPoint {
                nprobe: 4,
                recall: 0.9,
            },
        ];
        assert!((m.recall_at(1) - 0.25).abs() < 1e-12);
        assert!((m.recall_at(3) - 0.7).abs() < 1e-12);
        assert_eq!(m.recall_at(9), 0.9);
    }

    #[test]
    fn a_target_probes_the_lists_within_its_gap() {
        let m = model(vec![0.0, 1.0, 2.0, 4.0, 8.0]);
        let ranked = [(10.0, 7), (10.5, 3), (11.9, 1), (12.5, 0), (30.0, 2)];
        // Target 0.5: gap 2, so the lists at 10, 10.5 and 11.9.
        let t = m.lists_for(&ranked, 0.5, 5);
        assert_eq!(t.cids, vec![7, 3, 1]);
        // Stopped by the gap: the target.
        assert!((t.estimated_recall - 0.5).abs() < 1e-9);
        // Stopped by the cap at the list of gap 1.9: F(1.9) = 0.25 + 0.9 · 0.25.
        let capped = m.lists_for(&ranked, 0.5, 2);
        assert!((capped.estimated_recall - 0.475).abs() < 1e-6);
        // The cap stops it; at least one list always.
        assert_eq!(m.lists_for(&ranked, 0.5, 2).cids, vec![7, 3]);
        assert_eq!(m.lists_for(&ranked, 0.0, 5).cids.len(), 1);
        // Every list probed: recall 1.
        assert_eq!(m.lists_for(&ranked, 1.0, 5).estimated_recall, 1.0);
    }

    #[test]
    fn a_calibrated_stop_chooses_the_gap_and_the_cap() {
        use crate::format::calibration::TargetStop;
        let mut m = model(vec![0.0, 1.0, 2.0, 4.0, 8.0]);
        let at = |recall, gap, cap| TargetStop {
            recall,
            gap,
            cap,
            lists: 1.0,
            rows: 1.0,
        };
        m.calibration.target_stops = vec![at(0.5, 1.0, 2), at(0.6, 3.0, 2), at(0.7, 6.0, 3)];
        let stop = |t, cap| m.stop_for(t, cap);
        // On a stop, between two with one cap (gap interpolated), between
        // two caps (the upper), below the first (the first).
        assert_eq!((stop(0.5, 9).gap, stop(0.5, 9).cap), (1.0, 2));
        assert_eq!((stop(0.55, 9).gap, stop(0.55, 9).cap), (2.0, 2));
        assert_eq!((stop(0.65, 9).gap, stop(0.65, 9).cap), (6.0, 3));
        assert_eq!(stop(0.1, 9).gap, 1.0);
        assert!(stop(0.65, 9).calibrated_cap);
        // Above the stops: the quantile alone, uncapped; 1: every list.
        let above = stop(0.8, 9);
        assert_eq!(
            (above.gap, above.cap, above.calibrated_cap),
            (m.gap_for(0.8), 9, false)
        );
        assert_eq!(stop(1.0, 9).gap, f32::INFINITY);
        // The caller's cap below the calibration's binds.
        let low = stop(0.65, 2);
        assert_eq!((low.cap, low.calibrated_cap), (2, false));

        let ranked = [(10.0, 7), (10.5, 3), (11.9, 1), (12.5, 0), (30.0, 2)];
        // 0.65: gap 6 holds four lists, the cap of 3 keeps three; the
        // calibration's cap stopped it, so the estimate is the target.
        let t = m.lists_for(&ranked, 0.65, 9);
        assert_eq!(t.cids, vec![7, 3, 1]);
        assert_eq!(t.estimated_recall, 0.65);
        // The caller's cap of 2 stopped it at the list of gap 1.9:
        // F(1.9) = 0.475, below the target.
        let capped = m.lists_for(&ranked, 0.65, 2);
        assert_eq!(capped.cids, vec![7, 3]);
        assert!((capped.estimated_recall - 0.475).abs() < 1e-6);
        // The gap stopped it (0.5: gap 1, cap 2): the target.
        let t = m.lists_for(&ranked, 0.5, 9);
        assert_eq!((t.cids.len(), t.estimated_recall), (2, 0.5));
    }
}
