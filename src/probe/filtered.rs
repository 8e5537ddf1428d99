//! The rows of a filtered query ([`FilteredRows`]): the row groups counted
//! so far, grouped by cid, each with the bitmap of its rows that satisfy the
//! filter (evaluated once per row group on rayon, with the filter's arrow
//! kernels over the payload columns), so that a query probing more lists
//! counts its matches without reading or evaluating any row twice; how far
//! a filtered query probes ([`filter_budget`], by rows matched, in rounds:
//! [`Widening`]); and how a batch scores its matches ([`scoring`], one cost
//! model for every serving mode: [`ScoreCost`], [`Reads`]). With the
//! postings preloaded, the payload of every row group is also one
//! [`PayloadTable`]: a query reading a large share of the lists evaluates
//! its filter over it in one pass of the kernels (kept for the last
//! [`MASKS_KEPT`] filters), not one call per row group.

use super::ProbeError;
use super::live::LiveRows;
use super::offload::on_rayon;
use super::rows::DecodedRowGroup;
use super::stats::{FilterPlan, Scoring};
use crate::filter::Filter;
use arrow::buffer::BooleanBuffer;
use object_store::path::Path;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The row groups a filtered search has read, and their matches.
#[derive(Debug, Default)]
pub struct FilteredRows {
    /// Cids whose row groups were loaded (or all pruned by statistics).
    pub read: HashSet<u32>,
    pub loaded: Vec<Arc<DecodedRowGroup>>,
    /// The rows of `loaded[g]` that satisfy the filter.
    pub masks: Vec<Option<BooleanBuffer>>,
    /// Set bits of `masks[g]`.
    pub matched: Vec<u64>,
    /// Indexes in `loaded` of each cid's row groups.
    pub by_cid: HashMap<u32, Vec<usize>>,
    /// Rows of each cid's row groups skipped by the filter's statistics.
    pub pruned: HashMap<u32, u64>,
    /// The filter over a whole [`PayloadTable`], once evaluated.
    whole: Option<BooleanBuffer>,
}

/// A load reading at least `1 / WHOLE_TABLE_SHARE` of the lists evaluates
/// the filter over the whole [`PayloadTable`] (one pass) rather than per
/// row group (one kernel call each, a few microseconds of overhead).
pub const WHOLE_TABLE_SHARE: usize = 8;

/// The payload columns of every row group of an index, concatenated in
/// (file, row group) order, and where each row group's rows lie in it.
#[derive(Debug)]
pub struct PayloadTable {
    batch: arrow::array::RecordBatch,
    at: HashMap<(usize, usize), (usize, usize)>,
    /// The rows matching each of the last [`MASKS_KEPT`] filters (by
    /// text), most recent first: a filter repeated by later queries (a
    /// tenant's, a language's) is evaluated once, as FAISS's selector is
    /// built once.
    masks: std::sync::Mutex<Vec<(String, BooleanBuffer)>>,
}

/// Filters whose matches over a [`PayloadTable`] are kept (one bit a row each).
pub const MASKS_KEPT: usize = 16;

impl PayloadTable {
    /// The table of `groups` (each with its payload); `None` when they have
    /// no payload columns.
    ///
    /// # Errors
    /// [`crate::filter::FilterError::Evaluate`] when the row groups'
    /// payload schemas differ.
    pub fn new(
        groups: &[Arc<DecodedRowGroup>],
    ) -> Result<Option<Self>, crate::filter::FilterError> {
        let mut sorted: Vec<&Arc<DecodedRowGroup>> =
            groups.iter().filter(|g| g.payload.is_some()).collect();
        sorted.sort_by_key(|g| (g.file, g.row_group));
        let Some(schema) = sorted
            .first()
            .and_then(|g| g.payload.as_ref())
            .map(|b| b.schema())
        else {
            return Ok(None);
        };
        if schema.fields().is_empty() {
            return Ok(None);
        }
        let mut at = HashMap::with_capacity(sorted.len());
        let mut start = 0;
        let batches: Vec<&arrow::array::RecordBatch> =
            sorted.iter().filter_map(|g| g.payload.as_ref()).collect();
        for (g, b) in sorted.iter().zip(&batches) {
            at.insert((g.file, g.row_group), (start, b.num_rows()));
            start += b.num_rows();
        }
        let batch = arrow::compute::concat_batches(&schema, batches).map_err(|e| {
            crate::filter::FilterError::Evaluate {
                column: String::new(),
                message: format!("payload of the preloaded row groups: {e}"),
            }
        })?;
        Ok(Some(Self {
            batch,
            at,
            masks: Default::default(),
        }))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let masks = self.masks.lock().unwrap_or_else(|e| e.into_inner());
        let bits: usize = masks.iter().map(|(t, m)| t.len() + m.len() / 8).sum();
        self.batch.get_array_memory_size() + bits
    }

