//! Decoding a vector column (an Arrow array read from a source Parquet file or
//! a query file) into one row-major `Vec<f32>` plus its dimension.
//!
//! Accepted Arrow types: `List<Float32>`, `LargeList<Float32>`,
//! `FixedSizeList<Float32>` (copied as is); the same with `Float16` elements,
//! widened to f32 exactly; the same with `Float64` elements, converted to f32
//! by rounding to nearest (relative error at most 2⁻²⁴, about 6e-8; a finite
//! f64 beyond ±f32::MAX is [`VectorColumnError::OutOfRange`]); and
//! `FixedSizeBinary(d·4)` holding d little-endian IEEE-754 f32 values. Each
//! element is converted once, straight into the output buffer.
//!
//! Every row must have the same dimension (the first valid row's, or the
//! caller's `expected_dim`). Rows that are null, hold a null element, a NaN or
//! an infinite value are errors naming the row; with
//! [`DecodeOptions::skip_invalid`] they are skipped instead and listed in
//! [`DecodedVectors::skipped_rows`]. A dimension mismatch is always an error.

use arrow::array::{
    Array, AsArray, FixedSizeBinaryArray, Float16Array, Float32Array, Float64Array, OffsetSizeTrait,
};
use arrow::datatypes::{DataType, Float16Type, Float32Type, Float64Type};
use thiserror::Error;

/// A vector column that cannot be decoded. Rows and element indices are
/// 0-based positions in the decoded array.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum VectorColumnError {
    #[error(
        "vector column has type {found}; expected a list, large list or fixed-size list of half/float/double, or fixed_size_binary(4·dim)"
    )]
    WrongType { found: String },
    #[error(
        "vector column has fixed_size_binary({width}); the width must be a positive multiple of 4 (f32 values)"
    )]
    BinaryWidth { width: i32 },
    #[error("row {row}: the vector is null")]
    NullVector { row: usize },
    #[error("row {row}: element {index} is null")]
    NullElement { row: usize, index: usize },
    #[error("row {row}: the vector is empty (dimension 0)")]
    ZeroDimension { row: usize },
    #[error("row {row}: dimension {actual}, but row {first_row} has dimension {first}")]
    MixedDimension {
        row: usize,
        actual: usize,
        first_row: usize,
        first: usize,
    },
    #[error("row {row}: dimension {actual}, expected {expected}")]
    DimensionMismatch {
        row: usize,
        expected: usize,
        actual: usize,
    },
    #[error("row {row}: element {index} is {value}, not a finite number")]
    NonFinite {
        row: usize,
        index: usize,
        value: f64,
    },
    #[error("row {row}: element {index} = {value} is outside the f32 range")]
    OutOfRange {
        row: usize,
        index: usize,
        value: f64,
    },
    #[error("row {row}: list offsets point outside the element array")]
    OffsetsOutOfBounds { row: usize },
}

/// How to decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Require this dimension (e.g. the index's `dim`).
    pub expected_dim: Option<usize>,
    /// Skip null / non-finite rows and record them instead of failing.
    pub skip_invalid: bool,
}

/// Decoded vectors, row-major.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecodedVectors {
    /// `(rows - skipped) × dim` values.
    pub values: Vec<f32>,
    /// The dimension: `expected_dim`, else the first valid row's, else 0
    /// when no row was valid.
    pub dim: usize,
    /// Ascending positions of the rows that were skipped (only with
    /// `skip_invalid`).
    pub skipped_rows: Vec<usize>,
}

/// Decodes `array` into row-major f32 values and the dimension, failing on
/// the first invalid row.
///
/// # Errors
/// Any [`VectorColumnError`], naming the row (and element) concerned.
pub fn to_f32_rows(
    array: &dyn Array,
    expected_dim: Option<usize>,
) -> Result<(Vec<f32>, usize), VectorColumnError> {
    let decoded = decode(
        array,
        &DecodeOptions {
            expected_dim,
            skip_invalid: false,
        },
    )?;
    Ok((decoded.values, decoded.dim))
}

