//! The build job end to end: Parquet written by an independent writer
//! (pyarrow), every bad-input case with its typed error and nothing published,
//! fault injection at every write of a build, reproducibility and spilling.

use crate::support;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Builder, Int64Array, ListBuilder, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::{
    ArraySource, BuildError, BuildParams, ParquetSource, ParquetSourceOptions, ProgressMode,
    VectorSource, build,
};
use parqivf::distance::Metric;
use parqivf::format::warehouse;
use parqivf::index::{Index, SearchParams};
use parqivf::topk::TopK;
use support::files::write_parquet;

fn params(nlist: u32) -> BuildParams {
    BuildParams {
        nlist,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

fn list_batch(first_id: i64, rows: &[Option<Vec<f32>>]) -> RecordBatch {
    let mut emb = ListBuilder::new(Float32Builder::new());
    for r in rows {
        match r {
            Some(v) => {
                emb.values().append_slice(v);
                emb.append(true);
            }
            None => emb.append(false),
        }
    }
    let emb = emb.finish();
    let n = rows.len() as i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "embedding",
            arrow::array::Array::data_type(&emb).clone(),
            true,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(first_id..first_id + n)) as ArrayRef,
            Arc::new(emb),
        ],
    )
    .unwrap()
}

fn rows(n: usize, dim: usize, seed: u64) -> Vec<Option<Vec<f32>>> {
    support::fixtures::random_vectors(n, dim, seed)
        .chunks(dim)
        .map(|c| Some(c.to_vec()))
        .collect()
}

async fn open_local(
    dir: &std::path::Path,
    opts: ParquetSourceOptions,
) -> Result<ParquetSource, BuildError> {
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    ParquetSource::open(store, "*.parquet", opts).await
}

fn opts() -> ParquetSourceOptions {
    ParquetSourceOptions {
        column: "embedding".into(),
        ..Default::default()
    }
}

/// Build over `dir` into a fresh in-memory store; return the error and assert
/// that nothing was published.
async fn build_fails(dir: &std::path::Path, o: ParquetSourceOptions, nlist: u32) -> BuildError {
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let err = match open_local(dir, o).await {
        Err(e) => e,
        Ok(src) => build(Arc::new(src), out.clone(), &idx, &params(nlist))
            .await
            .expect_err("the build must fail"),
    };
    assert!(
        warehouse::current(&out, &idx).await.unwrap().is_none(),
        "nothing may be published"
    );
    err
}

#[tokio::test]
async fn missing_vector_column_is_typed() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &rows(20, 4, 1)));
    let e = build_fails(
        d.path(),
        ParquetSourceOptions {
            column: "nope".into(),
            ..Default::default()
        },
        2,
    )
    .await;
    assert!(
        matches!(e, BuildError::MissingColumn { ref column, .. } if column == "nope"),
        "{e}"
    );
}

#[tokio::test]
async fn missing_vector_column_in_a_later_file_is_typed() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &rows(20, 4, 1)));
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![1i64, 2]))],
    )
    .unwrap();
    write_parquet(d.path(), "b.parquet", &other);
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(
        matches!(e, BuildError::MissingColumn { ref path, .. } if path.ends_with("b.parquet")),
        "{e}"
    );
}

#[tokio::test]
async fn wrong_vector_type_is_typed() {
    let d = tempfile::tempdir().unwrap();
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "embedding",
            DataType::Utf8,
            false,
        )])),
        vec![Arc::new(StringArray::from(vec!["a", "b", "c"]))],
    )
    .unwrap();
    write_parquet(d.path(), "a.parquet", &b);
    let e = build_fails(d.path(), opts(), 1).await;
    assert!(
        matches!(e, BuildError::WrongType { ref found, .. } if found.contains("Utf8")),
        "{e}"
    );
}

