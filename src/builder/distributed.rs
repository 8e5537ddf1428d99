//! The build split across machines, for a driver on an existing distributed
//! engine (Python's `parqivf.ray`): the same [`stages`] the single-node
//! [`super::job::build`] composes, cut where data changes hands.
//!
//! 1. [`count_source`] (driver): the declared rows of each part, from
//!    metadata.
//! 2. [`SampleReader::sample_part`] (any worker): one part read, and its
//!    rows at the seeded sample positions, which every worker derives from
//!    the counts alone.
//! 3. [`plan_from_samples`] (driver): train the hierarchy and the codes'
//!    quantiser on the parts' samples in part order, name the snapshot
//!    folder. The [`BuildPlan`] is a self-contained byte string (centroids
//!    and quantiser included, no credentials) that every task receives.
//!    ([`plan`] does steps 1 to 3 on one machine.)
//! 4. [`Worker::assign_part`] (any worker): read one part of the source,
//!    assign and encode its rows: postings rows plus their root bucket
//!    ([`ROOT_COLUMN`]), the key the engine shuffles on.
//! 5. [`Worker::write_bucket`] (any worker): one root bucket's rows, in any
//!    split and order, sorted and written as its postings files straight to
//!    the object store; returns their manifest entries.
//! 6. [`publish`] (driver): centroids, manifest, `index.json`, one commit.
//!
//! Nothing is visible before the commit. A retried part or bucket gives the
//! same rows and writes the same bytes to the same paths, so an engine's
//! task retries are safe; a build that fails leaves an unreferenced folder
//! that [`abort`] (or a later build's sweep) deletes. Given the same source,
//! parameters, seed and thread count as a single-node build, the plan's
//! centroids and every postings byte are the same.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::error::BuildError;
use super::job::{BuildSummary, PhaseTimes, secs};
use super::offload::blocking;
use super::source::spec::{SourceSpec, open_source};
use super::source::vector_source::VectorSource;
use super::stages::{self, BuildParams, Model, PartSample, PostingsTarget, SnapshotFolder};
use crate::format::definition::IndexDefinition;
use crate::format::manifest::FileEntry;
use crate::format::postings_table::{CID_COLUMN, postings_schema};
use crate::format::snapshot_writer::SnapshotWriter;
use crate::format::warehouse::Publisher;
use crate::kmeans::{AssignMode, Hierarchy};
use crate::quant::Quantizer;
use crate::store::options::StoreOptions;

/// The root bucket of each assigned row, appended to the postings columns
/// by [`Worker::assign_part`]: the shuffle key.
pub const ROOT_COLUMN: &str = "__parqivf_root";

/// The plan's byte format: magic, then three length-prefixed (u64 LE)
/// sections: the JSON header, the centroids (Parquet, as published), the
/// quantiser (`quantizer.json`, empty without codes).
const PLAN_MAGIC: &[u8; 8] = b"PQIVFPL1";

/// What every task of one distributed build shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct PlanHeader {
    /// The index location, as the user named it.
    index: String,
    /// The snapshot folder, relative to the index (`snapshots/<id>`).
    snapshot: String,
    /// The version the commit follows.
    parent: Option<u64>,
    source: SourceSpec,
    /// `None`: exact assignment; `Some(m)`: the nearest `m` roots.
    assign_roots: Option<usize>,
    sort_by: Option<String>,
    /// `index.json`, as it will be published.
    definition: String,
    /// Declared rows of each part, as the driver counted them.
    part_rows: Vec<u64>,
    rows: u64,
    skipped_rows: u64,
    sample_rows: usize,
    objective: f64,
    /// `source-files.json`, as it will be published (Parquet sources).
    #[serde(default)]
    source_files: Option<String>,
    count_seconds: f64,
    sample_seconds: f64,
    train_seconds: f64,
}

/// A distributed build's shared state: what [`plan`] trained and decided.
#[derive(Debug, Clone)]
pub struct BuildPlan {
    header: PlanHeader,
    definition: IndexDefinition,
    centroids: Bytes,
    quantizer: Option<Bytes>,
}

