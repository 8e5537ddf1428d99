//! The strict `manifest.json` model of an `ivf_postings` table: the one
//! discovery document of the table (readers never list the postings prefix).
//!
//! [`Manifest::parse`] is the only way in: it walks the JSON by hand so that
//! every broken rule surfaces as its own [`ManifestError`] variant naming the
//! offending entry (an unknown or missing key, a wrong type, a negative number,
//! an unsupported version, bad `cid-offsets`, a file range outside its bucket,
//! files out of order or overlapping, a non-canonical path, a bad `sha256`, a
//! `rows` sum different from `ntotal`). [`Manifest::to_json_bytes`] writes the
//! same model back deterministically. `docs/format.md` is the prose spec and
//! `manifests/manifest.schema.json` the machine one.
//!
//! ```text
//! cid-offsets: [0,        3,          8]      nlist = 8, two roots
//!               |root 0   |root 1     |
//! files:  cid_bucket=000000/part-00000  [0..=2]
//!         cid_bucket=000001/part-00000  [3..=5]
//!         cid_bucket=000001/part-00001  [5..=7]   (cid 5 spans two files)
//! ```

use crate::store::uri::RelativeLocation;
use object_store::path::Path;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// The only manifest format version this reader understands.
pub const FORMAT_VERSION: u32 = 1;

/// Largest CID the physical INT32 `cid` column can hold.
pub const MAX_CID: u32 = i32::MAX as u32;
/// Largest root bucket id a six-digit `cid_bucket=` directory can name.
pub const MAX_BUCKET: u32 = 999_999;
/// Largest part sequence a five-digit `part-` file name can hold.
pub const MAX_PART: u32 = 99_999;

/// `manifest.json`: the complete, ordered inventory of postings files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Manifest {
    pub format_version: u32,
    pub nlist: u32,
    pub ntotal: u64,
    /// R + 1 entries; root `r` owns CIDs `cid_offsets[r]..cid_offsets[r + 1]`.
    pub cid_offsets: Vec<u32>,
    pub files: Vec<FileEntry>,
}

/// One postings object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the manifest: `cid_bucket=NNNNNN/part-NNNNN.parquet`.
    pub path: String,
    pub cid_bucket: u32,
    /// Inclusive.
    pub min_cid: u32,
    /// Inclusive.
    pub max_cid: u32,
    pub rows: u64,
    pub size: u64,
    /// Lowercase hex sha256 of the whole object.
    pub sha256: String,
}

