//! The build pipeline: count → sample → train → assign and group (spilling
//! per root bucket under a memory limit) → write postings → write centroids →
//! publish `manifest.json` → write `index.json` → commit the snapshot.
//!
//! Every build writes to a fresh snapshot folder `<index>/snapshots/<id>/`;
//! nothing becomes visible until the final commit (see [`crate::format::warehouse`]).
//! Given the same source, parameters, seed and thread count, the postings,
//! centroids, manifest and index definition are byte-identical.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::{ArrayRef, FixedSizeBinaryArray, Int32Array, Int64Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{Field, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::BuildError;
use super::progress::{Phase, ProgressMode, peak_rss_bytes};
use super::source::{VectorBatch, VectorSource};
use super::spill::BucketSpill;
use crate::distance::Metric;
use crate::format::definition::{
    BuildRecord, CENTROIDS_LOCATION, INDEX_DEFINITION_FILE, IndexDefinition,
};
use crate::format::postings_table::postings_schema;
use crate::kmeans::{AssignMode, Hierarchy, HierarchyParams, KMeansParams};
use crate::postings::writer::{PostingsWriter, WriterOptions};
use crate::store::commit::put_if_absent;

/// The default seed (FAISS's k-means default), so builds are reproducible
/// without any flag.
pub const DEFAULT_SEED: u64 = 1234;

/// Build parameters. `Default` gives FAISS-like training (niter 20, 256
/// points per centroid) and a 2 GiB memory limit.
#[derive(Debug, Clone)]
pub struct BuildParams {
    /// Number of leaf lists (CIDs).
    pub nlist: u32,
    /// Number of roots; `None` picks `round(sqrt(nlist))`, at least 1.
    pub roots: Option<u32>,
    /// Flat Lloyd iterations over all leaves after the per-root trainings
    /// (see [`crate::kmeans::HierarchyParams::polish`]).
    pub polish: usize,
    pub metric: Metric,
    pub niter: usize,
    pub max_points_per_centroid: usize,
    pub seed: u64,
    /// How rows are assigned to leaves.
    pub assign: AssignMode,
    /// Bytes of assigned postings held in memory before spilling per bucket.
    pub memory_limit: usize,
    pub writer: WriterOptions,
    pub progress: ProgressMode,
}

/// Flat Lloyd iterations over all leaves after the two-level training, by
/// default: on SIFT-like 1M × 128 at nlist 1000 they raise recall@10 at
/// nprobe 16 from 0.928 to 0.959 for 2.7 s more training
/// (`docs/benchmarks.md`).
pub const DEFAULT_POLISH: usize = 4;

impl Default for BuildParams {
    fn default() -> Self {
        Self {
            nlist: 1024,
            roots: None,
            polish: DEFAULT_POLISH,
            metric: Metric::L2,
            niter: 20,
            max_points_per_centroid: 256,
            seed: DEFAULT_SEED,
            assign: AssignMode::Exact,
            memory_limit: 2 << 30,
            writer: WriterOptions::default(),
            progress: ProgressMode::Auto,
        }
    }
}

impl BuildParams {
    /// The number of roots used for `nlist`.
    pub fn effective_roots(&self) -> u32 {
        self.roots
            .unwrap_or_else(|| (f64::from(self.nlist).sqrt().round() as u32).max(1))
            .min(self.nlist)
            .max(1)
    }
}

/// Wall time of each phase, in seconds.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PhaseTimes {
    pub count: f64,
    pub sample: f64,
    pub train: f64,
    pub assign: f64,
    pub write: f64,
    pub publish: f64,
    pub total: f64,
}

/// What a build did (printed by `parqivf build --json`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BuildSummary {
    pub index: String,
    pub snapshot: String,
    pub version: u64,
    pub rows: u64,
    /// Rows left out because they were invalid (`--skip-invalid`).
    pub skipped_rows: u64,
    pub dim: usize,
    pub nlist: u32,
    pub roots: u32,
    pub parts: usize,
    pub sample_rows: usize,
    pub objective: f64,
    pub postings_files: usize,
    pub postings_bytes: u64,
    pub spilled_bytes: u64,
    pub spill_events: u64,
    pub peak_rss_bytes: Option<u64>,
    pub seconds: PhaseTimes,
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Run a blocking closure on the rayon-friendly blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BuildError> + Send + 'static,
) -> Result<T, BuildError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BuildError::Internal(format!("worker task failed: {e}")))?
}

