//! The batched nearest-centroid kernel: for every row of `data`, the index and
//! distance of its nearest centroid (and the second nearest, for the
//! trainer's bounds).
//!
//! Every metric is a per-centroid affine map of the dot product: L2 ranks by
//! `‖c‖² − 2·x·c` (‖x‖² is added at the end), inner product by `−x·c`, cosine
//! by `−x·c/‖c‖`. Two kernels compute the dot products; both run point tiles
//! of [`POINT_TILE`] rows in parallel on rayon and visit the centroids in
//! ascending order, so results do not depend on the thread count and ties go
//! to the smaller centroid index.
//!
//! - **Packed AVX2/FMA** (x86-64 with both features, detected at run time):
//!   the centroids are packed once into panels of 16 interleaved columns; a
//!   6-point × 16-centroid register block accumulates the dot products with
//!   FMAs and folds them straight into the running top-2, so no distance
//!   matrix is ever written. The panel (8 KiB at d = 128) stays in L1 while
//!   the point tile streams from L2.
//! - **Packed AVX-512** (x86-64 with AVX-512F, preferred when present): the
//!   same scheme with panels of 32 columns and a 12-point × 32-centroid
//!   block (24 of the 32 vector registers accumulate).
//! - **SGEMM** (every other machine): one `matrixmultiply::sgemm` per tile of
//!   points × [`CENTROID_TILE`] centroids, then a scan of the output.
//!
//! Both packed kernels read a tile's points through a pointer each
//! (`Points`), so the approximate Lloyd's groups are read where they lie
//! in the sample instead of gathered first (SGEMM gathers them). For the
//! top-2 (`Fold::TOP2`) they offer only a panel's two best lanes below a
//! point's threshold, found in registers: in a point's first panels most
//! lanes are below it, and leaving the registers one by one took about a
//! seventh of the top-2 kernel's time in the default embeddings build.
//!
//! `docs/benchmarks.md` records the measured rate of each (and of a blocked
//! simsimd loop, the slowest). The k-means trainer and the build job (assign
//! every source vector) call [`nearest`]; a query's lists are ranked by
//! [`super::LeafPanels`] instead (every distance, not the nearest two).

use super::error::KMeansError;
pub use super::kernel::Kernel;
use crate::distance::{Metric, check_matrix, squared_norm, squared_norms};
use rayon::prelude::*;

/// Points per tile (the unit of parallel work; rows of one GEMM).
pub const POINT_TILE: usize = 256;
/// Centroids per tile of the SGEMM kernel (columns of one GEMM).
pub const CENTROID_TILE: usize = 1024;

