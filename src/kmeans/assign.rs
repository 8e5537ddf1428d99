//! The batched nearest-centroid kernel: for every row of `data`, the index and
//! distance of its nearest centroid, in the blocked-GEMM form.
//!
//! For L2 the distance is expanded as `‖x‖² + ‖c‖² − 2·x·c`; the dot products
//! of a tile of [`POINT_TILE`] points against a tile of [`CENTROID_TILE`]
//! centroids come from one `matrixmultiply::sgemm` call (measured faster than
//! a blocked simsimd loop, see `docs/benchmarks.md`), and a running argmin
//! keeps the best centroid per point. Point tiles run in parallel on rayon.
//! Tiles have a fixed size, so results do not depend on the thread count.
//! Ties go to the smaller centroid index. The k-means trainer, the build job
//! (assign every source vector) and the probe (nearest lists of a query) all
//! call [`nearest`].

use super::KMeansError;
use crate::distance::{Metric, check_matrix, squared_norms};
use rayon::prelude::*;

/// Points per tile (rows of one GEMM and unit of parallel work).
pub const POINT_TILE: usize = 256;
/// Centroids per tile (columns of one GEMM).
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
    check_matrix(data, dim)?;
    if check_matrix(centroids, dim)? == 0 {
        return Err(KMeansError::NoCentroids);
    }
    Ok(nearest_unchecked(data, centroids, dim, metric))
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
    let n = data.len() / dim;
    let prepared = Prepared::new(centroids, dim, metric);
    let (mut labels, mut first, mut second) = (vec![0u32; n], vec![0f32; n], vec![0f32; n]);
    data.par_chunks(POINT_TILE * dim)
        .zip(labels.par_chunks_mut(POINT_TILE))
        .zip(first.par_chunks_mut(POINT_TILE))
        .zip(second.par_chunks_mut(POINT_TILE))
        .for_each_init(
            || vec![0f32; POINT_TILE * CENTROID_TILE.min(prepared.k)],
            |scratch, (((x, l), d1), d2)| prepared.tile(x, l, d1, d2, scratch),
        );
    (labels, first, second)
}

/// Centroids with their per-metric column offsets, ready for tiled search.
struct Prepared<'a> {
    centroids: &'a [f32],
    dim: usize,
    k: usize,
    metric: Metric,
    /// Added to `-2·x·c` (L2: ‖c‖²) or the scale of `-x·c` (cosine: 1/‖c‖).
    col: Vec<f32>,
}

impl<'a> Prepared<'a> {
    fn new(centroids: &'a [f32], dim: usize, metric: Metric) -> Self {
        let norms = squared_norms(centroids, dim);
        let col = match metric {
            Metric::L2 => norms,
            Metric::InnerProduct => Vec::new(),
            Metric::Cosine => norms
                .into_iter()
                .map(|n| if n > 0.0 { 1.0 / n.sqrt() } else { 0.0 })
                .collect(),
        };
        Self {
            centroids,
            dim,
            k: centroids.len() / dim,
            metric,
            col,
        }
    }

    /// One point tile: GEMM against every centroid tile, running top-2.
    fn tile(
        &self,
        x: &[f32],
        labels: &mut [u32],
        first: &mut [f32],
        second: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (dim, m) = (self.dim, labels.len());
        let mut best = vec![
            Best {
                s1: f32::INFINITY,
                j1: 0,
                s2: f32::INFINITY
            };
            m
        ];
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
            for (row, b) in out.chunks_exact(nc).zip(best.iter_mut()) {
                self.scan(row, c0, b);
            }
        }
        let xnorms = if self.metric == Metric::L2 || self.metric == Metric::Cosine {
            squared_norms(x, dim)
        } else {
            Vec::new()
        };
        for (i, b) in best.into_iter().enumerate() {
            labels[i] = b.j1;
            first[i] = self.finish(b.s1, xnorms.get(i).copied());
            second[i] = self.finish(b.s2, xnorms.get(i).copied());
        }
    }

    /// The metric's distance from a scan score and the point's squared norm.
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

    /// Folds one GEMM output row into the running top-2 scores; strict `<`
    /// keeps the smaller index on ties.
    #[inline]
    fn scan(&self, row: &[f32], c0: usize, best: &mut Best) {
        match self.metric {
            Metric::L2 => row
                .iter()
                .zip(&self.col[c0..])
                .enumerate()
                .for_each(|(j, (&dot, &cn))| best.offer(cn - 2.0 * dot, c0 + j)),
            Metric::InnerProduct => row
                .iter()
                .enumerate()
                .for_each(|(j, &dot)| best.offer(-dot, c0 + j)),
            Metric::Cosine => row
                .iter()
                .zip(&self.col[c0..])
                .enumerate()
                .for_each(|(j, (&dot, &inv))| best.offer(-dot * inv, c0 + j)),
        }
    }
}

/// Running best and second-best scores of one point.
#[derive(Debug, Clone, Copy)]
struct Best {
    s1: f32,
    j1: u32,
    s2: f32,
}

impl Best {
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

    #[test]
    fn gemm_kernel_agrees_with_pairwise_distances() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        // Sizes straddle the tile edges: 600 points (3 tiles), 1100 centroids (2 tiles).
        for (n, k, dim) in [(600, 1100, 17), (5, 3, 1), (300, 7, 128)] {
            let data: Vec<f32> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            let cents: Vec<f32> = (0..k * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
                let (labels, dists) = nearest(&data, &cents, dim, metric).unwrap();
                for (i, (bl, bd)) in brute(&data, &cents, dim, metric).into_iter().enumerate() {
                    // Different labels are allowed only for near-ties.
                    let x = &data[i * dim..(i + 1) * dim];
                    let got = metric.distance(x, &cents[labels[i] as usize * dim..][..dim]);
                    assert!(
                        got - bd <= 1e-4 * (1.0 + bd.abs()),
                        "{metric:?} row {i}: label {} vs {bl}",
                        labels[i]
                    );
                    assert!(
                        (dists[i] - got).abs() <= 1e-3 * (1.0 + got.abs()),
                        "{metric:?} row {i}: {} vs {got}",
                        dists[i]
                    );
                }
            }
        }
    }

    #[test]
    fn ties_go_to_the_smaller_centroid_index() {
        let cents = [1.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let data = [0.0, 0.0, 5.0, 0.0];
        let (labels, dists) = nearest(&data, &cents, 2, Metric::L2).unwrap();
        assert_eq!(labels, vec![0, 0]);
        assert_eq!(dists, vec![1.0, 16.0]);
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
