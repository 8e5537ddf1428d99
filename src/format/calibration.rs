//! `calibration.json`: how recall grows with the lists probed, measured at
//! build time on a held-out sample of the index's own rows used as queries
//! (each query's exact top-k over every row, itself left out). Named by
//! `index.json` (`calibration`) and pinned like the centroids; a refreshed
//! snapshot reads its base's. The probe turns it into a target recall and
//! an estimate with every answer ([`crate::probe::target`]). The JSON
//! Schema is `manifests/calibration.schema.json`.
//!
//! The feature is the *leaf-distance gap*: for a query `q` whose nearest
//! leaf centroid is at distance `d₁` (the metric's distance, squared for
//! L2), list `j` has gap `d(q, cⱼ) − d₁ ≥ 0`. `neighbour-gaps` holds
//! quantiles of the gaps of the lists that hold the sample's true
//! neighbours: probing every list whose gap is at most its `t`-quantile
//! finds a share `t` of the neighbours, on average over queries.
//!
//!
//! The quantiles alone let a boundary query probe dozens of lists for the
//! last few neighbours. Version 3 adds `target-stops`: for each target
//! recall on a grid, the pair of a gap and a cap on the lists that reaches
//! it on the same queries while scanning the fewest rows, chosen by the
//! build ([`crate::builder::calibrate`]) among caps on the `nprobe` grid.
//!
//! An index with codes also records `rerank` (format version 2): the
//! re-rank factor its codes need, measured on the same queries
//! ([`crate::builder::calibrate::measure_rerank`]). A query that names no
//! re-rank uses it.
//!
//! ```json
//! {"format-version": 3, "k": 10, "queries": 1000, "rows": 1000000,
//!  "feature": "leaf-distance-gap", "neighbour-gaps": [0.0, 0.0, …, 41877.5],
//!  "recall-by-nprobe": [{"nprobe": 1, "recall": 0.412}, …],
//!  "target-stops": [{"recall": 0.95, "gap": 20911.0, "cap": 16,
//!                    "lists": 6.1, "rows": 6240.5}, …], "rerank": 4}
//! ```

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// File name of the calibration in a snapshot folder.
pub const CALIBRATION_FILE: &str = "calibration.json";
/// The `calibration.json` format version this crate writes (and reads).
pub const CALIBRATION_FORMAT_VERSION: u32 = 3;
/// The first version, without `rerank` or `target-stops`: still read.
pub const CALIBRATION_FORMAT_VERSION_1: u32 = 1;
/// The second, with `rerank` and without `target-stops`: still read.
pub const CALIBRATION_FORMAT_VERSION_2: u32 = 2;
/// The one feature written today (see the module documentation).
pub const FEATURE_LEAF_DISTANCE_GAP: &str = "leaf-distance-gap";

/// A `calibration.json` that cannot be used.
#[derive(Debug, Error)]
pub enum CalibrationError {
    #[error("{path} is not a valid calibration document: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: calibration format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: u64,
        supported: u32,
    },
}

/// The document as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Calibration {
    pub format_version: u32,
    /// The `k` of recall@k measured.
    pub k: u32,
    /// Held-out queries measured.
    pub queries: u32,
    /// Rows the index held when it was measured (a later refresh compares).
    pub rows: u64,
    /// Always [`FEATURE_LEAF_DISTANCE_GAP`].
    pub feature: String,
    /// Quantiles of the neighbours' list gaps, ascending: entry `i` of
    /// `n + 1` is the gap below which a share `i / n` of them lie.
    pub neighbour_gaps: Vec<f32>,
    /// Mean recall@k of the sample at fixed `nprobe`, ascending `nprobe`
    /// (the lists holding the neighbours among the nearest `nprobe`).
    pub recall_by_nprobe: Vec<RecallPoint>,
    /// The re-rank factor the index's codes need (version 2, an index with
    /// codes): the smallest whose `rerank × k` best candidates by their
    /// estimate hold the queries' neighbours as well as the deepest factor
    /// measured ([`crate::builder::calibrate::measure_rerank`]). What a
    /// query that names no re-rank uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<u32>,
    /// Version 3: where a query under a target recall stops, for targets
    /// rising on a grid ([`TargetStop`]). Empty (absent) before version 3;
    /// a reader then stops at the target's gap quantile alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_stops: Vec<TargetStop>,
}

