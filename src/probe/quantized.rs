//! The quantised query path of an index with codes: score the codes of the
//! probed row groups (`scan_codes`), keep the best `rerank × k` candidates
//! of each query, then rank those ([`rank_codes`]) by their exact distance,
//! from the f32 vectors in memory or from the few `vector` data pages that
//! hold them ([`PagePlan`]: pure plan, one ranged read per file, pure decode
//! and rank); a filter's masks spare the pages without a match
//! ([`pruned_pages`]).
//!
//! A code estimates `<r, y>` for the residual `r = x − c` of a row to its
//! leaf `c` ([`crate::quant`]); with the exact `‖r‖²` it carries, the
//! estimated distance of query `q` is, per metric:
//!
//! | metric | y | estimate |
//! |---|---|---|
//! | L2 | `q − c` | `‖r‖² + ‖q − c‖² − 2·<r, y>` |
//! | inner product | `q` | `−(<c, q> + <r, y>)` |
//! | cosine (unit vectors) | `q` | `1 − (<c, q> + <r, y>)` |
//!
//! `y` is rotated as the codes are: `P·y = P·q − P·c`, with `P·c` computed
//! once per leaf at open and `P·q` once per query.

use super::ProbeError;
use super::load::{Fetched, FileRequest};
use super::rows::{DecodedRowGroup, FastCodes, ProbedRows};
use super::scan::probing_queries;
use crate::distance::{Metric, prefetch};
use crate::format::page_crc::checked_page;
use crate::format::postings_table::VECTOR_COLUMN;
use crate::kmeans::Hierarchy;
use crate::quant::Quantizer;
use crate::quant::fastscan::{self, Lut};
use crate::store::byte_ranges::{coalesce, slices_ref};
use crate::topk::{Candidates, TopK};
use arrow::buffer::BooleanBuffer;
use object_store::path::Path;
use parquet::file::page_index::offset_index::PageLocation;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// What a quantised scan reads besides the row groups: the quantiser, the
/// hierarchy, and every leaf rotated by the quantiser (`nlist × dim`).
#[derive(Debug, Clone, Copy)]
pub struct CodeScan<'a> {
    pub quantizer: &'a Quantizer,
    pub hierarchy: &'a Hierarchy,
    pub rotated_leaves: &'a [f32],
}

/// Every leaf of `hierarchy` rotated by `quantizer` (`nlist × dim`,
/// row-major), in parallel. CPU only.
pub fn rotate_leaves(quantizer: &Quantizer, hierarchy: &Hierarchy) -> Vec<f32> {
    let dim = hierarchy.dim;
    let mut out = vec![0.0; hierarchy.leaves.len()];
    out.par_chunks_mut(dim)
        .zip(hierarchy.leaves.par_chunks(dim))
        .for_each(|(o, leaf)| quantizer.rotate(leaf, o));
    out
}

/// Where a candidate was found: (index in `loaded`, row in the row group).
fn pack(group: usize, row: usize) -> u64 {
    ((group as u64) << 32) | row as u64
}

fn unpack(at: u64) -> (usize, usize) {
    ((at >> 32) as usize, (at & 0xffff_ffff) as usize)
}

/// The `keep` best candidates of every query of a batch by estimated
/// distance (`queries` row-major and prepared for the metric, `cids[q]` the
/// probed cids of query `q`) among the codes of the `loaded` row groups,
/// list-major as [`super::scan::scan_batch`]. Each candidate's
/// [`crate::topk::Neighbor::at`] says where it lies, for the re-rank.
/// `masks[g]`, when given, keeps only the rows of `loaded[g]` whose bit is
/// set; a sparse mask scores only those codes. Returns the selections and
/// the number of codes scored. CPU only.
///
/// # Errors
/// [`ProbeError::Decode`] for a row group without codes or with a code
/// buffer of the wrong length.
fn scan_codes(
    scan: CodeScan<'_>,
    paths: &[Path],
    rows: ProbedRows<'_>,
    keep: usize,
) -> Result<(Vec<TopK>, u64), ProbeError> {
    let (queries, cids, loaded, masks) = (rows.queries, rows.cids, rows.loaded, rows.masks);
    let dim = scan.hierarchy.dim;
    let width = scan.quantizer.code_bytes();
    let nq = cids.len();
    check_code_lengths(paths, loaded, width)?;
    // A fast-scan scheme's tables are the query's own, for every list.
    let luts: Option<Vec<Lut>> = queries
        .par_chunks(dim)
        .map(|q| scan.quantizer.query_lut(q))
        .collect();
    if let Some(luts) = luts {
        return Ok(scan_fast_codes(scan, rows, &luts, keep));
    }
    let (rotated, prepared) = rotated_queries(scan, queries);
    let probing = probing_queries(cids, loaded);
    let empty = || -> (Vec<TopK>, Vec<f32>, Vec<f32>, u64) {
        (
            (0..nq).map(|_| TopK::new(keep)).collect(),
            Vec::new(),
            vec![0.0; dim],
            0,
        )
    };
    let (tops, scored) = loaded
        .par_iter()
        .enumerate()
        .zip(&probing)
        .filter(|(_, qs)| !qs.is_empty())
        .fold(
            empty,
            |(mut tops, mut scores, mut y, mut scored), ((g, rg), qs)| {
                let codes = rg.codes.as_deref().unwrap_or_default();
                let mask = masks.get(g).and_then(Option::as_ref);
                let sparse = sparse_rows(mask);
                let keeps = |i: usize| mask.is_none_or(|m| m.value(i));
                if sparse.as_ref().is_some_and(Vec::is_empty) {
                    // No row of this list matches: nothing to prepare or score.
                    return (tops, scores, y, scored);
                }
                let c = rg.cid as usize;
                let leaf = &scan.hierarchy.leaves[c * dim..(c + 1) * dim];
                let leaf_rotated = &scan.rotated_leaves[c * dim..(c + 1) * dim];
                scores.resize(rg.rowids.len(), 0.0);
                for &q in qs {
                    let q = q as usize;
                    let query = &queries[q * dim..(q + 1) * dim];
                    let query_rotated = &rotated[q * dim..(q + 1) * dim];
                    let top = &mut tops[q];
                    match scan.hierarchy.metric {
                        Metric::L2 => {
                            for ((y, a), b) in y.iter_mut().zip(query_rotated).zip(leaf_rotated) {
                                *y = a - b;
                            }
                            let y_norm2: f32 = y.iter().map(|v| v * v).sum();
                            let prepared = scan.quantizer.prepare(&y);
                            let rows = score_rows(
                                scan.quantizer,
                                &prepared,
                                codes,
                                sparse.as_deref(),
                                &mut scores,
                            );
                            for i in rows.filter(|&i| keeps(i)) {
                                let code = &codes[i * width..(i + 1) * width];
                                let estimate = Quantizer::norm2(code) + y_norm2 - 2.0 * scores[i];
                                top.push_at(estimate, rg.rowids[i], pack(g, i));
                            }
                        }
                        metric => {
                            let rows = score_rows(
                                scan.quantizer,
                                &prepared[q],
                                codes,
                                sparse.as_deref(),
                                &mut scores,
                            );
                            let base: f32 = leaf.iter().zip(query).map(|(a, b)| a * b).sum();
                            let offset = if metric == Metric::Cosine { 1.0 } else { 0.0 };
                            for i in rows.filter(|&i| keeps(i)) {
                                top.push_at(offset - (base + scores[i]), rg.rowids[i], pack(g, i));
                            }
                        }
                    }
                    scored += sparse.as_ref().map_or(rg.rowids.len(), Vec::len) as u64;
                }
                (tops, scores, y, scored)
            },
        )
        .map(|(tops, _, _, scored)| (tops, scored))
        .reduce(
            || ((0..nq).map(|_| TopK::new(keep)).collect(), 0),
            |(mut a, sa), (b, sb)| {
                a.iter_mut().zip(b).for_each(|(x, y)| x.merge(y));
                (a, sa + sb)
            },
        );
    Ok((tops, scored))
}

