//! parqivf: an IVF vector index for the embedding columns of Parquet and
//! DuckLake tables, stored as plain Parquet that any engine can read.
//!
//! The crate is organised as pure planners and compute in the middle
//! ([`distance`], [`topk`], [`kmeans`], [`format::manifest`], [`probe`]'s planner) and IO at
//! the edges ([`store`], [`postings`] writer, [`probe`] executor, [`catalog`]
//! readers), all storage going through `Arc<dyn ObjectStore>`.
//! `docs/architecture.md` gives each module one heading and the question it answers.

// Errors carry the typed errors of the modules below them, with paths and
// numbers; they travel once, on the cold path, so their size is not boxed away.
#![allow(clippy::result_large_err)]

pub mod builder;
pub mod catalog;
pub mod distance;
pub mod error;
pub mod filter;
pub mod format;
pub mod index;
pub mod kmeans;
pub mod postings;
pub mod probe;
pub mod quant;
pub mod quickstart;
pub mod server;
pub mod store;
pub mod topk;
pub mod vector_file;
pub mod verify;

pub use error::{Error, Result};
