//! The query API, the face of the query engine ([`crate::probe`]):
//! [`Index::open_with`] (open, then preload), [`Index::search`],
//! [`Index::search_batch`], plus [`Index::warm`] (read every footer: warm
//! queries cost one round of requests) and [`Index::preload`] (every posting
//! in memory, like FAISS).
//!
//! ```text
//! Index::open(store, location)       index.json, then manifest.json + footers.json + centroids: one GET each, no LIST
//! Index::open_current(store, index)  the commit log's current snapshot, every document checked against its pin
//! Index::open_ahead(store, index, …) the latest commit's snapshot from its bundle in one round, with the
//!                                    commit log's check (Pending) to await alongside the first query
//! Index::search(query, params)       QueryPlan::new (every check, once) → Engine::run → hits as JSON
//! ```
//!
//! Memory: the footer cache holds at most [`IndexOptions::footer_cache_bytes`]
//! (a footer is ~1 KiB per row group). The decoded-postings cache holds at most
//! [`IndexOptions::postings_cache_bytes`] (0 = off); a row group costs
//! `rows × (dim × 4 + 8)` bytes plus its payload. `preload` lifts that bound and
//! holds the whole table: `ntotal × (dim × 4 + 8)` bytes (1M × 128-d ≈ 520 MB).

