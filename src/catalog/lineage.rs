//! Row lineage: the five virtual columns of a lake row (`rowid`,
//! `snapshot_id`, `file_index`, `filename`, `file_row_number`) produced by one
//! mechanism, as the row-lineage document concludes: a value embedded in the
//! file by field id wins (`_ducklake_internal_row_id` = 2147483540,
//! `_ducklake_internal_snapshot_id` = 2147483539, written when DuckLake
//! rewrites rows), otherwise the value is synthesised from the file's catalog
//! entry and the row's position (`row_id_start + file_row_number`, with
//! checked arithmetic; the file's `begin_snapshot`).
//!
//! Values are computed over the file's rows in file order, before deleted
//! rows are filtered out, so `file_row_number` is the physical position.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, StringArray, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema};
use thiserror::Error;

use super::mapping::field_id;

/// Field id of the embedded row id (`_ducklake_internal_row_id`).
pub const ROW_ID_FIELD_ID: i64 = 2_147_483_540;
/// Field id of the embedded snapshot id (`_ducklake_internal_snapshot_id`).
pub const SNAPSHOT_ID_FIELD_ID: i64 = 2_147_483_539;

/// Row-lineage errors.
#[derive(Debug, Error)]
pub enum LineageError {
    /// `row_id_start + file_row_number` does not fit in BIGINT.
    #[error("{file}: rowid overflows: row_id_start {row_id_start} + file_row_number {row}")]
    RowIdOverflow {
        file: String,
        row_id_start: i64,
        row: u64,
    },
    /// The index needs rowids but the file neither embeds them nor has a `row_id_start`.
    #[error(
        "{file}: no rowid: the file embeds no _ducklake_internal_row_id and the catalog has no row_id_start"
    )]
    MissingRowIdStart { file: String },
    /// An embedded lineage column that is not an integer.
    #[error(
        "{file}: embedded lineage column with field id {field_id} is {data_type}, not an integer"
    )]
    EmbeddedType {
        file: String,
        field_id: i64,
        data_type: DataType,
    },
}

/// A virtual column of a lake row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineageColumn {
    /// DuckLake's row identity (BIGINT): joins back with `WHERE rowid IN (…)`.
    RowId,
    /// The snapshot that wrote the row (BIGINT).
    SnapshotId,
    /// The file's position in the scan's file list (UBIGINT).
    FileIndex,
    /// The resolved location of the file (VARCHAR).
    FileName,
    /// The row's 0-based position in its file, before deletes (UBIGINT).
    FileRowNumber,
}

impl LineageColumn {
    /// All virtual columns.
    pub const ALL: [LineageColumn; 5] = [
        Self::RowId,
        Self::SnapshotId,
        Self::FileIndex,
        Self::FileName,
        Self::FileRowNumber,
    ];

    /// The column name (`rowid`, `snapshot_id`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::RowId => "rowid",
            Self::SnapshotId => "snapshot_id",
            Self::FileIndex => "file_index",
            Self::FileName => "filename",
            Self::FileRowNumber => "file_row_number",
        }
    }

    /// The virtual column called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            Self::RowId | Self::SnapshotId => DataType::Int64,
            Self::FileIndex | Self::FileRowNumber => DataType::UInt64,
            Self::FileName => DataType::Utf8,
        }
    }

    /// The embedded field id that overrides the synthesised value, if any.
    pub fn embedded_field_id(self) -> Option<i64> {
        match self {
            Self::RowId => Some(ROW_ID_FIELD_ID),
            Self::SnapshotId => Some(SNAPSHOT_ID_FIELD_ID),
            _ => None,
        }
    }
}

/// What happens when a file has no rowid at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingRowId {
    /// `rowid` reads as NULL (a plain scan).
    #[default]
    Null,
    /// [`LineageError::MissingRowIdStart`] (the index needs every rowid).
    Error,
}

/// The catalog facts of one file that lineage values derive from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLineage {
    pub file_index: u64,
    pub filename: String,
    pub row_id_start: Option<i64>,
    pub begin_snapshot: i64,
}

/// The physical root index of `column`'s embedded value in a file schema, if embedded.
pub fn embedded_root(physical: &Schema, column: LineageColumn) -> Option<usize> {
    let id = column.embedded_field_id()?;
    physical
        .fields()
        .iter()
        .position(|f| field_id(f) == Some(id))
}

