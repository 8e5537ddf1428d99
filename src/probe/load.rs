//! The one postings reader ([`PostingsReader`]): the query's, `verify`'s and
//! compaction's. Loading is split in the manner of arrow-rs's push decoder,
//! so that IO and compute never mix:
//!
//! 1. **Footers** (IO, round 1): candidate files from the manifest
//!    ([`candidate_files_layered`]: the base's and every delta table's); their
//!    footers from the cache or, for the uncached ones, ALL AT ONCE
//!    ([`PostingsReader::footers`]), each checked against its pin in
//!    `footers.json` and the footer contract.
//! 2. **Plan** (pure, [`PostingsReader::plan`]): one [`AccessPlan`] per file
//!    from the footer's cid statistics, checked against the footer's
//!    row-group count; planned row groups found in the decoded-postings cache
//!    are taken from it; for the others a [`Job`] says which column-chunk
//!    byte ranges it needs (`cid`, `rowid`, `vector`, payload only when
//!    asked), and the ranges of a file are coalesced where adjacent. The
//!    result, a [`LoadPlan`], is plain data.
//! 3. **Fetch** (IO, round 2, [`PostingsReader::fetch`]): one `get_ranges`
//!    per file of the plan, all files at once; requests, bytes and rounds
//!    are counted.
//! 4. **Decode** (pure, CPU, [`LoadPlan::decode`], [`super::decode`]): page
//!    CRCs, then the decoders in parallel (rayon) with the residual cid
//!    check. A file read from the store is decoded as soon as its bytes
//!    arrive, while the round's other requests are in flight
//!    ([`PostingsReader::load`]).
//!
//! [`PostingsReader::load`] composes them for async callers, running the
//! decode on rayon through [`on_rayon`]. Queries of a batch share this: a
//! row group needed by several queries is read and decoded once.

use super::ProbeError;
use super::access_plan::AccessPlan;
use super::cache::ByteLru;
use super::decode::{Job, decode};
use super::footer::{Footer, FooterCache, FooterTail, footer_per_cid, read_footer, tail_estimate};
use super::live::LiveRows;
use super::offload::on_rayon;
use super::planner::{candidate_files_layered, plan_row_groups};
use super::rows::{DecodedRowGroup, FastScan, RowGroupCache, Want};
use super::stats::{SearchStats, micros};
use crate::filter::{ContainerStats, Filter};
use crate::format::footers::FooterPin;
use crate::format::manifest::FileEntry;
use crate::format::postings_table::RESERVED_COLUMNS;
use crate::format::snapshot::Snapshot;
use crate::store::byte_ranges::{DELTA_GAP_SHARE, coalesce, coalesce_near};
use crate::store::disk_cache::{BLOCK_DATA, CachedObject, DiskCache, TierIo, Units};
use crate::store::local_read::LocalFolder;
use crate::store::parquet_reader::FOOTER_PREFETCH;
use arrow::buffer::BooleanBuffer;
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of one read filling the disk tier: 64 blocks.
pub const FILL_CHUNK: u64 = 64 * BLOCK_DATA;
/// Reads in flight while filling the disk tier.
pub const FILL_READS: usize = 16;

/// Tuning of an opened index's reader.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Byte bound of the footer cache (default 64 MiB).
    pub footer_cache_bytes: usize,
    /// Byte bound of the decoded-postings cache (default 0: off).
    pub postings_cache_bytes: usize,
    /// Tail bytes read with each footer (default 64 KiB).
    pub prefetch_hint: u64,
    /// Byte bound of the filter-columns cache (default 64 MiB): what a
    /// filtered query from storage reads to count its matches (the
    /// filter's columns, `rowid` and the `vector` offset index: about 25
    /// bytes a row held with one int32 column, so 1M rows fit), kept so
    /// that a later query with a filter on the same columns reads only
    /// what it scores.
    pub filter_cache_bytes: usize,
    /// The disk tier (default none): postings bytes kept in a local folder
    /// between the RAM caches and the store ([`DiskCache`]).
    pub disk_cache: Option<Arc<DiskCache>>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            footer_cache_bytes: 64 << 20,
            postings_cache_bytes: 0,
            prefetch_hint: FOOTER_PREFETCH,
            filter_cache_bytes: 64 << 20,
            disk_cache: None,
        }
    }
}

