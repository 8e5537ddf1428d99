//! `parqivf search`: query an index with vectors from a file and print the
//! neighbours, as text or one JSON object per query (`--json`), with the IO
//! stats (`--stats`). Exit codes: 0 ok, 2 bad input (dimension, NaN, k = 0,
//! nprobe > nlist, unreadable file) or IO failure.
//!
//! Queries come from `.npy` / `.fvecs` files or a Parquet file with a vector
//! column (any type the build accepts: list<float>, list<double>,
//! fixed-size list, fixed(d·4)). With `--groundtruth gt.ivecs|gt.npy` it
//! prints recall@k and QPS instead of the neighbours (the benchmark mode).
//!
//! Queries are read, searched and printed `--batch-size` at a time, so memory
//! is bounded by one batch (its queries, their `k` hits each), not by the
//! number of queries; each batch's results are written before the next
//! batch is read. A rayon worker drives the searches, so their compute runs
//! where it stands rather than being handed to the pool and back each step.

use anyhow::{Context, bail};
use parqivf::catalog::vector_column::to_f32_rows;
use parqivf::index::{Index, Pending, Preload, ProbeDepth, SearchParams, SearchResult};
use parqivf::probe::offload::drive_on_rayon;
use parqivf::vector_file::VectorReader;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Leaf lists probed per query (1..=nlist), instead of a target recall.
    /// Default: the index's own, `--target-recall 0.95` where it has a
    /// calibration (the build makes one), else 16 lists.
    #[arg(long)]
    pub nprobe: Option<usize>,
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
    /// Hold postings in memory first: `codes` (codes and rowids; the re-rank
    /// reads f32 pages from storage) or `all` (everything, like FAISS in RAM).
    /// `--preload` alone is `all`.
    #[arg(long, value_name = "codes|all", num_args = 0..=1, default_value = "none", default_missing_value = "all")]
    pub preload: Preload,
    /// In an index with codes: re-rank the best `rerank × k` candidates by
    /// their exact distance; 0 returns the codes' estimates and reads no f32.
    /// Default: the factor the build measured for the index's codes
    /// (`calibration.json`), else 4.
    #[arg(long)]
    pub rerank: Option<usize>,
    /// Only rows where this SQL `WHERE` expression over the payload columns
    /// is true, e.g. `lang = 'en' AND created_at >= '2024-01-01'`. The probe
    /// goes on to the next-nearest lists until `k` rows match.
    #[arg(long)]
    pub filter: Option<String>,
    /// With `--filter`: the most lists probed while looking for `k` matches
    /// (default every list). With `--target-recall`: the most lists a query
    /// probes.
    #[arg(long)]
    pub max_nprobe: Option<usize>,
    /// Probe for a recall@k instead of `--nprobe` (in (0, 1]): each query
    /// probes its nearest lists until the build's calibration predicts it
    /// has found this share of its exact neighbours. Easy queries stop
    /// early, hard ones go further; `--stats` shows each estimate.
    #[arg(long, value_name = "R", conflicts_with = "nprobe")]
    pub target_recall: Option<f64>,
    /// Exact neighbours (`.ivecs` or `.npy` of int rows, padded with -1
    /// where fewer than k rows match a filter): print recall@k and QPS.
    #[arg(long)]
    pub groundtruth: Option<PathBuf>,
    /// Timed repetitions in the benchmark mode (the best is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Worker threads, at least 1 (default: all cores).
    #[arg(long, value_parser = super::threads::parse_threads)]
    pub threads: Option<NonZeroUsize>,
    /// One JSON object per query: `rowids`, `distances` (and `stats`, and
    /// the first query's `open`: what opening the index cost).
    #[arg(long)]
    pub json: bool,
    /// Include the IO stats of each query.
    #[arg(long)]
    pub stats: bool,
    /// Print each query's plan without searching: its lists and, with
    /// `--filter`, the matches they hold (counted by reading only the
    /// filter's columns), the plan chosen and what scoring would read each
    /// way. No code or vector is read.
    #[arg(long, conflicts_with = "groundtruth")]
    pub explain: bool,
    /// Queries read, searched and printed at a time (bounds memory).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    #[command(flatten)]
    pub cache: super::cache_args::CacheArgs,
}

/// Query vectors, read a batch at a time.
enum Queries {
    File(VectorReader),
    Parquet {
        reader: ParquetRecordBatchReader,
        name: String,
        column: String,
        dim: Option<usize>,
    },
}

