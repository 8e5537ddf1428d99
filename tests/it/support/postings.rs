//! Shared fixtures for the postings integration tests: seeded postings
//! batches and a helper that writes and publishes a small table.

use arrow::array::{FixedSizeBinaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field};
use object_store::ObjectStore;
use object_store::path::Path;
use parqivf::format::manifest::Manifest;
use parqivf::format::postings_table::postings_schema;
use parqivf::postings::{PostingsWriter, WriterOptions, publish};
use std::sync::Arc;

/// The one payload column the fixtures carry.
pub fn payload() -> Vec<Field> {
    vec![Field::new("title", DataType::Utf8, true)]
}

/// The f32 vector of posting `rowid`, deterministic.
pub fn vector(rowid: i64, dim: usize) -> Vec<f32> {
    (0..dim).map(|j| rowid as f32 + j as f32 / 8.0).collect()
}

/// A postings batch (with the `title` payload) for the given cids, rowids
/// counting up from `first_rowid`.
pub fn batch(dim: usize, cids: &[i32], first_rowid: i64) -> RecordBatch {
    let rowids: Vec<i64> = (0..cids.len() as i64).map(|i| first_rowid + i).collect();
    let bytes: Vec<u8> = rowids
        .iter()
        .flat_map(|&r| vector(r, dim))
        .flat_map(f32::to_le_bytes)
        .collect();
    let vectors = FixedSizeBinaryArray::try_new((dim * 4) as i32, bytes.into(), None).unwrap();
    let titles = StringArray::from_iter(rowids.iter().map(|r| Some(format!("doc {r}"))));
    RecordBatch::try_new(
        postings_schema(dim, None, &payload()),
        vec![
            Arc::new(Int32Array::from(cids.to_vec())),
            Arc::new(Int64Array::from(rowids)),
            Arc::new(vectors),
            Arc::new(titles),
        ],
    )
    .unwrap()
}

/// `n` copies of `cid`.
fn run(cid: i32, n: usize) -> Vec<i32> {
    vec![cid; n]
}

/// The example table: nlist 8 in two roots `[0, 3, 8]`; bucket 0 holds cids
/// 0..=2, bucket 1 holds cids 3, 5 (large: 10 rows) and 7.
pub const NLIST: u32 = 8;
pub fn cid_offsets() -> Vec<u32> {
    vec![0, 3, 8]
}
pub fn bucket_cids() -> Vec<(u32, Vec<i32>)> {
    let mut one = run(3, 2);
    one.extend(run(5, 10));
    one.extend(run(7, 3));
    vec![(0, vec![0, 0, 1, 2, 2, 2]), (1, one)]
}

/// Writes the example table (batches split in two per bucket) and publishes it.
pub async fn write_table(
    store: Arc<dyn ObjectStore>,
    root: &Path,
    dim: usize,
    options: WriterOptions,
) -> Manifest {
    let mut writer = PostingsWriter::new(
        Arc::clone(&store),
        root.clone(),
        dim,
        None,
        payload(),
        options,
    )
    .unwrap();
    let mut rowid = 0i64;
    for (bucket, cids) in bucket_cids() {
        let (a, b) = cids.split_at(cids.len() / 2);
        let batches = vec![batch(dim, a, rowid), batch(dim, b, rowid + a.len() as i64)];
        rowid += cids.len() as i64;
        writer.write_bucket(bucket, batches).await.unwrap();
    }
    let manifest = writer.finish(NLIST, cid_offsets()).unwrap();
    publish(&store, root, &manifest).await.unwrap();
    manifest
}

/// Validates a JSON document against `manifests/manifest.schema.json`.
pub fn schema_errors(document: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/manifest.schema.json"
    )))
    .unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    validator
        .iter_errors(document)
        .map(|e| e.to_string())
        .collect()
}
