//! The build as stages: functions with plain inputs and outputs that
//! [`super::job::build`] composes, and that a distributed driver can call one
//! by one on different machines.
//!
//! | stage | in | out | kind |
//! |---|---|---|---|
//! | [`count`] | a source | rows per part | IO (metadata) |
//! | [`sample`] | a source, its counts, the seed | a seeded sample, rows read | IO |
//! | [`train`] | the sample, the seed | the [`Hierarchy`] | CPU |
//! | [`train_quantizer`] | the sample, the hierarchy, the scheme | the [`Quantizer`] of the codes | CPU |
//! | [`read_part`] + [`assign`] | a batch of (rowid, vector[, payload]) + the hierarchy (+ quantizer) | `(cid, rowid[, code], vector[, payload])` rows | IO, then CPU |
//! | [`group_by_root`] + [`sort_run`] | assigned rows | per-root-bucket runs sorted by (cid, rowid) | CPU |
//! | [`write_bucket`] | one bucket's sorted run | its postings files ([`FileEntry`]s) | IO |
//! | [`publish`] | every bucket's files | centroids, `quantizer.json`, `footers.json`, `manifest.json`, `index.json` (the commit: [`SnapshotWriter`]) | IO |
//!
//! The CPU stages are synchronous and do no IO: callers on a tokio runtime
//! run them on the blocking pool. Every stage is deterministic: the same
//! inputs and seed give the same outputs, whatever the batch split, the
//! order in which buckets are written, or how often a bucket is retried
//! (`write_bucket` writes the same bytes to the same paths). The single-node
//! grouping under a memory limit is [`super::spill::BucketSpill`]; a
//! distributed driver groups with [`group_by_root`] and sorts each bucket's
//! rows with [`sort_run`] instead. Nothing is visible to readers until
//! the [`SnapshotWriter`]'s commit after [`publish`].

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, FixedSizeBinaryArray, Int32Array, Int64Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{Field, Int32Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::error::BuildError;
use super::progress::ProgressMode;
use super::source::vector_source::{SourceDefinition, VectorBatch, VectorSource};
use crate::distance::Metric;
use crate::format::definition::{BuildRecord, INDEX_DEFINITION_FILE, IndexDefinition};
use crate::format::manifest::FileEntry;
use crate::format::postings_table::{CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN};
use crate::format::quantizer::QUANTIZER_FILE;
use crate::format::snapshot_writer::SnapshotWriter;
use crate::format::source_files::SourceFiles;
use crate::kmeans::{
    AssignMode, Hierarchy, HierarchyParams, HierarchyReport, KMeansParams, Leaves,
};
use crate::postings::writer::{PostingsWriter, WriterOptions};
use crate::quant::{Quantizer, Scheme};
use crate::store::commit::put_if_absent;

pub use super::spill::sort_run;
pub use crate::format::snapshot_writer::SnapshotFolder;

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
    /// How the leaves are trained; `None` picks [`Leaves::Flat`] up to
    /// [`FLAT_LEAVES_MAX`] lists, [`Leaves::PerRoot`] above.
    pub leaves: Option<Leaves>,
    /// With per-root leaves: flat Lloyd iterations over all leaves after
    /// the per-root trainings (see [`crate::kmeans::HierarchyParams::polish`]).
    pub polish: usize,
    pub metric: Metric,
    pub niter: usize,
    /// Candidate centroids per point in the later Lloyd iterations
    /// ([`crate::kmeans::KMeansParams::neighbours`]; 0: exact Lloyd).
    pub neighbours: usize,
    pub max_points_per_centroid: usize,
    pub seed: u64,
    /// How rows are assigned to leaves.
    pub assign: AssignMode,
    /// The quantised codes written beside the vectors (`None`: no `code`
    /// column; queries scan the f32 vectors).
    pub codes: Option<Scheme>,
    /// Bytes of assigned postings held in memory before spilling per bucket.
    pub memory_limit: usize,
    /// A payload column the rows of each list are sorted by (then by rowid;
    /// NULLs last), so that a filter on it prunes `vector` pages and its
    /// statistics are tight (e.g. a tenant column). `None`: by rowid.
    pub sort_by: Option<String>,
    /// Rows of the sample used as held-out queries to measure recall by
    /// lists probed (`calibration.json`, what a target recall needs); 0
    /// measures none. Fewer on large tables ([`super::calibrate::queries_for`]).
    pub calibration_queries: usize,
    pub writer: WriterOptions,
    pub progress: ProgressMode,
}

/// The codes of a build by default: `pq4fs`, faster than `rabitq4` in every
/// serving mode on both benchmark sets at the same recall (2.5–3.4× with
/// the codes in memory). At 2 bits a dimension it needs a deeper re-rank on
/// isotropic data, which the build measures ([`super::calibrate::rerank_of`])
/// and queries use by default (`docs/benchmarks.md`, "The re-rank the codes
/// need").
pub const DEFAULT_CODES: Option<Scheme> = Some(Scheme::Pq4Fs);

/// Flat Lloyd iterations over all leaves after the per-root training, by
/// default: on SIFT-like 1M × 128 at nlist 1000 they raise recall@10 at
/// nprobe 16 from 0.928 to 0.959 for 2.7 s more training
/// (`docs/benchmarks.md`).
pub const DEFAULT_POLISH: usize = 4;

/// Candidate centroids per point in the Lloyd iterations after the first
/// [`crate::kmeans::FULL_ITERATIONS`], by default: the same recall at equal
/// nprobe as exact Lloyd on both benchmark sets, where 32 loses 0.006 on
/// SIFT-like data (`docs/benchmarks.md`, "Approximate Lloyd").
pub const DEFAULT_NEIGHBOURS: usize = 64;