impl Queries {
    fn open(path: &Path, column: &str, batch: usize) -> anyhow::Result<Self> {
        let name = path.display().to_string();
        if name.ends_with(".npy") || name.ends_with(".fvecs") {
            return Ok(Self::File(VectorReader::open(path)?));
        }
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .with_context(|| format!("{name} is not a Parquet file"))?
            .with_batch_size(batch)
            .build()?;
        Ok(Self::Parquet {
            reader,
            name,
            column: column.to_string(),
            dim: None,
        })
    }

    /// The next up to `max` queries, row-major, and their dimension; `None`
    /// at the end.
    fn next(&mut self, max: usize) -> anyhow::Result<Option<(Vec<f32>, usize)>> {
        match self {
            Self::File(r) => {
                let v = r.next_f32(max)?;
                Ok((!v.is_empty()).then(|| (v, r.dim())))
            }
            Self::Parquet {
                reader,
                name,
                column,
                dim,
            } => {
                for batch in reader.by_ref() {
                    let batch = batch.with_context(|| format!("reading {name}"))?;
                    let col = batch
                        .column_by_name(column)
                        .with_context(|| format!("{name}: no column {column:?}"))?;
                    let (values, d) = to_f32_rows(col.as_ref(), *dim)
                        .with_context(|| format!("{name}: column {column:?}"))?;
                    dim.get_or_insert(d);
                    if !values.is_empty() {
                        return Ok(Some((values, d)));
                    }
                }
                Ok(None)
            }
        }
    }
}

/// Search every query of `path` batch by batch, handing each batch's
/// results (and the number of queries before it) to `sink`. Returns the
/// number of queries and the time spent searching; `None` when `pending`
/// (the check an index opened ahead still owes, [`Index::open_ahead`],
/// awaited alongside the first batch) says a newer commit exists: then
/// nothing was handed to `sink`.
async fn stream(
    index: &Index,
    args: &Args,
    params: &SearchParams,
    mut pending: Option<Pending>,
    mut sink: impl FnMut(usize, &[SearchResult]) -> anyhow::Result<()>,
) -> anyhow::Result<Option<(usize, Duration)>> {
    let expected = index.hierarchy().dim;
    let batch = args.batch_size as usize;
    let mut queries = Queries::open(&args.queries, &args.column, batch)?;
    let (mut done, mut searching) = (0usize, Duration::ZERO);
    while let Some((q, dim)) = queries.next(batch)? {
        if dim != expected {
            bail!("queries have dimension {dim}, the index has {expected}");
        }
        let t = Instant::now();
        let results = match pending.take() {
            None => index.search_batch(&q, params).await?,
            Some(check) => {
                let (results, current) =
                    futures::join!(index.search_batch(&q, params), check.is_current());
                if !current? {
                    return Ok(None);
                }
                results?
            }
        };
        searching += t.elapsed();
        sink(done, &results)?;
        done += results.len();
    }
    Ok(Some((done, searching)))
}

/// The stack of a rayon worker: a main thread's (8 MiB), as one of them
/// drives the searches.
const MAIN_STACK: usize = 8 << 20;

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    // The searches are driven from a rayon worker (`drive_on_rayon`), with
    // the main thread's stack.
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.map_or(0, NonZeroUsize::get))
        .stack_size(MAIN_STACK)
        .build_global()
        .context("configuring threads")?;
    let (store, prefix) = parqivf::store::location::open_with(&args.index, store)?;
    // A one-shot batch reads each list once: no RAM tier unless asked.
    let options = args.cache.index_options(0)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let params = SearchParams {
        k: args.k,
        nprobe: args.nprobe,
        root_factor: args.root_factor,
        rerank: args.rerank,
        filter: args.filter.clone(),
        max_nprobe: args.max_nprobe,
        target_recall: args.target_recall,
        ..SearchParams::default()
    };
    let disk = options.disk_cache.clone();
    let searched = drive_on_rayon(|| {
        runtime.block_on(async {
            // Plain results are opened ahead of the commit log's check when
            // the latest commit's bundle allows, and overlap that check with
            // their first batch; the other modes overlap it with the preload
            // (`Index::open_with`).
            let confirmed =
                || Index::open_with(Arc::clone(&store), &prefix, options.clone(), args.preload);
            let plain = args.groundtruth.is_none() && !args.explain && !args.warm;
            if plain {
                let (index, pending) =
                    Index::open_ahead(Arc::clone(&store), &prefix, options.clone(), args.preload)
                        .await?;
                if !print_results(&index, &args, &params, pending).await? {
                    print_results(&confirmed().await?, &args, &params, None).await?;
                }
                return Ok(());
            }
            let index = confirmed().await?;
            if args.warm {
                index.warm().await?;
            }
            match &args.groundtruth {
                Some(gt) => benchmark(&index, &args, &params, gt).await,
                None if args.explain => print_plans(&index, &args, &params).await,
                None => print_results(&index, &args, &params, None)
                    .await
                    .map(|_| ()),
            }
        })
    });
    // The disk tier's entries this process fetched are written before it
    // exits (`DiskCache::settle`), for the next process to find.
    if let Some(disk) = disk {
        runtime.block_on(disk.settle());
    }
    searched?;
    Ok(ExitCode::SUCCESS)
}

