//! The build's recall calibration (`calibration.json`,
//! [`crate::format::calibration`]): a held-out sample of the index's rows is
//! used as queries; their exact top-k over every row (each query's own row
//! left out) is gathered during the assignment pass that reads every row
//! anyway ([`GroundTruth::observe`]), with the list each neighbour was
//! assigned to; [`GroundTruth::finish`] then measures, per query, the gap
//! of each neighbour's list and the rank of that list, which give the
//! quantiles the probe's target recall uses and the recall at fixed
//! `nprobe`.
//!
//! In an index with codes, the same queries then measure the re-rank
//! factor the codes need ([`rerank_of`], [`measure_rerank`]): they are
//! searched on the written postings with re-rank 0, and the factor is the
//! smallest whose candidates keep the exact neighbours that a 64× re-rank
//! keeps. A query that names no re-rank uses it.
//!
//! Cost: one dot product per (query, row), on rayon: on a CPU with
//! AVX-512 VNNI, from 8-bit codes with only the pairs that could enter a
//! top-k scored again in f32 (`builder::int8_screen`, the same answer in
//! 0.4–0.6 of the time); else in the k-means assignment's packed kernel
//! where the CPU has one (the queries packed as its panels, a `Nearest`
//! fold keeping each query's top-k; SGEMM tiles elsewhere). The sample is
//! sized so that at most [`MAX_MULTIPLY_ADDS`] are computed (at least
//! [`MIN_QUERIES`] queries), whichever path runs, so that the calibration
//! does not depend on the CPU.

use super::error::BuildError;
use super::int8_screen::{self, ScreenPanels, ScreenPath, ScreenRows};
use super::target_stops::{StopSearch, nearest_first, stop_recalls};
use crate::distance::{Metric, squared_norms};
use crate::format::calibration::{
    CALIBRATION_FORMAT_VERSION, Calibration, FEATURE_LEAF_DISTANCE_GAP, RecallPoint, TargetStop,
};
use crate::format::definition::IndexDefinition;
use crate::format::snapshot::Snapshot;
use crate::index::{Index, SearchParams};
use crate::kmeans::assign::{Fold, Kernel, Panels, Threshold};
use crate::kmeans::{Hierarchy, LeafPanels};
use crate::probe::load::IndexOptions;
use crate::quant::Quantizer;
use object_store::ObjectStore;
use object_store::path::Path;
use rayon::prelude::*;
use std::sync::Arc;

/// Calibration queries by default: ±0.005 on a mean recall near 0.95.
pub const DEFAULT_CALIBRATION_QUERIES: usize = 1000;
/// The most multiply-adds the calibration spends (queries × rows × dim):
/// 4·10¹⁰, about 0.45–0.6 s in f32 on 2 AVX-512 cores (1000 queries over
/// 100k × 384, 312 over 1M × 128), 0.17–0.37 s through the int8 screen.
/// Larger tables get fewer queries.
pub const MAX_MULTIPLY_ADDS: u64 = 40_000_000_000;
/// The fewest queries a calibration uses when [`MAX_MULTIPLY_ADDS`] binds.
pub const MIN_QUERIES: usize = 300;
/// Quantiles kept of the neighbours' gaps (`neighbour-gaps` has one more).
pub const GAP_QUANTILES: usize = 1000;
/// The recall@k measured.
pub const CALIBRATION_K: usize = 10;
/// Most queries per rayon task: the packed panels (or one SGEMM) a row
/// tile streams past (large, so that each row tile is read for few of
/// them). Fewer where that
/// spreads the queries evenly over the pool's threads
/// ([`GroundTruth::observe`]).
const QUERY_CHUNK: usize = 256;
/// Rows per tile (a packed fold or an SGEMM): a tile stays in the L2
/// cache while every panel of queries passes over it.
const ROW_TILE: usize = 512;

/// How many of `asked` queries a calibration over `rows` rows of `dim`
/// dimensions uses, from a sample of `sample` rows.
pub fn queries_for(asked: usize, rows: u64, dim: usize, sample: usize) -> usize {
    if asked == 0 {
        return 0;
    }
    let per_query = rows.max(1).saturating_mul(dim.max(1) as u64);
    let by_cost = usize::try_from(MAX_MULTIPLY_ADDS / per_query).unwrap_or(usize::MAX);
    asked.min(by_cost.max(MIN_QUERIES)).min(sample)
}

/// Evenly spaced rows of a (seeded random) sample, as queries.
pub fn pick_queries(sample: &[f32], dim: usize, n: usize) -> Vec<f32> {
    let rows = sample.len() / dim.max(1);
    let n = n.min(rows);
    (0..n)
        .flat_map(|i| {
            let r = i * rows / n.max(1);
            sample[r * dim..(r + 1) * dim].iter().copied()
        })
        .collect()
}

