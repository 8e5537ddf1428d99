//! The quick start: the main job on an embedded default. It generates a
//! clustered dataset as a Parquet table in a local folder, builds an index
//! over it, runs held-out queries, and reports recall@10 against brute force,
//! build time and QPS.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Builder, Int64Array, ListBuilder, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr_free::standard_normal;

/// A Gaussian mixture: `clusters` centres uniform in `[-1, 1]^dim`, rows drawn
/// around a centre chosen with uneven weights, spread `sigma`. Deterministic by
/// `seed`. Returns row-major `n × dim`.
pub fn clustered(n: usize, dim: usize, clusters: usize, sigma: f32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..clusters * dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    // Uneven cluster sizes: weight of cluster c is 1 / (1 + c % 7).
    let weights: Vec<f64> = (0..clusters).map(|c| 1.0 / (1.0 + (c % 7) as f64)).collect();
    let total: f64 = weights.iter().sum();
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let mut u = rng.random::<f64>() * total;
        let mut c = 0;
        while c + 1 < clusters && u >= weights[c] {
            u -= weights[c];
            c += 1;
        }
        for j in 0..dim {
            out.push(centres[c * dim + j] + sigma * standard_normal(&mut rng));
        }
    }
    out
}

/// A batch shaped like a table written by an ordinary tool: `id` BIGINT,
/// `title` VARCHAR and `embedding` LIST<FLOAT>.
pub fn table_batch(first_id: i64, vectors: &[f32], dim: usize) -> RecordBatch {
    let n = vectors.len() / dim;
    let ids: Vec<i64> = (0..n as i64).map(|i| first_id + i).collect();
    let titles: Vec<String> = ids.iter().map(|i| format!("doc {i}")).collect();
    let mut emb = ListBuilder::new(Float32Builder::with_capacity(vectors.len()))
        .with_field(Arc::new(Field::new("element", DataType::Float32, false)));
    for row in vectors.chunks_exact(dim) {
        emb.values().append_slice(row);
        emb.append(true);
    }
    let emb = emb.finish();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("title", DataType::Utf8, false),
        Field::new("embedding", emb.data_type().clone(), true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(titles)),
        Arc::new(emb),
    ];
    RecordBatch::try_new(schema, columns).expect("columns match the schema by construction")
}

mod rand_distr_free {
    //! A standard normal sample by Box–Muller (one of the pair), to avoid a
    //! dependency for the generator alone.
    use rand::Rng;

    pub fn standard_normal(rng: &mut impl Rng) -> f32 {
        let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        let u2: f64 = rng.random();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}
