//! The physical schema of an `ivf_postings` Parquet file (shared contract).
//! Columns, in order: `cid` INT32 required, `rowid` INT64 required, in an
//! index built with codes `code` FIXED_LEN_BYTE_ARRAY(code bytes) required
//! (the quantised residual, laid out as [`crate::quant`] documents), then
//! `vector` FIXED_LEN_BYTE_ARRAY(dim·4) required (little-endian IEEE-754
//! f32, element `i` at bytes `4i..4i+4`), then payload columns. A row
//! group's chunks follow that order, so the key columns and the codes a
//! query scans are one contiguous byte range ([`postings_schema`]); readers
//! find each column by name, whatever the order. Files live at
//! [`part_path`] below the table root; the key-value metadata carries
//! [`KV_FORMAT_VERSION`] and [`KV_DIM`]. [`check_footer`] is the one footer
//! contract: `verify` reports every [`FooterViolation`] of a file, the query
//! path refuses the file on the first.

use crate::format::manifest::{FORMAT_VERSION, FileEntry};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use serde::Serialize;
use std::sync::Arc;
use thiserror::Error;

pub const CID_COLUMN: &str = "cid";
pub const ROWID_COLUMN: &str = "rowid";
pub const VECTOR_COLUMN: &str = "vector";
/// The quantised code of each row (indexes built with codes).
pub const CODE_COLUMN: &str = "code";
/// Column names a payload column may not take.
pub const RESERVED_COLUMNS: [&str; 4] = [CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN, CODE_COLUMN];
/// Parquet key-value metadata key holding the postings format version.
pub const KV_FORMAT_VERSION: &str = "parqivf.format-version";
/// Parquet key-value metadata key holding the vector dimension.
pub const KV_DIM: &str = "parqivf.dim";
/// Name of the manifest object below the table root.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Bytes per vector element (f32).
pub const ELEMENT_BYTES: usize = 4;

