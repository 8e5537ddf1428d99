//! The disk tier: a persistent, byte-bounded cache of object bytes in a local
//! folder, between the RAM caches and the object store, shared by every
//! process that opens the same folder.
//!
//! - **Blocks.** An object is cached in blocks: its [`Units`] where its
//!   reader knows them (a postings file's column chunks and page indexes,
//!   from its footer), so that a chunk read is one entry; elsewhere a fixed
//!   grid of [`BLOCK_DATA`] bytes (the last one shorter). A read is served
//!   from the blocks it covers, and only the missing runs of adjacent blocks
//!   go to the store, one request a run. A missing run that holds over
//!   [`SPARSE_RUN`] times the bytes the read asks of it (a re-rank's page
//!   in a 64 KiB block) is **filled behind**: the read fetches only its own
//!   bytes, as without a cache, and the run is fetched after it, off the
//!   query's path, and kept (one fill of a block at a time in a process;
//!   [`DiskCacheState::fill_requests`]). Each entry file is one block behind
//!   a [`HEADER`]-byte header; a grid block's entry is 64 KiB in all, so
//!   entries fill whole file-system blocks.
//! - **No stale byte.** An entry's key is the object's path, size and
//!   version (the manifest's sha256 of the whole object, or an ETag) and the
//!   block's byte range; the header repeats the key and holds the block's
//!   length and CRC32, checked when the entry is mapped. A mismatch is a miss
//!   and the entry is removed.
//! - **Crash-safe.** An entry is written to `tmp/` and renamed into place, so
//!   a process killed at any moment leaves a whole entry or none; a torn or
//!   corrupted one fails its checksum. Leftover temporary files are removed
//!   by the next eviction once they are [`STALE_TMP`] old.
//! - **Byte-bounded, across processes.** `usage` holds the bytes reserved in
//!   the folder, read and written under an exclusive lock on that file. A
//!   write reserves its entry's bytes first; when the reservation would pass
//!   the bound, the writer lists the folder (entries, temporary files and
//!   folders, by their allocated size), removes the least recently used
//!   entries (a hit refreshes an entry's modification time) down to
//!   [`EVICT_TO`] of the bound, and records the true total. What a killed
//!   writer reserved is corrected there too. One entry takes at most 1/16 of
//!   the bound; a larger block is served but not kept.
//! - **Verified once, then mapped.** A process maps each entry it reads and
//!   checks the entry's header and CRC32 once, when it maps it; it then
//!   serves the entry's ranges from the mapping ([`MAX_MAPPED`] entries at
//!   most), with no system call and no copy, as the local folder is served
//!   ([`super::local_read`]). This is sound because an entry is never
//!   written in place: it is renamed into place whole and only ever removed,
//!   which leaves a mapped file readable. A mapping whose entry another
//!   process evicted (or replaced) is dropped at its next recency refresh,
//!   so the folder's bytes are freed within [`TOUCH_EVERY`] of a hit.
//!   Something that truncated an entry file in place would fault the
//!   reading process (`SIGBUS`), as for any memory-mapped reader.
//!
//! - **Written behind.** The blocks a read fetched are written on tokio's
//!   blocking pool after the read has returned them: a read that filled the
//!   cache does not wait for its writes (about 50 µs an entry: the lock, a
//!   temporary file, a rename). Until its entry is in place, a block is
//!   served from memory to the reads that ask for it. At most
//!   [`WRITE_BEHIND_BYTES`] wait so in a process; a read that would pass
//!   that waits for its own writes. [`DiskCache::settle`] waits until every
//!   write left behind is done (`warm` does, and so does a command before
//!   it exits).
//!
//! Reads of unmapped entries and writes are blocking file IO: callers run
//! them on tokio's blocking pool ([`CachedObject::get_ranges`]), never on a
//! worker thread; a read of mapped entries is a lookup in memory.

use bytes::{Bytes, BytesMut};
use lru::LruCache;
use memmap2::Mmap;
use object_store::ObjectStore;
use object_store::path::Path;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::num::NonZeroUsize;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;

/// Bytes of one entry file: the header and one block.
pub const ENTRY_BYTES: u64 = 64 * 1024;
/// Header bytes of an entry: magic, object key, block index, length, CRC32.
pub const HEADER: u64 = 64;
/// Object bytes in one block of the fixed grid.
pub const BLOCK_DATA: u64 = ENTRY_BYTES - HEADER;
/// The largest span of an object kept as one entry ([`Units`]): larger
/// ones are cut into pieces of [`BLOCK_DATA`] bytes.
pub const MAX_UNIT: u64 = 1 << 20;
/// Share of the bound an eviction frees down to, so that evictions (each
/// lists the folder) are rare.
pub const EVICT_TO: f64 = 0.9;
/// Age past which a temporary file is a killed writer's leftover.
pub const STALE_TMP: Duration = Duration::from_secs(60);
/// An entry's modification time (its recency) is refreshed by a hit at most
/// this often.
pub const TOUCH_EVERY: Duration = Duration::from_secs(1);
/// Entries one process keeps mapped (least recently used dropped first):
/// 512 MiB of the page cache, well below a process's default limit of
/// 65,530 mappings with the local folder's.
pub const MAX_MAPPED: usize = 8192;
const MAGIC: &[u8; 8] = b"PQVFCB02";
/// A missing run of blocks holding over this many times the bytes a read
/// asks of it is filled behind the read (module comment): a whole 64 KiB
/// block for a page of 0.5–4 KiB would otherwise add its transfer (0.6 ms
/// at 100 MiB/s a request) to the query.
pub const SPARSE_RUN: u64 = 4;
/// Bytes of fetched blocks a process holds waiting to be written, at most
/// ([`DiskCache::write_behind`]).
pub const WRITE_BEHIND_BYTES: u64 = 64 << 20;
/// Subfolders of `blocks/` (by the key's first hex digit).
const FANOUT: usize = 16;

/// Errors opening a cache folder. Reads and writes of entries never fail a
/// query: a failed read is a miss, a failed write is counted
/// ([`DiskCacheState::write_errors`]).
#[derive(Debug, Error)]
pub enum DiskCacheError {
    #[error("cache folder {dir}: {source}")]
    Io { dir: String, source: io::Error },
    #[error("cache size {size} bytes is below {least} bytes (16 entries of {entry} bytes)")]
    TooSmall { size: u64, least: u64, entry: u64 },
}

/// What a cache did since it was opened, in this process.
#[derive(Debug, Default)]
struct CacheCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    written: AtomicU64,
    written_bytes: AtomicU64,
    evictions: AtomicU64,
    evicted_bytes: AtomicU64,
    /// Entries that failed their checks (removed, counted as misses).
    corrupt: AtomicU64,
    write_errors: AtomicU64,
    fill_requests: AtomicU64,
    fill_bytes: AtomicU64,
    /// Bytes reserved in the folder at the last write or eviction (every
    /// process's entries).
    usage_bytes: AtomicU64,
}

