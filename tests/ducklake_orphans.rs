//! Orphan Parquet files (on disk, absent from the catalog: the fixture has 7,
//! listed in `ducklake_files_scheduled_for_deletion`) are never opened. Every
//! request goes through a recording `ObjectStore` wrapper; the scan of every
//! table at every snapshot touches only locations the catalog lists, never
//! lists a prefix, and never touches an orphan.

mod ducklake_common;

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ducklake_common::*;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use parqivf::catalog::ducklake::{DuckLakeOptions, DuckLakeTable};
use parqivf::catalog::paths;

/// Records every object read, and every list, then delegates.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ObjectStore>,
    reads: Mutex<Vec<String>>,
    lists: Mutex<usize>,
}

impl fmt::Display for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recording({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Recording {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.reads.lock().unwrap().push(location.to_string());
        self.inner.get_opts(location, options).await
    }
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.reads.lock().unwrap().push(location.to_string());
        self.inner.get_ranges(location, ranges).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        *self.lists.lock().unwrap() += 1;
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        *self.lists.lock().unwrap() += 1;
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test]
async fn orphan_files_are_never_opened() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = copy_fixture(dir.path());
    rewrite_outside(&catalog, &dir.path().join("outside/o.parquet"));
    let root = dir.path().canonicalize().unwrap().join("data");

    // The orphans, from the catalog's own list; they are on disk.
    let conn = rusqlite::Connection::open(&catalog).unwrap();
    let mut stmt = conn
        .prepare("SELECT path FROM ducklake_files_scheduled_for_deletion")
        .unwrap();
    let orphans: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|p| {
            object_store::path::Path::from_filesystem_path(root.join(p.unwrap()))
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(orphans.len(), 7);
    for o in &orphans {
        assert!(std::path::Path::new("/").join(o).exists(), "{o} is on disk");
    }

    let store = Arc::new(Recording {
        inner: Arc::new(object_store::local::LocalFileSystem::new()),
        reads: Mutex::new(Vec::new()),
        lists: Mutex::new(0),
    });
    let expected = expected();
    let latest = expected["latest_snapshot"].as_u64().unwrap();
    let mut listed = std::collections::HashSet::new();
    for table in TABLES {
        for snapshot in 0..=latest {
            let options = DuckLakeOptions {
                snapshot: Some(snapshot),
                store: Some(store.clone()),
                ..Default::default()
            };
            let Ok(t) = DuckLakeTable::open(&catalog, table, &options) else {
                continue;
            };
            for location in t.locations() {
                listed.insert(paths::object_path(location).unwrap().to_string());
            }
            t.scan(&["rowid", "id", "embedding"]).await.unwrap();
        }
    }
    let reads = store.reads.lock().unwrap().clone();
    assert!(!reads.is_empty());
    assert_eq!(
        *store.lists.lock().unwrap(),
        0,
        "the scan never lists a prefix"
    );
    for read in &reads {
        assert!(!orphans.contains(read), "orphan {read} was opened");
        assert!(
            listed.contains(read),
            "{read} is not a file the catalog lists"
        );
    }
    // And every file the catalog lists was read at some snapshot.
    let read: std::collections::HashSet<&String> = reads.iter().collect();
    for l in &listed {
        assert!(read.contains(l), "{l} listed but never read");
    }
}
