//! `verify`: a clean table passes; each hand-made broken Parquet file or
//! manifest is caught with the right typed violation; the prefix is listed
//! only for `--orphans`; the CLI's exit codes (0 ok, 1 violations, 2 could
//! not run) and `--json` output.

use crate::support;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parqivf::format::footers::{FOOTERS_FORMAT_VERSION, FooterPin, Footers};
use parqivf::format::manifest::{FORMAT_VERSION, FileEntry, Manifest, ManifestError};
use parqivf::format::page_crc::add_page_crcs_to_file;
use parqivf::format::postings_table::{
    CID_COLUMN, FooterViolation, KV_FORMAT_VERSION, ROWID_COLUMN, check_footer, part_path,
};
use parqivf::postings::WriterOptions;
use parqivf::verify::{VerifyOptions, Violation, verify};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::{KeyValue, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::schema::types::ColumnPath;
use sha2::{Digest, Sha256};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::postings::batch;

const DIM: usize = 2;

fn props() -> WriterProperties {
    WriterProperties::builder()
        .set_key_value_metadata(Some(vec![KeyValue::new(
            KV_FORMAT_VERSION.into(),
            FORMAT_VERSION.to_string(),
        )]))
        .build()
}

/// A Parquet file with one row group per entry of `row_groups`.
fn parquet_file(row_groups: &[RecordBatch], props: WriterProperties) -> Vec<u8> {
    let mut writer = ArrowWriter::try_new(Vec::new(), row_groups[0].schema(), Some(props)).unwrap();
    for rg in row_groups {
        writer.write(rg).unwrap();
        writer.flush().unwrap();
    }
    writer.into_inner().unwrap()
}

fn cids(row_groups: &[&[i32]]) -> Vec<RecordBatch> {
    row_groups.iter().map(|c| batch(DIM, c, 0)).collect()
}

/// A one-root, one-file table holding `bytes` (given page CRCs and a
/// footers.json pin, as the writer does), whose manifest entry claims
/// `[min, max]` and is otherwise truthful unless `edit` changes it.
async fn table(
    bytes: Vec<u8>,
    min: u32,
    max: u32,
    edit: impl FnOnce(&mut FileEntry),
) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let bytes = add_page_crcs_to_file(&bytes).unwrap();
    let footers = Footers {
        format_version: FOOTERS_FORMAT_VERSION,
        files: vec![FooterPin::of_file(&part_path(0, 0), &bytes).unwrap()],
    };
    store
        .put(
            &Path::from("t/footers.json"),
            footers.to_json_bytes().into(),
        )
        .await
        .unwrap();
    let rows = ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::from(bytes.clone()))
        .unwrap()
        .file_metadata()
        .num_rows() as u64;
    let mut entry = FileEntry {
        path: part_path(0, 0),
        cid_bucket: 0,
        min_cid: min,
        max_cid: max,
        rows,
        size: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
    };
    edit(&mut entry);
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        nlist: 8,
        ntotal: entry.rows,
        cid_offsets: vec![0, 8],
        files: vec![entry],
    };
    manifest.validate().unwrap();
    store
        .put(
            &Path::from("t/cid_bucket=000000/part-00000.parquet"),
            bytes.into(),
        )
        .await
        .unwrap();
    store
        .put(
            &Path::from("t/manifest.json"),
            manifest.to_json_bytes().into(),
        )
        .await
        .unwrap();
    store
}

async fn violations(store: Arc<dyn ObjectStore>) -> Vec<Violation> {
    verify(store, &Path::from("t"), VerifyOptions::default())
        .await
        .unwrap()
        .violations
}

async fn broken(row_groups: &[&[i32]], min: u32, max: u32) -> Vec<Violation> {
    violations(table(parquet_file(&cids(row_groups), props()), min, max, |_| {}).await).await
}

#[tokio::test]
async fn hand_made_good_file_passes() {
    assert!(
        broken(&[&[1, 1], &[2], &[2, 3][..1]], 1, 2)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn two_cids_in_one_row_group() {
    let v = broken(&[&[1, 2]], 1, 2).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::MultipleCids {
                row_group: 0,
                min: 1,
                max: 2,
                ..
            })]
        ),
        "{v:?}"
    );
}

#[tokio::test]
async fn row_groups_out_of_cid_order() {
    let v = broken(&[&[2], &[3], &[2]], 2, 2).await;
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::Footer(FooterViolation::RowGroupsUnordered {
                row_group: 2,
                previous: 3,
                cid: 2,
                ..
            })
        )),
        "{v:?}"
    );
}