/// One query's best rows so far: `(distance, list)`, ascending, at most
/// `k`, and their rowids (same order); its own row's rowid once seen (and
/// left out).
#[derive(Debug, Clone, Default)]
struct Best {
    top: Vec<(f32, u32)>,
    ids: Vec<i64>,
    own: Option<i64>,
}

/// One query's neighbours' list gaps (each neighbour's list distance less
/// the nearest list's, at least 0) and list ranks (0: the nearest list),
/// from its distances `dist` to every leaf (leaf `c` at `c`), ranked by
/// `(distance, cid)` as the probe ranks them.
fn list_gaps_and_ranks(dist: &[f32], best: &Best) -> (Vec<f32>, Vec<usize>) {
    let nlist = dist.len();
    let order = nearest_first(dist);
    let mut rank = vec![0usize; nlist];
    for (r, &c) in order.iter().enumerate() {
        rank[c as usize] = r;
    }
    let d1 = order.first().map_or(0.0, |&c| dist[c as usize]);
    let gaps = best
        .top
        .iter()
        .map(|&(_, l)| (dist[l as usize] - d1).max(0.0))
        .collect();
    let ranks = best.top.iter().map(|&(_, l)| rank[l as usize]).collect();
    (gaps, ranks)
}

impl Best {
    /// The distance a row must be below to enter: the k-th best so far.
    fn bound(&self, k: usize) -> f32 {
        if self.top.len() == k {
            self.top[k - 1].0
        } else {
            f32::INFINITY
        }
    }
}

/// A tile of rows whose dot products with a chunk of queries are computed.
struct Tile<'a> {
    /// The tile's rows onward (row-major).
    vectors: &'a [f32],
    /// The tile's rows' lists onward.
    lists: &'a [u32],
    /// The tile's rows' rowids onward.
    rowids: &'a [i64],
    /// The query chunk (row-major).
    queries: &'a [f32],
    dim: usize,
    k: usize,
}

impl Tile<'_> {
    /// Offers row i of the tile to query j at `distance(xnorms[i],
    /// qnorms[j], dots[i][j])`. Most rows are beyond every query's bound: a
    /// row's distances to all the queries are computed and compared in one
    /// pass over slices, without a branch or an index check (so that it
    /// vectorises), and only a row inside some bound is offered query by
    /// query. A row enters below the bound only: never at a NaN or infinite
    /// distance.
    fn offer(
        &self,
        dots: &[f32],
        norms: (&[f32], &[f32]),
        best: &mut [Best],
        bound: &mut [f32],
        distance: impl Fn(f32, f32, f32) -> f32,
    ) {
        let nq = best.len();
        let (xnorms, qnorms) = norms;
        for ((i, row), &xn) in dots.chunks_exact(nq).enumerate().zip(xnorms) {
            let inside = row
                .iter()
                .zip(qnorms)
                .zip(bound.iter())
                .fold(false, |any, ((&dot, &qn), &b)| {
                    any | (distance(xn, qn, dot) < b)
                });
            if !inside {
                continue;
            }
            for (j, (&dot, &qn)) in row.iter().zip(qnorms).enumerate() {
                self.push(i, j, distance(xn, qn, dot), &mut best[j], &mut bound[j]);
            }
        }
    }

    /// Row i of the tile into query j's top-k at distance `d`, where below
    /// the query's `bound` (never at a NaN or infinite distance), and the
    /// bound updated; the query's own row (bit-identical) is left out once.
    #[inline]
    fn push(&self, i: usize, j: usize, d: f32, best: &mut Best, bound: &mut f32) {
        let (dim, k) = (self.dim, self.k);
        if d.is_nan() || d >= *bound {
            return;
        }
        if best.own.is_none()
            && self.vectors[i * dim..(i + 1) * dim] == self.queries[j * dim..(j + 1) * dim]
        {
            best.own = Some(self.rowids[i]);
            return;
        }
        let at = best.top.partition_point(|e| e.0 <= d);
        best.top.insert(at, (d, self.lists[i]));
        best.top.truncate(k);
        best.ids.insert(at, self.rowids[i]);
        best.ids.truncate(k);
        *bound = best.bound(k);
    }
}

/// The packed kernel's fold of a row tile into a query chunk's top-k
/// ([`GroundTruth::observe`] on a CPU with one): the queries are the
/// panels' lanes, the tile's rows the points. A lane leaves the registers
/// only below its query's bound, shifted by the row's own term; the
/// distance is then computed and checked again exactly.
struct Nearest<'a> {
    tile: Tile<'a>,
    /// Squared norms of the tile's rows.
    xnorms: &'a [f32],
    best: &'a mut [Best],
    /// Each query's bound, padded with −∞ to the panels' lanes.
    bound: &'a mut [f32],
    metric: Metric,
}

