//! The postings writer: turns postings grouped by root bucket (ascending CID
//! within a bucket) into `cid_bucket=NNNNNN/part-NNNNN.parquet` objects with
//! exactly one CID per row group, then builds and publishes the manifest.
//!
//! Each object streams through `HashingUpload`, which hashes and counts the
//! exact bytes handed to the object store (an `object_store::buffered::BufWriter`,
//! multipart once a file outgrows its buffer), so the manifest's `sha256` and
//! `size` need no read-back. A row group closes when the CID changes or when it
//! reaches [`WriterOptions::max_rows_per_row_group`]; a file closes after the
//! row group that takes it to [`WriterOptions::max_file_bytes`]. So a large CID
//! spans consecutive row groups and files.

use super::error::PostingsError;
use crate::format::footers::{FOOTERS_FORMAT_VERSION, FooterPin, Footers, read_footer_bytes};
use crate::format::manifest::{
    FORMAT_VERSION, FileEntry, MAX_BUCKET, MAX_CID, MAX_PART, Manifest, ManifestError,
};
use crate::format::page_crc::{
    Rewritten, add_page_crcs, add_page_crcs_prefix, remap_metadata, write_footer,
};
use crate::format::postings_table::{
    CID_COLUMN, CODE_COLUMN, KV_DIM, KV_FORMAT_VERSION, MANIFEST_FILE, RESERVED_COLUMNS,
    ROWID_COLUMN, VECTOR_COLUMN, part_path, postings_schema,
};
use crate::store::StoreError;
use crate::store::commit::put_if_absent;
use crate::store::uri::RelativeLocation;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Field, Int32Type, SchemaRef};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, PutResult};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Writer caps. Both are per postings file layout decisions documented in
/// `docs/format.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Most rows in one row group (default 32 768: 16 MiB of 128-d f32
    /// vectors, a comfortable unit for one ranged read). A CID with more
    /// postings spans consecutive row groups.
    pub max_rows_per_row_group: usize,
    /// A file is closed after the row group that brings it to this many bytes
    /// (default 256 MiB), so a file exceeds it by at most one row group plus
    /// the footer. The build plans a bucket's files by the same cap before
    /// writing them at once ([`file_plan`]). Must be at least 1.
    pub max_file_bytes: u64,
    /// Bytes buffered per object before switching to a multipart upload, and
    /// the part size of that upload (default 10 MiB; S3 needs at least 5 MiB
    /// for every part but the last).
    pub upload_buffer_bytes: usize,
    /// Most rows in one data page of the `vector` column (default `None`:
    /// [`vector_page_rows`] of the dimension): the unit an exact re-rank, or
    /// the exact scoring of a filter's matches, reads, found through the
    /// offset index. Must be at least 1.
    pub vector_page_rows: Option<usize>,
}

/// Bytes of a `vector` data page by default ([`vector_page_rows`]).
pub const VECTOR_PAGE_BYTES: usize = 512;

/// Most rows of a default `vector` page.
pub const VECTOR_PAGE_ROWS: usize = 8;

/// Rows per `vector` data page by default at `dim`: as many as fit in
/// [`VECTOR_PAGE_BYTES`], 1 to [`VECTOR_PAGE_ROWS`] (1 row from 128-d on,
/// 2 at 64-d). A row read exactly (a re-rank candidate, a filter's match)
/// costs its page, against ≈ 30 bytes of page header and offset-index
/// entry per page. Measured (`docs/benchmarks.md`): against 4 KiB pages,
/// the same unfiltered bytes and QPS from storage (the offset indexes grow
/// as the re-rank's pages shrink), and a 0.1 % filter's exact scoring reads
/// 3.7× (1M × 128-d) to 1.9× (100k × 384-d) fewer bytes (issue 28); against
/// 1 KiB pages (2 rows at 128-d), half the re-rank's bytes with `--preload
/// codes` and a batch 4–6 % faster, for 2 % fewer bytes a storage query.
pub fn vector_page_rows(dim: usize) -> usize {
    (VECTOR_PAGE_BYTES / dim.saturating_mul(4).max(1)).clamp(1, VECTOR_PAGE_ROWS)
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            max_rows_per_row_group: 32_768,
            max_file_bytes: 256 * 1024 * 1024,
            upload_buffer_bytes: 10 * 1024 * 1024,
            vector_page_rows: None,
        }
    }
}

