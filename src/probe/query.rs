//! What a search asks ([`SearchParams`]) and answers ([`SearchResult`]),
//! and the one place both are checked: [`QueryPlan::new`] validates the
//! parameters against the index and the queries against its dimension and
//! metric (every rule once, [`QueryError`] naming the numbers), and leaves
//! a plan the engine runs ([`super::engine::Engine::run`]): the prepared
//! queries, the lists each probes first and how far a filter may widen
//! them, and how the candidates are ranked.

use super::select::DEFAULT_ROOT_FACTOR;
use super::stats::SearchStats;
use crate::distance::Metric;
use crate::filter::Filter;
use serde::Serialize;
use std::sync::Arc;
use thiserror::Error;

/// A query or search parameter the index cannot answer.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum QueryError {
    #[error("query {query} has dimension {actual}, the index has {expected}")]
    DimensionMismatch {
        query: usize,
        expected: usize,
        actual: usize,
    },
    #[error("query {query} has a non-finite value {value} at position {position}")]
    NonFinite {
        query: usize,
        position: usize,
        value: f32,
    },
    /// Under cosine, a query whose components are all zero has no cosine
    /// to anything.
    #[error("query {query} is a zero vector: cosine distance needs a direction")]
    NoDirection { query: usize },
    #[error("k must be at least 1")]
    InvalidK,
    #[error("nprobe = {nprobe} is outside 1..={nlist} (the index's nlist)")]
    InvalidNprobe { nprobe: usize, nlist: usize },
    /// 0 visits every root, and so does any factor ≥ nlist: a larger one
    /// only hides a mistake.
    #[error("root_factor = {root_factor} is outside 0..={nlist} (the index's nlist)")]
    InvalidRootFactor { root_factor: usize, nlist: usize },
    /// A target recall is a share of the exact top-k: in `(0, 1]`.
    #[error("target_recall = {target} is outside (0, 1]")]
    InvalidTargetRecall { target: f64 },
    /// The index was built without a recall calibration.
    #[error(
        "target_recall needs the index's recall calibration (calibration.json), which this index does not have: build it again (calibration is on by default) or give nprobe"
    )]
    NotCalibrated,
    /// A fixed list count and a target recall both choose the lists: one
    /// of them, or neither for the index's default.
    #[error(
        "nprobe = {nprobe} and target_recall = {target} both choose the lists: give one, or neither for the index's default"
    )]
    NprobeAndTarget { nprobe: usize, target: f64 },
    #[error("max_nprobe = {max_nprobe} is outside {nprobe}..={nlist} (nprobe..=nlist)")]
    InvalidMaxNprobe {
        max_nprobe: usize,
        nprobe: usize,
        nlist: usize,
    },
}

impl QueryError {
    /// A stable machine-readable name of the rule broken (the HTTP error
    /// code).
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::DimensionMismatch { .. } => "wrong_dimension",
            QueryError::NonFinite { .. } => "non_finite_value",
            QueryError::NoDirection { .. } => "zero_vector",
            QueryError::InvalidK => "k_zero",
            QueryError::InvalidNprobe { .. } => "nprobe_out_of_range",
            QueryError::InvalidRootFactor { .. } => "root_factor_out_of_range",
            QueryError::InvalidMaxNprobe { .. } => "max_nprobe_out_of_range",
            QueryError::InvalidTargetRecall { .. } => "target_recall_out_of_range",
            QueryError::NotCalibrated => "not_calibrated",
            QueryError::NprobeAndTarget { .. } => "nprobe_and_target_recall",
        }
    }
}

