//! `refresh` and `compact` on a Parquet source that gains, loses and
//! changes files: exhaustive answers equal brute force over the table as it
//! is now (deleted rows never come back, changed rows return their new
//! vectors), every layer and deletion is read back through the commit's
//! pins, compaction gives the same postings bytes however the index got to
//! the same rows, and a refresh that loses a race, dies part-way or finds its
//! source gone or changed publishes nothing — on local disk and on S3 (moto).

use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use object_store::ObjectStore;
use object_store::path::Path;
use parqivf::builder::refresh::{RefreshParams, compact, refresh};
use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec, build, open_source};
use parqivf::format::warehouse::{self, WarehouseError};
use parqivf::index::{Index, SearchParams};
use parqivf::store::options::StoreOptions;

use crate::support;
use crate::support::files::write_parquet;

const DIM: usize = 8;
const NLIST: u32 = 8;

/// Rows `ids` with vectors from `seed` (id, embedding).
fn rows(ids: std::ops::Range<i64>, seed: u64) -> RecordBatch {
    let n = (ids.end - ids.start) as usize;
    rows_of(ids, support::fixtures::dataset(n, DIM, seed))
}

/// Rows `ids` with the row-major `values` as their vectors.
fn rows_of(ids: std::ops::Range<i64>, values: Vec<f32>) -> RecordBatch {
    support::files::vectors_with_ids(ids, &values, DIM)
}

fn query(seed: u64) -> Vec<f32> {
    support::fixtures::dataset(1, DIM, seed)
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

async fn build_index(dir: &std::path::Path, store: &Arc<dyn ObjectStore>, index: &Path) {
    let source = open_source(&spec(dir), &StoreOptions::default())
        .await
        .unwrap();
    build(source, store.clone(), index, &params())
        .await
        .unwrap();
}

/// Every (id, vector) of the table now.
fn table(dir: &std::path::Path) -> Vec<(i64, Vec<f32>)> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let f = std::fs::File::open(p).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        for b in r {
            let b = b.unwrap();
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            // Fixed-size or variable-length lists, DIM values a row either way.
            let emb = b.column(1);
            let values = match emb.as_any().downcast_ref::<FixedSizeListArray>() {
                Some(fixed) => fixed.values().clone(),
                None => arrow::array::AsArray::as_list::<i32>(emb).values().clone(),
            };
            let vals = values.as_any().downcast_ref::<Float32Array>().unwrap();
            for i in 0..b.num_rows() {
                out.push((ids.value(i), vals.values()[i * DIM..(i + 1) * DIM].to_vec()));
            }
        }
    }
    out
}

/// Exhaustive answers equal brute force for a few queries, and a k larger
/// than the table returns every live row once.
async fn check_exact(store: &Arc<dyn ObjectStore>, index: &Path, dir: &std::path::Path) {
    let t = table(dir);
    for (i, q) in support::fixtures::dataset(5, DIM, 99)
        .chunks(DIM)
        .enumerate()
    {
        assert_eq!(
            support::fixtures::exhaustive_ids(store, index, q, 10).await,
            support::fixtures::nearest_ids(&t, q, 10),
            "query {i}"
        );
    }
    let mut all = support::fixtures::exhaustive_ids(store, index, &t[0].1, t.len() + 50).await;
    all.sort_unstable();
    let mut ids: Vec<i64> = t.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(all, ids, "every live row exactly once, no deleted row");
}

fn local_index() -> (tempfile::TempDir, Arc<dyn ObjectStore>, Path) {
    let dir = tempfile::tempdir().unwrap();
    let (store, root) = parqivf::store::location::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store, root)
}

/// The index stores of the race, kill and bad-source tests: local disk,
/// and S3 on moto when the test script started it.
/// A named index store (the temporary folder kept alive with it).
type IndexStore = (
    &'static str,
    Arc<dyn ObjectStore>,
    Path,
    Option<tempfile::TempDir>,
);

