//! Type checking: the [`Checker`] that turns the `sqlparser` tree of a
//! filter into the checked expression tree, resolving column names against
//! the payload schema, converting literals to their column's Arrow type
//! and pushing `NOT` down to the atoms.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, StringArray, make_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use sqlparser::ast::{
    BinaryOperator, DataType as SqlType, Expr as Sql, Ident, InTarget, UnaryOperator, Value,
};

use super::error::{FilterError, excerpt, field_names};
use super::expr::{Atom, CmpOp, LikePrefix, Node, Test};

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
pub(super) struct Checker<'a> {
    pub(super) schema: &'a Schema,
    pub(super) columns: BTreeSet<String>,
}

impl Checker<'_> {
    /// `expr`, or its negation when `negate`, in negation normal form.
    pub(super) fn node(&mut self, expr: &Sql, negate: bool) -> Result<Node, FilterError> {
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