#[tokio::test]
async fn row_group_cid_outside_the_file_range() {
    let v = broken(&[&[1], &[5]], 1, 4).await;
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::Footer(FooterViolation::CidOutsideFile {
                row_group: 1,
                cid: 5,
                min_cid: 1,
                max_cid: 4,
                ..
            })
        )),
        "{v:?}"
    );
}

#[tokio::test]
async fn first_and_last_cid_must_equal_the_manifest_range() {
    let v = broken(&[&[3], &[4]], 2, 4).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::FirstCidMismatch {
                expected: 2,
                actual: 3,
                ..
            })]
        ),
        "{v:?}"
    );
    let v = broken(&[&[3], &[4]], 3, 5).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::LastCidMismatch {
                expected: 5,
                actual: 4,
                ..
            })]
        ),
        "{v:?}"
    );
}

#[tokio::test]
async fn missing_cid_statistics() {
    let props = WriterProperties::builder()
        .set_column_statistics_enabled(ColumnPath::from(CID_COLUMN), EnabledStatistics::None)
        .set_key_value_metadata(props().key_value_metadata().cloned())
        .build();
    let v = violations(table(parquet_file(&cids(&[&[1]]), props), 1, 1, |_| {}).await).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::StatisticsMissing {
                row_group: 0,
                ..
            })]
        ),
        "{v:?}"
    );
}

/// The footer of a one-row-group file (cid 1) with its cid statistics and row
/// count replaced: exactness flags, nulls and empty row groups cannot be
/// produced by a conforming writer, so these footers are tampered in memory.
fn tampered_footer(stats: ValueStatistics<i32>, num_rows: i64) -> ParquetMetaData {
    let bytes = Bytes::from(parquet_file(&cids(&[&[1]]), props()));
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .unwrap();
    let rg = &metadata.row_groups()[0];
    let mut columns = rg.columns().to_vec();
    columns[0] = columns[0]
        .clone()
        .into_builder()
        .set_statistics(Statistics::Int32(stats))
        .build()
        .unwrap();
    let rg = rg
        .clone()
        .into_builder()
        .set_column_metadata(columns)
        .set_num_rows(num_rows)
        .build()
        .unwrap();
    ParquetMetaData::new(metadata.file_metadata().clone(), vec![rg])
}

/// Every violation of the footer contract (for a bare table: any dim).
fn footer_violations(entry: &FileEntry, metadata: &ParquetMetaData) -> Vec<FooterViolation> {
    check_footer("f", entry, metadata, None, None)
        .err()
        .unwrap_or_default()
}

#[test]
fn inexact_statistics_null_cids_and_empty_row_groups() {
    let entry = FileEntry {
        path: part_path(0, 0),
        cid_bucket: 0,
        min_cid: 1,
        max_cid: 1,
        rows: 1,
        size: 0,
        sha256: String::new(),
    };
    let exact = || ValueStatistics::new(Some(1i32), Some(1i32), None, Some(0), false);
    assert!(check_footer("f", &entry, &tampered_footer(exact(), 1), None, None).is_ok());
    let v = footer_violations(
        &entry,
        &tampered_footer(exact().with_max_is_exact(false), 1),
    );
    assert!(
        matches!(
            v[..],
            [FooterViolation::StatisticsInexact { row_group: 0, .. }]
        ),
        "{v:?}"
    );
    let nulls = ValueStatistics::new(Some(1i32), Some(1i32), None, Some(2), false);
    let v = footer_violations(&entry, &tampered_footer(nulls, 1));
    assert!(
        matches!(
            v[..],
            [FooterViolation::CidNulls {
                row_group: 0,
                nulls: 2,
                ..
            }]
        ),
        "{v:?}"
    );
    let v = footer_violations(&entry, &tampered_footer(exact(), 0));
    assert!(
        v.iter()
            .any(|v| matches!(v, FooterViolation::EmptyRowGroup { row_group: 0, .. })),
        "{v:?}"
    );
}

#[tokio::test]
async fn cid_column_must_be_int32_required() {
    let schema = Arc::new(Schema::new(vec![Field::new(
        CID_COLUMN,
        DataType::Int64,
        false,
    )]));
    let rg = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(vec![1i64])) as ArrayRef],
    )
    .unwrap();
    let v = violations(table(parquet_file(&[rg], props()), 1, 1, |_| {}).await).await;
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::Footer(FooterViolation::ColumnInvalid { column: "cid", found, .. })
                if found == "INT64 REQUIRED"
        )),
        "{v:?}"
    );
}

