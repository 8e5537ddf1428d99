//! Container pruning: whether a row group or page *may* hold a row for
//! which the filter is TRUE, from its column statistics.
//!
//! Every atom gives a three-valued answer per container, vectorised over
//! the containers with Arrow's comparison kernels on the min and max
//! arrays: FALSE when no row can match, TRUE when one may, NULL when the
//! statistics are missing. `c = v` may match when `min <= v AND max >= v`;
//! `c <> v` unless `min = v AND max = v`; `c < v` when `min < v`, `c <= v`
//! when `min <= v`, `c > v` when `max > v`, `c >= v` when `max >= v`;
//! `IS NULL` when the null count is positive and `IS NOT NULL` when it is
//! below the row count; `LIKE 'abc%'` (a literal prefix and `%` only) when
//! `max >= 'abc' AND (min < 'abc' OR starts_with(min, 'abc'))`. Every other
//! `LIKE`, `NOT LIKE` and `ILIKE` is unknown. Every atom except `IS [NOT]
//! NULL` is NULL for a NULL value, so it cannot match in a container whose
//! rows are all NULL. Statistics are only used as bounds: a truncated
//! string minimum is below the true one and a truncated maximum above, so
//! the tests stay sound. Parquet leaves NaN out of float statistics and
//! Arrow orders NaN above every number, so `>`, `>=` and `<>` on floats,
//! which a NaN row satisfies, are not pruned by the maximum. The
//! `AND`/`OR` of the atoms are the Kleene `AND`/`OR` of their answers,
//! and an unknown final answer counts as "may match".

use arrow::array::{Array, BooleanArray, Scalar, UInt64Array};
use arrow::compute::kernels::cmp;
use arrow::compute::kernels::comparison::starts_with;
use arrow::compute::{and_kleene, not, or_kleene};

use super::error::FilterError;
use super::eval::{constant, kernel_error};
use super::expr::{Atom, CmpOp, Node, Test};
use super::stats::{ColumnStats, ContainerStats};

/// Whether each container of `stats` may hold a row for which `node` is
/// TRUE: FALSE (cannot), TRUE (may) or NULL (unknown).
pub(super) fn node(node_: &Node, stats: &ContainerStats) -> Result<BooleanArray, FilterError> {
    let len = stats.len;
    match node_ {
        // A constant FALSE or NULL matches no row anywhere.
        Node::Const(value) => Ok(constant(Some(*value == Some(true)), len)),
        Node::And(children) | Node::Or(children) => {
            let and = matches!(node_, Node::And(_));
            let mut acc = constant(Some(and), len);
            for child in children {
                let may = node(child, stats)?;
                let combined = if and {
                    and_kleene(&acc, &may)
                } else {
                    or_kleene(&acc, &may)
                };
                acc = combined.map_err(kernel_error(""))?;
            }
            Ok(acc)
        }
        Node::Atom(atom) => match stats.columns.get(&atom.column) {
            None => Ok(constant(None, len)),
            Some(column) => {
                check(atom, column, len)?;
                self::atom(atom, column, len).map_err(kernel_error(&atom.column))
            }
        },
    }
}

/// Statistics arrays must have `len` entries and the column's type.
fn check(atom: &Atom, column: &ColumnStats, len: usize) -> Result<(), FilterError> {
    let bad = |message: String| FilterError::Evaluate {
        column: atom.column.clone(),
        message,
    };
    for (what, array) in [("min", &column.min), ("max", &column.max)] {
        if array.len() != len {
            return Err(bad(format!(
                "its {what} statistics have {} entries for {len} containers",
                array.len()
            )));
        }
        if array.data_type() != &atom.data_type {
            return Err(bad(format!(
                "its {what} statistics are {} but the column is {}",
                array.data_type(),
                atom.data_type
            )));
        }
    }
    for (what, counts) in [
        ("null count", &column.null_counts),
        ("row count", &column.row_counts),
    ] {
        if let Some(counts) = counts
            && counts.len() != len
        {
            return Err(bad(format!(
                "its {what} statistics have {} entries for {len} containers",
                counts.len()
            )));
        }
    }
    Ok(())
}

fn atom(
    atom: &Atom,
    column: &ColumnStats,
    len: usize,
) -> Result<BooleanArray, arrow::error::ArrowError> {
    let (min, max) = (&column.min, &column.max);
    let unknown = || constant(None, len);
    let float = atom.data_type.is_floating();
    let not_all_null = || match (&column.null_counts, &column.row_counts) {
        (Some(nulls), Some(rows)) => cmp::lt(nulls, rows),
        _ => Ok(unknown()),
    };
    let may = match &atom.test {
        Test::IsNull { negated: true } => return not_all_null(),
        Test::IsNull { negated: false } => {
            return match &column.null_counts {
                Some(nulls) => cmp::gt(nulls, &Scalar::new(UInt64Array::from(vec![0]))),
                None => Ok(unknown()),
            };
        }
        Test::Cmp { op, value } => {
            let value = Scalar::new(value);
            match op {
                CmpOp::Eq => and_kleene(&cmp::lt_eq(min, &value)?, &cmp::gt_eq(max, &value)?)?,
                CmpOp::NotEq if float => unknown(),
                CmpOp::NotEq => not(&and_kleene(&cmp::eq(min, &value)?, &cmp::eq(max, &value)?)?)?,
                CmpOp::Lt => cmp::lt(min, &value)?,
                CmpOp::LtEq => cmp::lt_eq(min, &value)?,
                CmpOp::Gt | CmpOp::GtEq if float => unknown(),
                CmpOp::Gt => cmp::gt(max, &value)?,
                CmpOp::GtEq => cmp::gt_eq(max, &value)?,
            }
        }
        Test::Like {
            negated: false,
            case_insensitive: false,
            prefix: Some(prefix),
            ..
        } => {
            let value = Scalar::new(&prefix.value);
            if prefix.exact {
                and_kleene(&cmp::lt_eq(min, &value)?, &cmp::gt_eq(max, &value)?)?
            } else {
                let below = or_kleene(&cmp::lt(min, &value)?, &starts_with(min, &value)?)?;
                and_kleene(&cmp::gt_eq(max, &value)?, &below)?
            }
        }
        Test::Like { .. } => unknown(),
    };
    and_kleene(&may, &not_all_null()?)
}
