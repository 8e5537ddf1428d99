//! The query API: [`Index::open`], [`Index::search`], [`Index::search_batch`],
//! plus [`Index::warm`] (read every footer: warm queries cost one round of
//! requests) and [`Index::preload`] (every posting in memory, like FAISS).
//!
//! ```text
//! Index::open(store, location)       index.json, then manifest.json + footers.json + centroids: one GET each, no LIST
//! Index::open_current(store, index)  the commit log's current snapshot, every document checked against its pin
//! Index::search(query, params)       probe → plan → fetch → scan → SearchResult { hits, stats }
//! ```
//!
//! Memory: the footer cache holds at most [`IndexOptions::footer_cache_bytes`]
//! (a footer is ~1 KiB per row group). The decoded-postings cache holds at most
//! [`IndexOptions::postings_cache_bytes`] (0 = off); a row group costs
//! `rows × (dim × 4 + 8)` bytes plus its payload. `preload` lifts that bound and
//! holds the whole table: `ntotal × (dim × 4 + 8)` bytes (1M × 128-d ≈ 520 MB).

use crate::distance::Metric;
use crate::filter::Filter;
use crate::format::definition::IndexDefinition;
use crate::format::footers::FooterPin;
use crate::format::manifest::Manifest;
use crate::format::postings_table::RESERVED_COLUMNS;
use crate::format::snapshot::{Snapshot, SnapshotError};
use crate::kmeans::Hierarchy;
use crate::probe::ProbeError;
use crate::probe::executor::{
    DecodedRowGroup, Postings, RowGroupCache, Want, json_rows, on_rayon, payload_rows, scan_batch,
};
use crate::probe::filtered::{
    FilterBudget, FilteredRows, PayloadTable, WHOLE_TABLE_SHARE, filter_budget, pruned_pages,
};
use crate::probe::footer::FooterCache;
use crate::probe::live::LiveRows;
use crate::probe::quantized::{
    CodeScan, PagePlan, approximate, rerank_in_memory, rotate_leaves, scan_codes,
};
use crate::probe::select::{DEFAULT_ROOT_FACTOR, ranked_cids, select_cids};
use crate::probe::stats::micros;
pub use crate::probe::stats::{FilterPlan, SearchStats};
use crate::quant::Quantizer;
use crate::store::parquet_reader::FOOTER_PREFETCH;
use crate::topk::TopK;
use arrow::buffer::BooleanBuffer;
use object_store::ObjectStore;
use object_store::path::Path;
use rayon::prelude::*;
use serde::Serialize;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;
use thiserror::Error;

/// Errors of opening and querying an index.
#[derive(Debug, Error)]
pub enum IndexError {
    /// The snapshot's documents are missing, invalid, unpinned or disagree.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("query {query} has dimension {actual}, the index has {expected}")]
    DimensionMismatch {
        query: usize,
        expected: usize,
        actual: usize,
    },
    #[error("query {query} has a non-finite value {value} at position {position}")]
    NonFinite {
        query: usize,
        position: usize,
        value: f32,
    },
    /// Under cosine, a query whose components are all zero has no cosine
    /// to anything.
    #[error("query {query} is a zero vector: cosine distance needs a direction")]
    NoDirection { query: usize },
    #[error("k must be at least 1")]
    InvalidK,
    #[error("nprobe {nprobe} must be within 1..={nlist} (nlist)")]
    InvalidNprobe { nprobe: usize, nlist: usize },
    /// `--preload codes` of an index built without codes.
    #[error("the index has no codes (built with --codes none): preload all or nothing")]
    NoCodes,
    /// A filter that does not parse, names an unknown column or compares a
    /// column with a literal of another type.
    #[error("filter: {0}")]
    Filter(#[from] crate::filter::FilterError),
    #[error("max_nprobe {max_nprobe} must be within {nprobe}..={nlist} (nprobe..=nlist)")]
    InvalidMaxNprobe {
        max_nprobe: usize,
        nprobe: usize,
        nlist: usize,
    },
}

/// Tuning of an opened index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexOptions {
    /// Byte bound of the footer cache (default 64 MiB).
    pub footer_cache_bytes: usize,
    /// Byte bound of the decoded-postings cache (default 0: off).
    pub postings_cache_bytes: usize,
    /// Tail bytes read with each footer (default 64 KiB).
    pub prefetch_hint: u64,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            footer_cache_bytes: 64 << 20,
            postings_cache_bytes: 0,
            prefetch_hint: FOOTER_PREFETCH,
        }
    }
}

