//! Subcommands. Each lives in its own file with its clap `Args` and a `run`
//! returning the process exit code. Exit codes: 0 ok, 1 findings (e.g. verify
//! violations), 2 could not run (bad input, IO failure).

use clap::{Parser, Subcommand};
use parqivf::store::options::StoreOptions;
use std::process::ExitCode;
use std::time::Duration;

pub mod build;
pub mod cache_args;
pub mod gc;
pub mod mutate;
pub mod quickstart;
pub mod refresh;
pub mod search;
pub mod serve;
pub mod source_args;
pub mod threads;
pub mod train;
pub mod tune;
pub mod verify;
pub mod warm;

#[derive(Debug, Parser)]
#[command(
    name = "parqivf",
    version,
    about = "IVF vector index for Parquet and DuckLake tables"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Object-store runtime options, accepted by every subcommand (as flags or
/// `PARQIVF_*` environment variables). Durations are humantime (`500ms`,
/// `30s`, `2m`). Unset options keep object_store's defaults.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Object store")]
pub struct StoreArgs {
    /// Retries of a failed store request (default 10; 0 disables retries).
    #[arg(long, global = true, env = "PARQIVF_MAX_RETRIES")]
    pub max_retries: Option<usize>,
    /// No retry starts later than this after the first attempt (default 3m).
    #[arg(long, global = true, env = "PARQIVF_RETRY_TIMEOUT", value_parser = humantime::parse_duration)]
    pub retry_timeout: Option<Duration>,
    /// First retry backoff, doubled with jitter per retry (default 100ms).
    #[arg(long, global = true, env = "PARQIVF_BACKOFF_INITIAL", value_parser = humantime::parse_duration)]
    pub backoff_initial: Option<Duration>,
    /// Longest retry backoff (default 15s).
    #[arg(long, global = true, env = "PARQIVF_BACKOFF_MAX", value_parser = humantime::parse_duration)]
    pub backoff_max: Option<Duration>,
    /// Timeout of one whole store request (default 30s).
    #[arg(long, global = true, env = "PARQIVF_REQUEST_TIMEOUT", value_parser = humantime::parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Timeout of connecting to the store (default 5s).
    #[arg(long, global = true, env = "PARQIVF_CONNECT_TIMEOUT", value_parser = humantime::parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Publish on a store without conditional put (If-None-Match) by
    /// HEAD-then-PUT, accepting that concurrent publishers may overwrite each
    /// other. Without it such a store refuses to publish.
    #[arg(long, global = true, env = "PARQIVF_ALLOW_UNCONDITIONAL_PUBLISH")]
    pub allow_unconditional_publish: bool,
    /// Emulate object-store latency in front of the store, for tests and
    /// benches: every get and put waits a drawn time to first byte plus
    /// its bytes, e.g. `ttfb=30ms,jitter=0.2,tail=0.01@500ms,mib_per_s=100`.
    #[arg(
        long,
        global = true,
        env = "PARQIVF_STORE_LATENCY",
        value_name = "SPEC"
    )]
    pub store_latency: Option<parqivf::store::latency::Latency>,
    /// Requests in flight at once to a remote store (S3, GCS, Azure, or
    /// one with `--store-latency`); default 256, an eighth of them kept for
    /// hedges.
    #[arg(long, global = true, env = "PARQIVF_MAX_IN_FLIGHT", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: Option<u32>,
    /// When a remote store's slow get is sent a second time: `auto` (after
    /// the p95 of recent gets, the default), `off`, or a duration (`80ms`).
    #[arg(
        long,
        global = true,
        env = "PARQIVF_HEDGE_AFTER",
        value_name = "auto|off|DURATION"
    )]
    pub hedge_after: Option<parqivf::store::hedge::HedgeAfter>,
}

impl StoreArgs {
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
            backoff_initial: self.backoff_initial,
            backoff_max: self.backoff_max,
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            unconditional_publish: self.allow_unconditional_publish,
            latency: self.store_latency,
            max_in_flight: self.max_in_flight.map(|n| n as usize),
            hedge_after: self.hedge_after,
            config: Vec::new(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a clustered dataset, build an index, query it, print recall and timings.
    Quickstart(quickstart::Args),
    /// Build and publish an index snapshot from a source table.
    Build(build::Args),
    /// Query an index with vectors from a file.
    Search(search::Args),
    /// Sweep an index's operating points (nprobe, target recall) and draw the
    /// recall/QPS frontier.
    Tune(tune::Args),
    /// Serve one or more indexes over HTTP/JSON.
    Serve(serve::Args),
    /// Fill an index's caches ahead of traffic: every footer, and with
    /// `--cache-dir` every postings object into the disk cache.
    Warm(warm::Args),
    /// Train k-means centroids on a vector file (benchmarking aid).
    Train(train::Args),
    /// Check every MUST of the ivf_postings layout for a published table.
    Verify(verify::Args),
    /// Delete unreferenced snapshots of an index after a grace period.
    Gc(gc::Args),
    /// Bring an index up to date with its table: new rows as a delta table, deletions.
    Refresh(refresh::Args),
    /// Merge an index's delta tables and deletions into a new base (same centroids).
    Compact(refresh::CompactArgs),
    /// Delete rows by id (`--ids ids.npy`) or by a payload filter (`--where`), as a new version.
    Delete(mutate::DeleteArgs),
    /// Write rows by id (the newest version of an id wins), as a new version.
    Upsert(mutate::UpsertArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let store = cli.store.options();
    match cli.command {
        Command::Quickstart(a) => quickstart::run(a),
        Command::Build(a) => build::run(a, &store),
        Command::Search(a) => search::run(a, &store),
        Command::Serve(a) => serve::run(a, store),
        Command::Warm(a) => warm::run(a, &store),
        Command::Train(a) => train::run(a),
        Command::Tune(a) => tune::run(a, &store),
        Command::Verify(a) => verify::run(a, &store),
        Command::Gc(a) => gc::run(a, &store),
        Command::Refresh(a) => refresh::run(a, &store),
        Command::Compact(a) => refresh::run_compact(a, &store),
        Command::Delete(a) => mutate::run_delete(a, &store),
        Command::Upsert(a) => mutate::run_upsert(a, &store),
    }
}
