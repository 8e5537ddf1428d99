//! `parqivf serve`: parses the flags into a [`ServerConfig`], sets up
//! structured logging (`RUST_LOG` filter, `--log-json` for JSON lines), opens
//! every index, and serves until SIGINT/SIGTERM. Exit code 0 after a clean
//! shutdown, 2 when an index cannot be opened, the address cannot be bound,
//! the auth token is unusable, or the address is not loopback and no token is
//! given. The token comes from `--auth-token-file PATH` or the environment
//! variable `PARQIVF_AUTH_TOKEN` (never a flag value, which `ps` would show).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use parqivf::index::Preload;
use parqivf::server::{AuthToken, BackendLoader, ConnectionLimits, Limits, ServerConfig};
use parqivf::store::options::StoreOptions;

/// The environment variable holding the bearer token itself.
pub const TOKEN_ENV: &str = "PARQIVF_AUTH_TOKEN";

/// The RAM tier of each served index unless `--postings-cache-size` says
/// otherwise: a server's warm queries keep their lists decoded, so a query
/// whose lists are kept sends the store only its re-rank's pages (one
/// round, as `--preload codes`). 256 MiB holds every list of 1M × 128-d
/// `pq4fs` (≈ 45 MB, `rows × (8 + code bytes)` and the offset indexes) and
/// the hot lists of a larger index.
pub const SERVE_POSTINGS_CACHE_BYTES: usize = 256 << 20;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// An index to serve, as NAME=LOCATION (repeatable). NAME appears in URLs.
    #[arg(long = "index", value_name = "NAME=LOCATION", value_parser = parse_index, required = true)]
    pub indexes: Vec<(String, String)>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Hold postings in memory at start-up: `codes` (codes and rowids; the
    /// re-rank reads f32 pages from storage: for tables larger than RAM) or
    /// `all` (everything: no IO per query, most memory). `--preload` alone
    /// is `all`. See docs/query.md for the memory each costs.
    #[arg(long, value_name = "codes|all", num_args = 0..=1, default_value = "none", default_missing_value = "all")]
    pub preload: Preload,
    /// Read every footer at start-up and on reload, so each query needs one
    /// round of store requests (implied by --preload); with --cache-dir, also
    /// copy every postings object into the disk cache.
    #[arg(long)]
    pub warm: bool,
    #[command(flatten)]
    pub cache: super::cache_args::CacheArgs,
    /// Largest request body in bytes; larger bodies get 413.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// Most query vectors in one request.
    #[arg(long, default_value_t = Limits::default().max_batch)]
    pub max_batch: usize,
    /// Largest accepted k.
    #[arg(long, default_value_t = Limits::default().max_k)]
    pub max_k: usize,
    /// Lists probed by a request that names neither `nprobe` nor
    /// `target_recall` (at most the index's nlist). Default: the index's
    /// own, recall 0.95 where it has a calibration, else 16 lists.
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// The recall probed for by a request that names neither (in (0, 1];
    /// the index needs its calibration).
    #[arg(long, value_name = "R", conflicts_with = "nprobe")]
    pub target_recall: Option<f64>,
    /// Queries admitted at once (running or waiting); beyond this, 429.
    #[arg(long, default_value_t = ServerConfig::default().queue)]
    pub queue: usize,
    /// Searches running at once, their compute on the rayon pool (default:
    /// `--threads`, else the CPU count).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Compute threads (the rayon pool), and at most as many tokio threads
    /// for HTTP and storage IO (default: all cores for each). `--threads 1`
    /// serves on one core's worth of compute, as a one-thread FAISS
    /// baseline runs; on a small host, fewer idle threads also mean fewer
    /// wake-ups a request (docs/benchmarks.md, "A native client").
    #[arg(long, value_parser = super::threads::parse_threads)]
    pub threads: Option<NonZeroUsize>,
    /// Re-open each index location every SECS seconds and swap in a newly published snapshot.
    #[arg(long, value_name = "SECS")]
    pub reload_interval: Option<u64>,
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
    /// File holding the bearer token clients must send (`Authorization: Bearer
    /// <token>`); surrounding whitespace is ignored. Or set PARQIVF_AUTH_TOKEN.
    /// Required when --addr is not loopback; reload is disabled without it.
    #[arg(long, value_name = "PATH")]
    pub auth_token_file: Option<PathBuf>,
    /// Connections open at once; further ones wait in the listen backlog.
    #[arg(long, default_value_t = ConnectionLimits::default().max_connections)]
    pub max_connections: usize,
    /// Longest wait for a complete request head (humantime, e.g. 10s); slower
    /// or idle connections are closed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,
    /// Longest wait for a complete request body after its head (else 408).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub body_read_timeout: Duration,
    /// Shortest time between two client-requested reloads of one index (else 429).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub reload_min_interval: Duration,
    /// Re-run this share of queries (0..=1) exhaustively in the background
    /// and export their measured recall next to the estimate (Prometheus
    /// `parqivf_recall_measured`, `parqivf_recall_estimated`); a warning is
    /// logged when the two drift apart.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = share)]
    pub recall_sample: f64,
    /// The share of the time the recall re-runs may keep their worker busy.
    #[arg(long, value_name = "SHARE", default_value_t = parqivf::server::DEFAULT_RECALL_CPU_SHARE, value_parser = share)]
    pub recall_sample_cpu: f64,
}

