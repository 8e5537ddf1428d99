//! The build stages called one by one, as a distributed driver would: the
//! snapshot they publish is byte-identical to `build`'s on the same input and
//! seed, whatever the batch split and the order buckets are written in, and a
//! retried bucket writes the same bytes.

use crate::support;

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::stages::{self, PostingsTarget, SnapshotFolder};
use parqivf::builder::{
    ArraySource, BuildError, BuildParams, ProgressMode, VectorBatch, VectorSource, build,
};
use parqivf::format::manifest::FileEntry;
use parqivf::format::postings_table::postings_schema;
use parqivf::format::snapshot_writer::SnapshotWriter;
use parqivf::format::warehouse::Publisher;
use parqivf::format::warehouse::{self, WarehouseError};
use parqivf::index::{Index, SearchParams};
use parqivf::kmeans::Hierarchy;
use parqivf::quant::{Quantizer, Scheme};

const DIM: usize = 16;

fn params() -> BuildParams {
    BuildParams {
        nlist: 16,
        // The stages by hand (like a distributed build) measure no recall
        // calibration: nor does the build they are compared with.
        calibration_queries: 0,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

fn source() -> ArraySource {
    ArraySource::new(
        support::fixtures::random_vectors(3000, DIM, 11),
        DIM,
        "generated",
    )
    .unwrap()
    .with_part_size(500)
}

/// `batch` cut into batches of at most `rows` rows.
fn split(batch: VectorBatch, rows: usize) -> Vec<VectorBatch> {
    batch
        .rowids
        .chunks(rows)
        .zip(batch.vectors.chunks(rows * DIM))
        .map(|(ids, v)| VectorBatch {
            rowids: ids.to_vec(),
            vectors: v.to_vec(),
            payload: None,
        })
        .collect()
}

/// Sample, train, assign every part (last part first) in batches of 170
/// rows, group, write the buckets last first, publish.
async fn by_hand(
    source: &ArraySource,
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> (Path, Hierarchy) {
    let params = params();
    let part_rows = stages::count(source).await.unwrap();
    stages::check_rows(params.nlist, part_rows.iter().sum()).unwrap();
    let sample = stages::sample(source, &part_rows, &params, |_, _, _| {})
        .await
        .unwrap();
    let (hierarchy, report) = stages::train(&sample, &params).unwrap();
    let quantizer = params
        .codes
        .map(|s| stages::train_quantizer(&sample, &hierarchy, s, params.seed).unwrap());
    let schema = postings_schema(DIM, quantizer.as_ref().map(Quantizer::code_bytes), &[]);
    let mut buckets: Vec<Vec<RecordBatch>> = vec![Vec::new(); hierarchy.nroots()];
    for p in (0..source.parts()).rev() {
        let part = stages::read_part(source, p, params.metric, false)
            .await
            .unwrap();
        for batch in split(part, 170) {
            let rows = stages::assign(
                &hierarchy,
                params.assign,
                quantizer.as_ref(),
                &schema,
                batch,
            )
            .unwrap();
            for (bucket, run) in stages::group_by_root(&hierarchy.cid_offsets, &rows).unwrap() {
                buckets[bucket as usize].push(run);
            }
        }
    }
    let writer = SnapshotWriter::begin(store.clone(), index, Publisher::Build).unwrap();
    let folder = writer.folder().clone();
    let definition = stages::definition(
        source.definition(),
        &params,
        DIM,
        &report,
        sample.len(),
        false,
    );
    let target = PostingsTarget::new(
        &definition,
        &folder,
        quantizer.as_ref(),
        Vec::new(),
        params.writer.clone(),
    )
    .unwrap();
    let mut files = Vec::new();
    for bucket in (0..hierarchy.nroots()).rev() {
        let run = std::mem::take(&mut buckets[bucket]);
        if let Some(sorted) = stages::sort_run(&schema, run, None).unwrap() {
            files.extend(
                stages::write_bucket(store, &target, bucket as u32, sorted)
                    .await
                    .unwrap(),
            );
        }
    }
    let model = stages::Model {
        neighbours: None,
        hierarchy: &hierarchy,
        quantizer: quantizer.as_ref(),
        calibration: None,
    };
    stages::publish(&writer, files, model, &definition, None)
        .await
        .unwrap();
    let commit = writer.commit(None).await.unwrap();
    assert_eq!(commit.version, 1);
    assert_eq!(commit.snapshot, folder.name);
    (folder.path, hierarchy)
}

#[tokio::test]
async fn stages_called_by_hand_publish_what_build_publishes() {
    let src = source();
    let index = Path::from("i");
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let built = build(Arc::new(src.clone()), a.clone(), &index, &params())
        .await
        .unwrap();
    let b: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (snapshot, _) = by_hand(&src, &b, &index).await;

    let fa = support::store::snapshot_files(&a, &Path::from(built.snapshot.as_str())).await;
    let fb = support::store::snapshot_files(&b, &snapshot).await;
    let names = |f: &[(String, bytes::Bytes)]| f.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&fa), names(&fb));
    assert!(fa.iter().any(|f| f.0.ends_with("manifest.json")));
    assert!(
        fa.iter()
            .any(|f| f.0.ends_with(".parquet") && f.0.contains("cid_bucket="))
    );
    for ((path, x), (_, y)) in fa.iter().zip(&fb) {
        assert!(
            x == y,
            "{path} differs between build and the stages by hand"
        );
    }

    let ia = Index::open_current(a, &index).await.unwrap();
    let ib = Index::open_current(b, &index).await.unwrap();
    let queries = support::fixtures::random_vectors(20, DIM, 99);
    let sp = SearchParams {
        k: 10,
        nprobe: Some(4),
        ..SearchParams::default()
    };
    let ra = ia.search_batch(&queries, &sp).await.unwrap();
    let rb = ib.search_batch(&queries, &sp).await.unwrap();
    for (x, y) in ra.iter().zip(&rb) {
        let hits = |r: &parqivf::index::SearchResult| {
            r.hits
                .iter()
                .map(|h| (h.rowid, h.distance.to_bits()))
                .collect::<Vec<_>>()
        };
        assert_eq!(hits(x).len(), 10);
        assert_eq!(hits(x), hits(y));
    }
}

#[tokio::test]
async fn sample_and_train_are_deterministic_for_a_seed() {
    let src = source();
    let p = params();
    let rows = stages::count(&src).await.unwrap();
    let s1 = stages::sample(&src, &rows, &p, |_, _, _| {}).await.unwrap();
    let s2 = stages::sample(&src, &rows, &p, |_, _, _| {}).await.unwrap();
    assert_eq!(s1, s2);
    assert_eq!((s1.rows, s1.skipped_rows), (3000, 0));
    assert_eq!(
        stages::train(&s1, &p).unwrap().0,
        stages::train(&s2, &p).unwrap().0
    );
    let other = BuildParams {
        seed: 7,
        ..params()
    };
    assert_ne!(
        stages::train(&s1, &p).unwrap().0,
        stages::train(&s1, &other).unwrap().0,
        "another seed trains other centroids"
    );
}

#[tokio::test]
async fn writing_a_bucket_twice_gives_identical_bytes() {
    let src = source();
    let p = params();
    let rows = stages::count(&src).await.unwrap();
    let sample = stages::sample(&src, &rows, &p, |_, _, _| {}).await.unwrap();
    let (h, report) = stages::train(&sample, &p).unwrap();
    let q = stages::train_quantizer(&sample, &h, Scheme::Sq8, p.seed).unwrap();
    let schema = postings_schema(DIM, Some(q.code_bytes()), &[]);
    let part = stages::read_part(&src, 0, p.metric, false).await.unwrap();
    let assigned = stages::assign(&h, p.assign, Some(&q), &schema, part).unwrap();
    let (bucket, run) = stages::group_by_root(&h.cid_offsets, &assigned)
        .unwrap()
        .remove(0);
    let sorted = stages::sort_run(&schema, vec![run], None).unwrap().unwrap();

    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let folder = SnapshotFolder::at(&Path::from("i"), "snapshots/s").unwrap();
    let definition = stages::definition(src.definition(), &p, DIM, &report, 0, false);
    let target =
        PostingsTarget::new(&definition, &folder, Some(&q), Vec::new(), p.writer.clone()).unwrap();
    let first = stages::write_bucket(&store, &target, bucket, sorted.clone())
        .await
        .unwrap();
    let bytes_first = support::store::snapshot_files(&store, &folder.path).await;
    let retried = stages::write_bucket(&store, &target, bucket, sorted)
        .await
        .unwrap();
    let bytes_retried = support::store::snapshot_files(&store, &folder.path).await;
    assert!(!first.is_empty());
    assert_eq!(first, retried);
    assert_eq!(bytes_first, bytes_retried);
    assert_eq!(bytes_first.len(), first.len());
}

#[tokio::test]
async fn nothing_is_visible_before_the_commit_and_a_bad_snapshot_name_is_typed() {
    let e = SnapshotFolder::at(&Path::from("i"), "../elsewhere").unwrap_err();
    assert!(matches!(e, WarehouseError::BadSnapshotPath { .. }), "{e}");
    // A publish that fails before its commit leaves no version behind.
    let src = source();
    let p = BuildParams {
        codes: None,
        ..params()
    };
    let rows = stages::count(&src).await.unwrap();
    let sample = stages::sample(&src, &rows, &p, |_, _, _| {}).await.unwrap();
    let (h, report) = stages::train(&sample, &p).unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = Path::from("i");
    let writer = SnapshotWriter::begin(store.clone(), &index, Publisher::Build).unwrap();
    let folder = writer.folder().clone();
    let definition = stages::definition(src.definition(), &p, DIM, &report, 0, false);
    // The manifest names a postings file that was never written: its footer
    // cannot be read, so publish fails before the commit.
    let missing = FileEntry {
        path: "cid_bucket=000000/part-00000.parquet".into(),
        cid_bucket: 0,
        min_cid: 0,
        max_cid: 0,
        rows: 1,
        size: 1000,
        sha256: "0".repeat(64),
    };
    let model = stages::Model {
        neighbours: None,
        hierarchy: &h,
        quantizer: None,
        calibration: None,
    };
    let written = stages::publish(&writer, vec![missing], model, &definition, None).await;
    assert!(written.is_err());
    // The writer rolls back: no version, and the folder is gone.
    let e = writer.publish(None, written).await.unwrap_err();
    assert!(!matches!(e, BuildError::Warehouse(_)), "{e}");
    assert!(warehouse::current(&store, &index).await.unwrap().is_none());
    assert!(
        support::store::snapshot_files(&store, &folder.path)
            .await
            .is_empty()
    );
}

/// A bucket over `max_file_bytes` is planned into even files, written at
/// once (`postings::writer::file_plan`): numbered from 0 in cid order, each
/// ending at the first row-group end past its share of the bucket's rows,
/// valid for `verify`, and an exhaustive search over them is exact.
#[tokio::test]
async fn a_bucket_over_the_file_cap_is_written_as_even_files_that_search_exactly() {
    use parqivf::distance::Metric;
    use parqivf::postings::writer::WriterOptions;
    let max_rows = 64;
    let p = BuildParams {
        writer: WriterOptions {
            max_rows_per_row_group: max_rows,
            max_file_bytes: 24 * 1024,
            ..WriterOptions::default()
        },
        ..params()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    build(Arc::new(source()), store.clone(), &idx, &p)
        .await
        .unwrap();
    let report = parqivf::verify::verify_location(store.clone(), &idx, Default::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
    let index = Index::open_current(store.clone(), &idx).await.unwrap();
    let files = &index.manifest().files;
    let mut split = 0;
    for bucket in 0..index.manifest().cid_offsets.len() as u32 - 1 {
        let of: Vec<&FileEntry> = files.iter().filter(|f| f.cid_bucket == bucket).collect();
        for (part, f) in of.iter().enumerate() {
            assert_eq!(
                f.path,
                format!("cid_bucket={bucket:06}/part-{part:05}.parquet")
            );
        }
        if of.len() < 2 {
            continue;
        }
        split += 1;
        // File f ends at the first row-group end past (f + 1) shares.
        let (rows, n) = (of.iter().map(|f| f.rows).sum::<u64>(), of.len() as u64);
        let mut end = 0;
        for (f, file) in (1..).zip(&of[..of.len() - 1]) {
            end += file.rows;
            let share = f * rows / n;
            assert!(
                end >= share && end < share + max_rows as u64,
                "bucket {bucket}: file {f} ends at row {end}, its share at {share}"
            );
        }
        assert!(of.windows(2).all(|w| w[0].max_cid <= w[1].min_cid));
    }
    assert!(split >= 2, "{split} buckets over the cap");
    // Exact at nprobe = nlist.
    let data = support::fixtures::random_vectors(3000, DIM, 11);
    let ids: Vec<i64> = (0..3000).collect();
    let exhaustive = SearchParams {
        k: 10,
        nprobe: Some(16),
        rerank: Some(1000),
        ..SearchParams::default()
    };
    for q in data.chunks_exact(DIM).step_by(397) {
        let got: Vec<i64> = index
            .search(q, &exhaustive)
            .await
            .unwrap()
            .hits
            .iter()
            .map(|h| h.rowid)
            .collect();
        let want: Vec<i64> = support::fixtures::brute_force(Metric::L2, DIM, &data, &ids, q, 10)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(got, want);
    }
}
