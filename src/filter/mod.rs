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

mod prune;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, Scalar, StringArray, UInt64Array, make_array,
};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp;
use arrow::compute::kernels::comparison::{ilike, like, nilike, nlike};
use arrow::compute::{CastOptions, and_kleene, cast_with_options, is_not_null, is_null, or_kleene};
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use sqlparser::ast::{
    BinaryOperator, DataType as SqlType, Expr as Sql, Ident, InTarget, UnaryOperator, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

/// The longest filter text accepted, in bytes (64 KiB).
pub const MAX_FILTER_BYTES: usize = 64 * 1024;

/// How deep the SQL expression may nest (parentheses, `NOT`, unary minus);
/// `sqlparser` reports deeper input as a syntax error instead of
/// exhausting the stack.
const RECURSION_LIMIT: usize = 64;

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
    /// The filter text is longer than [`MAX_FILTER_BYTES`].
    #[error("filter is {bytes} bytes, over the limit of {limit} bytes")]
    TooLong {
        /// The length of the text.
        bytes: usize,
        /// [`MAX_FILTER_BYTES`].
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
fn excerpt(text: &str) -> String {
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

/// A parsed, type-checked filter, in negation normal form.
#[derive(Debug, Clone)]
pub struct Filter {
    text: String,
    columns: Vec<String>,
    root: Node,
}

/// A predicate in negation normal form: `NOT` only inside atoms.
#[derive(Debug, Clone)]
enum Node {
    /// A constant: `Some(b)` for TRUE/FALSE, `None` for NULL (such as
    /// `x = NULL`).
    Const(Option<bool>),
    /// Kleene conjunction; TRUE when empty.
    And(Vec<Node>),
    /// Kleene disjunction; FALSE when empty.
    Or(Vec<Node>),
    /// A test of one column.
    Atom(Atom),
}

/// A test of one payload column.
#[derive(Debug, Clone)]
struct Atom {
    /// The column's name in the payload schema.
    column: String,
    /// The column's type in the payload schema; literals have this type.
    data_type: DataType,
    test: Test,
}

/// A comparison operator, `column <op> literal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    /// The operator that gives the same result with the operands swapped.
    fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Eq | CmpOp::NotEq => self,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
        }
    }

    /// The operator whose result is the negation (NULL stays NULL).
    fn negated(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::NotEq,
            CmpOp::NotEq => CmpOp::Eq,
            CmpOp::Lt => CmpOp::GtEq,
            CmpOp::LtEq => CmpOp::Gt,
            CmpOp::Gt => CmpOp::LtEq,
            CmpOp::GtEq => CmpOp::Lt,
        }
    }

    fn from_sql(op: &BinaryOperator) -> Option<CmpOp> {
        Some(match op {
            BinaryOperator::Eq => CmpOp::Eq,
            BinaryOperator::NotEq => CmpOp::NotEq,
            BinaryOperator::Lt => CmpOp::Lt,
            BinaryOperator::LtEq => CmpOp::LtEq,
            BinaryOperator::Gt => CmpOp::Gt,
            BinaryOperator::GtEq => CmpOp::GtEq,
            _ => return None,
        })
    }
}

/// What an [`Atom`] tests.
#[derive(Debug, Clone)]
enum Test {
    /// `column <op> value`; `value` is one non-null element of the
    /// column's type.
    Cmp { op: CmpOp, value: ArrayRef },
    /// `column IS NULL`, or `IS NOT NULL` when `negated`.
    IsNull { negated: bool },
    /// `column [NOT] [I]LIKE pattern`; `pattern` is one element of the
    /// column's type. `prefix` is set for a case-sensitive pattern that is
    /// a literal string followed by `%` wildcards only (`exact` when there
    /// is no wildcard at all): the pruning bounds.
    Like {
        negated: bool,
        case_insensitive: bool,
        pattern: ArrayRef,
        prefix: Option<LikePrefix>,
    },
}

/// The literal prefix of a `LIKE 'abc%'` pattern, as one element of the
/// column's type.
#[derive(Debug, Clone)]
struct LikePrefix {
    value: ArrayRef,
    /// The pattern has no wildcard: `LIKE` is equality.
    exact: bool,
}

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

