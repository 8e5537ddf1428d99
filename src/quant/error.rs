//! Why a quantiser could not be built ([`QuantError`]).

/// Why a quantiser could not be built.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum QuantError {
    #[error("quantiser dimension is 0")]
    ZeroDim,
    #[error("rabitq4 dimension {dim} exceeds the maximum {max}")]
    DimTooLarge { dim: usize, max: usize },
    #[error("sq8 training sample is empty (dim {dim})")]
    EmptySample { dim: usize },
    #[error("sq8 training sample has {len} values, not a multiple of dim {dim}")]
    SampleLength { len: usize, dim: usize },
    #[error("sq8 training sample value at row {row}, dimension {column} is {value}, not finite")]
    NonFiniteSample {
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
    #[error("unknown code scheme {name:?} (expected \"sq8\" or \"rabitq4\")")]
    UnknownScheme { name: String },
}