/// The most lists whose leaves are trained flat by default. Flat leaves
/// reach FAISS IVF-Flat's recall at equal nlist and nprobe on both measured
/// sets, where the per-root leaves fall behind on sentence embeddings even
/// after a long polish (`docs/partitions-report.md`); their training's
/// full passes cost nlist² each (two of them with the default
/// [`DEFAULT_NEIGHBOURS`], all 20 without), so larger builds train per root.
/// The bound was measured with 20 full passes and not yet re-measured.
pub const FLAT_LEAVES_MAX: u32 = 4096;

impl Default for BuildParams {
    fn default() -> Self {
        Self {
            nlist: 1024,
            roots: None,
            leaves: None,
            polish: DEFAULT_POLISH,
            metric: Metric::L2,
            niter: 20,
            neighbours: DEFAULT_NEIGHBOURS,
            max_points_per_centroid: 256,
            seed: DEFAULT_SEED,
            assign: AssignMode::Exact,
            codes: DEFAULT_CODES,
            memory_limit: 2 << 30,
            sort_by: None,
            calibration_queries: super::calibrate::DEFAULT_CALIBRATION_QUERIES,
            writer: WriterOptions::default(),
            progress: ProgressMode::Auto,
        }
    }
}

impl BuildParams {
    /// Checks what can be checked before any row is read.
    ///
    /// # Errors
    /// [`BuildError::BadParameter`] for `nlist` 0.
    pub fn check(&self) -> Result<(), BuildError> {
        if self.nlist == 0 {
            return Err(BuildError::BadParameter {
                name: "nlist",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// How the leaves are trained for `nlist`.
    pub fn effective_leaves(&self) -> Leaves {
        self.leaves.unwrap_or(if self.nlist <= FLAT_LEAVES_MAX {
            Leaves::Flat
        } else {
            Leaves::PerRoot
        })
    }

    /// The number of roots used for `nlist`.
    pub fn effective_roots(&self) -> u32 {
        self.roots
            .unwrap_or_else(|| (f64::from(self.nlist).sqrt().round() as u32).max(1))
            .min(self.nlist)
            .max(1)
    }
}

/// Rows per part, in part order (metadata only where the source allows it).
///
/// # Errors
/// The source's errors.
pub async fn count(source: &dyn VectorSource) -> Result<Vec<u64>, BuildError> {
    let mut rows = Vec::with_capacity(source.parts());
    for p in 0..source.parts() {
        rows.push(source.part_rows(p).await?);
    }
    Ok(rows)
}

/// Checks that `rows` rows can fill `nlist` lists.
///
/// # Errors
/// [`BuildError::EmptySource`] for no rows, [`BuildError::NlistExceedsRows`]
/// for fewer rows than lists.
pub fn check_rows(nlist: u32, rows: u64) -> Result<(), BuildError> {
    if rows == 0 {
        return Err(BuildError::EmptySource);
    }
    if u64::from(nlist) > rows {
        return Err(BuildError::NlistExceedsRows { nlist, rows });
    }
    Ok(())
}

/// The training sample: `max_points_per_centroid × nlist` rows (at most all
/// of them), and what reading the source found.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Row-major, `dim` values a row.
    pub vectors: Vec<f32>,
    pub dim: usize,
    /// Rows the source yielded (valid rows).
    pub rows: u64,
    /// Rows the source declared but left out as invalid (`skip_invalid`).
    pub skipped_rows: u64,
}

impl Sample {
    /// Rows in the sample.
    pub fn len(&self) -> usize {
        self.vectors.len() / self.dim.max(1)
    }

    /// True when the sample holds no rows.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }
}

/// The sampled global row numbers (declared rows, counted across parts in
/// part order), ascending: a seeded uniform choice of
/// `max_points_per_centroid × nlist` of `total`, or all of them.
pub fn sample_positions(total: u64, params: &BuildParams) -> Vec<u64> {
    let target = (params.max_points_per_centroid as u64)
        .saturating_mul(u64::from(params.nlist))
        .min(total) as usize;
    if target as u64 == total {
        return (0..total).collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut chosen: Vec<u64> = rand::seq::index::sample(&mut rng, total as usize, target)
        .into_iter()
        .map(|i| i as u64)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// Parts [`sample`] reads at once: the next part's read (its copy, checks
/// and, under cosine, normalisation, all on blocking threads) overlaps this
/// one's, so a build with two or more threads does not read on one core.
/// At most this many parts beyond the kept ones are in memory.
const SAMPLE_READ_AHEAD: usize = 2;

/// Reads every part (prepared for `params.metric`, see [`read_part`]) and
/// gathers the rows at [`sample_positions`], in row order, so the sample does
/// not depend on timing or thread count. Each part is handed to `keep` with
/// its declared row count once sampled (the single-node build keeps the parts
/// that fit its memory budget for the assignment pass).
///
/// Positions refer to declared rows; a source that skipped invalid rows
/// yields fewer, and positions past a part's end select nothing.
///
/// # Errors
/// The errors of [`read_part`].
pub async fn sample(
    source: &dyn VectorSource,
    part_rows: &[u64],
    params: &BuildParams,
    mut keep: impl FnMut(usize, u64, VectorBatch) + Send,
) -> Result<Sample, BuildError> {
    use futures::StreamExt;
    let chosen = sample_positions(part_rows.iter().sum(), params);
    let skip_invalid = source.definition().skip_invalid;
    let mut base = 0u64;
    let mut reads = futures::stream::iter(0..part_rows.len())
        .map(|p| read_part(source, p, params.metric, skip_invalid))
        .buffered(SAMPLE_READ_AHEAD);
    // Every part's sampled rows go straight to their place in one buffer.
    let dim = source.dim();
    let (mut vectors, chosen) = (vec![0f32; chosen.len() * dim], Arc::new(chosen));
    let (mut written, mut yielded) = (0usize, Vec::with_capacity(part_rows.len()));
    for (p, &declared) in part_rows.iter().enumerate() {
        let batch = reads
            .next()
            .await
            .expect("the stream yields one batch a part")?;
        let (chosen, mut out) = (Arc::clone(&chosen), std::mem::take(&mut vectors));
        let (rows, out, batch) = super::offload::blocking(move || {
            let rows = copy_part_sample(
                &chosen,
                base,
                declared,
                dim,
                &batch,
                &mut out[written * dim..],
            );
            Ok((rows, out, batch))
        })
        .await?;
        (vectors, written) = (out, written + rows);
        yielded.push(batch.len() as u64);
        base += declared;
        keep(p, declared, batch);
    }
    vectors.truncate(written * dim);
    Ok(Sample::new(dim, part_rows, &yielded, vectors))
}

/// What one part gives the sample: its valid rows, and the sampled rows'
/// vectors, in position order.
#[derive(Debug, Clone, PartialEq)]
pub struct PartSample {
    /// Rows the part yielded (valid rows).
    pub rows: u64,
    /// Row-major, `dim` values a sampled row.
    pub vectors: Vec<f32>,
}

/// The rows of `batch` (part rows `base..base + declared` of the source)
/// at the `chosen` global positions (ascending, from [`sample_positions`]).
/// A position past the rows the part yielded (an invalid row skipped at the
/// end) is left out, as the single-node sample does. CPU only.
pub fn part_sample(
    chosen: &[u64],
    base: u64,
    declared: u64,
    dim: usize,
    batch: &VectorBatch,
) -> PartSample {
    let picked =
        chosen.partition_point(|&c| c < base + declared) - chosen.partition_point(|&c| c < base);
    let mut vectors = vec![0f32; picked * dim];
    let rows = copy_part_sample(chosen, base, declared, dim, batch, &mut vectors);
    vectors.truncate(rows * dim);
    PartSample {
        rows: batch.len() as u64,
        vectors,
    }
}

/// [`part_sample`]'s rows, copied on rayon to the start of `out` (room for
/// every chosen position of the part); returns how many were copied.
fn copy_part_sample(
    chosen: &[u64],
    base: u64,
    declared: u64,
    dim: usize,
    batch: &VectorBatch,
    out: &mut [f32],
) -> usize {
    let from = chosen.partition_point(|&c| c < base);
    let to = chosen.partition_point(|&c| c < base + declared);
    let rows: Vec<usize> = chosen[from..to]
        .iter()
        .map(|&c| (c - base) as usize)
        .filter(|&i| i < batch.len())
        .collect();
    if dim > 0 {
        out[..rows.len() * dim]
            .par_chunks_mut(dim)
            .zip(&rows)
            .with_min_len(256)
            .for_each(|(to, &i)| to.copy_from_slice(&batch.vectors[i * dim..(i + 1) * dim]));
    }
    rows.len()
}

impl Sample {
    /// The sample of a source of `part_rows` declared rows from each part's
    /// [`PartSample`], in part order.
    pub fn from_parts(dim: usize, part_rows: &[u64], parts: Vec<PartSample>) -> Sample {
        let yielded: Vec<u64> = parts.iter().map(|p| p.rows).collect();
        let mut vectors = Vec::with_capacity(parts.iter().map(|p| p.vectors.len()).sum());
        for p in parts {
            vectors.extend(p.vectors);
        }
        Sample::new(dim, part_rows, &yielded, vectors)
    }

    /// The sample of a source of `part_rows` declared rows, of which its
    /// parts `yielded` these (the valid ones), with the sampled `vectors`.
    fn new(dim: usize, part_rows: &[u64], yielded: &[u64], vectors: Vec<f32>) -> Sample {
        // Sources declare rows before invalid ones are skipped.
        let skipped_rows = part_rows
            .iter()
            .zip(yielded)
            .map(|(&declared, &rows)| declared.saturating_sub(rows))
            .sum();
        Sample {
            vectors,
            dim,
            rows: yielded.iter().sum(),
            skipped_rows,
        }
    }
}

/// Trains the two-level hierarchy on `sample`: deterministic for
/// `params.seed` (training draws from its own stream of the seed, independent
/// of how many numbers sampling consumed). CPU only.
///
/// # Errors
/// [`BuildError::TooFewDistinct`] when the sample holds fewer distinct
/// vectors than `nlist` (lists would be left empty, and a query nearest to
/// one would find nothing); the k-means errors.
pub fn train(
    sample: &Sample,
    params: &BuildParams,
) -> Result<(Hierarchy, HierarchyReport), BuildError> {
    let nlist = params.nlist as usize;
    let distinct = distinct_rows(&sample.vectors, sample.dim, nlist);
    if distinct < nlist {
        return Err(BuildError::TooFewDistinct {
            nlist: params.nlist,
            distinct,
            sample: sample.len(),
        });
    }
    let hp = HierarchyParams {
        nlist,
        roots: params.effective_roots() as usize,
        metric: params.metric,
        kmeans: KMeansParams {
            niter: params.niter,
            neighbours: params.neighbours,
            max_points_per_centroid: params.max_points_per_centroid,
            ..KMeansParams::default()
        },
        polish: params.polish,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    rng.set_stream(1);
    let train = match params.effective_leaves() {
        Leaves::Flat => Hierarchy::train_bottom_up,
        Leaves::PerRoot => Hierarchy::train,
    };
    Ok(train(&sample.vectors, sample.dim, &hp, &mut rng)?)
}

/// What training makes: the hierarchy ([`train`]), its report, and the
/// codes' quantiser ([`train_quantizer`]) when `params` asks for codes. CPU only.
///
/// # Errors
/// As [`train`] and [`train_quantizer`].
pub fn train_model(
    sample: &Sample,
    params: &BuildParams,
) -> Result<(Hierarchy, HierarchyReport, Option<Quantizer>), BuildError> {
    let (hierarchy, report) = train(sample, params)?;
    let quantizer = params
        .codes
        .map(|scheme| train_quantizer(sample, &hierarchy, scheme, params.seed))
        .transpose()?;
    Ok((hierarchy, report, quantizer))
}

/// Checks that `sort_by`, when set, is one of the payload fields.
///
/// # Errors
/// [`BuildError::SortColumn`] naming the column and the payload.
pub fn check_sort_by(sort_by: Option<&str>, payload: &[Field]) -> Result<(), BuildError> {
    match sort_by {
        Some(column) if !payload.iter().any(|f| f.name() == column) => {
            Err(BuildError::SortColumn {
                column: column.to_string(),
                payload: payload.iter().map(|f| f.name().clone()).collect(),
            })
        }
        _ => Ok(()),
    }
}

/// The root bucket of each CID: root `r` owns `cid_offsets[r]..cid_offsets[r + 1]`.
///
/// # Errors
/// [`BuildError::Arrow`] naming the row of a CID outside the lists.
pub fn roots_of(cid_offsets: &[u32], cids: &[i32]) -> Result<Vec<u32>, BuildError> {
    let nlist = cid_offsets.last().copied().unwrap_or(0);
    cids.iter()
        .enumerate()
        .map(|(i, &c)| {
            if c < 0 || c as u32 >= nlist {
                return Err(BuildError::Arrow(format!(
                    "row {i} has cid {c}, outside 0..{nlist}"
                )));
            }
            Ok((cid_offsets.partition_point(|&o| o <= c as u32) - 1) as u32)
        })
        .collect()
}

/// Most sample rows whose residuals train SQ8's ranges, and that PQ4's
/// training rows are drawn from.
const QUANTIZER_SAMPLE: usize = 65_536;

/// The quantiser of the codes for `scheme`, from the residuals of (at most
/// `QUANTIZER_SAMPLE` rows of) the training sample to their leaves:
/// SQ8's per-dimension ranges; PQ4's centroids (seeded by the build seed);
/// RaBitQ's rotation from the build seed.
/// Deterministic for the same sample and seed. CPU only.
///
/// # Errors
/// The assignment's and the quantiser's errors.
pub fn train_quantizer(
    sample: &Sample,
    hierarchy: &Hierarchy,
    scheme: Scheme,
    seed: u64,
) -> Result<Quantizer, BuildError> {
    let dim = hierarchy.dim;
    let quant = |e: crate::quant::QuantError| BuildError::BadParameter {
        name: "codes",
        reason: e.to_string(),
    };
    match scheme {
        Scheme::RaBitQ4 => Quantizer::rabitq4(dim, seed).map_err(quant),
        Scheme::Sq8 | Scheme::Pq4Fs => {
            let rows = sample.len().min(QUANTIZER_SAMPLE);
            let residuals = |vectors: &[f32]| -> Result<Vec<f32>, BuildError> {
                let cids = hierarchy.assign(vectors, AssignMode::Exact)?;
                Ok(hierarchy.residuals(vectors, &cids))
            };
            let vectors = &sample.vectors[..rows * dim];
            match scheme {
                Scheme::Sq8 => Quantizer::train_sq8(&residuals(vectors)?, dim),
                // Only the rows PQ trains on are assigned: the same
                // centroids as from all `rows`, for an eighth of the work.
                _ => {
                    let picked: Vec<f32> = crate::quant::pq4_training_rows(rows, seed)
                        .into_iter()
                        .flat_map(|r| &vectors[r * dim..(r + 1) * dim])
                        .copied()
                        .collect();
                    Quantizer::train_pq4(&residuals(&picked)?, dim, seed)
                }
            }
            .map_err(quant)
        }
    }
}

/// The codes of `vectors` (assigned to `cids`) under `quantizer`, row-major,
/// `code_bytes` each; rows are encoded in parallel blocks on rayon. The
/// bytes do not depend on the thread count.
fn encode(quantizer: &Quantizer, hierarchy: &Hierarchy, vectors: &[f32], cids: &[u32]) -> Vec<u8> {
    use rayon::prelude::*;
    const BLOCK: usize = 256;
    let (dim, width) = (hierarchy.dim, quantizer.code_bytes());
    let mut codes = vec![0u8; cids.len() * width];
    codes
        .par_chunks_mut(BLOCK * width)
        .zip(vectors.par_chunks(BLOCK * dim))
        .zip(cids.par_chunks(BLOCK))
        .for_each(|((out, v), c)| {
            quantizer.encode_batch(&hierarchy.residuals(v, c), &hierarchy.leaves, c, out);
        });
    codes
}

/// The number of distinct rows of the row-major `data` (by bit pattern, so
/// 0.0 and -0.0 differ), counting no further than `enough`.
fn distinct_rows(data: &[f32], dim: usize, enough: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    for row in data.chunks_exact(dim.max(1)) {
        seen.insert(row.iter().map(|v| v.to_bits()).collect::<Vec<u32>>());
        if seen.len() >= enough {
            break;
        }
    }
    seen.len()
}

/// One part of `source`, prepared for `metric` ([`prepare`], on the
/// blocking pool under cosine).
///
/// # Errors
/// The source's errors; [`BuildError::BadShape`] when the part's vectors are
/// not `rows × dim` values; the errors of [`prepare`].
pub async fn read_part(
    source: &dyn VectorSource,
    part: usize,
    metric: Metric,
    skip_invalid: bool,
) -> Result<VectorBatch, BuildError> {
    let batch = source.read_part(part).await?;
    let dim = source.dim();
    if batch.vectors.len() != batch.len() * dim {
        return Err(BuildError::BadShape {
            len: batch.vectors.len(),
            dim,
        });
    }
    if metric != Metric::Cosine {
        return Ok(batch);
    }
    tokio::task::spawn_blocking(move || prepare(metric, dim, batch, skip_invalid))
        .await
        .map_err(|e| BuildError::Internal(format!("worker task failed: {e}")))?
}

/// `batch` prepared for the scan under `metric`: under cosine every row is
/// scaled to unit length ([`Metric::prepare`]), and a zero row, which has no
/// direction, is dropped with `skip_invalid` (the source then yields fewer
/// rows than it declared) or fails. CPU only.
///
/// # Errors
/// [`BuildError::NoDirection`] for a zero row under cosine without
/// `skip_invalid`.
pub fn prepare(
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
    let keep = super::source::vector_source::kept_rows(batch.len(), &zero);
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

/// Assigns each row of `batch` to its leaf, and encodes its residual with
/// `quantizer` when the index has codes: a postings-schema batch (`schema`,
/// from [`crate::format::postings_table::postings_schema`]) of
/// `(cid, rowid[, code], vector[, payload…])` in input order. CPU only.
///
/// # Errors
/// The k-means assignment errors; [`BuildError::Arrow`] when the payload
/// does not fit `schema`.
pub fn assign(
    hierarchy: &Hierarchy,
    mode: AssignMode,
    quantizer: Option<&Quantizer>,
    schema: &SchemaRef,
    batch: VectorBatch,
) -> Result<RecordBatch, BuildError> {
    let dim = hierarchy.dim;
    let cids = hierarchy.assign(&batch.vectors, mode)?;
    let codes = quantizer
        .map(|q| {
            let codes = encode(q, hierarchy, &batch.vectors, &cids);
            FixedSizeBinaryArray::try_new(q.code_bytes() as i32, codes.into(), None)
                .map_err(|e| BuildError::Arrow(e.to_string()))
        })
        .transpose()?;
    let vectors = FixedSizeBinaryArray::try_new((dim * 4) as i32, le_bytes(batch.vectors), None)
        .map_err(|e| BuildError::Arrow(e.to_string()))?;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(cids.iter().map(|&c| c as i32))),
        Arc::new(Int64Array::from(batch.rowids)),
    ];
    if let Some(codes) = codes {
        columns.push(Arc::new(codes));
    }
    columns.push(Arc::new(vectors));
    if let Some(p) = &batch.payload {
        columns.extend(p.columns().iter().cloned());
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| BuildError::Arrow(e.to_string()))
}

/// The little-endian bytes of `values`, as the `vector` column stores them:
/// the vector's own allocation on a little-endian machine, no copy.
fn le_bytes(values: Vec<f32>) -> arrow::buffer::Buffer {
    if cfg!(target_endian = "little") {
        arrow::buffer::Buffer::from_vec(values)
    } else {
        values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()
    }
}

/// The sum over assigned `rows` (the postings schema: `cid`, `rowid`,
/// `vector`, …) of each row's squared L2 distance to its leaf centroid: the
/// k-means objective of the rows as indexed, whatever the metric. CPU only,
/// on rayon: runs of 4,096 rows summed apart, then in order, so the
/// sum does not depend on the thread count.
///
/// # Errors
/// [`BuildError::Arrow`] when the columns are not the postings schema's or
/// a `cid` is not a leaf.
pub fn quantization_error(hierarchy: &Hierarchy, rows: &RecordBatch) -> Result<f64, BuildError> {
    let dim = hierarchy.dim;
    let bad =
        || BuildError::Arrow("assigned rows lack the postings schema's cid and vector".into());
    let cids = rows
        .column(0)
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(bad)?
        .values();
    let vectors = vector_values(rows)?;
    let leaves = hierarchy.leaves.len() / dim.max(1);
    if vectors.len() != cids.len() * dim || cids.iter().any(|&c| c < 0 || c as usize >= leaves) {
        return Err(bad());
    }
    let runs: Vec<f64> = vectors
        .par_chunks(ERROR_RUN * dim.max(1))
        .zip(cids.par_chunks(ERROR_RUN))
        .map(|(vectors, cids)| {
            vectors
                .chunks_exact(dim.max(1))
                .zip(cids)
                .map(|(v, &cid)| {
                    let leaf = &hierarchy.leaves[cid as usize * dim..(cid as usize + 1) * dim];
                    v.iter()
                        .zip(leaf)
                        .map(|(a, b)| f64::from(a - b) * f64::from(a - b))
                        .sum::<f64>()
                })
                .sum::<f64>()
        })
        .collect();
    Ok(runs.iter().sum())
}

/// Rows a run of [`quantization_error`] sums.
const ERROR_RUN: usize = 4096;

/// The `vector` column of postings-schema rows, by name.
fn vector_column(rows: &RecordBatch) -> Option<&FixedSizeBinaryArray> {
    rows.column_by_name(VECTOR_COLUMN)?
        .as_fixed_size_binary_opt()
}

/// The `vector` column of assigned rows (FixedSizeBinary of little-endian
/// f32) as row-major f32: the column's own bytes where they are aligned f32
/// on a little-endian machine (as [`assign`] makes them), else a copy.
/// CPU only.
///
/// # Errors
/// [`BuildError::Arrow`] when the rows lack the postings schema's vector.
pub fn vector_values(rows: &RecordBatch) -> Result<std::borrow::Cow<'_, [f32]>, BuildError> {
    let bytes = vector_column(rows)
        .ok_or_else(|| BuildError::Arrow("assigned rows lack the postings schema's vector".into()))?
        .value_data();
    // SAFETY: every bit pattern is an f32, and `align_to` reinterprets only
    // the aligned middle of the bytes.
    let (head, values, tail) = unsafe { bytes.align_to::<f32>() };
    if cfg!(target_endian = "little") && head.is_empty() && tail.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(values));
    }
    Ok(std::borrow::Cow::Owned(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    ))
}

/// The `rowid` column of assigned rows. CPU only.
///
/// # Errors
/// [`BuildError::Arrow`] when the rows lack the postings schema's rowid.
pub fn rowid_values(rows: &RecordBatch) -> Result<Vec<i64>, BuildError> {
    rows.column_by_name(ROWID_COLUMN)
        .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int64Type>())
        .map(|c| c.values().to_vec())
        .ok_or_else(|| BuildError::Arrow("assigned rows lack the postings schema's rowid".into()))
}

/// Splits assigned rows by root bucket (root `r` owns the CIDs
/// `cid_offsets[r]..cid_offsets[r + 1]`): one batch per non-empty bucket,
/// ascending by bucket, rows in input order. CPU only (the buckets taken
/// on rayon).
///
/// # Errors
/// [`BuildError::Arrow`] when `rows` has no Int32 `cid` column or a CID lies
/// outside `cid_offsets`.
pub fn group_by_root(
    cid_offsets: &[u32],
    rows: &RecordBatch,
) -> Result<Vec<(u32, RecordBatch)>, BuildError> {
    let cids = rows
        .column_by_name(CID_COLUMN)
        .and_then(|c| c.as_primitive_opt::<Int32Type>())
        .ok_or_else(|| BuildError::Arrow(format!("assigned rows have no Int32 {CID_COLUMN}")))?;
    let nroots = cid_offsets.len().saturating_sub(1);
    let mut by_root: Vec<Vec<u32>> = vec![Vec::new(); nroots];
    for (i, r) in roots_of(cid_offsets, cids.values())?
        .into_iter()
        .enumerate()
    {
        by_root[r as usize].push(i as u32);
    }
    by_root
        .into_par_iter()
        .enumerate()
        .filter(|(_, idx)| !idx.is_empty())
        .map(|(r, idx)| {
            take_record_batch(rows, &UInt32Array::from(idx))
                .map(|b| (r as u32, b))
                .map_err(|e| BuildError::Arrow(e.to_string()))
        })
        .collect()
}

/// The `index.json` a build of `source` with `params` records: `roots` roots,
/// trained on `sample_rows` rows with this process's rayon thread count,
/// naming `quantizer.json` when `params` asks for codes and
/// `source-files.json` when the source has a file set. The recorded
/// quantisation error is the training's: `report`'s objective per sample
/// point (the same on one machine and on many).
pub fn definition(
    source: SourceDefinition,
    params: &BuildParams,
    dim: usize,
    report: &HierarchyReport,
    sample_rows: usize,
    source_files: bool,
) -> IndexDefinition {
    let roots = report.leaves_per_root.len() as u32;
    let mut definition = IndexDefinition::new(
        params.metric,
        dim as u32,
        params.nlist,
        roots,
        source.source,
        BuildRecord {
            vector_column: source.vector_column,
            id_column: source.id_column,
            payload_columns: source.payload_columns,
            seed: params.seed,
            sample_rows: sample_rows as u64,
            max_iterations: params.niter as u32,
            threads: rayon::current_num_threads() as u32,
            skip_invalid: source.skip_invalid,
            sort_by: params.sort_by.clone(),
            quantization_error: (report.train_points > 0)
                .then(|| six_digits(report.objective / report.train_points as f64)),
        },
    );
    if params.codes.is_some() {
        definition.quantizer = Some(QUANTIZER_FILE.to_string());
    }
    if source_files {
        definition.source_files = Some(crate::format::source_files::SOURCE_FILES_FILE.to_string());
    }
    definition
}

/// `x` to six significant digits: the k-means objective is a sum of
/// distances whose last bits depend on how the work was split, and
/// `index.json` must be byte-identical on one machine and on many.
fn six_digits(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}

/// Where and how postings files are written: the same for every bucket of
/// one build.
#[derive(Debug, Clone)]
pub struct PostingsTarget {
    /// The postings table folder (holding `manifest.json`).
    pub root: Path,
    pub dim: usize,
    /// Width of the `code` column, in an index with codes.
    pub code_bytes: Option<usize>,
    pub payload_fields: Vec<Field>,
    pub options: WriterOptions,
}

impl PostingsTarget {
    /// The postings table of `definition` in `snapshot`: the folder of its
    /// `manifest.json` ([`IndexDefinition::postings_manifest_path`]).
    ///
    /// # Errors
    /// [`BuildError::Definition`] for a location that does not resolve.
    pub fn new(
        definition: &IndexDefinition,
        snapshot: &SnapshotFolder,
        quantizer: Option<&Quantizer>,
        payload_fields: Vec<Field>,
        options: WriterOptions,
    ) -> Result<Self, BuildError> {
        let manifest = definition.postings_manifest_path(&snapshot.path)?;
        Ok(Self {
            root: manifest.parent().unwrap_or_default(),
            dim: definition.dim as usize,
            code_bytes: quantizer.map(Quantizer::code_bytes),
            payload_fields,
            options,
        })
    }
}

/// Writes root bucket `bucket`'s rows, sorted by (cid, rowid)
/// ([`sort_run`]), as its postings files below `target.root`, and returns
/// their manifest entries. The files are planned first
/// ([`crate::postings::writer::file_plan`]) and each is encoded on its own
/// blocking thread, so one large bucket does not hold the write stage on
/// one core. The bytes and paths depend only on the input: a retried
/// bucket overwrites its files with the same bytes.
///
/// # Errors
/// The postings writer's errors (unsorted input, CIDs outside the bucket…)
/// and storage failures.
pub async fn write_bucket(
    store: &Arc<dyn ObjectStore>,
    target: &PostingsTarget,
    bucket: u32,
    sorted: RecordBatch,
) -> Result<Vec<FileEntry>, BuildError> {
    let bytes = sorted.get_array_memory_size() as u64;
    let plan = match sorted.column(0).as_primitive_opt::<Int32Type>() {
        Some(cids) => crate::postings::writer::file_plan(cids.values(), bytes, &target.options),
        // Not the postings schema: one writer, which says what is wrong.
        None => std::iter::once(0..sorted.num_rows()).collect(),
    };
    // A planned file is written whole: the writer's own cap does not cut it again.
    let options = WriterOptions {
        max_file_bytes: u64::MAX,
        ..target.options.clone()
    };
    let handle = tokio::runtime::Handle::current();
    let files = plan.into_iter().enumerate().map(|(part, rows)| {
        let batch = sorted.slice(rows.start, rows.len());
        let (store, target, options, handle) = (
            store.clone(),
            target.clone(),
            options.clone(),
            handle.clone(),
        );
        super::offload::blocking(move || {
            let mut writer = PostingsWriter::new(
                store,
                target.root.clone(),
                target.dim,
                target.code_bytes,
                target.payload_fields.clone(),
                options,
            )?;
            let part = u32::try_from(part).unwrap_or(u32::MAX);
            handle.block_on(writer.write_bucket_from(bucket, part, vec![batch]))?;
            Ok(writer.files().to_vec())
        })
    });
    Ok(futures::future::try_join_all(files).await?.concat())
}

/// What training made, and every stage after it reads: the centroid
/// hierarchy and, in an index with codes, the codes' quantiser.
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    pub hierarchy: &'a Hierarchy,
    pub quantizer: Option<&'a Quantizer>,
    /// The recall calibration measured over these centroids
    /// (`calibration.json`), when `index.json` names one.
    pub calibration: Option<&'a crate::format::calibration::Calibration>,
    /// The calibration queries' neighbours, when this build measured them:
    /// with codes, [`publish`] measures the re-rank factor on the written
    /// postings and records it in the calibration.
    pub neighbours: Option<&'a super::calibrate::Neighbours>,
}

