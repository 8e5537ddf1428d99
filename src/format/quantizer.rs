//! `quantizer.json`: the parameters of the codes in the postings' `code`
//! column, one per snapshot, written before the manifest and named by
//! `index.json` (`quantizer`). Parsed strictly: `format-version` first, then
//! unknown and missing keys, then the values, and the rebuilt
//! [`Quantizer`] must match what the document records (the code width, and
//! for `rabitq4` the sha256 of the rotation regenerated from its seed). The
//! JSON Schema is `manifests/quantizer.schema.json`.
//!
//! ```json
//! {"format-version": 1, "scheme": "rabitq4", "dim": 128, "code-bytes": 72,
//!  "residual": "leaf-centroid",
//!  "rotation": {"seed": 1234, "sha256": "…"}}
//! {"format-version": 1, "scheme": "sq8", "dim": 128, "code-bytes": 136,
//!  "residual": "leaf-centroid", "ranges": {"min": […], "scale": […]}}
//! {"format-version": 1, "scheme": "pq4fs", "dim": 128, "code-bytes": 40,
//!  "residual": "leaf-centroid",
//!  "codebooks": {"sub-dims": 2, "centroids": […]}}
//! ```

use crate::quant::{QuantError, Quantizer, Scheme};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// File name of the quantiser parameters in a snapshot folder.
pub const QUANTIZER_FILE: &str = "quantizer.json";
/// The `quantizer.json` format version this crate writes and reads.
pub const QUANTIZER_FORMAT_VERSION: u32 = 1;
/// What a code encodes: the residual of the vector to its leaf centroid.
pub const RESIDUAL_LEAF_CENTROID: &str = "leaf-centroid";

/// A `quantizer.json` that cannot be used.
#[derive(Debug, Error)]
pub enum QuantizerDocError {
    #[error("{path} is not a valid quantizer document: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: quantizer format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: u64,
        supported: u32,
    },
    #[error("{path}: the parameters do not make a quantizer: {source}")]
    Parameters {
        path: String,
        #[source]
        source: QuantError,
    },
    /// The document disagrees with the quantizer its parameters make, or
    /// with the index (`what` is the key).
    #[error("{path}: {what} is {found}, expected {expected}")]
    Mismatch {
        path: String,
        what: &'static str,
        expected: String,
        found: String,
    },
}

/// The document as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct QuantizerDoc {
    pub format_version: u32,
    /// `sq8`, `rabitq4` or `pq4fs`.
    pub scheme: String,
    pub dim: u32,
    /// Width of the `code` column.
    pub code_bytes: u32,
    /// Always [`RESIDUAL_LEAF_CENTROID`].
    pub residual: String,
    /// `rabitq4`: the rotation's seed and the sha256 of its f32 matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Rotation>,
    /// `sq8`: per-dimension ranges of the residuals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Ranges>,
    /// `pq4fs`: the centroids of every sub-quantiser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codebooks: Option<Codebooks>,
}

/// PQ codebooks: `m = sub_quantizers(dim)` sub-quantisers of `sub-dims`
/// consecutive dimensions, 16 centroids each; `centroids` holds
/// `m × 16 × sub-dims` values, sub-quantiser-major.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Codebooks {
    pub sub_dims: u32,
    pub centroids: Vec<f32>,
}

/// A seeded random rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Rotation {
    pub seed: u64,
    /// Lowercase hex sha256 of the dim × dim f32 little-endian matrix.
    pub sha256: String,
}

/// SQ8 ranges: code `u` of dimension `i` decodes to `min[i] + scale[i]·u`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ranges {
    pub min: Vec<f32>,
    pub scale: Vec<f32>,
}