/// A cache's figures at one moment: what [`DiskCache::state`] reports to
/// `serve`'s index info and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskCacheState {
    /// The bound, in bytes on disk.
    pub capacity_bytes: u64,
    /// Bytes the folder held at this process's last write or eviction
    /// (every process's entries).
    pub usage_bytes: u64,
    /// Blocks served, and blocks looked up and not found (this process).
    pub hits: u64,
    pub misses: u64,
    pub hit_bytes: u64,
    /// Blocks written, and their bytes.
    pub written: u64,
    pub written_bytes: u64,
    /// Entries removed to stay within the bound, and their bytes.
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Entries that failed their checks (removed), and failed writes.
    pub corrupt: u64,
    pub write_errors: u64,
    /// Requests sent to the store to fill blocks behind the reads that
    /// fetched only their own bytes of them ([`SPARSE_RUN`]), and their
    /// bytes. A failed fill is counted in `write_errors`.
    pub fill_requests: u64,
    pub fill_bytes: u64,
}

/// A cache folder. Cheap to share (`Arc`); several processes may open the
/// same folder.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    capacity: u64,
    counters: CacheCounters,
    tmp_seq: AtomicU64,
    /// The entries this process has verified and mapped.
    mapped: Mutex<LruCache<BlockKey, MappedEntry>>,
    /// Blocks fetched and not yet written ([`DiskCache::write_behind`]).
    behind: Behind,
}

/// The writes a process left behind: their blocks, served from memory
/// until written, the blocks being filled, and the tasks still filling or
/// writing.
#[derive(Debug, Default)]
struct Behind {
    blocks: Mutex<std::collections::HashMap<BlockKey, Bytes>>,
    filling: Mutex<std::collections::HashSet<BlockKey>>,
    bytes: AtomicU64,
    tasks: AtomicU64,
    settled: tokio::sync::Notify,
}

/// A verified, mapped entry: its block's bytes (borrowing the mapping), the
/// entry file's inode, and when its recency was last refreshed.
#[derive(Debug)]
struct MappedEntry {
    data: Bytes,
    inode: u64,
    touched: Instant,
}

/// The key of one block: which object (path, size, version) and which of
/// its bytes (`start`, `len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub object: [u8; 32],
    pub start: u64,
    pub len: u64,
}

/// The identity of an object's bytes: its path, size and version (a sha256
/// or an ETag). Two objects with the same identity hold the same bytes.
pub fn object_key(path: &str, size: u64, version: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0]);
    h.update(size.to_le_bytes());
    h.update(version.as_bytes());
    h.finalize().into()
}

/// The bytes a temporary file reserved, from its name (`…-{cost}.tmp`);
/// another name reserves a whole [`ENTRY_BYTES`].
fn reserved(name: &std::ffi::OsStr) -> u64 {
    name.to_str()
        .and_then(|n| n.strip_suffix(".tmp")?.rsplit('-').next()?.parse().ok())
        .unwrap_or(ENTRY_BYTES)
}

/// Bytes a file of `len` bytes takes on a file system of 4 KiB blocks (the
/// reservation of an entry before it exists).
fn allocated(len: u64) -> u64 {
    len.div_ceil(4096) * 4096
}

