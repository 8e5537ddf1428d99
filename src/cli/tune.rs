//! `parqivf tune`: sweep an index's operating points (fixed `nprobe`, and a
//! target recall when the index is calibrated), measure each one's recall@k
//! and QPS (one query per call, as a user's request would run), and print
//! the recall/QPS frontier as a table and as an SVG picture (plotters).
//!
//! Without `--queries`, rows of the index itself are the queries (each
//! one's own row left out of its answer and of its truth); without
//! `--groundtruth`, the truth is an exhaustive search: every list, with
//! `100 × k` candidates re-ranked by their exact distance.

use anyhow::{Context, bail};
use clap::Parser;
use parqivf::index::{Index, IndexOptions, Preload, SearchParams};
use parqivf::probe::rows::Want;
use parqivf::probe::stats::SearchStats;
use plotters::prelude::*;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Parser)]
pub struct Args {
    /// The index location (folder, file://, s3://…).
    #[arg(long)]
    pub index: String,
    /// Query vectors (`.npy` or `.fvecs`); default: `--sample` rows of the
    /// index.
    #[arg(long)]
    pub queries: Option<PathBuf>,
    /// Exact neighbours of `--queries` (`.ivecs` or `.npy` of int rows);
    /// default: an exhaustive search.
    #[arg(long)]
    pub groundtruth: Option<PathBuf>,
    /// Rows of the index used as queries without `--queries`.
    #[arg(long, default_value_t = 300)]
    pub sample: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// What to hold in memory while measuring: `none`, `codes` or `all`.
    #[arg(long, value_name = "none|codes|all", default_value = "codes")]
    pub preload: Preload,
    /// The picture of the frontier (SVG).
    #[arg(long, default_value = "frontier.svg")]
    pub plot: PathBuf,
    /// Print the operating points as JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The targets swept on a calibrated index.
const TARGETS: [f64; 8] = [0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.99, 0.995];
/// Candidates re-ranked per neighbour by the exhaustive truth.
const TRUTH_RERANK: usize = 100;

/// One measured operating point.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
struct Point {
    /// `nprobe N` or `target R`.
    setting: String,
    nprobe: Option<usize>,
    target_recall: Option<f64>,
    recall: f64,
    qps: f64,
    mean_lists: f64,
    mean_estimated_recall: Option<f64>,
    /// On the recall/QPS frontier (no other point has both more).
    frontier: bool,
}

/// The queries, and for each, the rowid to leave out (its own row) when
/// they are rows of the index.
struct Queries {
    vectors: Vec<f32>,
    own: Vec<Option<i64>>,
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    let (store, prefix) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let index = Index::open_with(store, &prefix, IndexOptions::default(), args.preload).await?;
        let dim = index.hierarchy().dim;
        let queries = match &args.queries {
            Some(path) => {
                let v = parqivf::vector_file::read_vectors(path)?;
                if v.dim != dim {
                    bail!(
                        "{}: vectors of {} dimensions, the index has {dim}",
                        path.display(),
                        v.dim
                    );
                }
                Queries {
                    own: vec![None; v.n],
                    vectors: v.data,
                }
            }
            None => sample_rows(&index, args.sample).await?,
        };
        let truth = match &args.groundtruth {
            Some(path) => parqivf::vector_file::read_truth(path, queries.own.len(), args.k)?,
            None => exhaustive_truth(&index, &queries, args.k).await?,
        };
        let nlist = index.manifest().nlist as usize;
        let mut settings: Vec<SearchParams> = parqivf::builder::calibrate::nprobe_grid(nlist)
            .into_iter()
            .map(|nprobe| SearchParams {
                k: args.k,
                nprobe: Some(nprobe),
                ..SearchParams::default()
            })
            .collect();
        if index.calibration().is_some() {
            settings.extend(TARGETS.iter().map(|&t| SearchParams {
                k: args.k,
                target_recall: Some(t),
                ..SearchParams::default()
            }));
        }
        // One unmeasured pass first, so the first point does not pay for
        // warming the page cache and the allocator.
        if let Some(first) = settings.first() {
            measure(&index, &queries, &truth, first).await?;
        }
        let mut points: Vec<Point> = Vec::new();
        for params in &settings {
            // Past recall 0.999 a larger nprobe only gets slower.
            let fixed_done = points
                .iter()
                .any(|p| p.nprobe.is_some() && p.recall >= 0.999);
            if params.target_recall.is_none() && fixed_done {
                continue;
            }
            points.push(measure(&index, &queries, &truth, params).await?);
        }
        mark_frontier(&mut points);
        print_points(&points, args.json)?;
        draw(&points, &args.plot, &args.index, args.k)?;
        eprintln!(
            "parqivf tune: the frontier is drawn in {}",
            args.plot.display()
        );
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `n` rows of the index, evenly spread over its lists, as queries.
async fn sample_rows(index: &Index, n: usize) -> anyhow::Result<Queries> {
    let nlist = index.manifest().nlist as usize;
    let step = nlist.div_ceil(n.max(1)).max(1);
    let cids: Vec<u32> = (0..nlist).step_by(step).map(|c| c as u32).collect();
    let want = Want {
        vectors: true,
        ..Want::default()
    };
    let loaded = index
        .reader()
        .load(&cids, want, &mut SearchStats::default())
        .await?;
    let dim = index.hierarchy().dim;
    let per_group = n.div_ceil(loaded.len().max(1)).max(1);
    let (mut vectors, mut own) = (Vec::new(), Vec::new());
    for rg in &loaded {
        let rows = rg.rowids.len();
        for i in 0..per_group.min(rows) {
            let r = i * rows / per_group.min(rows);
            vectors.extend_from_slice(&rg.vectors[r * dim..(r + 1) * dim]);
            own.push(Some(rg.rowids[r]));
            if own.len() == n {
                return Ok(Queries { vectors, own });
            }
        }
    }
    if own.is_empty() {
        bail!("the index holds no rows to sample queries from");
    }
    Ok(Queries { vectors, own })
}

/// Each query's `k` nearest rows (its own left out): every list probed,
/// `100 × k` candidates re-ranked by their exact distance.
async fn exhaustive_truth(index: &Index, q: &Queries, k: usize) -> anyhow::Result<Vec<Vec<i64>>> {
    let params = SearchParams {
        k: k + 1,
        nprobe: Some(index.manifest().nlist as usize),
        rerank: Some(TRUTH_RERANK),
        ..SearchParams::default()
    };
    let results = index
        .search_batch(&q.vectors, &params)
        .await
        .context("the exhaustive search for the ground truth")?;
    Ok(results
        .iter()
        .zip(&q.own)
        .map(|(r, own)| answer(&r.hits, *own, k))
        .collect())
}

/// The first `k` rowids of `hits` that are not `own`.
fn answer(hits: &[parqivf::index::Hit], own: Option<i64>, k: usize) -> Vec<i64> {
    hits.iter()
        .map(|h| h.rowid)
        .filter(|&r| Some(r) != own)
        .take(k)
        .collect()
}

/// Recall and QPS of `params`, one query per call.
async fn measure(
    index: &Index,
    q: &Queries,
    truth: &[Vec<i64>],
    params: &SearchParams,
) -> anyhow::Result<Point> {
    let dim = index.hierarchy().dim;
    let asked = SearchParams {
        k: params.k + 1,
        ..params.clone()
    };
    let (mut found, mut expected, mut lists) = (0usize, 0usize, 0u64);
    let (mut estimated, mut estimates) = (0f64, 0usize);
    let t = Instant::now();
    for ((vector, own), want) in q.vectors.chunks_exact(dim).zip(&q.own).zip(truth) {
        let r = index.search(vector, &asked).await?;
        let got = answer(&r.hits, *own, params.k);
        found += got.iter().filter(|id| want.contains(id)).count();
        expected += want.len();
        lists += r.stats.lists_probed;
        if let Some(e) = r.stats.estimated_recall {
            estimated += e;
            estimates += 1;
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    let n = q.own.len().max(1) as f64;
    Ok(Point {
        setting: match (params.nprobe, params.target_recall) {
            (Some(nprobe), _) => format!("nprobe {nprobe}"),
            (None, Some(t)) => format!("target {t}"),
            (None, None) => "the index's default".into(),
        },
        nprobe: params.nprobe,
        target_recall: params.target_recall,
        recall: found as f64 / expected.max(1) as f64,
        qps: n / seconds.max(f64::MIN_POSITIVE),
        mean_lists: lists as f64 / n,
        mean_estimated_recall: (estimates > 0).then(|| estimated / estimates as f64),
        frontier: false,
    })
}

/// Marks the points no other point beats on both recall and QPS.
fn mark_frontier(points: &mut [Point]) {
    let all = points.to_vec();
    for p in points.iter_mut() {
        p.frontier = !all.iter().any(|o| {
            o.recall >= p.recall && o.qps > p.qps || o.recall > p.recall && o.qps >= p.qps
        });
    }
}

fn print_points(points: &[Point], json: bool) -> anyhow::Result<()> {
    if json {
        for p in points {
            println!("{}", serde_json::to_string(p)?);
        }
        return Ok(());
    }
    println!(
        "{:<14} {:>8} {:>10} {:>11} {:>10} {:>9}",
        "setting", "recall", "QPS", "mean lists", "estimated", "frontier"
    );
    for p in points {
        let estimated = p
            .mean_estimated_recall
            .map_or_else(|| "-".to_string(), |e| format!("{e:.4}"));
        println!(
            "{:<14} {:>8.4} {:>10.0} {:>11.1} {:>10} {:>9}",
            p.setting,
            p.recall,
            p.qps,
            p.mean_lists,
            estimated,
            if p.frontier { "*" } else { "" }
        );
    }
    Ok(())
}

/// The two series (fixed nprobe, target recall) on recall × QPS (log).
fn draw(points: &[Point], path: &std::path::Path, index: &str, k: usize) -> anyhow::Result<()> {
    let (lo, hi) = points.iter().fold((f64::INFINITY, 0f64), |(lo, hi), p| {
        (lo.min(p.qps), hi.max(p.qps))
    });
    let min_recall = points.iter().map(|p| p.recall).fold(1.0, f64::min);
    let x0 = (min_recall - 0.02).clamp(0.0, 0.98);
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("recall@{k} / QPS: {index}"), ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..1.005f64, (lo * 0.8..hi * 1.25).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(format!("recall@{k}"))
        .y_desc("queries per second (one per call)")
        .draw()
        .map_err(err)?;
    let series: [(&str, RGBColor, bool); 2] =
        [("nprobe", BLUE, false), ("target recall", RED, true)];
    for (name, color, target) in series {
        let mut xs: Vec<&Point> = points
            .iter()
            .filter(|p| p.target_recall.is_some() == target)
            .collect();
        if xs.is_empty() {
            continue;
        }
        xs.sort_by(|a, b| a.recall.total_cmp(&b.recall));
        chart
            .draw_series(LineSeries::new(xs.iter().map(|p| (p.recall, p.qps)), color))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(xs.iter().map(|p| {
                let label = match (p.nprobe, p.target_recall) {
                    (Some(n), _) => format!("{n}"),
                    (_, Some(t)) => format!("{t}"),
                    _ => String::new(),
                };
                EmptyElement::at((p.recall, p.qps))
                    + Circle::new((0, 0), 4, color.filled())
                    + Text::new(
                        label,
                        (6, -14),
                        ("sans-serif", 12).into_font().color(&color),
                    )
            }))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