/// Manifest errors. `entry` names where the problem is: `manifest`,
/// `cid-offsets[3]`, or `files[2]`; file-level rules also carry the path.
#[derive(Debug, Error)]
pub enum ManifestError {
    #[error("manifest is not valid JSON: {0}")]
    Json(String),
    #[error("{entry}: unknown key `{key}`")]
    UnknownKey { entry: String, key: String },
    #[error("{entry}: missing key `{key}`")]
    MissingKey { entry: String, key: &'static str },
    #[error("{entry}: `{key}` must be {expected}, found {found}")]
    WrongType {
        entry: String,
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("{entry}: `{key}` must not be negative, found {value}")]
    Negative {
        entry: String,
        key: String,
        value: i64,
    },
    #[error("{entry}: `{key}` = {value} exceeds the maximum {max}")]
    OutOfRange {
        entry: String,
        key: String,
        value: u64,
        max: u64,
    },
    #[error("manifest format-version {found} is not supported (this reader supports {supported})")]
    Incompatible { found: u64, supported: u32 },
    #[error("cid-offsets needs at least 2 entries (one root), found {len}")]
    CidOffsetsTooShort { len: usize },
    #[error("cid-offsets[0] must be 0, found {found}")]
    CidOffsetsStart { found: u32 },
    #[error("cid-offsets[{index}] = {value} is below cid-offsets[{}] = {previous}", index - 1)]
    CidOffsetsDecreasing {
        index: usize,
        previous: u32,
        value: u32,
    },
    #[error("cid-offsets must end at nlist = {nlist}, found {last}")]
    CidOffsetsEnd { last: u32, nlist: u32 },
    #[error("files[{index}] ({path}): min-cid {min_cid} > max-cid {max_cid}")]
    MinAboveMax {
        index: usize,
        path: String,
        min_cid: u32,
        max_cid: u32,
    },
    #[error("files[{index}] ({path}): cid-bucket {bucket} is not a root (there are {roots})")]
    UnknownBucket {
        index: usize,
        path: String,
        bucket: u32,
        roots: usize,
    },
    #[error(
        "files[{index}] ({path}): cids [{min_cid}, {max_cid}] are outside bucket {bucket}'s range [{start}, {end})"
    )]
    OutsideBucket {
        index: usize,
        path: String,
        bucket: u32,
        min_cid: u32,
        max_cid: u32,
        start: u32,
        end: u32,
    },
    #[error(
        "files[{index}] ({path}) is not after files[{}] ({previous_path}) in (cid-bucket, min-cid, part) order", index - 1
    )]
    OutOfOrder {
        index: usize,
        path: String,
        previous_path: String,
    },
    #[error(
        "files[{index}] ({path}) starts at cid {min_cid}, below the previous file's max-cid {previous_max_cid}"
    )]
    Overlap {
        index: usize,
        path: String,
        min_cid: u32,
        previous_max_cid: u32,
    },
    #[error("files[{index}]: path {path:?} is not cid_bucket=<6 digits>/part-<5 digits>.parquet")]
    NonCanonicalPath { index: usize, path: String },
    #[error(
        "files[{index}] ({path}): the path's bucket {path_bucket} differs from cid-bucket {cid_bucket}"
    )]
    PathBucketMismatch {
        index: usize,
        path: String,
        path_bucket: u32,
        cid_bucket: u32,
    },
    #[error("files[{index}] ({path}): sha256 {sha256:?} is not 64 lowercase hex characters")]
    BadSha256 {
        index: usize,
        path: String,
        sha256: String,
    },
    #[error("files[{index}] ({path}): a postings file must hold at least one row")]
    EmptyFile { index: usize, path: String },
    #[error("the files hold {sum} rows in all but ntotal is {ntotal}")]
    RowsSum { sum: u128, ntotal: u64 },
}

/// The `(bucket, part)` named by a canonical postings path, or `None` when
/// `path` is not exactly `cid_bucket=<6 digits>/part-<5 digits>.parquet`.
pub fn parse_part_path(path: &str) -> Option<(u32, u32)> {
    let rest = path.strip_prefix("cid_bucket=")?;
    let (bucket, file) = rest.split_once('/')?;
    let part = file.strip_prefix("part-")?.strip_suffix(".parquet")?;
    Some((fixed_digits(bucket, 6)?, fixed_digits(part, 5)?))
}

impl FileEntry {
    /// The object of entry `index` below `table_root` (the folder holding
    /// `manifest.json`).
    ///
    /// # Errors
    /// [`ManifestError::NonCanonicalPath`] when `path` is not a relative
    /// location (never for an entry of a parsed [`Manifest`]).
    pub fn object_path(&self, index: usize, table_root: &Path) -> Result<Path, ManifestError> {
        RelativeLocation::parse(&self.path)
            .map(|rel| rel.resolve_path(table_root))
            .map_err(|_| ManifestError::NonCanonicalPath {
                index,
                path: self.path.clone(),
            })
    }
}