/// Nearest centroid of every row of `data` (row-major, width `dim`) among the
/// rows of `centroids`: returns `(labels, distances)`, one entry per row, the
/// distances in `metric`'s orientation (L2: squared, clamped at 0; IP: −dot;
/// cosine: 1 − cos). Ties go to the smaller centroid index.
///
/// # Errors
/// [`KMeansError::Input`] when either matrix has a bad shape or a non-finite
/// value, [`KMeansError::NoCentroids`] when `centroids` is empty.
pub fn nearest(
    data: &[f32],
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> Result<(Vec<u32>, Vec<f32>), KMeansError> {
    nearest_with(Kernel::detect(), data, centroids, dim, metric)
}

/// [`nearest`] with a chosen [`Kernel`].
///
/// # Errors
/// As [`nearest`], and [`KMeansError::UnsupportedKernel`] when this CPU
/// cannot run `kernel`.
pub fn nearest_with(
    kernel: Kernel,
    data: &[f32],
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> Result<(Vec<u32>, Vec<f32>), KMeansError> {
    check_matrix(data, dim)?;
    if check_matrix(centroids, dim)? == 0 {
        return Err(KMeansError::NoCentroids);
    }
    if !kernel.is_supported() {
        return Err(KMeansError::UnsupportedKernel(kernel));
    }
    let (labels, first, _) = top2(kernel, data, None, centroids, dim, metric);
    Ok((labels, first))
}

/// [`nearest`] without the input checks (callers have validated the shapes).
pub(crate) fn nearest_unchecked(
    data: &[f32],
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>) {
    let (labels, first, _) = nearest2_unchecked(data, centroids, dim, metric);
    (labels, first)
}

/// Like [`nearest_unchecked`], also returning the distance to the second
/// nearest centroid (∞ when there is only one), for the trainer's bounds.
pub(crate) fn nearest2_unchecked(
    data: &[f32],
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    top2(Kernel::detect(), data, None, centroids, dim, metric)
}

/// [`nearest2_unchecked`] for the rows `rows` of `data` only (results in the
/// order of `rows`). The packed kernels read the rows where they lie (SGEMM
/// gathers each tile's into a reused buffer), so no copy of the subset is
/// ever materialised.
pub(crate) fn nearest2_rows_unchecked(
    data: &[f32],
    rows: &[u32],
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    top2(Kernel::detect(), data, Some(rows), centroids, dim, metric)
}

/// Rows in groups, each group with its own candidate centroids: what
/// [`nearest_among_unchecked`] searches. Group `g` is the rows
/// `order[starts[g]..starts[g + 1]]`, compared with the centroids
/// `lists[g]` only (ascending ids, so ties go to the smaller id).
pub(crate) struct Groups<'a> {
    pub order: &'a [u32],
    pub starts: &'a [usize],
    pub lists: &'a [Vec<u32>],
}

/// The nearest centroid of every row of `data` among its group's candidates
/// (`(labels, distances)`, indexed by row, as [`nearest`]; a row in no group
/// gets label 0 at distance ∞). Groups run in parallel, each one packing its
/// candidates once and sending its rows through the same tile kernel as a
/// full assignment, so a group's answer is exactly the full kernel's answer
/// over those candidates, whatever the thread count.
pub(crate) fn nearest_among_unchecked(
    data: &[f32],
    dim: usize,
    centroids: &[f32],
    metric: Metric,
    groups: &Groups<'_>,
) -> (Vec<u32>, Vec<f32>) {
    let kernel = Kernel::detect();
    let per_group: Vec<Vec<(u32, u32, f32)>> = groups
        .lists
        .par_iter()
        .enumerate()
        .map_init(
            || (Vec::new(), Vec::new(), Vec::new()),
            |(candidates, gathered, scratch): &mut (Vec<f32>, Vec<f32>, Vec<f32>), (g, list)| {
                let rows = &groups.order[groups.starts[g]..groups.starts[g + 1]];
                if rows.is_empty() || list.is_empty() {
                    return Vec::new();
                }
                candidates.clear();
                for &c in list {
                    candidates.extend_from_slice(&centroids[c as usize * dim..][..dim]);
                }
                let prepared = Prepared::new(kernel, candidates, dim, metric);
                if kernel == Kernel::Sgemm {
                    scratch.resize(POINT_TILE * CENTROID_TILE.min(prepared.k), 0.0);
                }
                let mut out = Vec::with_capacity(rows.len());
                let (mut l, mut d1, mut d2) = (Vec::new(), Vec::new(), Vec::new());
                for chunk in rows.chunks(POINT_TILE) {
                    for v in [&mut d1, &mut d2] {
                        v.clear();
                        v.resize(chunk.len(), 0.0);
                    }
                    l.clear();
                    l.resize(chunk.len(), 0);
                    let points = Points::Picked(data, chunk);
                    prepared.tile(points, &mut l, &mut d1, &mut d2, scratch, gathered);
                    out.extend(
                        chunk
                            .iter()
                            .zip(&l)
                            .zip(&d1)
                            .map(|((&r, &j), &d)| (r, list[j as usize], d)),
                    );
                }
                out
            },
        )
        .collect();
    let n = data.len() / dim;
    let (mut labels, mut dists) = (vec![0u32; n], vec![f32::INFINITY; n]);
    for (r, label, dist) in per_group.into_iter().flatten() {
        labels[r as usize] = label;
        dists[r as usize] = dist;
    }
    (labels, dists)
}

/// Labels, best and second-best distances of every row of `data` (or of the
/// listed `rows`), on a supported kernel.
fn top2(
    kernel: Kernel,
    data: &[f32],
    rows: Option<&[u32]>,
    centroids: &[f32],
    dim: usize,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let n = rows.map_or(data.len() / dim, <[u32]>::len);
    let prepared = Prepared::new(kernel, centroids, dim, metric);
    let scratch_len = match kernel {
        Kernel::Sgemm => POINT_TILE * CENTROID_TILE.min(prepared.k),
        Kernel::PackedAvx2 | Kernel::PackedAvx512 => 0,
    };
    let (mut labels, mut first, mut second) = (vec![0u32; n], vec![0f32; n], vec![0f32; n]);
    labels
        .par_chunks_mut(POINT_TILE)
        .zip(first.par_chunks_mut(POINT_TILE))
        .zip(second.par_chunks_mut(POINT_TILE))
        .enumerate()
        .for_each_init(
            || (vec![0f32; scratch_len], Vec::new()),
            |(scratch, gathered), (t, ((l, d1), d2))| {
                let start = t * POINT_TILE;
                let x = match rows {
                    None => Points::Rows(&data[start * dim..(start + l.len()) * dim]),
                    Some(rows) => Points::Picked(data, &rows[start..start + l.len()]),
                };
                prepared.tile(x, l, d1, d2, scratch, gathered)
            },
        );
    (labels, first, second)
}

/// The points of a tile: a row-major matrix, or rows of a larger one picked
/// by index. The packed kernels read picked rows where they are; SGEMM
/// first gathers them into a reused buffer ([`Points::contiguous`]).
#[derive(Debug, Clone, Copy)]
enum Points<'a> {
    Rows(&'a [f32]),
    Picked(&'a [f32], &'a [u32]),
}

impl<'a> Points<'a> {
    /// Points in the tile, for rows `dim` wide.
    fn len(self, dim: usize) -> usize {
        match self {
            Points::Rows(x) => x.len() / dim.max(1),
            Points::Picked(_, rows) => rows.len(),
        }
    }

    /// Point `i` of the tile (panics past its end, or where a picked row
    /// lies outside the matrix).
    #[inline(always)]
    fn row(self, i: usize, dim: usize) -> &'a [f32] {
        match self {
            Points::Rows(x) => &x[i * dim..][..dim],
            Points::Picked(data, rows) => &data[rows[i] as usize * dim..][..dim],
        }
    }

    /// The points as one row-major matrix: their own, or gathered into `buf`.
    fn contiguous<'b>(self, dim: usize, buf: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        match self {
            Points::Rows(x) => x,
            Points::Picked(..) => {
                buf.clear();
                for i in 0..self.len(dim) {
                    buf.extend_from_slice(self.row(i, dim));
                }
                buf
            }
        }
    }
}

/// The pointers to points `r0..r0 + N` of `x` (`dim` wide), null past its
/// `n` points: a packed kernel's register block reads `dim` values from
/// each. Each point is checked inside its matrix here.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn row_pointers<const N: usize>(x: Points<'_>, r0: usize, n: usize, dim: usize) -> [*const f32; N] {
    std::array::from_fn(|r| {
        if r0 + r < n {
            x.row(r0 + r, dim).as_ptr()
        } else {
            std::ptr::null()
        }
    })
}

/// The first `R` of a block's `N` point pointers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn first<const R: usize, const N: usize>(rows: [*const f32; N]) -> [*const f32; R] {
    std::array::from_fn(|r| rows[r])
}

/// Centroids with their per-metric affine maps, ready for tiled search: the
/// rank score of centroid `j` is `shift[j] + scale[j]·(x·c_j)`.
struct Prepared<'a> {
    centroids: &'a [f32],
    dim: usize,
    k: usize,
    metric: Metric,
    kernel: Kernel,
    /// Padded to whole panels for the packed kernel (scale 0, shift +∞, so
    /// padding never ranks).
    scale: Vec<f32>,
    shift: Vec<f32>,
    /// Packed kernel only: the centroids as interleaved panels.
    panels: Vec<f32>,
}

impl<'a> Prepared<'a> {
    fn new(kernel: Kernel, centroids: &'a [f32], dim: usize, metric: Metric) -> Self {
        let k = centroids.len() / dim;
        let norms = squared_norms(centroids, dim);
        let (mut scale, mut shift): (Vec<f32>, Vec<f32>) = match metric {
            Metric::L2 => (vec![-2.0; k], norms),
            Metric::InnerProduct => (vec![-1.0; k], vec![0.0; k]),
            Metric::Cosine => (
                norms
                    .into_iter()
                    .map(|n| if n > 0.0 { -1.0 / n.sqrt() } else { 0.0 })
                    .collect(),
                vec![0.0; k],
            ),
        };
        let panels = match kernel.lanes() {
            Some(lanes) => {
                let padded = k.div_ceil(lanes) * lanes;
                scale.resize(padded, 0.0);
                shift.resize(padded, f32::INFINITY);
                pack_panels(centroids, dim, lanes)
            }
            None => Vec::new(),
        };
        Self {
            centroids,
            dim,
            k,
            metric,
            kernel,
            scale,
            shift,
            panels,
        }
    }

