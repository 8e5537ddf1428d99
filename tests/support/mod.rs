//! Shared test fixtures: seeded data, a fault-injecting store, snapshot
//! readers, and the Python interpreter with the independent readers.
#![allow(dead_code)]

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
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n × dim` values uniform in [-1, 1), deterministic by `seed`.
pub fn random_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect()
}

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

/// The Python that has `module`, from `PARQIVF_PYTHON` (set by
/// `scripts/test.sh`). When it is unset the test is skipped with a note,
/// unless `PARQIVF_REQUIRE_INTEROP=1` (CI), where that is a failure.
pub fn python_with(module: &str) -> Option<String> {
    let required = std::env::var("PARQIVF_REQUIRE_INTEROP").is_ok_and(|v| v == "1");
    let python = std::env::var("PARQIVF_PYTHON").ok();
    let ok = python.as_ref().is_some_and(|p| {
        std::process::Command::new(p)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if ok {
        return python;
    }
    assert!(
        !required,
        "PARQIVF_REQUIRE_INTEROP=1 but PARQIVF_PYTHON={python:?} cannot import {module}"
    );
    eprintln!("skipping: no Python with {module} (run scripts/test.sh)");
    None
}

/// Run `script` with `args`; panic with its output if it fails.
pub fn run_python(python: &str, script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
