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
//! | the CRC32 of every Parquet page header (written and checked) | [`page_crc`] |
//! | all of one snapshot's documents, read and checked together | [`snapshot`] |
//!
//! Parsers read the version keys first and refuse a version they do not know
//! before anything else. `docs/format.md` describes the bytes.

pub mod centroids;
pub mod definition;
pub mod footers;
pub mod manifest;
pub mod page_crc;
pub mod postings_table;
pub mod quantizer;
pub mod snapshot;
pub mod warehouse;