/// One entry of [`Calibration::target_stops`]: a query under the target
/// `recall` probes, nearest first, the lists whose gap is at most `gap`,
/// at least one and at most `cap`. On the calibration's queries that finds
/// a share `recall` of the neighbours, and of the pairs that do, it scans
/// the fewest rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TargetStop {
    pub recall: f64,
    pub gap: f32,
    pub cap: u32,
    /// Mean lists a calibration query probed at this stop.
    pub lists: f64,
    /// Mean rows a calibration query scanned at this stop: what the choice
    /// minimised.
    pub rows: f64,
}

/// One operating point of [`Calibration::recall_by_nprobe`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RecallPoint {
    pub nprobe: u32,
    pub recall: f64,
}

impl Calibration {
    /// Pretty-printed JSON, the bytes the build writes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Parse and check `calibration.json` at `path` for an index of `nlist`
    /// lists: `format-version` first, then the keys, then the values.
    ///
    /// # Errors
    /// [`CalibrationError::Incompatible`] for another version,
    /// [`CalibrationError::Invalid`] naming the first broken rule.
    pub fn parse(path: &str, bytes: &[u8], nlist: usize) -> Result<Self, CalibrationError> {
        let invalid = |reason: String| CalibrationError::Invalid {
            path: path.to_string(),
            reason,
        };
        let value = match super::versioned_json(bytes, CALIBRATION_FORMAT_VERSION) {
            Err(super::VersionError::Incompatible(v))
                if v == u64::from(CALIBRATION_FORMAT_VERSION_1)
                    || v == u64::from(CALIBRATION_FORMAT_VERSION_2) =>
            {
                super::versioned_json(bytes, v as u32)
            }
            other => other,
        };
        let value = match value {
            Ok(v) => v,
            Err(super::VersionError::Invalid(reason)) => return Err(invalid(reason)),
            Err(super::VersionError::Incompatible(found)) => {
                return Err(CalibrationError::Incompatible {
                    path: path.to_string(),
                    found,
                    supported: CALIBRATION_FORMAT_VERSION,
                });
            }
        };
        let doc: Calibration = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        doc.check(nlist).map_err(invalid)?;
        Ok(doc)
    }

