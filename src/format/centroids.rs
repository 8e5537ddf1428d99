//! The `ivf_centroids` table: the root and leaf centroids of a trained
//! [`Hierarchy`] as ONE small Parquet object, read with one GET when an index
//! opens.
//!
//! Columns (one row per centroid, roots first then leaves, each by id):
//! `level` INT32 (0 = root, 1 = leaf), `id` INT32 (root id, or leaf CID),
//! `parent` INT32 (the owning root of a leaf; a root's own id), `centroid`
//! FIXED_LEN_BYTE_ARRAY(dim·4), little-endian f32. Key-value metadata:
//! `parqivf.format-version`, `parqivf.dim`. A root's leaves are contiguous
//! CIDs, so `cid-offsets` follows from the `parent` column.

use crate::distance::Metric;
use crate::format::postings_table::{KV_DIM, KV_FORMAT_VERSION};
use crate::kmeans::Hierarchy;
use arrow::array::{Array, AsArray, FixedSizeBinaryArray, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int32Type, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use std::sync::Arc;
use thiserror::Error;

/// The centroids format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Centroids errors.
#[derive(Debug, Error)]
pub enum CentroidsError {
    #[error("{path}: not a readable centroids Parquet object: {detail}")]
    Parquet { path: String, detail: String },
    #[error("{path}: centroids format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: String,
        supported: u32,
    },
    #[error("{path}: {what} is {found}, expected {expected}")]
    Mismatch {
        path: String,
        what: &'static str,
        expected: u64,
        found: u64,
    },
    #[error(
        "{path}: row {row} is out of order or malformed (level {level}, id {id}, parent {parent})"
    )]
    Malformed {
        path: String,
        row: usize,
        level: i32,
        id: i32,
        parent: i32,
    },
}

/// Encode `h` as the `ivf_centroids` Parquet object.
///
/// # Errors
/// [`CentroidsError::Parquet`] if the writer fails; [`CentroidsError::Mismatch`]
/// if `h`'s arrays do not match its `dim` and `cid_offsets`.
pub fn encode(h: &Hierarchy) -> Result<Bytes, CentroidsError> {
    let path = "<centroids>";
    let perr = |e: &dyn std::fmt::Display| CentroidsError::Parquet {
        path: path.into(),
        detail: e.to_string(),
    };
    let nroots = h.cid_offsets.len().saturating_sub(1);
    let nlist = h.cid_offsets.last().copied().unwrap_or(0) as usize;
    for (what, expected, found) in [
        ("root values", nroots * h.dim, h.roots.len()),
        ("leaf values", nlist * h.dim, h.leaves.len()),
    ] {
        if expected != found {
            return Err(CentroidsError::Mismatch {
                path: path.into(),
                what,
                expected: expected as u64,
                found: found as u64,
            });
        }
    }
    let (mut level, mut id, mut parent) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..nroots {
        level.push(0);
        id.push(r as i32);
        parent.push(r as i32);
    }
    for r in 0..nroots {
        for cid in h.cid_offsets[r]..h.cid_offsets[r + 1] {
            level.push(1);
            id.push(cid as i32);
            parent.push(r as i32);
        }
    }
    let bytes: Vec<u8> = h
        .roots
        .iter()
        .chain(&h.leaves)
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let width = (h.dim * 4) as i32;
    let vectors = FixedSizeBinaryArray::try_new(width, bytes.into(), None).map_err(|e| perr(&e))?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("level", DataType::Int32, false),
        Field::new("id", DataType::Int32, false),
        Field::new("parent", DataType::Int32, false),
        Field::new("centroid", DataType::FixedSizeBinary(width), false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int32Array::from(level)),
            Arc::new(Int32Array::from(id)),
            Arc::new(Int32Array::from(parent)),
            Arc::new(vectors),
        ],
    )
    .map_err(|e| perr(&e))?;
    let props = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![
            KeyValue::new(KV_FORMAT_VERSION.into(), FORMAT_VERSION.to_string()),
            KeyValue::new(KV_DIM.into(), h.dim.to_string()),
        ]))
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, schema, Some(props)).map_err(|e| perr(&e))?;
    writer.write(&batch).map_err(|e| perr(&e))?;
    writer.close().map_err(|e| perr(&e))?;
    Ok(Bytes::from(buf))
}

