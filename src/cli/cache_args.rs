//! The disk tier's flags, shared by `search`, `serve` and `warm`:
//! `--cache-dir PATH` and `--cache-size SIZE` (the Python `Index.open`
//! takes `cache_dir=` and `cache_size=`).

use super::source_args::parse_bytes;
use anyhow::Context;
use parqivf::store::disk_cache::DiskCache;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the disk tier lives and how large it may grow.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Disk cache")]
pub struct CacheArgs {
    /// Keep postings bytes read from the store in this local folder, across
    /// queries, restarts and processes (several may share one folder).
    #[arg(long, value_name = "PATH", env = "PARQIVF_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of the cache folder on disk (e.g. 512MiB, 20GiB).
    #[arg(long, value_name = "SIZE", default_value = "10GiB", value_parser = parse_bytes, env = "PARQIVF_CACHE_SIZE")]
    pub cache_size: usize,
}

impl CacheArgs {
    /// The cache folder, opened (created if absent), or none without
    /// `--cache-dir`.
    pub fn open(&self) -> anyhow::Result<Option<Arc<DiskCache>>> {
        let Some(dir) = &self.cache_dir else {
            return Ok(None);
        };
        let cache = DiskCache::open(dir, self.cache_size as u64)
            .with_context(|| format!("opening the cache folder {}", dir.display()))?;
        Ok(Some(Arc::new(cache)))
    }
}