/// Parameters of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchParams {
    /// Neighbours to return (≥ 1). Default 10.
    pub k: usize,
    /// Leaf lists to probe (1..=nlist), instead of a target recall.
    /// Neither (the default): the index's default ([`SearchParams::probe`]).
    pub nprobe: Option<usize>,
    /// Roots are visited nearest first until they own `root_factor × nprobe`
    /// leaves (0, the default, visits every root: exact leaf selection); the
    /// nearest `nprobe` leaves among them are probed. At most nlist.
    pub root_factor: usize,
    /// Return the payload columns of each hit. Default false.
    pub include_payload: bool,
    /// In an index with codes: the best `rerank × k` candidates by their
    /// codes are ranked again by their exact distance; 0 returns the codes'
    /// estimated distances and reads no f32 at all. Ignored without codes
    /// (the scan is exact). `None` (the default): the factor the build
    /// measured for the index's codes (`calibration.json`'s `rerank`), else
    /// [`DEFAULT_RERANK`] ([`SearchParams::rerank_in`]).
    pub rerank: Option<usize>,
    /// A SQL `WHERE` expression over the payload columns (see
    /// [`crate::filter`]): only rows where it is true are returned. The
    /// search goes on past `nprobe` lists, nearest first, until `k` rows
    /// match or `max_nprobe` lists are probed, or scans every match when the
    /// filter is selective ([`SearchStats::filter_plan`]). Every leaf is
    /// ranked for a filtered query: `root_factor` does not apply.
    pub filter: Option<String>,
    /// With a filter: the most lists probed while looking for `k` matches
    /// (default every list). A query that stops there with fewer says so
    /// ([`SearchStats::capped`]). With a target recall: the most lists a
    /// query probes.
    pub max_nprobe: Option<usize>,
    /// Probe for a recall instead of a number of lists: each query probes
    /// its nearest lists until the build's calibration predicts it has
    /// found this share of its exact top-k (in `(0, 1]`;
    /// [`super::target`]), so an easy query stops early and a hard one goes
    /// further. Instead of `nprobe`; with a filter, the filter widens from
    /// there. Needs an index with a calibration.
    pub target_recall: Option<f64>,
}

/// Re-rank factor of an index whose build measured none (an index without
/// a calibration, or built before `calibration.json` recorded one; see
/// `docs/benchmarks.md`).
pub const DEFAULT_RERANK: usize = 4;

/// The recall a query probes for when it names neither `nprobe` nor a
/// target, in an index with a calibration (built by default): the recall
/// FAISS users tune `nprobe` for, reached with fewer lists on average than
/// any one `nprobe` that reaches it (`docs/benchmarks.md`).
pub const DEFAULT_TARGET_RECALL: f64 = 0.95;

/// The lists a query probes when it names neither, in an index without a
/// calibration (at most the index's nlist).
pub const DEFAULT_NPROBE: usize = 16;

/// How a query chooses its lists.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeDepth {
    /// Its nearest `n` lists.
    Lists(usize),
    /// Its nearest lists until the calibration predicts this recall.
    Recall(f64),
}

impl Default for SearchParams {
    fn default() -> Self {
        Self {
            k: 10,
            nprobe: None,
            root_factor: DEFAULT_ROOT_FACTOR,
            include_payload: false,
            rerank: None,
            filter: None,
            max_nprobe: None,
            target_recall: None,
        }
    }
}

impl SearchParams {
    /// How these parameters choose the lists in `index`: the `nprobe` or
    /// target recall given; neither, [`DEFAULT_TARGET_RECALL`] where the
    /// index has a calibration and [`DEFAULT_NPROBE`] (at most nlist)
    /// where it has none.
    ///
    /// # Errors
    /// [`QueryError::NprobeAndTarget`] for both,
    /// [`QueryError::NotCalibrated`] for a target without a calibration.
    pub fn probe(&self, index: IndexShape) -> Result<ProbeDepth, QueryError> {
        match (self.nprobe, self.target_recall) {
            (Some(nprobe), Some(target)) => Err(QueryError::NprobeAndTarget { nprobe, target }),
            (Some(nprobe), None) => Ok(ProbeDepth::Lists(nprobe)),
            (None, Some(_)) if !index.calibrated => Err(QueryError::NotCalibrated),
            (None, Some(target)) => Ok(ProbeDepth::Recall(target)),
            (None, None) if index.calibrated => Ok(ProbeDepth::Recall(DEFAULT_TARGET_RECALL)),
            (None, None) => Ok(ProbeDepth::Lists(DEFAULT_NPROBE.min(index.nlist))),
        }
    }

    /// The re-rank factor in `index`: the one given, else the index's own
    /// ([`IndexShape::rerank`]), measured at recall@`rerank_k`: for a
    /// smaller `k` as many candidates as it measured (`rerank × rerank_k`),
    /// since the exact neighbours a query's codes rank below others are as
    /// many whatever `k` is (duplicate rows, for one).
    pub fn rerank_in(&self, index: IndexShape) -> usize {
        self.rerank.unwrap_or_else(|| {
            let measured = index.rerank.saturating_mul(index.rerank_k);
            index.rerank.max(measured.div_ceil(self.k.max(1)))
        })
    }