/// Decode the centroids object `bytes` (named `path` in errors) for an index
/// of dimension `dim` and `metric`.
///
/// # Errors
/// [`CentroidsError::Incompatible`] for an unknown version;
/// [`CentroidsError::Mismatch`] for a wrong dimension;
/// [`CentroidsError::Malformed`] for rows out of order; `Parquet` otherwise.
pub fn decode(
    path: &str,
    bytes: Bytes,
    dim: usize,
    metric: Metric,
) -> Result<Hierarchy, CentroidsError> {
    let perr = |e: &dyn std::fmt::Display| CentroidsError::Parquet {
        path: path.into(),
        detail: e.to_string(),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| perr(&e))?;
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default();
    let get = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
    let version = get(KV_FORMAT_VERSION).unwrap_or_default();
    if version != FORMAT_VERSION.to_string() {
        return Err(CentroidsError::Incompatible {
            path: path.into(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let file_dim = get(KV_DIM).and_then(|d| d.parse::<u64>().ok()).unwrap_or(0);
    if file_dim != dim as u64 {
        return Err(CentroidsError::Mismatch {
            path: path.into(),
            what: "dim",
            expected: dim as u64,
            found: file_dim,
        });
    }
    let reader = builder.build().map_err(|e| perr(&e))?;
    let (mut roots, mut leaves, mut parents) = (Vec::new(), Vec::new(), Vec::<u32>::new());
    let mut row = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| perr(&e))?;
        let int = |i: usize| batch.column(i).as_primitive_opt::<Int32Type>().cloned();
        let (Some(level), Some(id), Some(parent), Some(vec)) = (
            int(0),
            int(1),
            int(2),
            batch.column(3).as_fixed_size_binary_opt(),
        ) else {
            return Err(perr(
                &"columns must be level, id, parent: Int32, centroid: FixedSizeBinary",
            ));
        };
        if vec.value_length() as usize != dim * 4 {
            return Err(CentroidsError::Mismatch {
                path: path.into(),
                what: "centroid width",
                expected: (dim * 4) as u64,
                found: vec.value_length() as u64,
            });
        }
        for i in 0..batch.num_rows() {
            let (l, c, p) = (level.value(i), id.value(i), parent.value(i));
            let nroots = roots.len() / dim.max(1);
            // Roots first (id = position, parent = itself), then leaves
            // (id = CID in order, parents non-decreasing and existing).
            let ok = match l {
                0 => parents.is_empty() && c as i64 == nroots as i64 && p == c,
                1 => {
                    c as i64 == parents.len() as i64
                        && p >= 0
                        && (p as usize) < nroots
                        && parents.last().is_none_or(|&q| q <= p as u32)
                }
                _ => false,
            };
            if !ok || vec.is_null(i) {
                return Err(CentroidsError::Malformed {
                    path: path.into(),
                    row,
                    level: l,
                    id: c,
                    parent: p,
                });
            }
            let v = vec
                .value(i)
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            if l == 0 {
                roots.extend(v);
            } else {
                leaves.extend(v);
                parents.push(p as u32);
            }
            row += 1;
        }
    }
    let nroots = roots.len() / dim.max(1);
    let cid_offsets = (0..=nroots)
        .map(|r| parents.partition_point(|&q| (q as usize) < r) as u32)
        .collect();
    Ok(Hierarchy {
        dim,
        metric,
        roots,
        leaves,
        cid_offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hierarchy() -> Hierarchy {
        Hierarchy {
            dim: 2,
            metric: Metric::L2,
            roots: vec![0.0, 0.0, 5.0, 5.0, 9.0, 9.0],
            leaves: vec![-1.0, 0.0, 1.0, 0.0, 5.0, 5.5, 9.0, 9.5],
            cid_offsets: vec![0, 2, 3, 4],
        }
    }

    #[test]
    fn round_trips_roots_leaves_and_offsets() {
        let h = hierarchy();
        let bytes = encode(&h).unwrap();
        assert_eq!(decode("c", bytes, 2, Metric::L2).unwrap(), h);
    }

    #[test]
    fn empty_root_keeps_its_offset() {
        let mut h = hierarchy();
        h.cid_offsets = vec![0, 2, 2, 4];
        let bytes = encode(&h).unwrap();
        assert_eq!(
            decode("c", bytes, 2, Metric::L2).unwrap().cid_offsets,
            vec![0, 2, 2, 4]
        );
    }

    #[test]
    fn wrong_dim_is_a_typed_mismatch() {
        let bytes = encode(&hierarchy()).unwrap();
        match decode("c", bytes, 3, Metric::L2) {
            Err(CentroidsError::Mismatch {
                what: "dim",
                expected: 3,
                found: 2,
                ..
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn inconsistent_hierarchy_is_refused_on_encode() {
        let mut h = hierarchy();
        h.leaves.pop();
        assert!(matches!(
            encode(&h),
            Err(CentroidsError::Mismatch {
                what: "leaf values",
                ..
            })
        ));
    }
}
