//! Hostile clients over real TCP on 127.0.0.1: 1 000 slow clients that
//! trickle header lines while a legitimate client keeps being served, the
//! connection cap, an early 413 for a declared `Content-Length` over the
//! limit, the body read deadline, and shutdown with idle connections open.
//! Every loop is bounded in count and time.
//!
//! The slow-client test prints what it did:
//! `cargo test --test server_hostile -- --nocapture`.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parqivf::server::{ConnectionLimits, Limits, ServerConfig};
use serde_json::{Value, json};
use support::server::{BruteForce, FakeLoader, Running, start};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DIM: usize = 4;
const SEARCH: &str = "/v1/indexes/small/search";

async fn started(connections: ConnectionLimits) -> Running {
    let loader = Arc::new(FakeLoader::default());
    loader.publish(
        "memory:///small",
        Arc::new(BruteForce::random(50, DIM, 7, 1)),
    );
    let config = ServerConfig {
        indexes: vec![("small".into(), "memory:///small".into())],
        limits: Limits {
            max_body_bytes: 4096,
            ..Limits::default()
        },
        connections,
        ..ServerConfig::default()
    };
    start(config, loader).await
}

/// A raw HTTP/1.1 response: status, lower-cased headers, body.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads one response (headers, then `Content-Length` bytes) within `limit`;
/// `None` if it did not arrive complete in time.
async fn read_response<R: AsyncRead + Unpin>(
    stream: &mut R,
    limit: Duration,
) -> Option<RawResponse> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let length: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned();
                return Some(RawResponse {
                    status,
                    headers,
                    body,
                });
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

fn search_head(content_length: usize) -> String {
    format!(
        "POST {SEARCH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {content_length}\r\n\r\n"
    )
}

/// Raises this process's soft RLIMIT_NOFILE to `want` (at most the hard
/// limit); returns the soft limit in force afterwards.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not on every unix
fn raise_nofile(want: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        let target = want.min(limit.rlim_max as u64);
        if (limit.rlim_cur as u64) < target {
            let raised = libc::rlimit {
                rlim_cur: target as libc::rlim_t,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return target;
            }
        }
    }
    limit.rlim_cur as u64
}

#[cfg(not(unix))]
fn raise_nofile(_want: u64) -> u64 {
    1024
}

/// Connects, sends a request line and then one header line every `every`,
/// never finishing the head. Returns how long after connecting the server
/// closed the connection, or `None` if it was still open after `give_up`.
async fn slow_client(
    addr: std::net::SocketAddr,
    i: usize,
    every: Duration,
    give_up: Duration,
    connected: Arc<tokio::sync::Semaphore>,
) -> Option<Duration> {
    let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await;
    connected.add_permits(1);
    let mut stream = stream.ok()?.ok()?;
    let opened = Instant::now();
    let closed = || Some(opened.elapsed());
    if stream
        .write_all(format!("POST {SEARCH} HTTP/1.1\r\nHost: 127.0.0.1\r\n").as_bytes())
        .await
        .is_err()
    {
        return closed();
    }
    let mut buf = [0u8; 1024];
    for line in 0.. {
        if opened.elapsed() > give_up {
            return None;
        }
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return closed(),
                Ok(_) => {} // a response before EOF (none expected); keep reading
            },
            () = tokio::time::sleep(every) => {
                let header = format!("X-Slow-{i}-{line}: 1\r\n");
                if stream.write_all(header.as_bytes()).await.is_err() {
                    return closed();
                }
            }
        }
    }
    None
}

