//! SQL `WHERE` filters over the payload columns of the postings files.
//!
//! A filter is the text of one SQL boolean expression, as it would follow
//! `WHERE` in DuckDB or Postgres, parsed by the `sqlparser` crate
//! ([`GenericDialect`]). The language is deliberately small: a column
//! compared with a literal (`=`, `<>`, `!=`, `<`, `<=`, `>`, `>=`, either
//! side first), `[NOT] IN (…)`, `[NOT] BETWEEN … AND …`, `IS [NOT] NULL`,
//! `[NOT] LIKE` / `ILIKE` with a string pattern (`%` and `_` are the
//! wildcards, `\` escapes one, as in Postgres), `IS [NOT] TRUE|FALSE` and a
//! bare boolean column, combined with `AND`, `OR`, `NOT` and parentheses.
//! Unquoted column names match exactly, else case-insensitively when that
//! match is unique; quoted names (`"Name"`) match exactly. Literals are
//! numbers (a leading `-` is allowed), single-quoted strings, `TRUE`,
//! `FALSE`, `NULL`, `DATE '…'` and `TIMESTAMP '…'`; each is converted to
//! its column's Arrow type by Arrow's cast kernel when the filter is
//! parsed (a timestamp literal without an offset is UTC, also for a column
//! with a time zone), so a literal that does not fit (`1.5` or `300` for
//! an `Int8`, a number for a string, a string for a number, a malformed
//! date) is a [`FilterError::TypeMismatch`], never a silent conversion.
//! Integer columns take integer literals only (`1.0` does not fit). Function
//! calls, arithmetic, column-to-column comparisons and subqueries are
//! [`FilterError::Unsupported`].
//!
//! Semantics are SQL's three-valued logic: a comparison with a NULL value
//! (in the row or as the literal) is NULL, `AND`/`OR` are Kleene's, and
//! `NOT NULL` is NULL; a row is selected only when the whole predicate is
//! TRUE, so `x <> 5` and `NOT (x = 5)` both leave out rows where `x` is
//! NULL and `x NOT IN (1, NULL)` selects nothing. After parsing, the
//! expression is kept in negation normal form: `NOT` is pushed down to the
//! atoms (`NOT a < b` is `a >= b`, `NOT IN` is an `AND` of `<>`, `NOT
//! BETWEEN` is `< lo OR > hi`, De Morgan for `AND`/`OR`, `IS NULL` and
//! `IS NOT NULL` swap), which is exact in three-valued logic because each
//! comparison maps NULL to NULL and `IS [NOT] NULL` is never NULL; `NOT
//! LIKE` stays a negated `LIKE` atom. Rows are evaluated with Arrow's comparison,
//! `LIKE` and Kleene boolean kernels only; floating-point comparisons
//! follow Arrow's total order (NaN equals NaN and sorts above every number,
//! `-0.0 < 0.0`).
//!
//! Pruning ([`Filter::prune`]) decides per container (row group or page)
//! from its min/max/null-count statistics whether any row *may* match:
//! each atom gives true, false or unknown per container (see the `prune`
//! module), `AND`/`OR` combine them with Kleene logic, and unknown counts
//! as "may match". A container is skipped only when no row in it can make
//! the predicate TRUE; statistics are treated as bounds, so truncated
//! string statistics and float statistics that leave out NaN stay sound.

mod error;
mod eval;
mod expr;
mod parse;
mod prune;
mod stats;
#[cfg(test)]
mod tests;

pub use error::FilterError;
pub use stats::{ColumnStats, ContainerStats};

use std::collections::{BTreeSet, HashMap};

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::Schema;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use error::field_names;
use eval::{eval, true_only, true_or_unknown};
use expr::Node;
use parse::Checker;

/// The longest filter text accepted, in bytes (64 KiB).
pub const MAX_FILTER_BYTES: usize = 64 * 1024;

/// How deep the SQL expression may nest (parentheses, `NOT`, unary minus);
/// `sqlparser` reports deeper input as a syntax error instead of
/// exhausting the stack.
const RECURSION_LIMIT: usize = 64;

/// A parsed, type-checked filter, in negation normal form.
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    columns: Vec<String>,
    root: Node,
}

impl Filter {
    /// Parse `text` and type-check it against the payload schema (the
    /// names and Arrow types of the payload columns).
    pub fn parse(text: &str, schema: &Schema) -> Result<Filter, FilterError> {
        if text.len() > MAX_FILTER_BYTES {
            return Err(FilterError::TooLong {
                bytes: text.len(),
                limit: MAX_FILTER_BYTES,
            });
        }
        let syntax = |e: ParserError| FilterError::Syntax {
            filter: text.to_string(),
            message: e.to_string(),
        };
        let dialect = GenericDialect {};
        let mut parser = Parser::new(&dialect)
            .with_recursion_limit(RECURSION_LIMIT)
            .try_with_sql(text)
            .map_err(syntax)?;
        let expr = parser.parse_expr().map_err(syntax)?;
        let next = parser.peek_token();
        if next.token != Token::EOF {
            return Err(FilterError::Syntax {
                filter: text.to_string(),
                message: format!(
                    "unexpected `{}` after the expression at {}",
                    next.token, next.span.start
                ),
            });
        }
        let mut checker = Checker {
            schema,
            columns: BTreeSet::new(),
        };
        let root = checker.node(&expr, false)?;
        Ok(Filter {
            text: text.to_string(),
            columns: checker.columns.into_iter().collect(),
            root,
        })
    }

    /// The filter text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The payload columns the filter reads, sorted, deduplicated.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// One bit per row of `batch`: true iff the predicate is TRUE for the
    /// row (NULL and FALSE are both false, as in SQL `WHERE`). `batch`
    /// holds at least the columns of [`Filter::columns`] by name, of the
    /// types the filter was checked against; other columns are ignored.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<BooleanBuffer, FilterError> {
        let result = self.evaluate_kleene(batch)?;
        Ok(true_only(&result))
    }

    /// The three-valued result per row (NULL where the predicate is NULL).
    fn evaluate_kleene(&self, batch: &RecordBatch) -> Result<BooleanArray, FilterError> {
        let schema = batch.schema();
        let mut arrays: HashMap<&str, &ArrayRef> = HashMap::new();
        for name in &self.columns {
            let (index, _) =
                schema
                    .column_with_name(name)
                    .ok_or_else(|| FilterError::Evaluate {
                        column: name.clone(),
                        message: format!(
                            "the batch has no such column (it has {})",
                            field_names(&schema).join(", ")
                        ),
                    })?;
            arrays.insert(name.as_str(), batch.column(index));
        }
        eval(&self.root, &arrays, batch.num_rows())
    }

    /// One bit per container of `stats`: false only when no row of the
    /// container can make the predicate TRUE given its statistics; true
    /// when it may (including when statistics are missing or the atom
    /// cannot be pruned).
    pub fn prune(&self, stats: &ContainerStats) -> Result<BooleanBuffer, FilterError> {
        let may = prune::node(&self.root, stats)?;
        Ok(true_or_unknown(&may))
    }
}