fn fixed_digits(text: &str, width: usize) -> Option<u32> {
    if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn is_lower_hex_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Manifest {
    /// Parses and validates `manifest.json` bytes strictly.
    ///
    /// # Errors
    /// [`ManifestError::Json`] for bytes that are not JSON, then
    /// [`ManifestError::Incompatible`] for a `format-version` other than
    /// [`FORMAT_VERSION`] (before any other rule), then the first structural
    /// problem (unknown/missing key, wrong type, negative or out of range
    /// number), then the first rule of
    /// [`Manifest::validate`] that fails.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
        let manifest = manifest_from_value(&value)?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks every semantic rule of the layout on an in-memory manifest.
    ///
    /// # Errors
    /// One [`ManifestError`] variant per rule: `Incompatible`, `CidOffsets*`,
    /// `MinAboveMax`, `UnknownBucket`, `OutsideBucket`, `NonCanonicalPath`,
    /// `PathBucketMismatch`, `OutOfOrder`, `Overlap`, `BadSha256`, `EmptyFile`,
    /// `RowsSum`, and `OutOfRange` for CIDs beyond INT32.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.format_version != FORMAT_VERSION {
            return Err(ManifestError::Incompatible {
                found: u64::from(self.format_version),
                supported: FORMAT_VERSION,
            });
        }
        self.validate_cid_offsets()?;
        let mut previous: Option<(&FileEntry, (u32, u32, u32))> = None;
        let mut sum: u128 = 0;
        for (index, file) in self.files.iter().enumerate() {
            let part = self.validate_file(index, file)?;
            let key = (file.cid_bucket, file.min_cid, part);
            if let Some((prev, prev_key)) = previous {
                if key <= prev_key {
                    return Err(ManifestError::OutOfOrder {
                        index,
                        path: file.path.clone(),
                        previous_path: prev.path.clone(),
                    });
                }
                // Same bucket: a CID may span consecutive files, so the
                // boundary CID may be shared; anything earlier overlaps.
                if prev.cid_bucket == file.cid_bucket && file.min_cid < prev.max_cid {
                    return Err(ManifestError::Overlap {
                        index,
                        path: file.path.clone(),
                        min_cid: file.min_cid,
                        previous_max_cid: prev.max_cid,
                    });
                }
            }
            previous = Some((file, key));
            sum += u128::from(file.rows);
        }
        if sum != u128::from(self.ntotal) {
            return Err(ManifestError::RowsSum {
                sum,
                ntotal: self.ntotal,
            });
        }
        Ok(())
    }

    fn validate_cid_offsets(&self) -> Result<(), ManifestError> {
        let offsets = &self.cid_offsets;
        if u64::from(self.nlist) > u64::from(MAX_CID) + 1 {
            return Err(ManifestError::OutOfRange {
                entry: "manifest".into(),
                key: "nlist".into(),
                value: self.nlist.into(),
                max: u64::from(MAX_CID) + 1,
            });
        }
        if offsets.len() < 2 {
            return Err(ManifestError::CidOffsetsTooShort { len: offsets.len() });
        }
        if offsets.len() - 1 > MAX_BUCKET as usize + 1 {
            return Err(ManifestError::OutOfRange {
                entry: "manifest".into(),
                key: "cid-offsets".into(),
                value: offsets.len() as u64 - 1,
                max: u64::from(MAX_BUCKET) + 1,
            });
        }
        if offsets[0] != 0 {
            return Err(ManifestError::CidOffsetsStart { found: offsets[0] });
        }
        for (index, pair) in offsets.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return Err(ManifestError::CidOffsetsDecreasing {
                    index: index + 1,
                    previous: pair[0],
                    value: pair[1],
                });
            }
        }
        let last = offsets[offsets.len() - 1];
        if last != self.nlist {
            return Err(ManifestError::CidOffsetsEnd {
                last,
                nlist: self.nlist,
            });
        }
        Ok(())
    }

    /// Checks one entry on its own; returns its part sequence.
    fn validate_file(&self, index: usize, file: &FileEntry) -> Result<u32, ManifestError> {
        let path = || file.path.clone();
        let (path_bucket, part) =
            parse_part_path(&file.path).ok_or_else(|| ManifestError::NonCanonicalPath {
                index,
                path: path(),
            })?;
        if path_bucket != file.cid_bucket {
            return Err(ManifestError::PathBucketMismatch {
                index,
                path: path(),
                path_bucket,
                cid_bucket: file.cid_bucket,
            });
        }
        if file.min_cid > file.max_cid {
            return Err(ManifestError::MinAboveMax {
                index,
                path: path(),
                min_cid: file.min_cid,
                max_cid: file.max_cid,
            });
        }
        let bucket = file.cid_bucket as usize;
        let roots = self.cid_offsets.len() - 1;
        if bucket >= roots {
            return Err(ManifestError::UnknownBucket {
                index,
                path: path(),
                bucket: file.cid_bucket,
                roots,
            });
        }
        let (start, end) = (self.cid_offsets[bucket], self.cid_offsets[bucket + 1]);
        if file.min_cid < start || file.max_cid >= end {
            return Err(ManifestError::OutsideBucket {
                index,
                path: path(),
                bucket: file.cid_bucket,
                min_cid: file.min_cid,
                max_cid: file.max_cid,
                start,
                end,
            });
        }
        if !is_lower_hex_sha256(&file.sha256) {
            return Err(ManifestError::BadSha256 {
                index,
                path: path(),
                sha256: file.sha256.clone(),
            });
        }
        if file.rows == 0 {
            return Err(ManifestError::EmptyFile {
                index,
                path: path(),
            });
        }
        Ok(part)
    }

    /// Serialises deterministically: keys in the documented order, two-space
    /// indentation, a trailing newline. Equal manifests give equal bytes.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(256 + self.files.len() * 256);
        // Serialising plain structs of integers and strings into a Vec cannot fail.
        if serde_json::to_writer_pretty(&mut bytes, self).is_err() {
            unreachable!("serialising a Manifest into memory cannot fail");
        }
        bytes.push(b'\n');
        bytes
    }
}

