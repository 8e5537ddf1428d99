//! `parqivf build`: read a source table, train, assign, write and publish an
//! index snapshot as the next version of the index at `--out`.

use std::num::NonZeroUsize;
use std::process::ExitCode;

use anyhow::Context;
use parqivf::builder::{BuildParams, ProgressMode, SourceSpec, build, open_source};
use parqivf::distance::Metric;
use parqivf::kmeans::{AssignMode, Leaves};
use parqivf::quant::Scheme;
use parqivf::store::options::StoreOptions;

use super::source_args::{DuckLakeArgs, MemoryArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The source: a Parquet table root or `*` pattern (path, file://, s3://…),
    /// a `.npy`/`.fvecs` file, or a DuckLake catalog with `--table`:
    /// `ducklake:sqlite:<meta.sqlite>` or `ducklake:postgres:<conninfo>`
    /// (libpq `key=value` pairs, e.g. `dbname=lake host=db user=u`, or a
    /// postgresql:// URI; PGPASSWORD supplies a missing password; the password
    /// is never shown or recorded in index.json).
    #[arg(long)]
    pub source: String,
    /// The index location (a folder, file://, memory://, s3://…). Snapshots and
    /// the commit log live below it.
    #[arg(long)]
    pub out: String,
    /// The vector column.
    #[arg(long, default_value = "embedding")]
    pub column: String,
    /// DuckLake table as `schema.table`.
    #[arg(long)]
    pub table: Option<String>,
    #[command(flatten)]
    pub ducklake: DuckLakeArgs,
    /// A BIGINT-compatible column to use as rowid (Parquet sources).
    #[arg(long)]
    pub id_column: Option<String>,
    /// Extra columns carried into the postings, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub payload: Vec<String>,
    /// Sort the rows of each list by this payload column (then by rowid), so
    /// that filters on it prune pages: e.g. a tenant column.
    #[arg(long)]
    pub sort_by: Option<String>,
    /// Number of leaf lists.
    #[arg(long, default_value_t = 1024)]
    pub nlist: u32,
    /// Number of roots (default round(sqrt(nlist))); 1 trains flat k-means.
    #[arg(long)]
    pub roots: Option<u32>,
    /// Rows held out as queries to measure recall by lists probed
    /// (`calibration.json`: what `search --target-recall` and the recall
    /// estimates use); 0 measures none. Fewer on large tables: 4·10¹⁰
    /// multiply-adds at most (at least 300 queries).
    #[arg(long, default_value_t = parqivf::builder::calibrate::DEFAULT_CALIBRATION_QUERIES)]
    pub calibration_queries: usize,
    /// How the leaves are trained: `flat` (flat k-means over the sample,
    /// then the roots over the leaves) or `per-root` (roots first, then each
    /// root's leaves, then `--polish`). Default: flat up to 4096 lists.
    #[arg(long, value_parser = clap::value_parser!(Leaves))]
    pub leaves: Option<Leaves>,
    /// With `--leaves per-root`: flat Lloyd iterations over all leaves after
    /// the per-root trainings.
    #[arg(long, default_value_t = parqivf::builder::DEFAULT_POLISH)]
    pub polish: usize,
    /// l2, ip or cosine.
    #[arg(long, default_value = "l2", value_parser = clap::value_parser!(Metric))]
    pub metric: Metric,
    #[arg(long, default_value_t = 20)]
    pub niter: usize,
    /// Candidate centroids per point after the first two Lloyd iterations
    /// (approximate Lloyd: each point is compared with the centroids nearest
    /// to its own); 0 compares every point with every centroid.
    #[arg(long, default_value_t = parqivf::builder::DEFAULT_NEIGHBOURS)]
    pub neighbours: usize,
    #[arg(long, default_value_t = 256)]
    pub max_points_per_centroid: usize,
    /// Seed for sampling and training (builds are reproducible by seed and thread count).
    #[arg(long, default_value_t = parqivf::builder::DEFAULT_SEED)]
    pub seed: u64,
    /// Assignment: `exact` or `hierarchical:M` (nearest M roots, then their leaves).
    #[arg(long, default_value = "exact", value_parser = clap::value_parser!(AssignMode))]
    pub assign: AssignMode,
    /// Quantised codes beside the vectors: `pq4fs` (4-bit PQ over pairs of
    /// dimensions, scored by fast-scan, 2 bits a dimension; the default),
    /// `rabitq4` (4 bits a dimension), `sq8` (8 bits a dimension) or `none`
    /// (queries scan f32).
    #[arg(long, default_value = parqivf::quant::codes_name(parqivf::builder::DEFAULT_CODES), value_parser = parse_codes)]
    pub codes: Codes,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Skip rows with NULL or non-finite vectors (counted) instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Parquet: record each file's sha256, so `refresh` sees a file rewritten
    /// in place with its size and mtime kept (reads each file once more).
    #[arg(long)]
    pub content_hash: bool,
    /// Worker threads, at least 1 (default: all cores).
    #[arg(long, value_parser = super::threads::parse_threads)]
    pub threads: Option<NonZeroUsize>,
    /// Print a JSON summary on stdout (and plain progress on stderr).
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The source these flags name.
    pub fn source_spec(&self) -> SourceSpec {
        SourceSpec {
            source: self.source.clone(),
            column: self.column.clone(),
            table: self.table.clone(),
            snapshot: self.ducklake.snapshot,
            data_path: self.ducklake.data_path.clone(),
            id_column: self.id_column.clone(),
            payload: self.payload.clone(),
            skip_invalid: self.skip_invalid,
            content_hash: self.content_hash,
        }
    }
}

/// `--codes`: a scheme, or none.
#[derive(Debug, Clone, Copy)]
pub struct Codes(pub Option<Scheme>);

fn parse_codes(s: &str) -> Result<Codes, String> {
    parqivf::quant::parse_codes(s).map(Codes)
}

pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<ExitCode> {
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t.get())
            .build_global()
            .context("configuring the thread pool")?;
    }
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let source = open_source(&args.source_spec(), store).await?;
        let (store, index) = parqivf::store::location::open_with(&args.out, store)?;
        let params = BuildParams {
            nlist: args.nlist,
            roots: args.roots,
            leaves: args.leaves,
            polish: args.polish,
            metric: args.metric,
            niter: args.niter,
            neighbours: args.neighbours,
            max_points_per_centroid: args.max_points_per_centroid,
            seed: args.seed,
            assign: args.assign,
            codes: args.codes.0,
            memory_limit: args.memory.memory_limit,
            sort_by: args.sort_by.clone(),
            calibration_queries: args.calibration_queries,
            progress: if args.json {
                ProgressMode::Plain
            } else {
                ProgressMode::Auto
            },
            ..BuildParams::default()
        };
        // On Ctrl-C the build future is dropped, which removes its spill
        // files and the object store's staging files; the sweep then deletes
        // the snapshot folder it had started.
        let summary = tokio::select! {
            s = build(source, store.clone(), &index, &params) => s?,
            _ = tokio::signal::ctrl_c() => {
                parqivf::builder::spill::sweep_abandoned(&store, &index).await;
                eprintln!("interrupted: nothing was published and the partial snapshot was removed");
                return Ok(ExitCode::from(130));
            }
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            let calibration = if summary.calibration_queries > 0 {
                format!(
                    " (the recall calibration over {} queries {:.2} s of it)",
                    summary.calibration_queries, summary.seconds.calibrate
                )
            } else {
                String::new()
            };
            eprintln!(
                "published version {} of {} ({} rows, {} invalid rows skipped, nlist {}, {} postings files) in {:.2} s{calibration}",
                summary.version,
                args.out,
                summary.rows,
                summary.skipped_rows,
                summary.nlist,
                summary.postings_files,
                summary.seconds.total
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}
