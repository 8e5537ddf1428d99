//! Bounded-memory grouping of assigned postings by root bucket.
//!
//! Assigned rows arrive part by part as postings-schema record batches, one
//! per (part, bucket). They are held in memory until the total passes the
//! budget; then every in-memory bucket is appended to its own temporary Arrow
//! IPC file and memory is released. At write time each bucket is read back
//! (spilled batches first, then the in-memory tail: arrival order is kept),
//! concatenated and sorted by (cid, rowid), which makes the output independent
//! of how the input was split or how often it spilled.

use std::fs::File;
use std::io::{BufReader, BufWriter};

use arrow::array::{Array, Int32Array, Int64Array, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use super::BuildError;
use crate::postings::schema::{CID_COLUMN, ROWID_COLUMN};

struct Bucket {
    memory: Vec<RecordBatch>,
    memory_bytes: usize,
    spill: Option<StreamWriter<BufWriter<File>>>,
    spill_path: Option<std::path::PathBuf>,
    rows: u64,
}

/// Per-bucket buffers with a memory budget and spill files.
pub struct BucketSpill {
    schema: SchemaRef,
    buckets: Vec<Bucket>,
    budget: usize,
    in_memory: usize,
    dir: tempfile::TempDir,
    spilled_bytes: u64,
    spill_events: u64,
}

impl BucketSpill {
    /// `budget` bytes of record batches are kept in memory before spilling.
    ///
    /// # Errors
    /// The temporary directory cannot be created.
    pub fn new(schema: SchemaRef, buckets: usize, budget: usize) -> Result<Self, BuildError> {
        let dir = tempfile::Builder::new()
            .prefix("parqivf-spill-")
            .tempdir()
            .map_err(|e| BuildError::Spill {
                path: std::env::temp_dir().display().to_string(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            schema,
            buckets: (0..buckets)
                .map(|_| Bucket {
                    memory: Vec::new(),
                    memory_bytes: 0,
                    spill: None,
                    spill_path: None,
                    rows: 0,
                })
                .collect(),
            budget,
            in_memory: 0,
            dir,
            spilled_bytes: 0,
            spill_events: 0,
        })
    }

    /// Add rows of `bucket`.
    ///
    /// # Errors
    /// Writing a spill file fails.
    pub fn push(&mut self, bucket: usize, batch: RecordBatch) -> Result<(), BuildError> {
        let bytes = batch.get_array_memory_size();
        let b = &mut self.buckets[bucket];
        b.rows += batch.num_rows() as u64;
        b.memory_bytes += bytes;
        b.memory.push(batch);
        self.in_memory += bytes;
        if self.in_memory > self.budget {
            self.spill_all()?;
        }
        Ok(())
    }

    fn spill_all(&mut self) -> Result<(), BuildError> {
        self.spill_events += 1;
        for (i, b) in self.buckets.iter_mut().enumerate() {
            if b.memory.is_empty() {
                continue;
            }
            let path = self.dir.path().join(format!("bucket-{i:06}.arrows"));
            let err = |e: &dyn std::fmt::Display| BuildError::Spill {
                path: path.display().to_string(),
                reason: e.to_string(),
            };
            if b.spill.is_none() {
                let f = File::create(&path).map_err(|e| err(&e))?;
                let w =
                    StreamWriter::try_new(BufWriter::new(f), &self.schema).map_err(|e| err(&e))?;
                b.spill = Some(w);
                b.spill_path = Some(path.clone());
            }
            if let Some(w) = b.spill.as_mut() {
                for batch in b.memory.drain(..) {
                    w.write(&batch).map_err(|e| err(&e))?;
                }
                w.flush().map_err(|e| err(&e))?;
            }
            self.spilled_bytes += b.memory_bytes as u64;
            b.memory_bytes = 0;
        }
        self.in_memory = 0;
        Ok(())
    }

    /// Rows per bucket so far.
    pub fn bucket_rows(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.rows).collect()
    }

    /// Bytes written to spill files so far, and how many times it spilled.
    pub fn spilled(&self) -> (u64, u64) {
        (self.spilled_bytes, self.spill_events)
    }

    /// Take bucket `bucket`'s rows, sorted by (cid, rowid); `None` when empty.
    /// Its memory and spill file are released.
    ///
    /// # Errors
    /// Reading the spill file back fails.
    pub fn take_sorted(&mut self, bucket: usize) -> Result<Option<RecordBatch>, BuildError> {
        let b = &mut self.buckets[bucket];
        let mut batches = Vec::new();
        if let (Some(mut w), Some(path)) = (b.spill.take(), b.spill_path.take()) {
            let err = |e: &dyn std::fmt::Display| BuildError::Spill {
                path: path.display().to_string(),
                reason: e.to_string(),
            };
            w.finish().map_err(|e| err(&e))?;
            drop(w);
            let f = File::open(&path).map_err(|e| err(&e))?;
            let r = StreamReader::try_new(BufReader::new(f), None).map_err(|e| err(&e))?;
            for batch in r {
                batches.push(batch.map_err(|e| err(&e))?);
            }
            let _ = std::fs::remove_file(&path);
        }
        self.in_memory -= b.memory_bytes;
        b.memory_bytes = 0;
        batches.append(&mut b.memory);
        if batches.is_empty() {
            return Ok(None);
        }
        let all =
            concat_batches(&self.schema, &batches).map_err(|e| BuildError::Arrow(e.to_string()))?;
        drop(batches);
        sort_by_cid_rowid(&all).map(Some)
    }
}

/// Sort a postings batch by (cid, rowid). Rowids are unique within a build, so
/// the order is total and the result deterministic.
///
/// # Errors
/// The batch lacks the `cid`/`rowid` columns of the postings schema.
pub fn sort_by_cid_rowid(batch: &RecordBatch) -> Result<RecordBatch, BuildError> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| BuildError::Arrow(format!("postings batch has no column {name}")))
    };
    let cid = col(CID_COLUMN)?;
    let rowid = col(ROWID_COLUMN)?;
    let cid = cid
        .as_any()
        .downcast_ref::<Int32Array>()
        .ok_or_else(|| BuildError::Arrow("cid column is not Int32".into()))?;
    let rowid = rowid
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| BuildError::Arrow("rowid column is not Int64".into()))?;
    let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
    order.sort_unstable_by_key(|&i| (cid.value(i as usize), rowid.value(i as usize)));
    if order.iter().enumerate().all(|(i, &j)| i as u32 == j) {
        return Ok(batch.clone());
    }
    let idx = UInt32Array::from(order);
    debug_assert_eq!(idx.len(), batch.num_rows());
    take_record_batch(batch, &idx).map_err(|e| BuildError::Arrow(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::FixedSizeBinaryArray;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(CID_COLUMN, DataType::Int32, false),
            Field::new(ROWID_COLUMN, DataType::Int64, false),
            Field::new("vector", DataType::FixedSizeBinary(4), false),
        ]))
    }

    fn batch(rows: &[(i32, i64)]) -> RecordBatch {
        let v: Vec<[u8; 4]> = rows
            .iter()
            .map(|&(_, r)| (r as f32).to_le_bytes())
            .collect();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int32Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
                Arc::new(FixedSizeBinaryArray::try_from_iter(v.into_iter()).unwrap()),
            ],
        )
        .unwrap()
    }

    fn pairs(b: &RecordBatch) -> Vec<(i32, i64)> {
        let c = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        let r = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        (0..b.num_rows())
            .map(|i| (c.value(i), r.value(i)))
            .collect()
    }

    #[test]
    fn spilled_and_unspilled_give_identical_sorted_buckets() {
        let input = [vec![(3, 9), (1, 4)], vec![(1, 2), (3, 1)], vec![(2, 7)]];
        let run = |budget: usize| {
            let mut s = BucketSpill::new(schema(), 2, budget).unwrap();
            for rows in &input {
                s.push(1, batch(rows)).unwrap();
            }
            let spilled = s.spilled().1;
            (
                s.take_sorted(1).unwrap().map(|b| pairs(&b)),
                s.take_sorted(0).unwrap(),
                spilled,
            )
        };
        let (mem, empty, n0) = run(usize::MAX);
        let (disk, _, n1) = run(0);
        assert_eq!(n0, 0);
        assert!(n1 >= 3, "budget 0 spills on every push");
        assert!(empty.is_none());
        let expected = vec![(1, 2), (1, 4), (2, 7), (3, 1), (3, 9)];
        assert_eq!(mem.unwrap(), expected);
        assert_eq!(disk.unwrap(), expected);
    }
}