fn field_names(schema: &Schema) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
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

/// The TRUE bits of a three-valued array (NULL is false).
fn true_only(array: &BooleanArray) -> BooleanBuffer {
    match array.nulls() {
        Some(nulls) => array.values() & nulls.inner(),
        None => array.values().clone(),
    }
}

/// The TRUE-or-NULL bits of a three-valued array (only FALSE is false).
fn true_or_unknown(array: &BooleanArray) -> BooleanBuffer {
    match array.nulls() {
        Some(nulls) => array.values() | &!nulls.inner(),
        None => array.values().clone(),
    }
}

/// A constant three-valued array of `len` elements.
fn constant(value: Option<bool>, len: usize) -> BooleanArray {
    match value {
        Some(true) => BooleanArray::new(BooleanBuffer::new_set(len), None),
        Some(false) => BooleanArray::new(BooleanBuffer::new_unset(len), None),
        None => BooleanArray::new_null(len),
    }
}

fn kernel_error(column: &str) -> impl Fn(ArrowError) -> FilterError + '_ {
    move |e| FilterError::Evaluate {
        column: column.to_string(),
        message: e.to_string(),
    }
}

/// Evaluate `node` in three-valued logic over `len` rows.
fn eval(
    node: &Node,
    arrays: &HashMap<&str, &ArrayRef>,
    len: usize,
) -> Result<BooleanArray, FilterError> {
    match node {
        Node::Const(value) => Ok(constant(*value, len)),
        Node::And(children) | Node::Or(children) => {
            let and = matches!(node, Node::And(_));
            let mut acc = constant(Some(and), len);
            for child in children {
                let value = eval(child, arrays, len)?;
                let combined = if and {
                    and_kleene(&acc, &value)
                } else {
                    or_kleene(&acc, &value)
                };
                acc = combined.map_err(|e| FilterError::Evaluate {
                    column: String::new(),
                    message: e.to_string(),
                })?;
            }
            Ok(acc)
        }
        Node::Atom(atom) => eval_atom(atom, arrays),
    }
}

fn eval_atom(atom: &Atom, arrays: &HashMap<&str, &ArrayRef>) -> Result<BooleanArray, FilterError> {
    let column = &atom.column;
    let array = arrays
        .get(column.as_str())
        .ok_or_else(|| FilterError::Evaluate {
            column: column.clone(),
            message: "the batch has no such column".to_string(),
        })?;
    if array.data_type() != &atom.data_type {
        return Err(FilterError::Evaluate {
            column: column.clone(),
            message: format!(
                "the batch column is {} but the filter was checked against {}",
                array.data_type(),
                atom.data_type
            ),
        });
    }
    let failed = kernel_error(column);
    match &atom.test {
        Test::Cmp { op, value } => compare(*op, array, &Scalar::new(value)).map_err(failed),
        Test::IsNull { negated: false } => is_null(array).map_err(failed),
        Test::IsNull { negated: true } => is_not_null(array).map_err(failed),
        Test::Like {
            negated,
            case_insensitive,
            pattern,
            ..
        } => {
            let pattern = Scalar::new(pattern);
            match (negated, case_insensitive) {
                (false, false) => like(array, &pattern),
                (true, false) => nlike(array, &pattern),
                (false, true) => ilike(array, &pattern),
                (true, true) => nilike(array, &pattern),
            }
            .map_err(failed)
        }
    }
}

/// `left <op> right` with Arrow's comparison kernels.
fn compare(
    op: CmpOp,
    left: &dyn arrow::array::Datum,
    right: &dyn arrow::array::Datum,
) -> Result<BooleanArray, ArrowError> {
    match op {
        CmpOp::Eq => cmp::eq(left, right),
        CmpOp::NotEq => cmp::neq(left, right),
        CmpOp::Lt => cmp::lt(left, right),
        CmpOp::LtEq => cmp::lt_eq(left, right),
        CmpOp::Gt => cmp::gt(left, right),
        CmpOp::GtEq => cmp::gt_eq(left, right),
    }
}

