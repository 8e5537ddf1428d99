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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;

use super::BuildError;
use super::source::{
    SourceDefinition, VectorBatch, VectorSource, decode_vectors, integer_ids, is_id_type, kept_rows,
};
use crate::catalog::mapping::{ColumnMapping, ResolvedColumns, field_id, with_field_id};
use crate::format::definition::IndexSource;
use crate::store::parquet_reader::StoreReader;

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
    /// the source location in `index.json`. `None`: `file:///` + the
    /// location, right for a `LocalFileSystem` rooted at `/`.
    pub table_uri: Option<String>,
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
    rows: u64,
    first_rowid: i64,
    resolved: ResolvedColumns,
}

/// A Parquet table (root or pattern) read file by file.
pub struct ParquetSource {
    store: Arc<dyn ObjectStore>,
    location: String,
    files: Vec<SourceFile>,
    dim: usize,
    options: ParquetSourceOptions,
    payload_fields: Vec<FieldRef>,
    skipped: AtomicU64,
}

fn unreadable(path: &Path, e: impl std::error::Error) -> BuildError {
    BuildError::Unreadable {
        path: path.to_string(),
        reason: super::reason_without(path.as_ref(), &e),
    }
}

/// `*` matches any run of characters within one path segment.
fn glob_match(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((pre, post)) => {
            let Some(rest) = s.strip_prefix(pre) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i) && !rest[..i].contains('/'))
                .any(|i| glob_match(post, &rest[i..]))
        }
    }
}

/// `s` as a store path. Locations arrive in the store's own path syntax
/// (`Path::to_string`), so they are parsed as they are; `Path::from` would
/// percent-encode them again and turn `données` into `donn%C3%A9es`, a name
/// no file has. A string that is not a valid path is encoded as before.
fn store_path(s: &str) -> Path {
    Path::parse(s).unwrap_or_else(|_| Path::from(s))
}

/// Expand a table root (every `.parquet` object below it) or a path pattern
/// holding one `*` into its files, in path order.
///
/// # Errors
/// Listing fails, or nothing matches ([`BuildError::NoFiles`]).
pub async fn expand(
    store: &dyn ObjectStore,
    location: &str,
) -> Result<Vec<ObjectMeta>, BuildError> {
    let location = location.trim_start_matches('/');
    let mut files = if let Some(star) = location.find('*') {
        let dir = location[..star].rfind('/').map_or("", |i| &location[..i]);
        let prefix = store_path(dir);
        let listed: Vec<ObjectMeta> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| unreadable(&prefix, e))?;
        listed
            .into_iter()
            .filter(|m| glob_match(location, m.location.as_ref()))
            .collect()
    } else {
        let path = store_path(location);
        match store.head(&path).await {
            Ok(meta) => vec![meta],
            Err(object_store::Error::NotFound { .. }) => {
                let listed: Vec<ObjectMeta> = store
                    .list(Some(&path))
                    .try_collect()
                    .await
                    .map_err(|e| unreadable(&path, e))?;
                listed
                    .into_iter()
                    .filter(|m| m.location.as_ref().ends_with(".parquet"))
                    .collect()
            }
            Err(e) => return Err(unreadable(&path, e)),
        }
    };
    files.sort_by(|a, b| a.location.cmp(&b.location));
    if files.is_empty() {
        return Err(BuildError::NoFiles {
            location: location.to_string(),
        });
    }
    Ok(files)
}

