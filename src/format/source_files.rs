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
//!
//! With an id column the rowids are the table's ids, not positions: the ids
//! each file holds are in the side table `source-ids.parquet`
//! ([`crate::format::source_ids`]), which `ids` pins. A size and ETag can be
//! fooled by a file rewritten in place with its mtime restored (a local
//! ETag is inode, mtime and size): a build with content hashes records each
//! file's sha256, and a refresh hashes the listed files again and treats a
//! different hash as a change.

use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The document's name in a snapshot folder.
pub const SOURCE_FILES_FILE: &str = "source-files.json";
/// The `format-version` written (2: `ids` and `sha256` may be present).
pub const SOURCE_FILES_FORMAT_VERSION: u32 = 2;
/// The older version this reader still reads (neither key).
const SOURCE_FILES_FORMAT_VERSION_1: u32 = 1;

/// The indexed files of a Parquet source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceFiles {
    pub format_version: u32,
    /// The first rowid no file has been given.
    pub next_rowid: i64,
    /// In path order.
    pub files: Vec<SourceFile>,
    /// With an id column: the pin of `source-ids.parquet` (path relative to
    /// the snapshot folder), the ids each file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<crate::format::pin::Pin>,
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
    /// Lowercase hex sha256 of the whole file, when the index was built
    /// with content hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
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
            sha256: None,
        }
    }

    /// Whether `meta` is this file unchanged: same path and size, the same
    /// ETag where both have one, and, when a hash is recorded, the same
    /// content hash (`hashes`: the listed files' sha256 by path).
    pub fn matches(
        &self,
        meta: &ObjectMeta,
        hashes: &std::collections::HashMap<String, String>,
    ) -> bool {
        self.path == meta.location.as_ref()
            && self.size == meta.size
            && match (&self.etag, &meta.e_tag) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
            && self
                .sha256
                .as_ref()
                .is_none_or(|h| hashes.get(&self.path) == Some(h))
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
        let value = match crate::format::versioned_json(bytes, SOURCE_FILES_FORMAT_VERSION) {
            Err(crate::format::VersionError::Incompatible(v))
                if v == u64::from(SOURCE_FILES_FORMAT_VERSION_1) =>
            {
                crate::format::versioned_json(bytes, SOURCE_FILES_FORMAT_VERSION_1)
            }
            other => other,
        }
        .map_err(|e| match e {
            crate::format::VersionError::Invalid(r) => invalid(r),
            crate::format::VersionError::Incompatible(found) => SourceFilesError::Incompatible {
                path: path.to_string(),
                found,
            },
        })?;
        let doc: SourceFiles = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        if doc.format_version == SOURCE_FILES_FORMAT_VERSION_1
            && (doc.ids.is_some() || doc.files.iter().any(|f| f.sha256.is_some()))
        {
            return Err(invalid("format-version 1 has no ids or sha256 keys".into()));
        }
        if let Some(pin) = &doc.ids
            && pin.path != crate::format::source_ids::SOURCE_IDS_FILE
        {
            return Err(invalid(format!(
                "ids must pin {:?}, found {:?}",
                crate::format::source_ids::SOURCE_IDS_FILE,
                pin.path
            )));
        }
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

    /// Whether the files were recorded with content hashes (a refresh hashes
    /// the listed files, and records the new ones' too).
    pub fn hashed(&self) -> bool {
        self.files.iter().any(|f| f.sha256.is_some())
    }

    /// Compare with a listing of the source (any order); `hashes` are the
    /// listed files' sha256 by path, when [`SourceFiles::hashed`].
    pub fn diff(
        &self,
        listed: &[ObjectMeta],
        hashes: &std::collections::HashMap<String, String>,
    ) -> FileChanges {
        let mut changes = FileChanges::default();
        let by_path: std::collections::HashMap<&str, &ObjectMeta> =
            listed.iter().map(|m| (m.location.as_ref(), m)).collect();
        for f in &self.files {
            match by_path.get(f.path.as_str()) {
                Some(meta) if f.matches(meta, hashes) => changes.kept.push(f.clone()),
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
            ids: None,
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
            ids: None,
        }
    }

    #[test]
    fn new_gone_and_changed_files_are_told_apart_and_rowids_never_reused() {
        let record = numbered(&[(meta("a", 10, "1"), 5), (meta("b", 10, "1"), 7)], 0);
        assert_eq!(record.next_rowid, 12);
        let listed = [meta("b", 11, "2"), meta("c", 3, "1"), meta("a", 10, "1")];
        let changes = record.diff(&listed, &Default::default());
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
        let e = SourceFiles::parse("s", br#"{"format-version": 3}"#).unwrap_err();
        assert!(matches!(e, SourceFilesError::Incompatible { found: 3, .. }));
    }

    #[test]
    fn a_recorded_hash_sees_a_rewrite_that_kept_size_and_etag() {
        let mut record = numbered(&[(meta("a", 10, "1"), 5)], 0);
        record.files[0].sha256 = Some("aa".into());
        assert!(record.hashed());
        let listed = [meta("a", 10, "1")];
        let same = [("a".to_string(), "aa".to_string())].into();
        assert_eq!(record.diff(&listed, &same).kept.len(), 1);
        let other = [("a".to_string(), "bb".to_string())].into();
        assert_eq!(record.diff(&listed, &other).removed.len(), 1);
        // Version 1 documents still read; version 1 with version-2 keys does not.
        let mut v1 = numbered(&[(meta("a", 10, "1"), 5)], 0);
        v1.format_version = 1;
        assert_eq!(SourceFiles::parse("s", &v1.to_json_bytes()).unwrap(), v1);
        v1.files[0].sha256 = Some("aa".into());
        assert!(SourceFiles::parse("s", &v1.to_json_bytes()).is_err());
    }
}
