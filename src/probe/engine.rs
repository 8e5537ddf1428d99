//! The query engine: [`Engine::run`] executes a [`QueryPlan`] from centroid
//! selection to each query's hits, every step on this path:
//!
//! ```text
//! select   (rayon)  each query's lists: its nearest `nprobe`, or every list ranked when filtered
//! gather   (IO)     the row groups of those lists through the postings reader; a filter's
//!                   rounds widen them, nearest first (`filtered`), and mask the rows that match
//! rank     (rayon)  the exact scan (`scan`), or the codes and their re-rank (`quantized`,
//!                   one more round for the `vector` pages from storage), then each
//!                   query's answer: its top-k, payload rows and stats (`results`), in
//!                   the same step
//! ```
//!
//! The engine owns what a query reads: the [`PostingsReader`] with its
//! caches, the centroids, the quantiser and what [`Engine::preload`] put in
//! memory. Only IO runs on the calling task; every CPU step runs on rayon
//! ([`on_rayon`]), so a tokio worker stays free for other tasks, except a
//! re-rank whose pages are small enough that the hand-over would cost more
//! ([`on_rayon_unless_small`]).

use super::ProbeError;
use super::filtered::{
    FilterBudget, FilteredRows, PayloadTable, Reads, ScoreCost, WHOLE_TABLE_SHARE, Widening,
    scoring,
};
use super::load::PostingsReader;
use super::offload::{on_rayon, on_rayon_unless_small};
use super::quantized::{
    CodeRank, CodeScan, PagePlan, matched_candidates, matched_pages, pruned_pages, rank_codes,
    rotate_leaves,
};
use super::query::{QueryPlan, RankMode, SearchResult};
use super::results::{Answers, Own, results};
use super::rows::{DecodedRowGroup, ProbedRows, Want};
use super::scan::scan_batch;
use super::select::{self, Coarse, EveryLeaf};
use super::stats::{FilterPlan, Scoring, SearchStats, micros};
use super::target::RecallModel;
use crate::filter::Filter;
use crate::kmeans::{Hierarchy, LeafPanels};
use crate::quant::Quantizer;
use crate::topk::TopK;
use arrow::buffer::BooleanBuffer;
use object_store::path::Path;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// What an index holds in memory ([`Engine::preload`]).
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

/// The quantiser of the `code` column and every leaf rotated by it.
#[derive(Debug)]
struct Codes {
    quantizer: Quantizer,
    rotated_leaves: Vec<f32>,
}

/// The query engine of one opened snapshot.
#[derive(Debug)]
pub struct Engine {
    reader: PostingsReader,
    /// Shared with the compute steps on rayon.
    hierarchy: Arc<Hierarchy>,
    /// The hierarchy's leaves in panels: every list selection's distances.
    panels: Arc<LeafPanels>,
    codes: Option<Arc<Codes>>,
    /// The build's recall calibration: target recalls and estimates.
    recall: Option<Arc<RecallModel>>,
    /// What [`Engine::preload`] put in memory.
    preloaded: Mutex<Preload>,
    /// The row groups [`Engine::preload`] loaded, by cid.
    held: Mutex<Option<Arc<Held>>>,
    /// The payload of every row group, concatenated by [`Engine::preload`]:
    /// a filter is evaluated over it in one pass.
    payload_table: OnceLock<Arc<PayloadTable>>,
}

/// What the rank of a batch reads, shared with its compute steps on rayon
/// (a clone counts references): the prepared queries, each query's probed
/// lists (sorted), the row groups loaded for them and, with a filter or
/// deletions, the rows of each a query may see (empty: every row).
#[derive(Debug, Clone)]
struct Gathered {
    queries: Arc<[f32]>,
    probed: Arc<[Vec<u32>]>,
    loaded: Arc<[Arc<DecodedRowGroup>]>,
    masks: Arc<[Option<BooleanBuffer>]>,
}

impl Gathered {
    /// The queries' width (row-major, one query a probed set).
    fn dim(&self) -> usize {
        self.queries.len() / self.probed.len().max(1)
    }

    fn probed(&self) -> Vec<&[u32]> {
        self.probed.iter().map(Vec::as_slice).collect()
    }

    /// The rows to rank, with `probed` from [`Gathered::probed`].
    fn rows<'a>(&'a self, probed: &'a [&'a [u32]]) -> ProbedRows<'a> {
        ProbedRows {
            queries: &self.queries,
            cids: probed,
            loaded: &self.loaded,
            masks: &self.masks,
        }
    }
}

/// What a filtered batch's rounds found ([`Engine::count`]).
struct Counted {
    rows: FilteredRows,
    /// Each query's probed lists, sorted.
    probed: Vec<Vec<u32>>,
    own: Vec<Own>,
    cost: ScoreCost,
    scoring: Scoring,
}

/// The plan of one query ([`Engine::explain`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Explain {
    /// What the index holds in memory.
    pub mode: Preload,
    /// Lists of the first round: `nprobe`, or those a target recall chose.
    pub lists_first: usize,
    /// Lists after a filter's widening.
    pub lists_probed: usize,
    pub rows_matched: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_recall: Option<f64>,
    pub filter_plan: FilterPlan,
    pub filter_scoring: Scoring,
    pub capped: bool,
    /// Bytes the batch read to count its matches (footers included), and
    /// of those the payload columns'.
    pub counting_bytes: u64,
    pub counting_payload_bytes: u64,
    /// What the batch's scoring would read each way (the chosen one is
    /// `filter_scoring`); absent without a filter, or for `exact` when the
    /// matches' pages are unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<Reads>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lists: Option<Reads>,
}