/// Writes the documents of a built snapshot through `writer`: the centroids
/// of the model's hierarchy, `quantizer.json` when `definition` names one,
/// `source-files.json`, `footers.json` and `manifest.json` for `files`
/// (every bucket's, in any order) and `definition` as `index.json`, each
/// create-if-absent. The commit is the caller's
/// ([`SnapshotWriter::publish`]): nothing is visible before it. Returns
/// the wall time of the codes' re-rank measurement (zero without one).
///
/// # Errors
/// [`BuildError::Internal`] when `definition` and the model disagree on the
/// quantiser; manifest and storage errors.
pub async fn publish(
    writer: &SnapshotWriter,
    files: Vec<FileEntry>,
    model: Model<'_>,
    definition: &IndexDefinition,
    source_files: Option<FileRecord<'_>>,
) -> Result<std::time::Duration, BuildError> {
    let Model {
        hierarchy,
        quantizer,
        calibration,
        neighbours,
    } = model;
    let folder = writer.folder();
    let store = writer.store();
    let centroids = crate::format::centroids::encode(hierarchy)
        .map_err(|e| BuildError::Internal(e.to_string()))?;
    put_if_absent(
        store.as_ref(),
        &definition.centroids_path(&folder.path)?,
        centroids,
    )
    .await?;
    match (&definition.quantizer, quantizer) {
        (Some(rel), Some(q)) => {
            writer
                .put(rel, Bytes::from(crate::format::quantizer::encode(q)))
                .await?;
        }
        (None, None) => {}
        (rel, _) => {
            return Err(BuildError::Internal(format!(
                "index.json names quantizer {rel:?}, but the build has {} quantizer",
                if quantizer.is_some() { "a" } else { "no" }
            )));
        }
    }
    put_source_files(writer, definition, source_files).await?;
    let manifest = crate::postings::writer::manifest_of(
        files,
        definition.nlist,
        hierarchy.cid_offsets.clone(),
    )?;
    let postings_root = definition
        .postings_manifest_path(&folder.path)?
        .parent()
        .unwrap_or_default();
    crate::postings::writer::publish(store, &postings_root, &manifest).await?;
    // The postings are readable now: the codes' re-rank is measured on them
    // before the calibration that records it is written.
    let start = std::time::Instant::now();
    let mut measuring = std::time::Duration::ZERO;
    match (&definition.calibration, calibration) {
        (Some(rel), Some(c)) => {
            let mut c = c.clone();
            if let (Some(q), Some(n)) = (quantizer, neighbours) {
                c.rerank = super::calibrate::rerank_of(
                    store,
                    &folder.path,
                    definition,
                    hierarchy,
                    q,
                    &c,
                    n,
                )
                .await?;
                measuring = start.elapsed();
            }
            writer.put(rel, Bytes::from(c.encode())).await?;
        }
        (None, _) => {}
        (Some(rel), None) => {
            return Err(BuildError::Internal(format!(
                "index.json names calibration {rel:?}, but the build has none"
            )));
        }
    }
    writer
        .put(INDEX_DEFINITION_FILE, Bytes::from(definition.to_json()))
        .await?;
    Ok(measuring)
}