impl DiskCache {
    /// Open (creating it) the cache folder `dir`, bounded to `capacity`
    /// bytes on disk.
    ///
    /// # Errors
    /// [`DiskCacheError::TooSmall`] below 16 entries; [`DiskCacheError::Io`]
    /// when the folder cannot be created or its `usage` file opened.
    pub fn open(dir: impl Into<PathBuf>, capacity: u64) -> Result<Self, DiskCacheError> {
        let dir = dir.into();
        let least = 16 * ENTRY_BYTES;
        if capacity < least {
            return Err(DiskCacheError::TooSmall {
                size: capacity,
                least,
                entry: ENTRY_BYTES,
            });
        }
        let name = dir.display().to_string();
        let io = |source| DiskCacheError::Io {
            dir: name.clone(),
            source,
        };
        for i in 0..FANOUT {
            fs::create_dir_all(dir.join("blocks").join(format!("{i:x}"))).map_err(io)?;
        }
        fs::create_dir_all(dir.join("tmp")).map_err(io)?;
        let cache = Self {
            dir,
            capacity,
            counters: CacheCounters::default(),
            tmp_seq: AtomicU64::new(0),
            mapped: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_MAPPED).expect("MAX_MAPPED > 0"),
            )),
            behind: Behind::default(),
        };
        // A new folder (or one whose `usage` was lost) starts from what it
        // holds: its folders, and any entries already there.
        let usage = cache
            .with_usage(|cache, used| match used {
                0 => Ok(cache.scan()?.0),
                used => Ok(used),
            })
            .map_err(io)?;
        cache.counters.usage_bytes.store(usage, Ordering::Relaxed);
        Ok(cache)
    }

    /// The folder.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The figures now.
    pub fn state(&self) -> DiskCacheState {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskCacheState {
            capacity_bytes: self.capacity,
            usage_bytes: get(&c.usage_bytes),
            hits: get(&c.hits),
            misses: get(&c.misses),
            hit_bytes: get(&c.hit_bytes),
            written: get(&c.written),
            written_bytes: get(&c.written_bytes),
            evictions: get(&c.evictions),
            evicted_bytes: get(&c.evicted_bytes),
            corrupt: get(&c.corrupt),
            write_errors: get(&c.write_errors),
            fill_requests: get(&c.fill_requests),
            fill_bytes: get(&c.fill_bytes),
        }
    }

    fn entry_path(&self, key: &BlockKey) -> PathBuf {
        let name = hex::encode(key.object);
        self.dir
            .join("blocks")
            .join(&name[..1])
            .join(format!("{name}-{}-{}", key.start, key.len))
    }

    /// The block `key` if a whole, intact entry holds it:
    /// from this process's mapping of it, or else mapped and checked now. A
    /// hit refreshes the entry's recency (at most every [`TOUCH_EVERY`]).
    pub fn get(&self, key: &BlockKey) -> Option<Bytes> {
        if let Some((data, due)) = self.get_mapped(key) {
            if due {
                self.touch(key);
            }
            return Some(data);
        }
        let path = self.entry_path(key);
        match map_entry(&path, key) {
            Ok(Some((data, inode))) => {
                self.count_hit(data.len());
                self.lock_mapped().put(
                    *key,
                    MappedEntry {
                        data: data.clone(),
                        inode,
                        touched: Instant::now(),
                    },
                );
                Some(data)
            }
            Ok(None) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(_) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                self.lock_mapped().pop(key);
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// The block `key` if this process has its entry mapped: a lookup in
    /// memory, no IO. The flag says the entry's recency is due for a refresh
    /// ([`DiskCache::touch`], file IO).
    pub fn get_mapped(&self, key: &BlockKey) -> Option<(Bytes, bool)> {
        let (data, due) = {
            let mut mapped = self.lock_mapped();
            let entry = mapped.get_mut(key)?;
            let due = entry.touched.elapsed() > TOUCH_EVERY;
            if due {
                entry.touched = Instant::now();
            }
            (entry.data.clone(), due)
        };
        self.count_hit(data.len());
        Some((data, due))
    }

    /// Refresh the recency of block `key`'s entry file. When the file is gone
    /// or is another file now (evicted, or evicted and written again, by any
    /// process), the mapping is dropped, so that the removed file's bytes
    /// are freed.
    pub fn touch(&self, key: &BlockKey) {
        let current = File::open(self.entry_path(key)).and_then(|file| {
            let inode = file.metadata()?.ino();
            file.set_modified(SystemTime::now())?;
            Ok(inode)
        });
        let mut mapped = self.lock_mapped();
        if let Some(entry) = mapped.peek(key)
            && current.as_ref().ok() != Some(&entry.inode)
        {
            mapped.pop(key);
        }
    }

    fn lock_mapped(&self) -> MutexGuard<'_, LruCache<BlockKey, MappedEntry>> {
        self.mapped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_behind(&self) -> MutexGuard<'_, std::collections::HashMap<BlockKey, Bytes>> {
        self.behind
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The block `key` if a read of this process fetched it and its entry
    /// is still being written: a lookup in memory, counted as a hit.
    pub fn get_behind(&self, key: &BlockKey) -> Option<Bytes> {
        let data = self.lock_behind().get(key).cloned()?;
        self.count_hit(data.len());
        Some(data)
    }

    /// Keep `blocks` ([`DiskCache::put`] each) on tokio's blocking pool,
    /// serving them from memory until then ([`DiskCache::get_behind`]).
    /// Returns the writing task when the blocks waiting to be written would
    /// pass [`WRITE_BEHIND_BYTES`]: the caller then awaits it.
    pub fn write_behind(
        self: &Arc<Self>,
        blocks: Vec<(BlockKey, Bytes)>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if blocks.is_empty() {
            return None;
        }
        let bytes: u64 = blocks.iter().map(|(_, b)| b.len() as u64).sum();
        {
            let mut behind = self.lock_behind();
            for (key, data) in &blocks {
                behind.insert(*key, data.clone());
            }
        }
        let waiting = self.behind.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.behind.tasks.fetch_add(1, Ordering::AcqRel);
        let cache = Arc::clone(self);
        let task = tokio::task::spawn_blocking(move || {
            for (key, data) in &blocks {
                cache.put(key, data);
                cache.lock_behind().remove(key);
            }
            cache.behind.bytes.fetch_sub(bytes, Ordering::Relaxed);
            cache.task_done();
        });
        (waiting > WRITE_BEHIND_BYTES).then_some(task)
    }

    /// A task left behind is done: the last one wakes [`DiskCache::settle`].
    fn task_done(&self) {
        if self.behind.tasks.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.behind.settled.notify_waiters();
        }
    }

    fn lock_filling(&self) -> MutexGuard<'_, std::collections::HashSet<BlockKey>> {
        self.behind
            .filling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Fetch the `runs` of `object` (each the keys of adjacent blocks) and
    /// keep them ([`DiskCache::write_behind`]), in a task of their own.
    /// Blocks being filled already are left out (a run is cut around them).
    fn fill_behind(
        self: &Arc<Self>,
        store: Arc<dyn ObjectStore>,
        path: Path,
        runs: Vec<Vec<BlockKey>>,
    ) {
        let runs: Vec<_> = {
            let mut filling = self.lock_filling();
            let mut kept: Vec<(Range<u64>, Vec<BlockKey>)> = Vec::with_capacity(runs.len());
            for keys in runs {
                let mut last_end = None;
                for key in keys {
                    if !filling.insert(key) {
                        last_end = None;
                        continue;
                    }
                    let end = key.start + key.len;
                    match kept.last_mut() {
                        Some((span, run)) if last_end == Some(key.start) => {
                            span.end = end;
                            run.push(key);
                        }
                        _ => kept.push((key.start..end, vec![key])),
                    }
                    last_end = Some(end);
                }
            }
            kept
        };
        if runs.is_empty() {
            return;
        }
        self.behind.tasks.fetch_add(1, Ordering::AcqRel);
        let cache = Arc::clone(self);
        drop(tokio::spawn(async move {
            let spans: Vec<Range<u64>> = runs.iter().map(|(span, _)| span.clone()).collect();
            let fetched =
                super::parquet_reader::get_exact_ranges(store.as_ref(), &path, &spans).await;
            let c = &cache.counters;
            match fetched {
                Ok(data) => {
                    c.fill_requests
                        .fetch_add(spans.len() as u64, Ordering::Relaxed);
                    let mut fresh = Vec::new();
                    for ((span, keys), data) in runs.iter().zip(data) {
                        c.fill_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                        for key in keys {
                            let at = (key.start - span.start) as usize;
                            fresh.push((*key, data.slice(at..at + key.len as usize)));
                        }
                    }
                    if let Some(writes) = cache.write_behind(fresh) {
                        let _ = writes.await;
                    }
                }
                Err(_) => {
                    c.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut filling = cache.lock_filling();
            for key in runs.iter().flat_map(|(_, keys)| keys) {
                filling.remove(key);
            }
            drop(filling);
            cache.task_done();
        }));
    }

    /// Wait until every write this process left behind is done
    /// ([`DiskCache::write_behind`], and the blocks filled behind the reads).
    pub async fn settle(&self) {
        loop {
            let settled = self.behind.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if self.behind.tasks.load(Ordering::Acquire) == 0 {
                return;
            }
            settled.await;
        }
    }

    fn count_hit(&self, bytes: usize) {
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .hit_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Keep `data` as block `key`: reserve its bytes (evicting when the
    /// folder would pass the bound), write a temporary file, rename it into
    /// place. A failure is counted, never returned: the cache is an
    /// optimisation.
    pub fn put(&self, key: &BlockKey, data: &[u8]) {
        if let Err(_e) = self.try_put(key, data) {
            self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn try_put(&self, key: &BlockKey, data: &[u8]) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let Ok(data_len) = u32::try_from(data.len()) else {
            return Err(bad("a block over 4 GiB"));
        };
        if u64::from(data_len) != key.len {
            return Err(bad("a block of another length than its key"));
        }
        let len = HEADER + data.len() as u64;
        let cost = allocated(len);
        if cost > self.capacity / 16 {
            // Kept out: one entry may take at most 1/16 of the bound.
            return Ok(());
        }
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        // The name carries the reservation, for another process's `scan`.
        let tmp = self.dir.join("tmp").join(format!(
            "{}-{seq}-{}-{cost}.tmp",
            std::process::id(),
            hex::encode(&key.object[..4])
        ));
        // The temporary file is created under the lock, so that another
        // process's eviction counts this reservation (see `scan`).
        let usage = self.with_usage(|cache, used| {
            let now = if used + cost <= cache.capacity {
                used + cost
            } else {
                cache.evict(cost)? + cost
            };
            File::create(&tmp)?;
            Ok(now)
        })?;
        self.counters.usage_bytes.store(usage, Ordering::Relaxed);
        let mut entry = Vec::with_capacity(len as usize);
        entry.extend_from_slice(MAGIC);
        entry.extend_from_slice(&key.object);
        entry.extend_from_slice(&key.start.to_le_bytes());
        entry.extend_from_slice(&data_len.to_le_bytes());
        entry.extend_from_slice(&crate::format::page_crc::crc32(data).to_le_bytes());
        entry.resize(HEADER as usize, 0);
        entry.extend_from_slice(data);
        let written = fs::write(&tmp, &entry).and_then(|()| fs::rename(&tmp, self.entry_path(key)));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        self.counters.written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Run `f(self, used)` with the `usage` file locked, storing what it returns.
    fn with_usage(&self, f: impl FnOnce(&Self, u64) -> io::Result<u64>) -> io::Result<u64> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("usage"))?;
        file.lock()?;
        let mut word = [0u8; 8];
        let used = match file.read_exact(&mut word) {
            Ok(()) => u64::from_le_bytes(word),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(e),
        };
        let now = f(self, used)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&now.to_le_bytes())?;
        Ok(now)
    }

    /// List the folder: its bytes on disk (folders, `usage`, entries, and
    /// each temporary file as the whole entry it is becoming, since its
    /// bytes were reserved), and the entries by recency, oldest first.
    /// Temporary files [`STALE_TMP`] old are a killed writer's and removed.
    fn scan(&self) -> io::Result<(u64, Vec<Entry>)> {
        let now = SystemTime::now();
        let on_disk = |m: &fs::Metadata| m.blocks() * 512;
        let mut total = fs::metadata(&self.dir).map(|m| on_disk(&m))?;
        total += fs::metadata(self.dir.join("usage")).map_or(0, |m| on_disk(&m));
        let tmp_dir = self.dir.join("tmp");
        total += fs::metadata(&tmp_dir).map(|m| on_disk(&m))?;
        for tmp in fs::read_dir(&tmp_dir)? {
            let Ok(tmp) = tmp else { continue };
            let Ok(meta) = tmp.metadata() else { continue };
            let old = meta
                .modified()
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > STALE_TMP);
            if old && fs::remove_file(tmp.path()).is_ok() {
                continue;
            }
            total += on_disk(&meta).max(reserved(&tmp.file_name()));
        }
        let blocks = self.dir.join("blocks");
        total += fs::metadata(&blocks).map(|m| on_disk(&m))?;
        let mut entries = Vec::new();
        for i in 0..FANOUT {
            let sub = blocks.join(format!("{i:x}"));
            total += fs::metadata(&sub).map(|m| on_disk(&m))?;
            for entry in fs::read_dir(&sub)? {
                let Ok(entry) = entry else { continue };
                let Ok(meta) = entry.metadata() else { continue };
                let size = on_disk(&meta);
                total += size;
                let at = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                entries.push(Entry {
                    at,
                    size,
                    path: entry.path(),
                });
            }
        }
        entries.sort_unstable_by_key(|e| e.at);
        Ok((total, entries))
    }

    /// Remove the least recently used entries until the folder holds at
    /// most [`EVICT_TO`] of the bound less `incoming`; returns the bytes
    /// left. Called with the `usage` lock held.
    fn evict(&self, incoming: u64) -> io::Result<u64> {
        let target = ((self.capacity as f64 * EVICT_TO) as u64).saturating_sub(incoming);
        let (mut total, entries) = self.scan()?;
        for Entry { size, path, .. } in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= size;
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .evicted_bytes
                    .fetch_add(size, Ordering::Relaxed);
            }
        }
        Ok(total)
    }
}