impl BuildPlan {
    /// The plan as bytes, to ship to workers.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = serde_json::to_vec(&self.header).unwrap_or_default();
        let quantizer = self.quantizer.as_deref().unwrap_or_default();
        let mut out =
            Vec::with_capacity(8 + 24 + header.len() + self.centroids.len() + quantizer.len());
        out.extend_from_slice(PLAN_MAGIC);
        for section in [&header[..], &self.centroids[..], quantizer] {
            out.extend_from_slice(&(section.len() as u64).to_le_bytes());
            out.extend_from_slice(section);
        }
        out
    }

    /// A plan from [`BuildPlan::to_bytes`].
    ///
    /// # Errors
    /// [`BuildError::BadParameter`] naming `plan` for bytes that are not a
    /// whole plan.
    pub fn from_bytes(bytes: &[u8]) -> Result<BuildPlan, BuildError> {
        let bad = |reason: String| BuildError::BadParameter {
            name: "plan",
            reason,
        };
        let rest = bytes
            .strip_prefix(PLAN_MAGIC)
            .ok_or_else(|| bad(format!("{} bytes without the plan magic", bytes.len())))?;
        let mut sections = Vec::with_capacity(3);
        let mut at = 0usize;
        for name in ["header", "centroids", "quantizer"] {
            let len = rest
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
                .ok_or_else(|| bad(format!("truncated before the {name} length")))?;
            let section = rest
                .get(at + 8..at.saturating_add(8).saturating_add(len))
                .ok_or_else(|| bad(format!("the {name} section of {len} bytes is truncated")))?;
            sections.push(section);
            at += 8 + len;
        }
        if at != rest.len() {
            return Err(bad(format!("{} bytes after the plan", rest.len() - at)));
        }
        let header: PlanHeader =
            serde_json::from_slice(sections[0]).map_err(|e| bad(format!("header: {e}")))?;
        let definition = IndexDefinition::from_json(&header.definition)?;
        Ok(BuildPlan {
            header,
            definition,
            centroids: Bytes::copy_from_slice(sections[1]),
            quantizer: (!sections[2].is_empty()).then(|| Bytes::copy_from_slice(sections[2])),
        })
    }

    /// The number of parts, one [`Worker::assign_part`] each.
    pub fn parts(&self) -> usize {
        self.header.part_rows.len()
    }

    /// The number of root buckets, one [`Worker::write_bucket`] each at most.
    pub fn roots(&self) -> u32 {
        self.definition.roots
    }

    /// The index location.
    pub fn index(&self) -> &str {
        &self.header.index
    }

    /// The snapshot folder, relative to the index.
    pub fn snapshot(&self) -> &str {
        &self.header.snapshot
    }

    /// The index definition it will publish.
    pub fn definition(&self) -> &IndexDefinition {
        &self.definition
    }

    fn model(&self) -> Result<(Hierarchy, Option<Quantizer>), BuildError> {
        let d = &self.definition;
        let hierarchy = crate::format::centroids::decode(
            "plan centroids",
            self.centroids.clone(),
            d.dim as usize,
            d.metric,
        )
        .map_err(|e| BuildError::Internal(e.to_string()))?;
        let quantizer = self
            .quantizer
            .as_deref()
            .map(|q| crate::format::quantizer::decode("plan quantizer", q, d.dim as usize))
            .transpose()
            .map_err(|e| BuildError::Internal(e.to_string()))?;
        Ok((hierarchy, quantizer))
    }

    fn folder(
        &self,
        options: &StoreOptions,
    ) -> Result<(Arc<dyn ObjectStore>, SnapshotFolder), BuildError> {
        let (store, index) = crate::store::location::open_with(&self.header.index, options)
            .map_err(|e| BuildError::Store(e.into()))?;
        Ok((store, SnapshotFolder::at(&index, &self.header.snapshot)?))
    }
}

/// The driver's first step: the declared rows of each part of the source
/// `spec` names (metadata only where the source allows it).
///
/// # Errors
/// The errors of opening the source and reading its metadata.
pub async fn count_source(
    spec: &SourceSpec,
    options: &StoreOptions,
) -> Result<Vec<u64>, BuildError> {
    let source = open_source(spec, options).await?;
    stages::count(source.as_ref()).await
}