impl Nearest<'_> {
    /// The row's term of its distances: a rank score `s` (L2 `‖q‖² − 2·x·q`,
    /// else `−x·q`) is the distance `s + term` (L2 then clamped at 0).
    #[inline(always)]
    fn term(&self, r: usize) -> f32 {
        match self.metric {
            Metric::L2 => self.xnorms[r],
            Metric::InnerProduct => 0.0,
            Metric::Cosine => 1.0,
        }
    }
}

impl Fold for Nearest<'_> {
    #[inline(always)]
    fn threshold(&self, r: usize, j0: usize) -> Threshold<'_> {
        Threshold::Lanes(&self.bound[j0..], self.term(r))
    }

    #[inline]
    fn offer(&mut self, r: usize, j: usize, s: f32) {
        let d = match self.metric {
            Metric::L2 => (s + self.term(r)).max(0.0),
            _ => s + self.term(r),
        };
        self.tile
            .push(r, j, d, &mut self.best[j], &mut self.bound[j]);
    }
}

/// A chunk of queries packed for a kernel that folds each row tile into
/// a [`Nearest`]: the int8 screen over the coded rows, or the CPU's packed
/// f32 kernel.
enum Packed<'a> {
    Screen(ScreenPath, &'a ScreenRows, ScreenPanels<'a>),
    F32(Panels<'a>),
}

impl Packed<'_> {
    /// The queries with their padding, as the bounds must cover them.
    fn padded(&self) -> usize {
        match self {
            Packed::Screen(_, _, screen) => screen.padded(),
            Packed::F32(panels) => panels.padded(),
        }
    }
}

/// The exact top-k of the calibration queries, built up batch by batch.
#[derive(Debug)]
pub struct GroundTruth {
    queries: Vec<f32>,
    /// Squared norms of the queries (L2).
    norms: Vec<f32>,
    dim: usize,
    k: usize,
    metric: Metric,
    best: Vec<Best>,
    rows: u64,
    /// The rows observed in each list (list `c` at `c`).
    list_rows: Vec<u64>,
    /// The dot products' kernel: the CPU's packed one where it has one
    /// (a [`Nearest`] fold), else SGEMM tiles.
    kernel: Kernel,
    /// The int8 screen in front of f32 scores, where the CPU runs one fast
    /// ([`int8_screen`]): the same answer in 0.4–0.6 of the f32 kernel's
    /// time (its multiply-adds cost a quarter; the rescored pairs and the
    /// rows' coding the rest). Used instead of `kernel` when set.
    screen: Option<ScreenPath>,
    /// The last rows the screen coded: their memory, for the next.
    coded: Option<ScreenRows>,
    /// Wall time spent in [`GroundTruth::observe`] so far.
    spent: std::time::Duration,
}

impl GroundTruth {
    /// For `queries` (row-major, prepared for `metric`, each one a row of
    /// the table) and recall@`k`.
    pub fn new(queries: Vec<f32>, dim: usize, k: usize, metric: Metric) -> Self {
        let n = queries.len() / dim.max(1);
        GroundTruth {
            norms: squared_norms(&queries, dim),
            queries,
            dim,
            k,
            metric,
            best: vec![Best::default(); n],
            rows: 0,
            list_rows: Vec::new(),
            kernel: Kernel::detect(),
            screen: ScreenPath::detect().filter(|_| dim <= int8_screen::MAX_DIM),
            coded: None,
            spent: std::time::Duration::ZERO,
        }
    }

    /// Queries measured.
    pub fn len(&self) -> usize {
        self.best.len()
    }