/// One query's lists ([`Engine::select`]).
#[derive(Debug)]
struct Selected {
    /// Unfiltered: the lists to probe, sorted. Filtered: every list,
    /// nearest first.
    cids: Vec<u32>,
    /// The lists of the first round.
    start: usize,
    /// The estimated recall of the first round's lists.
    estimate: Option<f64>,
    probe_us: u64,
    /// Unfiltered with `nprobe`: `cids` nearest first (else empty), the
    /// order in which [`scan_order`] puts the lists.
    nearest: Vec<u32>,
}

impl Selected {
    /// A filtered query's lists: every leaf `ranked` nearest first, of
    /// which the first `start` are probed first.
    fn ranked(ranked: Vec<(f32, u32)>, start: usize, estimate: Option<f64>) -> Self {
        Selected {
            cids: ranked.into_iter().map(|l| l.1).collect(),
            start,
            estimate,
            probe_us: 0,
            nearest: Vec::new(),
        }
    }

    /// The estimated recall of a filtered query that probed its nearest
    /// `lists`: its first round's, or, widened, the calibration's at
    /// `lists` when higher.
    fn estimate_after(&self, model: &RecallModel, lists: usize) -> Option<f64> {
        let first = self.estimate?;
        Some(if lists > self.start {
            first.max(model.recall_at(lists))
        } else {
            first
        })
    }
}

/// What a batch's answers need besides its top-k: each query's own stats,
/// the batch's, and whether the payload is asked for.
#[derive(Debug)]
struct Finish {
    own: Vec<Own>,
    include_payload: bool,
    stats: SearchStats,
}

impl Finish {
    /// Each query's answer, `scan_us` more of scan time counted. CPU only.
    fn answers(
        self,
        tops: Vec<TopK>,
        input: &Gathered,
        paths: &[Path],
        scan_us: u64,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let stats = SearchStats {
            scan_us: self.stats.scan_us + scan_us,
            ..self.stats
        };
        let answers = Answers {
            probed: &input.probed,
            loaded: &input.loaded,
            own: self.own,
            include_payload: self.include_payload,
            paths,
        };
        results(tops, answers, stats)
    }
}

/// Where the quantised rank stands after scoring the codes.
enum CodeStep {
    Answered(Vec<SearchResult>),
    Pages(Box<PagesToRank>),
}

/// Candidates to rank from the `vector` pages that `plan` reads.
struct PagesToRank {
    candidates: Vec<TopK>,
    plan: PagePlan,
    finish: Finish,
    input: Gathered,
}

impl PagesToRank {
    /// The step, its stats counted: `took` microseconds of scan, `pruned`
    /// pages spared by the masks, the candidates and the planned pages.
    fn new(
        candidates: Vec<TopK>,
        plan: PagePlan,
        (pruned, took): (u64, u64),
        mut finish: Finish,
        input: Gathered,
    ) -> Self {
        let stats = &mut finish.stats;
        stats.scan_us += took;
        stats.pages_pruned += pruned;
        let reranked = candidates.iter().map(|c| c.len() as u64).sum::<u64>();
        stats.reranked += reranked;
        stats.pages_read += plan.pages() as u64;
        stats.page_bytes += plan.page_bytes();
        stats.minimum_bytes += reranked * 4 * input.dim() as u64;
        PagesToRank {
            candidates,
            plan,
            finish,
            input,
        }
    }
}

impl Engine {
    /// The engine over `reader` (a snapshot's postings), its centroids, in
    /// an index with codes its quantiser, and its recall calibration when
    /// the build measured one. Rotates every leaf by the quantiser and
    /// puts the leaves in panels (CPU, once).
    pub fn new(
        reader: PostingsReader,
        hierarchy: Hierarchy,
        quantizer: Option<Quantizer>,
        recall: Option<RecallModel>,
    ) -> Self {
        let codes = quantizer.map(|quantizer| {
            let rotated_leaves = rotate_leaves(&quantizer, &hierarchy);
            Arc::new(Codes {
                quantizer,
                rotated_leaves,
            })
        });
        Engine {
            reader,
            panels: Arc::new(LeafPanels::new(&hierarchy.leaves, hierarchy.dim)),
            hierarchy: Arc::new(hierarchy),
            codes,
            recall: recall.map(Arc::new),
            preloaded: Mutex::new(Preload::None),
            held: Mutex::new(None),
            payload_table: OnceLock::new(),
        }
    }

    /// The postings reader (with its caches).
    pub fn reader(&self) -> &PostingsReader {
        &self.reader
    }

    /// The centroid hierarchy.
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// The quantiser of the postings' codes, in an index with codes.
    pub fn quantizer(&self) -> Option<&Quantizer> {
        self.codes.as_deref().map(|c| &c.quantizer)
    }

    /// The recall calibration, when the build measured one.
    pub fn recall_model(&self) -> Option<&RecallModel> {
        self.recall.as_deref()
    }