    /// One point tile against every centroid: running top-2, then
    /// distances. `gathered` is the SGEMM kernel's buffer for picked points
    /// (the packed kernels read them in place).
    fn tile(
        &self,
        x: Points<'_>,
        labels: &mut [u32],
        first: &mut [f32],
        second: &mut [f32],
        scratch: &mut [f32],
        gathered: &mut Vec<f32>,
    ) {
        let mut best = vec![Best::EMPTY; labels.len()];
        match self.kernel.lanes() {
            Some(_) => self.fold_packed(x, best.as_mut_slice()),
            None => self.sgemm_tile(x.contiguous(self.dim, gathered), &mut best, scratch),
        }
        let xnorms: Vec<f32> = if self.metric == Metric::InnerProduct {
            Vec::new()
        } else {
            (0..x.len(self.dim))
                .map(|i| squared_norm(x.row(i, self.dim)))
                .collect()
        };
        for (i, b) in best.into_iter().enumerate() {
            labels[i] = b.j1;
            first[i] = self.finish(b.s1, xnorms.get(i).copied());
            second[i] = self.finish(b.s2, xnorms.get(i).copied());
        }
    }

    /// The packed kernel over the point tile `x` (`dim` wide, read where
    /// it lies), each panel's scores folded into `fold`. Only for a packed
    /// kernel.
    fn fold_packed<F: Fold + ?Sized>(&self, x: Points<'_>, fold: &mut F) {
        match self.kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a `Prepared` holds a supported kernel (`top2`,
            // `nearest_among_unchecked` and `Panels::new` take it from
            // `Kernel::detect` or check it), so AVX2 and FMA are present;
            // the slices have the shapes `packed::tile` requires.
            Kernel::PackedAvx2 => unsafe {
                packed::tile(x, self.dim, &self.panels, &self.scale, &self.shift, fold)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, with AVX-512F present.
            Kernel::PackedAvx512 => unsafe {
                packed512::tile(x, self.dim, &self.panels, &self.scale, &self.shift, fold)
            },
            _ => unreachable!("fold_packed runs a packed kernel only"),
        }
    }

    /// The SGEMM kernel: one GEMM per centroid tile, then a scan of its rows.
    fn sgemm_tile(&self, x: &[f32], best: &mut [Best], scratch: &mut [f32]) {
        let (dim, m) = (self.dim, best.len());
        for c0 in (0..self.k).step_by(CENTROID_TILE) {
            let nc = CENTROID_TILE.min(self.k - c0);
            let c = &self.centroids[c0 * dim..(c0 + nc) * dim];
            let out = &mut scratch[..m * nc];
            // out[i][j] = x_i · c_j  (x: m×dim row-major, cᵀ: dim×nc).
            // SAFETY: the slices hold m·dim, nc·dim and m·nc f32 and the
            // strides below stay inside them.
            unsafe {
                matrixmultiply::sgemm(
                    m,
                    dim,
                    nc,
                    1.0,
                    x.as_ptr(),
                    dim as isize,
                    1,
                    c.as_ptr(),
                    1,
                    dim as isize,
                    0.0,
                    out.as_mut_ptr(),
                    nc as isize,
                    1,
                );
            }
            let (scale, shift) = (&self.scale[c0..c0 + nc], &self.shift[c0..c0 + nc]);
            for (row, b) in out.chunks_exact(nc).zip(best.iter_mut()) {
                for (j, ((&dot, &a), &s)) in row.iter().zip(scale).zip(shift).enumerate() {
                    b.offer(s + a * dot, c0 + j);
                }
            }
        }
    }

    /// The metric's distance from a rank score and the point's squared norm.
    #[inline]
    fn finish(&self, s: f32, xnorm: Option<f32>) -> f32 {
        match (self.metric, xnorm) {
            _ if s == f32::INFINITY => s,
            (Metric::L2, Some(xn)) => (xn + s).max(0.0),
            (Metric::Cosine, Some(xn)) if xn > 0.0 && s != 0.0 => 1.0 + s / xn.sqrt(),
            (Metric::Cosine, _) => 1.0,
            _ => s,
        }
    }
}

/// Rows packed as the centroids of this CPU's packed kernel, for a caller's
/// own [`Fold`] of their dot products with streamed points: the build's
/// recall calibration keeps each query's top-k this way (its queries are
/// the panels, the table's rows the points).
pub(crate) struct Panels<'a>(Prepared<'a>);

impl<'a> Panels<'a> {
    /// `rows` (row-major, `dim` wide) in panels for `kernel`, with
    /// `metric`'s rank scores (L2: `‖c‖² − 2·x·c`; inner product: `−x·c`;
    /// cosine: `−x·c/‖c‖`); `None` for the SGEMM kernel or one this CPU
    /// cannot run.
    pub(crate) fn new(kernel: Kernel, rows: &'a [f32], dim: usize, metric: Metric) -> Option<Self> {
        kernel.lanes()?;
        kernel
            .is_supported()
            .then(|| Panels(Prepared::new(kernel, rows, dim, metric)))
    }

    /// The packed rows with their padding: a [`Threshold::Lanes`] base must
    /// cover this many.
    pub(crate) fn padded(&self) -> usize {
        self.0.scale.len()
    }

    /// Folds the scores of every point of `x` against every packed row into
    /// `fold` (points `0..x.len() / dim`, rows in ascending order per point).
    pub(crate) fn fold<F: Fold + ?Sized>(&self, x: &[f32], fold: &mut F) {
        self.0.fold_packed(Points::Rows(x), fold);
    }
}

/// Centroids per packed panel of the AVX2 kernel (two AVX2 registers).
const LANES: usize = 16;
/// Centroids per packed panel of the AVX-512 kernel (two AVX-512 registers).
const LANES512: usize = 32;

impl Kernel {
    /// Centroids per packed panel; `None` for the unpacked SGEMM kernel.
    fn lanes(self) -> Option<usize> {
        match self {
            Kernel::PackedAvx2 => Some(LANES),
            Kernel::PackedAvx512 => Some(LANES512),
            Kernel::Sgemm => None,
        }
    }
}