    /// True with no query.
    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }

    /// Take rows `vectors` (prepared, row-major), assigned to `lists`, with
    /// their `rowids`. The
    /// queries are split evenly over the pool's threads (312 queries on 2
    /// threads: 156 each, where chunks of 256 left one thread 56), at most
    /// `QUERY_CHUNK` (256) a task. The answer does not depend on the split: each
    /// query takes the rows in order, and both kernels sum each dot product
    /// along the dimensions in the same order whatever the number of
    /// queries (the packed kernel in the query's own lane).
    pub fn observe(&mut self, vectors: &[f32], lists: &[u32], rowids: &[i64]) {
        let start = std::time::Instant::now();
        let threads = rayon::current_num_threads().max(1);
        let chunk = self.best.len().div_ceil(threads).clamp(1, QUERY_CHUNK);
        self.observe_in_chunks(vectors, lists, rowids, chunk);
        self.spent += start.elapsed();
    }

    /// Wall time spent observing rows so far (within the assignment pass).
    pub fn spent(&self) -> std::time::Duration {
        self.spent
    }

    /// [`GroundTruth::observe`] with `chunk` queries a task.
    fn observe_in_chunks(&mut self, vectors: &[f32], lists: &[u32], rowids: &[i64], chunk: usize) {
        let dim = self.dim;
        self.rows += lists.len() as u64;
        for &l in lists {
            let l = l as usize;
            if l >= self.list_rows.len() {
                self.list_rows.resize(l + 1, 0);
            }
            self.list_rows[l] += 1;
        }
        let xnorms = squared_norms(vectors, dim);
        let (metric, k, kernel, screen) = (self.metric, self.k, self.kernel, self.screen);
        let coded = screen.map(|_| {
            let mut rows = self.coded.take().unwrap_or_default();
            rows.fill(vectors, dim);
            rows
        });
        self.best
            .par_chunks_mut(chunk)
            .zip(self.queries.par_chunks(chunk * dim))
            .zip(self.norms.par_chunks(chunk))
            .for_each(|((best, q), qnorms)| {
                // Cosine rows and queries are unit vectors: the distance is
                // 1 − x·q, ranked as the inner product.
                let rank_metric = match metric {
                    Metric::Cosine => Metric::InnerProduct,
                    other => other,
                };
                let packed = match screen.zip(coded.as_ref()) {
                    Some((path, rows)) => Some(Packed::Screen(
                        path,
                        rows,
                        ScreenPanels::new(q, dim, rank_metric),
                    )),
                    None => Panels::new(kernel, q, dim, rank_metric).map(Packed::F32),
                };
                let nq = best.len();
                // Each query's k-th distance so far (infinite until k rows),
                // padded with −∞ to the packed panels' lanes.
                let padded = packed.as_ref().map_or(nq, Packed::padded);
                let mut bound = vec![f32::NEG_INFINITY; padded];
                for (b, best) in bound.iter_mut().zip(best.iter()) {
                    *b = best.bound(k);
                }
                let mut out = match packed {
                    Some(_) => Vec::new(),
                    None => vec![0f32; ROW_TILE * nq],
                };
                for (t, (x, xn)) in vectors
                    .chunks(ROW_TILE * dim)
                    .zip(xnorms.chunks(ROW_TILE))
                    .enumerate()
                {
                    let tile = Tile {
                        vectors: &vectors[t * ROW_TILE * dim..],
                        lists: &lists[t * ROW_TILE..],
                        rowids: &rowids[t * ROW_TILE..],
                        queries: q,
                        dim,
                        k,
                    };
                    if let Some(packed) = &packed {
                        let mut fold = Nearest {
                            tile,
                            xnorms: xn,
                            best: &mut *best,
                            bound: &mut bound,
                            metric,
                        };
                        match packed {
                            Packed::Screen(path, rows, screen) => {
                                screen.fold(*path, rows, t * ROW_TILE, x, &mut fold)
                            }
                            Packed::F32(panels) => panels.fold(x, &mut fold),
                        }
                        continue;
                    }
                    let m = xn.len();
                    let out = &mut out[..m * nq];
                    // out[i][j] = x_i · q_j (x: m×dim row-major, qᵀ: dim×nq).
                    // SAFETY: x holds m·dim, q nq·dim and out m·nq f32; the
                    // strides below stay inside them.
                    unsafe {
                        matrixmultiply::sgemm(
                            m,
                            dim,
                            nq,
                            1.0,
                            x.as_ptr(),
                            dim as isize,
                            1,
                            q.as_ptr(),
                            1,
                            dim as isize,
                            0.0,
                            out.as_mut_ptr(),
                            nq as isize,
                            1,
                        );
                    }
                    let norms = (xn, qnorms);
                    match metric {
                        Metric::L2 => tile.offer(out, norms, best, &mut bound, |xn, qn, dot| {
                            (xn + qn - 2.0 * dot).max(0.0)
                        }),
                        Metric::InnerProduct => {
                            tile.offer(out, norms, best, &mut bound, |_, _, dot| -dot)
                        }
                        Metric::Cosine => {
                            tile.offer(out, norms, best, &mut bound, |_, _, dot| 1.0 - dot)
                        }
                    }
                }
            });
        self.coded = coded;
    }

    /// The calibration over `hierarchy`'s lists: each neighbour's list gap
    /// and rank from its query's leaf distances (without `rerank`: that is
    /// measured on the written postings, [`measure_rerank`]); and the
    /// queries with their neighbours' rowids, what that measurement needs.
    pub fn finish(self, hierarchy: &Hierarchy) -> (Calibration, Neighbours) {
        let (dim, nlist) = (self.dim, hierarchy.nlist());
        // The leaf distances the probe ranks its lists by.
        let panels = LeafPanels::new(&hierarchy.leaves, dim);
        let per_query = panels.par_map(hierarchy.metric, &self.queries, 0..nlist, |i, dist| {
            list_gaps_and_ranks(dist, &self.best[i])
        });
        let mut gaps: Vec<f32> = per_query.iter().flat_map(|(g, _)| g.clone()).collect();
        gaps.sort_by(f32::total_cmp);
        let quantiles = GAP_QUANTILES.min(gaps.len().saturating_sub(1)).max(1);
        let neighbour_gaps = (0..=quantiles)
            .map(|i| {
                let at = i * gaps.len().saturating_sub(1) / quantiles;
                gaps.get(at).copied().unwrap_or(0.0)
            })
            .collect();
        let target_stops = self.target_stops(hierarchy, &panels, &per_query);
        let mut ranks: Vec<usize> = per_query.iter().flat_map(|(_, r)| r.clone()).collect();
        ranks.sort_unstable();
        let pairs = (self.best.len() * self.k).max(1) as f64;
        let recall_by_nprobe = nprobe_grid(nlist)
            .into_iter()
            .map(|p| RecallPoint {
                nprobe: p as u32,
                recall: ranks.partition_point(|&r| r < p) as f64 / pairs,
            })
            .collect();
        let calibration = Calibration {
            format_version: CALIBRATION_FORMAT_VERSION,
            k: self.k as u32,
            queries: self.best.len() as u32,
            rows: self.rows,
            feature: FEATURE_LEAF_DISTANCE_GAP.to_string(),
            neighbour_gaps,
            recall_by_nprobe,
            rerank: None,
            target_stops,
        };
        let neighbours = Neighbours {
            k: self.k,
            ids: self.best.iter().map(|b| b.ids.clone()).collect(),
            own: self.best.iter().map(|b| b.own).collect(),
            queries: self.queries,
        };
        (calibration, neighbours)
    }

    /// The stop of each target recall ([`super::target_stops`]), from each
    /// query's neighbours' `(gaps, ranks)`: a second pass over the leaf
    /// distances counts the lists and rows each candidate probes, a few
    /// hundred queries at a time.
    fn target_stops(
        &self,
        hierarchy: &Hierarchy,
        panels: &LeafPanels,
        per_query: &[(Vec<f32>, Vec<usize>)],
    ) -> Vec<TargetStop> {
        const QUERIES_A_PASS: usize = 256;
        let nlist = hierarchy.nlist();
        let found: Vec<(f32, usize)> = per_query
            .iter()
            .flat_map(|(g, r)| g.iter().copied().zip(r.iter().copied()))
            .collect();
        let pairs = self.best.len() * self.k;
        let search = StopSearch::new(&found, pairs, &nprobe_grid(nlist), stop_recalls());
        let mut rows = self.list_rows.clone();
        rows.resize(nlist, 0);
        let mut sums = search.zero();
        for queries in self.queries.chunks(self.dim.max(1) * QUERIES_A_PASS) {
            let each = panels.par_map(hierarchy.metric, queries, 0..nlist, |_, dist| {
                let mut one = search.zero();
                search.add(&mut one, dist, &rows);
                one
            });
            for one in each {
                for (sum, c) in sums.iter_mut().zip(one) {
                    sum.0 += c.0;
                    sum.1 += c.1;
                }
            }
        }
        search.choose(&sums, self.best.len())
    }
}