/// Parameters of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchParams {
    /// Neighbours to return (≥ 1). Default 10.
    pub k: usize,
    /// Leaf lists to probe (1..=nlist). Default 16.
    pub nprobe: usize,
    /// Roots are visited nearest first until they own `root_factor × nprobe`
    /// leaves (0, the default, visits every root: exact leaf selection); the
    /// nearest `nprobe` leaves among them are probed.
    pub root_factor: usize,
    /// Return the payload columns of each hit. Default false.
    pub include_payload: bool,
    /// In an index with codes: the best `rerank × k` candidates by their
    /// codes are ranked again by their exact distance (default
    /// [`DEFAULT_RERANK`]); 0 returns the codes' estimated distances and
    /// reads no f32 at all. Ignored without codes (the scan is exact).
    pub rerank: usize,
    /// A SQL `WHERE` expression over the payload columns (see
    /// [`crate::filter`]): only rows where it is true are returned. The
    /// search goes on past `nprobe` lists, nearest first, until `k` rows
    /// match or `max_nprobe` lists are probed, or scans every match when the
    /// filter is selective ([`SearchStats::filter_plan`]). Every leaf is
    /// ranked for a filtered query: `root_factor` does not apply.
    pub filter: Option<String>,
    /// With a filter: the most lists probed while looking for `k` matches
    /// (default every list). A query that stops there with fewer says so
    /// ([`SearchStats::capped`]).
    pub max_nprobe: Option<usize>,
}

/// Re-rank factor by default (see `docs/benchmarks.md`).
pub const DEFAULT_RERANK: usize = 4;

impl Default for SearchParams {
    fn default() -> Self {
        Self {
            k: 10,
            nprobe: 16,
            root_factor: DEFAULT_ROOT_FACTOR,
            include_payload: false,
            rerank: DEFAULT_RERANK,
            filter: None,
            max_nprobe: None,
        }
    }
}

/// What an index holds in memory ([`Index::preload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preload {
    /// Nothing: postings are read from storage per query (footers cached).
    #[default]
    None,
    /// Codes, rowids and the `vector` offset indexes of every row group: a
    /// re-rank reads only the `vector` pages of its candidates.
    Codes,
    /// Every column a query reads (vectors included): queries do no IO.
    All,
}

impl std::str::FromStr for Preload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Preload::None),
            "codes" => Ok(Preload::Codes),
            "all" => Ok(Preload::All),
            _ => Err(format!(
                "unknown preload {s:?}: expected none, codes or all"
            )),
        }
    }
}

/// One neighbour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The source row identity.
    pub rowid: i64,
    /// Smaller is closer (see [`crate::distance::Metric`]).
    pub distance: f32,
    /// The payload columns, when asked for ([`SearchParams::include_payload`]);
    /// left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The answer to one query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    /// Best first; ties by the smaller rowid.
    pub hits: Vec<Hit>,
    pub stats: SearchStats,
    /// With [`SearchParams::include_payload`]: the hits' payload columns as
    /// Arrow, one row per hit in order, typed as stored (each [`Hit::payload`]
    /// is its row as JSON).
    #[serde(skip)]
    pub payload: Option<arrow::record_batch::RecordBatch>,
}

/// An opened index snapshot.
#[derive(Debug)]
pub struct Index {
    store: Arc<dyn ObjectStore>,
    definition: IndexDefinition,
    /// The base postings manifest.
    manifest: Manifest,
    /// Every postings file (the base's, then each delta table's).
    files: Vec<crate::format::manifest::FileEntry>,
    /// Which rows are live: the deletions and where each layer starts.
    live: LiveRows,
    /// The footer pin of each postings file (`footers.json`).
    footer_pins: Vec<FooterPin>,
    /// The object path of each manifest file, resolved once at open.
    postings_paths: Arc<[Path]>,
    /// Shared with the search's compute steps on rayon.
    hierarchy: Arc<Hierarchy>,
    /// The quantiser of the `code` column and every leaf rotated by it, in
    /// an index with codes.
    codes: Option<Arc<(Quantizer, Vec<f32>)>>,
    /// What [`Index::preload`] put in memory.
    preloaded: std::sync::Mutex<Preload>,
    /// The payload of every row group, concatenated by [`Index::preload`]:
    /// a filter is evaluated over it in one pass.
    payload_table: std::sync::OnceLock<Arc<PayloadTable>>,
    footers: FooterCache,
    row_groups: RowGroupCache,
    /// Most footer bytes per cid seen so far (sizes the next footer reads).
    footer_per_cid: AtomicU64,
    options: IndexOptions,
}

