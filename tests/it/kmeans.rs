//! Integration tests of the k-means API: determinism, empty-cluster repair,
//! spherical mode, the hierarchy's invariants and typed input errors.

use parqivf::distance::{DistanceError, Metric};
use parqivf::kmeans::{
    self, AssignMode, Hierarchy, HierarchyParams, Init, KMeansError, KMeansParams,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` points around `centers` well-separated Gaussian-ish blobs (uniform noise).
fn blobs(n: usize, dim: usize, centers: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mu: Vec<f32> = (0..centers * dim)
        .map(|_| rng.random_range(-100.0..100.0))
        .collect();
    (0..n)
        .flat_map(|i| {
            let c = i % centers;
            (0..dim)
                .map(|j| mu[c * dim + j] + rng.random_range(-1.0..1.0))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `f` on a rayon pool of `threads` threads.
fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

fn params(k: usize) -> KMeansParams {
    KMeansParams {
        k,
        ..KMeansParams::default()
    }
}

#[test]
fn same_seed_gives_identical_bytes_for_any_thread_count() {
    let data = blobs(3000, 17, 12, 1);
    let run = |threads: usize, seed: u64| {
        on_threads(threads, || {
            kmeans::train(
                &data,
                17,
                &params(12),
                Metric::L2,
                &mut ChaCha8Rng::seed_from_u64(seed),
            )
            .unwrap()
        })
    };
    let a = run(1, 5);
    let b = run(1, 5);
    let c = run(2, 5);
    let bits =
        |r: &kmeans::KMeansResult| r.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(bits(&a), bits(&c), "thread count must not change the bytes");
    assert_eq!(a.objective.to_bits(), c.objective.to_bits());
    assert_ne!(
        bits(&a),
        bits(&run(1, 6)),
        "a different seed should give different centroids"
    );
}

#[test]
fn recovers_separated_clusters_and_objective_never_increases() {
    let data = blobs(2000, 8, 10, 2);
    let r = kmeans::train(
        &data,
        8,
        &KMeansParams {
            init: Init::KMeansPlusPlus,
            ..params(10)
        },
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert!(
        r.objective_history
            .windows(2)
            .all(|w| w[1] <= w[0] * (1.0 + 1e-6)),
        "{:?}",
        r.objective_history
    );
    // Each point is within the uniform noise (±1 per coordinate → ≤ 8 squared) of its centre.
    assert!(
        r.objective / 2000.0 < 8.0,
        "mean squared distance {}",
        r.objective / 2000.0
    );
    assert!(
        r.imbalance < 1.01,
        "even blobs give imbalance ≈ 1, got {}",
        r.imbalance
    );
    assert_eq!(
        (r.iterations, r.train_points, r.warning.is_some()),
        (20, 2000, false)
    );
}

#[test]
fn tolerance_stops_early_and_zero_tolerance_runs_niter() {
    let data = blobs(2000, 4, 5, 3);
    let r = kmeans::train(
        &data,
        4,
        &KMeansParams {
            tol: 1e-3,
            ..params(5)
        },
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert!(
        r.iterations < 20,
        "converged blobs should stop early, ran {}",
        r.iterations
    );
    let r = kmeans::train(
        &data,
        4,
        &params(5),
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(r.iterations, 20);
}

#[test]
fn sampling_follows_max_points_per_centroid_and_warns_below_min() {
    let data = blobs(5000, 3, 4, 4);
    let r = kmeans::train(
        &data,
        3,
        &KMeansParams {
            max_points_per_centroid: 100,
            ..params(8)
        },
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(r.train_points, 800);
    assert!(r.warning.is_none());
    let r = kmeans::train(
        &data[..300 * 3],
        3,
        &params(8),
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(r.train_points, 300);
    assert!(r.warning.is_some(), "300 points < 39·8 must warn");
}

#[test]
fn duplicate_points_force_empty_cluster_repair() {
    // 40 distinct points plus one point repeated 400 times: random init almost
    // surely picks the repeated point several times, so identical centroids
    // leave clusters empty and they must be split. Without repair, an empty
    // cluster keeps a duplicate centroid.
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut data: Vec<f32> = (0..40 * 2).map(|_| rng.random_range(-50.0..50.0)).collect();
    data.extend(std::iter::repeat_n([3.0f32, 7.0], 400).flatten());
    let r = kmeans::train(
        &data,
        2,
        &params(16),
        Metric::L2,
        &mut ChaCha8Rng::seed_from_u64(2),
    )
    .unwrap();
    assert!(r.splits > 0, "expected empty-cluster splits");
    let c: Vec<&[f32]> = r.centroids.chunks_exact(2).collect();
    for i in 0..c.len() {
        assert!(c[i].iter().all(|v| v.is_finite()));
        for j in 0..i {
            assert_ne!(c[i], c[j], "centroids {j} and {i} coincide");
        }
    }
}

#[test]
fn spherical_modes_give_unit_norm_centroids() {
    let data = blobs(1500, 16, 6, 5);
    for metric in [Metric::InnerProduct, Metric::Cosine] {
        let r = kmeans::train(
            &data,
            16,
            &params(6),
            metric,
            &mut ChaCha8Rng::seed_from_u64(1),
        )
        .unwrap();
        for c in r.centroids.chunks_exact(16) {
            let norm: f32 = c.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{metric:?}: norm {norm}");
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut data = blobs(100, 4, 2, 6);
    let rng = &mut ChaCha8Rng::seed_from_u64(1);
    assert!(matches!(
        kmeans::train(&data[..7], 4, &params(2), Metric::L2, rng),
        Err(KMeansError::Input(DistanceError::DimensionMismatch {
            expected: 4,
            actual: 3
        }))
    ));
    assert!(matches!(
        kmeans::train(&data, 4, &params(0), Metric::L2, rng),
        Err(KMeansError::ZeroK)
    ));
    assert!(matches!(
        kmeans::train(&data, 4, &params(101), Metric::L2, rng),
        Err(KMeansError::TooFewPoints { n: 100, k: 101 })
    ));
    assert!(matches!(
        kmeans::train(&data, 0, &params(2), Metric::L2, rng),
        Err(KMeansError::Input(DistanceError::ZeroDimension))
    ));
    data[13] = f32::NAN;
    assert!(matches!(
        kmeans::train(&data, 4, &params(2), Metric::L2, rng),
        Err(KMeansError::Input(DistanceError::NonFinite {
            position: 13,
            ..
        }))
    ));
    let hp = HierarchyParams {
        nlist: 8,
        roots: 9,
        ..HierarchyParams::default()
    };
    assert!(matches!(
        Hierarchy::train(&blobs(100, 4, 2, 6), 4, &hp, rng),
        Err(KMeansError::BadRoots { roots: 9, nlist: 8 })
    ));
}

#[test]
fn hierarchy_offsets_cover_nlist_and_assignment_modes_agree_on_clean_data() {
    let dim = 8;
    let data = blobs(6000, dim, 48, 7);
    let hp = HierarchyParams {
        nlist: 48,
        roots: 6,
        ..HierarchyParams::default()
    };
    let (h, report) = Hierarchy::train(&data, dim, &hp, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
    assert_eq!(h.cid_offsets.len(), 7);
    assert_eq!((h.cid_offsets[0], h.cid_offsets[6]), (0, 48));
    assert!(
        h.cid_offsets.windows(2).all(|w| w[0] < w[1]),
        "every root owns ≥ 1 leaf: {:?}",
        h.cid_offsets
    );
    assert_eq!(
        (h.roots.len(), h.leaves.len(), h.nlist(), h.nroots()),
        (6 * dim, 48 * dim, 48, 6)
    );
    assert_eq!(report.leaves_per_root.iter().sum::<usize>(), 48);
    assert_eq!(report.train_points, 6000);
    let exact = h.assign(&data, AssignMode::Exact).unwrap();
    let m1 = h.assign(&data, AssignMode::Hierarchical { m: 1 }).unwrap();
    let all = h.assign(&data, AssignMode::Hierarchical { m: 6 }).unwrap();
    // Probing every root is exact, up to the GEMM form's rounding at near-ties
    // (|error| ≲ a few ε·(‖x‖² + ‖c‖²)).
    for (i, (&a, &e)) in all
        .iter()
        .zip(&exact)
        .enumerate()
        .filter(|(_, (a, e))| a != e)
    {
        let x = &data[i * dim..(i + 1) * dim];
        let d = |c: u32| Metric::L2.distance(x, &h.leaves[c as usize * dim..][..dim]);
        let norm2: f32 = x.iter().map(|v| v * v).sum();
        assert!(
            (d(a) - d(e)).abs() <= 1e-5 * norm2,
            "row {i}: leaf {a} at {} vs exact {e} at {}",
            d(a),
            d(e)
        );
    }
    let same = m1.iter().zip(&exact).filter(|(a, b)| a == b).count();
    assert!(
        same as f64 / 6000.0 > 0.99,
        "well-separated blobs: m=1 agrees on {same}/6000"
    );
    // The hierarchy's objective is the leaves' objective on their points.
    let leaf_obj: f64 = data
        .chunks_exact(dim)
        .zip(&m1)
        .map(|(x, &c)| Metric::L2.distance(x, &h.leaves[c as usize * dim..][..dim]) as f64)
        .sum();
    assert!(
        (leaf_obj - report.objective).abs() <= 0.05 * report.objective.max(1.0),
        "{leaf_obj} vs {}",
        report.objective
    );
    assert!(matches!(
        h.assign(&data, AssignMode::Hierarchical { m: 7 }),
        Err(KMeansError::BadProbe { m: 7, roots: 6 })
    ));
    assert!(matches!(
        h.assign(&data[..5], AssignMode::Exact),
        Err(KMeansError::Input(DistanceError::DimensionMismatch { .. }))
    ));
}

#[test]
fn hierarchy_is_deterministic_across_thread_counts() {
    let data = blobs(3000, 5, 20, 8);
    let hp = HierarchyParams {
        nlist: 20,
        roots: 4,
        ..HierarchyParams::default()
    };
    let run = |threads: usize| {
        on_threads(threads, || {
            Hierarchy::train(&data, 5, &hp, &mut ChaCha8Rng::seed_from_u64(11))
                .unwrap()
                .0
        })
    };
    assert_eq!(run(1), run(2));
}

#[test]
fn hamerly_bounds_reproduce_plain_lloyd() {
    // Overlapping clusters (noise ±1 around centres in ±3): many points change
    // cluster across iterations, so the bounds must let them through.
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let data: Vec<f32> = (0..4000 * 6).map(|_| rng.random_range(-3.0..3.0)).collect();
    let run = |bounds: bool| {
        kmeans::train(
            &data,
            6,
            &KMeansParams {
                bounds,
                ..params(32)
            },
            Metric::L2,
            &mut ChaCha8Rng::seed_from_u64(4),
        )
        .unwrap()
    };
    let (plain, fast) = (run(false), run(true));
    for (a, b) in plain.objective_history.iter().zip(&fast.objective_history) {
        assert!((a - b).abs() <= 1e-5 * a, "objective {a} vs {b}");
    }
    let max_diff = plain
        .centroids
        .iter()
        .zip(&fast.centroids)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max_diff < 1e-3, "centroids differ by {max_diff}");
}

#[test]
fn neighbour_restricted_lloyd_tracks_exact_lloyd_and_is_deterministic() {
    // Overlapping blobs, k = 128: points keep moving between neighbouring
    // clusters after the full iterations, which the restriction must follow.
    let (dim, k) = (12, 128);
    let data = blobs(20_000, dim, 160, 21);
    let run = |neighbours: usize, threads: usize| {
        on_threads(threads, || {
            kmeans::train(
                &data,
                dim,
                &KMeansParams {
                    neighbours,
                    niter: 12,
                    ..params(k)
                },
                Metric::L2,
                &mut ChaCha8Rng::seed_from_u64(8),
            )
            .unwrap()
        })
    };
    let bits =
        |r: &kmeans::KMeansResult| r.centroids.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let exact = run(0, 2);
    let restricted = run(16, 2);
    // The first iterations are the exact ones, bit for bit.
    let full = kmeans::FULL_ITERATIONS;
    assert_eq!(
        exact.objective_history[..full],
        restricted.objective_history[..full]
    );
    // Each restricted assignment keeps the point's own centroid among its
    // candidates, so the objective never rises (no empty cluster here).
    for w in restricted.objective_history.windows(2) {
        assert!(w[1] <= w[0] * (1.0 + 1e-6), "objective rose: {w:?}");
    }
    let (e, r) = (exact.objective, restricted.objective);
    assert!(r <= e * 1.01, "restricted objective {r} vs exact {e}");
    assert_eq!(
        bits(&restricted),
        bits(&run(16, 1)),
        "thread count changed the bytes"
    );
    // Candidates covering every centroid are exact Lloyd.
    assert_eq!(bits(&exact), bits(&run(k, 2)));
}

#[test]
fn polish_lowers_the_objective_keeps_ownership_and_is_deterministic() {
    let dim = 8;
    let data = blobs(6000, dim, 60, 11);
    let train = |polish: usize| {
        let hp = HierarchyParams {
            nlist: 48,
            roots: 6,
            polish,
            ..HierarchyParams::default()
        };
        Hierarchy::train(&data, dim, &hp, &mut ChaCha8Rng::seed_from_u64(5)).unwrap()
    };
    let (plain, plain_report) = train(0);
    let (polished, report) = train(4);
    // Same roots and ownership: the polish only moves leaves.
    assert_eq!(polished.roots, plain.roots);
    assert_eq!(polished.cid_offsets, plain.cid_offsets);
    assert_ne!(polished.leaves, plain.leaves);
    // Exact assignment of the whole data set is closer to the polished leaves.
    let sse = |h: &Hierarchy| -> f64 {
        let (_, d) = parqivf::kmeans::assign::nearest(&data, &h.leaves, dim, Metric::L2).unwrap();
        d.iter().map(|&x| x as f64).sum()
    };
    assert!(
        sse(&polished) < sse(&plain),
        "{} vs {}",
        sse(&polished),
        sse(&plain)
    );
    assert!(report.objective < plain_report.objective);
    assert_eq!(train(4).0, polished, "same seed, same bytes");
}