    /// The rows of the table that satisfy `filter`: kept from an earlier
    /// query with the same filter text, or evaluated in one pass (CPU).
    ///
    /// # Errors
    /// [`crate::filter::FilterError`] from the filter's kernels.
    pub fn matches(&self, filter: &Filter) -> Result<BooleanBuffer, crate::filter::FilterError> {
        let lock = || self.masks.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut masks = lock();
            if let Some(i) = masks.iter().position(|(t, _)| t == filter.text()) {
                let kept = masks.remove(i);
                let mask = kept.1.clone();
                masks.insert(0, kept);
                return Ok(mask);
            }
        }
        let mask = filter.evaluate(&self.batch)?;
        let mut masks = lock();
        masks.insert(0, (filter.text().to_string(), mask.clone()));
        masks.truncate(MASKS_KEPT);
        Ok(mask)
    }
}

impl FilteredRows {
    /// Take the row groups `fresh` loaded for `cids`, evaluating `filter`
    /// on each one's payload (on rayon); deleted rows never match.
    ///
    /// # Errors
    /// [`ProbeError::Filter`] for a row group read without its payload or
    /// one the filter's kernels fail on.
    #[allow(clippy::too_many_arguments)]
    pub async fn add(
        &mut self,
        cids: &[u32],
        fresh: Vec<Arc<DecodedRowGroup>>,
        pruned: Vec<(u32, u64)>,
        filter: &Arc<Filter>,
        table: Option<&Arc<PayloadTable>>,
        paths: &Arc<[Path]>,
        live: &LiveRows,
    ) -> Result<(), ProbeError> {
        self.read.extend(cids);
        for (cid, rows) in pruned {
            *self.pruned.entry(cid).or_default() += rows;
        }
        let table = table.cloned();
        let (filter, paths, groups) = (Arc::clone(filter), Arc::clone(paths), fresh.clone());
        let live = live.clone();
        let whole = self.whole.take();
        let (masks, whole) = on_rayon(move || {
            let whole = match (whole, &table) {
                (Some(w), _) => Some(w),
                (None, Some(t)) => {
                    Some(t.matches(&filter).map_err(|source| ProbeError::Filter {
                        path: paths.first().map_or_else(String::new, Path::to_string),
                        source,
                    })?)
                }
                (None, None) => None,
            };
            let masks = groups
                .par_iter()
                .map(|rg| {
                    let slice = table
                        .as_ref()
                        .zip(whole.as_ref())
                        .and_then(|(t, w)| {
                            t.at.get(&(rg.file, rg.row_group))
                                .map(|&(s, n)| w.slice(s, n))
                        })
                        .filter(|m| m.len() == rg.rowids.len());
                    slice
                        .map_or_else(|| mask(&filter, &paths, rg), Ok)
                        .map(|m| live.and(rg, m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, ProbeError>((masks, whole))
        })
        .await?;
        self.whole = whole;
        for (rg, m) in fresh.into_iter().zip(masks) {
            self.by_cid
                .entry(rg.cid)
                .or_default()
                .push(self.loaded.len());
            self.matched.push(m.count_set_bits() as u64);
            self.masks.push(Some(m));
            self.loaded.push(rg);
        }
        Ok(())
    }

    /// What the row groups of `cids` held.
    pub fn count(&self, cids: &[u32]) -> Seen {
        let mut seen = Seen::default();
        for c in cids {
            for &g in self.by_cid.get(c).into_iter().flatten() {
                seen.matched += self.matched[g];
                seen.read += self.loaded[g].rowids.len() as u64;
            }
            seen.pruned += self.pruned.get(c).copied().unwrap_or(0);
        }
        seen
    }
}

/// The rows of `rg` that satisfy `filter`.
fn mask(
    filter: &Filter,
    paths: &[Path],
    rg: &DecodedRowGroup,
) -> Result<BooleanBuffer, ProbeError> {
    let path = || paths.get(rg.file).map_or_else(String::new, Path::to_string);
    let payload = rg.payload.as_ref().ok_or_else(|| ProbeError::Filter {
        path: path(),
        source: crate::filter::FilterError::Evaluate {
            column: filter.columns().join(", "),
            message: format!("row group {} was read without its payload", rg.row_group),
        },
    })?;
    let bits = filter
        .evaluate(payload)
        .map_err(|source| ProbeError::Filter {
            path: path(),
            source,
        })?;
    if bits.len() != rg.rowids.len() {
        return Err(ProbeError::Filter {
            path: path(),
            source: crate::filter::FilterError::Evaluate {
                column: filter.columns().join(", "),
                message: format!(
                    "row group {} has {} payload rows for {} rowids",
                    rg.row_group,
                    bits.len(),
                    rg.rowids.len()
                ),
            },
        });
    }
    Ok(bits)
}

/// What a filtered query's lists held: rows matching the filter, rows
/// read, and rows of row groups skipped by their statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub matched: u64,
    pub read: u64,
    pub pruned: u64,
}

/// What bounds a filtered query's probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterBudget {
    /// Lists the query asked for.
    pub nprobe: usize,
    pub nlist: usize,
    /// `max_nprobe` (at most `nlist`).
    pub cap: usize,
}

/// The lists a filtered query probes after seeing what its first `nprobe`
/// held: as many as hold the matches `nprobe` lists hold unfiltered. With a
/// fraction `s` of its rows matching (rows of row groups the statistics
/// skipped count as not matching), `nprobe / s` lists hold as many rows to
/// score as `nprobe` lists without the filter. The one rule of every
/// serving mode: in memory a list costs the rows it scores, and from
/// storage a filtered query reads its filter's columns before anything
/// else ([`Want::filter_columns`](super::rows::Want)), so there too it
/// scores only the rows that match. When that reaches every list (and
/// `max_nprobe` allows it), the plan is exhaustive. Pure.
pub fn filter_budget(budget: &FilterBudget, seen: Seen) -> (usize, FilterPlan) {
    let rows = seen.read + seen.pruned;
    let share = match rows {
        0 => 1.0,
        _ => seen.matched as f64 / rows as f64,
    };
    let lists = budget.nprobe as f64 / share;
    if lists >= budget.nlist as f64 && budget.cap >= budget.nlist {
        return (budget.nlist, FilterPlan::Exhaustive);
    }
    // `lists` is finite here (share > 0, or it would exceed nlist).
    let lists = (lists.ceil() as usize).clamp(budget.nprobe, budget.cap.max(budget.nprobe));
    (lists, FilterPlan::Probe)
}

/// A memory byte's cost against a byte read from storage: scoring a row
/// held in memory is this many times cheaper than reading it.
pub const MEMORY_BYTE_SHARE: u64 = 64;

/// A read from storage costs about this many bytes besides its own (a
/// local read's system call; against an object store, far more): many
/// small pages cost more than the chunks holding them.
pub const REQUEST_BYTES: u64 = 4096;

/// Preparing a query for one list's codes (its residual, rotated, and the
/// quantiser's tables) costs about touching this many vectors. Measured
/// with everything in memory, one query per call: at 100k × 384-d, 974
/// matches in 316 lists score faster exactly (2,030 against 1,305–1,449
/// QPS), so this is above 2.7; at 1M × 128-d, 10,000 matches in 1,000 lists
/// score faster by their codes (334 against 150–170 QPS: each exact row is
/// a cache miss), so it is below 8.6.
pub const PREPARE_VECTORS: u64 = 4;

/// What scoring a filtered batch's matches costs either way ([`scoring`]):
/// counted over the row groups its queries probed, each once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct ScoreCost {
    /// Rows scored: each query's matches, summed over the batch's queries.
    pub scored_rows: u64,
    /// Row groups holding a match, and their rows.
    pub groups: u64,
    pub group_rows: u64,
    /// Row groups holding a match, once per query probing each: with
    /// codes, each costs the query's preparation for that list.
    pub group_queries: u64,
    /// How many `vector` pages hold a match, and their bytes (`None`:
    /// their offset indexes were not read).
    pub matched_pages: Option<(u64, u64)>,
    /// Mean bytes of a `vector` page.
    pub page_bytes: u64,
    /// Bytes of a row of the column a list is ranked by: the code width,
    /// or `dim × 4` without codes.
    pub row_width: u64,
    /// The index has codes (a list is ranked by them).
    pub codes: bool,
    /// Bytes of a vector (`dim × 4`).
    pub vector_width: u64,
    /// Candidates the batch re-ranks from their pages after the codes: per
    /// query `k × rerank`, at most its matches (0 without codes or re-rank).
    pub rerank_rows: u64,
    /// The column ranked is in memory (preloaded).
    pub ranked_held: bool,
    /// The vectors are in memory (`--preload all`, or no codes preloaded).
    pub vectors_held: bool,
}

/// What scoring a filtered batch's matches one way reads from storage and
/// touches in memory, in bytes ([`ScoreCost::reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Reads {
    /// `code` chunks of the row groups holding a match.
    pub code_bytes: u64,
    /// Whole `vector` chunks of those row groups (an index without codes).
    pub vector_bytes: u64,
    /// `vector` pages: of each match, or of the re-rank's candidates.
    pub page_bytes: u64,
    /// Codes or vectors scored in memory.
    pub memory_bytes: u64,
    /// Reads from storage (a page or a chunk each, before coalescing).
    pub requests: u64,
}

