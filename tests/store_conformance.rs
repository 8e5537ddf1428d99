//! One store-conformance suite for every backend available in the run:
//! InMemory, LocalFileSystem in a temp dir, and S3 on `moto_server` (when
//! `scripts/test.sh` started one; required in CI). The same build, publish,
//! verify and search calls must give the same bytes and the same answers.

mod support;

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::build::{ArraySource, BuildParams, ProgressMode, build};
use parqivf::index::{Index, SearchParams};
use parqivf::postings::verify::{VerifyOptions, verify};
use parqivf::store::StoreError;
use parqivf::store::commit::put_if_absent;

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
    let data = support::random_vectors(4000, dim, 3);
    let queries = support::random_vectors(20, dim, 4);
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
            nprobe: 8,
            ..SearchParams::default()
        };
        let answers: Vec<Vec<(i64, f32)>> = index
            .search_batch(&queries, &sp)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.hits.iter().map(|h| (h.rowid, h.distance)).collect())
            .collect();
        let files = support::snapshot_files(&b.store, &snapshot).await;
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
