//! What the build job reads: a source of vectors split into independent
//! *parts* (files), each yielding row identities, vectors and optional payload
//! columns. Providers (in-memory arrays, `.npy`/`.fvecs`, Parquet tables,
//! DuckLake tables) implement [`VectorSource`]; the job never knows which.

use arrow::datatypes::FieldRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use crate::builder::error::BuildError;
use crate::format::definition::IndexSource;

/// The rows of one part: `rowids.len()` vectors of `dim` f32 each, row-major,
/// and, when the build carries payload columns, a batch with one row per vector.
#[derive(Debug, Clone)]
pub struct VectorBatch {
    pub rowids: Vec<i64>,
    pub vectors: Vec<f32>,
    pub payload: Option<RecordBatch>,
}

impl VectorBatch {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rowids.len()
    }

    /// True when the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.rowids.is_empty()
    }

    /// Bytes held in memory (vectors, rowids and payload buffers).
    pub fn memory_size(&self) -> usize {
        self.vectors.len() * 4
            + self.rowids.len() * 8
            + self
                .payload
                .as_ref()
                .map_or(0, |p| p.get_array_memory_size())
    }
}

/// Decode one part's vector column, naming the part in errors.
///
/// # Errors
/// [`BuildError::VectorColumn`] for any decoding error.
pub fn decode_vectors(
    array: &dyn arrow::array::Array,
    expected_dim: Option<usize>,
    skip_invalid: bool,
    path: &str,
) -> Result<crate::catalog::vector_column::DecodedVectors, BuildError> {
    let options = crate::catalog::vector_column::DecodeOptions {
        expected_dim,
        skip_invalid,
    };
    crate::catalog::vector_column::decode(array, &options).map_err(|source| {
        BuildError::VectorColumn {
            path: path.to_string(),
            source,
        }
    })
}

/// Positions `0..rows` except the ascending `skipped` ones.
pub fn kept_rows(rows: usize, skipped: &[usize]) -> Vec<u32> {
    let mut skipped = skipped.iter().peekable();
    (0..rows)
        .filter(|&r| {
            if skipped.peek() == Some(&&r) {
                skipped.next();
                false
            } else {
                true
            }
        })
        .map(|r| r as u32)
        .collect()
}

/// The BIGINT ids at positions `keep`; a NULL id is [`BuildError::NullId`].
///
/// # Errors
/// A NULL at a kept position.
pub fn ids_at(
    ids: &arrow::array::Int64Array,
    keep: &[u32],
    path: &str,
) -> Result<Vec<i64>, BuildError> {
    use arrow::array::Array;
    keep.iter()
        .map(|&r| {
            if ids.is_null(r as usize) {
                Err(BuildError::NullId {
                    path: path.to_string(),
                    row: u64::from(r),
                })
            } else {
                Ok(ids.value(r as usize))
            }
        })
        .collect()
}

/// True for the Arrow types an id column may have: signed and unsigned
/// integers. Floats, decimals, booleans and strings are refused rather than
/// cast, because a cast can merge distinct values (790.0 and 790.5) or invent
/// them ("790" → 790, true → 1).
pub fn is_id_type(t: &arrow::datatypes::DataType) -> bool {
    t.is_integer()
}

/// The ids of the integer column `ids` (named `column` in `path`) at
/// positions `keep`, widened to i64 without loss.
///
/// # Errors
/// [`BuildError::IdColumnType`] for a non-integer column,
/// [`BuildError::IdOutOfRange`] for a uint64 value above `i64::MAX`,
/// [`BuildError::NullId`] for a NULL at a kept position.
pub fn integer_ids(
    ids: &dyn arrow::array::Array,
    keep: &[u32],
    path: &str,
    column: &str,
) -> Result<Vec<i64>, BuildError> {
    use arrow::array::{Array, AsArray, Int64Array};
    use arrow::datatypes::{DataType, UInt64Type};
    let wrong_type = || BuildError::IdColumnType {
        path: path.to_string(),
        column: column.to_string(),
        found: ids.data_type().to_string(),
    };
    if !is_id_type(ids.data_type()) {
        return Err(wrong_type());
    }
    if *ids.data_type() == DataType::UInt64 {
        let u = ids.as_primitive::<UInt64Type>();
        for &r in keep {
            let r = r as usize;
            if u.is_valid(r) && u.value(r) > i64::MAX as u64 {
                return Err(BuildError::IdOutOfRange {
                    path: path.to_string(),
                    column: column.to_string(),
                    row: r as u64,
                    value: u.value(r),
                });
            }
        }
    }
    // Every integer type widens to Int64 exactly (uint64 was range-checked
    // above at the kept rows; elsewhere an out-of-range value becomes NULL,
    // which only matters at kept rows).
    let wide = arrow::compute::cast(ids, &DataType::Int64).map_err(|_| wrong_type())?;
    let wide = wide
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(wrong_type)?;
    ids_at(wide, keep, path)
}