/// The document describing `q`.
pub fn document(q: &Quantizer) -> QuantizerDoc {
    QuantizerDoc {
        format_version: QUANTIZER_FORMAT_VERSION,
        scheme: q.scheme().to_string(),
        dim: q.dim() as u32,
        code_bytes: q.code_bytes() as u32,
        residual: RESIDUAL_LEAF_CENTROID.to_string(),
        rotation: q.rotation_seed().map(|seed| Rotation {
            seed,
            sha256: q.rotation_sha256().unwrap_or_default(),
        }),
        ranges: q.sq8_ranges().map(|(min, scale)| Ranges {
            min: min.to_vec(),
            scale: scale.to_vec(),
        }),
        codebooks: q.pq4_centroids().map(|centroids| Codebooks {
            sub_dims: crate::quant::PQ_SUB_DIMS as u32,
            centroids: centroids.to_vec(),
        }),
    }
}

/// The bytes written for `q` (pretty JSON, newline-terminated).
pub fn encode(q: &Quantizer) -> Vec<u8> {
    let mut text = serde_json::to_string_pretty(&document(q)).unwrap_or_default();
    text.push('\n');
    text.into_bytes()
}

/// Parse `bytes` (the object at `path`) into the quantizer it describes,
/// checking it is for `dim`-dimensional vectors.
///
/// # Errors
/// [`QuantizerDocError::Incompatible`] for an unknown version,
/// [`QuantizerDocError::Invalid`] for malformed JSON, unknown or missing
/// keys, or a scheme without its parameters; [`QuantizerDocError::Parameters`]
/// for parameters the quantizer refuses; [`QuantizerDocError::Mismatch`] when
/// the dimension, code width or rotation checksum disagree.
pub fn decode(path: &str, bytes: &[u8], dim: usize) -> Result<Quantizer, QuantizerDocError> {
    let invalid = |reason: String| QuantizerDocError::Invalid {
        path: path.to_string(),
        reason,
    };
    let value = super::versioned_json(bytes, QUANTIZER_FORMAT_VERSION).map_err(|e| match e {
        super::VersionError::Invalid(reason) => invalid(reason),
        super::VersionError::Incompatible(found) => QuantizerDocError::Incompatible {
            path: path.to_string(),
            found,
            supported: QUANTIZER_FORMAT_VERSION,
        },
    })?;
    let doc: QuantizerDoc = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    let mismatch =
        |what: &'static str, expected: String, found: String| QuantizerDocError::Mismatch {
            path: path.to_string(),
            what,
            expected,
            found,
        };
    if doc.residual != RESIDUAL_LEAF_CENTROID {
        return Err(mismatch(
            "residual",
            RESIDUAL_LEAF_CENTROID.into(),
            doc.residual,
        ));
    }
    if doc.dim as usize != dim {
        return Err(mismatch("dim", dim.to_string(), doc.dim.to_string()));
    }
    let scheme: Scheme = doc
        .scheme
        .parse()
        .map_err(|_| invalid(format!("unknown scheme {:?}", doc.scheme)))?;
    let params = |source| QuantizerDocError::Parameters {
        path: path.to_string(),
        source,
    };
    let q = match (scheme, &doc.rotation, doc.ranges, doc.codebooks) {
        (Scheme::Sq8, None, Some(r), None) => {
            Quantizer::sq8_from_ranges(r.min, r.scale).map_err(params)?
        }
        (Scheme::Pq4Fs, None, None, Some(books)) => {
            if books.sub_dims as usize != crate::quant::PQ_SUB_DIMS {
                return Err(mismatch(
                    "codebooks.sub-dims",
                    crate::quant::PQ_SUB_DIMS.to_string(),
                    books.sub_dims.to_string(),
                ));
            }
            Quantizer::pq4_from_centroids(dim, books.centroids).map_err(params)?
        }
        (Scheme::RaBitQ4, Some(rotation), None, None) => {
            let q = Quantizer::rabitq4(dim, rotation.seed).map_err(params)?;
            let regenerated = q.rotation_sha256().unwrap_or_default();
            if regenerated != rotation.sha256 {
                return Err(mismatch(
                    "rotation.sha256",
                    regenerated,
                    rotation.sha256.clone(),
                ));
            }
            q
        }
        (scheme, _, _, _) => {
            return Err(invalid(format!(
                "scheme {scheme} needs {} and nothing else",
                match scheme {
                    Scheme::Sq8 => "ranges",
                    Scheme::RaBitQ4 => "rotation",
                    Scheme::Pq4Fs => "codebooks",
                }
            )));
        }
    };
    if q.dim() != dim {
        return Err(mismatch(
            "ranges length",
            dim.to_string(),
            q.dim().to_string(),
        ));
    }
    if q.code_bytes() != doc.code_bytes as usize {
        return Err(mismatch(
            "code-bytes",
            q.code_bytes().to_string(),
            doc.code_bytes.to_string(),
        ));
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_round_trips_through_the_document() {
        let sample: Vec<f32> = (0..64 * 8).map(|i| ((i * 37 % 101) as f32) / 7.0).collect();
        for q in [
            Quantizer::train_sq8(&sample, 8).unwrap(),
            Quantizer::rabitq4(8, 77).unwrap(),
            Quantizer::train_pq4(&sample, 8, 3).unwrap(),
        ] {
            let bytes = encode(&q);
            let back = decode("q.json", &bytes, 8).unwrap();
            assert_eq!(encode(&back), bytes);
            assert_eq!(back.code_bytes(), q.code_bytes());
        }
    }

    #[test]
    fn version_first_then_keys_then_values() {
        let q = Quantizer::rabitq4(8, 77).unwrap();
        let mut doc = serde_json::to_value(document(&q)).unwrap();
        doc["format-version"] = 9.into();
        doc["bogus"] = 1.into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(
            matches!(e, QuantizerDocError::Incompatible { found: 9, .. }),
            "{e}"
        );
        doc["format-version"] = 1.into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        doc.as_object_mut().unwrap().remove("bogus");
        let e = decode("q.json", doc.to_string().as_bytes(), 16).unwrap_err();
        assert!(e.to_string().contains("dim is 8, expected 16"), "{e}");
        doc["code-bytes"] = 3.into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(e.to_string().contains("code-bytes is 3"), "{e}");
        doc["code-bytes"] = (q.code_bytes() as u64).into();
        doc["rotation"]["sha256"] = "00".into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(e.to_string().contains("rotation.sha256 is 00"), "{e}");
        doc["scheme"] = "sq8".into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(e.to_string().contains("scheme sq8 needs ranges"), "{e}");
    }

    /// The examples in `manifests/examples` are documents this reader takes.
    #[test]
    fn the_examples_decode() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/examples");
        for (file, dim, scheme) in [
            ("quantizer-rabitq4.json", 128, Scheme::RaBitQ4),
            ("quantizer-pq4fs.json", 4, Scheme::Pq4Fs),
        ] {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            let q = decode(file, &bytes, dim).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(q.scheme(), scheme);
        }
    }

    #[test]
    fn pq4fs_codebooks_are_checked() {
        let sample: Vec<f32> = (0..64 * 8).map(|i| ((i * 37 % 101) as f32) / 7.0).collect();
        let q = Quantizer::train_pq4(&sample, 8, 3).unwrap();
        let mut doc = serde_json::to_value(document(&q)).unwrap();
        doc["codebooks"]["sub-dims"] = 4.into();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(e.to_string().contains("codebooks.sub-dims is 4"), "{e}");
        doc["codebooks"]["sub-dims"] = 2.into();
        doc["codebooks"]["centroids"].as_array_mut().unwrap().pop();
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(
            matches!(e, QuantizerDocError::Parameters { .. }) && e.to_string().contains("127"),
            "{e}"
        );
        doc.as_object_mut().unwrap().remove("codebooks");
        let e = decode("q.json", doc.to_string().as_bytes(), 8).unwrap_err();
        assert!(
            e.to_string().contains("scheme pq4fs needs codebooks"),
            "{e}"
        );
    }
}
