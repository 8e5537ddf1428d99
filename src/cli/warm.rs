//! `parqivf warm`: fill the caches of an index ahead of traffic. Reads every
//! footer and, with `--cache-dir`, copies every postings object into the
//! disk tier (blocks already there are not fetched again), then prints what
//! it read from each tier as JSON.

use super::cache_args::CacheArgs;
use parqivf::index::{Index, Preload};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Index location (its current snapshot) or a snapshot folder.
    #[arg(long)]
    pub index: String,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub fn run(args: Args, store: &parqivf::store::options::StoreOptions) -> anyhow::Result<ExitCode> {
    let (store, prefix) = parqivf::store::location::open_with(&args.index, store)?;
    // The RAM tier ends with this process: none unless asked.
    let options = args.cache.index_options(0)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let index = Index::open_with(store, &prefix, options, Preload::None).await?;
        let stats = index.warm().await?;
        let disk = index.disk_cache().map(|d| d.state());
        let report = serde_json::json!({
            "files": stats.candidate_files,
            "store-requests": stats.requests,
            "store-bytes": stats.bytes,
            "disk-hits": stats.disk_hits,
            "disk-bytes": stats.disk_bytes,
            "disk-cache": disk,
        });
        println!("{report}");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
