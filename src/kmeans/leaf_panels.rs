//! A hierarchy's leaves transposed into panels of [`LANES`] (16) leaves, so
//! that one query's distance to every leaf is computed 16 leaves per vector
//! instruction, without a horizontal sum or a call per leaf: what the probe
//! ranks its lists by (`probe::select`), and so what the build's recall
//! calibration ranks them by (`builder::calibrate`).
//!
//! Each lane sums over the dimensions in order with a fused multiply-add:
//! `Σ (q_d − c_d)²` under L2, and `−Σ q_d·c_d` (inner product) or
//! `1 − Σ q_d·c_d` (cosine, on prepared vectors). The AVX-512 and AVX2+FMA
//! kernels, chosen at run time, and the portable one (`f32::mul_add`, a
//! correctly rounded fused multiply-add on every CPU) give the same bits.
//! They differ from [`Metric::prepared_distance`] (simsimd, another
//! summation order) by rounding only.
//!
//! Several queries ([`LeafPanels::each_distances`]) go [`QUERIES`] at a
//! time through one pass over the panels with AVX-512: each panel row is
//! loaded once for all of them, so the kernel is bound by its multiply-adds
//! rather than by reading the panels from the L2 cache (a query at a time
//! reads 64 bytes a multiply-add vector). Each lane's sum is the same
//! sequence of operations either way, so the bits are too.
//!
//! The panels hold a second copy of the leaves (`nlist × dim` f32, rounded
//! up to whole panels).

use crate::distance::Metric;
use std::ops::Range;

/// Leaves per panel.
pub const LANES: usize = 16;

/// Queries whose sums [`LeafPanels::each_distances`] computes in one pass
/// over the panels (AVX-512: [`GROUP`] panels of each, 16 accumulators).
const QUERIES: usize = 4;

/// The leaves in panels: panel `p` holds dimension `d` of leaf
/// `16p + l` at `(p · dim + d) · 16 + l` (zero past the last leaf).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeafPanels {
    panels: Vec<[f32; LANES]>,
    dim: usize,
    nlist: usize,
}

impl LeafPanels {
    /// Queries that [`Self::each_distances`] takes through one pass over
    /// the panels: a caller's batches of queries in multiples of it keep
    /// every pass whole.
    pub const QUERIES: usize = QUERIES;

    /// The panels of row-major `leaves` of `dim` dimensions.
    pub fn new(leaves: &[f32], dim: usize) -> LeafPanels {
        let nlist = leaves.len().checked_div(dim).unwrap_or(0);
        let mut panels = vec![[0f32; LANES]; nlist.div_ceil(LANES) * dim];
        for (j, leaf) in leaves.chunks_exact(dim.max(1)).enumerate() {
            let (p, l) = (j / LANES, j % LANES);
            for (d, &v) in leaf.iter().enumerate() {
                panels[p * dim + d][l] = v;
            }
        }
        LeafPanels { panels, dim, nlist }
    }

    /// Leaves held.
    pub fn nlist(&self) -> usize {
        self.nlist
    }

