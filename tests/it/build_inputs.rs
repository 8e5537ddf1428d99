//! Source inputs the build must take exactly or refuse by name: id columns
//! (integer types only, in range, unique), `--skip-invalid` for every source
//! kind with the count in the summary, non-ASCII source paths, many identical
//! rows, and the clean-up of spill and snapshot folders when a build is
//! interrupted or killed.

use crate::support;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Builder, Float64Array, Int32Array, ListBuilder, StringArray,
    UInt64Array,
};
use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::{
    ArraySource, BuildError, BuildParams, ParquetSource, ParquetSourceOptions, ProgressMode, build,
};
use parqivf::index::{Index, SearchParams};
use support::files::write_parquet;

const DIM: usize = 4;

fn params(nlist: u32) -> BuildParams {
    BuildParams {
        nlist,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

/// A batch with an `embedding` list<float> column of `n` random vectors and
/// the id column `id` given.
fn batch_with_ids(ids: ArrayRef, seed: u64) -> RecordBatch {
    let n = ids.len();
    let data = support::fixtures::random_vectors(n, DIM, seed);
    let mut emb = ListBuilder::new(Float32Builder::new());
    for v in data.chunks(DIM) {
        emb.values().append_slice(v);
        emb.append(true);
    }
    let emb: ArrayRef = Arc::new(emb.finish());
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", ids.data_type().clone(), true),
        Field::new("embedding", emb.data_type().clone(), true),
    ]));
    RecordBatch::try_new(schema, vec![ids, emb]).unwrap()
}

fn with_ids(column: &str) -> ParquetSourceOptions {
    ParquetSourceOptions {
        column: "embedding".into(),
        id_column: Some(column.into()),
        ..Default::default()
    }
}

/// Open the Parquet files of `dir` and build them into memory.
async fn try_build(
    dir: &std::path::Path,
    opts: ParquetSourceOptions,
    nlist: u32,
) -> Result<(Arc<dyn ObjectStore>, parqivf::builder::BuildSummary), BuildError> {
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    let src = ParquetSource::open(store, "*.parquet", opts).await?;
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let s = build(
        Arc::new(src),
        out.clone(),
        &Path::from("idx"),
        &params(nlist),
    )
    .await?;
    Ok((out, s))
}

#[tokio::test]
async fn non_integer_id_columns_are_refused_with_their_type() {
    let cases: Vec<(ArrayRef, &str)> = vec![
        (
            Arc::new(Float64Array::from(vec![790.0, 790.5, 1.0, 2.0])),
            "Float64",
        ),
        (
            Arc::new(BooleanArray::from(vec![true, false, true, false])),
            "Boolean",
        ),
        (
            Arc::new(StringArray::from(vec!["1", "2", "3", "4"])),
            "Utf8",
        ),
    ];
    for (ids, found_type) in cases {
        let d = tempfile::tempdir().unwrap();
        write_parquet(d.path(), "a.parquet", &batch_with_ids(ids, 1));
        let e = try_build(d.path(), with_ids("id"), 1).await.unwrap_err();
        assert!(
            matches!(&e, BuildError::IdColumnType { column, found, .. }
                if column == "id" && found == found_type),
            "{e}"
        );
        assert!(e.to_string().contains("ids must be integers"), "{e}");
    }
    // The vector column named as the id column: its list type, not a cast error.
    let d = tempfile::tempdir().unwrap();
    write_parquet(
        d.path(),
        "a.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![1, 2, 3])), 1),
    );
    let e = try_build(d.path(), with_ids("embedding"), 1)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, BuildError::IdColumnType { .. }), "{text}");
    assert!(
        text.contains("embedding") && text.contains("List") && !text.contains("Cast error"),
        "{text}"
    );
}