    /// What [`Engine::preload`] holds in memory.
    pub fn preloaded(&self) -> Preload {
        *self.preloaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes held by the footer cache and by the decoded postings (the
    /// decoded-postings cache and the preloaded payload table).
    pub fn cache_bytes(&self) -> (usize, usize) {
        let table = self.payload_table.get().map_or(0, |t| t.bytes());
        let (footers, row_groups) = self.reader.cache_bytes();
        (footers, row_groups + table)
    }

    /// The row groups a preload holds (none before one).
    fn held(&self) -> Option<Arc<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The columns a query reads, given what is preloaded.
    fn want(&self, include_payload: bool) -> Want {
        let has_codes = self.codes.is_some();
        Want {
            vectors: !has_codes || self.preloaded() == Preload::All,
            codes: has_codes,
            payload: include_payload,
            ..Want::default()
        }
    }

    /// Hold `what` in memory (the decoded-postings cache becomes
    /// unbounded), with the payload, and the payload of every row group as
    /// one table for filters. The caller checks that `Codes` has codes.
    ///
    /// # Errors
    /// [`ProbeError`] for a missing, invalid or corrupt postings file.
    pub async fn preload(&self, what: Preload) -> Result<SearchStats, ProbeError> {
        if what == Preload::None {
            return Ok(SearchStats::default());
        }
        self.reader.unbound_row_groups();
        *self.preloaded.lock().unwrap_or_else(|e| e.into_inner()) = what;
        let all: Vec<u32> = (0..self.hierarchy.nlist() as u32).collect();
        let mut stats = SearchStats::default();
        let loaded = self.reader.load(&all, self.want(true), &mut stats).await?;
        let loaded = self.reader.transpose(loaded).await;
        let (live, nlist) = (self.reader.live().clone(), self.hierarchy.nlist());
        let table_wanted = self.payload_table.get().is_none();
        let (held, table) = on_rayon(move || {
            let table = table_wanted.then(|| PayloadTable::new(&loaded));
            let masks = live.masks(&loaded);
            (Held::new(loaded, masks, nlist), table)
        })
        .await;
        if let Some(table) = table {
            let table = table.map_err(|source| ProbeError::Filter {
                path: self.reader.location_hint(),
                source,
            })?;
            if let Some(table) = table {
                let _ = self.payload_table.set(Arc::new(table));
            }
        }
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(held));
        Ok(stats)
    }

    /// Run `plan`: each query's `k` best live rows (those matching its
    /// filter), best first, with their payload when asked for and the
    /// query's stats. Nothing partial.
    ///
    /// # Errors
    /// [`ProbeError`] for IO failures and a corrupt index.
    pub async fn run(&self, plan: QueryPlan) -> Result<Vec<SearchResult>, ProbeError> {
        if plan.filter.is_none()
            && let Some(held) = self.held()
        {
            return self.run_held(plan, held).await;
        }
        let mut stats = SearchStats::default();
        let ranked = self.select(&plan).await;
        let (gathered, own, scoring) = match &plan.filter {
            None => {
                let (gathered, own) = self.gather(&plan, ranked, &mut stats).await?;
                (gathered, own, Scoring::None)
            }
            Some(filter) => {
                let filter = Arc::clone(filter);
                self.gather_filtered(&plan, &filter, ranked, &mut stats)
                    .await?
            }
        };
        let want = self.want(plan.include_payload || plan.filter.is_some());
        let finish = Finish {
            own,
            include_payload: plan.include_payload,
            stats,
        };
        let vectors_held = gathered.loaded.iter().all(|rg| !rg.vectors.is_empty());
        match (scoring, plan.rank, &self.codes) {
            (Scoring::Exact, ..) if !vectors_held => {
                self.rank_matches(gathered, plan.k, finish).await
            }
            (Scoring::Exact, ..) => self.rank_exact(gathered, plan.k, finish).await,
            (_, RankMode::Codes { rerank }, Some(codes)) => {
                let codes = Arc::clone(codes);
                let k = (plan.k, rerank);
                self.rank_codes(codes, gathered, want, k, finish).await
            }
            _ => self.rank_exact(gathered, plan.k, finish).await,
        }
    }

    /// Each query's lists and the time it took ([`select_lists`]), on
    /// rayon.
    async fn select(&self, plan: &QueryPlan) -> Vec<Selected> {
        let (hierarchy, panels) = (Arc::clone(&self.hierarchy), Arc::clone(&self.panels));
        let recall = self.recall.clone();
        let plan = plan.clone();
        on_rayon(move || {
            let coarse = Coarse {
                hierarchy: &hierarchy,
                panels: &panels,
            };
            select_lists(coarse, recall.as_deref(), &plan)
        })
        .await
    }

    /// The unfiltered gather: one load of the union of the queries' lists.
    async fn gather(
        &self,
        plan: &QueryPlan,
        selected: Vec<Selected>,
        stats: &mut SearchStats,
    ) -> Result<(Gathered, Vec<Own>), ProbeError> {
        let mut union: Vec<u32> = selected
            .iter()
            .flat_map(|s| s.cids.iter().copied())
            .collect();
        union.sort_unstable();
        union.dedup();
        let want = self.want(plan.include_payload);
        let loaded = self.reader.load(&union, want, stats).await?;
        let masks = self.reader.live().masks(&loaded);
        let own = own_stats(&selected);
        let gathered = Gathered {
            queries: Arc::clone(&plan.queries),
            probed: selected.into_iter().map(|s| s.cids).collect(),
            loaded: loaded.into(),
            masks: masks.into(),
        };
        Ok((gathered, own))
    }

    /// The filtered gather, in rounds ([`Widening`]): each query first
    /// probes its nearest `nprobe` lists (row groups whose payload
    /// statistics rule the filter out are never read) and the filter is
    /// evaluated on the rows read; then its budget widens it by the rows
    /// that matched, and while fewer than `k` rows match it doubles its
    /// lists, up to the plan's cap. Rows read by an earlier round are not
    /// read again. From storage the rounds read only what counting needs
    /// (the filter's columns, or the whole payload when the answers carry
    /// it, and the `vector` offset indexes); once the lists are known,
    /// [`scoring`] chooses between the matches' exact distances (their
    /// pages) and the row groups holding them ranked as unfiltered, read
    /// then.
    async fn gather_filtered(
        &self,
        plan: &QueryPlan,
        filter: &Arc<Filter>,
        ranked: Vec<Selected>,
        stats: &mut SearchStats,
    ) -> Result<(Gathered, Vec<Own>, Scoring), ProbeError> {
        let counted = self.count(plan, filter, &ranked, stats).await?;
        let Counted {
            rows,
            probed,
            own,
            scoring,
            ..
        } = counted;
        let in_memory = self.preloaded() != Preload::None;
        let (loaded, masks) = if in_memory || scoring == Scoring::Exact {
            (rows.loaded, rows.masks)
        } else {
            self.load_matching(plan, rows, &probed, stats).await?
        };
        let gathered = Gathered {
            queries: Arc::clone(&plan.queries),
            probed: probed.into(),
            loaded: loaded.into(),
            masks: masks.into(),
        };
        Ok((gathered, own, scoring))
    }

    /// The rounds of a filtered batch up to its plan ([`Engine::gather_filtered`]
    /// without the scoring's reads): each query's lists and matches, and
    /// how the batch scores them.
    async fn count(
        &self,
        plan: &QueryPlan,
        filter: &Arc<Filter>,
        ranked: &[Selected],
        stats: &mut SearchStats,
    ) -> Result<Counted, ProbeError> {
        let nlist = self.hierarchy.nlist();
        let budget = FilterBudget {
            nprobe: plan.nprobe,
            nlist,
            cap: plan.cap,
        };
        let in_memory = self.preloaded() != Preload::None;
        let counting = if in_memory {
            self.want(true)
        } else {
            Want {
                payload: plan.include_payload,
                filter_columns: true,
                offsets: true,
                ..Want::default()
            }
        };
        let lists: Vec<Vec<u32>> = ranked.iter().map(|s| s.cids.clone()).collect();
        let starts: Vec<usize> = ranked.iter().map(|s| s.start).collect();
        let mut widening = Widening::new(&lists, &starts, budget, plan.k);
        let mut rows = FilteredRows::default();
        loop {
            let need = widening.need(&lists, &rows);
            if !need.is_empty() {
                let (fresh, pruned) = self
                    .reader
                    .load_filtered(&need, counting, Some(filter), stats)
                    .await?;
                let whole = in_memory && need.len() * WHOLE_TABLE_SHARE >= nlist;
                let table = self.payload_table.get().filter(|_| whole);
                let (paths, live) = (self.reader.paths(), self.reader.live());
                rows.add(&need, fresh, pruned, filter, table, paths, live)
                    .await?;
            }
            if !widening.step(&lists, &rows) {
                break;
            }
        }
        let probed = widening.probed(&lists);
        let matched: Vec<u64> = probed.iter().map(|c| rows.count(c).matched).collect();
        let cost = self.score_cost(plan, &rows, &probed, &matched, in_memory);
        let scoring = scoring(&cost);
        let own = matched
            .iter()
            .zip(widening.states())
            .zip(ranked)
            .map(|((&matched, s), selected)| Own {
                probe_us: selected.probe_us,
                estimated_recall: self
                    .recall
                    .as_ref()
                    .and_then(|m| selected.estimate_after(m, s.lists)),
                rows_matched: matched,
                filter_plan: s.plan,
                filter_scoring: scoring,
                capped: s.capped,
            })
            .collect();
        Ok(Counted {
            rows,
            probed,
            own,
            cost,
            scoring,
        })
    }

    /// The plan of `plan` without running it ([`Explain`]): each query's
    /// lists, and for a filtered batch the rounds that count its matches
    /// (from storage they read only the filter's columns and the `vector`
    /// offset indexes) and what each way of scoring them would read. No
    /// code or vector is read or scored.
    ///
    /// # Errors
    /// [`ProbeError`] for IO failures and a corrupt index.
    pub async fn explain(&self, plan: QueryPlan) -> Result<Vec<Explain>, ProbeError> {
        let mut stats = SearchStats::default();
        let ranked = self.select(&plan).await;
        let mode = self.preloaded();
        let Some(filter) = &plan.filter else {
            return Ok(ranked
                .iter()
                .map(|s| Explain {
                    mode,
                    lists_first: s.start,
                    lists_probed: s.start,
                    estimated_recall: s.estimate,
                    ..Explain::default()
                })
                .collect());
        };
        let counted = self.count(&plan, filter, &ranked, &mut stats).await?;
        let (exact, lists) = (
            counted.cost.reads(Scoring::Exact),
            counted.cost.reads(Scoring::Lists),
        );
        Ok(counted
            .own
            .iter()
            .zip(&counted.probed)
            .zip(&ranked)
            .map(|((own, probed), s)| Explain {
                mode,
                lists_first: s.start,
                lists_probed: probed.len(),
                rows_matched: own.rows_matched,
                estimated_recall: own.estimated_recall,
                filter_plan: own.filter_plan,
                filter_scoring: own.filter_scoring,
                capped: own.capped,
                counting_bytes: stats.bytes,
                counting_payload_bytes: stats.payload_bytes,
                exact,
                lists,
            })
            .collect())
    }

    /// What scoring a filtered batch's matches costs ([`ScoreCost`]), over
    /// the row groups of `rows` its queries `probed` (each query's
    /// `matched` rows). Pure.
    fn score_cost(
        &self,
        plan: &QueryPlan,
        rows: &FilteredRows,
        probed: &[Vec<u32>],
        matched: &[u64],
        in_memory: bool,
    ) -> ScoreCost {
        let mut cids: Vec<u32> = probed.iter().flatten().copied().collect();
        cids.sort_unstable();
        cids.dedup();
        let groups: Vec<usize> = cids
            .iter()
            .flat_map(|c| rows.by_cid.get(c).into_iter().flatten().copied())
            .filter(|&g| rows.matched[g] > 0)
            .collect();
        let (pages, page_bytes) = groups
            .iter()
            .filter_map(|&g| rows.loaded[g].vector_pages.as_deref())
            .flatten()
            .fold((0u64, 0u64), |(n, b), p| {
                (
                    n + 1,
                    b + u64::try_from(p.compressed_page_size).unwrap_or(0),
                )
            });
        let dim = self.hierarchy.dim as u64;
        let keep = match (plan.rank, &self.codes) {
            (RankMode::Codes { rerank }, Some(_)) => plan.k.saturating_mul(rerank) as u64,
            _ => 0,
        };
        let probing = |g: usize| {
            let cid = rows.loaded[g].cid;
            probed
                .iter()
                .filter(|p| p.binary_search(&cid).is_ok())
                .count() as u64
        };
        ScoreCost {
            group_queries: groups.iter().map(|&g| probing(g)).sum(),
            groups: groups.len() as u64,
            scored_rows: matched.iter().sum(),
            group_rows: groups
                .iter()
                .map(|&g| rows.loaded[g].rowids.len() as u64)
                .sum(),
            matched_pages: matched_pages(&rows.loaded, &rows.masks, groups),
            page_bytes: page_bytes.checked_div(pages).unwrap_or(dim * 4),
            row_width: self
                .codes
                .as_ref()
                .map_or(dim * 4, |c| c.quantizer.code_bytes() as u64),
            codes: self.codes.is_some(),
            vector_width: dim * 4,
            rerank_rows: matched.iter().map(|&m| m.min(keep)).sum(),
            ranked_held: in_memory,
            vectors_held: in_memory && self.want(true).vectors,
        }
    }

    /// The row groups of the lists where a query of the batch found a
    /// match, read as an unfiltered query reads them (codes or vectors,
    /// the payload when the answers carry it), each with its mask from
    /// `rows` (a row group the statistics skipped: none set).
    async fn load_matching(
        &self,
        plan: &QueryPlan,
        rows: FilteredRows,
        probed: &[Vec<u32>],
        stats: &mut SearchStats,
    ) -> Result<(Vec<Arc<DecodedRowGroup>>, Vec<Option<BooleanBuffer>>), ProbeError> {
        let mut cids: Vec<u32> = probed
            .iter()
            .flatten()
            .copied()
            .filter(|c| rows.count(&[*c]).matched > 0)
            .collect();
        cids.sort_unstable();
        cids.dedup();
        let loaded = self
            .reader
            .load(&cids, self.want(plan.include_payload), stats)
            .await?;
        let by_group: HashMap<(usize, usize), Option<BooleanBuffer>> = rows
            .loaded
            .iter()
            .map(|rg| (rg.file, rg.row_group))
            .zip(rows.masks)
            .collect();
        let masks = loaded
            .iter()
            .map(|rg| {
                let mask = by_group.get(&(rg.file, rg.row_group)).cloned().flatten();
                Some(mask.unwrap_or_else(|| BooleanBuffer::new_unset(rg.rowids.len())))
            })
            .collect();
        Ok((loaded, masks))
    }

    /// The exact rank: each query's `k` best among the rows of its probed
    /// lists (only those set in the masks, when given), and its answer, in
    /// one step on rayon ([`exact_step`]).
    async fn rank_exact(
        &self,
        input: Gathered,
        k: usize,
        finish: Finish,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let (metric, dim) = (self.hierarchy.metric, self.hierarchy.dim);
        let paths = Arc::clone(self.reader.paths());
        on_rayon(move || exact_step(metric, dim, &paths, input, k, finish)).await
    }

    /// The quantised rank ([`code_step`]): score the codes, keep `rerank ×
    /// k` candidates a query and rank them, in memory (then answer in the
    /// same step), or from their `vector` pages: one more round of reads,
    /// then the exact rank and the answers. Compute on rayon.
    async fn rank_codes(
        &self,
        codes: Arc<Codes>,
        input: Gathered,
        want: Want,
        (k, rerank): (usize, usize),
        finish: Finish,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let hierarchy = Arc::clone(&self.hierarchy);
        let paths = Arc::clone(self.reader.paths());
        let step = on_rayon(move || {
            let ranking = Ranking {
                hierarchy: &hierarchy,
                codes: Some(&codes),
                paths: &paths,
            };
            ranking.codes(input, want.vectors, (k, rerank), finish)
        })
        .await?;
        self.answer(step, k).await
    }

    /// The answers of a rank step: given, or after the `vector` pages of
    /// its candidates are read ([`Engine::rank_pages`]).
    async fn answer(&self, step: CodeStep, k: usize) -> Result<Vec<SearchResult>, ProbeError> {
        match step {
            CodeStep::Answered(answers) => Ok(answers),
            CodeStep::Pages(pages) => self.rank_pages(*pages, k).await,
        }
    }

    /// An unfiltered batch on a preloaded engine: the lists of each query
    /// ([`select_lists`]), the row groups held for them ([`Held`]) and the
    /// rank, in one step on rayon; then, with the vectors in storage
    /// (`--preload codes`), the round of `vector` pages and their rank. The
    /// same answers as [`Engine::gather`] and the rank would give, without
    /// a load (every row group is held) and with one hand-over to rayon
    /// fewer.
    async fn run_held(
        &self,
        plan: QueryPlan,
        held: Arc<Held>,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let (hierarchy, panels) = (Arc::clone(&self.hierarchy), Arc::clone(&self.panels));
        let recall = self.recall.clone();
        let codes = self.codes.clone();
        let paths = Arc::clone(self.reader.paths());
        let vectors = self.want(plan.include_payload).vectors;
        let k = plan.k;
        let step = on_rayon(move || {
            let coarse = Coarse {
                hierarchy: &hierarchy,
                panels: &panels,
            };
            let selected = select_lists(coarse, recall.as_deref(), &plan);
            let (input, own) = held.gather(&plan, selected);
            let mut stats = SearchStats::default();
            stats.planned_row_groups += input.loaded.len() as u64;
            stats.row_groups_cached += input.loaded.len() as u64;
            stats.ram_bytes += input.loaded.iter().map(|d| d.bytes() as u64).sum::<u64>();
            let finish = Finish {
                own,
                include_payload: plan.include_payload,
                stats,
            };
            let ranking = Ranking {
                hierarchy: &hierarchy,
                codes: codes.as_deref(),
                paths: &paths,
            };
            match (plan.rank, codes.as_deref()) {
                (RankMode::Codes { rerank }, Some(_)) => {
                    ranking.codes(input, vectors, (k, rerank), finish)
                }
                _ => ranking.exact(input, k, finish).map(CodeStep::Answered),
            }
        })
        .await?;
        self.answer(step, k).await
    }

    /// The exact rank of a filtered batch's few matches: every row each
    /// query may see in its probed row groups ([`matched_candidates`]),
    /// from the `vector` pages holding them (no code is read or scored).
    async fn rank_matches(
        &self,
        input: Gathered,
        k: usize,
        finish: Finish,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let paths = Arc::clone(self.reader.paths());
        let pages = on_rayon(move || {
            let t = Instant::now();
            let probed = input.probed();
            let candidates = matched_candidates(input.rows(&probed));
            let plan = PagePlan::new(&paths, &input.loaded, &candidates)?;
            let pruned = pruned_pages(&input.loaded, &input.masks);
            let took = micros(t.elapsed());
            Ok::<_, ProbeError>(PagesToRank::new(
                candidates,
                plan,
                (pruned, took),
                finish,
                input,
            ))
        })
        .await?;
        self.rank_pages(pages, k).await
    }

    /// Read the pages of `pages`' plan (one round), then rank its
    /// candidates exactly and answer, on rayon.
    async fn rank_pages(
        &self,
        mut pages: PagesToRank,
        k: usize,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let (metric, dim) = (self.hierarchy.metric, self.hierarchy.dim);
        let t = Instant::now();
        let fetched = self
            .reader
            .fetch(pages.plan.requests(), &mut pages.finish.stats)
            .await?;
        pages.finish.stats.rerank_fetch_us += micros(t.elapsed());
        let paths = Arc::clone(self.reader.paths());
        // A one-query re-rank reads a few dozen pages: in place.
        on_rayon_unless_small(fetched.bytes(), move || {
            let t = Instant::now();
            let PagesToRank {
                candidates,
                plan,
                finish,
                input,
            } = pages;
            let (q, rgs) = (&input.queries, &input.loaded);
            let tops = plan.rank(fetched, &paths, rgs, metric, dim, q, candidates, k)?;
            finish.answers(tops, &input, &paths, micros(t.elapsed()))
        })
        .await
    }

    /// Re-encode the vectors of `lists` lists (evenly spaced over the cids)
    /// and compare them with their stored codes: encoding is deterministic
    /// on every CPU ([`crate::quant`]), so any difference is corruption or a
    /// writer bug. Returns the mismatches (the first 16 at most); nothing
    /// for an index without codes.
    ///
    /// # Errors
    /// [`ProbeError`] for a postings file that cannot be read.
    pub async fn reencode_sample(&self, lists: usize) -> Result<Vec<CodeMismatch>, ProbeError> {
        let Some(codes) = &self.codes else {
            return Ok(Vec::new());
        };
        let nlist = self.hierarchy.nlist();
        let step = nlist.div_ceil(lists.max(1)).max(1);
        let cids: Vec<u32> = (0..nlist).step_by(step).map(|c| c as u32).collect();
        let want = Want {
            vectors: true,
            codes: true,
            ..Want::default()
        };
        let loaded = self
            .reader
            .load(&cids, want, &mut SearchStats::default())
            .await?;
        let (codes, hierarchy) = (Arc::clone(codes), Arc::clone(&self.hierarchy));
        let paths = Arc::clone(self.reader.paths());
        Ok(on_rayon(move || reencode(&codes.quantizer, &hierarchy, &paths, &loaded)).await)
    }
}

/// What a rank step reads besides its input: the centroids, the
/// quantiser (an index with codes) and the postings paths (for errors).
struct Ranking<'a> {
    hierarchy: &'a Hierarchy,
    codes: Option<&'a Codes>,
    paths: &'a [Path],
}

