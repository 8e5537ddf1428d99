//! `parqivf gc --index LOC [--older-than D] [--dry-run] [--json]`: delete the
//! snapshot folders of an index that no version of its commit log names and
//! whose newest object is older than the grace period (default 1 day, so a
//! build that has not committed yet keeps its snapshot). A snapshot any
//! version names is never touched. `gc` LISTs `<index>/snapshots/`: it is a
//! maintenance command; queries never list.
//!
//! Exit codes: 0 done (also when nothing was deleted), 2 could not run.

use anyhow::Context;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The index location (the folder holding `versions/` and `snapshots/`).
    #[arg(long)]
    pub index: String,
    /// Grace period: keep unreferenced snapshots modified more recently
    /// (humantime: `30m`, `12h`, `7days`).
    #[arg(long, default_value = "1day", value_parser = humantime::parse_duration)]
    pub older_than: Duration,
    /// Report what would be deleted without deleting.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    let (store, index) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let grace_ms = u64::try_from(args.older_than.as_millis()).unwrap_or(u64::MAX);
    let report = runtime
        .block_on(parqivf::format::warehouse::gc(
            &store,
            &index,
            grace_ms,
            now_ms,
            args.dry_run,
        ))
        .with_context(|| format!("cannot collect garbage in {}", args.index))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let verb = if args.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        for f in &report.deleted {
            println!(
                "{verb} {} ({} objects, {} bytes)",
                f.snapshot, f.objects, f.bytes
            );
        }
        for f in &report.kept_recent {
            println!("kept {} (inside the grace period)", f.snapshot);
        }
        println!(
            "{}: {} versions, {} unreferenced snapshots {verb}, {} kept",
            args.index,
            report.versions,
            report.deleted.len(),
            report.kept_recent.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
