//! Flat k-means: Lloyd iterations over a FAISS-style sample, with FAISS's
//! empty-cluster split and the spherical variant for inner product / cosine.
//!
//! One iteration: assign every sample point with the blocked-GEMM kernel,
//! group the points by label, recompute each centroid as the mean of its
//! points (f64 sums kept from the last iteration and corrected by the points
//! that changed label, in point order, a cluster per task, so the bytes do
//! not depend on the thread count), split a large cluster into every empty
//! one, and normalise the centroids in spherical mode.
//!
//! With [`KMeansParams::neighbours`], the iterations after the first
//! [`FULL_ITERATIONS`] compare each group's points only with the centroids
//! nearest to the group's own (approximate Lloyd).
//!
//! For L2 the assignment skips points whose nearest centroid provably did not
//! change (Hamerly's bounds): each point keeps a lower bound on its distance
//! to every *other* centroid, lowered each iteration by the largest centroid
//! drift; a point whose exact distance to its current centroid is within that
//! bound keeps its label, and only the others go through the GEMM kernel.
//! This is exact Lloyd (up to the GEMM form's rounding at near-ties, covered
//! by a 1e-4 relative slack on the bound), with far fewer distance
//! computations once the centroids settle.

use super::assign::{
    Groups, nearest_among_unchecked, nearest_unchecked, nearest2_rows_unchecked, nearest2_unchecked,
};
use super::error::KMeansError;
use super::leaf_panels::LeafPanels;
use super::sample::{init_kmeans_plus_plus, init_random, subsample};
use crate::distance::{Metric, check_matrix, normalize_rows, prefetch};
use rand::Rng;
use rayon::prelude::*;
use std::borrow::Cow;

/// How the initial centroids are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Init {
    /// k distinct sample points chosen uniformly (FAISS's default).
    #[default]
    Random,
    /// D² sampling (Arthur & Vassilvitskii); slower, better spread.
    KMeansPlusPlus,
}

/// Flat k-means parameters. `Default` follows FAISS's `ClusteringParameters`.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansParams {
    /// Number of centroids.
    pub k: usize,
    /// Maximum Lloyd iterations (FAISS: 20).
    pub niter: usize,
    /// The training sample is at most `max_points_per_centroid · k` points (FAISS: 256).
    pub max_points_per_centroid: usize,
    /// Below `min_points_per_centroid · k` points the result carries a warning (FAISS: 39).
    pub min_points_per_centroid: usize,
    pub init: Init,
    /// Stop when the objective improves by less than this fraction in one
    /// iteration. 0 (the default, as FAISS) always runs `niter` iterations.
    pub tol: f64,
    /// L2 only: skip points whose nearest centroid provably did not change
    /// (Hamerly bounds). Same result as plain Lloyd up to rounding at
    /// near-ties; default on.
    pub bounds: bool,
    /// After the first [`FULL_ITERATIONS`] iterations, each point is compared
    /// only with the `neighbours` centroids nearest to its current one (that
    /// one included), instead of with all k: approximate Lloyd, whose cost
    /// per iteration no longer grows with k. 0 (or any value ≥ k) compares
    /// every point with every centroid in every iteration (exact Lloyd).
    pub neighbours: usize,
}

/// Iterations that compare every point with every centroid before the
/// `neighbours` restriction applies: the first assignment has no labels to
/// start from, and in the second points still move far.
pub const FULL_ITERATIONS: usize = 2;

impl Default for KMeansParams {
    fn default() -> Self {
        Self {
            k: 256,
            niter: 20,
            max_points_per_centroid: 256,
            min_points_per_centroid: 39,
            init: Init::Random,
            tol: 0.0,
            bounds: true,
            neighbours: 0,
        }
    }
}

/// The outcome of flat k-means.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansResult {
    /// k × dim, row-major (unit rows in spherical mode).
    pub centroids: Vec<f32>,
    /// Sum of the metric's distances of the training points to their assigned
    /// centroid, from the last assignment (L2: sum of squared distances).
    pub objective: f64,
    /// Objective after each iteration.
    pub objective_history: Vec<f64>,
    /// Lloyd iterations run.
    pub iterations: usize,
    /// k·Σh²/(Σh)² over the last assignment's cluster sizes h (1 = perfectly even).
    pub imbalance: f64,
    /// Empty clusters repaired by splitting, over all iterations.
    pub splits: usize,
    /// Points actually trained on (after sampling).
    pub train_points: usize,
    /// Set when the sample has fewer than `min_points_per_centroid · k` points.
    pub warning: Option<String>,
}

