//! The commit rule under faults, for every publisher: `build`, `refresh`,
//! `compact` and the distributed build's publish, on memory, local disk and
//! S3 (moto), each with the commit's write answered by a
//! [`FaultStore`]: its response lost after it landed (then retried, as
//! `object_store` does), an error after it landed, an error before it, a
//! kill before it and a kill after it. After each case the current version
//! is the one the outcome says, it opens, `verify` passes, exhaustive
//! answers equal brute force over the table that version indexes, every
//! folder a version names still exists, and the publisher's result tells the
//! truth. Then the same lost response end to end: the CLI through an HTTP
//! proxy in front of moto that drops the answer to the commit's PUT
//! (`scripts/fault_proxy.py`), exit status 0.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float32Type, Int64Type, UInt32Type};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::builder::distributed::{self, ROOT_COLUMN, Worker};
use parqivf::builder::refresh::{RefreshParams, compact, refresh};
use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec, build, open_source};
use parqivf::format::warehouse::{self, WarehouseError};
use parqivf::store::fault::{Fault, FaultStore, Op};
use parqivf::store::options::StoreOptions;
use parqivf::verify::{VerifyOptions, verify_location};

use crate::support;
use crate::support::files::write_parquet;

const DIM: usize = 8;
const NLIST: u32 = 8;
/// The commit documents (`versions/<20 digits>.json`), not the hint.
const VERSIONS: &str = "versions/000";

fn rows(ids: std::ops::Range<i64>, seed: u64) -> RecordBatch {
    let n = (ids.end - ids.start) as usize;
    support::files::vectors_with_ids(ids, &support::fixtures::dataset(n, DIM, seed), DIM)
}

/// (id, vector) of every row of `batches`.
fn table_of(batches: &[&RecordBatch]) -> Vec<(i64, Vec<f32>)> {
    let mut out = Vec::new();
    for b in batches {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let emb = b.column(1).as_fixed_size_list();
        let values = emb.values().as_primitive::<Float32Type>().values();
        for i in 0..b.num_rows() {
            out.push((ids.value(i), values[i * DIM..(i + 1) * DIM].to_vec()));
        }
    }
    out
}