/// An entry file as an eviction sees it: its recency, bytes on disk, path.
struct Entry {
    at: SystemTime,
    size: u64,
    path: PathBuf,
}

/// The entry at `path`, mapped, if it is whole and is block `key`: its
/// block's bytes (borrowing the mapping) and the file's inode;
/// `Ok(None)` when there is none, `Err` when one is there but fails a check.
/// A stale recency is refreshed.
fn map_entry(path: &std::path::Path, key: &BlockKey) -> io::Result<Option<(Bytes, u64)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    if meta.len() != HEADER + key.len {
        return Err(bad("length"));
    }
    // SAFETY: an entry file is never written in place (module comment): it
    // is renamed into place whole and only ever removed.
    let map = unsafe { Mmap::map(&file)? };
    let (header, data) = map.split_at(HEADER as usize);
    let word = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if &header[..8] != MAGIC
        || header[8..40] != key.object
        || header[40..48] != key.start.to_le_bytes()
        || u64::from(word(48)) != key.len
    {
        return Err(bad("header"));
    }
    if word(52) != crate::format::page_crc::crc32(data) {
        return Err(bad("checksum"));
    }
    let stale = meta
        .modified()
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age > TOUCH_EVERY);
    if stale {
        let _ = file.set_modified(SystemTime::now());
    }
    Ok(Some((
        Bytes::from_owner(map).slice(HEADER as usize..),
        meta.ino(),
    )))
}

/// What one read through the tiers cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierIo {
    /// Requests sent to the store, and the bytes they returned.
    pub store_requests: u64,
    pub store_bytes: u64,
    /// Blocks served by the disk cache, and their bytes.
    pub disk_hits: u64,
    pub disk_bytes: u64,
}

/// One immutable object read through the disk tier when there is one.
#[derive(Debug, Clone, Copy)]
pub struct CachedObject<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub cache: Option<&'a Arc<DiskCache>>,
    pub path: &'a Path,
    /// The object's size (bytes) and version (sha256 or ETag), from the
    /// document that pins it.
    pub size: u64,
    pub version: &'a str,
}