impl Index {
    /// Open the snapshot whose `index.json` is at `location/index.json`,
    /// with default [`IndexOptions`].
    ///
    /// # Errors
    /// See [`Index::open_with_options`].
    pub async fn open(store: Arc<dyn ObjectStore>, location: &Path) -> crate::Result<Index> {
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
    ) -> crate::Result<Index> {
        let snapshot = Snapshot::open(store.as_ref(), location)
            .await
            .map_err(IndexError::from)?;
        Ok(Self::from_snapshot(store, snapshot, options))
    }

    /// An index over `snapshot` (opened from `store`), with empty caches.
    pub fn from_snapshot(
        store: Arc<dyn ObjectStore>,
        snapshot: Snapshot,
        options: IndexOptions,
    ) -> Index {
        let codes = snapshot.quantizer.map(|q| {
            let rotated = rotate_leaves(&q, &snapshot.hierarchy);
            Arc::new((q, rotated))
        });
        Index {
            store,
            codes,
            preloaded: std::sync::Mutex::new(Preload::None),
            payload_table: std::sync::OnceLock::new(),
            postings_paths: snapshot.postings_paths.into(),
            definition: snapshot.definition,
            manifest: snapshot.manifest,
            files: snapshot.files,
            live: LiveRows {
                deletions: snapshot.deletions,
                layer_starts: snapshot.layer_starts.into(),
            },
            footer_pins: snapshot.footer_pins,
            hierarchy: Arc::new(snapshot.hierarchy),
            footers: FooterCache::new(options.footer_cache_bytes),
            row_groups: RowGroupCache::new(options.postings_cache_bytes),
            footer_per_cid: AtomicU64::new(0),
            options,
        }
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
        &self.hierarchy
    }

    /// The object path of each postings file, in manifest order.
    pub fn postings_paths(&self) -> &[Path] {
        &self.postings_paths
    }

    /// The quantiser of the postings' codes, in an index with codes.
    pub fn quantizer(&self) -> Option<&Quantizer> {
        self.codes.as_deref().map(|(q, _)| q)
    }

    /// What [`Index::preload`] holds in memory.
    pub fn preloaded(&self) -> Preload {
        *self.preloaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The columns a query reads, given what is preloaded.
    fn want(&self, include_payload: bool) -> Want {
        let has_codes = self.codes.is_some();
        Want {
            vectors: !has_codes || self.preloaded() == Preload::All,
            codes: has_codes,
            payload: include_payload,
        }
    }

    /// Bytes held now by the footer cache and by the decoded postings (the
    /// decoded-postings cache, which holds every posting after
    /// [`Index::preload`], and the preloaded payload table), in that order.
    pub fn cache_bytes(&self) -> (usize, usize) {
        let table = self.payload_table.get().map_or(0, |t| t.bytes());
        (self.footers.bytes(), self.row_groups.bytes() + table)
    }

    fn postings(&self) -> Postings<'_> {
        Postings {
            store: self.store.as_ref(),
            paths: &self.postings_paths,
            files: &self.files,
            layer_starts: &self.live.layer_starts,
            footer_pins: &self.footer_pins,
            dim: self.hierarchy.dim,
            code_bytes: self.quantizer().map(Quantizer::code_bytes),
            footers: &self.footers,
            row_groups: &self.row_groups,
            prefetch: self.options.prefetch_hint,
            footer_per_cid: &self.footer_per_cid,
        }
    }

    /// Every row group of postings file `file` (manifest order), its `cid`
    /// and `rowid` and the columns `want` asks for, read and checked as a
    /// query reads them: the footer against its pin in `footers.json`, every
    /// fetched page against its CRC32, every row's cid against its row
    /// group's statistics. The reader of whole files (compaction, the live
    /// ids of a refresh), so no reader of postings checks less than the probe.
    ///
    /// # Errors
    /// [`ProbeError`]: a footer pin, page checksum, cid or store failure,
    /// naming the object, row group and page.
    pub async fn read_file(
        &self,
        file: usize,
        want: Want,
    ) -> Result<Vec<Arc<DecodedRowGroup>>, ProbeError> {
        let postings = self.postings();
        let mut stats = SearchStats::default();
        let footers = postings.footers(&[file], &mut stats).await?;
        let mut cids: Vec<u32> = footers
            .iter()
            .flat_map(|f| f.facts.row_group_cids.iter().copied())
            .collect();
        cids.sort_unstable();
        cids.dedup();
        let mut plan = postings.plan(&cids, &[file], &footers, want, None, &mut stats)?;
        let fetched = postings.fetch(plan.requests(), &mut stats).await?;
        let mut groups = std::mem::take(&mut plan.cached);
        let dim = self.hierarchy.dim;
        groups.extend(on_rayon(move || plan.decode(fetched, dim)).await?);
        Ok(groups)
    }

