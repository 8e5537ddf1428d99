//! Code-scoring kernels against the memory-bandwidth bound (issue 12).
//!
//! Group `score`: one iteration scores 65 536 codes of one list-like run with
//! `Quantizer::score` (`sq8` and `rabitq4`, dims 128 and 384, the kernel this
//! CPU dispatches to, printed first), next to an f32 dot-product scan of 65 536
//! f32 vectors (`f32-dot`) and a `memcpy` of each byte count. Throughput is the
//! bytes read (code bytes, f32 bytes, or the bytes copied), so each figure
//! compares directly with the memcpy line of the same size; vectors per second
//! are that rate divided by the per-vector bytes, also printed first.
//!
//! Group `encode`: `Quantizer::encode_batch` over 4 096 residuals, in vectors
//! per second on one thread (the build parallelises over batches).
//!
//! Group `fastscan` (issue 26): the fast-scan kernel (`fastscan::scan`, the
//! path this CPU dispatches to) over 64 MiB of `pq4fs` blocks at dims 128
//! and 384 (2 Mi and 699 050 codes: far past the caches), one thread,
//! throughput in bytes of codes read; codes per second are that rate over
//! the bytes per code (m / 2, printed first). Next to it, `read-bandwidth`:
//! a sum of the same 64 MiB as u64, the single-thread memory read bandwidth
//! of the machine, the bound the kernel is measured against. FAISS's rate
//! over the same 64 MiB of 4-bit codes:
//! `scripts/bench/fastscan_kernel_faiss.py`.
//!
//! Run: `cargo bench --bench codes` (add `-- --quick` for a short run).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parqivf::quant::fastscan::{self, Blocks, Lut};
use parqivf::quant::{Quantizer, simd_path, sub_quantizers};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

/// Codes (or f32 vectors) scanned per iteration.
const CODES: usize = 65_536;
/// Residuals encoded per iteration.
const ENCODED: usize = 4_096;

fn data(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n * dim)
        .map(|_| rng.random::<f32>() * 2.0 - 1.0)
        .collect()
}

/// The f32 scan's inner product: 8 lanes, auto-vectorised.
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let (a_chunks, a_tail) = a.as_chunks::<8>();
    let (b_chunks, b_tail) = b.as_chunks::<8>();
    let mut acc = [0.0f32; 8];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum::<f32>()
}

