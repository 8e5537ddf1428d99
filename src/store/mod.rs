//! Object-store wiring: locations (`file://`, plain paths, `memory://`, `s3://`)
//! to `Arc<dyn ObjectStore>` plus a prefix, and create-if-absent publication.

pub mod byte_ranges;
pub mod commit;
pub mod disk_cache;
pub mod error;
pub mod fault;
pub mod folder;
pub mod hedge;
pub mod latency;
pub mod local_read;
pub mod location;
pub mod options;
pub mod parquet_reader;
mod pass_through;
mod timer;
pub mod uri;

pub mod counting;

pub use error::StoreError;