#[tokio::test]
async fn format_version_key_value_is_required() {
    let bytes = parquet_file(&cids(&[&[1]]), WriterProperties::default());
    let v = violations(table(bytes, 1, 1, |_| {}).await).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::FormatVersionMismatch {
                found: None,
                ..
            })]
        ),
        "{v:?}"
    );
}

#[tokio::test]
async fn rows_size_and_sha256_must_match_the_manifest() {
    let bytes = || parquet_file(&cids(&[&[1, 1]]), props());
    let v = violations(table(bytes(), 1, 1, |e| e.rows = 3).await).await;
    assert!(
        matches!(
            v[..],
            [Violation::Footer(FooterViolation::RowCountMismatch {
                expected: 3,
                actual: 2,
                ..
            })]
        ),
        "{v:?}"
    );
    let v = violations(table(bytes(), 1, 1, |e| e.size += 1).await).await;
    assert!(matches!(v[..], [Violation::SizeMismatch { .. }]), "{v:?}");
    let v = violations(table(bytes(), 1, 1, |e| e.sha256 = "0".repeat(64)).await).await;
    assert!(matches!(v[..], [Violation::Sha256Mismatch { .. }]), "{v:?}");
}

#[tokio::test]
async fn missing_object_and_missing_or_broken_manifest() {
    let store = table(parquet_file(&cids(&[&[1]]), props()), 1, 1, |_| {}).await;
    store
        .delete(&Path::from("t/cid_bucket=000000/part-00000.parquet"))
        .await
        .unwrap();
    let v = violations(Arc::clone(&store)).await;
    assert!(matches!(v[..], [Violation::ObjectMissing { .. }]), "{v:?}");
    store
        .put(
            &Path::from("t/manifest.json"),
            Bytes::from_static(b"{\"nlist\": 1}").into(),
        )
        .await
        .unwrap();
    let v = violations(Arc::clone(&store)).await;
    assert!(
        matches!(
            v[..],
            [Violation::ManifestInvalid {
                error: ManifestError::MissingKey {
                    key: "format-version",
                    ..
                },
                ..
            }]
        ),
        "{v:?}"
    );
    store.delete(&Path::from("t/manifest.json")).await.unwrap();
    let v = violations(store).await;
    assert!(
        matches!(v[..], [Violation::ManifestMissing { .. }]),
        "{v:?}"
    );
}

/// A store that counts LIST calls.
#[derive(Debug)]
struct ListCounter {
    inner: InMemory,
    lists: AtomicUsize,
}

impl std::fmt::Display for ListCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListCounter({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for ListCounter {
    async fn put_opts(
        &self,
        l: &Path,
        p: PutPayload,
        o: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }
    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }
    async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(l, o).await
    }
    fn delete_stream(
        &self,
        l: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(l)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, o).await
    }
}

#[tokio::test]
async fn lists_only_for_orphans_and_reports_unnamed_objects() {
    let store = Arc::new(ListCounter {
        inner: InMemory::new(),
        lists: AtomicUsize::new(0),
    });
    let root = Path::from("t");
    support::postings::write_table(store.clone(), &root, DIM, WriterOptions::default()).await;
    store
        .put(
            &Path::from("t/cid_bucket=000001/part-00009.parquet"),
            Bytes::from_static(b"x").into(),
        )
        .await
        .unwrap();
    store
        .put(&Path::from("elsewhere/x"), Bytes::from_static(b"x").into())
        .await
        .unwrap();
    let report = verify(store.clone(), &root, VerifyOptions::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
    assert_eq!(
        store.lists.load(Ordering::SeqCst),
        0,
        "verify must not LIST without --orphans"
    );
    let report = verify(store.clone(), &root, VerifyOptions { orphans: true })
        .await
        .unwrap();
    assert!(store.lists.load(Ordering::SeqCst) > 0);
    assert!(
        matches!(&report.violations[..], [Violation::Orphan { path }] if path == "t/cid_bucket=000001/part-00009.parquet"),
        "{:?}",
        report.violations
    );
}

fn cli(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_parqivf"))
        .arg("verify")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[tokio::test]
async fn cli_exit_codes_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let manifest = support::postings::write_table(
        Arc::clone(&store),
        &Path::default(),
        DIM,
        WriterOptions::default(),
    )
    .await;
    let folder = dir.path().to_str().unwrap();
    let (code, stdout) = cli(&[folder]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout) = cli(&[folder, "--json", "--orphans"]);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["files-checked"].as_u64(),
        Some(manifest.files.len() as u64)
    );

    // Corrupt one object in place: same size, different bytes.
    let victim = dir.path().join(&manifest.files[0].path);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[4] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let (code, stdout) = cli(&[folder]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains(&manifest.files[0].path), "{stdout}");
    let (code, stdout) = cli(&[folder, "--json"]);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["violations"][0]["kind"], "sha256-mismatch");
    assert_eq!(
        report["violations"][0]["path"],
        manifest.files[0].path.as_str()
    );

    let (code, _) = cli(&[dir.path().join("no-such-table").to_str().unwrap()]);
    assert_eq!(code, 2);
}