/// Decodes `array` with `options`.
///
/// # Errors
/// `WrongType`/`BinaryWidth` for an unsupported type, dimension errors
/// always, and the per-row errors unless `skip_invalid`.
pub fn decode(
    array: &dyn Array,
    options: &DecodeOptions,
) -> Result<DecodedVectors, VectorColumnError> {
    let mut decoder = Decoder::new(options);
    match array.data_type() {
        DataType::List(_) => decode_list(array.as_list::<i32>(), &mut decoder)?,
        DataType::LargeList(_) => decode_list(array.as_list::<i64>(), &mut decoder)?,
        DataType::FixedSizeList(_, _) => {
            let list = array.as_fixed_size_list();
            let elements = Elements::new(list.values().as_ref())?;
            let len = usize::try_from(list.value_length()).unwrap_or(0);
            for row in 0..list.len() {
                if list.is_null(row) {
                    decoder.invalid(row, VectorColumnError::NullVector { row })?;
                } else {
                    let start = list.value_offset_at(row);
                    decoder.push_elements(row, &elements, start, len)?;
                }
            }
        }
        DataType::FixedSizeBinary(width) => {
            let width = *width;
            if width <= 0 || width % 4 != 0 {
                return Err(VectorColumnError::BinaryWidth { width });
            }
            let binary: &FixedSizeBinaryArray = array.as_fixed_size_binary();
            for row in 0..binary.len() {
                if binary.is_null(row) {
                    decoder.invalid(row, VectorColumnError::NullVector { row })?;
                } else {
                    decoder.push_le_bytes(row, binary.value(row))?;
                }
            }
        }
        other => {
            return Err(VectorColumnError::WrongType {
                found: other.to_string(),
            });
        }
    }
    Ok(decoder.finish())
}

fn decode_list<O: OffsetSizeTrait>(
    list: &arrow::array::GenericListArray<O>,
    decoder: &mut Decoder,
) -> Result<(), VectorColumnError> {
    let elements = Elements::new(list.values().as_ref())?;
    for (row, window) in list.value_offsets().windows(2).enumerate() {
        if list.is_null(row) {
            decoder.invalid(row, VectorColumnError::NullVector { row })?;
            continue;
        }
        let (Some(start), Some(end)) = (window[0].to_usize(), window[1].to_usize()) else {
            return Err(VectorColumnError::OffsetsOutOfBounds { row });
        };
        decoder.push_elements(row, &elements, start, end.saturating_sub(start))?;
    }
    Ok(())
}

