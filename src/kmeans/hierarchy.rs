//! The two-level hierarchy: R root centroids trained on the sample, then each
//! root's share of the sample clustered into its own leaves, in parallel
//! across roots. Root `r` owns the leaf CIDs `[cid_offsets[r], cid_offsets[r + 1])`.
//!
//! Leaves are allotted in proportion to each root's share of the sample by
//! largest remainder, at least 1 per root and at most the root's point count,
//! summing to `nlist`. Every root trains with its own ChaCha8 stream, seeded
//! from the caller's generator in root order before the parallel section, so
//! the result does not depend on scheduling.
//!
//! Then, optionally, `polish` flat Lloyd iterations run over all leaves on the
//! whole sample, starting from the per-root leaves: a root's leaves never see
//! the points just across its border, and the polish moves them to where flat
//! k-means would. It costs one assignment of the sample per iteration and
//! recovers part of the gap in objective and recall to flat k-means.
//!
//! [`Hierarchy::train_bottom_up`] builds the same structure the other way
//! round: the leaves are flat k-means over all of the sample (as FAISS's
//! IVF), then the roots are k-means over the leaf centroids and each leaf
//! goes to its nearest root. The leaves are exactly as good as flat k-means;
//! its full iterations (all of them with `neighbours` 0, the first
//! [`super::FULL_ITERATIONS`] otherwise) are nlist-wide passes over a sample
//! of 256·nlist points, so their cost grows with nlist² (the top-down
//! training's per-root iterations with nlist^1.5, plus its few polish
//! passes), and it suits the nlist a flat training can afford
//! (`docs/partitions-report.md` has the measurements).

use super::assign::nearest_unchecked;
use super::error::KMeansError;
use super::flat::{KMeansParams, imbalance_factor, lloyd, train};
use super::sample::subsample;
use crate::distance::{Metric, check_matrix, normalize_rows};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// A trained two-level hierarchy: `roots` (R × dim) and `leaves` (nlist × dim),
/// both row-major f32. Root `r` owns leaf CIDs `cid_offsets[r]..cid_offsets[r + 1]`;
/// `cid_offsets` has R + 1 entries, starts at 0 and ends at nlist.
///
/// ```text
/// roots:        r0            r1        r2
/// cid_offsets:  0             3         4            6
/// leaves:       [l0 l1 l2]    [l3]      [l4 l5]
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    pub dim: usize,
    pub metric: Metric,
    pub roots: Vec<f32>,
    pub leaves: Vec<f32>,
    pub cid_offsets: Vec<u32>,
}

/// Parameters of a two-level build.
#[derive(Debug, Clone, PartialEq)]
pub struct HierarchyParams {
    /// Leaves (CIDs) in all.
    pub nlist: usize,
    /// Root centroids R (1 ≤ R ≤ nlist).
    pub roots: usize,
    pub metric: Metric,
    /// Lloyd settings for the root and every leaf training (its `k` is ignored;
    /// `max_points_per_centroid · nlist` also caps the overall sample).
    pub kmeans: KMeansParams,
    /// Flat Lloyd iterations over all leaves on the whole sample after the
    /// per-root trainings (0: none). Per-root leaves only see their root's
    /// points, so leaves at root borders are placed worse than flat k-means
    /// would; a few flat iterations from the trained leaves recover most of
    /// that. Leaf ownership (`cid_offsets`) is unchanged. Default 0 (the
    /// pure two-level training); the build job polishes by default
    /// (`build::DEFAULT_POLISH`).
    pub polish: usize,
}

impl HierarchyParams {
    /// Whether a hierarchy of these parameters can be trained on `n` points.
    ///
    /// # Errors
    /// [`KMeansError::ZeroK`] for nlist 0, [`KMeansError::BadRoots`] unless
    /// 1 ≤ roots ≤ nlist, [`KMeansError::TooFewPoints`] for fewer than
    /// nlist points.
    pub fn check(&self, n: usize) -> Result<(), KMeansError> {
        let (nlist, roots) = (self.nlist, self.roots);
        if nlist == 0 {
            return Err(KMeansError::ZeroK);
        }
        if roots == 0 || roots > nlist {
            return Err(KMeansError::BadRoots { roots, nlist });
        }
        if n < nlist {
            return Err(KMeansError::TooFewPoints { n, k: nlist });
        }
        Ok(())
    }
}

impl Default for HierarchyParams {
    fn default() -> Self {
        Self {
            nlist: 4096,
            roots: 64,
            metric: Metric::L2,
            kmeans: KMeansParams::default(),
            polish: 0,
        }
    }
}

