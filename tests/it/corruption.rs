//! Corrupted storage never yields a wrong answer: the corruption matrix flips
//! one byte at positions spread over every object of a committed snapshot
//! (commit document, index.json, centroids, manifest.json, footers.json,
//! every postings file including its footer) and edits every field of every
//! JSON document; each time `Index::open_current` + a search at
//! nprobe = nlist (every row group read) must return a typed error or exactly
//! the uncorrupted answer. Plus one test per defect of issue #17 item 3, and
//! the page CRCs checked by an independent reader (pyarrow) when available.

use crate::support;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::format::definition::{INDEX_DEFINITION_FILE, IndexDefinition};
use parqivf::format::pin::PinError;
use parqivf::format::warehouse::version_path;
use parqivf::index::{Index, SearchParams};
use parqivf::postings::WriterOptions;
use parqivf::probe::ProbeError;
use std::sync::Arc;
use support::fixtures::{Layout, dataset, hierarchy, rowids, write_index};

const DIM: usize = 8;
const N: usize = 1500;
const NLIST: usize = 12;
const ROOTS: usize = 3;
const SNAPSHOT: &str = "snapshots/s1";

struct Fixture {
    store: Arc<dyn ObjectStore>,
    index: Path,
    queries: Vec<f32>,
    expected: Vec<Vec<(i64, f32)>>,
}

/// A committed index written by the real postings writer: several files
/// per root and several row groups per cid, so every kind of object and
/// page is in the matrix. Without the latest commit's bundle, so that an
/// open reads every document and footer from its object, whose checks this
/// file is about (the bundle's bytes are matrixed on their own:
/// [`a_corrupted_bundle_gives_errors_or_the_correct_answer`]).
async fn fixture() -> Fixture {
    let f = fixture_with_bundle().await;
    f.store.delete(&bundle_path(&f.index)).await.unwrap();
    f
}

fn bundle_path(index: &Path) -> Path {
    parqivf::format::warehouse::latest_bundle_path(index)
}

/// [`fixture`], with the bundle its commit wrote.
async fn fixture_with_bundle() -> Fixture {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = Path::from("idx");
    let snapshot = index.clone().join("snapshots").join("s1");
    let data = dataset(N, DIM, 3);
    let ids = rowids(N);
    let h = hierarchy(&data, DIM, ROOTS, NLIST, 5);
    let layout = Layout {
        writer: WriterOptions {
            max_rows_per_row_group: 48,
            max_file_bytes: 6 * 1024,
            upload_buffer_bytes: 1 << 20,
            ..WriterOptions::default()
        },
        payload: false,
    };
    let manifest = write_index(store.clone(), &snapshot, &h, &data, &ids, layout).await;
    assert!(
        manifest.files.len() >= 2 * ROOTS,
        "{} files",
        manifest.files.len()
    );
    let commit = parqivf::format::warehouse::commit(&store, &index, SNAPSHOT, None, 1)
        .await
        .unwrap();
    // What a publisher's snapshot writer writes after the commit.
    assert!(
        parqivf::format::snapshot_writer::publish_bundle(&store, &index, &commit, vec![])
            .await
            .unwrap()
    );
    let mut queries = Vec::new();
    for i in [3usize, 400, 777, 1200] {
        queries.extend(data[i * DIM..(i + 1) * DIM].iter().map(|x| x + 0.1));
    }
    let expected = answer(&store, &index, &queries).await.unwrap();
    Fixture {
        store,
        index,
        queries,
        expected,
    }
}

type Answer = Vec<Vec<(i64, f32)>>;

async fn answer(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    queries: &[f32],
) -> Result<Answer, parqivf::Error> {
    let index = Index::open_current(store.clone(), index).await?;
    let params = SearchParams {
        k: 10,
        nprobe: Some(NLIST),
        ..SearchParams::default()
    };
    let results = index.search_batch(queries, &params).await?;
    Ok(results
        .into_iter()
        .map(|r| r.hits.into_iter().map(|h| (h.rowid, h.distance)).collect())
        .collect())
}

#[derive(Debug, Default)]
struct Outcomes {
    error: usize,
    correct: usize,
    wrong: Vec<String>,
}

impl Outcomes {
    async fn run(&mut self, f: &Fixture, what: String) {
        match answer(&f.store, &f.index, &f.queries).await {
            Err(_) => self.error += 1,
            Ok(a) if a == f.expected => self.correct += 1,
            Ok(_) => self.wrong.push(what),
        }
    }
}