    /// Every value rule; the broken one.
    fn check(&self, nlist: usize) -> Result<(), String> {
        match (self.format_version, self.rerank) {
            (CALIBRATION_FORMAT_VERSION_1, Some(_)) => {
                return Err("format-version 1 has no rerank key".into());
            }
            (_, Some(0)) => return Err("rerank is 0, at least 1 expected".into()),
            _ => {}
        }
        if self.format_version < CALIBRATION_FORMAT_VERSION && !self.target_stops.is_empty() {
            return Err(format!(
                "format-version {} has no target-stops key",
                self.format_version
            ));
        }
        if self.feature != FEATURE_LEAF_DISTANCE_GAP {
            return Err(format!(
                "feature is {:?}, expected {FEATURE_LEAF_DISTANCE_GAP:?}",
                self.feature
            ));
        }
        if self.k == 0 || self.queries == 0 {
            return Err(format!(
                "k is {} and queries {}: both must be at least 1",
                self.k, self.queries
            ));
        }
        let gaps = &self.neighbour_gaps;
        if gaps.len() < 2 {
            return Err(format!(
                "neighbour-gaps has {} entries, at least 2 expected",
                gaps.len()
            ));
        }
        if let Some(i) = gaps.iter().position(|g| !g.is_finite() || *g < 0.0) {
            return Err(format!(
                "neighbour-gaps[{i}] is {}, not a finite gap ≥ 0",
                gaps[i]
            ));
        }
        if let Some(i) = gaps.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!(
                "neighbour-gaps[{}] = {} is below the entry before it ({})",
                i + 1,
                gaps[i + 1],
                gaps[i]
            ));
        }
        let points = &self.recall_by_nprobe;
        for (i, p) in points.iter().enumerate() {
            if p.nprobe == 0 || p.nprobe as usize > nlist {
                return Err(format!(
                    "recall-by-nprobe[{i}].nprobe is {}, outside 1..={nlist} (the index's nlist)",
                    p.nprobe
                ));
            }
            if !(0.0..=1.0).contains(&p.recall) {
                return Err(format!(
                    "recall-by-nprobe[{i}].recall is {}, outside 0..=1",
                    p.recall
                ));
            }
            if i > 0 && (p.nprobe <= points[i - 1].nprobe || p.recall < points[i - 1].recall) {
                return Err(format!(
                    "recall-by-nprobe[{i}] ({}, {}) does not follow ({}, {}): nprobe must rise and recall must not fall",
                    p.nprobe,
                    p.recall,
                    points[i - 1].nprobe,
                    points[i - 1].recall
                ));
            }
        }
        self.check_stops(nlist)
    }

    /// The rules of `target-stops`; the broken one.
    fn check_stops(&self, nlist: usize) -> Result<(), String> {
        let stops = &self.target_stops;
        for (i, s) in stops.iter().enumerate() {
            if !(s.recall > 0.0 && s.recall <= 1.0) {
                return Err(format!(
                    "target-stops[{i}].recall is {}, outside (0, 1]",
                    s.recall
                ));
            }
            if i > 0 && s.recall <= stops[i - 1].recall {
                return Err(format!(
                    "target-stops[{i}].recall {} does not rise above the entry before it ({})",
                    s.recall,
                    stops[i - 1].recall
                ));
            }
            if !s.gap.is_finite() || s.gap < 0.0 {
                return Err(format!(
                    "target-stops[{i}].gap is {}, not a finite gap ≥ 0",
                    s.gap
                ));
            }
            if s.cap == 0 || s.cap as usize > nlist {
                return Err(format!(
                    "target-stops[{i}].cap is {}, outside 1..={nlist} (the index's nlist)",
                    s.cap
                ));
            }
            if !(s.lists >= 1.0 && s.lists <= f64::from(s.cap)) {
                return Err(format!(
                    "target-stops[{i}].lists is {}, outside 1..={} (its cap)",
                    s.lists, s.cap
                ));
            }
            if !(s.rows.is_finite() && s.rows >= 0.0) {
                return Err(format!(
                    "target-stops[{i}].rows is {}, not a finite count ≥ 0",
                    s.rows
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Calibration {
        Calibration {
            format_version: CALIBRATION_FORMAT_VERSION,
            k: 10,
            queries: 4,
            rows: 100,
            feature: FEATURE_LEAF_DISTANCE_GAP.into(),
            neighbour_gaps: vec![0.0, 0.5, 2.0],
            recall_by_nprobe: vec![
                RecallPoint {
                    nprobe: 1,
                    recall: 0.5,
                },
                RecallPoint {
                    nprobe: 4,
                    recall: 1.0,
                },
            ],
            rerank: Some(4),
            target_stops: vec![
                TargetStop {
                    recall: 0.5,
                    gap: 0.5,
                    cap: 2,
                    lists: 1.5,
                    rows: 30.0,
                },
                TargetStop {
                    recall: 0.9,
                    gap: 2.0,
                    cap: 4,
                    lists: 2.5,
                    rows: 52.5,
                },
            ],
        }
    }

    /// `doc()` with its first target stop changed by `f`.
    fn stop(f: impl FnOnce(&mut TargetStop)) -> Calibration {
        let mut d = doc();
        f(&mut d.target_stops[0]);
        d
    }

    #[test]
    fn round_trips_and_checks_every_rule() {
        let d = doc();
        assert_eq!(Calibration::parse("c", &d.encode(), 4).unwrap(), d);
        let broken: Vec<(Calibration, &str)> = vec![
            (Calibration { k: 0, ..doc() }, "k is 0"),
            (
                Calibration {
                    neighbour_gaps: vec![0.0, 2.0, 1.0],
                    ..doc()
                },
                "neighbour-gaps[2] = 1 is below",
            ),
            (
                Calibration {
                    neighbour_gaps: vec![-1.0, 0.0],
                    ..doc()
                },
                "neighbour-gaps[0] is -1, not a finite gap",
            ),
            (
                Calibration {
                    feature: "other".into(),
                    ..doc()
                },
                "feature is \"other\"",
            ),
            (
                Calibration {
                    rerank: Some(0),
                    ..doc()
                },
                "rerank is 0",
            ),
            (
                Calibration {
                    format_version: CALIBRATION_FORMAT_VERSION_1,
                    ..doc()
                },
                "format-version 1 has no rerank",
            ),
            (
                Calibration {
                    format_version: CALIBRATION_FORMAT_VERSION_2,
                    ..doc()
                },
                "format-version 2 has no target-stops",
            ),
            (stop(|s| s.recall = 0.0), "target-stops[0].recall is 0"),
            (
                stop(|s| s.recall = 0.95),
                "target-stops[1].recall 0.9 does not rise",
            ),
            (stop(|s| s.gap = -1.0), "target-stops[0].gap is -1"),
            (
                stop(|s| s.cap = 5),
                "target-stops[0].cap is 5, outside 1..=4",
            ),
            (stop(|s| s.cap = 0), "target-stops[0].cap is 0"),
            (
                stop(|s| s.lists = 3.0),
                "target-stops[0].lists is 3, outside 1..=2",
            ),
            (stop(|s| s.rows = -1.0), "target-stops[0].rows is -1"),
        ];
        for (d, want) in broken {
            let err = Calibration::parse("c", &d.encode(), 4)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} should say {want}");
        }
        // nprobe beyond the index's nlist.
        let err = Calibration::parse("c", &doc().encode(), 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside 1..=3"), "{err}");
        let mut falling = doc();
        falling.recall_by_nprobe[1].recall = 0.4;
        let err = Calibration::parse("c", &falling.encode(), 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("recall must not fall"), "{err}");
        // Versions 1 (no rerank) and 2 (no target stops) are still read;
        // version 4 is not.
        let v1 = Calibration {
            format_version: CALIBRATION_FORMAT_VERSION_1,
            rerank: None,
            target_stops: Vec::new(),
            ..doc()
        };
        assert_eq!(Calibration::parse("c", &v1.encode(), 4).unwrap(), v1);
        let v2 = Calibration {
            format_version: CALIBRATION_FORMAT_VERSION_2,
            target_stops: Vec::new(),
            ..doc()
        };
        assert_eq!(Calibration::parse("c", &v2.encode(), 4).unwrap(), v2);
        let v4 = String::from_utf8(doc().encode())
            .unwrap()
            .replace("\"format-version\": 3", "\"format-version\": 4");
        assert!(matches!(
            Calibration::parse("c", v4.as_bytes(), 4),
            Err(CalibrationError::Incompatible { found: 4, .. })
        ));
        // Without codes, version 3 has no rerank either.
        let plain = Calibration {
            rerank: None,
            ..doc()
        };
        assert_eq!(Calibration::parse("c", &plain.encode(), 4).unwrap(), plain);
        let extra = String::from_utf8(doc().encode())
            .unwrap()
            .replace("\"k\": 10", "\"k\": 10, \"x\": 1");
        assert!(Calibration::parse("c", extra.as_bytes(), 4).is_err());
    }
}