/// `name=value` segments of a path (hive partitions).
fn partitions(path: &Path) -> Vec<(String, String)> {
    path.parts()
        .filter_map(|p| {
            let s = p.as_ref().to_string();
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
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

fn is_vector_type(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            matches!(f.data_type(), DataType::Float32 | DataType::Float64)
        }
        DataType::FixedSizeBinary(w) => *w > 0 && w % 4 == 0,
        _ => false,
    }
}

impl ParquetSource {
    /// Expand `location` (relative to `store`), read every footer, validate
    /// every file's schema and resolve its columns. Nothing is trained or
    /// written before this succeeds.
    ///
    /// # Errors
    /// No files, an unreadable file, a missing or mistyped column, or a vector
    /// column whose dimension cannot be determined.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        location: &str,
        options: ParquetSourceOptions,
    ) -> Result<Self, BuildError> {
        let metas = expand(store.as_ref(), location).await?;
        let mut footers = Vec::with_capacity(metas.len());
        for meta in &metas {
            let reader = StoreReader::new(store.clone(), meta.location.clone(), Some(meta.size));
            let builder = ParquetRecordBatchStreamBuilder::new(reader)
                .await
                .map_err(|e| unreadable(&meta.location, e))?;
            let rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
            footers.push((builder.schema().clone(), rows));
        }
        let wanted: Vec<&str> = std::iter::once(options.column.as_str())
            .chain(options.id_column.as_deref())
            .chain(options.payload.iter().map(String::as_str))
            .collect();
        // Field ids when every file carries them on the wanted columns, else names.
        let by_id = footers.iter().all(|(schema, _)| {
            wanted.iter().all(|w| {
                schema
                    .field_with_name(w)
                    .map(|f| field_id(f).is_some())
                    .unwrap_or(false)
            })
        });
        let (first_schema, _) = &footers[0];
        let mut logical: Vec<FieldRef> = Vec::with_capacity(wanted.len());
        let mut next_id = 1;
        for w in &wanted {
            let f = first_schema
                .field_with_name(w)
                .map_err(|_| BuildError::MissingColumn {
                    path: metas[0].location.to_string(),
                    column: (*w).to_string(),
                })?;
            let f = Field::new(f.name(), f.data_type().clone(), true)
                .with_metadata(f.metadata().clone());
            let f = if by_id { f } else { with_ids(f, &mut next_id) };
            logical.push(Arc::new(f));
        }
        if !is_vector_type(logical[0].data_type()) {
            return Err(BuildError::WrongType {
                path: metas[0].location.to_string(),
                column: options.column.clone(),
                found: logical[0].data_type().to_string(),
            });
        }
        if let Some(id) = &options.id_column
            && !is_id_type(logical[1].data_type())
        {
            return Err(BuildError::IdColumnType {
                path: metas[0].location.to_string(),
                column: id.clone(),
                found: logical[1].data_type().to_string(),
            });
        }
        let logical_schema = Schema::new(logical.clone());
        let mut files = Vec::with_capacity(metas.len());
        let mut next_rowid: i64 = 0;
        for (meta, (physical, rows)) in metas.into_iter().zip(footers) {
            let path = meta.location.to_string();
            let mapping = if by_id {
                ColumnMapping::from_field_ids(&physical)
            } else {
                ColumnMapping::by_name(&logical_schema, &physical)
            };
            let resolved = mapping
                .resolve(&logical, &physical, &path, &partitions(&meta.location))
                .map_err(|source| BuildError::Mapping {
                    path: path.clone(),
                    source,
                })?;
            // Every file must hold the vector column itself, with a vector type.
            let phys_name = physical.fields().iter().find(|f| {
                if by_id {
                    field_id(f) == field_id(&logical[0])
                } else {
                    f.name() == &options.column
                }
            });
            match phys_name {
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
            files.push(SourceFile {
                meta,
                rows,
                first_rowid: next_rowid,
                resolved,
            });
            next_rowid = next_rowid
                .checked_add(rows as i64)
                .ok_or_else(|| BuildError::Internal("row count overflows i64".into()))?;
        }
        let payload_fields = logical[1 + usize::from(options.id_column.is_some())..]
            .iter()
            .map(|f| Arc::new(Field::new(f.name(), f.data_type().clone(), true)) as FieldRef)
            .collect();
        let mut source = Self {
            store,
            location: location.to_string(),
            files,
            dim: 0,
            options,
            payload_fields,
            skipped: AtomicU64::new(0),
        };
        source.dim = source.detect_dim().await?;
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
    async fn read_columns(&self, part: usize) -> Result<(usize, Vec<ArrayRef>), BuildError> {
        let f = &self.files[part];
        let path = f.meta.location.clone();
        let bytes = self
            .store
            .get(&path)
            .await
            .map_err(|e| unreadable(&path, e))?
            .bytes()
            .await
            .map_err(|e| unreadable(&path, e))?;
        let resolved = f.resolved.clone();
        tokio::task::spawn_blocking(move || {
            let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .map_err(|e| unreadable(&path, e))?;
            let mask = ProjectionMask::roots(
                builder.parquet_schema(),
                resolved.physical_roots().iter().copied(),
            );
            let reader = builder
                .with_projection(mask)
                .with_batch_size(16_384)
                .build()
                .map_err(|e| unreadable(&path, e))?;
            let schema: SchemaRef = Arc::new(Schema::new(resolved.fields()));
            let mut batches = Vec::new();
            for b in reader {
                let b = b.map_err(|e| unreadable(&path, e))?;
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
            let all =
                concat_batches(&schema, &batches).map_err(|e| BuildError::Arrow(e.to_string()))?;
            Ok((all.num_rows(), all.columns().to_vec()))
        })
        .await
        .map_err(|e| BuildError::Internal(format!("reader task failed: {e}")))?
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

    fn definition(&self) -> SourceDefinition {
        let uri = self.options.table_uri.clone().unwrap_or_else(|| {
            let path = self.location.trim_start_matches('/');
            format!("file:///{}", crate::store::uri::encode_path(path))
        });
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

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn star_matches_within_one_segment() {
        assert!(glob_match("data/*.parquet", "data/a.parquet"));
        assert!(!glob_match("data/*.parquet", "data/sub/a.parquet"));
        assert!(glob_match("data/*/f.parquet", "data/x=1/f.parquet"));
        assert!(!glob_match("data/*.parquet", "data/a.csv"));
    }
}