async fn objects(f: &Fixture) -> Vec<(Path, Bytes)> {
    use futures::TryStreamExt;
    let metas: Vec<object_store::ObjectMeta> =
        f.store.list(Some(&f.index)).try_collect().await.unwrap();
    let mut out = Vec::new();
    for m in metas {
        let b = f
            .store
            .get(&m.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        out.push((m.location, b));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

async fn put(store: &Arc<dyn ObjectStore>, path: &Path, bytes: Vec<u8>) {
    store.put(path, PutPayload::from(bytes)).await.unwrap();
}

/// Positions to flip in an object of `len` bytes: `per_object` spread evenly,
/// plus every byte of the last 64 (the footer's end and trailer).
fn positions(len: usize, per_object: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..per_object).map(|i| i * len / per_object).collect();
    p.extend(len.saturating_sub(64)..len);
    p.sort_unstable();
    p.dedup();
    p
}

#[tokio::test]
async fn corruption_matrix_gives_errors_or_the_correct_answer_never_a_wrong_one() {
    let f = fixture().await;
    let all = objects(&f).await;
    let kinds: Vec<&str> = all.iter().map(|(p, _)| p.as_ref()).collect();
    for needed in [
        "versions/00000000000000000001.json",
        "index.json",
        "centroids.parquet",
        "postings/manifest.json",
        "postings/footers.json",
        "part-00001.parquet",
    ] {
        assert!(
            kinds.iter().any(|k| k.ends_with(needed)),
            "{needed} in {kinds:?}"
        );
    }
    let mut flips = Outcomes::default();
    let mut per_object = Vec::new();
    for (path, original) in &all {
        let before = (flips.error, flips.correct);
        for pos in positions(original.len(), 48) {
            let mut bytes = original.to_vec();
            bytes[pos] ^= 0x01;
            put(&f.store, path, bytes).await;
            flips.run(&f, format!("{path} byte {pos} ^ 0x01")).await;
        }
        put(&f.store, path, original.to_vec()).await;
        per_object.push(format!(
            "{path}: {} errors, {} correct",
            flips.error - before.0,
            flips.correct - before.1
        ));
    }
    let mut edits = Outcomes::default();
    for (path, original) in all.iter().filter(|(p, _)| p.as_ref().ends_with(".json")) {
        let doc: serde_json::Value = serde_json::from_slice(original).unwrap();
        for (i, edited) in field_edits(&doc).into_iter().enumerate() {
            put(&f.store, path, serde_json::to_vec_pretty(&edited).unwrap()).await;
            edits.run(&f, format!("{path} edit #{i}: {edited}")).await;
        }
        put(&f.store, path, original.to_vec()).await;
    }
    let flipped = flips.error + flips.correct + flips.wrong.len();
    let edited = edits.error + edits.correct + edits.wrong.len();
    println!("corruption matrix: {} objects", all.len());
    for line in &per_object {
        println!("  {line}");
    }
    println!(
        "byte flips: N = {flipped}: {} typed errors, {} correct answers, {} wrong",
        flips.error,
        flips.correct,
        flips.wrong.len()
    );
    println!(
        "JSON field edits: N = {edited}: {} typed errors, {} correct answers, {} wrong",
        edits.error,
        edits.correct,
        edits.wrong.len()
    );
    assert!(
        flips.wrong.is_empty(),
        "wrong answers after {:#?}",
        flips.wrong
    );
    assert!(
        edits.wrong.is_empty(),
        "wrong answers after {:#?}",
        edits.wrong
    );
    assert!(
        flipped > 500 && edited > 50,
        "{flipped} flips, {edited} edits"
    );
    // Unchanged after the matrix.
    assert_eq!(
        answer(&f.store, &f.index, &f.queries).await.unwrap(),
        f.expected
    );
}

/// One edited copy of `doc` per leaf field (numbers ±1, strings changed,
/// booleans negated, null replaced) and per array (last element dropped,
/// first duplicated).
/// The latest commit's bundle is advisory: a flipped byte anywhere in it
/// (its magic and length, the copy, a document, a footer) gives a typed
/// error or the uncorrupted answer, never another; an edited copy in it
/// makes a reader ignore it.
#[tokio::test]
async fn a_corrupted_bundle_gives_errors_or_the_correct_answer() {
    let f = fixture_with_bundle().await;
    let path = bundle_path(&f.index);
    let original = f.store.get(&path).await.unwrap().bytes().await.unwrap();
    let mut flips = Outcomes::default();
    for pos in positions(original.len(), 256) {
        let mut bytes = original.to_vec();
        bytes[pos] ^= 0x01;
        put(&f.store, &path, bytes).await;
        flips.run(&f, format!("{path} byte {pos} ^ 0x01")).await;
    }
    println!(
        "bundle: {} flips, {} errors, {} correct",
        flips.error + flips.correct + flips.wrong.len(),
        flips.error,
        flips.correct
    );
    assert!(flips.wrong.is_empty(), "wrong answers: {:?}", flips.wrong);
    assert!(flips.correct > 0, "{flips:?}");
}

fn field_edits(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    use serde_json::Value;
    fn walk(v: &Value, path: &mut Vec<PathPart>, out: &mut Vec<Vec<PathPart>>) {
        out.push(path.clone());
        match v {
            Value::Object(m) => {
                for k in m.keys() {
                    path.push(PathPart::Key(k.clone()));
                    walk(&m[k], path, out);
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    path.push(PathPart::Index(i));
                    walk(x, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    fn at<'a>(v: &'a mut Value, path: &[PathPart]) -> &'a mut Value {
        path.iter().fold(v, |v, p| match p {
            PathPart::Key(k) => &mut v[k.as_str()],
            PathPart::Index(i) => &mut v[*i],
        })
    }
    let mut paths = Vec::new();
    walk(doc, &mut Vec::new(), &mut paths);
    let mut out = Vec::new();
    for p in paths.iter().filter(|p| !p.is_empty()) {
        let target = at(&mut doc.clone(), p).clone();
        let variants: Vec<Value> = match &target {
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                if let Some(i) = n.as_i64() {
                    vec![Value::from(i + 1), Value::from(i - 1)]
                } else {
                    vec![Value::from(x * 1.5 + 0.25)]
                }
            }
            Value::String(s) => {
                let mut v = vec![Value::from(format!("{s}x"))];
                for alt in ["l2", "ip", "cosine", "f16"] {
                    if s != alt && ["l2", "ip", "cosine", "f32"].contains(&s.as_str()) {
                        v.push(Value::from(alt));
                    }
                }
                v
            }
            Value::Bool(b) => vec![Value::from(!b)],
            Value::Null => vec![Value::from(0)],
            Value::Array(a) if !a.is_empty() => {
                let mut dropped = a.clone();
                dropped.pop();
                let mut dup = a.clone();
                dup.insert(0, a[0].clone());
                vec![Value::Array(dropped), Value::Array(dup)]
            }
            _ => vec![],
        };
        for v in variants {
            let mut d = doc.clone();
            *at(&mut d, p) = v;
            out.push(d);
        }
    }
    // The whole document replaced by an empty array (a parseable edit).
    out.push(Value::Array(vec![]));
    out
}

#[derive(Debug, Clone)]
enum PathPart {
    Key(String),
    Index(usize),
}

fn first_postings(all: &[(Path, Bytes)]) -> (Path, Bytes) {
    all.iter()
        .find(|(p, _)| p.as_ref().ends_with("part-00000.parquet"))
        .cloned()
        .unwrap()
}

/// Issue #17 item 3: a flipped rowid byte returned a row that does not
/// exist. Now it is a page checksum error naming file, row group, column
/// and page.
#[tokio::test]
async fn a_flipped_rowid_byte_is_a_page_checksum_error_naming_the_page() {
    let f = fixture().await;
    let (path, original) = first_postings(&objects(&f).await);
    // The first row group's rowid chunk: its offset from the footer.
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&original)
        .unwrap();
    let rowid = meta.row_group(0).column(1);
    assert_eq!(rowid.column_path().string(), "rowid");
    let (start, len) = rowid.byte_range();
    // Pages of the chunk (a dictionary page, then data pages): the flipped
    // byte is in the last one.
    let pages = parqivf::format::page_crc::check_column_chunk(
        &original[start as usize..(start + len) as usize],
    )
    .unwrap();
    let last = pages - 1;
    let mut bytes = original.to_vec();
    // The last byte of the chunk is the last rowid's high byte.
    bytes[(start + len - 1) as usize] ^= 0x01;
    put(&f.store, &path, bytes).await;
    let err = answer(&f.store, &f.index, &f.queries).await.unwrap_err();
    let parqivf::Error::Probe(ProbeError::PageChecksum {
        path: p,
        row_group,
        column,
        source,
    }) = &err
    else {
        panic!("expected a page checksum error, got {err}");
    };
    assert!(p.ends_with("part-00000.parquet"), "{p}");
    assert_eq!((*row_group, column.as_str()), (0, "rowid"));
    assert!(
        matches!(source, parqivf::format::page_crc::PageCrcError::Mismatch { page, .. } if *page == last),
        "{source}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("row group 0")
            && msg.contains("rowid")
            && msg.contains(&format!("page {last}")),
        "{msg}"
    );
}

/// Issue #17 item 3: a flipped vector byte changed a distance.
#[tokio::test]
async fn a_flipped_vector_byte_is_a_page_checksum_error() {
    let f = fixture().await;
    let (path, original) = first_postings(&objects(&f).await);
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&original)
        .unwrap();
    let vector = meta.row_group(0).column(2);
    let (start, len) = vector.byte_range();
    let mut bytes = original.to_vec();
    bytes[(start + len / 2) as usize] ^= 0x01;
    put(&f.store, &path, bytes).await;
    let err = answer(&f.store, &f.index, &f.queries).await.unwrap_err();
    assert!(
        matches!(&err, parqivf::Error::Probe(ProbeError::PageChecksum { column, .. }) if column == "vector"),
        "{err}"
    );
}

/// Issue #17 item 3: a footer that still parses (a row-group cid statistic
/// changed, so the planner would skip or misplace a row group) is refused by
/// its footers.json pin.
#[tokio::test]
async fn a_footer_edit_that_still_parses_is_a_footer_pin_error() {
    let f = fixture().await;
    let (path, original) = first_postings(&objects(&f).await);
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&original)
        .unwrap();
    // Rewrite the footer with row group 0's cid statistics claiming another cid.
    let cid = meta.row_group(0).column(0);
    let stats = cid.statistics().unwrap();
    let parquet::file::statistics::Statistics::Int32(s) = stats else {
        panic!("cid statistics are Int32")
    };
    let other = s.min_opt().unwrap() + 1;
    let new_stats = parquet::file::statistics::Statistics::int32(
        Some(other),
        Some(other),
        None,
        Some(0),
        false,
    );
    let mut builder = meta.clone().into_builder();
    let mut rgs = builder.take_row_groups();
    let mut rg = rgs.remove(0).into_builder();
    let mut cols = rg.take_columns();
    cols[0] = cols[0]
        .clone()
        .into_builder()
        .set_statistics(new_stats)
        .build()
        .unwrap();
    rg = rg.set_column_metadata(cols);
    rgs.insert(0, rg.build().unwrap());
    let edited = builder.set_row_groups(rgs).build();
    let footer_len = {
        let t = original.len() - 8;
        u32::from_le_bytes(original[t..t + 4].try_into().unwrap()) as usize + 8
    };
    let body = &original[..original.len() - footer_len];
    let mut tail = Vec::new();
    parquet::file::metadata::ParquetMetaDataWriter::new(&mut tail, &edited)
        .finish()
        .unwrap();
    let mut bytes = body.to_vec();
    bytes.extend_from_slice(&tail);
    // It still parses, and says something else.
    let reparsed = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::from(bytes.clone()))
        .unwrap();
    assert_ne!(reparsed.row_group(0).column(0).statistics(), Some(stats));
    put(&f.store, &path, bytes).await;
    let err = answer(&f.store, &f.index, &f.queries).await.unwrap_err();
    assert!(
        matches!(&err, parqivf::Error::Probe(ProbeError::FooterPin(_))),
        "{err}"
    );
}