    /// Every live rowid of every layer (deleted rows left out), read through
    /// [`Index::read_file`] (`cid` and `rowid` only), 16 files at a time.
    ///
    /// # Errors
    /// As [`Index::read_file`].
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

    /// Read every footer not yet cached, all at once (one round), so later
    /// cold queries cost one round. The footer cache must be large enough to
    /// hold them (see [`IndexOptions::footer_cache_bytes`]).
    ///
    /// # Errors
    /// [`ProbeError`] for a missing or invalid postings file.
    pub async fn warm(&self) -> crate::Result<SearchStats> {
        let all: Vec<usize> = (0..self.files.len()).collect();
        let mut stats = SearchStats {
            candidate_files: all.len() as u64,
            ..SearchStats::default()
        };
        let t = Instant::now();
        self.postings().footers(&all, &mut stats).await?;
        stats.plan_us = micros(t.elapsed());
        Ok(stats)
    }

    /// Hold `what` in memory (the decoded-postings cache becomes unbounded):
    /// [`Preload::All`] every column a query reads, so queries do no IO
    /// (`ntotal × (dim × 4 + 8 + code bytes)` bytes); [`Preload::Codes`] the
    /// codes, rowids and `vector` offset indexes (`ntotal × (8 + code
    /// bytes)` plus ≈ 3 bytes a row), so a query reads only the `vector`
    /// pages of its re-rank candidates. See `docs/query.md`.
    ///
    /// # Errors
    /// [`IndexError::NoCodes`] for `Codes` on an index without codes;
    /// [`ProbeError`] for a missing, invalid or corrupt postings file.
    pub async fn preload(&self, what: Preload) -> crate::Result<SearchStats> {
        if what == Preload::Codes && self.codes.is_none() {
            return Err(IndexError::NoCodes.into());
        }
        if what == Preload::None {
            return Ok(SearchStats::default());
        }
        self.row_groups.set_capacity(usize::MAX);
        *self.preloaded.lock().unwrap_or_else(|e| e.into_inner()) = what;
        let all: Vec<u32> = (0..self.manifest.nlist).collect();
        let mut stats = SearchStats::default();
        // With the payload: filters read it, in every serving mode.
        let loaded = self
            .postings()
            .load(&all, self.want(true), &mut stats)
            .await?;
        if self.payload_table.get().is_none() {
            let table = on_rayon(move || PayloadTable::new(&loaded)).await;
            let table = table.map_err(|source| ProbeError::Filter {
                path: self.location_hint(),
                source,
            })?;
            if let Some(table) = table {
                let _ = self.payload_table.set(Arc::new(table));
            }
        }
        Ok(stats)
    }

    /// The first postings file, naming the postings table in errors.
    fn location_hint(&self) -> String {
        self.postings_paths
            .first()
            .map_or_else(String::new, Path::to_string)
    }

    /// Search one query (`dim` values).
    ///
    /// # Errors
    /// [`IndexError::DimensionMismatch`], [`IndexError::NonFinite`],
    /// [`IndexError::InvalidK`], [`IndexError::InvalidNprobe`] for bad input;
    /// [`ProbeError`] for IO failures and a corrupt index. Nothing partial.
    pub async fn search(
        &self,
        query: &[f32],
        params: &SearchParams,
    ) -> crate::Result<SearchResult> {
        let dim = self.hierarchy.dim;
        if query.len() != dim {
            return Err(IndexError::DimensionMismatch {
                query: 0,
                expected: dim,
                actual: query.len(),
            }
            .into());
        }
        let mut results = self.search_batch(query, params).await?;
        Ok(results.remove(0))
    }