/// The rows of a row group a scan scores one by one: the set bits of a
/// mask sparse enough (under a quarter of the rows) that one call per row
/// costs less than scoring them all; `None` to score every row (then
/// filtered by the mask, if any).
fn sparse_rows(mask: Option<&BooleanBuffer>) -> Option<Vec<usize>> {
    mask.filter(|m| m.count_set_bits() * 4 < m.len())
        .map(|m| m.set_indices().collect())
}

/// `scan_codes` for a fast-scan scheme, with each query's tables `luts`:
/// every probed list is scored for each query probing it by the fast-scan
/// kernel over its blocks (transposed by the first scan that needs them
/// and kept with the row group), or, under a sparse mask, row by row. CPU
/// only.
///
/// Each query's nearest probed list is scanned first, for all queries,
/// then the others, each query's selection starting with the bound its
/// nearest list gave ([`Candidates::empty_like`]). The lists come in one
/// order for a whole batch (and in cid order from storage), so without
/// this a query would offer most codes of its first lists to its
/// selection; the answers do not depend on it.
fn scan_fast_codes(
    scan: CodeScan<'_>,
    rows: ProbedRows<'_>,
    luts: &[Lut],
    keep: usize,
) -> (Vec<TopK>, u64) {
    let probing = nearest_first(scan, rows.queries, rows.loaded, rows.cids);
    let (mut tops, first) = scan_fast_phase(scan, rows, luts, &probing.nearest, || {
        (0..rows.cids.len())
            .map(|_| Candidates::new(keep))
            .collect()
    });
    tops.iter_mut().for_each(Candidates::settle);
    let (rest, others) = scan_fast_phase(scan, rows, luts, &probing.others, || {
        tops.iter().map(Candidates::empty_like).collect()
    });
    let tops = tops.into_iter().zip(rest).map(|(mut a, b)| {
        a.merge(b);
        a.into_top()
    });
    (tops.collect(), first + others)
}

/// The queries probing each loaded row group, with the distance from each
/// to the group's leaf (the list's own term of [`FastList`]): for the row
/// groups of each query's nearest probed cid (by that distance, then cid),
/// and for the others.
struct Probing {
    nearest: Vec<Vec<(u32, f32)>>,
    others: Vec<Vec<(u32, f32)>>,
}

/// [`Probing`] of a batch (`cids[q]` the probed cids of query `q`). CPU
/// only (parallel over row groups).
fn nearest_first(
    scan: CodeScan<'_>,
    queries: &[f32],
    loaded: &[Arc<DecodedRowGroup>],
    cids: &[&[u32]],
) -> Probing {
    let (dim, metric) = (scan.hierarchy.dim, scan.hierarchy.metric);
    let probing: Vec<Vec<(u32, f32)>> = probing_queries(cids, loaded)
        .into_par_iter()
        .zip(loaded)
        .map(|(qs, rg)| {
            let c = rg.cid as usize;
            let leaf = &scan.hierarchy.leaves[c * dim..(c + 1) * dim];
            qs.into_iter()
                .map(|q| {
                    let query = &queries[q as usize * dim..(q as usize + 1) * dim];
                    (q, metric.prepared_distance(query, leaf))
                })
                .collect()
        })
        .collect();
    let mut best = vec![(f32::INFINITY, u32::MAX); cids.len()];
    for (qs, rg) in probing.iter().zip(loaded) {
        for &(q, d) in qs {
            let b = &mut best[q as usize];
            if d.total_cmp(&b.0).then(rg.cid.cmp(&b.1)).is_lt() {
                *b = (d, rg.cid);
            }
        }
    }
    let (nearest, others) = probing
        .into_iter()
        .zip(loaded)
        .map(|(qs, rg)| {
            qs.into_iter()
                .partition(|&(q, _)| best[q as usize].1 == rg.cid)
        })
        .unzip();
    Probing { nearest, others }
}

/// One pass of [`scan_fast_codes`] over the (query, row group) pairs of
/// `probing`, each query's selection starting as `start` makes it.
/// Returns the selections and the number of codes scored.
fn scan_fast_phase(
    scan: CodeScan<'_>,
    rows: ProbedRows<'_>,
    luts: &[Lut],
    probing: &[Vec<(u32, f32)>],
    start: impl Fn() -> Vec<Candidates> + Sync + Send,
) -> (Vec<Candidates>, u64) {
    let (loaded, masks, metric) = (rows.loaded, rows.masks, scan.hierarchy.metric);
    let width = scan.quantizer.code_bytes();
    let empty = || -> (Vec<Candidates>, u64) { (start(), 0) };
    loaded
        .par_iter()
        .enumerate()
        .zip(probing)
        .filter(|(_, qs)| !qs.is_empty())
        .fold(empty, |(mut tops, mut scored), ((g, rg), qs)| {
            let codes = rg.codes.as_deref().unwrap_or_default();
            let mask = masks.get(g).and_then(Option::as_ref);
            let sparse = sparse_rows(mask);
            if sparse.as_ref().is_some_and(Vec::is_empty) {
                // No row of this list matches: nothing to score.
                return (tops, scored);
            }
            let fast = || {
                rg.fast_codes
                    .get_or_init(|| FastCodes::new(scan.quantizer, codes, rg.rowids.len(), metric))
            };
            let list = |&(q, to_leaf): &(u32, f32)| FastList {
                metric,
                query: q as usize,
                lut: &luts[q as usize],
                to_leaf,
                group: g,
                rowids: &rg.rowids,
            };
            match &sparse {
                Some(rows) => qs.iter().map(list).for_each(|list| {
                    let top = &mut tops[list.query];
                    fast_score_rows(list, codes, width, rows, top);
                }),
                None => qs.chunks(fastscan::QUERIES).for_each(|chunk| {
                    fast_scan_lists(chunk, list, fast(), mask, &mut tops);
                }),
            }
            scored += (sparse.as_ref().map_or(rg.rowids.len(), Vec::len) * qs.len()) as u64;
            (tops, scored)
        })
        .reduce(empty, |(mut a, sa), (b, sb)| {
            a.iter_mut().zip(b).for_each(|(x, y)| x.merge(y));
            (a, sa + sb)
        })
}

/// One list of a fast-scan scheme scored for one query.
struct FastList<'a> {
    metric: Metric,
    /// The query's place in the batch.
    query: usize,
    lut: &'a Lut,
    /// The query's distance to the list's leaf (`Metric::prepared_distance`).
    to_leaf: f32,
    group: usize,
    rowids: &'a [i64],
}

impl FastList<'_> {
    /// `(a, b)` of the estimate `a + base_i − b·sum_i` of row i (`base_i`
    /// its list term under L2, else 0), with `<q, r̂> ≈ bias + step·sum_i`.
    /// The list's own term is the query's distance to the leaf: `‖q − c‖²`
    /// under L2, `−<c, q>` (`1 − <c, q>` under cosine) otherwise.
    fn coefficients(&self) -> (f32, f32) {
        let (lut, to_leaf) = (self.lut, self.to_leaf);
        match self.metric {
            Metric::L2 => (to_leaf - 2.0 * lut.bias, 2.0 * lut.step),
            Metric::InnerProduct | Metric::Cosine => (to_leaf - lut.bias, lut.step),
        }
    }
}