/// The rows of each postings file of one bucket, sorted by cid: its row
/// groups (a run of one cid, at most `max_rows_per_row_group` rows) cut into
/// `n = ⌈bytes / max_file_bytes⌉` files of about `rows / n` rows each (file
/// `f` ends at the first row-group end past `(f + 1)·rows / n`), where
/// `bytes` is the rows' Arrow
/// size (their plain encoding, so close to the file's). So the files of a
/// bucket are known before any is encoded, and are written at once; a file
/// exceeds its share by at most one row group. Pure.
pub fn file_plan(cids: &[i32], bytes: u64, options: &WriterOptions) -> Vec<std::ops::Range<usize>> {
    let rows = cids.len();
    let files = bytes.div_ceil(options.max_file_bytes.max(1)).max(1) as usize;
    let max_rows = options.max_rows_per_row_group.max(1);
    let mut plan = Vec::with_capacity(files);
    let (mut start, mut at) = (0, 0);
    while at < rows {
        // The end of the row group starting at `at`.
        let run = cids[at..].iter().take_while(|&&c| c == cids[at]).count();
        at += run.min(max_rows);
        let share = (plan.len() + 1) * rows / files;
        if at >= share && at < rows {
            plan.push(start..at);
            start = at;
        }
    }
    if start < rows {
        plan.push(start..rows);
    }
    plan
}

/// Writes postings files bucket by bucket and collects their manifest entries.
pub struct PostingsWriter {
    store: Arc<dyn ObjectStore>,
    table_root: Path,
    schema: SchemaRef,
    props: WriterProperties,
    options: WriterOptions,
    files: Vec<FileEntry>,
    buckets_written: Vec<u32>,
}

