//! A Parquet `AsyncFileReader` over `Arc<dyn ObjectStore>`, shared by every
//! Parquet reader of the crate (parquet 60 deprecates its own
//! `ParquetObjectReader`): sources, DuckLake and `verify`. The one exception
//! is the query path's footer read (`probe::footer`), which sizes its tail
//! from the manifest and what it learned, and checks the footer pin on the
//! same bytes. With the object's size known
//! from the catalog, the footer is one ranged GET with a 64 KiB prefetch
//! hint and no HEAD; without it, one suffix GET.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{AsyncFileReader, MetadataSuffixFetch};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Tail bytes fetched with the first footer read of a Parquet object (one
/// GET for most footers): the one prefetch constant of the crate.
pub const FOOTER_PREFETCH: u64 = 64 * 1024;

/// Reads one object of a store as a Parquet file.
#[derive(Debug, Clone)]
pub struct StoreReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: Option<u64>,
}

impl StoreReader {
    /// `path` in `store`; `size` (bytes) when the catalog knows it.
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, size: Option<u64>) -> Self {
        Self { store, path, size }
    }

    async fn get(&self, range: GetRange) -> Result<Bytes> {
        let options = GetOptions {
            range: Some(range),
            ..Default::default()
        };
        let result = self
            .store
            .get_opts(&self.path, options)
            .await
            .map_err(external)?;
        result.bytes().await.map_err(external)
    }
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move { self.get(GetRange::Bounded(range)).await }.boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(external)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        async move {
            let reader = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .with_prefetch_hint(Some(FOOTER_PREFETCH as usize));
            let metadata = match self.size {
                Some(size) => reader.load_and_finish(self, size).await?,
                None => reader.load_via_suffix_and_finish(self).await?,
            };
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

impl MetadataSuffixFetch for &mut StoreReader {
    fn fetch_suffix(&mut self, suffix: usize) -> BoxFuture<'_, Result<Bytes>> {
        async move { self.get(GetRange::Suffix(suffix as u64)).await }.boxed()
    }
}

/// The bytes of exactly `ranges` of the object at `path`, all requested at
/// once (one round), reading no byte between them.
///
/// `ObjectStore::get_ranges` of the HTTP stores (S3, GCS, Azure) merges
/// ranges less than 1 MiB apart into one request: for a query's code chunks
/// and vector pages that would read the vector chunks lying between them,
/// the very bytes the codes exist to avoid. So for those stores each range
/// is its own ranged GET, issued concurrently. The local file system and
/// the in-memory store merge only touching ranges and read a file once per
/// call, so they get one `get_ranges`, as does a [`super::hedge::HedgedStore`]
/// (each range its own hedged request within the in-flight bound). Which kind a store is comes from its
/// `Display` name, the only thing `ObjectStore` tells about itself.
///
/// # Errors
/// The store's error for the first failed range.
pub async fn get_exact_ranges(
    store: &dyn ObjectStore,
    path: &Path,
    ranges: &[Range<u64>],
) -> Result<Vec<Bytes>, object_store::Error> {
    let name = store.to_string();
    if name.starts_with("HedgedStore")
        || name.contains("LocalFileSystem")
        || name.contains("InMemory")
    {
        return store.get_ranges(path, ranges).await;
    }
    futures::future::try_join_all(ranges.iter().map(|r| store.get_range(path, r.clone()))).await
}