/// The estimate `a + base − b·sum` of a row ([`FastList::coefficients`]),
/// in this order of f32 operations wherever it is computed.
#[inline(always)]
fn estimate(a: f32, b: f32, base: f32, sum: u32) -> f32 {
    a + base - b * sum as f32
}

/// Offers the sparse `rows` of a list (a filter's few matches) to `top`,
/// scored one by one from their row-major codes with the same tables and
/// estimate as [`fast_scan_list`].
fn fast_score_rows(
    list: FastList<'_>,
    codes: &[u8],
    width: usize,
    rows: &[usize],
    top: &mut Candidates,
) {
    let (a, b) = list.coefficients();
    for &i in rows {
        let code = &codes[i * width..(i + 1) * width];
        let payload = &code[crate::quant::HEADER_BYTES..];
        let sum = list.lut.sum_packed(payload);
        let base = if list.metric == Metric::L2 {
            Quantizer::list_term(code)
        } else {
            0.0
        };
        top.push_at(
            estimate(a, b, base, sum),
            list.rowids[i],
            pack(list.group, i),
        );
    }
}

/// Rows whose estimates are compared with the bound at once.
const RUN: usize = 16;

/// Offers every row of a list that `mask` keeps (every row without one)
/// and whose estimate (see [`estimate`]) is at most the selection's bound
/// to each query's selection in `tops`, from the u8 tables' exact integer
/// sums: `queries` are at most [`fastscan::QUERIES`] `(query, distance to
/// the leaf)` of one list (made a [`FastList`] by `list`), scored in one
/// pass over its blocks ([`fastscan::scan_many`]). Runs of [`RUN`] rows are
/// compared with the bound in one vectorised step; once a selection is
/// full, most runs have no row below it.
fn fast_scan_lists<'a>(
    queries: &[(u32, f32)],
    list: impl Fn(&(u32, f32)) -> FastList<'a>,
    fast: &FastCodes,
    mask: Option<&BooleanBuffer>,
    tops: &mut [Candidates],
) {
    thread_local! {
        static SUMS: std::cell::RefCell<Vec<Vec<u32>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let Some(last) = queries.last() else {
        return;
    };
    debug_assert!(queries.len() <= fastscan::QUERIES);
    let luts: [&Lut; fastscan::QUERIES] =
        std::array::from_fn(|i| list(queries.get(i).unwrap_or(last)).lut);
    // A query with no bound yet offers most rows of the list, each with its
    // rowid: those are fetched into the cache while the kernel scores the
    // blocks. Once every bound is set, few rows are offered, and fetching
    // every rowid (a line per 8) would only fill the line buffers the
    // kernel's own loads wait for.
    if queries
        .iter()
        .any(|q| tops[list(q).query].bound() == f32::INFINITY)
    {
        prefetch(list(last).rowids);
    }
    SUMS.with_borrow_mut(|sums| {
        if sums.len() < queries.len() {
            sums.resize_with(queries.len(), Vec::new);
        }
        fastscan::scan_many(&luts[..queries.len()], &fast.blocks, sums);
        for (list, sums) in queries.iter().map(list).zip(sums.iter()) {
            offer_sums(&list, fast, mask, sums, &mut tops[list.query]);
        }
    });
}

/// The rows of one query's list whose estimate from `sums` is at most the
/// bound of `top`, offered to it (see [`fast_scan_lists`]). The CPU is
/// asked once per list which run check runs, so that the check inlines
/// into the loop.
fn offer_sums(
    list: &FastList<'_>,
    fast: &FastCodes,
    mask: Option<&BooleanBuffer>,
    sums: &[u32],
    top: &mut Candidates,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F was detected just above.
            unsafe { offer_sums_avx512(list, fast, mask, sums, top) };
        } else {
            offer_runs(list, fast, mask, sums, top, at_most_sse2);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    offer_runs(list, fast, mask, sums, top, |a, b, sums, base, bound| {
        at_most_scalar(a, b, sums, base, bound)
    });
}

/// [`offer_runs`] with [`at_most_avx512`].
///
/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn offer_sums_avx512(
    list: &FastList<'_>,
    fast: &FastCodes,
    mask: Option<&BooleanBuffer>,
    sums: &[u32],
    top: &mut Candidates,
) {
    offer_runs(list, fast, mask, sums, top, |a, b, sums, base, bound| {
        // SAFETY: AVX-512 F is enabled here.
        unsafe { at_most_avx512(a, b, sums, base, bound) }
    });
}

/// The loop of [`offer_sums`], with `whole` comparing whole runs of
/// [`RUN`] rows (a last partial run goes through [`at_most_scalar`]). The
/// bound is read again only after a run offered a row: nothing else moves
/// it.
#[inline(always)]
fn offer_runs(
    list: &FastList<'_>,
    fast: &FastCodes,
    mask: Option<&BooleanBuffer>,
    sums: &[u32],
    top: &mut Candidates,
    whole: impl Fn(f32, f32, &[u32; RUN], &[f32; RUN], f32) -> u32,
) {
    let (a, b) = list.coefficients();
    let (group, rowids) = (list.group, list.rowids);
    // `base` has a value per row, `sums` one per row of whole blocks.
    let base = &fast.base[..fast.base.len().min(sums.len())];
    let (base_runs, base_rest) = base.as_chunks::<RUN>();
    let (sum_runs, _) = sums.as_chunks::<RUN>();
    // A selection with no bound yet (a query's first list) would take
    // most of a long list's rows, each a candidate built and a selection
    // every `k` of them: it first takes a bound that at least `k` of the
    // list's rows are at most ([`first_bound`]), which keeps the same best
    // `k`. A filter's mask leaves rows out, so it is not used then.
    let first = if top.bound() == f32::INFINITY && mask.is_none() {
        first_bound(a, b, base, sums, top.k(), &whole)
    } else {
        f32::INFINITY
    };
    let offer = |at: usize, mut below: u32, top: &mut Candidates| {
        while below != 0 {
            let i = at + below.trailing_zeros() as usize;
            below &= below - 1;
            let e = estimate(a, b, base[i], sums[i]);
            if e <= top.bound().min(first) && mask.is_none_or(|m| m.value(i)) {
                top.push_at(e, rowids[i], pack(group, i));
            }
        }
    };
    // A run with rows to offer is offered when the next such run is found
    // (or at the end), its rowids asked of the memory meanwhile: each
    // offered row reads its rowid, a line of the list that the scan did
    // not touch. The offers are the same in any order (a selection does
    // not depend on it, and each row is checked against the bound of its
    // own turn), only their rowids' misses overlap the compares between.
    let mut bound = top.bound().min(first);
    let mut pending = None;
    for (run, (sums, base)) in sum_runs.iter().zip(base_runs).enumerate() {
        let below = whole(a, b, sums, base, bound);
        if below != 0 {
            let at = RUN * run;
            prefetch(
                rowids
                    .get(at..(at + RUN).min(rowids.len()))
                    .unwrap_or_default(),
            );
            if let Some((at, below)) = pending.replace((at, below)) {
                offer(at, below, top);
                bound = top.bound().min(first);
            }
        }
    }
    if let Some((at, below)) = pending {
        offer(at, below, top);
        bound = top.bound().min(first);
    }
    if !base_rest.is_empty() {
        let at = base.len() - base_rest.len();
        let below = at_most_scalar(a, b, &sums[at..], base_rest, bound);
        offer(at, below, top);
    }
}

/// A bound that at least `k` of a list's rows' estimates are at most
/// (`base` a value per row, `sums` at least as many; the rows as
/// [`offer_runs`] compares them, `whole` a run at a time), so that offering
/// only the rows at most it keeps the list's best `k`; +∞ when none is
/// found cheaply, or the list is short enough to offer whole.
///
/// The least estimate of every `stride`-th row is at most about `stride`
/// rows' estimates on average: with a stride of `2k`, about `2k` rows, at
/// the cost of a pass over `n / 2k` rows. Whether at least `k` rows are at
/// most it is then counted in one vectorised pass (the same comparison as
/// the offers); if fewer are, a stride of `8k` is tried (about `8k` rows).
fn first_bound(
    a: f32,
    b: f32,
    base: &[f32],
    sums: &[u32],
    k: usize,
    whole: impl Fn(f32, f32, &[u32; RUN], &[f32; RUN], f32) -> u32,
) -> f32 {
    let n = base.len();
    if k == 0 || n < 4 * k {
        return f32::INFINITY;
    }
    let (base_runs, base_rest) = base.as_chunks::<RUN>();
    let (sum_runs, _) = sums.as_chunks::<RUN>();
    let at_most = |t: f32| -> usize {
        let whole_runs: u32 = sum_runs
            .iter()
            .zip(base_runs)
            .map(|(s, c)| whole(a, b, s, c, t).count_ones())
            .sum();
        let at = n - base_rest.len();
        (whole_runs + at_most_scalar(a, b, &sums[at..], base_rest, t).count_ones()) as usize
    };
    for stride in [2 * k, 8 * k] {
        // NaN is ignored by `min`, and an infinite bound is no bound.
        let t = (0..n)
            .step_by(stride)
            .map(|i| estimate(a, b, base[i], sums[i]))
            .fold(f32::INFINITY, f32::min);
        if t < f32::INFINITY && at_most(t) >= k {
            return t;
        }
    }
    f32::INFINITY
}

/// Bit j set when the estimate of row j of a run (`sums[j]`, `base[j]`;
/// at most [`RUN`] rows, as many as `base` holds) is at most `bound`: the
/// same f32 operations as [`estimate`], one row at a time (the reference
/// of the tests, and a last partial run).
fn at_most_scalar(a: f32, b: f32, sums: &[u32], base: &[f32], bound: f32) -> u32 {
    sums.iter()
        .zip(base)
        .enumerate()
        .fold(0, |bits, (j, (&s, &c))| {
            bits | (u32::from(estimate(a, b, c, s) <= bound) << j)
        })
}

/// [`at_most_scalar`] over a whole run of [`RUN`] (16) rows, four at a
/// time: any x86-64 (SSE2).
#[cfg(target_arch = "x86_64")]
fn at_most_sse2(a: f32, b: f32, sums: &[u32; RUN], base: &[f32; RUN], bound: f32) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; both arrays hold RUN values and loadu
    // needs no alignment. The sums are below 2²⁴, so the i32 conversion is
    // `sum as f32`.
    unsafe {
        let (va, vb, vbound) = (_mm_set1_ps(a), _mm_set1_ps(b), _mm_set1_ps(bound));
        let mut bits = 0u32;
        for q in 0..RUN / 4 {
            let s = _mm_cvtepi32_ps(_mm_loadu_si128(sums.as_ptr().add(4 * q).cast()));
            let c = _mm_loadu_ps(base.as_ptr().add(4 * q));
            let e = _mm_sub_ps(_mm_add_ps(va, c), _mm_mul_ps(vb, s));
            bits |= (_mm_movemask_ps(_mm_cmple_ps(e, vbound)) as u32) << (4 * q);
        }
        bits
    }
}