/// The postings table of one snapshot (the base's files, then each delta
/// table's), read with every check: footers against their pins, pages
/// against their CRC32, rows' cids against their row group's statistics.
#[derive(Debug)]
pub struct PostingsReader {
    store: Arc<dyn ObjectStore>,
    /// The object path of each postings file (`Snapshot::postings_paths`).
    paths: Arc<[Path]>,
    /// Every postings file: the base table's, then each delta table's.
    files: Vec<FileEntry>,
    /// Which rows are live: the deletions and where each layer starts.
    live: LiveRows,
    /// The footer pin of each postings file (`footers.json`), same order.
    footer_pins: Vec<FooterPin>,
    /// Footers the open read with the documents (`Snapshot::footers_ahead`),
    /// taken by the first read of each: checked and decoded then, with no
    /// request.
    footers_ahead: Mutex<Vec<Option<Bytes>>>,
    dim: usize,
    /// Width of the `code` column, in an index with codes.
    code_bytes: Option<usize>,
    /// The fast-scan scheme that transposes a query's freshly decoded
    /// codes, in an index with one.
    fast_scan: Option<Arc<FastScan>>,
    footers: FooterCache,
    row_groups: RowGroupCache,
    /// Row groups read with only a filter's payload columns
    /// ([`Want::partial_payload`]), keyed by those columns too.
    counting: ByteLru<(usize, usize, Arc<str>), DecodedRowGroup>,
    /// Upper bound on the tail read for a footer.
    prefetch: u64,
    /// Most footer bytes per cid seen in this index (see [`tail_estimate`]).
    footer_per_cid: AtomicU64,
    /// The disk tier, when there is one.
    disk: Option<Arc<DiskCache>>,
    /// The folder of a bare local store: a round's reads borrowed from
    /// memory maps ([`LocalFolder`]).
    local: Option<LocalFolder>,
}

/// The ranged read of one file: one `get_ranges`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest {
    /// Manifest index of the file.
    pub file: usize,
    /// The byte ranges of its planned row groups, sorted and coalesced.
    pub ranges: Vec<Range<u64>>,
}

/// What a load needs, given the caches: plain data from [`PostingsReader::plan`].
pub struct LoadPlan {
    /// With [`Want::partial_payload`], the filter's columns: the key of the
    /// row groups read in the filter-columns cache.
    counting: Option<Arc<str>>,
    /// Planned row groups already decoded (from the decoded-postings cache).
    pub cached: Vec<Arc<DecodedRowGroup>>,
    /// `(cid, rows)` of each row group skipped by the filter's statistics.
    pub pruned: Vec<(u32, u64)>,
    requests: Vec<FileRequest>,
    /// The object path of each request's file (for errors), same order.
    names: Vec<String>,
    /// The row groups of each request, same order.
    jobs: Vec<Vec<Job>>,
}

impl std::fmt::Debug for LoadPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadPlan")
            .field("cached", &self.cached.len())
            .field("requests", &self.requests)
            .finish()
    }
}

/// The bytes a plan's requests returned, one [`FetchedFile`] per file in
/// plan order.
#[derive(Debug)]
pub struct Fetched(Vec<FetchedFile>);

/// The bytes read of one file: one `Bytes` per range. The ranges are the
/// request's, or with a disk tier, the request's cut at its units' spans
/// ([`Units::split`]), so that a chunk is served from its entry uncopied.
#[derive(Debug)]
pub struct FetchedFile {
    pub ranges: Vec<Range<u64>>,
    pub data: Vec<Bytes>,
}

impl Fetched {
    /// How many bytes were read, over every request.
    pub fn bytes(&self) -> usize {
        self.0.iter().flat_map(|f| &f.data).map(Bytes::len).sum()
    }

    /// The bytes, one [`FetchedFile`] per request.
    pub fn into_inner(self) -> Vec<FetchedFile> {
        self.0
    }
}

impl LoadPlan {
    /// The ranged reads the plan needs, one per file.
    pub fn requests(&self) -> &[FileRequest] {
        &self.requests
    }

    /// Decode every fetched row group (in parallel on the current rayon
    /// pool), page CRCs and the residual cid check included, and, with
    /// `fast`, transpose the codes of each row group read without payload
    /// columns right after its decode (a filtered load may score only a few
    /// rows, so its row groups are transposed by the scan that needs them).
    /// Returns the freshly decoded row groups (not [`LoadPlan::cached`]).
    /// Pure compute.
    ///
    /// # Errors
    /// [`ProbeError::PageChecksum`], [`ProbeError::Decode`],
    /// [`ProbeError::CorruptIndex`]; nothing partial is returned.
    pub fn decode(
        self,
        fetched: Fetched,
        dim: usize,
        fast: Option<&FastScan>,
    ) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
        Ok(decode_files(self.names, self.jobs, fetched.0, dim, fast)?.concat())
    }
}

/// Decode each file's row groups (`names[i]`'s `jobs[i]` from `files[i]`),
/// in parallel on the current rayon pool; one list per file, in order.
fn decode_files(
    names: Vec<String>,
    jobs: Vec<Vec<Job>>,
    files: Vec<FetchedFile>,
    dim: usize,
    fast: Option<&FastScan>,
) -> Result<Vec<Vec<Arc<DecodedRowGroup>>>, ProbeError> {
    names
        .into_par_iter()
        .zip(jobs)
        .zip(files)
        .map(|((name, jobs), file)| decode_file(&name, jobs, &file, dim, fast))
        .collect()
}

