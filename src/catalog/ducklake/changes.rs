//! What changed in a table between two snapshots, by row version. A row
//! version is `(rowid, snapshot_id)`: an UPDATE keeps the rowid and writes a
//! new version (delete + insert), and a compaction (`merge_adjacent_files`,
//! `rewrite_data_files`) moves rows into new files that embed each row's
//! rowid and snapshot, so a moved row keeps its version. Between snapshots
//! `from <= to`, the rows *inserted* are those live at `to` with
//! `snapshot_id > from` (new rows and new versions of updated rows); the rowids
//! *removed* are those live at `from` that are not live at `to` with
//! `snapshot_id <= from` (deleted rows and old versions of updated rows); a
//! compaction that only moved rows changes nothing.
//!
//! Only what can differ is read: a data file live at both snapshots with the
//! same delete file and the same visible row count (`partial_file_info`)
//! holds the same rows at both and is not opened. Of the other files only the
//! lineage columns (`rowid`, `snapshot_id`) are read: rowids of the `from`
//! side are removal candidates, and rows of the `to` side with
//! `snapshot_id <= from` (moved, not changed) cancel them; rows with
//! `snapshot_id > from` are counted per file, for a source that reads them
//! (with the vectors) through [`DuckLakeTable::scan_file_since`].

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use futures::{StreamExt, TryStreamExt, stream};

use super::error::DuckLakeError;
use super::files::LiveFile;
use super::table::DuckLakeTable;
use crate::catalog::lineage::{LineageError, MissingRowId};

/// Files whose lineage is read at once.
const CONCURRENT_FILES: usize = 8;

/// A data file of the `to` table holding row versions newer than `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewRowFile {
    /// The file's index in the `to` table's [`DuckLakeTable::files`].
    pub file_index: usize,
    /// How many of its live rows have `snapshot_id > from` (exact).
    pub rows: u64,
}

/// The changes of one table from snapshot `from` to snapshot `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableChanges {
    pub from: i64,
    pub to: i64,
    /// Rowids live at `from` whose version is not live at `to` (deleted
    /// rows, old versions of updated rows); ascending, unique.
    pub removed: Vec<i64>,
    /// The files of `to` holding at least one row with `snapshot_id > from`,
    /// in file order, with exact counts of such rows.
    pub new_row_files: Vec<NewRowFile>,
}

impl TableChanges {
    /// True when nothing was removed or inserted.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.new_row_files.is_empty()
    }

    /// How many row versions were inserted.
    pub fn inserted_rows(&self) -> u64 {
        self.new_row_files.iter().map(|f| f.rows).sum()
    }
}

/// True when `a` and `b` are the same data file with the same visible rows
/// and the same delete file: the same rows are live in both.
fn same_rows(a: &LiveFile, b: &LiveFile) -> bool {
    a.data_file_id == b.data_file_id
        && a.visible_rows == b.visible_rows
        && a.delete.as_ref().map(|d| d.delete_file_id)
            == b.delete.as_ref().map(|d| d.delete_file_id)
}

/// The indexes of `files` whose rows may differ from `other`'s.
fn changed(files: &[LiveFile], other: &[LiveFile]) -> Vec<usize> {
    let other: HashMap<i64, &LiveFile> = other.iter().map(|f| (f.data_file_id, f)).collect();
    files
        .iter()
        .enumerate()
        .filter(|(_, f)| !other.get(&f.data_file_id).is_some_and(|o| same_rows(f, o)))
        .map(|(i, _)| i)
        .collect()
}

/// The lineage of the changed rows of one `to` file.
struct NewSide {
    file_index: usize,
    /// Rowids of rows with `snapshot_id <= from` (moved, unchanged).
    kept: Vec<i64>,
    /// How many rows have `snapshot_id > from`.
    newer: u64,
}

