//! Search latency: `search/{n}x{d}/nlist{L}/nprobe{p}` reads postings from
//! Parquet on local disk (temp dir) with warm footers and no postings cache;
//! `search-preload/…` has every posting decoded in memory (like FAISS in RAM).
//! Data: seeded clustered vectors; the index is written by the test fixture
//! (naive k-means), until the build job lands.
//!
//! Run: `cargo bench --bench search`.

#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::index::{Index, SearchParams};
use std::sync::Arc;

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

criterion_group!(benches, bench);
criterion_main!(benches);