/// What a hierarchy build did.
#[derive(Debug, Clone, PartialEq)]
pub struct HierarchyReport {
    /// Points in the overall training sample.
    pub train_points: usize,
    /// Objective of the root k-means on its own sample.
    pub root_objective: f64,
    /// Without polish: the sum over roots of their leaf k-means objectives
    /// (every sample point's distance to its leaf within its nearest root).
    /// With polish: the last polish iteration's objective (every sample
    /// point's distance to its nearest leaf). L2: sums of squares.
    pub objective: f64,
    /// Leaves per root (sums to nlist).
    pub leaves_per_root: Vec<usize>,
    /// Imbalance factor k·Σh²/(Σh)² over all leaves' final cluster sizes.
    pub imbalance: f64,
    /// Empty-cluster splits, roots and leaves together.
    pub splits: usize,
    /// Sampling warnings of the root and leaf trainings.
    pub warnings: Vec<String>,
}

/// How the leaves of a hierarchy are trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaves {
    /// Flat k-means over the whole sample, then roots over the leaves
    /// ([`Hierarchy::train_bottom_up`]): flat k-means's leaves, at its cost.
    Flat,
    /// Roots first, then each root's leaves on its points, then the polish
    /// ([`Hierarchy::train`]): cheaper at large nlist.
    PerRoot,
}

impl std::str::FromStr for Leaves {
    type Err = String;

    /// `flat` or `per-root`, as the build's `--leaves` takes it.
    fn from_str(s: &str) -> Result<Leaves, String> {
        match s {
            "flat" => Ok(Leaves::Flat),
            "per-root" => Ok(Leaves::PerRoot),
            _ => Err(format!(
                "unknown leaf training {s:?}: expected flat or per-root"
            )),
        }
    }
}

/// How [`Hierarchy::assign`] picks a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignMode {
    /// Nearest leaf over all `nlist` leaves (blocked GEMM).
    Exact,
    /// Nearest `m` roots, then the nearest leaf among their children.
    Hierarchical { m: usize },
}

impl std::str::FromStr for AssignMode {
    type Err = String;

    /// `exact` or `hierarchical:M` (M ≥ 1), as the build's `--assign` takes it.
    fn from_str(s: &str) -> Result<AssignMode, String> {
        match s.split_once(':') {
            None if s == "exact" => Ok(AssignMode::Exact),
            Some(("hierarchical", m)) => m
                .parse()
                .ok()
                .filter(|&m: &usize| m > 0)
                .map(|m| AssignMode::Hierarchical { m })
                .ok_or_else(|| format!("bad root count in {s:?}")),
            _ => Err(format!(
                "unknown assignment {s:?}: expected exact or hierarchical:M"
            )),
        }
    }
}

