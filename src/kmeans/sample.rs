//! Training-set sampling and centroid initialisation.
//!
//! Sampling follows FAISS: at most `max_points_per_centroid · k` points are
//! drawn uniformly without replacement; fewer than `min_points_per_centroid · k`
//! is allowed but reported as a warning. Initialisation is FAISS's default
//! (k distinct sample points chosen uniformly) or k-means++ (D² sampling).

use super::assign::nearest_unchecked;
use crate::distance::Metric;
use rand::Rng;
use rand::seq::index;

/// Rows of `data` to train on: all of them when `n ≤ max_points`, else
/// `max_points` rows drawn uniformly without replacement, in ascending row
/// order. Returns `None` when every row is used (no copy needed).
pub fn subsample(
    data: &[f32],
    dim: usize,
    max_points: usize,
    rng: &mut impl Rng,
) -> Option<Vec<f32>> {
    let n = data.len() / dim;
    if n <= max_points {
        return None;
    }
    let mut rows = index::sample(rng, n, max_points).into_vec();
    rows.sort_unstable();
    let mut out = Vec::with_capacity(max_points * dim);
    for r in rows {
        out.extend_from_slice(&data[r * dim..(r + 1) * dim]);
    }
    Some(out)
}

/// FAISS's default: the rows of `k` distinct sample points chosen uniformly.
pub fn init_random(data: &[f32], dim: usize, k: usize, rng: &mut impl Rng) -> Vec<f32> {
    let n = data.len() / dim;
    let mut out = Vec::with_capacity(k * dim);
    for r in index::sample(rng, n, k) {
        out.extend_from_slice(&data[r * dim..(r + 1) * dim]);
    }
    out
}

/// k-means++: the first centroid uniform, each next one drawn with
/// probability proportional to the current distance to the nearest chosen
/// centroid (squared L2; `1 − cos` / shifted `−dot` for spherical metrics).
/// When every remaining weight is zero (duplicates), falls back to uniform.
pub fn init_kmeans_plus_plus(
    data: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
    rng: &mut impl Rng,
) -> Vec<f32> {
    let n = data.len() / dim;
    let first = rng.random_range(0..n);
    let mut out = data[first * dim..(first + 1) * dim].to_vec();
    let (_, mut best) = nearest_unchecked(data, &out, dim, metric);
    while out.len() < k * dim {
        let floor = if metric == Metric::InnerProduct {
            best.iter().copied().fold(f32::INFINITY, f32::min)
        } else {
            0.0
        };
        let weights: Vec<f64> = best.iter().map(|&d| (d - floor).max(0.0) as f64).collect();
        let total: f64 = weights.iter().sum();
        let pick = if total > 0.0 {
            let mut target = rng.random::<f64>() * total;
            weights.iter().position(|&w| {
                target -= w;
                target < 0.0 && w > 0.0
            })
        } else {
            None
        }
        .unwrap_or_else(|| rng.random_range(0..n));
        let c = &data[pick * dim..(pick + 1) * dim];
        let (_, d) = nearest_unchecked(data, c, dim, metric);
        best.iter_mut().zip(d).for_each(|(b, d)| *b = b.min(d));
        out.extend_from_slice(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn subsample_caps_rows_and_keeps_whole_rows() {
        let data: Vec<f32> = (0..100).flat_map(|r| [r as f32, r as f32]).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(subsample(&data, 2, 100, &mut rng).is_none());
        let s = subsample(&data, 2, 10, &mut rng).unwrap();
        assert_eq!(s.len(), 20);
        let rows: Vec<f32> = s
            .chunks_exact(2)
            .map(|r| {
                assert_eq!(r[0], r[1]);
                r[0]
            })
            .collect();
        assert!(
            rows.windows(2).all(|w| w[0] < w[1]),
            "distinct, ascending: {rows:?}"
        );
    }

    #[test]
    fn kmeans_plus_plus_picks_distinct_points_when_available() {
        // Three far-apart groups of duplicates: D² sampling must pick one of each.
        let data: Vec<f32> = [0.0f32, 100.0, 200.0]
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v, 10))
            .collect();
        for seed in 0..10 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut c = init_kmeans_plus_plus(&data, 1, 3, Metric::L2, &mut rng);
            c.sort_by(f32::total_cmp);
            assert_eq!(c, vec![0.0, 100.0, 200.0]);
        }
    }
}
