//! The single-node build: the [`stages`] count → sample → train → assign and
//! group (spilling per root bucket under a memory limit; the recall
//! calibration's exact neighbours gathered on the way, [`calibrate`]) →
//! write each bucket → publish (centroids, `calibration.json`,
//! `manifest.json`, `index.json`, commit), composed
//! with progress, timing, a memory budget and clean-up on failure.
//!
//! Every build writes to a fresh snapshot folder `<index>/snapshots/<id>/`;
//! nothing becomes visible until the final commit (see [`crate::format::warehouse`]).
//! Given the same source, parameters, seed and thread count, the postings,
//! centroids, manifest and index definition are byte-identical.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::Field;
use object_store::ObjectStore;
use object_store::path::Path;
use serde::Serialize;

use super::calibrate::{self, GroundTruth};
use super::error::BuildError;
use super::offload::blocking;
use super::progress::{Phase, peak_rss_bytes};
use super::source::vector_source::{VectorBatch, VectorSource};
use super::spill::BucketSpill;
use super::spilled::{assign_all, write_all};
use super::stages::{self, BuildParams};
use crate::format::postings_table::postings_schema;
use crate::format::snapshot_writer::SnapshotWriter;
use crate::format::warehouse::Publisher;

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
    /// The recall calibration's own work, already counted in `assign` (its
    /// exact neighbours, found in the assignment pass) and `publish` (the
    /// codes' re-rank measured on the written postings): 0 without one.
    /// FAISS has no counterpart; `total − calibrate` is the build without
    /// it.
    pub calibrate: f64,
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
    /// Held-out queries of the recall calibration (0: none measured).
    pub calibration_queries: usize,
    pub objective: f64,
    pub postings_files: usize,
    pub postings_bytes: u64,
    pub spilled_bytes: u64,
    pub spill_events: u64,
    pub peak_rss_bytes: Option<u64>,
    pub seconds: PhaseTimes,
}

pub(super) fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Build an index from `source` and publish it as the next version of the
/// index at `index` (a location on `store`): the [`stages`] in order on this
/// machine, CPU stages on the blocking pool.
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
    params.check()?;
    let parent = crate::format::warehouse::current(&store, index)
        .await?
        .map(|c| c.version);
    // Leftovers of builds into this index that were killed outright.
    super::spill::sweep_abandoned(&store, index).await;

    // 1. Count rows per part.
    let phase = Phase::start(params.progress, "count", parts as u64, "parts");
    let part_rows = stages::count(source.as_ref()).await?;
    phase.inc(parts as u64);
    times.count = secs(phase.finish());
    stages::check_rows(params.nlist, part_rows.iter().sum())?;

    // 2. Sample. Parts are kept in memory for the assignment pass while they
    //    fit the budget.
    let phase = Phase::start(params.progress, "sample", part_rows.iter().sum(), "rows");
    let budget = params.memory_limit / 2;
    let (sample, cached) =
        sample_keeping(source.as_ref(), &part_rows, params, budget, &phase).await?;
    times.sample = secs(phase.finish());
    stages::check_rows(params.nlist, sample.rows)?;
    let (rows, skipped_rows, sample_rows) = (sample.rows, sample.skipped_rows, sample.len());
    // Held-out queries for the recall calibration: rows of the sample.
    let calibration_queries =
        calibrate::queries_for(params.calibration_queries, rows, dim, sample_rows);
    let mut truth = (calibration_queries > 0).then(|| {
        let queries = calibrate::pick_queries(&sample.vectors, dim, calibration_queries);
        GroundTruth::new(queries, dim, calibrate::CALIBRATION_K, params.metric)
    });

    // 3. Train the two-level hierarchy.
    let phase = Phase::start(params.progress, "train", u64::from(params.nlist), "lists");
    let p = params.clone();
    let (hierarchy, report, quantizer) = blocking(move || stages::train_model(&sample, &p)).await?;
    phase.inc(u64::from(params.nlist));
    times.train = secs(phase.finish());
    let hierarchy = Arc::new(hierarchy);
    let quantizer = quantizer.map(Arc::new);

    // 4. Assign every row and group by root bucket under the memory budget.
    let payload_fields: Vec<Field> = source
        .payload_fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let code_bytes = quantizer
        .as_deref()
        .map(crate::quant::Quantizer::code_bytes);
    stages::check_sort_by(params.sort_by.as_deref(), &payload_fields)?;
    let schema = postings_schema(dim, code_bytes, &payload_fields);
    let nroots = hierarchy.nroots();
    let mut spill = BucketSpill::new(schema.clone(), nroots, budget)?;
    let phase = Phase::start(params.progress, "assign", rows, "rows");
    let assigned = assign_all(
        source.as_ref(),
        cached,
        &hierarchy,
        quantizer.as_ref(),
        &schema,
        params,
        &mut spill,
        &std::collections::HashSet::new(),
        &mut truth,
        |n| phase.inc(n),
    )
    .await?;
    times.assign = secs(phase.finish());
    let mut calibrating = std::time::Duration::ZERO;
    let calibration = match truth {
        Some(gt) => {
            let h = Arc::clone(&hierarchy);
            let start = std::time::Instant::now();
            calibrating = gt.spent();
            let finished = blocking(move || Ok(gt.finish(&h))).await?;
            calibrating += start.elapsed();
            Some(finished)
        }
        None => None,
    };

    // 5. Write postings bucket by bucket into a fresh snapshot folder, then
    // 6. publish it.
    let source_files = source.source_files();
    // With ids from the data: which ids each file holds, for `refresh`.
    let source_ids = (source_files.is_some() && source.ids_may_repeat()).then(|| {
        let mut ids = crate::format::source_ids::SourceIds::new();
        for (p, owned) in assigned.part_ids.into_iter().enumerate() {
            ids.insert(&source.part_name(p), owned);
        }
        ids
    });
    let mut definition = stages::definition(
        source.definition(),
        params,
        dim,
        &report,
        sample_rows,
        source_files.is_some(),
    );
    definition.calibration = calibration
        .as_ref()
        .map(|_| crate::format::calibration::CALIBRATION_FILE.to_string());
    let model = stages::Model {
        hierarchy: &hierarchy,
        quantizer: quantizer.as_deref(),
        calibration: calibration.as_ref().map(|(c, _)| c),
        neighbours: calibration.as_ref().map(|(_, n)| n),
    };
    let out = Output {
        definition: &definition,
        source_files: source_files.as_ref().map(|files| stages::FileRecord {
            files,
            ids: source_ids.as_ref(),
        }),
        payload_fields,
    };
    let (commit, folder, (postings_files, postings_bytes), measuring) = write_and_publish(
        &store, index, parent, params, &mut spill, model, out, &mut times,
    )
    .await?;
    times.calibrate = secs(calibrating + measuring);
    times.total = secs(t0.elapsed());

    let (spilled_bytes, spill_events) = spill.spilled();
    Ok(BuildSummary {
        index: index.to_string(),
        snapshot: folder,
        version: commit.version,
        rows,
        skipped_rows,
        dim,
        nlist: params.nlist,
        roots: nroots as u32,
        parts,
        sample_rows,
        calibration_queries,
        objective: report.objective,
        postings_files,
        postings_bytes,
        spilled_bytes,
        spill_events,
        peak_rss_bytes: peak_rss_bytes(),
        seconds: times,
    })
}