/// Packs row-major centroids into panels of `lanes` centroids: panel `p`
/// holds `c[p·lanes + l][d]` at `p·lanes·dim + d·lanes + l`, zero-padded.
///
/// Written in the output's order, one panel at a time: the panel's rows are
/// read a dimension at a time (`lanes` cache lines in use), where writing
/// row by row touched a new cache line for every value (a panel is 48 KiB
/// at d = 384) and was 5 % of a build's CPU time.
fn pack_panels(centroids: &[f32], dim: usize, lanes: usize) -> Vec<f32> {
    let k = centroids.len() / dim;
    let mut out = vec![0f32; k.div_ceil(lanes) * lanes * dim];
    for (panel, rows) in out
        .chunks_exact_mut(lanes * dim)
        .zip(centroids[..k * dim].chunks(lanes * dim))
    {
        let n = rows.len() / dim;
        for (d, slot) in panel.chunks_exact_mut(lanes).enumerate() {
            for (j, v) in slot[..n].iter_mut().enumerate() {
                *v = rows[j * dim + d];
            }
        }
    }
    out
}

/// The packed AVX2/FMA kernel.
#[cfg(target_arch = "x86_64")]
mod packed {
    use super::{Fold, LANES, Points, Threshold, first, row_pointers};
    use std::arch::x86_64::*;

    /// Points per register block: 6 × 2 accumulators + 2 panel loads + 1
    /// broadcast fit the 16 AVX2 registers.
    const ROWS: usize = 6;
    /// Panels visited per block of points: 2 × 8 KiB at d = 128, plus the
    /// block's 3 KiB of points, fit a 32 KiB L1.
    const PANELS: usize = 2;

    /// Folds every panel into the top-2 of each point of the tile `x`
    /// (rows of width `dim`, read where they are). `panels` holds
    /// `scale.len()` packed centroids, `scale` and `shift` are padded to
    /// whole panels.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn tile<F: Fold + ?Sized>(
        x: Points<'_>,
        dim: usize,
        panels: &[f32],
        scale: &[f32],
        shift: &[f32],
        fold: &mut F,
    ) {
        let n = x.len(dim);
        assert!(
            scale.len() == shift.len()
                && scale.len().is_multiple_of(LANES)
                && panels.len() == scale.len() * dim,
            "packed kernel shapes"
        );
        if let Points::Rows(rows) = x {
            assert_eq!(rows.len(), n * dim, "packed kernel shapes");
        }
        let full = n / ROWS * ROWS;
        let panel_len = LANES * dim;
        // Groups of PANELS panels stay in L1 while each block of ROWS points
        // is read once from L2 for the whole group.
        for g0 in (0..scale.len() / LANES).step_by(PANELS) {
            let g1 = (g0 + PANELS).min(scale.len() / LANES);
            let mut run = |r0: usize, rows: usize| {
                let xr: [*const f32; ROWS] = row_pointers(x, r0, n, dim);
                for p in g0..g1 {
                    let (panel, a, b) = (
                        &panels[p * panel_len..(p + 1) * panel_len],
                        &scale[p * LANES..(p + 1) * LANES],
                        &shift[p * LANES..(p + 1) * LANES],
                    );
                    let at = (r0, p * LANES);
                    // SAFETY (every arm): the first `rows` pointers of `xr`
                    // are points of `x`, and each arm passes that many.
                    unsafe {
                        match rows {
                            ROWS => block::<ROWS, F>(xr, dim, panel, (a, b), fold, at),
                            1 => block::<1, F>(first(xr), dim, panel, (a, b), fold, at),
                            2 => block::<2, F>(first(xr), dim, panel, (a, b), fold, at),
                            3 => block::<3, F>(first(xr), dim, panel, (a, b), fold, at),
                            4 => block::<4, F>(first(xr), dim, panel, (a, b), fold, at),
                            5 => block::<5, F>(first(xr), dim, panel, (a, b), fold, at),
                            _ => {}
                        }
                    }
                }
            };
            for r0 in (0..full).step_by(ROWS) {
                run(r0, ROWS);
            }
            run(full, n - full);
        }
    }

    /// `R` points × one panel: dot products in registers, then the rank
    /// scores `b + a·dot`; only lanes below a point's threshold leave the
    /// registers, in ascending centroid order (for a [`Fold::TOP2`] fold,
    /// only the panel's two best of them). `x` points at each point's first
    /// value.
    ///
    /// # Safety
    /// Each pointer of `x` must be the start of `dim` readable values.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block<const R: usize, F: Fold + ?Sized>(
        x: [*const f32; R],
        dim: usize,
        panel: &[f32],
        (a, b): (&[f32], &[f32]),
        fold: &mut F,
        (r0, j0): (usize, usize),
    ) {
        debug_assert!(panel.len() == LANES * dim && x.iter().all(|p| !p.is_null()));
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let pp = panel.as_ptr();
        for d in 0..dim {
            // SAFETY: d < dim and r < R: every point pointer is the start of
            // `dim` values (the caller's), and `panel` holds LANES·dim values.
            unsafe {
                let c0 = _mm256_loadu_ps(pp.add(d * LANES));
                let c1 = _mm256_loadu_ps(pp.add(d * LANES + 8));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let xv = _mm256_broadcast_ss(&*x[r].add(d));
                    acc_r[0] = _mm256_fmadd_ps(xv, c0, acc_r[0]);
                    acc_r[1] = _mm256_fmadd_ps(xv, c1, acc_r[1]);
                }
            }
        }
        // SAFETY: `a` and `b` hold LANES values.
        let (a0, a1, b0, b1) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr()),
                _mm256_loadu_ps(a.as_ptr().add(8)),
                _mm256_loadu_ps(b.as_ptr()),
                _mm256_loadu_ps(b.as_ptr().add(8)),
            )
        };
        for (r, acc_r) in acc.iter().enumerate() {
            let s0 = _mm256_fmadd_ps(a0, acc_r[0], b0);
            let s1 = _mm256_fmadd_ps(a1, acc_r[1], b1);
            let (t0, t1) = match fold.threshold(r0 + r, j0) {
                Threshold::Row(t) => (_mm256_set1_ps(t), _mm256_set1_ps(t)),
                Threshold::Lanes(base, t) => {
                    assert!(base.len() >= LANES, "a lane threshold per lane");
                    let t = _mm256_set1_ps(t);
                    // SAFETY: `base` holds at least LANES values (checked).
                    unsafe {
                        (
                            _mm256_sub_ps(_mm256_loadu_ps(base.as_ptr()), t),
                            _mm256_sub_ps(_mm256_loadu_ps(base.as_ptr().add(8)), t),
                        )
                    }
                }
            };
            let (below0, below1) = (
                _mm256_cmp_ps::<_CMP_LT_OQ>(s0, t0),
                _mm256_cmp_ps::<_CMP_LT_OQ>(s1, t1),
            );
            let mut mask =
                (_mm256_movemask_ps(below0) as u32) | ((_mm256_movemask_ps(below1) as u32) << 8);
            if mask == 0 {
                continue;
            }
            let mut s = [0f32; LANES];
            // SAFETY: `s` holds LANES = 16 values.
            unsafe {
                _mm256_storeu_ps(s.as_mut_ptr(), s0);
                _mm256_storeu_ps(s.as_mut_ptr().add(8), s1);
            }
            if F::TOP2 && mask.count_ones() > 2 {
                // As the AVX-512 kernel: the panel's two best lanes only.
                let inf = _mm256_set1_ps(f32::INFINITY);
                let (v0, v1) = (
                    _mm256_blendv_ps(inf, s0, below0),
                    _mm256_blendv_ps(inf, s1, below1),
                );
                let l1 = lowest(v0, v1, mask);
                let (lane0, lane1) = (
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                    _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
                );
                let at = _mm256_set1_epi32(l1 as i32);
                let (v0, v1) = (
                    _mm256_blendv_ps(v0, inf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(lane0, at))),
                    _mm256_blendv_ps(v1, inf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(lane1, at))),
                );
                let l2 = lowest(v0, v1, mask & !(1 << l1));
                for l in [l1.min(l2), l1.max(l2)] {
                    fold.offer(r0 + r, j0 + l, s[l]);
                }
                continue;
            }
            while mask != 0 {
                let l = mask.trailing_zeros() as usize;
                fold.offer(r0 + r, j0 + l, s[l]);
                mask &= mask - 1;
            }
        }
    }

    /// The lowest lane of `mask` holding the least score (lanes 0–7 in
    /// `v0`, 8–15 in `v1`, +∞ in every lane outside `mask`; at least one
    /// lane, none NaN).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn lowest(v0: __m256, v1: __m256, mask: u32) -> usize {
        let m = _mm256_min_ps(v0, v1);
        let m = _mm256_min_ps(m, _mm256_permute2f128_ps::<1>(m, m));
        let m = _mm256_min_ps(m, _mm256_shuffle_ps::<0b0100_1110>(m, m));
        let least = _mm256_min_ps(m, _mm256_shuffle_ps::<0b1011_0001>(m, m));
        let equal = (_mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v0, least)) as u32)
            | ((_mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v1, least)) as u32) << 8);
        (equal & mask).trailing_zeros() as usize
    }
}