impl DuckLakeTable {
    /// What changed in this table from `older` (the same table at an earlier
    /// or the same snapshot) to `self`, by row version; see the module
    /// documentation for the rule. Files live at both snapshots with the same
    /// delete file are not read; of the others only `rowid` and `snapshot_id`
    /// are.
    ///
    /// # Errors
    /// [`DuckLakeError::DifferentTable`] when `older` is another table (another
    /// catalog or `table_id`), [`DuckLakeError::SnapshotOrder`] when it is at a
    /// later snapshot, [`DuckLakeError::MissingRowId`] for a file to read that
    /// has no rowids, and the scan's IO, Parquet and lineage errors.
    pub async fn changes_since(
        &self,
        older: &DuckLakeTable,
    ) -> Result<TableChanges, DuckLakeError> {
        if older.catalog != self.catalog || older.table_id != self.table_id {
            return Err(DuckLakeError::DifferentTable {
                catalog: self.catalog.clone(),
                table: self.name.clone(),
                table_id: self.table_id,
                other_catalog: older.catalog.clone(),
                other: older.name.clone(),
                other_table_id: older.table_id,
            });
        }
        let (from, to) = (older.snapshot, self.snapshot);
        if from > to {
            return Err(DuckLakeError::SnapshotOrder {
                table: self.name.clone(),
                from,
                to,
            });
        }
        let gone = changed(&older.files, &self.files);
        let fresh = changed(&self.files, &older.files);

        let candidates: Vec<Vec<i64>> = stream::iter(gone)
            .map(|i| async move {
                let batches = older
                    .scan_file(i, &["rowid"], MissingRowId::Error)
                    .await
                    .map_err(|e| self.needs_rowids(e, from))?;
                let mut rowids = Vec::new();
                for b in &batches {
                    rowids.extend(self.rowids(b, 0, &older.files[i], from)?);
                }
                Ok::<_, DuckLakeError>(rowids)
            })
            .buffered(CONCURRENT_FILES)
            .try_collect()
            .await?;
        let new_side: Vec<NewSide> = stream::iter(fresh)
            .map(|i| async move {
                let batches = self
                    .scan_file(i, &["rowid", "snapshot_id"], MissingRowId::Error)
                    .await
                    .map_err(|e| self.needs_rowids(e, from))?;
                let mut side = NewSide {
                    file_index: i,
                    kept: Vec::new(),
                    newer: 0,
                };
                for b in &batches {
                    let rowids = self.rowids(b, 0, &self.files[i], from)?;
                    let snapshots = b.column(1).as_primitive::<Int64Type>();
                    for (r, rowid) in rowids.into_iter().enumerate() {
                        if snapshots.is_valid(r) && snapshots.value(r) > from {
                            side.newer += 1;
                        } else {
                            side.kept.push(rowid);
                        }
                    }
                }
                Ok::<_, DuckLakeError>(side)
            })
            .buffered(CONCURRENT_FILES)
            .try_collect()
            .await?;

        let kept: HashSet<i64> = new_side
            .iter()
            .flat_map(|s| s.kept.iter().copied())
            .collect();
        let mut removed: Vec<i64> = candidates
            .into_iter()
            .flatten()
            .filter(|r| !kept.contains(r))
            .collect();
        removed.sort_unstable();
        removed.dedup();
        Ok(TableChanges {
            from,
            to,
            removed,
            new_row_files: new_side
                .into_iter()
                .filter(|s| s.newer > 0)
                .map(|s| NewRowFile {
                    file_index: s.file_index,
                    rows: s.newer,
                })
                .collect(),
        })
    }

    /// A missing rowid, named as a changes error of this table.
    fn needs_rowids(&self, e: DuckLakeError, from: i64) -> DuckLakeError {
        match e {
            DuckLakeError::Lineage(LineageError::MissingRowIdStart { file }) => {
                DuckLakeError::MissingRowId {
                    table: self.name.clone(),
                    from,
                    to: self.snapshot,
                    file,
                }
            }
            e => e,
        }
    }

    /// The rowids in column `column` of `batch`, read from `file`; a NULL
    /// (an embedded rowid that is NULL) is [`DuckLakeError::MissingRowId`].
    fn rowids(
        &self,
        batch: &RecordBatch,
        column: usize,
        file: &LiveFile,
        from: i64,
    ) -> Result<Vec<i64>, DuckLakeError> {
        let ids = batch.column(column).as_primitive::<Int64Type>();
        if ids.null_count() > 0 {
            return Err(DuckLakeError::MissingRowId {
                table: self.name.clone(),
                from,
                to: self.snapshot,
                file: file.lineage.filename.clone(),
            });
        }
        Ok(ids.values().to_vec())
    }
}
