//! A whole round of reads from a local folder, served from memory maps.
//!
//! `object_store`'s `LocalFileSystem` runs each `get_ranges` call as its own
//! blocking task that opens the file and copies every range out of the page
//! cache: a query whose candidates lie in 16 postings files wakes 16
//! threads, and a storage-resident query spent a third of its time in the
//! kernel's copy. When the store is a bare `LocalFileSystem` (no wrapper
//! that counts, delays or injects faults), [`LocalFolder::read`] instead
//! maps each file once and hands out its ranges as `Bytes` that borrow the
//! mapping: no copy, no system call per range, the page cache shared with
//! every other reader of the file.
//!
//! A mapping is sound because an index never changes an object in place:
//! every object is written once under a fresh name (create-if-absent, a new
//! snapshot folder per commit) and only ever deleted, which leaves a mapped
//! file readable. A range past the end of a file is `UnexpectedEof`, as a
//! short read would be. Something that truncated an index file in place
//! would fault the reading process (`SIGBUS`) instead of failing its query:
//! the price of reading without a copy, as for any memory-mapped store.

use bytes::Bytes;
use futures::StreamExt;
use memmap2::Mmap;
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, GetResult, GetResultPayload, ObjectMeta, ObjectStore,
};
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

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

/// Files a [`LocalFolder`] keeps mapped; past it, every mapping is dropped
/// (a mapping in use lives on with its `Bytes`) and files are mapped again
/// as they are read: well below a process's default limit of 65,530
/// mappings.
const MAX_MAPPED: usize = 4096;

/// The root folder of a bare `LocalFileSystem` store, and the files it has
/// mapped (shared by its clones).
#[derive(Debug, Clone)]
pub struct LocalFolder {
    root: PathBuf,
    mapped: Arc<Mutex<HashMap<PathBuf, Arc<Mmap>>>>,
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
            mapped: Arc::default(),
        })
    }

    /// The file of object `path` below the root.
    fn file(&self, path: &Path) -> Option<PathBuf> {
        file_below(self.root.clone(), path)
    }

    /// The bytes of each request's ranges (`(object, ranges)`), in order,
    /// borrowed from the files' mappings. Served in place when every file
    /// is already mapped (no system call, nothing that can block: a warm
    /// `serve` query pays no hand-over for its reads) or on a rayon worker
    /// (a caller there drives its own futures and computes in place,
    /// [`crate::probe::offload::drive_on_rayon`], the `search` command);
    /// otherwise in one blocking task, which opens and maps the new files.
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
        let mapped = {
            let maps = self.mapped.lock().unwrap_or_else(PoisonError::into_inner);
            files
                .iter()
                .all(|(file, _, _)| file.as_ref().is_some_and(|f| maps.contains_key(f)))
        };
        if mapped || rayon::current_thread_index().is_some() {
            return files.into_iter().map(|f| self.read_file(f)).collect();
        }
        let folder = self.clone();
        tokio::task::spawn_blocking(move || {
            files.into_iter().map(|f| folder.read_file(f)).collect()
        })
        .await
        .map_err(|e| {
            let source = object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            };
            (first, source)
        })?
    }

    fn read_file(
        &self,
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
        let map = self.map(file).map_err(failed)?;
        let len = map.len();
        // One owner for the whole file; each range a slice of it (a
        // reference count, no allocation a range).
        let whole = Bytes::from_owner(Mapped(map));
        ranges
            .iter()
            .map(|r| {
                let range = usize::try_from(r.start).unwrap_or(usize::MAX)
                    ..usize::try_from(r.end).unwrap_or(usize::MAX);
                if range.start > range.end || range.end > len {
                    return Err(failed(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("range {r:?} of a file of {len} bytes"),
                    )));
                }
                Ok(whole.slice(range))
            })
            .collect()
    }

    /// The mapping of `file`, made by its first read.
    fn map(&self, file: PathBuf) -> std::io::Result<Arc<Mmap>> {
        let mut mapped = self.mapped.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(map) = mapped.get(&file) {
            return Ok(Arc::clone(map));
        }
        let handle = std::fs::File::open(&file)?;
        // SAFETY: index objects are never modified in place (module
        // comment): the mapped bytes do not change under the reader.
        let map = Arc::new(unsafe { Mmap::map(&handle)? });
        if mapped.len() >= MAX_MAPPED {
            mapped.clear();
        }
        mapped.insert(file, Arc::clone(&map));
        Ok(map)
    }
}