/// Build an index from `source` and publish it as the next version of the
/// index at `index` (a location on `store`).
///
/// # Errors
/// Bad input (empty source, `nlist` larger than the rows, invalid vectors),
/// storage failures, and [`crate::format::warehouse::WarehouseError::Conflict`] when
/// another build published first. On any error nothing becomes current.
pub async fn build(
    source: Arc<dyn VectorSource>,
    store: Arc<dyn ObjectStore>,
    index: &Path,
    params: &BuildParams,
) -> Result<BuildSummary, BuildError> {
    let t0 = std::time::Instant::now();
    let mut times = PhaseTimes::default();
    let dim = source.dim();
    let parts = source.parts();
    let skip_invalid = source.definition().skip_invalid;
    if params.nlist == 0 {
        return Err(BuildError::BadParameter {
            name: "nlist",
            reason: "must be at least 1".into(),
        });
    }
    let parent = crate::format::warehouse::current(&store, index)
        .await?
        .map(|c| c.version);
    // Leftovers of builds into this index that were killed outright.
    super::spill::sweep_abandoned(&store, index).await;

    // 1. Count rows per part (metadata only where the source allows it).
    let phase = Phase::start(params.progress, "count", parts as u64, "parts");
    let mut part_rows = Vec::with_capacity(parts);
    for p in 0..parts {
        part_rows.push(source.part_rows(p).await?);
        phase.inc(1);
    }
    times.count = secs(phase.finish());
    let total: u64 = part_rows.iter().sum();
    if total == 0 {
        return Err(BuildError::EmptySource);
    }
    if u64::from(params.nlist) > total {
        return Err(BuildError::NlistExceedsRows {
            nlist: params.nlist,
            rows: total,
        });
    }

    // 2. Sample: a seeded uniform choice of global row numbers, gathered in
    //    row order, so it does not depend on timing or thread count. Parts are
    //    kept in memory for the assignment pass while they fit the budget.
    let sample_target = (params.max_points_per_centroid as u64)
        .saturating_mul(u64::from(params.nlist))
        .min(total) as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut chosen: Vec<u64> = if sample_target as u64 == total {
        (0..total).collect()
    } else {
        rand::seq::index::sample(&mut rng, total as usize, sample_target)
            .into_iter()
            .map(|i| i as u64)
            .collect()
    };
    chosen.sort_unstable();
    let phase = Phase::start(params.progress, "sample", total, "rows");
    let mut sample: Vec<f32> = Vec::with_capacity(sample_target * dim);
    let mut cached: Vec<Option<VectorBatch>> = Vec::with_capacity(parts);
    let mut cached_bytes = 0usize;
    let mut next = 0usize;
    let mut base = 0u64;
    let mut rows = 0u64;
    let mut skipped_rows = 0u64;
    for (p, &declared) in part_rows.iter().enumerate() {
        let batch = read_prepared(source.as_ref(), p, params.metric, skip_invalid).await?;
        if batch.vectors.len() != batch.len() * dim {
            return Err(BuildError::BadShape {
                len: batch.vectors.len(),
                dim,
            });
        }
        // Sample positions refer to declared rows; a source that skipped
        // invalid rows yields fewer, and positions past its end select nothing.
        let end = base + declared;
        while next < chosen.len() && chosen[next] < end {
            let i = (chosen[next] - base) as usize;
            if i < batch.len() {
                sample.extend_from_slice(&batch.vectors[i * dim..(i + 1) * dim]);
            }
            next += 1;
        }
        base = end;
        rows += batch.len() as u64;
        // Sources declare rows before invalid ones are skipped.
        skipped_rows += declared.saturating_sub(batch.len() as u64);
        phase.inc(declared);
        let size = batch.memory_size();
        if cached_bytes + size <= params.memory_limit / 2 {
            cached_bytes += size;
            cached.push(Some(batch));
        } else {
            cached.push(None);
        }
    }
    times.sample = secs(phase.finish());
    if rows == 0 {
        return Err(BuildError::EmptySource);
    }
    if u64::from(params.nlist) > rows {
        return Err(BuildError::NlistExceedsRows {
            nlist: params.nlist,
            rows,
        });
    }
    let sample_rows = sample.len() / dim;
    // Fewer distinct vectors than lists leaves lists empty whatever k-means
    // does, and a query nearest to those finds nothing: refuse.
    let nlist = params.nlist;
    let (sample, distinct) = blocking(move || {
        let distinct = distinct_rows(&sample, dim, nlist as usize);
        Ok((sample, distinct))
    })
    .await?;
    if distinct < nlist as usize {
        return Err(BuildError::TooFewDistinct {
            nlist,
            distinct,
            sample: sample_rows,
        });
    }

    // 3. Train the two-level hierarchy.
    let roots = params.effective_roots();
    let hp = HierarchyParams {
        nlist: params.nlist as usize,
        roots: roots as usize,
        metric: params.metric,
        kmeans: KMeansParams {
            niter: params.niter,
            max_points_per_centroid: params.max_points_per_centroid,
            ..KMeansParams::default()
        },
        polish: params.polish,
    };
    let phase = Phase::start(params.progress, "train", u64::from(params.nlist), "lists");
    let train_seed = params.seed;
    let (hierarchy, report) = blocking(move || {
        // Training draws from its own stream of the build seed, independent of
        // how many numbers sampling consumed.
        let mut rng = ChaCha8Rng::seed_from_u64(train_seed);
        rng.set_stream(1);
        Hierarchy::train(&sample, dim, &hp, &mut rng).map_err(BuildError::from)
    })
    .await?;
    phase.inc(u64::from(params.nlist));
    times.train = secs(phase.finish());
    let hierarchy = Arc::new(hierarchy);

    // 4. Assign every row and group by root bucket under the memory budget.
    let payload_fields: Vec<Field> = source
        .payload_fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let schema = postings_schema(dim, &payload_fields);
    let nroots = hierarchy.cid_offsets.len() - 1;
    let mut spill = BucketSpill::new(schema.clone(), nroots, params.memory_limit / 2)?;
    let phase = Phase::start(params.progress, "assign", rows, "rows");
    // Ids from the data must be unique: collected here (8 bytes a row, no
    // extra reads) and checked once all are assigned.
    let mut ids: Vec<i64> = Vec::new();
    for (p, slot) in cached.iter_mut().enumerate() {
        let batch = match slot.take() {
            Some(b) => b,
            None => read_prepared(source.as_ref(), p, params.metric, skip_invalid).await?,
        };
        if source.ids_may_repeat() {
            ids.extend_from_slice(&batch.rowids);
        }
        let n = batch.len() as u64;
        let h = hierarchy.clone();
        let mode = params.assign;
        let schema = schema.clone();
        let grouped = blocking(move || group_part(&h, mode, &schema, batch)).await?;
        for (bucket, b) in grouped {
            spill.push(bucket, b)?;
        }
        phase.inc(n);
    }
    if let Some(id) = blocking(move || Ok(first_repeated(ids))).await? {
        return Err(duplicate_id(source.as_ref(), id).await);
    }
    times.assign = secs(phase.finish());

    // 5. Write postings bucket by bucket into a fresh snapshot folder.
    let snapshot_rel = format!("snapshots/{:013}-{:016x}", now_ms(), rand::random::<u64>());
    let snapshot = join(index, &snapshot_rel);
    spill.record_snapshot(store.as_ref(), &snapshot)?;
    let written = write_snapshot(
        source.as_ref(),
        &store,
        &snapshot,
        &mut spill,
        &hierarchy,
        payload_fields,
        params,
        sample_rows,
        &mut times,
    )
    .await;
    let manifest = match written {
        Ok(m) => m,
        Err(e) => {
            // Nothing refers to the snapshot yet: delete what was written.
            if super::spill::delete_snapshot(&store, &snapshot)
                .await
                .is_ok()
            {
                spill.forget_snapshot();
            }
            return Err(e);
        }
    };
    // From here the snapshot may become current: never sweep it.
    spill.forget_snapshot();
    let committing = std::time::Instant::now();
    let commit =
        crate::format::warehouse::commit(&store, index, &snapshot_rel, parent, now_ms()).await?;
    times.publish = secs(Duration::from_secs_f64(times.publish) + committing.elapsed());
    times.total = secs(t0.elapsed());

    let (spilled_bytes, spill_events) = spill.spilled();
    Ok(BuildSummary {
        index: index.to_string(),
        snapshot: snapshot.to_string(),
        version: commit.version,
        rows,
        skipped_rows,
        dim,
        nlist: params.nlist,
        roots: nroots as u32,
        parts,
        sample_rows,
        objective: report.objective,
        postings_files: manifest.files.len(),
        postings_bytes: manifest.files.iter().map(|f| f.size).sum(),
        spilled_bytes,
        spill_events,
        peak_rss_bytes: peak_rss_bytes(),
        seconds: times,
    })
}