impl Ranking<'_> {
    /// The exact rank of every probed row, and the answers. CPU only.
    fn exact(
        &self,
        input: Gathered,
        k: usize,
        finish: Finish,
    ) -> Result<Vec<SearchResult>, ProbeError> {
        let (metric, dim) = (self.hierarchy.metric, self.hierarchy.dim);
        exact_step(metric, dim, self.paths, input, k, finish)
    }

    /// The quantised rank ([`rank_codes`]): the answers when the vectors
    /// are held (`vectors_held`) or `rerank` is 0, else the pages to read.
    /// CPU only.
    fn codes(
        &self,
        input: Gathered,
        vectors_held: bool,
        (k, rerank): (usize, usize),
        mut finish: Finish,
    ) -> Result<CodeStep, ProbeError> {
        let t = Instant::now();
        let Some(codes) = self.codes else {
            return self.exact(input, k, finish).map(CodeStep::Answered);
        };
        let scan = CodeScan {
            quantizer: &codes.quantizer,
            hierarchy: self.hierarchy,
            rotated_leaves: &codes.rotated_leaves,
        };
        let probed = input.probed();
        let rows = input.rows(&probed);
        let (rank, scored) = rank_codes(scan, self.paths, rows, (k, rerank), vectors_held)?;
        finish.stats.codes_scored += scored;
        let took = micros(t.elapsed());
        match rank {
            CodeRank::Ranked(tops) => finish
                .answers(tops, &input, self.paths, took)
                .map(CodeStep::Answered),
            CodeRank::Pages {
                candidates,
                plan,
                pruned,
            } => Ok(CodeStep::Pages(Box::new(PagesToRank::new(
                candidates,
                plan,
                (pruned, took),
                finish,
                input,
            )))),
        }
    }
}

