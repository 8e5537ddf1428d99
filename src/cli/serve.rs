//! `parqivf serve`: parses the flags into a [`ServerConfig`], sets up
//! structured logging (`RUST_LOG` filter, `--log-json` for JSON lines), opens
//! every index, and serves until SIGINT/SIGTERM. Exit code 0 after a clean
//! shutdown, 2 when an index cannot be opened or the address cannot be bound.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parqivf::server::{BackendLoader, Limits, ServerConfig};
use parqivf::store::options::StoreOptions;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// An index to serve, as NAME=LOCATION (repeatable). NAME appears in URLs.
    #[arg(long = "index", value_name = "NAME=LOCATION", value_parser = parse_index, required = true)]
    pub indexes: Vec<(String, String)>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Load every posting into memory at start-up (fastest queries, most memory).
    #[arg(long)]
    pub preload: bool,
    /// Read every footer at start-up and on reload, so each query needs one
    /// round of store requests (implied by --preload).
    #[arg(long)]
    pub warm: bool,
    /// Largest request body in bytes; larger bodies get 413.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// Most query vectors in one request.
    #[arg(long, default_value_t = Limits::default().max_batch)]
    pub max_batch: usize,
    /// Largest accepted k.
    #[arg(long, default_value_t = Limits::default().max_k)]
    pub max_k: usize,
    /// nprobe when a request omits it (clamped to the index's nlist).
    #[arg(long, default_value_t = Limits::default().default_nprobe)]
    pub nprobe: usize,
    /// Queries admitted at once (running or waiting); beyond this, 429.
    #[arg(long, default_value_t = ServerConfig::default().queue)]
    pub queue: usize,
    /// Queries computing at once on the blocking pool (default: CPU count).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Re-open each index location every SECS seconds and swap in a newly published snapshot.
    #[arg(long, value_name = "SECS")]
    pub reload_interval: Option<u64>,
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
}

fn parse_index(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, location)) if !name.is_empty() && !location.is_empty() => {
            Ok((name.to_owned(), location.to_owned()))
        }
        _ => Err(format!("expected NAME=LOCATION, got {value:?}")),
    }
}

fn config(args: &Args) -> ServerConfig {
    let defaults = ServerConfig::default();
    ServerConfig {
        addr: args.addr,
        indexes: args.indexes.clone(),
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_batch: args.max_batch,
            max_k: args.max_k,
            default_nprobe: args.nprobe,
            ..Limits::default()
        },
        queue: args.queue,
        workers: args.workers.unwrap_or(defaults.workers),
        reload_interval: args.reload_interval.map(Duration::from_secs),
    }
}

/// The loader opening locations at their current snapshot with `index::Index`.
fn index_loader(args: &Args, store: StoreOptions) -> Arc<dyn BackendLoader> {
    Arc::new(parqivf::server::index_backend::IndexLoader {
        preload: args.preload,
        warm: args.warm,
        store,
    })
}

pub fn run(args: Args, store: StoreOptions) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A subscriber may already be installed (e.g. by a test harness); keep it then.
    let _ = if args.log_json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };

    let config = config(&args);
    let loader = index_loader(&args, store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(parqivf::server::serve(
        config,
        loader,
        parqivf::server::shutdown_signal(),
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn flags_become_the_server_config() {
        let cmd = Cmd::try_parse_from([
            "serve",
            "--index",
            "a=file:///x",
            "--index",
            "b=s3://bucket/p=q",
            "--addr",
            "0.0.0.0:9000",
            "--max-k",
            "50",
            "--max-batch",
            "8",
            "--max-body-bytes",
            "1000",
            "--queue",
            "4",
            "--workers",
            "2",
            "--reload-interval",
            "30",
        ])
        .unwrap();
        let c = config(&cmd.args);
        assert_eq!(
            c.indexes,
            vec![
                ("a".into(), "file:///x".into()),
                ("b".into(), "s3://bucket/p=q".into())
            ]
        );
        assert_eq!(c.addr, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(
            (c.limits.max_k, c.limits.max_batch, c.limits.max_body_bytes),
            (50, 8, 1000)
        );
        assert_eq!(
            (c.queue, c.workers, c.reload_interval),
            (4, 2, Some(Duration::from_secs(30)))
        );
    }

    #[test]
    fn index_flag_needs_name_and_location() {
        assert!(Cmd::try_parse_from(["serve"]).is_err());
        assert!(Cmd::try_parse_from(["serve", "--index", "nolocation"]).is_err());
        assert!(Cmd::try_parse_from(["serve", "--index", "=file:///x"]).is_err());
    }
}
