//! The layers of a refreshed snapshot (`index.json` key `layers`, format
//! version 3) and its deletion object (`deletions.parquet`).
//!
//! A refresh does not rewrite the base: it writes a **delta** postings table
//! (a complete `ivf_postings` table, with its own `manifest.json` and
//! `footers.json`) holding the new rows assigned to the base's centroids, and
//! a deletion object naming the rowids that are gone. Its `index.json` names
//! every layer a reader must probe:
//!
//! ```text
//! layer 0   base      snapshots/<b>/   centroids, quantizer, postings   pins: the base commit's
//! layer 1   delta 1   snapshots/<r1>/postings/                          pins: manifest + footers
//! layer n   delta n   snapshots/<rn>/postings/                          (this snapshot, when it added rows)
//!           deletions snapshots/<rn>/deletions.parquet                  (always this snapshot's own)
//! ```
//!
//! Every referenced document is pinned here by size and sha256, and the
//! commit pins `index.json`: what a reader opens is fixed by the commit,
//! whichever folder it lies in. References are index-relative snapshot
//! folders (`snapshots/<id>`), the form commits use.
//!
//! A deletion is `(rowid, before-layer)`: the rows with that rowid in layers
//! `0 .. before-layer` are gone. An update is a deletion before the delta that
//! holds the new version, so the new version stays visible. Deletions are
//! cumulative; `compact` folds everything into a new base and clears them.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt32Type};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::format::pin::Pin;
use crate::store::uri::RelativeLocation;

/// The deletion object of a refreshed snapshot, relative to its folder.
pub const DELETIONS_FILE: &str = "deletions.parquet";
/// The deletion object's columns.
pub const DELETED_ROWID: &str = "rowid";
pub const DELETED_BEFORE_LAYER: &str = "before_layer";

/// `layers` of a refreshed snapshot's `index.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Layers {
    /// Layer 0: the snapshot holding the centroids, the quantiser and the
    /// base postings; `pins` are its commit's pins (paths relative to it).
    pub base: LayerRef,
    /// Layers 1..: delta postings tables, oldest first; `pins` are the
    /// delta's `postings/manifest.json` and `postings/footers.json`.
    #[serde(default)]
    pub deltas: Vec<DeltaRef>,
    /// The deletion object (in this snapshot's folder).
    pub deletions: DeletionsRef,
}

/// A referenced snapshot folder and the pins of what is read from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LayerRef {
    /// `snapshots/<id>`, relative to the index location.
    pub snapshot: String,
    pub pins: Vec<Pin>,
}

/// One delta postings table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DeltaRef {
    /// `snapshots/<id>`, relative to the index location.
    pub snapshot: String,
    /// Rows in the delta table.
    pub rows: u64,
    pub pins: Vec<Pin>,
}

/// The deletion object: its row count and pin (path relative to this
/// snapshot's folder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DeletionsRef {
    pub rows: u64,
    pub pin: Pin,
}

/// A `layers` block or deletion object that breaks a rule.
#[derive(Debug, Error)]
pub enum LayersError {
    #[error("index.json: layers: {what} {snapshot:?} is not a snapshot folder (snapshots/<id>)")]
    BadSnapshot {
        what: &'static str,
        snapshot: String,
    },
    #[error("index.json: layers: {what} {snapshot:?} has no pin for {path:?}")]
    MissingPin {
        what: &'static str,
        snapshot: String,
        path: String,
    },
    #[error("index.json: layers: snapshot {snapshot:?} is named twice")]
    Repeated { snapshot: String },
    #[error("index.json: layers: the deletion object must be {expected:?}, found {found:?}")]
    DeletionsPath { expected: String, found: String },
    #[error("{path}: not a deletion object: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: holds {found} deletions, index.json says {expected}")]
    RowCount {
        path: String,
        expected: u64,
        found: u64,
    },
    #[error(
        "{path}: row {row}: rowid {rowid} is not above the previous one (rowids must be strictly ascending)"
    )]
    Unsorted {
        path: String,
        row: usize,
        rowid: i64,
    },
    #[error(
        "{path}: row {row}: before_layer {before_layer} is outside 1..={layers} (the snapshot has {layers} layers)"
    )]
    BadLayer {
        path: String,
        row: usize,
        before_layer: u32,
        layers: u32,
    },
}

fn is_snapshot_folder(s: &str) -> bool {
    RelativeLocation::parse(s).is_ok() && s.split('/').count() == 2 && s.starts_with("snapshots/")
}

impl Layers {
    /// Number of layers (the base and every delta).
    pub fn count(&self) -> u32 {
        1 + self.deltas.len() as u32
    }

