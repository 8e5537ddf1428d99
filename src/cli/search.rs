//! `parqivf search`. SKELETON: owned by the probe helper (issue 4).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("search is not implemented yet")
}
