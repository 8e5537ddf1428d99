//! The postings writer: layout of the objects it writes (one CID per row
//! group, exact cid statistics, PLAIN uncompressed vectors, KV metadata),
//! large CIDs spanning row groups and files, streaming size and sha256,
//! typed errors for bad input, and its manifest against the JSON Schema.

use crate::support;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type};
use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parqivf::format::manifest::{Manifest, ManifestError};
use parqivf::format::postings_table::{KV_DIM, KV_FORMAT_VERSION, part_path, postings_schema};
use parqivf::postings::{PostingsError, PostingsWriter, WriterOptions};
use parqivf::store::uri::RelativeLocation;
use parqivf::verify::{VerifyOptions, verify};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, Encoding};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::statistics::Statistics;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use support::postings::{batch, bucket_cids, payload, vector, write_table};

const DIM: usize = 4;

fn small_options() -> WriterOptions {
    WriterOptions {
        max_rows_per_row_group: 4,
        ..WriterOptions::default()
    }
}

async fn object(store: &Arc<dyn ObjectStore>, root: &Path, relative: &str) -> Bytes {
    let location = RelativeLocation::parse(relative)
        .unwrap()
        .resolve_path(root);
    store.get(&location).await.unwrap().bytes().await.unwrap()
}

/// (cid, rows) of every row group, from the footer statistics.
fn row_group_cids(bytes: &Bytes) -> Vec<(i32, i64)> {
    let reader = SerializedFileReader::new(bytes.clone()).unwrap();
    reader
        .metadata()
        .row_groups()
        .iter()
        .map(|rg| match rg.column(0).statistics() {
            Some(Statistics::Int32(s)) => {
                assert!(s.min_is_exact() && s.max_is_exact());
                assert_eq!(s.min_opt(), s.max_opt(), "one cid per row group");
                assert_eq!(s.null_count_opt(), Some(0));
                (*s.min_opt().unwrap(), rg.num_rows())
            }
            other => panic!("cid statistics missing: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn one_cid_per_row_group_with_exact_stats_and_row_cap() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("idx/postings");
    let manifest = write_table(Arc::clone(&store), &root, DIM, small_options()).await;
    // Bucket 0: cids 0,0,1,2,2,2 written as two batches; bucket 1: 3x2, 5x10, 7x3.
    assert_eq!(manifest.files.len(), 2);
    let b0 = object(&store, &root, &manifest.files[0].path).await;
    assert_eq!(row_group_cids(&b0), [(0, 2), (1, 1), (2, 3)]);
    let b1 = object(&store, &root, &manifest.files[1].path).await;
    // cid 5 (10 rows) spans three row groups under the 4-row cap.
    assert_eq!(
        row_group_cids(&b1),
        [(3, 2), (5, 4), (5, 4), (5, 2), (7, 3)]
    );
    assert_eq!(manifest.ntotal, 21);
    assert_eq!(
        (manifest.files[1].min_cid, manifest.files[1].max_cid),
        (3, 7)
    );
}

#[tokio::test]
async fn vector_column_is_plain_uncompressed_without_dictionary_or_stats() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("t");
    let manifest = write_table(Arc::clone(&store), &root, DIM, small_options()).await;
    let bytes = object(&store, &root, &manifest.files[1].path).await;
    let reader = SerializedFileReader::new(bytes).unwrap();
    let meta = reader.metadata();
    let schema = meta.file_metadata().schema_descr();
    let cid = schema.column(0);
    assert_eq!(cid.physical_type(), parquet::basic::Type::INT32);
    assert_eq!(
        cid.self_type().get_basic_info().repetition(),
        parquet::basic::Repetition::REQUIRED
    );
    let vec_col = schema.column(2);
    assert_eq!(
        vec_col.physical_type(),
        parquet::basic::Type::FIXED_LEN_BYTE_ARRAY
    );
    assert_eq!(vec_col.type_length(), (DIM * 4) as i32);
    for rg in meta.row_groups() {
        let v = rg.column(2);
        assert_eq!(v.compression(), Compression::UNCOMPRESSED);
        assert_eq!(v.dictionary_page_offset(), None);
        assert!(v.statistics().is_none());
        let encodings: Vec<Encoding> = v.encodings().collect();
        assert!(encodings.contains(&Encoding::PLAIN), "{encodings:?}");
        assert!(
            !encodings.contains(&Encoding::RLE_DICTIONARY)
                && !encodings.contains(&Encoding::PLAIN_DICTIONARY),
            "{encodings:?}"
        );
    }
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let get = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
    assert_eq!(get(KV_FORMAT_VERSION).as_deref(), Some("1"));
    assert_eq!(get(KV_DIM), Some(DIM.to_string()));
}

/// `cid` is RLE_DICTIONARY over its row group's one CID (a dictionary page
/// of 4 bytes, data pages of a few bytes) and `rowid` DELTA_BINARY_PACKED
/// without a dictionary; both uncompressed, with exact page statistics
/// (their column index) still written.
#[tokio::test]
async fn key_columns_are_a_one_value_dictionary_and_delta_packed() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("t");
    let manifest = write_table(Arc::clone(&store), &root, DIM, small_options()).await;
    for file in &manifest.files {
        let bytes = object(&store, &root, &file.path).await;
        let reader = SerializedFileReader::new(bytes.clone()).unwrap();
        let meta = reader.metadata();
        for (g, rg) in meta.row_groups().iter().enumerate() {
            let (cid, rowid) = (rg.column(0), rg.column(1));
            for c in [cid, rowid] {
                assert_eq!(c.compression(), Compression::UNCOMPRESSED);
                assert!(c.column_index_offset().is_some(), "page statistics");
            }
            let encodings: Vec<Encoding> = cid.encodings().collect();
            assert!(
                encodings.contains(&Encoding::RLE_DICTIONARY)
                    || encodings.contains(&Encoding::PLAIN_DICTIONARY),
                "{encodings:?}"
            );
            let (start, len) = cid.byte_range();
            let pages = parqivf::format::page_crc::checked_pages(
                &bytes[start as usize..(start + len) as usize],
            )
            .unwrap();
            let dictionary = &pages[0];
            assert_eq!(
                dictionary.page_type,
                Some(parqivf::format::page_crc::DICTIONARY_PAGE)
            );
            assert_eq!((dictionary.num_values, dictionary.data.len()), (Some(1), 4));
            for p in &pages[1..] {
                assert!(p.is_data());
                assert!(
                    p.data.len() <= 8,
                    "rg {g}: a cid data page of {} bytes",
                    p.data.len()
                );
            }
            assert_eq!(rowid.dictionary_page_offset(), None);
            let encodings: Vec<Encoding> = rowid.encodings().collect();
            assert!(
                encodings.contains(&Encoding::DELTA_BINARY_PACKED),
                "{encodings:?}"
            );
            assert!(!encodings.contains(&Encoding::PLAIN), "{encodings:?}");
        }
    }
}

#[tokio::test]
async fn rows_round_trip_with_little_endian_vectors_and_payload() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("t");
    let manifest = write_table(Arc::clone(&store), &root, DIM, small_options()).await;
    let mut cids = Vec::new();
    for file in &manifest.files {
        let bytes = object(&store, &root, &file.path).await;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            let b: RecordBatch = b.unwrap();
            let vectors = b.column(2).as_fixed_size_binary();
            let titles = b.column(3).as_string::<i32>();
            for (i, rowid) in b
                .column(1)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .enumerate()
            {
                let expected: Vec<u8> = vector(*rowid, DIM)
                    .into_iter()
                    .flat_map(f32::to_le_bytes)
                    .collect();
                assert_eq!(vectors.value(i), expected.as_slice());
                assert_eq!(titles.value(i), format!("doc {rowid}"));
            }
            cids.extend(
                b.column(0)
                    .as_primitive::<Int32Type>()
                    .values()
                    .iter()
                    .copied(),
            );
        }
    }
    let expected: Vec<i32> = bucket_cids().into_iter().flat_map(|(_, c)| c).collect();
    assert_eq!(cids, expected);
}