impl CachedObject<'_> {
    /// The bytes of `ranges` (each within the object), through the fixed
    /// grid of [`BLOCK_DATA`]-byte blocks: [`CachedObject::get_ranges_in`]
    /// without units.
    ///
    /// # Errors
    /// The store's error for a failed request.
    pub async fn get_ranges(
        &self,
        ranges: &[Range<u64>],
    ) -> Result<(Vec<Bytes>, TierIo), object_store::Error> {
        self.get_ranges_in(ranges, &Units::default()).await
    }

    /// The bytes of `ranges` (each within the object): without a cache,
    /// exactly those ranges from the store
    /// ([`get_exact_ranges`](super::parquet_reader::get_exact_ranges)); with
    /// one, from the blocks they cover, each missing run of adjacent blocks
    /// fetched in one request (all at once) and kept.
    ///
    /// The blocks of a range are the `units` that hold it (one: served
    /// without a copy; several adjacent ones: copied together), else the
    /// fixed grid's blocks of [`BLOCK_DATA`] bytes it touches.
    ///
    /// # Errors
    /// The store's error for a failed request.
    pub async fn get_ranges_in(
        &self,
        ranges: &[Range<u64>],
        units: &Units,
    ) -> Result<(Vec<Bytes>, TierIo), object_store::Error> {
        let units = &units.units[..];
        let Some(cache) = self.cache else {
            let data =
                super::parquet_reader::get_exact_ranges(self.store.as_ref(), self.path, ranges)
                    .await?;
            let io = TierIo {
                store_requests: ranges.len() as u64,
                store_bytes: data.iter().map(|b| b.len() as u64).sum(),
                ..TierIo::default()
            };
            return Ok((data, io));
        };
        let object = object_key(self.path.as_ref(), self.size, self.version);
        let size = self.size;
        let mut blocks: Vec<Range<u64>> = ranges
            .iter()
            .filter(|r| r.start < r.end)
            .flat_map(|r| blocks_of(r, units, size))
            .collect();
        blocks.sort_unstable_by_key(|b| (b.start, b.end));
        blocks.dedup();
        let key = move |b: &Range<u64>| BlockKey {
            object,
            start: b.start,
            len: b.end - b.start,
        };
        // Mapped entries first, in memory; the others are mapped (file IO)
        // on the blocking pool, and stale recencies refreshed there without
        // waiting.
        let mut have: Vec<Option<Bytes>> = Vec::with_capacity(blocks.len());
        let (mut unmapped, mut due) = (Vec::new(), Vec::new());
        for b in &blocks {
            match cache.get_mapped(&key(b)) {
                Some((data, touch)) => {
                    if touch {
                        due.push(key(b));
                    }
                    have.push(Some(data));
                }
                None if let Some(data) = cache.get_behind(&key(b)) => have.push(Some(data)),
                None => {
                    unmapped.push(have.len());
                    have.push(None);
                }
            }
        }
        if !due.is_empty() {
            let cache = Arc::clone(cache);
            drop(tokio::task::spawn_blocking(move || {
                for key in due {
                    cache.touch(&key);
                }
            }));
        }
        if !unmapped.is_empty() {
            let (cache, wanted) = (
                Arc::clone(cache),
                unmapped
                    .iter()
                    .map(|&i| key(&blocks[i]))
                    .collect::<Vec<_>>(),
            );
            let found =
                blocking(move || wanted.iter().map(|k| cache.get(k)).collect::<Vec<_>>()).await?;
            for (i, data) in unmapped.into_iter().zip(found) {
                have[i] = data;
            }
        }
        let mut io = TierIo::default();
        for b in have.iter().flatten() {
            io.disk_hits += 1;
            io.disk_bytes += b.len() as u64;
        }
        // Missing runs of adjacent blocks: one request each.
        let mut runs: Vec<Range<usize>> = Vec::new();
        for (i, h) in have.iter().enumerate() {
            if h.is_some() {
                continue;
            }
            match runs.last_mut() {
                Some(run) if run.end == i && blocks[i].start == blocks[i - 1].end => {
                    run.end = i + 1;
                }
                _ => runs.push(i..i + 1),
            }
        }
        // A run that holds far more than its reads ask is filled behind
        // them: the reads touching it fetch their own bytes.
        let span = |run: &Range<usize>| blocks[run.start].start..blocks[run.end - 1].end;
        let overlap =
            |r: &Range<u64>, s: &Range<u64>| r.end.min(s.end).saturating_sub(r.start.max(s.start));
        let (sparse, dense): (Vec<_>, Vec<_>) = runs.into_iter().partition(|run| {
            let s = span(run);
            let asked: u64 = ranges.iter().map(|r| overlap(r, &s)).sum();
            s.end - s.start > SPARSE_RUN * asked
        });
        let exact: Vec<usize> = (0..ranges.len())
            .filter(|&i| sparse.iter().any(|run| overlap(&ranges[i], &span(run)) > 0))
            .collect();
        let mut direct: Vec<Option<Bytes>> = vec![None; ranges.len()];
        if !dense.is_empty() || !exact.is_empty() {
            let byte_ranges: Vec<Range<u64>> = dense
                .iter()
                .map(span)
                .chain(exact.iter().map(|&i| ranges[i].clone()))
                .collect();
            let mut fetched = super::parquet_reader::get_exact_ranges(
                self.store.as_ref(),
                self.path,
                &byte_ranges,
            )
            .await?;
            io.store_requests += byte_ranges.len() as u64;
            io.store_bytes += fetched.iter().map(|d| d.len() as u64).sum::<u64>();
            for (&i, data) in exact.iter().zip(fetched.split_off(dense.len())) {
                direct[i] = Some(data);
            }
            let mut fresh = Vec::new();
            for (run, data) in dense.iter().zip(fetched) {
                let at = span(run).start;
                for i in run.clone() {
                    let b = &blocks[i];
                    let block = data.slice((b.start - at) as usize..(b.end - at) as usize);
                    fresh.push((key(b), block.clone()));
                    have[i] = Some(block);
                }
            }
            if let Some(writes) = cache.write_behind(fresh) {
                writes.await.map_err(pool_error)?;
            }
        }
        if !sparse.is_empty() {
            let runs = sparse
                .iter()
                .map(|run| blocks[run.clone()].iter().map(key).collect())
                .collect();
            cache.fill_behind(Arc::clone(self.store), self.path.clone(), runs);
        }
        let data = ranges
            .iter()
            .zip(direct)
            .map(|(r, direct)| direct.unwrap_or_else(|| assemble(r, units, size, &blocks, &have)))
            .collect();
        Ok((data, io))
    }
}

/// How the disk tier keeps one object, from what its reader knows of it (a
/// Parquet file's column chunks and page indexes): `spans`, the disjoint
/// byte ranges a read never crosses a boundary of, and the `units` (entries)
/// they are kept in. A span read whole is one unit when at most
/// [`MAX_UNIT`] bytes; a span read in parts (a chunk whose pages are read
/// one by one), or a larger one, is cut into units of [`BLOCK_DATA`] bytes
/// from its start. Bytes outside every span use the fixed grid. The default
/// has no spans: the fixed grid everywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Units {
    spans: Vec<Range<u64>>,
    units: Vec<Range<u64>>,
}

impl Units {
    /// The units of `spans`, each with whether it is read whole. A span
    /// that is empty or overlaps an earlier one (by start) is left out.
    pub fn new(mut spans: Vec<(Range<u64>, bool)>) -> Units {
        spans.sort_unstable_by_key(|(s, _)| s.start);
        let mut out = Units::default();
        for (span, whole) in spans {
            if span.start >= span.end || out.spans.last().is_some_and(|l| l.end > span.start) {
                continue;
            }
            if whole && span.end - span.start <= MAX_UNIT {
                out.units.push(span.clone());
            } else {
                out.units.extend(
                    (span.start..span.end)
                        .step_by(BLOCK_DATA as usize)
                        .map(|s| s..span.end.min(s + BLOCK_DATA)),
                );
            }
            out.spans.push(span);
        }
        out
    }

    /// Bytes of memory held (for a cache bound).
    pub fn bytes(&self) -> usize {
        (self.spans.len() + self.units.len()) * std::mem::size_of::<Range<u64>>()
    }

    /// Reads covering an object of `size` bytes, each at most `most` bytes
    /// (a multiple of [`BLOCK_DATA`]) unless one unit is larger: every unit
    /// as one range, and the bytes between spans in pieces of the fixed
    /// grid. Each read is a list of ranges ([`CachedObject::get_ranges_in`]).
    pub fn cover(&self, size: u64, most: u64) -> Vec<Vec<Range<u64>>> {
        let mut ranges: Vec<Range<u64>> = Vec::new();
        let gap = |from: u64, to: u64, out: &mut Vec<Range<u64>>| {
            let mut at = from;
            while at < to {
                let end = to.min((at / most + 1) * most);
                out.push(at..end);
                at = end;
            }
        };
        let mut at = 0;
        let mut units = self.units.iter().peekable();
        for span in &self.spans {
            gap(at, span.start.min(size), &mut ranges);
            while let Some(u) = units.next_if(|u| u.start < span.end) {
                ranges.push(u.start..u.end.min(size));
            }
            at = span.end.min(size).max(at);
        }
        gap(at, size, &mut ranges);
        let mut reads: Vec<Vec<Range<u64>>> = Vec::new();
        let mut bytes = 0;
        for r in ranges.into_iter().filter(|r| r.start < r.end) {
            let len = r.end - r.start;
            match reads.last_mut() {
                Some(read) if bytes + len <= most => {
                    read.push(r);
                    bytes += len;
                }
                _ => {
                    reads.push(vec![r]);
                    bytes = len;
                }
            }
        }
        reads
    }

