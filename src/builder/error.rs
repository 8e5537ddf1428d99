//! The builder's errors ([`BuildError`]): every one names the object, the
//! row or part, and the numbers involved.

use thiserror::Error;

/// The message of `e` for an error that already names `path`: the first
/// message in its chain of causes that does not repeat the path (object
/// store and Parquet errors embed it), else `e`'s own.
pub(crate) fn reason_without(path: &str, e: &dyn std::error::Error) -> String {
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if path.is_empty() || !text.contains(path) {
            return text;
        }
        cause = c.source();
    }
    e.to_string()
}

/// `path: message`, unless the message already names the path.
fn prefixed(path: &str, message: &dyn std::fmt::Display) -> String {
    let m = message.to_string();
    if !path.is_empty() && m.contains(path) {
        m
    } else {
        format!("{path}: {m}")
    }
}

/// Build errors. Source errors name the object and the numbers involved, and
/// each path once.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("the source table has no rows")]
    EmptySource,
    /// `--sort-by` names a column that is not carried as payload.
    #[error("--sort-by {column}: not a payload column (payload: {})", if payload.is_empty() { "none".to_string() } else { payload.join(", ") })]
    SortColumn {
        column: String,
        payload: Vec<String>,
    },
    #[error("nlist {nlist} is larger than the number of rows {rows}; choose nlist <= rows")]
    NlistExceedsRows { nlist: u32, rows: u64 },
    #[error(
        "the training sample of {sample} rows holds only {distinct} distinct vectors, fewer than nlist {nlist}: k-means cannot place {nlist} lists, and the lists left empty would answer the searches that probe them with nothing; choose nlist <= {distinct}"
    )]
    TooFewDistinct {
        nlist: u32,
        distinct: usize,
        sample: usize,
    },
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
    /// A distributed build's worker finds the source unlike what the driver
    /// counted (files added, removed or rewritten in between).
    #[error("{source_name} changed since the build was planned: {detail}; plan the build again")]
    SourceChanged { source_name: String, detail: String },
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
    #[error("{}", prefixed(path, source))]
    VectorColumn {
        path: String,
        #[source]
        source: crate::catalog::vector_column::VectorColumnError,
    },
    #[error("{}", prefixed(path, source))]
    Mapping {
        path: String,
        #[source]
        source: crate::catalog::mapping::MappingError,
    },
    #[error("{path}: row {row} has a NULL id")]
    NullId { path: String, row: u64 },
    #[error(
        "{path}: the id column {column} has type {found}; ids must be integers (int8 to int64, or uint8 to uint64 with values up to 2^63-1)"
    )]
    IdColumnType {
        path: String,
        column: String,
        found: String,
    },
    #[error(
        "{path}: row {row} of the id column {column} holds {value}, above the largest id 2^63-1 = 9223372036854775807"
    )]
    IdOutOfRange {
        path: String,
        column: String,
        row: u64,
        value: u64,
    },
    #[error("id {id} appears more than once: {first} and {second}; ids must be unique")]
    DuplicateId {
        id: i64,
        /// The first occurrence, as `<file> row <n>`.
        first: String,
        /// The second occurrence, as `<file> row <n>`.
        second: String,
    },
    /// A refresh would add a row whose id the index already holds live (an
    /// update must remove the old row in the same refresh).
    #[error(
        "{path} row {row}: id {id} is already indexed, and this refresh does not remove its row; \
         one id is never two live rows: remove the old row from the source (a changed or \
         removed file), or rebuild the index"
    )]
    IdAlreadyIndexed { id: i64, path: String, row: u64 },
    #[error("spill file {path}: {reason}")]
    Spill { path: String, reason: String },
    #[error("arrow: {0}")]
    Arrow(String),
    /// Measuring the written postings (the codes' re-rank factor) failed.
    #[error("measuring the re-rank of the postings written in {path}: {reason}")]
    Measure { path: String, reason: String },
    #[error("internal: {0}")]
    Internal(String),
    #[error(transparent)]
    KMeans(#[from] crate::kmeans::KMeansError),
    #[error(transparent)]
    Postings(#[from] crate::postings::PostingsError),
    /// Reading an index's postings failed its checks (pins, page CRCs, cids).
    #[error(transparent)]
    Probe(#[from] crate::probe::ProbeError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Warehouse(#[from] crate::format::warehouse::WarehouseError),
    #[error(transparent)]
    Catalog(#[from] crate::catalog::CatalogError),
    #[error(transparent)]
    Location(#[from] crate::store::uri::UriError),
    #[error(transparent)]
    Definition(#[from] crate::format::definition::DefinitionError),
    /// The index cannot be refreshed or compacted as it is.
    #[error("index {index}: cannot refresh: {reason}")]
    Refresh { index: String, reason: String },
    /// A delete or upsert the index does not support as it is.
    #[error("index {index}: cannot {operation}: {reason}")]
    Mutation {
        index: String,
        operation: &'static str,
        reason: String,
    },
    /// The source's columns are no longer the index's.
    #[error(
        "index {index}: the source's {what} changed: the index has {expected}, the source now {found}; rebuild the index"
    )]
    SchemaChanged {
        index: String,
        what: String,
        expected: String,
        found: String,
    },
}
