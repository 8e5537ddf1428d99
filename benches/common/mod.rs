//! Shared bench setup: seeded, clustered f32 data (a Gaussian-ish mixture with
//! uniform noise), so every bench measures the same bytes on every run.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