/// The packed AVX-512 kernel: [`packed`]'s scheme with 32-centroid panels.
#[cfg(target_arch = "x86_64")]
mod packed512 {
    use super::{Fold, LANES512 as LANES, Points, Threshold, first, row_pointers};
    use std::arch::x86_64::*;

    /// Points per register block: 12 × 2 accumulators + 2 panel loads + 1
    /// broadcast fit the 32 AVX-512 registers.
    const ROWS: usize = 12;

    /// Folds every panel into the top-2 of each point of the tile `x`
    /// (rows of width `dim`, read where they are). `panels` holds
    /// `scale.len()` packed centroids, `scale` and `shift` are padded to
    /// whole panels. One panel (16 KiB at d = 128) stays in L1 while the
    /// blocks of points stream past it.
    #[target_feature(enable = "avx512f")]
    pub(super) fn tile<F: Fold + ?Sized>(
        x: Points<'_>,
        dim: usize,
        panels: &[f32],
        scale: &[f32],
        shift: &[f32],
        fold: &mut F,
    ) {
        let n = x.len(dim);
        assert!(
            scale.len() == shift.len()
                && scale.len().is_multiple_of(LANES)
                && panels.len() == scale.len() * dim,
            "packed kernel shapes"
        );
        if let Points::Rows(rows) = x {
            assert_eq!(rows.len(), n * dim, "packed kernel shapes");
        }
        let rows = |r0: usize| -> [*const f32; ROWS] { row_pointers(x, r0, n, dim) };
        let full = n / ROWS * ROWS;
        let panel_len = LANES * dim;
        for p in 0..scale.len() / LANES {
            let (panel, a, b) = (
                &panels[p * panel_len..(p + 1) * panel_len],
                &scale[p * LANES..(p + 1) * LANES],
                &shift[p * LANES..(p + 1) * LANES],
            );
            let j0 = p * LANES;
            for r0 in (0..full).step_by(ROWS) {
                // SAFETY: rows r0..r0 + ROWS exist (r0 + ROWS ≤ full ≤ n).
                unsafe { block::<ROWS, F>(rows(r0), dim, panel, (a, b), fold, (r0, j0)) };
            }
            let xr = rows(full);
            let at = (full, j0);
            // SAFETY (every arm): the first `n - full` pointers of `xr` are
            // rows, and each arm passes that many.
            unsafe {
                match n - full {
                    0 => {}
                    1 => block::<1, F>(first(xr), dim, panel, (a, b), fold, at),
                    2 => block::<2, F>(first(xr), dim, panel, (a, b), fold, at),
                    3 => block::<3, F>(first(xr), dim, panel, (a, b), fold, at),
                    4 => block::<4, F>(first(xr), dim, panel, (a, b), fold, at),
                    5 => block::<5, F>(first(xr), dim, panel, (a, b), fold, at),
                    6 => block::<6, F>(first(xr), dim, panel, (a, b), fold, at),
                    7 => block::<7, F>(first(xr), dim, panel, (a, b), fold, at),
                    8 => block::<8, F>(first(xr), dim, panel, (a, b), fold, at),
                    9 => block::<9, F>(first(xr), dim, panel, (a, b), fold, at),
                    10 => block::<10, F>(first(xr), dim, panel, (a, b), fold, at),
                    _ => block::<11, F>(first(xr), dim, panel, (a, b), fold, at),
                }
            }
        }
    }

