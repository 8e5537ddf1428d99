//! `parqivf search` end to end on a local folder: JSON lines with rowids and
//! distances equal to the library's answer; exit code 2 for bad input.

use crate::support;

use arrow::array::{FixedSizeBinaryArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parqivf::index::{Index, SearchParams};
use std::process::Command;
use std::sync::Arc;
use support::fixtures::{Layout, dataset, hierarchy, rowids, write_index};

const DIM: usize = 8;

fn write_queries(path: &std::path::Path, queries: &[f32], dim: usize) {
    let bytes: Vec<u8> = queries.iter().flat_map(|x| x.to_le_bytes()).collect();
    let col = FixedSizeBinaryArray::try_new((dim * 4) as i32, bytes.into(), None).unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "vector",
        DataType::FixedSizeBinary((dim * 4) as i32),
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(col)]).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[tokio::test]
async fn json_output_matches_the_library_and_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let data = dataset(1000, DIM, 1);
    let h = hierarchy(&data, DIM, 2, 8, 2);
    write_index(
        store.clone(),
        &Path::from("idx"),
        &h,
        &data,
        &rowids(1000),
        Layout::default(),
    )
    .await;
    let queries = data[..3 * DIM].to_vec();
    let qfile = dir.path().join("q.parquet");
    write_queries(&qfile, &queries, DIM);
    let index_dir = dir.path().join("idx");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args([
                "search",
                "--index",
                index_dir.to_str().unwrap(),
                "--queries",
                qfile.to_str().unwrap(),
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let lines = support::cli::json_lines(run(&["--k", "5", "--nprobe", "4", "--json", "--stats"]));
    let index = Index::open(store, &Path::from("idx")).await.unwrap();
    let params = SearchParams {
        k: 5,
        nprobe: Some(4),
        ..SearchParams::default()
    };
    let expected = index.search_batch(&queries, &params).await.unwrap();
    assert_eq!(lines.len(), 3);
    for (line, r) in lines.iter().zip(&expected) {
        let rowids: Vec<i64> = r.hits.iter().map(|h| h.rowid).collect();
        assert_eq!(line["rowids"], serde_json::json!(rowids));
        assert!(line["stats"]["planned_row_groups"].as_u64().unwrap() > 0);
    }
    // The first query carries what opening the index cost; the others not.
    let open = &lines[0]["open"];
    assert!(open["rounds"].as_u64().unwrap() >= 1, "{open}");
    assert!(open["bytes"].as_u64().unwrap() > 0, "{open}");
    assert!(lines[1].get("open").is_none());
    for bad in [&["--nprobe", "9"][..], &["--k", "0"][..]] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    write_queries(&qfile, &queries[..2 * (DIM - 1)], DIM - 1);
    assert_eq!(run(&[]).status.code(), Some(2), "bad dimension");
}

/// `--threads 0` is a usage error for every command that takes it (the
/// flag left out means every core), named in the message.
#[test]
fn zero_threads_are_refused_by_every_command() {
    for argv in [
        &["build", "--source", "x.npy", "--out", "idx"][..],
        &["search", "--index", "idx", "--queries", "q.npy"][..],
        &["serve", "--index", "a=idx"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(argv)
            .args(["--threads", "0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {err}");
        assert!(err.contains("--threads"), "{argv:?}: {err}");
    }
}

/// Queries are searched and printed a batch at a time: the output does not
/// depend on the batch size, query numbers run on across batches, and the
/// benchmark mode reads the ground truth alongside.
#[tokio::test]
async fn batches_give_the_same_output_and_recall() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let data = dataset(1000, DIM, 3);
    let h = hierarchy(&data, DIM, 2, 8, 2);
    write_index(
        store.clone(),
        &Path::from("idx"),
        &h,
        &data,
        &rowids(1000),
        Layout::default(),
    )
    .await;
    let nq = 7;
    let queries = data[..nq * DIM].to_vec();
    let qfile = dir.path().join("q.npy");
    support::files::write_npy(&qfile, &queries, DIM);
    let index_dir = dir.path().join("idx");
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args([
                "search",
                "--index",
                index_dir.to_str().unwrap(),
                "--queries",
                qfile.to_str().unwrap(),
                "--k",
                "5",
                "--nprobe",
                "8",
            ])
            .args(extra)
            .output()
            .unwrap();
        support::cli::stdout(out)
    };
    let whole = run(&["--json"]);
    assert_eq!(run(&["--json", "--batch-size", "2"]), whole);
    assert_eq!(run(&["--batch-size", "3"]), run(&[]));
    let lines: Vec<serde_json::Value> = whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), nq);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["query"], serde_json::json!(i));
    }

    // Ground truth = the exhaustive answer (nprobe = nlist): recall 1.
    let gt: Vec<u8> = lines
        .iter()
        .flat_map(|l| {
            let ids: Vec<i32> = l["rowids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap() as i32)
                .collect();
            std::iter::once(5i32)
                .chain(ids)
                .flat_map(i32::to_le_bytes)
                .collect::<Vec<_>>()
        })
        .collect();
    let gt_file = dir.path().join("gt.ivecs");
    std::fs::write(&gt_file, gt).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&run(&[
        "--groundtruth",
        gt_file.to_str().unwrap(),
        "--batch-size",
        "3",
        "--reps",
        "1",
    ]))
    .unwrap();
    assert_eq!(summary["queries"], serde_json::json!(nq));
    assert_eq!(summary["recall"], serde_json::json!(1.0));
}

