//! The explicit row-group access plan of one postings file, in the shape of
//! DataFusion's `ParquetAccessPlan`: plain data, one entry per row group,
//! built by pure functions from footer statistics and checked against the
//! footer's row-group count before any IO.
//!
//! ```text
//!  file part-00003.parquet          plan
//!  rg 0  cid 40   ───────────────▶  Skip
//!  rg 1  cid 41   ───────────────▶  Scan   (41 selected)
//!  rg 2  cid 41   ───────────────▶  Scan
//!  rg 3  cid 42   ───────────────▶  Skip
//! ```

use super::ProbeError;

/// What to do with one row group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowGroupAccess {
    /// Do not read it.
    Skip,
    /// Read all of its rows.
    Scan,
}

/// One entry per row group of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPlan {
    row_groups: Vec<RowGroupAccess>,
}

impl AccessPlan {
    /// A plan that skips all `n` row groups.
    pub fn skip_all(n: usize) -> Self {
        Self {
            row_groups: vec![RowGroupAccess::Skip; n],
        }
    }

    /// Mark row group `i` for scanning (out-of-range indices are ignored:
    /// the plan only narrows or widens within its own length).
    pub fn scan(&mut self, i: usize) {
        if let Some(e) = self.row_groups.get_mut(i) {
            *e = RowGroupAccess::Scan;
        }
    }

    /// The entries.
    pub fn entries(&self) -> &[RowGroupAccess] {
        &self.row_groups
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.row_groups.len()
    }

    /// Whether the plan has no entries.
    pub fn is_empty(&self) -> bool {
        self.row_groups.is_empty()
    }

    /// Indices of the row groups to scan.
    pub fn scanned(&self) -> impl Iterator<Item = usize> + '_ {
        self.row_groups
            .iter()
            .enumerate()
            .filter(|(_, a)| **a == RowGroupAccess::Scan)
            .map(|(i, _)| i)
    }

    /// Check the plan against the footer's row-group count.
    ///
    /// # Errors
    /// [`ProbeError::RowGroupCountMismatch`] naming `path` and both counts.
    pub fn check(&self, path: &str, footer_row_groups: usize) -> Result<(), ProbeError> {
        if self.row_groups.len() != footer_row_groups {
            return Err(ProbeError::RowGroupCountMismatch {
                path: path.to_string(),
                expected: self.row_groups.len(),
                actual: footer_row_groups,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_marks_entries_and_check_names_both_counts() {
        let mut p = AccessPlan::skip_all(4);
        p.scan(1);
        p.scan(2);
        p.scan(9);
        assert_eq!(p.scanned().collect::<Vec<_>>(), vec![1, 2]);
        assert!(p.check("f", 4).is_ok());
        match p.check("f", 5) {
            Err(ProbeError::RowGroupCountMismatch {
                path,
                expected: 4,
                actual: 5,
            }) => {
                assert_eq!(path, "f")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