/// The exact rank: each query's `k` best among the rows of its probed
/// lists (only those set in the masks, when given), and its answer. CPU
/// only.
fn exact_step(
    metric: crate::distance::Metric,
    dim: usize,
    paths: &[Path],
    input: Gathered,
    k: usize,
    finish: Finish,
) -> Result<Vec<SearchResult>, ProbeError> {
    let t = Instant::now();
    let probed = input.probed();
    let tops = scan_batch(metric, dim, input.rows(&probed), k);
    finish.answers(tops, &input, paths, micros(t.elapsed()))
}

/// What [`Engine::preload`] loaded, held by the engine: every row group
/// (with its live-row mask) and the row groups of each cid, so that an
/// unfiltered batch finds its lists without a load ([`Engine::run_held`]).
#[derive(Debug)]
struct Held {
    loaded: Vec<Arc<DecodedRowGroup>>,
    /// Empty when every row is live (as [`super::live::LiveRows::masks`]).
    masks: Vec<Option<BooleanBuffer>>,
    /// Indexes in `loaded` of the row groups of each cid.
    by_cid: Vec<Vec<usize>>,
}

impl Held {
    fn new(
        loaded: Vec<Arc<DecodedRowGroup>>,
        masks: Vec<Option<BooleanBuffer>>,
        nlist: usize,
    ) -> Held {
        let mut by_cid = vec![Vec::new(); nlist];
        for (g, rg) in loaded.iter().enumerate() {
            if let Some(groups) = by_cid.get_mut(rg.cid as usize) {
                groups.push(g);
            }
        }
        Held {
            loaded,
            masks,
            by_cid,
        }
    }