/// k·Σh²/(Σh)² for cluster sizes `h`.
pub fn imbalance_factor(hist: &[usize]) -> f64 {
    let total: f64 = hist.iter().map(|&h| h as f64).sum();
    if total == 0.0 {
        return 1.0;
    }
    let sq: f64 = hist.iter().map(|&h| (h as f64) * (h as f64)).sum();
    hist.len() as f64 * sq / (total * total)
}

/// FAISS's relative perturbation when a centroid is split in two.
const SPLIT_EPS: f32 = 1.0 / 1024.0;

/// Trains `params.k` centroids on `data` (row-major, width `dim`).
///
/// With `metric` `InnerProduct` or `Cosine` the k-means is spherical: the
/// centroids are normalised to unit length after every update (and for
/// `Cosine` the sample points are normalised first).
///
/// # Errors
/// [`KMeansError::Input`] for a bad shape or a non-finite value,
/// [`KMeansError::ZeroK`] for `k == 0`, [`KMeansError::TooFewPoints`] when
/// there are fewer points than `k`.
pub fn train(
    data: &[f32],
    dim: usize,
    params: &KMeansParams,
    metric: Metric,
    rng: &mut impl Rng,
) -> Result<KMeansResult, KMeansError> {
    let n = check_matrix(data, dim)?;
    let k = params.k;
    if k == 0 {
        return Err(KMeansError::ZeroK);
    }
    if n < k {
        return Err(KMeansError::TooFewPoints { n, k });
    }
    let mut x = match subsample(
        data,
        dim,
        params.max_points_per_centroid.saturating_mul(k).max(k),
        rng,
    ) {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed(data),
    };
    if metric == Metric::Cosine {
        normalize_rows(x.to_mut(), dim);
    }
    let n_train = x.len() / dim;
    let warning = (n_train < params.min_points_per_centroid.saturating_mul(k)).then(|| {
        format!(
            "{n_train} training points for k = {k}: fewer than {} per centroid",
            params.min_points_per_centroid
        )
    });
    let mut centroids = match params.init {
        Init::Random => init_random(&x, dim, k, rng),
        Init::KMeansPlusPlus => init_kmeans_plus_plus(&x, dim, k, metric, rng),
    };
    if metric.is_spherical() {
        normalize_rows(&mut centroids, dim);
    }
    let Lloyd {
        centroids,
        history,
        hist,
        splits,
    } = lloyd(&x, dim, centroids, params, metric, rng);
    Ok(KMeansResult {
        centroids,
        objective: history.last().copied().unwrap_or(f64::NAN),
        iterations: history.len(),
        objective_history: history,
        imbalance: imbalance_factor(&hist),
        splits,
        train_points: n_train,
        warning,
    })
}

/// What Lloyd iterations produced.
pub(super) struct Lloyd {
    pub centroids: Vec<f32>,
    /// Objective of each iteration's assignment.
    pub history: Vec<f64>,
    /// Cluster sizes of the last assignment (after empty-cluster splits).
    pub hist: Vec<usize>,
    pub splits: usize,
}