/// A worker's reader of the training sample: the source opened again and
/// the seeded sample positions (the same on every worker, from the counts).
pub struct SampleReader {
    source: Arc<dyn VectorSource>,
    part_rows: Vec<u64>,
    /// First declared row of each part.
    starts: Vec<u64>,
    chosen: Vec<u64>,
    metric: crate::distance::Metric,
    skip_invalid: bool,
}

impl SampleReader {
    /// Opens `spec` and draws the sample positions of a source with
    /// `part_rows` declared rows per part, for `params` (seed, `nlist`,
    /// points per centroid).
    ///
    /// # Errors
    /// [`BuildError::SourceChanged`] when the source has other parts; the
    /// errors of opening it.
    pub async fn open(
        spec: &SourceSpec,
        params: &BuildParams,
        part_rows: Vec<u64>,
        options: &StoreOptions,
    ) -> Result<SampleReader, BuildError> {
        let source = open_source(spec, options).await?;
        check_parts(source.as_ref(), &spec.source, part_rows.len(), None)?;
        let starts = part_rows
            .iter()
            .scan(0u64, |at, &n| {
                let start = *at;
                *at += n;
                Some(start)
            })
            .collect();
        let chosen = stages::sample_positions(part_rows.iter().sum(), params);
        Ok(SampleReader {
            source,
            part_rows,
            starts,
            chosen,
            metric: params.metric,
            skip_invalid: spec.skip_invalid,
        })
    }

    /// The vector dimension of the source.
    pub fn dim(&self) -> usize {
        self.source.dim()
    }

    /// Part `part` read (prepared for the metric) and its sampled rows.
    ///
    /// # Errors
    /// As [`Worker::assign_part`]: a part out of range, a part that changed
    /// since it was counted, and the source's errors.
    pub async fn sample_part(&self, part: usize) -> Result<PartSample, BuildError> {
        let declared = check_part(self.source.as_ref(), &self.part_rows, part).await?;
        let batch =
            stages::read_part(self.source.as_ref(), part, self.metric, self.skip_invalid).await?;
        let (chosen, start, dim) = (&self.chosen, self.starts[part], self.source.dim());
        Ok(stages::part_sample(chosen, start, declared, dim, &batch))
    }
}

/// `source`'s declared rows of `part` after checking them against what the
/// driver counted.
async fn check_part(
    source: &dyn VectorSource,
    part_rows: &[u64],
    part: usize,
) -> Result<u64, BuildError> {
    let Some(&declared) = part_rows.get(part) else {
        return Err(BuildError::BadParameter {
            name: "part",
            reason: format!("part {part} is outside 0..{}", part_rows.len()),
        });
    };
    let found = source.part_rows(part).await?;
    if found != declared {
        return Err(BuildError::SourceChanged {
            source_name: source.part_name(part),
            detail: format!("the driver counted {declared} rows, this worker finds {found}"),
        });
    }
    Ok(declared)
}

/// Checks that `source` still has the `parts` parts (and the dimension,
/// when given) the driver found.
fn check_parts(
    source: &dyn VectorSource,
    name: &str,
    parts: usize,
    dim: Option<usize>,
) -> Result<(), BuildError> {
    if source.parts() != parts || dim.is_some_and(|d| d != source.dim()) {
        return Err(BuildError::SourceChanged {
            source_name: name.to_string(),
            detail: format!(
                "the driver counted {parts} parts{}, this worker finds {} of dimension {}",
                dim.map_or(String::new(), |d| format!(" of dimension {d}")),
                source.parts(),
                source.dim()
            ),
        });
    }
    Ok(())
}

/// Plans the build on one machine: [`count_source`], every part's
/// [`SampleReader::sample_part`], then [`plan_from_samples`].
///
/// # Errors
/// As those steps.
pub async fn plan(
    spec: &SourceSpec,
    index: &str,
    params: &BuildParams,
    options: &StoreOptions,
) -> Result<BuildPlan, BuildError> {
    let t = Instant::now();
    let part_rows = count_source(spec, options).await?;
    let count_seconds = secs(t.elapsed());
    let t = Instant::now();
    let reader = SampleReader::open(spec, params, part_rows.clone(), options).await?;
    let mut samples = Vec::with_capacity(part_rows.len());
    for part in 0..part_rows.len() {
        samples.push(reader.sample_part(part).await?);
    }
    let timing = (count_seconds, secs(t.elapsed()));
    plan_from_samples(spec, index, params, options, part_rows, samples, timing).await
}

