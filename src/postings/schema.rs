//! The physical schema of an `ivf_postings` Parquet file (shared contract).
//! Columns, in order: `cid` INT32 required, `rowid` INT64 required, `vector`
//! FIXED_LEN_BYTE_ARRAY(dim·4) required (little-endian f32), then payload columns.
//! SKELETON: owned by the format helper (issue 2).

pub const CID_COLUMN: &str = "cid";
pub const ROWID_COLUMN: &str = "rowid";
pub const VECTOR_COLUMN: &str = "vector";
/// Parquet key-value metadata key holding the postings format version.
pub const KV_FORMAT_VERSION: &str = "parqivf.format-version";
/// Parquet key-value metadata key holding the vector dimension.
pub const KV_DIM: &str = "parqivf.dim";
