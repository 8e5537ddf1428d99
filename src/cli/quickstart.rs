//! `parqivf quickstart [--dir D]`: the main job on an embedded default.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use parqivf::index::ProbeDepth;
use parqivf::quickstart::{QuickstartConfig, run as run_quickstart};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder for the generated table and the index.
    #[arg(long, default_value = "quickstart-out")]
    pub dir: PathBuf,
    /// Rows to generate.
    #[arg(long, default_value_t = 100_000)]
    pub rows: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cfg = QuickstartConfig {
        dir: args.dir,
        rows: args.rows,
        ..QuickstartConfig::default()
    };
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let r = rt.block_on(run_quickstart(&cfg))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "source table : {} ({} rows x {} dims, Parquet, list<float>)",
            r.source, r.rows, r.dim
        );
        println!(
            "index        : {} (version {}, nlist {})",
            r.index, r.version, r.nlist
        );
        println!("build        : {:.2} s", r.build_seconds);
        let probe = match r.probe {
            ProbeDepth::Recall(target) => format!("target recall {target}"),
            ProbeDepth::Lists(nprobe) => format!("nprobe {nprobe}"),
        };
        println!(
            "search       : {} queries, k={}, {probe} ({:.1} lists on average): {:.0} QPS",
            r.queries, r.k, r.mean_lists_probed, r.qps
        );
        println!(
            "recall@{}    : {:.4} (against brute force)",
            r.k, r.recall_at_k
        );
        println!(
            "next         : parqivf search --index {} --queries <file.npy> --k 10",
            r.index
        );
    }
    Ok(ExitCode::SUCCESS)
}
