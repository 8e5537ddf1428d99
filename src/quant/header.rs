//! The header every code starts with: its residual's `norm2` and the
//! scheme's `factor`, two f32, before the payload.

/// Bytes before the payload of every code: `norm2` and `factor`.
pub const HEADER_BYTES: usize = 8;