    /// `R` points × one panel, as [`super::packed`]'s block; `x` points
    /// at each point's first value.
    ///
    /// # Safety
    /// Each pointer of `x` must be the start of `dim` readable values.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block<const R: usize, F: Fold + ?Sized>(
        x: [*const f32; R],
        dim: usize,
        panel: &[f32],
        (a, b): (&[f32], &[f32]),
        fold: &mut F,
        (r0, j0): (usize, usize),
    ) {
        debug_assert!(panel.len() == LANES * dim && x.iter().all(|p| !p.is_null()));
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let pp = panel.as_ptr();
        for d in 0..dim {
            // SAFETY: d < dim and r < R: every point pointer is the start of
            // `dim` values (the caller's), and `panel` holds LANES·dim values.
            unsafe {
                let c0 = _mm512_loadu_ps(pp.add(d * LANES));
                let c1 = _mm512_loadu_ps(pp.add(d * LANES + 16));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let xv = _mm512_set1_ps(*x[r].add(d));
                    acc_r[0] = _mm512_fmadd_ps(xv, c0, acc_r[0]);
                    acc_r[1] = _mm512_fmadd_ps(xv, c1, acc_r[1]);
                }
            }
        }
        // SAFETY: `a` and `b` hold LANES values.
        let (a0, a1, b0, b1) = unsafe {
            (
                _mm512_loadu_ps(a.as_ptr()),
                _mm512_loadu_ps(a.as_ptr().add(16)),
                _mm512_loadu_ps(b.as_ptr()),
                _mm512_loadu_ps(b.as_ptr().add(16)),
            )
        };
        for (r, acc_r) in acc.iter().enumerate() {
            let s0 = _mm512_fmadd_ps(a0, acc_r[0], b0);
            let s1 = _mm512_fmadd_ps(a1, acc_r[1], b1);
            let (t0, t1) = match fold.threshold(r0 + r, j0) {
                Threshold::Row(t) => (_mm512_set1_ps(t), _mm512_set1_ps(t)),
                Threshold::Lanes(base, t) => {
                    assert!(base.len() >= LANES, "a lane threshold per lane");
                    let t = _mm512_set1_ps(t);
                    // SAFETY: `base` holds at least LANES values (checked).
                    unsafe {
                        (
                            _mm512_sub_ps(_mm512_loadu_ps(base.as_ptr()), t),
                            _mm512_sub_ps(_mm512_loadu_ps(base.as_ptr().add(16)), t),
                        )
                    }
                }
            };
            let mut mask = u32::from(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(s0, t0))
                | (u32::from(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(s1, t1)) << 16);
            if mask == 0 {
                continue;
            }
            let mut s = [0f32; LANES];
            // SAFETY: `s` holds LANES = 32 values.
            unsafe {
                _mm512_storeu_ps(s.as_mut_ptr(), s0);
                _mm512_storeu_ps(s.as_mut_ptr().add(16), s1);
            }
            if F::TOP2 && mask.count_ones() > 2 {
                // A row's first panels send most lanes below its threshold;
                // its top-2 keeps only the panel's two best of them.
                let l1 = lowest(s0, s1, mask);
                let l2 = lowest(s0, s1, mask & !(1 << l1));
                for l in [l1.min(l2), l1.max(l2)] {
                    fold.offer(r0 + r, j0 + l, s[l]);
                }
                continue;
            }
            while mask != 0 {
                let l = mask.trailing_zeros() as usize;
                fold.offer(r0 + r, j0 + l, s[l]);
                mask &= mask - 1;
            }
        }
    }

    /// The lowest lane holding the least score of the lanes of `mask`
    /// (lanes 0–15 in `s0`, 16–31 in `s1`; at least one, none NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn lowest(s0: __m512, s1: __m512, mask: u32) -> usize {
        let inf = _mm512_set1_ps(f32::INFINITY);
        let v0 = _mm512_mask_blend_ps(mask as u16, inf, s0);
        let v1 = _mm512_mask_blend_ps((mask >> 16) as u16, inf, s1);
        let least = _mm512_set1_ps(_mm512_reduce_min_ps(_mm512_min_ps(v0, v1)));
        let equal = u32::from(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v0, least))
            | (u32::from(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(v1, least)) << 16);
        (equal & mask).trailing_zeros() as usize
    }
}

/// What a packed register block does with the rank scores
/// `shift[j] + scale[j]·(x·c_j)` of its rows against one panel of
/// centroids: the kernel compares a panel's scores with a row's threshold in
/// registers, and only lanes below it leave them, in ascending `j`.
pub(crate) trait Fold {
    /// Row `r`'s threshold over the panel of centroids `j0..j0 + lanes`.
    fn threshold(&self, r: usize, j0: usize) -> Threshold<'_>;
    /// Row `r`'s score `s` against centroid `j`, below its threshold.
    fn offer(&mut self, r: usize, j: usize, s: f32);
    /// True for a fold that keeps only each row's two best scores (the
    /// first offered among equal ones): a kernel may then offer only a
    /// panel's two best lanes below the threshold (the lower lane first
    /// among equal scores), in ascending `j`, which leaves the fold as
    /// offering every lane would.
    const TOP2: bool = false;
}

/// A row's threshold over a panel ([`Fold::threshold`]).
pub(crate) enum Threshold<'a> {
    /// One value for every lane.
    Row(f32),
    /// `base[l] − t` for lane `l` (`base` holds at least a panel's lanes).
    Lanes(&'a [f32], f32),
}

/// The assignment's fold: each point's running top-2.
impl Fold for [Best] {
    #[inline(always)]
    fn threshold(&self, r: usize, _: usize) -> Threshold<'_> {
        Threshold::Row(self[r].s2)
    }

    #[inline(always)]
    fn offer(&mut self, r: usize, j: usize, s: f32) {
        self[r].offer(s, j);
    }

    const TOP2: bool = true;
}

/// Running best and second-best scores of one point.
#[derive(Debug, Clone, Copy)]
struct Best {
    s1: f32,
    j1: u32,
    s2: f32,
}

impl Best {
    const EMPTY: Self = Self {
        s1: f32::INFINITY,
        j1: 0,
        s2: f32::INFINITY,
    };