    /// `out[i]` = the distance from `query` (prepared, `dim` values) to
    /// leaf `cids.start + i`, for the leaves `cids` (clipped to the leaves
    /// held); NaN for a query of another width.
    pub fn distances(&self, metric: Metric, query: &[f32], cids: Range<usize>, out: &mut Vec<f32>) {
        out.clear();
        let cids = cids.start.min(self.nlist)..cids.end.min(self.nlist);
        if query.len() != self.dim || self.dim == 0 {
            out.resize(cids.len(), f32::NAN);
            return;
        }
        let panels = self.panels_of(&cids);
        out.reserve(panels.len() / self.dim * LANES);
        let l2 = metric == Metric::L2;
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX-512 F and FMA were detected just above.
            unsafe { sums_avx512(query, panels, l2, out) };
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA were detected just above.
            unsafe { sums_avx2(query, panels, l2, out) };
        } else {
            sums(query, panels, l2, out);
        }
        #[cfg(not(target_arch = "x86_64"))]
        sums(query, panels, l2, out);
        oriented(metric, &cids, out);
    }

    /// [`Self::distances`] of each of `queries` (row-major, `dim` values
    /// each; a last partial row is ignored) to the leaves `cids`, handed to
    /// `each(i, distances)` for query `i` in order. With AVX-512 the
    /// queries go [`Self::QUERIES`] at a time through one pass over the panels;
    /// the distances are those of [`Self::distances`], bit for bit.
    pub fn each_distances(
        &self,
        metric: Metric,
        queries: &[f32],
        cids: Range<usize>,
        mut each: impl FnMut(usize, &[f32]),
    ) {
        let cids = cids.start.min(self.nlist)..cids.end.min(self.nlist);
        let dim = self.dim.max(1);
        let rows = queries.len() / dim;
        let mut outs: [Vec<f32>; QUERIES] = Default::default();
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if self.dim > 0 && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
            let panels = self.panels_of(&cids);
            let l2 = metric == Metric::L2;
            for group in queries.chunks_exact(QUERIES * dim) {
                let group: [&[f32]; QUERIES] = std::array::from_fn(|q| &group[q * dim..][..dim]);
                for out in &mut outs {
                    out.clear();
                }
                // SAFETY: AVX-512 F and FMA were detected just above.
                unsafe { sums_many_avx512(group, panels, l2, &mut outs) };
                for out in &mut outs {
                    oriented(metric, &cids, out);
                    each(done, out);
                    done += 1;
                }
            }
        }
        let [out, ..] = &mut outs;
        for query in queries[done * dim..].chunks_exact(dim).take(rows - done) {
            self.distances(metric, query, cids.clone(), out);
            each(done, out);
            done += 1;
        }
    }

    /// `f(i, distances)` for each query `i` of `queries` (as
    /// [`Self::each_distances`]), in parallel over tasks of
    /// [`Self::QUERIES`] queries, collected in query order.
    pub fn par_map<T: Send>(
        &self,
        metric: Metric,
        queries: &[f32],
        cids: Range<usize>,
        f: impl Fn(usize, &[f32]) -> T + Sync,
    ) -> Vec<T> {
        use rayon::prelude::*;
        let rows = queries.len() / self.dim.max(1);
        queries[..rows * self.dim]
            .par_chunks(self.dim.max(1) * QUERIES)
            .enumerate()
            .flat_map_iter(|(task, queries)| {
                let mut out = Vec::with_capacity(QUERIES);
                self.each_distances(metric, queries, cids.clone(), |i, d| {
                    out.push(f(task * QUERIES + i, d));
                });
                out
            })
            .collect()
    }

    /// The panels holding the leaves `cids` (clipped to the leaves held).
    fn panels_of(&self, cids: &Range<usize>) -> &[[f32; LANES]] {
        let (first, last) = (cids.start / LANES, cids.end.div_ceil(LANES));
        &self.panels[first * self.dim..last * self.dim]
    }
}

/// The sums of whole panels in `out`, from the panel of leaf `cids.start`
/// on, cut to the leaves `cids` and turned to `metric`'s distances.
fn oriented(metric: Metric, cids: &Range<usize>, out: &mut Vec<f32>) {
    let first = cids.start / LANES * LANES;
    out.truncate(cids.end - first);
    out.drain(..cids.start - first);
    match metric {
        Metric::L2 => {}
        Metric::InnerProduct => out.iter_mut().for_each(|d| *d = -*d),
        Metric::Cosine => out.iter_mut().for_each(|d| *d = 1.0 - *d),
    }
}

/// Each panel's 16 sums, appended to `out`: `Σ (q_d − c_d)²` when `l2`,
/// else `Σ q_d·c_d`, dimension by dimension with a fused multiply-add.
/// [`GROUP`] panels go at once, so that as many independent sums are in
/// flight (one panel's sum waits on each multiply-add).
#[inline(always)]
fn sums(query: &[f32], panels: &[[f32; LANES]], l2: bool, out: &mut Vec<f32>) {
    let dim = query.len().max(1);
    let mut groups = panels.chunks_exact(GROUP * dim);
    for group in &mut groups {
        let group: [&[[f32; LANES]]; GROUP] =
            std::array::from_fn(|g| &group[g * dim..(g + 1) * dim]);
        for acc in group_sums(query, group, l2) {
            out.extend_from_slice(&acc);
        }
    }
    for panel in groups.remainder().chunks_exact(dim) {
        let [acc] = group_sums(query, [panel], l2);
        out.extend_from_slice(&acc);
    }
}