const MANIFEST_KEYS: [&str; 5] = ["format-version", "nlist", "ntotal", "cid-offsets", "files"];
const FILE_KEYS: [&str; 7] = [
    "path",
    "cid-bucket",
    "min-cid",
    "max-cid",
    "rows",
    "size",
    "sha256",
];

/// A JSON object whose keys were checked against the allowed set.
struct Entry<'a> {
    name: String,
    object: &'a Map<String, Value>,
}

impl<'a> Entry<'a> {
    fn new(
        name: String,
        value: &'a Value,
        allowed: &[&'static str],
    ) -> Result<Self, ManifestError> {
        let object = value.as_object().ok_or_else(|| ManifestError::WrongType {
            entry: name.clone(),
            key: name.clone(),
            expected: "an object",
            found: json_type(value).into(),
        })?;
        if let Some(key) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ManifestError::UnknownKey {
                entry: name,
                key: key.clone(),
            });
        }
        if let Some(key) = allowed.iter().find(|k| !object.contains_key(**k)) {
            return Err(ManifestError::MissingKey { entry: name, key });
        }
        Ok(Entry { name, object })
    }

    fn get(&self, key: &str) -> &'a Value {
        // Presence was checked in `new`; Null can never satisfy a type check.
        self.object.get(key).unwrap_or(&Value::Null)
    }

    fn uint(&self, key: &str, max: u64) -> Result<u64, ManifestError> {
        uint(&self.name, key, self.get(key), max)
    }

    fn u32(&self, key: &str, max: u32) -> Result<u32, ManifestError> {
        // `uint` bounds the value by `max`, so it fits.
        Ok(self.uint(key, u64::from(max))? as u32)
    }
}

