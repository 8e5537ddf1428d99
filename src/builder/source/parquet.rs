//! The Parquet provider as a build source: a table root or one `*` pattern is
//! expanded to files (listing is allowed here, on the *source*, never on
//! postings), every file's own Parquet schema is validated before anything is
//! trained, and columns are resolved per file through the shared
//! [`ColumnMapping`] model: by Parquet field id when every file carries them,
//! else by name.
//!
//! Row identity: the `--id-column` value when given (widened to BIGINT; NULL
//! is an error), else `rowid = (rows of the files before it, in path order) +
//! file_row_number`. That rowid is stable only while the set of files and
//! their contents stay the same: the profile notes that a Parquet source
//! cannot detect content replaced at the same location.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};

use super::vector_source::{
    SourceDefinition, VectorBatch, VectorSource, decode_vectors, integer_ids, is_id_type, kept_rows,
};
use crate::builder::error::BuildError;
use crate::catalog::mapping::{ColumnMapping, ResolvedColumns, field_id, with_field_id};
use crate::format::definition::IndexSource;
use crate::store::parquet_reader::StoreReader;
use crate::store::uri::{LocationUri, hive_partitions};

/// Rows per decoded batch.
const BATCH_ROWS: usize = 16_384;

/// What to read from the table.
#[derive(Debug, Clone, Default)]
pub struct ParquetSourceOptions {
    /// The vector column.
    pub column: String,
    /// A BIGINT-compatible column holding each row's identity.
    pub id_column: Option<String>,
    /// Extra columns carried into the postings.
    pub payload: Vec<String>,
    /// Skip rows whose vector is NULL or holds NaN/∞ (counted) instead of failing.
    pub skip_invalid: bool,
    /// The table's canonical absolute URI (root or `*` pattern), recorded as
    /// the source location in `index.json`. `None`: the location's
    /// [`LocationUri::from_store_path`], right for a `LocalFileSystem` rooted
    /// at `/`.
    pub table_uri: Option<String>,
    /// Record each file's sha256 (read in full once), so a refresh sees a
    /// file rewritten with its size and mtime kept.
    pub content_hash: bool,
}

/// What [`ParquetSource::read_kept`] returns.
type KeptRows = (
    usize,
    Vec<ArrayRef>,
    crate::catalog::vector_column::DecodedVectors,
    Vec<u32>,
    Vec<i64>,
);

struct SourceFile {
    meta: ObjectMeta,
    /// The file's footer, read once when the source is opened.
    footer: ArrowReaderMetadata,
    rows: u64,
    first_rowid: i64,
    resolved: ResolvedColumns,
    /// With [`ParquetSourceOptions::content_hash`].
    sha256: Option<String>,
}

/// A Parquet table (root or pattern) read file by file.
pub struct ParquetSource {
    store: Arc<dyn ObjectStore>,
    location: LocationUri,
    files: Vec<SourceFile>,
    dim: usize,
    options: ParquetSourceOptions,
    payload_fields: Vec<FieldRef>,
    skipped: AtomicU64,
}

fn unreadable(path: &Path, e: impl std::error::Error) -> BuildError {
    BuildError::Unreadable {
        path: path.to_string(),
        reason: crate::builder::error::reason_without(path.as_ref(), &e),
    }
}

async fn list(store: &dyn ObjectStore, prefix: &Path) -> Result<Vec<ObjectMeta>, BuildError> {
    store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| unreadable(prefix, e))
}