/// The sums of `G` panels, dimension by dimension (a constant `G`, so that
/// the accumulators stay in registers).
#[inline(always)]
fn group_sums<const G: usize>(
    query: &[f32],
    panels: [&[[f32; LANES]]; G],
    l2: bool,
) -> [[f32; LANES]; G] {
    let mut acc = [[0f32; LANES]; G];
    for (d, &q) in query.iter().enumerate() {
        for (acc, panel) in acc.iter_mut().zip(panels) {
            let c = &panel[d];
            if l2 {
                for (a, &c) in acc.iter_mut().zip(c) {
                    let diff = q - c;
                    *a = diff.mul_add(diff, *a);
                }
            } else {
                for (a, &c) in acc.iter_mut().zip(c) {
                    *a = q.mul_add(c, *a);
                }
            }
        }
    }
    acc
}

/// Panels summed at once by [`sums`].
const GROUP: usize = 4;

/// [`sums`] with AVX-512 intrinsics: one register a panel, [`GROUP`]
/// panels in flight, the same fused multiply-adds in the same order (so
/// the same bits). Written out rather than left to the auto-vectoriser,
/// which kept the portable loop's accumulators on the stack in some
/// builds (a 4× slower list selection).
///
/// # Safety
/// The CPU must support AVX-512 F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn sums_avx512(query: &[f32], panels: &[[f32; LANES]], l2: bool, out: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    /// The sums of `G` panels.
    #[target_feature(enable = "avx512f,fma")]
    #[inline]
    fn group<const G: usize, const L2: bool>(
        query: &[f32],
        panels: [&[[f32; LANES]]; G],
        out: &mut Vec<f32>,
    ) {
        let mut acc = [_mm512_setzero_ps(); G];
        for (d, &q) in query.iter().enumerate() {
            let q = _mm512_set1_ps(q);
            for (acc, panel) in acc.iter_mut().zip(panels) {
                // SAFETY: `panel[d]` is 16 f32; loadu needs no alignment.
                let c = unsafe { _mm512_loadu_ps(panel[d].as_ptr()) };
                *acc = if L2 {
                    let diff = _mm512_sub_ps(q, c);
                    _mm512_fmadd_ps(diff, diff, *acc)
                } else {
                    _mm512_fmadd_ps(q, c, *acc)
                };
            }
        }
        for acc in acc {
            let mut lanes = [0f32; LANES];
            // SAFETY: `lanes` is 16 f32; storeu needs no alignment.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
            out.extend_from_slice(&lanes);
        }
    }
    if l2 {
        each_group(query, panels, out, group::<GROUP, true>, group::<1, true>);
    } else {
        each_group(query, panels, out, group::<GROUP, false>, group::<1, false>);
    }
}

/// [`sums_avx512`] of [`QUERIES`] queries at once, each query's sums
/// appended to its own vector of `outs`: [`GROUP`] panels of each query in
/// flight (16 accumulators), each panel row loaded once for all of them.
/// Every lane is the same fused multiply-adds in the same order as
/// [`sums_avx512`]'s, so the bits are its bits.
///
/// # Safety
/// The CPU must support AVX-512 F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn sums_many_avx512(
    queries: [&[f32]; QUERIES],
    panels: &[[f32; LANES]],
    l2: bool,
    outs: &mut [Vec<f32>; QUERIES],
) {
    use std::arch::x86_64::*;
    /// The sums of `G` panels for every query.
    #[target_feature(enable = "avx512f,fma")]
    #[inline]
    fn group<const G: usize, const L2: bool>(
        queries: [&[f32]; QUERIES],
        panels: [&[[f32; LANES]]; G],
        outs: &mut [Vec<f32>; QUERIES],
    ) {
        let dim = queries[0].len();
        let panels = panels.map(|p| &p[..dim]);
        let queries = queries.map(|q| &q[..dim]);
        let mut acc = [[_mm512_setzero_ps(); G]; QUERIES];
        for d in 0..dim {
            // SAFETY: `panels[g][d]` is 16 f32; loadu needs no alignment.
            let c: [__m512; G] =
                std::array::from_fn(|g| unsafe { _mm512_loadu_ps(panels[g][d].as_ptr()) });
            for (acc, query) in acc.iter_mut().zip(&queries) {
                let q = _mm512_set1_ps(query[d]);
                for (acc, &c) in acc.iter_mut().zip(&c) {
                    *acc = if L2 {
                        let diff = _mm512_sub_ps(q, c);
                        _mm512_fmadd_ps(diff, diff, *acc)
                    } else {
                        _mm512_fmadd_ps(q, c, *acc)
                    };
                }
            }
        }
        for (acc, out) in acc.iter().zip(outs.iter_mut()) {
            for acc in acc {
                let mut lanes = [0f32; LANES];
                // SAFETY: `lanes` is 16 f32; storeu needs no alignment.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
                out.extend_from_slice(&lanes);
            }
        }
    }
    let dim = queries[0].len().max(1);
    let mut groups = panels.chunks_exact(GROUP * dim);
    for panels in &mut groups {
        let panels = std::array::from_fn(|g| &panels[g * dim..(g + 1) * dim]);
        if l2 {
            group::<GROUP, true>(queries, panels, outs);
        } else {
            group::<GROUP, false>(queries, panels, outs);
        }
    }
    for panel in groups.remainder().chunks_exact(dim) {
        if l2 {
            group::<1, true>(queries, [panel], outs);
        } else {
            group::<1, false>(queries, [panel], outs);
        }
    }
}

