//! `parqivf delete --index LOC (--ids ids.npy | --where "SQL")` and
//! `parqivf upsert --index LOC (--from rows.parquet | --ids ids.npy --vectors v.npy)`:
//! change an index by id without a source change (see
//! `parqivf::builder::mutate` and `docs/build.md`).
//!
//! Exit codes: 0 done (also when nothing matched), 2 could not run (a lost
//! race is a conflict: run it again).

use anyhow::{Context, bail};
use parqivf::builder::mutate::{UpsertRows, delete, delete_where, upsert};
use parqivf::builder::{ParquetSource, ParquetSourceOptions};
use std::path::PathBuf;
use std::process::ExitCode;

use super::refresh::{build_params, print_summary};
use super::source_args::{CompactPolicyArgs, MemoryArgs};

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The index location.
    #[arg(long)]
    pub index: String,
    /// The ids to delete: a `.npy` of int64 (or int32), 1-D or one column.
    #[arg(long, conflicts_with = "filter", required_unless_present = "filter")]
    pub ids: Option<PathBuf>,
    /// Delete the rows whose payload matches this SQL filter (the query
    /// filter's grammar), e.g. `"tenant = 7 AND year < 2020"`.
    #[arg(long = "where", id = "filter")]
    pub filter: Option<String>,
    #[command(flatten)]
    pub compact: CompactPolicyArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct UpsertArgs {
    /// The index location.
    #[arg(long)]
    pub index: String,
    /// Parquet rows to write (a file, folder or `*` pattern) with the
    /// index's vector, id and payload columns.
    #[arg(long, conflicts_with_all = ["ids", "vectors"], required_unless_present = "ids")]
    pub from: Option<String>,
    /// Ids of the rows (`.npy`, int64 or int32), with `--vectors`.
    #[arg(long, requires = "vectors")]
    pub ids: Option<PathBuf>,
    /// Their vectors (`.npy` or `.fvecs`, one row per id).
    #[arg(long, requires = "ids")]
    pub vectors: Option<PathBuf>,
    #[command(flatten)]
    pub compact: CompactPolicyArgs,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run_delete(
    args: DeleteArgs,
    store: &parqivf::store::options::StoreOptions,
) -> anyhow::Result<ExitCode> {
    let (index_store, index) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let params = build_params(args.memory.memory_limit, args.json);
    let policy = args.compact.policy();
    let summary = match (&args.ids, &args.filter) {
        (Some(path), None) => {
            let ids = parqivf::vector_file::read_ids(path)?;
            runtime.block_on(delete(index_store, &index, &ids, &params, policy))
        }
        (None, Some(filter)) => {
            runtime.block_on(delete_where(index_store, &index, filter, &params, policy))
        }
        _ => bail!("give --ids or --where"),
    }
    .with_context(|| format!("cannot delete from {}", args.index))?;
    print_summary(&args.index, &summary, args.json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_upsert(
    args: UpsertArgs,
    store: &parqivf::store::options::StoreOptions,
) -> anyhow::Result<ExitCode> {
    let (index_store, index) = parqivf::store::location::open_with(&args.index, store)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let rows = match (&args.from, &args.ids, &args.vectors) {
        (Some(from), None, None) => runtime
            .block_on(read_from(&index_store, &index, from, store))
            .with_context(|| format!("cannot read {from}"))?,
        (None, Some(ids), Some(vectors)) => UpsertRows {
            ids: parqivf::vector_file::read_ids(ids)?,
            vectors: parqivf::vector_file::read_vectors(vectors)?.data,
            payload: None,
        },
        _ => bail!("give --from, or --ids with --vectors"),
    };
    let params = build_params(args.memory.memory_limit, args.json);
    let summary = runtime
        .block_on(upsert(
            index_store,
            &index,
            rows,
            &params,
            args.compact.policy(),
        ))
        .with_context(|| format!("cannot upsert into {}", args.index))?;
    print_summary(&args.index, &summary, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The rows of the Parquet `from`, read with the index's column names.
async fn read_from(
    index_store: &std::sync::Arc<dyn object_store::ObjectStore>,
    index: &object_store::path::Path,
    from: &str,
    store: &parqivf::store::options::StoreOptions,
) -> anyhow::Result<UpsertRows> {
    let opened = parqivf::index::Index::open_current(index_store.clone(), index).await?;
    let b = &opened.definition().build;
    let (src_store, pattern) = parqivf::store::location::open_pattern(from, store)?;
    let source = ParquetSource::open(
        src_store,
        &pattern,
        ParquetSourceOptions {
            column: b.vector_column.clone(),
            id_column: Some(b.id_column.clone().unwrap_or_else(|| "id".into())),
            payload: b.payload_columns.clone(),
            ..ParquetSourceOptions::default()
        },
    )
    .await?;
    Ok(UpsertRows::read(&source).await?)
}