/// The value of an unlabelled metric line.
fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legitimate_clients_are_served_while_a_thousand_slow_clients_hold_connections() {
    const WANTED: usize = 1000;
    let header_timeout = Duration::from_secs(3);
    // Each slow client costs two descriptors here (its socket and the
    // server's); keep 256 for everything else.
    let nofile = raise_nofile(2 * WANTED as u64 + 512);
    let slow = WANTED.min((nofile.saturating_sub(256) / 2) as usize);
    if slow < WANTED {
        println!(
            "RLIMIT_NOFILE is {nofile} and cannot be raised: running {slow} slow clients instead of {WANTED}"
        );
    }
    assert!(slow >= 100, "only {nofile} file descriptors available");
    let server = started(ConnectionLimits {
        header_read_timeout: header_timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let started_at = Instant::now();
    let connected = Arc::new(tokio::sync::Semaphore::new(0));
    let clients: Vec<_> = (0..slow)
        .map(|i| {
            tokio::spawn(slow_client(
                server.addr,
                i,
                Duration::from_millis(500),
                Duration::from_secs(12),
                Arc::clone(&connected),
            ))
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(10), connected.acquire_many(slow as u32))
        .await
        .expect("slow clients connect within 10 s")
        .expect("semaphore open")
        .forget();
    let all_connected = started_at.elapsed();

    // A fresh connection per request: accepting must keep working too.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let metrics = client
        .get(server.url("/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .unwrap();
    let open_during = metric(&metrics, "parqivf_http_connections_open").expect("gauge");
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let sent = Instant::now();
        let response = client
            .post(server.url(SEARCH))
            .header("content-type", "application/json")
            .body(json!({"vector": [i as f32 / 20.0, 0, 0, 0], "k": 3}).to_string())
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("legitimate request answered");
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["results"][0]["hits"].as_array().map(Vec::len), Some(3));
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut closed_after = Vec::with_capacity(slow);
    for client in clients {
        let outcome = tokio::time::timeout(Duration::from_secs(20), client)
            .await
            .expect("slow client ends by itself")
            .expect("slow client task");
        closed_after.push(outcome);
    }
    let still_open = closed_after.iter().filter(|c| c.is_none()).count();
    let latest_close = closed_after
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or_default();
    // A connection task counts its timeout just after it closes the socket:
    // the last counts may trail the closes a client sees.
    let deadline = Instant::now() + Duration::from_secs(5);
    let timeouts = loop {
        let metrics = client
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let n = metric(&metrics, "parqivf_http_header_timeouts_total").expect("counter");
        if n as usize >= slow || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "server_hostile: {slow} slow clients connected in {:.2} s, {open_during} connections open \
         during the legitimate requests; 20 legitimate searches, slowest {:.0} ms; every slow \
         client closed by the server within {:.2} s of connecting (header read timeout {} s); \
         {timeouts} header timeouts counted; {:.1} s in all",
        all_connected.as_secs_f64(),
        slowest.as_secs_f64() * 1e3,
        latest_close.as_secs_f64(),
        header_timeout.as_secs(),
        started_at.elapsed().as_secs_f64(),
    );
    assert!(
        open_during as usize >= slow / 2,
        "only {open_during} connections open while {slow} slow clients held theirs"
    );
    assert!(
        slowest < Duration::from_secs(2),
        "a legitimate search took {slowest:?}"
    );
    assert_eq!(
        still_open, 0,
        "{still_open} slow clients were never disconnected"
    );
    assert!(
        latest_close < header_timeout + Duration::from_secs(3),
        "a slow client kept its connection {latest_close:?}"
    );
    assert!(timeouts as usize >= slow, "{timeouts} header timeouts");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let server = started(ConnectionLimits {
        max_connections: 8,
        header_read_timeout: Duration::from_secs(30),
        ..ConnectionLimits::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut ninth = TcpStream::connect(server.addr).await.expect("connect");
    ninth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_response(&mut ninth, Duration::from_millis(500))
            .await
            .is_none(),
        "a 9th connection was served while 8 (the cap) were open"
    );
    drop(idle.pop());
    let answer = read_response(&mut ninth, Duration::from_secs(5))
        .await
        .expect("served once a slot freed");
    assert_eq!(answer.status, 200, "{answer:?}");
    drop(idle);
    drop(ninth);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_oversized_body_gets_413_before_it_is_sent() {
    let server = started(ConnectionLimits::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(search_head(1_000_000_000).as_bytes())
        .await
        .unwrap();
    // Not one byte of the body is sent: the answer must not wait for it.
    let answer = read_response(&mut stream, Duration::from_secs(3))
        .await
        .expect("413 without reading the body");
    assert_eq!(answer.status, 413, "{answer:?}");
    let body = answer.json();
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1000000000") && message.contains("4096"),
        "{message}"
    );
    assert!(
        body["error"]["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_past_the_deadline_gets_408() {
    let deadline = Duration::from_secs(1);
    let server = started(ConnectionLimits {
        body_read_timeout: deadline,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let body = json!({"vector": [0.0, 0.0, 0.0, 0.0], "k": 3}).to_string();
    stream
        .write_all(search_head(body.len()).as_bytes())
        .await
        .unwrap();
    let sent = Instant::now();
    // One byte per 200 ms: each pause is short, the whole body is late.
    let writer = {
        let (mut reader, mut writer) = stream.into_split();
        let task = tokio::spawn(async move {
            for byte in body.bytes().take(25) {
                if writer.write_all(&[byte]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            writer
        });
        let answer = read_response(&mut reader, Duration::from_secs(4))
            .await
            .expect("an answer within 4 s");
        assert_eq!(answer.status, 408, "{answer:?}");
        assert_eq!(answer.json()["error"]["code"], "body_timeout", "{answer:?}");
        assert_eq!(answer.header("connection"), Some("close"));
        assert!(
            sent.elapsed() < deadline + Duration::from_secs(2),
            "408 after {:?}",
            sent.elapsed()
        );
        task
    };
    drop(writer.await);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_slow_heads_at_most_the_header_read_timeout() {
    let header_timeout = Duration::from_secs(1);
    let server = started(ConnectionLimits {
        header_read_timeout: header_timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let mut held = Vec::new();
    for i in 0..6 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        if i % 2 == 0 {
            // Half send part of a head; the other half send nothing.
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = Instant::now();
    server.shutdown().await;
    assert!(
        stopping.elapsed() < header_timeout + Duration::from_secs(2),
        "shutdown waited {:?} for connections that never sent a request",
        stopping.elapsed()
    );
}