fn quantizers(dim: usize) -> [(&'static str, Quantizer); 3] {
    let sample = data(4_096, dim, 1);
    [
        (
            "sq8",
            Quantizer::train_sq8(&sample, dim).expect("sq8 trains"),
        ),
        (
            "rabitq4",
            Quantizer::rabitq4(dim, 7).expect("rabitq4 builds"),
        ),
        (
            "pq4fs",
            Quantizer::train_pq4(&sample, dim, 7).expect("pq4fs trains"),
        ),
    ]
}

fn score(c: &mut Criterion) {
    eprintln!("score kernels: {}", simd_path());
    let mut g = c.benchmark_group("score");
    for dim in [128, 384] {
        let query = data(1, dim, 3);
        let vectors = data(CODES, dim, 2);
        let mut out = vec![0.0f32; CODES];
        for (name, quantizer) in quantizers(dim) {
            let mut codes = vec![0u8; CODES * quantizer.code_bytes()];
            quantizer.encode_batch(&vectors, &vec![0.0; dim], &vec![0; CODES], &mut codes);
            let mut rotated = vec![0.0; dim];
            quantizer.rotate(&query, &mut rotated);
            let prepared = quantizer.prepare(&rotated);
            eprintln!("{name}/{dim}: {} bytes per code", quantizer.code_bytes());
            g.throughput(Throughput::Bytes(codes.len() as u64));
            g.bench_function(format!("{name}/{dim}"), |b| {
                b.iter(|| quantizer.score(black_box(&prepared), black_box(&codes), &mut out))
            });
            let mut copy = vec![0u8; codes.len()];
            g.bench_function(format!("memcpy/{}", codes.len()), |b| {
                b.iter(|| copy.copy_from_slice(black_box(&codes)))
            });
        }
        eprintln!("f32-dot/{dim}: {} bytes per vector", 4 * dim);
        g.throughput(Throughput::Bytes((vectors.len() * 4) as u64));
        g.bench_function(format!("f32-dot/{dim}"), |b| {
            b.iter(|| {
                for (v, o) in black_box(&vectors).chunks_exact(dim).zip(out.iter_mut()) {
                    *o = dot_f32(v, &query);
                }
            })
        });
        let mut copy = vec![0.0f32; vectors.len()];
        g.bench_function(format!("memcpy/{}", vectors.len() * 4), |b| {
            b.iter(|| copy.copy_from_slice(black_box(&vectors)))
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    g.sample_size(10);
    for dim in [128, 384] {
        let residuals = data(ENCODED, dim, 4);
        g.throughput(Throughput::Elements(ENCODED as u64));
        for (name, quantizer) in quantizers(dim) {
            let mut codes = vec![0u8; ENCODED * quantizer.code_bytes()];
            let (leaf, cids) = (vec![0.0; dim], vec![0u32; ENCODED]);
            g.bench_function(format!("{name}/{dim}"), |b| {
                b.iter(|| quantizer.encode_batch(black_box(&residuals), &leaf, &cids, &mut codes))
            });
        }
    }
    g.finish();
}

/// Bytes of fast-scan blocks (and of the bandwidth probe) per iteration.
const FASTSCAN_BYTES: usize = 64 << 20;

fn fast_scan(c: &mut Criterion) {
    eprintln!("fast-scan kernel: {}", fastscan::kernel_path());
    let mut g = c.benchmark_group("fastscan");
    g.sample_size(20);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for dim in [128, 384] {
        let pairs = sub_quantizers(dim) / 2;
        let n = FASTSCAN_BYTES / pairs / 32 * 32;
        // The kernel's speed does not depend on the code values.
        let blocks = Blocks {
            n,
            pairs,
            bytes: (0..n * pairs).map(|_| rng.random()).collect(),
        };
        let tables: Vec<f32> = (0..pairs * 32).map(|_| rng.random::<f32>()).collect();
        let lut = Lut::quantize(&tables);
        eprintln!("pq4fs/{dim}: {pairs} bytes per code, {n} codes");
        g.throughput(Throughput::Bytes(blocks.bytes.len() as u64));
        let mut sums = Vec::new();
        g.bench_function(format!("pq4fs/{dim}"), |b| {
            b.iter(|| fastscan::scan(black_box(&lut), black_box(&blocks), &mut sums))
        });
    }
    // A batch's pass over one list for the queries probing it
    // (`fastscan::scan_many`): 1,024 codes (a SIFT-like list), in the
    // caches, scored for 1 and for 4 queries; the throughput counts code ×
    // query scores.
    for dim in [128, 384] {
        let pairs = sub_quantizers(dim) / 2;
        let n = 1024;
        let blocks = Blocks {
            n,
            pairs,
            bytes: (0..n * pairs).map(|_| rng.random()).collect(),
        };
        let luts: Vec<Lut> = (0..fastscan::QUERIES)
            .map(|_| {
                let tables: Vec<f32> = (0..pairs * 32).map(|_| rng.random::<f32>()).collect();
                Lut::quantize(&tables)
            })
            .collect();
        for queries in [1, fastscan::QUERIES] {
            let luts: Vec<&Lut> = luts.iter().take(queries).collect();
            let mut sums = vec![Vec::new(); queries];
            g.throughput(Throughput::Elements((n * queries) as u64));
            g.bench_function(format!("list-{queries}q/{dim}"), |b| {
                b.iter(|| fastscan::scan_many(black_box(&luts), black_box(&blocks), &mut sums))
            });
        }
    }
    // The transposition of one list's row-major codes into blocks, as a
    // storage-resident query does for every list it loads: 317 rows (one
    // partial block), in the caches.
    for dim in [128, 384] {
        let pairs = sub_quantizers(dim) / 2;
        let (n, stride) = (317, pairs + 8);
        let rows: Vec<u8> = (0..n * stride).map(|_| rng.random()).collect();
        g.throughput(Throughput::Bytes((n * pairs) as u64));
        g.bench_function(format!("transpose/{dim}"), |b| {
            b.iter(|| Blocks::from_rows(black_box(&rows), n, stride, 8, pairs))
        });
    }
    let words: Vec<u64> = (0..FASTSCAN_BYTES / 8).map(|_| rng.random()).collect();
    g.throughput(Throughput::Bytes(FASTSCAN_BYTES as u64));
    g.bench_function("read-bandwidth", |b| {
        b.iter(|| {
            black_box(&words)
                .chunks_exact(8)
                .fold([0u64; 8], |mut acc, w| {
                    for l in 0..8 {
                        acc[l] = acc[l].wrapping_add(w[l]);
                    }
                    acc
                })
        })
    });
    g.finish();
}

criterion_group!(benches, score, encode, fast_scan);
criterion_main!(benches);