/// A source table, read part by part. Parts are independent, so the job can
/// read them in parallel and, beyond one machine, on different workers.
#[async_trait]
pub trait VectorSource: Send + Sync {
    /// The vector dimension (validated across all parts while reading).
    fn dim(&self) -> usize;

    /// Number of parts (files).
    fn parts(&self) -> usize;

    /// Rows in part `part` that the source will yield, before invalid rows are
    /// skipped (from metadata where possible: Parquet footers).
    ///
    /// # Errors
    /// The part cannot be opened.
    async fn part_rows(&self, part: usize) -> Result<u64, BuildError>;

    /// Read part `part` completely.
    ///
    /// # Errors
    /// Unreadable data, wrong types, nulls, mixed dimensions, non-finite values.
    async fn read_part(&self, part: usize) -> Result<VectorBatch, BuildError>;

    /// True when row identities come from the data (an id column), so the
    /// build must check that they are unique; generated rowids are unique by
    /// construction.
    fn ids_may_repeat(&self) -> bool {
        false
    }

    /// A name for part `part` in error messages (its file, where it has one).
    fn part_name(&self, part: usize) -> String {
        format!("part {part}")
    }

    /// Row numbers within part `part` (as its file counts them) of the rows
    /// `read_part` yields with rowid `id`. Only used to explain a duplicate
    /// id, so it may re-read the part; the default reports positions among
    /// the rows `read_part` yields.
    ///
    /// # Errors
    /// As [`VectorSource::read_part`].
    async fn rows_with_id(&self, part: usize, id: i64) -> Result<Vec<u64>, BuildError> {
        let batch = self.read_part(part).await?;
        Ok(batch
            .rowids
            .iter()
            .enumerate()
            .filter(|&(_, &r)| r == id)
            .map(|(i, _)| i as u64)
            .collect())
    }

    /// Payload fields carried into the postings, in order.
    fn payload_fields(&self) -> Vec<FieldRef> {
        Vec::new()
    }

    /// What the index definition records about the source and its columns.
    fn definition(&self) -> SourceDefinition;

    /// The files read and their rowids, for a source that `refresh`
    /// follows by its file set (Parquet); `None` otherwise.
    fn source_files(&self) -> Option<crate::format::source_files::SourceFiles> {
        None
    }
}

/// The source as recorded in `index.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDefinition {
    pub source: IndexSource,
    pub vector_column: String,
    pub id_column: Option<String>,
    pub payload_columns: Vec<String>,
    pub skip_invalid: bool,
}

/// Vectors already in memory (generated data, `.npy`/`.fvecs` files). Row `i`
/// gets rowid `i` (also when earlier rows were skipped as invalid);
/// `part_rows` splits them into parts of `part_rows` rows.
#[derive(Debug, Clone)]
pub struct ArraySource {
    vectors: std::sync::Arc<Vec<f32>>,
    dim: usize,
    part_size: usize,
    location: String,
    skip_invalid: bool,
    /// The rows' own ids (an upsert's), instead of positions.
    ids: Option<std::sync::Arc<Vec<i64>>>,
    /// Payload columns, one row per vector.
    payload: Option<RecordBatch>,
}

impl ArraySource {
    /// `vectors` is row-major `n × dim`; `location` names where they came
    /// from (a `.npy`/`.fvecs` file, or a description of generated data).
    ///
    /// # Errors
    /// A zero dimension, or a length that is not a multiple of `dim`.
    pub fn new(
        vectors: Vec<f32>,
        dim: usize,
        location: impl Into<String>,
    ) -> Result<Self, BuildError> {
        if dim == 0 || !vectors.len().is_multiple_of(dim) {
            return Err(BuildError::BadShape {
                len: vectors.len(),
                dim,
            });
        }
        Ok(Self {
            vectors: std::sync::Arc::new(vectors),
            dim,
            part_size: 65_536,
            location: location.into(),
            skip_invalid: false,
            ids: None,
            payload: None,
        })
    }

