//! `parqivf quickstart`. SKELETON: owned by the coordinator.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("quickstart is not implemented yet")
}