/// The driver's training step: the sample from every part's
/// [`PartSample`] (in part order, as the single-node sample), the model
/// trained on it, and a fresh snapshot folder below the index at `index`.
/// `seconds` are the count and sample stages' wall times, for the summary.
/// Writes nothing.
///
/// # Errors
/// Bad parameters, an empty source, `nlist` larger than the rows, too few
/// distinct vectors, a sort column that is not payload, samples that do not
/// match the parts, and an unreadable commit log at `index`.
pub async fn plan_from_samples(
    spec: &SourceSpec,
    index: &str,
    params: &BuildParams,
    options: &StoreOptions,
    part_rows: Vec<u64>,
    samples: Vec<PartSample>,
    seconds: (f64, f64),
) -> Result<BuildPlan, BuildError> {
    let (count_seconds, sample_seconds) = seconds;
    params.check()?;
    if samples.len() != part_rows.len() {
        return Err(BuildError::BadParameter {
            name: "samples",
            reason: format!(
                "{} part samples for {} parts",
                samples.len(),
                part_rows.len()
            ),
        });
    }
    let (store, index_path) = crate::store::location::open_with(index, options)
        .map_err(|e| BuildError::Store(e.into()))?;
    let parent = crate::format::warehouse::current(&store, &index_path)
        .await?
        .map(|c| c.version);
    let source = open_source(spec, options).await?;
    check_parts(source.as_ref(), &spec.source, part_rows.len(), None)?;
    let payload: Vec<Field> = source
        .payload_fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    stages::check_sort_by(params.sort_by.as_deref(), &payload)?;
    stages::check_rows(params.nlist, part_rows.iter().sum())?;
    let dim = source.dim();
    if let Some(bad) = samples.iter().find(|s| s.vectors.len() % dim.max(1) != 0) {
        return Err(BuildError::BadShape {
            len: bad.vectors.len(),
            dim,
        });
    }
    let sample = stages::Sample::from_parts(dim, &part_rows, samples);
    stages::check_rows(params.nlist, sample.rows)?;
    let (rows, skipped_rows, sample_rows) = (sample.rows, sample.skipped_rows, sample.len());

    let t = Instant::now();
    let p = params.clone();
    let (hierarchy, report, quantizer) = blocking(move || stages::train_model(&sample, &p)).await?;
    let train_seconds = secs(t.elapsed());
    let source_files = source.source_files();
    let definition = stages::definition(
        source.definition(),
        params,
        source.dim(),
        &report,
        sample_rows,
        source_files.is_some(),
    );
    let folder = SnapshotFolder::new(&index_path)?;
    let centroids = crate::format::centroids::encode(&hierarchy)
        .map_err(|e| BuildError::Internal(e.to_string()))?;
    Ok(BuildPlan {
        header: PlanHeader {
            index: index.to_string(),
            snapshot: folder.name,
            parent,
            source: spec.clone(),
            assign_roots: match params.assign {
                AssignMode::Exact => None,
                AssignMode::Hierarchical { m } => Some(m),
            },
            sort_by: params.sort_by.clone(),
            definition: definition.to_json(),
            part_rows,
            rows,
            skipped_rows,
            sample_rows,
            objective: report.objective,
            source_files: source_files
                .map(|f| String::from_utf8_lossy(&f.to_json_bytes()).into_owned()),
            count_seconds,
            sample_seconds,
            train_seconds,
        },
        definition,
        centroids,
        quantizer: quantizer.map(|q| Bytes::from(crate::format::quantizer::encode(&q))),
    })
}

/// A worker's view of one plan: the source opened again, the model decoded,
/// the postings target resolved. Open it once per process and plan.
pub struct Worker {
    plan: BuildPlan,
    store: Arc<dyn ObjectStore>,
    source: Arc<dyn VectorSource>,
    hierarchy: Arc<Hierarchy>,
    quantizer: Option<Arc<Quantizer>>,
    /// The postings schema of the index.
    schema: SchemaRef,
    /// The postings schema and [`ROOT_COLUMN`]: what `assign_part` yields.
    assigned: SchemaRef,
    target: PostingsTarget,
}

