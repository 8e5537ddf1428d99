//! Local input files for the build and search commands: a Parquet file of one
//! batch (such as a table of ids and embeddings) and a `.npy` matrix of f32
//! vectors.

use arrow::array::{ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use std::path::Path;
use std::sync::Arc;

/// A table of rows `ids`: `id` (Int64) and `emb` (FixedSizeList of `dim`
/// f32, nullable) holding the row-major `values`.
pub fn vectors_with_ids(ids: std::ops::Range<i64>, values: &[f32], dim: usize) -> RecordBatch {
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let emb = FixedSizeListArray::new(
        item.clone(),
        dim as i32,
        Arc::new(Float32Array::from(values.to_vec())),
        None,
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("emb", DataType::FixedSizeList(item, dim as i32), true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
            Arc::new(emb),
        ],
    )
    .unwrap()
}

/// Writes `batch` as the Parquet file `dir/name` (default writer settings).
pub fn write_parquet(dir: &Path, name: &str, batch: &RecordBatch) {
    let f = std::fs::File::create(dir.join(name)).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Writes row-major `values` (rows of `dim`) as a 2-D `<f4` `.npy` file.
pub fn write_npy(path: &Path, values: &[f32], dim: usize) {
    use npyz::WriterBuilder;
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[(values.len() / dim) as u64, dim as u64])
        .writer(file)
        .begin_nd()
        .unwrap();
    w.extend(values.iter().copied()).unwrap();
    w.finish().unwrap();
}

/// Writes `ids` as a 1-D `<i8` `.npy` file (what `parqivf delete --ids` reads).
pub fn write_ids_npy(path: &Path, ids: &[i64]) {
    use npyz::WriterBuilder;
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[ids.len() as u64])
        .writer(file)
        .begin_nd()
        .unwrap();
    w.extend(ids.iter().copied()).unwrap();
    w.finish().unwrap();
}
