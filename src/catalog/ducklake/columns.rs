//! A table's logical columns at a snapshot: the `ducklake_column` tree
//! (`parent_column`) turned into Arrow fields whose metadata carries
//! `PARQUET:field_id = column_id`, which is what the column-mapping model
//! resolves files against. Every logical field is nullable: a column with no
//! mapping node reads as NULL.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields};

use super::error::DuckLakeError;
use super::metadata::ColumnRow;
use crate::catalog::mapping::with_field_id;

/// The logical columns of one table.
#[derive(Debug, Clone)]
pub struct LogicalColumns {
    table: String,
    roots: Vec<ColumnRow>,
    children: HashMap<i64, Vec<ColumnRow>>,
}

impl LogicalColumns {
    /// Builds the tree from the visible `ducklake_column` rows (in `column_order`).
    pub fn new(table: &str, rows: Vec<ColumnRow>) -> Self {
        let mut roots = Vec::new();
        let mut children: HashMap<i64, Vec<ColumnRow>> = HashMap::new();
        for row in rows {
            match row.parent_column {
                None => roots.push(row),
                Some(p) => children.entry(p).or_default().push(row),
            }
        }
        Self {
            table: table.to_string(),
            roots,
            children,
        }
    }

    /// The top-level column names, in table order.
    pub fn names(&self) -> Vec<&str> {
        self.roots.iter().map(|r| r.column_name.as_str()).collect()
    }

    /// The Arrow field (with field ids, nested included) of top-level column `name`.
    ///
    /// # Errors
    /// [`DuckLakeError::UnknownColumn`], [`DuckLakeError::UnsupportedType`].
    pub fn field(&self, name: &str) -> Result<FieldRef, DuckLakeError> {
        let row = self
            .roots
            .iter()
            .find(|r| r.column_name == name)
            .ok_or_else(|| DuckLakeError::UnknownColumn {
                table: self.table.clone(),
                column: name.to_string(),
                available: self.names().join(", "),
            })?;
        Ok(Arc::new(self.build(row, 0)?))
    }

    fn build(&self, row: &ColumnRow, depth: usize) -> Result<Field, DuckLakeError> {
        let unsupported = || DuckLakeError::UnsupportedType {
            table: self.table.clone(),
            column: row.column_name.clone(),
            column_type: row.column_type.clone(),
        };
        // The tree comes from the catalog: guard against parent cycles.
        if depth > 64 {
            return Err(unsupported());
        }
        let kids = || -> Result<Vec<Field>, DuckLakeError> {
            self.children
                .get(&row.column_id)
                .into_iter()
                .flatten()
                .map(|c| self.build(c, depth + 1))
                .collect()
        };
        let data_type = match row.column_type.to_ascii_lowercase().as_str() {
            "boolean" => DataType::Boolean,
            "int8" => DataType::Int8,
            "int16" => DataType::Int16,
            "int32" => DataType::Int32,
            "int64" => DataType::Int64,
            "uint8" => DataType::UInt8,
            "uint16" => DataType::UInt16,
            "uint32" => DataType::UInt32,
            "uint64" => DataType::UInt64,
            "float32" => DataType::Float32,
            "float64" => DataType::Float64,
            "varchar" | "json" => DataType::Utf8,
            "blob" => DataType::Binary,
            "date" => DataType::Date32,
            "list" => match kids()?.as_slice() {
                [element] => DataType::List(Arc::new(element.clone())),
                _ => return Err(unsupported()),
            },
            "struct" => DataType::Struct(Fields::from(kids()?)),
            _ => return Err(unsupported()),
        };
        Ok(with_field_id(
            Field::new(&row.column_name, data_type, true),
            row.column_id,
        ))
    }
}