/// The IO counters of one round's files, added to `stats`: requests and
/// bytes from the store, hits and bytes from the disk tier, and a round
/// when any request went to the store.
fn count_io(ios: &[TierIo], stats: &mut SearchStats) {
    for io in ios {
        stats.requests += io.store_requests;
        stats.bytes += io.store_bytes;
        stats.disk_hits += io.disk_hits;
        stats.disk_bytes += io.disk_bytes;
    }
    if ios.iter().any(|io| io.store_requests > 0) {
        stats.rounds += 1;
    }
}

/// Decode the row groups `jobs` of one file (`name`, for errors) from its
/// fetched bytes, in parallel on the current rayon pool, as
/// [`LoadPlan::decode`] does. Pure compute.
fn decode_file(
    name: &str,
    jobs: Vec<Job>,
    file: &FetchedFile,
    dim: usize,
    fast: Option<&FastScan>,
) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
    jobs.into_par_iter()
        .map(|job| {
            let rg = decode(name, job, dim, &file.ranges, &file.data)?;
            if let Some(fast) = fast.filter(|_| rg.payload.is_none()) {
                fast.prepare(&rg);
            }
            Ok(Arc::new(rg))
        })
        .collect()
}

impl PostingsReader {
    /// The reader of `snapshot`'s postings (opened from `store`), with
    /// empty caches.
    pub fn new(store: Arc<dyn ObjectStore>, snapshot: &Snapshot, options: IndexOptions) -> Self {
        PostingsReader {
            paths: snapshot.postings_paths.clone().into(),
            files: snapshot.files.clone(),
            live: LiveRows {
                deletions: Arc::clone(&snapshot.deletions),
                layer_starts: snapshot.layer_starts.clone().into(),
            },
            footer_pins: snapshot.footer_pins.clone(),
            footers_ahead: Mutex::new(snapshot.footers_ahead.clone()),
            dim: snapshot.hierarchy.dim,
            code_bytes: snapshot.quantizer.as_ref().map(|q| q.code_bytes()),
            fast_scan: FastScan::of(snapshot.quantizer.as_ref(), snapshot.hierarchy.metric),
            footers: FooterCache::new(options.footer_cache_bytes),
            row_groups: RowGroupCache::new(options.postings_cache_bytes),
            counting: ByteLru::new(options.filter_cache_bytes),
            prefetch: options.prefetch_hint,
            footer_per_cid: AtomicU64::new(0),
            local: LocalFolder::of(store.as_ref()),
            store,
            disk: options.disk_cache,
        }
    }