/// The calibration queries and the rowids of their exact top-k (each
/// query's own row left out), from [`GroundTruth::finish`]: what
/// [`measure_rerank`] compares the codes' ranking with.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbours {
    /// The queries, row-major, prepared for the metric.
    pub queries: Vec<f32>,
    /// The `k` of recall@k.
    pub k: usize,
    /// Each query's exact top-k rowids, nearest first.
    pub ids: Vec<Vec<i64>>,
    /// Each query's own row (left out of its top-k), where it was seen.
    pub own: Vec<Option<i64>>,
}

impl Neighbours {
    /// At most `n` of the queries, evenly spaced, with their neighbours.
    pub fn spaced(&self, n: usize) -> Neighbours {
        let (all, dim) = (self.ids.len(), self.queries.len() / self.ids.len().max(1));
        let picked: Vec<usize> = (0..all.min(n)).map(|i| i * all / all.min(n)).collect();
        Neighbours {
            queries: picked
                .iter()
                .flat_map(|&q| &self.queries[q * dim..(q + 1) * dim])
                .copied()
                .collect(),
            k: self.k,
            ids: picked.iter().map(|&q| self.ids[q].clone()).collect(),
            own: picked.iter().map(|&q| self.own[q]).collect(),
        }
    }
}

/// Re-rank factors [`measure_rerank`] chooses from, ascending; the last is
/// the deepest measured.
pub const RERANK_LADDER: [u32; 14] = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 64];

/// The share of the neighbours found by the deepest factor of
/// [`RERANK_LADDER`] that the chosen factor must find too: a re-rank loses
/// at most 0.1 % of what a 64× re-rank keeps.
pub const RERANK_KEEPS: f64 = 0.999;

/// The most calibration queries [`rerank_of`] searches (evenly spaced):
/// 5,000 neighbours, in which the 0.1 % a factor may lose is 5. Each one
/// keeps [`rerank_depth`] candidates, so the measurement costs about what
/// this many queries at 64 times the re-rank do.
pub const RERANK_QUERIES: usize = 500;