/// Whether filters support columns of type `data_type`.
fn supported(data_type: &DataType) -> bool {
    use DataType::*;
    matches!(
        data_type,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float32
            | Float64
            | Utf8
            | LargeUtf8
            | Utf8View
            | Boolean
            | Date32
            | Date64
            | Timestamp(_, _)
    )
}

fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn is_date(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Date32 | DataType::Date64)
}

/// A literal of the filter text.
#[derive(Debug)]
enum Lit {
    Null,
    Number(String),
    Str(String),
    Bool(bool),
    Date(String),
    Timestamp(String),
}

impl Lit {
    fn kind(&self) -> &'static str {
        match self {
            Lit::Null => "NULL",
            Lit::Number(_) => "a number",
            Lit::Str(_) => "a string",
            Lit::Bool(_) => "a boolean",
            Lit::Date(_) => "a date",
            Lit::Timestamp(_) => "a timestamp",
        }
    }
}

/// A column reference resolved against the payload schema.
struct Column {
    name: String,
    data_type: DataType,
}

/// Converts the `sqlparser` tree to a [`Node`] tree, checking names and
/// types and pushing `NOT` down.
struct Checker<'a> {
    schema: &'a Schema,
    columns: BTreeSet<String>,
}

impl Checker<'_> {
    /// `expr`, or its negation when `negate`, in negation normal form.
    fn node(&mut self, expr: &Sql, negate: bool) -> Result<Node, FilterError> {
        match expr {
            Sql::Nested(inner) => self.node(inner, negate),
            Sql::UnaryOp {
                op: UnaryOperator::Not,
                expr,
            } => self.node(expr, !negate),
            Sql::BinaryOp {
                op: op @ (BinaryOperator::And | BinaryOperator::Or),
                ..
            } => self.and_or(expr, op, negate),
            Sql::BinaryOp { left, op, right } => self.binary(expr, left, op, right, negate),
            Sql::Identifier(_) | Sql::CompoundIdentifier(_) => {
                let Some(column) = self.column(expr)? else {
                    return Err(unsupported_expr(expr));
                };
                // A bare boolean column is `column = TRUE`; negated,
                // `column = FALSE` (both NULL for a NULL row).
                self.boolean_column(&column, "a bare column used as a condition")?;
                let value = Arc::new(BooleanArray::from(vec![!negate]));
                Ok(atom(
                    &column,
                    Test::Cmp {
                        op: CmpOp::Eq,
                        value,
                    },
                ))
            }
            Sql::Value(v) => match &v.value {
                Value::Boolean(b) => Ok(Node::Const(Some(*b != negate))),
                Value::Null => Ok(Node::Const(None)),
                _ => Err(FilterError::Unsupported {
                    what: format!("the literal `{v}` as a condition"),
                }),
            },
            Sql::IsNull(inner) | Sql::IsNotNull(inner) => {
                let column = self.require_column(inner, expr)?;
                let negated = matches!(expr, Sql::IsNotNull(_)) != negate;
                Ok(atom(&column, Test::IsNull { negated }))
            }
            Sql::IsTrue(inner)
            | Sql::IsNotTrue(inner)
            | Sql::IsFalse(inner)
            | Sql::IsNotFalse(inner) => self.truth_test(expr, inner, negate),
            Sql::In {
                expr: inner,
                target,
                negated,
                global: false,
            } => self.in_list(expr, inner, target, *negated != negate),
            Sql::Between {
                expr: inner,
                negated,
                low,
                high,
            } => {
                let column = self.require_column(inner, expr)?;
                Ok(if *negated != negate {
                    Node::Or(vec![
                        self.comparison(&column, CmpOp::Lt, low)?,
                        self.comparison(&column, CmpOp::Gt, high)?,
                    ])
                } else {
                    Node::And(vec![
                        self.comparison(&column, CmpOp::GtEq, low)?,
                        self.comparison(&column, CmpOp::LtEq, high)?,
                    ])
                })
            }
            Sql::Like {
                negated,
                any,
                expr: inner,
                pattern,
                escape_char,
            }
            | Sql::ILike {
                negated,
                any,
                expr: inner,
                pattern,
                escape_char,
            } => {
                if *any {
                    return Err(FilterError::Unsupported {
                        what: format!("LIKE ANY (`{}`)", excerpt(&expr.to_string())),
                    });
                }
                if let Some(escape) = escape_char {
                    return Err(FilterError::Unsupported {
                        what: format!(
                            "the ESCAPE clause (`ESCAPE {escape}`): `\\` is the escape character"
                        ),
                    });
                }
                let column = self.require_column(inner, expr)?;
                let case_insensitive = matches!(expr, Sql::ILike { .. });
                self.like(&column, *negated != negate, case_insensitive, pattern)
            }
            _ => Err(unsupported_expr(expr)),
        }
    }

    /// The chain of `op` (AND or OR) at `expr`, negated when `negate`.
    fn and_or(
        &mut self,
        expr: &Sql,
        op: &BinaryOperator,
        negate: bool,
    ) -> Result<Node, FilterError> {
        // A chain `a AND b AND c …` is a left-deep tree as deep as it is
        // long: collect its operands without recursing.
        let mut operands = Vec::new();
        let mut stack = vec![expr];
        while let Some(e) = stack.pop() {
            match e {
                Sql::BinaryOp { left, op: o, right } if o == op => {
                    stack.push(right);
                    stack.push(left);
                }
                _ => operands.push(e),
            }
        }
        let children = operands
            .into_iter()
            .map(|e| self.node(e, negate))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(if (*op == BinaryOperator::And) != negate {
            Node::And(children)
        } else {
            Node::Or(children)
        })
    }

    /// `left <op> right` (`expr`): a column compared with a literal,
    /// either side first.
    fn binary(
        &mut self,
        expr: &Sql,
        left: &Sql,
        op: &BinaryOperator,
        right: &Sql,
        negate: bool,
    ) -> Result<Node, FilterError> {
        let Some(op) = CmpOp::from_sql(op) else {
            return Err(unsupported_expr(expr));
        };
        let (column, literal, op) = match (self.column(left)?, self.column(right)?) {
            (Some(column), None) => (column, right, op),
            (None, Some(column)) => (column, left, op.flipped()),
            (Some(_), Some(_)) => {
                return Err(FilterError::Unsupported {
                    what: format!(
                        "comparing two columns (`{}`): compare a column with a literal",
                        excerpt(&expr.to_string())
                    ),
                });
            }
            (None, None) => {
                // Name what is not a literal, if anything.
                self.literal(left)?;
                self.literal(right)?;
                return Err(FilterError::Unsupported {
                    what: format!(
                        "`{}`: a comparison needs a column on one side",
                        excerpt(&expr.to_string())
                    ),
                });
            }
        };
        let op = if negate { op.negated() } else { op };
        self.comparison(&column, op, literal)
    }

    /// `inner IS [NOT] TRUE|FALSE` (`expr`), negated when `negate`.
    fn truth_test(&mut self, expr: &Sql, inner: &Sql, negate: bool) -> Result<Node, FilterError> {
        let column = self.require_column(inner, expr)?;
        self.boolean_column(&column, &expr.to_string())?;
        let value = matches!(expr, Sql::IsTrue(_) | Sql::IsNotTrue(_));
        let is = matches!(expr, Sql::IsTrue(_) | Sql::IsFalse(_)) != negate;
        let value: ArrayRef = Arc::new(BooleanArray::from(vec![value]));
        // Two-valued: `c IS v` is `c = v AND c IS NOT NULL` (NULL AND FALSE
        // is FALSE); `c IS NOT v` is `c <> v OR c IS NULL` (NULL OR TRUE is
        // TRUE).
        let (op, negated) = if is {
            (CmpOp::Eq, true)
        } else {
            (CmpOp::NotEq, false)
        };
        let both = vec![
            atom(&column, Test::Cmp { op, value }),
            atom(&column, Test::IsNull { negated }),
        ];
        Ok(if is { Node::And(both) } else { Node::Or(both) })
    }

    /// `inner [NOT] IN target` (`expr`): an OR of `=`, or when `negated`
    /// an AND of `<>`.
    fn in_list(
        &mut self,
        expr: &Sql,
        inner: &Sql,
        target: &InTarget,
        negated: bool,
    ) -> Result<Node, FilterError> {
        let InTarget::List(list) = target else {
            return Err(FilterError::Unsupported {
                what: format!(
                    "`{}`: IN takes a list of literals, not a subquery or table",
                    excerpt(&expr.to_string())
                ),
            });
        };
        let column = self.require_column(inner, expr)?;
        let op = if negated { CmpOp::NotEq } else { CmpOp::Eq };
        let children = list
            .iter()
            .map(|item| self.comparison(&column, op, item))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(if negated {
            Node::And(children)
        } else {
            Node::Or(children)
        })
    }

    /// `column <op> literal`, `literal` converted to the column's type.
    fn comparison(
        &mut self,
        column: &Column,
        op: CmpOp,
        literal: &Sql,
    ) -> Result<Node, FilterError> {
        let lit = self.literal(literal)?;
        match convert(column, &lit, literal)? {
            None => Ok(Node::Const(None)),
            Some(value) => Ok(atom(column, Test::Cmp { op, value })),
        }
    }

    fn like(
        &mut self,
        column: &Column,
        negated: bool,
        case_insensitive: bool,
        pattern: &Sql,
    ) -> Result<Node, FilterError> {
        let lit = self.literal(pattern)?;
        let text = match lit {
            Lit::Null => return Ok(Node::Const(None)),
            Lit::Str(text) if is_string(&column.data_type) => text,
            lit => {
                return Err(FilterError::TypeMismatch {
                    column: column.name.clone(),
                    column_type: column.data_type.to_string(),
                    literal: format!("{pattern} ({}) using LIKE", lit.kind()),
                });
            }
        };
        let as_column_type = |s: &str| cast_string(s, &column.data_type);
        let mismatch = |e: ArrowError| FilterError::TypeMismatch {
            column: column.name.clone(),
            column_type: column.data_type.to_string(),
            literal: format!("{pattern} (a string: {e})"),
        };
        let prefix = match like_prefix(&text) {
            Some((prefix, exact)) if !case_insensitive => Some(LikePrefix {
                value: as_column_type(prefix).map_err(mismatch)?,
                exact,
            }),
            _ => None,
        };
        Ok(atom(
            column,
            Test::Like {
                negated,
                case_insensitive,
                pattern: as_column_type(&text).map_err(mismatch)?,
                prefix,
            },
        ))
    }

    /// The column `expr` names, or `None` when `expr` is not a column
    /// reference.
    fn column(&mut self, expr: &Sql) -> Result<Option<Column>, FilterError> {
        match expr {
            Sql::Nested(inner) => self.column(inner),
            Sql::Identifier(ident) => self.resolve(ident).map(Some),
            Sql::CompoundIdentifier(_) => Err(FilterError::Unsupported {
                what: format!(
                    "the qualified name `{}`: name payload columns alone (quote a name that has dots)",
                    excerpt(&expr.to_string())
                ),
            }),
            _ => Ok(None),
        }
    }

    /// The column `inner` names; `whole` is the expression it is part of.
    fn require_column(&mut self, inner: &Sql, whole: &Sql) -> Result<Column, FilterError> {
        self.column(inner)?.ok_or_else(|| FilterError::Unsupported {
            what: format!(
                "`{}`: the left operand must be a payload column",
                excerpt(&whole.to_string())
            ),
        })
    }

    fn boolean_column(&self, column: &Column, usage: &str) -> Result<(), FilterError> {
        if column.data_type == DataType::Boolean {
            Ok(())
        } else {
            Err(FilterError::TypeMismatch {
                column: column.name.clone(),
                column_type: column.data_type.to_string(),
                literal: format!("TRUE ({usage} must be Boolean)"),
            })
        }
    }

    fn resolve(&mut self, ident: &Ident) -> Result<Column, FilterError> {
        let fields = self.schema.fields();
        let wanted = &ident.value;
        let exact = fields.iter().find(|f| f.name() == wanted);
        let field = match (exact, ident.quote_style) {
            (Some(field), _) => field,
            (None, Some(_)) => return Err(self.unknown(wanted)),
            (None, None) => {
                let folded: Vec<_> = fields
                    .iter()
                    .filter(|f| f.name().to_lowercase() == wanted.to_lowercase())
                    .collect();
                match folded.as_slice() {
                    [] => return Err(self.unknown(wanted)),
                    [field] => *field,
                    several => {
                        return Err(FilterError::Unsupported {
                            what: format!(
                                "the ambiguous column name `{wanted}`: it matches {} case-insensitively; \
                                 quote the name to choose one",
                                several
                                    .iter()
                                    .map(|f| format!("`{}`", f.name()))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        });
                    }
                }
            }
        };
        if !supported(field.data_type()) {
            return Err(FilterError::UnsupportedType {
                column: field.name().clone(),
                column_type: field.data_type().to_string(),
            });
        }
        self.columns.insert(field.name().clone());
        Ok(Column {
            name: field.name().clone(),
            data_type: field.data_type().clone(),
        })
    }

    fn unknown(&self, column: &str) -> FilterError {
        FilterError::UnknownColumn {
            column: column.to_string(),
            available: field_names(self.schema),
        }
    }

    /// The literal `expr` is; a column reference or other expression where
    /// a literal belongs is [`FilterError::Unsupported`].
    fn literal(&mut self, expr: &Sql) -> Result<Lit, FilterError> {
        let not_literal = || FilterError::Unsupported {
            what: format!(
                "`{}` where a literal belongs (compare a column with literals only)",
                excerpt(&expr.to_string())
            ),
        };
        match expr {
            Sql::Nested(inner) => self.literal(inner),
            Sql::Value(v) => match &v.value {
                Value::Number(n, _) => Ok(Lit::Number(n.to_string())),
                Value::Boolean(b) => Ok(Lit::Bool(*b)),
                Value::Null => Ok(Lit::Null),
                Value::SingleQuotedString(s)
                | Value::EscapedStringLiteral(s)
                | Value::NationalStringLiteral(s)
                | Value::UnicodeStringLiteral(s)
                | Value::TripleSingleQuotedString(s) => Ok(Lit::Str(s.clone())),
                Value::DollarQuotedString(s) => Ok(Lit::Str(s.value.clone())),
                _ => Err(FilterError::Unsupported {
                    what: format!("the literal `{v}`"),
                }),
            },
            Sql::UnaryOp {
                op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
                expr: inner,
            } => match self.literal(inner)? {
                Lit::Number(n) if *op == UnaryOperator::Plus => Ok(Lit::Number(n)),
                Lit::Number(n) => Ok(Lit::Number(match n.strip_prefix('-') {
                    Some(positive) => positive.to_string(),
                    None => format!("-{n}"),
                })),
                _ => Err(FilterError::Unsupported {
                    what: format!(
                        "`{}`: a sign applies to numbers only",
                        excerpt(&expr.to_string())
                    ),
                }),
            },
            Sql::TypedString(typed) => {
                let Some(text) = typed.value.clone().into_string() else {
                    return Err(not_literal());
                };
                match &typed.data_type {
                    SqlType::Date => Ok(Lit::Date(text)),
                    SqlType::Timestamp(_, _) | SqlType::Datetime(_) | SqlType::TimestampNtz(_) => {
                        Ok(Lit::Timestamp(text))
                    }
                    other => Err(FilterError::Unsupported {
                        what: format!(
                            "the typed literal `{}` of type {other} (DATE and TIMESTAMP are supported)",
                            excerpt(&expr.to_string())
                        ),
                    }),
                }
            }
            Sql::Identifier(_) | Sql::CompoundIdentifier(_) => Err(not_literal()),
            other => Err(unsupported_expr(other)),
        }
    }
}