/// Local objects read in place behind a store that wraps a bare local
/// folder (the latency emulator, [`super::latency::LatencyStore`]): each
/// object's metadata as the store's own get returned it, and a mapping of
/// its file, used to answer later ranged gets without the store's blocking
/// open and copy. Unlike [`LocalFolder`], an object written again under
/// its name (a commit's hint) is never answered from the old file: an
/// entry serves only while the file has the device, inode, size and
/// modification time it had when the entry was made.
#[derive(Debug)]
pub struct InPlaceObjects {
    root: PathBuf,
    objects: Mutex<HashMap<Path, Arc<InPlace>>>,
}

/// One object of [`InPlaceObjects`].
#[derive(Debug)]
struct InPlace {
    /// The object's file, below the root.
    file: PathBuf,
    identity: Identity,
    meta: ObjectMeta,
    map: Arc<Mmap>,
}

/// What says a file is the one an entry mapped: device, inode, size and
/// modification time (size and time alone off Unix).
type Identity = (u64, u64, u64, Option<std::time::SystemTime>);

fn identity(m: &std::fs::Metadata) -> Identity {
    #[cfg(unix)]
    let (dev, ino) = {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    };
    #[cfg(not(unix))]
    let (dev, ino) = (0, 0);
    (dev, ino, m.len(), m.modified().ok())
}

impl InPlaceObjects {
    /// The objects of `store` when it is a bare `LocalFileSystem`; `None`
    /// for any other store.
    pub fn of(store: &dyn ObjectStore) -> Option<InPlaceObjects> {
        LocalFolder::of(store).map(|folder| InPlaceObjects {
            root: folder.root,
            objects: Mutex::default(),
        })
    }

    /// The answer to a plain ranged get of `location` (a bounded, non-empty
    /// range; no condition, version or head) from the entry an earlier get
    /// left, when its file is unchanged and holds the range; `None`
    /// otherwise, and the store answers (see [`InPlaceObjects::remember`]).
    pub fn get(&self, location: &Path, options: &GetOptions) -> Option<GetResult> {
        let plain = options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none()
            && options.version.is_none()
            && !options.head;
        let Some(GetRange::Bounded(range)) = options.range.clone().filter(|_| plain) else {
            return None;
        };
        let entry = {
            let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(objects.get(location)?)
        };
        let now = std::fs::metadata(&entry.file).ok()?;
        let within = range.start < range.end && range.end <= entry.map.len() as u64;
        if identity(&now) != entry.identity || !within {
            return None;
        }
        let bytes = Bytes::from_owner(Mapped(Arc::clone(&entry.map)))
            .slice(range.start as usize..range.end as usize);
        Some(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed()),
            meta: entry.meta.clone(),
            range,
            attributes: Attributes::default(),
            extensions: Default::default(),
        })
    }

    /// Keeps `meta`, what the store's get of an object returned, with a
    /// mapping of its file, when the file still has that size and
    /// modification time (else it changed since, and nothing is kept).
    pub fn remember(&self, meta: &ObjectMeta) {
        let Some(file) = file_below(self.root.clone(), &meta.location) else {
            return;
        };
        let Ok(handle) = std::fs::File::open(&file) else {
            return;
        };
        let Ok(now) = handle.metadata() else {
            return;
        };
        let modified = now
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_micros()).ok());
        if now.len() != meta.size || modified != Some(meta.last_modified.timestamp_micros()) {
            return;
        }
        // SAFETY: an entry is used only while the file keeps the identity
        // it had here; index objects are written under a name by a rename
        // or once, never modified in place (the module comment).
        let Ok(map) = (unsafe { Mmap::map(&handle) }) else {
            return;
        };
        let entry = InPlace {
            file,
            identity: identity(&now),
            meta: meta.clone(),
            map: Arc::new(map),
        };
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        if objects.len() >= MAX_MAPPED {
            objects.clear();
        }
        objects.insert(meta.location.clone(), Arc::new(entry));
    }
}

