//! Search latency: `search/{n}x{d}/nlist{L}/nprobe{p}` reads postings from
//! Parquet on local disk (temp dir) with warm footers and no postings cache;
//! `search-preload/…` has every posting decoded in memory (like FAISS in RAM).
//! `latency/{cold,warm}/delay50ms/…` times ONE query against a store that
//! delays every request by 50 ms (`CountingStore::with_latency`), on a fresh
//! `Index` (cold: no footer cached; warm: after `Index::warm()`), so the time
//! can be set against rounds × 50 ms (the object-store latency bound).
//! Data: seeded clustered vectors; the index is written by the test fixture.
//!
//! Run: `cargo bench --bench search`.

#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::index::{Index, SearchParams};
use parqivf::store::counting::CountingStore;
use std::sync::Arc;
use std::time::{Duration, Instant};

// (n, dim, nroots, nlist, nprobes): one small grid, fast on a shared 2-core box.
const GRID: &[(usize, usize, usize, usize, &[usize])] = &[(20_000, 64, 8, 64, &[4, 16])];
const QUERIES: usize = 64;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for &(n, dim, nroots, nlist, nprobes) in GRID {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let data = common::dataset(n, dim, 42);
        let h = common::hierarchy(&data, dim, nroots, nlist, 43);
        let layout = common::Layout {
            rows_per_file: 4096,
            ..common::Layout::default()
        };
        rt.block_on(common::write_index(
            store.as_ref(),
            &Path::from("idx"),
            &h,
            &data,
            &common::rowids(n),
            layout,
        ));
        let queries: Vec<f32> = data[..QUERIES * dim].iter().map(|x| x + 0.05).collect();
        let disk = rt
            .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
            .unwrap();
        rt.block_on(disk.warm()).unwrap();
        let ram = rt
            .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
            .unwrap();
        rt.block_on(ram.preload()).unwrap();
        for (mode, index) in [("search", &disk), ("search-preload", &ram)] {
            let mut group = c.benchmark_group(mode);
            group.sample_size(10);
            for &nprobe in nprobes {
                let params = SearchParams {
                    k: 10,
                    nprobe,
                    ..SearchParams::default()
                };
                // One iteration = one batch of QUERIES queries.
                group.bench_function(format!("{n}x{dim}/nlist{nlist}/nprobe{nprobe}"), |b| {
                    b.iter(|| rt.block_on(index.search_batch(&queries, &params)).unwrap())
                });
            }
            group.finish();
        }
    }
}

/// One query on a fresh index over a store with 50 ms per request.
fn latency(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (n, dim, nroots, nlist, nprobe) = (20_000, 64, 8, 64, 16);
    let delay = Duration::from_millis(50);
    let mem: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let data = common::dataset(n, dim, 42);
    let h = common::hierarchy(&data, dim, nroots, nlist, 43);
    let layout = common::Layout {
        rows_per_file: 400,
        ..common::Layout::default()
    };
    rt.block_on(common::write_index(
        mem.as_ref(),
        &Path::from("idx"),
        &h,
        &data,
        &common::rowids(n),
        layout,
    ));
    let store: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(mem).with_latency(delay));
    let queries: Vec<f32> = data[..QUERIES * dim].iter().map(|x| x + 0.05).collect();
    let params = SearchParams {
        k: 10,
        nprobe,
        ..SearchParams::default()
    };
    let mut group = c.benchmark_group("latency");
    group.sample_size(10);
    for warm in [false, true] {
        let mode = if warm { "warm" } else { "cold" };
        let mut files = (u64::MAX, 0);
        let mut rounds = 0;
        group.bench_function(
            format!("{mode}/delay50ms/{n}x{dim}/nlist{nlist}/nprobe{nprobe}"),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for i in 0..iters as usize {
                        let index = rt
                            .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
                            .unwrap();
                        if warm {
                            rt.block_on(index.warm()).unwrap();
                        }
                        let q = &queries[(i % QUERIES) * dim..][..dim];
                        let t = Instant::now();
                        let r = rt.block_on(index.search(q, &params)).unwrap();
                        total += t.elapsed();
                        files = (
                            files.0.min(r.stats.candidate_files),
                            files.1.max(r.stats.candidate_files),
                        );
                        rounds = rounds.max(r.stats.rounds);
                    }
                    total
                })
            },
        );
        println!(
            "latency/{mode}: {}..{} candidate files per query, at most {rounds} rounds; bound {} ms",
            files.0,
            files.1,
            (rounds as f64 * delay.as_millis() as f64 * 1.3).round()
        );
    }
    group.finish();
}

criterion_group!(benches, bench, latency);
criterion_main!(benches);
