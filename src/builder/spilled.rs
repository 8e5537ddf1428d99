//! The two stages of a single-node build that run under its memory limit,
//! through a [`BucketSpill`]: assign every row of a source to its leaf and
//! group the rows by root bucket ([`assign_all`], spilling buckets to local
//! files past the limit), then write every bucket, sorted, as postings files
//! ([`write_all`]). The build, refresh and compaction call them; a
//! distributed driver calls the underlying [`stages`] instead.

use std::sync::Arc;

use arrow::array::AsArray;
use object_store::ObjectStore;

use super::error::BuildError;
use super::offload::blocking;
use super::source::vector_source::{VectorBatch, VectorSource};
use super::spill::BucketSpill;
use super::stages::{self, BuildParams};

/// The squared L2 distance of assigned rows to their leaf centroids: what
/// `refresh` compares with the build's to report drift.
#[derive(Debug, Clone, Default)]
pub struct AssignError {
    pub sum: f64,
    pub rows: u64,
    /// Rows assigned to each list.
    pub lists: Vec<u64>,
    /// The ids each part held, by part (empty unless the source's ids come
    /// from the data: what `source-ids.parquet` records).
    pub part_ids: Vec<Vec<i64>>,
}

impl AssignError {
    /// Mean per row (0 for no rows).
    pub fn mean(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.sum / self.rows as f64
        }
    }
}

/// Step 4 of a build with a trained `model`: assign every row of `source`
/// (the `cached` parts as they are, the others read again) to its leaf,
/// encode its code, and group the rows by root bucket into `spill`. Ids
/// from the data must be unique, and none may be in `indexed` (the live ids
/// of the index a refresh adds to; empty for a build): checked as each part
/// is read and once all are assigned. `on_rows` is told the rows of each
/// part assigned. `truth`, when given, sees every row assigned (the
/// calibration's exact neighbours, [`super::calibrate`]).
///
/// # Errors
/// The source's errors, [`BuildError::DuplicateId`],
/// [`BuildError::IdAlreadyIndexed`], and spill failures.
#[allow(clippy::too_many_arguments)]
pub async fn assign_all(
    source: &dyn VectorSource,
    mut cached: Vec<Option<VectorBatch>>,
    hierarchy: &Arc<crate::kmeans::Hierarchy>,
    quantizer: Option<&Arc<crate::quant::Quantizer>>,
    schema: &arrow::datatypes::SchemaRef,
    params: &BuildParams,
    spill: &mut BucketSpill,
    indexed: &std::collections::HashSet<i64>,
    truth: &mut Option<super::calibrate::GroundTruth>,
    on_rows: impl Fn(u64),
) -> Result<AssignError, BuildError> {
    let skip_invalid = source.definition().skip_invalid;
    cached.resize_with(source.parts(), || None);
    let mut error = AssignError::default();
    for (p, slot) in cached.iter_mut().enumerate() {
        let batch = match slot.take() {
            Some(b) => b,
            None => stages::read_part(source, p, params.metric, skip_invalid).await?,
        };
        if source.ids_may_repeat() {
            if let Some(&id) = batch.rowids.iter().find(|id| indexed.contains(id)) {
                let rows = source.rows_with_id(p, id).await?;
                return Err(BuildError::IdAlreadyIndexed {
                    id,
                    path: source.part_name(p),
                    row: rows.first().copied().unwrap_or_default(),
                });
            }
            error.part_ids.resize_with(source.parts(), Vec::new);
            error.part_ids[p] = batch.rowids.clone();
        }
        let n = batch.len() as u64;
        let (h, q) = (Arc::clone(hierarchy), quantizer.cloned());
        let (mode, schema) = (params.assign, schema.clone());
        let mut seen = truth.take();
        let (grouped, sum, cids, seen) = blocking(move || {
            let assigned = stages::assign(&h, mode, q.as_deref(), &schema, batch)?;
            let sum = stages::quantization_error(&h, &assigned)?;
            let cids: Vec<u32> = assigned
                .column(0)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .values()
                .iter()
                .map(|&c| c as u32)
                .collect();
            if let Some(gt) = seen.as_mut() {
                let rowids = stages::rowid_values(&assigned)?;
                gt.observe(&stages::vector_values(&assigned)?, &cids, &rowids);
            }
            let grouped = stages::group_by_root(&h.cid_offsets, &assigned)?;
            Ok((grouped, sum, cids, seen))
        })
        .await?;
        *truth = seen;
        error.sum += sum;
        error.rows += n;
        error
            .lists
            .resize(hierarchy.leaves.len() / hierarchy.dim.max(1), 0);
        for c in cids {
            if let Some(l) = error.lists.get_mut(c as usize) {
                *l += 1;
            }
        }
        for (bucket, b) in grouped {
            spill.push(bucket as usize, b)?;
        }
        on_rows(n);
    }
    let ids: Vec<i64> = error.part_ids.concat();
    if let Some(id) = blocking(move || Ok(first_repeated(ids))).await? {
        return Err(duplicate_id(source, id).await);
    }
    Ok(error)
}

