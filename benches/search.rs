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

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use object_store::ObjectStore;
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
        let (_dir, store) = common::local_store();
        // Files of about 4096 rows.
        let (queries, _) = common::search_index(
            &rt,
            Arc::clone(&store),
            (n, dim, nroots, nlist),
            1 << 20,
            QUERIES,
        );
        let disk = rt
            .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
            .unwrap();
        rt.block_on(disk.warm()).unwrap();
        let ram = rt
            .block_on(Index::open(Arc::clone(&store), &Path::from("idx")))
            .unwrap();
        rt.block_on(ram.preload(parqivf::index::Preload::All))
            .unwrap();
        for (mode, index) in [("search", &disk), ("search-preload", &ram)] {
            let mut group = c.benchmark_group(mode);
            group.sample_size(10);
            for &nprobe in nprobes {
                let params = SearchParams {
                    k: 10,
                    nprobe: Some(nprobe),
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
    // Files of about 400 rows.
    let (queries, _) = common::search_index(
        &rt,
        Arc::clone(&mem),
        (n, dim, nroots, nlist),
        100 * 1024,
        QUERIES,
    );
    let store: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(mem).with_latency(delay));
    let params = SearchParams {
        k: 10,
        nprobe: Some(nprobe),
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