    /// Check the parameters against `index` and resolve its [`ProbeDepth`].
    ///
    /// # Errors
    /// [`QueryError::InvalidK`], [`QueryError::InvalidNprobe`],
    /// [`QueryError::InvalidRootFactor`], [`QueryError::InvalidMaxNprobe`],
    /// [`QueryError::InvalidTargetRecall`], and [`SearchParams::probe`]'s.
    fn check(&self, index: IndexShape) -> Result<ProbeDepth, QueryError> {
        let nlist = index.nlist;
        if let Some(target) = self.target_recall
            && !(target > 0.0 && target <= 1.0)
        {
            return Err(QueryError::InvalidTargetRecall { target });
        }
        let probe = self.probe(index)?;
        // Under a target recall, max_nprobe may be any list count.
        let nprobe = match probe {
            ProbeDepth::Lists(nprobe) => nprobe,
            ProbeDepth::Recall(_) => 1,
        };
        if self.k == 0 {
            return Err(QueryError::InvalidK);
        }
        if nprobe == 0 || nprobe > nlist {
            return Err(QueryError::InvalidNprobe { nprobe, nlist });
        }
        if self.root_factor > nlist {
            let root_factor = self.root_factor;
            return Err(QueryError::InvalidRootFactor { root_factor, nlist });
        }
        match self.max_nprobe {
            Some(max_nprobe) if max_nprobe < nprobe || max_nprobe > nlist => {
                Err(QueryError::InvalidMaxNprobe {
                    max_nprobe,
                    nprobe,
                    nlist,
                })
            }
            _ => Ok(probe),
        }
    }
}

/// One neighbour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The source row identity.
    pub rowid: i64,
    /// Smaller is closer (see [`crate::distance::Metric`]).
    pub distance: f32,
    /// The payload columns, when asked for ([`SearchParams::include_payload`]);
    /// left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The answer to one query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    /// Best first; ties by the smaller rowid.
    pub hits: Vec<Hit>,
    pub stats: SearchStats,
    /// With [`SearchParams::include_payload`]: the hits' payload columns as
    /// Arrow, one row per hit in order, typed as stored (each [`Hit::payload`]
    /// is its row as JSON).
    #[serde(skip)]
    pub payload: Option<arrow::record_batch::RecordBatch>,
}

/// How a plan's candidates are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankMode {
    /// Every probed row by its exact distance (an index without codes).
    Exact,
    /// By the codes' estimate; the best `rerank × k` then by their exact
    /// distance (`rerank` 0: the estimate is the answer).
    Codes { rerank: usize },
}

/// A validated search: what [`super::engine::Engine::run`] executes.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// The queries, row-major, prepared for the metric (unit-normalised
    /// under cosine).
    pub queries: Arc<[f32]>,
    pub k: usize,
    /// The nearest lists each query probes first (without a target).
    pub nprobe: usize,
    /// The target recall that chooses each query's lists instead.
    pub target: Option<f64>,
    pub root_factor: usize,
    /// A filter widens the probe, nearest list first, up to `cap` lists
    /// ([`super::filtered::FilterBudget`]); `None`: one round of `nprobe`.
    pub filter: Option<Arc<Filter>>,
    pub cap: usize,
    pub rank: RankMode,
    pub include_payload: bool,
}

impl QueryPlan {
    /// Check `queries` (`dim` values each, row-major) and `params` against
    /// an index of `nlist` lists under `metric`, with codes or not, and
    /// plan them. `params.filter` is the caller's to parse (it needs the
    /// payload schema) and to set as [`QueryPlan::filter`].
    ///
    /// # Errors
    /// [`QueryError`] for the first rule broken.
    pub fn new(
        queries: &[f32],
        params: &SearchParams,
        index: IndexShape,
    ) -> Result<QueryPlan, QueryError> {
        let probe = params.check(index)?;
        let queries = prepare_queries(index.metric, queries, index.dim)?;
        let rank = if index.has_codes {
            RankMode::Codes {
                rerank: params.rerank_in(index),
            }
        } else {
            RankMode::Exact
        };
        Ok(QueryPlan {
            queries: queries.into(),
            k: params.k,
            nprobe: match probe {
                ProbeDepth::Lists(nprobe) => nprobe,
                ProbeDepth::Recall(_) => DEFAULT_NPROBE.min(index.nlist),
            },
            target: match probe {
                ProbeDepth::Lists(_) => None,
                ProbeDepth::Recall(target) => Some(target),
            },
            root_factor: params.root_factor,
            filter: None,
            cap: params.max_nprobe.unwrap_or(index.nlist).min(index.nlist),
            rank,
            include_payload: params.include_payload,
        })
    }
}

