//! One blocking task for a whole round of reads from a local folder.
//!
//! `object_store`'s `LocalFileSystem` runs each `get_ranges` call as its own
//! blocking task: a query whose candidates lie in 16 postings files wakes 16
//! threads, and on a small machine those hand-offs cost more than the
//! `pread`s. When the store is a bare `LocalFileSystem` (no wrapper that
//! counts, delays or injects faults), [`LocalFolder::read`] instead reads
//! every range of every file of a round in one blocking task, with one
//! `open` and one positioned read per range: the same bytes, fewer threads.

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// How a `LocalFileSystem` store's `Display` starts: `LocalFileSystem(file:///root/)`.
const LOCAL: &str = "LocalFileSystem(";

/// The root folder of the first `LocalFileSystem(file:///root/)` in a
/// store's `Display` (wrappers nest the inner store's); `None` when there
/// is none.
pub(crate) fn local_root(shown: &str) -> Option<PathBuf> {
    let at = shown.find(LOCAL)? + LOCAL.len();
    let end = at + shown[at..].find(')')?;
    url::Url::parse(&shown[at..end]).ok()?.to_file_path().ok()
}

/// The file of object `location` in a local store rooted at `root`: its
/// percent-decoded parts below the root.
pub(crate) fn file_below(mut root: PathBuf, location: &Path) -> Option<PathBuf> {
    for part in location.parts() {
        let name = percent_encoding::percent_decode_str(part.as_ref())
            .decode_utf8()
            .ok()?;
        root.push(name.as_ref());
    }
    Some(root)
}

/// The root folder of a bare `LocalFileSystem` store.
#[derive(Debug, Clone)]
pub struct LocalFolder {
    root: PathBuf,
}

impl LocalFolder {
    /// The folder of `store` when it is a bare `LocalFileSystem` (its
    /// `Display` is `LocalFileSystem(file:///root/)`); `None` for any other
    /// store or a wrapped one, whose reads must go through the wrapper.
    pub fn of(store: &dyn ObjectStore) -> Option<LocalFolder> {
        let shown = store.to_string();
        if !shown.starts_with(LOCAL) {
            return None;
        }
        Some(LocalFolder {
            root: local_root(&shown)?,
        })
    }

    /// The file of object `path` below the root.
    fn file(&self, path: &Path) -> Option<PathBuf> {
        file_below(self.root.clone(), path)
    }

    /// The bytes of each request's ranges (`(object, ranges)`), in order,
    /// read in one blocking task, or in place on a rayon worker: a caller
    /// there drives its own futures and computes in place
    /// ([`crate::probe::offload::drive_on_rayon`], the `search` command),
    /// never a tokio worker, and would otherwise wait out two thread
    /// wake-ups for reads the page cache answers in microseconds.
    ///
    /// # Errors
    /// The first failed read: the object, and the error as `object_store`
    /// reports it (`NotFound` for a missing file).
    pub async fn read(
        &self,
        requests: Vec<(Path, Vec<Range<u64>>)>,
    ) -> Result<Vec<Vec<Bytes>>, (Path, object_store::Error)> {
        let files = requests
            .into_iter()
            .map(|(path, ranges)| (self.file(&path), path, ranges))
            .collect::<Vec<_>>();
        let first = files
            .first()
            .map(|(_, path, _)| path.clone())
            .unwrap_or_default();
        if rayon::current_thread_index().is_some() {
            return files.into_iter().map(read_file).collect();
        }
        tokio::task::spawn_blocking(move || files.into_iter().map(read_file).collect())
            .await
            .map_err(|e| {
                let source = object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: Box::new(e),
                };
                (first, source)
            })?
    }
}

fn read_file(
    (file, path, ranges): (Option<PathBuf>, Path, Vec<Range<u64>>),
) -> Result<Vec<Bytes>, (Path, object_store::Error)> {
    let failed = |e: std::io::Error| {
        let source = match e.kind() {
            std::io::ErrorKind::NotFound => object_store::Error::NotFound {
                path: path.to_string(),
                source: Box::new(e),
            },
            _ => object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            },
        };
        (path.clone(), source)
    };
    let file = file.ok_or_else(|| {
        failed(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a valid file name",
        ))
    })?;
    let handle = std::fs::File::open(&file).map_err(failed)?;
    ranges
        .iter()
        .map(|r| {
            let mut buf = vec![0u8; (r.end.saturating_sub(r.start)) as usize];
            handle.read_exact_at(&mut buf, r.start).map_err(failed)?;
            Ok(Bytes::from(buf))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use std::sync::Arc;

    #[tokio::test]
    async fn reads_the_ranges_a_local_store_would_and_only_for_a_bare_one() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let path = Path::from("a b/part-0.parquet");
        store.put(&path, data.clone().into()).await.unwrap();
        let folder = LocalFolder::of(store.as_ref()).unwrap();
        let ranges = vec![0..10, 4_000..4_100, 9_990..10_000];
        let got = folder
            .read(vec![(path.clone(), ranges.clone())])
            .await
            .unwrap();
        let want = store.get_ranges(&path, &ranges).await.unwrap();
        assert_eq!(got, vec![want]);
        let missing = folder
            .read(vec![(
                Path::from("nope.parquet"),
                std::iter::once(0..1).collect(),
            )])
            .await
            .unwrap_err();
        assert_eq!(missing.0, Path::from("nope.parquet"));
        assert!(
            matches!(missing.1, object_store::Error::NotFound { .. }),
            "{}",
            missing.1
        );
        let short = folder
            .read(vec![(
                path.clone(),
                std::iter::once(9_999..10_001).collect(),
            )])
            .await
            .unwrap_err();
        assert_eq!(short.0, path);
        // A wrapped store keeps its reads.
        let wrapped = crate::store::latency::LatencyStore::new(store, "ttfb=0ms".parse().unwrap());
        assert!(LocalFolder::of(&wrapped).is_none());
        assert!(LocalFolder::of(&object_store::memory::InMemory::new()).is_none());
    }
}
