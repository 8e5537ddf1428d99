//! `parqivf train`: trains flat k-means (or, with `--roots`, the two-level
//! hierarchy) on a vector file and prints wall time, objective, iterations
//! and imbalance. This is how parqivf is timed next to `faiss.Kmeans` on the
//! same data (`scripts/bench/compare_kmeans.py`).
//!
//! `--eval-all` also assigns every row of the file to its nearest centroid
//! (the `obj_all` figure of `shared/bench/bench_kmeans.py`, comparable across
//! samplings) and reports the assignment throughput; with `--roots`,
//! `--compare-assign 1,2,4` reports for each `m` the fraction of rows whose
//! hierarchical assignment equals the exact one, and both timings.

use anyhow::Context;
use parqivf::distance::Metric;
use parqivf::kmeans::{self, AssignMode, Hierarchy, HierarchyParams, Init, KMeansParams};
use parqivf::vector_file::read_vectors;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Vector file: .npy (f32/f64, 2-D) or .fvecs.
    #[arg(long)]
    data: PathBuf,
    /// Centroids (flat), or nlist (leaves in all) with --roots.
    #[arg(long)]
    k: usize,
    /// Lloyd iterations.
    #[arg(long, default_value_t = 20)]
    niter: usize,
    /// Train the two-level hierarchy with this many roots.
    #[arg(long)]
    roots: Option<usize>,
    /// With --roots: flat Lloyd iterations over all leaves after the per-root
    /// trainings (default 0: the pure two-level training; the build uses 4).
    #[arg(long, default_value_t = 0)]
    polish: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Sample at most this many points per centroid (FAISS: 256).
    #[arg(long, default_value_t = 256)]
    max_points_per_centroid: usize,
    #[arg(long, default_value_t = 1234)]
    seed: u64,
    /// l2, ip or cosine.
    #[arg(long, default_value = "l2", value_parser = clap::value_parser!(Metric))]
    metric: Metric,
    /// Use k-means++ initialisation instead of FAISS's random init.
    #[arg(long)]
    kmeans_plus_plus: bool,
    /// Relative-improvement tolerance (0: always run niter).
    #[arg(long, default_value_t = 0.0)]
    tol: f64,
    /// Also assign every row and report the objective over all rows.
    #[arg(long)]
    eval_all: bool,
    /// With --roots: compare hierarchical assignment with m roots against exact.
    #[arg(long, value_delimiter = ',')]
    compare_assign: Vec<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("setting the thread count")?;
    }
    let t0 = Instant::now();
    let v = read_vectors(&args.data)?;
    let load_s = t0.elapsed().as_secs_f64();
    let params = KMeansParams {
        k: args.k,
        niter: args.niter,
        max_points_per_centroid: args.max_points_per_centroid,
        init: if args.kmeans_plus_plus {
            Init::KMeansPlusPlus
        } else {
            Init::Random
        },
        tol: args.tol,
        ..KMeansParams::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut out = json!({
        "data": args.data, "n": v.n, "dim": v.dim, "k": args.k, "niter": args.niter,
        "threads": rayon::current_num_threads(), "seed": args.seed, "metric": args.metric, "load_s": load_s,
    });
    let t0 = Instant::now();
    let centroids = match args.roots {
        None => {
            let r = kmeans::train(&v.data, v.dim, &params, args.metric, &mut rng)?;
            let train_s = t0.elapsed().as_secs_f64();
            extend(
                &mut out,
                json!({
                    "mode": "flat", "train_s": train_s, "per_iter_s": train_s / r.iterations.max(1) as f64,
                    "objective": r.objective, "iterations": r.iterations, "imbalance": r.imbalance,
                    "splits": r.splits, "train_points": r.train_points, "warnings": r.warning.into_iter().collect::<Vec<_>>(),
                }),
            );
            r.centroids
        }
        Some(roots) => {
            let hp = HierarchyParams {
                nlist: args.k,
                roots,
                metric: args.metric,
                kmeans: params,
                polish: args.polish,
            };
            let (h, r) = Hierarchy::train(&v.data, v.dim, &hp, &mut rng)?;
            extend(
                &mut out,
                json!({
                    "mode": "hierarchy", "roots": roots, "train_s": t0.elapsed().as_secs_f64(),
                    "objective": r.objective, "root_objective": r.root_objective, "imbalance": r.imbalance,
                    "splits": r.splits, "train_points": r.train_points, "warnings": r.warnings,
                    "min_leaves_per_root": r.leaves_per_root.iter().min(), "max_leaves_per_root": r.leaves_per_root.iter().max(),
                }),
            );
            if !args.compare_assign.is_empty() {
                out["assign_compare"] = compare_assign(&h, &v.data, &args.compare_assign)?;
            }
            h.leaves
        }
    };
    if args.eval_all {
        let t0 = Instant::now();
        let (_, dists) = kmeans::assign::nearest(&v.data, &centroids, v.dim, args.metric)?;
        let s = t0.elapsed().as_secs_f64();
        let obj: f64 = dists.iter().map(|&d| d as f64).sum();
        extend(
            &mut out,
            json!({ "obj_all": obj, "assign_all_s": s, "assign_vectors_per_s": v.n as f64 / s }),
        );
    }
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        for (key, value) in out.as_object().into_iter().flatten() {
            println!("{key:>22}: {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// For each `m`: the fraction of rows whose hierarchical leaf equals the exact
/// one, with both assignment times.
fn compare_assign(h: &Hierarchy, data: &[f32], ms: &[usize]) -> anyhow::Result<Value> {
    let t0 = Instant::now();
    let exact = h.assign(data, AssignMode::Exact)?;
    let exact_s = t0.elapsed().as_secs_f64();
    let mut rows = Vec::new();
    for &m in ms {
        let t0 = Instant::now();
        let hier = h.assign(data, AssignMode::Hierarchical { m })?;
        let s = t0.elapsed().as_secs_f64();
        let same = hier.iter().zip(&exact).filter(|(a, b)| a == b).count();
        rows.push(json!({ "m": m, "agreement": same as f64 / exact.len().max(1) as f64, "hier_s": s, "exact_s": exact_s }));
    }
    Ok(Value::Array(rows))
}

fn extend(out: &mut Value, more: Value) {
    if let (Some(o), Value::Object(m)) = (out.as_object_mut(), more) {
        o.extend(m);
    }
}