/// The Arrow schema of a postings file with `dim`-dimensional f32 vectors,
/// a `code` column of `code_bytes` bytes when the index has codes, and the
/// given payload fields appended after the fixed columns.
///
/// `code` comes before `vector`: a row group's chunks are written in schema
/// order, so `cid`, `rowid` and `code` (what a query with codes reads of
/// each probed list) are adjacent and one ranged read, where a `vector`
/// chunk between them made it two. Files written in the earlier order
/// (`vector` before `code`) read the same.
///
/// A `dim` whose byte width does not fit an `i32` cannot be represented; the
/// writer rejects it before calling this (see `PostingsError::InvalidDim`), and
/// here it saturates.
pub fn postings_schema(dim: usize, code_bytes: Option<usize>, payload: &[Field]) -> SchemaRef {
    let width = i32::try_from(dim.saturating_mul(ELEMENT_BYTES)).unwrap_or(i32::MAX);
    let mut fields = vec![
        Field::new(CID_COLUMN, DataType::Int32, false),
        Field::new(ROWID_COLUMN, DataType::Int64, false),
    ];
    if let Some(bytes) = code_bytes {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        fields.push(Field::new(
            CODE_COLUMN,
            DataType::FixedSizeBinary(bytes),
            false,
        ));
    }
    fields.push(Field::new(
        VECTOR_COLUMN,
        DataType::FixedSizeBinary(width),
        false,
    ));
    fields.extend(payload.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// The canonical path of part `seq` of root `bucket`, relative to the table
/// root: `cid_bucket=NNNNNN/part-NNNNN.parquet`.
pub fn part_path(bucket: u32, seq: u32) -> String {
    format!("cid_bucket={bucket:06}/part-{seq:05}.parquet")
}

/// One broken rule of the footer contract of a postings file, naming the
/// object and the numbers involved.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum FooterViolation {
    #[error("{path}: footer holds {actual} rows, manifest says {expected}")]
    RowCountMismatch {
        path: String,
        expected: u64,
        actual: i64,
    },
    #[error("{path}: key-value {KV_FORMAT_VERSION} is {found:?}, expected \"{expected}\"")]
    FormatVersionMismatch {
        path: String,
        found: Option<String>,
        expected: u32,
    },
    /// A fixed column is missing or has the wrong physical type.
    #[error("{path}: column `{column}` must be {expected}, found {found}")]
    ColumnInvalid {
        path: String,
        column: &'static str,
        expected: String,
        found: String,
    },
    #[error("{path}: row group {row_group} has no rows, hence no CID")]
    EmptyRowGroup { path: String, row_group: usize },
    #[error("{path}: row group {row_group} has no cid min/max statistics")]
    StatisticsMissing { path: String, row_group: usize },
    #[error("{path}: row group {row_group} cid statistics are not exact")]
    StatisticsInexact { path: String, row_group: usize },
    #[error("{path}: row group {row_group} has {nulls} null cids")]
    CidNulls {
        path: String,
        row_group: usize,
        nulls: u64,
    },
    #[error("{path}: row group {row_group} holds cids {min}..={max}, not exactly one")]
    MultipleCids {
        path: String,
        row_group: usize,
        min: i32,
        max: i32,
    },
    #[error("{path}: row group {row_group} cid {cid} is outside the file's [{min_cid}, {max_cid}]")]
    CidOutsideFile {
        path: String,
        row_group: usize,
        cid: i32,
        min_cid: u32,
        max_cid: u32,
    },
    #[error("{path}: row group {row_group} cid {cid} comes after cid {previous}")]
    RowGroupsUnordered {
        path: String,
        row_group: usize,
        previous: i32,
        cid: i32,
    },
    #[error("{path}: first row group's cid is {actual}, manifest min-cid is {expected}")]
    FirstCidMismatch {
        path: String,
        expected: u32,
        actual: i32,
    },
    #[error("{path}: last row group's cid is {actual}, manifest max-cid is {expected}")]
    LastCidMismatch {
        path: String,
        expected: u32,
        actual: i32,
    },
}

/// No annotation, or (as pyarrow writes) the signed integer one of the
/// physical width: what reads back as a plain Int32/Int64/FixedSizeBinary.
fn plain_annotation(
    logical: Option<&LogicalType>,
    converted: ConvertedType,
    physical: PhysicalType,
) -> bool {
    let bits = match physical {
        PhysicalType::INT32 => 32,
        PhysicalType::INT64 => 64,
        _ => return logical.is_none() && converted == ConvertedType::NONE,
    };
    let logical_ok = match logical {
        None => true,
        Some(LogicalType::Integer(int)) => int.is_signed && i32::from(int.bit_width) == bits,
        Some(_) => false,
    };
    let converted_ok = matches!(
        (converted, bits),
        (ConvertedType::NONE, _) | (ConvertedType::INT_32, 32) | (ConvertedType::INT_64, 64)
    );
    logical_ok && converted_ok
}

/// What a valid footer tells the reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FooterFacts {
    /// Root column indices of cid, rowid and vector.
    pub cid_root: usize,
    pub rowid_root: usize,
    pub vector_root: usize,
    /// Root column index of `code`, in an index with codes.
    pub code_root: Option<usize>,
    /// Root column indices of the payload columns (all others).
    pub payload_roots: Vec<usize>,
    /// The cid of each row group.
    pub row_group_cids: Vec<u32>,
}

