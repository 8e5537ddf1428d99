//! The executor: turns selected CIDs into decoded row groups, then scans them.
//! Loading is split in the manner of arrow-rs's push decoder, so that IO and
//! compute never mix:
//!
//! 1. **Footers** (IO, round 1): candidate files from the manifest
//!    ([`candidate_files_layered`]: the base's and every delta table's); their footers from the cache or, for the uncached
//!    ones, ALL AT ONCE ([`Postings::footers`]).
//! 2. **Plan** (pure, [`Postings::plan`]): one [`AccessPlan`] per file from the
//!    footer's cid statistics, checked against the footer's row-group count;
//!    planned row groups found in the decoded-postings cache are taken from it;
//!    for the others a push decoder per row group says which column-chunk byte
//!    ranges it needs (`cid`, `rowid`, `vector`, payload only when asked), and
//!    the ranges of a file are coalesced where adjacent. The result, a
//!    [`LoadPlan`], is plain data.
//! 3. **Fetch** (IO, round 2, [`Postings::fetch`]): one `get_ranges` per file
//!    of the plan, all files at once; requests, bytes and rounds are counted.
//! 4. **Decode** (pure, CPU, [`LoadPlan::decode`]): page CRCs, then the
//!    decoders in parallel (rayon) with the residual cid check: a row whose cid
//!    differs from its row group's statistics is [`ProbeError::CorruptIndex`].
//!
//! [`Postings::load`] composes them for async callers, running the decode on
//! rayon through [`on_rayon`] so that no CPU step runs on a tokio worker.
//! Queries of a batch share this: a row group needed by several queries is
//! read and decoded once. [`scan_batch`] then computes the distances.

use super::ProbeError;
use super::access_plan::AccessPlan;
use super::cache::ByteLru;
use super::footer::{Footer, FooterCache, footer_per_cid, read_footer, tail_estimate};
use super::planner::{candidate_files_layered, plan_row_groups};
use super::stats::{SearchStats, micros};
use crate::distance::Metric;
use crate::filter::{ContainerStats, Filter};
use crate::format::footers::FooterPin;
use crate::format::manifest::FileEntry;
use crate::format::page_crc::{check_column_chunk, plain_values};
use crate::format::postings_table::{CID_COLUMN, CODE_COLUMN, ROWID_COLUMN, VECTOR_COLUMN};
use crate::store::parquet_reader::get_exact_ranges;
use crate::topk::TopK;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer, ScalarBuffer};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use parquet::file::page_index::index_reader::decode_offset_index;
use parquet::file::page_index::offset_index::PageLocation;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The rows of one decoded row group (one cid): the columns that were asked
/// for ([`Want`]).
#[derive(Debug)]
pub struct DecodedRowGroup {
    pub cid: u32,
    pub rowids: Vec<i64>,
    /// `rowids.len() × dim`, row-major, viewed in place in the decoded
    /// column's buffer where it is 4-byte aligned (one copy at most); empty
    /// when the vectors were not read.
    pub vectors: ScalarBuffer<f32>,
    /// `rowids.len() × code bytes`, row-major (the `code` column's buffer,
    /// not copied); `None` when the codes were not read.
    pub codes: Option<Buffer>,
    /// Where each data page of the `vector` column lies (its offset index),
    /// read with the codes when the vectors are not ([`Want::pages`]): what
    /// an exact re-rank fetches.
    pub vector_pages: Option<Vec<PageLocation>>,
    /// The payload columns, when they were asked for.
    pub payload: Option<RecordBatch>,
    /// Manifest index of the file, and row group within it (for errors).
    pub file: usize,
    pub row_group: usize,
}

/// The columns of a row group a load reads (`cid` and `rowid` always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// The f32 `vector` column.
    pub vectors: bool,
    /// The `code` column and the `vector` column's offset index.
    pub codes: bool,
    /// The payload columns.
    pub payload: bool,
}

impl Want {
    /// Whether the `vector` column's offset index is read: with the codes,
    /// unless the vectors themselves are (a re-rank then reads no page).
    pub fn pages(self) -> bool {
        self.codes && !self.vectors
    }
}

impl DecodedRowGroup {
    /// Approximate memory held (the decoded-postings cache bound).
    pub fn bytes(&self) -> usize {
        self.rowids.len() * 8
            + self.vectors.len() * 4
            + self.codes.as_ref().map_or(0, Buffer::len)
            + self.vector_pages.as_ref().map_or(0, |p| p.len() * 24)
            + self
                .payload
                .as_ref()
                .map_or(0, RecordBatch::get_array_memory_size)
            + 64
    }

    /// Whether it holds every column `want` asks for.
    pub fn has(&self, want: Want) -> bool {
        // A row group has rows (footer contract): no vectors read is empty.
        (!want.vectors || !self.vectors.is_empty())
            && (!want.codes || self.codes.is_some())
            && (!want.pages() || self.vector_pages.is_some())
            && (!want.payload || self.payload.is_some())
    }
}

/// The decoded-postings cache: (manifest file index, row group) → rows.
pub type RowGroupCache = ByteLru<(usize, usize), DecodedRowGroup>;

