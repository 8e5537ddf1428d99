//! The executor: turns selected CIDs into decoded row groups, then scans them.
//!
//! 1. Candidate files from the manifest ([`candidate_files`]); their footers
//!    from the cache or, for the uncached ones, ALL AT ONCE (round 1).
//! 2. One [`AccessPlan`] per file from the footer's cid statistics, checked
//!    against the footer's row-group count.
//! 3. Planned row groups not in the decoded-postings cache: a push decoder per
//!    row group says which column-chunk byte ranges it needs (`cid`, `rowid`,
//!    `vector`, payload only when asked); the ranges of a file are coalesced
//!    where adjacent and handed to one `get_ranges`, all files at once (round 2).
//! 4. Decoding in parallel (rayon) with the residual cid check: a row whose
//!    cid differs from its row group's statistics is [`ProbeError::CorruptIndex`].
//!
//! Queries of a batch share this: a row group needed by several queries is
//! read and decoded once. [`scan`] then computes one query's distances.

use super::ProbeError;
use super::access_plan::AccessPlan;
use super::cache::ByteLru;
use super::footer::{Footer, FooterCache, footer_per_cid, read_footer, tail_estimate};
use super::planner::{candidate_files, plan_row_groups};
use crate::distance::Metric;
use crate::format::footers::FooterPin;
use crate::format::manifest::FileEntry;
use crate::format::postings_table::{CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN};
use crate::postings::page_crc::check_column_chunk;
use crate::topk::TopK;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The rows of one decoded row group (one cid).
#[derive(Debug)]
pub struct DecodedRowGroup {
    pub cid: u32,
    pub rowids: Vec<i64>,
    /// `rowids.len() × dim`, row-major.
    pub vectors: Vec<f32>,
    /// The payload columns, when they were asked for.
    pub payload: Option<RecordBatch>,
    /// Manifest index of the file, and row group within it (for errors).
    pub file: usize,
    pub row_group: usize,
}

impl DecodedRowGroup {
    /// Approximate memory held (the decoded-postings cache bound).
    pub fn bytes(&self) -> usize {
        self.rowids.len() * 8
            + self.vectors.len() * 4
            + self
                .payload
                .as_ref()
                .map_or(0, RecordBatch::get_array_memory_size)
            + 64
    }
}

/// The decoded-postings cache: (manifest file index, row group) → rows.
pub type RowGroupCache = ByteLru<(usize, usize), DecodedRowGroup>;

/// What loading cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadIo {
    pub candidate_files: u64,
    pub footers_read: u64,
    pub footers_cached: u64,
    pub planned_row_groups: u64,
    pub row_groups_read: u64,
    pub row_groups_cached: u64,
    pub requests: u64,
    pub bytes: u64,
    /// Exact lengths of the footers read (what a perfect tail guess fetches).
    pub footer_bytes: u64,
    /// Column-chunk bytes of the row groups read (before coalescing).
    pub row_group_bytes: u64,
    /// Dependent rounds of requests (0, 1 or 2; more only for footers larger
    /// than the tail read for them).
    pub rounds: u64,
}

/// Time spent loading.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadTimes {
    /// Candidate files, footers (including their IO) and access plans.
    pub plan: Duration,
    /// Row-group IO.
    pub fetch: Duration,
    /// Decoding and the residual check.
    pub decode: Duration,
}

/// Everything the executor reads from: the postings table of one index.
#[derive(Debug, Clone, Copy)]
pub struct Postings<'a> {
    pub store: &'a dyn ObjectStore,
    /// Folder of `manifest.json`; file paths are relative to it.
    pub dir: &'a Path,
    pub files: &'a [FileEntry],
    pub dim: usize,
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
    with_payload: bool,
    decoder: ParquetPushDecoder,
    ranges: Vec<Range<u64>>,
    /// The column whose chunk each range is (for checksum errors).
    columns: Vec<String>,
}

impl<'a> Postings<'a> {
    /// The object path of manifest file `i`.
    pub fn path(&self, i: usize) -> Path {
        let rel = self.files.get(i).map_or("", |f| f.path.as_str());
        self.dir.parts().chain(Path::from(rel).parts()).collect()
    }