/// The footer contract of the postings file at `path`, manifest entry
/// `entry`: the row count; the format version; `cid` INT32, `rowid` INT64 and
/// `vector` FIXED_LEN_BYTE_ARRAY(dim·4) (any positive multiple of 4 when `dim`
/// is `None`), and `code` FIXED_LEN_BYTE_ARRAY(code bytes) when `code_bytes` is
/// `Some` (any width when it is `None` and the column is there), all REQUIRED
/// and unannotated; every row group non-empty with
/// exact, null-free cid statistics naming one cid inside
/// `[min-cid, max-cid]`, in non-decreasing order, from `min-cid` to `max-cid`.
/// Pure: no IO. `verify` reports every violation, the query path refuses the
/// file on the first.
///
/// # Errors
/// Every [`FooterViolation`] found, in that order (never empty).
pub fn check_footer(
    path: &str,
    entry: &FileEntry,
    metadata: &ParquetMetaData,
    dim: Option<usize>,
    code_bytes: Option<usize>,
) -> Result<FooterFacts, Vec<FooterViolation>> {
    let path = || path.to_owned();
    let mut found = Vec::new();
    let meta = metadata.file_metadata();
    if u64::try_from(meta.num_rows()) != Ok(entry.rows) {
        found.push(FooterViolation::RowCountMismatch {
            path: path(),
            expected: entry.rows,
            actual: meta.num_rows(),
        });
    }
    let version = meta
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|kv| kv.key == KV_FORMAT_VERSION))
        .and_then(|kv| kv.value.clone());
    if version.as_deref() != Some(FORMAT_VERSION.to_string().as_str()) {
        found.push(FooterViolation::FormatVersionMismatch {
            path: path(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let schema = meta.schema_descr();
    let roots = schema.root_schema().get_fields();
    let column = |name, physical, width| check_column(&path(), roots, name, physical, width);
    let width = dim.map(|d| i32::try_from(d.saturating_mul(ELEMENT_BYTES)).unwrap_or(i32::MAX));
    let columns = [
        column(CID_COLUMN, PhysicalType::INT32, None),
        column(ROWID_COLUMN, PhysicalType::INT64, None),
        column(VECTOR_COLUMN, PhysicalType::FIXED_LEN_BYTE_ARRAY, width),
    ];
    let has_code = roots.iter().any(|f| f.name() == CODE_COLUMN);
    let code = (code_bytes.is_some() || has_code).then(|| {
        let width = code_bytes.map(|w| i32::try_from(w).unwrap_or(i32::MAX));
        column(CODE_COLUMN, PhysicalType::FIXED_LEN_BYTE_ARRAY, width)
    });
    let (cid_root, rowid_root, vector_root, code_root) = match (columns, code) {
        ([Ok(c), Ok(r), Ok(v)], None) => (c, r, v, None),
        ([Ok(c), Ok(r), Ok(v)], Some(Ok(code))) => (c, r, v, Some(code)),
        (columns, code) => {
            found.extend(columns.into_iter().filter_map(Result::err));
            found.extend(code.and_then(Result::err));
            return Err(found);
        }
    };
    // A required primitive root column is its own (only) leaf.
    let cid_leaf = schema
        .columns()
        .iter()
        .position(|c| c.path().parts() == [CID_COLUMN])
        .unwrap_or(usize::MAX);
    let row_group_cids = check_row_group_cids(&path(), entry, metadata, cid_leaf, &mut found);
    if !found.is_empty() {
        return Err(found);
    }
    let payload_roots = (0..roots.len())
        .filter(|&i| ![cid_root, rowid_root, vector_root].contains(&i) && Some(i) != code_root)
        .collect();
    Ok(FooterFacts {
        cid_root,
        rowid_root,
        vector_root,
        code_root,
        payload_roots,
        row_group_cids,
    })
}

/// The root index of the required primitive column `name` of `physical`
/// type (of `width` bytes when given; any positive width, a multiple of 4
/// for `vector`, when not) among `roots`, with no annotation but its plain
/// one.
fn check_column(
    path: &str,
    roots: &[parquet::schema::types::TypePtr],
    name: &'static str,
    physical: PhysicalType,
    width: Option<i32>,
) -> Result<usize, FooterViolation> {
    let expected = match width {
        Some(w) => format!("{physical}({w}) REQUIRED"),
        None if name == VECTOR_COLUMN => format!("{physical}(4·dim) REQUIRED"),
        None => format!("{physical} REQUIRED"),
    };
    let invalid = |found: String| FooterViolation::ColumnInvalid {
        path: path.to_owned(),
        column: name,
        expected: expected.clone(),
        found,
    };
    let Some(root) = roots.iter().position(|f| f.name() == name) else {
        return Err(invalid("no such column".into()));
    };
    let field = &roots[root];
    let info = field.get_basic_info();
    if !field.is_primitive() {
        return Err(invalid("a group".into()));
    }
    let length = match field.as_ref() {
        parquet::schema::types::Type::PrimitiveType { type_length, .. } => *type_length,
        parquet::schema::types::Type::GroupType { .. } => 0,
    };
    let width_ok = match (physical, width) {
        (PhysicalType::FIXED_LEN_BYTE_ARRAY, Some(w)) => length == w,
        (PhysicalType::FIXED_LEN_BYTE_ARRAY, None) => {
            length > 0 && (name != VECTOR_COLUMN || length % ELEMENT_BYTES as i32 == 0)
        }
        _ => true,
    };
    if field.get_physical_type() != physical
        || info.repetition() != Repetition::REQUIRED
        || !plain_annotation(info.logical_type_ref(), info.converted_type(), physical)
        || !width_ok
    {
        let mut type_name = field.get_physical_type().to_string();
        if field.get_physical_type() == PhysicalType::FIXED_LEN_BYTE_ARRAY {
            type_name = format!("{type_name}({length})");
        }
        if let Some(logical) = info.logical_type_ref() {
            type_name = format!("{type_name} {logical:?}");
        }
        return Err(invalid(format!("{type_name} {}", info.repetition())));
    }
    Ok(root)
}

/// The cid of each row group of `metadata` from the exact statistics of its
/// `cid` column (leaf `cid_leaf`): one non-null cid per non-empty row group,
/// inside the file's `[min-cid, max-cid]`, ascending, the first and last
/// being `min-cid` and `max-cid`. Violations are added to `found`.
fn check_row_group_cids(
    path: &str,
    entry: &FileEntry,
    metadata: &ParquetMetaData,
    cid_leaf: usize,
    found: &mut Vec<FooterViolation>,
) -> Vec<u32> {
    let mut row_group_cids = Vec::with_capacity(metadata.num_row_groups());
    let mut previous: Option<i32> = None;
    let mut first_last: Option<(i32, i32)> = None;
    for (row_group, rg) in metadata.row_groups().iter().enumerate() {
        if rg.num_rows() == 0 {
            found.push(FooterViolation::EmptyRowGroup {
                path: path.to_owned(),
                row_group,
            });
            continue;
        }
        let stats = match rg.columns().get(cid_leaf).and_then(|c| c.statistics()) {
            Some(Statistics::Int32(s)) => s,
            _ => {
                found.push(FooterViolation::StatisticsMissing {
                    path: path.to_owned(),
                    row_group,
                });
                continue;
            }
        };
        let (Some(&min), Some(&max)) = (stats.min_opt(), stats.max_opt()) else {
            found.push(FooterViolation::StatisticsMissing {
                path: path.to_owned(),
                row_group,
            });
            continue;
        };
        if !stats.min_is_exact() || !stats.max_is_exact() {
            found.push(FooterViolation::StatisticsInexact {
                path: path.to_owned(),
                row_group,
            });
        }
        if let Some(nulls) = stats.null_count_opt().filter(|&n| n > 0) {
            found.push(FooterViolation::CidNulls {
                path: path.to_owned(),
                row_group,
                nulls,
            });
        }
        if min != max {
            found.push(FooterViolation::MultipleCids {
                path: path.to_owned(),
                row_group,
                min,
                max,
            });
        }
        for cid in [min, max].into_iter().take(if min == max { 1 } else { 2 }) {
            if i64::from(cid) < i64::from(entry.min_cid)
                || i64::from(cid) > i64::from(entry.max_cid)
            {
                found.push(FooterViolation::CidOutsideFile {
                    path: path.to_owned(),
                    row_group,
                    cid,
                    min_cid: entry.min_cid,
                    max_cid: entry.max_cid,
                });
            }
        }
        if let Some(previous) = previous
            && min < previous
        {
            found.push(FooterViolation::RowGroupsUnordered {
                path: path.to_owned(),
                row_group,
                previous,
                cid: min,
            });
        }
        previous = Some(max);
        let first = first_last.map_or(min, |(first, _)| first);
        first_last = Some((first, max));
        // Inside [min-cid, max-cid] (else a violation above), so it fits.
        row_group_cids.push(min as u32);
    }
    if let Some((first, last)) = first_last {
        if i64::from(first) != i64::from(entry.min_cid) {
            found.push(FooterViolation::FirstCidMismatch {
                path: path.to_owned(),
                expected: entry.min_cid,
                actual: first,
            });
        }
        if i64::from(last) != i64::from(entry.max_cid) {
            found.push(FooterViolation::LastCidMismatch {
                path: path.to_owned(),
                expected: entry.max_cid,
                actual: last,
            });
        }
    }
    row_group_cids
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
    fn schema_has_fixed_columns_codes_before_vectors_then_payload() {
        let schema = postings_schema(3, None, &[Field::new("title", DataType::Utf8, true)]);
        let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, [CID_COLUMN, ROWID_COLUMN, VECTOR_COLUMN, "title"]);
        assert_eq!(schema.field(2).data_type(), &DataType::FixedSizeBinary(12));
        let coded = postings_schema(3, Some(9), &[Field::new("title", DataType::Utf8, true)]);
        let names: Vec<_> = coded.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                CID_COLUMN,
                ROWID_COLUMN,
                CODE_COLUMN,
                VECTOR_COLUMN,
                "title"
            ]
        );
        assert_eq!(coded.field(2).data_type(), &DataType::FixedSizeBinary(9));
        assert_eq!(coded.field(3).data_type(), &DataType::FixedSizeBinary(12));
        assert!(!schema.field(0).is_nullable());
    }
}