    /// The rank input of `plan` with each query's `selected` lists: the
    /// row groups of their union, as [`Engine::gather`] loads them, and
    /// each query's own stats.
    fn gather(&self, plan: &QueryPlan, selected: Vec<Selected>) -> (Gathered, Vec<Own>) {
        let union = scan_order(&selected, self.by_cid.len());
        let groups: Vec<usize> = union
            .iter()
            .flat_map(|&c| self.by_cid.get(c as usize).into_iter().flatten().copied())
            .collect();
        let loaded: Vec<Arc<DecodedRowGroup>> = groups
            .iter()
            .map(|&g| Arc::clone(&self.loaded[g]))
            .collect();
        let masks: Vec<Option<BooleanBuffer>> = if self.masks.is_empty() {
            Vec::new()
        } else {
            groups.iter().map(|&g| self.masks[g].clone()).collect()
        };
        let own = own_stats(&selected);
        let gathered = Gathered {
            queries: Arc::clone(&plan.queries),
            probed: selected.into_iter().map(|s| s.cids).collect(),
            loaded: loaded.into(),
            masks: masks.into(),
        };
        (gathered, own)
    }
}

/// The union of the lists of a batch, in the order its scan visits them:
/// by the nearest place any query gives a list (`Selected::nearest`; a
/// query without that order gives its lists no place), then by cid. A
/// query of one list after another scans its nearest lists first, so its
/// bound tightens soonest and fewer of its codes are offered to its
/// selection; the answers do not depend on the order.
fn scan_order(selected: &[Selected], nlist: usize) -> Vec<u32> {
    let mut union: Vec<u32> = selected
        .iter()
        .flat_map(|s| s.cids.iter().copied())
        .collect();
    union.sort_unstable();
    union.dedup();
    let mut place = vec![u32::MAX; nlist];
    for s in selected {
        for (rank, &c) in s.nearest.iter().enumerate() {
            if let Some(p) = place.get_mut(c as usize) {
                *p = (*p).min(rank as u32);
            }
        }
    }
    let place_of = |c: u32| place.get(c as usize).copied().unwrap_or(u32::MAX);
    union.sort_by_key(|&c| (place_of(c), c));
    union
}