/// Print each query's plan ([`Index::explain`]), a batch at a time: one
/// JSON object per query with `--json`, else one line.
async fn print_plans(index: &Index, args: &Args, params: &SearchParams) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let batch = args.batch_size as usize;
    let mut queries = Queries::open(&args.queries, &args.column, batch)?;
    let mut done = 0;
    while let Some((q, dim)) = queries.next(batch)? {
        let expected = index.hierarchy().dim;
        if dim != expected {
            bail!("queries have dimension {dim}, the index has {expected}");
        }
        for (i, plan) in index.explain(&q, params).await?.iter().enumerate() {
            let mut obj = serde_json::to_value(plan)?;
            obj["query"] = (done + i).into();
            if args.json {
                writeln!(out, "{obj}")?;
            } else {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                write!(
                    out,
                    "query {}: {} lists, {} probed, plan {}, {} rows match, scoring {}",
                    done + i,
                    plan.lists_first,
                    plan.lists_probed,
                    text(&obj["filter_plan"]),
                    plan.rows_matched,
                    text(&obj["filter_scoring"]),
                )?;
                for (way, reads) in [("exact", plan.exact), ("lists", plan.lists)] {
                    if let Some(r) = reads {
                        write!(
                            out,
                            "; {way} would read {} B of codes, {} B of vectors, {} B of pages, touch {} B in memory",
                            r.code_bytes, r.vector_bytes, r.page_bytes, r.memory_bytes
                        )?;
                    }
                }
                writeln!(out, " (counting read {} B)", plan.counting_bytes)?;
            }
        }
        done += q.len() / dim;
    }
    out.flush()?;
    Ok(())
}

/// Print each batch's neighbours as soon as it is searched. `false` when
/// `pending` says a newer commit exists ([`stream`]): nothing was printed.
async fn print_results(
    index: &Index,
    args: &Args,
    params: &SearchParams,
    pending: Option<Pending>,
) -> anyhow::Result<bool> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let streamed = stream(index, args, params, pending, |first, results| {
        for (i, r) in results.iter().enumerate() {
            let i = first + i;
            if args.json {
                let mut obj = serde_json::json!({
                    "query": i,
                    "rowids": r.hits.iter().map(|h| h.rowid).collect::<Vec<_>>(),
                    "distances": r.hits.iter().map(|h| h.distance).collect::<Vec<_>>(),
                });
                if args.stats {
                    obj["stats"] = serde_json::to_value(r.stats)?;
                    if i == 0 {
                        obj["open"] = serde_json::to_value(index.open_stats())?;
                    }
                }
                writeln!(out, "{obj}")?;
            } else {
                write!(out, "query {i}:")?;
                for h in &r.hits {
                    write!(out, " {}:{}", h.rowid, h.distance)?;
                }
                writeln!(out)?;
                if args.stats {
                    if i == 0 {
                        writeln!(out, "  open: {:?}", index.open_stats())?;
                    }
                    writeln!(out, "  stats: {:?}", r.stats)?;
                }
            }
        }
        out.flush()?;
        Ok(())
    })
    .await?;
    Ok(streamed.is_some())
}