use crate::filter::Filter;
use crate::format::definition::IndexDefinition;
use crate::format::manifest::Manifest;
pub use crate::format::snapshot::Pending;
use crate::format::snapshot::{Opened, Snapshot, SnapshotError};
use crate::format::warehouse::Commit;
use crate::kmeans::Hierarchy;
use crate::probe::ProbeError;
use crate::probe::engine::Engine;
pub use crate::probe::engine::{CodeMismatch, Explain, Preload};
pub use crate::probe::load::{IndexOptions, PostingsReader};
pub use crate::probe::query::{
    DEFAULT_NPROBE, DEFAULT_RERANK, DEFAULT_TARGET_RECALL, Hit, ProbeDepth, QueryError,
    SearchParams, SearchResult,
};
use crate::probe::query::{IndexShape, QueryPlan};
use crate::probe::stats::micros;
pub use crate::probe::stats::{FilterPlan, OpenStats, Scoring, SearchStats};
use crate::probe::target::{CalibrationStatus, RecallModel};
use crate::quant::Quantizer;
use crate::store::counting::CountingStore;
use crate::store::hedge::count_hedges;
use crate::store::local_read::LocalFolder;
use arrow::record_batch::RecordBatch;
use object_store::ObjectStore;
use object_store::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// Errors of opening and querying an index.
#[derive(Debug, Error)]
pub enum IndexError {
    /// The snapshot's documents are missing, invalid, unpinned or disagree.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A query or search parameter the index cannot answer.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// `--preload codes` of an index built without codes.
    #[error("the index has no codes (built with --codes none): preload all or nothing")]
    NoCodes,
    /// A filter that does not parse, names an unknown column or compares a
    /// column with a literal of another type.
    #[error("filter: {0}")]
    Filter(#[from] crate::filter::FilterError),
    /// Hits' payload columns that JSON cannot hold.
    #[error("{path}: the payload of the hits cannot be written as JSON: {source}")]
    Payload {
        path: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// Reading the postings failed (IO, or a corrupt index). Becomes
    /// [`crate::Error::Probe`] in the crate-wide error.
    #[error(transparent)]
    Probe(#[from] ProbeError),
}

/// An opened index snapshot.
#[derive(Debug)]
pub struct Index {
    /// The commit that made this snapshot current, when it was opened
    /// through the commit log.
    commit: Option<Commit>,
    /// The snapshot folder (holding `index.json`).
    folder: Path,
    definition: IndexDefinition,
    /// The base postings manifest.
    manifest: Manifest,
    /// Rows of every layer, less the deleted.
    live_rows: u64,
    /// What reading the snapshot's documents cost (zero for an index made
    /// [`Index::from_snapshot`]).
    open: OpenStats,
    engine: Engine,
}

impl Index {
    /// Open the snapshot whose `index.json` is at `location/index.json`,
    /// with default [`IndexOptions`].
    ///
    /// # Errors
    /// See [`Index::open_with_options`].
    pub async fn open(store: Arc<dyn ObjectStore>, location: &Path) -> Result<Index, IndexError> {
        Self::open_with_options(store, location, IndexOptions::default()).await
    }

    /// Open the snapshot in `location` (see [`Snapshot::open`]): `index.json`,
    /// then `manifest.json`, `footers.json` and the centroids concurrently,
    /// one GET each. Never lists.
    ///
    /// # Errors
    /// [`IndexError::Snapshot`] for a missing, unreadable, invalid or
    /// inconsistent snapshot (an unknown format version is its parser's
    /// `Incompatible`).
    pub async fn open_with_options(
        store: Arc<dyn ObjectStore>,
        location: &Path,
        options: IndexOptions,
    ) -> Result<Index, IndexError> {
        let (snapshot, open) = counted(&store, |s| async move {
            Snapshot::open(s.as_ref(), location).await
        })
        .await?;
        let mut index = Self::from_snapshot(store, snapshot, options);
        index.open = open;
        Ok(index)
    }

    /// Open the current snapshot of the index named by `location` (see
    /// [`Snapshot::open_current`]): the snapshot its commit log makes current,
    /// with every document checked against the commit's pins, or, when
    /// `location` is itself a snapshot folder (holding `index.json`), that
    /// snapshot, unpinned. Never lists.
    ///
    /// # Errors
    /// [`crate::format::warehouse::WarehouseError::NoSnapshot`] (inside
    /// [`IndexError::Snapshot`]) when neither exists, and the errors of
    /// [`Index::open`].
    pub async fn open_current(
        store: Arc<dyn ObjectStore>,
        location: &Path,
    ) -> Result<Index, IndexError> {
        Self::open_with(store, location, IndexOptions::default(), Preload::None).await
    }

    /// What the CLI, the server and Python open: the current snapshot of
    /// `location` ([`Index::open_current`]) with `options`, then `preload`
    /// in memory ([`Index::preload`]). When the latest commit's bundle
    /// holds its snapshot, the commit log's check that it is current
    /// (versions `N` and `N + 1`, [`Pending`]) runs alongside the preload's
    /// reads, so a preloaded open costs one round less; the index is given
    /// only once the check says `true`, and when it says `false` (a newer
    /// commit), the current snapshot is opened as [`Index::open_current`]
    /// does and preloaded instead.
    ///
    /// # Errors
    /// As [`Index::open_current`] and [`Index::preload`].
    pub async fn open_with(
        store: Arc<dyn ObjectStore>,
        location: &Path,
        options: IndexOptions,
        preload: Preload,
    ) -> Result<Index, IndexError> {
        let footers_ahead = reads_footers_ahead(&store, &options);
        let mut meter = OpenMeter::new(&store);
        let view = meter.view();
        let opened = meter
            .measure(Snapshot::open_latest(&view, location, footers_ahead))
            .await?;
        let (snapshot, pending) = match opened {
            Opened::Current(snapshot) => {
                return Self::opened(store, snapshot, meter.stats(), options, preload).await;
            }
            Opened::Ahead(snapshot, pending) => (snapshot, pending),
        };
        let mut index = Self::from_snapshot(Arc::clone(&store), snapshot, options.clone());
        // The check first, so that its requests leave before the preload's
        // planning runs.
        let (current, loaded) =
            futures::join!(meter.measure(pending.is_current()), index.preload(preload));
        // The check decides first: a preload of a superseded snapshot may
        // fail (its files collected), which is no error of the current one.
        if !current? {
            let (snapshot, open) = counted(&store, |s| async move {
                Snapshot::open_current_with(&s, location, footers_ahead).await
            })
            .await?;
            return Self::opened(store, snapshot, open, options, preload).await;
        }
        loaded?;
        index.open = meter.stats();
        Ok(index)
    }

    /// [`Index::open_with`], without waiting for the commit log's check
    /// when the latest commit's bundle holds its snapshot
    /// ([`Snapshot::open_latest`]): one round instead of two. The index then
    /// comes with the check it still owes ([`Pending`]). Await that check
    /// alongside the first query, and give no answer before it says `true`.
    /// When it says `false`, a newer commit exists: open again with
    /// [`Index::open_with`]. `None` when the open was confirmed. What a new
    /// process per query (`parqivf search`) uses, so its first query's
    /// round overlaps the check.
    ///
    /// # Errors
    /// As [`Index::open_with`].
    pub async fn open_ahead(
        store: Arc<dyn ObjectStore>,
        location: &Path,
        options: IndexOptions,
        preload: Preload,
    ) -> Result<(Index, Option<Pending>), IndexError> {
        let footers_ahead = reads_footers_ahead(&store, &options);
        let (opened, mut open) = counted(&store, |s| async move {
            Snapshot::open_latest(&s, location, footers_ahead).await
        })
        .await?;
        let (snapshot, pending) = match opened {
            Opened::Current(snapshot) => (snapshot, None),
            Opened::Ahead(snapshot, pending) => (snapshot, Some(pending)),
        };
        open.ahead = pending.is_some();
        let index = Self::opened(store, snapshot, open, options, preload).await?;
        Ok((index, pending))
    }

    /// The index over `snapshot`, whose open cost `open`, with `preload`
    /// in memory.
    async fn opened(
        store: Arc<dyn ObjectStore>,
        snapshot: Snapshot,
        open: OpenStats,
        options: IndexOptions,
        preload: Preload,
    ) -> Result<Index, IndexError> {
        let mut index = Self::from_snapshot(store, snapshot, options);
        index.open = open;
        index.preload(preload).await?;
        Ok(index)
    }

    /// An index over `snapshot` (opened from `store`), with empty caches.
    pub fn from_snapshot(
        store: Arc<dyn ObjectStore>,
        snapshot: Snapshot,
        options: IndexOptions,
    ) -> Index {
        let reader = PostingsReader::new(store, &snapshot, options);
        let live_rows = snapshot
            .files
            .iter()
            .map(|f| f.rows)
            .sum::<u64>()
            .saturating_sub(snapshot.deletions.len() as u64);
        let Snapshot {
            commit,
            folder,
            definition,
            manifest,
            hierarchy,
            quantizer,
            calibration,
            ..
        } = snapshot;
        Index {
            commit,
            folder,
            definition,
            manifest,
            live_rows,
            open: OpenStats::default(),
            engine: Engine::new(
                reader,
                hierarchy,
                quantizer,
                calibration.map(RecallModel::new),
            ),
        }
    }

    /// What opening this index cost: rounds, requests, bytes, hedges and
    /// time of reading its documents (zero for an index made
    /// [`Index::from_snapshot`]).
    pub fn open_stats(&self) -> OpenStats {
        self.open
    }

    /// The commit that made this snapshot current, when it was opened
    /// through the commit log (`None` for a bare snapshot folder).
    pub fn commit(&self) -> Option<&Commit> {
        self.commit.as_ref()
    }

    /// The snapshot folder (holding `index.json`).
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The index definition (`index.json`).
    pub fn definition(&self) -> &IndexDefinition {
        &self.definition
    }

    /// The postings manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The centroid hierarchy.
    pub fn hierarchy(&self) -> &Hierarchy {
        self.engine.hierarchy()
    }

    /// The object path of each postings file, in manifest order.
    pub fn postings_paths(&self) -> &[Path] {
        self.engine.reader().paths()
    }

    /// The reader of the snapshot's postings (every check the probe makes).
    pub fn reader(&self) -> &PostingsReader {
        self.engine.reader()
    }

    /// The quantiser of the postings' codes, in an index with codes.
    pub fn quantizer(&self) -> Option<&Quantizer> {
        self.engine.quantizer()
    }

    /// The build's recall calibration (`calibration.json`), when it
    /// measured one: what a target recall and the estimates use.
    pub fn calibration(&self) -> Option<&crate::format::calibration::Calibration> {
        self.engine.recall_model().map(RecallModel::calibration)
    }

    /// Whether the calibration still describes the index: the rows it was
    /// measured on against the live rows now (a refresh adds and deletes
    /// rows, and carries the calibration). `None` without one.
    pub fn calibration_status(&self) -> Option<CalibrationStatus> {
        self.calibration()
            .map(|c| CalibrationStatus::new(c, self.live_rows))
    }

    /// What [`Index::preload`] holds in memory.
    pub fn preloaded(&self) -> Preload {
        self.engine.preloaded()
    }

    /// Bytes held now by the footer cache and by the decoded postings (the
    /// decoded-postings cache, which holds every posting after
    /// [`Index::preload`], and the preloaded payload table), in that order.
    pub fn cache_bytes(&self) -> (usize, usize) {
        self.engine.cache_bytes()
    }

    /// The disk tier the index reads through ([`IndexOptions::disk_cache`]).
    pub fn disk_cache(&self) -> Option<&Arc<crate::store::disk_cache::DiskCache>> {
        self.engine.reader().disk_cache()
    }

    /// Read every footer not yet cached, all at once (one round), so later
    /// cold queries cost one round. The footer cache must be large enough to
    /// hold them (see [`IndexOptions::footer_cache_bytes`]). With a disk
    /// tier, also copy every postings object into it, so later queries read
    /// nothing from the store.
    ///
    /// # Errors
    /// [`ProbeError`] for a missing or invalid postings file.
    pub async fn warm(&self) -> Result<SearchStats, IndexError> {
        Ok(self.engine.reader().warm().await?)
    }

    /// Hold `what` in memory (the decoded-postings cache becomes unbounded):
    /// [`Preload::All`] every column a query reads, so queries do no IO
    /// (`ntotal × (dim × 4 + 8 + code bytes)` bytes); [`Preload::Codes`] the
    /// codes, rowids and `vector` offset indexes (`ntotal × (8 + code
    /// bytes)` plus ≈ 3 bytes a row, and a fast-scan scheme's blocks,
    /// transposed here), so a query reads only the `vector` pages of its
    /// re-rank candidates. See `docs/query.md`.
    ///
    /// # Errors
    /// [`IndexError::NoCodes`] for `Codes` on an index without codes;
    /// [`ProbeError`] for a missing, invalid or corrupt postings file.
    pub async fn preload(&self, what: Preload) -> Result<SearchStats, IndexError> {
        if what == Preload::Codes && self.quantizer().is_none() {
            return Err(IndexError::NoCodes);
        }
        Ok(self.engine.preload(what).await?)
    }

    /// Search one query (`dim` values).
    ///
    /// # Errors
    /// [`IndexError::Query`] for bad input; [`IndexError::Filter`] for a
    /// filter that does not hold; [`ProbeError`] for IO failures and a
    /// corrupt index. Nothing partial.
    pub async fn search(
        &self,
        query: &[f32],
        params: &SearchParams,
    ) -> Result<SearchResult, IndexError> {
        let expected = self.hierarchy().dim;
        if query.len() != expected {
            let actual = query.len();
            let e = QueryError::DimensionMismatch {
                query: 0,
                expected,
                actual,
            };
            return Err(e.into());
        }
        let mut results = self.search_batch(query, params).await?;
        Ok(results.remove(0))
    }

    /// Search `queries.len() / dim` queries (row-major). Queries run in
    /// parallel; a row group needed by several of them is read once. Only IO
    /// runs on the calling task: centroid selection, decoding and the scan
    /// run on the rayon pool, awaited through a oneshot, so a tokio worker
    /// (even a `current_thread` runtime) stays free for other tasks; called
    /// from a rayon worker, they run in place
    /// ([`crate::probe::offload::drive_on_rayon`]).
    ///
    /// # Errors
    /// As [`Index::search`]; a length not a multiple of `dim` is a
    /// `DimensionMismatch` naming the incomplete last query.
    pub async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<SearchResult>, IndexError> {
        let plan = self.plan(queries, params).await?;
        let (results, hedges) = count_hedges(self.engine.run(plan)).await;
        let mut results = results?;
        for result in &mut results {
            result.stats.hedges = hedges;
            self.render_payload(result)?;
        }
        Ok(results)
    }

    /// [`Index::search_batch`] for a caller that is not a rayon worker and
    /// shares its thread with other searches (`serve`'s tokio workers,
    /// Python's callers): the search starts on a rayon worker
    /// ([`crate::probe::offload::start_on_rayon`]), so that one whose reads
    /// are all served in place (a mapped local file, the RAM tier,
    /// preloaded codes) costs one hand-over to the pool in all instead of
    /// two a step.
    ///
    /// # Errors
    /// As [`Index::search_batch`].
    pub fn search_batch_shared(
        self: &Arc<Self>,
        queries: Vec<f32>,
        params: SearchParams,
    ) -> impl Future<Output = Result<Vec<SearchResult>, IndexError>> + Send + 'static {
        let index = Arc::clone(self);
        crate::probe::offload::start_on_rayon(
            async move { index.search_batch(&queries, &params).await },
        )
    }

    /// How `queries` would be searched with `params`, without searching
    /// ([`Explain`]): each query's lists and, with a filter, the matches its
    /// lists hold (counted by reading only the filter's columns) and what
    /// scoring them would read each way.
    ///
    /// # Errors
    /// As [`Index::search_batch`].
    pub async fn explain(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<Explain>, IndexError> {
        let plan = self.plan(queries, params).await?;
        Ok(self.engine.explain(plan).await?)
    }

    /// The validated plan of `queries` with `params`, its filter parsed.
    async fn plan(&self, queries: &[f32], params: &SearchParams) -> Result<QueryPlan, IndexError> {
        let mut plan = QueryPlan::new(queries, params, self.shape())?;
        if let Some(text) = params.filter.as_deref() {
            plan.filter = Some(Arc::new(self.filter(text).await?));
        }
        Ok(plan)
    }

    /// How `params` choose each query's lists in this index: the
    /// `nprobe` or target recall they name, or the index's default
    /// ([`SearchParams::probe`]).
    ///
    /// # Errors
    /// [`QueryError::NprobeAndTarget`], [`QueryError::NotCalibrated`].
    pub fn probe_depth(&self, params: &SearchParams) -> Result<ProbeDepth, QueryError> {
        params.probe(self.shape())
    }

    /// The re-rank factor `params` use in this index: the one named, else
    /// the build's measured one, else [`DEFAULT_RERANK`] (in an index
    /// without codes, the exact scan ignores it).
    pub fn rerank(&self, params: &SearchParams) -> usize {
        params.rerank_in(self.shape())
    }

    /// What a query plan is checked against.
    fn shape(&self) -> IndexShape {
        let hierarchy = self.hierarchy();
        // The build's measured re-rank factor, and the k it measured it at.
        let measured = self.engine.recall_model().and_then(|m| {
            let c = m.calibration();
            c.rerank.map(|r| (r as usize, c.k as usize))
        });
        IndexShape {
            dim: hierarchy.dim,
            nlist: self.manifest.nlist as usize,
            metric: hierarchy.metric,
            has_codes: self.quantizer().is_some(),
            calibrated: self.engine.recall_model().is_some(),
            rerank: measured.map_or(DEFAULT_RERANK, |(r, _)| r),
            rerank_k: measured.map_or(0, |(_, k)| k),
        }
    }

    /// Parse `text` as a filter over this index's payload columns (their
    /// names and types from a postings footer: one read, then cached).
    ///
    /// # Errors
    /// [`IndexError::Filter`] naming the column, the types or the syntax
    /// error; [`ProbeError`] when no footer can be read.
    pub async fn filter(&self, text: &str) -> Result<Filter, IndexError> {
        let schema = self.engine.reader().payload_schema().await?;
        Ok(Filter::parse(text, &schema)?)
    }

    /// Each hit's payload row as a JSON object ([`Hit::payload`]), written
    /// by arrow-json from [`SearchResult::payload`].
    fn render_payload(&self, result: &mut SearchResult) -> Result<(), IndexError> {
        let Some(batch) = &result.payload else {
            return Ok(());
        };
        let rows = json_rows(batch).map_err(|source| IndexError::Payload {
            path: self.engine.reader().location_hint(),
            source,
        })?;
        for (hit, row) in result.hits.iter_mut().zip(rows) {
            hit.payload = Some(row);
        }
        Ok(())
    }

    /// Re-encode the vectors of `lists` lists and compare them with their
    /// stored codes (see [`Engine::reencode_sample`]).
    ///
    /// # Errors
    /// [`ProbeError`] for a postings file that cannot be read.
    pub async fn reencode_sample(&self, lists: usize) -> Result<Vec<CodeMismatch>, IndexError> {
        Ok(self.engine.reencode_sample(lists).await?)
    }
}

/// Whether an open reads the postings footers the latest commit's copy
/// lists with the documents: not when a query reads them at no round's
/// cost, from a bare local folder (mapped) or a disk tier (kept across
/// processes once read).
fn reads_footers_ahead(store: &Arc<dyn ObjectStore>, options: &IndexOptions) -> bool {
    options.disk_cache.is_none() && LocalFolder::of(store.as_ref()).is_none()
}

/// `read` a snapshot through a counting view of `store` (one step of an
/// [`OpenMeter`]), and what it cost.
async fn counted<T, F, Fut>(
    store: &Arc<dyn ObjectStore>,
    read: F,
) -> Result<(T, OpenStats), SnapshotError>
where
    F: FnOnce(Arc<dyn ObjectStore>) -> Fut,
    Fut: std::future::Future<Output = Result<T, SnapshotError>>,
{
    let mut meter = OpenMeter::new(store);
    let read = read(meter.view());
    let out = meter.measure(read).await?;
    Ok((out, meter.stats()))
}

/// What an open's reads cost: they go through a counting view of the
/// store ([`OpenMeter::view`]), each step of the open is timed and its
/// hedges counted ([`OpenMeter::measure`]), and [`OpenMeter::stats`] sums
/// them, from the first request to the end of the last step measured.
struct OpenMeter {
    counting: CountingStore,
    start: std::time::Instant,
    took: std::time::Duration,
    hedges: u64,
}

impl OpenMeter {
    fn new(store: &Arc<dyn ObjectStore>) -> OpenMeter {
        OpenMeter {
            counting: CountingStore::new(Arc::clone(store)),
            start: std::time::Instant::now(),
            took: std::time::Duration::ZERO,
            hedges: 0,
        }
    }

    /// The store the open reads through.
    fn view(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.counting.clone())
    }

    /// Run one step of the open.
    async fn measure<F: std::future::Future>(&mut self, step: F) -> F::Output {
        let (out, hedges) = count_hedges(step).await;
        self.hedges += hedges;
        self.took = self.start.elapsed();
        out
    }

    fn stats(&self) -> OpenStats {
        let io = self.counting.counts();
        OpenStats {
            rounds: io.rounds,
            requests: io.get_requests + io.head_requests,
            bytes: io.get_bytes,
            hedges: self.hedges,
            open_us: micros(self.took),
            ahead: false,
        }
    }
}

/// Each row of `batch` as a JSON object (nulls kept as `null`), as
/// arrow-json writes it: dates and timestamps as ISO 8601 text, every other
/// type as its JSON value.
///
/// # Errors
/// arrow-json's, for a type it cannot write.
pub fn json_rows(
    batch: &RecordBatch,
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, arrow::error::ArrowError> {
    if batch.num_columns() == 0 || batch.num_rows() == 0 {
        return Ok(vec![serde_json::Map::new(); batch.num_rows()]);
    }
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::JsonArray>(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    serde_json::from_slice(&writer.into_inner())
        .map_err(|e| arrow::error::ArrowError::JsonError(e.to_string()))
}
