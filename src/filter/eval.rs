//! Row evaluation: the expression tree in three-valued logic over the
//! columns of a batch, with Arrow's comparison, `LIKE` and Kleene boolean
//! kernels, and the three-valued helpers pruning shares (constant arrays,
//! kernel errors, TRUE-only and TRUE-or-NULL bits).

use std::collections::HashMap;

use arrow::array::{Array, ArrayRef, BooleanArray, Scalar};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp;
use arrow::compute::kernels::comparison::{ilike, like, nilike, nlike};
use arrow::compute::{and_kleene, is_not_null, is_null, or_kleene};
use arrow::error::ArrowError;

use super::error::FilterError;
use super::expr::{Atom, CmpOp, Node, Test};

/// The TRUE bits of a three-valued array (NULL is false).
pub(super) fn true_only(array: &BooleanArray) -> BooleanBuffer {
    match array.nulls() {
        Some(nulls) => array.values() & nulls.inner(),
        None => array.values().clone(),
    }
}

/// The TRUE-or-NULL bits of a three-valued array (only FALSE is false).
pub(super) fn true_or_unknown(array: &BooleanArray) -> BooleanBuffer {
    match array.nulls() {
        Some(nulls) => array.values() | &!nulls.inner(),
        None => array.values().clone(),
    }
}

/// A constant three-valued array of `len` elements.
pub(super) fn constant(value: Option<bool>, len: usize) -> BooleanArray {
    match value {
        Some(true) => BooleanArray::new(BooleanBuffer::new_set(len), None),
        Some(false) => BooleanArray::new(BooleanBuffer::new_unset(len), None),
        None => BooleanArray::new_null(len),
    }
}

pub(super) fn kernel_error(column: &str) -> impl Fn(ArrowError) -> FilterError + '_ {
    move |e| FilterError::Evaluate {
        column: column.to_string(),
        message: e.to_string(),
    }
}

/// Evaluate `node` in three-valued logic over `len` rows.
pub(super) fn eval(
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