/// Expand `location` into its files, in path order: a pattern lists its
/// [`LocationUri::static_prefix`] and keeps what its
/// [`LocationUri::matcher`] matches; a root that is one object is that
/// object, else every `.parquet` object below it.
///
/// # Errors
/// Listing fails, or nothing matches ([`BuildError::NoFiles`]).
pub async fn expand(
    store: &dyn ObjectStore,
    location: &LocationUri,
) -> Result<Vec<ObjectMeta>, BuildError> {
    let mut files = if location.is_pattern() {
        let matcher = location
            .matcher()
            .map_err(|e| BuildError::Catalog(e.into()))?;
        list(store, &location.static_prefix())
            .await?
            .into_iter()
            .filter(|m| matcher.matches(&m.location))
            .collect()
    } else {
        let path = location.object_path();
        match store.head(&path).await {
            Ok(meta) => vec![meta],
            Err(object_store::Error::NotFound { .. }) => list(store, &path)
                .await?
                .into_iter()
                .filter(|m| m.location.as_ref().ends_with(".parquet"))
                .collect(),
            Err(e) => return Err(unreadable(&path, e)),
        }
    };
    files.sort_by(|a, b| a.location.cmp(&b.location));
    if files.is_empty() {
        // The location as the store names it, wildcards kept.
        let path = location.path().trim_start_matches('/');
        return Err(BuildError::NoFiles {
            location: percent_encoding::percent_decode_str(path)
                .decode_utf8_lossy()
                .into_owned(),
        });
    }
    Ok(files)
}

/// Every file's footer (one ranged read each, sizes known from the listing).
async fn read_footers(
    store: &Arc<dyn ObjectStore>,
    metas: &[ObjectMeta],
) -> Result<Vec<ArrowReaderMetadata>, BuildError> {
    let mut footers = Vec::with_capacity(metas.len());
    for meta in metas {
        let mut reader = StoreReader::new(store.clone(), meta.location.clone(), Some(meta.size));
        let footer = ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::default())
            .await
            .map_err(|e| unreadable(&meta.location, e))?;
        footers.push(footer);
    }
    Ok(footers)
}

/// The lowercase hex sha256 of the whole object at `path`, streamed: the
/// bytes are hashed on the blocking pool in slices of a few MiB, never on
/// the async workers.
///
/// # Errors
/// [`BuildError::Unreadable`] when the object cannot be read.
pub async fn content_sha256(store: &dyn ObjectStore, path: &Path) -> Result<String, BuildError> {
    use sha2::Digest;
    const SLICE: usize = 8 << 20;
    let mut stream = store
        .get(path)
        .await
        .map_err(|e| unreadable(path, e))?
        .into_stream();
    let mut hasher = sha2::Sha256::new();
    let mut pending: Vec<bytes::Bytes> = Vec::new();
    let mut pending_len = 0;
    loop {
        let next = stream.try_next().await.map_err(|e| unreadable(path, e))?;
        let done = next.is_none();
        if let Some(chunk) = next {
            pending_len += chunk.len();
            pending.push(chunk);
        }
        if pending_len >= SLICE || (done && pending_len > 0) {
            let slices = std::mem::take(&mut pending);
            pending_len = 0;
            hasher = crate::builder::offload::blocking(move || {
                for s in &slices {
                    hasher.update(s);
                }
                Ok(hasher)
            })
            .await?;
        }
        if done {
            return Ok(hex::encode(hasher.finalize()));
        }
    }
}

/// Give `field` and every nested field (list elements, struct children)
/// synthetic field ids in preorder, so a by-name mapping can address them.
fn with_ids(field: Field, next: &mut i64) -> Field {
    let id = *next;
    *next += 1;
    let data_type = match field.data_type() {
        DataType::List(e) => DataType::List(Arc::new(with_ids(e.as_ref().clone(), next))),
        DataType::LargeList(e) => DataType::LargeList(Arc::new(with_ids(e.as_ref().clone(), next))),
        DataType::FixedSizeList(e, n) => {
            DataType::FixedSizeList(Arc::new(with_ids(e.as_ref().clone(), next)), *n)
        }
        DataType::Struct(children) => DataType::Struct(
            children
                .iter()
                .map(|c| Arc::new(with_ids(c.as_ref().clone(), next)))
                .collect(),
        ),
        other => other.clone(),
    };
    with_field_id(field.with_data_type(data_type), id)
}

/// The vector column types the decoder reads
/// ([`crate::catalog::vector_column`]).
fn is_vector_type(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            matches!(
                f.data_type(),
                DataType::Float16 | DataType::Float32 | DataType::Float64
            )
        }
        DataType::FixedSizeBinary(w) => *w > 0 && w % 4 == 0,
        _ => false,
    }
}