/// Lloyd iterations on `x` from `centroids` (already normalised for the
/// spherical metrics): `params.niter` at most, `params.tol`, Hamerly bounds
/// for L2 when `params.bounds`. Shared by [`train`] and the hierarchy's
/// polish over all leaves.
pub(super) fn lloyd(
    x: &[f32],
    dim: usize,
    mut centroids: Vec<f32>,
    params: &KMeansParams,
    metric: Metric,
    rng: &mut impl Rng,
) -> Lloyd {
    let k = centroids.len() / dim;
    let mut history = Vec::with_capacity(params.niter);
    let (mut splits, mut hist) = (0, vec![0usize; k]);
    let use_bounds = params.bounds && metric == Metric::L2;
    let mut bounds: Option<Bounds> = None;
    let restrict = params.neighbours > 0 && params.neighbours < k;
    // The points grouped by the last assignment's labels: the update's
    // input, and the next restricted assignment's.
    let mut clusters = (Vec::new(), Vec::new());
    let mut sums: Option<MemberSums> = None;
    for it in 0..params.niter {
        let (labels, dists) = if restrict && it >= FULL_ITERATIONS {
            bounds = None;
            assign_among_neighbours(x, dim, &centroids, &clusters, params.neighbours, metric)
        } else if use_bounds {
            assign_bounded(x, dim, &centroids, &mut bounds)
        } else {
            nearest_unchecked(x, &centroids, dim, metric)
        };
        let objective: f64 = dists.iter().map(|&d| d as f64).sum();
        let old = bounds.is_some().then(|| centroids.clone());
        clusters = group_by_label(&labels, k);
        hist = update_centroids(x, dim, &clusters, labels, &mut sums, &mut centroids);
        splits += split_empty(&mut centroids, dim, &mut hist, rng);
        if metric.is_spherical() {
            normalize_rows(&mut centroids, dim);
        }
        if let (Some(old), Some(b)) = (old, bounds.as_mut()) {
            b.lower_by_drift(&old, &centroids, dim);
        }
        let converged = params.tol > 0.0
            && history
                .last()
                .is_some_and(|&prev: &f64| (prev - objective) <= params.tol * prev.abs());
        history.push(objective);
        if converged {
            break;
        }
    }
    Lloyd {
        centroids,
        history,
        hist,
        splits,
    }
}

/// Each point's nearest centroid among the `m` centroids nearest to its
/// current one (itself included): each group of `clusters` (the points by
/// current label, [`group_by_label`]) goes through the assignment kernel
/// against its own candidates ([`nearest_among_unchecked`]).
fn assign_among_neighbours(
    x: &[f32],
    dim: usize,
    centroids: &[f32],
    (order, starts): &(Vec<u32>, Vec<usize>),
    m: usize,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>) {
    let lists = neighbour_lists(centroids, dim, m);
    let groups = Groups {
        order,
        starts,
        lists: &lists,
    };
    nearest_among_unchecked(x, dim, centroids, metric, &groups)
}

/// For every centroid, the ids of the `m` centroids nearest to it under L2
/// (itself first, then by distance, ties to the smaller id), sorted by id.
/// The spherical metrics' centroids have unit norm, so L2 ranks them as
/// their own metric does.
fn neighbour_lists(centroids: &[f32], dim: usize, m: usize) -> Vec<Vec<u32>> {
    let panels = LeafPanels::new(centroids, dim);
    let k = panels.nlist();
    let m = m.clamp(1, k.max(1));
    panels.par_map(Metric::L2, &centroids[..k * dim], 0..k, |i, d| {
        let i = i as u32;
        let mut ids: Vec<u32> = (0..k as u32).collect();
        ids.select_nth_unstable_by(m - 1, |&a, &b| {
            (a != i)
                .cmp(&(b != i))
                .then(d[a as usize].total_cmp(&d[b as usize]))
                .then(a.cmp(&b))
        });
        ids.truncate(m);
        ids.sort_unstable();
        ids
    })
}

/// Hamerly state per training point: its label and a lower bound on the
/// (Euclidean, not squared) distance to every other centroid.
struct Bounds {
    labels: Vec<u32>,
    lower: Vec<f32>,
}

/// Relative slack on the lower bound, covering the rounding of the GEMM form.
const BOUND_SLACK: f32 = 1e-4;

/// L2 assignment that reuses a label when its exact distance is within the
/// point's lower bound; other points go through the GEMM kernel (top-2).
fn assign_bounded(
    x: &[f32],
    dim: usize,
    centroids: &[f32],
    bounds: &mut Option<Bounds>,
) -> (Vec<u32>, Vec<f32>) {
    let Some(b) = bounds else {
        let (labels, d1, d2) = nearest2_unchecked(x, centroids, dim, Metric::L2);
        let lower = d2.iter().map(|&d| d.sqrt() * (1.0 - BOUND_SLACK)).collect();
        *bounds = Some(Bounds {
            labels: labels.clone(),
            lower,
        });
        return (labels, d1);
    };
    let mut d1: Vec<f32> = x
        .par_chunks(dim)
        .zip(b.labels.par_iter())
        .map(|(p, &l)| Metric::L2.distance(p, &centroids[l as usize * dim..(l as usize + 1) * dim]))
        .collect();
    let todo: Vec<u32> = (0..d1.len())
        .filter(|&i| d1[i].sqrt() > b.lower[i])
        .map(|i| i as u32)
        .collect();
    let (labels, e1, e2) = nearest2_rows_unchecked(x, &todo, centroids, dim, Metric::L2);
    for (t, &i) in todo.iter().enumerate() {
        let i = i as usize;
        b.labels[i] = labels[t];
        d1[i] = e1[t];
        b.lower[i] = e2[t].sqrt() * (1.0 - BOUND_SLACK);
    }
    (b.labels.clone(), d1)
}

