//! The query engine. [`engine::Engine::run`] executes a validated
//! [`query::QueryPlan`]: choose each query's centroids ([`select`]), read
//! the row groups of those lists through the one postings reader
//! ([`load::PostingsReader`]: candidate files from the manifest's ranges
//! ([`planner`]), their footers ([`footer`]), an explicit row-group plan
//! from their statistics ([`access_plan`]), one ranged fetch per file, and
//! the checked decode ([`decode`])), widen a filtered query's lists in rounds
//! ([`filtered`]), then rank: the exact scan ([`scan`]) or the codes and
//! their re-rank ([`quantized`]), and each query's answer
//! ([`results`]). What a search cost is one
//! [`stats::SearchStats`], from the reader to the HTTP answer.
//!
//! A cold query costs at most two dependent rounds of requests: every
//! candidate footer at once, then every planned row group at once. With all
//! footers cached (`Index::warm`) it is one round. In an index with codes
//! the row groups are read as codes, and a third round reads the `vector`
//! pages holding the candidates to re-rank (none when the codes are
//! preloaded with `--preload all`, or with `rerank 0`).

pub mod access_plan;
pub mod cache;
pub mod decode;
pub mod engine;
pub mod filtered;
pub mod footer;
pub mod live;
pub mod load;
pub mod offload;
pub mod planner;
pub mod quantized;
pub mod query;
pub mod results;
pub mod rows;
pub mod scan;
pub mod select;
pub mod stats;
pub mod target;

use thiserror::Error;

/// Probe errors. Every variant names the object and the numbers involved.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// A decoded row's cid differs from its row group's exact statistics:
    /// the index is corrupt (an error, never a wrong answer).
    #[error(
        "corrupt index: {path} row group {row_group} row {row} has cid {found}, its statistics say {expected}"
    )]
    CorruptIndex {
        path: String,
        row_group: usize,
        row: usize,
        found: i64,
        expected: i64,
    },
    /// A plan's length differs from the footer's row-group count.
    #[error("{path}: access plan has {expected} row groups, footer has {actual}")]
    RowGroupCountMismatch {
        path: String,
        expected: usize,
        actual: usize,
    },
    /// Postings files whose payload columns differ (the writer gives every
    /// file of an index the same payload schema).
    #[error("{path}: its payload columns differ from another postings file's: {detail}")]
    PayloadMismatch { path: String, detail: String },
    /// The footer could not be decoded.
    #[error("{path}: cannot decode the Parquet footer: {source}")]
    Footer {
        path: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A planned row group could not be decoded.
    #[error("{path} row group {row_group}: cannot decode: {source}")]
    Decode {
        path: String,
        row_group: usize,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A postings footer breaks the footer contract (every violation found;
    /// see [`crate::format::postings_table::check_footer`]).
    #[error("{}", display_all(.0))]
    FooterContract(Vec<crate::format::postings_table::FooterViolation>),
    /// A postings footer differs from its pin in `footers.json`.
    #[error(transparent)]
    FooterPin(#[from] crate::format::footers::FootersError),
    /// A page of a fetched column chunk fails its CRC32 (or has none).
    #[error("corrupt page: {path} row group {row_group} column {column}: {source}")]
    PageChecksum {
        path: String,
        row_group: usize,
        column: String,
        #[source]
        source: crate::format::page_crc::PageCrcError,
    },
    /// A filter could not be evaluated on a file's statistics or rows.
    #[error("{path}: filter: {source}")]
    Filter {
        path: String,
        #[source]
        source: crate::filter::FilterError,
    },
    /// The store failed (a missing object named by the manifest lands here).
    #[error("object store error on {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
}

fn display_all(violations: &[crate::format::postings_table::FooterViolation]) -> String {
    let all: Vec<String> = violations.iter().map(ToString::to_string).collect();
    all.join("; ")
}