/// [`at_most_scalar`] over a whole run of [`RUN`] (16) rows at once.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn at_most_avx512(a: f32, b: f32, sums: &[u32; RUN], base: &[f32; RUN], bound: f32) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: 16 values each; loadu needs no alignment.
    let (s, c) = unsafe {
        (
            _mm512_cvtepi32_ps(_mm512_loadu_si512(sums.as_ptr().cast())),
            _mm512_loadu_ps(base.as_ptr()),
        )
    };
    let e = _mm512_sub_ps(
        _mm512_add_ps(_mm512_set1_ps(a), c),
        _mm512_mul_ps(_mm512_set1_ps(b), s),
    );
    u32::from(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(e, _mm512_set1_ps(bound)))
}

/// Each loaded row group must hold exactly one code of `width` bytes a row.
fn check_code_lengths(
    paths: &[Path],
    loaded: &[Arc<DecodedRowGroup>],
    width: usize,
) -> Result<(), ProbeError> {
    for (g, rg) in loaded.iter().enumerate() {
        let codes_len = rg.codes.as_ref().map(|c| c.len());
        if codes_len != Some(rg.rowids.len() * width) {
            return Err(ProbeError::Decode {
                path: paths.get(rg.file).map_or_else(String::new, Path::to_string),
                row_group: rg.row_group,
                source: parquet::errors::ParquetError::General(format!(
                    "loaded row group {g} holds {codes_len:?} code bytes for {} rows of {width}",
                    rg.rowids.len()
                )),
            });
        }
    }
    Ok(())
}

/// The queries rotated as the codes are and, under inner product and
/// cosine (where `y` is the query itself, the same for every list), each
/// prepared once for scoring; under L2 `y` depends on the list, so nothing
/// is prepared here.
fn rotated_queries(
    scan: CodeScan<'_>,
    queries: &[f32],
) -> (Vec<f32>, Vec<crate::quant::PreparedQuery>) {
    let dim = scan.hierarchy.dim;
    let mut rotated = vec![0.0f32; queries.len()];
    rotated
        .par_chunks_mut(dim)
        .zip(queries.par_chunks(dim))
        .for_each(|(o, q)| scan.quantizer.rotate(q, o));
    let prepared = if scan.hierarchy.metric == Metric::L2 {
        Vec::new()
    } else {
        rotated
            .par_chunks(dim)
            .map(|q| scan.quantizer.prepare(q))
            .collect()
    };
    (rotated, prepared)
}

/// Score the codes of `rows` (every row when `None`) into `scores` (one slot
/// per row) and return the rows scored.
fn score_rows<'r>(
    quantizer: &Quantizer,
    prepared: &crate::quant::PreparedQuery,
    codes: &[u8],
    rows: Option<&'r [usize]>,
    scores: &mut [f32],
) -> impl Iterator<Item = usize> + 'r {
    let width = quantizer.code_bytes();
    match rows {
        None => quantizer.score(prepared, codes, scores),
        Some(rows) => {
            for &i in rows {
                let code = &codes[i * width..(i + 1) * width];
                quantizer.score(prepared, code, &mut scores[i..=i]);
            }
        }
    }
    let all = rows.is_none().then_some(0..scores.len());
    all.into_iter()
        .flatten()
        .chain(rows.into_iter().flatten().copied())
}