/// [`sums`] with AVX2 and FMA intrinsics: two registers a panel, as
/// [`sums_avx512`].
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums_avx2(query: &[f32], panels: &[[f32; LANES]], l2: bool, out: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    /// The sums of `G` panels.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn group<const G: usize, const L2: bool>(
        query: &[f32],
        panels: [&[[f32; LANES]]; G],
        out: &mut Vec<f32>,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        for (d, &q) in query.iter().enumerate() {
            let q = _mm256_set1_ps(q);
            for (acc, panel) in acc.iter_mut().zip(panels) {
                for (h, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: `panel[d]` is 16 f32 and h < 2; loadu needs
                    // no alignment.
                    let c = unsafe { _mm256_loadu_ps(panel[d].as_ptr().add(8 * h)) };
                    *acc = if L2 {
                        let diff = _mm256_sub_ps(q, c);
                        _mm256_fmadd_ps(diff, diff, *acc)
                    } else {
                        _mm256_fmadd_ps(q, c, *acc)
                    };
                }
            }
        }
        for acc in acc {
            let mut lanes = [0f32; LANES];
            // SAFETY: `lanes` is 16 f32, two stores of 8; storeu needs no
            // alignment.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc[1]);
            }
            out.extend_from_slice(&lanes);
        }
    }
    if l2 {
        each_group(query, panels, out, group::<GROUP, true>, group::<1, true>);
    } else {
        each_group(query, panels, out, group::<GROUP, false>, group::<1, false>);
    }
}

/// A kernel's sums of `G` panels, appended to its last argument.
#[cfg(target_arch = "x86_64")]
type GroupSums<const G: usize> = unsafe fn(&[f32], [&[[f32; LANES]]; G], &mut Vec<f32>);