/// A share in 0..=1.
fn share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("expected a share between 0 and 1, got {value:?}")),
    }
}

/// The token from `file` or the value of `PARQIVF_AUTH_TOKEN` (`env`), not both.
fn auth_token(file: Option<&Path>, env: Option<String>) -> anyhow::Result<Option<AuthToken>> {
    let text = match (file, env) {
        (Some(_), Some(_)) => {
            bail!("give the auth token by --auth-token-file or {TOKEN_ENV}, not both")
        }
        (Some(path), None) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the auth token file {}", path.display()))?,
        (None, Some(value)) => value,
        (None, None) => return Ok(None),
    };
    let source = file.map_or_else(|| TOKEN_ENV.to_owned(), |p| p.display().to_string());
    AuthToken::new(text.trim())
        .map(Some)
        .with_context(|| format!("auth token from {source}"))
}

fn parse_index(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, location)) if !name.is_empty() && !location.is_empty() => {
            Ok((name.to_owned(), location.to_owned()))
        }
        _ => Err(format!("expected NAME=LOCATION, got {value:?}")),
    }
}

fn config(args: &Args, auth_token: Option<AuthToken>) -> ServerConfig {
    let defaults = ServerConfig::default();
    ServerConfig {
        addr: args.addr,
        indexes: args.indexes.clone(),
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_batch: args.max_batch,
            max_k: args.max_k,
            default_nprobe: args.nprobe,
            default_target_recall: args.target_recall,
            ..Limits::default()
        },
        queue: args.queue,
        workers: args
            .workers
            .or(args.threads.map(NonZeroUsize::get))
            .unwrap_or(defaults.workers),
        reload_interval: args.reload_interval.map(Duration::from_secs),
        connections: ConnectionLimits {
            max_connections: args.max_connections,
            header_read_timeout: args.header_read_timeout,
            body_read_timeout: args.body_read_timeout,
        },
        auth_token,
        reload_min_interval: args.reload_min_interval,
        recall_sampling: parqivf::server::recall_sample::RecallSampling {
            rate: args.recall_sample,
            cpu_share: args.recall_sample_cpu.max(0.001),
        },
    }
}

/// The loader opening locations at their current snapshot with `index::Index`.
fn index_loader(args: &Args, store: StoreOptions) -> anyhow::Result<Arc<dyn BackendLoader>> {
    Ok(Arc::new(parqivf::server::index_backend::IndexLoader {
        preload: args.preload,
        warm: args.warm,
        store,
        options: index_options(args)?,
    }))
}

