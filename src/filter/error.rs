//! The error of the filter language, [`FilterError`], and the helpers its
//! messages share: an excerpt of long text and the list of the payload
//! columns there are.

use arrow::datatypes::Schema;

/// Why a filter could not be parsed, type-checked or evaluated.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The text is not one SQL expression.
    #[error(
        "filter `{}` is not a valid SQL expression: {message}",
        excerpt(filter)
    )]
    Syntax {
        /// The filter text.
        filter: String,
        /// The parser's description of the problem.
        message: String,
    },
    /// The filter names a column the payload does not have.
    #[error(
        "filter names unknown column `{column}`; {}",
        available_text(available)
    )]
    UnknownColumn {
        /// The name as written in the filter.
        column: String,
        /// The payload columns there are.
        available: Vec<String>,
    },
    /// A literal cannot be converted to its column's type.
    #[error("column `{column}` is {column_type}: cannot compare it with {literal}")]
    TypeMismatch {
        /// The payload column.
        column: String,
        /// The column's Arrow type.
        column_type: String,
        /// The literal as written, with its kind and the conversion error.
        literal: String,
    },
    /// The filter names a payload column of a type filters do not support.
    #[error(
        "column `{column}` is {column_type}: filters support integer, floating-point, string, \
         boolean, date and timestamp columns"
    )]
    UnsupportedType {
        /// The payload column.
        column: String,
        /// Its Arrow type.
        column_type: String,
    },
    /// Valid SQL outside the filter language.
    #[error("filters do not support {what}")]
    Unsupported {
        /// What was found, quoting the expression.
        what: String,
    },
    /// The filter text is longer than [`MAX_FILTER_BYTES`](crate::filter::MAX_FILTER_BYTES).
    #[error("filter is {bytes} bytes, over the limit of {limit} bytes")]
    TooLong {
        /// The length of the text.
        bytes: usize,
        /// [`MAX_FILTER_BYTES`](crate::filter::MAX_FILTER_BYTES).
        limit: usize,
    },
    /// Evaluation failed: a column missing from the batch or the
    /// statistics, of another type than the filter was checked against, or
    /// an Arrow kernel error.
    #[error("cannot evaluate the filter on column `{column}`: {message}")]
    Evaluate {
        /// The payload column.
        column: String,
        /// What went wrong.
        message: String,
    },
}

/// The first 200 characters of `text`, for messages.
pub(super) fn excerpt(text: &str) -> String {
    const SHOWN: usize = 200;
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

fn available_text(available: &[String]) -> String {
    if available.is_empty() {
        "the index has no payload columns".to_string()
    } else {
        format!("the payload columns are {}", available.join(", "))
    }
}

pub(super) fn field_names(schema: &Schema) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}