/// Recall@k against exact neighbours (`.ivecs` or `<i4` `.npy`, read a batch
/// at a time alongside the queries) and the best QPS of `--reps` timed passes.
async fn benchmark(
    index: &Index,
    args: &Args,
    params: &SearchParams,
    gt: &Path,
) -> anyhow::Result<()> {
    let mut truth = VectorReader::open(gt)?;
    let cols = truth.dim();
    if cols < args.k {
        bail!(
            "{}: rows of {cols} ids do not cover k={}",
            gt.display(),
            args.k
        );
    }
    // Recall counts the ground truth's valid ids (a filtered truth pads a
    // row with -1 where fewer than k rows match); a full answer has as many
    // hits as the truth has ids.
    let (mut hits, mut expected, mut full) = (0usize, 0usize, 0usize);
    let mut plans: std::collections::BTreeMap<String, usize> = Default::default();
    let mut scorings: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut lists, mut capped) = (0u64, 0usize);
    // Each query's recall, and the sum of the estimates.
    let (mut recalls, mut estimated, mut estimates) = (Vec::new(), 0f64, 0usize);
    // IO fields are a batch's (shared by its queries): counted once a batch.
    let (mut bytes, mut minimum, mut rounds) = (0u64, 0u64, 0u64);
    // Of the bytes: payload, codes, whole vector chunks and vector pages.
    let mut kinds = [0u64; 4];
    let streamed = stream(index, args, params, None, |first, results| {
        if let Some(r) = results.first() {
            let s = &r.stats;
            bytes += s.bytes;
            minimum += s.minimum_bytes;
            rounds = rounds.max(s.rounds);
            let of = [s.payload_bytes, s.code_bytes, s.vector_bytes, s.page_bytes];
            kinds.iter_mut().zip(of).for_each(|(k, b)| *k += b);
        }
        for r in results {
            let plan = serde_json::to_value(r.stats.filter_plan)?;
            *plans
                .entry(plan.as_str().unwrap_or_default().to_string())
                .or_default() += 1;
            let scoring = serde_json::to_value(r.stats.filter_scoring)?;
            *scorings
                .entry(scoring.as_str().unwrap_or_default().to_string())
                .or_default() += 1;
            lists += r.stats.lists_probed;
            capped += usize::from(r.stats.capped);
            if let Some(e) = r.stats.estimated_recall {
                estimated += e;
                estimates += 1;
            }
        }
        let rows = truth.next_i32(results.len())?;
        if rows.len() < results.len() * cols {
            bail!(
                "{}: {} rows of ids do not cover the {} queries read so far",
                gt.display(),
                first + rows.len() / cols,
                first + results.len()
            );
        }
        for (r, row) in results.iter().zip(rows.chunks_exact(cols)) {
            let row: Vec<i32> = row[..args.k].iter().copied().filter(|&t| t >= 0).collect();
            expected += row.len();
            full += usize::from(r.hits.len() >= row.len());
            let found = r
                .hits
                .iter()
                .filter(|h| row.iter().any(|&t| i64::from(t) == h.rowid))
                .count();
            hits += found;
            recalls.push(found as f64 / row.len().max(1) as f64);
        }
        Ok(())
    })
    .await?;
    let confirmed = "an index with no owed check always streams";
    let (nq, _) = streamed.context(confirmed)?;
    let mut best = f64::INFINITY;
    for _ in 0..args.reps.max(1) {
        let (_, t) = stream(index, args, params, None, |_, _| Ok(()))
            .await?
            .context(confirmed)?;
        best = best.min(t.as_secs_f64());
    }
    let (nprobe, target) = match index.probe_depth(params)? {
        ProbeDepth::Lists(nprobe) => (Some(nprobe), None),
        ProbeDepth::Recall(target) => (None, Some(target)),
    };
    let summary = serde_json::json!({
        "queries": nq,
        "k": args.k,
        "nprobe": nprobe,
        "root-factor": args.root_factor,
        "threads": rayon::current_num_threads(),
        "preload": args.preload,
        "rerank": index.rerank(params),
        "batch-size": args.batch_size,
        "seconds": best,
        "qps": nq as f64 / best,
        "recall": hits as f64 / expected.max(1) as f64,
        "target-recall": target,
        "mean-estimated-recall": (estimates > 0).then(|| estimated / estimates as f64),
        // The share of queries whose recall is at least the target's minus 0.1.
        "within-0.1-of-target": target.map(|t| {
            recalls.iter().filter(|&&r| r >= t - 0.1 - 1e-9).count() as f64 / recalls.len().max(1) as f64
        }),
        "full-answers": full as f64 / nq.max(1) as f64,
        "filter": args.filter,
        "plans": plans,
        "mean-lists-probed": lists as f64 / nq.max(1) as f64,
        "capped": capped,
        "bytes-per-query": bytes as f64 / nq.max(1) as f64,
        "minimum-bytes-per-query": minimum as f64 / nq.max(1) as f64,
        "scorings": scorings,
        "payload-bytes-per-query": kinds[0] as f64 / nq.max(1) as f64,
        "code-bytes-per-query": kinds[1] as f64 / nq.max(1) as f64,
        "vector-bytes-per-query": kinds[2] as f64 / nq.max(1) as f64,
        "page-bytes-per-query": kinds[3] as f64 / nq.max(1) as f64,
        "max-rounds": rounds,
        "open": index.open_stats(),
    });
    println!("{summary}");
    Ok(())
}
