//! Tables with their own ids (issue #29): `refresh --id-column` follows files
//! gained, lost and rewritten (the ids of each file are recorded in
//! `source-ids.parquet`), a rewrite that keeps size and mtime is seen with
//! content hashes, and `delete`/`upsert` by id give the answers of a fresh
//! build over the resulting rows. Exhaustive search without codes is exact,
//! so "equals a fresh build" is "equals brute force over the rows".

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use parqivf::builder::mutate::{UpsertRows, delete, delete_where, upsert};
use parqivf::builder::refresh::{CompactPolicy, RefreshParams, refresh};
use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec, build, open_source};
use parqivf::format::warehouse::{self, WarehouseError};
use parqivf::index::{Index, SearchParams};
use parqivf::store::options::StoreOptions;

use crate::support;
use crate::support::files::write_parquet;

const DIM: usize = 8;
const NLIST: u32 = 8;
const FILES: i64 = 20;
const ROWS: i64 = 30;

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
        id_column: Some("id".into()),
        ..SourceSpec::default()
    }
}

/// The table: file name → rows (id, vector). File `f` holds ids that are
/// not positions: `f * 1000 + 7 .. + ROWS`.
type Table = BTreeMap<String, Vec<(i64, Vec<f32>)>>;

fn file_rows(f: i64, seed: u64) -> Vec<(i64, Vec<f32>)> {
    let ids = f * 1000 + 7..f * 1000 + 7 + ROWS;
    let values = support::fixtures::dataset(ROWS as usize, DIM, seed);
    ids.zip(values.chunks(DIM).map(<[f32]>::to_vec)).collect()
}

fn write(dir: &std::path::Path, table: &mut Table, name: &str, rows: Vec<(i64, Vec<f32>)>) {
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let values: Vec<f32> = rows.iter().flat_map(|r| r.1.clone()).collect();
    let batch = support::files::vectors_with_ids(0..ids.len() as i64, &values, DIM);
    // The helper numbers ids 0..n: put the file's own ids in.
    let batch = arrow::array::RecordBatch::try_new(
        batch.schema(),
        vec![
            Arc::new(arrow::array::Int64Array::from(ids)),
            batch.column(1).clone(),
        ],
    )
    .unwrap();
    write_parquet(dir, name, &batch);
    table.insert(name.to_string(), rows);
}

/// A source folder of `files` keyed files (`part-NN.parquet`, file `f`
/// holding `file_rows(f, f)`) and its table.
fn keyed_table(files: i64) -> (tempfile::TempDir, Table) {
    let src = tempfile::tempdir().unwrap();
    let mut table = Table::new();
    for f in 0..files {
        write(
            src.path(),
            &mut table,
            &format!("part-{f:02}.parquet"),
            file_rows(f, f as u64),
        );
    }
    (src, table)
}

fn all_rows(table: &Table) -> Vec<(i64, Vec<f32>)> {
    table.values().flatten().cloned().collect()
}

fn local() -> (tempfile::TempDir, Arc<dyn ObjectStore>, Path) {
    let dir = tempfile::tempdir().unwrap();
    let (store, root) = parqivf::store::location::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store, root)
}

/// The rowids of an exhaustive search of the current version.
async fn exhaustive(store: &Arc<dyn ObjectStore>, index: &Path, q: &[f32], k: usize) -> Vec<i64> {
    let idx = Index::open_current(store.clone(), index).await.unwrap();
    let p = SearchParams {
        k,
        nprobe: Some(NLIST as usize),
        ..SearchParams::default()
    };
    idx.search(q, &p)
        .await
        .unwrap()
        .hits
        .iter()
        .map(|h| h.rowid)
        .collect()
}

/// Exhaustive top-10 equals brute force over `rows` for 20 queries, and a
/// k beyond the table returns every live id exactly once.
async fn check(what: &str, store: &Arc<dyn ObjectStore>, index: &Path, rows: &[(i64, Vec<f32>)]) {
    for (i, q) in support::fixtures::dataset(20, DIM, 99)
        .chunks(DIM)
        .enumerate()
    {
        assert_eq!(
            exhaustive(store, index, q, 10).await,
            support::fixtures::nearest_ids(rows, q, 10),
            "{what}: query {i}"
        );
    }
    let mut all = exhaustive(store, index, &rows[0].1, rows.len() + 50).await;
    all.sort_unstable();
    let mut ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    assert_eq!(all, ids, "{what}: every live id exactly once");
}