/// The values of `column` for `len` rows starting at `first_row` of the file.
/// `embedded` is the decoded embedded column when the file has one.
///
/// # Errors
/// [`LineageError::RowIdOverflow`], [`LineageError::MissingRowIdStart`] (with
/// [`MissingRowId::Error`]), [`LineageError::EmbeddedType`].
pub fn materialize(
    column: LineageColumn,
    file: &FileLineage,
    embedded: Option<&ArrayRef>,
    first_row: u64,
    len: usize,
    missing: MissingRowId,
) -> Result<ArrayRef, LineageError> {
    if let (Some(array), Some(id)) = (embedded, column.embedded_field_id()) {
        return cast(array, &DataType::Int64).map_err(|_| LineageError::EmbeddedType {
            file: file.filename.clone(),
            field_id: id,
            data_type: array.data_type().clone(),
        });
    }
    let rows = first_row..first_row + len as u64;
    Ok(match column {
        LineageColumn::RowId => match file.row_id_start {
            Some(start) => {
                let ids = rows
                    .map(|row| {
                        i64::try_from(row)
                            .ok()
                            .and_then(|r| start.checked_add(r))
                            .ok_or(LineageError::RowIdOverflow {
                                file: file.filename.clone(),
                                row_id_start: start,
                                row,
                            })
                    })
                    .collect::<Result<Vec<i64>, _>>()?;
                Arc::new(Int64Array::from(ids))
            }
            None if missing == MissingRowId::Error => {
                return Err(LineageError::MissingRowIdStart {
                    file: file.filename.clone(),
                });
            }
            None => Arc::new(Int64Array::new_null(len)),
        },
        LineageColumn::SnapshotId => Arc::new(Int64Array::from(vec![file.begin_snapshot; len])),
        LineageColumn::FileIndex => Arc::new(UInt64Array::from(vec![file.file_index; len])),
        LineageColumn::FileName => Arc::new(StringArray::from(vec![file.filename.as_str(); len])),
        LineageColumn::FileRowNumber => Arc::new(UInt64Array::from_iter_values(rows)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Int64Type, UInt64Type};

    fn file(row_id_start: Option<i64>) -> FileLineage {
        FileLineage {
            file_index: 3,
            filename: "/d/f.parquet".into(),
            row_id_start,
            begin_snapshot: 7,
        }
    }

    #[test]
    fn rowid_is_start_plus_position() {
        let a = materialize(
            LineageColumn::RowId,
            &file(Some(100)),
            None,
            5,
            3,
            MissingRowId::Error,
        )
        .unwrap();
        assert_eq!(a.as_primitive::<Int64Type>().values(), &[105, 106, 107]);
    }

    #[test]
    fn embedded_rowid_wins_over_start() {
        let embedded: ArrayRef = Arc::new(Int64Array::from(vec![42, 7]));
        let a = materialize(
            LineageColumn::RowId,
            &file(Some(100)),
            Some(&embedded),
            0,
            2,
            MissingRowId::Error,
        )
        .unwrap();
        assert_eq!(a.as_primitive::<Int64Type>().values(), &[42, 7]);
    }

    #[test]
    fn rowid_overflow_is_a_typed_error() {
        let err = materialize(
            LineageColumn::RowId,
            &file(Some(i64::MAX - 1)),
            None,
            0,
            3,
            MissingRowId::Null,
        );
        assert!(
            matches!(err, Err(LineageError::RowIdOverflow { row: 2, row_id_start, .. }) if row_id_start == i64::MAX - 1)
        );
    }

    #[test]
    fn missing_row_id_start_is_null_or_error() {
        let a = materialize(
            LineageColumn::RowId,
            &file(None),
            None,
            0,
            2,
            MissingRowId::Null,
        )
        .unwrap();
        assert_eq!(a.null_count(), 2);
        let err = materialize(
            LineageColumn::RowId,
            &file(None),
            None,
            0,
            2,
            MissingRowId::Error,
        );
        assert!(matches!(err, Err(LineageError::MissingRowIdStart { .. })));
    }

    #[test]
    fn synthesised_columns() {
        let f = file(Some(0));
        let s = materialize(
            LineageColumn::SnapshotId,
            &f,
            None,
            0,
            2,
            MissingRowId::Null,
        )
        .unwrap();
        assert_eq!(s.as_primitive::<Int64Type>().values(), &[7, 7]);
        let i = materialize(LineageColumn::FileIndex, &f, None, 0, 2, MissingRowId::Null).unwrap();
        assert_eq!(i.as_primitive::<UInt64Type>().values(), &[3, 3]);
        let n = materialize(
            LineageColumn::FileRowNumber,
            &f,
            None,
            10,
            2,
            MissingRowId::Null,
        )
        .unwrap();
        assert_eq!(n.as_primitive::<UInt64Type>().values(), &[10, 11]);
        let name =
            materialize(LineageColumn::FileName, &f, None, 0, 1, MissingRowId::Null).unwrap();
        assert_eq!(name.as_string::<i32>().value(0), "/d/f.parquet");
    }

    #[test]
    fn embedded_roots_found_by_field_id() {
        let with_id = |name: &str, id: i64| {
            super::super::mapping::with_field_id(Field::new(name, DataType::Int64, true), id)
        };
        let schema = Schema::new(vec![
            with_id("id", 1),
            with_id("x", SNAPSHOT_ID_FIELD_ID),
            with_id("y", ROW_ID_FIELD_ID),
        ]);
        assert_eq!(embedded_root(&schema, LineageColumn::RowId), Some(2));
        assert_eq!(embedded_root(&schema, LineageColumn::SnapshotId), Some(1));
        assert_eq!(embedded_root(&schema, LineageColumn::FileIndex), None);
    }
}
