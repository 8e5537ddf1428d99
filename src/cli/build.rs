//! `parqivf build`. SKELETON: owned by the build job (issue 5).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("build is not implemented yet")
}
