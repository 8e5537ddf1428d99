//! The physical schema of an `ivf_postings` Parquet file (shared contract).
//! Columns, in order: `cid` INT32 required, `rowid` INT64 required, `vector`
//! FIXED_LEN_BYTE_ARRAY(dim·4) required (little-endian IEEE-754 f32, element
//! `i` at bytes `4i..4i+4`), then payload columns. Files live at
//! [`part_path`] below the table root; the key-value metadata carries
//! [`KV_FORMAT_VERSION`] and [`KV_DIM`].

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

pub const CID_COLUMN: &str = "cid";
pub const ROWID_COLUMN: &str = "rowid";
pub const VECTOR_COLUMN: &str = "vector";
/// Parquet key-value metadata key holding the postings format version.
pub const KV_FORMAT_VERSION: &str = "parqivf.format-version";
/// Parquet key-value metadata key holding the vector dimension.
pub const KV_DIM: &str = "parqivf.dim";
/// Name of the manifest object below the table root.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Bytes per vector element (f32).
pub const ELEMENT_BYTES: usize = 4;

/// The Arrow schema of a postings file with `dim`-dimensional f32 vectors and
/// the given payload fields appended after the three fixed columns.
///
/// A `dim` whose byte width does not fit an `i32` cannot be represented; the
/// writer rejects it before calling this (see `PostingsError::InvalidDim`), and
/// here it saturates.
pub fn postings_schema(dim: usize, payload: &[Field]) -> SchemaRef {
    let width = i32::try_from(dim.saturating_mul(ELEMENT_BYTES)).unwrap_or(i32::MAX);
    let mut fields = vec![
        Field::new(CID_COLUMN, DataType::Int32, false),
        Field::new(ROWID_COLUMN, DataType::Int64, false),
        Field::new(VECTOR_COLUMN, DataType::FixedSizeBinary(width), false),
    ];
    fields.extend(payload.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// The canonical path of part `seq` of root `bucket`, relative to the table
/// root: `cid_bucket=NNNNNN/part-NNNNN.parquet`.
pub fn part_path(bucket: u32, seq: u32) -> String {
    format!("cid_bucket={bucket:06}/part-{seq:05}.parquet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_path_round_trips_through_the_manifest_parser() {
        let path = part_path(17, 3);
        assert_eq!(path, "cid_bucket=000017/part-00003.parquet");
        assert_eq!(
            crate::format::manifest::parse_part_path(&path),
            Some((17, 3))
        );
    }

    #[test]
    fn schema_has_fixed_columns_then_payload() {
        let schema = postings_schema(3, &[Field::new("title", DataType::Utf8, true)]);
        let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, [CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN, "title"]);
        assert_eq!(schema.field(2).data_type(), &DataType::FixedSizeBinary(12));
        assert!(!schema.field(0).is_nullable());
    }
}
