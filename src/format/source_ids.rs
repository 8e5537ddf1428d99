//! `source-ids.parquet`: the ids each file of a Parquet source holds, for an
//! index built with an id column.
//!
//! Without an id column, a file's rowids are its positions, and
//! `source-files.json` records them as a range. With one, the ids are the
//! table's own and nothing about a file says which it holds, so a refresh
//! could not delete the rows of a file that is gone or rewritten. This side
//! table records them: one row per indexed id, columns `path` (the file's
//! store path, as `source-files.json` names it; dictionary-encoded, so a
//! file costs its name once) and `id` (int64), sorted by path, then id.
//! `source-files.json` pins it (`ids`), and the commit pins that.
//!
//! A file **owns** the ids it holds. A refresh deletes the owned ids of a
//! gone or changed file; an upsert through the API takes ownership of its
//! ids away from their files (they are the API's now), so a later refresh
//! that drops the file does not delete the newer version.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use thiserror::Error;

/// The side table's name in a snapshot folder.
pub const SOURCE_IDS_FILE: &str = "source-ids.parquet";
/// Its columns.
pub const SOURCE_IDS_PATH: &str = "path";
pub const SOURCE_IDS_ID: &str = "id";

/// Rows per row group of the side table.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// A side table that cannot be used.
#[derive(Debug, Error)]
pub enum SourceIdsError {
    #[error("{path}: not a source-ids table: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: holds ids of {file}, which source-files.json does not record")]
    Stray { path: String, file: String },
    #[error("{path}: id {id} is held by both {first:?} and {second:?}")]
    Repeated {
        path: String,
        id: i64,
        first: String,
        second: String,
    },
}

/// The ids each source file owns (each id sorted, in one file at most).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceIds {
    by_file: BTreeMap<String, Vec<i64>>,
}

impl SourceIds {
    /// No files.
    pub fn new() -> SourceIds {
        SourceIds::default()
    }

    /// Record that `file` owns `ids` (replacing what it owned).
    pub fn insert(&mut self, file: &str, mut ids: Vec<i64>) {
        ids.sort_unstable();
        self.by_file.insert(file.to_string(), ids);
    }

    /// The ids `file` owns, ascending (empty for an unknown file).
    pub fn ids_of(&self, file: &str) -> &[i64] {
        self.by_file.get(file).map_or(&[], Vec::as_slice)
    }

    /// Forget `file`, returning the ids it owned.
    pub fn remove_file(&mut self, file: &str) -> Vec<i64> {
        self.by_file.remove(file).unwrap_or_default()
    }

    /// Take `ids` (any order) away from whichever files own them.
    pub fn disown(&mut self, ids: &[i64]) {
        let mut gone = ids.to_vec();
        gone.sort_unstable();
        gone.dedup();
        for owned in self.by_file.values_mut() {
            owned.retain(|id| gone.binary_search(id).is_err());
        }
    }

    /// Ids recorded over all files.
    pub fn len(&self) -> usize {
        self.by_file.values().map(Vec::len).sum()
    }