/// Steps 5 and 6 up to the commit: postings bucket by bucket, centroids,
/// `manifest.json` and `index.json`, all inside the fresh `snapshot` folder.
#[allow(clippy::too_many_arguments)]
async fn write_snapshot(
    source: &dyn VectorSource,
    store: &Arc<dyn ObjectStore>,
    snapshot: &Path,
    spill: &mut BucketSpill,
    hierarchy: &Hierarchy,
    payload_fields: Vec<Field>,
    params: &BuildParams,
    sample_rows: usize,
    times: &mut PhaseTimes,
) -> Result<crate::format::manifest::Manifest, BuildError> {
    let dim = hierarchy.dim;
    let nroots = hierarchy.cid_offsets.len() - 1;
    let postings_root = snapshot.clone().join("postings");
    let phase = Phase::start(params.progress, "write", nroots as u64, "buckets");
    let mut writer = PostingsWriter::new(
        store.clone(),
        postings_root.clone(),
        dim,
        payload_fields,
        params.writer.clone(),
    )?;
    for bucket in 0..nroots {
        if let Some(sorted) = spill.take_sorted(bucket)? {
            writer.write_bucket(bucket as u32, vec![sorted]).await?;
        }
        phase.inc(1);
    }
    let manifest = writer.finish(params.nlist, hierarchy.cid_offsets.clone())?;
    times.write = secs(phase.finish());

    // 6. Publish: centroids, manifest (create-if-absent), index.json; the
    //    caller commits.
    let phase = Phase::start(params.progress, "publish", 3, "steps");
    let centroids = crate::format::centroids::encode(hierarchy)
        .map_err(|e| BuildError::Internal(e.to_string()))?;
    put_if_absent(
        store.as_ref(),
        &join(snapshot, CENTROIDS_LOCATION),
        centroids,
    )
    .await?;
    phase.inc(1);
    crate::postings::writer::publish(store, &postings_root, &manifest).await?;
    phase.inc(1);
    let src = source.definition();
    let definition = IndexDefinition::new(
        params.metric,
        dim as u32,
        params.nlist,
        nroots as u32,
        src.source,
        BuildRecord {
            vector_column: src.vector_column,
            id_column: src.id_column,
            payload_columns: src.payload_columns,
            seed: params.seed,
            sample_rows: sample_rows as u64,
            max_iterations: params.niter as u32,
            threads: rayon::current_num_threads() as u32,
            skip_invalid: src.skip_invalid,
        },
    );
    put_if_absent(
        store.as_ref(),
        &snapshot.clone().join(INDEX_DEFINITION_FILE),
        Bytes::from(definition.to_json()),
    )
    .await?;
    phase.inc(1);
    times.publish = secs(phase.finish());
    Ok(manifest)
}

