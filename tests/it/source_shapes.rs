//! Vector columns of every common shape build the same index, and a Parquet
//! source reads only the column chunks it projects.
//!
//! The shapes are written by pyarrow (`$PARQIVF_PYTHON`, skipped with a note
//! when unset unless `PARQIVF_REQUIRE_INTEROP=1`): `list`, `large_list` and
//! `fixed_size_list` of `float16`, `float32` and `float64`, all holding the
//! same vectors (values exact in every element type). Each is built for
//! real and must answer queries exactly like the `list<float32>` file.

use crate::support;

use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, Float32Builder, ListBuilder, RecordBatch};
use arrow::datatypes::{Field, Schema};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::builder::{
    BuildParams, ParquetSource, ParquetSourceOptions, ProgressMode, VectorSource, build,
};
use parqivf::index::{Index, SearchParams};
use parqivf::store::counting::CountingStore;

const ROWS: usize = 300;
const DIM: usize = 8;
const SHAPES: [&str; 9] = [
    "list_float16",
    "list_float32",
    "list_float64",
    "large_list_float16",
    "large_list_float32",
    "large_list_float64",
    "fixed_size_list_float16",
    "fixed_size_list_float32",
    "fixed_size_list_float64",
];

/// Writes `<out>/<shape>/data.parquet` for every shape: the same `ROWS`
/// vectors of `DIM` eighths in [-2, 2] (exact in float16), plus an `id`.
const WRITE_SHAPES: &str = r#"
import sys, os
import pyarrow as pa, pyarrow.parquet as pq
out, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
state = 12345
vectors = []
for _ in range(rows):
    row = []
    for _ in range(dim):
        state = (state * 1103515245 + 12345) % 2**31
        row.append(((state >> 8) % 33 - 16) / 8.0)
    vectors.append(row)
elements = {"float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64()}
for container in ["list", "large_list", "fixed_size_list"]:
    for name, element in elements.items():
        if container == "list":
            t = pa.list_(element)
        elif container == "large_list":
            t = pa.large_list(element)
        else:
            t = pa.list_(element, dim)
        if name == "float16":
            import numpy as np
            column = pa.array([np.array(v, dtype=np.float16) for v in vectors], type=t)
        else:
            column = pa.array(vectors, type=t)
        table = pa.table({"id": pa.array(range(rows), pa.int64()), "embedding": column})
        folder = os.path.join(out, f"{container}_{name}")
        os.makedirs(folder)
        pq.write_table(table, os.path.join(folder, "data.parquet"), row_group_size=100)
print("ok")
"#;

fn params() -> BuildParams {
    BuildParams {
        nlist: 4,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

fn options() -> ParquetSourceOptions {
    ParquetSourceOptions {
        column: "embedding".into(),
        ..Default::default()
    }
}

/// Builds `<dir>/<shape>` and returns its hits (rowid, distance bits) for a
/// few queries, every list probed.
async fn build_and_search(dir: &std::path::Path, shape: &str) -> Vec<Vec<(i64, u32)>> {
    let store: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(dir.join(shape)).unwrap());
    let source = ParquetSource::open(store, "*.parquet", options())
        .await
        .unwrap_or_else(|e| panic!("{shape}: {e}"));
    assert_eq!(source.dim(), DIM, "{shape}");
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let summary = build(Arc::new(source), out.clone(), &Path::from("idx"), &params())
        .await
        .unwrap_or_else(|e| panic!("{shape}: {e}"));
    assert_eq!(summary.rows, ROWS as u64, "{shape}");
    let index = Index::open_current(out, &Path::from("idx")).await.unwrap();
    let mut all = Vec::new();
    for seed in 0..5 {
        let query = support::fixtures::random_vectors(1, DIM, seed);
        let result = index
            .search(
                &query,
                &SearchParams {
                    k: 10,
                    nprobe: Some(4),
                    ..SearchParams::default()
                },
            )
            .await
            .unwrap();
        all.push(
            result
                .hits
                .iter()
                .map(|h| (h.rowid, h.distance.to_bits()))
                .collect(),
        );
    }
    all
}

#[tokio::test]
async fn every_vector_shape_builds_the_same_index_as_list_float32() {
    let Some(python) = support::python::python_with("pyarrow") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let rows = ROWS.to_string();
    let dim = DIM.to_string();
    support::python::run_python(&python, WRITE_SHAPES, &[dir, &rows, &dim]);
    let reference = build_and_search(d.path(), "list_float32").await;
    assert!(reference.iter().all(|hits| hits.len() == 10));
    for shape in SHAPES {
        assert_eq!(
            build_and_search(d.path(), shape).await,
            reference,
            "{shape} answers differently from list<float32>"
        );
    }
}

/// One file: `ROWS` small vectors and a 4 KiB blob per row that no build
/// reads (about 1.2 MB of the file's bytes).
fn file_with_large_unprojected_column() -> bytes::Bytes {
    let mut embedding = ListBuilder::new(Float32Builder::new());
    for v in support::fixtures::random_vectors(ROWS, DIM, 7).chunks(DIM) {
        embedding.values().append_slice(v);
        embedding.append(true);
    }
    let embedding: ArrayRef = Arc::new(embedding.finish());
    let blobs: Vec<Vec<u8>> = (0..ROWS)
        .map(|i| (0..4096).map(|j| (i * 31 + j * 7 % 251) as u8).collect())
        .collect();
    let blob: ArrayRef = Arc::new(BinaryArray::from_iter_values(blobs.iter()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("blob", blob.data_type().clone(), true),
        Field::new("embedding", embedding.data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(schema, vec![blob, embedding]).unwrap();
    let mut buffer = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut buffer, batch.schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    buffer.into()
}

#[tokio::test]
async fn a_parquet_source_fetches_only_the_projected_column_chunks() {
    let file = file_with_large_unprojected_column();
    let size = file.len() as u64;
    assert!(size > 1_000_000, "{size}");
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    inner
        .put(&Path::from("t/a.parquet"), PutPayload::from(file))
        .await
        .unwrap();
    let counting = Arc::new(CountingStore::new(inner));
    let store: Arc<dyn ObjectStore> = counting.clone();
    let source = ParquetSource::open(store, "t/*.parquet", options())
        .await
        .unwrap();
    let before = counting.counts();
    let batch = source.read_part(0).await.unwrap();
    let read = counting.counts() - before;
    assert_eq!(batch.len(), ROWS);
    assert_eq!(
        batch.vectors,
        support::fixtures::random_vectors(ROWS, DIM, 7),
        "the vectors decode as written"
    );
    // The embedding chunk is ROWS·DIM·4 bytes plus levels; the blob is 1.2 MB.
    assert!(
        read.get_bytes < 64 * 1024,
        "read {} bytes of a {size}-byte file for one small column",
        read.get_bytes
    );
    assert_eq!(read.rounds, 1, "one ranged request per part: {read:?}");
    // Opening read the footer only.
    assert!(before.get_bytes < 128 * 1024, "{before:?}");
}