// ---- Issue #17 item 4: verify checks the whole snapshot the reader opens ----

use parqivf::verify::verify_location;

const IDX_DIM: usize = 4;

/// A committed index `idx` (current snapshot `snapshots/s1`) written by the
/// test fixture, plus the hierarchy it was built with.
async fn committed_index() -> (Arc<dyn ObjectStore>, parqivf::kmeans::Hierarchy) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = support::fixtures::dataset(600, IDX_DIM, 1);
    let ids = support::fixtures::rowids(600);
    let h = support::fixtures::hierarchy(&data, IDX_DIM, 2, 8, 2);
    let snapshot = Path::from("idx/snapshots/s1");
    support::fixtures::write_index(
        store.clone(),
        &snapshot,
        &h,
        &data,
        &ids,
        support::fixtures::Layout::default(),
    )
    .await;
    parqivf::format::warehouse::commit(&store, &Path::from("idx"), "snapshots/s1", None, 1)
        .await
        .unwrap();
    (store, h)
}

async fn index_violations(store: &Arc<dyn ObjectStore>, at: &str, orphans: bool) -> Vec<Violation> {
    verify_location(store.clone(), &Path::from(at), VerifyOptions { orphans })
        .await
        .unwrap()
        .violations
}

async fn edit_json(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) {
    let p = Path::from(path);
    let mut v: serde_json::Value =
        serde_json::from_slice(&store.get(&p).await.unwrap().bytes().await.unwrap()).unwrap();
    edit(&mut v);
    store
        .put(&p, serde_json::to_vec_pretty(&v).unwrap().into())
        .await
        .unwrap();
}

fn snapshot_invalid(v: &[Violation]) -> bool {
    v.iter()
        .any(|v| matches!(v, Violation::SnapshotInvalid { .. }))
}

#[tokio::test]
async fn a_clean_committed_index_verifies_with_and_without_orphans() {
    let (store, _) = committed_index().await;
    for (at, orphans) in [("idx", false), ("idx", true), ("idx/snapshots/s1", false)] {
        let v = index_violations(&store, at, orphans).await;
        assert!(v.is_empty(), "{at} {orphans}: {v:?}");
    }
}

#[tokio::test]
async fn an_index_json_of_an_empty_array_is_a_violation() {
    for at in ["idx", "idx/snapshots/s1"] {
        let (store, _) = committed_index().await;
        store
            .put(
                &Path::from("idx/snapshots/s1/index.json"),
                Bytes::from_static(b"[]").into(),
            )
            .await
            .unwrap();
        let v = index_violations(&store, at, false).await;
        assert!(snapshot_invalid(&v), "{at}: {v:?}");
    }
}

#[tokio::test]
async fn wrong_dim_nlist_or_roots_in_index_json_are_violations() {
    for (key, delta) in [("dim", 1i64), ("nlist", 1), ("roots", -1)] {
        for at in ["idx", "idx/snapshots/s1"] {
            let (store, _) = committed_index().await;
            edit_json(&store, "idx/snapshots/s1/index.json", |v| {
                let n = v[key].as_i64().unwrap();
                v[key] = (n + delta).into();
            })
            .await;
            let v = index_violations(&store, at, false).await;
            assert!(snapshot_invalid(&v), "{key} at {at}: {v:?}");
        }
    }
}

#[tokio::test]
async fn deleted_or_replaced_centroids_are_violations() {
    let centroids = "idx/snapshots/s1/centroids/centroids.parquet";
    for at in ["idx", "idx/snapshots/s1"] {
        let (store, _) = committed_index().await;
        store.delete(&Path::from(centroids)).await.unwrap();
        let v = index_violations(&store, at, false).await;
        assert!(snapshot_invalid(&v), "deleted, {at}: {v:?}");

        // Replaced by the centroids of another hierarchy (6 leaves).
        let data = support::fixtures::dataset(300, IDX_DIM, 9);
        let other = support::fixtures::hierarchy(&data, IDX_DIM, 2, 6, 3);
        store
            .put(
                &Path::from(centroids),
                parqivf::format::centroids::encode(&other).unwrap().into(),
            )
            .await
            .unwrap();
        let v = index_violations(&store, at, false).await;
        assert!(snapshot_invalid(&v), "replaced, {at}: {v:?}");
    }
}