/// What a plan is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexShape {
    pub dim: usize,
    pub nlist: usize,
    pub metric: Metric,
    pub has_codes: bool,
    /// The index has a recall calibration (a target recall needs one).
    pub calibrated: bool,
    /// The re-rank factor of a query that names none: the build's measured
    /// one, else [`DEFAULT_RERANK`].
    pub rerank: usize,
    /// The `k` the build measured `rerank` at (0 where it measured none).
    pub rerank_k: usize,
}

/// `queries` checked (whole queries of `dim` finite values) and prepared
/// for the scan ([`Metric::prepare`]): unit-normalised copies under cosine
/// (the stored vectors are normalised at build time, so the scan's cosine is
/// `1 − dot`), unchanged otherwise.
///
/// # Errors
/// [`QueryError::DimensionMismatch`] naming the incomplete last query,
/// [`QueryError::NonFinite`], [`QueryError::NoDirection`] for a zero query
/// under cosine.
pub fn prepare_queries(
    metric: Metric,
    queries: &[f32],
    dim: usize,
) -> Result<Vec<f32>, QueryError> {
    if dim == 0 || !queries.len().is_multiple_of(dim) {
        return Err(QueryError::DimensionMismatch {
            query: queries.len() / dim.max(1),
            expected: dim,
            actual: queries.len() % dim.max(1),
        });
    }
    if let Some((i, &value)) = queries.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(QueryError::NonFinite {
            query: i / dim,
            position: i % dim,
            value,
        });
    }
    let mut prepared = queries.to_vec();
    if metric == Metric::Cosine {
        for (query, q) in prepared.chunks_exact_mut(dim).enumerate() {
            metric
                .prepare(q)
                .map_err(|_| QueryError::NoDirection { query })?;
        }
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> IndexShape {
        IndexShape {
            dim: 2,
            nlist: 8,
            metric: Metric::Cosine,
            has_codes: false,
            calibrated: false,
            rerank: DEFAULT_RERANK,
            rerank_k: 0,
        }
    }

    #[test]
    fn every_rule_is_checked_once_here() {
        let ok = SearchParams::default();
        let plan = |q: &[f32], p: &SearchParams| QueryPlan::new(q, p, shape()).map(|_| ());
        let with = |f: fn(&mut SearchParams)| {
            let mut p = SearchParams {
                nprobe: Some(4),
                ..ok.clone()
            };
            f(&mut p);
            p
        };
        let base = with(|_| ());
        assert_eq!(plan(&[1.0, 0.0], &base), Ok(()));
        assert_eq!(
            plan(&[1.0, 0.0, 1.0], &base),
            Err(QueryError::DimensionMismatch {
                query: 1,
                expected: 2,
                actual: 1
            })
        );
        assert!(matches!(
            plan(&[1.0, f32::NAN], &base),
            Err(QueryError::NonFinite {
                query: 0,
                position: 1,
                ..
            })
        ));
        assert_eq!(
            plan(&[1.0, 1.0, 0.0, 0.0], &base),
            Err(QueryError::NoDirection { query: 1 })
        );
        let q = [1.0, 0.0];
        assert_eq!(plan(&q, &with(|p| p.k = 0)), Err(QueryError::InvalidK));
        assert_eq!(
            plan(&q, &with(|p| p.nprobe = Some(9))).map_err(|e| e.code()),
            Err("nprobe_out_of_range")
        );
        assert_eq!(
            plan(&q, &with(|p| p.nprobe = Some(0))).map_err(|e| e.code()),
            Err("nprobe_out_of_range")
        );
        assert_eq!(
            plan(&q, &with(|p| p.root_factor = 9)).map_err(|e| e.code()),
            Err("root_factor_out_of_range")
        );
        assert_eq!(plan(&q, &with(|p| p.root_factor = 8)), Ok(()));
        assert_eq!(
            plan(&q, &with(|p| p.max_nprobe = Some(3))).map_err(|e| e.code()),
            Err("max_nprobe_out_of_range")
        );
        assert_eq!(
            plan(&q, &with(|p| p.max_nprobe = Some(9))).map_err(|e| e.code()),
            Err("max_nprobe_out_of_range")
        );
        assert_eq!(plan(&q, &with(|p| p.max_nprobe = Some(8))), Ok(()));
        for bad in [0.0, -0.1, 1.01, f64::NAN] {
            let mut p = with(|_| ());
            p.target_recall = Some(bad);
            assert_eq!(
                plan(&q, &p).map_err(|e| e.code()),
                Err("target_recall_out_of_range"),
                "{bad}"
            );
        }
        // A target needs a calibration; under one, max_nprobe may be below
        // nprobe's default.
        let mut target = with(|p| p.max_nprobe = Some(2));
        target.target_recall = Some(0.9);
        assert_eq!(
            plan(&q, &target),
            Err(QueryError::NprobeAndTarget {
                nprobe: 4,
                target: 0.9
            })
        );
        target.nprobe = None;
        assert_eq!(plan(&q, &target), Err(QueryError::NotCalibrated));
        let calibrated = IndexShape {
            calibrated: true,
            ..shape()
        };
        assert!(QueryPlan::new(&q, &target, calibrated).is_ok());
    }

    #[test]
    fn naming_neither_probes_for_the_default_recall_where_the_index_is_calibrated() {
        let q = [1.0, 0.0];
        let neither = SearchParams::default();
        let calibrated = IndexShape {
            calibrated: true,
            ..shape()
        };
        let resolved = |p: &SearchParams, s: IndexShape| {
            let plan = QueryPlan::new(&q, p, s).unwrap();
            (plan.nprobe, plan.target)
        };
        assert_eq!(
            neither.probe(calibrated),
            Ok(ProbeDepth::Recall(DEFAULT_TARGET_RECALL))
        );
        assert_eq!(
            resolved(&neither, calibrated),
            (8, Some(DEFAULT_TARGET_RECALL))
        );
        // Without a calibration: DEFAULT_NPROBE lists, at most nlist (8 here).
        assert_eq!(neither.probe(shape()), Ok(ProbeDepth::Lists(8)));
        assert_eq!(resolved(&neither, shape()), (8, None));
        let wide = IndexShape {
            nlist: 1000,
            ..shape()
        };
        assert_eq!(resolved(&neither, wide), (DEFAULT_NPROBE, None));
        // Either one named is what is used.
        let lists = SearchParams {
            nprobe: Some(3),
            ..neither.clone()
        };
        assert_eq!(resolved(&lists, calibrated), (3, None));
        let target = SearchParams {
            target_recall: Some(0.8),
            ..neither
        };
        assert_eq!(resolved(&target, calibrated), (8, Some(0.8)));
    }

    #[test]
    fn a_query_naming_no_rerank_uses_the_index_s_own() {
        let q = [1.0, 0.0];
        let coded = IndexShape {
            has_codes: true,
            rerank: 7,
            rerank_k: 10,
            ..shape()
        };
        let rank = |p: &SearchParams, s: IndexShape| QueryPlan::new(&q, p, s).unwrap().rank;
        let neither = SearchParams::default();
        assert_eq!(rank(&neither, coded), RankMode::Codes { rerank: 7 });
        // A smaller k keeps the 70 candidates measured at k = 10; a larger
        // one the factor.
        for (k, rerank) in [(3, 24), (1, 70), (20, 7), (100, 7)] {
            let p = SearchParams {
                k,
                ..SearchParams::default()
            };
            assert_eq!(rank(&p, coded), RankMode::Codes { rerank }, "k = {k}");
        }
        // Unmeasured: DEFAULT_RERANK whatever k is.
        let unmeasured = IndexShape {
            has_codes: true,
            ..shape()
        };
        let p = SearchParams {
            k: 1,
            ..SearchParams::default()
        };
        assert_eq!(
            rank(&p, unmeasured),
            RankMode::Codes {
                rerank: DEFAULT_RERANK
            }
        );
        for named in [0, 2] {
            let p = SearchParams {
                rerank: Some(named),
                ..SearchParams::default()
            };
            assert_eq!(rank(&p, coded), RankMode::Codes { rerank: named });
        }
        // Without codes the scan is exact, whatever is named.
        assert_eq!(rank(&neither, shape()), RankMode::Exact);
    }

    #[test]
    fn cosine_queries_are_unit_normalised_and_others_kept() {
        let got = prepare_queries(Metric::Cosine, &[3.0, 4.0], 2).unwrap();
        assert!((got[0] - 0.6).abs() < 1e-6 && (got[1] - 0.8).abs() < 1e-6);
        assert_eq!(
            prepare_queries(Metric::L2, &[3.0, 4.0], 2).unwrap(),
            [3.0, 4.0]
        );
    }
}