    /// `ranges` (sorted, disjoint) cut at every span boundary inside them:
    /// each piece within one span or outside all, so that a piece read whole
    /// by a caller is its units' bytes.
    pub fn split(&self, ranges: &[Range<u64>]) -> Vec<Range<u64>> {
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let mut at = r.start;
            let first = self.spans.partition_point(|s| s.end <= r.start);
            for s in &self.spans[first..] {
                if s.start >= r.end {
                    break;
                }
                for cut in [s.start, s.end] {
                    if at < cut && cut < r.end {
                        out.push(at..cut);
                        at = cut;
                    }
                }
            }
            out.push(at..r.end);
        }
        out
    }
}

/// The blocks holding `range` (non-empty, within an object of `size`
/// bytes): the units that hold it (one, or several adjacent ones), else the
/// fixed grid's blocks.
fn blocks_of(range: &Range<u64>, units: &[Range<u64>], size: u64) -> Vec<Range<u64>> {
    let first = units.partition_point(|u| u.start <= range.start);
    if let Some(first) = first.checked_sub(1).filter(|&i| range.start < units[i].end) {
        let mut end = first;
        while units[end].end < range.end
            && units
                .get(end + 1)
                .is_some_and(|u| u.start == units[end].end)
        {
            end += 1;
        }
        if range.end <= units[end].end {
            return units[first..=end].to_vec();
        }
    }
    (range.start / BLOCK_DATA..=(range.end - 1) / BLOCK_DATA)
        .map(|b| b * BLOCK_DATA..size.min((b + 1) * BLOCK_DATA))
        .collect()
}

/// The bytes of `range` from the blocks holding it ([`blocks_of`]): a slice
/// of one block, or the pieces of several copied together.
fn assemble(
    range: &Range<u64>,
    units: &[Range<u64>],
    size: u64,
    blocks: &[Range<u64>],
    have: &[Option<Bytes>],
) -> Bytes {
    if range.start >= range.end {
        return Bytes::new();
    }
    let piece = |b: &Range<u64>| {
        let i = blocks
            .binary_search_by_key(&(b.start, b.end), |x| (x.start, x.end))
            .expect("every block of a range is listed");
        let data = have[i].as_ref().expect("every block of a range is filled");
        let start = (range.start.max(b.start) - b.start) as usize;
        let end = (range.end.min(b.end) - b.start) as usize;
        data.slice(start..end)
    };
    match &blocks_of(range, units, size)[..] {
        [one] => piece(one),
        several => {
            let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
            for b in several {
                out.extend_from_slice(&piece(b));
            }
            out.freeze()
        }
    }
}

/// Run blocking file IO on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, object_store::Error> {
    tokio::task::spawn_blocking(f).await.map_err(pool_error)
}