fn atom(column: &Column, test: Test) -> Node {
    Node::Atom(Atom {
        column: column.name.clone(),
        data_type: column.data_type.clone(),
        test,
    })
}

/// [`FilterError::Unsupported`] naming the kind of `expr`.
fn unsupported_expr(expr: &Sql) -> FilterError {
    let kind = match expr {
        Sql::Function(_) => "function calls",
        Sql::Subquery(_) | Sql::Exists { .. } => "subqueries",
        Sql::BinaryOp { .. } => "this operator (only comparisons, AND and OR)",
        Sql::UnaryOp { .. } => "this operator (only NOT and a sign on a number)",
        Sql::Cast { .. } => "casts (write DATE '…' or TIMESTAMP '…' for dates)",
        Sql::Case { .. } => "CASE expressions",
        Sql::SimilarTo { .. } | Sql::RLike { .. } => {
            "regular-expression matching (only LIKE and ILIKE)"
        }
        Sql::Interval(_) => "intervals",
        Sql::AnyOp { .. } | Sql::AllOp { .. } => "ANY/ALL comparisons",
        Sql::IsDistinctFrom(_, _) | Sql::IsNotDistinctFrom(_, _) => "IS [NOT] DISTINCT FROM",
        _ => "this expression",
    };
    FilterError::Unsupported {
        what: format!("{kind}: `{}`", excerpt(&expr.to_string())),
    }
}

