//! A native load client for `parqivf serve`: one query per HTTP request
//! (or `--batch B` a request, as `"vectors"`; with `--packed` each vector
//! is sent as base64 of its little-endian floats), sequentially on one
//! keep-alive connection, as `scripts/bench/serve_latency.py` sends them,
//! but with a client whose own
//! cost is a few microseconds instead of Python's tens. On a 2-vCPU host the
//! Python client's parsing and framing took a share of every request's time
//! that the server never spends; this client measures what a fast caller
//! (a service in Rust, Go or C) sees.
//!
//! Each request is written in one send (headers and body); the response is
//! read by its `Content-Length`. Bodies are serialised before the clock
//! starts, and the response is parsed after it stops, so a latency is the
//! exchange alone. A warming pass over the measured queries comes first,
//! then `--reps R` measured passes (default 1): the percentiles are over
//! every measured request, the QPS is the best pass's (as `parqivf search
//! --reps` and the FAISS scripts report theirs).
//! It prints one JSON line with the fields of `serve_latency.py`: p50/p99 of
//! a request in ms, queries a second, recall@k against the ground truth (and
//! `batch`), and with `--idle-floor 0`
//! the floor of an HTTP exchange with this client (1,000 `GET /healthz` back
//! to back).
//!
//! ```sh
//! cargo build --release --example serve_client
//! target/release/examples/serve_client http://127.0.0.1:8093/v1/indexes/i/search \
//!     query.npy gt.npy --n 1000 --idle-floor 0
//! ```
use anyhow::{Context, anyhow, bail};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Instant;

struct Args {
    url: String,
    queries: String,
    gt: String,
    n: usize,
    k: usize,
    batch: usize,
    reps: usize,
    packed: bool,
    label: String,
    idle_floor: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let usage = "usage: serve_client URL QUERIES.npy GT.npy [--n 300] [--k 10] [--batch 1] [--reps 1] [--packed] [--label L] [--idle-floor 0]";
    let mut positional = Vec::new();
    let (mut n, mut k, mut batch, mut reps) = (300, 10, 1, 1);
    let (mut label, mut idle_floor, mut packed) = (String::new(), false, false);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{arg} needs a value; {usage}"))
        };
        match arg.as_str() {
            "--n" => n = value()?.parse().context("--n")?,
            "--k" => k = value()?.parse().context("--k")?,
            "--batch" => batch = value()?.parse().context("--batch")?,
            "--reps" => reps = value()?.parse().context("--reps")?,
            "--packed" => packed = true,
            "--label" => label = value()?,
            "--idle-floor" => {
                let ms: f64 = value()?.parse().context("--idle-floor")?;
                if ms != 0.0 {
                    bail!(
                        "--idle-floor: only 0 (requests back to back) is measured here, not {ms}"
                    );
                }
                idle_floor = true;
            }
            _ if arg.starts_with("--") => bail!("unknown flag {arg}; {usage}"),
            _ => positional.push(arg),
        }
    }
    let [url, queries, gt]: [String; 3] = positional
        .try_into()
        .map_err(|p: Vec<String>| anyhow!("{} arguments given; {usage}", p.len()))?;
    if batch == 0 || reps == 0 {
        bail!("--batch and --reps: at least 1 (given {batch} and {reps})");
    }
    Ok(Args {
        url,
        queries,
        gt,
        n,
        k,
        batch,
        reps,
        packed,
        label,
        idle_floor,
    })
}

/// One keep-alive HTTP/1.1 connection; each request written in one send.
struct Connection {
    host: String,
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(host: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            host: host.to_string(),
            reader: BufReader::new(stream),
        })
    }

    /// The request's bytes: headers and body in one buffer.
    fn frame(&self, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    }

    /// Send one framed request and read its response: (status, body).
    fn exchange(&mut self, request: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
        self.reader.get_mut().write_all(request)?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("not an HTTP status line: {line:?}"))?;
        let mut length = None;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((&line, ""));
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.trim().parse::<usize>()?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                bail!("a chunked response is not read by this client");
            }
        }
        let length = length.ok_or_else(|| anyhow!("a response without Content-Length"))?;
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        Ok((status, body))
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    // numpy's default (linear interpolation between closest ranks), as
    // serve_latency.py reports.
    let at = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn main() -> anyhow::Result<()> {
    let a = parse_args()?;
    let rest = a
        .url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("{}: only http:// URLs", a.url))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let queries = parqivf::vector_file::read_vectors(Path::new(&a.queries))?;
    let n = a.n.min(queries.n);
    let truth = parqivf::vector_file::read_truth(Path::new(&a.gt), n, a.k)?;
    let mut conn = Connection::open(host)?;
    let requests: Vec<Vec<u8>> = queries.data[..n * queries.dim]
        .chunks(a.batch * queries.dim)
        .map(|qs| {
            let vectors: Vec<serde_json::Value> = qs
                .chunks_exact(queries.dim)
                .map(|q| match a.packed {
                    true => parqivf::server::body_vector::pack(q).into(),
                    false => q.into(),
                })
                .collect();
            let body = match <[_; 1]>::try_from(vectors) {
                Ok([one]) => serde_json::json!({ "vector": one, "k": a.k }),
                Err(many) => serde_json::json!({ "vectors": many, "k": a.k }),
            };
            conn.frame("POST", path, body.to_string().as_bytes())
        })
        .collect();
    let mut latencies = Vec::with_capacity(requests.len() * a.reps);
    let (mut hits, expected) = (0, truth.iter().map(Vec::len).sum::<usize>());
    let mut best_ms = f64::INFINITY;
    for pass in 0..=a.reps {
        let (measured, scored) = (pass > 0, pass == 1);
        let mut pass_ms = 0.0;
        for (i, request) in requests.iter().enumerate() {
            let start = Instant::now();
            let (status, body) = conn.exchange(request)?;
            let took = start.elapsed().as_secs_f64() * 1000.0;
            if status != 200 {
                bail!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                );
            }
            pass_ms += took;
            if measured {
                latencies.push(took);
            }
            if scored {
                let out: serde_json::Value = serde_json::from_slice(&body)?;
                let first = i * a.batch;
                for (j, want) in truth[first..(first + a.batch).min(n)].iter().enumerate() {
                    let found = out["results"][j]["hits"].as_array().ok_or_else(|| {
                        anyhow!("query {}: no results[{j}].hits in the response", first + j)
                    })?;
                    hits += found
                        .iter()
                        .filter_map(|h| h["rowid"].as_i64())
                        .filter(|id| want.contains(id))
                        .count();
                }
            }
        }
        if measured {
            best_ms = best_ms.min(pass_ms);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let mut out = serde_json::json!({
        "label": a.label, "client": "native", "queries": n, "batch": a.batch, "reps": a.reps,
        "packed": a.packed,
        "p50_ms": round3(percentile(&latencies, 50.0)),
        "p99_ms": round3(percentile(&latencies, 99.0)),
        "qps": (n as f64 / (best_ms / 1000.0) * 10.0).round() / 10.0,
        "recall": (hits as f64 / expected.max(1) as f64 * 1e4).round() / 1e4,
    });
    if a.idle_floor {
        let healthz = conn.frame("GET", "/healthz", b"");
        let mut floor = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let start = Instant::now();
            conn.exchange(&healthz)?;
            floor.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        let mean = floor.iter().sum::<f64>() / floor.len() as f64;
        floor.sort_by(f64::total_cmp);
        out["idle_floor_p50_ms"] = round3(percentile(&floor, 50.0)).into();
        out["idle_floor_mean_ms"] = round3(mean).into();
    }
    println!("{out}");
    Ok(())
}
