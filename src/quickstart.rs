//! The quick start: the main job on an embedded default. It generates a
//! clustered dataset as a Parquet table in a local folder, builds an index
//! over it, runs held-out queries, and reports recall@10 against brute force,
//! build time and QPS.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Float32Builder, Int64Array, ListBuilder, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr_free::standard_normal;
use serde::Serialize;

use crate::builder::{BuildParams, ParquetSource, ParquetSourceOptions, ProgressMode};
use crate::distance::Metric;
use crate::index::{Index, ProbeDepth, SearchParams};
use crate::topk::TopK;

/// The embedded default: sizes that build and query in seconds on two cores.
#[derive(Debug, Clone)]
pub struct QuickstartConfig {
    /// Local folder for the generated table (`source/`) and the index (`index/`).
    pub dir: PathBuf,
    pub rows: usize,
    pub dim: usize,
    pub clusters: usize,
    pub files: usize,
    pub nlist: u32,
    pub queries: usize,
    pub k: usize,
    /// Lists probed per query; `None`, the index's default (a target
    /// recall: the build calibrates).
    pub nprobe: Option<usize>,
    pub seed: u64,
    pub progress: ProgressMode,
}

impl Default for QuickstartConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("quickstart-out"),
            rows: 100_000,
            dim: 64,
            clusters: 200,
            files: 4,
            nlist: 256,
            queries: 1_000,
            k: 10,
            nprobe: None,
            seed: 1234,
            progress: ProgressMode::Auto,
        }
    }
}

/// What the quick start measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct QuickstartReport {
    pub source: String,
    pub index: String,
    pub rows: usize,
    pub dim: usize,
    pub nlist: u32,
    /// How each query chose its lists.
    pub probe: ProbeDepth,
    pub mean_lists_probed: f64,
    pub k: usize,
    pub queries: usize,
    pub build_seconds: f64,
    pub search_seconds: f64,
    pub qps: f64,
    pub recall_at_k: f64,
    pub version: u64,
}

/// Generate, build, query, compare with brute force.
///
/// # Errors
/// IO failures writing the table or the index, and any build or search error.
pub async fn run(cfg: &QuickstartConfig) -> crate::Result<QuickstartReport> {
    let io = |e: std::io::Error| crate::builder::BuildError::Unreadable {
        path: cfg.dir.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(cfg.dir.join("source")).map_err(io)?;
    let dir = std::fs::canonicalize(&cfg.dir).map_err(io)?;
    // Base rows and held-out queries from the same mixture, different streams.
    let all = clustered(
        cfg.rows + cfg.queries,
        cfg.dim,
        cfg.clusters,
        0.15,
        cfg.seed,
    );
    let (base, queries) = all.split_at(cfg.rows * cfg.dim);
    let per_file = cfg.rows.div_ceil(cfg.files.max(1));
    for (i, chunk) in base.chunks(per_file * cfg.dim).enumerate() {
        let path = dir.join("source").join(format!("part-{i:05}.parquet"));
        let batch = table_batch((i * per_file) as i64, chunk, cfg.dim);
        let file = std::fs::File::create(&path).map_err(io)?;
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None)
            .map_err(|e| crate::builder::BuildError::Arrow(e.to_string()))?;
        w.write(&batch)
            .map_err(|e| crate::builder::BuildError::Arrow(e.to_string()))?;
        w.close()
            .map_err(|e| crate::builder::BuildError::Arrow(e.to_string()))?;
    }

    let store: Arc<dyn object_store::ObjectStore> = Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(|e| {
            crate::builder::BuildError::Unreadable {
                path: dir.display().to_string(),
                reason: e.to_string(),
            }
        })?,
    );
    let source = ParquetSource::open(
        store.clone(),
        "source/*.parquet",
        ParquetSourceOptions {
            column: "embedding".into(),
            id_column: Some("id".into()),
            table_uri: Some(format!("file://{}/source/*.parquet", dir.display())),
            ..Default::default()
        },
    )
    .await?;
    let index_path = object_store::path::Path::from("index");
    let params = BuildParams {
        nlist: cfg.nlist,
        metric: Metric::L2,
        seed: cfg.seed,
        progress: cfg.progress,
        ..BuildParams::default()
    };
    let t = Instant::now();
    let summary =
        crate::builder::build(Arc::new(source), store.clone(), &index_path, &params).await?;
    let build_seconds = t.elapsed().as_secs_f64();

    let index = Index::open_current(store.clone(), &index_path).await?;
    let sp = SearchParams {
        k: cfg.k,
        nprobe: cfg.nprobe,
        ..SearchParams::default()
    };
    let probe = index
        .probe_depth(&sp)
        .map_err(crate::index::IndexError::from)?;
    let t = Instant::now();
    let results = index.search_batch(queries, &sp).await?;
    let search_seconds = t.elapsed().as_secs_f64();

    // Brute force over the generated rows (rowid = id = row number).
    let dim = cfg.dim;
    let truth: Vec<Vec<i64>> = {
        use rayon::prelude::*;
        queries
            .par_chunks(dim)
            .map(|q| {
                let mut top = TopK::new(cfg.k);
                for (i, row) in base.chunks_exact(dim).enumerate() {
                    top.push(Metric::L2.distance(q, row), i as i64);
                }
                top.into_sorted().into_iter().map(|n| n.rowid).collect()
            })
            .collect()
    };
    let hits: usize = results
        .iter()
        .zip(&truth)
        .map(|(r, t)| r.hits.iter().filter(|h| t.contains(&h.rowid)).count())
        .sum();
    Ok(QuickstartReport {
        source: dir.join("source").display().to_string(),
        index: dir.join("index").display().to_string(),
        rows: cfg.rows,
        dim,
        nlist: cfg.nlist,
        probe,
        mean_lists_probed: results
            .iter()
            .map(|r| r.stats.lists_probed as f64)
            .sum::<f64>()
            / results.len().max(1) as f64,
        k: cfg.k,
        queries: cfg.queries,
        build_seconds,
        search_seconds,
        qps: cfg.queries as f64 / search_seconds.max(1e-9),
        recall_at_k: hits as f64 / (cfg.queries * cfg.k).max(1) as f64,
        version: summary.version,
    })
}

/// A Gaussian mixture: `clusters` centres uniform in `[-1, 1]^dim`, rows drawn
/// around a centre chosen with uneven weights, spread `sigma`. Deterministic by
/// `seed`. Returns row-major `n × dim`.
pub fn clustered(n: usize, dim: usize, clusters: usize, sigma: f32, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..clusters * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    // Uneven cluster sizes: weight of cluster c is 1 / (1 + c % 7).
    let weights: Vec<f64> = (0..clusters)
        .map(|c| 1.0 / (1.0 + (c % 7) as f64))
        .collect();
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
/// `title` VARCHAR and `embedding` `LIST<FLOAT>`.
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
        Field::new(
            "embedding",
            arrow::array::Array::data_type(&emb).clone(),
            true,
        ),
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
