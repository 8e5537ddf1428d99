//! The live files of a table at a snapshot, as plain data: each data file's
//! resolved location, how many of its rows the snapshot sees
//! (`partial_file_info`), its lineage facts, its column mapping and its one
//! visible delete file. Planning is pure; reading happens in `scan`.

use std::collections::HashMap;

use url::Url;

use super::error::DuckLakeError;
use super::metadata::{DataFileRow, DeleteFileRow, TableEntry};
use crate::catalog::lineage::FileLineage;
use crate::catalog::paths::{self, PathPart};

/// A delete file to apply to one data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFile {
    pub delete_file_id: i64,
    pub location: Url,
    pub size: Option<u64>,
}

/// A data file live at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    pub data_file_id: i64,
    pub location: Url,
    pub size: Option<u64>,
    /// `record_count` from the catalog (checked against the file).
    pub record_count: Option<u64>,
    /// Rows `[0, visible_rows)` exist at the snapshot (`partial_file_info`);
    /// `None` = all of them.
    pub visible_rows: Option<u64>,
    pub mapping_id: Option<i64>,
    pub lineage: FileLineage,
    pub delete: Option<DeleteFile>,
}

/// Parses `partial_file_info` (`snap:rows|snap:rows…`) and returns how many
/// leading rows exist at `snapshot`: the largest row count among entries
/// whose snapshot is `<= snapshot` (0 when none is).
///
/// # Errors
/// [`DuckLakeError::PartialFileInfo`] for a malformed value.
pub fn visible_rows(info: &str, snapshot: i64, file: &str) -> Result<u64, DuckLakeError> {
    let bad = || DuckLakeError::PartialFileInfo {
        file: file.to_string(),
        value: info.to_string(),
    };
    let mut visible = 0;
    for entry in info.split('|') {
        let (snap, rows) = entry.split_once(':').ok_or_else(bad)?;
        let snap: i64 = snap.trim().parse().map_err(|_| bad())?;
        let rows: u64 = rows.trim().parse().map_err(|_| bad())?;
        if snap <= snapshot {
            visible = visible.max(rows);
        }
    }
    Ok(visible)
}

fn checked_format(
    format: Option<&str>,
    encryption_key: Option<&str>,
    file: &str,
) -> Result<(), DuckLakeError> {
    if let Some(f) = format.filter(|f| !f.eq_ignore_ascii_case("parquet")) {
        return Err(DuckLakeError::UnsupportedFileFormat {
            file: file.to_string(),
            format: f.to_string(),
        });
    }
    if encryption_key.is_some() {
        return Err(DuckLakeError::Encrypted {
            file: file.to_string(),
        });
    }
    Ok(())
}

/// Resolves and pairs the visible data and delete files of a table.
///
/// # Errors
/// Path errors, [`DuckLakeError::MultipleDeleteFiles`],
/// [`DuckLakeError::PartialFileInfo`], [`DuckLakeError::UnsupportedFileFormat`],
/// [`DuckLakeError::Encrypted`].
pub fn plan(
    data_root: &Url,
    table: &TableEntry,
    snapshot: i64,
    data_files: Vec<DataFileRow>,
    delete_files: Vec<DeleteFileRow>,
) -> Result<Vec<LiveFile>, DuckLakeError> {
    let locate = |path: &str, is_relative: bool| {
        paths::resolve_chain(
            data_root,
            &[
                PathPart {
                    path: &table.schema_path,
                    is_relative: table.schema_path_is_relative,
                },
                PathPart {
                    path: &table.table_path,
                    is_relative: table.table_path_is_relative,
                },
                PathPart { path, is_relative },
            ],
        )
    };
    let mut deletes: HashMap<i64, DeleteFile> = HashMap::new();
    for d in delete_files {
        checked_format(d.format.as_deref(), d.encryption_key.as_deref(), &d.path)?;
        let file = DeleteFile {
            delete_file_id: d.delete_file_id,
            location: locate(&d.path, d.path_is_relative)?,
            size: d.file_size_bytes.and_then(|s| u64::try_from(s).ok()),
        };
        if let Some(previous) = deletes.insert(d.data_file_id, file) {
            return Err(DuckLakeError::MultipleDeleteFiles {
                data_file_id: d.data_file_id,
                delete_file_ids: vec![previous.delete_file_id, d.delete_file_id],
            });
        }
    }
    data_files
        .into_iter()
        .enumerate()
        .map(|(index, f)| {
            checked_format(
                f.file_format.as_deref(),
                f.encryption_key.as_deref(),
                &f.path,
            )?;
            let location = locate(&f.path, f.path_is_relative)?;
            let filename = paths::display(&location);
            let visible_rows = f
                .partial_file_info
                .as_deref()
                .map(|i| visible_rows(i, snapshot, &filename))
                .transpose()?;
            Ok(LiveFile {
                data_file_id: f.data_file_id,
                size: f.file_size_bytes.and_then(|s| u64::try_from(s).ok()),
                record_count: f.record_count.and_then(|s| u64::try_from(s).ok()),
                visible_rows,
                mapping_id: f.mapping_id,
                lineage: FileLineage {
                    file_index: index as u64,
                    filename,
                    row_id_start: f.row_id_start,
                    begin_snapshot: f.begin_snapshot,
                },
                delete: deletes.remove(&f.data_file_id),
                location,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_file_info_takes_the_latest_applicable_entry() {
        let info = "30:10|31:20|32:30|33:35";
        assert_eq!(visible_rows(info, 29, "f").unwrap(), 0);
        assert_eq!(visible_rows(info, 30, "f").unwrap(), 10);
        assert_eq!(visible_rows(info, 32, "f").unwrap(), 30);
        assert_eq!(visible_rows(info, 99, "f").unwrap(), 35);
        assert_eq!(visible_rows("40:1|40:28", 40, "f").unwrap(), 28);
    }

    #[test]
    fn malformed_partial_file_info_is_typed() {
        for bad in ["", "30", "a:1", "30:x", "30:10|"] {
            assert!(
                matches!(
                    visible_rows(bad, 30, "f"),
                    Err(DuckLakeError::PartialFileInfo { .. })
                ),
                "{bad}"
            );
        }
    }
}
