//! The batch build job: a [`VectorSource`] is sampled, a two-level k-means
//! hierarchy is trained, every row is assigned and grouped by root bucket
//! (spilling under a memory limit), postings and centroids are written to a
//! fresh snapshot folder, and the snapshot is published through the
//! [`crate::format::warehouse`] commit protocol. Each of these steps is a
//! function of [`stages`] with plain inputs and outputs; [`job::build`]
//! composes them on one machine. See `docs/build.md`.

pub mod calibrate;
pub mod distributed;
pub mod error;
mod int8_screen;
pub mod job;
pub mod mutate;
pub mod offload;
pub mod progress;
pub mod refresh;
pub mod source;
pub mod spill;
pub mod spilled;
pub mod stages;
pub mod target_stops;

pub use error::BuildError;
pub use job::{BuildSummary, PhaseTimes, build};
pub use progress::ProgressMode;
pub use source::{
    ArraySource, ParquetSource, ParquetSourceOptions, SourceDefinition, SourceSpec, VectorBatch,
    VectorSource, open_source,
};
pub use stages::{BuildParams, DEFAULT_CODES, DEFAULT_NEIGHBOURS, DEFAULT_POLISH, DEFAULT_SEED};