/// What a snapshot records of a Parquet source: its file set and, with an
/// id column, the ids each file holds.
#[derive(Debug, Clone, Copy)]
pub struct FileRecord<'a> {
    pub files: &'a SourceFiles,
    pub ids: Option<&'a crate::format::source_ids::SourceIds>,
}

/// Writes `source-files.json` where `definition` names it, and before it
/// `source-ids.parquet` when the record has ids (pinned by `ids`).
///
/// # Errors
/// [`BuildError::Internal`] when `definition` and `source_files` disagree
/// on whether there is one; storage failures.
pub async fn put_source_files(
    writer: &SnapshotWriter,
    definition: &IndexDefinition,
    source_files: Option<FileRecord<'_>>,
) -> Result<(), BuildError> {
    match (&definition.source_files, source_files) {
        (Some(rel), Some(record)) => {
            let mut files = record.files.clone();
            files.ids = match record.ids {
                Some(ids) => Some(
                    writer
                        .put(crate::format::source_ids::SOURCE_IDS_FILE, ids.encode())
                        .await?,
                ),
                None => None,
            };
            writer.put(rel, Bytes::from(files.to_json_bytes())).await?;
            Ok(())
        }
        (None, None) => Ok(()),
        (rel, _) => Err(BuildError::Internal(format!(
            "index.json names source files {rel:?}, but the build has {} file set",
            if source_files.is_some() { "a" } else { "no" }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::postings_table::postings_schema;

    fn rows(cids: &[i32]) -> RecordBatch {
        let schema = postings_schema(1, None, &[]);
        let n = cids.len();
        let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(cids.to_vec())),
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
                Arc::new(FixedSizeBinaryArray::try_new(4, bytes.into(), None).unwrap()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn group_by_root_splits_by_cid_offsets_keeping_input_order() {
        let grouped = group_by_root(&[0, 2, 2, 5], &rows(&[4, 0, 3, 1, 2])).unwrap();
        let summary: Vec<(u32, Vec<i32>)> = grouped
            .iter()
            .map(|(r, b)| {
                let c = b.column(0).as_primitive::<Int32Type>();
                (*r, c.values().to_vec())
            })
            .collect();
        assert_eq!(summary, vec![(0, vec![0, 1]), (2, vec![4, 3, 2])]);
    }

    #[test]
    fn group_by_root_rejects_a_cid_outside_the_lists() {
        for bad in [-1, 5] {
            let e = group_by_root(&[0, 2, 5], &rows(&[0, bad])).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("row 1 has cid {bad}, outside 0..5")),
                "{e}"
            );
        }
    }

    /// PQ4 assigns only the rows it trains on: the codebook equals the one
    /// trained on every sample row's residual (which draws the same rows).
    #[test]
    fn pq4_trained_on_its_rows_alone_equals_pq4_trained_on_all() {
        use rand::{Rng, SeedableRng};
        let (dim, n) = (12, 12_288);
        assert!(
            crate::quant::pq4_training_rows(n, 3).len() < n,
            "the test draws rows"
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let vectors: Vec<f32> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let sample = Sample {
            vectors: vectors.clone(),
            dim,
            rows: n as u64,
            skipped_rows: 0,
        };
        let params = BuildParams {
            nlist: 8,
            ..BuildParams::default()
        };
        let (hierarchy, _) = train(&sample, &params).unwrap();
        let quantizer = train_quantizer(&sample, &hierarchy, Scheme::Pq4Fs, 3).unwrap();
        let cids = hierarchy.assign(&vectors, AssignMode::Exact).unwrap();
        let all = Quantizer::train_pq4(&hierarchy.residuals(&vectors, &cids), dim, 3).unwrap();
        assert_eq!(quantizer.pq4_centroids(), all.pq4_centroids());
    }

    #[test]
    fn sample_positions_are_seeded_sorted_and_bounded() {
        let p = BuildParams {
            nlist: 4,
            max_points_per_centroid: 10,
            ..BuildParams::default()
        };
        let a = sample_positions(1000, &p);
        assert_eq!(a.len(), 40);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a[39] < 1000);
        assert_eq!(a, sample_positions(1000, &p));
        assert_ne!(
            a,
            sample_positions(
                1000,
                &BuildParams {
                    seed: 9,
                    ..p.clone()
                }
            )
        );
        assert_eq!(sample_positions(30, &p), (0..30).collect::<Vec<u64>>());
    }
}
