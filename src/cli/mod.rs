//! Subcommands. Each lives in its own file with its clap `Args` and a `run`
//! returning the process exit code. Exit codes: 0 ok, 1 findings (e.g. verify
//! violations), 2 could not run (bad input, IO failure).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub mod build;
pub mod quickstart;
pub mod search;
pub mod serve;
pub mod train;
pub mod verify;

#[derive(Debug, Parser)]
#[command(
    name = "parqivf",
    version,
    about = "IVF vector index for Parquet and DuckLake tables"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a clustered dataset, build an index, query it, print recall and timings.
    Quickstart(quickstart::Args),
    /// Build and publish an index snapshot from a source table.
    Build(build::Args),
    /// Query an index with vectors from a file.
    Search(search::Args),
    /// Serve one or more indexes over HTTP/JSON.
    Serve(serve::Args),
    /// Train k-means centroids on a vector file (benchmarking aid).
    Train(train::Args),
    /// Check every MUST of the ivf_postings layout for a published table.
    Verify(verify::Args),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Quickstart(a) => quickstart::run(a),
        Command::Build(a) => build::run(a),
        Command::Search(a) => search::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Train(a) => train::run(a),
        Command::Verify(a) => verify::run(a),
    }
}