async fn build_from(src: &std::path::Path, store: &Arc<dyn ObjectStore>, index: &Path) {
    let source = open_source(&spec(src), &StoreOptions::default())
        .await
        .unwrap();
    build(source, store.clone(), index, &params())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_with_an_id_column_follows_a_file_gained_lost_and_rewritten() {
    let (src, mut table) = keyed_table(FILES);
    let (_i, store, index) = local();
    build_from(src.path(), &store, &index).await;
    check("built", &store, &index, &all_rows(&table)).await;

    // Gains one, loses one, one rewritten with changed vectors (same ids).
    write(src.path(), &mut table, "part-20.parquet", file_rows(20, 20));
    std::fs::remove_file(src.path().join("part-03.parquet")).unwrap();
    table.remove("part-03.parquet");
    let rewritten: Vec<(i64, Vec<f32>)> = file_rows(5, 500);
    write(src.path(), &mut table, "part-05.parquet", rewritten);
    let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!(s.version, Some(2));
    assert_eq!(s.rows_added, 2 * ROWS as u64, "{s:?}");
    assert_eq!(s.rows_removed, 2 * ROWS as u64, "{s:?}");
    assert_eq!(s.rows_skipped, 0);
    check("refreshed", &store, &index, &all_rows(&table)).await;

    // The same answers as a fresh build of the table as it is now.
    let (_j, fresh_store, fresh) = local();
    build_from(src.path(), &fresh_store, &fresh).await;
    for q in support::fixtures::dataset(20, DIM, 7).chunks(DIM) {
        assert_eq!(
            exhaustive(&store, &index, q, 10).await,
            exhaustive(&fresh_store, &fresh, q, 10).await
        );
    }

    // The rewritten file changes again and the new one goes: each refresh
    // deletes exactly the rows the file held.
    write(src.path(), &mut table, "part-05.parquet", file_rows(5, 501));
    std::fs::remove_file(src.path().join("part-20.parquet")).unwrap();
    table.remove("part-20.parquet");
    refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    check("refreshed twice", &store, &index, &all_rows(&table)).await;
}

/// The finding of issue #29: a file rewritten in place, same size, its
/// mtime put back, is invisible to size+ETag; with `content_hash` it is a
/// change, and its new vectors are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_that_keeps_size_and_mtime_is_seen_with_content_hashes() {
    let (src, mut table) = keyed_table(3);
    let (_i, store, index) = local();
    let hashed = SourceSpec {
        content_hash: true,
        ..spec(src.path())
    };
    let source = open_source(&hashed, &StoreOptions::default())
        .await
        .unwrap();
    build(source, store.clone(), &index, &params())
        .await
        .unwrap();
    // The control: the same table without content hashes.
    let (_j, plain_store, plain) = local();
    build_from(src.path(), &plain_store, &plain).await;

    // Change one value of part-01 in place (the file is uncompressed and
    // its values PLAIN or in a PLAIN dictionary), then restore the mtime.
    let path = src.path().join("part-01.parquet");
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let rows = table.get_mut("part-01.parquet").unwrap();
    let old = rows[4].1[0].to_le_bytes();
    let at = bytes
        .windows(4)
        .position(|w| w == old)
        .expect("the value's bytes are in the file");
    let new_value = 9.5f32;
    bytes[at..at + 4].copy_from_slice(&new_value.to_le_bytes());
    rows[4].1[0] = new_value;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(&bytes).unwrap();
        f.set_modified(mtime).unwrap();
    }
    let s = refresh(
        plain_store.clone(),
        &plain,
        &RefreshParams::default(),
        &params(),
    )
    .await
    .unwrap();
    assert_eq!(
        s.version, None,
        "size and ETag alone do not see the rewrite"
    );
    let s = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    assert_eq!(
        (s.version, s.rows_removed, s.rows_added),
        (Some(2), 30, 30),
        "{s:?}"
    );
    check("rewritten in place", &store, &index, &all_rows(&table)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_upsert_by_id_answer_like_a_fresh_build_and_survive_a_refresh() {
    let (src, table) = keyed_table(FILES);
    let (_i, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let mut rows = all_rows(&table);

    // Delete 1 % of the ids (and one that is not there).
    let gone: Vec<i64> = rows.iter().step_by(100).map(|r| r.0).collect();
    let mut asked = gone.clone();
    asked.push(-5);
    let s = delete(
        store.clone(),
        &index,
        &asked,
        &params(),
        CompactPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        (s.version, s.rows_removed, s.ids_not_found),
        (Some(2), gone.len() as u64, 1)
    );
    rows.retain(|r| !gone.contains(&r.0));
    check("deleted", &store, &index, &rows).await;

    // Upsert 1 %: half replace live rows (new vectors), half are new ids.
    let replaced: Vec<i64> = rows.iter().skip(1).step_by(200).map(|r| r.0).collect();
    let new_ids: Vec<i64> = (0..replaced.len() as i64).map(|i| 900_000 + i).collect();
    let ids: Vec<i64> = replaced.iter().chain(&new_ids).copied().collect();
    let vectors = support::fixtures::dataset(ids.len(), DIM, 4242);
    let s = upsert(
        store.clone(),
        &index,
        UpsertRows {
            ids: ids.clone(),
            vectors: vectors.clone(),
            payload: None,
        },
        &params(),
        CompactPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!(s.version, Some(3));
    assert_eq!(
        (s.rows_added, s.rows_removed),
        (ids.len() as u64, replaced.len() as u64)
    );
    assert_eq!(s.ids_not_found, new_ids.len() as u64);
    rows.retain(|r| !replaced.contains(&r.0));
    rows.extend(
        ids.iter()
            .copied()
            .zip(vectors.chunks(DIM).map(<[f32]>::to_vec)),
    );
    check("upserted", &store, &index, &rows).await;

    // The file that held an upserted id goes: its other rows go, the
    // upserted row (the API's now) stays.
    let owner = table
        .iter()
        .find(|(_, r)| r.iter().any(|(id, _)| *id == replaced[0]))
        .map(|(name, _)| name.clone())
        .unwrap();
    std::fs::remove_file(src.path().join(&owner)).unwrap();
    let held: Vec<i64> = table[&owner].iter().map(|r| r.0).collect();
    rows.retain(|r| r.0 == replaced[0] || !held.contains(&r.0));
    refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap();
    check("owner gone", &store, &index, &rows).await;

    // A compaction keeps the answers and the ownership.
    let policy = CompactPolicy {
        deltas_above: Some(0),
        ..CompactPolicy::default()
    };
    let s = delete(store.clone(), &index, &[rows[0].0], &params(), policy)
        .await
        .unwrap();
    assert!(s.compacted.is_some(), "{s:?}");
    rows.remove(0);
    check("compacted", &store, &index, &rows).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mutations_are_typed_errors_and_publish_nothing() {
    let src = tempfile::tempdir().unwrap();
    let mut table = Table::new();
    write(src.path(), &mut table, "a.parquet", file_rows(0, 1));
    let (_i, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let up = |ids: Vec<i64>, vectors: Vec<f32>| UpsertRows {
        ids,
        vectors,
        payload: None,
    };
    let none = CompactPolicy::default();
    let e = upsert(
        store.clone(),
        &index,
        up(vec![1, 1], vec![0.5; 2 * DIM]),
        &params(),
        none,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, BuildError::DuplicateId { id: 1, .. }), "{e}");
    let e = upsert(
        store.clone(),
        &index,
        up(vec![1], vec![0.5; DIM + 1]),
        &params(),
        none,
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("9 values for 1 ids of dimension 8"),
        "{e}"
    );
    let mut bad = vec![0.5; DIM];
    bad[3] = f32::NAN;
    let e = upsert(store.clone(), &index, up(vec![1], bad), &params(), none)
        .await
        .unwrap_err();
    assert!(matches!(e, BuildError::NonFiniteValue { .. }), "{e}");
    let e = delete_where(store.clone(), &index, "nope = 1", &params(), none)
        .await
        .unwrap_err();
    assert!(
        matches!(e, BuildError::BadParameter { name: "where", .. }),
        "{e}"
    );
    // Nothing to delete: nothing published.
    let s = delete(store.clone(), &index, &[123_456], &params(), none)
        .await
        .unwrap();
    assert_eq!((s.version, s.ids_not_found), (None, 1));
    let current = warehouse::current(&store, &index).await.unwrap().unwrap();
    assert_eq!(current.version, 1, "nothing published");

    // An index whose rowids are positions refuses an upsert.
    let (_j, store2, index2) = local();
    let positional = SourceSpec {
        id_column: None,
        payload: vec!["id".into()],
        ..spec(src.path())
    };
    let source = open_source(&positional, &StoreOptions::default())
        .await
        .unwrap();
    build(source, store2.clone(), &index2, &params())
        .await
        .unwrap();
    let e = upsert(
        store2.clone(),
        &index2,
        up(vec![1], vec![0.5; DIM]),
        &params(),
        none,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &e,
            BuildError::Mutation {
                operation: "upsert",
                ..
            }
        ) && e.to_string().contains("--id-column"),
        "{e}"
    );
    // … but deletes by a payload filter.
    let s = delete_where(store2.clone(), &index2, "id < 10", &params(), none)
        .await
        .unwrap();
    assert_eq!(s.rows_removed, 3, "ids 7, 8, 9");
    let left: Vec<(i64, Vec<f32>)> = table["a.parquet"]
        .iter()
        .enumerate()
        .filter(|(_, r)| r.0 >= 10)
        .map(|(pos, r)| (pos as i64, r.1.clone()))
        .collect();
    check("deleted where", &store2, &index2, &left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_deletes_give_one_winner_and_the_loser_deletes_nothing() {
    let src = tempfile::tempdir().unwrap();
    let mut table = Table::new();
    write(src.path(), &mut table, "a.parquet", file_rows(0, 1));
    let (_i, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let rows = all_rows(&table);
    let none = CompactPolicy::default();
    let (first, second, p) = ([rows[0].0], [rows[1].0], params());
    let (a, b) = tokio::join!(
        delete(store.clone(), &index, &first, &p, none),
        delete(store.clone(), &index, &second, &p, none)
    );
    let (won, lost, err) = match (a, b) {
        (Ok(_), Err(e)) => (rows[0].0, rows[1].0, e),
        (Err(e), Ok(_)) => (rows[1].0, rows[0].0, e),
        other => panic!("expected one winner, got {other:?}"),
    };
    assert!(
        matches!(
            err,
            BuildError::Warehouse(WarehouseError::Conflict { version: 2, .. })
        ),
        "{err}"
    );
    let left: Vec<(i64, Vec<f32>)> = rows.iter().filter(|r| r.0 != won).cloned().collect();
    check("after the race", &store, &index, &left).await;
    assert!(
        left.iter().any(|r| r.0 == lost),
        "the loser deleted nothing"
    );
}

/// `POST /v1/indexes/{name}/delete|upsert`: behind the token, published as
/// the next version and served at once; answers equal brute force over the
/// resulting rows; bad bodies are 400s with codes, a race loser a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_delete_and_upsert_publish_and_serve_the_next_version() {
    use parqivf::server::index_backend::IndexLoader;
    use parqivf::server::{Server, ServerConfig};
    use serde_json::{Value, json};

    let (src, table) = keyed_table(5);
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("idx").display().to_string();
    let (store, index) = parqivf::store::location::open(&location).unwrap();
    build_from(src.path(), &store, &index).await;
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        indexes: vec![("docs".into(), location.clone())],
        auth_token: support::server::token(),
        ..ServerConfig::default()
    };
    let server = Server::bind(config, Arc::new(IndexLoader::default()))
        .await
        .unwrap();
    let base = format!("http://{}/v1/indexes/docs", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value, token: bool| {
        let mut r = client.post(format!("{base}/{path}")).json(&body);
        if token {
            r = r.bearer_auth(support::server::TOKEN);
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let mut rows = all_rows(&table);

    // Without the token: 401, nothing changes.
    let (status, _) = post("delete", json!({"ids": [rows[0].0]}), false).await;
    assert_eq!(status, 401);
    // Delete 1 %, then upsert 1 % (one replaced, one new).
    let gone: Vec<i64> = rows.iter().step_by(100).map(|r| r.0).collect();
    let (status, body) = post("delete", json!({ "ids": gone }), true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["change"]["rows-removed"], gone.len() as u64, "{body}");
    assert!(
        body["snapshot"].as_str().unwrap().starts_with("v2:"),
        "{body}"
    );
    rows.retain(|r| !gone.contains(&r.0));
    let ids = [rows[3].0, 777_777];
    let vectors = support::fixtures::dataset(2, DIM, 31);
    // One vector as numbers, one packed.
    let (status, body) = post(
        "upsert",
        json!({"ids": ids, "vectors": [json!(vectors[..DIM]), json!(support::server::pack(&vectors[DIM..]))]}),
        true,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            body["change"]["rows-added"].as_u64(),
            body["change"]["rows-removed"].as_u64()
        ),
        (Some(2), Some(1))
    );
    rows.remove(3);
    rows.extend(
        ids.iter()
            .copied()
            .zip(vectors.chunks(DIM).map(<[f32]>::to_vec)),
    );
    // The server serves the new version at once, and it is right.
    for q in support::fixtures::dataset(5, DIM, 3).chunks(DIM) {
        let (status, body) = post(
            "search",
            json!({"vector": q, "k": 10, "nprobe": NLIST}),
            true,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let got: Vec<i64> = body["results"][0]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["rowid"].as_i64().unwrap())
            .collect();
        assert_eq!(got, support::fixtures::nearest_ids(&rows, q, 10));
        assert!(body["snapshot"].as_str().unwrap().starts_with("v3:"));
    }
    check("over http", &store, &index, &rows).await;
    // Bad bodies.
    let (status, body) = post("delete", json!({"ids": [1], "filter": "id = 1"}), true).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    let (status, body) = post("upsert", json!({"ids": [1], "vectors": [[1.0]]}), true).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("wrong_dimension")),
        "{body}"
    );
    let (status, body) = post(
        "upsert",
        json!({"ids": [5, 5], "vectors": [vec![0.5; DIM], vec![0.5; DIM]]}),
        true,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("duplicate_id")),
        "{body}"
    );
    let (status, body) = post("delete", json!({"filter": "nope = 1"}), true).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_change")),
        "{body}"
    );
    stop.send(()).ok();
}

/// The CLI: `delete --ids ids.npy`, `upsert --from rows.parquet` (the
/// index's column names) and `upsert --ids --vectors`, each a new version
/// answered like brute force; `--json` reports the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_delete_and_upsert_by_id() {
    let (src, table) = keyed_table(5);
    let (dir, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let mut rows = all_rows(&table);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_parqivf"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let at = dir.path().to_str().unwrap();
    let work = tempfile::tempdir().unwrap();

    // delete --ids (a 1-D int64 .npy)
    let gone: Vec<i64> = rows.iter().step_by(50).map(|r| r.0).collect();
    let ids_path = work.path().join("gone.npy");
    support::files::write_ids_npy(&ids_path, &gone);
    let s = run(&[
        "delete",
        "--index",
        at,
        "--ids",
        ids_path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(s["rows-removed"].as_u64(), Some(gone.len() as u64), "{s}");
    rows.retain(|r| !gone.contains(&r.0));

    // upsert --from a Parquet file with the index's columns
    let from = tempfile::tempdir().unwrap();
    let mut up = Table::new();
    let replaced = rows[2].0;
    let new_rows = vec![(replaced, vec![0.25; DIM]), (555_555, vec![-0.5; DIM])];
    write(from.path(), &mut up, "rows.parquet", new_rows.clone());
    let s = run(&[
        "upsert",
        "--index",
        at,
        "--from",
        from.path().join("rows.parquet").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        (s["rows-added"].as_u64(), s["rows-removed"].as_u64()),
        (Some(2), Some(1)),
        "{s}"
    );
    rows.retain(|r| r.0 != replaced);
    rows.extend(new_rows);

    // upsert --ids --vectors
    let v_path = work.path().join("v.npy");
    support::files::write_npy(&v_path, &[0.75; DIM], DIM);
    let one = work.path().join("one.npy");
    support::files::write_ids_npy(&one, &[555_555]);
    let s = run(&[
        "upsert",
        "--index",
        at,
        "--ids",
        one.to_str().unwrap(),
        "--vectors",
        v_path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(s["version"].as_u64(), Some(4), "{s}");
    rows.retain(|r| r.0 != 555_555);
    rows.push((555_555, vec![0.75; DIM]));
    check("cli", &store, &index, &rows).await;
}

/// A write failing at any point of an upsert (delta files, deletions,
/// source ids, file set, index.json, the commit) leaves the previous
/// version current and answering as before; the last try lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_failing_at_any_write_leaves_the_previous_version_current() {
    let (src, table) = keyed_table(3);
    let (_i, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let mut rows = all_rows(&table);
    let ids = vec![rows[0].0, 42];
    let vectors = support::fixtures::dataset(2, DIM, 77);
    let mut n = 0;
    loop {
        let failing: Arc<dyn ObjectStore> = Arc::new(support::store::fail_nth_write(&store, n));
        let up = UpsertRows {
            ids: ids.clone(),
            vectors: vectors.clone(),
            payload: None,
        };
        match upsert(failing, &index, up, &params(), CompactPolicy::default()).await {
            Err(e) => {
                assert!(n < 100, "an upsert fails without an injected failure: {e}");
                let current = warehouse::current(&store, &index).await.unwrap().unwrap();
                assert_eq!(current.version, 1, "write {n} failed: {e}");
                n += 1;
            }
            Ok(s) => {
                assert_eq!(s.version, Some(2));
                break;
            }
        }
    }
    assert!(n >= 5, "an upsert writes at least 5 objects, failed at {n}");
    rows.retain(|r| r.0 != ids[0]);
    rows.extend(
        ids.iter()
            .copied()
            .zip(vectors.chunks(DIM).map(<[f32]>::to_vec)),
    );
    check("after the faults", &store, &index, &rows).await;
}

/// Issue #29's cold-IO bound: a new process's first query (open + search,
/// nprobe 16 of 64, default codes) on an index with 5 small deltas makes
/// at most 1.25× the requests of the same query on the compacted index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_small_deltas_cost_a_cold_query_at_most_a_quarter_more_requests() {
    use parqivf::store::counting::CountingStore;
    const D: usize = 16;
    let src = tempfile::tempdir().unwrap();
    let rows_of = |f: i64, n: i64| {
        let values = support::fixtures::dataset(n as usize, D, f as u64);
        support::files::vectors_with_ids(f * 100_000..f * 100_000 + n, &values, D)
    };
    for f in 0..20 {
        write_parquet(
            src.path(),
            &format!("part-{f:02}.parquet"),
            &rows_of(f, 1000),
        );
    }
    let (_i, store, index) = local();
    let p = BuildParams {
        nlist: 64,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    };
    let source = open_source(&spec(src.path()), &StoreOptions::default())
        .await
        .unwrap();
    build(source, store.clone(), &index, &p).await.unwrap();
    for f in 20..25 {
        write_parquet(
            src.path(),
            &format!("part-{f:02}.parquet"),
            &rows_of(f, 200),
        );
        refresh(store.clone(), &index, &RefreshParams::default(), &p)
            .await
            .unwrap();
    }
    let queries = support::fixtures::dataset(20, D, 5);
    let cold = |store: Arc<dyn ObjectStore>| {
        let index = index.clone();
        let queries = queries.clone();
        async move {
            let mut total = 0;
            for q in queries.chunks(D) {
                let counting = CountingStore::new(store.clone());
                let s: Arc<dyn ObjectStore> = Arc::new(counting.clone());
                let idx = Index::open_current(s, &index).await.unwrap();
                let params = SearchParams {
                    k: 10,
                    nprobe: Some(16),
                    ..SearchParams::default()
                };
                idx.search(q, &params).await.unwrap();
                let c = counting.counts();
                total += c.get_requests + c.head_requests + c.list_requests;
            }
            total
        }
    };
    let with_deltas = cold(store.clone()).await;
    // The refreshed snapshot's bundle holds its base's documents, every
    // delta table's and every footer: a new process opens it in one round
    // and its first query reads no footer.
    let counting =
        CountingStore::new(store.clone()).with_latency(std::time::Duration::from_millis(2));
    let (idx, pending) = Index::open_ahead(
        Arc::new(counting.clone()),
        &index,
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap();
    let open = counting.counts();
    assert_eq!((open.rounds, open.get_requests), (1, 3), "{open:?}");
    let deltas = idx.definition().layers.as_ref().map(|l| l.deltas.len());
    assert!(
        deltas.is_some_and(|n| n >= 1),
        "a refreshed snapshot: {deltas:?}"
    );
    let params = SearchParams {
        k: 10,
        nprobe: Some(16),
        ..SearchParams::default()
    };
    let (got, current) = futures::join!(
        idx.search(&queries[..D], &params),
        pending.expect("opened ahead").is_current()
    );
    let got = got.unwrap();
    assert!(current.unwrap());
    assert!(got.stats.footers_read > 0, "{:?}", got.stats);
    let rounds = if got.stats.pages_read > 0 { 2 } else { 1 };
    assert_eq!(got.stats.rounds, rounds, "no footer round: {:?}", got.stats);
    parqivf::builder::refresh::compact(store.clone(), &index, &p)
        .await
        .unwrap();
    let compacted = cold(store.clone()).await;
    println!(
        "cold requests over 20 queries: 5 deltas {with_deltas}, compacted {compacted}, ratio {:.2}",
        with_deltas as f64 / compacted as f64
    );
    assert!(
        with_deltas as f64 <= 1.25 * compacted as f64,
        "5 deltas: {with_deltas} requests, compacted: {compacted}"
    );
}

/// `source-files.json`: both examples (version 1, and version 2 with ids
/// and hashes) and the document a build with an id column and content
/// hashes writes validate against the schema and parse; the side table it
/// pins reads back with pyarrow-independent Rust and holds every id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_files_documents_validate_and_the_side_table_holds_every_id() {
    use parqivf::format::source_files::SourceFiles;
    use parqivf::format::source_ids::SourceIds;
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../manifests/source-files.schema.json")).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let (src, table) = keyed_table(3);
    let (dir, store, index) = local();
    let source = open_source(
        &SourceSpec {
            content_hash: true,
            ..spec(src.path())
        },
        &StoreOptions::default(),
    )
    .await
    .unwrap();
    build(source, store.clone(), &index, &params())
        .await
        .unwrap();
    let commit = warehouse::current(&store, &index).await.unwrap().unwrap();
    let folder = dir.path().join(&commit.snapshot);
    let written = std::fs::read_to_string(folder.join("source-files.json")).unwrap();
    for doc in [
        include_str!("../../manifests/examples/source-files.json"),
        include_str!("../../manifests/examples/source-files-ids.json"),
        written.as_str(),
    ] {
        let value: serde_json::Value = serde_json::from_str(doc).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{doc}\n{errors:#?}");
        SourceFiles::parse("doc", doc.as_bytes()).unwrap();
    }
    let files = SourceFiles::parse("doc", written.as_bytes()).unwrap();
    assert!(files.hashed() && files.ids.is_some());
    let bytes = std::fs::read(folder.join("source-ids.parquet")).unwrap();
    let ids = SourceIds::decode("source-ids.parquet", bytes.into()).unwrap();
    for f in &files.files {
        let name = f.path.rsplit('/').next().unwrap();
        let mut want: Vec<i64> = table[name].iter().map(|r| r.0).collect();
        want.sort_unstable();
        assert_eq!(ids.ids_of(&f.path), want.as_slice(), "{}", f.path);
    }
}

/// `source-ids.parquet` is checked as every pinned document is: an edited
/// side table is a `verify` violation and a refresh refuses the index with
/// a typed error, publishing nothing. `Index::delete` and `Index::upsert`
/// publish on the index the snapshot belongs to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_source_ids_table_is_refused_and_index_methods_publish() {
    let (src, mut table) = keyed_table(2);
    let (dir, store, index) = local();
    build_from(src.path(), &store, &index).await;
    let mut rows = all_rows(&table);

    let idx = Index::open_current(store.clone(), &index).await.unwrap();
    let s = idx.delete(&[rows[0].0], &params()).await.unwrap();
    assert_eq!(s.version, Some(2));
    let up = UpsertRows {
        ids: vec![rows[1].0],
        vectors: vec![0.5; DIM],
        payload: None,
    };
    let s = idx.upsert(up, &params()).await.unwrap();
    assert_eq!(
        s.version,
        Some(3),
        "published on the current version, not the opened one"
    );
    rows[1].1 = vec![0.5; DIM];
    rows.remove(0);
    check("index methods", &store, &index, &rows).await;

    let commit = warehouse::current(&store, &index).await.unwrap().unwrap();
    let path = dir.path().join(&commit.snapshot).join("source-ids.parquet");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let report = parqivf::verify::verify_location(
        store.clone(),
        &index,
        parqivf::verify::VerifyOptions::default(),
    )
    .await
    .unwrap();
    assert!(
        report.violations.iter().any(|v| matches!(
            v,
            parqivf::verify::Violation::SourceRecordInvalid { error, .. } if error.contains("sha256")
        )),
        "{:?}",
        report.violations
    );
    write(src.path(), &mut table, "part-09.parquet", file_rows(9, 9));
    let e = refresh(store.clone(), &index, &RefreshParams::default(), &params())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, BuildError::Refresh { reason, .. } if reason.contains("source-ids.parquet")),
        "{e}"
    );
    let current = warehouse::current(&store, &index).await.unwrap().unwrap();
    assert_eq!(current.version, 3, "nothing published");
}
