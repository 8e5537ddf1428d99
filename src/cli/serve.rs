//! `parqivf serve`. SKELETON: owned by the server helper (issue 7).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("serve is not implemented yet")
}
