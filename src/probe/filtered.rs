//! The rows of a filtered query ([`FilteredRows`]): the row groups read so
//! far, grouped by cid, each with the bitmap of its rows that satisfy the
//! filter (evaluated once per row group on rayon, with the filter's arrow
//! kernels over the payload columns), so that a query probing more lists
//! counts its matches without reading or evaluating any row twice, and how
//! far a filtered query probes ([`filter_budget`], in rounds: [`Widening`]). With the postings preloaded, the payload of every
//! row group is also one [`PayloadTable`]: a query reading a large share of
//! the lists evaluates its filter over it in one pass of the kernels, not
//! one call per row group.

use super::ProbeError;
use super::live::LiveRows;
use super::offload::on_rayon;
use super::rows::DecodedRowGroup;
use super::stats::FilterPlan;
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
}

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
        Ok(Some(Self { batch, at }))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.batch.get_array_memory_size()
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
        let (masks, whole) =
            on_rayon(move || {
                let whole =
                    match (whole, &table) {
                        (Some(w), _) => Some(w),
                        (None, Some(t)) => Some(filter.evaluate(&t.batch).map_err(|source| {
                            ProbeError::Filter {
                                path: paths.first().map_or_else(String::new, Path::to_string),
                                source,
                            }
                        })?),
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
    /// Whether the postings are in memory (preloaded): then a list costs
    /// the rows it scores, else the rows it reads.
    pub in_memory: bool,
}

/// The lists a filtered query probes after seeing what its first `nprobe`
/// held: as many as cost what `nprobe` lists cost an unfiltered query.
/// In memory a list costs the rows scored, so with a fraction `s` of its
/// rows matching, `nprobe / s` lists score as many rows as `nprobe` lists
/// without the filter; from storage a list costs the rows read, so with a
/// fraction `r` of its rows in row groups the statistics keep, `nprobe /
/// r` lists read as many. When that reaches every list (and `max_nprobe`
/// allows it), the plan is exhaustive. Pure.
pub fn filter_budget(budget: &FilterBudget, seen: Seen) -> (usize, FilterPlan) {
    let rows = seen.read + seen.pruned;
    let cost = match (rows, budget.in_memory) {
        (0, _) => 1.0,
        (_, true) => seen.matched as f64 / rows as f64,
        (_, false) => seen.read as f64 / rows as f64,
    };
    let lists = budget.nprobe as f64 / cost;
    if lists >= budget.nlist as f64 && budget.cap >= budget.nlist {
        return (budget.nlist, FilterPlan::Exhaustive);
    }
    // `lists` is finite here (cost > 0, or it would exceed nlist).
    let lists = (lists.ceil() as usize).clamp(budget.nprobe, budget.cap.max(budget.nprobe));
    (lists, FilterPlan::Probe)
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

    fn budget(in_memory: bool) -> FilterBudget {
        FilterBudget {
            nprobe: 10,
            nlist: 100,
            cap: 100,
            in_memory,
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
    fn in_memory_a_list_costs_its_matches() {
        // Half the rows match: twice the lists score as many rows.
        assert_eq!(
            filter_budget(&budget(true), seen(500, 1000, 0)),
            (20, FilterPlan::Probe)
        );
        // 5 % match: 200 lists would cost nprobe's, more than there are.
        assert_eq!(
            filter_budget(&budget(true), seen(50, 1000, 0)),
            (100, FilterPlan::Exhaustive)
        );
        // No match near the query: only an exhaustive scan finds any.
        assert_eq!(
            filter_budget(&budget(true), seen(0, 1000, 0)),
            (100, FilterPlan::Exhaustive)
        );
        // Every row matches: the unfiltered probe.
        assert_eq!(
            filter_budget(&budget(true), seen(1000, 1000, 0)),
            (10, FilterPlan::Probe)
        );
    }

    #[test]
    fn from_storage_a_list_costs_the_rows_read() {
        // Statistics kept every row group: no wider than nprobe, whatever matched.
        assert_eq!(
            filter_budget(&budget(false), seen(1, 1000, 0)),
            (10, FilterPlan::Probe)
        );
        // They kept a quarter of the rows: four times the lists read as much.
        assert_eq!(
            filter_budget(&budget(false), seen(1, 250, 750)),
            (40, FilterPlan::Probe)
        );
        assert_eq!(
            filter_budget(&budget(false), seen(0, 0, 1000)),
            (100, FilterPlan::Exhaustive)
        );
    }

    #[test]
    fn max_nprobe_bounds_the_widening_and_forbids_exhaustive() {
        let capped = FilterBudget {
            cap: 30,
            ..budget(true)
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
}