impl Hierarchy {
    /// Trains a two-level hierarchy on `data` (row-major, width `dim`).
    ///
    /// # Errors
    /// [`KMeansError::Input`] for a bad shape or non-finite value,
    /// [`KMeansError::ZeroK`] for `nlist == 0`, [`KMeansError::BadRoots`]
    /// unless `1 ≤ roots ≤ nlist`, [`KMeansError::TooFewPoints`] when there
    /// are fewer points than `nlist`.
    pub fn train(
        data: &[f32],
        dim: usize,
        params: &HierarchyParams,
        rng: &mut impl Rng,
    ) -> Result<(Hierarchy, HierarchyReport), KMeansError> {
        let (nlist, nroots, metric) = (params.nlist, params.roots, params.metric);
        params.check(check_matrix(data, dim)?)?;
        let cap = params
            .kmeans
            .max_points_per_centroid
            .saturating_mul(nlist)
            .max(nlist);
        let mut sample = subsample(data, dim, cap, rng).unwrap_or_else(|| data.to_vec());
        if metric == Metric::Cosine {
            normalize_rows(&mut sample, dim);
        }
        let root = train(
            &sample,
            dim,
            &KMeansParams {
                k: nroots,
                ..params.kmeans.clone()
            },
            metric,
            rng,
        )?;
        let (labels, _) = nearest_unchecked(&sample, &root.centroids, dim, metric);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); nroots];
        labels
            .iter()
            .enumerate()
            .for_each(|(i, &r)| members[r as usize].push(i as u32));
        let counts: Vec<usize> = members.iter().map(Vec::len).collect();
        let leaves_per_root = allot_leaves(&counts, nlist);
        let seeds: Vec<u64> = (0..nroots).map(|_| rng.random()).collect();
        let trained: Vec<_> = (0..nroots)
            .into_par_iter()
            .map(|r| {
                let root_centroid = &root.centroids[r * dim..(r + 1) * dim];
                if members[r].is_empty() {
                    return Ok((root_centroid.to_vec(), 0.0, vec![0], 0, None));
                }
                let pts: Vec<f32> = members[r]
                    .iter()
                    .flat_map(|&i| &sample[i as usize * dim..(i as usize + 1) * dim])
                    .copied()
                    .collect();
                let p = KMeansParams {
                    k: leaves_per_root[r],
                    ..params.kmeans.clone()
                };
                let res = train(
                    &pts,
                    dim,
                    &p,
                    metric,
                    &mut ChaCha8Rng::seed_from_u64(seeds[r]),
                )?;
                let (l, _) = nearest_unchecked(&pts, &res.centroids, dim, metric);
                let mut hist = vec![0usize; p.k];
                l.iter().for_each(|&j| hist[j as usize] += 1);
                Ok((res.centroids, res.objective, hist, res.splits, res.warning))
            })
            .collect::<Result<_, KMeansError>>()?;
        let mut cid_offsets = vec![0u32];
        let (mut leaves, mut sizes) = (Vec::with_capacity(nlist * dim), Vec::with_capacity(nlist));
        let (mut objective, mut splits, mut warnings) = (0.0, root.splits, Vec::new());
        warnings.extend(root.warning.map(|w| format!("roots: {w}")));
        for (r, (c, obj, hist, s, warning)) in trained.into_iter().enumerate() {
            leaves.extend_from_slice(&c);
            sizes.extend_from_slice(&hist);
            cid_offsets.push((sizes.len()) as u32);
            objective += obj;
            splits += s;
            warnings.extend(warning.map(|w| format!("root {r}: {w}")));
        }
        if params.polish > 0 && nroots > 1 {
            let polish = KMeansParams {
                niter: params.polish,
                tol: 0.0,
                ..params.kmeans.clone()
            };
            let l = lloyd(&sample, dim, leaves, &polish, metric, rng);
            leaves = l.centroids;
            objective = l.history.last().copied().unwrap_or(objective);
            sizes = l.hist;
            splits += l.splits;
        }
        let report = HierarchyReport {
            train_points: sample.len() / dim,
            root_objective: root.objective,
            objective,
            leaves_per_root,
            imbalance: imbalance_factor(&sizes),
            splits,
            warnings,
        };
        Ok((
            Hierarchy {
                dim,
                metric,
                roots: root.centroids,
                leaves,
                cid_offsets,
            },
            report,
        ))
    }

    /// Trains the leaves as flat k-means on the sample of `data` (at most
    /// `max_points_per_centroid · nlist` rows), then `roots` root centroids as
    /// k-means over the leaves; each leaf belongs to its nearest root, and
    /// the leaves are numbered root by root (ascending leaf order within a
    /// root). A root that ends up with no leaf is dropped, so the hierarchy
    /// may have fewer roots than asked (the report's `leaves_per_root` has
    /// one entry per kept root). `params.polish` is not used.
    ///
    /// # Errors
    /// As [`Hierarchy::train`].
    pub fn train_bottom_up(
        data: &[f32],
        dim: usize,
        params: &HierarchyParams,
        rng: &mut impl Rng,
    ) -> Result<(Hierarchy, HierarchyReport), KMeansError> {
        let (nlist, nroots, metric) = (params.nlist, params.roots, params.metric);
        params.check(check_matrix(data, dim)?)?;
        let flat = train(
            data,
            dim,
            &KMeansParams {
                k: nlist,
                ..params.kmeans.clone()
            },
            metric,
            rng,
        )?;
        // nlist points for R ≤ nlist roots: few per root by design, no warning.
        let root = train(
            &flat.centroids,
            dim,
            &KMeansParams {
                k: nroots,
                min_points_per_centroid: 0,
                ..params.kmeans.clone()
            },
            metric,
            rng,
        )?;
        let (owner, _) = nearest_unchecked(&flat.centroids, &root.centroids, dim, metric);
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); nroots];
        owner
            .iter()
            .enumerate()
            .for_each(|(leaf, &r)| members[r as usize].push(leaf));
        let (mut roots, mut leaves) = (Vec::new(), Vec::with_capacity(nlist * dim));
        let (mut cid_offsets, mut leaves_per_root) = (vec![0u32], Vec::new());
        for (r, m) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            roots.extend_from_slice(&root.centroids[r * dim..(r + 1) * dim]);
            for &leaf in m {
                leaves.extend_from_slice(&flat.centroids[leaf * dim..(leaf + 1) * dim]);
            }
            leaves_per_root.push(m.len());
            cid_offsets.push((leaves.len() / dim) as u32);
        }
        let report = HierarchyReport {
            train_points: flat.train_points,
            root_objective: root.objective,
            objective: flat.objective,
            leaves_per_root,
            imbalance: flat.imbalance,
            splits: flat.splits + root.splits,
            warnings: flat.warning.into_iter().collect(),
        };
        Ok((
            Hierarchy {
                dim,
                metric,
                roots,
                leaves,
                cid_offsets,
            },
            report,
        ))
    }

    /// Number of leaves (CIDs).
    pub fn nlist(&self) -> usize {
        self.leaves.len() / self.dim.max(1)
    }

    /// Number of roots.
    pub fn nroots(&self) -> usize {
        self.cid_offsets.len().saturating_sub(1)
    }

    /// The residual of each row of `vectors` to its leaf `cids[i]`
    /// (`vectors[i] − leaf(cids[i])`, row-major): what the codes encode.
    /// Callers pass cids below [`Hierarchy::nlist`].
    pub fn residuals(&self, vectors: &[f32], cids: &[u32]) -> Vec<f32> {
        let dim = self.dim;
        let mut out = Vec::with_capacity(vectors.len());
        for (v, &c) in vectors.chunks_exact(dim).zip(cids) {
            let leaf = &self.leaves[c as usize * dim..(c as usize + 1) * dim];
            out.extend(v.iter().zip(leaf).map(|(x, l)| x - l));
        }
        out
    }

    /// The leaf CID of every row of `data` (row-major, width `self.dim`).
    ///
    /// # Errors
    /// [`KMeansError::Input`] for a bad shape or non-finite value,
    /// [`KMeansError::BadProbe`] unless `1 ≤ m ≤ roots`.
    pub fn assign(&self, data: &[f32], mode: AssignMode) -> Result<Vec<u32>, KMeansError> {
        check_matrix(data, self.dim)?;
        if self.leaves.is_empty() {
            return Err(KMeansError::NoCentroids);
        }
        match mode {
            AssignMode::Exact => Ok(nearest_unchecked(data, &self.leaves, self.dim, self.metric).0),
            AssignMode::Hierarchical { m } => {
                if m == 0 || m > self.nroots() {
                    return Err(KMeansError::BadProbe {
                        m,
                        roots: self.nroots(),
                    });
                }
                Ok(data
                    .par_chunks(self.dim)
                    .map(|x| self.assign_one(x, m))
                    .collect())
            }
        }
    }

    /// Nearest leaf among the children of the `m` nearest roots (ties by smaller index).
    fn assign_one(&self, x: &[f32], m: usize) -> u32 {
        let dim = self.dim;
        let mut roots: Vec<(f32, usize)> = self
            .roots
            .chunks_exact(dim)
            .map(|c| self.metric.distance(x, c))
            .zip(0..)
            .collect();
        roots.select_nth_unstable_by(m - 1, |a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut best = (f32::INFINITY, u32::MAX);
        for &(_, r) in &roots[..m] {
            for cid in self.cid_offsets[r]..self.cid_offsets[r + 1] {
                let d = self.metric.distance(
                    x,
                    &self.leaves[cid as usize * dim..(cid as usize + 1) * dim],
                );
                if d < best.0 || (d == best.0 && cid < best.1) {
                    best = (d, cid);
                }
            }
        }
        best.1
    }
}