/// The exact `k` best of each query's `candidates` (from `scan_codes`),
/// from the vectors held by the `loaded` row groups. CPU only.
fn rerank_in_memory(
    metric: Metric,
    dim: usize,
    queries: &[f32],
    candidates: Vec<TopK>,
    loaded: &[Arc<DecodedRowGroup>],
    k: usize,
) -> Vec<TopK> {
    candidates
        .into_par_iter()
        .enumerate()
        .map(|(q, cands)| {
            let query = &queries[q * dim..(q + 1) * dim];
            let mut top = TopK::new(k);
            let vector = |at: u64| {
                let (g, row) = unpack(at);
                &loaded[g].vectors[row * dim..(row + 1) * dim]
            };
            // The candidates lie anywhere in memory: ask for all of them
            // before the first is read, so their misses overlap.
            for n in cands.iter() {
                prefetch(vector(n.at));
            }
            // In any order: a selection does not depend on it.
            for n in cands.iter() {
                let v = vector(n.at);
                top.push(metric.prepared_distance(query, v), n.rowid);
            }
            top
        })
        .collect()
}

/// The `k` best of each query's candidates by their estimated distances
/// (`rerank 0`: no f32 is read).
fn approximate(candidates: Vec<TopK>, k: usize) -> Vec<TopK> {
    candidates
        .into_iter()
        .map(|cands| {
            let mut top = TopK::new(k);
            for n in cands.into_sorted().into_iter().take(k) {
                top.push(n.distance, n.rowid);
            }
            top
        })
        .collect()
}

/// How a code scan's candidates are ranked ([`rank_codes`]).
#[derive(Debug)]
pub enum CodeRank {
    /// Ranked in memory: by the codes' estimate (`rerank` 0) or by the
    /// exact distance of the vectors held.
    Ranked(Vec<TopK>),
    /// To be ranked from the `vector` pages holding the candidates: the
    /// plan of that read, and how many pages a filter's masks spared.
    Pages {
        candidates: Vec<TopK>,
        plan: PagePlan,
        pruned: u64,
    },
}

/// The codes of a batch scanned (`scan_codes`, `rerank × k` candidates a
/// query) and ranked: by their estimate with `rerank` 0, exactly from the
/// vectors when they are in memory (`vectors_held`), else the plan of the
/// `vector` pages to read. Returns the rank and the codes scored. CPU only.
///
/// # Errors
/// As `scan_codes` and [`PagePlan::new`].
pub fn rank_codes(
    scan: CodeScan<'_>,
    paths: &[Path],
    rows: ProbedRows<'_>,
    (k, rerank): (usize, usize),
    vectors_held: bool,
) -> Result<(CodeRank, u64), ProbeError> {
    let keep = k.saturating_mul(rerank).max(k);
    let (candidates, scored) = scan_codes(scan, paths, rows, keep)?;
    let (queries, loaded, masks) = (rows.queries, rows.loaded, rows.masks);
    let (metric, dim) = (scan.hierarchy.metric, scan.hierarchy.dim);
    let rank = if rerank == 0 {
        CodeRank::Ranked(approximate(candidates, k))
    } else if vectors_held {
        CodeRank::Ranked(rerank_in_memory(
            metric, dim, queries, candidates, loaded, k,
        ))
    } else {
        CodeRank::Pages {
            plan: PagePlan::new(paths, loaded, &candidates)?,
            pruned: pruned_pages(loaded, masks),
            candidates,
        }
    };
    Ok((rank, scored))
}

/// Every row each query may see in the row groups it probes (set in their
/// masks; every row without one), as candidates for a [`PagePlan`]: the
/// exact rank of a filtered query with few matches, which reads each
/// match's page and no code. CPU only.
pub fn matched_candidates(rows: ProbedRows<'_>) -> Vec<TopK> {
    let probing = probing_queries(rows.cids, rows.loaded);
    let mut found: Vec<Vec<(i64, u64)>> = vec![Vec::new(); rows.cids.len()];
    for (g, (rg, qs)) in rows.loaded.iter().zip(&probing).enumerate() {
        if qs.is_empty() {
            continue;
        }
        let set: Vec<usize> = match rows.masks.get(g).and_then(Option::as_ref) {
            Some(mask) => mask.set_indices().collect(),
            None => (0..rg.rowids.len()).collect(),
        };
        for &q in qs {
            let at = &mut found[q as usize];
            at.extend(set.iter().map(|&i| (rg.rowids[i], pack(g, i))));
        }
    }
    found
        .into_iter()
        .map(|rows| {
            let mut top = TopK::new(rows.len());
            for (rowid, at) in rows {
                top.push_at(0.0, rowid, at);
            }
            top
        })
        .collect()
}

/// `vector` pages of the `loaded` row groups (read with their offset
/// index) none of whose rows is set in their mask: a re-rank never fetches
/// them. 0 without masks.
pub fn pruned_pages(loaded: &[Arc<DecodedRowGroup>], masks: &[Option<BooleanBuffer>]) -> u64 {
    loaded
        .iter()
        .zip(masks)
        .filter_map(|(rg, m)| Some((rg.vector_pages.as_deref()?, m.as_ref()?)))
        .map(|(pages, mask)| (pages.len() - matching_pages(pages, mask).len()) as u64)
        .sum()
}

/// How many `vector` pages of `loaded[g]`, for each `g` of `groups`, hold
/// a row set in its mask (every page without one), and their bytes;
/// `None` when one of them was read without its offset index.
pub fn matched_pages(
    loaded: &[Arc<DecodedRowGroup>],
    masks: &[Option<BooleanBuffer>],
    groups: impl IntoIterator<Item = usize>,
) -> Option<(u64, u64)> {
    let (mut count, mut bytes) = (0, 0);
    for g in groups {
        let pages = loaded.get(g)?.vector_pages.as_deref()?;
        let matching = match masks.get(g).and_then(Option::as_ref) {
            Some(mask) => matching_pages(pages, mask),
            None => (0..pages.len()).collect(),
        };
        count += matching.len() as u64;
        bytes += matching
            .into_iter()
            .map(|p| u64::try_from(pages[p].compressed_page_size).unwrap_or(0))
            .sum::<u64>();
    }
    Some((count, bytes))
}

/// The indexes of the `pages` (ascending, as an offset index lists them)
/// holding a row set in `mask`: one pass over its set bits.
fn matching_pages(pages: &[PageLocation], mask: &BooleanBuffer) -> Vec<usize> {
    let (mut page, mut out) = (0, Vec::new());
    for row in mask.set_indices() {
        while pages
            .get(page + 1)
            .is_some_and(|p| p.first_row_index as usize <= row)
        {
            page += 1;
        }
        if out.last() != Some(&page) {
            out.push(page);
        }
    }
    out
}

/// One `vector` data page to read.
#[derive(Debug, Clone)]
struct PageRead {
    /// Index in `loaded` of its row group.
    group: usize,
    /// Its byte range in the file.
    range: Range<u64>,
    first_row: usize,
    rows: usize,
}

impl PageRead {
    /// Page `page` of `rg`'s `vector` column (`loaded[group]`), from its
    /// offset index, which [`page_of`] found.
    fn of(rg: &DecodedRowGroup, group: usize, page: usize) -> PageRead {
        let pages = rg.vector_pages.as_deref().unwrap_or_default();
        let loc = &pages[page];
        let first_row = loc.first_row_index as usize;
        let end_row = pages
            .get(page + 1)
            .map_or(rg.rowids.len(), |p| p.first_row_index as usize);
        let start = loc.offset as u64;
        PageRead {
            group,
            range: start..start + loc.compressed_page_size as u64,
            first_row,
            rows: end_row - first_row,
        }
    }
}