/// A mapped file, the owner of the `Bytes` that borrow its ranges.
struct Mapped(Arc<Mmap>);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use std::sync::Arc;

    /// One range of one object, read through `folder`.
    async fn read_one(
        folder: &LocalFolder,
        path: Path,
        range: Range<u64>,
    ) -> Result<Vec<Vec<Bytes>>, (Path, object_store::Error)> {
        folder
            .read(vec![(path, std::iter::once(range).collect())])
            .await
    }

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
        assert_eq!(got, vec![want.clone()]);
        let missing = read_one(&folder, Path::from("nope.parquet"), 0..1)
            .await
            .unwrap_err();
        assert_eq!(missing.0, Path::from("nope.parquet"));
        assert!(
            matches!(missing.1, object_store::Error::NotFound { .. }),
            "{}",
            missing.1
        );
        let short = read_one(&folder, path.clone(), 9_999..10_001)
            .await
            .unwrap_err();
        assert_eq!(short.0, path);
        let past = read_one(&folder, path.clone(), 20_000..20_001)
            .await
            .unwrap_err();
        assert!(past.1.to_string().contains("10000 bytes"), "{}", past.1);
        // An empty object, and empty ranges, read as the store reads them.
        let empty = Path::from("empty.parquet");
        store.put(&empty, Vec::new().into()).await.unwrap();
        let got = folder
            .read(vec![
                (empty.clone(), std::iter::once(0..0).collect()),
                (path.clone(), std::iter::once(7..7).collect()),
            ])
            .await
            .unwrap();
        assert_eq!(got, vec![vec![Bytes::new()], vec![Bytes::new()]]);
        // Each file is mapped once, and its bytes outlive the folder.
        let again = read_one(&folder, path.clone(), 0..10).await.unwrap();
        assert_eq!(folder.mapped.lock().unwrap().len(), 2);
        drop(folder);
        assert_eq!(again[0][0], want[0]);
        // A wrapped store keeps its reads.
        let wrapped = crate::store::latency::LatencyStore::new(store, "ttfb=0ms".parse().unwrap());
        assert!(LocalFolder::of(&wrapped).is_none());
        assert!(LocalFolder::of(&object_store::memory::InMemory::new()).is_none());
    }

    /// What a get answers, its payload read whole.
    async fn got(result: GetResult) -> (ObjectMeta, Range<u64>, Bytes) {
        let (meta, range) = (result.meta.clone(), result.range.clone());
        (meta, range, result.bytes().await.unwrap())
    }

    #[tokio::test]
    async fn objects_in_place_answer_as_the_store_and_never_from_an_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let objects = InPlaceObjects::of(store.as_ref()).unwrap();
        let path = Path::from("versions/latest hint.bin");
        store.put(&path, vec![1u8; 5_000].into()).await.unwrap();
        let ranged = |r: Range<u64>| GetOptions {
            range: Some(GetRange::Bounded(r)),
            ..GetOptions::default()
        };
        // Nothing is answered before the store's own get was remembered.
        assert!(objects.get(&path, &ranged(0..10)).is_none());
        let first = store.get_opts(&path, ranged(100..200)).await.unwrap();
        objects.remember(&first.meta);
        for r in [100..200, 0..1, 4_990..5_000] {
            let from_store = got(store.get_opts(&path, ranged(r.clone())).await.unwrap()).await;
            let in_place = got(objects.get(&path, &ranged(r.clone())).unwrap()).await;
            assert_eq!(in_place, from_store, "{r:?}");
        }
        // An empty range or one past the end, a head, a conditional or an
        // open-ended get is the store's to answer.
        assert!(objects.get(&path, &ranged(4_990..5_001)).is_none());
        assert!(objects.get(&path, &ranged(7..7)).is_none());
        let head = GetOptions {
            head: true,
            ..ranged(0..10)
        };
        let conditional = GetOptions {
            if_none_match: Some("*".into()),
            ..ranged(0..10)
        };
        for options in [head, conditional, GetOptions::default()] {
            assert!(objects.get(&path, &options).is_none(), "{options:?}");
        }
        // Written again under its name: the old mapping is never served,
        // and the store's next get is remembered in its place.
        store.put(&path, vec![2u8; 6_000].into()).await.unwrap();
        assert!(objects.get(&path, &ranged(0..10)).is_none());
        let second = store.get_opts(&path, ranged(0..10)).await.unwrap();
        objects.remember(&second.meta);
        let (meta, _, bytes) = got(objects.get(&path, &ranged(5_990..6_000)).unwrap()).await;
        assert_eq!((meta.size, &bytes[..]), (6_000, &[2u8; 10][..]));
        assert_eq!(meta.e_tag, second.meta.e_tag);
        // Deleted: nothing is answered, and the store says NotFound.
        store.delete(&path).await.unwrap();
        assert!(objects.get(&path, &ranged(0..10)).is_none());
        // Metadata of another version than the file's is not kept.
        store.put(&path, vec![3u8; 10].into()).await.unwrap();
        objects.remember(&first.meta);
        assert!(objects.get(&path, &ranged(0..10)).is_none());
    }
}