impl Bounds {
    /// After the centroids moved from `old` to `new`: every other centroid
    /// came at most the largest drift (excluding the point's own) closer.
    fn lower_by_drift(&mut self, old: &[f32], new: &[f32], dim: usize) {
        let drift: Vec<f32> = old
            .chunks_exact(dim)
            .zip(new.chunks_exact(dim))
            .map(|(a, b)| Metric::L2.distance(a, b).sqrt())
            .collect();
        let (mut m1, mut j1, mut m2) = (0f32, usize::MAX, 0f32);
        for (j, &d) in drift.iter().enumerate() {
            if d > m1 {
                (m2, m1, j1) = (m1, d, j);
            } else if d > m2 {
                m2 = d;
            }
        }
        for (lower, &l) in self.lower.iter_mut().zip(&self.labels) {
            *lower -= if l as usize == j1 { m2 } else { m1 };
        }
    }
}

/// Each centroid's sum of its members' rows (f64, `dim` a centroid) and
/// the labels they were summed under: kept from one iteration to the next,
/// so that only the points whose label changed are read again.
struct MemberSums {
    labels: Vec<u32>,
    sums: Vec<f64>,
}

/// Sets each centroid to the mean of its points (empty clusters keep their
/// old centroid) and returns the cluster sizes.
///
/// `clusters` are the points grouped by `labels` ([`group_by_label`],
/// ascending point order within a cluster). The per-centroid sums in `kept`
/// are f64 and carried over from the last iteration: when fewer than half
/// the points changed label, each centroid subtracts the rows that left it
/// and adds the rows that joined it (each in ascending point order);
/// otherwise (and at the first iteration) every centroid sums its members
/// afresh. Either way a centroid's sum is one fixed sequence of additions
/// whatever the thread count, centroids in parallel. Once the centroids
/// settle a few percent of the points move an iteration, and the update no
/// longer streams the whole sample (it was a fifth of a build's k-means,
/// bound by memory). The f64 sums drift from a fresh sum by a few units in
/// the last place of an f64, far below the f32 centroid's precision.
fn update_centroids(
    x: &[f32],
    dim: usize,
    (order, starts): &(Vec<u32>, Vec<usize>),
    labels: Vec<u32>,
    kept: &mut Option<MemberSums>,
    centroids: &mut [f32],
) -> Vec<usize> {
    let k = starts.len() - 1;
    let moved: Option<Vec<u32>> = kept.as_ref().and_then(|m| {
        let moved: Vec<u32> = (0..labels.len() as u32)
            .filter(|&i| m.labels[i as usize] != labels[i as usize])
            .collect();
        (2 * moved.len() < labels.len()).then_some(moved)
    });
    match (kept.as_mut(), moved) {
        (Some(m), Some(moved)) => {
            let by = |of: &[u32]| {
                let l: Vec<u32> = moved.iter().map(|&i| of[i as usize]).collect();
                let (at, starts) = group_by_label(&l, k);
                let points: Vec<u32> = at.iter().map(|&t| moved[t as usize]).collect();
                (points, starts)
            };
            let (left, left_starts) = by(&m.labels);
            let (joined, joined_starts) = by(&labels);
            m.sums
                .par_chunks_mut(dim)
                .enumerate()
                .with_min_len(8)
                .for_each(|(c, sum)| {
                    add_rows::<true>(x, dim, &left[left_starts[c]..left_starts[c + 1]], sum);
                    add_rows::<false>(x, dim, &joined[joined_starts[c]..joined_starts[c + 1]], sum);
                });
            m.labels = labels;
        }
        _ => {
            let mut sums = kept.take().map(|m| m.sums).unwrap_or_default();
            sums.resize(k * dim, 0.0);
            sums.par_chunks_mut(dim)
                .enumerate()
                .with_min_len(8)
                .for_each(|(c, sum)| sum_rows(x, dim, &order[starts[c]..starts[c + 1]], sum));
            *kept = Some(MemberSums { labels, sums });
        }
    }
    let sums = &kept.as_ref().expect("set just above").sums;
    centroids
        .par_chunks_mut(dim)
        .zip(sums.par_chunks(dim))
        .enumerate()
        .for_each(|(c, (centroid, sum))| {
            let n = starts[c + 1] - starts[c];
            if n > 0 {
                let inv = 1.0 / n as f64;
                centroid
                    .iter_mut()
                    .zip(sum)
                    .for_each(|(c, &a)| *c = (a * inv) as f32);
            }
        });
    starts.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Rows a cluster's sum prefetches ahead of the one it adds.
const PREFETCH_AHEAD: usize = 4;

/// `sum = Σ x[i]` over the `members` rows, in f64, row by row in order
/// ([`add_rows`] onto zeros).
fn sum_rows(x: &[f32], dim: usize, members: &[u32], sum: &mut [f64]) {
    sum.fill(0.0);
    add_rows::<false>(x, dim, members, sum);
}

/// `sum += x[i]` (or `-=` with `SUB`) for the `members` rows, in f64, row
/// by row in order, with the widest vectors this CPU has (chosen at run
/// time). Each element's sum is the same sequence of additions at every
/// width (vectors run across the dimensions, and an f32 → f64 conversion is
/// exact), so the centroids are the same bits on every CPU.
fn add_rows<const SUB: bool>(x: &[f32], dim: usize, members: &[u32], sum: &mut [f64]) {
    if members.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { add_rows_avx512::<SUB>(x, dim, members, sum) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { add_rows_avx2::<SUB>(x, dim, members, sum) };
        }
    }
    add_rows_inline::<SUB>(x, dim, members, sum);
}