/// Each unfiltered query's own stats: its selection time and estimated
/// recall.
fn own_stats(selected: &[Selected]) -> Vec<Own> {
    selected
        .iter()
        .map(|s| Own {
            probe_us: s.probe_us,
            estimated_recall: s.estimate,
            ..Own::default()
        })
        .collect()
}

/// Each query's lists and the time it took: its `nprobe` nearest (within
/// `root_factor`), those a target recall chose, or, with a filter, every
/// list nearest first ([`Selected`]). CPU only (parallel over queries).
///
/// Every selection but a root factor's own ranks every leaf: the queries
/// go [`LeafPanels::QUERIES`] at a time through one pass over the leaf panels
/// ([`select::each_query`]), and each query's share of that pass is counted
/// in its selection time.
fn select_lists(
    coarse: Coarse<'_>,
    recall: Option<&RecallModel>,
    plan: &QueryPlan,
) -> Vec<Selected> {
    let dim = coarse.hierarchy.dim;
    let (nprobe, root_factor, every) = (plan.nprobe, plan.root_factor, plan.filter.is_some());
    let (target, cap) = (plan.target, plan.cap);
    let nearest = |nearest: Vec<u32>| {
        let mut cids = nearest.clone();
        cids.sort_unstable();
        Selected {
            cids,
            start: nprobe,
            estimate: recall.map(|m| m.recall_at(nprobe)),
            probe_us: 0,
            nearest,
        }
    };
    let targeted = target
        .zip(recall)
        .filter(|_| !every)
        .map(|(t, m)| (t, m, m.stop_for(t, cap)));
    if root_factor > 0 && !every && targeted.is_none() {
        // Only the nearest roots' leaves are measured, query by query.
        return plan
            .queries
            .par_chunks_exact(dim)
            .map(|q| {
                let t = Instant::now();
                let mut selected = nearest(select::nearest_cids(coarse, q, nprobe, root_factor));
                selected.probe_us = micros(t.elapsed());
                selected
            })
            .collect();
    }
    let pick = |leaves: EveryLeaf<'_>| match targeted {
        // Unfiltered under a target: only the lists within its gap are sorted.
        Some((t, m, stop)) => {
            let (cids, next) = leaves.within(stop.gap, stop.cap);
            Selected {
                start: cids.len(),
                estimate: Some(m.target_estimate(t, &stop, next)),
                cids,
                probe_us: 0,
                nearest: Vec::new(),
            }
        }
        None if every => {
            let ranked = leaves.ranked();
            let (start, estimate) = match (target, recall) {
                (Some(t), Some(m)) => {
                    let lists = m.lists_for(&ranked, t, cap);
                    (lists.cids.len(), Some(lists.estimated_recall))
                }
                _ => (
                    nprobe.min(ranked.len()),
                    recall.map(|m| m.recall_at(nprobe)),
                ),
            };
            Selected::ranked(ranked, start, estimate)
        }
        None => nearest(leaves.nearest(nprobe)),
    };
    plan.queries
        .par_chunks(dim.max(1) * LeafPanels::QUERIES)
        .flat_map_iter(|queries| {
            let t = Instant::now();
            let mut selected = Vec::with_capacity(LeafPanels::QUERIES);
            select::each_query(coarse, queries, |_, leaves| selected.push(pick(leaves)));
            let share = micros(t.elapsed()) / selected.len().max(1) as u64;
            selected.iter_mut().for_each(|s| s.probe_us = share);
            selected
        })
        .collect()
}

/// A stored code that differs from its vector's code ([`Engine::reencode_sample`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeMismatch {
    pub path: String,
    pub row_group: usize,
    pub row: usize,
    pub rowid: i64,
}

/// The rows of `loaded` whose stored code differs from their vector's
/// (the first 16).
fn reencode(
    q: &Quantizer,
    hierarchy: &Hierarchy,
    paths: &[Path],
    loaded: &[Arc<DecodedRowGroup>],
) -> Vec<CodeMismatch> {
    let (dim, width) = (hierarchy.dim, q.code_bytes());
    let mut out = Vec::new();
    let mut code = vec![0u8; width];
    for rg in loaded {
        let stored = rg.codes.as_deref().unwrap_or_default();
        let cids = vec![rg.cid; rg.rowids.len()];
        let residuals = hierarchy.residuals(&rg.vectors, &cids);
        let c = rg.cid as usize;
        let leaf = &hierarchy.leaves[c * dim..(c + 1) * dim];
        for (row, residual) in residuals.chunks_exact(dim).enumerate() {
            q.encode(residual, leaf, &mut code);
            if stored.get(row * width..(row + 1) * width) != Some(&code[..]) && out.len() < 16 {
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
}