fn params() -> BuildParams {
    BuildParams {
        nlist: NLIST,
        codes: None,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

fn spec(dir: &std::path::Path) -> SourceSpec {
    SourceSpec {
        source: dir.to_str().unwrap().to_string(),
        column: "emb".into(),
        payload: vec!["id".into()],
        ..SourceSpec::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publisher {
    Build,
    Refresh,
    Compact,
    Distributed,
    Delete,
}

const PUBLISHERS: [Publisher; 5] = [
    Publisher::Build,
    Publisher::Refresh,
    Publisher::Compact,
    Publisher::Distributed,
    Publisher::Delete,
];

/// The rowids the `Delete` publisher deletes (rows of `a.parquet`, whose
/// rowids are their ids).
const DELETED: std::ops::Range<i64> = 100..130;

const FAULTS: [Fault; 5] = [
    Fault::LoseResponse,
    Fault::ErrorAfter,
    Fault::FailBefore,
    Fault::Kill,
    Fault::KillAfter,
];

/// Whether the commit lands under `fault`.
fn lands(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::LoseResponse | Fault::ErrorAfter | Fault::KillAfter
    )
}

/// Index locations of the matrix: memory, local disk, and S3 on moto when
/// the test script started it (CI always does).
fn locations(tag: &str) -> Vec<(&'static str, String, Option<tempfile::TempDir>)> {
    let unique = format!(
        "{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut out = vec![
        ("memory", format!("memory://{unique}/idx"), None),
        (
            "local",
            dir.path().join("idx").display().to_string(),
            Some(dir),
        ),
    ];
    match std::env::var("PARQIVF_S3_BUCKET") {
        Ok(bucket) if std::env::var("AWS_ENDPOINT").is_ok() => {
            out.push(("s3", format!("s3://{bucket}/{unique}"), None));
        }
        _ => assert!(
            std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
            "CI must run the fault matrix on S3"
        ),
    }
    out
}

/// Run `publisher` against `store` (the index store, faulted) and return
/// the version it reports.
async fn publish(
    publisher: Publisher,
    store: Arc<dyn ObjectStore>,
    index: &Path,
    uri: &str,
    src: &std::path::Path,
) -> Result<u64, BuildError> {
    let options = StoreOptions::default();
    match publisher {
        Publisher::Build => {
            let source = open_source(&spec(src), &options).await?;
            Ok(build(source, store, index, &params()).await?.version)
        }
        Publisher::Refresh => {
            let s = refresh(store, index, &RefreshParams::default(), &params()).await?;
            Ok(s.version.expect("the source changed"))
        }
        Publisher::Compact => Ok(compact(store, index, &params())
            .await?
            .version
            .expect("there is a delta to compact")),
        Publisher::Delete => {
            let ids: Vec<i64> = DELETED.collect();
            let s =
                parqivf::builder::mutate::delete(store, index, &ids, &params(), Default::default())
                    .await?;
            Ok(s.version.expect("the ids are live"))
        }
        Publisher::Distributed => {
            let plan = distributed::plan(&spec(src), uri, &params(), &options).await?;
            let worker = Worker::open(plan.clone(), &options).await?;
            let mut buckets: std::collections::BTreeMap<u32, Vec<RecordBatch>> = Default::default();
            for part in 0..plan.parts() {
                let rows = worker.assign_part(part).await?;
                let roots = rows
                    .column_by_name(ROOT_COLUMN)
                    .unwrap()
                    .as_primitive::<UInt32Type>()
                    .clone();
                for root in roots
                    .values()
                    .iter()
                    .copied()
                    .collect::<std::collections::BTreeSet<_>>()
                {
                    let mask = arrow::compute::kernels::cmp::eq(
                        &roots,
                        &arrow::array::UInt32Array::new_scalar(root),
                    )
                    .unwrap();
                    let picked = arrow::compute::filter_record_batch(&rows, &mask).unwrap();
                    buckets.entry(root).or_default().push(picked);
                }
            }
            let mut files = Vec::new();
            for (root, batches) in buckets {
                files.extend(worker.write_bucket(root, batches).await?);
            }
            Ok(
                distributed::publish_on(store, index, &plan, files, 0.0, 0.0)
                    .await?
                    .version,
            )
        }
    }
}

/// The current version is `version`, it opens, verifies, answers like brute
/// force over `table`, and every folder a version names is still there.
async fn check(
    what: &str,
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    version: u64,
    table: &[(i64, Vec<f32>)],
) {
    let current = warehouse::current(store, index).await.unwrap().unwrap();
    assert_eq!(current.version, version, "{what}: current version");
    for c in warehouse::history(store, index).await.unwrap() {
        let folder = warehouse::snapshot_folder(index, &c.snapshot).unwrap();
        assert!(
            store.head(&folder.join("index.json")).await.is_ok(),
            "{what}: version {} names {}, which is gone",
            c.version,
            c.snapshot
        );
    }
    let report = verify_location(store.clone(), index, VerifyOptions::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{what}: verify: {:?}", report.violations);
    for (i, q) in support::fixtures::dataset(4, DIM, 99)
        .chunks(DIM)
        .enumerate()
    {
        assert_eq!(
            support::fixtures::exhaustive_ids(store, index, q, 10).await,
            support::fixtures::nearest_ids(table, q, 10),
            "{what}: query {i}"
        );
    }
    let mut all =
        support::fixtures::exhaustive_ids(store, index, &table[0].1, table.len() + 20).await;
    all.sort_unstable();
    let mut ids: Vec<i64> = table.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(all, ids, "{what}: every row exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_publisher_tells_the_truth_when_its_commit_meets_a_fault() {
    for publisher in PUBLISHERS {
        for (kind, uri, _dir) in locations("faults") {
            for (n, fault) in FAULTS.into_iter().enumerate() {
                let what = format!("{publisher:?} on {kind}, {fault:?} at the commit");
                let uri = format!("{uri}-{n}");
                let (store, index) = parqivf::store::location::open(&uri).unwrap();
                let src = tempfile::tempdir().unwrap();
                let (a, b) = (rows(0..300, 1), rows(300..360, 2));
                write_parquet(src.path(), "a.parquet", &a);
                let source = open_source(&spec(src.path()), &StoreOptions::default())
                    .await
                    .unwrap();
                build(source, store.clone(), &index, &params())
                    .await
                    .unwrap();
                let before_table = table_of(&[&a]);
                write_parquet(src.path(), "b.parquet", &b);
                let mut after_table = table_of(&[&a, &b]);
                if publisher == Publisher::Delete {
                    after_table = table_of(&[&a]);
                    after_table.retain(|(id, _)| !DELETED.contains(id));
                }
                let mut parent = 1;
                let before = match publisher {
                    Publisher::Compact => {
                        refresh(store.clone(), &index, &RefreshParams::default(), &params())
                            .await
                            .unwrap();
                        parent = 2;
                        &after_table
                    }
                    _ => &before_table,
                };

                let faulty =
                    Arc::new(FaultStore::new(store.clone()).on(Op::Put, VERSIONS, 0, fault));
                let dyn_faulty: Arc<dyn ObjectStore> = faulty.clone();
                let outcome = tokio::select! {
                    r = publish(publisher, dyn_faulty, &index, &uri, src.path()) => Some(r),
                    () = faulty.killed() => None,
                };
                assert_eq!(faulty.fired(), 1, "{what}: the fault fired");
                match (&outcome, lands(fault)) {
                    (Some(Ok(v)), true) => assert_eq!(*v, parent + 1, "{what}"),
                    (Some(Err(e)), false) => assert!(
                        !matches!(e, BuildError::Warehouse(WarehouseError::Conflict { .. })),
                        "{what}: an error before the write is no conflict: {e}"
                    ),
                    (None, _) => assert!(matches!(fault, Fault::Kill | Fault::KillAfter)),
                    (other, landed) => {
                        panic!("{what}: the commit landed: {landed}, the publisher said {other:?}")
                    }
                }
                let (version, table) = if lands(fault) {
                    (parent + 1, &after_table)
                } else {
                    (parent, before)
                };
                check(&what, &store, &index, version, table).await;
            }
        }
    }
}

/// The lost-response scenario end to end: moto behind a proxy that forwards
/// the PUT of `versions/N.json`, reads moto's 200 and closes the client
/// connection; object_store retries and gets 412. `build`, `refresh` and
/// `compact` exit 0 and their version is current, opens, verifies and
/// answers right.
#[test]
fn the_cli_exits_0_when_the_answer_to_its_commit_is_lost() {
    let (Ok(bucket), Ok(endpoint), Ok(python)) = (
        std::env::var("PARQIVF_S3_BUCKET"),
        std::env::var("AWS_ENDPOINT"),
        std::env::var("PARQIVF_PYTHON"),
    ) else {
        assert!(
            std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
            "CI must run the lost-response test on moto"
        );
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let src = tempfile::tempdir().unwrap();
    let (a, b) = (rows(0..300, 1), rows(300..360, 2));
    write_parquet(src.path(), "a.parquet", &a);
    let uri = format!(
        "s3://{bucket}/lost-response-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (store, index) = parqivf::store::location::open(&uri).unwrap();
    let source = src.path().display().to_string();
    let steps: [(&str, Vec<&str>); 3] = [
        (
            "build",
            vec![
                "build",
                "--source",
                &source,
                "--column",
                "emb",
                "--payload",
                "id",
                "--nlist",
                "8",
                "--codes",
                "none",
                "--out",
                &uri,
            ],
        ),
        ("refresh", vec!["refresh", "--index", &uri]),
        ("compact", vec!["compact", "--index", &uri]),
    ];
    for (version, (name, args)) in steps.into_iter().enumerate() {
        if name == "refresh" {
            write_parquet(src.path(), "b.parquet", &b);
        }
        let proxy = support::fault_proxy::FaultProxy::start(
            &python,
            &endpoint,
            &["--lose-response", r"PUT .*/versions/\d{20}\.json"],
        );
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(&args)
            .env("AWS_ENDPOINT", proxy.endpoint())
            .output()
            .unwrap();
        let log = proxy.stop();
        assert!(
            log.contains("lose-response"),
            "{name}: the proxy dropped no answer:\n{log}"
        );
        assert!(
            out.status.success(),
            "{name}: exit {:?}\n{}\nproxy:\n{log}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let table = if name == "build" {
            table_of(&[&a])
        } else {
            table_of(&[&a, &b])
        };
        rt.block_on(check(name, &store, &index, version as u64 + 1, &table));
        let verify = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(["verify", &uri])
            .output()
            .unwrap();
        assert!(verify.status.success(), "{name}: parqivf verify failed");
    }
}