    /// Footers of the given files: cached ones from the cache, the others read
    /// concurrently (one round). Returns them in the order of `files`.
    ///
    /// # Errors
    /// See [`read_footer`].
    pub async fn footers(
        &self,
        files: &[usize],
        io: &mut LoadIo,
    ) -> Result<Vec<Arc<Footer>>, ProbeError> {
        let mut out: Vec<Option<Arc<Footer>>> = files.iter().map(|f| self.footers.get(f)).collect();
        let missing: Vec<usize> = files
            .iter()
            .zip(&out)
            .filter(|(_, c)| c.is_none())
            .map(|(f, _)| *f)
            .collect();
        io.footers_cached += (files.len() - missing.len()) as u64;
        let reads = missing.iter().map(|&f| async move {
            let entry = self.files.get(f).ok_or_else(|| ProbeError::Store {
                path: format!("manifest file #{f}"),
                source: object_store::Error::NotFound {
                    path: format!("manifest file #{f}"),
                    source: "no such manifest entry".into(),
                },
            })?;
            let learned = self.footer_per_cid.load(Ordering::Relaxed);
            let tail = tail_estimate(entry, self.prefetch, learned);
            let pin = self.footer_pins.get(f).ok_or_else(|| ProbeError::Store {
                path: format!("footers.json entry #{f}"),
                source: object_store::Error::NotFound {
                    path: format!("footers.json entry #{f}"),
                    source: "no such footer pin".into(),
                },
            })?;
            let (footer, fio) =
                read_footer(self.store, &self.path(f), entry, pin, self.dim, tail).await?;
            self.footer_per_cid
                .fetch_max(footer_per_cid(entry, fio.footer_len), Ordering::Relaxed);
            Ok::<_, ProbeError>((footer, fio))
        });
        let read = futures::future::try_join_all(reads).await?;
        let mut max_requests = 0;
        let mut fresh = missing.iter().zip(read).map(|(&f, (footer, fio))| {
            io.footers_read += 1;
            io.requests += fio.requests;
            io.bytes += fio.bytes;
            io.footer_bytes += fio.footer_len;
            max_requests = max_requests.max(fio.requests);
            let footer = Arc::new(footer);
            self.footers.insert(f, Arc::clone(&footer), footer.bytes);
            footer
        });
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            *slot = fresh.next();
        }
        drop(fresh);
        io.rounds += max_requests;
        Ok(out.into_iter().flatten().collect())
    }

    /// Load every row group whose cid is in `cids` (sorted ascending).
    ///
    /// # Errors
    /// Footer, plan, store, decode and [`ProbeError::CorruptIndex`] errors;
    /// nothing partial is returned.
    pub async fn load(
        &self,
        cids: &[u32],
        with_payload: bool,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, LoadIo, LoadTimes), ProbeError> {
        let mut io = LoadIo::default();
        let mut times = LoadTimes::default();
        let t = Instant::now();
        let files = candidate_files(self.files, cids);
        io.candidate_files = files.len() as u64;
        let footers = self.footers(&files, &mut io).await?;
        let mut loaded = Vec::new();
        let mut jobs: Vec<(usize, Vec<Job>)> = Vec::new();
        for (&file, footer) in files.iter().zip(&footers) {
            let name = self.path(file).to_string();
            let plan: AccessPlan = plan_row_groups(&footer.row_group_cids, cids);
            plan.check(&name, footer.arrow.metadata().num_row_groups())?;
            let mut file_jobs = Vec::new();
            for rg in plan.scanned() {
                io.planned_row_groups += 1;
                match self.row_groups.get(&(file, rg)) {
                    Some(d) if !with_payload || d.payload.is_some() => {
                        io.row_groups_cached += 1;
                        loaded.push(d);
                    }
                    _ => file_jobs.push(job(&name, footer, file, rg, with_payload)?),
                }
            }
            if !file_jobs.is_empty() {
                jobs.push((file, file_jobs));
            }
        }
        times.plan = t.elapsed();

        let t = Instant::now();
        let fetches = jobs.iter().map(|(file, file_jobs)| {
            let ranges = coalesce(file_jobs.iter().flat_map(|j| j.ranges.iter().cloned()));
            async move {
                let path = self.path(*file);
                let data = self
                    .store
                    .get_ranges(&path, &ranges)
                    .await
                    .map_err(|source| ProbeError::Store {
                        path: path.to_string(),
                        source,
                    })?;
                Ok::<_, ProbeError>((ranges, data))
            }
        });
        let fetched = futures::future::try_join_all(fetches).await?;
        if !fetched.is_empty() {
            io.rounds += 1;
        }
        io.row_group_bytes = jobs
            .iter()
            .flat_map(|(_, js)| js.iter().flat_map(|j| &j.ranges))
            .map(|r| r.end - r.start)
            .sum();
        for (ranges, data) in &fetched {
            io.requests += ranges.len() as u64;
            io.bytes += data.iter().map(|b| b.len() as u64).sum::<u64>();
        }
        times.fetch = t.elapsed();

        let t = Instant::now();
        let work: Vec<_> = jobs
            .into_iter()
            .zip(&fetched)
            .flat_map(|((_, file_jobs), (ranges, data))| {
                file_jobs
                    .into_iter()
                    .map(move |j| (j, ranges.as_slice(), data.as_slice()))
            })
            .collect();
        io.row_groups_read = work.len() as u64;
        let decoded: Vec<Arc<DecodedRowGroup>> = work
            .into_par_iter()
            .map(|(j, ranges, data)| {
                let name = self.path(j.file).to_string();
                decode(&name, j, self.dim, ranges, data).map(Arc::new)
            })
            .collect::<Result<_, _>>()?;
        for d in decoded {
            self.row_groups
                .insert((d.file, d.row_group), Arc::clone(&d), d.bytes());
            loaded.push(d);
        }
        times.decode = t.elapsed();
        Ok((loaded, io, times))
    }
}