    /// Checks the references: snapshot folders of the `snapshots/<id>` form,
    /// none twice, the pins a reader needs present.
    ///
    /// # Errors
    /// The first violated rule.
    pub fn validate(
        &self,
        base_documents: &[String],
        delta_documents: &[String],
    ) -> Result<(), LayersError> {
        let check = |what, r: &str, pins: &[Pin], needed: &[String]| {
            if !is_snapshot_folder(r) {
                return Err(LayersError::BadSnapshot {
                    what,
                    snapshot: r.to_string(),
                });
            }
            match needed.iter().find(|n| !pins.iter().any(|p| &p.path == *n)) {
                Some(path) => Err(LayersError::MissingPin {
                    what,
                    snapshot: r.to_string(),
                    path: path.clone(),
                }),
                None => Ok(()),
            }
        };
        check("base", &self.base.snapshot, &self.base.pins, base_documents)?;
        let mut seen = vec![self.base.snapshot.as_str()];
        for d in &self.deltas {
            check("delta", &d.snapshot, &d.pins, delta_documents)?;
            if seen.contains(&d.snapshot.as_str()) {
                return Err(LayersError::Repeated {
                    snapshot: d.snapshot.clone(),
                });
            }
            seen.push(&d.snapshot);
        }
        if self.deletions.pin.path != DELETIONS_FILE {
            return Err(LayersError::DeletionsPath {
                expected: DELETIONS_FILE.into(),
                found: self.deletions.pin.path.clone(),
            });
        }
        Ok(())
    }
}

/// The deleted rowids of a snapshot: `(rowid, before-layer)`, ascending by
/// rowid, each rowid once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deletions {
    rowids: Vec<i64>,
    before_layer: Vec<u32>,
}

impl Deletions {
    /// No deletions.
    pub fn new() -> Deletions {
        Deletions::default()
    }

    /// Number of deleted rowids.
    pub fn len(&self) -> usize {
        self.rowids.len()
    }

    /// True without deletions.
    pub fn is_empty(&self) -> bool {
        self.rowids.is_empty()
    }

    /// The deleted rowids, ascending.
    pub fn rowids(&self) -> &[i64] {
        &self.rowids
    }

    /// Whether the row `rowid` of layer `layer` is deleted.
    #[inline]
    pub fn is_deleted(&self, rowid: i64, layer: u32) -> bool {
        match self.rowids.binary_search(&rowid) {
            Ok(i) => layer < self.before_layer[i],
            Err(_) => false,
        }
    }

    /// These deletions plus `removed` (any order, repeats allowed) deleted
    /// from every layer before `before_layer`. A rowid deleted twice keeps
    /// the later bound.
    pub fn with(&self, removed: &[i64], before_layer: u32) -> Deletions {
        let mut add: Vec<i64> = removed.to_vec();
        add.sort_unstable();
        add.dedup();
        let (mut rowids, mut layers) = (Vec::new(), Vec::new());
        let (mut i, mut j) = (0, 0);
        while i < self.rowids.len() || j < add.len() {
            let a = self.rowids.get(i).copied();
            let b = add.get(j).copied();
            match (a, b) {
                (Some(x), Some(y)) if x == y => {
                    rowids.push(x);
                    layers.push(self.before_layer[i].max(before_layer));
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x < y => {
                    rowids.push(x);
                    layers.push(self.before_layer[i]);
                    i += 1;
                }
                (Some(x), None) => {
                    rowids.push(x);
                    layers.push(self.before_layer[i]);
                    i += 1;
                }
                (_, Some(y)) => {
                    rowids.push(y);
                    layers.push(before_layer);
                    j += 1;
                }
                (None, None) => unreachable!("loop condition"),
            }
        }
        Deletions {
            rowids,
            before_layer: layers,
        }
    }

    /// These deletions with every bound above `max_layer` lowered to it:
    /// what stays true when the layers from `max_layer` on are rewritten
    /// as one (without the rows these deletions hid in them).
    pub fn clamped(&self, max_layer: u32) -> Deletions {
        Deletions {
            rowids: self.rowids.clone(),
            before_layer: self
                .before_layer
                .iter()
                .map(|&b| b.min(max_layer))
                .collect(),
        }
    }

    /// The Parquet bytes: columns `rowid` (int64) and `before_layer`
    /// (uint32), one row group, exact statistics, zstd.
    pub fn encode(&self) -> Bytes {
        let schema = Arc::new(deletions_schema());
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(self.rowids.clone())),
                Arc::new(UInt32Array::from(self.before_layer.clone())),
            ],
        )
        .expect("two non-null columns of equal length");
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_max_row_group_row_count(Some(self.rowids.len().max(1)))
            .set_max_row_group_bytes(None)
            .build();
        let mut out = Vec::new();
        let mut writer =
            ArrowWriter::try_new(&mut out, schema, Some(props)).expect("a valid schema");
        writer.write(&batch).expect("an in-memory write");
        writer.close().expect("an in-memory write");
        Bytes::from(out)
    }

    /// Parse and check a deletion object of a snapshot with `layers` layers
    /// that `index.json` says holds `rows` deletions.
    ///
    /// # Errors
    /// [`LayersError::Invalid`] for bytes that are not such a Parquet file,
    /// `RowCount`, `Unsorted`, `BadLayer`.
    pub fn decode(
        path: &str,
        bytes: Bytes,
        rows: u64,
        layers: u32,
    ) -> Result<Deletions, LayersError> {
        let invalid = |reason: String| LayersError::Invalid {
            path: path.to_string(),
            reason,
        };
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| invalid(e.to_string()))?;
        crate::format::check_columns(
            reader.schema(),
            &deletions_schema(),
            "rowid int64 and before_layer uint32",
        )
        .map_err(invalid)?;
        let mut out = Deletions::default();
        for batch in reader.build().map_err(|e| invalid(e.to_string()))? {
            let batch = batch.map_err(|e| invalid(e.to_string()))?;
            let (r, l) = (batch.column(0), batch.column(1));
            if r.null_count() > 0 || l.null_count() > 0 {
                return Err(invalid("a NULL rowid or before_layer".into()));
            }
            out.rowids
                .extend_from_slice(r.as_primitive::<Int64Type>().values());
            out.before_layer
                .extend_from_slice(l.as_primitive::<UInt32Type>().values());
        }
        if out.rowids.len() as u64 != rows {
            return Err(LayersError::RowCount {
                path: path.to_string(),
                expected: rows,
                found: out.rowids.len() as u64,
            });
        }
        if let Some(row) = out.rowids.windows(2).position(|w| w[0] >= w[1]) {
            return Err(LayersError::Unsorted {
                path: path.to_string(),
                row: row + 1,
                rowid: out.rowids[row + 1],
            });
        }
        if let Some(row) = out.before_layer.iter().position(|&l| l == 0 || l > layers) {
            return Err(LayersError::BadLayer {
                path: path.to_string(),
                row,
                before_layer: out.before_layer[row],
                layers,
            });
        }
        Ok(out)
    }
}

