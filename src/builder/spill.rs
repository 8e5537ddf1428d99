//! Bounded-memory grouping of assigned postings by root bucket.
//!
//! Assigned rows arrive part by part as postings-schema record batches, one
//! per (part, bucket). They are held in memory until the total passes the
//! budget; then every in-memory bucket is appended to its own temporary Arrow
//! IPC file and memory is released. At write time each bucket is read back
//! (spilled batches first, then the in-memory tail: arrival order is kept),
//! concatenated and sorted by (cid, rowid), which makes the output independent
//! of how the input was split or how often it spilled.
//!
//! The spill files live in a per-build work folder
//! `$TMPDIR/parqivf-build-<random>/` (`WorkDir`) that also records the
//! snapshot folder the build is writing until it commits. The folder is
//! removed when the build ends (success, error, or its future dropped on
//! SIGINT). A build killed outright (`kill -9`) cannot clean up; its folder
//! is found by the next build on the machine ([`sweep_abandoned`]): the
//! owner's lock on `owner.lock` is gone, so its spill files are removed, and
//! when that build writes to the same index location it also deletes the
//! uncommitted snapshot folder recorded there (completed postings and the
//! object store's `…#N` staging files).

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;

use arrow::array::UInt32Array;
use arrow::compute::{
    SortColumn, SortOptions, concat_batches, interleave_record_batch, lexsort_to_indices,
    take_record_batch,
};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use super::error::BuildError;
use crate::format::postings_table::{CID_COLUMN, ROWID_COLUMN};
use crate::format::snapshot_writer::{SnapshotFolder, delete_unreferenced};

/// The writer of one bucket's spill file.
type SpillWriter = StreamWriter<BufWriter<File>>;

struct Bucket {
    memory: Vec<RecordBatch>,
    memory_bytes: usize,
    spill: Option<SpillWriter>,
    spill_path: Option<std::path::PathBuf>,
    rows: u64,
}

/// Per-bucket buffers with a memory budget and spill files.
pub struct BucketSpill {
    schema: SchemaRef,
    buckets: Vec<Bucket>,
    budget: usize,
    in_memory: usize,
    dir: WorkDir,
    spilled_bytes: u64,
    spill_events: u64,
}

impl BucketSpill {
    /// Number of root buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// `budget` bytes of record batches are kept in memory before spilling.
    ///
    /// # Errors
    /// The temporary directory cannot be created.
    pub fn new(schema: SchemaRef, buckets: usize, budget: usize) -> Result<Self, BuildError> {
        let dir = WorkDir::create(&std::env::temp_dir())?;
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
            let path = self.dir.path.join(format!("bucket-{i:06}.arrows"));
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

    /// Record that this build is writing the snapshot folder `snapshot` on
    /// `store`, so that [`sweep_abandoned`] can delete it should the process
    /// die before [`BucketSpill::forget_snapshot`].
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn record_snapshot(
        &self,
        store: &dyn ObjectStore,
        snapshot: &Path,
    ) -> Result<(), BuildError> {
        self.dir.record(store, snapshot)
    }

    /// The recorded snapshot is committed or deleted: never sweep it.
    pub fn forget_snapshot(&self) {
        let _ = std::fs::remove_file(self.dir.path.join(RECORD_FILE));
    }

    /// Rows per bucket so far.
    pub fn bucket_rows(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.rows).collect()
    }

    /// Bytes written to spill files so far, and how many times it spilled.
    pub fn spilled(&self) -> (u64, u64) {
        (self.spilled_bytes, self.spill_events)
    }

    /// Take bucket `bucket`'s rows out of the spill (no IO: its spill file,
    /// if any, is read by [`TakenBucket::sorted`]); its memory is released.
    pub fn take(&mut self, bucket: usize) -> TakenBucket {
        let b = &mut self.buckets[bucket];
        self.in_memory -= b.memory_bytes;
        b.memory_bytes = 0;
        TakenBucket {
            schema: self.schema.clone(),
            spill: b.spill.take().zip(b.spill_path.take()),
            memory: std::mem::take(&mut b.memory),
        }
    }
}

/// One bucket's rows taken out of a [`BucketSpill`]: those it spilled (its
/// file, still to read) and those it held.
pub struct TakenBucket {
    schema: SchemaRef,
    spill: Option<(SpillWriter, PathBuf)>,
    memory: Vec<RecordBatch>,
}