/// `text` as one element of `data_type`, by Arrow's cast kernel (errors,
/// not NULLs, on failure).
fn cast_string(text: &str, data_type: &DataType) -> Result<ArrayRef, ArrowError> {
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let array = cast_with_options(&StringArray::from(vec![text]), data_type, &options)?;
    if array.null_count() != 0 {
        return Err(ArrowError::CastError(format!(
            "`{text}` converts to NULL as {data_type}"
        )));
    }
    Ok(array)
}

/// `literal` (the expression `shown`) as one element of `column`'s type,
/// or `None` for NULL.
fn convert(column: &Column, literal: &Lit, shown: &Sql) -> Result<Option<ArrayRef>, FilterError> {
    let data_type = &column.data_type;
    // A literal for a time-zone-aware timestamp column is read as a UTC
    // instant (an explicit offset in it is honoured), then labelled with
    // the column's zone: the stored values are UTC instants, and Arrow
    // without chrono-tz cannot read in a named zone such as "UTC".
    let target = match data_type {
        DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, None),
        other => other.clone(),
    };
    let is_timestamp = matches!(data_type, DataType::Timestamp(_, _));
    let converted = match literal {
        Lit::Null => return Ok(None),
        Lit::Number(n) if data_type.is_numeric() => cast_string(n, &target),
        Lit::Str(s) if is_string(data_type) || is_date(data_type) || is_timestamp => {
            cast_string(s, &target)
        }
        // A date is read as a date first, then widened to the column's
        // date or timestamp type (midnight).
        Lit::Date(s) if is_date(data_type) || is_timestamp => cast_string(s, &DataType::Date32)
            .and_then(|date| {
                let options = CastOptions {
                    safe: false,
                    ..CastOptions::default()
                };
                cast_with_options(&date, &target, &options)
            }),
        Lit::Timestamp(s) if is_timestamp => cast_string(s, &target),
        Lit::Bool(b) if *data_type == DataType::Boolean => {
            Ok(Arc::new(BooleanArray::from(vec![*b])) as ArrayRef)
        }
        _ => {
            return Err(FilterError::TypeMismatch {
                column: column.name.clone(),
                column_type: data_type.to_string(),
                literal: format!("{} ({})", excerpt(&shown.to_string()), literal.kind()),
            });
        }
    };
    let labelled = converted.and_then(|array| {
        if array.data_type() == data_type {
            return Ok(array);
        }
        let data = array
            .to_data()
            .into_builder()
            .data_type(data_type.clone())
            .build()?;
        Ok(make_array(data))
    });
    labelled.map(Some).map_err(|e| FilterError::TypeMismatch {
        column: column.name.clone(),
        column_type: data_type.to_string(),
        literal: format!("{} ({}: {e})", excerpt(&shown.to_string()), literal.kind()),
    })
}

/// The literal prefix of a LIKE pattern made of a wildcard-free string and
/// then only `%` wildcards, and whether there were none (`exact`).
fn like_prefix(pattern: &str) -> Option<(&str, bool)> {
    let prefix = pattern.trim_end_matches('%');
    if prefix.contains(['%', '_', '\\']) {
        return None;
    }
    Some((prefix, prefix.len() == pattern.len()))
}
