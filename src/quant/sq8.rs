//! `sq8`: 8-bit scalar quantisation with per-dimension ranges.
//!
//! Dimension i keeps `min_i` and `scale_i > 0`; a residual value r_i becomes
//! `u_i = round(clamp((r_i − min_i) / scale_i, 0, 255))` (f32, ties to even)
//! and reads back as `r̂_i = min_i + scale_i·u_i`. Training takes the
//! per-dimension min and max of a sample, `scale_i = (max_i − min_i) / 255`
//! (computed in f64, rounded to f32); a dimension that is constant in the
//! sample gets the smallest normal f32 as its scale, so it encodes as 0 and
//! decodes to `min_i` exactly. Values outside the trained range clamp to the
//! nearest end.

use super::error::QuantError;

/// 2²³: f32 values from it up to 2²⁴ are the integers.
const ROUNDER: f32 = 8_388_608.0;

/// Per-dimension ranges.
#[derive(Clone, Debug)]
pub(crate) struct Sq8 {
    min: Vec<f32>,
    scale: Vec<f32>,
}

impl Sq8 {
    pub(crate) fn train(residuals: &[f32], dim: usize) -> Result<Sq8, QuantError> {
        super::training_sample::check_sample("sq8", residuals, dim)?;
        let mut min = residuals[..dim].to_vec();
        let mut max = min.clone();
        for row in residuals.chunks_exact(dim).skip(1) {
            for ((lo, hi), &x) in min.iter_mut().zip(&mut max).zip(row) {
                *lo = lo.min(x);
                *hi = hi.max(x);
            }
        }
        let scale = min
            .iter()
            .zip(&max)
            .map(|(&lo, &hi)| {
                let scale = ((f64::from(hi) - f64::from(lo)) / 255.0) as f32;
                if scale >= f32::MIN_POSITIVE {
                    scale
                } else {
                    f32::MIN_POSITIVE
                }
            })
            .collect();
        Ok(Sq8 { min, scale })
    }

    pub(crate) fn from_ranges(min: Vec<f32>, scale: Vec<f32>) -> Result<Sq8, QuantError> {
        if min.is_empty() {
            return Err(QuantError::ZeroDim);
        }
        if min.len() != scale.len() {
            return Err(QuantError::RangeLengths {
                min_len: min.len(),
                scale_len: scale.len(),
            });
        }
        if let Some(index) = min.iter().position(|x| !x.is_finite()) {
            return Err(QuantError::NonFiniteMin {
                index,
                value: min[index],
            });
        }
        if let Some(index) = scale.iter().position(|&x| !(x.is_finite() && x > 0.0)) {
            return Err(QuantError::BadScale {
                index,
                value: scale[index],
            });
        }
        Ok(Sq8 { min, scale })
    }

    pub(crate) fn dim(&self) -> usize {
        self.min.len()
    }

    pub(crate) fn min(&self) -> &[f32] {
        &self.min
    }

    pub(crate) fn scale(&self) -> &[f32] {
        &self.scale
    }

    /// Writes the `dim` code bytes of `residual` into `payload` and returns
    /// `||r̂||²` (f64 sum, left to right).
    pub(crate) fn encode(&self, residual: &[f32], payload: &mut [u8]) -> f32 {
        let mut recon_norm2 = 0.0f64;
        for (((out, &x), &lo), &scale) in payload
            .iter_mut()
            .zip(residual)
            .zip(&self.min)
            .zip(&self.scale)
        {
            // Adding and subtracting 2²³ rounds a value in [0, 255] to the
            // nearest integer, ties to even, in plain IEEE arithmetic (no libm
            // call, vectorisable). NaN clamps to NaN and `as u8` maps it to 0.
            let u = (((x - lo) / scale).clamp(0.0, 255.0) + ROUNDER - ROUNDER) as u8;
            *out = u;
            let recon = f64::from(lo + scale * f32::from(u));
            recon_norm2 += recon * recon;
        }
        recon_norm2 as f32
    }

    pub(crate) fn decode(&self, payload: &[u8], out: &mut [f32]) {
        for (((o, &u), &lo), &scale) in out.iter_mut().zip(payload).zip(&self.min).zip(&self.scale)
        {
            *o = lo + scale * f32::from(u);
        }
    }

    /// The kernel's weights `w_i = scale_i·y_i` and the constant `Σ min_i·y_i`
    /// (f64 sum), so that `<r̂, y> = constant + Σ w_i·u_i`.
    pub(crate) fn prepare(&self, y: &[f32]) -> (Vec<f32>, f32) {
        let weights = self.scale.iter().zip(y).map(|(s, y)| s * y).collect();
        let offset = self
            .min
            .iter()
            .zip(y)
            .map(|(&m, &y)| f64::from(m) * f64::from(y))
            .sum::<f64>() as f32;
        (weights, offset)
    }
}