#[tokio::test]
async fn mixed_dimensions_across_files_and_rows_are_typed() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &rows(20, 4, 1)));
    write_parquet(d.path(), "b.parquet", &list_batch(20, &rows(20, 5, 2)));
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(
        matches!(e, BuildError::VectorColumn { ref path, .. } if path.ends_with("b.parquet")),
        "{e}"
    );

    let d = tempfile::tempdir().unwrap();
    let mut r = rows(20, 4, 1);
    r[7] = Some(vec![1.0, 2.0, 3.0]);
    write_parquet(d.path(), "a.parquet", &list_batch(0, &r));
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(matches!(e, BuildError::VectorColumn { .. }), "{e}");
}

#[tokio::test]
async fn non_finite_values_fail_or_are_skipped_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let mut r = rows(40, 4, 1);
    r[3] = Some(vec![1.0, f32::NAN, 0.0, 0.0]);
    r[9] = Some(vec![f32::INFINITY, 0.0, 0.0, 0.0]);
    write_parquet(d.path(), "a.parquet", &list_batch(0, &r));
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(matches!(e, BuildError::VectorColumn { .. }), "{e}");

    let src = open_local(
        d.path(),
        ParquetSourceOptions {
            skip_invalid: true,
            ..opts()
        },
    )
    .await
    .unwrap();
    let src = Arc::new(src);
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let s = build(src.clone(), out, &Path::from("idx"), &params(2))
        .await
        .unwrap();
    assert_eq!(s.rows, 38);
    assert!(src.skipped_rows() >= 2);
}

#[tokio::test]
async fn null_vectors_are_typed() {
    let d = tempfile::tempdir().unwrap();
    let mut r = rows(20, 4, 1);
    r[5] = None;
    write_parquet(d.path(), "a.parquet", &list_batch(0, &r));
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(matches!(e, BuildError::VectorColumn { .. }), "{e}");
}

