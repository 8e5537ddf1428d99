//! The sources a build reads, one trait for all ([`VectorSource`]: a table
//! read part by part, in [`vector_source`]), and its providers: Parquet
//! files written by anyone ([`parquet`]), DuckLake tables ([`ducklake`]),
//! and the spec a distributed worker reopens them from ([`spec`]).

pub mod ducklake;
pub mod parquet;
pub mod spec;
pub mod vector_source;

pub use parquet::{ParquetSource, ParquetSourceOptions};
pub use spec::{SourceSpec, open_source};
pub use vector_source::{ArraySource, SourceDefinition, VectorBatch, VectorSource};