/// A blocking-pool task of the disk tier that panicked or was cancelled,
/// as the store error its read returns.
fn pool_error(e: tokio::task::JoinError) -> object_store::Error {
    object_store::Error::Generic {
        store: "disk cache",
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::counting::CountingStore;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    fn key(object: u8, block: u64, len: usize) -> BlockKey {
        BlockKey {
            object: [object; 32],
            start: block * BLOCK_DATA,
            len: len as u64,
        }
    }

    /// Bytes the folder takes on disk, as `du` counts them (a file removed
    /// or renamed while listing is skipped).
    fn du(dir: &std::path::Path) -> u64 {
        let mut total = fs::metadata(dir).unwrap().blocks() * 512;
        for e in fs::read_dir(dir).unwrap().flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += if m.is_dir() {
                du(&e.path())
            } else {
                m.blocks() * 512
            };
        }
        total
    }

    fn entry_files(cache: &DiskCache) -> Vec<PathBuf> {
        (0..FANOUT)
            .flat_map(|i| fs::read_dir(cache.dir().join("blocks").join(format!("{i:x}"))).unwrap())
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[test]
    fn a_block_round_trips_and_other_keys_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 16 * ENTRY_BYTES).unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        cache.put(&key(1, 0, data.len()), &data);
        assert_eq!(
            cache.get(&key(1, 0, data.len())).as_deref(),
            Some(&data[..])
        );
        assert!(
            cache.get(&key(2, 0, data.len())).is_none(),
            "another object"
        );
        assert!(cache.get(&key(1, 1, data.len())).is_none(), "another block");
        assert!(cache.get(&key(1, 0, 999)).is_none(), "another length");
        let s = cache.state();
        assert_eq!((s.hits, s.misses, s.written, s.corrupt), (1, 3, 1, 0));
        // A block of another length than its key is refused.
        cache.put(&key(1, 5, 10), &data);
        assert_eq!(cache.state().write_errors, 1);
        assert!(cache.get(&key(1, 5, 10)).is_none());
    }

    #[test]
    fn a_torn_or_flipped_entry_is_a_miss_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 16 * ENTRY_BYTES).unwrap();
        let data = vec![7u8; 5000];
        cache.put(&key(3, 0, data.len()), &data);
        cache.put(&key(3, 1, data.len()), &data);
        let files = entry_files(&cache);
        assert_eq!(files.len(), 2);
        // A bit flipped in the data of one, the other cut short.
        let mut bytes = fs::read(&files[0]).unwrap();
        bytes[HEADER as usize + 17] ^= 0x10;
        fs::write(&files[0], &bytes).unwrap();
        let bytes = fs::read(&files[1]).unwrap();
        fs::write(&files[1], &bytes[..bytes.len() - 100]).unwrap();
        assert!(cache.get(&key(3, 0, data.len())).is_none());
        assert!(cache.get(&key(3, 1, data.len())).is_none());
        assert_eq!(cache.state().corrupt, 2);
        assert!(entry_files(&cache).is_empty(), "failed entries are removed");
    }

    #[test]
    fn a_mapped_entry_is_served_from_memory_until_its_file_is_gone_or_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let a = DiskCache::open(dir.path(), 16 * ENTRY_BYTES).unwrap();
        let b = DiskCache::open(dir.path(), 16 * ENTRY_BYTES).unwrap();
        let data = vec![5u8; 3000];
        a.put(&key(4, 0, data.len()), &data);
        assert!(
            a.get_mapped(&key(4, 0, data.len())).is_none(),
            "not read yet"
        );
        assert_eq!(a.get(&key(4, 0, data.len())).as_deref(), Some(&data[..]));
        // Now mapped: served with no file IO, and not due for a refresh.
        let (got, due) = a.get_mapped(&key(4, 0, data.len())).unwrap();
        assert_eq!((&got[..], due), (&data[..], false));
        assert!(a.get_mapped(&key(4, 0, 2999)).is_none(), "another length");
        // Another process evicts the entry: the mapping still holds the
        // same bytes, and the next refresh drops it.
        fs::remove_file(&entry_files(&a)[0]).unwrap();
        assert_eq!(a.get(&key(4, 0, data.len())).as_deref(), Some(&data[..]));
        a.touch(&key(4, 0, data.len()));
        assert!(a.get(&key(4, 0, data.len())).is_none(), "evicted elsewhere");
        // Evicted and written again elsewhere: another file, dropped too.
        a.put(&key(4, 0, data.len()), &data);
        assert!(a.get(&key(4, 0, data.len())).is_some());
        fs::remove_file(&entry_files(&a)[0]).unwrap();
        b.put(&key(4, 0, data.len()), &data);
        a.touch(&key(4, 0, data.len()));
        assert!(a.get_mapped(&key(4, 0, data.len())).is_none(), "replaced");
        assert_eq!(a.get(&key(4, 0, data.len())).as_deref(), Some(&data[..]));
        // The mapping is kept while its file stays.
        a.touch(&key(4, 0, data.len()));
        assert!(a.get_mapped(&key(4, 0, data.len())).is_some());
        let s = a.state();
        assert_eq!((s.hits, s.misses, s.corrupt), (6, 1, 0));
    }

    #[test]
    fn two_handles_on_one_folder_stay_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let capacity = 64 * ENTRY_BYTES;
        let a = Arc::new(DiskCache::open(dir.path(), capacity).unwrap());
        let b = Arc::new(DiskCache::open(dir.path(), capacity).unwrap());
        let data = vec![1u8; BLOCK_DATA as usize];
        std::thread::scope(|s| {
            for (i, cache) in [&a, &b].into_iter().enumerate() {
                let (data, dir) = (&data, &dir);
                s.spawn(move || {
                    for block in 0..300 {
                        cache.put(&key(i as u8, block, data.len()), data);
                        let held = du(dir.path());
                        assert!(
                            held as f64 <= capacity as f64 * 1.01,
                            "{held} bytes held, bound {capacity}"
                        );
                    }
                });
            }
        });
        let s = (a.state(), b.state());
        assert!(s.0.evictions + s.1.evictions >= 600 - 64, "{s:?}");
        assert_eq!(s.0.write_errors + s.1.write_errors, 0);
        // The most recent blocks are still there, whichever handle wrote
        // them (one thread may have run all its puts before the other
        // started, and the other's then evicted them all).
        a.put(&key(0, 300, data.len()), &data);
        b.put(&key(1, 300, data.len()), &data);
        assert!(b.get(&key(0, 300, data.len())).is_some());
        assert!(a.get(&key(1, 300, data.len())).is_some());
    }

    #[test]
    fn eviction_keeps_recently_read_entries_and_drops_stale_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let capacity = 32 * ENTRY_BYTES;
        let cache = DiskCache::open(dir.path(), capacity).unwrap();
        let data = vec![2u8; BLOCK_DATA as usize];
        let stale = dir.path().join("tmp").join("killed.tmp");
        fs::write(&stale, &data).unwrap();
        let old = SystemTime::now() - STALE_TMP - Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        for block in 0..20 {
            cache.put(&key(9, block, data.len()), &data);
        }
        // Block 0 is the oldest entry; reading it makes it the newest.
        let past = SystemTime::now() - Duration::from_secs(100);
        for f in entry_files(&cache) {
            let name = f.file_name().unwrap().to_str().unwrap();
            let start: u64 = name.rsplit('-').nth(1).unwrap().parse().unwrap();
            let block = start / BLOCK_DATA;
            let at = past + Duration::from_secs(block);
            File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        assert!(cache.get(&key(9, 0, data.len())).is_some());
        for block in 20..40 {
            cache.put(&key(9, block, data.len()), &data);
        }
        assert!(cache.get(&key(9, 0, data.len())).is_some(), "recently read");
        assert!(
            cache.get(&key(9, 1, data.len())).is_none(),
            "least recently used"
        );
        assert!(!stale.exists(), "a killed writer's leftover is removed");
        assert!(du(dir.path()) <= capacity);
    }

    #[test]
    fn too_small_a_bound_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = DiskCache::open(dir.path(), 1000).unwrap_err();
        assert!(
            matches!(e, DiskCacheError::TooSmall { size: 1000, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("1000"), "{e}");
    }

    #[test]
    fn units_keep_whole_spans_whole_and_cut_the_others() {
        let b = BLOCK_DATA;
        let units = Units::new(vec![
            (200..210 + 2 * b, false),
            (100..200, true),
            (150..160, true),
            (10 * b..10 * b + MAX_UNIT + 1, true),
            (300..300, true),
        ]);
        let large = (MAX_UNIT + 1).div_ceil(b);
        let mut want = vec![
            100..200,
            200..200 + b,
            200 + b..200 + 2 * b,
            200 + 2 * b..210 + 2 * b,
        ];
        want.extend(
            (0..large).map(|i| 10 * b + i * b..(10 * b + (i + 1) * b).min(10 * b + MAX_UNIT + 1)),
        );
        assert_eq!(
            units.units, want,
            "the overlapping and the empty span are left out"
        );
        assert_eq!(
            units.spans,
            vec![100..200, 200..210 + 2 * b, 10 * b..10 * b + MAX_UNIT + 1]
        );
        // Reads are cut at span boundaries only, never between a span's units.
        assert_eq!(
            units.split(std::slice::from_ref(&(0..300))),
            vec![0..100, 100..200, 200..300]
        );
        assert_eq!(
            units.split(&[150..250, 400..b + 300]),
            vec![150..200, 200..250, 400..b + 300]
        );
        assert_eq!(units.split(std::slice::from_ref(&(20..30))), vec![20..30]);
        // The fill's reads cover the object once: every unit whole, the rest
        // on the fixed grid, each read at most `most` bytes.
        let size = 12 * b + MAX_UNIT;
        let reads = units.cover(size, 4 * b);
        let flat: Vec<Range<u64>> = reads.iter().flatten().cloned().collect();
        assert_eq!(flat.first().unwrap().start, 0);
        assert_eq!(flat.last().unwrap().end, size);
        assert!(flat.windows(2).all(|w| w[0].end == w[1].start), "{flat:?}");
        assert!(want.iter().all(|u| flat.contains(u)));
        assert!(
            reads
                .iter()
                .all(|r| r.iter().map(|x| x.end - x.start).sum::<u64>() <= 4 * b)
        );
        assert_eq!(Units::default().cover(3 * b, b).len(), 3);
    }

    /// An object of `size` bytes (byte `i` is `i * step % 251`) in an
    /// in-memory store (counted), and an empty disk tier in a temporary
    /// folder.
    struct Tier {
        path: Path,
        size: u64,
        body: Vec<u8>,
        counting: CountingStore,
        store: Arc<dyn ObjectStore>,
        dir: tempfile::TempDir,
        cache: Arc<DiskCache>,
    }

    impl Tier {
        async fn new(name: &str, size: u64, step: u64) -> Tier {
            let path = Path::from(name);
            let body: Vec<u8> = (0..size).map(|i| (i * step % 251) as u8).collect();
            let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            inner
                .put(&path, PutPayload::from(body.clone()))
                .await
                .unwrap();
            let counting = CountingStore::new(inner);
            let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
            let dir = tempfile::tempdir().unwrap();
            let cache = Arc::new(DiskCache::open(dir.path(), 64 * ENTRY_BYTES).unwrap());
            Tier {
                path,
                size,
                body,
                counting,
                store,
                dir,
                cache,
            }
        }

        /// The bytes of `ranges` through the tier, checked against the
        /// object's, and what the read cost.
        async fn read(&self, ranges: &[Range<u64>]) -> (Vec<Bytes>, TierIo) {
            let (got, io) = self.object().get_ranges(ranges).await.unwrap();
            for (r, g) in ranges.iter().zip(&got) {
                assert_eq!(&g[..], &self.body[r.start as usize..r.end as usize]);
            }
            (got, io)
        }

        /// The object, version `sha-1`, read through the tier.
        fn object(&self) -> CachedObject<'_> {
            CachedObject {
                store: &self.store,
                cache: Some(&self.cache),
                path: &self.path,
                size: self.size,
                version: "sha-1",
            }
        }
    }

    #[tokio::test]
    async fn a_read_within_one_unit_is_its_entry_uncopied() {
        let tier = Tier::new("postings/part-1.parquet", 3 * BLOCK_DATA, 7).await;
        let (size, body, counting, cache) = (tier.size, &tier.body, &tier.counting, &tier.cache);
        let object = tier.object();
        // A chunk kept whole across the fixed grid's boundary, and a chunk
        // read page by page.
        let chunk = 10..BLOCK_DATA + 90;
        let paged = chunk.end..size;
        let units = Units::new(vec![(chunk.clone(), true), (paged.clone(), false)]);
        let page = paged.start + BLOCK_DATA - 100..paged.start + BLOCK_DATA + 100;
        let ranges = units.split(&[chunk.start..chunk.end + 50, page.clone()]);
        assert_eq!(
            ranges,
            vec![chunk.clone(), chunk.end..chunk.end + 50, page.clone()]
        );
        let (got, io) = object.get_ranges_in(&ranges, &units).await.unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(&g[..], &body[r.start as usize..r.end as usize]);
        }
        // The units touched: the chunk and the first three pieces of the
        // paged span, adjacent: one request.
        assert_eq!((io.store_requests, io.disk_hits), (1, 0));
        cache.settle().await;
        let (again, io) = object.get_ranges_in(&ranges, &units).await.unwrap();
        assert_eq!(again, got);
        assert_eq!((io.store_requests, io.disk_hits), (0, 3));
        // Read again, the chunk is the same bytes of the same mapping: no copy.
        let (third, _) = object.get_ranges_in(&ranges[..1], &units).await.unwrap();
        assert_eq!(third[0].as_ptr(), again[0].as_ptr());
        assert_eq!(counting.counts().get_requests, 1);
        let names: Vec<String> = entry_files(cache)
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n.ends_with(&format!(
                "-{}-{}",
                chunk.start,
                chunk.end - chunk.start
            ))),
            "{names:?}"
        );
    }

    #[tokio::test]
    async fn reads_through_the_tier_fetch_each_block_once() {
        let tier = Tier::new("postings/part-0.parquet", 3 * BLOCK_DATA + 123, 31).await;
        let (size, counting) = (tier.size, &tier.counting);
        let object = tier.object();
        let ranges = [
            10..20,
            BLOCK_DATA - 5..BLOCK_DATA + 5,
            2 * BLOCK_DATA..size,
            size - 1..size,
        ];
        let (got, io) = tier.read(&ranges).await;
        // Blocks 0..=3 missing: one run, one request for all four.
        assert_eq!(
            (io.store_requests, io.store_bytes, io.disk_hits),
            (1, size, 0)
        );
        let (again, io) = object.get_ranges(&ranges).await.unwrap();
        assert_eq!(again, got);
        assert_eq!((io.store_requests, io.disk_hits), (0, 4));
        assert_eq!(counting.counts().get_requests, 1);
        // Another version of the object at the same path is never served
        // from the old version's blocks.
        let newer = CachedObject {
            version: "sha-2",
            ..object
        };
        let (_, io) = newer.get_ranges(&ranges[..1]).await.unwrap();
        assert_eq!((io.store_requests, io.disk_hits), (1, 0));
    }

    /// A read of a few bytes of a missing block fetches only those bytes,
    /// as without a cache; the block is fetched behind it and kept, so the
    /// next read of any of its bytes is a hit. A read that asks most of its
    /// blocks fetches them whole, with no fill.
    #[tokio::test]
    async fn a_sparse_miss_fetches_its_own_bytes_and_fills_the_block_behind() {
        let tier = Tier::new("postings/part-3.parquet", 3 * BLOCK_DATA, 17).await;
        let page = BLOCK_DATA + 100..BLOCK_DATA + 612;
        let (_, io) = tier.read(&[page]).await;
        assert_eq!(
            (io.store_requests, io.store_bytes, io.disk_hits),
            (1, 512, 0)
        );
        tier.cache.settle().await;
        let state = tier.cache.state();
        assert_eq!(
            (state.fill_requests, state.fill_bytes, state.written),
            (1, BLOCK_DATA, 1),
            "{state:?}"
        );
        let other = BLOCK_DATA + 5000..BLOCK_DATA + 5512;
        let (_, io) = tier.read(&[other]).await;
        assert_eq!((io.store_requests, io.disk_hits), (0, 1));
        assert_eq!(tier.counting.counts().get_requests, 2);
        // Most of blocks 0 and 2 (two runs): fetched whole now, no fill.
        let (_, io) = tier
            .read(&[10..BLOCK_DATA - 10, 2 * BLOCK_DATA + 1..3 * BLOCK_DATA])
            .await;
        assert_eq!((io.store_requests, io.store_bytes), (2, 2 * BLOCK_DATA));
        tier.cache.settle().await;
        let state = tier.cache.state();
        assert_eq!((state.fill_requests, state.written), (1, 3), "{state:?}");
    }

    /// A read returns before its blocks' entries are written; until they
    /// are, the blocks are served from memory, so a read right after sends
    /// no request either. `settle` returns once the entries are in place, for
    /// another handle (another process) to find. Past
    /// [`WRITE_BEHIND_BYTES`] waiting, the writer is handed back to wait for.
    #[tokio::test]
    async fn fetched_blocks_are_written_behind_the_read_and_served_meanwhile() {
        let tier = Tier::new("postings/part-2.parquet", 2 * BLOCK_DATA + 7, 13).await;
        let (counting, cache) = (&tier.counting, &tier.cache);
        let object = tier.object();
        let ranges = [5..9, BLOCK_DATA + 1..2 * BLOCK_DATA + 3];
        let (got, io) = tier.read(&ranges).await;
        assert_eq!((io.store_requests, io.disk_hits), (1, 0));
        // At once: from the blocks behind, or their entries if written.
        let (again, io) = object.get_ranges(&ranges).await.unwrap();
        assert_eq!(again, got);
        assert_eq!((io.store_requests, io.disk_hits), (0, 3));
        cache.settle().await;
        assert_eq!(entry_files(cache).len(), 3);
        assert_eq!(cache.state().written, 3);
        assert!(cache.lock_behind().is_empty());
        let other = Arc::new(DiskCache::open(tier.dir.path(), 64 * ENTRY_BYTES).unwrap());
        let (third, io) = CachedObject {
            cache: Some(&other),
            ..object
        }
        .get_ranges(&ranges)
        .await
        .unwrap();
        assert_eq!(third, got);
        assert_eq!((io.store_requests, io.disk_hits), (0, 3));
        assert_eq!(counting.counts().get_requests, 1);

        // Under the bound, nothing to wait for; past it, the writer.
        let small = (key(7, 0, 10), Bytes::from(vec![1u8; 10]));
        assert!(cache.write_behind(vec![small]).is_none());
        let len = WRITE_BEHIND_BYTES as usize + 1;
        let large = (key(8, 0, len), Bytes::from(vec![0u8; len]));
        let writer = cache.write_behind(vec![large]).expect("past the bound");
        writer.await.unwrap();
        cache.settle().await;
        assert!(cache.lock_behind().is_empty());
    }
}