/// Issue #17 item 3: a lowered max-cid in manifest.json made a query return
/// nothing; a changed metric in index.json changed every answer. Both are
/// now commit pin mismatches.
#[tokio::test]
async fn parseable_edits_of_manifest_and_definition_are_pin_errors() {
    let f = fixture().await;
    let snapshot = f.index.clone().join("snapshots").join("s1");
    let manifest_path = snapshot.clone().join("postings").join("manifest.json");
    let original = f
        .store
        .get(&manifest_path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut m: serde_json::Value = serde_json::from_slice(&original).unwrap();
    let max = m["files"][0]["max-cid"].as_u64().unwrap();
    let min = m["files"][0]["min-cid"].as_u64().unwrap();
    if max > min {
        m["files"][0]["max-cid"] = (max - 1).into();
    } else {
        m["files"][0]["min-cid"] = (min + 1).into();
        m["files"][0]["max-cid"] = (max + 1).into();
    }
    put(
        &f.store,
        &manifest_path,
        serde_json::to_vec_pretty(&m).unwrap(),
    )
    .await;
    let err = answer(&f.store, &f.index, &f.queries).await.unwrap_err();
    assert!(
        matches!(&err, parqivf::Error::Index(parqivf::index::IndexError::Snapshot(parqivf::format::snapshot::SnapshotError::Pin(PinError::Mismatch { object, .. }))) if object.ends_with("postings/manifest.json")),
        "{err}"
    );
    put(&f.store, &manifest_path, original.to_vec()).await;

    let def_path = snapshot.join(INDEX_DEFINITION_FILE);
    let original = f.store.get(&def_path).await.unwrap().bytes().await.unwrap();
    let mut d: serde_json::Value = serde_json::from_slice(&original).unwrap();
    d["metric"] = if d["metric"] == "l2" { "ip" } else { "l2" }.into();
    let edited = serde_json::to_vec_pretty(&d).unwrap();
    assert!(
        IndexDefinition::from_json(&edited).is_ok(),
        "the edit still parses"
    );
    put(&f.store, &def_path, edited).await;
    let err = answer(&f.store, &f.index, &f.queries).await.unwrap_err();
    assert!(
        matches!(&err, parqivf::Error::Index(parqivf::index::IndexError::Snapshot(parqivf::format::snapshot::SnapshotError::Pin(PinError::Mismatch { object, .. }))) if object.ends_with("index.json")),
        "{err}"
    );
    // The commit document pins all four small documents.
    let commit = f
        .store
        .get(&version_path(&f.index, 1))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let c: serde_json::Value = serde_json::from_slice(&commit).unwrap();
    let pinned: Vec<&str> = c["pins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        pinned,
        [
            "index.json",
            "postings/manifest.json",
            "postings/footers.json",
            "centroids/centroids.parquet"
        ]
    );
}

/// The page CRCs are real Parquet page checksums: pyarrow, verifying them,
/// reads the written files and refuses a flipped data byte.
#[tokio::test]
async fn pyarrow_verifies_the_page_checksums() {
    let Some(python) = support::python::python_with("pyarrow") else {
        return;
    };
    let f = fixture().await;
    let (_, good) = first_postings(&objects(&f).await);
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&good)
        .unwrap();
    let (start, len) = meta.row_group(0).column(2).byte_range();
    let mut bad = good.to_vec();
    bad[(start + len - 3) as usize] ^= 0x01;
    let dir = tempfile::tempdir().unwrap();
    let (g, b) = (
        dir.path().join("good.parquet"),
        dir.path().join("bad.parquet"),
    );
    std::fs::write(&g, &good).unwrap();
    std::fs::write(&b, &bad).unwrap();
    let script = r#"
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], page_checksum_verification=True)
print("good rows", t.num_rows)
try:
    pq.read_table(sys.argv[2], page_checksum_verification=True)
    print("bad read")
