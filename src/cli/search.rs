//! `parqivf search`: query an index with vectors from a file and print the
//! neighbours, as text or one JSON object per query (`--json`), with the IO
//! stats (`--stats`). Exit codes: 0 ok, 2 bad input (dimension, NaN, k = 0,
//! nprobe > nlist, unreadable file) or IO failure.
//!
//! Queries come from `.npy` / `.fvecs` files or a Parquet file with a vector
//! column (any type the build accepts: list<float>, list<double>,
//! fixed-size list, fixed(d·4)). With `--groundtruth gt.ivecs|gt.npy` it
//! prints recall@k and QPS instead of the neighbours (the benchmark mode).

use anyhow::{Context, bail};
use parqivf::catalog::vector_column::to_f32_rows;
use parqivf::index::{Index, SearchParams};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Index location: an index (its current snapshot) or a snapshot folder;
    /// a local folder, file://, memory:// or s3:// URI.
    #[arg(long)]
    pub index: String,
    /// Query vectors: `.npy`, `.fvecs`, or a Parquet file (see `--column`).
    #[arg(long)]
    pub queries: PathBuf,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Leaf lists probed per query (1..=nlist).
    #[arg(long, default_value_t = 16)]
    pub nprobe: usize,
    /// Roots are visited nearest first until they own `root_factor × nprobe`
    /// leaves; the nearest `nprobe` of those are probed.
    #[arg(long, default_value_t = parqivf::probe::select::DEFAULT_ROOT_FACTOR)]
    pub root_factor: usize,
    /// Name of the vector column in a Parquet query file.
    #[arg(long, default_value = "vector")]
    pub column: String,
    /// Read every footer before the first query (warm queries: one round of requests).
    #[arg(long)]
    pub warm: bool,
    /// Decode every posting into memory first (maximum QPS, like FAISS in RAM).
    #[arg(long)]
    pub preload: bool,
    /// Exact neighbours (`.ivecs` or `.npy` of int rows): print recall@k and QPS.
    #[arg(long)]
    pub groundtruth: Option<PathBuf>,
    /// Timed repetitions in the benchmark mode (the best is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON object per query: `rowids`, `distances` (and `stats`).
    #[arg(long)]
    pub json: bool,
    /// Include the IO stats of each query.
    #[arg(long)]
    pub stats: bool,
}

/// Row-major f32 queries and their dimension.
fn read_queries(path: &Path, column: &str) -> anyhow::Result<(Vec<f32>, usize)> {
    let name = path.display().to_string();
    if name.ends_with(".npy") || name.ends_with(".fvecs") {
        let v = parqivf::vector_file::read_vectors(path)?;
        return Ok((v.data, v.dim));
    }
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{name} is not a Parquet file"))?
        .build()?;
    let (mut data, mut dim) = (Vec::new(), None::<usize>);
    for batch in reader {
        let batch = batch?;
        let col = batch
            .column_by_name(column)
            .with_context(|| format!("{name}: no column {column:?}"))?;
        let (values, d) =
            to_f32_rows(col.as_ref(), dim).with_context(|| format!("{name}: column {column:?}"))?;
        dim.get_or_insert(d);
        data.extend(values);
    }
    Ok((data, dim.unwrap_or(0)))
}

/// Ground-truth neighbour ids, one row per query.
fn read_groundtruth(path: &Path) -> anyhow::Result<(Vec<i64>, usize)> {
    if path.extension().is_some_and(|e| e == "ivecs") {
        let v = parqivf::vector_file::read_ivecs(path)?;
        return Ok((v.data.into_iter().map(i64::from).collect(), v.dim));
    }
    // `.npy` of int32 rows (the bench scripts' gt.npy): read its header's shape.
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = String::from_utf8_lossy(&bytes[10..10 + header_len]).to_string();
    if !header.contains("'<i4'") {
        bail!(
            "{}: ground truth must be int32 (.ivecs or '<i4' .npy)",
            path.display()
        );
    }
    let shape: Vec<usize> = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .map(|s| {
            s.trim_matches(|c| c == ' ' || c == '(')
                .split(',')
                .filter_map(|x| x.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let cols = *shape.get(1).context("ground truth .npy must be 2-D")?;
    let data = bytes[10 + header_len..]
        .chunks_exact(4)
        .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    Ok((data, cols))
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("configuring threads")?;
    }
    let (queries, dim) = read_queries(&args.queries, &args.column)?;
    let (store, prefix) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let params = SearchParams {
        k: args.k,
        nprobe: args.nprobe,
        root_factor: args.root_factor,
        ..SearchParams::default()
    };
    let (index, results) = runtime.block_on(async {
        let index = Index::open_current(store, &prefix).await?;
        let expected = index.hierarchy().dim;
        if dim != expected {
            bail!("queries have dimension {dim}, the index has {expected}");
        }
        if args.warm {
            index.warm().await?;
        }
        if args.preload {
            index.preload().await?;
        }
        let results = index.search_batch(&queries, &params).await?;
        Ok((index, results))
    })?;
    if let Some(gt) = &args.groundtruth {
        let (truth, cols) = read_groundtruth(gt)?;
        let nq = queries.len() / dim;
        if truth.len() < nq * cols || cols < args.k {
            bail!(
                "{}: {} rows of {cols} ids do not cover {nq} queries at k={}",
                gt.display(),
                truth.len() / cols.max(1),
                args.k
            );
        }
        let mut best = f64::INFINITY;
        for _ in 0..args.reps.max(1) {
            let t = Instant::now();
            runtime.block_on(index.search_batch(&queries, &params))?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let hits: usize = results
            .iter()
            .enumerate()
            .map(|(q, r)| {
                let row = &truth[q * cols..q * cols + args.k];
                r.hits.iter().filter(|h| row.contains(&h.rowid)).count()
            })
            .sum();
        let summary = serde_json::json!({
            "queries": nq,
            "k": args.k,
            "nprobe": args.nprobe,
            "root-factor": args.root_factor,
            "threads": rayon::current_num_threads(),
            "preload": args.preload,
            "seconds": best,
            "qps": nq as f64 / best,
            "recall": hits as f64 / (nq * args.k) as f64,
        });
        println!("{summary}");
        return Ok(ExitCode::SUCCESS);
    }
    for (i, r) in results.iter().enumerate() {
        if args.json {
            let mut obj = serde_json::json!({
                "query": i,
                "rowids": r.hits.iter().map(|h| h.rowid).collect::<Vec<_>>(),
                "distances": r.hits.iter().map(|h| h.distance).collect::<Vec<_>>(),
            });
            if args.stats {
                obj["stats"] = serde_json::to_value(r.stats)?;
            }
            println!("{obj}");
        } else {
            let hits: Vec<String> = r
                .hits
                .iter()
                .map(|h| format!("{}:{}", h.rowid, h.distance))
                .collect();
            println!("query {i}: {}", hits.join(" "));
            if args.stats {
                println!("  stats: {:?}", r.stats);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
