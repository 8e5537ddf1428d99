//! `parqivf verify <location>`: checks everything a reader relies on. For an
//! index: the commit log and the current snapshot opened as the reader opens
//! it (definition, manifest, footers.json, centroids, every commit pin, every
//! footer), then every MUST of the `ivf_postings` layout, the footer pins and
//! every page CRC32. `--orphans` also LISTs for objects no manifest entry
//! names and snapshots no version names. Prints each violation with its path
//! and numbers (or the whole report as JSON with `--json`).
//!
//! Advisories (a stale or edited copy or bundle of the latest commit: time
//! lost, never an answer) are printed but do not fail the check.
//!
//! Exit codes: 0 the table is valid, 1 violations were found, 2 the check
//! could not run (no such folder, IO failure).

use anyhow::Context;
use parqivf::verify::{VerifyOptions, verify_location};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The postings table (the folder holding manifest.json), a snapshot
    /// (holding index.json), or an index (its current snapshot); a local
    /// folder, file://, memory:// or s3:// URI.
    pub location: String,
    /// Print the report as JSON instead of one line per violation.
    #[arg(long)]
    pub json: bool,
    /// Also LIST the table prefix and report objects no manifest entry names,
    /// and, for an index, snapshot folders no version names.
    #[arg(long)]
    pub orphans: bool,
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    // A local folder becomes the store's root, so violations name objects
    // relative to it (as the manifest does).
    let (store, location) = if args.location.contains("://") {
        parqivf::store::location::open_with(&args.location, store)?
    } else {
        let folder = std::fs::canonicalize(&args.location)
            .with_context(|| format!("cannot open table folder {}", args.location))?;
        anyhow::ensure!(folder.is_dir(), "{} is not a folder", folder.display());
        let store: std::sync::Arc<dyn object_store::ObjectStore> = std::sync::Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(&folder)
                .with_context(|| format!("cannot open {}", folder.display()))?,
        );
        (store, object_store::path::Path::default())
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let options = VerifyOptions {
        orphans: args.orphans,
    };
    let folder = &args.location;
    let report = runtime
        .block_on(verify_location(store, &location, options))
        .with_context(|| format!("cannot verify {folder}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for violation in &report.violations {
            println!("{violation}");
        }
        for advisory in &report.advisories {
            println!("advisory: {advisory}");
        }
        println!(
            "{}: {} files checked, {} violations, {} advisories",
            folder,
            report.files_checked,
            report.violations.len(),
            report.advisories.len()
        );
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