impl Reads {
    /// Bytes read, each read counted [`REQUEST_BYTES`] more, a byte in
    /// memory counted [`MEMORY_BYTE_SHARE`] times less.
    pub fn cost(&self) -> u64 {
        self.code_bytes
            + self.vector_bytes
            + self.page_bytes
            + self.requests * REQUEST_BYTES
            + self.memory_bytes / MEMORY_BYTE_SHARE
    }
}

impl ScoreCost {
    /// What scoring `way` reads and touches; `None` for [`Scoring::Exact`]
    /// when the matches' pages are unknown (their offset indexes not read).
    pub fn reads(&self, way: Scoring) -> Option<Reads> {
        match way {
            Scoring::None => Some(Reads::default()),
            Scoring::Exact if self.vectors_held => Some(Reads {
                memory_bytes: self.scored_rows * self.vector_width,
                ..Reads::default()
            }),
            Scoring::Exact => self.matched_pages.map(|(requests, page_bytes)| Reads {
                page_bytes,
                requests,
                memory_bytes: self.scored_rows * self.vector_width,
                ..Reads::default()
            }),
            Scoring::Lists => {
                let read = self.group_rows * self.row_width;
                let prepare = match self.codes {
                    true => self.group_queries * PREPARE_VECTORS * self.vector_width,
                    false => 0,
                };
                let mut reads = match (self.ranked_held, self.codes) {
                    (true, _) => Reads {
                        memory_bytes: self.scored_rows * self.row_width + prepare,
                        ..Reads::default()
                    },
                    (false, true) => Reads {
                        code_bytes: read,
                        memory_bytes: prepare,
                        requests: self.groups,
                        ..Reads::default()
                    },
                    (false, false) => Reads {
                        vector_bytes: read,
                        requests: self.groups,
                        ..Reads::default()
                    },
                };
                if !self.vectors_held {
                    reads.page_bytes = self.rerank_rows * self.page_bytes;
                    reads.requests += self.rerank_rows;
                }
                Some(reads)
            }
        }
    }
}

