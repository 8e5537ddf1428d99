//! The disk tier (`--cache-dir`): a second open of the same folder (a
//! restart) answers from it without one store request for postings and
//! with the same answers; `warm` fills it; a process killed with SIGKILL
//! while filling it leaves nothing that is served wrong; two processes
//! share one folder and its bound; a changed object is never served from
//! its old bytes.

use crate::support;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::index::{Index, IndexOptions, Preload, SearchParams, SearchResult};
use parqivf::store::counting::CountingStore;
use parqivf::store::disk_cache::{BLOCK_DATA, DiskCache, ENTRY_BYTES, SPARSE_RUN};
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::fixtures::{Layout, dataset, hierarchy, rowids, write_index};

const DIM: usize = 64;
const ROWS: usize = 12000;

/// A snapshot folder `idx` of many small postings files under `dir`.
async fn index_in(dir: &std::path::Path) -> Vec<f32> {
    index_of(dir, 0).await
}

/// As [`index_in`], each rowid plus `shift`.
async fn index_of(dir: &std::path::Path, shift: i64) -> Vec<f32> {
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    let data = dataset(ROWS, DIM, 11);
    let h = hierarchy(&data, DIM, 4, 32, 5);
    let ids: Vec<i64> = rowids(ROWS).iter().map(|id| id + shift).collect();
    write_index(
        store,
        &Path::from("idx"),
        &h,
        &data,
        &ids,
        Layout::default(),
    )
    .await;
    data
}

fn params() -> SearchParams {
    SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    }
}

fn ids(results: &[SearchResult]) -> Vec<Vec<i64>> {
    results
        .iter()
        .map(|r| r.hits.iter().map(|h| h.rowid).collect())
        .collect()
}

async fn open(store: &CountingStore, cache: Option<Arc<DiskCache>>) -> Index {
    let options = IndexOptions {
        disk_cache: cache,
        ..IndexOptions::default()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(store.clone());
    Index::open_with(store, &Path::from("idx"), options, Preload::None)
        .await
        .unwrap()
}

/// `du` of a folder: allocated bytes of every file and folder in it.
fn du(dir: &std::path::Path) -> u64 {
    let mut total = std::fs::metadata(dir).unwrap().blocks() * 512;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            du(&e.path())
        } else {
            m.blocks() * 512
        };
    }
    total
}

#[tokio::test]
async fn a_restart_answers_from_the_disk_tier_without_store_requests() {
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let counting = CountingStore::new(local);
    let queries = data[..20 * DIM].to_vec();
    let expected = open(&counting, None)
        .await
        .search_batch(&queries, &params())
        .await
        .unwrap();

    let cache_dir = dir.path().join("cache");
    let cold = open(
        &counting,
        Some(Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap())),
    )
    .await;
    let first = cold.search_batch(&queries, &params()).await.unwrap();
    assert_eq!(ids(&first), ids(&expected));
    // Cold: the store serves the footers; their blocks may already hold
    // some of the row groups read next.
    assert!(first[0].stats.requests > 0);
    // The entries the reads fetched are written behind them.
    cold.disk_cache().unwrap().settle().await;

    // A new handle on the folder: what a restarted process sees.
    let restarted = open(
        &counting,
        Some(Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap())),
    )
    .await;
    let before = counting.counts();
    let again = restarted.search_batch(&queries, &params()).await.unwrap();
    let io = counting.counts() - before;
    assert_eq!(ids(&again), ids(&expected));
    for (a, e) in again.iter().zip(&expected) {
        let d: Vec<f32> = a.hits.iter().map(|h| h.distance).collect();
        let x: Vec<f32> = e.hits.iter().map(|h| h.distance).collect();
        assert_eq!(d, x, "same bytes, same distances");
    }
    assert_eq!(
        io.get_requests, 0,
        "footers and row groups from the disk tier"
    );
    let stats = again[0].stats;
    assert_eq!((stats.requests, stats.bytes, stats.rounds), (0, 0, 0));
    assert!(stats.disk_hits > 0 && stats.disk_bytes > 0, "{stats:?}");
    let state = restarted.disk_cache().unwrap().state();
    assert_eq!((state.misses, state.corrupt), (0, 0));
}