fn index_stores() -> Vec<IndexStore> {
    let (dir, store, root) = local_index();
    let mut out = vec![("local", store, root, Some(dir))];
    match std::env::var("PARQIVF_S3_BUCKET") {
        Ok(bucket) if std::env::var("AWS_ENDPOINT").is_ok() => {
            let prefix = format!(
                "refresh-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            );
            let (store, root) =
                parqivf::store::location::open(&format!("s3://{bucket}/{prefix}")).unwrap();
            out.push(("s3", store, root, None));
        }
        _ => assert!(
            std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
            "CI must run the refresh tests on S3"
        ),
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_follows_files_gained_lost_and_changed_then_compact_restores_one_base() {
    let src = tempfile::tempdir().unwrap();
    write_parquet(src.path(), "a.parquet", &rows(0..300, 1));
    write_parquet(src.path(), "b.parquet", &rows(300..600, 2));
    let (_i, store, index) = local_index();
    build_index(src.path(), &store, &index).await;
    check_exact(&store, &index, src.path()).await;

    // Up to date: nothing is committed.
    let none = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!(none.version, None);

    // Gain c, lose a, change b (same ids, new vectors: an update).
    write_parquet(src.path(), "c.parquet", &rows(600..660, 3));
    std::fs::remove_file(src.path().join("a.parquet")).unwrap();
    write_parquet(src.path(), "b.parquet", &rows(300..600, 4));
    let r = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!(r.version, Some(2));
    assert_eq!((r.rows_added, r.rows_removed), (360, 600));
    assert_eq!((r.drift.deltas, r.drift.deletions), (1, 600));
    assert!(r.drift.error_growth.is_some() && r.drift.new_rows_imbalance.unwrap() >= 1.0);
    check_exact(&store, &index, src.path()).await;

    // A second small change, deleting rows of the first delta: the two are
    // merged into one small delta (one file, one bucket) in place of it.
    write_parquet(src.path(), "d.parquet", &rows(660..700, 5));
    std::fs::remove_file(src.path().join("c.parquet")).unwrap();
    let r = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!((r.version, r.drift.deltas), (Some(3), 1));
    let layers = Index::open_current(store.clone(), &index).await.unwrap();
    let last = layers.definition().layers.as_ref().unwrap().deltas[0].clone();
    assert_eq!(last.rows, 300 + 40, "b's new rows and d's; c's are gone");
    assert_eq!(
        layers.postings_paths().len() - layers.manifest().files.len(),
        1,
        "a small delta is one file"
    );
    check_exact(&store, &index, src.path()).await;
    let idx = Index::open_current(store.clone(), &index).await.unwrap();
    let cold = idx
        .search(
            &query(9),
            &SearchParams {
                k: 5,
                nprobe: Some(2),
                ..SearchParams::default()
            },
        )
        .await
        .unwrap();
    // verify checks the base and every delta table.
    let report = parqivf::verify::verify_location(
        store.clone(),
        &index,
        parqivf::verify::VerifyOptions::default(),
    )
    .await
    .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
    // The copy and bundle of a refresh's commit are the ones its writer
    // writes now: no advisory.
    assert!(report.advisories.is_empty(), "{:?}", report.advisories);
    assert_eq!(report.files_checked, idx.postings_paths().len());
    assert!(
        cold.stats.rounds <= 2,
        "footers of every layer in one round: {:?}",
        cold.stats
    );

    // Compact: one base, the same answers, the base's centroids.
    let c = compact(store.clone(), &index, &params()).await.unwrap();
    assert_eq!((c.version, c.rows, c.deltas), (Some(4), 340, 1));
    let current = warehouse::current(&store, &index).await.unwrap().unwrap();
    let first = warehouse::history(&store, &index).await.unwrap().remove(0);
    let centroids = |c: &warehouse::Commit| {
        c.pins
            .iter()
            .find(|p| p.path.starts_with("centroids/"))
            .unwrap()
            .sha256
            .clone()
    };
    assert_eq!(centroids(&current), centroids(&first));
    check_exact(&store, &index, src.path()).await;
    let again = compact(store.clone(), &index, &params()).await.unwrap();
    assert_eq!(again.version, None, "nothing left to compact");
}

/// The postings of a compaction depend only on the centroids and the live
/// rows: two indexes that reach the same rows by different refreshes
/// compact to the same postings bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_writes_the_same_bytes_however_the_rows_arrived() {
    let src = tempfile::tempdir().unwrap();
    write_parquet(src.path(), "a.parquet", &rows(0..200, 1));
    let (_x, sx, ix) = local_index();
    let (_y, sy, iy) = local_index();
    build_index(src.path(), &sx, &ix).await;
    build_index(src.path(), &sy, &iy).await;
    write_parquet(src.path(), "b.parquet", &rows(200..260, 2));
    refresh(sx.clone(), &ix, &RefreshParams::default(), &params())
        .await
        .unwrap();
    write_parquet(src.path(), "c.parquet", &rows(260..300, 3));
    refresh(sx.clone(), &ix, &RefreshParams::default(), &params())
        .await
        .unwrap();
    refresh(sy.clone(), &iy, &RefreshParams::default(), &params())
        .await
        .unwrap();
    compact(sx.clone(), &ix, &params()).await.unwrap();
    compact(sy.clone(), &iy, &params()).await.unwrap();
    let postings = |store: Arc<dyn ObjectStore>, index: Path| async move {
        let c = warehouse::current(&store, &index).await.unwrap().unwrap();
        c.pins
            .iter()
            .filter(|p| p.path.starts_with("postings/"))
            .map(|p| (p.path.clone(), p.sha256.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(postings(sx, ix).await, postings(sy, iy).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_refreshes_one_commits_the_other_conflicts_and_can_rerun() {
    for (name, store, index, _dir) in index_stores() {
        let src = tempfile::tempdir().unwrap();
        write_parquet(src.path(), "a.parquet", &rows(0..200, 1));
        build_index(src.path(), &store, &index).await;
        write_parquet(src.path(), "b.parquet", &rows(200..240, 2));
        let (p, bp) = (RefreshParams::default(), params());
        let (a, b) = tokio::join!(
            refresh(store.clone(), &index, &p, &bp),
            refresh(store.clone(), &index, &p, &bp)
        );
        let (ok, err) = match (a, b) {
            (Ok(s), Err(e)) | (Err(e), Ok(s)) => (s, e),
            other => panic!("{name}: expected one winner, got {other:?}"),
        };
        assert_eq!(ok.version, Some(2), "{name}");
        assert!(
            matches!(
                err,
                BuildError::Warehouse(WarehouseError::Conflict { version: 2, .. })
            ),
            "{name}: {err}"
        );
        // Re-run: up to date now.
        let again = refresh(store.clone(), &index, &p, &bp).await.unwrap();
        assert_eq!(again.version, None, "{name}");
        check_exact(&store, &index, src.path()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_killed_at_any_write_leaves_the_previous_version_current() {
    for (name, store, index, _dir) in index_stores() {
        let src = tempfile::tempdir().unwrap();
        write_parquet(src.path(), "a.parquet", &rows(0..200, 1));
        build_index(src.path(), &store, &index).await;
        let before = support::fixtures::exhaustive_ids(&store, &index, &query(7), 10).await;
        write_parquet(src.path(), "b.parquet", &rows(200..260, 2));
        std::fs::remove_file(src.path().join("a.parquet")).unwrap();
        write_parquet(src.path(), "a2.parquet", &rows(0..100, 1));
        let mut n = 0;
        loop {
            let failing: Arc<dyn ObjectStore> = Arc::new(support::store::fail_nth_write(&store, n));
            match refresh(failing, &index, &RefreshParams::default(), &params()).await {
                Err(e) => {
                    assert!(
                        n < 100,
                        "{name}: a refresh fails without an injected failure: {e}"
                    );
                    let current = warehouse::current(&store, &index).await.unwrap().unwrap();
                    assert_eq!(current.version, 1, "{name}: write {n} failed");
                    assert_eq!(
                        support::fixtures::exhaustive_ids(&store, &index, &query(7), 10).await,
                        before
                    );
                    n += 1;
                }
                Ok(s) => {
                    assert_eq!(s.version, Some(2), "{name}");
                    break;
                }
            }
        }
        assert!(
            n >= 5,
            "{name}: a refresh writes at least 5 objects, failed at {n}"
        );
        check_exact(&store, &index, src.path()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_gone_or_changed_in_schema_fails_typed_and_publishes_nothing() {
    for (name, store, index, _dir) in index_stores() {
        let src = tempfile::tempdir().unwrap();
        write_parquet(src.path(), "a.parquet", &rows(0..200, 1));
        build_index(src.path(), &store, &index).await;
        // A new file with another vector dimension.
        let wide = {
            let item = Arc::new(Field::new("item", DataType::Float32, false));
            let emb = FixedSizeListArray::new(
                item.clone(),
                4,
                Arc::new(Float32Array::from(vec![0.5f32; 40])),
                None,
            );
            RecordBatch::try_new(
                Arc::new(Schema::new(vec![
                    Field::new("id", DataType::Int64, false),
                    Field::new("emb", DataType::FixedSizeList(item, 4), true),
                ])),
                vec![
                    Arc::new(Int64Array::from_iter_values(900..910)) as ArrayRef,
                    Arc::new(emb),
                ],
            )
            .unwrap()
        };
        write_parquet(src.path(), "z.parquet", &wide);
        let e = refresh(store.clone(), &index, &RefreshParams::default(), &params())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, BuildError::SchemaChanged { what, .. } if what == "vector dimension"),
            "{name}: {e}"
        );
        // The whole table gone.
        std::fs::remove_file(src.path().join("z.parquet")).unwrap();
        std::fs::remove_file(src.path().join("a.parquet")).unwrap();
        let e = refresh(store.clone(), &index, &RefreshParams::default(), &params())
            .await
            .unwrap_err();
        assert!(matches!(e, BuildError::NoFiles { .. }), "{name}: {e}");
        let current = warehouse::current(&store, &index).await.unwrap().unwrap();
        assert_eq!(current.version, 1, "{name}: nothing published");
    }
}

/// Rows `ids` like [`rows`], moved far from every centroid of a build of
/// [`rows`].
fn moved(ids: std::ops::Range<i64>, seed: u64) -> RecordBatch {
    let n = (ids.end - ids.start) as usize;
    let values = support::fixtures::dataset(n, DIM, seed);
    rows_of(ids, values.into_iter().map(|v| v + 50.0).collect())
}

/// New rows far from every centroid: the drift report shows it; below the
/// limit a delta is written, above it `retrain_above` rebuilds (new
/// centroids, one base) instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrain_above_rebuilds_when_the_new_rows_drift() {
    let src = tempfile::tempdir().unwrap();
    write_parquet(src.path(), "a.parquet", &rows(0..300, 1));
    let (_i, store, index) = local_index();
    build_index(src.path(), &store, &index).await;
    write_parquet(src.path(), "b.parquet", &moved(300..400, 2));
    let lenient = RefreshParams {
        retrain_above: Some(1e9),
        ..RefreshParams::default()
    };
    let delta = refresh(store.clone(), &index, &lenient, &params())
        .await
        .unwrap();
    assert!(delta.rebuilt.is_none() && delta.drift.deltas == 1);
    let growth = delta.drift.error_growth.unwrap();
    assert!(growth > 1.0, "far rows grow the error: {growth}");
    write_parquet(src.path(), "c.parquet", &moved(400..450, 3));
    let strict = RefreshParams {
        retrain_above: Some(0.1),
        ..RefreshParams::default()
    };
    let r = refresh(store.clone(), &index, &strict, &params())
        .await
        .unwrap();
    let rebuilt = r.rebuilt.as_ref().expect("a rebuild");
    assert_eq!((r.version, rebuilt.rows), (Some(3), 450));
    let current = Index::open_current(store.clone(), &index).await.unwrap();
    assert!(
        current.definition().layers.is_none(),
        "one base, new centroids"
    );
    check_exact(&store, &index, src.path()).await;
}

/// Rows `ids` with variable-length `List<Float32>` vectors (as pyarrow
/// writes numpy rows by default): the dimension comes from the first row.
fn list_rows(ids: std::ops::Range<i64>, seed: u64) -> RecordBatch {
    let n = (ids.end - ids.start) as usize;
    let values = support::fixtures::dataset(n, DIM, seed);
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let offsets = arrow::buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(DIM, n));
    let emb = arrow::array::ListArray::new(
        item.clone(),
        offsets,
        Arc::new(Float32Array::from(values)),
        None,
    );
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("emb", DataType::List(item), true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
            Arc::new(emb),
        ],
    )
    .unwrap()
}

/// Issue #24: a new source file with 0 rows made every refresh fail with
/// "the source table has no rows", so pending deletions never applied. It
/// is now recorded and counted (`empty_files`), and the rest of the change
/// is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_with_no_rows_is_skipped_with_a_count() {
    let src = tempfile::tempdir().unwrap();
    write_parquet(src.path(), "a.parquet", &list_rows(0..200, 1));
    write_parquet(src.path(), "b.parquet", &list_rows(200..260, 2));
    let (_i, store, index) = local_index();
    build_index(src.path(), &store, &index).await;
    // Only a 0-row file is new: nothing to index, no error.
    write_parquet(src.path(), "c.parquet", &list_rows(0..0, 3));
    let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!((s.version, s.empty_files, s.rows_added), (None, 1, 0));
    // A 0-row file and a removed file: the deletion is published.
    std::fs::remove_file(src.path().join("b.parquet")).unwrap();
    let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!((s.version, s.empty_files, s.rows_removed), (Some(2), 1, 60));
    check_exact(&store, &index, src.path()).await;
    // Recorded: the next refresh has nothing to do.
    let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!((s.version, s.empty_files), (None, 0));
}

/// Issue #24's companion finding (issue #29, item 4): with `--id-column`, a
/// refresh accepted a new file whose id was already indexed, and the id
/// came back twice in one answer. Now it is a typed error naming the file,
/// row and id, nothing is published, and a refresh of a corrected file
/// works; an exhaustive answer never holds one id twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appended_file_repeating_an_indexed_id_is_a_typed_error() {
    for (name, store, index, _dir) in index_stores() {
        let src = tempfile::tempdir().unwrap();
        write_parquet(src.path(), "a.parquet", &rows(0..200, 1));
        let with_ids = SourceSpec {
            id_column: Some("id".into()),
            payload: Vec::new(),
            ..spec(src.path())
        };
        let source = open_source(&with_ids, &StoreOptions::default())
            .await
            .unwrap();
        build(source, store.clone(), &index, &params())
            .await
            .unwrap();
        // Ids 190..230: 190..199 are indexed.
        write_parquet(src.path(), "b.parquet", &rows(190..230, 2));
        let e = refresh(store.clone(), &index, &RefreshParams::default(), &params())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, BuildError::IdAlreadyIndexed { id: 190, path, row: 0 } if path.ends_with("b.parquet")),
            "{name}: {e}"
        );
        let current = warehouse::current(&store, &index).await.unwrap().unwrap();
        assert_eq!(current.version, 1, "{name}: nothing published");
        // Corrected: new ids only.
        write_parquet(src.path(), "b.parquet", &rows(200..240, 2));
        let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
            .await
            .unwrap();
        assert_eq!((s.version, s.rows_added), (Some(2), 40), "{name}");
        let idx = Index::open_current(store.clone(), &index).await.unwrap();
        let all = idx
            .search(
                &query(7),
                &SearchParams {
                    k: 300,
                    nprobe: Some(NLIST as usize),
                    ..SearchParams::default()
                },
            )
            .await
            .unwrap();
        let mut ids: Vec<i64> = all.hits.iter().map(|h| h.rowid).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..240).collect::<Vec<i64>>(), "{name}: each id once");
    }
}