/// How a filtered batch scores its matches: [`Scoring::Exact`] when reading
/// (or touching) each matching row's vector costs no more than ranking the
/// row groups that hold them as an unfiltered query does
/// ([`Scoring::Lists`]: their codes, read whole from storage, then the
/// re-rank's pages), by [`Reads::cost`]. The same function decides for
/// every serving mode; only what is held differs. Pure.
pub fn scoring(c: &ScoreCost) -> Scoring {
    let lists = c.reads(Scoring::Lists).map_or(u64::MAX, |r| r.cost());
    match c.reads(Scoring::Exact) {
        Some(exact) if exact.cost() <= lists => Scoring::Exact,
        _ => Scoring::Lists,
    }
}

/// Where a filtered query's probing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryProbe {
    /// Its nearest lists probed so far.
    pub lists: usize,
    /// The lists of its first round (`nprobe`, or what a target recall
    /// chose): the budget widens from these.
    pub start: usize,
    pub plan: FilterPlan,
    /// It stopped at `max_nprobe` with fewer than `k` matches.
    pub capped: bool,
}

/// The rounds of a filtered batch: every query starts at its nearest
/// `nprobe` lists (or those a target recall chose); after the first round [`filter_budget`] widens each to
/// what `nprobe` lists cost unfiltered, and after each later round a query
/// with fewer than `k` matches doubles its lists, up to the cap. It ends
/// when a round changes no query's lists. Pure: the caller reads the lists
/// [`Widening::need`]s between steps.
#[derive(Debug)]
pub struct Widening {
    states: Vec<QueryProbe>,
    budget: FilterBudget,
    k: u64,
    round: usize,
}