    /// Strict `<` keeps the smaller index on ties (offers come in ascending
    /// centroid order).
    #[inline(always)]
    fn offer(&mut self, s: f32, j: usize) {
        if s < self.s2 {
            if s < self.s1 {
                self.s2 = self.s1;
                self.s1 = s;
                self.j1 = j as u32;
            } else {
                self.s2 = s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::DistanceError;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Panel `p` holds rows `p·lanes..` dimension-major (value `d` of lane
    /// `j` at `d·lanes + j`), zero in the lanes past the last row.
    #[test]
    fn panels_hold_rows_dimension_major_zero_padded() {
        for (k, dim, lanes) in [
            (1, 1, 16),
            (5, 3, 16),
            (33, 7, 32),
            (64, 384, 32),
            (70, 2, 16),
        ] {
            let rows: Vec<f32> = (0..k * dim).map(|i| i as f32 + 1.0).collect();
            let packed = pack_panels(&rows, dim, lanes);
            assert_eq!(packed.len(), k.div_ceil(lanes) * lanes * dim);
            for (at, &v) in packed.iter().enumerate() {
                let (p, d, j) = (at / (lanes * dim), at % (lanes * dim) / lanes, at % lanes);
                let row = p * lanes + j;
                let want = if row < k { rows[row * dim + d] } else { 0.0 };
                assert_eq!(v, want, "k {k} dim {dim} lanes {lanes} at {at}");
            }
        }
    }

    /// `len` values uniform in [-1, 1).
    fn uniform(rng: &mut ChaCha8Rng, len: usize) -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    fn brute(data: &[f32], cents: &[f32], dim: usize, metric: Metric) -> Vec<(u32, f32)> {
        data.chunks_exact(dim)
            .map(|x| {
                let mut best = (0u32, f32::INFINITY);
                for (j, c) in cents.chunks_exact(dim).enumerate() {
                    let d = metric.distance(x, c);
                    if d < best.1 {
                        best = (j as u32, d);
                    }
                }
                best
            })
            .collect()
    }

    const KERNELS: [Kernel; 3] = [Kernel::PackedAvx512, Kernel::PackedAvx2, Kernel::Sgemm];

    /// The GEMM formulation's error bound, from f32 accumulation of `dim`
    /// products in any order ((d + 2)·ε·Σ|terms|, as `distance`'s table) over
    /// the terms it sums: ‖x‖², 2x·c and ‖c‖² under L2; x·c under inner
    /// product; under cosine x·c scaled by the two f32 norms (a few ε more).
    /// FMA, SIMD width and blocking change the order, never the bound.
    fn gemm_bound(metric: Metric, x: &[f32], c: &[f32]) -> f32 {
        let eps = f64::from(f32::EPSILON);
        let d = x.len() as f64;
        let abs_xc: f64 = x.iter().zip(c).map(|(a, b)| f64::from(a * b).abs()).sum();
        let n2 = |v: &[f32]| v.iter().map(|&a| f64::from(a) * f64::from(a)).sum::<f64>();
        let b = match metric {
            Metric::L2 => (d + 4.0) * eps * (n2(x) + 2.0 * abs_xc + n2(c)),
            Metric::InnerProduct => (d + 2.0) * eps * abs_xc,
            Metric::Cosine => (d + 8.0) * eps * (abs_xc / (n2(x) * n2(c)).sqrt() + 1.0),
        };
        b as f32
    }

    #[test]
    fn both_kernels_agree_with_pairwise_distances() {
        let supported: Vec<Kernel> = KERNELS.into_iter().filter(|k| k.is_supported()).collect();
        eprintln!("assignment kernels on this CPU: {supported:?}");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        // Sizes straddle the tile edges: 600 points (3 tiles), 1100
        // centroids (2 tiles); a panel of 300 dimensions is 37.5 KiB.
        for (n, k, dim) in [(600, 1100, 17), (5, 3, 1), (300, 7, 128), (301, 70, 300)] {
            let (data, cents) = (uniform(&mut rng, n * dim), uniform(&mut rng, k * dim));
            for (metric, kernel) in [Metric::L2, Metric::InnerProduct, Metric::Cosine]
                .into_iter()
                .flat_map(|m| KERNELS.map(|k| (m, k)))
                .filter(|(_, k)| k.is_supported())
            {
                let (labels, dists) = nearest_with(kernel, &data, &cents, dim, metric).unwrap();
                for (i, (bl, bd)) in brute(&data, &cents, dim, metric).into_iter().enumerate() {
                    // Different labels are allowed only for near-ties.
                    let x = &data[i * dim..(i + 1) * dim];
                    let c = &cents[labels[i] as usize * dim..][..dim];
                    let got = metric.distance(x, c);
                    let tol = gemm_bound(metric, x, c);
                    assert!(
                        got - bd <= 2.0 * tol,
                        "{kernel:?} {metric:?} row {i}: label {} vs {bl}",
                        labels[i]
                    );
                    assert!(
                        (dists[i] - got).abs() <= tol,
                        "{kernel:?} {metric:?} row {i}: {} vs {got}, tol {tol}",
                        dists[i]
                    );
                }
            }
        }
    }

    /// Both packed kernels sum each score over the dimensions in order,
    /// with one FMA a term, and apply the same affine map: they agree bit
    /// for bit, whatever their register blocks.
    #[test]
    fn the_packed_kernels_give_the_same_scores_bit_for_bit() {
        let (a, b) = (Kernel::PackedAvx2, Kernel::PackedAvx512);
        if !(a.is_supported() && b.is_supported()) {
            eprintln!("skipped: this CPU lacks {a:?} or {b:?}");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for (n, k, dim) in [(301, 70, 300), (50, 40, 384), (13, 33, 129)] {
            let (data, cents) = (uniform(&mut rng, n * dim), uniform(&mut rng, k * dim));
            for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                let got_a = nearest_with(a, &data, &cents, dim, metric).unwrap();
                let got_b = nearest_with(b, &data, &cents, dim, metric).unwrap();
                assert_eq!(got_a.0, got_b.0, "{metric:?} d {dim}: labels");
                let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got_a.1),
                    bits(&got_b.1),
                    "{metric:?} d {dim}: distances"
                );
            }
        }
    }

    #[test]
    fn ties_go_to_the_smaller_centroid_index() {
        let cents = [1.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let data = [0.0, 0.0, 5.0, 0.0];
        for kernel in KERNELS.into_iter().filter(|k| k.is_supported()) {
            let (labels, dists) = nearest_with(kernel, &data, &cents, 2, Metric::L2).unwrap();
            assert_eq!(labels, vec![0, 0], "{kernel:?}");
            assert_eq!(dists, vec![1.0, 16.0], "{kernel:?}");
        }
        // Ties across panels and register blocks: 40 copies of one centroid,
        // 13 points (full blocks of 6 or 12 and a remainder).
        let cents: Vec<f32> = (0..40).flat_map(|_| [0.5f32, -1.0, 2.0]).collect();
        let data: Vec<f32> = (0..13).flat_map(|i| [i as f32, 1.0, 0.0]).collect();
        for kernel in KERNELS.into_iter().filter(|k| k.is_supported()) {
            let (labels, _) = nearest_with(kernel, &data, &cents, 3, Metric::L2).unwrap();
            assert_eq!(labels, vec![0; 13], "{kernel:?}");
        }
    }

    /// The [`Best`] fold offered every lane below its threshold: what the
    /// kernel's reduction to a panel's two best lanes must equal.
    struct EveryLane<'a>(&'a mut [Best]);

    impl Fold for EveryLane<'_> {
        fn threshold(&self, r: usize, j0: usize) -> Threshold<'_> {
            self.0.threshold(r, j0)
        }

        fn offer(&mut self, r: usize, j: usize, s: f32) {
            self.0.offer(r, j, s);
        }
    }