    /// True when no file owns an id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The files, in path order.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.by_file.keys().map(String::as_str)
    }

    /// The Parquet bytes (see the module docs): zstd, exact chunk
    /// statistics, a dictionary for `path`.
    pub fn encode(&self) -> Bytes {
        let schema = Arc::new(schema());
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let mut out = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut out, schema.clone(), Some(props)).expect("a valid schema");
        let (mut paths, mut ids): (Vec<&str>, Vec<i64>) = (Vec::new(), Vec::new());
        let mut flush = |paths: &mut Vec<&str>, ids: &mut Vec<i64>| {
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(std::mem::take(paths))),
                    Arc::new(Int64Array::from(std::mem::take(ids))),
                ],
            )
            .expect("two non-null columns of equal length");
            writer.write(&batch).expect("an in-memory write");
        };
        for (file, owned) in &self.by_file {
            for &id in owned {
                paths.push(file);
                ids.push(id);
                if ids.len() == ROW_GROUP_ROWS {
                    flush(&mut paths, &mut ids);
                }
            }
        }
        if !ids.is_empty() || self.is_empty() {
            flush(&mut paths, &mut ids);
        }
        writer.close().expect("an in-memory write");
        Bytes::from(out)
    }

    /// Parse and check the side table stored at `path`: the two columns,
    /// no nulls, each id in one file only.
    ///
    /// # Errors
    /// [`SourceIdsError::Invalid`] for bytes that are not such a table,
    /// [`SourceIdsError::Repeated`] for an id two files hold.
    pub fn decode(path: &str, bytes: Bytes) -> Result<SourceIds, SourceIdsError> {
        let invalid = |reason: String| SourceIdsError::Invalid {
            path: path.to_string(),
            reason,
        };
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| invalid(e.to_string()))?;
        crate::format::check_columns(reader.schema(), &schema(), "path utf8 and id int64")
            .map_err(invalid)?;
        let mut by_file: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for batch in reader.build().map_err(|e| invalid(e.to_string()))? {
            let batch = batch.map_err(|e| invalid(e.to_string()))?;
            let (paths, ids) = (batch.column(0).as_string::<i32>(), batch.column(1));
            if paths.null_count() > 0 || ids.null_count() > 0 {
                return Err(invalid("a null path or id".into()));
            }
            let ids = ids.as_primitive::<Int64Type>();
            for (p, &id) in paths.iter().zip(ids.values()) {
                let p = p.unwrap_or_default();
                match by_file.get_mut(p) {
                    Some(v) => v.push(id),
                    None => {
                        by_file.insert(p.to_string(), vec![id]);
                    }
                }
            }
        }
        let mut owner: Vec<(i64, &str)> = by_file
            .iter()
            .flat_map(|(f, ids)| ids.iter().map(move |&id| (id, f.as_str())))
            .collect();
        owner.sort_unstable();
        if let Some(w) = owner.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(SourceIdsError::Repeated {
                path: path.to_string(),
                id: w[0].0,
                first: w[0].1.to_string(),
                second: w[1].1.to_string(),
            });
        }
        for ids in by_file.values_mut() {
            ids.sort_unstable();
        }
        Ok(SourceIds { by_file })
    }
}

fn schema() -> Schema {
    Schema::new(vec![
        Field::new(SOURCE_IDS_PATH, DataType::Utf8, false),
        Field::new(SOURCE_IDS_ID, DataType::Int64, false),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_moves_ownership() {
        let mut ids = SourceIds::new();
        ids.insert("t/b.parquet", vec![5, 3, 4]);
        ids.insert("t/a.parquet", vec![1, 2]);
        let back = SourceIds::decode("x", ids.encode()).unwrap();
        assert_eq!(back, ids);
        assert_eq!(back.ids_of("t/b.parquet"), [3, 4, 5]);
        assert_eq!(
            back.files().collect::<Vec<_>>(),
            ["t/a.parquet", "t/b.parquet"]
        );
        let mut moved = back.clone();
        moved.disown(&[4, 1, 99]);
        assert_eq!(moved.ids_of("t/a.parquet"), [2]);
        assert_eq!(moved.ids_of("t/b.parquet"), [3, 5]);
        assert_eq!(moved.remove_file("t/b.parquet"), [3, 5]);
        assert_eq!(moved.len(), 1);
        let empty = SourceIds::decode("x", SourceIds::new().encode()).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn an_id_in_two_files_and_a_wrong_schema_are_typed_errors() {
        let mut ids = SourceIds::new();
        ids.insert("a", vec![1, 2]);
        ids.insert("b", vec![2]);
        let e = SourceIds::decode("s/source-ids.parquet", ids.encode()).unwrap_err();
        assert!(
            matches!(&e, SourceIdsError::Repeated { id: 2, first, second, .. } if first == "a" && second == "b"),
            "{e}"
        );
        let other = crate::format::layers::Deletions::new()
            .with(&[1], 1)
            .encode();
        let e = SourceIds::decode("s/source-ids.parquet", other).unwrap_err();
        assert!(
            e.to_string().contains("expected path utf8 and id int64"),
            "{e}"
        );
        let e = SourceIds::decode("s/source-ids.parquet", Bytes::from_static(b"nope")).unwrap_err();
        assert!(matches!(e, SourceIdsError::Invalid { .. }), "{e}");
    }
}