    /// Postings file `f` as read through the tiers: pinned by its manifest
    /// entry's size and sha256, so no cached byte of another version of the
    /// object is ever served.
    ///
    /// # Errors
    /// [`ProbeError::Store`] (not found) for an index past the manifest's files.
    fn object(&self, f: usize) -> Result<CachedObject<'_>, ProbeError> {
        match (self.files.get(f), self.paths.get(f)) {
            (Some(entry), Some(path)) => Ok(CachedObject {
                store: &self.store,
                cache: self.disk.as_ref(),
                path,
                size: entry.size,
                version: &entry.sha256,
            }),
            _ => Err(ProbeError::Store {
                path: format!("postings file #{f}"),
                source: object_store::Error::NotFound {
                    path: format!("postings file #{f}"),
                    source: "no such manifest file".into(),
                },
            }),
        }
    }

    /// How the disk tier keeps file `f`: its cached footer's units, or the
    /// fixed grid when there is no disk tier or its footer is not cached.
    fn units(&self, f: usize) -> Arc<Units> {
        match (&self.disk, self.footers.get(&f)) {
            (Some(_), Some(footer)) => Arc::clone(&footer.cache_units),
            _ => Arc::default(),
        }
    }

    /// The disk tier, when there is one.
    pub fn disk_cache(&self) -> Option<&Arc<DiskCache>> {
        self.disk.as_ref()
    }

    /// The object path of each postings file, in manifest order.
    pub fn paths(&self) -> &Arc<[Path]> {
        &self.paths
    }

    /// Every postings file (the base's, then each delta table's).
    pub fn files(&self) -> &[FileEntry] {
        &self.files
    }

    /// Which rows are live.
    pub fn live(&self) -> &LiveRows {
        &self.live
    }

    /// The store the postings are read from.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The object path of postings file `i` (empty for an unknown index).
    pub fn path(&self, i: usize) -> &Path {
        static NONE: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        self.paths
            .get(i)
            .unwrap_or_else(|| NONE.get_or_init(Path::default))
    }

    /// The first postings file, naming the postings table in errors.
    pub fn location_hint(&self) -> String {
        self.paths.first().map_or_else(String::new, Path::to_string)
    }

    /// Bytes held by the footer cache, and by the decoded-postings and
    /// filter-columns caches.
    pub fn cache_bytes(&self) -> (usize, usize) {
        let decoded = self.row_groups.bytes() + self.counting.bytes();
        (self.footers.bytes(), decoded)
    }

    /// Lift the bound of the decoded-postings cache (a preload).
    pub fn unbound_row_groups(&self) {
        self.row_groups.set_capacity(usize::MAX);
    }

    /// Transpose the fast-scan codes of every row group of `loaded` not yet
    /// transposed, on rayon. A preload reads the payload too, which
    /// [`LoadPlan::decode`] leaves to the first scan, yet every list it
    /// holds is scanned: without this, its first queries would each pay for
    /// their lists' transposition.
    pub async fn transpose(&self, loaded: Vec<Arc<DecodedRowGroup>>) -> Vec<Arc<DecodedRowGroup>> {
        let Some(fast) = self.fast_scan.clone() else {
            return loaded;
        };
        on_rayon(move || {
            loaded.par_iter().for_each(|rg| fast.prepare(rg));
            loaded
        })
        .await
    }

    /// Footers of the given files: cached ones from the cache, the others read
    /// concurrently (one round). Returns them in the order of `files`.
    ///
    /// # Errors
    /// See [`read_footer`].
    pub async fn footers(
        &self,
        files: &[usize],
        stats: &mut SearchStats,
    ) -> Result<Vec<Arc<Footer>>, ProbeError> {
        let mut out: Vec<Option<Arc<Footer>>> = files.iter().map(|f| self.footers.get(f)).collect();
        let missing: Vec<usize> = files
            .iter()
            .zip(&out)
            .filter(|(_, c)| c.is_none())
            .map(|(f, _)| *f)
            .collect();
        stats.footers_cached += (files.len() - missing.len()) as u64;
        stats.ram_bytes += out.iter().flatten().map(|f| f.bytes as u64).sum::<u64>();
        let reads = missing.iter().map(|&f| self.read_footer(f));
        let read = futures::future::try_join_all(reads).await?;
        let mut max_requests = 0;
        let mut fresh = missing.iter().zip(read).map(|(&f, (footer, fio))| {
            stats.footers_read += 1;
            stats.requests += fio.requests;
            stats.bytes += fio.bytes;
            stats.disk_hits += fio.disk_hits;
            stats.disk_bytes += fio.disk_bytes;
            stats.footer_bytes += fio.footer_len;
            max_requests = max_requests.max(fio.requests);
            let footer = Arc::new(footer);
            self.footers.insert(f, Arc::clone(&footer), footer.bytes);
            footer
        });
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            *slot = fresh.next();
        }
        drop(fresh);
        stats.rounds += max_requests;
        Ok(out.into_iter().flatten().collect())
    }

    /// The footer of file `f` the open read ahead, if it is still held
    /// (each is used once: then the footer cache holds it).
    fn take_footer_ahead(&self, f: usize) -> Option<Bytes> {
        let mut ahead = self.footers_ahead.lock().unwrap_or_else(|e| e.into_inner());
        ahead.get_mut(f).and_then(Option::take)
    }

    /// Read, check and decode the footer of file `f` (not cached here).
    async fn read_footer(&self, f: usize) -> Result<(Footer, super::footer::FooterIo), ProbeError> {
        let absent = |what: &str| ProbeError::Store {
            path: format!("{what} #{f}"),
            source: object_store::Error::NotFound {
                path: format!("{what} #{f}"),
                source: format!("no such {what}").into(),
            },
        };
        let entry = self.files.get(f).ok_or_else(|| absent("manifest file"))?;
        let pin = self
            .footer_pins
            .get(f)
            .ok_or_else(|| absent("footers.json entry"))?;
        let learned = self.footer_per_cid.load(Ordering::Relaxed);
        let tail = match self.take_footer_ahead(f) {
            Some(bytes) => FooterTail::Read(bytes),
            None => FooterTail::Fetch(tail_estimate(entry, self.prefetch, learned)),
        };
        let object = self.object(f)?;
        let (footer, fio) =
            read_footer(&object, entry, pin, self.dim, self.code_bytes, tail).await?;
        self.footer_per_cid
            .fetch_max(footer_per_cid(entry, fio.footer_len), Ordering::Relaxed);
        Ok((footer, fio))
    }

    /// Copy every postings object into the disk tier (none: nothing to
    /// do), in its units ([`Units::cover`]: read as queries read them),
    /// [`FILL_CHUNK`] bytes a read, [`FILL_READS`] reads in flight; blocks
    /// already there are not fetched again.
    ///
    /// # Errors
    /// [`ProbeError::Store`] naming the object.
    async fn fill_disk(&self, stats: &mut SearchStats) -> Result<(), ProbeError> {
        use futures::{StreamExt, TryStreamExt};
        let chunks: Vec<(usize, Vec<Range<u64>>, Arc<Units>)> = self
            .files
            .iter()
            .enumerate()
            .flat_map(|(f, e)| {
                let units = self.units(f);
                let reads = units.cover(e.size, FILL_CHUNK);
                reads.into_iter().map(move |r| (f, r, Arc::clone(&units)))
            })
            .collect();
        let ios: Vec<TierIo> = futures::stream::iter(chunks)
            .map(|(f, ranges, units)| async move {
                let path = self.path(f).to_string();
                let store = |source| ProbeError::Store {
                    path: path.clone(),
                    source,
                };
                let object = self.object(f)?;
                let (_, io) = object.get_ranges_in(&ranges, &units).await.map_err(store)?;
                Ok::<_, ProbeError>(io)
            })
            .buffer_unordered(FILL_READS)
            .try_collect()
            .await?;
        for io in ios {
            stats.requests += io.store_requests;
            stats.bytes += io.store_bytes;
            stats.disk_hits += io.disk_hits;
            stats.disk_bytes += io.disk_bytes;
        }
        Ok(())
    }

    /// Read every footer not yet cached, all at once (one round), and with
    /// a disk tier, copy every postings object into it ([`FILL_CHUNK`]
    /// bytes a read, [`FILL_READS`] reads in flight; blocks already there
    /// are not fetched again), returning once every entry is written.
    ///
    /// # Errors
    /// As [`PostingsReader::footers`].
    pub async fn warm(&self) -> Result<SearchStats, ProbeError> {
        let all: Vec<usize> = (0..self.files.len()).collect();
        let mut stats = SearchStats {
            candidate_files: all.len() as u64,
            ..SearchStats::default()
        };
        let t = Instant::now();
        self.footers(&all, &mut stats).await?;
        if let Some(disk) = &self.disk {
            // The footers' blocks filled behind their reads are in place
            // before the fill reads the same bytes again.
            disk.settle().await;
            self.fill_disk(&mut stats).await?;
            // Warmed means in place: the entries the reads left behind too.
            disk.settle().await;
        }
        stats.plan_us = micros(t.elapsed());
        Ok(stats)
    }

    /// The payload columns of the postings, from the first file's footer
    /// (an empty schema for an index without rows).
    ///
    /// # Errors
    /// As [`PostingsReader::footers`].
    pub async fn payload_schema(&self) -> Result<arrow::datatypes::Schema, ProbeError> {
        if self.files.is_empty() {
            return Ok(arrow::datatypes::Schema::empty());
        }
        let footer = self.footers(&[0], &mut SearchStats::default()).await?;
        let fields: Vec<_> = footer
            .first()
            .map(|f| f.arrow.schema().fields().iter())
            .into_iter()
            .flatten()
            .filter(|f| !RESERVED_COLUMNS.contains(&f.name().as_str()))
            .cloned()
            .collect();
        Ok(arrow::datatypes::Schema::new(fields))
    }

    /// The plan of loading the row groups of `cids` (sorted ascending) from
    /// `files` with their `footers` (as from [`PostingsReader::footers`]):
    /// row groups whose payload statistics rule out every row of `filter`
    /// are skipped (counted in [`SearchStats::row_groups_pruned`]), cached
    /// row groups are taken, the others become coalesced byte ranges per
    /// file. Pure: reads the decoded-postings cache, does no IO.
    ///
    /// # Errors
    /// [`ProbeError::RowGroupCountMismatch`] and [`ProbeError::Decode`] for a
    /// footer the decoder rejects; [`ProbeError::Filter`] for statistics the
    /// filter cannot be evaluated on.
    pub fn plan(
        &self,
        cids: &[u32],
        files: &[usize],
        footers: &[Arc<Footer>],
        want: Want,
        filter: Option<&Filter>,
        stats: &mut SearchStats,
    ) -> Result<LoadPlan, ProbeError> {
        let columns = filter.map_or(&[][..], Filter::columns);
        let counting = want
            .partial_payload()
            .then(|| Arc::<str>::from(columns.join("\u{0}")));
        let mut plan = LoadPlan {
            counting: counting.clone(),
            cached: Vec::new(),
            pruned: Vec::new(),
            requests: Vec::new(),
            names: Vec::new(),
            jobs: Vec::new(),
        };
        for (&file, footer) in files.iter().zip(footers) {
            let name = self.path(file).as_ref();
            let access: AccessPlan = plan_row_groups(&footer.facts.row_group_cids, cids);
            access.check(name, footer.arrow.metadata().num_row_groups())?;
            let may_match = filter.map(|f| may_match(name, footer, f)).transpose()?;
            let mut jobs = Vec::new();
            for rg in access.scanned() {
                stats.planned_row_groups += 1;
                if may_match.as_ref().is_some_and(|m| !m.value(rg)) {
                    stats.row_groups_pruned += 1;
                    let rows = footer.arrow.metadata().row_group(rg).num_rows();
                    let cid = footer.facts.row_group_cids.get(rg).copied();
                    plan.pruned
                        .push((cid.unwrap_or(u32::MAX), u64::try_from(rows).unwrap_or(0)));
                    continue;
                }
                let cached = self.row_groups.get(&(file, rg)).or_else(|| {
                    let key = counting.as_ref()?;
                    self.counting.get(&(file, rg, Arc::clone(key)))
                });
                match cached {
                    Some(d) if d.has(want) => {
                        stats.row_groups_cached += 1;
                        stats.ram_bytes += d.bytes() as u64;
                        plan.cached.push(d);
                    }
                    _ => jobs.push(Job::new(name, footer, (file, rg), want, columns)?),
                }
            }
            if !jobs.is_empty() {
                stats.row_groups_read += jobs.len() as u64;
                for job in &jobs {
                    let bytes = job.chunk_bytes();
                    stats.row_group_bytes += bytes.total();
                    stats.payload_bytes += bytes.payload;
                    stats.code_bytes += bytes.codes;
                    stats.vector_bytes += bytes.vectors;
                    stats.minimum_bytes += job.minimum_bytes();
                }
                stats.page_index_bytes += jobs
                    .iter()
                    .filter_map(|j| j.offset_index.as_ref())
                    .map(|(r, _)| r.end - r.start)
                    .sum::<u64>();
                // A delta's files are small: a larger gap, bounded by the file.
                // A read of a filter's columns only merges adjacent ranges:
                // the gaps between them are the other payload columns.
                let ranges = jobs.iter().flat_map(Job::all_ranges);
                let ranges = if want.partial_payload() {
                    coalesce(ranges)
                } else if self.live.layer_of(file) > 0 {
                    let gap = self.files.get(file).map_or(0, |f| f.size / DELTA_GAP_SHARE);
                    coalesce_near(ranges, gap)
                } else {
                    coalesce_near(ranges, 0)
                };
                plan.requests.push(FileRequest { file, ranges });
                plan.names.push(name.to_string());
                plan.jobs.push(jobs);
            }
        }
        Ok(plan)
    }

    /// Issue the ranged reads `requests` for exactly their bytes
    /// ([`CachedObject::get_ranges`]: through the disk tier when there is
    /// one), all files at once (one round, none when the disk tier holds
    /// every byte).
    ///
    /// # Errors
    /// [`ProbeError::Store`] naming the file.
    pub async fn fetch(
        &self,
        requests: &[FileRequest],
        stats: &mut SearchStats,
    ) -> Result<Fetched, ProbeError> {
        if let Some(local) = self.in_place() {
            return self.fetch_local(local, requests, stats).await;
        }
        let fetched =
            futures::future::try_join_all(requests.iter().map(|r| self.fetch_file(r))).await?;
        let mut data = Vec::with_capacity(fetched.len());
        let mut ios = Vec::with_capacity(fetched.len());
        for (file, io) in fetched {
            ios.push(io);
            data.push(file);
        }
        count_io(&ios, stats);
        Ok(Fetched(data))
    }

    /// The local folder a round reads in place: a bare local store without
    /// a disk tier.
    fn in_place(&self) -> Option<&LocalFolder> {
        self.local.as_ref().filter(|_| self.disk.is_none())
    }

    /// One file's ranged read ([`PostingsReader::fetch`]): through the disk
    /// tier when there is one, cut at its units' spans.
    ///
    /// # Errors
    /// [`ProbeError::Store`] naming the file.
    async fn fetch_file(&self, r: &FileRequest) -> Result<(FetchedFile, TierIo), ProbeError> {
        let path = self.path(r.file);
        let units = self.units(r.file);
        let ranges = units.split(&r.ranges);
        let (data, io) = self
            .object(r.file)?
            .get_ranges_in(&ranges, &units)
            .await
            .map_err(|source| ProbeError::Store {
                path: path.to_string(),
                source,
            })?;
        Ok((FetchedFile { ranges, data }, io))
    }

    /// [`PostingsReader::fetch`] from a bare local folder: the round's
    /// ranges borrowed from the files' memory maps ([`LocalFolder::read`]).
    /// The stats count a request per range, as the store's `get_ranges`
    /// would be counted.
    async fn fetch_local(
        &self,
        local: &LocalFolder,
        requests: &[FileRequest],
        stats: &mut SearchStats,
    ) -> Result<Fetched, ProbeError> {
        let reads = requests
            .iter()
            .map(|r| (self.path(r.file).clone(), r.ranges.clone()))
            .collect();
        let data = local
            .read(reads)
            .await
            .map_err(|(path, source)| ProbeError::Store {
                path: path.to_string(),
                source,
            })?;
        let ranges: usize = requests.iter().map(|r| r.ranges.len()).sum();
        if ranges > 0 {
            stats.rounds += 1;
        }
        stats.requests += ranges as u64;
        stats.bytes += data.iter().flatten().map(|b| b.len() as u64).sum::<u64>();
        let files = requests
            .iter()
            .zip(data)
            .map(|(r, data)| FetchedFile {
                ranges: r.ranges.clone(),
                data,
            })
            .collect();
        Ok(Fetched(files))
    }

    /// Keep freshly decoded row groups in the decoded-postings cache, or
    /// those holding only the filter's columns `counting` in the
    /// filter-columns cache.
    fn remember(&self, decoded: &[Arc<DecodedRowGroup>], counting: Option<Arc<str>>) {
        let weight = |d: &DecodedRowGroup| {
            self.fast_scan
                .as_ref()
                .map_or_else(|| d.bytes(), |fast| fast.weight(d))
        };
        if let Some(key) = counting {
            for d in decoded {
                let key = (d.file, d.row_group, Arc::clone(&key));
                self.counting.insert(key, Arc::clone(d), weight(d));
            }
            return;
        }
        for d in decoded {
            self.row_groups
                .insert((d.file, d.row_group), Arc::clone(d), weight(d));
        }
    }

    /// Load the `want`ed columns of every row group whose cid is in `cids`
    /// (sorted ascending): footers, plan and fetch here, the decode on rayon
    /// ([`on_rayon`]). Adds the IO counters and the plan, fetch and decode
    /// times to `stats`.
    ///
    /// # Errors
    /// Footer, plan, store, decode and [`ProbeError::CorruptIndex`] errors;
    /// nothing partial is returned.
    pub async fn load(
        &self,
        cids: &[u32],
        want: Want,
        stats: &mut SearchStats,
    ) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
        Ok(self.load_filtered(cids, want, None, stats).await?.0)
    }

    /// [`PostingsReader::load`], skipping the row groups whose statistics
    /// rule out every row of `filter`; also returns their `(cid, rows)`.
    ///
    /// # Errors
    /// As [`PostingsReader::load`], and [`ProbeError::Filter`].
    pub async fn load_filtered(
        &self,
        cids: &[u32],
        want: Want,
        filter: Option<&Filter>,
        stats: &mut SearchStats,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, Vec<(u32, u64)>), ProbeError> {
        let t = Instant::now();
        let files = candidate_files_layered(&self.files, &self.live.layer_starts, cids);
        stats.candidate_files += files.len() as u64;
        let footers = self.footers(&files, stats).await?;
        let plan = self.plan(cids, &files, &footers, want, filter, stats)?;
        stats.plan_us += micros(t.elapsed());
        let (loaded, pruned) = self.execute(plan, stats).await?;
        Ok((loaded, pruned))
    }

    /// Fetch a plan's requests and decode them on rayon; the fresh row
    /// groups are remembered, and returned after the cached ones.
    ///
    /// A file whose bytes came from the store is decoded as soon as they
    /// arrive, while the round's other requests are still in flight (each
    /// waits its own time to first byte and transfer), so that only the
    /// last file's decode follows the round. Files read in place (a local
    /// folder) or from the disk tier arrive at once and are decoded
    /// together, in one hand-over to rayon. `fetch_us` is the time until
    /// the last file arrived; `decode_us` sums the decodes, overlapped or
    /// not.
    async fn execute(
        &self,
        mut plan: LoadPlan,
        stats: &mut SearchStats,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, Vec<(u32, u64)>), ProbeError> {
        let mut loaded = std::mem::take(&mut plan.cached);
        let pruned = std::mem::take(&mut plan.pruned);
        let counting = plan.counting.take();
        let (decoded, took) = if self.in_place().is_some() {
            let t = Instant::now();
            let fetched = self.fetch(plan.requests(), stats).await?;
            stats.fetch_us += micros(t.elapsed());
            if plan.requests.is_empty() {
                return Ok((loaded, pruned));
            }
            let (per_file, took) = self
                .decode_on_rayon(plan.names, plan.jobs, fetched.0)
                .await?;
            (per_file.concat(), took)
        } else {
            self.fetch_decoding(plan, stats).await?
        };
        stats.decode_us += micros(took);
        self.remember(&decoded, counting);
        loaded.extend(decoded);
        Ok((loaded, pruned))
    }

    /// The files `names` with their `jobs` decoded from `files` in one
    /// hand-over to rayon (none for no file), one list per file, with the
    /// time the decode took.
    async fn decode_on_rayon(
        &self,
        names: Vec<String>,
        jobs: Vec<Vec<Job>>,
        files: Vec<FetchedFile>,
    ) -> Result<(Vec<Vec<Arc<DecodedRowGroup>>>, Duration), ProbeError> {
        if files.is_empty() {
            return Ok((Vec::new(), Duration::ZERO));
        }
        let (dim, fast) = (self.dim, self.fast_scan.clone());
        on_rayon(move || {
            let t = Instant::now();
            decode_files(names, jobs, files, dim, fast.as_deref()).map(|d| (d, t.elapsed()))
        })
        .await
    }

    /// [`PostingsReader::execute`] through the store or the disk tier: each
    /// file fetched, and decoded on rayon as soon as its bytes came from
    /// the store; those the disk tier held whole are decoded together at
    /// the end.
    async fn fetch_decoding(
        &self,
        plan: LoadPlan,
        stats: &mut SearchStats,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, Duration), ProbeError> {
        /// A file decoded on arrival, or its bytes held for the end.
        enum Arrived {
            Decoded(Vec<Arc<DecodedRowGroup>>, Duration),
            Held(String, Vec<Job>, FetchedFile),
        }
        let t = Instant::now();
        let LoadPlan {
            requests,
            names,
            jobs,
            ..
        } = plan;
        let (dim, fast) = (self.dim, self.fast_scan.clone());
        let files = requests
            .iter()
            .zip(names)
            .zip(jobs)
            .map(|((r, name), jobs)| {
                let fast = fast.clone();
                async move {
                    let (file, io) = self.fetch_file(r).await?;
                    let arrived = t.elapsed();
                    if io.store_requests == 0 {
                        return Ok((Arrived::Held(name, jobs, file), io, arrived));
                    }
                    let (decoded, took) = on_rayon(move || {
                        let t = Instant::now();
                        decode_file(&name, jobs, &file, dim, fast.as_deref())
                            .map(|d| (d, t.elapsed()))
                    })
                    .await?;
                    Ok::<_, ProbeError>((Arrived::Decoded(decoded, took), io, arrived))
                }
            });
        let arrived = futures::future::try_join_all(files).await?;
        let mut ios = Vec::with_capacity(arrived.len());
        let mut per_file = Vec::with_capacity(arrived.len());
        let (mut took, mut last) = (Duration::ZERO, Duration::ZERO);
        let (mut held_at, mut names, mut jobs, mut held) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, (file, io, at)) in arrived.into_iter().enumerate() {
            ios.push(io);
            last = last.max(at);
            match file {
                Arrived::Decoded(d, t) => {
                    per_file.push(d);
                    took += t;
                }
                Arrived::Held(name, js, f) => {
                    per_file.push(Vec::new());
                    held_at.push(i);
                    names.push(name);
                    jobs.push(js);
                    held.push(f);
                }
            }
        }
        count_io(&ios, stats);
        stats.fetch_us += micros(last);
        let (rest, rest_took) = self.decode_on_rayon(names, jobs, held).await?;
        for (i, d) in held_at.into_iter().zip(rest) {
            per_file[i] = d;
        }
        // In plan order, as a decode of the whole round returns them.
        Ok((per_file.concat(), took + rest_took))
    }

    /// Every row group of postings file `file` (manifest order), its `cid`
    /// and `rowid` and the columns `want` asks for, read and checked as a
    /// query reads them. The reader of whole files (compaction, the live
    /// ids of a refresh, `verify`), so no reader of postings checks less
    /// than the probe. Not remembered in the decoded-postings cache.
    ///
    /// # Errors
    /// [`ProbeError`]: a footer pin, page checksum, cid or store failure,
    /// naming the object, row group and page.
    pub async fn read_file(
        &self,
        file: usize,
        want: Want,
    ) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
        let mut stats = SearchStats::default();
        let footers = self.footers(&[file], &mut stats).await?;
        let mut cids: Vec<u32> = footers
            .iter()
            .flat_map(|f| f.facts.row_group_cids.iter().copied())
            .collect();
        cids.sort_unstable();
        cids.dedup();
        let mut plan = self.plan(&cids, &[file], &footers, want, None, &mut stats)?;
        let fetched = self.fetch(plan.requests(), &mut stats).await?;
        let mut groups = std::mem::take(&mut plan.cached);
        let dim = self.dim;
        groups.extend(on_rayon(move || plan.decode(fetched, dim, None)).await?);
        Ok(groups)
    }

    /// Every live rowid of every layer (deleted rows left out), read through
    /// [`PostingsReader::read_file`] (`cid` and `rowid` only), 16 files at a
    /// time.
    ///
    /// # Errors
    /// As [`PostingsReader::read_file`].
    pub async fn live_rowids(&self) -> Result<Vec<i64>, ProbeError> {
        use futures::{StreamExt, TryStreamExt};
        let per_file: Vec<Vec<i64>> = futures::stream::iter(0..self.files.len())
            .map(|file| async move {
                let layer = self.live.layer_of(file);
                let groups = self.read_file(file, Want::default()).await?;
                Ok::<_, ProbeError>(
                    groups
                        .iter()
                        .flat_map(|g| g.rowids.iter().copied())
                        .filter(|&id| !self.live.deletions.is_deleted(id, layer))
                        .collect(),
                )
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        Ok(per_file.concat())
    }
}

/// Per row group of `footer`: whether its payload statistics leave any row
/// that may satisfy `filter`.
fn may_match(name: &str, footer: &Footer, filter: &Filter) -> Result<BooleanBuffer, ProbeError> {
    let stats = ContainerStats::row_groups(
        footer.arrow.metadata(),
        footer.arrow.schema(),
        filter.columns(),
    )
    .and_then(|s| filter.prune(&s));
    stats.map_err(|source| ProbeError::Filter {
        path: name.to_string(),
        source,
    })
}