/// How deep a search [`measure_rerank`] reads: the best `k × 64 + 1`
/// candidates of each query by the codes' estimate (one more for the
/// query's own row).
pub fn rerank_depth(k: usize) -> usize {
    let deepest = RERANK_LADDER[RERANK_LADDER.len() - 1] as usize;
    k * deepest + 1
}

/// The re-rank factor of the codes a build has just written into `folder`
/// (postings and their table documents, not yet `calibration.json` or
/// `index.json`): the calibration queries searched on those postings with
/// re-rank 0 at the index's default depth (the calibration's default
/// target recall, [`rerank_depth`] candidates each), then
/// [`measure_rerank`]. Reads each probed list's codes once (one batch),
/// no vector.
///
/// # Errors
/// [`BuildError::Measure`] for a failed read of the written postings.
#[allow(clippy::too_many_arguments)]
pub async fn rerank_of(
    store: &Arc<dyn ObjectStore>,
    folder: &Path,
    definition: &IndexDefinition,
    hierarchy: &Hierarchy,
    quantizer: &Quantizer,
    calibration: &Calibration,
    neighbours: &Neighbours,
) -> Result<Option<u32>, BuildError> {
    let measure = |e: &dyn std::fmt::Display| BuildError::Measure {
        path: folder.to_string(),
        reason: e.to_string(),
    };
    let snapshot = Snapshot::unpublished(
        store.as_ref(),
        folder,
        definition.clone(),
        hierarchy.clone(),
        Some(quantizer.clone()),
        Some(calibration.clone()),
    )
    .await
    .map_err(|e| measure(&e))?;
    let index = Index::from_snapshot(Arc::clone(store), snapshot, IndexOptions::default());
    let neighbours = &neighbours.spaced(RERANK_QUERIES);
    let params = SearchParams {
        k: rerank_depth(neighbours.k),
        rerank: Some(0),
        ..SearchParams::default()
    };
    let results = index
        .search_batch(&neighbours.queries, &params)
        .await
        .map_err(|e| measure(&e))?;
    let ranked: Vec<Vec<i64>> = results
        .into_iter()
        .map(|r| r.hits.into_iter().map(|h| h.rowid).collect())
        .collect();
    Ok(measure_rerank(neighbours, &ranked))
}

/// The re-rank factor the codes need: `ranked[q]` is query `q`'s
/// candidates by the codes' estimate, best first (a search of the written
/// postings with re-rank 0 and [`rerank_depth`] candidates). An exact
/// neighbour among a query's best `r × k` candidates is in its answer
/// after an exact re-rank of them, so the neighbours within `r × k` are
/// what factor `r` keeps. The smallest factor of [`RERANK_LADDER`] that
/// keeps a share [`RERANK_KEEPS`] of what the deepest keeps; `None` when
/// the deepest keeps nothing (nothing measured). Each query's own row is
/// left out of its candidates, as it was of its neighbours. Pure.
pub fn measure_rerank(neighbours: &Neighbours, ranked: &[Vec<i64>]) -> Option<u32> {
    let k = neighbours.k.max(1);
    // Where each neighbour ranks among its query's candidates, the own row
    // left out; beyond them, never kept.
    let mut ranks: Vec<usize> = Vec::new();
    // A query's k neighbours are looked for among its candidates directly
    // (k is small): no map of every candidate is built.
    for ((ids, own), candidates) in neighbours.ids.iter().zip(&neighbours.own).zip(ranked) {
        let skip = own.and_then(|o| candidates.iter().position(|&c| c == o));
        let others = candidates
            .iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != skip)
            .map(|(_, c)| c);
        ranks.extend(
            others
                .enumerate()
                .filter(|(_, c)| ids.contains(c))
                .map(|(at, _)| at),
        );
    }
    ranks.sort_unstable();
    let kept = |r: u32| ranks.partition_point(|&at| at < r as usize * k);
    let deepest = kept(RERANK_LADDER[RERANK_LADDER.len() - 1]);
    if deepest == 0 {
        return None;
    }
    RERANK_LADDER
        .iter()
        .copied()
        .find(|&r| kept(r) as f64 >= RERANK_KEEPS * deepest as f64)
}