/// The `vector` pages holding every candidate of a batch: plain data from
/// [`PagePlan::new`], read with [`super::load::PostingsReader::fetch`] of
/// [`PagePlan::requests`] (one `get_ranges` per file, one round), then
/// ranked by [`PagePlan::rank`].
#[derive(Debug)]
pub struct PagePlan {
    requests: Vec<FileRequest>,
    /// The pages of each request, same order.
    pages: Vec<Vec<PageRead>>,
    /// The candidates on each page, in the order of `pages.iter().flatten()`:
    /// page `p` holds `held[bounds[p]..bounds[p + 1]]`, each a candidate's
    /// place in `candidates.iter().flat_map(TopK::iter)`. The rank scores
    /// a page's candidates right after its check, while it is in the caches.
    bounds: Vec<usize>,
    held: Vec<usize>,
}

impl PagePlan {
    /// The pages holding the candidates (each page once, however many
    /// candidates of however many queries it holds). Pure.
    ///
    /// # Errors
    /// [`ProbeError::Decode`] for a candidate's row group read without its
    /// offset index, or a row outside it.
    pub fn new(
        paths: &[Path],
        loaded: &[Arc<DecodedRowGroup>],
        candidates: &[TopK],
    ) -> Result<PagePlan, ProbeError> {
        // The page of each candidate (read from the offset index once,
        // while its entry is in the caches), and one sort key per
        // candidate, (file, page offset, candidate) packed into a u128 (a
        // file and a candidate fit 32 bits each, an offset 64): each page's
        // candidates together, the pages of a file by offset.
        let count = candidates.iter().map(TopK::len).sum::<usize>();
        let (mut located, mut keys) = (Vec::with_capacity(count), Vec::with_capacity(count));
        let at: Vec<(usize, usize)> = candidates
            .iter()
            .flat_map(TopK::iter)
            .map(|n| unpack(n.at))
            .collect();
        // Each candidate's page location is asked of the memory `AHEAD`
        // candidates before it is read: scattered entries of the offset
        // indexes, whose misses then overlap.
        const AHEAD: usize = 8;
        let hint = |&(g, row): &(usize, usize)| {
            if let Some(pages) = loaded.get(g).and_then(|rg| rg.vector_pages.as_deref())
                && let Some(loc) = guess_page(pages, row).and_then(|p| pages.get(p))
            {
                prefetch(std::slice::from_ref(loc));
            }
        };
        at.iter().take(AHEAD).for_each(hint);
        for (c, &(g, row)) in at.iter().enumerate() {
            if let Some(next) = at.get(c + AHEAD) {
                hint(next);
            }
            let rg = &loaded[g];
            let page = PageRead::of(rg, g, page_of(paths, rg, row)?);
            keys.push(page_key(rg.file, page.range.start, c));
            located.push(page);
        }
        keys.sort_unstable();
        let mut plan = PagePlan {
            requests: Vec::new(),
            pages: Vec::new(),
            bounds: vec![0],
            held: Vec::with_capacity(keys.len()),
        };
        for file_keys in keys.chunk_by(|a, b| a >> 96 == b >> 96) {
            let reads: Vec<PageRead> = file_keys
                .chunk_by(|a, b| a >> 32 == b >> 32)
                .map(|page_keys| {
                    plan.held
                        .extend(page_keys.iter().map(|&key| key_candidate(key)));
                    plan.bounds.push(plan.held.len());
                    // The page of the candidate `AHEAD` places on in sorted
                    // order is asked of the memory now: `located` is in
                    // candidate order, so these reads are scattered.
                    if let Some(&ahead) = keys.get(plan.held.len() + AHEAD) {
                        prefetch(std::slice::from_ref(&located[key_candidate(ahead)]));
                    }
                    located[key_candidate(page_keys[0])].clone()
                })
                .collect();
            plan.requests.push(FileRequest {
                file: (file_keys[0] >> 96) as usize,
                ranges: coalesce(reads.iter().map(|p| p.range.clone())),
            });
            plan.pages.push(reads);
        }
        Ok(plan)
    }

    /// The ranged reads of the plan, one per file.
    pub fn requests(&self) -> &[FileRequest] {
        &self.requests
    }

    /// Pages planned.
    pub fn pages(&self) -> usize {
        self.pages.iter().map(Vec::len).sum()
    }

    /// Bytes of the pages planned.
    pub fn page_bytes(&self) -> u64 {
        self.pages
            .iter()
            .flatten()
            .map(|p| p.range.end - p.range.start)
            .sum()
    }

    /// The exact `k` best of each query's candidates, from the fetched
    /// pages: each page's CRC is checked and its values must be exactly its
    /// rows of `dim` f32. Pure compute (parallel over runs of pages).
    ///
    /// # Errors
    /// [`ProbeError::PageChecksum`] for a page that fails its CRC,
    /// [`ProbeError::Decode`] for one of the wrong length or not fetched.
    #[allow(clippy::too_many_arguments)]
    pub fn rank(
        &self,
        fetched: Fetched,
        paths: &[Path],
        loaded: &[Arc<DecodedRowGroup>],
        metric: Metric,
        dim: usize,
        queries: &[f32],
        candidates: Vec<TopK>,
        k: usize,
    ) -> Result<Vec<TopK>, ProbeError> {
        let fetched = fetched.into_inner();
        let name =
            |rg: &DecodedRowGroup| paths.get(rg.file).map_or_else(String::new, Path::to_string);
        // Every page with its bytes, in plan order (a file's pages by
        // offset, as its ranges: one walk a file).
        let pages: Vec<(&PageRead, &[u8])> = self
            .pages
            .iter()
            .zip(&fetched)
            .flat_map(|(pages, file)| {
                let bytes = slices_ref(&file.ranges, &file.data, pages.iter().map(|p| &p.range));
                pages.iter().zip(bytes)
            })
            .map(|(p, bytes)| {
                let bytes = bytes.ok_or_else(|| {
                    let rg = &loaded[p.group];
                    decode_error(
                        name(rg),
                        rg.row_group,
                        format!("page {:?} was not fetched", p.range),
                    )
                })?;
                Ok((p, bytes))
            })
            .collect::<Result<_, ProbeError>>()?;
        // Each candidate with its query, in the order of `held`'s places.
        let owned: Vec<(usize, &crate::topk::Neighbor)> = candidates
            .iter()
            .enumerate()
            .flat_map(|(q, cands)| cands.iter().map(move |n| (q, n)))
            .collect();
        // Runs of pages in parallel. Within a run, each page is asked of the
        // memory a window of `AHEAD` pages before its check (scattered
        // pages, whose misses then overlap), and its candidates are scored
        // right after the check, while the page is in the caches.
        const RUN: usize = 256;
        const AHEAD: usize = 16;
        let scored: Vec<Vec<(usize, f32, i64)>> = pages
            .par_chunks(RUN)
            .enumerate()
            .map(|(r, run)| {
                let mut out = Vec::new();
                let mut v = vec![0.0f32; dim];
                run.iter().take(AHEAD).for_each(|(_, b)| prefetch(b));
                for (i, (p, bytes)) in run.iter().enumerate() {
                    if let Some((_, b)) = run.get(i + AHEAD) {
                        prefetch(b);
                    }
                    let rg = &loaded[p.group];
                    let body = checked_page(bytes).map_err(|source| ProbeError::PageChecksum {
                        path: name(rg),
                        row_group: rg.row_group,
                        column: VECTOR_COLUMN.to_string(),
                        source,
                    })?;
                    if body.len() != p.rows * dim * 4 {
                        return Err(decode_error(
                            name(rg),
                            rg.row_group,
                            format!(
                                "{VECTOR_COLUMN} page at byte {} holds {} value bytes, its {} rows need {}",
                                p.range.start,
                                body.len(),
                                p.rows,
                                p.rows * dim * 4
                            ),
                        ));
                    }
                    let page = r * RUN + i;
                    for &c in &self.held[self.bounds[page]..self.bounds[page + 1]] {
                        let (q, n) = owned[c];
                        let (_, row) = unpack(n.at);
                        let at = (row - p.first_row) * dim * 4;
                        // Whole 4-byte arrays: one vectorised copy, no
                        // iterator step per value.
                        let (values, _) = body[at..at + dim * 4].as_chunks::<4>();
                        for (x, b) in v.iter_mut().zip(values) {
                            *x = f32::from_le_bytes(*b);
                        }
                        let query = &queries[q * dim..(q + 1) * dim];
                        out.push((q, metric.prepared_distance(query, &v), n.rowid));
                    }
                }
                Ok(out)
            })
            .collect::<Result<_, ProbeError>>()?;
        // In any order: a selection does not depend on it.
        let mut tops = vec![TopK::new(k); candidates.len()];
        for (q, distance, rowid) in scored.into_iter().flatten() {
            tops[q].push(distance, rowid);
        }
        Ok(tops)
    }
}

