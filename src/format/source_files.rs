//! `source-files.json`: the files of a Parquet source that a snapshot
//! indexed, so that `refresh` can tell which files are new, gone or
//! changed without reading any of them.
//!
//! Each file is recorded with its store path, size and ETag (when the store
//! gives one), and the rowids it was given: `first-rowid .. first-rowid +
//! rows`. The first build numbers files in path order; a refresh numbers
//! new files from `next-rowid` on, so a rowid is never given twice and the
//! rows of unchanged files keep theirs. A file whose size or ETag differs is
//! changed: its old rowids are deleted and its rows are new.

use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The document's name in a snapshot folder.
pub const SOURCE_FILES_FILE: &str = "source-files.json";
/// The only `format-version` this reader knows.
pub const SOURCE_FILES_FORMAT_VERSION: u32 = 1;

/// The indexed files of a Parquet source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceFiles {
    pub format_version: u32,
    /// The first rowid no file has been given.
    pub next_rowid: i64,
    /// In path order.
    pub files: Vec<SourceFile>,
}

/// One indexed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceFile {
    /// The object path in the source's store.
    pub path: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    pub first_rowid: i64,
    pub rows: u64,
}

/// A `source-files.json` that cannot be used.
#[derive(Debug, Error)]
pub enum SourceFilesError {
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error(
        "{path}: format-version {found} is not supported (supported: {SOURCE_FILES_FORMAT_VERSION})"
    )]
    Incompatible { path: String, found: u64 },
}

/// What changed between the recorded files and a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileChanges {
    /// Listed files not recorded, or recorded with another size or ETag: their rows are new.
    pub added: Vec<ObjectMeta>,
    /// Recorded files not listed, or changed: their rowids are deleted.
    pub removed: Vec<SourceFile>,
    /// Recorded files listed unchanged.
    pub kept: Vec<SourceFile>,
}

impl SourceFile {
    /// The record of the file `meta` whose `rows` rows were given the rowids
    /// from `first_rowid` on.
    pub fn of(meta: &ObjectMeta, first_rowid: i64, rows: u64) -> SourceFile {
        SourceFile {
            path: meta.location.to_string(),
            size: meta.size,
            etag: meta.e_tag.clone(),
            first_rowid,
            rows,
        }
    }

