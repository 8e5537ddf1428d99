//! IO accounting: an [`ObjectStore`] wrapper that counts GET, HEAD, LIST and
//! PUT requests and their bytes, and the number of dependent *rounds*, and
//! remembers which objects were read ([`CountingStore::read_paths`]).
//!
//! A round is observed, not declared: a request that starts while no other
//! request of this store is in flight opens a new round; requests started
//! while one is in flight join the current round. Requests issued together
//! (`join_all`, one `get_ranges`) therefore count as one round, and a request
//! that has to wait for the answer of another counts as a second one. On a
//! store that answers instantly (in-memory) every request looks sequential, so
//! round counts are only meaningful with some latency: [`CountingStore::with_latency`]
//! adds a fixed delay per request (tests and the latency benchmark use it).
//!
//! `get_ranges` is one GET per range handed over (an upper bound: an S3
//! backend may merge ranges closer than 1 MiB) and pays the latency once,
//! because backends fetch the ranges of one call concurrently.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use serde::Serialize;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A point-in-time copy of the counters. Subtract two to get the IO of an
/// operation (when nothing else used the store meanwhile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IoCounts {
    pub get_requests: u64,
    pub get_bytes: u64,
    pub head_requests: u64,
    pub list_requests: u64,
    pub put_requests: u64,
    pub put_bytes: u64,
    pub rounds: u64,
}

impl std::ops::Sub for IoCounts {
    type Output = IoCounts;
    fn sub(self, o: IoCounts) -> IoCounts {
        IoCounts {
            get_requests: self.get_requests - o.get_requests,
            get_bytes: self.get_bytes - o.get_bytes,
            head_requests: self.head_requests - o.head_requests,
            list_requests: self.list_requests - o.list_requests,
            put_requests: self.put_requests - o.put_requests,
            put_bytes: self.put_bytes - o.put_bytes,
            rounds: self.rounds - o.rounds,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    get_requests: AtomicU64,
    get_bytes: AtomicU64,
    head_requests: AtomicU64,
    list_requests: AtomicU64,
    put_requests: AtomicU64,
    put_bytes: AtomicU64,
    rounds: AtomicU64,
    in_flight: AtomicU64,
    /// Objects read (GET or HEAD), in first-read order, each once.
    read_paths: std::sync::Mutex<Vec<String>>,
}

/// Decrements the in-flight count when a request ends (also on error/cancel).
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The counting wrapper. Cloning shares the counters.
#[derive(Debug, Clone)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    latency: Option<Duration>,
    counters: Arc<Counters>,
}

impl CountingStore {
    /// Wrap `inner`; no added latency.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            latency: None,
            counters: Arc::default(),
        }
    }

    /// Add a fixed delay to every request (simulates object-store latency).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    /// The counters now.
    pub fn counts(&self) -> IoCounts {
        let c = &self.counters;
        IoCounts {
            get_requests: c.get_requests.load(Ordering::SeqCst),
            get_bytes: c.get_bytes.load(Ordering::SeqCst),
            head_requests: c.head_requests.load(Ordering::SeqCst),
            list_requests: c.list_requests.load(Ordering::SeqCst),
            put_requests: c.put_requests.load(Ordering::SeqCst),
            put_bytes: c.put_bytes.load(Ordering::SeqCst),
            rounds: c.rounds.load(Ordering::SeqCst),
        }
    }

    /// Every object read so far (GET, ranged GET or HEAD), each once, in
    /// the order first read.
    pub fn read_paths(&self) -> Vec<String> {
        self.counters
            .read_paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn record_read(&self, location: &Path) {
        let mut paths = self
            .counters
            .read_paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let location = location.to_string();
        if !paths.contains(&location) {
            paths.push(location);
        }
    }

    /// Start one request: join or open a round, then wait the latency.
    async fn begin(&self) -> InFlight<'_> {
        if self.counters.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            self.counters.rounds.fetch_add(1, Ordering::SeqCst);
        }
        let guard = InFlight(&self.counters.in_flight);
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        guard
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let _g = self.begin().await;
        self.counters.put_requests.fetch_add(1, Ordering::SeqCst);
        self.counters
            .put_bytes
            .fetch_add(payload.content_length() as u64, Ordering::SeqCst);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let _g = self.begin().await;
        self.counters.put_requests.fetch_add(1, Ordering::SeqCst);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let _g = self.begin().await;
        self.record_read(location);
        if options.head {
            self.counters.head_requests.fetch_add(1, Ordering::SeqCst);
            return self.inner.get_opts(location, options).await;
        }
        self.counters.get_requests.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.get_opts(location, options).await?;
        // Buffer the body so its bytes are counted while the request is in flight.
        let (meta, range, attributes) = (
            result.meta.clone(),
            result.range.clone(),
            result.attributes.clone(),
        );
        let bytes = result.bytes().await?;
        self.counters
            .get_bytes
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
        let stream = futures::stream::once(async move { Ok(bytes) });
        Ok(GetResult {
            payload: object_store::GetResultPayload::Stream(Box::pin(stream)),
            meta,
            range,
            attributes,
            extensions: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let _g = self.begin().await;
        self.record_read(location);
        self.counters
            .get_requests
            .fetch_add(ranges.len() as u64, Ordering::SeqCst);
        let out = self.inner.get_ranges(location, ranges).await?;
        let bytes: usize = out.iter().map(Bytes::len).sum();
        self.counters
            .get_bytes
            .fetch_add(bytes as u64, Ordering::SeqCst);
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counters.list_requests.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counters.list_requests.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let _g = self.begin().await;
        self.counters.list_requests.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let _g = self.begin().await;
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn counts_requests_bytes_and_rounds() {
        let store =
            CountingStore::new(Arc::new(InMemory::new())).with_latency(Duration::from_millis(20));
        let a = Path::from("a");
        store
            .put(&a, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        let before = store.counts();
        // Two ranged reads issued together: one round.
        let (x, y) = futures::join!(store.get_range(&a, 0..4), store.get_range(&a, 4..10));
        assert_eq!((x.unwrap().len(), y.unwrap().len()), (4, 6));
        let together = store.counts() - before;
        assert_eq!(
            (together.get_requests, together.get_bytes, together.rounds),
            (2, 10, 1)
        );
        // Then a dependent read: a second round. A HEAD and a LIST are counted apart.
        store.get_ranges(&a, &[0..2, 5..6]).await.unwrap();
        store.head(&a).await.unwrap();
        let _: Vec<_> = store.list(None).try_collect().await.unwrap();
        let all = store.counts() - before;
        assert_eq!(all.get_requests, 4);
        assert_eq!(all.get_bytes, 13);
        assert_eq!(all.head_requests, 1);
        assert_eq!(all.list_requests, 1);
        assert_eq!(all.rounds, 3);
        assert_eq!(store.counts().put_requests, 1);
        assert_eq!(store.counts().put_bytes, 10);
    }
}