/// [`add_rows`] compiled with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn add_rows_avx512<const SUB: bool>(
    x: &[f32],
    dim: usize,
    members: &[u32],
    sum: &mut [f64],
) {
    add_rows_inline::<SUB>(x, dim, members, sum);
}

/// [`add_rows`] compiled with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_rows_avx2<const SUB: bool>(x: &[f32], dim: usize, members: &[u32], sum: &mut [f64]) {
    add_rows_inline::<SUB>(x, dim, members, sum);
}

/// [`add_rows`]' body, inlined into each build.
#[inline(always)]
fn add_rows_inline<const SUB: bool>(x: &[f32], dim: usize, members: &[u32], sum: &mut [f64]) {
    let row = |i: u32| &x[i as usize * dim..][..dim];
    for (t, &i) in members.iter().enumerate() {
        if let Some(&ahead) = members.get(t + PREFETCH_AHEAD) {
            prefetch(row(ahead));
        }
        let p = row(i);
        if SUB {
            sum.iter_mut().zip(p).for_each(|(a, &v)| *a -= f64::from(v));
        } else {
            sum.iter_mut().zip(p).for_each(|(a, &v)| *a += f64::from(v));
        }
    }
}

/// The points grouped by label: `order[starts[c]..starts[c + 1]]` are the
/// points labelled `c`, in ascending order (a counting sort).
fn group_by_label(labels: &[u32], k: usize) -> (Vec<u32>, Vec<usize>) {
    let mut starts = vec![0usize; k + 1];
    labels.iter().for_each(|&l| starts[l as usize + 1] += 1);
    for c in 0..k {
        starts[c + 1] += starts[c];
    }
    let mut next = starts.clone();
    let mut order = vec![0u32; labels.len()];
    for (i, &l) in labels.iter().enumerate() {
        order[next[l as usize]] = i as u32;
        next[l as usize] += 1;
    }
    (order, starts)
}