    /// Whether `meta` is this file unchanged: same path and size, and the
    /// same ETag where both have one.
    pub fn matches(&self, meta: &ObjectMeta) -> bool {
        self.path == meta.location.as_ref()
            && self.size == meta.size
            && match (&self.etag, &meta.e_tag) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// The rowids this file was given.
    pub fn rowids(&self) -> std::ops::Range<i64> {
        self.first_rowid..self.first_rowid + self.rows as i64
    }
}

impl SourceFiles {
    /// Parse and check.
    ///
    /// # Errors
    /// `Incompatible` for another version, `Invalid` for anything malformed
    /// or for rowid ranges that overlap or pass `next-rowid`.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<SourceFiles, SourceFilesError> {
        let invalid = |reason: String| SourceFilesError::Invalid {
            path: path.to_string(),
            reason,
        };
        let value = crate::format::versioned_json(bytes, SOURCE_FILES_FORMAT_VERSION).map_err(
            |e| match e {
                crate::format::VersionError::Invalid(r) => invalid(r),
                crate::format::VersionError::Incompatible(found) => {
                    SourceFilesError::Incompatible {
                        path: path.to_string(),
                        found,
                    }
                }
            },
        )?;
        let doc: SourceFiles = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        let mut ranges: Vec<(i64, i64)> = doc
            .files
            .iter()
            .map(|f| (f.first_rowid, f.first_rowid.saturating_add(f.rows as i64)))
            .collect();
        ranges.sort_unstable();
        if let Some(w) = ranges.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(invalid(format!(
                "rowid ranges {}..{} and {}..{} overlap",
                w[0].0, w[0].1, w[1].0, w[1].1
            )));
        }
        if let Some(r) = ranges.iter().find(|r| r.0 < 0 || r.1 > doc.next_rowid) {
            return Err(invalid(format!(
                "rowid range {}..{} is outside 0..{} (next-rowid)",
                r.0, r.1, doc.next_rowid
            )));
        }
        if doc.files.windows(2).any(|w| w[0].path >= w[1].path) {
            return Err(invalid(
                "files are not in strictly ascending path order".into(),
            ));
        }
        Ok(doc)
    }

    /// Pretty JSON with a final newline.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Compare with a listing of the source (any order).
    pub fn diff(&self, listed: &[ObjectMeta]) -> FileChanges {
        let mut changes = FileChanges::default();
        let by_path: std::collections::HashMap<&str, &ObjectMeta> =
            listed.iter().map(|m| (m.location.as_ref(), m)).collect();
        for f in &self.files {
            match by_path.get(f.path.as_str()) {
                Some(meta) if f.matches(meta) => changes.kept.push(f.clone()),
                _ => changes.removed.push(f.clone()),
            }
        }
        let kept: std::collections::HashSet<&str> =
            changes.kept.iter().map(|f| f.path.as_str()).collect();
        changes.added = listed
            .iter()
            .filter(|m| !kept.contains(m.location.as_ref()))
            .cloned()
            .collect();
        changes.added.sort_by(|a, b| a.location.cmp(&b.location));
        changes
    }

    /// The record after a refresh: the `kept` files and the `added`
    /// ones (as the source that read them numbered them, from this
    /// record's `next-rowid` on), in path order.
    pub fn after(&self, kept: Vec<SourceFile>, added: SourceFiles) -> SourceFiles {
        let mut files = kept;
        files.extend(added.files);
        files.sort_by(|a, b| a.path.cmp(&b.path));
        SourceFiles {
            format_version: SOURCE_FILES_FORMAT_VERSION,
            next_rowid: added.next_rowid.max(self.next_rowid),
            files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::path::Path;

    fn meta(path: &str, size: u64, etag: &str) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(path),
            last_modified: Default::default(),
            size,
            e_tag: Some(etag.into()),
            version: None,
        }
    }

    /// `files` numbered in order from `first` on, as a source numbers them.
    fn numbered(files: &[(ObjectMeta, u64)], first: i64) -> SourceFiles {
        let mut next = first;
        let files = files
            .iter()
            .map(|(m, rows)| {
                next += *rows as i64;
                SourceFile::of(m, next - *rows as i64, *rows)
            })
            .collect();
        SourceFiles {
            format_version: SOURCE_FILES_FORMAT_VERSION,
            next_rowid: next,
            files,
        }
    }

    #[test]
    fn new_gone_and_changed_files_are_told_apart_and_rowids_never_reused() {
        let record = numbered(&[(meta("a", 10, "1"), 5), (meta("b", 10, "1"), 7)], 0);
        assert_eq!(record.next_rowid, 12);
        let listed = [meta("b", 11, "2"), meta("c", 3, "1"), meta("a", 10, "1")];
        let changes = record.diff(&listed);
        assert_eq!(
            changes.kept.iter().map(|f| &f.path[..]).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(changes.removed[0].rowids(), 5..12);
        let added: Vec<_> = changes
            .added
            .iter()
            .map(|m| m.location.to_string())
            .collect();
        assert_eq!(added, ["b", "c"]);
        let added = [(changes.added[0].clone(), 4), (changes.added[1].clone(), 2)];
        let next = record.after(changes.kept.clone(), numbered(&added, record.next_rowid));
        assert_eq!(next.next_rowid, 18);
        assert_eq!(
            next.files
                .iter()
                .map(|f| (f.path.as_str(), f.first_rowid))
                .collect::<Vec<_>>(),
            [("a", 0), ("b", 12), ("c", 16)]
        );
        let bytes = next.to_json_bytes();
        assert_eq!(SourceFiles::parse("s", &bytes).unwrap(), next);
    }

    #[test]
    fn overlapping_or_escaping_ranges_are_refused() {
        let mut r = numbered(&[(meta("a", 1, "1"), 5), (meta("b", 1, "1"), 5)], 0);
        r.files[1].first_rowid = 3;
        let e = SourceFiles::parse("s", &r.to_json_bytes()).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        r.files[1].first_rowid = 5;
        r.next_rowid = 9;
        let e = SourceFiles::parse("s", &r.to_json_bytes()).unwrap_err();
        assert!(e.to_string().contains("outside 0..9"), "{e}");
        let e = SourceFiles::parse("s", br#"{"format-version": 2}"#).unwrap_err();
        assert!(matches!(e, SourceFilesError::Incompatible { found: 2, .. }));
    }
}