/// Step 5: write every root bucket of `spill` (sorted by `params.sort_by`,
/// then rowid) as postings files of `target`; `on_bucket` is told each
/// bucket done.
///
/// # Errors
/// Spill, writer and storage failures.
pub async fn write_all(
    store: &Arc<dyn ObjectStore>,
    target: &stages::PostingsTarget,
    spill: &mut BucketSpill,
    params: &BuildParams,
    on_bucket: impl Fn(u64),
) -> Result<Vec<crate::format::manifest::FileEntry>, BuildError> {
    use futures::StreamExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let handle = tokio::runtime::Handle::current();
    let failed = Arc::new(AtomicBool::new(false));
    // Sorting a bucket and encoding its files is CPU work: each bucket runs
    // on a blocking thread, its uploads driven from there, as many buckets
    // at a time as the build has threads, the largest first so that the
    // small ones fill in around it. The next bucket starts as soon as any
    // one is done (unordered: an ordered stream would hold a finished
    // bucket's slot until every bucket before it is done, leaving a
    // thread idle); the files are put in bucket order at the end.
    let rows = spill.bucket_rows();
    let mut order: Vec<usize> = (0..spill.buckets()).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(rows.get(b).copied().unwrap_or(0)));
    let mut written = futures::stream::iter(order)
        .map(|bucket| {
            let (taken, sort_by) = (spill.take(bucket), params.sort_by.clone());
            let (store, target, handle) = (store.clone(), target.clone(), handle.clone());
            let failed = failed.clone();
            blocking(move || {
                // After a failure nothing more starts; the buckets in
                // flight finish before the error is returned.
                if failed.load(Ordering::Relaxed) {
                    return Ok(Vec::new());
                }
                let Some(sorted) = taken.sorted(sort_by.as_deref())? else {
                    return Ok(Vec::new());
                };
                handle.block_on(stages::write_bucket(&store, &target, bucket as u32, sorted))
            })
        })
        .buffer_unordered(rayon::current_num_threads().max(1));
    let (mut files, mut first_error) = (Vec::new(), None);
    while let Some(result) = written.next().await {
        match result {
            Ok(entries) => files.extend(entries),
            Err(e) => {
                failed.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
        on_bucket(1);
    }
    files.sort_by(|a, b| (a.cid_bucket, &a.path).cmp(&(b.cid_bucket, &b.path)));
    match first_error {
        Some(e) => Err(e),
        None => Ok(files),
    }
}

/// [`write_all`] for a small table: every bucket of `spill`, sorted, as
/// ONE bucket (`cid_bucket=000000`) of postings files, so a probe reads
/// the table in one request per round. Its manifest's `cid-offsets` are
/// `[0, nlist]`: one root holding every list.
///
/// # Errors
/// As [`write_all`].
pub async fn write_one_bucket(
    store: &Arc<dyn ObjectStore>,
    target: &stages::PostingsTarget,
    spill: &mut BucketSpill,
    params: &BuildParams,
) -> Result<Vec<crate::format::manifest::FileEntry>, BuildError> {
    let mut sorted = Vec::new();
    for bucket in 0..spill.buckets() {
        let (taken, sort_by) = (spill.take(bucket), params.sort_by.clone());
        sorted.extend(blocking(move || taken.sorted(sort_by.as_deref())).await?);
    }
    let Some(first) = sorted.first() else {
        return Ok(Vec::new());
    };
    let schema = first.schema();
    let all = blocking(move || {
        arrow::compute::concat_batches(&schema, &sorted)
            .map_err(|e| BuildError::Arrow(e.to_string()))
    })
    .await?;
    stages::write_bucket(store, target, 0, all).await
}

/// The smallest id that occurs more than once, if any.
fn first_repeated(mut ids: Vec<i64>) -> Option<i64> {
    use rayon::slice::ParallelSliceMut;
    ids.par_sort_unstable();
    ids.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// [`BuildError::DuplicateId`] naming the first two rows holding `id`. Reads
/// parts again, but only on this error path.
async fn duplicate_id(source: &dyn VectorSource, id: i64) -> BuildError {
    let mut found: Vec<String> = Vec::with_capacity(2);
    for p in 0..source.parts() {
        match source.rows_with_id(p, id).await {
            Ok(rows) => found.extend(
                rows.iter()
                    .map(|r| format!("{} row {r}", source.part_name(p))),
            ),
            Err(e) => return e,
        }
        if found.len() >= 2 {
            break;
        }
    }
    let mut found = found.into_iter();
    let unknown = || "a row that could not be found again".to_string();
    BuildError::DuplicateId {
        id,
        first: found.next().unwrap_or_else(unknown),
        second: found.next().unwrap_or_else(unknown),
    }
}