/// 1, 2, 3, 4, 6, 8, 12, 16, … (powers of two and their 1.5×) up to
/// `nlist`, and `nlist`.
pub fn nprobe_grid(nlist: usize) -> Vec<usize> {
    let mut grid = Vec::new();
    let mut p = 1usize;
    while p < nlist {
        grid.push(p);
        if p >= 2 && p + p / 2 < nlist {
            grid.push(p + p / 2);
        }
        p *= 2;
    }
    grid.push(nlist.max(1));
    grid.dedup();
    grid
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaves at 4.5 and 14.5 on a line, under one root.
    fn two_lists() -> Hierarchy {
        Hierarchy {
            dim: 1,
            metric: Metric::L2,
            roots: vec![10.0],
            leaves: vec![4.5, 14.5],
            cid_offsets: vec![0, 2],
        }
    }

    #[test]
    fn the_grid_rises_to_nlist() {
        assert_eq!(nprobe_grid(1), vec![1]);
        assert_eq!(nprobe_grid(10), vec![1, 2, 3, 4, 6, 8, 10]);
    }

    #[test]
    fn ground_truth_is_the_exact_top_k_without_the_query_itself() {
        // Rows on a line at 0..20, lists by tens; queries are rows 3 and 15.
        let data: Vec<f32> = (0..20).map(|i| i as f32).collect();
        let lists: Vec<u32> = (0..20).map(|i| i / 10).collect();
        // Rowids 100 above the row.
        let rowids: Vec<i64> = (100..120).collect();
        let observed = |kernel: Engine| {
            let mut gt = GroundTruth::new(vec![3.0, 15.0], 1, 3, Metric::L2);
            kernel.set(&mut gt);
            // In two batches, as the assignment pass gives them.
            gt.observe(&data[..7], &lists[..7], &rowids[..7]);
            gt.observe(&data[7..], &lists[7..], &rowids[7..]);
            assert_eq!(
                gt.best[0].top,
                vec![(1.0, 0), (1.0, 0), (4.0, 0)],
                "{kernel:?}"
            );
            assert_eq!(
                gt.best[1].top,
                vec![(1.0, 1), (1.0, 1), (4.0, 1)],
                "{kernel:?}"
            );
            // Rows 2 and 4 (tied, in the order seen), then 1 / 5.
            assert_eq!(gt.best[0].ids, vec![102, 104, 101], "{kernel:?}");
            assert_eq!(gt.best[0].own, Some(103), "{kernel:?}");
            gt
        };
        for kernel in engines() {
            observed(kernel);
        }
        let (c, n) = observed(Engine::F32(Kernel::detect())).finish(&two_lists());
        assert_eq!(n.ids, vec![vec![102, 104, 101], vec![114, 116, 113]]);
        assert_eq!(n.own, vec![Some(103), Some(115)]);
        assert_eq!((n.k, n.queries.as_slice()), (3, [3.0, 15.0].as_slice()));
        // One of two: the first, whole.
        let one = n.spaced(1);
        assert_eq!(
            (one.queries, one.ids, one.own),
            (vec![3.0], vec![vec![102, 104, 101]], vec![Some(103)])
        );
        assert_eq!(n.spaced(5), n);
        assert_eq!((c.k, c.queries, c.rows), (3, 2, 20));
        // Every neighbour is in its query's nearest list: gap 0, recall 1 at nprobe 1.
        assert_eq!(c.neighbour_gaps.last(), Some(&0.0));
        assert_eq!(c.recall_by_nprobe[0].recall, 1.0);
    }

    #[test]
    fn the_answer_does_not_depend_on_how_the_queries_are_split() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let dim = 37;
        let data: Vec<f32> = (0..3000 * dim)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let lists: Vec<u32> = (0..3000).map(|i| i % 7).collect();
        let rowids: Vec<i64> = (0..3000).collect();
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            let queries = pick_queries(&data, dim, 301);
            let run = |engine: Engine, chunk: usize| {
                let mut gt = GroundTruth::new(queries.clone(), dim, 10, metric);
                engine.set(&mut gt);
                // Two batches, the second across row tiles.
                let (a, b) = rowids.split_at(700);
                gt.observe_in_chunks(&data[..700 * dim], &lists[..700], a, chunk);
                gt.observe_in_chunks(&data[700 * dim..], &lists[700..], b, chunk);
                gt.best.iter().map(|b| b.top.clone()).collect::<Vec<_>>()
            };
            let reference = run(Engine::F32(Kernel::Sgemm), QUERY_CHUNK);
            for kernel in engines() {
                let whole = run(kernel, QUERY_CHUNK);
                assert!(whole.iter().all(|t| t.len() == 10));
                for chunk in [1, 7, 151] {
                    assert_eq!(
                        run(kernel, chunk),
                        whole,
                        "{metric:?}, {kernel:?}, {chunk} queries a task"
                    );
                }
                // Every kernel finds the same neighbours (random data: no
                // ties), at distances equal to f32 rounding: each dot
                // product of `dim` terms of magnitude at most 1 is within
                // dim·ε·(‖x‖² + ‖q‖²)/2 ≤ dim²·ε of the exact one, twice that
                // under L2.
                let tolerance = 2.0 * (dim * dim) as f32 * f32::EPSILON;
                for (q, (a, b)) in whole.iter().zip(&reference).enumerate() {
                    assert_eq!(
                        a.iter().map(|e| e.1).collect::<Vec<_>>(),
                        b.iter().map(|e| e.1).collect::<Vec<_>>(),
                        "{metric:?}, {kernel:?}, query {q}: lists"
                    );
                    for (x, y) in a.iter().zip(b) {
                        assert!(
                            (x.0 - y.0).abs() <= tolerance,
                            "{metric:?}, {kernel:?}, query {q}: {} against {}",
                            x.0,
                            y.0
                        );
                    }
                }
                println!("calibration ground truth: the {kernel:?} kernel ran ({metric:?})");
            }
        }
    }

    /// How a test's ground truth scores its pairs.
    #[derive(Debug, Clone, Copy)]
    enum Engine {
        F32(Kernel),
        Screened(ScreenPath),
    }

    impl Engine {
        /// `gt` scoring its pairs this way.
        fn set(self, gt: &mut GroundTruth) {
            (gt.kernel, gt.screen) = match self {
                Engine::F32(kernel) => (kernel, None),
                Engine::Screened(path) => (Kernel::Sgemm, Some(path)),
            };
        }
    }

    /// The f32 kernels and the int8 screen's paths this CPU runs.
    fn engines() -> Vec<Engine> {
        let kernels = [Kernel::Sgemm, Kernel::PackedAvx2, Kernel::PackedAvx512]
            .into_iter()
            .filter(|k| k.is_supported())
            .map(Engine::F32);
        let screens = [ScreenPath::Scalar, ScreenPath::Avx512Vnni]
            .into_iter()
            .filter(|p| p.is_supported())
            .map(Engine::Screened);
        kernels.chain(screens).collect()
    }

    #[test]
    fn neighbours_in_farther_lists_raise_the_gaps() {
        let data: Vec<f32> = (0..20).map(|i| i as f32).collect();
        let lists: Vec<u32> = (0..20).map(|i| i / 10).collect();
        // Query 9 has neighbours 8, 10, 7: one in list 1.
        let mut gt = GroundTruth::new(vec![9.0], 1, 3, Metric::L2);
        let rowids: Vec<i64> = (0..20).collect();
        gt.observe(&data, &lists, &rowids);
        let (c, _) = gt.finish(&two_lists());
        // d(9, 4.5)² = 20.25, d(9, 14.5)² = 30.25: gap 10 for one of three.
        assert_eq!(c.neighbour_gaps.last(), Some(&10.0));
        assert!((c.recall_by_nprobe[0].recall - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(c.recall_by_nprobe.last().map(|p| p.recall), Some(1.0));
    }

    #[test]
    fn the_rerank_is_the_smallest_factor_that_keeps_what_the_deepest_keeps() {
        // k = 2; query 0's neighbours 10 and 11, its own row 99.
        let truth = |own: Option<i64>| Neighbours {
            queries: vec![0.0],
            k: 2,
            ids: vec![vec![10, 11]],
            own: vec![own],
        };
        let ranked = |at: &[(usize, i64)], own_first: bool| {
            let mut c: Vec<i64> = (1000..1000 + 200).collect();
            for &(i, id) in at {
                c[i] = id;
            }
            if own_first {
                c.insert(0, 99);
            }
            vec![c]
        };
        // Both among the best 2: factor 1.
        let both = ranked(&[(0, 10), (1, 11)], true);
        assert_eq!(measure_rerank(&truth(Some(99)), &both), Some(1));
        // The own row is left out: without it the same ranking needs 1, with
        // it counted as a candidate (not the query's own) it would need 2.
        assert_eq!(measure_rerank(&truth(None), &both), Some(2));
        // 11 at place 9 (0-based) of the others: 10 candidates, factor 5.
        assert_eq!(
            measure_rerank(&truth(Some(99)), &ranked(&[(0, 10), (9, 11)], true)),
            Some(5)
        );
        // 11 beyond every candidate: the deepest keeps one, so does 1.
        assert_eq!(
            measure_rerank(&truth(Some(99)), &ranked(&[(0, 10)], true)),
            Some(1)
        );
        // Nothing found at all: nothing measured.
        assert_eq!(measure_rerank(&truth(Some(99)), &ranked(&[], true)), None);
        // Over many queries, a factor may lose a share 1 − RERANK_KEEPS.
        let n = 2000;
        let many = Neighbours {
            queries: vec![0.0; n],
            k: 1,
            ids: (0..n as i64).map(|q| vec![q]).collect(),
            own: vec![None; n],
        };
        // Every neighbour first, but one query's at place 40 (factor 64).
        let mut lists: Vec<Vec<i64>> = (0..n as i64).map(|q| vec![q, -1]).collect();
        lists[7] = (0..40).map(|i| -i - 1).chain([7]).collect();
        // One miss in 2000 is within the 0.1 % allowed: factor 1.
        assert_eq!(measure_rerank(&many, &lists), Some(1));
        // Three misses are not.
        for q in [8, 9] {
            lists[q] = (0..40).map(|i| -i - 1).chain([q as i64]).collect();
        }
        assert_eq!(measure_rerank(&many, &lists), Some(64));
    }
}