/// A new `parqivf search` process opens from the latest commit's bundle
/// (one round) and checks that the commit is current alongside its first
/// batch. A stale bundle and copy (a newer commit exists) are caught by
/// that check: the process opens the current snapshot again and prints
/// its answers, never the stale one's.
#[tokio::test]
async fn a_search_process_answers_from_the_current_commit_when_the_bundle_is_stale() {
    use parqivf::builder::{ArraySource, BuildParams, ProgressMode, build};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let idx = Path::from("idx");
    let params = BuildParams {
        nlist: 8,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let publish = |data: Vec<f32>| {
        let (store, idx, params) = (Arc::clone(&store), idx.clone(), params.clone());
        async move {
            let src = Arc::new(ArraySource::new(data, DIM, "generated").unwrap());
            build(src, store, &idx, &params).await.unwrap();
        }
    };
    let (old, new) = (dataset(600, DIM, 3), dataset(900, DIM, 4));
    publish(old).await;
    let versions = dir.path().join("idx").join("versions");
    let advisory = ["latest-commit.json", "latest-bundle.bin"];
    let stale: Vec<Vec<u8>> = advisory
        .iter()
        .map(|f| std::fs::read(versions.join(f)).unwrap())
        .collect();
    publish(new.clone()).await;

    let queries = new[..2 * DIM].to_vec();
    let qfile = dir.path().join("q.parquet");
    write_queries(&qfile, &queries, DIM);
    let search = || {
        let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(["search", "--index"])
            .arg(dir.path().join("idx"))
            .arg("--queries")
            .arg(&qfile)
            .args(["--k", "5", "--nprobe", "8", "--json", "--stats"])
            .output()
            .unwrap();
        let lines = support::cli::json_lines(out);
        let rowids: Vec<serde_json::Value> = lines.iter().map(|l| l["rowids"].clone()).collect();
        (rowids, lines[0]["open"]["ahead"].as_bool().unwrap_or(false))
    };
    let current = Index::open_current(Arc::clone(&store), &idx).await.unwrap();
    assert_eq!(current.commit().map(|c| c.version), Some(2));
    let sp = SearchParams {
        k: 5,
        nprobe: Some(8),
        ..SearchParams::default()
    };
    let mut expected = Vec::new();
    for q in queries.chunks_exact(DIM) {
        let hits = current.search(q, &sp).await.unwrap().hits;
        expected.push(serde_json::json!(
            hits.iter().map(|h| h.rowid).collect::<Vec<_>>()
        ));
    }

    // The bundle is current: opened ahead, the current answers.
    assert_eq!(search(), (expected.clone(), true));
    // Version 1's copy and bundle: opened ahead at version 1, caught, and
    // opened again (confirmed) at version 2.
    for (f, bytes) in advisory.iter().zip(&stale) {
        std::fs::write(versions.join(f), bytes).unwrap();
    }
    assert_eq!(search(), (expected, false));
}