#[tokio::test]
async fn size_and_sha256_describe_the_uploaded_bytes_also_with_multipart() {
    for upload_buffer_bytes in [10 << 20, 1024] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let root = Path::from("t");
        let options = WriterOptions {
            upload_buffer_bytes,
            ..small_options()
        };
        let manifest = write_table(Arc::clone(&store), &root, 64, options).await;
        for file in &manifest.files {
            let bytes = object(&store, &root, &file.path).await;
            assert_eq!(file.size, bytes.len() as u64);
            assert_eq!(file.sha256, hex::encode(Sha256::digest(&bytes)));
            let footer_rows = SerializedFileReader::new(bytes)
                .unwrap()
                .metadata()
                .file_metadata()
                .num_rows();
            assert_eq!(file.rows, footer_rows as u64);
        }
    }
}

#[tokio::test]
async fn large_cid_spans_files_at_the_size_cap_and_the_manifest_shares_the_boundary() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Path::from("t");
    // Every row group reaches the 1-byte file cap, so each row group is a file.
    let options = WriterOptions {
        max_rows_per_row_group: 4,
        max_file_bytes: 1,
        ..WriterOptions::default()
    };
    let manifest = write_table(Arc::clone(&store), &root, DIM, options).await;
    let bucket1: Vec<_> = manifest
        .files
        .iter()
        .filter(|f| f.cid_bucket == 1)
        .collect();
    let ranges: Vec<(u32, u32, u64)> = bucket1
        .iter()
        .map(|f| (f.min_cid, f.max_cid, f.rows))
        .collect();
    assert_eq!(
        ranges,
        [(3, 3, 2), (5, 5, 4), (5, 5, 4), (5, 5, 2), (7, 7, 3)]
    );
    let paths: Vec<_> = bucket1.iter().map(|f| f.path.clone()).collect();
    assert_eq!(paths, (0..5).map(|s| part_path(1, s)).collect::<Vec<_>>());
    // The published bytes parse strictly and verify clean.
    let published = object(&store, &root, "manifest.json").await;
    assert_eq!(Manifest::parse(&published).unwrap(), manifest);
    let report = verify(store, &root, VerifyOptions { orphans: true })
        .await
        .unwrap();
    assert!(report.is_ok(), "{:?}", report.violations);
    assert_eq!(report.files_checked, manifest.files.len());
}