#[tokio::test]
async fn a_dropped_file_entry_with_ntotal_adjusted_is_a_violation() {
    for at in ["idx", "idx/snapshots/s1"] {
        let (store, _) = committed_index().await;
        edit_json(&store, "idx/snapshots/s1/postings/manifest.json", |m| {
            let files = m["files"].as_array_mut().unwrap();
            let dropped = files.pop().unwrap();
            let rows = dropped["rows"].as_u64().unwrap();
            let ntotal = m["ntotal"].as_u64().unwrap();
            m["ntotal"] = (ntotal - rows).into();
        })
        .await;
        let v = index_violations(&store, at, true).await;
        assert!(snapshot_invalid(&v), "{at}: {v:?}");
        assert!(
            v.iter()
                .any(|v| matches!(v, Violation::FootersInvalid { .. })),
            "{at}: {v:?}"
        );
        assert!(
            v.iter().any(|v| matches!(v, Violation::Orphan { .. })),
            "{at}: {v:?}"
        );
    }
}

#[tokio::test]
async fn orphans_reports_snapshots_no_version_names() {
    let (store, h) = committed_index().await;
    let data = support::fixtures::dataset(600, IDX_DIM, 1);
    let ids = support::fixtures::rowids(600);
    support::fixtures::write_index(
        store.clone(),
        &Path::from("idx/snapshots/s2"),
        &h,
        &data,
        &ids,
        support::fixtures::Layout::default(),
    )
    .await;
    assert!(index_violations(&store, "idx", false).await.is_empty());
    let v = index_violations(&store, "idx", true).await;
    assert!(
        matches!(&v[..], [Violation::UnreferencedSnapshot { path }] if path == "idx/snapshots/s2"),
        "{v:?}"
    );
}

#[tokio::test]
async fn a_flipped_page_byte_and_an_edited_footer_pin_are_violations() {
    let (store, _) = committed_index().await;
    let manifest: serde_json::Value = serde_json::from_slice(
        &store
            .get(&Path::from("idx/snapshots/s1/postings/manifest.json"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let rel = manifest["files"][0]["path"].as_str().unwrap().to_string();
    let p = Path::from(format!("idx/snapshots/s1/postings/{rel}"));
    let original = store.get(&p).await.unwrap().bytes().await.unwrap();
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&original)
        .unwrap();
    let (start, len) = meta.row_group(0).column(2).byte_range();
    let mut bytes = original.to_vec();
    bytes[(start + len - 1) as usize] ^= 1;
    store.put(&p, bytes.into()).await.unwrap();
    let v = index_violations(&store, "idx/snapshots/s1", false).await;
    assert!(
        v.iter().any(|v| matches!(v, Violation::PageChecksum { row_group: 0, column, .. } if column == "vector")),
        "{v:?}"
    );
    store.put(&p, original.into()).await.unwrap();
    edit_json(&store, "idx/snapshots/s1/postings/footers.json", |f| {
        f["files"][0]["footer-sha256"] = "0".repeat(64).into();
    })
    .await;
    let v = index_violations(&store, "idx/snapshots/s1", false).await;
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::FooterPinMismatch { .. })),
        "{v:?}"
    );
}

/// `verify` used to check only the `cid` column while the reader refused a
/// nullable `rowid`: a table `verify` passed could not be searched. One
/// footer contract now: `verify` reports what the reader refuses.
#[tokio::test]
async fn verify_reports_the_columns_the_reader_requires() {
    let good = batch(DIM, &[1], 0);
    let fields: Vec<Field> = good
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let nullable = f.name() == ROWID_COLUMN;
            f.as_ref()
                .clone()
                .with_nullable(nullable || f.is_nullable())
        })
        .collect();
    let rg = RecordBatch::try_new(Arc::new(Schema::new(fields)), good.columns().to_vec()).unwrap();
    let v = violations(table(parquet_file(&[rg], props()), 1, 1, |_| {}).await).await;
    assert!(
        matches!(
            &v[..],
            [Violation::Footer(FooterViolation::ColumnInvalid { column: "rowid", found, .. })]
                if found == "INT64 OPTIONAL"
        ),
        "{v:?}"
    );
}