fn uint(entry: &str, key: &str, value: &Value, max: u64) -> Result<u64, ManifestError> {
    if let Some(v) = value.as_u64() {
        if v > max {
            return Err(ManifestError::OutOfRange {
                entry: entry.into(),
                key: key.into(),
                value: v,
                max,
            });
        }
        return Ok(v);
    }
    if let Some(v) = value.as_i64() {
        return Err(ManifestError::Negative {
            entry: entry.into(),
            key: key.into(),
            value: v,
        });
    }
    Err(ManifestError::WrongType {
        entry: entry.into(),
        key: key.into(),
        expected: "a non-negative integer",
        found: json_type(value).into(),
    })
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a non-integer number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn manifest_from_value(value: &Value) -> Result<Manifest, ManifestError> {
    // The version first: a future manifest may add keys this reader rejects.
    if let Some(found) = value.get("format-version").and_then(Value::as_u64)
        && found != u64::from(FORMAT_VERSION)
    {
        return Err(ManifestError::Incompatible {
            found,
            supported: FORMAT_VERSION,
        });
    }
    let top = Entry::new("manifest".into(), value, &MANIFEST_KEYS)?;
    top.uint("format-version", u64::from(FORMAT_VERSION))?;
    let nlist = top.u32("nlist", MAX_CID + 1)?;
    let ntotal = top.uint("ntotal", u64::MAX)?;
    let offsets = array(&top, "cid-offsets")?;
    let cid_offsets = offsets
        .iter()
        .enumerate()
        .map(|(i, v)| {
            uint(
                &format!("cid-offsets[{i}]"),
                "cid-offsets",
                v,
                u64::from(MAX_CID) + 1,
            )
        })
        .map(|v| v.map(|v| v as u32))
        .collect::<Result<Vec<u32>, _>>()?;
    let files = array(&top, "files")?
        .iter()
        .enumerate()
        .map(|(i, v)| file_from_value(i, v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Manifest {
        format_version: FORMAT_VERSION,
        nlist,
        ntotal,
        cid_offsets,
        files,
    })
}

fn array<'a>(entry: &Entry<'a>, key: &str) -> Result<&'a Vec<Value>, ManifestError> {
    let value = entry.get(key);
    value.as_array().ok_or_else(|| ManifestError::WrongType {
        entry: entry.name.clone(),
        key: key.into(),
        expected: "an array",
        found: json_type(value).into(),
    })
}

fn file_from_value(index: usize, value: &Value) -> Result<FileEntry, ManifestError> {
    let entry = Entry::new(format!("files[{index}]"), value, &FILE_KEYS)?;
    let string = |key: &str| {
        let v = entry.get(key);
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| ManifestError::WrongType {
                entry: entry.name.clone(),
                key: key.into(),
                expected: "a string",
                found: json_type(v).into(),
            })
    };
    Ok(FileEntry {
        path: string("path")?,
        cid_bucket: entry.u32("cid-bucket", MAX_BUCKET)?,
        min_cid: entry.u32("min-cid", MAX_CID)?,
        max_cid: entry.u32("max-cid", MAX_CID)?,
        rows: entry.uint("rows", u64::MAX)?,
        size: entry.uint("size", u64::MAX)?,
        sha256: string("sha256")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_paths_are_exact() {
        assert_eq!(
            parse_part_path("cid_bucket=000017/part-00003.parquet"),
            Some((17, 3))
        );
        for bad in [
            "cid_bucket=17/part-00003.parquet",
            "cid_bucket=000017/part-3.parquet",
            "cid_bucket=000017/part-00003.parq",
            "cid_bucket=000017/part-0000a.parquet",
            "./cid_bucket=000017/part-00003.parquet",
            "cid_bucket=+00017/part-00003.parquet",
            "cid_bucket=000017/x/part-00003.parquet",
        ] {
            assert_eq!(parse_part_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn sha256_must_be_lowercase_hex() {
        assert!(is_lower_hex_sha256(&"ab".repeat(32)));
        assert!(!is_lower_hex_sha256(&"AB".repeat(32)));
        assert!(!is_lower_hex_sha256(&"ab".repeat(31)));
        assert!(!is_lower_hex_sha256(&"gg".repeat(32)));
    }
}