/// Leaves per root: proportional to `counts` by largest remainder, each in
/// `[1, max(1, count)]`, summing to `nlist` (requires `1 ≤ counts.len() ≤ nlist ≤ Σcounts`).
fn allot_leaves(counts: &[usize], nlist: usize) -> Vec<usize> {
    let total: usize = counts.iter().sum();
    let ideal: Vec<f64> = counts
        .iter()
        .map(|&c| nlist as f64 * c as f64 / total.max(1) as f64)
        .collect();
    let cap: Vec<usize> = counts.iter().map(|&c| c.max(1)).collect();
    let mut alloc: Vec<usize> = ideal
        .iter()
        .zip(&cap)
        .map(|(&i, &c)| (i.floor() as usize).clamp(1, c))
        .collect();
    let mut sum: usize = alloc.iter().sum();
    // Strict comparisons keep the first root on ties: deterministic.
    while sum < nlist {
        let Some(r) = (0..alloc.len()).filter(|&r| alloc[r] < cap[r]).fold(
            None,
            |b: Option<usize>, r| match b {
                Some(b) if ideal[b] - alloc[b] as f64 >= ideal[r] - alloc[r] as f64 => Some(b),
                _ => Some(r),
            },
        ) else {
            break;
        };
        alloc[r] += 1;
        sum += 1;
    }
    while sum > nlist {
        let Some(r) =
            (0..alloc.len())
                .filter(|&r| alloc[r] > 1)
                .fold(None, |b: Option<usize>, r| match b {
                    Some(b) if ideal[b] - alloc[b] as f64 <= ideal[r] - alloc[r] as f64 => Some(b),
                    _ => Some(r),
                })
        else {
            break;
        };
        alloc[r] -= 1;
        sum -= 1;
    }
    alloc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 40 well-separated blobs of 50 points in 8-d.
    fn blobs() -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut data = Vec::new();
        for _ in 0..40 {
            let centre: Vec<f32> = (0..8).map(|_| rng.random_range(-50.0..50.0)).collect();
            for _ in 0..50 {
                data.extend(centre.iter().map(|c| c + rng.random_range(-1.0f32..1.0)));
            }
        }
        data
    }

    #[test]
    fn bottom_up_leaves_belong_to_their_nearest_root_and_match_flat_kmeans() {
        let data = blobs();
        let params = HierarchyParams {
            nlist: 40,
            roots: 6,
            kmeans: KMeansParams {
                niter: 10,
                ..KMeansParams::default()
            },
            ..HierarchyParams::default()
        };
        let (h, report) =
            Hierarchy::train_bottom_up(&data, 8, &params, &mut ChaCha8Rng::seed_from_u64(1))
                .unwrap();
        assert_eq!(h.nlist(), 40);
        assert!(h.nroots() >= 1 && h.nroots() <= 6);
        assert_eq!(h.cid_offsets[0], 0);
        assert_eq!(*h.cid_offsets.last().unwrap(), 40);
        assert!(
            h.cid_offsets.windows(2).all(|w| w[0] < w[1]),
            "no empty root"
        );
        assert_eq!(
            report.leaves_per_root,
            h.cid_offsets
                .windows(2)
                .map(|w| (w[1] - w[0]) as usize)
                .collect::<Vec<_>>()
        );
        let (owner, _) = nearest_unchecked(&h.leaves, &h.roots, 8, Metric::L2);
        for r in 0..h.nroots() {
            for cid in h.cid_offsets[r]..h.cid_offsets[r + 1] {
                assert_eq!(owner[cid as usize] as usize, r, "leaf {cid}");
            }
        }
        // The leaves are flat k-means's centroids (same seed), renumbered.
        let flat = train(
            &data,
            8,
            &KMeansParams {
                k: 40,
                ..params.kmeans.clone()
            },
            Metric::L2,
            &mut ChaCha8Rng::seed_from_u64(1),
        )
        .unwrap();
        let sorted = |c: &[f32]| {
            let mut rows: Vec<Vec<u32>> = c
                .chunks_exact(8)
                .map(|r| r.iter().map(|v| v.to_bits()).collect())
                .collect();
            rows.sort();
            rows
        };
        assert_eq!(sorted(&h.leaves), sorted(&flat.centroids));
        assert_eq!(report.objective, flat.objective);
    }

    #[test]
    fn allot_is_proportional_at_least_one_and_sums_to_nlist() {
        assert_eq!(allot_leaves(&[50, 30, 20], 10), vec![5, 3, 2]);
        // Largest remainder: ideal 3.33/3.33/3.33 → the first root gets the extra one.
        assert_eq!(allot_leaves(&[10, 10, 10], 10), vec![4, 3, 3]);
        // A tiny root still gets one leaf, taken from the most over-served.
        assert_eq!(allot_leaves(&[1000, 1, 0], 4), vec![2, 1, 1]);
        // An empty root's leaf is taken from the first of the exactly-served roots.
        assert_eq!(allot_leaves(&[0, 5, 5], 10), vec![1, 4, 5]);
        for (counts, nlist) in [
            (vec![7usize, 0, 3, 90, 1], 20),
            (vec![1; 5], 5),
            (vec![3, 3], 6),
        ] {
            let a = allot_leaves(&counts, nlist);
            assert_eq!(a.iter().sum::<usize>(), nlist, "{counts:?}");
            assert!(
                a.iter()
                    .zip(&counts)
                    .all(|(&a, &c)| a >= 1 && a <= c.max(1)),
                "{a:?} for {counts:?}"
            );
        }
    }
}
