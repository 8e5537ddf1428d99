//! `parqivf refresh --index LOC [--snapshot S] [--source SRC] [--retrain-above X]`
//! and `parqivf compact --index LOC`: follow the index's table as it
//! changes (see `parqivf::builder::refresh` and `docs/build.md`).
//!
//! Exit codes: 0 done (also when the index was up to date), 2 could not run
//! (a lost race is a conflict: run it again).

use anyhow::Context;
use parqivf::builder::BuildParams;
use parqivf::builder::ProgressMode;
use parqivf::builder::refresh::{RefreshParams, compact, refresh};
use std::process::ExitCode;

use super::source_args::{CompactPolicyArgs, DuckLakeArgs, MemoryArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The index location (the folder holding `versions/` and `snapshots/`).
    #[arg(long)]
    pub index: String,
    /// The source, when it differs from what index.json records (e.g.
    /// `ducklake:postgres:<conninfo>` with the credentials index.json never
    /// holds). Its columns must be the index's.
    #[arg(long)]
    pub source: Option<String>,
    #[command(flatten)]
    pub ducklake: DuckLakeArgs,
    /// Rebuild (new centroids) instead when the new rows' quantisation error
    /// exceeds the build's by more than this fraction (0.1 = 10 %).
    #[arg(long)]
    pub retrain_above: Option<f64>,
    #[command(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    pub compact: CompactPolicyArgs,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// The index location.
    #[arg(long)]
    pub index: String,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn build_params(memory_limit: usize, json: bool) -> BuildParams {
    BuildParams {
        memory_limit,
        progress: if json {
            ProgressMode::Quiet
        } else {
            ProgressMode::Auto
        },
        ..BuildParams::default()
    }
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    let (index_store, index) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let params = RefreshParams {
        source: args.source.clone(),
        snapshot: args.ducklake.snapshot,
        data_path: args.ducklake.data_path.clone(),
        retrain_above: args.retrain_above,
        store_options: store.clone(),
        compact: args.compact.policy(),
    };
    let summary = runtime
        .block_on(refresh(
            index_store,
            &index,
            &params,
            &build_params(args.memory.memory_limit, args.json),
        ))
        .with_context(|| format!("cannot refresh {}", args.index))?;
    print_summary(&args.index, &summary, args.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_compact(
    args: CompactArgs,
    store: &parqivf::store::options::StoreOptions,
) -> anyhow::Result<ExitCode> {
    let (index_store, index) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let summary = runtime
        .block_on(compact(
            index_store,
            &index,
            &build_params(args.memory.memory_limit, args.json),
        ))
        .with_context(|| format!("cannot compact {}", args.index))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else if let Some(v) = summary.version {
        println!(
            "{}: version {v}: {} delta tables and {} deletions folded into a new base of {} rows in {:.2} s",
            args.index, summary.deltas, summary.deletions, summary.rows, summary.seconds
        );
    } else {
        println!(
            "{}: nothing to compact at version {}",
            args.index, summary.from_version
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What a refresh, delete or upsert did, as JSON or one line (and a second
/// one when it compacted).
pub(super) fn print_summary(
    index: &str,
    summary: &parqivf::builder::refresh::RefreshSummary,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(summary)?);
        return Ok(());
    }
    match (&summary.version, &summary.rebuilt) {
        (_, Some(b)) => println!(
            "{index}: quantisation error grew {:.1} % (> --retrain-above): rebuilt as version {} in {:.1} s",
            summary.drift.error_growth.unwrap_or(0.0) * 100.0,
            b.version,
            summary.seconds
        ),
        (Some(v), None) => println!(
            "{index}: version {v}: {} → {}: {} rows added, {} removed, {} skipped{}; {} delta tables, {} deletions; error growth {} in {:.2} s",
            summary.source_before,
            summary.source_after,
            summary.rows_added,
            summary.rows_removed,
            summary.rows_skipped,
            if summary.ids_not_found > 0 {
                format!(", {} ids not found", summary.ids_not_found)
            } else {
                String::new()
            },
            summary.drift.deltas,
            summary.drift.deletions,
            summary
                .drift
                .error_growth
                .map_or_else(|| "n/a".to_string(), |g| format!("{:+.1} %", g * 100.0)),
            summary.seconds
        ),
        (None, None) => println!(
            "{index}: nothing to change at version {} ({}{})",
            summary.from_version,
            summary.source_after,
            if summary.ids_not_found > 0 {
                format!("; {} ids not found", summary.ids_not_found)
            } else {
                String::new()
            }
        ),
    }
    if let Some(c) = &summary.compacted {
        println!(
            "{index}: compacted as version {}: {} rows in one base",
            c.version.unwrap_or(summary.from_version),
            c.rows
        );
    }
    if let Some(e) = &summary.compact_error {
        eprintln!("{index}: the change is committed, but compacting failed: {e}");
    }
    Ok(())
}
