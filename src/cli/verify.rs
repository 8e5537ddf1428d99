//! `parqivf verify <location>`: checks every MUST of the `ivf_postings`
//! layout for a published table and prints each violation with its path and
//! numbers (or the whole report as JSON with `--json`).
//!
//! Exit codes: 0 the table is valid, 1 violations were found, 2 the check
//! could not run (no such folder, IO failure).

use anyhow::Context;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::postings::{VerifyOptions, verify};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Local folder of the postings table (the folder holding manifest.json).
    pub location: String,
    /// Print the report as JSON instead of one line per violation.
    #[arg(long)]
    pub json: bool,
    /// Also LIST the table prefix and report objects no manifest entry names.
    #[arg(long)]
    pub orphans: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let folder = std::fs::canonicalize(&args.location)
        .with_context(|| format!("cannot open table folder {}", args.location))?;
    anyhow::ensure!(folder.is_dir(), "{} is not a folder", folder.display());
    let store: Arc<dyn ObjectStore> = Arc::new(
        LocalFileSystem::new_with_prefix(&folder)
            .with_context(|| format!("cannot open {}", folder.display()))?,
    );
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let options = VerifyOptions {
        orphans: args.orphans,
    };
    let report = runtime
        .block_on(verify(store, &Path::default(), options))
        .with_context(|| format!("cannot verify {}", folder.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for violation in &report.violations {
            println!("{violation}");
        }
        println!(
            "{}: {} files checked, {} violations",
            folder.display(),
            report.files_checked,
            report.violations.len()
        );
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