/// The dimension a vector type fixes, if it fixes one.
fn fixed_dim(t: &DataType) -> Option<usize> {
    match t {
        DataType::FixedSizeList(_, n) => usize::try_from(*n).ok().filter(|&n| n > 0),
        DataType::FixedSizeBinary(w) => usize::try_from(*w / 4).ok().filter(|&n| n > 0),
        _ => None,
    }
}

/// The column names the source reads, in logical order: vector, id?, payload….
fn wanted_columns(options: &ParquetSourceOptions) -> Vec<&str> {
    std::iter::once(options.column.as_str())
        .chain(options.id_column.as_deref())
        .chain(options.payload.iter().map(String::as_str))
        .collect()
}

/// Whether every file carries Parquet field ids on every wanted column (then
/// columns resolve by id, else by name).
fn resolve_by_field_id(footers: &[ArrowReaderMetadata], wanted: &[&str]) -> bool {
    footers.iter().all(|footer| {
        wanted.iter().all(|w| {
            footer
                .schema()
                .field_with_name(w)
                .is_ok_and(|f| field_id(f).is_some())
        })
    })
}

/// The table's logical fields, taken from the first file's schema (nullable,
/// with synthetic field ids when resolving by name), with the vector and id
/// columns' types checked.
///
/// # Errors
/// [`BuildError::MissingColumn`], [`BuildError::WrongType`],
/// [`BuildError::IdColumnType`].
fn logical_fields(
    first: &Path,
    schema: &Schema,
    wanted: &[&str],
    by_id: bool,
    options: &ParquetSourceOptions,
) -> Result<Vec<FieldRef>, BuildError> {
    let mut logical: Vec<FieldRef> = Vec::with_capacity(wanted.len());
    let mut next_id = 1;
    for w in wanted {
        let f = schema
            .field_with_name(w)
            .map_err(|_| BuildError::MissingColumn {
                path: first.to_string(),
                column: (*w).to_string(),
            })?;
        let f =
            Field::new(f.name(), f.data_type().clone(), true).with_metadata(f.metadata().clone());
        let f = if by_id { f } else { with_ids(f, &mut next_id) };
        logical.push(Arc::new(f));
    }
    if !is_vector_type(logical[0].data_type()) {
        return Err(BuildError::WrongType {
            path: first.to_string(),
            column: options.column.clone(),
            found: logical[0].data_type().to_string(),
        });
    }
    if let Some(id) = &options.id_column
        && !is_id_type(logical[1].data_type())
    {
        return Err(BuildError::IdColumnType {
            path: first.to_string(),
            column: id.clone(),
            found: logical[1].data_type().to_string(),
        });
    }
    Ok(logical)
}

/// Resolve every file's columns against the logical fields and number its
/// rows: rowids continue from the files before it, in path order.
///
/// # Errors
/// A column that does not map ([`BuildError::Mapping`]), a file without the
/// vector column or with a non-vector type there, a row count beyond i64.
fn resolve_files(
    metas: Vec<ObjectMeta>,
    footers: Vec<ArrowReaderMetadata>,
    logical: &[FieldRef],
    by_id: bool,
    options: &ParquetSourceOptions,
    first_rowid: i64,
) -> Result<Vec<SourceFile>, BuildError> {
    let logical_schema = Schema::new(logical.to_vec());
    let mut files = Vec::with_capacity(metas.len());
    let mut next_rowid: i64 = first_rowid;
    for (meta, footer) in metas.into_iter().zip(footers) {
        let path = meta.location.to_string();
        let physical = footer.schema();
        let mapping = if by_id {
            ColumnMapping::from_field_ids(physical)
        } else {
            ColumnMapping::by_name(&logical_schema, physical)
        };
        let resolved = mapping
            .resolve(logical, physical, &path, &hive_partitions(&meta.location))
            .map_err(|source| BuildError::Mapping {
                path: path.clone(),
                source,
            })?;
        // Every file must hold the vector column itself, with a vector type.
        let vector = physical.fields().iter().find(|f| {
            if by_id {
                field_id(f) == field_id(&logical[0])
            } else {
                f.name() == &options.column
            }
        });
        match vector {
            None => {
                return Err(BuildError::MissingColumn {
                    path,
                    column: options.column.clone(),
                });
            }
            Some(f) if !is_vector_type(f.data_type()) => {
                return Err(BuildError::WrongType {
                    path,
                    column: options.column.clone(),
                    found: f.data_type().to_string(),
                });
            }
            Some(_) => {}
        }
        let rows = footer.metadata().file_metadata().num_rows().max(0) as u64;
        files.push(SourceFile {
            meta,
            footer,
            rows,
            first_rowid: next_rowid,
            resolved,
            sha256: None,
        });
        next_rowid = next_rowid
            .checked_add(rows as i64)
            .ok_or_else(|| BuildError::Internal("row count overflows i64".into()))?;
    }
    Ok(files)
}