    /// Give row `i` the id `ids[i]` instead of `i` (checked for repeats like
    /// an id column), and carry `payload`'s row `i` with it.
    ///
    /// # Errors
    /// [`BuildError::BadParameter`] when `ids` or `payload` has another row
    /// count than the vectors.
    pub fn with_ids(
        mut self,
        ids: Vec<i64>,
        payload: Option<RecordBatch>,
    ) -> Result<Self, BuildError> {
        let rows = self.rows();
        if ids.len() != rows {
            return Err(BuildError::BadParameter {
                name: "ids",
                reason: format!("{} ids for {rows} vectors", ids.len()),
            });
        }
        if let Some(p) = &payload
            && p.num_rows() != rows
        {
            return Err(BuildError::BadParameter {
                name: "payload",
                reason: format!("{} payload rows for {rows} vectors", p.num_rows()),
            });
        }
        self.ids = Some(std::sync::Arc::new(ids));
        self.payload = payload;
        Ok(self)
    }

    /// Skip rows holding NaN or ±∞ instead of failing (the build counts
    /// them in [`crate::builder::BuildSummary::skipped_rows`]).
    pub fn with_skip_invalid(mut self, skip: bool) -> Self {
        self.skip_invalid = skip;
        self
    }

    /// Rows per part (default 65,536).
    pub fn with_part_size(mut self, rows: usize) -> Self {
        self.part_size = rows.max(1);
        self
    }

    fn rows(&self) -> usize {
        self.vectors.len() / self.dim
    }

    fn range(&self, part: usize) -> std::ops::Range<usize> {
        let start = (part * self.part_size).min(self.rows());
        start..(start + self.part_size).min(self.rows())
    }

    /// [`VectorSource::read_part`]'s batch: its rows copied, the invalid
    /// ones (a non-finite value) skipped or refused. A part without one
    /// (checked first, [`crate::distance::first_non_finite`]) is copied on
    /// rayon; otherwise row by row.
    fn part(&self, part: usize) -> Result<VectorBatch, BuildError> {
        use rayon::prelude::*;
        let r = self.range(part);
        let all = &self.vectors[r.start * self.dim..r.end * self.dim];
        let dim = self.dim;
        let run = COPY_RUN_ROWS * dim;
        let (kept, vectors) = if crate::distance::first_non_finite(all).is_none() {
            let mut vectors = vec![0f32; all.len()];
            vectors
                .par_chunks_mut(run)
                .zip(all.par_chunks(run))
                .for_each(|(to, from)| to.copy_from_slice(from));
            (r.clone().map(|i| i as u32).collect::<Vec<u32>>(), vectors)
        } else {
            let mut vectors = Vec::with_capacity(all.len());
            let mut kept: Vec<u32> = Vec::with_capacity(r.len());
            for (i, row) in r.clone().zip(all.chunks_exact(dim)) {
                if let Some(&value) = row.iter().find(|v| !v.is_finite()) {
                    if self.skip_invalid {
                        continue;
                    }
                    return Err(BuildError::NonFiniteValue {
                        source_name: self.location.clone(),
                        row: i as u64,
                        value,
                    });
                }
                kept.push(i as u32);
                vectors.extend_from_slice(row);
            }
            (kept, vectors)
        };
        let rowids = kept
            .iter()
            .map(|&i| self.ids.as_ref().map_or(i as i64, |ids| ids[i as usize]))
            .collect();
        let payload = match &self.payload {
            Some(p) => Some(
                arrow::compute::take_record_batch(p, &arrow::array::UInt32Array::from(kept))
                    .map_err(|e| BuildError::Arrow(e.to_string()))?,
            ),
            None => None,
        };
        Ok(VectorBatch {
            rowids,
            vectors,
            payload,
        })
    }
}

/// Rows a task of [`ArraySource`]'s part copy checks and copies.
const COPY_RUN_ROWS: usize = 1024;

#[async_trait]
impl VectorSource for ArraySource {
    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        self.rows().div_ceil(self.part_size)
    }

    async fn part_rows(&self, part: usize) -> Result<u64, BuildError> {
        Ok(self.range(part).len() as u64)
    }

    async fn read_part(&self, part: usize) -> Result<VectorBatch, BuildError> {
        // Copying and checking a part is CPU work: not on a tokio worker.
        let source = self.clone();
        tokio::task::spawn_blocking(move || source.part(part))
            .await
            .map_err(|e| BuildError::Internal(format!("worker task failed: {e}")))?
    }

    fn ids_may_repeat(&self) -> bool {
        self.ids.is_some()
    }

    fn payload_fields(&self) -> Vec<FieldRef> {
        self.payload
            .as_ref()
            .map(|p| p.schema().fields().iter().cloned().collect())
            .unwrap_or_default()
    }

    fn definition(&self) -> SourceDefinition {
        SourceDefinition {
            source: IndexSource::VectorFile {
                location: self.location.clone(),
            },
            vector_column: "vector".into(),
            id_column: None,
            payload_columns: Vec::new(),
            skip_invalid: self.skip_invalid,
        }
    }
}
