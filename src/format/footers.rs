//! `footers.json`: the pin of every postings file's footer, beside
//! `manifest.json` in the `ivf_postings` table root.
//!
//! A Parquet footer that still parses after a flipped byte (a row-group cid
//! statistic, a column offset) would steer the planner to the wrong rows, and
//! page CRCs do not cover it. So the publisher records, per manifest entry and
//! in manifest order, the footer's exact length (metadata plus the 8-byte
//! trailer) and its sha256; the reader fetches exactly that tail and checks
//! the hash before decoding (one hash over ~1 KiB per row group, once per
//! cached footer). The document itself is pinned by the commit document (see
//! `crate::format::warehouse`), so it cannot be edited unnoticed either. Schema:
//! `manifests/footers.schema.json`.

use crate::format::manifest::Manifest;
use crate::store::parquet_reader::FOOTER_PREFETCH;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// File name of the footer pins, beside `manifest.json`.
pub const FOOTERS_FILE: &str = "footers.json";

/// Where `footers.json` lives for the postings manifest at the relative
/// location `manifest`: beside it.
pub fn footers_location(manifest: &str) -> String {
    match manifest.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{FOOTERS_FILE}"),
        None => FOOTERS_FILE.to_string(),
    }
}

/// The `footers.json` object of the postings table whose `manifest.json`
/// is in `table_root`.
pub fn footers_path(table_root: &Path) -> Path {
    table_root.clone().join(FOOTERS_FILE)
}
/// The `footers.json` format version this crate writes and reads.
pub const FOOTERS_FORMAT_VERSION: u32 = 1;

/// The footer pins of one postings table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Footers {
    pub format_version: u32,
    /// One entry per manifest file, in manifest order.
    pub files: Vec<FooterPin>,
}

/// The pin of one footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FooterPin {
    /// The manifest entry's `path`.
    pub path: String,
    /// Footer metadata length plus 8 (length word and `PAR1`).
    pub footer_size: u64,
    /// Lowercase hex sha256 of those last `footer-size` bytes.
    pub footer_sha256: String,
}

/// Errors of the footer pins.
#[derive(Debug, Error)]
pub enum FootersError {
    #[error("{path} is not a valid footers document: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: footers format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: u64,
        supported: u32,
    },
    #[error(
        "{path}: files[{index}] pins {found:?}, the manifest names {expected:?} ({pins} pins, {entries} manifest files)"
    )]
    ManifestMismatch {
        path: String,
        index: usize,
        expected: String,
        found: String,
        pins: usize,
        entries: usize,
    },
    #[error(
        "{path}: footer is {found} bytes with sha256 {found_sha256}, footers.json pins {expected} bytes with sha256 {expected_sha256}"
    )]
    Mismatch {
        path: String,
        expected: u64,
        found: u64,
        expected_sha256: String,
        found_sha256: String,
    },
    #[error("{path}: footer of {footer} bytes does not fit the {size}-byte object")]
    Truncated {
        path: String,
        footer: u64,
        size: u64,
    },
    #[error("object store error on {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
}

impl Footers {
    /// Parse strictly and check that the pins follow `manifest`'s files.
    ///
    /// # Errors
    /// [`FootersError::Invalid`], [`FootersError::Incompatible`],
    /// [`FootersError::ManifestMismatch`].
    pub fn parse(path: &str, bytes: &[u8], manifest: &Manifest) -> Result<Footers, FootersError> {
        let invalid = |reason: String| FootersError::Invalid {
            path: path.to_string(),
            reason,
        };
        let value = super::versioned_json(bytes, FOOTERS_FORMAT_VERSION).map_err(|e| match e {
            super::VersionError::Invalid(reason) => invalid(reason),
            super::VersionError::Incompatible(found) => FootersError::Incompatible {
                path: path.to_string(),
                found,
                supported: FOOTERS_FORMAT_VERSION,
            },
        })?;
        let footers: Footers = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        let n = footers.files.len().max(manifest.files.len());
        for i in 0..n {
            let pin = footers.files.get(i);
            let entry = manifest.files.get(i);
            if pin.map(|p| &p.path) != entry.map(|e| &e.path) {
                return Err(FootersError::ManifestMismatch {
                    path: path.to_string(),
                    index: i,
                    expected: entry.map_or_else(|| "nothing".into(), |e| e.path.clone()),
                    found: pin.map_or_else(|| "nothing".into(), |p| p.path.clone()),
                    pins: footers.files.len(),
                    entries: manifest.files.len(),
                });
            }
        }
        for (i, p) in footers.files.iter().enumerate() {
            let hex_ok = p.footer_sha256.len() == 64
                && p.footer_sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex_ok || p.footer_size < 8 {
                return Err(invalid(format!(
                    "files[{i}]: footer-size must be at least 8 and footer-sha256 64 lowercase hex digits"
                )));
            }
        }
        Ok(footers)
    }