/// `ranges` sorted, with touching or overlapping ranges merged: the decoder
/// asks for whole column chunks and takes each request from one pushed
/// buffer, while a plan may list a chunk page by page.
fn coalesce(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// A decoder that needs more bytes, and the ranges it asks for.
type NeedsData = (ParquetPushDecoder, Vec<Range<u64>>);

/// Decode on a blocking thread until `decoder` needs bytes it does not have
/// (returned with the decoder) or is finished (`None`); every batch decoded
/// meanwhile is assembled into the logical columns and appended to `batches`.
fn decode_available(
    mut decoder: ParquetPushDecoder,
    resolved: &ResolvedColumns,
    schema: &SchemaRef,
    path: &Path,
    batches: &mut Vec<RecordBatch>,
) -> Result<Option<NeedsData>, BuildError> {
    loop {
        match decoder.try_decode().map_err(|e| unreadable(path, e))? {
            DecodeResult::NeedsData(ranges) => return Ok(Some((decoder, ranges))),
            DecodeResult::Data(b) => {
                let cols = resolved
                    .assemble(&b)
                    .map_err(|source| BuildError::Mapping {
                        path: path.to_string(),
                        source,
                    })?;
                batches.push(
                    RecordBatch::try_new(schema.clone(), cols)
                        .map_err(|e| BuildError::Arrow(e.to_string()))?,
                );
            }
            DecodeResult::Finished => return Ok(None),
        }
    }
}

impl ParquetSource {
    /// Expand `location` (a path in `store`'s own syntax, a raw `*` being a
    /// wildcard), read every footer, validate every file's schema and
    /// resolve its columns. Nothing is trained or written before this
    /// succeeds.
    ///
    /// # Errors
    /// A location breaking the URI rules, no files, an unreadable file, a
    /// missing or mistyped column, or a vector column whose dimension cannot
    /// be determined.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        location: &str,
        options: ParquetSourceOptions,
    ) -> Result<Self, BuildError> {
        let location =
            LocationUri::from_store_path(location).map_err(|e| BuildError::Catalog(e.into()))?;
        let metas = expand(store.as_ref(), &location).await?;
        Self::open_listed(store, location, metas, 0, options).await
    }

    /// The files a `refresh` found new or changed (listed by [`expand`]),
    /// numbered in path order from `first_rowid` on (see
    /// [`crate::format::source_files`]).
    ///
    /// # Errors
    /// As [`ParquetSource::open`]; [`BuildError::NoFiles`] for no files.
    pub async fn open_files(
        store: Arc<dyn ObjectStore>,
        location: &str,
        mut metas: Vec<ObjectMeta>,
        first_rowid: i64,
        options: ParquetSourceOptions,
    ) -> Result<Self, BuildError> {
        let location =
            LocationUri::from_store_path(location).map_err(|e| BuildError::Catalog(e.into()))?;
        if metas.is_empty() {
            return Err(BuildError::NoFiles {
                location: location.to_string(),
            });
        }
        metas.sort_by(|a, b| a.location.cmp(&b.location));
        Self::open_listed(store, location, metas, first_rowid, options).await
    }

    /// The store and location of the table, as opened.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The files read and the rowids each was given (what `source-files.json`
    /// records).
    pub fn source_files(&self) -> crate::format::source_files::SourceFiles {
        use crate::format::source_files::{SOURCE_FILES_FORMAT_VERSION, SourceFile, SourceFiles};
        let files: Vec<SourceFile> = self
            .files
            .iter()
            .map(|f| SourceFile {
                sha256: f.sha256.clone(),
                ..SourceFile::of(&f.meta, f.first_rowid, f.rows)
            })
            .collect();
        SourceFiles {
            format_version: SOURCE_FILES_FORMAT_VERSION,
            next_rowid: files
                .iter()
                .map(|f| f.first_rowid + f.rows as i64)
                .max()
                .unwrap_or(0),
            files,
            ids: None,
        }
    }

    async fn open_listed(
        store: Arc<dyn ObjectStore>,
        location: LocationUri,
        metas: Vec<ObjectMeta>,
        first_rowid: i64,
        options: ParquetSourceOptions,
    ) -> Result<Self, BuildError> {
        let footers = read_footers(&store, &metas).await?;
        let wanted = wanted_columns(&options);
        let by_id = resolve_by_field_id(&footers, &wanted);
        let logical = logical_fields(
            &metas[0].location,
            footers[0].schema(),
            &wanted,
            by_id,
            &options,
        )?;
        let mut files = resolve_files(metas, footers, &logical, by_id, &options, first_rowid)?;
        if options.content_hash {
            for f in &mut files {
                f.sha256 = Some(content_sha256(store.as_ref(), &f.meta.location).await?);
            }
        }
        let payload_fields = logical[1 + usize::from(options.id_column.is_some())..]
            .iter()
            .map(|f| Arc::new(Field::new(f.name(), f.data_type().clone(), true)) as FieldRef)
            .collect();
        let mut source = Self {
            store,
            location,
            files,
            dim: 0,
            options,
            payload_fields,
            skipped: AtomicU64::new(0),
        };
        source.dim = match fixed_dim(logical[0].data_type()) {
            Some(dim) => dim,
            None => source.detect_dim().await?,
        };
        Ok(source)
    }

    /// Rows skipped so far because of `skip_invalid`.
    pub fn skipped_rows(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Read part `part` and decode it: its row count, logical columns, decoded
    /// vectors, the file rows kept (valid, or all when not skipping) and the
    /// rowids of the kept rows.
    async fn read_kept(&self, part: usize) -> Result<KeptRows, BuildError> {
        let f = &self.files[part];
        let path = f.meta.location.to_string();
        let (rows, columns) = self.read_columns(part).await?;
        let decoded = decode_vectors(
            columns[0].as_ref(),
            Some(self.dim),
            self.options.skip_invalid,
            &path,
        )?;
        let keep = kept_rows(rows, &decoded.skipped_rows);
        let rowids: Vec<i64> = match &self.options.id_column {
            Some(column) => integer_ids(columns[1].as_ref(), &keep, &path, column)?,
            None => keep.iter().map(|&r| f.first_rowid + i64::from(r)).collect(),
        };
        Ok((rows, columns, decoded, keep, rowids))
    }

    /// The dimension: from a fixed-size type, else the first valid vector.
    async fn detect_dim(&self) -> Result<usize, BuildError> {
        for (p, f) in self.files.iter().enumerate() {
            if f.rows == 0 {
                continue;
            }
            let (_, columns) = self.read_columns(p).await?;
            let decoded =
                decode_vectors(columns[0].as_ref(), None, true, f.meta.location.as_ref())?;
            if decoded.dim > 0 {
                return Ok(decoded.dim);
            }
        }
        Err(BuildError::EmptySource)
    }

    /// Read one file's logical columns (vector, id?, payload…), concatenated.
    /// Only the projected column chunks are fetched: the plan comes from the
    /// footer read at open, the bytes from ranged reads, and decoding runs on
    /// a blocking thread, never on the async runtime.
    async fn read_columns(&self, part: usize) -> Result<(usize, Vec<ArrayRef>), BuildError> {
        let f = &self.files[part];
        let path = f.meta.location.clone();
        let builder = ParquetPushDecoderBuilder::new_with_metadata(f.footer.clone());
        let mask = ProjectionMask::roots(
            builder.parquet_schema(),
            f.resolved.physical_roots().iter().copied(),
        );
        let mut decoder = builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| unreadable(&path, e))?;
        // Every planned range in one request, so a file costs one round.
        let mut ranges = coalesce(decoder.scan_plan().map(|planned| planned.range).collect());
        let resolved = Arc::new(f.resolved.clone());
        let schema: SchemaRef = Arc::new(Schema::new(f.resolved.fields()));
        let mut batches = Vec::new();
        loop {
            let data = self
                .store
                .get_ranges(&path, &ranges)
                .await
                .map_err(|e| unreadable(&path, e))?;
            decoder
                .push_ranges(std::mem::take(&mut ranges), data)
                .map_err(|e| unreadable(&path, e))?;
            let (resolved, schema, path) = (resolved.clone(), schema.clone(), path.clone());
            let (next, decoded) = tokio::task::spawn_blocking(move || {
                let mut decoded = Vec::new();
                decode_available(decoder, &resolved, &schema, &path, &mut decoded)
                    .map(|next| (next, decoded))
            })
            .await
            .map_err(|e| BuildError::Internal(format!("reader task failed: {e}")))??;
            batches.extend(decoded);
            match next {
                Some((d, needed)) => (decoder, ranges) = (d, needed),
                None => break,
            }
        }
        let all =
            concat_batches(&schema, &batches).map_err(|e| BuildError::Arrow(e.to_string()))?;
        Ok((all.num_rows(), all.columns().to_vec()))
    }
}

