//! Object-store helpers: a store that fails its n-th write, reading a whole
//! snapshot back, and writing a JSON document in place.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// A store whose `n`-th write (0-based, puts and multipart uploads together)
/// fails, as a crash at that point of a build would.
#[derive(Debug)]
pub struct FailNthPut {
    inner: Arc<dyn ObjectStore>,
    fail_at: usize,
    writes: AtomicUsize,
}

impl FailNthPut {
    pub fn new(inner: Arc<dyn ObjectStore>, fail_at: usize) -> Self {
        Self {
            inner,
            fail_at,
            writes: AtomicUsize::new(0),
        }
    }

    fn check(&self, location: &Path) -> object_store::Result<()> {
        if self.writes.fetch_add(1, Ordering::SeqCst) == self.fail_at {
            return Err(object_store::Error::Generic {
                store: "FailNthPut",
                source: format!("injected failure writing {location}").into(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for FailNthPut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailNthPut({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FailNthPut {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Every object below `snapshot`, as (relative path, bytes), sorted.
pub async fn snapshot_files(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Path,
) -> Vec<(String, bytes::Bytes)> {
    use futures::TryStreamExt;
    let metas: Vec<ObjectMeta> = store.list(Some(snapshot)).try_collect().await.unwrap();
    let mut out = Vec::new();
    for m in metas {
        let rel = m.location.as_ref()[snapshot.as_ref().len()..].to_string();
        let b = store.get(&m.location).await.unwrap().bytes().await.unwrap();
        out.push((rel, b));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Writes `v` as pretty JSON at `path` (to replace a document in place).
pub async fn put_json<T: serde::Serialize>(store: &dyn ObjectStore, path: &str, v: &T) {
    let bytes = serde_json::to_vec_pretty(v).unwrap();
    store
        .put(&Path::from(path), PutPayload::from(bytes))
        .await
        .unwrap();
}
