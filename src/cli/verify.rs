//! `parqivf verify <location>`. SKELETON: owned by the format helper (issue 2).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Location of the postings table (folder holding manifest.json).
    pub location: String,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("verify is not implemented yet")
}