fn decode_error(path: String, row_group: usize, msg: String) -> ProbeError {
    ProbeError::Decode {
        path,
        row_group,
        source: parquet::errors::ParquetError::General(msg),
    }
}

/// The sort key of candidate `c` on the page at `offset` of file `file`
/// ([`PagePlan::new`]): file, offset, candidate from the high bits down.
fn page_key(file: usize, offset: u64, c: usize) -> u128 {
    debug_assert!(u32::try_from(file).is_ok() && u32::try_from(c).is_ok());
    ((file as u128) << 96) | (u128::from(offset) << 32) | (c as u32 as u128)
}

/// The candidate of a [`page_key`].
fn key_candidate(key: u128) -> usize {
    (key & 0xffff_ffff) as usize
}

/// The page that holds `row` if every page but the last holds as many
/// rows as the first (the second page's first row), as the writer's do:
/// known without a search, but to be checked against `pages`.
fn guess_page(pages: &[PageLocation], row: usize) -> Option<usize> {
    let rows = pages.get(1).map(|p| p.first_row_index as usize)?;
    (rows > 0).then(|| row / rows)
}

/// The index of the `vector` page of `rg` holding `row`.
fn page_of(paths: &[Path], rg: &DecodedRowGroup, row: usize) -> Result<usize, ProbeError> {
    let name = || paths.get(rg.file).map_or_else(String::new, Path::to_string);
    let pages = rg.vector_pages.as_deref().ok_or_else(|| {
        decode_error(
            name(),
            rg.row_group,
            format!("{VECTOR_COLUMN} offset index was not read"),
        )
    })?;
    if row >= rg.rowids.len() {
        return Err(decode_error(
            name(),
            rg.row_group,
            format!(
                "row {row} is outside the row group's {} rows",
                rg.rowids.len()
            ),
        ));
    }
    let first = |page: usize| pages.get(page).map(|p| p.first_row_index as usize);
    // The guess is checked; any other layout is searched.
    if let Some(g) = guess_page(pages, row)
        && first(g).is_some_and(|f| f <= row)
        && first(g + 1).is_none_or(|next| row < next)
    {
        return Ok(g);
    }
    Ok(pages
        .partition_point(|p| p.first_row_index as usize <= row)
        .saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised comparison of a run's estimates with the bound sets
    /// exactly the bits of the row-by-row one, on every path this CPU
    /// takes (whole and partial runs, NaN and infinite bounds).
    #[test]
    fn runs_compare_with_the_bound_as_row_by_row() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        let mut avx512 = 0;
        for _ in 0..2_000 {
            let len = if rng.random_bool(0.8) {
                RUN
            } else {
                rng.random_range(1..RUN)
            };
            let sums: Vec<u32> = (0..RUN).map(|_| rng.random_range(0..20_000)).collect();
            let base: Vec<f32> = (0..len).map(|_| rng.random_range(-50.0..50.0)).collect();
            let (a, b) = (rng.random_range(-100.0..100.0), rng.random_range(0.0..0.05));
            let bound = match rng.random_range(0..10) {
                0 => f32::INFINITY,
                1 => f32::NAN,
                // The estimate of a row: equal is kept.
                2 => estimate(a, b, base[0], sums[0]),
                _ => rng.random_range(-200.0..200.0),
            };
            let scalar = at_most_scalar(a, b, &sums, &base, bound);
            #[cfg(target_arch = "x86_64")]
            if let (Ok(sums), Ok(base)) = (
                <&[u32; RUN]>::try_from(&sums[..]),
                <&[f32; RUN]>::try_from(&base[..]),
            ) {
                assert_eq!(
                    at_most_sse2(a, b, sums, base, bound),
                    scalar,
                    "sse2 {a} {b} {bound}"
                );
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512 F was detected.
                    let wide = unsafe { at_most_avx512(a, b, sums, base, bound) };
                    assert_eq!(wide, scalar, "avx512 {a} {b} {bound}");
                    avx512 += 1;
                }
            }
        }
        eprintln!("run checks compared: sse2 and scalar, avx512 on {avx512} runs");
    }

    /// A list's offers keep exactly what offering every row's estimate
    /// one by one keeps: whole runs on every path this CPU takes, a last
    /// partial run, a mask, and a bound that tightens while the list is
    /// offered.
    #[test]
    fn a_lists_offers_keep_what_every_row_offered_keeps() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let tables: Vec<f32> = (0..4 * 16).map(|_| rng.random_range(0.0..10.0)).collect();
        let lut = Lut::quantize(&tables);
        // (rows, keep, distinct values): the long lists take a first
        // bound ([`first_bound`]); few distinct values make ties at it.
        for (n, keep, values) in [
            (1000, 40, 1000),
            (3000, 40, 1000),
            (3000, 40, 3),
            (1000, 250, 7),
            (37, 10, 1000),
            (16, 5, 1000),
            (5, 8, 1000),
        ] {
            let rowids: Vec<i64> = (0..n as i64).map(|r| 7 * r + 3).collect();
            let fast = FastCodes {
                blocks: fastscan::Blocks::from_rows(&vec![0u8; n * 2], n, 2, 0, 2),
                base: (0..n)
                    .map(|_| rng.random_range(0..values.min(50)) as f32)
                    .collect(),
            };
            let sums: Vec<u32> = (0..n.div_ceil(32) * 32)
                .map(|_| rng.random_range(0..values))
                .collect();
            let mask = BooleanBuffer::from_iter((0..n).map(|_| rng.random_bool(0.7)));
            let list = FastList {
                metric: Metric::L2,
                query: 0,
                lut: &lut,
                to_leaf: rng.random_range(0.0..20.0),
                group: 3,
                rowids: &rowids,
            };
            let (a, b) = list.coefficients();
            for mask in [None, Some(&mask)] {
                let kept: Vec<usize> = (0..n)
                    .filter(|&i| mask.is_none_or(|m| m.value(i)))
                    .collect();
                let mut every = Candidates::new(keep);
                for &i in &kept {
                    every.push_at(estimate(a, b, fast.base[i], sums[i]), rowids[i], pack(3, i));
                }
                let mut runs = Candidates::new(keep);
                offer_sums(&list, &fast, mask, &sums, &mut runs);
                #[cfg(target_arch = "x86_64")]
                let mut sse2 = Candidates::new(keep);
                #[cfg(target_arch = "x86_64")]
                offer_runs(&list, &fast, mask, &sums, &mut sse2, at_most_sse2);
                let key = |c: Candidates| -> Vec<(u32, i64, u64)> {
                    c.into_top()
                        .into_sorted()
                        .into_iter()
                        .map(|n| (n.distance.to_bits(), n.rowid, n.at))
                        .collect()
                };
                let expected = key(every);
                assert_eq!(expected.len(), keep.min(kept.len()), "{n} rows");
                assert_eq!(key(runs), expected, "{n} rows, mask {}", mask.is_some());
                #[cfg(target_arch = "x86_64")]
                assert_eq!(key(sse2), expected, "sse2, {n} rows");
            }
        }
    }

    /// A list's first bound has at least `k` rows' estimates at most it
    /// (NaN estimates among them, which no bound keeps), or is +∞: for
    /// `k` 0, a list shorter than `4k`, or no cheap bound. Most long lists
    /// get one.
    #[test]
    fn a_first_bound_has_at_least_k_rows_at_most_it() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
        let (mut found, mut long) = (0, 0);
        for _ in 0..500 {
            let n: usize = rng.random_range(0..4_000);
            let k: usize = rng.random_range(0..100);
            let sums: Vec<u32> = (0..n.div_ceil(32) * 32)
                .map(|_| rng.random_range(0..20_000))
                .collect();
            let base: Vec<f32> = (0..n)
                .map(|_| {
                    if rng.random_ratio(1, 100) {
                        f32::NAN
                    } else {
                        rng.random_range(-50.0..50.0)
                    }
                })
                .collect();
            let (a, b) = (rng.random_range(-100.0..100.0), rng.random_range(0.0..0.05));
            let t = first_bound(a, b, &base, &sums, k, |a, b, s, c, t| {
                at_most_scalar(a, b, s, c, t)
            });
            let at_most = (0..n)
                .filter(|&i| estimate(a, b, base[i], sums[i]) <= t)
                .count();
            if k > 0 && n >= 4 * k {
                long += 1;
            }
            if t < f32::INFINITY {
                found += 1;
                assert!(k > 0 && n >= 4 * k, "a bound for {n} rows, k {k}");
                assert!(at_most >= k, "{at_most} of {n} rows at most {t}, k {k}");
            } else {
                assert!(t == f32::INFINITY, "{t}");
            }
        }
        assert!(
            found * 10 >= long * 7,
            "a first bound for {found} of {long} long lists"
        );
    }

    #[test]
    fn pruned_pages_are_the_pages_without_a_set_row() {
        use parquet::file::page_index::offset_index::PageLocation;
        let page = |first: i64| PageLocation {
            offset: first * 100,
            compressed_page_size: 100,
            first_row_index: first,
        };
        let rg = Arc::new(DecodedRowGroup {
            cid: 0,
            rowids: (0..30).collect(),
            vectors: Vec::<f32>::new().into(),
            codes: None,
            vector_pages: Some(vec![page(0), page(8), page(16), page(24)].into()),
            payload: None,
            file: 0,
            row_group: 0,
            fast_codes: Default::default(),
        });
        let mask = |rows: &[usize]| Some(BooleanBuffer::collect_bool(30, |i| rows.contains(&i)));
        let count = |rows: &[usize]| pruned_pages(std::slice::from_ref(&rg), &[mask(rows)]);
        assert_eq!(count(&[]), 4);
        assert_eq!(count(&[0, 7, 17]), 2);
        assert_eq!(count(&[8, 15, 16, 29]), 1);
        assert_eq!(count(&[1, 9, 20, 24]), 0);
        assert_eq!(pruned_pages(std::slice::from_ref(&rg), &[None]), 0);
        // What the exact scoring of the matches reads: their pages' bytes.
        let pages = |rows: &[usize]| matched_pages(std::slice::from_ref(&rg), &[mask(rows)], [0]);
        assert_eq!(pages(&[]), Some((0, 0)));
        assert_eq!(pages(&[0, 7, 17]), Some((2, 200)));
        assert_eq!(pages(&[1, 9, 20, 24]), Some((4, 400)));
        let unknown = Arc::new(DecodedRowGroup {
            vector_pages: None,
            rowids: Vec::new(),
            vectors: Vec::<f32>::new().into(),
            codes: None,
            payload: None,
            fast_codes: Default::default(),
            ..*rg
        });
        assert_eq!(matched_pages(&[unknown], &[mask(&[1])], [0]), None);
    }

    #[test]
    fn a_row_is_found_in_its_page_whatever_the_page_sizes() {
        use parquet::file::page_index::offset_index::PageLocation;
        let group = |firsts: &[i64], rows: i64| DecodedRowGroup {
            cid: 0,
            rowids: (0..rows).collect(),
            vectors: Vec::<f32>::new().into(),
            codes: None,
            vector_pages: Some(
                firsts
                    .iter()
                    .map(|&first| PageLocation {
                        offset: first * 100,
                        compressed_page_size: 100,
                        first_row_index: first,
                    })
                    .collect::<Vec<_>>()
                    .into(),
            ),
            payload: None,
            file: 0,
            row_group: 0,
            fast_codes: Default::default(),
        };
        // As the writer makes them (a short last page), one page, and
        // uneven pages where the guess from the second page misses.
        for (firsts, rows) in [
            (&[0, 4, 8, 12][..], 14),
            (&[0][..], 5),
            (&[0, 2, 9, 10, 11][..], 20),
            (&[0, 6, 7][..], 30),
        ] {
            let rg = group(firsts, rows);
            for row in 0..rows as usize {
                let want = firsts.iter().filter(|&&f| f as usize <= row).count() - 1;
                assert_eq!(
                    page_of(&[], &rg, row).unwrap(),
                    want,
                    "{firsts:?} row {row}"
                );
            }
            assert!(page_of(&[], &rg, rows as usize).is_err());
        }
    }

    #[test]
    fn every_match_of_every_probed_row_group_is_a_candidate() {
        let group = |cid: u32, rowids: Vec<i64>| {
            Arc::new(DecodedRowGroup {
                cid,
                rowids,
                vectors: Vec::<f32>::new().into(),
                codes: None,
                vector_pages: None,
                payload: None,
                file: 0,
                row_group: cid as usize,
                fast_codes: Default::default(),
            })
        };
        let loaded = [group(0, vec![10, 11, 12]), group(1, vec![20, 21])];
        let masks = [
            Some(BooleanBuffer::collect_bool(3, |i| i != 1)),
            None, // every row
        ];
        let cids: [&[u32]; 3] = [&[0], &[0, 1], &[]];
        let rows = ProbedRows {
            queries: &[],
            cids: &cids,
            loaded: &loaded,
            masks: &masks,
        };
        let got: Vec<Vec<(i64, (usize, usize))>> = matched_candidates(rows)
            .into_iter()
            .map(|t| {
                t.into_sorted()
                    .iter()
                    .map(|n| (n.rowid, unpack(n.at)))
                    .collect()
            })
            .collect();
        assert_eq!(got[0], vec![(10, (0, 0)), (12, (0, 2))]);
        assert_eq!(
            got[1],
            vec![(10, (0, 0)), (12, (0, 2)), (20, (1, 0)), (21, (1, 1))]
        );
        assert!(got[2].is_empty());
    }
}