#[tokio::test]
async fn uint64_ids_above_i64_max_are_out_of_range_not_null() {
    let d = tempfile::tempdir().unwrap();
    let big = 1u64 << 63;
    write_parquet(
        d.path(),
        "a.parquet",
        &batch_with_ids(Arc::new(UInt64Array::from(vec![5, big, 7])), 1),
    );
    let e = try_build(d.path(), with_ids("id"), 1).await.unwrap_err();
    assert!(
        matches!(e, BuildError::IdOutOfRange { row: 1, value, .. } if value == big),
        "{e}"
    );
    // In range, uint64 and int32 ids are kept exactly.
    for ids in [
        Arc::new(UInt64Array::from(vec![5, (1 << 63) - 1, 7, 9])) as ArrayRef,
        Arc::new(Int32Array::from(vec![-3, 790, 791, 2_000_000_000])) as ArrayRef,
    ] {
        let d = tempfile::tempdir().unwrap();
        let expected: Vec<i64> = {
            let c = arrow::compute::cast(&ids, &arrow::datatypes::DataType::Int64).unwrap();
            let c = c
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap();
            let mut v = c.values().to_vec();
            v.sort_unstable();
            v
        };
        let batch = batch_with_ids(ids, 2);
        write_parquet(d.path(), "a.parquet", &batch);
        let (out, _) = try_build(d.path(), with_ids("id"), 1).await.unwrap();
        let index = Index::open_current(out, &Path::from("idx")).await.unwrap();
        let q = support::fixtures::random_vectors(1, DIM, 2);
        let r = index
            .search(
                &q,
                &SearchParams {
                    k: 10,
                    nprobe: Some(1),
                    ..SearchParams::default()
                },
            )
            .await
            .unwrap();
        let mut got: Vec<i64> = r.hits.iter().map(|h| h.rowid).collect();
        got.sort_unstable();
        assert_eq!(got, expected);
    }
}

#[tokio::test]
async fn duplicate_ids_are_refused_naming_both_rows() {
    let d = tempfile::tempdir().unwrap();
    write_parquet(
        d.path(),
        "a.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![10, 11, 12, 13])), 1),
    );
    write_parquet(
        d.path(),
        "b.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![20, 12, 22])), 2),
    );
    let e = try_build(d.path(), with_ids("id"), 2).await.unwrap_err();
    assert!(
        matches!(&e, BuildError::DuplicateId { id: 12, first, second }
            if first.ends_with("a.parquet row 2") && second.ends_with("b.parquet row 1")),
        "{e}"
    );

    // All ids zero: the first two rows are named.
    let d = tempfile::tempdir().unwrap();
    write_parquet(
        d.path(),
        "a.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![0; 50])), 1),
    );
    let e = try_build(d.path(), with_ids("id"), 2).await.unwrap_err();
    assert!(
        matches!(&e, BuildError::DuplicateId { id: 0, first, second }
            if first.ends_with("row 0") && second.ends_with("row 1")),
        "{e}"
    );
}

#[tokio::test]
async fn skip_invalid_skips_and_counts_for_arrays_and_parquet() {
    let mut data = support::fixtures::random_vectors(50, DIM, 3);
    data[3 * DIM + 1] = f32::NAN;
    data[17 * DIM] = f32::NEG_INFINITY;
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let strict = ArraySource::new(data.clone(), DIM, "v.npy").unwrap();
    let e = build(Arc::new(strict), out.clone(), &Path::from("a"), &params(2))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BuildError::NonFiniteValue { row: 3, source_name, .. } if source_name == "v.npy"),
        "{e}"
    );
    let lenient = ArraySource::new(data.clone(), DIM, "v.npy")
        .unwrap()
        .with_part_size(8)
        .with_skip_invalid(true);
    let s = build(Arc::new(lenient), out.clone(), &Path::from("b"), &params(2))
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped_rows), (48, 2));
    // Rowids stay the row numbers: row 17 is absent, row 18 keeps rowid 18.
    let index = Index::open_current(out.clone(), &Path::from("b"))
        .await
        .unwrap();
    let r = index
        .search(
            &data[18 * DIM..19 * DIM],
            &SearchParams {
                k: 1,
                nprobe: Some(2),
                ..SearchParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.hits[0].rowid, 18);

    // Parquet: the summary counts each skipped row once, even when parts are
    // read twice (a memory limit too small to cache them).
    let d = tempfile::tempdir().unwrap();
    let mut emb = ListBuilder::new(Float32Builder::new());
    for v in data.chunks(DIM) {
        emb.values().append_slice(v);
        emb.append(true);
    }
    let emb: ArrayRef = Arc::new(emb.finish());
    let schema = Arc::new(Schema::new(vec![Field::new(
        "embedding",
        emb.data_type().clone(),
        true,
    )]));
    write_parquet(
        d.path(),
        "a.parquet",
        &RecordBatch::try_new(schema, vec![emb]).unwrap(),
    );
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(d.path()).unwrap());
    let src = ParquetSource::open(
        store,
        "*.parquet",
        ParquetSourceOptions {
            column: "embedding".into(),
            skip_invalid: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p = BuildParams {
        memory_limit: 0,
        ..params(2)
    };
    let s = build(Arc::new(src), out, &Path::from("c"), &p)
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped_rows), (48, 2));
}

