//! Why a quantiser could not be built ([`QuantError`]).

/// Why a quantiser could not be built.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum QuantError {
    #[error("quantiser dimension is 0")]
    ZeroDim,
    #[error("rabitq4 dimension {dim} exceeds the maximum {max}")]
    DimTooLarge { dim: usize, max: usize },
    #[error("{scheme} training sample is empty (dim {dim})")]
    EmptySample { scheme: &'static str, dim: usize },
    #[error("{scheme} training sample has {len} values, not a multiple of dim {dim}")]
    SampleLength {
        scheme: &'static str,
        len: usize,
        dim: usize,
    },
    #[error(
        "{scheme} training sample value at row {row}, dimension {column} is {value}, not finite"
    )]
    NonFiniteSample {
        scheme: &'static str,
        row: usize,
        column: usize,
        value: f32,
    },
    #[error("sq8 ranges have {min_len} minimums but {scale_len} scales")]
    RangeLengths { min_len: usize, scale_len: usize },
    #[error("sq8 minimum of dimension {index} is {value}, not finite")]
    NonFiniteMin { index: usize, value: f32 },
    #[error("sq8 scale of dimension {index} is {value}, not a finite positive number")]
    BadScale { index: usize, value: f32 },
    #[error("pq4fs codebook of dim {dim} has {len} values, expected {expected}")]
    CodebookLength {
        dim: usize,
        len: usize,
        expected: usize,
    },
    #[error("pq4fs centroid value {index} is {value}, not finite")]
    NonFiniteCentroid { index: usize, value: f32 },
    #[error("unknown code scheme {name:?} (expected \"sq8\", \"rabitq4\" or \"pq4fs\")")]
    UnknownScheme { name: String },
}
