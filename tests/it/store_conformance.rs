//! One store-conformance suite for every backend available in the run:
//! InMemory, LocalFileSystem in a temp dir, and S3 on `moto_server` (when
//! `scripts/test.sh` started one; required in CI). The same build, publish,
//! verify and search calls must give the same bytes and the same answers.

use crate::support;

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::index::{Index, IndexError, SearchParams};
use parqivf::probe::ProbeError;
use parqivf::store::StoreError;
use parqivf::store::commit::{CheckThenPut, put_if_absent};
use parqivf::store::counting::CountingStore;
use parqivf::verify::{VerifyOptions, verify};

/// Every object of a snapshot, as (relative path, bytes).
type Objects = Vec<(String, bytes::Bytes)>;
/// Per query, (rowid, distance) best first.
type Answers = Vec<Vec<(i64, f32)>>;

struct Backend {
    name: &'static str,
    store: Arc<dyn ObjectStore>,
    root: Path,
    _dir: Option<tempfile::TempDir>,
}

/// A unique prefix per run so repeated runs against one bucket never collide.
fn run_prefix() -> String {
    format!(
        "conformance-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn backends() -> Vec<Backend> {
    let mut out = Vec::new();
    let (store, root) =
        parqivf::store::location::open(&format!("memory://conformance/{}", run_prefix())).unwrap();
    out.push(Backend {
        name: "memory",
        store,
        root,
        _dir: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let (store, root) = parqivf::store::location::open(dir.path().to_str().unwrap()).unwrap();
    out.push(Backend {
        name: "local",
        store,
        root,
        _dir: Some(dir),
    });
    // Memory behind emulated latency, hedged after 1 ms: most gets race a
    // second copy, and the answers must not change.
    let options = parqivf::store::options::StoreOptions {
        latency: Some("ttfb=2ms,jitter=0.5,seed=5".parse().unwrap()),
        hedge_after: Some(parqivf::store::hedge::HedgeAfter::Fixed(
            std::time::Duration::from_millis(1),
        )),
        max_in_flight: Some(4),
        ..Default::default()
    };
    let (store, root) = parqivf::store::location::open_with(
        &format!("memory://conformance-hedged/{}", run_prefix()),
        &options,
    )
    .unwrap();
    out.push(Backend {
        name: "memory-hedged",
        store,
        root,
        _dir: None,
    });
    match (
        std::env::var("AWS_ENDPOINT"),
        std::env::var("PARQIVF_S3_BUCKET"),
    ) {
        (Ok(_), Ok(bucket)) => {
            let (store, root) =
                parqivf::store::location::open(&format!("s3://{bucket}/{}", run_prefix())).unwrap();
            out.push(Backend {
                name: "s3",
                store,
                root,
                _dir: None,
            });
        }
        _ => {
            assert!(
                std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
                "CI must run the S3 suite: AWS_ENDPOINT and PARQIVF_S3_BUCKET are unset"
            );
            eprintln!("store conformance: no S3 endpoint (run scripts/test.sh for moto)");
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_bytes_and_answers_on_every_backend() {
    let dim = 16;
    let data = support::fixtures::random_vectors(4000, dim, 3);
    let queries = support::fixtures::random_vectors(20, dim, 4);
    let params = BuildParams {
        nlist: 32,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let mut reference: Option<(Objects, Answers)> = None;
    for b in backends() {
        let idx = b.root.clone().join("idx");
        let src = Arc::new(ArraySource::new(data.clone(), dim, "generated").unwrap());
        let summary = build(src, b.store.clone(), &idx, &params)
            .await
            .unwrap_or_else(|e| panic!("{}: build failed: {e}", b.name));
        let snapshot = Path::from(summary.snapshot.as_str());
        let report = verify(
            b.store.clone(),
            &snapshot.clone().join("postings"),
            VerifyOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{}: verify could not run: {e}", b.name));
        assert!(report.is_ok(), "{}: violations {:?}", b.name, report);
        let index = Index::open_current(b.store.clone(), &idx).await.unwrap();
        let sp = SearchParams {
            k: 10,
            nprobe: Some(8),
            ..SearchParams::default()
        };
        let answers: Vec<Vec<(i64, f32)>> = index
            .search_batch(&queries, &sp)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.hits.iter().map(|h| (h.rowid, h.distance)).collect())
            .collect();
        let files = support::store::snapshot_files(&b.store, &snapshot).await;
        assert!(files.iter().any(|(p, _)| p.ends_with("manifest.json")));
        match &reference {
            None => reference = Some((files, answers)),
            Some((rf, ra)) => {
                assert_eq!(
                    rf.iter().map(|f| &f.0).collect::<Vec<_>>(),
                    files.iter().map(|f| &f.0).collect::<Vec<_>>(),
                    "{}: object set",
                    b.name
                );
                for ((p, x), (_, y)) in rf.iter().zip(&files) {
                    assert!(x == y, "{}: {p} differs from the first backend", b.name);
                }
                assert_eq!(ra, &answers, "{}: answers differ", b.name);
            }
        }
        println!(
            "store conformance: {} passed ({} objects)",
            b.name,
            reference.as_ref().unwrap().0.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_publishers_one_winner_on_every_backend() {
    for b in backends() {
        let path = b.root.clone().join("race").join("manifest.json");
        let mut tasks = Vec::new();
        for i in 0..16u8 {
            let store = b.store.clone();
            let path = path.clone();
            tasks.push(tokio::spawn(async move {
                put_if_absent(store.as_ref(), &path, bytes::Bytes::from(vec![i; 64]))
                    .await
                    .map(|_| i)
            }));
        }
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(i) => winners.push(i),
                Err(StoreError::AlreadyExists { .. }) => conflicts += 1,
                Err(e) => panic!("{}: unexpected error {e}", b.name),
            }
        }
        assert_eq!((winners.len(), conflicts), (1, 15), "{}", b.name);
        let got = b.store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(
            &got[..],
            &[winners[0]; 64][..],
            "{}: the stored object is the winner's",
            b.name
        );
        println!("store conformance: {} create-if-absent race passed", b.name);
    }
}

/// One cold and one warm query on each backend, through the counting
/// wrapper: requests, bytes and rounds. 0 LIST and 0 HEAD, at most 3 rounds
/// cold and 2 warm (footers; codes and offset indexes; the re-rank's vector
/// pages), and the bytes fetched at most 1.25 × what a perfect reader needs
/// (the exact footers, the planned row groups' column chunks, the offset
/// indexes and the vector pages). The printed lines are the figures in
/// `docs/benchmarks.md`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_and_warm_query_io_on_every_backend() {
    let dim = 64;
    let data = support::fixtures::random_vectors(20_000, dim, 5);
    let queries = support::fixtures::random_vectors(2, dim, 6);
    let params = BuildParams {
        nlist: 64,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let sp = SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    for b in backends() {
        let idx = b.root.clone().join("io");
        let src = Arc::new(ArraySource::new(data.clone(), dim, "generated").unwrap());
        build(src, b.store.clone(), &idx, &params).await.unwrap();
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let index = Index::open_current(counting.clone(), &idx).await.unwrap();
        let mut lines = Vec::new();
        for (label, query) in [("cold", &queries[..dim]), ("warm", &queries[dim..])] {
            if label == "warm" {
                index.warm().await.unwrap();
            }
            let before = counting.counts();
            let r = index.search(query, &sp).await.unwrap();
            let io = counting.counts() - before;
            let s = &r.stats;
            let needed = s.footer_bytes + s.row_group_bytes + s.page_index_bytes + s.page_bytes;
            assert!(
                s.pages_read > 0,
                "{} {label}: the default codes re-rank",
                b.name
            );
            assert_eq!(
                (io.list_requests, io.head_requests),
                (0, 0),
                "{} {label}",
                b.name
            );
            assert_eq!(
                (io.get_requests, io.get_bytes),
                (s.requests, s.bytes),
                "{} {label}: the query's own stats match the store's counts",
                b.name
            );
            assert!(s.candidate_files >= 2, "{} {label}: {s:?}", b.name);
            let max_rounds = if label == "cold" { 3 } else { 2 };
            assert!(s.rounds <= max_rounds, "{} {label}: {s:?}", b.name);
            assert!(
                io.get_bytes as f64 <= 1.25 * needed as f64,
                "{} {label}: read {} bytes, needed {needed} ({s:?})",
                b.name,
                io.get_bytes
            );
            if label == "warm" {
                assert_eq!(s.footers_read, 0, "{}: warm footers", b.name);
            }
            lines.push(format!(
                "{label}: {} GET in {} rounds, {} B read = {:.3} × needed ({} B footers + {} B row groups + {} B offset indexes + {} B vector pages), {} files, {} row groups, 0 LIST, 0 HEAD",
                io.get_requests,
                s.rounds,
                io.get_bytes,
                io.get_bytes as f64 / needed as f64,
                s.footer_bytes,
                s.row_group_bytes,
                s.page_index_bytes,
                s.page_bytes,
                s.candidate_files,
                s.row_groups_read,
            ));
        }
        println!(
            "store conformance: {} query IO passed; {}",
            b.name,
            lines.join("; ")
        );
    }
}

/// Objects under the postings prefix that no manifest entry names are never
/// read (a query probing every list opens only manifest files), and a file
/// the manifest names but the store lacks is a typed error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_unread_and_missing_object_named_on_every_backend() {
    let dim = 16;
    let data = support::fixtures::random_vectors(4000, dim, 7);
    let queries = support::fixtures::random_vectors(5, dim, 8);
    let params = BuildParams {
        nlist: 32,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let all = SearchParams {
        k: 10,
        nprobe: Some(32),
        ..SearchParams::default()
    };
    for b in backends() {
        let idx = b.root.clone().join("orphans");
        let src = Arc::new(ArraySource::new(data.clone(), dim, "generated").unwrap());
        let summary = build(src, b.store.clone(), &idx, &params).await.unwrap();
        let snapshot = Path::from(summary.snapshot.as_str());
        let postings = snapshot.clone().join("postings");
        let files: Vec<String> = support::store::snapshot_files(&b.store, &postings)
            .await
            .into_iter()
            .map(|(rel, _)| rel)
            .filter(|rel| rel.ends_with(".parquet"))
            .collect();
        assert!(files.len() >= 2, "{}: {files:?}", b.name);
        let orphans: Vec<Path> = [
            "cid_bucket=000000/part-99999.parquet",
            "cid_bucket=999999/part-00000.parquet",
            "stray.parquet",
        ]
        .iter()
        .map(|rel| Path::from(format!("{postings}/{rel}")))
        .collect();
        for o in &orphans {
            b.store
                .put(o, bytes::Bytes::from_static(b"not parquet").into())
                .await
                .unwrap();
        }
        let counting = Arc::new(CountingStore::new(b.store.clone()));
        let index = Index::open_current(counting.clone(), &idx).await.unwrap();
        let answers = index.search_batch(&queries, &all).await.unwrap();
        assert!(answers.iter().all(|r| r.hits.len() == 10), "{}", b.name);
        let read = counting.read_paths();
        for o in &orphans {
            assert!(
                !read.contains(&o.to_string()),
                "{}: orphan {o} was read",
                b.name
            );
        }
        assert_eq!(counting.counts().list_requests, 0, "{}", b.name);
        for f in &files {
            let full = format!("{postings}{f}");
            assert!(read.contains(&full), "{}: {full} never read", b.name);
        }

        // Remove one file the manifest names: a fresh reader must name it.
        let missing = Path::from(format!("{postings}{}", files[0]));
        b.store.delete(&missing).await.unwrap();
        let index = Index::open_current(b.store.clone(), &idx).await.unwrap();
        let err = index.search_batch(&queries, &all).await.unwrap_err();
        match &err {
            IndexError::Probe(ProbeError::Store { path, source }) => {
                assert_eq!(path, &missing.to_string(), "{}", b.name);
                assert!(
                    matches!(source, object_store::Error::NotFound { .. }),
                    "{}: {source:?}",
                    b.name
                );
            }
            other => panic!(
                "{}: expected a typed missing-object error, got {other:?}",
                b.name
            ),
        }
        assert!(err.to_string().contains(missing.as_ref()), "{err}");
        println!(
            "store conformance: {} orphans never read ({} orphans, {} files read), missing object named",
            b.name,
            orphans.len(),
            read.len()
        );
    }
}

/// An S3-compatible store without conditional put (`AWS_CONDITIONAL_PUT=
/// disabled`): a build refuses to publish, with a typed error and nothing
/// current; with the opt-in (`CheckThenPut`) it publishes, and a sequential
/// second publisher of the same object is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_without_conditional_put_refuses_unless_opted_in() {
    let (Ok(_), Ok(bucket)) = (
        std::env::var("AWS_ENDPOINT"),
        std::env::var("PARQIVF_S3_BUCKET"),
    ) else {
        assert!(
            std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
            "CI must run the S3 suite"
        );
        return;
    };
    let raw: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_conditional_put(object_store::aws::S3ConditionalPut::Disabled)
            .build()
            .unwrap(),
    );
    let root = Path::from(run_prefix());
    let idx = root.clone().join("idx");
    let dim = 8;
    let data = support::fixtures::random_vectors(1000, dim, 9);
    let params = BuildParams {
        nlist: 8,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let src = || Arc::new(ArraySource::new(data.clone(), dim, "generated").unwrap());
    let err = build(src(), raw.clone(), &idx, &params).await.unwrap_err();
    assert!(
        matches!(
            err,
            parqivf::builder::BuildError::Store(StoreError::NoConditionalPut { .. })
        ),
        "{err:?}"
    );
    assert!(
        parqivf::format::warehouse::current(&raw, &idx)
            .await
            .unwrap()
            .is_none(),
        "nothing is current after a refused publish"
    );

    let opted: Arc<dyn ObjectStore> = Arc::new(CheckThenPut::new(raw.clone()));
    let summary = build(src(), opted.clone(), &idx, &params).await.unwrap();
    let index = Index::open_current(opted.clone(), &idx).await.unwrap();
    assert_eq!(index.manifest().ntotal, 1000);
    let manifest = Path::from(summary.snapshot.as_str())
        .join("postings")
        .join("manifest.json");
    let again = put_if_absent(opted.as_ref(), &manifest, bytes::Bytes::from_static(b"{}")).await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists { .. })),
        "{again:?}"
    );
    println!("store conformance: s3 without conditional put refused, opt-in published once");
}
