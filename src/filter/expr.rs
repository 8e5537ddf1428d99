//! The checked expression tree a filter is kept as, in negation normal
//! form: [`Node`]s of constants, Kleene `AND`/`OR` and [`Atom`]s, each atom
//! a [`Test`] of one payload column (a comparison with a [`CmpOp`],
//! `IS [NOT] NULL`, or `[NOT] [I]LIKE` with its [`LikePrefix`]) whose
//! literals already have the column's Arrow type.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use sqlparser::ast::BinaryOperator;

/// A predicate in negation normal form: `NOT` only inside atoms.
#[derive(Debug, Clone)]
pub(super) enum Node {
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
pub(super) struct Atom {
    /// The column's name in the payload schema.
    pub(super) column: String,
    /// The column's type in the payload schema; literals have this type.
    pub(super) data_type: DataType,
    pub(super) test: Test,
}

/// A comparison operator, `column <op> literal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    /// The operator that gives the same result with the operands swapped.
    pub(super) fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Eq | CmpOp::NotEq => self,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
        }
    }

    /// The operator whose result is the negation (NULL stays NULL).
    pub(super) fn negated(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::NotEq,
            CmpOp::NotEq => CmpOp::Eq,
            CmpOp::Lt => CmpOp::GtEq,
            CmpOp::LtEq => CmpOp::Gt,
            CmpOp::Gt => CmpOp::LtEq,
            CmpOp::GtEq => CmpOp::Lt,
        }
    }

    pub(super) fn from_sql(op: &BinaryOperator) -> Option<CmpOp> {
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
pub(super) enum Test {
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
pub(super) struct LikePrefix {
    pub(super) value: ArrayRef,
    /// The pattern has no wildcard: `LIKE` is equality.
    pub(super) exact: bool,
}