/// Build the push decoder of one row group and ask it which ranges it needs.
fn job(
    name: &str,
    footer: &Footer,
    file: usize,
    rg: usize,
    with_payload: bool,
) -> Result<Job, ProbeError> {
    let err = |source| ProbeError::Decode {
        path: name.to_string(),
        row_group: rg,
        source,
    };
    let mut roots = vec![footer.cid_root, footer.rowid_root, footer.vector_root];
    if with_payload {
        roots.extend(&footer.payload_roots);
    }
    let metadata = footer.arrow.metadata();
    let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
    let rows = metadata.row_group(rg).num_rows();
    let decoder = ParquetPushDecoderBuilder::new_with_metadata(footer.arrow.clone())
        .with_projection(mask)
        .with_row_groups(vec![rg])
        .with_batch_size(usize::try_from(rows).unwrap_or(usize::MAX).max(1))
        .build()
        .map_err(err)?;
    let ranges: Vec<Range<u64>> = decoder.scan_plan().map(|p| p.range).collect();
    // Each planned range must be exactly one column chunk: page checksums
    // are checked chunk by chunk.
    let chunks = metadata.row_group(rg).columns();
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
                .ok_or_else(|| {
                    err(parquet::errors::ParquetError::General(format!(
                        "planned range {r:?} is not one column chunk"
                    )))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cid = footer.row_group_cids.get(rg).copied().unwrap_or(u32::MAX);
    Ok(Job {
        file,
        row_group: rg,
        cid,
        with_payload,
        decoder,
        ranges,
        columns,
    })
}

/// Sort and merge adjacent or overlapping ranges.
fn coalesce(ranges: impl Iterator<Item = Range<u64>>) -> Vec<Range<u64>> {
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
fn slice(ranges: &[Range<u64>], data: &[Bytes], want: &Range<u64>) -> Option<Bytes> {
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
    job.decoder
        .push_ranges(std::mem::take(&mut job.ranges), bufs)
        .map_err(perr)?;
    let mut out = DecodedRowGroup {
        cid: job.cid,
        rowids: Vec::new(),
        vectors: Vec::new(),
        payload: None,
        file: job.file,
        row_group: rg,
    };
    let mut payloads = Vec::new();
    loop {
        let batch = match job.decoder.try_decode().map_err(perr)? {
            DecodeResult::Data(b) => b,
            DecodeResult::Finished => break,
            DecodeResult::NeedsData(r) => return Err(err(format!("needs unplanned ranges {r:?}"))),
        };
        let column = |n: &str| {
            batch
                .column_by_name(n)
                .ok_or_else(|| err(format!("no column {n}")))
        };
        let cids = column(CID_COLUMN)?
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| err("cid is not Int32".into()))?;
        let first_row = out.rowids.len();
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
        let rowids = column(ROWID_COLUMN)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| err("rowid is not Int64".into()))?;
        out.rowids.extend(rowids.values().iter());
        let vectors = column(VECTOR_COLUMN)?
            .as_fixed_size_binary_opt()
            .filter(|v| v.value_length() as usize == dim * 4 && v.null_count() == 0)
            .ok_or_else(|| err(format!("vector is not FixedSizeBinary({})", dim * 4)))?;
        let bytes = vectors
            .value_data()
            .get(..vectors.len() * dim * 4)
            .ok_or_else(|| err("vector buffer too short".into()))?;
        out.vectors.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|&i| {
                let n = batch.schema_ref().field(i).name().as_str();
                n != CID_COLUMN && n != ROWID_COLUMN && n != VECTOR_COLUMN
            })
            .collect();
        payloads.push(batch.project(&keep).map_err(|e| err(e.to_string()))?);
    }
    if job.with_payload {
        let schema = payloads.first().map_or_else(
            || Arc::new(arrow::datatypes::Schema::empty()),
            RecordBatch::schema,
        );
        let batch =
            arrow::compute::concat_batches(&schema, &payloads).map_err(|e| err(e.to_string()))?;
        out.payload = Some(batch);
    }
    Ok(out)
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
pub fn scan_batch(
    metric: Metric,
    dim: usize,
    queries: &[f32],
    cids: &[&[u32]],
    loaded: &[Arc<DecodedRowGroup>],
    k: usize,
) -> Vec<TopK> {
    // The queries probing each loaded row group, ascending.
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
    let empty = || -> Vec<TopK> { (0..cids.len()).map(|_| TopK::new(k)).collect() };
    loaded
        .par_iter()
        .zip(&probing)
        .filter(|(_, qs)| !qs.is_empty())
        .fold(empty, |mut tops, (rg, qs)| {
            for (vectors, rowids) in rg
                .vectors
                .chunks(SCAN_BLOCK * dim)
                .zip(rg.rowids.chunks(SCAN_BLOCK))
            {
                for &q in qs {
                    let q = q as usize;
                    let query = &queries[q * dim..(q + 1) * dim];
                    let top = &mut tops[q];
                    for (v, &rowid) in vectors.chunks_exact(dim).zip(rowids) {
                        top.push(metric.prepared_distance(query, v), rowid);
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

/// The payload of the row holding `rowid` among `loaded` row groups of `cids`,
/// as a JSON object (column name → value).
///
/// # Errors
/// [`ProbeError::UnsupportedPayload`] for a column type without a JSON mapping.
pub fn payload_of(
    postings: &Postings<'_>,
    loaded: &[Arc<DecodedRowGroup>],
    cids: &[u32],
    rowid: i64,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, ProbeError> {
    for rg in loaded
        .iter()
        .filter(|rg| cids.binary_search(&rg.cid).is_ok())
    {
        let (Some(batch), Some(row)) = (&rg.payload, rg.rowids.iter().position(|&r| r == rowid))
        else {
            continue;
        };
        let mut map = serde_json::Map::new();
        for (field, col) in batch.schema_ref().fields().iter().zip(batch.columns()) {
            let value =
                json_value(col.as_ref(), row).ok_or_else(|| ProbeError::UnsupportedPayload {
                    path: postings.path(rg.file).to_string(),
                    column: field.name().clone(),
                    data_type: field.data_type().to_string(),
                })?;
            map.insert(field.name().clone(), value);
        }
        return Ok(Some(map));
    }
    Ok(None)
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
                    vectors,
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
                scan_batch(Metric::L2, dim, &queries, &probed, &loaded, k)
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
