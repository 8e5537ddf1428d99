//! Local input files for the build and search commands: a Parquet file of one
//! batch and a `.npy` matrix of f32 vectors.

use arrow::array::RecordBatch;
use std::path::Path;

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