#[tokio::test]
async fn written_manifests_validate_against_the_json_schema() {
    for options in [
        WriterOptions::default(),
        small_options(),
        WriterOptions {
            max_file_bytes: 1,
            ..small_options()
        },
    ] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let root = Path::from("t");
        let manifest = write_table(Arc::clone(&store), &root, DIM, options).await;
        let published = object(&store, &root, "manifest.json").await;
        assert_eq!(published.to_vec(), manifest.to_json_bytes());
        let doc: serde_json::Value = serde_json::from_slice(&published).unwrap();
        assert_eq!(support::postings::schema_errors(&doc), Vec::<String>::new());
    }
}

fn writer(store: &Arc<dyn ObjectStore>) -> PostingsWriter {
    PostingsWriter::new(
        Arc::clone(store),
        Path::from("t"),
        DIM,
        None,
        payload(),
        small_options(),
    )
    .unwrap()
}

#[tokio::test]
async fn unsorted_input_is_rejected_within_and_across_batches() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = writer(&store)
        .write_bucket(0, vec![batch(DIM, &[0, 2, 1], 0)])
        .await;
    assert!(matches!(
        err,
        Err(PostingsError::Unsorted {
            bucket: 0,
            previous: 2,
            next: 1
        })
    ));
    let err = writer(&store)
        .write_bucket(0, vec![batch(DIM, &[1, 2], 0), batch(DIM, &[0], 2)])
        .await;
    assert!(matches!(
        err,
        Err(PostingsError::Unsorted {
            bucket: 0,
            previous: 2,
            next: 0
        })
    ));
}