    /// Search `queries.len() / dim` queries (row-major). Queries run in
    /// parallel; a row group needed by several of them is read once. Only IO
    /// runs on the calling task: centroid selection, decoding and the scan
    /// run on the rayon pool, awaited through a oneshot, so a tokio worker
    /// (even a `current_thread` runtime) stays free for other tasks.
    ///
    /// # Errors
    /// As [`Index::search`]; a length not a multiple of `dim` is a
    /// `DimensionMismatch` naming the incomplete last query.
    pub async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> crate::Result<Vec<SearchResult>> {
        let dim = self.hierarchy.dim;
        let nlist = self.manifest.nlist as usize;
        if !queries.len().is_multiple_of(dim) {
            let query = queries.len() / dim;
            return Err(IndexError::DimensionMismatch {
                query,
                expected: dim,
                actual: queries.len() % dim,
            }
            .into());
        }
        if let Some((i, &value)) = queries.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(IndexError::NonFinite {
                query: i / dim,
                position: i % dim,
                value,
            }
            .into());
        }
        if params.k == 0 {
            return Err(IndexError::InvalidK.into());
        }
        if params.nprobe == 0 || params.nprobe > nlist {
            return Err(IndexError::InvalidNprobe {
                nprobe: params.nprobe,
                nlist,
            }
            .into());
        }
        if let Some(max) = params.max_nprobe
            && (max < params.nprobe || max > nlist)
        {
            return Err(IndexError::InvalidMaxNprobe {
                max_nprobe: max,
                nprobe: params.nprobe,
                nlist,
            }
            .into());
        }
        // Owned, so that the compute steps can run on rayon (one copy of the
        // batch, not of any posting).
        let queries: Arc<[f32]> = prepare_queries(self.hierarchy.metric, queries, dim)?.into();
        if let Some(text) = params.filter.as_deref() {
            let filter = Arc::new(self.filter(text).await?);
            return self.search_filtered(filter, queries, params).await;
        }
        let (hierarchy, batch) = (Arc::clone(&self.hierarchy), Arc::clone(&queries));
        let (nprobe, root_factor) = (params.nprobe, params.root_factor);
        let selected: Vec<(Vec<u32>, u64)> = on_rayon(move || {
            batch
                .par_chunks_exact(dim)
                .map(|q| {
                    let t = Instant::now();
                    let cids = select_cids(&hierarchy, q, nprobe, root_factor);
                    (cids, micros(t.elapsed()))
                })
                .collect()
        })
        .await;
        let mut union: Vec<u32> = selected
            .iter()
            .flat_map(|(c, _)| c.iter().copied())
            .collect();
        union.sort_unstable();
        union.dedup();
        let mut stats = SearchStats::default();
        let want = self.want(params.include_payload);
        let loaded = self.postings().load(&union, want, &mut stats).await?;
        let masks = self.live.masks(&loaded);
        let input = ScanInput {
            queries,
            selected: selected.into(),
            loaded: loaded.into(),
            masks: masks.into(),
        };
        let tops = self.rank(&input, want, params, &mut stats).await?;
        let per_query = input
            .selected
            .iter()
            .map(|(cids, probe_us)| SearchStats {
                probe_us: *probe_us,
                lists_probed: cids.len() as u64,
                ..stats
            })
            .collect();
        self.results(tops, per_query, &input, params.include_payload)
            .await
    }

    /// Parse `text` as a filter over this index's payload columns (their
    /// names and types from a postings footer: one read, then cached).
    ///
    /// # Errors
    /// [`IndexError::Filter`] naming the column, the types or the syntax
    /// error; [`ProbeError`] when no footer can be read.
    pub async fn filter(&self, text: &str) -> crate::Result<Filter> {
        let schema = self.payload_schema().await?;
        Ok(Filter::parse(text, &schema).map_err(IndexError::from)?)
    }

    /// The payload columns of the postings (an empty schema for an index
    /// without rows).
    async fn payload_schema(&self) -> crate::Result<arrow::datatypes::Schema> {
        if self.files.is_empty() {
            return Ok(arrow::datatypes::Schema::empty());
        }
        let mut stats = SearchStats::default();
        let footer = self.postings().footers(&[0], &mut stats).await?;
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

    /// The filtered path. Every leaf is ranked by distance for each query;
    /// a query first probes its nearest `nprobe` lists (row groups whose
    /// payload statistics rule the filter out are never read) and the
    /// filter is evaluated on the rows read. Then [`filter_budget`] widens
    /// it to as many lists as cost what `nprobe` lists cost without the
    /// filter (all of them: [`FilterPlan::Exhaustive`]), and while fewer
    /// than `k` rows match it doubles its lists, nearest first, up to
    /// `max_nprobe`. Rows read by an earlier step are not read again; the
    /// scan and re-rank then run once over each query's matches.
    async fn search_filtered(
        &self,
        filter: Arc<Filter>,
        queries: Arc<[f32]>,
        params: &SearchParams,
    ) -> crate::Result<Vec<SearchResult>> {
        let (dim, nlist, k) = (self.hierarchy.dim, self.manifest.nlist as usize, params.k);
        let (hierarchy, batch) = (Arc::clone(&self.hierarchy), Arc::clone(&queries));
        let ranked: Vec<(Vec<u32>, u64)> = on_rayon(move || {
            batch
                .par_chunks_exact(dim)
                .map(|q| {
                    let t = Instant::now();
                    let cids = ranked_cids(&hierarchy, q, nlist, 0);
                    (cids, micros(t.elapsed()))
                })
                .collect()
        })
        .await;
        let budget = FilterBudget {
            nprobe: params.nprobe,
            nlist,
            cap: params.max_nprobe.unwrap_or(nlist).min(nlist),
            in_memory: self.preloaded() != Preload::None,
        };
        let want = self.want(true);
        let mut stats = SearchStats::default();
        let mut rows = FilteredRows::default();
        let mut queries_state: Vec<QueryProbe> = ranked
            .iter()
            .map(|(cids, _)| QueryProbe {
                lists: params.nprobe.min(cids.len()),
                plan: FilterPlan::Probe,
                capped: false,
            })
            .collect();
        let mut round = 0;
        loop {
            let mut need: Vec<u32> = queries_state
                .iter()
                .zip(&ranked)
                .flat_map(|(s, (cids, _))| cids[..s.lists].iter().copied())
                .filter(|c| !rows.read.contains(c))
                .collect();
            need.sort_unstable();
            need.dedup();
            if !need.is_empty() {
                let (fresh, pruned) = self
                    .postings()
                    .load_filtered(&need, want, Some(&filter), &mut stats)
                    .await?;
                let whole = budget.in_memory && need.len() * WHOLE_TABLE_SHARE >= nlist;
                let table = self.payload_table.get().filter(|_| whole);
                rows.add(
                    &need,
                    fresh,
                    pruned,
                    &filter,
                    table,
                    &self.postings_paths,
                    &self.live,
                )
                .await?;
            }
            let mut changed = false;
            for (s, (cids, _)) in queries_state.iter_mut().zip(&ranked) {
                let seen = rows.count(&cids[..s.lists]);
                let most = budget.cap.min(cids.len());
                let lists = if round == 0 {
                    let (lists, plan) = filter_budget(&budget, seen);
                    s.plan = plan;
                    lists.min(cids.len())
                } else if seen.matched < k as u64 {
                    s.capped = s.lists >= most && most < cids.len();
                    (s.lists * 2).min(most).max(s.lists)
                } else {
                    s.lists
                };
                changed |= lists != s.lists;
                s.lists = lists;
            }
            round += 1;
            if !changed && round > 1 {
                break;
            }
        }
        let selected: Vec<(Vec<u32>, u64)> = queries_state
            .iter()
            .zip(&ranked)
            .map(|(s, (cids, us))| {
                let mut probed = cids[..s.lists].to_vec();
                probed.sort_unstable();
                (probed, *us)
            })
            .collect();
        let per_query_matched: Vec<u64> = selected
            .iter()
            .map(|(cids, _)| rows.count(cids).matched)
            .collect();
        let input = ScanInput {
            queries,
            selected: selected.into(),
            loaded: rows.loaded.into(),
            masks: rows.masks.into(),
        };
        let tops = self.rank(&input, want, params, &mut stats).await?;
        let per_query = input
            .selected
            .iter()
            .zip(&queries_state)
            .zip(per_query_matched)
            .map(|(((cids, probe_us), s), rows_matched)| SearchStats {
                probe_us: *probe_us,
                lists_probed: cids.len() as u64,
                rows_matched,
                filter_plan: s.plan,
                capped: s.capped,
                ..stats
            })
            .collect();
        self.results(tops, per_query, &input, params.include_payload)
            .await
    }

    /// The `k` best of each query among the rows of its probed lists (only
    /// those set in the masks, when given): an exact scan, or the codes and
    /// their re-rank.
    async fn rank(
        &self,
        input: &ScanInput,
        want: Want,
        params: &SearchParams,
        stats: &mut SearchStats,
    ) -> crate::Result<Vec<TopK>> {
        if let Some(codes) = &self.codes {
            return self.search_codes(codes, input, want, params, stats).await;
        }
        let (metric, k, dim) = (self.hierarchy.metric, params.k, self.hierarchy.dim);
        let input = input.clone();
        let (tops, took) = on_rayon(move || {
            let t = Instant::now();
            let probed = input.probed();
            let tops = scan_batch(
                metric,
                dim,
                &input.queries,
                &probed,
                &input.loaded,
                &input.masks,
                k,
            );
            (tops, t.elapsed())
        })
        .await;
        stats.scan_us += micros(took);
        Ok(tops)
    }

    /// Each query's hits (with their payload when asked for) and stats.
    async fn results(
        &self,
        tops: Vec<TopK>,
        per_query: Vec<SearchStats>,
        input: &ScanInput,
        include_payload: bool,
    ) -> crate::Result<Vec<SearchResult>> {
        let (paths, input) = (Arc::clone(&self.postings_paths), input.clone());
        on_rayon(move || {
            tops.into_iter()
                .zip(per_query)
                .zip(input.selected.iter())
                .map(|((top, stats), (cids, _))| -> crate::Result<SearchResult> {
                    let top = top.into_sorted();
                    let payload = if include_payload {
                        let rowids: Vec<i64> = top.iter().map(|n| n.rowid).collect();
                        payload_rows(&paths, &input.loaded, cids, &rowids)?
                    } else {
                        None
                    };
                    let mut json = match &payload {
                        Some(p) => {
                            json_rows(&paths.first().map_or_else(String::new, Path::to_string), p)?
                                .into_iter()
                                .map(Some)
                                .collect()
                        }
                        None => vec![None; top.len()],
                    };
                    let hits = top
                        .into_iter()
                        .zip(json.drain(..))
                        .map(|(n, payload)| Hit {
                            rowid: n.rowid,
                            distance: n.distance,
                            payload,
                        })
                        .collect();
                    Ok(SearchResult {
                        hits,
                        stats,
                        payload,
                    })
                })
                .collect()
        })
        .await
    }

    /// The quantised path: score the codes, keep `rerank × k` candidates a
    /// query, and rank them exactly, from memory (`Preload::All`) or from
    /// their `vector` pages (one more round). Compute on rayon.
    async fn search_codes(
        &self,
        codes: &Arc<(Quantizer, Vec<f32>)>,
        input: &ScanInput,
        want: Want,
        params: &SearchParams,
        stats: &mut SearchStats,
    ) -> crate::Result<Vec<TopK>> {
        let (k, rerank, dim) = (params.k, params.rerank, self.hierarchy.dim);
        let keep = k.saturating_mul(rerank).max(k);
        let metric = self.hierarchy.metric;
        let (codes, hierarchy, paths) = (
            Arc::clone(codes),
            Arc::clone(&self.hierarchy),
            Arc::clone(&self.postings_paths),
        );
        let inp = input.clone();
        let (scanned, took) = on_rayon(move || {
            let t = Instant::now();
            let (q, rgs, masks) = (&inp.queries, &inp.loaded, &inp.masks);
            let probed = inp.probed();
            let scan = CodeScan {
                quantizer: &codes.0,
                hierarchy: &hierarchy,
                rotated_leaves: &codes.1,
            };
            let scanned = scan_codes(scan, &paths, q, &probed, rgs, masks, keep).map(
                |(candidates, scored)| {
                    if rerank == 0 {
                        (approximate(candidates, k), scored, None)
                    } else if want.vectors {
                        let tops = rerank_in_memory(metric, dim, q, candidates, rgs, k);
                        (tops, scored, None)
                    } else {
                        let plan = PagePlan::new(&paths, rgs, &candidates);
                        let pruned = pruned_pages(rgs, masks);
                        (Vec::new(), scored, Some((candidates, plan, pruned)))
                    }
                },
            );
            (scanned, t.elapsed())
        })
        .await;
        let (tops, scored, pending) = scanned?;
        stats.codes_scored += scored;
        stats.scan_us += micros(took);
        let Some((candidates, plan, pruned)) = pending else {
            return Ok(tops);
        };
        stats.pages_pruned += pruned;
        let plan = plan?;
        stats.reranked += candidates.iter().map(|c| c.len() as u64).sum::<u64>();
        stats.pages_read += plan.pages() as u64;
        stats.page_bytes += plan.page_bytes();
        let t = Instant::now();
        let fetched = self.postings().fetch(plan.requests(), stats).await?;
        stats.rerank_fetch_us += micros(t.elapsed());
        let (inp, paths) = (input.clone(), Arc::clone(&self.postings_paths));
        let (ranked, took) = on_rayon(move || {
            let t = Instant::now();
            let (q, rgs) = (&inp.queries, &inp.loaded);
            let ranked = plan.rank(fetched, &paths, rgs, metric, dim, q, candidates, k);
            (ranked, t.elapsed())
        })
        .await;
        stats.scan_us += micros(took);
        Ok(ranked?)
    }
}

