//! The batch build job: a [`VectorSource`] is sampled, a two-level k-means
//! hierarchy is trained, every row is assigned and grouped by root bucket
//! (spilling under a memory limit), postings and centroids are written to a
//! fresh snapshot folder, and the snapshot is published through the
//! [`crate::warehouse`] commit protocol. See `docs/build.md`.

pub mod ducklake_source;
pub mod job;
pub mod parquet_source;
pub mod progress;
pub mod source;
pub mod spill;

pub use job::{BuildParams, BuildSummary, DEFAULT_POLISH, DEFAULT_SEED, PhaseTimes, build};
pub use parquet_source::{ParquetSource, ParquetSourceOptions};
pub use progress::ProgressMode;
pub use source::{ArraySource, SourceDefinition, VectorBatch, VectorSource};

use thiserror::Error;

/// Build errors. Source errors name the object and the numbers involved.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("the source table has no rows")]
    EmptySource,
    #[error("nlist {nlist} is larger than the number of rows {rows}; choose nlist <= rows")]
    NlistExceedsRows { nlist: u32, rows: u64 },
    #[error("invalid parameter {name}: {reason}")]
    BadParameter { name: &'static str, reason: String },
    #[error("vector buffer of {len} values is not a whole number of rows of dimension {dim}")]
    BadShape { len: usize, dim: usize },
    #[error("{source_name}: row {row} has the non-finite value {value}")]
    NonFiniteValue {
        source_name: String,
        row: u64,
        value: f32,
    },
    #[error(
        "row with rowid {rowid} is a zero vector: metric cosine needs a direction (use --skip-invalid to skip such rows)"
    )]
    NoDirection { rowid: i64 },
    #[error("no source files match {location}")]
    NoFiles { location: String },
    #[error("{path}: cannot read: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path}: the column {column} is missing")]
    MissingColumn { path: String, column: String },
    #[error(
        "{path}: the column {column} has type {found}, which is not a vector type (list<float>, list<double>, fixed-size list, fixed(4·dim))"
    )]
    WrongType {
        path: String,
        column: String,
        found: String,
    },
    #[error("{path}: {source}")]
    VectorColumn {
        path: String,
        #[source]
        source: crate::catalog::vector_column::VectorColumnError,
    },
    #[error("{path}: {source}")]
    Mapping {
        path: String,
        #[source]
        source: crate::catalog::mapping::MappingError,
    },
    #[error("{path}: row {row} has a NULL id")]
    NullId { path: String, row: u64 },
    #[error("spill file {path}: {reason}")]
    Spill { path: String, reason: String },
    #[error("arrow: {0}")]
    Arrow(String),
    #[error("internal: {0}")]
    Internal(String),
    #[error(transparent)]
    KMeans(#[from] crate::kmeans::KMeansError),
    #[error(transparent)]
    Postings(#[from] crate::postings::PostingsError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Warehouse(#[from] crate::warehouse::WarehouseError),
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
}
