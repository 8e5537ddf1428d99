//! Pins: the size and sha256 of a small document, recorded by whoever names
//! it (a commit pins its snapshot's documents, a refreshed snapshot's layers
//! pin their tables' documents), and checked by every reader, so an edited or
//! bit-flipped document is a [`PinError`], never a different answer.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The pin of one snapshot document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Pin {
    /// Relative to the snapshot folder, e.g. `postings/manifest.json`.
    pub path: String,
    pub size: u64,
    /// Lowercase hex sha256 of the whole object.
    pub sha256: String,
}

impl Pin {
    /// The pin of `bytes` stored at `path`.
    pub fn of(path: &str, bytes: &[u8]) -> Pin {
        Pin {
            path: path.to_string(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
        }
    }
}

/// A snapshot document that differs from, or is missing from, its pins.
#[derive(Debug, Error)]
pub enum PinError {
    #[error(
        "{object}: {found_size} bytes with sha256 {found_sha256}, the commit pins {expected_size} bytes with sha256 {expected_sha256}"
    )]
    Mismatch {
        object: String,
        expected_size: u64,
        found_size: u64,
        expected_sha256: String,
        found_sha256: String,
    },
    #[error("{object}: the commit document has no pin for {path:?} (pins: {pinned:?})")]
    Unpinned {
        object: String,
        path: String,
        pinned: Vec<String>,
    },
}

/// Check `bytes`, read from `object` (snapshot-relative `path`), against `pins`.
///
/// # Errors
/// [`PinError::Unpinned`] when no pin names `path`, [`PinError::Mismatch`]
/// when the size or sha256 differs.
pub fn check_pin(pins: &[Pin], path: &str, object: &str, bytes: &[u8]) -> Result<(), PinError> {
    let Some(pin) = pins.iter().find(|p| p.path == path) else {
        return Err(PinError::Unpinned {
            object: object.to_string(),
            path: path.to_string(),
            pinned: pins.iter().map(|p| p.path.clone()).collect(),
        });
    };
    let found = Pin::of(path, bytes);
    if found.size != pin.size || found.sha256 != pin.sha256 {
        return Err(PinError::Mismatch {
            object: object.to_string(),
            expected_size: pin.size,
            found_size: found.size,
            expected_sha256: pin.sha256.clone(),
            found_sha256: found.sha256,
        });
    }
    Ok(())
}