/// A stored code that differs from its vector's code ([`Index::reencode_sample`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeMismatch {
    pub path: String,
    pub row_group: usize,
    pub row: usize,
    pub rowid: i64,
}

impl Index {
    /// Re-encode the vectors of `lists` lists (evenly spaced over the cids)
    /// and compare them with their stored codes: encoding is deterministic
    /// on every CPU ([`crate::quant`]), so any difference is corruption or a
    /// writer bug. Returns the mismatches (the first 16 at most); nothing
    /// for an index without codes.
    ///
    /// # Errors
    /// [`ProbeError`] for a postings file that cannot be read.
    pub async fn reencode_sample(&self, lists: usize) -> crate::Result<Vec<CodeMismatch>> {
        let Some(codes) = &self.codes else {
            return Ok(Vec::new());
        };
        let nlist = self.manifest.nlist as usize;
        let step = nlist.div_ceil(lists.max(1)).max(1);
        let cids: Vec<u32> = (0..nlist).step_by(step).map(|c| c as u32).collect();
        let want = Want {
            vectors: true,
            codes: true,
            payload: false,
        };
        let mut stats = SearchStats::default();
        let loaded = self.postings().load(&cids, want, &mut stats).await?;
        let (codes, hierarchy, paths) = (
            Arc::clone(codes),
            Arc::clone(&self.hierarchy),
            Arc::clone(&self.postings_paths),
        );
        Ok(on_rayon(move || {
            let (q, dim) = (&codes.0, hierarchy.dim);
            let width = q.code_bytes();
            let mut out = Vec::new();
            let mut code = vec![0u8; width];
            for rg in &loaded {
                let stored = rg.codes.as_deref().unwrap_or_default();
                let cids = vec![rg.cid; rg.rowids.len()];
                let residuals = hierarchy.residuals(&rg.vectors, &cids);
                for (row, residual) in residuals.chunks_exact(dim).enumerate() {
                    q.encode(residual, &mut code);
                    if stored.get(row * width..(row + 1) * width) != Some(&code[..])
                        && out.len() < 16
                    {
                        out.push(CodeMismatch {
                            path: paths.get(rg.file).map_or_else(String::new, Path::to_string),
                            row_group: rg.row_group,
                            row,
                            rowid: rg.rowids[row],
                        });
                    }
                }
            }
            out
        })
        .await)
    }
}