fn deletions_schema() -> Schema {
    Schema::new(vec![
        Field::new(DELETED_ROWID, DataType::Int64, false),
        Field::new(DELETED_BEFORE_LAYER, DataType::UInt32, false),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_hides_the_layers_before_its_bound_only() {
        let d = Deletions::new().with(&[7, 3, 7], 1).with(&[3, 9], 2);
        assert_eq!(d.rowids(), &[3, 7, 9]);
        assert!(d.is_deleted(3, 0) && d.is_deleted(3, 1) && !d.is_deleted(3, 2));
        assert!(d.is_deleted(7, 0) && !d.is_deleted(7, 1));
        assert!(!d.is_deleted(8, 0));
        // A later, smaller bound never undoes a deletion.
        assert!(d.with(&[3], 1).is_deleted(3, 1));
    }

    #[test]
    fn deletions_round_trip_and_every_rule_is_checked() {
        let d = Deletions::new().with(&[5, -2, 40], 2);
        let bytes = d.encode();
        assert_eq!(Deletions::decode("d", bytes.clone(), 3, 2).unwrap(), d);
        assert!(matches!(
            Deletions::decode("d", bytes.clone(), 4, 2),
            Err(LayersError::RowCount {
                expected: 4,
                found: 3,
                ..
            })
        ));
        assert!(matches!(
            Deletions::decode("d", bytes, 3, 1),
            Err(LayersError::BadLayer {
                before_layer: 2,
                layers: 1,
                ..
            })
        ));
        let unsorted = Deletions {
            rowids: vec![4, 4],
            before_layer: vec![1, 1],
        };
        assert!(matches!(
            Deletions::decode("d", unsorted.encode(), 2, 1),
            Err(LayersError::Unsorted {
                row: 1,
                rowid: 4,
                ..
            })
        ));
        assert!(matches!(
            Deletions::decode("d", Bytes::from_static(b"PAR1"), 0, 1),
            Err(LayersError::Invalid { .. })
        ));
        assert!(
            Deletions::decode("d", Deletions::new().encode(), 0, 1)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn layer_references_are_snapshot_folders_with_their_pins() {
        let pin = |p: &str| Pin::of(p, b"x");
        let base_docs = vec!["index.json".to_string()];
        let delta_docs = crate::format::definition::delta_documents();
        let mut layers = Layers {
            base: LayerRef {
                snapshot: "snapshots/a".into(),
                pins: vec![pin("index.json")],
            },
            deltas: vec![DeltaRef {
                snapshot: "snapshots/b".into(),
                rows: 3,
                pins: delta_docs.iter().map(|p| pin(p)).collect(),
            }],
            deletions: DeletionsRef {
                rows: 0,
                pin: pin(DELETIONS_FILE),
            },
        };
        layers.validate(&base_docs, &delta_docs).unwrap();
        assert_eq!(layers.count(), 2);
        layers.deltas[0].snapshot = "snapshots/a".into();
        assert!(matches!(
            layers.validate(&base_docs, &delta_docs),
            Err(LayersError::Repeated { .. })
        ));
        layers.deltas[0].snapshot = "../b".into();
        assert!(matches!(
            layers.validate(&base_docs, &delta_docs),
            Err(LayersError::BadSnapshot { .. })
        ));
        layers.deltas[0].snapshot = "snapshots/b".into();
        layers.deltas[0].pins.pop();
        assert!(matches!(
            layers.validate(&base_docs, &delta_docs),
            Err(LayersError::MissingPin { .. })
        ));
    }
}
