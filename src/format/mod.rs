//! Every document an index snapshot keeps on storage, each with its writer,
//! reader and validator in one file:
//!
//! | document | module |
//! |---|---|
//! | `index.json` (index-provider-definition) and the source table-definition | [`definition`] |
//! | `postings/manifest.json` (the artifact manifest) | [`manifest`] |
//! | the postings table's schema, key-value metadata and footer rules | [`postings_table`] |
//! | `postings/footers.json` (footer pins) | [`footers`] |
//! | `centroids/centroids.parquet` | [`centroids`] |
//! | `quantizer.json` (the parameters of the postings' `code` column) | [`quantizer`] |
//! | `versions/*.json` (the commit log) and snapshot folders | [`warehouse`] |
//! | `versions/latest-bundle.bin` (the latest commit's documents and footers, for a one-round open) | [`open_bundle`] |
//! | writing a new snapshot, its commit and rollback | [`snapshot_writer`] |
//! | a refreshed snapshot's layers and `deletions.parquet` | [`layers`] |
//! | `calibration.json` (recall by lists probed, measured at build) | [`calibration`] |
//! | `source-files.json` (the indexed files of a Parquet source) | [`source_files`] |
//! | `source-ids.parquet` (the ids each source file holds, with an id column) | [`source_ids`] |
//! | the CRC32 of every Parquet page header (written and checked) | [`page_crc`] |
//! | the `rowid` and `cid` encodings, read without a decoder | [`key_columns`] |
//! | pins: the size and sha256 of a document, checked by every reader | [`pin`] |
//! | all of one snapshot's documents, read and checked together | [`snapshot`] |
//!
//! Parsers read the version keys first and refuse a version they do not know
//! before anything else. `docs/format.md` describes the bytes.

pub mod calibration;
pub mod centroids;
pub mod definition;
pub mod footers;
pub mod key_columns;
pub mod layers;
pub mod manifest;
pub mod open_bundle;
pub mod page_crc;
pub mod pin;
pub mod postings_table;
pub mod quantizer;
pub mod snapshot;
pub mod snapshot_writer;
pub mod source_files;
pub mod source_ids;
pub mod warehouse;

/// Why a versioned JSON document was refused before its keys were read.
#[derive(Debug)]
pub(crate) enum VersionError {
    /// Not JSON, or no numeric `format-version`.
    Invalid(String),
    /// A `format-version` other than the supported one.
    Incompatible(u64),
}

/// Parse `bytes` as JSON and check its `format-version` equals `supported`
/// before anything else is read (the rule every parser here follows).
/// Checks that a small Parquet table's columns are exactly `expected`'s
/// (names and types, in order); else the columns found, as `name type`,
/// and `what` was expected.
pub(crate) fn check_columns(
    found: &arrow::datatypes::Schema,
    expected: &arrow::datatypes::Schema,
    what: &str,
) -> Result<(), String> {
    let same = found.fields().len() == expected.fields().len()
        && found
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if same {
        return Ok(());
    }
    let columns: Vec<String> = found
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    Err(format!("columns {columns:?}, expected {what}"))
}

pub(crate) fn versioned_json(
    bytes: &[u8],
    supported: u32,
) -> Result<serde_json::Value, VersionError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| VersionError::Invalid(e.to_string()))?;
    match value
        .get("format-version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v) if v == u64::from(supported) => Ok(value),
        Some(found) => Err(VersionError::Incompatible(found)),
        None => Err(VersionError::Invalid(
            "format-version is missing or not a number".into(),
        )),
    }
}
