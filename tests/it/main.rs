//! The integration tests: one test binary, one module per concept.
//!
//! One binary rather than one per file: the crate and its dependencies are
//! linked once, not forty times (disk and link time in CI). Run one module
//! with a name filter, e.g. `cargo test --test it store_conformance::`.
//! Shared helpers live in [`support`]; the DuckLake suite is [`ducklake`]
//! with its submodules.

mod support;

mod build_inputs;
mod build_job;
mod build_stages;
mod codes;
mod corruption;
mod cosine;
mod definition;
mod disk_cache;
mod distributed_build;
mod ducklake;
mod filter_interop;
mod filtered_search;
mod gc;
mod kmeans;
mod kmeans_cli;
mod location;
mod manifest;
mod manifest_props;
mod mutate;
mod parser_fuzz;
mod partitions;
mod postings_interop;
mod postings_writer;
mod probe_io;
mod publish;
mod publish_faults;
mod query_path;
mod refresh;
mod search_cli;
mod search_exact;
mod server;
mod server_auth;
mod server_fuzz;
mod server_hostile;
mod server_index;
mod server_load;
mod server_reload;
mod snapshot;
mod source_shapes;
mod store_conformance;
mod target_recall;
mod uri;
mod verify;