impl Widening {
    /// The first round of queries whose lists, nearest first, are `ranked`,
    /// each probing first the number of lists `starts` gives it.
    pub fn new(ranked: &[Vec<u32>], starts: &[usize], budget: FilterBudget, k: usize) -> Self {
        let states = ranked
            .iter()
            .zip(starts)
            .map(|(cids, &start)| {
                let start = start.clamp(1, cids.len().max(1)).min(cids.len());
                QueryProbe {
                    lists: start,
                    start,
                    plan: FilterPlan::Probe,
                    capped: false,
                }
            })
            .collect();
        Widening {
            states,
            budget,
            k: k as u64,
            round: 0,
        }
    }

    /// Each query's state.
    pub fn states(&self) -> &[QueryProbe] {
        &self.states
    }

    /// The lists the queries probe now that `rows` has not read, sorted.
    pub fn need(&self, ranked: &[Vec<u32>], rows: &FilteredRows) -> Vec<u32> {
        let mut need: Vec<u32> = self
            .states
            .iter()
            .zip(ranked)
            .flat_map(|(s, cids)| cids[..s.lists].iter().copied())
            .filter(|c| !rows.read.contains(c))
            .collect();
        need.sort_unstable();
        need.dedup();
        need
    }

    /// Set each query's lists for the next round from what its lists held
    /// in `rows`; whether another round is needed.
    pub fn step(&mut self, ranked: &[Vec<u32>], rows: &FilteredRows) -> bool {
        let mut changed = false;
        for (s, cids) in self.states.iter_mut().zip(ranked) {
            let seen = rows.count(&cids[..s.lists]);
            let most = self.budget.cap.min(cids.len());
            let lists = if self.round == 0 {
                let budget = FilterBudget {
                    nprobe: s.start,
                    ..self.budget
                };
                let (lists, plan) = filter_budget(&budget, seen);
                s.plan = plan;
                lists.min(cids.len())
            } else if seen.matched < self.k {
                s.capped = s.lists >= most && most < cids.len();
                (s.lists * 2).min(most).max(s.lists)
            } else {
                s.lists
            };
            changed |= lists != s.lists;
            s.lists = lists;
        }
        self.round += 1;
        changed || self.round <= 1
    }