#[tokio::test]
async fn negative_cid_is_out_of_range() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = writer(&store)
        .write_bucket(3, vec![batch(DIM, &[-1, 0], 0)])
        .await;
    assert!(matches!(
        err,
        Err(PostingsError::CidOutOfRange { bucket: 3, cid: -1 })
    ));
}

#[tokio::test]
async fn wrong_schema_is_rejected() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let other_dim = batch(DIM + 1, &[0], 0);
    let err = writer(&store).write_bucket(0, vec![other_dim]).await;
    assert!(matches!(
        err,
        Err(PostingsError::SchemaMismatch {
            bucket: 0,
            batch: 0,
            ..
        })
    ));
    let no_payload = RecordBatch::try_new(
        postings_schema(DIM, None, &[]),
        batch(DIM, &[0], 0).columns()[..3].to_vec(),
    )
    .unwrap();
    let err = writer(&store)
        .write_bucket(0, vec![batch(DIM, &[0], 0), no_payload])
        .await;
    assert!(matches!(
        err,
        Err(PostingsError::SchemaMismatch { batch: 1, .. })
    ));
}

#[tokio::test]
async fn constructor_and_bucket_misuse_are_typed_errors() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let new = |dim, payload: Vec<Field>, options| {
        PostingsWriter::new(
            Arc::clone(&store),
            Path::from("t"),
            dim,
            None,
            payload,
            options,
        )
    };
    assert!(matches!(
        new(0, vec![], WriterOptions::default()),
        Err(PostingsError::InvalidDim { dim: 0 })
    ));
    let zero_cap = WriterOptions {
        max_rows_per_row_group: 0,
        ..WriterOptions::default()
    };
    assert!(matches!(
        new(DIM, vec![], zero_cap),
        Err(PostingsError::InvalidOptions { .. })
    ));
    let clash = vec![Field::new("rowid", DataType::Utf8, true)];
    assert!(matches!(
        new(DIM, clash, WriterOptions::default()),
        Err(PostingsError::ReservedPayloadName { ref name }) if name == "rowid"
    ));
    let mut w = writer(&store);
    w.write_bucket(0, vec![batch(DIM, &[0], 0)]).await.unwrap();
    let again = w.write_bucket(0, vec![batch(DIM, &[1], 1)]).await;
    assert!(matches!(
        again,
        Err(PostingsError::BucketRepeated { bucket: 0 })
    ));
    let too_big = w.write_bucket(1_000_000, vec![]).await;
    assert!(matches!(
        too_big,
        Err(PostingsError::BucketOutOfRange { bucket: 1_000_000 })
    ));
}

#[tokio::test]
async fn finish_rejects_cids_outside_their_bucket() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store);
    // Bucket 0 gets cid 5, but cid-offsets give root 0 only [0, 3).
    w.write_bucket(0, vec![batch(DIM, &[5], 0)]).await.unwrap();
    let err = w.finish(8, vec![0, 3, 8]);
    assert!(matches!(
        err,
        Err(PostingsError::Manifest(ManifestError::OutsideBucket {
            bucket: 0,
            start: 0,
            end: 3,
            ..
        }))
    ));
}

#[tokio::test]
async fn empty_bucket_writes_nothing() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut w = writer(&store);
    w.write_bucket(0, vec![]).await.unwrap();
    w.write_bucket(1, vec![batch(DIM, &[], 0)]).await.unwrap();
    let manifest = w.finish(2, vec![0, 1, 2]).unwrap();
    assert!(manifest.files.is_empty());
    assert_eq!(manifest.ntotal, 0);
}
