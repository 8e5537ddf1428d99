//! The cache tiers' flags, shared by `search`, `serve` and `warm`: the
//! RAM tier of decoded postings (`--postings-cache-size SIZE`) and the
//! disk tier (`--cache-dir PATH`, `--cache-size SIZE`). The Python
//! `Index.open` takes `postings_cache_bytes=`, `cache_dir=` and
//! `cache_size=`.

use super::source_args::parse_bytes;
use anyhow::Context;
use parqivf::index::IndexOptions;
use parqivf::store::disk_cache::DiskCache;
use std::path::PathBuf;
use std::sync::Arc;

/// How large the RAM tier may grow, and where the disk tier lives and how
/// large it may grow.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Caches")]
pub struct CacheArgs {
    /// Keep the postings lists a query decoded (codes, rowids and page
    /// locations) in memory for later queries, up to this many bytes, least
    /// recently used first out (e.g. 256MiB; 0 keeps none). Between
    /// storage-resident and `--preload codes`: a warm list costs no
    /// request. Default: 256MiB an index for `serve`, 0 for `search` and
    /// `warm`.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, env = "PARQIVF_POSTINGS_CACHE_SIZE")]
    pub postings_cache_size: Option<usize>,
    /// Keep postings bytes read from the store in this local folder, across
    /// queries, restarts and processes (several may share one folder).
    #[arg(long, value_name = "PATH", env = "PARQIVF_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of the cache folder on disk (e.g. 512MiB, 20GiB).
    #[arg(long, value_name = "SIZE", default_value = "10GiB", value_parser = parse_bytes, env = "PARQIVF_CACHE_SIZE")]
    pub cache_size: usize,
}

impl CacheArgs {
    /// The reader's options with both tiers: the RAM tier of
    /// `--postings-cache-size`, else the command's `postings_default`
    /// bytes, and the disk tier opened (see [`CacheArgs::open`]).
    pub fn index_options(&self, postings_default: usize) -> anyhow::Result<IndexOptions> {
        Ok(IndexOptions {
            postings_cache_bytes: self.postings_cache_size.unwrap_or(postings_default),
            disk_cache: self.open()?,
            ..IndexOptions::default()
        })
    }

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