    /// Each query's probed lists, sorted.
    pub fn probed(&self, ranked: &[Vec<u32>]) -> Vec<Vec<u32>> {
        self.states
            .iter()
            .zip(ranked)
            .map(|(s, cids)| {
                let mut probed = cids[..s.lists].to_vec();
                probed.sort_unstable();
                probed
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> FilterBudget {
        FilterBudget {
            nprobe: 10,
            nlist: 100,
            cap: 100,
        }
    }

    fn seen(matched: u64, read: u64, pruned: u64) -> Seen {
        Seen {
            matched,
            read,
            pruned,
        }
    }

    #[test]
    fn a_list_costs_its_matches() {
        // Half the rows match: twice the lists score as many rows.
        assert_eq!(
            filter_budget(&budget(), seen(500, 1000, 0)),
            (20, FilterPlan::Probe)
        );
        // 5 % match: 200 lists would cost nprobe's, more than there are.
        assert_eq!(
            filter_budget(&budget(), seen(50, 1000, 0)),
            (100, FilterPlan::Exhaustive)
        );
        // No match near the query: only an exhaustive scan finds any.
        assert_eq!(
            filter_budget(&budget(), seen(0, 1000, 0)),
            (100, FilterPlan::Exhaustive)
        );
        // Every row matches: the unfiltered probe.
        assert_eq!(
            filter_budget(&budget(), seen(1000, 1000, 0)),
            (10, FilterPlan::Probe)
        );
    }

    #[test]
    fn rows_skipped_by_statistics_count_as_not_matching() {
        // A quarter of the rows kept, all of them matching: four times the lists.
        assert_eq!(
            filter_budget(&budget(), seen(250, 250, 750)),
            (40, FilterPlan::Probe)
        );
        assert_eq!(
            filter_budget(&budget(), seen(0, 0, 1000)),
            (100, FilterPlan::Exhaustive)
        );
    }

    #[test]
    fn max_nprobe_bounds_the_widening_and_forbids_exhaustive() {
        let capped = FilterBudget {
            cap: 30,
            ..budget()
        };
        assert_eq!(
            filter_budget(&capped, seen(0, 1000, 0)),
            (30, FilterPlan::Probe)
        );
        assert_eq!(
            filter_budget(&capped, seen(500, 1000, 0)),
            (20, FilterPlan::Probe)
        );
    }

    /// 100k rows of 384-d with 200-byte codes, 316 lists, one query, k 10,
    /// re-rank 4, 1-row vector pages; `matched` rows match.
    fn embeddings(matched: u64, groups: u64) -> ScoreCost {
        let page_bytes = 1536;
        ScoreCost {
            scored_rows: matched,
            groups,
            group_rows: groups * 316,
            group_queries: groups,
            matched_pages: Some((matched, matched * page_bytes)),
            page_bytes,
            row_width: 200,
            codes: true,
            vector_width: 1536,
            rerank_rows: matched.min(40),
            ranked_held: false,
            vectors_held: false,
        }
    }

    #[test]
    fn from_storage_few_matches_are_scored_exactly_from_their_pages() {
        // 0.1 %: 100 pages against 100 row groups of codes.
        assert_eq!(scoring(&embeddings(100, 100)), Scoring::Exact);
        // 1 %: 970 pages (1.5 MB) against every code (20 MB).
        assert_eq!(scoring(&embeddings(970, 316)), Scoring::Exact);
        // 10 %: 10,000 pages (15 MB in 10,000 reads); the codes cost less.
        assert_eq!(scoring(&embeddings(10_000, 316)), Scoring::Lists);
        // Offset indexes not read: the pages cannot be planned.
        let unknown = ScoreCost {
            matched_pages: None,
            ..embeddings(10, 10)
        };
        assert_eq!(scoring(&unknown), Scoring::Lists);
    }

    #[test]
    fn in_memory_the_same_rule_prices_what_is_held() {
        // Codes held, vectors read: 100 matches cost 100 pages exactly,
        // against 40 re-ranked pages after the codes.
        let codes = ScoreCost {
            ranked_held: true,
            ..embeddings(100, 100)
        };
        assert_eq!(scoring(&codes), Scoring::Lists);
        // Fewer matches than the re-rank keeps: exact.
        let few = ScoreCost {
            ranked_held: true,
            ..embeddings(30, 30)
        };
        assert_eq!(scoring(&few), Scoring::Exact);
        // Everything held: 100 matches in 100 lists cost 100 vectors
        // exactly, against 100 lists prepared for their codes.
        let all = ScoreCost {
            ranked_held: true,
            vectors_held: true,
            ..embeddings(100, 100)
        };
        assert_eq!(scoring(&all), Scoring::Exact);
        // 10 % of the rows: their codes cost less than their vectors.
        let wide = ScoreCost {
            ranked_held: true,
            vectors_held: true,
            ..embeddings(10_000, 316)
        };
        assert_eq!(scoring(&wide), Scoring::Lists);
        let flat = ScoreCost {
            row_width: 1536,
            codes: false,
            rerank_rows: 0,
            ..wide
        };
        assert_eq!(scoring(&flat), Scoring::Exact);
    }
}
