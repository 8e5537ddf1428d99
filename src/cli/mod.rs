//! Subcommands. Each lives in its own file with its clap `Args` and a `run`
//! returning the process exit code. Exit codes: 0 ok, 1 findings (e.g. verify
//! violations), 2 could not run (bad input, IO failure).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod verify;

#[derive(Debug, Parser)]
#[command(name = "parqivf", version, about = "IVF vector index for Parquet and DuckLake tables")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check every MUST of the ivf_postings layout for a published table.
    Verify(verify::Args),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Verify(a) => verify::run(a),
    }
}
