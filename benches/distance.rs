//! Pairwise distance kernels (simsimd-backed `Metric::distance`) at the
//! dimensions embeddings use. Grid: d ∈ {128, 384, 768, 1536} × {l2, ip, cos};
//! throughput is reported in elements (dimensions) per second.

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parqivf::distance::Metric;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
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
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
