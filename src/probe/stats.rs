//! [`SearchStats`], the one record of what a search cost, end to end: the
//! postings reader fills the IO counters and the plan/fetch/decode times, the engine
//! adds the query's own probe and scan times, and the same value is printed
//! by `parqivf search --stats` and returned by the HTTP service (`"include":
//! ["stats"]`), field names unchanged.

use serde::Serialize;
use std::time::Duration;

/// What a search cost. In a batch, the IO fields and `plan/fetch/decode`
/// times are those of the whole batch (row groups are shared); `probe` and
/// `scan` are the query's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SearchStats {
    /// Manifest files whose cid range holds a probed cid.
    pub candidate_files: u64,
    /// Footers fetched from storage.
    pub footers_read: u64,
    /// Footers served by the footer cache.
    pub footers_cached: u64,
    /// Row groups of the probed cids.
    pub planned_row_groups: u64,
    /// Row groups fetched and decoded.
    pub row_groups_read: u64,
    /// Row groups served by the decoded-postings cache.
    pub row_groups_cached: u64,
    /// Object-store requests issued.
    pub requests: u64,
    /// Bytes fetched from the object store.
    pub bytes: u64,
    /// Blocks served by the disk cache (`--cache-dir`) instead of the
    /// store, and their bytes.
    pub disk_hits: u64,
    pub disk_bytes: u64,
    /// Bytes the RAM tier served: the in-memory size of the footers and
    /// decoded row groups taken from the footer cache, the decoded-postings
    /// cache or a preload (`footers_cached` and `row_groups_cached` count
    /// them) instead of being read.
    pub ram_bytes: u64,
    /// Second copies of slow store gets sent (hedging, on a remote store;
    /// `crate::store::hedge`). In a batch, the batch's.
    pub hedges: u64,
    /// Exact lengths of the footers read (what a perfect tail guess fetches).
    pub footer_bytes: u64,
    /// Column-chunk bytes of the row groups read (before coalescing).
    pub row_group_bytes: u64,
    /// Of `row_group_bytes`: the payload columns' chunks (a filtered query
    /// from storage reads its filter's columns first).
    pub payload_bytes: u64,
    /// Of `row_group_bytes`: the `code` chunks.
    pub code_bytes: u64,
    /// Of `row_group_bytes`: the whole `vector` chunks (re-rank pages are
    /// `page_bytes`).
    pub vector_bytes: u64,
    /// Bytes of `vector` offset indexes read (with the codes, or with a
    /// filter's columns from storage).
    pub page_index_bytes: u64,
    /// Codes scored (quantised scan).
    pub codes_scored: u64,
    /// Candidates re-ranked by their exact distance (summed over a batch's
    /// queries: a row two queries hold counts twice).
    pub reranked: u64,
    /// `vector` data pages fetched for the re-rank.
    pub pages_read: u64,
    /// Bytes of those pages.
    pub page_bytes: u64,
    /// The fewest bytes the plan could read for what it fetched: each row
    /// of the row groups read, its code (its vector in an index without
    /// codes, the scan's only input), and each re-ranked candidate fetched
    /// from a page, its vector (4·dim bytes), all unframed. `bytes /
    /// minimum_bytes` is the read amplification of the layout: the keys,
    /// the Parquet page headers and checksums, the offset indexes, whole
    /// pages and coalescing gaps.
    pub minimum_bytes: u64,
    /// Dependent rounds of requests: footers, row groups (codes and offset
    /// indexes, or vectors), then re-rank pages; 0 to 3, more only for
    /// footers larger than the tail read for them.
    pub rounds: u64,
    /// Row groups of probed lists skipped before any read: their payload
    /// statistics rule out every row of the filter.
    pub row_groups_pruned: u64,
    /// Rows of the query's probed row groups that satisfy the filter.
    pub rows_matched: u64,
    /// `vector` pages of the row groups read none of whose rows satisfy the
    /// filter (never fetched for a re-rank).
    pub pages_pruned: u64,
    /// Lists the query probed (its own): `nprobe`, more when a filter left
    /// fewer than `k` matches in them, every list when exhaustive.
    pub lists_probed: u64,
    /// The share of the query's exact top-k its probed lists hold, as the
    /// build's calibration estimates it ([`super::target`]); absent for an
    /// index without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_recall: Option<f64>,
    /// How a filtered query was planned.
    pub filter_plan: FilterPlan,
    /// How a filtered query's matches were scored.
    pub filter_scoring: Scoring,
    /// A filtered query stopped at `max_nprobe` lists with fewer than `k`
    /// matches: more may exist in the lists not probed.
    pub capped: bool,
    /// Microseconds choosing the lists to probe (the query's own).
    pub probe_us: u64,
    /// Microseconds on candidate files, footers (including their IO) and
    /// access plans.
    pub plan_us: u64,
    /// Microseconds of row-group IO, until the round's last file arrived.
    pub fetch_us: u64,
    /// Microseconds decoding row groups and checking their cids (and
    /// transposing a fast-scan scheme's codes into blocks), summed over
    /// the files (a file from the store is decoded while the others are
    /// still in flight).
    pub decode_us: u64,
    /// Microseconds computing distances (codes and f32).
    pub scan_us: u64,
    /// Microseconds of re-rank page IO.
    pub rerank_fetch_us: u64,
}

/// What opening an index cost ([`crate::index::Index::open_stats`]): the
/// commit log, `index.json` and the documents it names (manifest, footer
/// pins, centroids, quantiser, calibration), before any query. A new process
/// per query (`parqivf search` on a cold store) pays it on every query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpenStats {
    /// Dependent rounds of requests, as observed by
    /// [`crate::store::counting::CountingStore`]: a request that starts
    /// while none is in flight opens a round. Two for a committed index
    /// whose latest commit is current; one when opened ahead of the check
    /// ([`OpenStats::ahead`]). Exact where a request takes a round trip; on
    /// a store that answers in microseconds (memory, a local folder on a
    /// busy machine) requests sent together can finish before the last of
    /// them is sent, and count as more rounds.
    pub rounds: u64,
    /// GET and HEAD requests, and the bytes the GETs returned.
    pub requests: u64,
    pub bytes: u64,
    /// Second copies of slow gets sent (a remote store's hedging).
    pub hedges: u64,
    /// Microseconds from the first request to the parsed snapshot.
    pub open_us: u64,
    /// Whether the index was given before the commit log confirmed that its
    /// commit is current ([`crate::index::Index::open_ahead`]): that check's
    /// round (versions `N` and `N + 1`) runs alongside the first query and
    /// is not counted here. Left out of the JSON when `false`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ahead: bool,
}

/// The plan of a filtered query, chosen per query (`Index::search_batch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FilterPlan {
    /// No filter.
    #[default]
    None,
    /// The nearest lists, then the next-nearest until `k` rows match.
    Probe,
    /// Every list whose statistics may match: the filter is selective
    /// enough that scanning all its matches costs less than probing.
    Exhaustive,
}

/// How a filtered query scores the rows that match
/// ([`super::filtered::scoring`]), chosen by the same cost in every serving
/// mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// No filter.
    #[default]
    None,
    /// The row groups holding a match are ranked as an unfiltered query's:
    /// their codes, then the re-rank, or their vectors (an index without
    /// codes), every row that does not match skipped.
    Lists,
    /// Every matching row by its exact distance, from the vectors in memory
    /// or from the `vector` pages holding it: few rows match.
    Exact,
}

/// Whole microseconds of `d` (saturating).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