#[async_trait]
impl VectorSource for ParquetSource {
    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        self.files.len()
    }

    async fn part_rows(&self, part: usize) -> Result<u64, BuildError> {
        Ok(self.files[part].rows)
    }

    async fn read_part(&self, part: usize) -> Result<VectorBatch, BuildError> {
        let (rows, columns, decoded, keep, rowids) = self.read_kept(part).await?;
        self.skipped
            .fetch_add(decoded.skipped_rows.len() as u64, Ordering::Relaxed);
        let payload = if self.payload_fields.is_empty() {
            None
        } else {
            let first = 1 + usize::from(self.options.id_column.is_some());
            let schema = Arc::new(Schema::new(self.payload_fields.clone()));
            let batch = RecordBatch::try_new(schema, columns[first..].to_vec())
                .map_err(|e| BuildError::Arrow(e.to_string()))?;
            let batch = if keep.len() == rows {
                batch
            } else {
                take_record_batch(&batch, &UInt32Array::from(keep.clone()))
                    .map_err(|e| BuildError::Arrow(e.to_string()))?
            };
            Some(batch)
        };
        Ok(VectorBatch {
            rowids,
            vectors: decoded.values,
            payload,
        })
    }

    fn ids_may_repeat(&self) -> bool {
        self.options.id_column.is_some()
    }

    fn part_name(&self, part: usize) -> String {
        self.files[part].meta.location.to_string()
    }

    async fn rows_with_id(&self, part: usize, id: i64) -> Result<Vec<u64>, BuildError> {
        let (_, _, _, keep, rowids) = self.read_kept(part).await?;
        Ok(keep
            .iter()
            .zip(&rowids)
            .filter(|&(_, &r)| r == id)
            .map(|(&row, _)| u64::from(row))
            .collect())
    }

    fn payload_fields(&self) -> Vec<FieldRef> {
        self.payload_fields.clone()
    }

    fn source_files(&self) -> Option<crate::format::source_files::SourceFiles> {
        Some(ParquetSource::source_files(self))
    }

    fn definition(&self) -> SourceDefinition {
        let uri = self
            .options
            .table_uri
            .clone()
            .unwrap_or_else(|| self.location.to_string());
        SourceDefinition {
            source: IndexSource::Parquet {
                location: uri.clone(),
                table_identity: uri,
            },
            vector_column: self.options.column.clone(),
            id_column: self.options.id_column.clone(),
            payload_columns: self.options.payload.clone(),
            skip_invalid: self.options.skip_invalid,
        }
    }
}