except Exception as e:
    print("bad refused:", type(e).__name__, e)
"#;
    let out =
        support::python::run_python(&python, script, &[g.to_str().unwrap(), b.to_str().unwrap()]);
    println!("{out}");
    assert!(out.contains("good rows"), "{out}");
    assert!(
        out.contains("bad refused") && out.to_lowercase().contains("crc"),
        "{out}"
    );
}

/// Issue #24: compaction read postings with a plain Parquet reader and
/// folded corrupt pages into a new base with fresh checksums. Now it reads
/// through the probe's reader: a flipped byte in a data page of any column,
/// in the base or in a delta table, fails `compact` with a page checksum
/// error naming the object, row group and page, and the previous version
/// stays current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_refuses_a_flipped_byte_in_any_page_of_any_layer() {
    use parqivf::builder::refresh::{RefreshParams, compact, refresh};
    use parqivf::builder::{BuildError, BuildParams, ProgressMode, SourceSpec, build, open_source};
    use parqivf::format::warehouse;
    use parqivf::store::options::StoreOptions;

    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = Path::from("idx");
    let src = tempfile::tempdir().unwrap();
    let table = |ids: std::ops::Range<i64>, seed| {
        support::files::vectors_with_ids(ids, &dataset(60, DIM, seed)[..], DIM)
    };
    support::files::write_parquet(src.path(), "a.parquet", &table(0..60, 1));
    let spec = SourceSpec {
        source: src.path().display().to_string(),
        column: "emb".into(),
        payload: vec!["id".into()],
        ..SourceSpec::default()
    };
    let params = BuildParams {
        nlist: 4,
        progress: ProgressMode::Quiet,
        writer: WriterOptions {
            max_rows_per_row_group: 8,
            ..WriterOptions::default()
        },
        ..BuildParams::default()
    };
    let source = open_source(&spec, &StoreOptions::default()).await.unwrap();
    build(source, store.clone(), &index, &params).await.unwrap();
    support::files::write_parquet(src.path(), "b.parquet", &table(60..120, 2));
    let r = refresh(store.clone(), &index, &RefreshParams::default(), &params)
        .await
        .unwrap();
    assert_eq!(r.version, Some(2));

    // The first postings file of the base and of the delta table.
    let all = objects_below(&store, &index).await;
    let base = warehouse::history(&store, &index).await.unwrap()[0]
        .snapshot
        .clone();
    let delta = warehouse::current(&store, &index)
        .await
        .unwrap()
        .unwrap()
        .snapshot;
    let mut checked = 0;
    for layer in [&base, &delta] {
        let (path, original) = all
            .iter()
            .find(|(p, _)| {
                p.as_ref().contains(layer.as_str())
                    && p.as_ref().ends_with(".parquet")
                    && p.as_ref().contains("part-")
            })
            .cloned()
            .unwrap_or_else(|| panic!("no postings file in {layer}"));
        let meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Optional)
            .parse_and_finish(&original)
            .unwrap();
        let index_of_pages = meta.page_index().cloned();
        let last_rg = meta.num_row_groups() - 1;
        for rg in [0, last_rg] {
            for (col, chunk) in meta.row_group(rg).columns().iter().enumerate() {
                let column = chunk.column_path().string();
                // The last byte of the first and the last data page (from the
                // offset index), or of the chunk where a column has none.
                let ends: Vec<(usize, usize)> = match index_of_pages
                    .as_deref()
                    .and_then(|pi| pi.offset_index(rg, col))
                {
                    Some(oi) => {
                        let pages = oi.page_locations();
                        let end = |i: usize| {
                            (pages[i].offset + i64::from(pages[i].compressed_page_size) - 1)
                                as usize
                        };
                        vec![(0, end(0)), (pages.len() - 1, end(pages.len() - 1))]
                    }
                    None => {
                        let (start, len) = chunk.byte_range();
                        vec![(0, (start + len - 1) as usize)]
                    }
                };
                for (page, at) in ends {
                    let what = format!("{path} row group {rg} column {column} page {page}");
                    let mut bytes = original.to_vec();
                    bytes[at] ^= 0x40;
                    put(&store, &path, bytes).await;
                    let err = compact(store.clone(), &index, &params).await.unwrap_err();
                    let BuildError::Probe(ProbeError::PageChecksum {
                        path: p,
                        row_group,
                        column: c,
                        ..
                    }) = &err
                    else {
                        panic!("{what}: expected a page checksum error, got {err}");
                    };
                    assert_eq!(
                        (p.as_str(), *row_group, c.as_str()),
                        (path.as_ref(), rg, column.as_str()),
                        "{what}"
                    );
                    assert!(err.to_string().contains("page "), "{what}: {err}");
                    let current = warehouse::current(&store, &index).await.unwrap().unwrap();
                    assert_eq!(current.version, 2, "{what}: nothing published");
                    put(&store, &path, original.to_vec()).await;
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 16, "{checked} pages checked");
    // Intact again: compaction succeeds.
    let c = compact(store.clone(), &index, &params).await.unwrap();
    assert_eq!((c.version, c.rows), (Some(3), 120));
}

/// Every object below `prefix`, with its bytes.
async fn objects_below(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Vec<(Path, Bytes)> {
    use futures::TryStreamExt;
    let metas: Vec<_> = store.list(Some(prefix)).try_collect().await.unwrap();
    let mut out = Vec::new();
    for m in metas {
        let b = store.get(&m.location).await.unwrap().bytes().await.unwrap();
        out.push((m.location, b));
    }
    out
}