#[tokio::test]
async fn a_source_path_with_non_ascii_characters_is_found() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("données é");
    std::fs::create_dir(&dir).unwrap();
    write_parquet(
        &dir,
        "vecteurs.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![1, 2, 3, 4])), 1),
    );
    let opts = parqivf::store::options::StoreOptions::default();
    for location in [
        dir.display().to_string(),
        format!("{}/*.parquet", dir.display()),
        format!("{}/vecteurs.parquet", dir.display()),
    ] {
        let (store, pattern) = parqivf::store::location::open_pattern(&location, &opts).unwrap();
        let src = ParquetSource::open(
            store,
            &pattern,
            ParquetSourceOptions {
                column: "embedding".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{location}: {e}"));
        let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let s = build(Arc::new(src), out, &Path::from("idx"), &params(1))
            .await
            .unwrap();
        assert_eq!(s.rows, 4, "{location}");
    }
}

/// 300 identical rows at nlist 300: k-means can place one list, the other
/// 299 stay empty, and a query nearer to one of those (anything but the row
/// itself) found nothing at exit 0. The build now refuses with the numbers.
#[tokio::test]
async fn fewer_distinct_rows_than_lists_is_refused_not_silently_empty() {
    let n = 300;
    let row = [0.25f32, -1.0, 3.0, 0.5];
    let data: Vec<f32> = row.iter().copied().cycle().take(n * DIM).collect();
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let src = ArraySource::new(data.clone(), DIM, "same").unwrap();
    let e = build(
        Arc::new(src),
        out.clone(),
        &Path::from("idx"),
        &params(n as u32),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            BuildError::TooFewDistinct {
                nlist: 300,
                distinct: 1,
                sample: 300
            }
        ),
        "{e}"
    );
    // With as many lists as distinct vectors every query finds the rows.
    let mut data = data;
    data[..DIM].copy_from_slice(&[9.0, 9.0, 9.0, 9.0]);
    let src = ArraySource::new(data, DIM, "two").unwrap();
    build(Arc::new(src), out.clone(), &Path::from("idx"), &params(2))
        .await
        .unwrap();
    let index = Index::open_current(out, &Path::from("idx")).await.unwrap();
    let r = index
        .search(
            &[-5.0, 2.0, 0.0, 1.0],
            &SearchParams {
                k: 10,
                nprobe: Some(1),
                ..SearchParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.hits.len(), 10);
}

/// Every file below `dir`, relative, sorted.
#[cfg(unix)]
fn files_below(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Start `parqivf build` of `source` into `out` with `tmp` as `$TMPDIR`, and
/// send `signal` as soon as the build has started writing its snapshot.
#[cfg(unix)]
fn build_and_signal(
    source: &std::path::Path,
    out: &std::path::Path,
    tmp: &std::path::Path,
    signal: &str,
) -> std::process::ExitStatus {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args(["build", "--source"])
        .arg(source)
        .arg("--out")
        .arg(out)
        .args(["--nlist", "64", "--memory-limit", "1MiB", "--json"])
        .env("TMPDIR", tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let writing = || {
        std::fs::read_dir(tmp)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().join("snapshot.json").exists())
    };
    let start = std::time::Instant::now();
    while !writing() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the build ended ({status}) before it started writing");
        }
        assert!(
            start.elapsed().as_secs() < 120,
            "the build never started writing"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let kill = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    child.wait().unwrap()
}

#[cfg(unix)]
#[test]
fn sigint_and_kill_9_leave_no_spill_or_partial_snapshot_behind() {
    let d = tempfile::tempdir().unwrap();
    let source = d.path().join("base.npy");
    support::files::write_npy(
        &source,
        &support::fixtures::random_vectors(200_000, 16, 5),
        16,
    );
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = d.path().join("idx");

    // SIGINT: exit 130, nothing left in $TMPDIR or the index.
    let status = build_and_signal(&source, &out, &tmp, "-INT");
    assert_eq!(status.code(), Some(130), "{status}");
    assert_eq!(files_below(&tmp), Vec::<String>::new());
    assert_eq!(files_below(&out), Vec::<String>::new());

    // kill -9: the work folder (and whatever part of the snapshot was
    // written) stays behind...
    let status = build_and_signal(&source, &out, &tmp, "-KILL");
    assert!(status.code().is_none(), "{status}");
    assert!(!files_below(&tmp).is_empty());
    // ...until the next build into the same index sweeps them.
    let ok = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args(["build", "--source"])
        .arg(&source)
        .arg("--out")
        .arg(&out)
        .args(["--nlist", "8", "--json"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(files_below(&tmp), Vec::<String>::new());
    let left = files_below(&out);
    let snapshots: std::collections::BTreeSet<&str> = left
        .iter()
        .filter_map(|f| f.strip_prefix("snapshots/"))
        .filter_map(|f| f.split('/').next())
        .collect();
    assert_eq!(snapshots.len(), 1, "{left:?}");
    assert!(!left.iter().any(|f| f.contains('#')), "{left:?}");
}

/// Errors name each path once, also through the CLI's chain of causes.
#[tokio::test]
async fn error_messages_name_each_path_once() {
    // A file whose id column has another type than the first file's: the
    // mapping error already names the file.
    let d = tempfile::tempdir().unwrap();
    write_parquet(
        d.path(),
        "a.parquet",
        &batch_with_ids(Arc::new(Int32Array::from(vec![1, 2, 3])), 1),
    );
    write_parquet(
        d.path(),
        "b.parquet",
        &batch_with_ids(Arc::new(StringArray::from(vec!["x", "y"])), 2),
    );
    let e = try_build(d.path(), with_ids("id"), 1).await.unwrap_err();
    assert_eq!(e.to_string().matches("b.parquet").count(), 1, "{e}");

    // A NaN through `parqivf build`: the vector column error is printed once.
    let d = tempfile::tempdir().unwrap();
    let mut emb = ListBuilder::new(Float32Builder::new());
    for i in 0..10 {
        let x = if i == 3 { f32::NAN } else { i as f32 };
        emb.values().append_slice(&[x, 1.0, 2.0, 3.0]);
        emb.append(true);
    }
    let emb: ArrayRef = Arc::new(emb.finish());
    let schema = Arc::new(Schema::new(vec![Field::new(
        "embedding",
        emb.data_type().clone(),
        true,
    )]));
    write_parquet(
        d.path(),
        "v.parquet",
        &RecordBatch::try_new(schema, vec![emb]).unwrap(),
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .args(["build", "--nlist", "2", "--source"])
        .arg(d.path().join("v.parquet"))
        .arg("--out")
        .arg(d.path().join("idx"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert_eq!(last.matches("v.parquet").count(), 1, "{last}");
    assert_eq!(last.matches("row 3").count(), 1, "{last}");
}