impl PostingsWriter {
    /// A writer for `dim`-dimensional f32 vectors, `code_bytes`-byte codes
    /// (an index with codes) and `payload_fields`.
    ///
    /// # Errors
    /// [`PostingsError::InvalidDim`] for `dim == 0` or a byte width beyond
    /// INT32, [`PostingsError::InvalidOptions`] for a zero cap, and
    /// [`PostingsError::ReservedPayloadName`] when a payload field reuses a
    /// fixed column name.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        table_root: Path,
        dim: usize,
        code_bytes: Option<usize>,
        payload_fields: Vec<Field>,
        options: WriterOptions,
    ) -> Result<Self, PostingsError> {
        if dim == 0 || dim.checked_mul(4).is_none_or(|w| w > i32::MAX as usize) {
            return Err(PostingsError::InvalidDim { dim });
        }
        if options.max_rows_per_row_group == 0
            || options.max_file_bytes == 0
            || options.vector_page_rows == Some(0)
        {
            return Err(PostingsError::InvalidOptions {
                max_rows_per_row_group: options.max_rows_per_row_group,
                max_file_bytes: options.max_file_bytes,
                vector_page_rows: 0,
            });
        }
        if let Some(f) = payload_fields
            .iter()
            .find(|f| RESERVED_COLUMNS.contains(&f.name().as_str()))
        {
            return Err(PostingsError::ReservedPayloadName {
                name: f.name().clone(),
            });
        }
        let schema = postings_schema(dim, code_bytes, &payload_fields);
        let props = writer_properties(dim, &options);
        Ok(PostingsWriter {
            store,
            table_root,
            schema,
            props,
            options,
            files: Vec::new(),
            buckets_written: Vec::new(),
        })
    }

    /// The schema every input batch must have (see `postings_schema`).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Writes all postings of root `bucket`. `batches` follow [`Self::schema`]
    /// and are sorted by `cid` ascending across the whole list. An empty
    /// bucket writes nothing.
    ///
    /// # Errors
    /// [`PostingsError::SchemaMismatch`], [`PostingsError::Unsorted`],
    /// [`PostingsError::CidOutOfRange`], [`PostingsError::BucketRepeated`],
    /// [`PostingsError::BucketOutOfRange`], [`PostingsError::TooManyParts`] for
    /// bad input; [`PostingsError::Parquet`] when encoding or uploading fails.
    pub async fn write_bucket(
        &mut self,
        bucket: u32,
        batches: Vec<RecordBatch>,
    ) -> Result<(), PostingsError> {
        self.write_bucket_from(bucket, 0, batches).await
    }

    /// [`Self::write_bucket`], its first file numbered `first_part` (the
    /// files of one bucket written by several writers at once,
    /// [`file_plan`]).
    ///
    /// # Errors
    /// As [`Self::write_bucket`].
    pub async fn write_bucket_from(
        &mut self,
        bucket: u32,
        first_part: u32,
        batches: Vec<RecordBatch>,
    ) -> Result<(), PostingsError> {
        if bucket > MAX_BUCKET {
            return Err(PostingsError::BucketOutOfRange { bucket });
        }
        if self.buckets_written.contains(&bucket) {
            return Err(PostingsError::BucketRepeated { bucket });
        }
        self.buckets_written.push(bucket);
        let mut state = BucketState {
            bucket,
            open: None,
            next_part: first_part,
            rg_cid: None,
            rg_rows: 0,
            last_cid: None,
        };
        for (batch_index, batch) in batches.iter().enumerate() {
            if batch.schema().fields() != self.schema.fields() {
                return Err(PostingsError::SchemaMismatch {
                    bucket,
                    batch: batch_index,
                    expected: format!("{:?}", self.schema.fields()),
                    actual: format!("{:?}", batch.schema().fields()),
                });
            }
            self.write_batch(&mut state, batch).await?;
        }
        self.close_file(&mut state).await
    }

    async fn write_batch(
        &mut self,
        state: &mut BucketState,
        batch: &RecordBatch,
    ) -> Result<(), PostingsError> {
        // The schema check guarantees column 0 is a non-null Int32 array.
        let Some(cids) = batch.column(0).as_primitive_opt::<Int32Type>() else {
            return Err(PostingsError::SchemaMismatch {
                bucket: state.bucket,
                batch: 0,
                expected: "cid Int32".into(),
                actual: format!("{:?}", batch.column(0).data_type()),
            });
        };
        let values = cids.values();
        let mut start = 0;
        while start < values.len() {
            let raw = values[start];
            let cid = u32::try_from(raw).map_err(|_| PostingsError::CidOutOfRange {
                bucket: state.bucket,
                cid: i64::from(raw),
            })?;
            if let Some(previous) = state.last_cid
                && cid < previous
            {
                return Err(PostingsError::Unsorted {
                    bucket: state.bucket,
                    previous,
                    next: cid,
                });
            }
            state.last_cid = Some(cid);
            let end = start + values[start..].iter().take_while(|&&c| c == raw).count();
            self.write_run(state, cid, &batch.slice(start, end - start))
                .await?;
            start = end;
        }
        Ok(())
    }

    /// Writes rows that all carry `cid`, closing row groups at the cap.
    async fn write_run(
        &mut self,
        state: &mut BucketState,
        cid: u32,
        run: &RecordBatch,
    ) -> Result<(), PostingsError> {
        if state.rg_cid.is_some_and(|c| c != cid) {
            self.close_row_group(state).await?;
        }
        let mut offset = 0;
        while offset < run.num_rows() {
            let open = match state.open.take() {
                Some(open) => open,
                None => self.open_file(state, cid)?,
            };
            let open = state.open.insert(open);
            let take =
                (self.options.max_rows_per_row_group - state.rg_rows).min(run.num_rows() - offset);
            let chunk = run.slice(offset, take);
            open.write(&chunk).await?;
            open.rows += take as u64;
            open.max_cid = cid;
            state.rg_cid = Some(cid);
            state.rg_rows += take;
            offset += take;
            if state.rg_rows == self.options.max_rows_per_row_group {
                self.close_row_group(state).await?;
            }
        }
        Ok(())
    }

    /// Flushes the in-progress row group; rolls the file at its size cap.
    async fn close_row_group(&mut self, state: &mut BucketState) -> Result<(), PostingsError> {
        state.rg_cid = None;
        state.rg_rows = 0;
        let Some(open) = state.open.as_mut() else {
            return Ok(());
        };
        open.flush().await?;
        // Parquet's own count: part of it may still wait in its buffer.
        if open.writer.bytes_written() as u64 >= self.options.max_file_bytes {
            self.close_file(state).await?;
        }
        Ok(())
    }

    fn open_file(&self, state: &mut BucketState, cid: u32) -> Result<OpenFile, PostingsError> {
        let seq = state.next_part;
        if seq > MAX_PART {
            return Err(PostingsError::TooManyParts {
                bucket: state.bucket,
            });
        }
        state.next_part += 1;
        let relative = part_path(state.bucket, seq);
        let location = RelativeLocation::parse(&relative)
            .map_err(|_| ManifestError::NonCanonicalPath {
                index: self.files.len(),
                path: relative.clone(),
            })?
            .resolve_path(&self.table_root);
        let upload = HashingUpload::new(
            BufWriter::with_capacity(
                Arc::clone(&self.store),
                location.clone(),
                self.options.upload_buffer_bytes,
            ),
            location.to_string(),
        );
        let writer = ArrowWriter::try_new(
            Vec::new(),
            Arc::clone(&self.schema),
            Some(self.props.clone()),
        )
        .map_err(|source| PostingsError::Parquet {
            path: location.to_string(),
            source,
        })?;
        Ok(OpenFile {
            relative,
            path: location.to_string(),
            writer,
            upload,
            offsets: Vec::new(),
            written: 0,
            pending: Vec::new(),
            rows: 0,
            min_cid: cid,
            max_cid: cid,
        })
    }

    async fn close_file(&mut self, state: &mut BucketState) -> Result<(), PostingsError> {
        state.rg_cid = None;
        state.rg_rows = 0;
        let Some(mut open) = state.open.take() else {
            return Ok(());
        };
        open.finish().await?;
        let upload = open.upload;
        self.files.push(FileEntry {
            path: open.relative,
            cid_bucket: state.bucket,
            min_cid: open.min_cid,
            max_cid: open.max_cid,
            rows: open.rows,
            size: upload.size,
            sha256: hex::encode(upload.hasher.finalize()),
        });
        Ok(())
    }

    /// The manifest entries of every file written so far, in manifest order.
    pub fn files(&self) -> &[FileEntry] {
        &self.files
    }

    /// Builds the manifest for the files written, with `nlist` leaves split
    /// into roots by `cid_offsets` (R + 1 entries, see `docs/format.md`).
    ///
    /// # Errors
    /// [`PostingsError::Manifest`] when the result breaks a manifest rule,
    /// e.g. a bucket's CIDs outside `[cid_offsets[b], cid_offsets[b+1])`.
    pub fn finish(self, nlist: u32, cid_offsets: Vec<u32>) -> Result<Manifest, PostingsError> {
        manifest_of(self.files, nlist, cid_offsets)
    }
}