/// The same object path and size with other bytes (the rows renumbered: a
/// rebuilt index, a new pin) is never answered from the bytes cached for
/// the old one.
#[tokio::test]
async fn a_changed_object_is_never_served_from_old_cache_bytes() {
    let (old_dir, new_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let data = index_of(old_dir.path(), 0).await;
    // Rowids one higher: the same deltas and (but where a varint grows)
    // the same sizes, other bytes.
    index_of(new_dir.path(), 1).await;
    let at = |dir: &std::path::Path| -> CountingStore {
        CountingStore::new(Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap()))
    };
    let cache_dir = old_dir.path().join("cache");
    let cache = || Some(Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap()));
    let old = open(&at(old_dir.path()), cache()).await;
    old.warm().await.unwrap();
    let rebuilt = at(new_dir.path());
    let new = open(&rebuilt, cache()).await;
    let same_name_and_size = old
        .manifest()
        .files
        .iter()
        .zip(&new.manifest().files)
        .filter(|(a, b)| a.path == b.path && a.size == b.size && a.sha256 != b.sha256)
        .count();
    assert!(
        same_name_and_size > 0,
        "only the pin tells the objects apart"
    );
    let queries = &data[..20 * DIM];
    let expected = open(&rebuilt, None)
        .await
        .search_batch(queries, &params())
        .await
        .unwrap();
    let got = new.search_batch(queries, &params()).await.unwrap();
    assert_eq!(ids(&got), ids(&expected));
    assert!(
        got[0].stats.requests > 0,
        "the new objects' bytes come from the store"
    );
    assert_eq!(
        new.disk_cache().unwrap().state().corrupt,
        0,
        "keys differ: misses, not failed checks"
    );
}

/// The bytes of an index's postings files, and the most the disk tier may
/// keep twice: a footer is read on the fixed grid before its file's units
/// are known, in at most three blocks (a tail of up to 64 KiB), which the
/// fill then keeps again as the units they overlap.
fn file_bytes(index: &Index) -> (u64, u64) {
    let files = &index.manifest().files;
    let total = files.iter().map(|f| f.size).sum();
    let footers = files.iter().map(|f| f.size.min(3 * BLOCK_DATA)).sum();
    (total, footers)
}

#[tokio::test]
async fn warm_copies_every_postings_object_into_the_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let counting = CountingStore::new(local);
    let cache = Arc::new(DiskCache::open(dir.path().join("cache"), 64 << 20).unwrap());
    let index = open(&counting, Some(Arc::clone(&cache))).await;
    index.warm().await.unwrap();
    let (total, footers) = file_bytes(&index);
    let written = cache.state().written_bytes;
    assert!(
        (total..=total + footers).contains(&written),
        "every byte of every postings file, the footers' blocks twice at most: \
         {written} bytes written, files {total}, footers' blocks {footers}"
    );
    let before = counting.counts();
    let p = SearchParams {
        nprobe: Some(32),
        ..params()
    };
    let all = index.search_batch(&data[..50 * DIM], &p).await.unwrap();
    assert_eq!((counting.counts() - before).get_requests, 0);
    assert_eq!(all[0].stats.requests, 0);
    // A second warm fetches nothing.
    let stats = index.warm().await.unwrap();
    assert_eq!(stats.requests, 0);
}

fn parqivf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_parqivf"))
}

/// `parqivf search --json` rowids of `queries`, with `extra` flags.
fn search_cli(
    index: &std::path::Path,
    queries: &std::path::Path,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    search_json(index, queries, extra)
        .into_iter()
        .map(|v| v["rowids"].clone())
        .collect()
}

/// Each query's JSON object from `parqivf search --k 10 --nprobe 8 --json`
/// plus `extra`.
fn search_json(
    index: &std::path::Path,
    queries: &std::path::Path,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    let out = parqivf()
        .args([
            "search",
            "--index",
            index.to_str().unwrap(),
            "--queries",
            queries.to_str().unwrap(),
        ])
        .args(["--k", "10", "--nprobe", "8", "--json"])
        .args(extra)
        .output()
        .unwrap();
    support::cli::json_lines(out)
}

fn entries(cache: &std::path::Path) -> usize {
    let Ok(subs) = std::fs::read_dir(cache.join("blocks")) else {
        return 0;
    };
    subs.map(|s| std::fs::read_dir(s.unwrap().path()).map_or(0, |d| d.count()))
        .sum()
}