/// Run the CPU-bound `f` on the rayon pool and await its result, so that the
/// calling tokio worker stays free for IO and other tasks meanwhile. A panic
/// in `f` resumes in the caller (as if `f` had run there).
pub async fn on_rayon<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The receiver is gone only when the caller dropped the search.
        let _ = tx.send(out);
    });
    match rx.await {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // `rayon::spawn` runs every job and the job always sends: a closed
        // channel cannot happen short of the pool being torn down.
        Err(_) => std::panic::panic_any("rayon dropped a spawned job"),
    }
}

/// Everything the executor reads from: the postings table of one index.
#[derive(Debug, Clone, Copy)]
pub struct Postings<'a> {
    pub store: &'a dyn ObjectStore,
    /// The object path of each manifest file (`format::snapshot::Snapshot::postings_paths`).
    pub paths: &'a [Path],
    /// Every postings file: the base table's, then each delta table's.
    pub files: &'a [FileEntry],
    /// Where each table's files start in `files` (`[0]` without deltas).
    pub layer_starts: &'a [usize],
    pub dim: usize,
    /// Width of the `code` column, in an index with codes.
    pub code_bytes: Option<usize>,
    pub footers: &'a FooterCache,
    pub row_groups: &'a RowGroupCache,
    /// The footer pin of each manifest file (`footers.json`), same order.
    pub footer_pins: &'a [FooterPin],
    /// Upper bound on the tail read for a footer.
    pub prefetch: u64,
    /// Most footer bytes per cid seen in this index (see [`tail_estimate`]).
    pub footer_per_cid: &'a AtomicU64,
}

/// One planned row group still to fetch.
struct Job {
    file: usize,
    row_group: usize,
    cid: u32,
    want: Want,
    /// The decoder of the columns not read directly (payload, or chunks
    /// of another encoding); `None` when every column is direct.
    decoder: Option<ParquetPushDecoder>,
    ranges: Vec<Range<u64>>,
    /// The column whose chunk each range is (for checksum errors).
    columns: Vec<String>,
    /// The `vector` column's offset index, and the byte range of its chunk
    /// (which every page must lie in), when the codes are read.
    offset_index: Option<(Range<u64>, Range<u64>)>,
    /// Column chunks read straight from their pages ([`plain_values`]):
    /// `cid`, `rowid`, `vector` and `code` when PLAIN and uncompressed, as
    /// the writer makes them. Other encodings go through the decoder.
    direct: Vec<(&'static str, Range<u64>)>,
    /// Rows of the row group (footer).
    rows: usize,
}

/// The ranged read of one file: one `get_ranges`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest {
    /// Manifest index of the file.
    pub file: usize,
    /// The byte ranges of its planned row groups, sorted and coalesced.
    pub ranges: Vec<Range<u64>>,
}

/// What a load needs, given the caches: plain data from [`Postings::plan`].
pub struct LoadPlan {
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

/// The bytes a [`LoadPlan`]'s requests returned, one `Vec` per file in plan
/// order, one `Bytes` per coalesced range.
#[derive(Debug)]
pub struct Fetched(Vec<Vec<Bytes>>);

impl Fetched {
    /// The bytes, one `Vec` per request.
    pub fn into_inner(self) -> Vec<Vec<Bytes>> {
        self.0
    }
}

impl LoadPlan {
    /// The ranged reads the plan needs, one per file.
    pub fn requests(&self) -> &[FileRequest] {
        &self.requests
    }

    /// Decode every fetched row group (in parallel on the current rayon
    /// pool), page CRCs and the residual cid check included. Returns the
    /// freshly decoded row groups (not [`LoadPlan::cached`]). Pure compute.
    ///
    /// # Errors
    /// [`ProbeError::PageChecksum`], [`ProbeError::Decode`],
    /// [`ProbeError::CorruptIndex`]; nothing partial is returned.
    pub fn decode(
        self,
        fetched: Fetched,
        dim: usize,
    ) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
        let files: Vec<(String, FileRequest, Vec<Bytes>)> = self
            .names
            .into_iter()
            .zip(self.requests)
            .zip(fetched.0)
            .map(|((name, r), data)| (name, r, data))
            .collect();
        let jobs: Vec<(usize, Job)> = self
            .jobs
            .into_iter()
            .enumerate()
            .flat_map(|(i, js)| js.into_iter().map(move |j| (i, j)))
            .collect();
        jobs.into_par_iter()
            .map(|(i, job)| {
                let (name, request, data) = &files[i];
                decode(name, job, dim, &request.ranges, data).map(Arc::new)
            })
            .collect()
    }
}