impl Worker {
    /// Opens `plan` on this machine, its stores configured by `options`.
    ///
    /// # Errors
    /// [`BuildError::SourceChanged`] when the source no longer has the parts
    /// the driver counted; the errors of opening the source.
    pub async fn open(plan: BuildPlan, options: &StoreOptions) -> Result<Worker, BuildError> {
        let (store, folder) = plan.folder(options)?;
        let source = open_source(&plan.header.source, options).await?;
        let dim = plan.definition.dim as usize;
        check_parts(
            source.as_ref(),
            &plan.header.source.source,
            plan.parts(),
            Some(dim),
        )?;
        let (hierarchy, quantizer) = plan.model()?;
        let payload: Vec<Field> = source
            .payload_fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let schema = postings_schema(
            source.dim(),
            quantizer.as_ref().map(Quantizer::code_bytes),
            &payload,
        );
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(ROOT_COLUMN, DataType::UInt32, false));
        let target = PostingsTarget::new(
            &plan.definition,
            &folder,
            quantizer.as_ref(),
            payload,
            Default::default(),
        )?;
        Ok(Worker {
            store,
            source,
            hierarchy: Arc::new(hierarchy),
            quantizer: quantizer.map(Arc::new),
            assigned: Arc::new(Schema::new(fields)),
            schema,
            target,
            plan,
        })
    }

    /// The plan this worker serves.
    pub fn plan(&self) -> &BuildPlan {
        &self.plan
    }

    /// Part `part` read, assigned and encoded: the postings columns of its
    /// rows in source order, and [`ROOT_COLUMN`].
    ///
    /// # Errors
    /// [`BuildError::BadParameter`] for a part out of range;
    /// [`BuildError::SourceChanged`] when the part no longer declares the
    /// rows the driver counted; the source's and the assignment's errors.
    pub async fn assign_part(&self, part: usize) -> Result<RecordBatch, BuildError> {
        check_part(self.source.as_ref(), &self.plan.header.part_rows, part).await?;
        let metric = self.plan.definition.metric;
        let skip_invalid = self.plan.header.source.skip_invalid;
        let batch = stages::read_part(self.source.as_ref(), part, metric, skip_invalid).await?;
        let (h, q) = (self.hierarchy.clone(), self.quantizer.clone());
        let (schema, assigned) = (self.schema.clone(), self.assigned.clone());
        let mode = match self.plan.header.assign_roots {
            None => AssignMode::Exact,
            Some(m) => AssignMode::Hierarchical { m },
        };
        blocking(move || {
            let rows = stages::assign(&h, mode, q.as_deref(), &schema, batch)?;
            let cids = rows
                .column_by_name(CID_COLUMN)
                .and_then(|c| c.as_primitive_opt::<Int32Type>())
                .ok_or_else(|| BuildError::Internal("assigned rows have no cid".into()))?;
            let roots = stages::roots_of(&h.cid_offsets, cids.values())?;
            let mut columns = rows.columns().to_vec();
            columns.push(Arc::new(UInt32Array::from(roots)));
            RecordBatch::try_new(assigned, columns).map_err(|e| BuildError::Arrow(e.to_string()))
        })
        .await
    }

    /// Writes root bucket `bucket` from its rows as [`Worker::assign_part`]
    /// made them (any split, any order; columns matched by name and cast
    /// back to the postings types an engine may have widened), and returns
    /// the manifest entries of its files. The same rows give the same bytes.
    ///
    /// # Errors
    /// [`BuildError::Arrow`] for rows of another bucket or that do not fit
    /// the postings schema; the writer's and the store's errors.
    pub async fn write_bucket(
        &self,
        bucket: u32,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<FileEntry>, BuildError> {
        let schema = self.schema.clone();
        let sort_by = self.plan.header.sort_by.clone();
        let sorted = blocking(move || {
            let batches = batches
                .iter()
                .map(|b| postings_rows(&schema, bucket, b))
                .collect::<Result<Vec<_>, _>>()?;
            stages::sort_run(&schema, batches, sort_by.as_deref())
        })
        .await?;
        match sorted {
            Some(rows) => stages::write_bucket(&self.store, &self.target, bucket, rows).await,
            None => Ok(Vec::new()),
        }
    }
}

