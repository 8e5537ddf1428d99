//! Container statistics for pruning: [`ContainerStats`] holds the
//! min/max/null-count/row-count [`ColumnStats`] of some payload columns
//! over a run of row groups or pages, and reads them from a Parquet footer.

use std::collections::HashMap;

use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::Schema;

use super::error::{FilterError, field_names};

/// Statistics of `len` containers (row groups or pages) for some payload
/// columns. A column absent from `columns` is unknown: it may match.
#[derive(Debug, Clone)]
pub struct ContainerStats {
    /// The number of containers.
    pub len: usize,
    /// Statistics per payload column name.
    pub columns: HashMap<String, ColumnStats>,
}

/// The statistics of one column over `len` containers.
#[derive(Debug, Clone)]
pub struct ColumnStats {
    /// A lower bound of each container's non-null values, of the column's
    /// Arrow type; a null entry is unknown.
    pub min: ArrayRef,
    /// An upper bound of each container's non-null values (NaN may be left
    /// out for floats); a null entry is unknown.
    pub max: ArrayRef,
    /// The number of null values per container; a null entry is unknown.
    pub null_counts: Option<UInt64Array>,
    /// The number of rows per container; a null entry is unknown.
    pub row_counts: Option<UInt64Array>,
}

impl ContainerStats {
    /// Row-group statistics of `columns` from a Parquet footer, read
    /// through Parquet's `StatisticsConverter`. `arrow_schema` is the
    /// file's Arrow schema; a column it lacks is [`FilterError::UnknownColumn`].
    pub fn row_groups(
        metadata: &parquet::file::metadata::ParquetMetaData,
        arrow_schema: &Schema,
        columns: &[String],
    ) -> Result<ContainerStats, FilterError> {
        use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
        let row_groups = metadata.row_groups();
        let mut stats = HashMap::new();
        for column in columns {
            if arrow_schema.column_with_name(column).is_none() {
                return Err(FilterError::UnknownColumn {
                    column: column.clone(),
                    available: field_names(arrow_schema),
                });
            }
            let failed = |e: parquet::errors::ParquetError| FilterError::Evaluate {
                column: column.clone(),
                message: format!("cannot read its row-group statistics: {e}"),
            };
            let converter = StatisticsConverter::try_new(
                column,
                arrow_schema,
                metadata.file_metadata().schema_descr(),
            )
            .map_err(failed)?;
            let column_stats = ColumnStats {
                min: converter.row_group_mins(row_groups).map_err(failed)?,
                max: converter.row_group_maxes(row_groups).map_err(failed)?,
                null_counts: Some(
                    converter
                        .row_group_null_counts(row_groups)
                        .map_err(failed)?,
                ),
                row_counts: converter.row_group_row_counts(row_groups).map_err(failed)?,
            };
            stats.insert(column.clone(), column_stats);
        }
        Ok(ContainerStats {
            len: row_groups.len(),
            columns: stats,
        })
    }
}