impl Index {
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
    ) -> crate::Result<Index> {
        let snapshot = Snapshot::open_current(&store, location)
            .await
            .map_err(IndexError::from)?;
        Ok(Self::from_snapshot(
            store,
            snapshot,
            IndexOptions::default(),
        ))
    }
}

/// The queries [`Metric::prepare`]d for the scan: unchanged under L2 and
/// inner product, unit-normalised copies under cosine (the stored vectors
/// are normalised at build time, so the scan's cosine is `1 − dot`).
///
/// # Errors
/// [`IndexError::NoDirection`] for a zero query under cosine.
fn prepare_queries(
    metric: Metric,
    queries: &[f32],
    dim: usize,
) -> Result<Cow<'_, [f32]>, IndexError> {
    if metric != Metric::Cosine {
        return Ok(Cow::Borrowed(queries));
    }
    let mut prepared = queries.to_vec();
    for (query, q) in prepared.chunks_exact_mut(dim).enumerate() {
        metric
            .prepare(q)
            .map_err(|_| IndexError::NoDirection { query })?;
    }
    Ok(Cow::Owned(prepared))
}

/// Where a filtered query's probing stands.
#[derive(Debug, Clone, Copy)]
struct QueryProbe {
    /// Its nearest lists probed so far.
    lists: usize,
    plan: FilterPlan,
    capped: bool,
}

/// What the scan of a batch reads, shared with its compute steps on rayon
/// (a clone counts references): the prepared queries, each query's probed
/// lists (sorted) with its probe time, the row groups loaded for them and,
/// with a filter, the rows of each that match (empty: every row).
#[derive(Debug, Clone)]
struct ScanInput {
    queries: Arc<[f32]>,
    selected: Arc<[(Vec<u32>, u64)]>,
    loaded: Arc<[Arc<DecodedRowGroup>]>,
    masks: Arc<[Option<BooleanBuffer>]>,
}

impl ScanInput {
    /// Each query's probed lists.
    fn probed(&self) -> Vec<&[u32]> {
        self.selected.iter().map(|(c, _)| c.as_slice()).collect()
    }
}