/// `batch`'s postings columns, by name, cast to `schema`'s types, after
/// checking that every row belongs to `bucket`.
fn postings_rows(
    schema: &SchemaRef,
    bucket: u32,
    batch: &RecordBatch,
) -> Result<RecordBatch, BuildError> {
    let arrow = |e: arrow::error::ArrowError| BuildError::Arrow(e.to_string());
    if let Some(roots) = batch.column_by_name(ROOT_COLUMN) {
        let roots = arrow::compute::cast(roots, &DataType::UInt32).map_err(arrow)?;
        let roots = roots.as_primitive::<arrow::datatypes::UInt32Type>();
        if let Some(other) = roots.iter().flatten().find(|&r| r != bucket) {
            return Err(BuildError::Arrow(format!(
                "bucket {bucket} was given a row of bucket {other}"
            )));
        }
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let column = batch.column_by_name(f.name()).ok_or_else(|| {
                BuildError::Arrow(format!(
                    "bucket {bucket}: the rows have no column {}",
                    f.name()
                ))
            })?;
            if column.data_type() == f.data_type() {
                Ok(column.clone())
            } else {
                arrow::compute::cast(column, f.data_type()).map_err(arrow)
            }
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(arrow)
}

/// The driver's last step: publishes the plan's snapshot from every
/// bucket's `files` and commits it as the version after the plan's parent.
/// `assign_seconds` and `write_seconds` are the engine's stage times, for
/// the summary.
///
/// # Errors
/// As [`stages::publish`] and [`SnapshotWriter::commit`]: a conflict when
/// another build committed first. The snapshot folder is deleted on any
/// error unless a version may name it.
pub async fn publish(
    plan: &BuildPlan,
    files: Vec<FileEntry>,
    options: &StoreOptions,
    assign_seconds: f64,
    write_seconds: f64,
) -> Result<BuildSummary, BuildError> {
    let (store, folder) = plan.folder(options)?;
    publish_on(
        store,
        &folder.index,
        plan,
        files,
        assign_seconds,
        write_seconds,
    )
    .await
}

/// [`publish`] on `store`, whose location `index` is the plan's index (the
/// plan's store, perhaps wrapped).
///
/// # Errors
/// As [`publish`].
pub async fn publish_on(
    store: Arc<dyn ObjectStore>,
    index: &Path,
    plan: &BuildPlan,
    files: Vec<FileEntry>,
    assign_seconds: f64,
    write_seconds: f64,
) -> Result<BuildSummary, BuildError> {
    let t = Instant::now();
    let folder = SnapshotFolder::at(index, &plan.header.snapshot)?;
    let writer = SnapshotWriter::resume(store, folder.clone(), Publisher::Build);
    let (postings_files, postings_bytes) = (files.len(), files.iter().map(|f| f.size).sum());
    let written = async {
        let (hierarchy, quantizer) = plan.model()?;
        let source_files = plan
            .header
            .source_files
            .as_deref()
            .map(|json| {
                crate::format::source_files::SourceFiles::parse(
                    "the plan's source files",
                    json.as_bytes(),
                )
                .map_err(|e| BuildError::Internal(e.to_string()))
            })
            .transpose()?;
        // No node sees every row: a distributed build measures no calibration.
        let model = Model {
            hierarchy: &hierarchy,
            quantizer: quantizer.as_ref(),
            calibration: None,
            neighbours: None,
        };
        stages::publish(
            &writer,
            files,
            model,
            &plan.definition,
            // The workers assign the rows: no one node sees every id, so a
            // distributed build records no source-ids table.
            source_files
                .as_ref()
                .map(|files| stages::FileRecord { files, ids: None }),
        )
        .await
    }
    .await;
    // No calibration: no re-rank measured.
    let (_, commit) = writer.publish(plan.header.parent, written).await?;
    let h = &plan.header;
    let publish_seconds = secs(t.elapsed());
    Ok(BuildSummary {
        index: folder.index.to_string(),
        snapshot: folder.path.to_string(),
        version: commit.version,
        rows: h.rows,
        skipped_rows: h.skipped_rows,
        dim: plan.definition.dim as usize,
        nlist: plan.definition.nlist,
        roots: plan.definition.roots,
        parts: plan.parts(),
        sample_rows: h.sample_rows,
        calibration_queries: 0,
        objective: h.objective,
        postings_files,
        postings_bytes,
        spilled_bytes: 0,
        spill_events: 0,
        peak_rss_bytes: super::progress::peak_rss_bytes(),
        seconds: PhaseTimes {
            count: h.count_seconds,
            sample: h.sample_seconds,
            train: h.train_seconds,
            assign: assign_seconds,
            write: write_seconds,
            publish: publish_seconds,
            calibrate: 0.0,
            total: secs(std::time::Duration::from_secs_f64(
                h.count_seconds
                    + h.sample_seconds
                    + h.train_seconds
                    + assign_seconds
                    + write_seconds
                    + publish_seconds,
            )),
        },
    })
}

/// Deletes what a failed distributed build wrote: its snapshot folder,
/// unless a version names it.
///
/// # Errors
/// Reading the commit log, listing or deleting fails.
pub async fn abort(plan: &BuildPlan, options: &StoreOptions) -> Result<(), BuildError> {
    let (store, folder) = plan.folder(options)?;
    SnapshotWriter::resume(store, folder, Publisher::Build)
        .abort()
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> BuildPlan {
        let definition = IndexDefinition::from_json(include_str!(
            "../../manifests/examples/index-definition.json"
        ))
        .unwrap();
        BuildPlan {
            header: PlanHeader {
                index: "memory://plan/idx".into(),
                snapshot: "snapshots/0000000000001-0000000000000001".into(),
                parent: Some(3),
                source: SourceSpec {
                    source: "memory://plan/t".into(),
                    column: "embedding".into(),
                    ..SourceSpec::default()
                },
                assign_roots: Some(2),
                sort_by: None,
                definition: definition.to_json(),
                part_rows: vec![10, 20],
                rows: 30,
                skipped_rows: 0,
                sample_rows: 30,
                objective: 1.5,
                source_files: None,
                count_seconds: 0.1,
                sample_seconds: 0.2,
                train_seconds: 0.3,
            },
            definition,
            centroids: Bytes::from_static(b"centroid bytes"),
            quantizer: Some(Bytes::from_static(b"{}")),
        }
    }

    #[test]
    fn a_plan_round_trips_through_its_bytes() {
        let p = plan();
        let back = BuildPlan::from_bytes(&p.to_bytes()).unwrap();
        assert_eq!(back.header, p.header);
        assert_eq!(back.centroids, p.centroids);
        assert_eq!(back.quantizer, p.quantizer);
        let mut none = plan();
        none.quantizer = None;
        assert_eq!(
            BuildPlan::from_bytes(&none.to_bytes()).unwrap().quantizer,
            None
        );
    }

    #[test]
    fn truncated_or_foreign_bytes_are_a_typed_error() {
        let bytes = plan().to_bytes();
        for cut in [0, 7, 8, 20, bytes.len() - 1] {
            let e = BuildPlan::from_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(e, BuildError::BadParameter { name: "plan", .. }),
                "{e}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(BuildPlan::from_bytes(&longer).is_err());
    }

    #[test]
    fn bucket_rows_are_matched_by_name_and_checked() {
        use arrow::array::{FixedSizeBinaryArray, Int32Array, Int64Array};
        let schema = postings_schema(1, None, &[]);
        let batch = RecordBatch::try_from_iter(vec![
            (
                ROOT_COLUMN,
                Arc::new(UInt32Array::from(vec![1, 1])) as ArrayRef,
            ),
            ("rowid", Arc::new(Int64Array::from(vec![5, 6]))),
            ("cid", Arc::new(Int32Array::from(vec![3, 4]))),
            (
                "vector",
                Arc::new(FixedSizeBinaryArray::try_new(4, vec![0u8; 8].into(), None).unwrap()),
            ),
        ])
        .unwrap();
        let rows = postings_rows(&schema, 1, &batch).unwrap();
        assert_eq!(rows.schema(), schema);
        assert_eq!(rows.num_rows(), 2);
        let e = postings_rows(&schema, 2, &batch).unwrap_err();
        assert!(
            e.to_string()
                .contains("bucket 2 was given a row of bucket 1"),
            "{e}"
        );
    }
}
