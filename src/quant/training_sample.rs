//! The one check of a training sample, shared by the trained schemes
//! (`sq8`'s ranges, `pq4fs`'s codebooks).

use super::error::QuantError;

/// Checks a row-major training sample of `scheme`: dim ≥ 1, n ≥ 1 rows,
/// every value finite.
pub(crate) fn check_sample(
    scheme: &'static str,
    residuals: &[f32],
    dim: usize,
) -> Result<(), QuantError> {
    if dim == 0 {
        return Err(QuantError::ZeroDim);
    }
    if residuals.is_empty() {
        return Err(QuantError::EmptySample { scheme, dim });
    }
    if !residuals.len().is_multiple_of(dim) {
        return Err(QuantError::SampleLength {
            scheme,
            len: residuals.len(),
            dim,
        });
    }
    if let Some(index) = residuals.iter().position(|x| !x.is_finite()) {
        return Err(QuantError::NonFiniteSample {
            scheme,
            row: index / dim,
            column: index % dim,
            value: residuals[index],
        });
    }
    Ok(())
}