impl<'a> Postings<'a> {
    /// The object path of manifest file `i` (empty for an unknown index).
    pub fn path(&self, i: usize) -> &'a Path {
        static NONE: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        self.paths
            .get(i)
            .unwrap_or_else(|| NONE.get_or_init(Path::default))
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
        let reads = missing.iter().map(|&f| async move {
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
            let tail = tail_estimate(entry, self.prefetch, learned);
            let (footer, fio) = read_footer(
                self.store,
                self.path(f),
                entry,
                pin,
                self.dim,
                self.code_bytes,
                tail,
            )
            .await?;
            self.footer_per_cid
                .fetch_max(footer_per_cid(entry, fio.footer_len), Ordering::Relaxed);
            Ok::<_, ProbeError>((footer, fio))
        });
        let read = futures::future::try_join_all(reads).await?;
        let mut max_requests = 0;
        let mut fresh = missing.iter().zip(read).map(|(&f, (footer, fio))| {
            stats.footers_read += 1;
            stats.requests += fio.requests;
            stats.bytes += fio.bytes;
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

    /// The plan of loading the row groups of `cids` (sorted ascending) from
    /// `files` with their `footers` (as from [`Postings::footers`]): row
    /// groups whose payload statistics rule out every row of `filter` are
    /// skipped (counted in [`SearchStats::row_groups_pruned`]), cached row
    /// groups are taken, the others become coalesced byte ranges per file.
    /// Pure: reads the decoded-postings cache, does no IO.
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
        let mut plan = LoadPlan {
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
                match self.row_groups.get(&(file, rg)) {
                    Some(d) if d.has(want) => {
                        stats.row_groups_cached += 1;
                        plan.cached.push(d);
                    }
                    _ => jobs.push(job(name, footer, file, rg, want)?),
                }
            }
            if !jobs.is_empty() {
                stats.row_groups_read += jobs.len() as u64;
                stats.row_group_bytes += jobs
                    .iter()
                    .flat_map(|j| j.ranges.iter().chain(j.direct.iter().map(|(_, r)| r)))
                    .map(|r| r.end - r.start)
                    .sum::<u64>();
                stats.page_index_bytes += jobs
                    .iter()
                    .filter_map(|j| j.offset_index.as_ref())
                    .map(|(r, _)| r.end - r.start)
                    .sum::<u64>();
                let ranges = coalesce(jobs.iter().flat_map(|j| {
                    j.ranges
                        .iter()
                        .cloned()
                        .chain(j.offset_index.iter().map(|(r, _)| r.clone()))
                        .chain(j.direct.iter().map(|(_, r)| r.clone()))
                }));
                plan.requests.push(FileRequest { file, ranges });
                plan.names.push(name.to_string());
                plan.jobs.push(jobs);
            }
        }
        Ok(plan)
    }

    /// Issue the ranged reads of a plan ([`LoadPlan::requests`]) for
    /// exactly their bytes ([`get_exact_ranges`]), all files at once (one
    /// round).
    ///
    /// # Errors
    /// [`ProbeError::Store`] naming the file.
    pub async fn fetch(
        &self,
        requests: &[FileRequest],
        stats: &mut SearchStats,
    ) -> Result<Fetched, ProbeError> {
        let fetches = requests.iter().map(|r| async move {
            let path = self.path(r.file);
            get_exact_ranges(self.store, path, &r.ranges)
                .await
                .map_err(|source| ProbeError::Store {
                    path: path.to_string(),
                    source,
                })
        });
        let fetched = futures::future::try_join_all(fetches).await?;
        if !fetched.is_empty() {
            stats.rounds += 1;
        }
        for (data, r) in fetched.iter().zip(requests) {
            stats.requests += r.ranges.len() as u64;
            stats.bytes += data.iter().map(|b| b.len() as u64).sum::<u64>();
        }
        Ok(Fetched(fetched))
    }

    /// Keep freshly decoded row groups in the decoded-postings cache.
    pub fn remember(&self, decoded: &[Arc<DecodedRowGroup>]) {
        for d in decoded {
            self.row_groups
                .insert((d.file, d.row_group), Arc::clone(d), d.bytes());
        }
    }

    /// Load the `want`ed columns of every row group whose cid is in `cids`
    /// (sorted ascending): footers, plan and fetch here, the decode on rayon
    /// ([`on_rayon`]).
    /// Adds the IO counters and the plan, fetch and decode times to `stats`.
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