#[tokio::test]
async fn empty_table_and_nlist_above_rows_are_typed() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &[]));
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(matches!(e, BuildError::EmptySource), "{e}");

    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &rows(10, 4, 1)));
    let e = build_fails(d.path(), opts(), 11).await;
    assert!(
        matches!(
            e,
            BuildError::NlistExceedsRows {
                nlist: 11,
                rows: 10
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn unreadable_file_is_typed() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(d.path(), "a.parquet", &list_batch(0, &rows(20, 4, 1)));
    std::fs::write(d.path().join("b.parquet"), b"this is not parquet").unwrap();
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(
        matches!(e, BuildError::Unreadable { ref path, .. } if path.ends_with("b.parquet")),
        "{e}"
    );
}

#[tokio::test]
async fn no_matching_files_is_typed() {
    let d = tempfile::tempdir().unwrap();
    let e = build_fails(d.path(), opts(), 2).await;
    assert!(matches!(e, BuildError::NoFiles { .. }), "{e}");
}

/// Fault injection: the build's k-th write fails, for every k. The index
/// never gains a version, and the earlier version stays current.
#[tokio::test]
async fn a_build_failing_at_any_write_publishes_nothing() {
    let data = support::fixtures::random_vectors(600, 8, 7);
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(ArraySource::new(data.clone(), 8, "generated").unwrap());
    let first = build(src.clone(), inner.clone(), &idx, &params(8))
        .await
        .unwrap();
    assert_eq!(first.version, 1);
    let mut k = 0;
    loop {
        let faulty: Arc<dyn ObjectStore> = Arc::new(support::store::fail_nth_write(&inner, k));
        match build(src.clone(), faulty, &idx, &params(8)).await {
            Ok(s) => {
                // Every write succeeded: this is the first k past the last write.
                assert!(k > 3, "a build does several writes");
                assert_eq!(s.version, 2);
                break;
            }
            Err(_) => {
                let cur = warehouse::current(&inner, &idx).await.unwrap().unwrap();
                assert_eq!(
                    cur.version, 1,
                    "failure at write {k} must leave version 1 current"
                );
            }
        }
        k += 1;
        assert!(k < 1000);
    }
}

#[tokio::test]
async fn builds_are_byte_reproducible_and_spill_changes_nothing() {
    let data = support::fixtures::random_vectors(3000, 16, 11);
    let src = Arc::new(
        ArraySource::new(data, 16, "generated")
            .unwrap()
            .with_part_size(500),
    );
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let b: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let sa = build(src.clone(), a.clone(), &Path::from("i"), &params(16))
        .await
        .unwrap();
    let tiny = BuildParams {
        memory_limit: 64 << 10,
        ..params(16)
    };
    let sb = build(src, b.clone(), &Path::from("i"), &tiny)
        .await
        .unwrap();
    assert_eq!(sa.spill_events, 0);
    assert!(sb.spill_events > 0, "a 64 KiB limit must spill");
    let fa = support::store::snapshot_files(&a, &Path::from(sa.snapshot.as_str())).await;
    let fb = support::store::snapshot_files(&b, &Path::from(sb.snapshot.as_str())).await;
    assert_eq!(fa.len(), fb.len());
    for ((pa, ba), (pb, bb)) in fa.iter().zip(&fb) {
        assert_eq!(pa, pb);
        assert!(ba == bb, "{pa} differs between the two builds");
    }
}

/// Parquet written by pyarrow, with no field ids, different column orders and
/// an extra column, vectors as list<float>: build, search, recall.
#[tokio::test]
async fn pyarrow_written_table_builds_and_searches() {
    let Some(python) = support::python::python_with("pyarrow") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let script = r#"
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
out = sys.argv[1]
rng = np.random.default_rng(5)
centres = rng.uniform(-1, 1, (20, 16)).astype(np.float32)
rows = []
for f in range(3):
    n = 700
    ids = np.arange(f * n, (f + 1) * n, dtype=np.int64)
    x = centres[rng.integers(0, 20, n)] + rng.normal(0, 0.1, (n, 16)).astype(np.float32)
    emb = pa.array([list(map(float, r)) for r in x], type=pa.list_(pa.float32()))
    cols = {"id": pa.array(ids), "embedding": emb, "note": pa.array([f"r{i}" for i in ids])}
    order = [["id", "embedding", "note"], ["embedding", "note", "id"], ["note", "id", "embedding", ]][f]
    t = pa.table({k: cols[k] for k in order})
    if f == 2:
        t = t.append_column("extra", pa.array(np.ones(n)))
    pq.write_table(t, f"{out}/part-{f}.parquet")
    np.save(f"{out}/x{f}.npy", x)
"#;
    support::python::run_python(&python, script, &[d.path().to_str().unwrap()]);
    let src = open_local(
        d.path(),
        ParquetSourceOptions {
            id_column: Some("id".into()),
            ..opts()
        },
    )
    .await
    .unwrap();
    assert_eq!(src.parts(), 3);
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let s = build(Arc::new(src), out.clone(), &idx, &params(32))
        .await
        .unwrap();
    assert_eq!(s.rows, 2100);
    let mut base = Vec::new();
    for f in 0..3 {
        let v = parqivf::vector_file::read_vectors(&d.path().join(format!("x{f}.npy"))).unwrap();
        base.extend(v.data);
    }
    let index = Index::open_current(out, &idx).await.unwrap();
    let queries = &base[..50 * 16];
    let sp = SearchParams {
        k: 10,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    let res = index.search_batch(queries, &sp).await.unwrap();
    let mut hit = 0;
    for (qi, r) in res.iter().enumerate() {
        let q = &queries[qi * 16..(qi + 1) * 16];
        let mut top = TopK::new(10);
        for (i, row) in base.chunks(16).enumerate() {
            top.push(Metric::L2.distance(q, row), i as i64);
        }
        let truth: Vec<i64> = top.into_sorted().iter().map(|n| n.rowid).collect();
        hit += r.hits.iter().filter(|h| truth.contains(&h.rowid)).count();
    }
    let recall = hit as f64 / 500.0;
    assert!(recall >= 0.9, "recall@10 {recall}");
}

fn validator(schema_file: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests")
        .join(schema_file);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).unwrap()
}

/// The example document `manifests/examples/<name>`.
fn example(name: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/examples")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every document a build writes validates against its JSON Schema in
/// `manifests/`: the commit, `index.json`, `manifest.json` and
/// `quantizer.json` (the build's default codes).
#[tokio::test]
async fn documents_written_by_a_build_match_their_schemas() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    let src = Arc::new(
        ArraySource::new(support::fixtures::random_vectors(500, 4, 2), 4, "generated").unwrap(),
    );
    let s = build(src, store.clone(), &idx, &params(4)).await.unwrap();
    let get = |p: Path| {
        let store = store.clone();
        async move {
            use object_store::ObjectStoreExt;
            let b = store.get(&p).await.unwrap().bytes().await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&b).unwrap()
        }
    };
    let snapshot = Path::from(s.snapshot.as_str());
    let docs = [
        (
            "commit.schema.json",
            get(warehouse::version_path(&idx, 1)).await,
        ),
        // The commit log's advisory documents: the hint, and the latest
        // commit's copy (a commit document).
        (
            "latest-hint.schema.json",
            get(idx.clone().join("versions").join("latest-hint.json")).await,
        ),
        (
            "commit.schema.json",
            get(idx.clone().join("versions").join("latest-commit.json")).await,
        ),
        (
            "index-definition.schema.json",
            get(snapshot.clone().join("index.json")).await,
        ),
        (
            "manifest.schema.json",
            get(snapshot.clone().join("postings").join("manifest.json")).await,
        ),
        (
            "quantizer.schema.json",
            get(snapshot.clone().join("quantizer.json")).await,
        ),
        (
            "calibration.schema.json",
            get(snapshot.clone().join("calibration.json")).await,
        ),
    ];
    for (schema, doc) in docs {
        let v = validator(schema);
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{schema}: {errors:?}\n{doc}");
    }
    let commit = example("commit.json");
    assert!(validator("commit.schema.json").is_valid(&commit));
    // The latest commit's copy: the commit, and where each postings footer
    // lies (its object, the file's size less the pinned footer size).
    let latest = example("latest-commit.json");
    assert!(validator("commit.schema.json").is_valid(&latest));
    let copy = get(idx.clone().join("versions").join("latest-commit.json")).await;
    let manifest = get(snapshot.clone().join("postings").join("manifest.json")).await;
    let footers = get(snapshot.clone().join("postings").join("footers.json")).await;
    let ahead = copy["footers-ahead"].as_array().expect("footers-ahead");
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(ahead.len(), files.len());
    for ((a, file), pin) in ahead
        .iter()
        .zip(files)
        .zip(footers["files"].as_array().unwrap())
    {
        let (size, footer) = (
            file["size"].as_u64().unwrap(),
            pin["footer-size"].as_u64().unwrap(),
        );
        assert_eq!(
            a["path"],
            format!("postings/{}", file["path"].as_str().unwrap())
        );
        assert_eq!(
            (a["offset"].as_u64(), a["length"].as_u64()),
            (Some(size - footer), Some(footer))
        );
    }
    // A version document never has it (only the advisory copy does).
    let mut version = get(warehouse::version_path(&idx, 1)).await;
    assert!(version.get("footers-ahead").is_none());
    version["footers-ahead"] = copy["footers-ahead"].clone();
    {
        use object_store::ObjectStoreExt;
        let bytes = serde_json::to_vec(&version).unwrap();
        store
            .put(&warehouse::version_path(&idx, 1), bytes.into())
            .await
            .unwrap();
    }
    assert!(matches!(
        warehouse::current(&store, &idx).await,
        Err(warehouse::WarehouseError::InvalidCommit { .. })
    ));
    let hint = example("latest-hint.json");
    assert!(validator("latest-hint.schema.json").is_valid(&hint));
    assert!(!validator("latest-hint.schema.json").is_valid(&serde_json::json!({"version": 0})));
    for name in ["quantizer-rabitq4.json", "quantizer-pq4fs.json"] {
        let doc = example(name);
        let errors: Vec<String> = validator("quantizer.schema.json")
            .iter_errors(&doc)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    let mut calibration = example("calibration.json");
    assert!(validator("calibration.schema.json").is_valid(&calibration));
    // Target stops came with version 3.
    calibration["format-version"] = 2.into();
    assert!(!validator("calibration.schema.json").is_valid(&calibration));
    assert!(!validator("commit.schema.json").is_valid(&serde_json::json!({"version": 1})));
}