    /// The document's bytes (pretty JSON, newline-terminated).
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

impl FooterPin {
    /// The pin of the footer of `file` (a whole Parquet object) at `path`.
    ///
    /// # Errors
    /// [`FootersError::Truncated`] when the trailer's length does not fit.
    pub fn of_file(path: &str, file: &[u8]) -> Result<FooterPin, FootersError> {
        let truncated = |footer| FootersError::Truncated {
            path: path.to_string(),
            footer,
            size: file.len() as u64,
        };
        let t = file.len().checked_sub(8).ok_or_else(|| truncated(8))?;
        let len = u64::from(u32::from_le_bytes([
            file[t],
            file[t + 1],
            file[t + 2],
            file[t + 3],
        ])) + 8;
        let start = (file.len() as u64)
            .checked_sub(len)
            .ok_or_else(|| truncated(len))? as usize;
        Ok(FooterPin::of_footer(path, &file[start..]))
    }

    /// The pin of `footer` (metadata and 8-byte trailer) of the file at `path`.
    pub fn of_footer(path: &str, footer: &[u8]) -> FooterPin {
        FooterPin {
            path: path.to_string(),
            footer_size: footer.len() as u64,
            footer_sha256: hex::encode(Sha256::digest(footer)),
        }
    }

    /// Where the pinned footer lies in its `object_size`-byte object: its
    /// last `footer-size` bytes (`None` when the object is smaller).
    pub fn range(&self, object_size: u64) -> Option<std::ops::Range<u64>> {
        Some(object_size.checked_sub(self.footer_size)?..object_size)
    }

    /// Check `footer` (the object's last bytes) against this pin.
    ///
    /// # Errors
    /// [`FootersError::Mismatch`] naming `path` and both lengths and hashes.
    pub fn check(&self, path: &str, footer: &[u8]) -> Result<(), FootersError> {
        let sha = hex::encode(Sha256::digest(footer));
        if footer.len() as u64 != self.footer_size || sha != self.footer_sha256 {
            return Err(FootersError::Mismatch {
                path: path.to_string(),
                expected: self.footer_size,
                found: footer.len() as u64,
                expected_sha256: self.footer_sha256.clone(),
                found_sha256: sha,
            });
        }
        Ok(())
    }
}

/// The footer bytes (metadata and 8-byte trailer) of the `size`-byte object
/// at `path`: one tail GET of up to [`FOOTER_PREFETCH`] bytes, a second when the footer is larger.
///
/// # Errors
/// [`FootersError::Store`], and [`FootersError::Truncated`] when the length
/// word points before the start of the object.
pub async fn read_footer_bytes(
    store: &dyn ObjectStore,
    path: &Path,
    size: u64,
) -> Result<Bytes, FootersError> {
    let store_err = |source| FootersError::Store {
        path: path.to_string(),
        source,
    };
    let truncated = |footer| FootersError::Truncated {
        path: path.to_string(),
        footer,
        size,
    };
    let tail_len = size.min(FOOTER_PREFETCH);
    if tail_len < 8 {
        return Err(truncated(8));
    }
    let tail = store
        .get_range(path, size - tail_len..size)
        .await
        .map_err(store_err)?;
    let t = &tail[tail.len() - 8..];
    let footer = u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]])) + 8;
    if footer > size {
        return Err(truncated(footer));
    }
    if footer <= tail.len() as u64 {
        return Ok(tail.slice(tail.len() - footer as usize..));
    }
    store
        .get_range(path, size - footer..size)
        .await
        .map_err(store_err)
}
