//! Postings: the `ivf_postings` Parquet schema ([`crate::format::postings_table`]), the writer that
//! lays postings out one CID per row group in rolling files with streaming
//! sha256 and size ([`writer`]). The checker of every MUST of the layout is
//! [`crate::verify`]. The format as implemented is in `docs/format.md`.

pub mod error;
pub mod writer;

pub use error::PostingsError;
pub use writer::{PostingsWriter, WriterOptions, publish};
