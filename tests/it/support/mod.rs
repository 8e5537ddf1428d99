//! The one test support module: every test module imports it as
//! `use crate::support;` and reaches its helpers by concept, e.g.
//! `support::fixtures::write_index`.
//!
//! - [`cli`]: the `parqivf` binary's output, checked and parsed.
//! - [`fixtures`]: seeded data and whole snapshots written by the library's
//!   own k-means and postings writer (plus one deliberately invalid file).
//! - [`postings`]: the small example postings table and the manifest JSON
//!   Schema check.
//! - [`store`]: a store failing its n-th write, reading a snapshot back,
//!   replacing a JSON document.
//! - [`fault_proxy`]: an HTTP proxy in front of moto that loses or fails
//!   chosen requests (`scripts/fault_proxy.py`).
//! - [`files`]: local Parquet and `.npy` input files.
//! - [`python`]: the independent readers (pyarrow, duckdb) via
//!   `$PARQIVF_PYTHON`.
//! - [`server`]: an in-memory search backend and loader, and an in-process
//!   server.
//! - [`ducklake`]: the DuckLake fixture catalog and DuckDB's expected answers.

pub mod cli;
pub mod ducklake;
pub mod fault_proxy;
pub mod files;
pub mod fixtures;
pub mod postings;
pub mod python;
pub mod server;
pub mod store;
