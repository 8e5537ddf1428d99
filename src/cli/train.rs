//! `parqivf train`. SKELETON: owned by the k-means helper (issue 3).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("train is not implemented yet")
}
