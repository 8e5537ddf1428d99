//! `parqivf search`: query an index with vectors from a file and print the
//! neighbours, as text or one JSON object per query (`--json`), with the IO
//! stats (`--stats`). Exit codes: 0 ok, 2 bad input (dimension, NaN, k = 0,
//! nprobe > nlist, unreadable file) or IO failure.
//!
//! Queries come from a Parquet file with a `vector` column
//! (FIXED_LEN_BYTE_ARRAY(dim·4) little-endian f32, or a list of float).

use anyhow::{Context, bail};
use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float32Type};
use parqivf::index::{Index, SearchParams};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Index snapshot location: a local folder, file://, memory:// or s3:// URI.
    #[arg(long)]
    pub index: String,
    /// Query vectors: a Parquet file with a `vector` column.
    #[arg(long)]
    pub queries: PathBuf,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Leaf lists probed per query (1..=nlist).
    #[arg(long, default_value_t = 16)]
    pub nprobe: usize,
    /// Name of the vector column in a Parquet query file.
    #[arg(long, default_value = "vector")]
    pub column: String,
    /// Read every footer before the first query (warm queries: one round of requests).
    #[arg(long)]
    pub warm: bool,
    /// One JSON object per query: `rowids`, `distances` (and `stats`).
    #[arg(long)]
    pub json: bool,
    /// Include the IO stats of each query.
    #[arg(long)]
    pub stats: bool,
}

/// Row-major f32 queries from the `column` of a Parquet file.
fn read_parquet_queries(path: &PathBuf, column: &str) -> anyhow::Result<(Vec<f32>, usize)> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{} is not a Parquet file", path.display()))?
        .build()?;
    let (mut data, mut dim) = (Vec::new(), None::<usize>);
    for batch in reader {
        let batch = batch?;
        let col = batch
            .column_by_name(column)
            .with_context(|| format!("{}: no column {column:?}", path.display()))?;
        let (values, width): (Vec<f32>, usize) = match col.data_type() {
            DataType::FixedSizeBinary(w) if w % 4 == 0 => {
                let a = col.as_fixed_size_binary();
                let v = (0..a.len())
                    .flat_map(|i| {
                        a.value(i)
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    })
                    .collect();
                (v, (*w / 4) as usize)
            }
            DataType::FixedSizeList(f, w) if *f.data_type() == DataType::Float32 => {
                let a = col.as_fixed_size_list();
                (
                    a.values().as_primitive::<Float32Type>().values().to_vec(),
                    *w as usize,
                )
            }
            DataType::List(f) if *f.data_type() == DataType::Float32 => {
                let a = col.as_list::<i32>();
                let w = a.value_length(0) as usize;
                if (0..a.len()).any(|i| a.value_length(i) as usize != w) {
                    bail!(
                        "{}: vectors of different lengths in {column:?}",
                        path.display()
                    );
                }
                (
                    a.values().as_primitive::<Float32Type>().values().to_vec(),
                    w,
                )
            }
            other => bail!(
                "{}: column {column:?} has type {other}, expected fixed(d·4) or list<float>",
                path.display()
            ),
        };
        if col.null_count() > 0 {
            bail!("{}: column {column:?} has null vectors", path.display());
        }
        if *dim.get_or_insert(width) != width {
            bail!("{}: inconsistent vector widths", path.display());
        }
        data.extend(values);
    }
    Ok((data, dim.unwrap_or(0)))
}

/// Open `location` as a store and a prefix (plain paths are local folders).
fn open_location(
    location: &str,
) -> anyhow::Result<(Arc<dyn object_store::ObjectStore>, object_store::path::Path)> {
    let url = match url::Url::parse(location) {
        Ok(url) => url,
        Err(_) => {
            let abs = std::path::absolute(location)?;
            url::Url::from_directory_path(&abs)
                .map_err(|()| anyhow::anyhow!("bad path {location}"))?
        }
    };
    let (store, prefix) =
        object_store::parse_url(&url).with_context(|| format!("cannot open {location}"))?;
    Ok((Arc::from(store), prefix))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (queries, dim) = read_parquet_queries(&args.queries, &args.column)?;
    let (store, prefix) = open_location(&args.index)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(async {
        let index = Index::open(store, &prefix).await?;
        let expected = index.hierarchy().dim;
        if dim != expected {
            bail!("queries have dimension {dim}, the index has {expected}");
        }
        if args.warm {
            index.warm().await?;
        }
        let params = SearchParams {
            k: args.k,
            nprobe: args.nprobe,
            ..SearchParams::default()
        };
        Ok(index.search_batch(&queries, &params).await?)
    })?;
    for (i, r) in results.iter().enumerate() {
        if args.json {
            let mut obj = serde_json::json!({
                "query": i,
                "rowids": r.hits.iter().map(|h| h.rowid).collect::<Vec<_>>(),
                "distances": r.hits.iter().map(|h| h.distance).collect::<Vec<_>>(),
            });
            if args.stats {
                obj["stats"] = serde_json::to_value(r.stats)?;
            }
            println!("{obj}");
        } else {
            let hits: Vec<String> = r
                .hits
                .iter()
                .map(|h| format!("{}:{}", h.rowid, h.distance))
                .collect();
            println!("query {i}: {}", hits.join(" "));
            if args.stats {
                println!("  stats: {:?}", r.stats);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