impl TakenBucket {
    /// The rows, sorted by (cid, `sort_by`, rowid) (see [`sort_postings`]);
    /// `None` when there are none. The spill file is read back and removed.
    /// Blocking IO and CPU: run it off the async workers.
    ///
    /// # Errors
    /// Reading the spill file back fails.
    pub fn sorted(self, sort_by: Option<&str>) -> Result<Option<RecordBatch>, BuildError> {
        let mut batches = Vec::new();
        if let Some((mut w, path)) = self.spill {
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
        batches.extend(self.memory);
        sort_run(&self.schema, batches, sort_by)
    }
}

/// One bucket's rows, from batches of `schema` in any split and order, as a
/// single batch sorted by (cid, `sort_by`, rowid) ([`sort_postings`]);
/// `None` when there are none. Only the key columns are concatenated to
/// sort; every row is then copied once, straight from its batch into place.
///
/// # Errors
/// [`BuildError::Arrow`] when a batch does not match `schema` or lacks the
/// `cid`/`rowid`/`sort_by` columns.
pub fn sort_run(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    sort_by: Option<&str>,
) -> Result<Option<RecordBatch>, BuildError> {
    let arrow = |e: arrow::error::ArrowError| BuildError::Arrow(e.to_string());
    match batches.len() {
        0 => return Ok(None),
        1 => return sort_postings(&batches[0], sort_by).map(Some),
        _ => {}
    }
    let key_names: Vec<&str> = [Some(CID_COLUMN), sort_by, Some(ROWID_COLUMN)]
        .into_iter()
        .flatten()
        .collect();
    let key_indices = key_names
        .iter()
        .map(|name| {
            schema
                .index_of(name)
                .map_err(|_| BuildError::Arrow(format!("postings batch has no column {name}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let keys = batches
        .iter()
        .map(|b| b.project(&key_indices))
        .collect::<Result<Vec<_>, _>>()
        .map_err(arrow)?;
    let keys = concat_batches(
        &Arc::new(schema.project(&key_indices).map_err(arrow)?),
        &keys,
    )
    .map_err(arrow)?;
    let order = sort_order(&keys, sort_by)?;
    let mut at = Vec::with_capacity(batches.len());
    for (b, batch) in batches.iter().enumerate() {
        at.extend((0..batch.num_rows()).map(|r| (b, r)));
    }
    let indices: Vec<(usize, usize)> = order.values().iter().map(|&i| at[i as usize]).collect();
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    interleave_record_batch(&refs, &indices)
        .map(Some)
        .map_err(arrow)
}

/// Work folders are `$TMPDIR/parqivf-build-<random>`.
const WORK_PREFIX: &str = "parqivf-build-";
/// Held locked by the owning process for the folder's whole life.
const LOCK_FILE: &str = "owner.lock";
/// `{"store": …, "snapshot": …}` while a snapshot is written, uncommitted.
const RECORD_FILE: &str = "snapshot.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotRecord {
    /// The store's `Display` form (its kind and root), compared as is.
    store: String,
    snapshot: String,
}

/// A build's temporary folder, locked by its owner while the build runs and
/// removed when it is dropped.
struct WorkDir {
    path: PathBuf,
    _lock: File,
}

impl WorkDir {
    /// Create `parent/parqivf-build-<random>` with `owner.lock` already held:
    /// the folder is assembled under a hidden name and renamed into place, so
    /// a sweeper never sees it unlocked.
    fn create(parent: &std::path::Path) -> Result<Self, BuildError> {
        let err = |path: &std::path::Path, e: std::io::Error| BuildError::Spill {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let staging = tempfile::Builder::new()
            .prefix(&format!(".{WORK_PREFIX}"))
            .tempdir_in(parent)
            .map_err(|e| err(parent, e))?;
        let lock_path = staging.path().join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(|e| err(&lock_path, e))?;
        lock.try_lock().map_err(|e| BuildError::Spill {
            path: lock_path.display().to_string(),
            reason: e.to_string(),
        })?;
        let name = staging
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.trim_start_matches('.').to_string())
            .ok_or_else(|| err(staging.path(), std::io::Error::other("unnamed folder")))?;
        let path = parent.join(name);
        let staged = staging.keep();
        std::fs::rename(&staged, &path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&staged);
            err(&path, e)
        })?;
        Ok(Self { path, _lock: lock })
    }

    fn record(&self, store: &dyn ObjectStore, snapshot: &Path) -> Result<(), BuildError> {
        let record = SnapshotRecord {
            store: store.to_string(),
            snapshot: snapshot.to_string(),
        };
        let path = self.path.join(RECORD_FILE);
        let json = serde_json::to_vec(&record).map_err(|e| BuildError::Internal(e.to_string()))?;
        std::fs::write(&path, json).map_err(|e| BuildError::Spill {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }
}

impl Drop for WorkDir {
    /// Remove the spill files. A recorded snapshot that was neither committed
    /// nor deleted (the build future was dropped mid-write, e.g. on SIGINT)
    /// keeps its record, unlocked, for [`sweep_abandoned`] to finish.
    fn drop(&mut self) {
        let record = self.path.join(RECORD_FILE);
        if record.exists() {
            if let Ok(entries) = std::fs::read_dir(&self.path) {
                for e in entries.flatten() {
                    if e.path() != record {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What a sweep found in one abandoned work folder.
enum Abandoned {
    /// Removed; nothing recorded.
    Removed,
    /// A snapshot folder its build was writing, on some store.
    Snapshot(PathBuf, SnapshotRecord),
}

/// Scan `parent` for work folders whose owner is gone (its lock can be
/// taken); remove their spill files, and return the ones that recorded a
/// snapshot folder.
fn scan_abandoned(parent: &std::path::Path) -> Vec<Abandoned> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let is_work = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(WORK_PREFIX));
        if !is_work || !dir.is_dir() {
            continue;
        }
        // A live owner holds the lock; a dropped one removed the lock file.
        match File::open(dir.join(LOCK_FILE)) {
            Ok(f) if f.try_lock().is_err() => continue,
            _ => {}
        }
        let record = std::fs::read(dir.join(RECORD_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<SnapshotRecord>(&b).ok());
        match record {
            Some(r) => {
                if let Ok(files) = std::fs::read_dir(&dir) {
                    for f in files.flatten() {
                        if f.file_name() != RECORD_FILE {
                            let _ = std::fs::remove_file(f.path());
                        }
                    }
                }
                found.push(Abandoned::Snapshot(dir, r));
            }
            None => {
                let _ = std::fs::remove_dir_all(&dir);
                found.push(Abandoned::Removed);
            }
        }
    }
    found
}

/// Clean up after builds on this machine that died without doing so
/// (`kill -9`, power loss): remove their spill files, and delete the
/// uncommitted snapshot folders they were writing below `index` on `store`
/// (their records are kept for a build into their own location). Returns how
/// many snapshot folders were deleted. Best effort: a failure to delete
/// leaves the record for the next build.
pub async fn sweep_abandoned(store: &Arc<dyn ObjectStore>, index: &Path) -> usize {
    sweep_abandoned_in(&std::env::temp_dir(), store, index).await
}

async fn sweep_abandoned_in(
    parent: &std::path::Path,
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> usize {
    let parent = parent.to_path_buf();
    let Ok(found) = tokio::task::spawn_blocking(move || scan_abandoned(&parent)).await else {
        return 0;
    };
    let ours = store.to_string();
    let snapshots = format!("{index}/snapshots/");
    let mut deleted = 0;
    for a in found {
        let Abandoned::Snapshot(dir, record) = a else {
            continue;
        };
        let under_index = record.snapshot.starts_with(&snapshots)
            || (index.as_ref().is_empty() && record.snapshot.starts_with("snapshots/"));
        if record.store != ours || !under_index {
            continue;
        }
        let name = match record.snapshot.strip_prefix(&format!("{index}/")) {
            Some(name) if !index.as_ref().is_empty() => name,
            _ => record.snapshot.as_str(),
        };
        let Ok(folder) = SnapshotFolder::at(index, name) else {
            continue;
        };
        // A folder a version names stays, whatever the record says.
        if delete_unreferenced(store, &folder).await.is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
            deleted += 1;
        }
    }
    deleted
}

/// Sort a postings batch by (cid, `sort_by`, rowid), NULLs of `sort_by`
/// last (arrow's `lexsort`). Rowids are unique within a build, so the order
/// is total and the result deterministic.
///
/// # Errors
/// The batch lacks the `cid`/`rowid` columns of the postings schema, or
/// the `sort_by` column.
pub fn sort_postings(
    batch: &RecordBatch,
    sort_by: Option<&str>,
) -> Result<RecordBatch, BuildError> {
    let order = sort_order(batch, sort_by)?;
    if order
        .values()
        .iter()
        .enumerate()
        .all(|(i, &j)| i as u32 == j)
    {
        return Ok(batch.clone());
    }
    take_record_batch(batch, &order).map_err(|e| BuildError::Arrow(e.to_string()))
}

/// The row order of [`sort_postings`]: indices of `batch`'s rows by (cid,
/// `sort_by`, rowid).
fn sort_order(batch: &RecordBatch, sort_by: Option<&str>) -> Result<UInt32Array, BuildError> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| BuildError::Arrow(format!("postings batch has no column {name}")))
    };
    let key = |values| SortColumn {
        values,
        options: Some(SortOptions {
            descending: false,
            nulls_first: false,
        }),
    };
    let mut keys = vec![key(col(CID_COLUMN)?)];
    if let Some(column) = sort_by {
        keys.push(key(col(column)?));
    }
    keys.push(key(col(ROWID_COLUMN)?));
    lexsort_to_indices(&keys, None).map_err(|e| BuildError::Arrow(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, FixedSizeBinaryArray, Int32Array, Int64Array};
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

    /// The (cid, rowid) of each row, checking that its vector (its rowid as
    /// f32) moved with it.
    fn pairs(b: &RecordBatch) -> Vec<(i32, i64)> {
        let c = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        let r = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let v = b.column(2).as_fixed_size_binary();
        (0..b.num_rows())
            .map(|i| {
                assert_eq!(v.value(i), (r.value(i) as f32).to_le_bytes(), "row {i}");
                (c.value(i), r.value(i))
            })
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
                s.take(1).sorted(None).unwrap().map(|b| pairs(&b)),
                s.take(0).sorted(None).unwrap(),
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
    #[tokio::test]
    async fn sweep_removes_dead_builds_and_their_snapshot_but_not_live_ones() {
        use futures::TryStreamExt;
        use object_store::memory::InMemory;
        use object_store::{ObjectStoreExt, PutPayload};
        let parent = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let index = Path::from("idx");
        let put = |p: &str| {
            let store = store.clone();
            let p = Path::parse(p).unwrap();
            async move { store.put(&p, PutPayload::from_static(b"x")).await.unwrap() }
        };
        put("idx/snapshots/1-dead/postings/part-0.parquet#1").await;
        put("idx/snapshots/1-dead/postings/part-1.parquet").await;
        put("idx/snapshots/2-live/postings/part-0.parquet").await;
        put("other/snapshots/3-elsewhere/a").await;
        // A killed build: its folder remains, its lock is free.
        let dead = parent.path().join(format!("{WORK_PREFIX}dead"));
        std::fs::create_dir(&dead).unwrap();
        File::create(dead.join(LOCK_FILE)).unwrap();
        std::fs::write(dead.join("bucket-000001.arrows"), b"spill").unwrap();
        let record = |snapshot: &str| {
            serde_json::to_vec(&SnapshotRecord {
                store: store.to_string(),
                snapshot: snapshot.into(),
            })
            .unwrap()
        };
        std::fs::write(dead.join(RECORD_FILE), record("idx/snapshots/1-dead")).unwrap();
        // A killed build into another index: spill removed, record kept.
        let other = parent.path().join(format!("{WORK_PREFIX}other"));
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("bucket-000002.arrows"), b"spill").unwrap();
        std::fs::write(
            other.join(RECORD_FILE),
            record("other/snapshots/3-elsewhere"),
        )
        .unwrap();
        // A running build.
        let live = WorkDir::create(parent.path()).unwrap();
        live.record(store.as_ref(), &Path::from("idx/snapshots/2-live"))
            .unwrap();

        assert_eq!(sweep_abandoned_in(parent.path(), &store, &index).await, 1);
        let left: Vec<String> = store
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            left,
            vec![
                "idx/snapshots/2-live/postings/part-0.parquet".to_string(),
                "other/snapshots/3-elsewhere/a".to_string()
            ]
        );
        assert!(!dead.exists());
        assert!(live.path.join(RECORD_FILE).exists());
        assert!(!other.join("bucket-000002.arrows").exists());
        assert!(other.join(RECORD_FILE).exists());

        // Dropped normally: the live folder goes away entirely.
        let path = live.path.clone();
        std::fs::remove_file(path.join(RECORD_FILE)).unwrap();
        drop(live);
        assert!(!path.exists());
    }
}
