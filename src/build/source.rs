//! What the build job reads: a source of vectors split into independent
//! *parts* (files), each yielding row identities, vectors and optional payload
//! columns. Providers (in-memory arrays, `.npy`/`.fvecs`, Parquet tables,
//! DuckLake tables) implement [`VectorSource`]; the job never knows which.

use arrow::datatypes::FieldRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use super::BuildError;
use crate::catalog::definition::IndexSource;

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

    /// Payload fields carried into the postings, in order.
    fn payload_fields(&self) -> Vec<FieldRef> {
        Vec::new()
    }

    /// What the index definition records about the source and its columns.
    fn definition(&self) -> SourceDefinition;
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
/// gets rowid `i`; `part_rows` splits them into parts of `part_rows` rows.
#[derive(Debug, Clone)]
pub struct ArraySource {
    vectors: std::sync::Arc<Vec<f32>>,
    dim: usize,
    part_size: usize,
    location: String,
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
        })
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
}

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
        let r = self.range(part);
        let vectors = self.vectors[r.start * self.dim..r.end * self.dim].to_vec();
        if let Some(pos) = vectors.iter().position(|v| !v.is_finite()) {
            let row = r.start + pos / self.dim;
            return Err(BuildError::NonFiniteValue {
                source_name: "array".into(),
                row: row as u64,
                value: vectors[pos],
            });
        }
        Ok(VectorBatch {
            rowids: r.map(|i| i as i64).collect(),
            vectors,
            payload: None,
        })
    }

    fn definition(&self) -> SourceDefinition {
        SourceDefinition {
            source: IndexSource::VectorFile {
                location: self.location.clone(),
            },
            vector_column: "vector".into(),
            id_column: None,
            payload_columns: Vec::new(),
            skip_invalid: false,
        }
    }
}