/// The manifest of `files` (written by one or several writers, in any
/// order), as [`PostingsWriter::finish`] builds it.
///
/// # Errors
/// As [`PostingsWriter::finish`].
pub fn manifest_of(
    mut files: Vec<FileEntry>,
    nlist: u32,
    cid_offsets: Vec<u32>,
) -> Result<Manifest, PostingsError> {
    files.sort_by_key(|f| (f.cid_bucket, f.min_cid, f.path.clone()));
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        nlist,
        ntotal: files.iter().map(|f| f.rows).sum(),
        cid_offsets,
        files,
    };
    manifest.validate()?;
    Ok(manifest)
}

/// Publishes `manifest` as `<table_root>/manifest.json` with create-if-absent
/// semantics, after `footers.json` (the pin of every file's footer, read back
/// from storage: one ranged GET per file, 16 at a time). Call only after every
/// data object it names is complete.
///
/// # Errors
/// [`PostingsError::Manifest`] for an invalid manifest (nothing is written);
/// [`PostingsError::Footers`] when a file's footer cannot be read;
/// [`PostingsError::Store`] wrapping `StoreError::AlreadyExists` when another
/// publisher won (or left a different `footers.json`), or
/// `StoreError::ObjectStore` on IO failure.
pub async fn publish(
    store: &Arc<dyn ObjectStore>,
    table_root: &Path,
    manifest: &Manifest,
) -> Result<PutResult, PostingsError> {
    manifest.validate()?;
    // Owned inputs: the futures borrow nothing, so `publish` stays `Send`.
    let targets: Vec<(String, Path, u64)> = manifest
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| Ok((f.path.clone(), f.object_path(i, table_root)?, f.size)))
        .collect::<Result<_, ManifestError>>()?;
    let files = futures::stream::iter(targets)
        .map(|(rel, path, size)| {
            let store = Arc::clone(store);
            async move {
                let footer = read_footer_bytes(store.as_ref(), &path, size).await?;
                Ok::<_, PostingsError>(FooterPin::of_footer(&rel, &footer))
            }
        })
        .buffered(16)
        .try_collect::<Vec<_>>()
        .await?;
    let footers = Footers {
        format_version: FOOTERS_FORMAT_VERSION,
        files,
    };
    let footers_path = crate::format::footers::footers_path(table_root);
    let bytes = Bytes::from(footers.to_json_bytes());
    match put_if_absent(store.as_ref(), &footers_path, bytes.clone()).await {
        Ok(_) => {}
        // A racing publisher of the same files wrote the same pins.
        Err(StoreError::AlreadyExists { path }) => {
            let existing = store
                .get(&footers_path)
                .await
                .map_err(|source| PostingsError::store(path.clone(), source))?
                .bytes()
                .await
                .map_err(|source| PostingsError::store(path.clone(), source))?;
            if existing != bytes {
                return Err(StoreError::AlreadyExists { path }.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    let location = table_root.clone().join(MANIFEST_FILE);
    Ok(put_if_absent(
        store.as_ref(),
        &location,
        Bytes::from(manifest.to_json_bytes()),
    )
    .await?)
}

/// Uncompressed PLAIN `vector` pages of at most [`vector_page_rows`] rows (each
/// page is a re-rank read, located by the offset index), PLAIN `code`
/// chunks (scored whole), a dictionary `cid` and DELTA_BINARY_PACKED
/// `rowid`, page statistics elsewhere.
fn writer_properties(dim: usize, options: &WriterOptions) -> WriterProperties {
    let vector = ColumnPath::from(VECTOR_COLUMN);
    let code = ColumnPath::from(CODE_COLUMN);
    let page_rows = options
        .vector_page_rows
        .unwrap_or_else(|| vector_page_rows(dim));
    let page_bytes = page_rows.saturating_mul(dim * 4);
    let mut builder = WriterProperties::builder()
        .set_max_row_group_row_count(Some(options.max_rows_per_row_group))
        .set_max_row_group_bytes(None)
        .set_compression(Compression::UNCOMPRESSED)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_column_data_page_row_count_limit(vector.clone(), page_rows)
        .set_column_data_page_size_limit(vector.clone(), page_bytes)
        // Page limits are checked between mini-batches of this many rows:
        // without it a vector page takes one row more than its limit.
        .set_write_batch_size(page_rows);
    // The reader takes every fixed column straight from its pages
    // (`probe::decode`, `format::key_columns`): `rowid` DELTA_BINARY_PACKED
    // (a list's rowids ascend: a row costs its gap's bits, not 8 bytes),
    // `cid` from a one-value dictionary (a few bytes a page, not 4 a row),
    // both with their exact statistics; `vector` and `code` PLAIN.
    builder = builder
        .set_column_dictionary_enabled(ColumnPath::from(CID_COLUMN), true)
        .set_column_encoding(
            ColumnPath::from(ROWID_COLUMN),
            Encoding::DELTA_BINARY_PACKED,
        )
        .set_column_dictionary_enabled(ColumnPath::from(ROWID_COLUMN), false);
    for column in [vector, code] {
        builder = builder
            .set_column_encoding(column.clone(), Encoding::PLAIN)
            .set_column_dictionary_enabled(column.clone(), false)
            .set_column_statistics_enabled(column.clone(), EnabledStatistics::None)
            .set_column_bloom_filter_enabled(column, false);
    }
    builder
        .set_key_value_metadata(Some(vec![
            KeyValue::new(KV_FORMAT_VERSION.into(), FORMAT_VERSION.to_string()),
            KeyValue::new(KV_DIM.into(), dim.to_string()),
        ]))
        .build()
}

// Keep INT32 CIDs and the manifest's bound in step.
const _: () = assert!(MAX_CID == i32::MAX as u32);

struct BucketState {
    bucket: u32,
    open: Option<OpenFile>,
    next_part: u32,
    /// CID of the in-progress row group, if it has rows.
    rg_cid: Option<u32>,
    rg_rows: usize,
    last_cid: Option<u32>,
}

struct OpenFile {
    relative: String,
    path: String,
    /// Encodes into memory; each flushed row group is drained, given page
    /// CRCs and uploaded (see [`OpenFile::drain`]).
    writer: ArrowWriter<Vec<u8>>,
    upload: HashingUpload,
    /// `(offset written by parquet, offset in the object)` of every page
    /// start and row-group end, ascending: remaps the footer's offsets.
    offsets: Vec<(u64, u64)>,
    /// Parquet's offset of the first byte not yet uploaded.
    written: u64,
    /// Bytes parquet produced that end inside a page (uploaded next drain).
    pending: Vec<u8>,
    rows: u64,
    /// First and last CID written (a file opens on its first row).
    min_cid: u32,
    max_cid: u32,
}

impl OpenFile {
    fn parquet_err(&self, source: ParquetError) -> PostingsError {
        PostingsError::Parquet {
            path: self.path.clone(),
            source,
        }
    }

    async fn write(&mut self, batch: &RecordBatch) -> Result<(), PostingsError> {
        let before = self.writer.flushed_row_groups().len();
        self.writer.write(batch).map_err(|e| self.parquet_err(e))?;
        if before != self.writer.flushed_row_groups().len() {
            self.drain().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), PostingsError> {
        self.writer.flush().map_err(|e| self.parquet_err(e))?;
        self.drain().await
    }

    /// Upload what parquet encoded since the last drain: the magic, then
    /// every whole page, its header re-encoded with its CRC32. Parquet
    /// buffers its output, so a drain may end inside a page: the rest waits
    /// in `pending` for the next one.
    async fn drain(&mut self) -> Result<(), PostingsError> {
        self.take_encoded();
        if !self.take_magic().await? {
            return Ok(());
        }
        let (rewritten, consumed) = add_page_crcs_prefix(&self.pending).map_err(|e| {
            self.parquet_err(ParquetError::General(format!(
                "cannot add page checksums at byte {}: {e}",
                self.written
            )))
        })?;
        self.push_pages(rewritten, consumed).await
    }

    /// Move what parquet encoded into `pending`, keeping both buffers'
    /// allocations: parquet's buffer grows to a row group once, not once a
    /// row group, and a drain that left nothing pending takes the bytes
    /// without copying them.
    fn take_encoded(&mut self) {
        let encoded = self.writer.inner_mut();
        if self.pending.is_empty() {
            std::mem::swap(&mut self.pending, encoded);
        } else {
            self.pending.extend_from_slice(encoded);
        }
        encoded.clear();
    }

    /// Upload the file's leading magic once it is out of parquet's buffer;
    /// false while it is not.
    async fn take_magic(&mut self) -> Result<bool, PostingsError> {
        if self.written > 0 {
            return Ok(true);
        }
        if self.pending.len() < 4 {
            return Ok(false);
        }
        let magic: Vec<u8> = self.pending.drain(..4).collect();
        self.upload.put(Bytes::from(magic)).await?;
        self.written = 4;
        Ok(true)
    }

    async fn push_pages(&mut self, pages: Rewritten, consumed: usize) -> Result<(), PostingsError> {
        let base_old = self.written;
        let base_new = self.upload.size;
        self.offsets.extend(
            pages
                .offsets
                .iter()
                .map(|&(old, new)| (base_old + old, base_new + new)),
        );
        self.written += consumed as u64;
        self.pending.drain(..consumed);
        if pages.bytes.is_empty() {
            return Ok(());
        }
        self.upload.put(Bytes::from(pages.bytes)).await
    }

    /// Finish the file: the last row group, then a footer (offset index,
    /// column index, metadata) rebuilt with the object's offsets.
    async fn finish(&mut self) -> Result<(), PostingsError> {
        self.flush().await?;
        let metadata = self.writer.finish().map_err(|e| self.parquet_err(e))?;
        // Everything is out of parquet's buffer now: the pages up to the end
        // of the last column chunk, then the footer parquet wrote (dropped:
        // it is rebuilt below with the new offsets).
        self.take_encoded();
        self.take_magic().await?;
        let data_end = metadata
            .row_groups()
            .iter()
            .flat_map(|rg| rg.columns())
            .map(|c| {
                let (start, len) = c.byte_range();
                start + len
            })
            .max()
            .unwrap_or(4)
            .max(self.written);
        let take = usize::try_from(data_end - self.written).unwrap_or(usize::MAX);
        let pages = self.pending.get(..take).ok_or_else(|| {
            self.parquet_err(ParquetError::General(format!(
                "column chunks end at byte {data_end}, past the {} bytes written",
                self.written + self.pending.len() as u64
            )))
        })?;
        let rewritten = add_page_crcs(pages).map_err(|e| {
            self.parquet_err(ParquetError::General(format!(
                "cannot add page checksums at byte {}: {e}",
                self.written
            )))
        })?;
        self.push_pages(rewritten, take).await?;
        self.pending.clear();
        let tail = remap_metadata(metadata, &self.offsets)
            .and_then(|m| write_footer(&m, self.upload.size))
            .map_err(|e| self.parquet_err(e))?;
        self.upload.put(Bytes::from(tail)).await?;
        self.upload.complete().await
    }
}

/// Hashes and counts every byte on its way to the object store, so `size`
/// and `sha256` describe exactly what was uploaded.
struct HashingUpload {
    inner: BufWriter,
    path: String,
    hasher: Sha256,
    size: u64,
}

impl HashingUpload {
    fn new(inner: BufWriter, path: String) -> Self {
        HashingUpload {
            inner,
            path,
            hasher: Sha256::new(),
            size: 0,
        }
    }

    async fn put(&mut self, bytes: Bytes) -> Result<(), PostingsError> {
        self.hasher.update(&bytes);
        self.size += bytes.len() as u64;
        let r = self.inner.put(bytes).await;
        r.map_err(|source| PostingsError::store(self.path.clone(), source))
    }

    async fn complete(&mut self) -> Result<(), PostingsError> {
        let r = tokio::io::AsyncWriteExt::shutdown(&mut self.inner).await;
        r.map_err(|e| PostingsError::Parquet {
            path: self.path.clone(),
            source: ParquetError::External(Box::new(e)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_rows: usize, max_file_bytes: u64) -> WriterOptions {
        WriterOptions {
            max_rows_per_row_group: max_rows,
            max_file_bytes,
            ..WriterOptions::default()
        }
    }

    /// Every row once, in order, in whole row groups.
    fn check(plan: &[std::ops::Range<usize>], cids: &[i32], max_rows: usize) {
        assert_eq!(plan.first().map(|r| r.start), Some(0));
        assert_eq!(plan.last().map(|r| r.end), Some(cids.len()));
        for w in plan.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            // A cut is a row-group end: the cid changes, or a full group of one cid.
            let cut = w[0].end;
            let run = cids[..cut]
                .iter()
                .rev()
                .take_while(|&&c| c == cids[cut])
                .count();
            assert!(
                cids[cut - 1] != cids[cut] || run.is_multiple_of(max_rows),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn a_bucket_is_cut_into_even_files_at_row_group_ends() {
        // 10 cids of 100 rows: 1000 rows.
        let cids: Vec<i32> = (0..1000).map(|r| r / 100).collect();
        // Under the cap: one file.
        assert_eq!(file_plan(&cids, 999, &options(1000, 1000)), vec![0..1000]);
        // 2.5 caps: three files of about a third, cut where a cid ends.
        let plan = file_plan(&cids, 2500, &options(1000, 1000));
        assert_eq!(plan, vec![0..400, 400..700, 700..1000]);
        check(&plan, &cids, 1000);
        // One cid larger than a file: cut inside it at a row-group end (every 64 rows).
        let one: Vec<i32> = vec![7; 1000];
        let plan = file_plan(&one, 4000, &options(64, 1000));
        assert_eq!(plan.len(), 4);
        check(&plan, &one, 64);
        // Each file ends at the first row-group end past its share of 250.
        assert_eq!(plan, vec![0..256, 256..512, 512..768, 768..1000]);
        // More files asked than row groups: one file a row group at most.
        let plan = file_plan(&cids, 1_000_000, &options(1000, 1));
        assert_eq!(plan.len(), 10);
        check(&plan, &cids, 1000);
        // No rows, no file.
        assert!(file_plan(&[], 0, &options(10, 10)).is_empty());
    }
}