/// The number of distinct rows of the row-major `data` (by bit pattern, so
/// 0.0 and -0.0 differ), counting no further than `enough`.
fn distinct_rows(data: &[f32], dim: usize, enough: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    for row in data.chunks_exact(dim) {
        seen.insert(row.iter().map(|v| v.to_bits()).collect::<Vec<u32>>());
        if seen.len() >= enough {
            break;
        }
    }
    seen.len()
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

fn join(base: &Path, rel: &str) -> Path {
    rel.split('/').fold(base.clone(), |p, part| p.join(part))
}

/// One part of `source`, prepared for the scan under `metric`: under cosine
/// every row is scaled to unit length ([`Metric::prepare`]), and a zero row,
/// which has no direction, is dropped with `skip_invalid` (the build counts
/// it with the other skipped rows) or fails the build.
///
/// # Errors
/// The source's errors; [`BuildError::NoDirection`] for a zero row under
/// cosine without `skip_invalid`.
async fn read_prepared(
    source: &dyn VectorSource,
    part: usize,
    metric: Metric,
    skip_invalid: bool,
) -> Result<VectorBatch, BuildError> {
    let batch = source.read_part(part).await?;
    if metric != Metric::Cosine {
        return Ok(batch);
    }
    let dim = source.dim();
    blocking(move || prepare_batch(metric, dim, batch, skip_invalid)).await
}

/// [`read_prepared`]'s CPU half (on the blocking pool).
fn prepare_batch(
    metric: Metric,
    dim: usize,
    mut batch: VectorBatch,
    skip_invalid: bool,
) -> Result<VectorBatch, BuildError> {
    let mut zero = Vec::new();
    for (i, row) in batch.vectors.chunks_exact_mut(dim).enumerate() {
        if metric.prepare(row).is_err() {
            if !skip_invalid {
                return Err(BuildError::NoDirection {
                    rowid: batch.rowids[i],
                });
            }
            zero.push(i);
        }
    }
    if zero.is_empty() {
        return Ok(batch);
    }
    let keep = super::source::kept_rows(batch.len(), &zero);
    let vectors = keep
        .iter()
        .flat_map(|&i| &batch.vectors[i as usize * dim..(i as usize + 1) * dim])
        .copied()
        .collect();
    let rowids = keep.iter().map(|&i| batch.rowids[i as usize]).collect();
    let payload = batch
        .payload
        .map(|p| take_record_batch(&p, &UInt32Array::from(keep)))
        .transpose()
        .map_err(|e| BuildError::Arrow(e.to_string()))?;
    Ok(VectorBatch {
        rowids,
        vectors,
        payload,
    })
}

/// Assign one part's rows and split them into postings batches by root bucket.
fn group_part(
    h: &Hierarchy,
    mode: AssignMode,
    schema: &SchemaRef,
    batch: VectorBatch,
) -> Result<Vec<(usize, RecordBatch)>, BuildError> {
    let dim = h.dim;
    let cids = h.assign(&batch.vectors, mode)?;
    let n = batch.len();
    let mut bytes = Vec::with_capacity(batch.vectors.len() * 4);
    for v in &batch.vectors {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let vectors = FixedSizeBinaryArray::try_new((dim * 4) as i32, bytes.into(), None)
        .map_err(|e| BuildError::Arrow(e.to_string()))?;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(cids.iter().map(|&c| c as i32))),
        Arc::new(Int64Array::from(batch.rowids)),
        Arc::new(vectors),
    ];
    if let Some(p) = &batch.payload {
        columns.extend(p.columns().iter().cloned());
    }
    let all = RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| BuildError::Arrow(e.to_string()))?;
    // Root of each cid: cid_offsets is sorted, root r owns [off[r], off[r+1]).
    let mut by_root: Vec<Vec<u32>> = vec![Vec::new(); h.cid_offsets.len() - 1];
    for (i, &c) in cids.iter().enumerate().take(n) {
        let r = h.cid_offsets.partition_point(|&o| o <= c) - 1;
        by_root[r].push(i as u32);
    }
    by_root
        .into_iter()
        .enumerate()
        .filter(|(_, idx)| !idx.is_empty())
        .map(|(r, idx)| {
            take_record_batch(&all, &UInt32Array::from(idx))
                .map(|b| (r, b))
                .map_err(|e| BuildError::Arrow(e.to_string()))
        })
        .collect()
}