/// The panels `GROUP` at a time through `many`, the rest one at a time
/// through `one`, in order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn each_group(
    query: &[f32],
    panels: &[[f32; LANES]],
    out: &mut Vec<f32>,
    many: GroupSums<GROUP>,
    one: GroupSums<1>,
) {
    let dim = query.len().max(1);
    let mut groups = panels.chunks_exact(GROUP * dim);
    for group in &mut groups {
        let group = std::array::from_fn(|g| &group[g * dim..(g + 1) * dim]);
        // SAFETY: the caller's features were detected (see its callers).
        unsafe { many(query, group, out) };
    }
    for panel in groups.remainder().chunks_exact(dim) {
        // SAFETY: as above.
        unsafe { one(query, [panel], out) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// One leaf at a time, dimension by dimension: the panels' arithmetic
    /// (before the metric's orientation).
    fn reference(l2: bool, query: &[f32], leaf: &[f32]) -> f32 {
        query.iter().zip(leaf).fold(0f32, |a, (&q, &c)| {
            if l2 {
                (q - c).mul_add(q - c, a)
            } else {
                q.mul_add(c, a)
            }
        })
    }

    /// The raw sums of `range`'s panels by one kernel path.
    fn path_sums(
        path: &str,
        p: &LeafPanels,
        query: &[f32],
        range: Range<usize>,
        l2: bool,
    ) -> Vec<f32> {
        let (first, last) = (range.start / LANES, range.end.div_ceil(LANES));
        let panels = &p.panels[first * p.dim..last * p.dim];
        let mut out = Vec::new();
        match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the test runs this path only where AVX2 and FMA were detected.
            "avx2" => unsafe { sums_avx2(query, panels, l2, &mut out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, AVX-512 F and FMA.
            "avx512" => unsafe { sums_avx512(query, panels, l2, &mut out) },
            _ => sums(query, panels, l2, &mut out),
        }
        out[range.start - first * LANES..range.end - first * LANES].to_vec()
    }

    /// Every path this CPU runs gives the reference's bits, for any range
    /// of leaves (panel-aligned or not); the distances are the metric's
    /// orientation of them, within rounding of `prepared_distance`.
    #[test]
    fn distances_are_the_reference_on_every_path() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut paths = vec!["portable"];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                paths.push("avx2");
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                paths.push("avx512");
            }
        }
        for (nlist, dim) in [(1, 1), (16, 8), (37, 128), (100, 384), (5, 3)] {
            let leaves: Vec<f32> = (0..nlist * dim)
                .map(|_| rng.random_range(-2.0..2.0))
                .collect();
            let query: Vec<f32> = (0..dim).map(|_| rng.random_range(-2.0..2.0)).collect();
            let panels = LeafPanels::new(&leaves, dim);
            assert_eq!(panels.nlist(), nlist);
            for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                let l2 = metric == Metric::L2;
                let raw: Vec<f32> = leaves
                    .chunks_exact(dim)
                    .map(|c| reference(l2, &query, c))
                    .collect();
                let want: Vec<f32> = raw
                    .iter()
                    .map(|&s| match metric {
                        Metric::L2 => s,
                        Metric::InnerProduct => -s,
                        Metric::Cosine => 1.0 - s,
                    })
                    .collect();
                for range in [0..nlist, nlist / 3..nlist, 1.min(nlist)..nlist / 2 + 1] {
                    for path in &paths {
                        let got = path_sums(path, &panels, &query, range.clone(), l2);
                        assert_eq!(
                            got,
                            raw[range.clone()],
                            "{path} {metric:?} {nlist}×{dim} {range:?}"
                        );
                    }
                    let mut got = Vec::new();
                    panels.distances(metric, &query, range.clone(), &mut got);
                    assert_eq!(
                        got,
                        want[range.clone()],
                        "{metric:?} {nlist}×{dim} {range:?}"
                    );
                }
                // Two sums of the same n terms in f32, each within
                // n·ε·Σ|term| of the exact one.
                for (c, w) in leaves.chunks_exact(dim).zip(&want) {
                    let other = metric.prepared_distance(&query, c);
                    let magnitude: f32 = query
                        .iter()
                        .zip(c)
                        .map(|(q, c)| if l2 { (q - c) * (q - c) } else { (q * c).abs() })
                        .sum();
                    let tol = 2.0 * dim as f32 * f32::EPSILON * magnitude;
                    assert!((other - w).abs() <= tol, "{metric:?} {other} {w} {tol}");
                }
            }
        }
        let mut out = vec![1.0];
        LeafPanels::new(&[1.0, 2.0], 2).distances(Metric::L2, &[1.0], 0..1, &mut out);
        assert!(
            out.len() == 1 && out[0].is_nan(),
            "a query of another width is NaN"
        );
        eprintln!("leaf panel paths checked: {paths:?}");
    }

    /// Several queries at once give each query's own distances, bit for
    /// bit, whatever their number (whole groups of [`QUERIES`] and a
    /// rest), the range of leaves or the metric; a last partial query row
    /// is not a query.
    #[test]
    fn each_distances_are_each_query_own() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let multi = cfg!(target_arch = "x86_64")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma");
        for (nlist, dim) in [(1, 1), (37, 128), (100, 384), (70, 3)] {
            let leaves: Vec<f32> = (0..nlist * dim)
                .map(|_| rng.random_range(-2.0..2.0))
                .collect();
            let panels = LeafPanels::new(&leaves, dim);
            for n in [0, 1, 3, QUERIES, QUERIES + 1, 2 * QUERIES + 3] {
                let mut queries: Vec<f32> =
                    (0..n * dim).map(|_| rng.random_range(-2.0..2.0)).collect();
                if dim > 1 {
                    queries.push(0.5);
                }
                for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                    for range in [0..nlist, nlist / 3..nlist, 1.min(nlist)..nlist / 2 + 1] {
                        let mut seen = 0;
                        panels.each_distances(metric, &queries, range.clone(), |i, got| {
                            let mut want = Vec::new();
                            panels.distances(
                                metric,
                                &queries[i * dim..][..dim],
                                range.clone(),
                                &mut want,
                            );
                            assert_eq!(i, seen, "queries in order");
                            assert_eq!(
                                got, want,
                                "{metric:?} {nlist}×{dim} query {i} of {n} {range:?}"
                            );
                            seen += 1;
                        });
                        assert_eq!(seen, n, "{n} queries");
                    }
                }
            }
        }
        eprintln!("several queries a pass over the panels (AVX-512) checked: {multi}");
    }
}