/// What a build writes besides the postings rows: `index.json`, the source
/// file set, and the payload columns of the postings.
struct Output<'a> {
    definition: &'a crate::format::definition::IndexDefinition,
    source_files: Option<stages::FileRecord<'a>>,
    payload_fields: Vec<Field>,
}

/// Steps 5 and 6: write every bucket of `spill` into a fresh snapshot folder
/// below `index` and publish it as the version after `parent` through the
/// [`SnapshotWriter`]. Returns the commit, the folder and the postings'
/// (files, bytes).
///
/// # Errors
/// Writer and storage errors, and the commit's (a conflict when another
/// publisher took the version).
#[allow(clippy::too_many_arguments)]
async fn write_and_publish(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    parent: Option<u64>,
    params: &BuildParams,
    spill: &mut BucketSpill,
    model: stages::Model<'_>,
    out: Output<'_>,
    times: &mut PhaseTimes,
) -> Result<
    (
        crate::format::warehouse::Commit,
        String,
        (usize, u64),
        std::time::Duration,
    ),
    BuildError,
> {
    let writer = SnapshotWriter::begin(store.clone(), index, Publisher::Build)?;
    let folder = writer.folder().clone();
    let target = stages::PostingsTarget::new(
        out.definition,
        &folder,
        model.quantizer,
        out.payload_fields,
        params.writer.clone(),
    )?;
    // Recorded until the commit, so a later build sweeps it if this one is killed.
    spill.record_snapshot(store.as_ref(), &folder.path)?;
    let nroots = spill.buckets() as u64;
    let written = async {
        let phase = Phase::start(params.progress, "write", nroots, "buckets");
        let files = write_all(store, &target, spill, params, |n| phase.inc(n)).await?;
        times.write = secs(phase.finish());
        let postings = (files.len(), files.iter().map(|f| f.size).sum::<u64>());
        let phase = Phase::start(params.progress, "publish", 1, "snapshots");
        let measuring =
            stages::publish(&writer, files, model, out.definition, out.source_files).await?;
        Ok::<_, BuildError>((postings, phase, measuring))
    }
    .await;
    // From here the folder is committed or deleted by the writer's rule.
    spill.forget_snapshot();
    let ((postings, phase, measuring), commit) = writer.publish(parent, written).await?;
    phase.inc(1);
    times.publish = secs(phase.finish());
    Ok((commit, folder.path.to_string(), postings, measuring))
}

/// Step 2: the seeded sample ([`stages::sample`]), keeping each part read
/// in memory for the assignment pass while the kept parts fit `budget`
/// bytes (`None` for a part to read again).
///
/// # Errors
/// The source's errors.
async fn sample_keeping(
    source: &dyn VectorSource,
    part_rows: &[u64],
    params: &BuildParams,
    budget: usize,
    phase: &Phase,
) -> Result<(stages::Sample, Vec<Option<VectorBatch>>), BuildError> {
    let mut cached: Vec<Option<VectorBatch>> = Vec::with_capacity(part_rows.len());
    let mut cached_bytes = 0usize;
    let sample = stages::sample(source, part_rows, params, |_, declared, batch| {
        phase.inc(declared);
        let size = batch.memory_size();
        if cached_bytes + size <= budget {
            cached_bytes += size;
            cached.push(Some(batch));
        } else {
            cached.push(None);
        }
    })
    .await?;
    Ok((sample, cached))
}
