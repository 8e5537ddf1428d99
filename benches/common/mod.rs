//! Shared bench setup: seeded, clustered f32 data (a Gaussian-ish mixture with
//! uniform noise), so every bench measures the same bytes on every run, and
//! the index the search benches read, written by the test fixture
//! (`tests/it/support/fixtures.rs`: the library's k-means and postings writer).

// Each bench uses a different part of this module and of the fixtures.
#![allow(dead_code)]

#[path = "../../tests/it/support/fixtures.rs"]
pub mod fixtures;

use object_store::ObjectStore;
use object_store::path::Path;
use parqivf::format::manifest::Manifest;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// `n × dim` row-major points around `centers` random centres in [0, 255),
/// noise ±16 per coordinate; seeded, so identical across runs.
pub fn clustered(n: usize, dim: usize, centers: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mu: Vec<f32> = (0..centers * dim)
        .map(|_| rng.random_range(0.0..255.0))
        .collect();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = rng.random_range(0..centers);
        out.extend((0..dim).map(|j| mu[c * dim + j] + rng.random_range(-16.0..16.0)));
    }
    out
}

/// A temporary folder on local disk as an object store (the folder goes
/// when the `TempDir` drops).
pub fn local_store() -> (tempfile::TempDir, Arc<dyn ObjectStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    (dir, Arc::new(store))
}

/// Writes the search benches' index under `idx` on `store`: `n` rows of
/// `dim` from `fixtures::dataset` (seed 42), `nlist` leaves under `nroots`
/// roots trained with seed 43, postings files of about `file_bytes`.
/// Returns `nq` queries (the first rows shifted by 0.05) and the manifest.
pub fn search_index(
    rt: &tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    (n, dim, nroots, nlist): (usize, usize, usize, usize),
    file_bytes: u64,
    nq: usize,
) -> (Vec<f32>, Manifest) {
    let data = fixtures::dataset(n, dim, 42);
    let h = fixtures::hierarchy(&data, dim, nroots, nlist, 43);
    let manifest = rt.block_on(fixtures::write_index(
        store,
        &Path::from("idx"),
        &h,
        &data,
        &fixtures::rowids(n),
        fixtures::Layout::files_of(file_bytes),
    ));
    let queries = data[..nq * dim].iter().map(|x| x + 0.05).collect();
    (queries, manifest)
}