    /// Small integer coordinates make many scores tie exactly, within a
    /// panel and across panels; the kernel's two best lanes of each panel
    /// leave every point's top-2 (scores, and the first index of the best)
    /// as offering every lane does, bit for bit, for points read in place
    /// or gathered.
    #[test]
    fn a_panels_two_best_lanes_leave_the_top2_as_every_lane_would() {
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        for kernel in KERNELS
            .into_iter()
            .filter(|k| k.is_supported() && k.lanes().is_some())
        {
            for (n, k, dim) in [(50, 100, 3), (13, 64, 1), (40, 33, 8)] {
                let mut ints = |len: usize| -> Vec<f32> {
                    (0..len)
                        .map(|_| rng.random_range(-2i8..=2) as f32)
                        .collect()
                };
                let (data, cents) = (ints(n * dim), ints(k * dim));
                for metric in [Metric::L2, Metric::InnerProduct] {
                    let prepared = Prepared::new(kernel, &cents, dim, metric);
                    let rows: Vec<u32> = (0..n as u32).rev().collect();
                    let reversed: Vec<f32> = rows
                        .iter()
                        .flat_map(|&r| data[r as usize * dim..][..dim].iter().copied())
                        .collect();
                    let mut every = vec![Best::EMPTY; n];
                    prepared.fold_packed(Points::Rows(&reversed), &mut EveryLane(&mut every));
                    for points in [Points::Rows(&reversed), Points::Picked(&data, &rows)] {
                        let mut two = vec![Best::EMPTY; n];
                        prepared.fold_packed(points, two.as_mut_slice());
                        for (i, (a, b)) in two.iter().zip(&every).enumerate() {
                            let bits = |b: &Best| (b.s1.to_bits(), b.j1, b.s2.to_bits());
                            assert_eq!(
                                bits(a),
                                bits(b),
                                "{kernel:?} {metric:?} n {n} k {k} row {i}"
                            );
                        }
                    }
                }
            }
            println!("top-2 folds: the {kernel:?} kernel ran");
        }
    }

    #[test]
    fn a_row_subset_gets_the_same_answers_as_the_full_matrix() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (n, k, dim) = (700, 40, 9);
        let (data, cents) = (uniform(&mut rng, n * dim), uniform(&mut rng, k * dim));
        // Spans more than two tiles, out of order, with a repeat.
        let rows: Vec<u32> = (0..n as u32).rev().step_by(2).chain([3, 3]).collect();
        let (l, d1, d2) = nearest2_unchecked(&data, &cents, dim, Metric::L2);
        let (sl, s1, s2) = nearest2_rows_unchecked(&data, &rows, &cents, dim, Metric::L2);
        for (t, &r) in rows.iter().enumerate() {
            let r = r as usize;
            assert_eq!((sl[t], s1[t], s2[t]), (l[r], d1[r], d2[r]), "row {r}");
        }
    }

    #[test]
    fn a_group_gets_the_full_kernels_answer_over_its_candidates() {
        let mut rng = ChaCha8Rng::seed_from_u64(13);
        let (n, k, dim) = (700, 50, 11);
        let (data, cents) = (uniform(&mut rng, n * dim), uniform(&mut rng, k * dim));
        // Group 0: 300 rows (two tiles), 33 candidates (two AVX-512 panels);
        // group 1: no rows; group 2: 399 rows, 5 candidates; row 699 in none.
        let lists: Vec<Vec<u32>> = vec![
            (0..k as u32).filter(|c| c % 3 != 1).take(33).collect(),
            vec![4, 7],
            vec![1, 2, 30, 31, 49],
        ];
        let order: Vec<u32> = (0..300).chain(300..699).collect();
        let starts = vec![0, 300, 300, 699];
        let groups = Groups {
            order: &order,
            starts: &starts,
            lists: &lists,
        };
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            let (labels, dists) = nearest_among_unchecked(&data, dim, &cents, metric, &groups);
            for (g, list) in lists.iter().enumerate() {
                let gathered: Vec<f32> = list
                    .iter()
                    .flat_map(|&c| cents[c as usize * dim..][..dim].iter().copied())
                    .collect();
                for &r in &order[starts[g]..starts[g + 1]] {
                    let r = r as usize;
                    let (l, d) = nearest_unchecked(&data[r * dim..][..dim], &gathered, dim, metric);
                    assert_eq!(labels[r], list[l[0] as usize], "{metric:?} row {r}");
                    assert_eq!(dists[r].to_bits(), d[0].to_bits(), "{metric:?} row {r}");
                }
            }
            assert_eq!((labels[699], dists[699]), (0, f32::INFINITY));
        }
    }

    #[test]
    fn second_nearest_matches_a_sorted_scan() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (n, k, dim) = (37, 53, 24);
        let (data, cents) = (uniform(&mut rng, n * dim), uniform(&mut rng, k * dim));
        for kernel in KERNELS.into_iter().filter(|k| k.is_supported()) {
            let (_, d1, d2) = top2(kernel, &data, None, &cents, dim, Metric::L2);
            for (i, x) in data.chunks_exact(dim).enumerate() {
                let mut d: Vec<f32> = cents
                    .chunks_exact(dim)
                    .map(|c| Metric::L2.distance(x, c))
                    .collect();
                d.sort_by(f32::total_cmp);
                assert!(
                    (d1[i] - d[0]).abs() <= 1e-4 * (1.0 + d[0]),
                    "{kernel:?} row {i}"
                );
                assert!(
                    (d2[i] - d[1]).abs() <= 1e-4 * (1.0 + d[1]),
                    "{kernel:?} row {i}"
                );
            }
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(
            nearest(&[1.0, 2.0, 3.0], &[1.0, 2.0], 2, Metric::L2),
            Err(KMeansError::Input(DistanceError::DimensionMismatch {
                expected: 2,
                actual: 1
            }))
        ));
        assert!(matches!(
            nearest(&[1.0, f32::NAN], &[1.0, 2.0], 2, Metric::L2),
            Err(KMeansError::Input(DistanceError::NonFinite {
                position: 1,
                ..
            }))
        ));
        assert!(matches!(
            nearest(&[1.0, 2.0], &[], 2, Metric::L2),
            Err(KMeansError::NoCentroids)
        ));
    }
}