/// SIGKILL at several moments of a fill, and entries torn and flipped by
/// hand: the next process answers exactly as without a cache, and the
/// index still verifies.
#[tokio::test]
async fn a_fill_killed_at_any_moment_never_serves_a_wrong_byte() {
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let index = dir.path().join("idx");
    let queries = dir.path().join("q.npy");
    support::files::write_npy(&queries, &data[..30 * DIM], DIM);
    let expected = search_cli(&index, &queries, &[]);
    let cache = dir.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    for wait_entries in [0, 1, 8, 40] {
        let mut child = parqivf()
            .args(["--store-latency", "ttfb=20ms,jitter=0.5,seed=3"])
            .args([
                "warm",
                "--index",
                index.to_str().unwrap(),
                "--cache-dir",
                cache_arg,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut waited = 0;
        while entries(&cache) < wait_entries && waited < 2000 {
            std::thread::sleep(Duration::from_millis(1));
            waited += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            search_cli(&index, &queries, &["--cache-dir", cache_arg]),
            expected
        );
    }
    // Entries damaged behind the cache's back are misses, never answers.
    let mut damaged = 0;
    for sub in std::fs::read_dir(cache.join("blocks")).unwrap() {
        for entry in std::fs::read_dir(sub.unwrap().path()).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            if damaged % 2 == 0 {
                let at = bytes.len() - 1;
                bytes[at] ^= 0xff;
            } else {
                bytes.truncate(bytes.len() / 2);
            }
            std::fs::write(&path, bytes).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    assert_eq!(
        search_cli(&index, &queries, &["--cache-dir", cache_arg]),
        expected
    );
    let verify = parqivf()
        .args(["verify", index.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Two processes searching at once through one small folder: both answer
/// as without a cache, and the folder stays within its bound (1 %).
#[tokio::test]
async fn two_processes_share_one_folder_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let index = dir.path().join("idx");
    let queries = dir.path().join("q.npy");
    support::files::write_npy(&queries, &data[..200 * DIM], DIM);
    let expected = search_cli(&index, &queries, &[]);
    let cache = dir.path().join("cache");
    let bound = 16 * ENTRY_BYTES;
    assert!(du(&index) > 2 * bound, "the index is larger than the bound");
    let size = bound.to_string();
    let flags = [
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-size",
        &size,
        "--batch-size",
        "1",
    ];
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| s.spawn(|| search_cli(&index, &queries, &flags)))
            .collect();
        for run in runs {
            assert_eq!(run.join().unwrap(), expected);
        }
    });
    let held = du(&cache);
    assert!(
        held as f64 <= bound as f64 * 1.01,
        "{held} bytes held, bound {bound}"
    );
}

/// `serve` with a disk tier: `POST /v1/indexes/{name}/warm` (token only)
/// copies every postings byte into it; then a query costs no store request,
/// and the index info and `/metrics` report the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_warms_the_disk_tier_and_reports_it() {
    use parqivf::server::index_backend::IndexLoader;
    use parqivf::server::{AuthToken, Server, ServerConfig};
    const TOKEN: &str = "disk-cache-test-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let cache = Arc::new(DiskCache::open(dir.path().join("cache"), 64 << 20).unwrap());
    let loader = IndexLoader {
        options: IndexOptions {
            disk_cache: Some(Arc::clone(&cache)),
            ..IndexOptions::default()
        },
        ..IndexLoader::default()
    };
    let location = dir.path().join("idx").display().to_string();
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![("docs".into(), location)],
        auth_token: Some(AuthToken::new(TOKEN).unwrap()),
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(loader)).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let warm = format!("{base}/v1/indexes/docs/warm");
    assert_eq!(
        client.post(&warm).send().await.unwrap().status(),
        401,
        "the token is needed"
    );

    let r = client.post(&warm).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let warmed: serde_json::Value = r.json().await.unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let index = open(&CountingStore::new(local), None).await;
    let (total, footers) = file_bytes(&index);
    crate::server::assert_matches("WarmOutcome", &warmed);
    assert_eq!(warmed["index"], "docs");
    assert_eq!(
        warmed["files"].as_u64(),
        Some(index.manifest().files.len() as u64),
        "{warmed}"
    );
    let written = warmed["disk_cache"]["written_bytes"].as_u64().unwrap();
    assert!((total..=total + footers).contains(&written), "{warmed}");
    assert!(warmed["store_requests"].as_u64().unwrap() > 0, "{warmed}");

    let r = client
        .post(format!("{base}/v1/indexes/docs/search"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "vector": &data[..DIM], "k": 10, "nprobe": 8, "include": ["stats"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    let stats = &body["results"][0]["stats"];
    assert_eq!(stats["requests"], 0, "{stats}");
    assert!(stats["disk_hits"].as_u64().unwrap() > 0, "{stats}");

    let info: serde_json::Value = client
        .get(format!("{base}/v1/indexes/docs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    crate::server::assert_matches("IndexInfo", &info);
    let disk = &info["cache"]["disk"];
    assert_eq!(disk["capacity_bytes"].as_u64(), Some(64 << 20), "{info}");
    assert!(disk["hits"].as_u64().unwrap() > 0, "{info}");
    let metrics = client
        .get(format!("{base}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "parqivf_disk_cache_capacity_bytes 67108864",
        "parqivf_disk_cache_hit_ratio ",
        "parqivf_disk_cache_hits_total ",
        "parqivf_disk_cache_evictions_total 0",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "no {name:?} in\n{metrics}"
        );
    }
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// The RAM tier (`--postings-cache-size`): the same query again in one
/// `search` process reads no row group (every one decoded before is held),
/// where without the flag it reads them all again; answers are the same.
#[tokio::test]
async fn the_ram_tier_serves_a_repeated_query_without_row_group_reads() {
    let dir = tempfile::tempdir().unwrap();
    let data = index_in(dir.path()).await;
    let index = dir.path().join("idx");
    let queries = dir.path().join("q.npy");
    let twice: Vec<f32> = [&data[..DIM], &data[..DIM]].concat();
    support::files::write_npy(&queries, &twice, DIM);
    let run = |extra: &[&str]| {
        search_json(
            &index,
            &queries,
            &[&["--stats", "--batch-size", "1"], extra].concat(),
        )
    };
    let groups = |v: &serde_json::Value, key: &str| v["stats"][key].as_u64().unwrap();
    let without = run(&[]);
    let with = run(&["--postings-cache-size", "64MiB"]);
    for answers in [&without, &with] {
        assert_eq!(answers[0]["rowids"], without[0]["rowids"]);
        assert_eq!(answers[1]["rowids"], without[0]["rowids"]);
        assert!(groups(&answers[0], "row_groups_read") > 0);
    }
    let planned = groups(&with[1], "planned_row_groups");
    assert_eq!(groups(&with[1], "row_groups_cached"), planned);
    assert_eq!(groups(&with[1], "row_groups_read"), 0);
    assert_eq!(groups(&without[1], "row_groups_read"), planned);
}

/// Each of `queries` searched alone, as `serve` answers them.
async fn one_at_a_time(index: &Index, queries: &[f32]) -> Vec<SearchResult> {
    let mut out = Vec::new();
    for q in queries.chunks(DIM) {
        out.push(index.search(q, &params()).await.unwrap());
    }
    out
}

/// With the codes in memory and a cold disk tier, a query's re-rank asks
/// the store for about its pages' bytes, as without the tier, not for the
/// 64 KiB blocks around them: those are filled behind it (`fill_requests`). Once
/// they are, the same queries send no request.
#[tokio::test]
async fn a_cold_disk_tier_reranks_from_the_pages_bytes_and_fills_behind() {
    use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let data = dataset(ROWS, DIM, 12);
    let build_params = BuildParams {
        nlist: 32,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let source = Arc::new(ArraySource::new(data.clone(), DIM, "generated").unwrap());
    build(
        source,
        Arc::clone(&local),
        &Path::from("idx"),
        &build_params,
    )
    .await
    .unwrap();
    let counting = CountingStore::new(local);
    let open_codes = |disk_cache: Option<Arc<DiskCache>>| {
        let store: Arc<dyn ObjectStore> = Arc::new(counting.clone());
        async move {
            let options = IndexOptions {
                disk_cache,
                ..IndexOptions::default()
            };
            Index::open_with(store, &Path::from("idx"), options, Preload::Codes)
                .await
                .unwrap()
        }
    };
    let queries = &data[..10 * DIM];
    let plain = one_at_a_time(&open_codes(None).await, queries).await;
    let cache = Arc::new(DiskCache::open(dir.path().join("cache"), 64 << 20).unwrap());
    let index = open_codes(Some(Arc::clone(&cache))).await;
    cache.settle().await;
    let fills = cache.state().fill_requests;
    // Each query asks a few pages of each 64 KiB block it touches.
    let cold = one_at_a_time(&index, queries).await;
    assert_eq!(ids(&cold), ids(&plain));
    for (c, p) in cold.iter().zip(&plain) {
        assert!(p.stats.pages_read > 0, "{:?}", p.stats);
        // A run the read asks a quarter of or more (a short last piece of
        // a chunk) is fetched whole: never more than that.
        assert!(
            c.stats.bytes <= SPARSE_RUN * p.stats.bytes,
            "the pages' bytes, {SPARSE_RUN}× at most: {:?} against {:?}",
            c.stats,
            p.stats
        );
    }
    cache.settle().await;
    assert!(cache.state().fill_requests > fills, "{:?}", cache.state());
    let warm = one_at_a_time(&index, queries).await;
    assert_eq!(ids(&warm), ids(&plain));
    for w in &warm {
        assert_eq!(w.stats.requests, 0, "{:?}", w.stats);
        assert!(w.stats.disk_hits > 0, "{:?}", w.stats);
    }
}