/// The element array of a list type.
enum Elements<'a> {
    F16(&'a Float16Array),
    F32(&'a Float32Array),
    F64(&'a Float64Array),
}

impl<'a> Elements<'a> {
    fn new(values: &'a dyn Array) -> Result<Elements<'a>, VectorColumnError> {
        match values.data_type() {
            DataType::Float16 => Ok(Elements::F16(values.as_primitive::<Float16Type>())),
            DataType::Float32 => Ok(Elements::F32(values.as_primitive::<Float32Type>())),
            DataType::Float64 => Ok(Elements::F64(values.as_primitive::<Float64Type>())),
            other => Err(VectorColumnError::WrongType {
                found: format!("list of {other}"),
            }),
        }
    }

    fn array(&self) -> &dyn Array {
        match self {
            Elements::F16(a) => *a,
            Elements::F32(a) => *a,
            Elements::F64(a) => *a,
        }
    }
}

/// Where the expected dimension came from.
#[derive(Clone, Copy)]
enum DimSource {
    Caller,
    Row(usize),
}

struct Decoder {
    values: Vec<f32>,
    dim: Option<(usize, DimSource)>,
    skip_invalid: bool,
    skipped_rows: Vec<usize>,
}

impl Decoder {
    fn new(options: &DecodeOptions) -> Decoder {
        Decoder {
            values: Vec::new(),
            dim: options.expected_dim.map(|d| (d, DimSource::Caller)),
            skip_invalid: options.skip_invalid,
            skipped_rows: Vec::new(),
        }
    }

    fn invalid(&mut self, row: usize, error: VectorColumnError) -> Result<(), VectorColumnError> {
        if self.skip_invalid {
            self.skipped_rows.push(row);
            Ok(())
        } else {
            Err(error)
        }
    }

    fn check_dim(&mut self, row: usize, actual: usize) -> Result<(), VectorColumnError> {
        match self.dim {
            Some((expected, _)) if expected == actual => Ok(()),
            Some((expected, DimSource::Caller)) => Err(VectorColumnError::DimensionMismatch {
                row,
                expected,
                actual,
            }),
            Some((first, DimSource::Row(first_row))) => Err(VectorColumnError::MixedDimension {
                row,
                actual,
                first_row,
                first,
            }),
            None if actual == 0 => Err(VectorColumnError::ZeroDimension { row }),
            None => {
                self.dim = Some((actual, DimSource::Row(row)));
                Ok(())
            }
        }
    }

    fn push_elements(
        &mut self,
        row: usize,
        elements: &Elements,
        start: usize,
        len: usize,
    ) -> Result<(), VectorColumnError> {
        self.check_dim(row, len)?;
        let array = elements.array();
        if start.checked_add(len).is_none_or(|end| end > array.len()) {
            return Err(VectorColumnError::OffsetsOutOfBounds { row });
        }
        if array.null_count() > 0
            && let Some(index) = (0..len).find(|&i| array.is_null(start + i))
        {
            return self.invalid(row, VectorColumnError::NullElement { row, index });
        }
        let first = self.values.len();
        let result = match elements {
            Elements::F16(a) => {
                let slice = &a.values()[start..start + len];
                self.values.extend(slice.iter().map(|v| v.to_f32()));
                match slice.iter().position(|v| !v.is_finite()) {
                    Some(index) => Err(VectorColumnError::NonFinite {
                        row,
                        index,
                        value: f64::from(slice[index]),
                    }),
                    None => Ok(()),
                }
            }
            Elements::F32(a) => {
                let slice = &a.values()[start..start + len];
                self.values.extend_from_slice(slice);
                match slice.iter().position(|v| !v.is_finite()) {
                    Some(index) => Err(VectorColumnError::NonFinite {
                        row,
                        index,
                        value: f64::from(slice[index]),
                    }),
                    None => Ok(()),
                }
            }
            Elements::F64(a) => convert_f64(row, &a.values()[start..start + len], &mut self.values),
        };
        self.keep_or_roll_back(row, first, result)
    }

    fn push_le_bytes(&mut self, row: usize, bytes: &[u8]) -> Result<(), VectorColumnError> {
        self.check_dim(row, bytes.len() / 4)?;
        let first = self.values.len();
        self.values.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        let result = match self.values[first..].iter().position(|v| !v.is_finite()) {
            Some(index) => Err(VectorColumnError::NonFinite {
                row,
                index,
                value: f64::from(self.values[first + index]),
            }),
            None => Ok(()),
        };
        self.keep_or_roll_back(row, first, result)
    }

    fn keep_or_roll_back(
        &mut self,
        row: usize,
        first: usize,
        result: Result<(), VectorColumnError>,
    ) -> Result<(), VectorColumnError> {
        match result {
            Ok(()) => Ok(()),
            Err(error) => {
                self.values.truncate(first);
                self.invalid(row, error)
            }
        }
    }

    fn finish(self) -> DecodedVectors {
        DecodedVectors {
            values: self.values,
            dim: self.dim.map_or(0, |(d, _)| d),
            skipped_rows: self.skipped_rows,
        }
    }
}

fn convert_f64(row: usize, source: &[f64], out: &mut Vec<f32>) -> Result<(), VectorColumnError> {
    for (index, &value) in source.iter().enumerate() {
        if !value.is_finite() {
            return Err(VectorColumnError::NonFinite { row, index, value });
        }
        #[allow(clippy::cast_possible_truncation)]
        // rounding to nearest is the documented conversion
        let narrowed = value as f32;
        if !narrowed.is_finite() {
            return Err(VectorColumnError::OutOfRange { row, index, value });
        }
        out.push(narrowed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{FixedSizeListArray, LargeListArray, ListArray};
    use arrow::buffer::NullBuffer;
    use arrow::datatypes::Field;

    use super::*;

    fn list_f32(rows: &[Option<Vec<Option<f32>>>]) -> ListArray {
        ListArray::from_iter_primitive::<Float32Type, _, _>(rows.iter().cloned())
    }

    fn fsl_f32(dim: i32, values: Vec<f32>, nulls: Option<Vec<bool>>) -> FixedSizeListArray {
        let field = Arc::new(Field::new("item", DataType::Float32, true));
        FixedSizeListArray::new(
            field,
            dim,
            Arc::new(Float32Array::from(values)),
            nulls.map(NullBuffer::from),
        )
    }

    fn skip() -> DecodeOptions {
        DecodeOptions {
            expected_dim: None,
            skip_invalid: true,
        }
    }

    #[test]
    fn list_float32_decodes_row_major() {
        let array = list_f32(&[
            Some(vec![Some(1.0), Some(2.0)]),
            Some(vec![Some(3.0), Some(4.0)]),
        ]);
        assert_eq!(
            to_f32_rows(&array, None).unwrap(),
            (vec![1.0, 2.0, 3.0, 4.0], 2)
        );
    }

    #[test]
    fn sliced_list_respects_offsets() {
        let array = list_f32(&[
            Some(vec![Some(1.0), Some(2.0)]),
            Some(vec![Some(3.0), Some(4.0)]),
            Some(vec![Some(5.0), Some(6.0)]),
        ]);
        let sliced = array.slice(1, 2);
        assert_eq!(
            to_f32_rows(&sliced, Some(2)).unwrap(),
            (vec![3.0, 4.0, 5.0, 6.0], 2)
        );
    }

    #[test]
    fn list_float64_is_rounded_to_nearest_f32() {
        let value = 0.1_f64;
        let array = ListArray::from_iter_primitive::<Float64Type, _, _>(vec![Some(vec![
            Some(value),
            Some(-2.5),
        ])]);
        let (values, dim) = to_f32_rows(&array, None).unwrap();
        assert_eq!(dim, 2);
        assert_eq!(values[0].to_bits(), 0.1_f32.to_bits());
        assert!((f64::from(values[0]) - value).abs() <= value * f64::from(f32::EPSILON) / 2.0);
        assert_eq!(values[1], -2.5);
    }

    #[test]
    fn large_list_decodes() {
        let array = LargeListArray::from_iter_primitive::<Float32Type, _, _>(vec![Some(vec![
            Some(1.5),
            Some(0.0),
            Some(-1.0),
        ])]);
        assert_eq!(
            to_f32_rows(&array, Some(3)).unwrap(),
            (vec![1.5, 0.0, -1.0], 3)
        );
    }

    #[test]
    fn fixed_size_list_float32_and_float64_decode() {
        let array = fsl_f32(2, vec![1.0, 2.0, 3.0, 4.0], None);
        assert_eq!(
            to_f32_rows(&array, None).unwrap(),
            (vec![1.0, 2.0, 3.0, 4.0], 2)
        );
        let field = Arc::new(Field::new("item", DataType::Float64, false));
        let array = FixedSizeListArray::new(
            field,
            3,
            Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])),
            None,
        );
        assert_eq!(to_f32_rows(&array, None).unwrap(), (vec![1.0, 2.0, 3.0], 3));
    }

    #[test]
    fn float16_elements_widen_exactly_and_non_finite_is_an_error() {
        use half::f16;
        let values = Float16Array::from(vec![f16::from_f32(0.5), f16::from_f32(-2.25)]);
        let field = Arc::new(Field::new("item", DataType::Float16, false));
        let array = FixedSizeListArray::new(field, 2, Arc::new(values), None);
        assert_eq!(to_f32_rows(&array, None).unwrap(), (vec![0.5, -2.25], 2));
        let array =
            arrow::array::ListArray::from_iter_primitive::<Float16Type, _, _>(vec![Some(vec![
                Some(f16::ONE),
                Some(f16::INFINITY),
            ])]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NonFinite {
                row: 0,
                index: 1,
                value: f64::INFINITY
            })
        );
    }

    #[test]
    fn fixed_size_binary_is_little_endian_f32() {
        let rows: Vec<Vec<u8>> = [[1.0_f32, -2.0], [0.5, 8.0]]
            .iter()
            .map(|r| r.iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect();
        let array = FixedSizeBinaryArray::try_from_iter(rows.into_iter()).unwrap();
        assert_eq!(
            to_f32_rows(&array, None).unwrap(),
            (vec![1.0, -2.0, 0.5, 8.0], 2)
        );
    }

    #[test]
    fn fixed_size_binary_width_must_be_multiple_of_four() {
        let array = FixedSizeBinaryArray::try_from_iter(vec![vec![0_u8; 6]].into_iter()).unwrap();
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::BinaryWidth { width: 6 })
        );
    }

    #[test]
    fn wrong_types_are_rejected() {
        let ints = arrow::array::Int32Array::from(vec![1, 2]);
        assert!(matches!(
            to_f32_rows(&ints, None),
            Err(VectorColumnError::WrongType { .. })
        ));
        let list_of_ints =
            ListArray::from_iter_primitive::<arrow::datatypes::Int32Type, _, _>(vec![Some(vec![
                Some(1),
            ])]);
        assert!(matches!(
            to_f32_rows(&list_of_ints, None),
            Err(VectorColumnError::WrongType { .. })
        ));
    }

    #[test]
    fn null_vector_is_an_error_naming_the_row() {
        let array = list_f32(&[Some(vec![Some(1.0)]), None]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NullVector { row: 1 })
        );
        let array = fsl_f32(1, vec![1.0, 2.0], Some(vec![true, false]));
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NullVector { row: 1 })
        );
    }

    #[test]
    fn null_element_is_an_error_naming_row_and_index() {
        let array = list_f32(&[
            Some(vec![Some(1.0), Some(2.0)]),
            Some(vec![Some(1.0), None]),
        ]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NullElement { row: 1, index: 1 })
        );
    }

    #[test]
    fn mixed_dimension_names_both_rows() {
        let array = list_f32(&[Some(vec![Some(1.0), Some(2.0)]), Some(vec![Some(1.0)])]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::MixedDimension {
                row: 1,
                actual: 1,
                first_row: 0,
                first: 2
            })
        );
    }

    #[test]
    fn expected_dimension_is_enforced() {
        let array = fsl_f32(2, vec![1.0, 2.0], None);
        assert_eq!(
            to_f32_rows(&array, Some(3)),
            Err(VectorColumnError::DimensionMismatch {
                row: 0,
                expected: 3,
                actual: 2
            })
        );
    }

    #[test]
    fn empty_vector_is_zero_dimension() {
        let array = list_f32(&[Some(vec![])]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::ZeroDimension { row: 0 })
        );
    }

    #[test]
    fn nan_and_infinity_are_errors() {
        let array = list_f32(&[Some(vec![Some(1.0), Some(f32::NAN)])]);
        assert!(matches!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NonFinite { row: 0, index: 1, value }) if value.is_nan()
        ));
        let bytes: Vec<u8> = [f32::INFINITY, 1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let array = FixedSizeBinaryArray::try_from_iter(vec![bytes].into_iter()).unwrap();
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NonFinite {
                row: 0,
                index: 0,
                value: f64::INFINITY
            })
        );
        let array = ListArray::from_iter_primitive::<Float64Type, _, _>(vec![Some(vec![Some(
            f64::NEG_INFINITY,
        )])]);
        assert!(matches!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::NonFinite {
                row: 0,
                index: 0,
                ..
            })
        ));
    }

    #[test]
    fn f64_beyond_f32_range_is_out_of_range() {
        let array = ListArray::from_iter_primitive::<Float64Type, _, _>(vec![Some(vec![
            Some(1.0),
            Some(1e300),
        ])]);
        assert_eq!(
            to_f32_rows(&array, None),
            Err(VectorColumnError::OutOfRange {
                row: 0,
                index: 1,
                value: 1e300
            })
        );
    }

    #[test]
    fn skip_invalid_drops_and_counts_rows() {
        let array = list_f32(&[
            Some(vec![Some(1.0), Some(2.0)]),
            None,
            Some(vec![Some(f32::NAN), Some(0.0)]),
            Some(vec![Some(3.0), None]),
            Some(vec![Some(5.0), Some(6.0)]),
        ]);
        let decoded = decode(&array, &skip()).unwrap();
        assert_eq!(decoded.values, vec![1.0, 2.0, 5.0, 6.0]);
        assert_eq!(decoded.dim, 2);
        assert_eq!(decoded.skipped_rows, vec![1, 2, 3]);
    }

    #[test]
    fn skip_invalid_never_skips_a_dimension_mismatch() {
        let array = list_f32(&[Some(vec![Some(1.0), Some(2.0)]), Some(vec![Some(1.0)])]);
        assert!(matches!(
            decode(&array, &skip()),
            Err(VectorColumnError::MixedDimension { .. })
        ));
    }

    #[test]
    fn all_rows_skipped_gives_dimension_zero_or_expected() {
        let array = list_f32(&[None]);
        let decoded = decode(&array, &skip()).unwrap();
        assert_eq!(
            (decoded.values.len(), decoded.dim, decoded.skipped_rows),
            (0, 0, vec![0])
        );
        let decoded = decode(
            &array,
            &DecodeOptions {
                expected_dim: Some(4),
                skip_invalid: true,
            },
        )
        .unwrap();
        assert_eq!(decoded.dim, 4);
    }
}
