//! Pairwise distance kernels at the dimensions embeddings use. Grid:
//! d ∈ {128, 384, 768, 1536} × {l2, ip, cos (the f64 cosine on raw vectors),
//! cos-prepared (the scan's `1 − dot` on unit vectors)}; throughput is
//! reported in elements (dimensions) per second. The simsimd path is printed
//! first, since the figures depend on it.

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parqivf::distance::{Metric, simd_path};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    eprintln!("simsimd path: {}", simd_path());
    let mut g = c.benchmark_group("distance");
    for dim in [128, 384, 768, 1536] {
        let v = common::clustered(2, dim, 2, 1);
        let (a, b) = v.split_at(dim);
        g.throughput(Throughput::Elements(dim as u64));
        for (name, metric) in [
            ("l2", Metric::L2),
            ("ip", Metric::InnerProduct),
            ("cos", Metric::Cosine),
        ] {
            g.bench_function(format!("{name}/{dim}"), |bench| {
                bench.iter(|| metric.distance(black_box(a), black_box(b)))
            });
        }
        let (mut pa, mut pb) = (a.to_vec(), b.to_vec());
        Metric::Cosine.prepare(&mut pa).unwrap();
        Metric::Cosine.prepare(&mut pb).unwrap();
        g.bench_function(format!("cos-prepared/{dim}"), |bench| {
            bench.iter(|| Metric::Cosine.prepared_distance(black_box(&pa), black_box(&pb)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