/// Each served index's reader options: the cache flags, with the RAM tier
/// at [`SERVE_POSTINGS_CACHE_BYTES`] unless `--postings-cache-size` is given.
fn index_options(args: &Args) -> anyhow::Result<parqivf::index::IndexOptions> {
    args.cache.index_options(SERVE_POSTINGS_CACHE_BYTES)
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

    let token = auth_token(
        args.auth_token_file.as_deref(),
        std::env::var(TOKEN_ENV).ok().filter(|v| !v.is_empty()),
    )?;
    let config = config(&args, token);
    let loader = index_loader(&args, store)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads.map(NonZeroUsize::get) {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .context("configuring threads")?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        runtime.worker_threads(threads.min(cores));
    }
    let runtime = runtime.enable_all().build().context("starting tokio")?;
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
            "--max-connections",
            "100",
            "--header-read-timeout",
            "2s",
            "--body-read-timeout",
            "500ms",
            "--reload-min-interval",
            "5s",
        ])
        .unwrap();
        let token = AuthToken::new("0123456789abcdef").unwrap();
        let c = config(&cmd.args, Some(token.clone()));
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
        assert_eq!(
            c.connections,
            ConnectionLimits {
                max_connections: 100,
                header_read_timeout: Duration::from_secs(2),
                body_read_timeout: Duration::from_millis(500),
            }
        );
        assert_eq!(
            (c.auth_token, c.reload_min_interval),
            (Some(token), Duration::from_secs(5))
        );
        let defaults = Cmd::try_parse_from(["serve", "--index", "a=file:///x"]).unwrap();
        assert_eq!(
            config(&defaults.args, None).connections,
            ConnectionLimits::default()
        );
    }

    #[test]
    fn threads_bound_the_searches_at_once_unless_workers_say() {
        let parse = |extra: &[&str]| {
            let argv = [&["serve", "--index", "a=file:///x"], extra].concat();
            config(&Cmd::try_parse_from(argv).unwrap().args, None).workers
        };
        assert_eq!(parse(&["--threads", "1"]), 1);
        assert_eq!(parse(&["--threads", "1", "--workers", "3"]), 3);
        assert_eq!(parse(&[]), ServerConfig::default().workers);
    }

    #[test]
    fn a_served_index_keeps_its_lists_in_ram_unless_told_not_to() {
        let options = |extra: &[&str]| {
            let mut argv = vec!["serve", "--index", "a=file:///x"];
            argv.extend_from_slice(extra);
            index_options(&Cmd::try_parse_from(argv).unwrap().args)
                .unwrap()
                .postings_cache_bytes
        };
        assert_eq!(options(&[]), SERVE_POSTINGS_CACHE_BYTES);
        assert_eq!(options(&["--postings-cache-size", "0"]), 0);
        assert_eq!(options(&["--postings-cache-size", "1GiB"]), 1 << 30);
    }

    #[test]
    fn token_comes_from_a_file_or_the_environment_not_both() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "0123456789abcdef0123\n").unwrap();
        let want = AuthToken::new("0123456789abcdef0123").unwrap();
        assert_eq!(
            auth_token(Some(file.as_path()), None).unwrap(),
            Some(want.clone())
        );
        assert_eq!(
            auth_token(None, Some("0123456789abcdef0123".into())).unwrap(),
            Some(want)
        );
        assert_eq!(auth_token(None, None).unwrap(), None);
        let both = auth_token(Some(file.as_path()), Some("x".into())).unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
        let short = auth_token(None, Some("abc".into())).unwrap_err();
        assert!(format!("{short:#}").contains("at least 16"), "{short:#}");
        let missing = auth_token(Some(dir.path().join("nope").as_path()), None).unwrap_err();
        assert!(missing.to_string().contains("nope"), "{missing}");
    }

    #[test]
    fn index_flag_needs_name_and_location() {
        assert!(Cmd::try_parse_from(["serve"]).is_err());
        assert!(Cmd::try_parse_from(["serve", "--index", "nolocation"]).is_err());
        assert!(Cmd::try_parse_from(["serve", "--index", "=file:///x"]).is_err());
    }
}
