//! k-means training and the nearest-centroid assignment.
//!
//! Grid (kept small for a 2-core machine; `sample_size(10)` throughout):
//! - `kmeans_train/{n}x{d}/k{k}`: flat k-means, niter 20, FAISS sampling.
//! - `assign/{n}x{d}/k{k}`: `kmeans::assign::nearest` with the kernel this CPU
//!   gets; throughput in FLOP (2·n·k·d) so criterion prints the GEMM rate.
//! - `assign_choice/{packed_avx2,sgemm,simsimd_blocked}/{n}x{d}/k{k}`: the
//!   kernels considered for the dot products (simsimd: one call per point ×
//!   centroid pair in the same tiles), at the same sizes.

mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parqivf::distance::Metric;
use parqivf::kmeans::assign::Kernel;
use parqivf::kmeans::{self, KMeansParams};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use simsimd::SpatialSimilarity;
use std::hint::black_box;

fn train(c: &mut Criterion) {
    let mut g = c.benchmark_group("kmeans_train");
    g.sample_size(10);
    for (n, d, k) in [(20_000, 128, 64), (65_536, 128, 256)] {
        let data = common::clustered(n, d, 4 * k, 1);
        let p = KMeansParams {
            k,
            ..KMeansParams::default()
        };
        g.bench_function(format!("{n}x{d}/k{k}"), |b| {
            b.iter(|| {
                kmeans::train(
                    black_box(&data),
                    d,
                    &p,
                    Metric::L2,
                    &mut ChaCha8Rng::seed_from_u64(1),
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

/// The simsimd alternative: same point tiles in parallel, one dot per pair.
fn simsimd_blocked(data: &[f32], cents: &[f32], d: usize) -> Vec<u32> {
    let norms: Vec<f32> = cents
        .chunks_exact(d)
        .map(|c| f32::dot(c, c).unwrap() as f32)
        .collect();
    data.par_chunks(256 * d)
        .flat_map_iter(|tile| {
            tile.chunks_exact(d)
                .map(|x| {
                    let mut best = (f32::INFINITY, 0u32);
                    for (j, (c, &cn)) in cents.chunks_exact(d).zip(&norms).enumerate() {
                        let s = cn - 2.0 * f32::dot(x, c).unwrap() as f32;
                        if s < best.0 {
                            best = (s, j as u32);
                        }
                    }
                    best.1
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn assign(c: &mut Criterion) {
    let mut g = c.benchmark_group("assign");
    g.sample_size(10);
    for (n, d, k) in [(16_384, 128, 1024), (16_384, 128, 4096)] {
        let data = common::clustered(n, d, k, 2);
        let cents = common::clustered(k, d, k, 3);
        g.throughput(Throughput::Elements((2 * n * k * d) as u64));
        g.bench_function(format!("{n}x{d}/k{k}"), |b| {
            b.iter(|| kmeans::assign::nearest(black_box(&data), &cents, d, Metric::L2).unwrap())
        });
    }
    g.finish();
    let mut g = c.benchmark_group("assign_choice");
    g.sample_size(10);
    for (n, d, k) in [(16_384, 128, 1024), (16_384, 128, 4096)] {
        let data = common::clustered(n, d, k, 2);
        let cents = common::clustered(k, d, k, 3);
        g.throughput(Throughput::Elements((2 * n * k * d) as u64));
        for (name, kernel) in [
            ("packed_avx2", Kernel::PackedAvx2),
            ("sgemm", Kernel::Sgemm),
        ] {
            if !kernel.is_supported() {
                continue;
            }
            g.bench_function(format!("{name}/{n}x{d}/k{k}"), |b| {
                b.iter(|| {
                    kmeans::assign::nearest_with(kernel, black_box(&data), &cents, d, Metric::L2)
                        .unwrap()
                })
            });
        }
        if k == 1024 {
            g.bench_function(format!("simsimd_blocked/{n}x{d}/k{k}"), |b| {
                b.iter(|| simsimd_blocked(black_box(&data), &cents, d))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, train, assign);
criterion_main!(benches);