    /// [`Postings::load`], skipping the row groups whose statistics rule out
    /// every row of `filter`; also returns their `(cid, rows)`.
    ///
    /// # Errors
    /// As [`Postings::load`], and [`ProbeError::Filter`].
    pub async fn load_filtered(
        &self,
        cids: &[u32],
        want: Want,
        filter: Option<&Filter>,
        stats: &mut SearchStats,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, Vec<(u32, u64)>), ProbeError> {
        let t = Instant::now();
        let files = candidate_files_layered(self.files, self.layer_starts, cids);
        stats.candidate_files += files.len() as u64;
        let footers = self.footers(&files, stats).await?;
        let mut plan = self.plan(cids, &files, &footers, want, filter, stats)?;
        stats.plan_us += micros(t.elapsed());
        let t = Instant::now();
        let fetched = self.fetch(plan.requests(), stats).await?;
        stats.fetch_us += micros(t.elapsed());
        let mut loaded = std::mem::take(&mut plan.cached);
        let pruned = std::mem::take(&mut plan.pruned);
        if plan.requests.is_empty() {
            return Ok((loaded, pruned));
        }
        let dim = self.dim;
        let (decoded, took) = on_rayon(move || {
            let t = Instant::now();
            plan.decode(fetched, dim).map(|d| (d, t.elapsed()))
        })
        .await?;
        stats.decode_us += micros(took);
        self.remember(&decoded);
        loaded.extend(decoded);
        Ok((loaded, pruned))
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

/// Build the push decoder of one row group and ask it which ranges it needs
/// (plus the `vector` offset index when [`Want::pages`]).
fn job(name: &str, footer: &Footer, file: usize, rg: usize, want: Want) -> Result<Job, ProbeError> {
    let err = |source| ProbeError::Decode {
        path: name.to_string(),
        row_group: rg,
        source,
    };
    let general = |msg: String| err(parquet::errors::ParquetError::General(msg));
    let metadata = footer.arrow.metadata();
    let chunks = metadata.row_group(rg).columns();
    let chunk_of = |name: &str| chunks.iter().find(|c| c.column_path().parts() == [name]);
    let mut roots = Vec::new();
    let mut direct = Vec::new();
    let mut wanted = vec![
        (CID_COLUMN, footer.facts.cid_root),
        (ROWID_COLUMN, footer.facts.rowid_root),
    ];
    if want.vectors {
        wanted.push((VECTOR_COLUMN, footer.facts.vector_root));
    }
    if want.codes {
        let root = footer
            .facts
            .code_root
            .ok_or_else(|| general(format!("no {CODE_COLUMN} column")))?;
        wanted.push((CODE_COLUMN, root));
    }
    for (name, root) in wanted {
        match chunk_of(name) {
            Some(c)
                if c.compression() == parquet::basic::Compression::UNCOMPRESSED
                    && c.dictionary_page_offset().is_none() =>
            {
                let (start, len) = c.byte_range();
                direct.push((name, start..start + len));
            }
            _ => roots.push(root),
        }
    }
    if want.payload {
        roots.extend(&footer.facts.payload_roots);
    }
    let rows = metadata.row_group(rg).num_rows();
    let decoder = if roots.is_empty() {
        None
    } else {
        let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
        let decoder = ParquetPushDecoderBuilder::new_with_metadata(footer.arrow.clone())
            .with_projection(mask)
            .with_row_groups(vec![rg])
            .with_batch_size(usize::try_from(rows).unwrap_or(usize::MAX).max(1))
            .build()
            .map_err(err)?;
        Some(decoder)
    };
    let ranges: Vec<Range<u64>> = decoder
        .iter()
        .flat_map(|d| d.scan_plan().map(|p| p.range))
        .collect();
    // Each planned range must be exactly one column chunk: page checksums
    // are checked chunk by chunk.
    let columns = ranges
        .iter()
        .map(|r| {
            chunks
                .iter()
                .find(|c| {
                    let (start, len) = c.byte_range();
                    start == r.start && start + len == r.end
                })
                .map(|c| c.column_path().string())
                .ok_or_else(|| general(format!("planned range {r:?} is not one column chunk")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let offset_index = if want.pages() {
        let chunk = chunk_of(VECTOR_COLUMN)
            .ok_or_else(|| general(format!("no {VECTOR_COLUMN} column chunk")))?;
        let (offset, length) = chunk
            .offset_index_offset()
            .zip(chunk.offset_index_length())
            .and_then(|(o, l)| Some((u64::try_from(o).ok()?, u64::try_from(l).ok()?)))
            .ok_or_else(|| general(format!("the {VECTOR_COLUMN} column has no offset index")))?;
        let (start, len) = chunk.byte_range();
        Some((offset..offset + length, start..start + len))
    } else {
        None
    };
    let cid = footer
        .facts
        .row_group_cids
        .get(rg)
        .copied()
        .unwrap_or(u32::MAX);
    Ok(Job {
        file,
        row_group: rg,
        cid,
        want,
        decoder,
        ranges,
        columns,
        offset_index,
        direct,
        rows: usize::try_from(rows).unwrap_or(usize::MAX),
    })
}

/// The page locations of an offset index read for row group `rg` of `rows`
/// rows, checked: pages start at row 0, ascending, inside the rows, and lie
/// inside the column chunk `chunk`.
fn page_locations(
    name: &str,
    rg: usize,
    rows: usize,
    bytes: &[u8],
    chunk: &Range<u64>,
) -> Result<Vec<PageLocation>, ProbeError> {
    let err = |msg: String| ProbeError::Decode {
        path: name.to_string(),
        row_group: rg,
        source: parquet::errors::ParquetError::General(format!(
            "{VECTOR_COLUMN} offset index: {msg}"
        )),
    };
    let index = decode_offset_index(bytes).map_err(|e| err(e.to_string()))?;
    let pages = index.page_locations().clone();
    let mut next_row = 0i64;
    for (i, p) in pages.iter().enumerate() {
        let end = p.offset.checked_add(i64::from(p.compressed_page_size));
        let inside = p.compressed_page_size > 0
            && u64::try_from(p.offset).is_ok_and(|o| o >= chunk.start)
            && end
                .and_then(|e| u64::try_from(e).ok())
                .is_some_and(|e| e <= chunk.end);
        let ordered = if i == 0 {
            p.first_row_index == 0
        } else {
            p.first_row_index > next_row
        };
        if !inside || !ordered || p.first_row_index >= rows as i64 {
            return Err(err(format!(
                "page {i} (offset {}, {} bytes, first row {}) is not inside the chunk {chunk:?} and rows 0..{rows} in order",
                p.offset, p.compressed_page_size, p.first_row_index
            )));
        }
        next_row = p.first_row_index;
    }
    if pages.is_empty() {
        return Err(err("no pages".into()));
    }
    Ok(pages)
}

/// Sort and merge adjacent or overlapping ranges.
pub(super) fn coalesce(ranges: impl Iterator<Item = Range<u64>>) -> Vec<Range<u64>> {
    let mut v: Vec<Range<u64>> = ranges.collect();
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The bytes of `want` out of the coalesced `ranges`/`data`.
pub(super) fn slice(ranges: &[Range<u64>], data: &[Bytes], want: &Range<u64>) -> Option<Bytes> {
    let i = ranges
        .partition_point(|r| r.start <= want.start)
        .checked_sub(1)?;
    let (r, d) = (ranges.get(i)?, data.get(i)?);
    if want.end > r.end {
        return None;
    }
    let (s, e) = (
        (want.start - r.start) as usize,
        (want.end - r.start) as usize,
    );
    (e <= d.len()).then(|| d.slice(s..e))
}

fn decode(
    name: &str,
    mut job: Job,
    dim: usize,
    ranges: &[Range<u64>],
    data: &[Bytes],
) -> Result<DecodedRowGroup, ProbeError> {
    let rg = job.row_group;
    let err = |msg: String| ProbeError::Decode {
        path: name.to_string(),
        row_group: rg,
        source: parquet::errors::ParquetError::General(msg),
    };
    let perr = |source| ProbeError::Decode {
        path: name.to_string(),
        row_group: rg,
        source,
    };
    let mut bufs = Vec::with_capacity(job.ranges.len());
    for (r, column) in job.ranges.iter().zip(&job.columns) {
        let buf =
            slice(ranges, data, r).ok_or_else(|| err(format!("range {r:?} was not fetched")))?;
        check_column_chunk(&buf).map_err(|source| ProbeError::PageChecksum {
            path: name.to_string(),
            row_group: rg,
            column: column.clone(),
            source,
        })?;
        bufs.push(buf);
    }
    if let Some(decoder) = job.decoder.as_mut() {
        decoder
            .push_ranges(std::mem::take(&mut job.ranges), bufs)
            .map_err(perr)?;
    }
    let mut rowids: Vec<i64> = Vec::new();
    let (mut direct_vectors, mut direct_codes, mut direct_cids) = (None, None, false);
    for (column, r) in &job.direct {
        let buf =
            slice(ranges, data, r).ok_or_else(|| err(format!("range {r:?} was not fetched")))?;
        let values = plain_values(&buf).map_err(|source| ProbeError::PageChecksum {
            path: name.to_string(),
            row_group: rg,
            column: column.to_string(),
            source,
        })?;
        let width = match *column {
            VECTOR_COLUMN => Some(dim * 4),
            CID_COLUMN => Some(4),
            ROWID_COLUMN => Some(8),
            _ => None,
        };
        if job.rows == 0
            || !values.len().is_multiple_of(job.rows)
            || width.is_some_and(|w| values.len() != w * job.rows)
        {
            return Err(err(format!(
                "{column} pages hold {} value bytes for {} rows",
                values.len(),
                job.rows
            )));
        }
        match *column {
            CID_COLUMN => {
                let expected = i32::try_from(job.cid).unwrap_or(-1).to_le_bytes();
                if let Some(row) = values.chunks_exact(4).position(|c| c != expected) {
                    let c = &values[row * 4..row * 4 + 4];
                    return Err(ProbeError::CorruptIndex {
                        path: name.to_string(),
                        row_group: rg,
                        row,
                        found: i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                        expected: job.cid.into(),
                    });
                }
                direct_cids = true;
            }
            ROWID_COLUMN => rowids.extend(
                values
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
            ),
            VECTOR_COLUMN => direct_vectors = Some(Buffer::from(values)),
            _ => direct_codes = Some(Buffer::from(values)),
        }
    }
    let direct_rowids = !rowids.is_empty();
    let mut vectors: Vec<Buffer> = Vec::new();
    let mut codes: Vec<Buffer> = Vec::new();
    let mut payloads = Vec::new();
    let mut decoded_rows = 0;
    while let Some(decoder) = job.decoder.as_mut() {
        let batch = match decoder.try_decode().map_err(perr)? {
            DecodeResult::Data(b) => b,
            DecodeResult::Finished => break,
            DecodeResult::NeedsData(r) => return Err(err(format!("needs unplanned ranges {r:?}"))),
        };
        let first_row = decoded_rows;
        decoded_rows += batch.num_rows();
        let column = |n: &str| {
            batch
                .column_by_name(n)
                .ok_or_else(|| err(format!("no column {n}")))
        };
        if !direct_cids {
            let cids = column(CID_COLUMN)?
                .as_primitive_opt::<Int32Type>()
                .ok_or_else(|| err("cid is not Int32".into()))?;
            for (i, c) in cids.iter().enumerate() {
                if c != i32::try_from(job.cid).ok() {
                    return Err(ProbeError::CorruptIndex {
                        path: name.to_string(),
                        row_group: rg,
                        row: first_row + i,
                        found: c.map_or(-1, i64::from),
                        expected: job.cid.into(),
                    });
                }
            }
        }
        let fixed = |n: &str, width: Option<usize>| -> Result<Buffer, ProbeError> {
            let a = column(n)?
                .as_fixed_size_binary_opt()
                .filter(|a| width.is_none_or(|w| a.value_length() as usize == w))
                .filter(|a| a.null_count() == 0)
                .ok_or_else(|| err(format!("{n} is not a required FixedSizeBinary")))?;
            let bytes = a.len() * a.value_length() as usize;
            let values = a.values();
            if values.len() < bytes {
                return Err(err(format!(
                    "{n} buffer holds {} of {bytes} bytes",
                    values.len()
                )));
            }
            Ok(values.slice_with_length(0, bytes))
        };
        if job.want.vectors && direct_vectors.is_none() {
            vectors.push(fixed(VECTOR_COLUMN, Some(dim * 4))?);
        }
        if job.want.codes && direct_codes.is_none() {
            codes.push(fixed(CODE_COLUMN, None)?);
        }
        if !direct_rowids {
            let rowid_array = column(ROWID_COLUMN)?
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| err("rowid is not Int64".into()))?;
            rowids.extend(rowid_array.values().iter());
        }
        if job.want.payload {
            let keep: Vec<usize> = (0..batch.num_columns())
                .filter(|&i| {
                    let n = batch.schema_ref().field(i).name().as_str();
                    ![CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN, CODE_COLUMN].contains(&n)
                })
                .collect();
            payloads.push(batch.project(&keep).map_err(|e| err(e.to_string()))?);
        }
    }
    if rowids.len() != job.rows {
        return Err(err(format!(
            "decoded {} rows, the footer says {}",
            rowids.len(),
            job.rows
        )));
    }
    vectors.extend(direct_vectors);
    codes.extend(direct_codes);
    let vector_pages = match &job.offset_index {
        Some((range, chunk)) => {
            let bytes = slice(ranges, data, range)
                .ok_or_else(|| err(format!("offset index {range:?} was not fetched")))?;
            Some(page_locations(name, rg, rowids.len(), &bytes, chunk)?)
        }
        None => None,
    };
    let payload = if job.want.payload {
        let schema = payloads.first().map_or_else(
            || Arc::new(arrow::datatypes::Schema::empty()),
            RecordBatch::schema,
        );
        Some(arrow::compute::concat_batches(&schema, &payloads).map_err(|e| err(e.to_string()))?)
    } else {
        None
    };
    Ok(DecodedRowGroup {
        cid: job.cid,
        rowids,
        vectors: f32_rows(vectors),
        codes: job.want.codes.then(|| concat_buffers(codes)),
        vector_pages,
        payload,
        file: job.file,
        row_group: rg,
    })
}

/// One buffer of the decoded parts: the part itself when there is one (no
/// copy), else their concatenation.
fn concat_buffers(mut parts: Vec<Buffer>) -> Buffer {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    let mut out = arrow::buffer::MutableBuffer::new(parts.iter().map(Buffer::len).sum());
    for p in &parts {
        out.extend_from_slice(p.as_slice());
    }
    out.into()
}

/// Little-endian f32 values viewed in place in the decoded bytes when they
/// are 4-byte aligned (the usual case: arrow allocates 64-byte aligned
/// buffers), else copied once.
fn f32_rows(parts: Vec<Buffer>) -> ScalarBuffer<f32> {
    let bytes = concat_buffers(parts);
    let in_place = cfg!(target_endian = "little") && bytes.as_ptr().align_offset(4) == 0;
    if in_place {
        let len = bytes.len() / 4;
        return ScalarBuffer::new(bytes, 0, len);
    }
    bytes
        .as_slice()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect::<Vec<f32>>()
        .into()
}

/// The queries probing each loaded row group (`cids[q]`: the probed cids of
/// query `q`), ascending.
pub(super) fn probing_queries(cids: &[&[u32]], loaded: &[Arc<DecodedRowGroup>]) -> Vec<Vec<u32>> {
    let mut by_cid: Vec<(u32, usize)> = loaded
        .iter()
        .enumerate()
        .map(|(i, rg)| (rg.cid, i))
        .collect();
    by_cid.sort_unstable();
    let mut probing: Vec<Vec<u32>> = vec![Vec::new(); loaded.len()];
    for (q, qc) in cids.iter().enumerate() {
        for &c in qc.iter() {
            let first = by_cid.partition_point(|&(x, _)| x < c);
            for &(_, g) in by_cid[first..].iter().take_while(|&&(x, _)| x == c) {
                probing[g].push(q as u32);
            }
        }
    }
    probing
}

/// Rows of a row group scanned together for every query that probes it: 64
/// rows of 128-d f32 are 32 KiB, read from memory once and then from cache.
const SCAN_BLOCK: usize = 64;

/// The `k` nearest rows of every query of a batch (`queries` row-major,
/// `cids[q]` the sorted probed cids of query `q`) among the `loaded` row
/// groups, **list-major**: each row group is read block by block, and every
/// query that probes its cid scans the block while it is in cache. A row
/// group probed by many queries of a batch (nprobe · batch / nlist of them on
/// average) costs one pass over memory instead of one per query, so a batch
/// is bound by the distance computations, not by memory bandwidth. Row groups
/// run in parallel on rayon; per-task selections are merged, and since
/// [`TopK`] keeps the k smallest `(distance, rowid)` whatever the order, the
/// result does not depend on the thread count.
///
/// `masks[g]`, when given, keeps only the rows of `loaded[g]` whose bit is
/// set (a filter's matches); an empty `masks` keeps every row.
pub fn scan_batch(
    metric: Metric,
    dim: usize,
    queries: &[f32],
    cids: &[&[u32]],
    loaded: &[Arc<DecodedRowGroup>],
    masks: &[Option<BooleanBuffer>],
    k: usize,
) -> Vec<TopK> {
    let probing = probing_queries(cids, loaded);
    let empty = || -> Vec<TopK> { (0..cids.len()).map(|_| TopK::new(k)).collect() };
    loaded
        .par_iter()
        .enumerate()
        .zip(&probing)
        .filter(|(_, qs)| !qs.is_empty())
        .fold(empty, |mut tops, ((g, rg), qs)| {
            let mask = masks.get(g).and_then(Option::as_ref);
            for (block, (vectors, rowids)) in rg
                .vectors
                .chunks(SCAN_BLOCK * dim)
                .zip(rg.rowids.chunks(SCAN_BLOCK))
                .enumerate()
            {
                let first = block * SCAN_BLOCK;
                for &q in qs {
                    let q = q as usize;
                    let query = &queries[q * dim..(q + 1) * dim];
                    let top = &mut tops[q];
                    for (i, (v, &rowid)) in vectors.chunks_exact(dim).zip(rowids).enumerate() {
                        if mask.is_none_or(|m| m.value(first + i)) {
                            top.push(metric.prepared_distance(query, v), rowid);
                        }
                    }
                }
            }
            tops
        })
        .reduce(empty, |mut a, b| {
            a.iter_mut().zip(b).for_each(|(x, y)| x.merge(y));
            a
        })
}

/// The payload of each of `rowids` (rows of the probed `cids` among
/// `loaded`), as one batch with a row per rowid in order; `None` when the
/// index has no payload or a rowid is not among the loaded rows.
///
/// # Errors
/// [`ProbeError::PayloadMismatch`] naming a file of `paths` when the loaded
/// row groups' payloads differ in schema.
pub fn payload_rows(
    paths: &[Path],
    loaded: &[Arc<DecodedRowGroup>],
    cids: &[u32],
    rowids: &[i64],
) -> Result<Option<RecordBatch>, ProbeError> {
    let mut batches: Vec<&RecordBatch> = Vec::new();
    let mut file = 0;
    let mut slot: Vec<Option<usize>> = vec![None; loaded.len()];
    let mut at = Vec::with_capacity(rowids.len());
    for &rowid in rowids {
        let found = loaded.iter().enumerate().find_map(|(i, rg)| {
            if cids.binary_search(&rg.cid).is_err() {
                return None;
            }
            let batch = rg.payload.as_ref()?;
            let row = rg.rowids.iter().position(|&r| r == rowid)?;
            Some((i, batch, row))
        });
        if let Some((i, _, _)) = found {
            file = loaded[i].file;
        }
        let Some((i, batch, row)) = found else {
            return Ok(None);
        };
        let b = *slot[i].get_or_insert_with(|| {
            batches.push(batch);
            batches.len() - 1
        });
        at.push((b, row));
    }
    if batches.is_empty() {
        return Ok(None);
    }
    if batches[0].num_columns() == 0 {
        // No payload columns: a row per hit, and nothing in it.
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(at.len()));
        return RecordBatch::try_new_with_options(batches[0].schema(), Vec::new(), &options)
            .map(Some)
            .map_err(|e| ProbeError::PayloadMismatch {
                path: paths.get(file).map_or_else(String::new, Path::to_string),
                detail: e.to_string(),
            });
    }
    arrow::compute::interleave_record_batch(&batches, &at)
        .map(Some)
        .map_err(|e| ProbeError::PayloadMismatch {
            path: paths.get(file).map_or_else(String::new, Path::to_string),
            detail: e.to_string(),
        })
}

/// Each row of `payload` as a JSON object.
///
/// # Errors
/// [`ProbeError::UnsupportedPayload`] naming `path`, the column and its type
/// for a type without a JSON mapping.
pub fn json_rows(
    path: &str,
    payload: &RecordBatch,
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, ProbeError> {
    (0..payload.num_rows())
        .map(|row| {
            let mut map = serde_json::Map::new();
            for (field, col) in payload.schema_ref().fields().iter().zip(payload.columns()) {
                let value = json_value(col.as_ref(), row).ok_or_else(|| {
                    ProbeError::UnsupportedPayload {
                        path: path.to_string(),
                        column: field.name().clone(),
                        data_type: field.data_type().to_string(),
                    }
                })?;
                map.insert(field.name().clone(), value);
            }
            Ok(map)
        })
        .collect()
}

/// One cell as JSON; `None` for types without a mapping.
fn json_value(col: &dyn Array, row: usize) -> Option<serde_json::Value> {
    use arrow::datatypes as t;
    use serde_json::Value;
    if col.is_null(row) {
        return Some(Value::Null);
    }
    Some(match col.data_type() {
        DataType::Boolean => Value::from(col.as_boolean().value(row)),
        DataType::Int8 => Value::from(col.as_primitive::<t::Int8Type>().value(row)),
        DataType::Int16 => Value::from(col.as_primitive::<t::Int16Type>().value(row)),
        DataType::Int32 => Value::from(col.as_primitive::<t::Int32Type>().value(row)),
        DataType::Int64 => Value::from(col.as_primitive::<t::Int64Type>().value(row)),
        DataType::UInt8 => Value::from(col.as_primitive::<t::UInt8Type>().value(row)),
        DataType::UInt16 => Value::from(col.as_primitive::<t::UInt16Type>().value(row)),
        DataType::UInt32 => Value::from(col.as_primitive::<t::UInt32Type>().value(row)),
        DataType::UInt64 => Value::from(col.as_primitive::<t::UInt64Type>().value(row)),
        DataType::Float32 => Value::from(col.as_primitive::<t::Float32Type>().value(row)),
        DataType::Float64 => Value::from(col.as_primitive::<t::Float64Type>().value(row)),
        DataType::Utf8 => Value::from(col.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Value::from(col.as_string::<i64>().value(row)),
        DataType::Utf8View => Value::from(col.as_string_view().value(row)),
        // ISO 8601 text, as arrow casts them (`2024-01-01T00:00:00`, with
        // the column's offset when it has a time zone).
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            let text = arrow::compute::cast(&col.slice(row, 1), &DataType::Utf8).ok()?;
            Value::from(text.as_string::<i32>().value(0))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Row groups of 0–150 rows (spanning several scan blocks) for 6 cids,
    /// two row groups for some cids, with rowids in a shuffled order and
    /// duplicated vectors to force distance ties.
    fn row_groups(dim: usize, rng: &mut ChaCha8Rng) -> Vec<Arc<DecodedRowGroup>> {
        let mut next = 0i64;
        (0..9u32)
            .map(|i| {
                let rows = rng.random_range(0..150);
                let mut vectors: Vec<f32> = (0..rows * dim)
                    .map(|_| rng.random_range(-1i32..=1) as f32)
                    .collect();
                if rows > 2 {
                    let (a, b) = vectors.split_at_mut(dim);
                    b[..dim].copy_from_slice(a);
                }
                let rowids = (0..rows)
                    .map(|_| {
                        next += 7;
                        (next * 31) % 10_007
                    })
                    .collect();
                Arc::new(DecodedRowGroup {
                    cid: i % 6,
                    rowids,
                    vectors: vectors.into(),
                    codes: None,
                    vector_pages: None,
                    payload: None,
                    file: 0,
                    row_group: i as usize,
                })
            })
            .collect()
    }

    #[test]
    fn list_major_batch_scan_equals_per_query_scans_for_any_thread_count() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let dim = 5;
        let loaded = row_groups(dim, &mut rng);
        let nq = 40;
        let queries: Vec<f32> = (0..nq * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let cids: Vec<Vec<u32>> = (0..nq)
            .map(|q| {
                let mut c: Vec<u32> = (0..6u32)
                    .filter(|&c| !(q as u32 + c).is_multiple_of(3))
                    .collect();
                c.sort_unstable();
                c
            })
            .collect();
        let probed: Vec<&[u32]> = cids.iter().map(Vec::as_slice).collect();
        let k = 7;
        // Reference: one query at a time, every row of its cids.
        let expected: Vec<Vec<(i64, f32)>> = (0..nq)
            .map(|q| {
                let query = &queries[q * dim..(q + 1) * dim];
                let mut all: Vec<(f32, i64)> = loaded
                    .iter()
                    .filter(|rg| cids[q].contains(&rg.cid))
                    .flat_map(|rg| {
                        rg.vectors
                            .chunks_exact(dim)
                            .zip(&rg.rowids)
                            .map(|(v, &r)| (Metric::L2.distance(query, v), r))
                    })
                    .collect();
                all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                all.into_iter().take(k).map(|(d, r)| (r, d)).collect()
            })
            .collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let got: Vec<Vec<(i64, f32)>> = pool.install(|| {
                scan_batch(Metric::L2, dim, &queries, &probed, &loaded, &[], k)
                    .into_iter()
                    .map(|t| {
                        t.into_sorted()
                            .into_iter()
                            .map(|n| (n.rowid, n.distance))
                            .collect()
                    })
                    .collect()
            });
            assert_eq!(got, expected, "{threads} threads");
        }
    }

    #[test]
    fn coalesce_merges_adjacent_and_overlapping_only() {
        let got = coalesce(vec![10..20, 0..5, 5..8, 19..25, 30..31].into_iter());
        assert_eq!(got, vec![0..8, 10..25, 30..31]);
        let data: Vec<Bytes> = got
            .iter()
            .map(|r| Bytes::from((r.start..r.end).map(|b| b as u8).collect::<Vec<_>>()))
            .collect();
        assert_eq!(
            slice(&got, &data, &(12..15)).unwrap().as_ref(),
            &[12, 13, 14]
        );
        assert!(slice(&got, &data, &(7..11)).is_none());
        assert!(slice(&got, &data, &(26..27)).is_none());
    }
}