/// FAISS's `split_clusters`: every empty cluster takes a copy of a cluster
/// chosen with probability proportional to (size − 1), the two copies are
/// pushed apart by ±1/1024 in alternating coordinates, and the size is split
/// evenly between them. Returns the number of splits.
fn split_empty(centroids: &mut [f32], dim: usize, hist: &mut [usize], rng: &mut impl Rng) -> usize {
    let k = hist.len();
    let n: usize = hist.iter().sum();
    let mut splits = 0;
    for ci in 0..k {
        if hist[ci] != 0 {
            continue;
        }
        // An empty cluster and n ≥ k points imply some cluster holds ≥ 2, so this ends.
        if !hist.iter().any(|&h| h >= 2) {
            break;
        }
        let denom = n.saturating_sub(k).max(1) as f64;
        let mut cj = 0;
        loop {
            let p = (hist[cj] as f64 - 1.0) / denom;
            if rng.random::<f64>() < p {
                break;
            }
            cj = (cj + 1) % k;
        }
        let (src, dst) = (cj * dim, ci * dim);
        centroids.copy_within(src..src + dim, dst);
        for j in 0..dim {
            let (up, down) = (1.0 + SPLIT_EPS, 1.0 - SPLIT_EPS);
            let (fi, fj) = if j % 2 == 0 { (up, down) } else { (down, up) };
            centroids[dst + j] *= fi;
            centroids[src + j] *= fj;
        }
        hist[ci] = hist[cj] / 2;
        hist[cj] -= hist[ci];
        splits += 1;
    }
    splits
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Every build of the centroid sums gives the plain loop's bits, on
    /// widths that leave remainders, and prints which builds ran.
    #[test]
    fn row_sums_are_the_same_bits_on_every_path() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for dim in [1, 7, 8, 33, 128, 385] {
            let n = 50;
            let x: Vec<f32> = (0..n * dim)
                .map(|_| rng.random_range(-1e3f32..1e3) * rng.random_range(0.0f32..1.0).powi(8))
                .collect();
            let members: Vec<u32> = (0..n as u32).filter(|i| i % 3 != 1).collect();
            let mut expected = vec![0f64; dim];
            for &i in &members {
                for (e, &v) in expected.iter_mut().zip(&x[i as usize * dim..][..dim]) {
                    *e += f64::from(v);
                }
            }
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let mut sum = vec![f64::NAN; dim];
            sum_rows(&x, dim, &members, &mut sum);
            assert_eq!(bits(&sum), bits(&expected), "dispatched, dim {dim}");
            sum.fill(0.0);
            add_rows_inline::<false>(&x, dim, &members, &mut sum);
            assert_eq!(bits(&sum), bits(&expected), "baseline, dim {dim}");
            // Subtracting the same rows in the same order gives the negation.
            let negated: Vec<f64> = expected.iter().map(|e| -e).collect();
            let mut neg = vec![0f64; dim];
            add_rows::<true>(&x, dim, &members, &mut neg);
            assert_eq!(
                bits(&neg),
                bits(&negated),
                "dispatched subtraction, dim {dim}"
            );
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx2") {
                    sum.fill(0.0);
                    // SAFETY: AVX2 was detected just above.
                    unsafe { add_rows_avx2::<false>(&x, dim, &members, &mut sum) };
                    assert_eq!(bits(&sum), bits(&expected), "AVX2, dim {dim}");
                    neg.fill(0.0);
                    // SAFETY: as above.
                    unsafe { add_rows_avx2::<true>(&x, dim, &members, &mut neg) };
                    assert_eq!(bits(&neg), bits(&negated), "AVX2 subtraction, dim {dim}");
                    println!("centroid sums: the AVX2 build ran, dim {dim}");
                }
                if is_x86_feature_detected!("avx512f") {
                    sum.fill(0.0);
                    // SAFETY: AVX-512F was detected just above.
                    unsafe { add_rows_avx512::<false>(&x, dim, &members, &mut sum) };
                    assert_eq!(bits(&sum), bits(&expected), "AVX-512, dim {dim}");
                    neg.fill(0.0);
                    // SAFETY: as above.
                    unsafe { add_rows_avx512::<true>(&x, dim, &members, &mut neg) };
                    assert_eq!(bits(&neg), bits(&negated), "AVX-512 subtraction, dim {dim}");
                    println!("centroid sums: the AVX-512 build ran, dim {dim}");
                }
            }
        }
    }

    #[test]
    fn split_copies_a_cluster_with_at_least_two_points_and_halves_it() {
        let mut c = vec![1.0, 2.0, 9.0, 9.0, 4.0, 4.0];
        let mut hist = vec![1, 0, 6];
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(split_empty(&mut c, 2, &mut hist, &mut rng), 1);
        assert_eq!(hist, vec![1, 3, 3]);
        assert_eq!(c[0..2], [1.0, 2.0]);
        assert_eq!(c[2..4], [4.0 * (1.0 + SPLIT_EPS), 4.0 * (1.0 - SPLIT_EPS)]);
        assert_eq!(c[4..6], [4.0 * (1.0 - SPLIT_EPS), 4.0 * (1.0 + SPLIT_EPS)]);
    }

    #[test]
    fn neighbour_lists_hold_each_centroid_and_its_nearest() {
        // Centroids on a line at 0, 1, 3, 6, 10 and a duplicate of 3 (id 5).
        let c = [0.0, 1.0, 3.0, 6.0, 10.0, 3.0];
        let lists = neighbour_lists(&c, 1, 3);
        assert_eq!(lists[0], vec![0, 1, 2]);
        assert_eq!(lists[1], vec![0, 1, 2]);
        // Its duplicate (distance 0) comes first, then 1 at 2 before 6 at 3.
        assert_eq!(lists[2], vec![1, 2, 5]);
        assert_eq!(lists[5], vec![1, 2, 5]);
        assert_eq!(lists[4], vec![2, 3, 4]);
        // Ties at distance 0 never push a centroid out of its own list.
        let same = [2.0; 4];
        for (i, list) in neighbour_lists(&same, 1, 2).iter().enumerate() {
            assert!(
                list.contains(&(i as u32)) && list.len() == 2,
                "{i}: {list:?}"
            );
        }
        // m is clamped to k.
        assert_eq!(neighbour_lists(&c, 1, 10)[0], vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn group_by_label_is_a_stable_counting_sort() {
        let (order, starts) = group_by_label(&[2, 0, 2, 1, 0], 4);
        assert_eq!(order, vec![1, 4, 3, 0, 2]);
        assert_eq!(starts, vec![0, 2, 3, 5, 5]);
    }

    #[test]
    fn update_takes_means_and_keeps_empty_centroids() {
        let x = [0.0, 2.0, 4.0, 10.0];
        let mut c = vec![0.0, 5.0, 7.0];
        let mut kept = None;
        let mut update = |labels: Vec<u32>, c: &mut Vec<f32>| {
            update_centroids(&x, 1, &group_by_label(&labels, 3), labels, &mut kept, c)
        };
        assert_eq!(update(vec![0, 0, 0, 2], &mut c), vec![3, 0, 1]);
        assert_eq!(c, vec![2.0, 5.0, 10.0]);
        // One point of four moves (fewer than half): the kept sums are
        // updated by it alone, and the means are the same as afresh.
        assert_eq!(update(vec![0, 0, 2, 2], &mut c), vec![2, 0, 2]);
        assert_eq!(c, vec![1.0, 5.0, 7.0]);
        assert_eq!(
            kept.as_ref().map(|m| m.labels.clone()),
            Some(vec![0, 0, 2, 2])
        );
    }

    /// The sums carried from one iteration to the next, updated by the
    /// points that moved, stay within rounding of a fresh sum of each
    /// cluster, over many random relabellings of few and many points.
    #[test]
    fn kept_sums_follow_the_moves_within_rounding() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (n, dim, k) = (2_000, 37, 23);
        let x: Vec<f32> = (0..n * dim)
            .map(|_| rng.random_range(-4.0f32..4.0))
            .collect();
        let mut labels: Vec<u32> = (0..n).map(|_| rng.random_range(0..k as u32)).collect();
        let mut kept = None;
        let mut c = vec![0f32; k * dim];
        for round in 0..30 {
            let share = if round % 7 == 6 { 0.6 } else { 0.03 };
            for l in labels.iter_mut() {
                if rng.random::<f64>() < share {
                    *l = rng.random_range(0..k as u32);
                }
            }
            let clusters = group_by_label(&labels, k);
            update_centroids(&x, dim, &clusters, labels.clone(), &mut kept, &mut c);
            let sums = &kept.as_ref().unwrap().sums;
            let mut fresh = vec![0f64; dim];
            for cl in 0..k {
                sum_rows(
                    &x,
                    dim,
                    &clusters.0[clusters.1[cl]..clusters.1[cl + 1]],
                    &mut fresh,
                );
                for (j, (&a, &b)) in sums[cl * dim..][..dim].iter().zip(&fresh).enumerate() {
                    // Every addition rounds by at most half an ulp of a
                    // sum below 2¹³ (2⁻⁴⁰); the few thousand a cluster
                    // sees over the rounds stay far below 1e-9.
                    assert!(
                        (a - b).abs() < 1e-9,
                        "round {round} cluster {cl} dim {j}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
