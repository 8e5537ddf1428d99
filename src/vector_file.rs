//! Reading dense vector files used by benchmarks and query input: `.npy`
//! (float32/float64, little-endian, C order, 2-D) and TEXMEX `.fvecs`/`.ivecs`
//! (per row an int32 dimension followed by that many f32/i32 values).
//!
//! The parsers work on bytes (testable without files); [`read_vectors`] and
//! [`read_ivecs`] are the IO edge. Every malformed input is a typed
//! [`VectorFileError`] naming the file and the numbers involved.

use std::path::Path;
use thiserror::Error;

/// A row-major matrix read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors<T> {
    pub data: Vec<T>,
    pub n: usize,
    pub dim: usize,
}

/// Errors reading a vector file.
#[derive(Debug, Error)]
pub enum VectorFileError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: unknown vector file extension (expected .npy, .fvecs or .ivecs)")]
    UnknownFormat { path: String },
    #[error("{path}: not a .npy file (bad magic or header)")]
    BadNpyHeader { path: String },
    #[error("{path}: unsupported .npy dtype {descr} (expected <f4 or <f8)")]
    UnsupportedDtype { path: String, descr: String },
    #[error("{path}: Fortran-ordered .npy arrays are not supported")]
    FortranOrder { path: String },
    #[error("{path}: expected a 2-D array with dim ≥ 1, got shape {shape:?}")]
    BadShape { path: String, shape: Vec<usize> },
    #[error("{path}: expected {expected} bytes of data, got {actual}")]
    Truncated {
        path: String,
        expected: usize,
        actual: usize,
    },
    #[error("{path}: row {row} has dimension {actual}, the first row has {expected}")]
    InconsistentDim {
        path: String,
        row: usize,
        expected: usize,
        actual: usize,
    },
}

/// Reads f32 vectors from a `.npy` (f32 or f64, converted) or `.fvecs` file,
/// chosen by extension.
///
/// # Errors
/// [`VectorFileError::Io`] when the file cannot be read,
/// [`VectorFileError::UnknownFormat`] for another extension, and the parse
/// errors of [`parse_npy`] / [`parse_fvecs`].
pub fn read_vectors(path: &Path) -> Result<Vectors<f32>, VectorFileError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| VectorFileError::Io {
        path: name.clone(),
        source,
    })?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => parse_npy(&bytes, &name),
        Some("fvecs") => parse_fvecs(&bytes, &name),
        _ => Err(VectorFileError::UnknownFormat { path: name }),
    }
}

/// Reads i32 vectors (e.g. ground-truth ids) from a TEXMEX `.ivecs` file.
///
/// # Errors
/// [`VectorFileError::Io`] and the errors of [`parse_ivecs`].
pub fn read_ivecs(path: &Path) -> Result<Vectors<i32>, VectorFileError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| VectorFileError::Io {
        path: name.clone(),
        source,
    })?;
    parse_ivecs(&bytes, &name)
}

/// Parses a `.npy` file (format versions 1–3) holding a 2-D little-endian
/// `<f4` or `<f8` array in C order; f64 values are rounded to f32.
///
/// # Errors
/// [`VectorFileError::BadNpyHeader`], [`VectorFileError::UnsupportedDtype`],
/// [`VectorFileError::FortranOrder`], [`VectorFileError::BadShape`],
/// [`VectorFileError::Truncated`] (also for trailing bytes).
pub fn parse_npy(bytes: &[u8], path: &str) -> Result<Vectors<f32>, VectorFileError> {
    let bad = || VectorFileError::BadNpyHeader {
        path: path.to_string(),
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad());
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err(bad()),
    };
    let header = bytes
        .get(hstart..hstart + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(bad)?;
    let descr = dict_value(header, "descr")
        .ok_or_else(bad)?
        .trim_matches(|c| c == '\'' || c == '"')
        .to_string();
    let width = match descr.as_str() {
        "<f4" => 4,
        "<f8" => 8,
        _ => {
            return Err(VectorFileError::UnsupportedDtype {
                path: path.to_string(),
                descr,
            });
        }
    };
    if dict_value(header, "fortran_order").ok_or_else(bad)? != "False" {
        return Err(VectorFileError::FortranOrder {
            path: path.to_string(),
        });
    }
    let shape_text = dict_value(header, "shape").ok_or_else(bad)?;
    let shape: Vec<usize> = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [n, dim] = shape[..] else {
        return Err(VectorFileError::BadShape {
            path: path.to_string(),
            shape,
        });
    };
    if dim == 0 {
        return Err(VectorFileError::BadShape {
            path: path.to_string(),
            shape,
        });
    }
    let body = &bytes[hstart + hlen..];
    let expected = n
        .checked_mul(dim)
        .and_then(|v| v.checked_mul(width))
        .ok_or_else(|| VectorFileError::BadShape {
            path: path.to_string(),
            shape: shape.clone(),
        })?;
    if body.len() != expected {
        return Err(VectorFileError::Truncated {
            path: path.to_string(),
            expected,
            actual: body.len(),
        });
    }
    let data = if width == 4 {
        body.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    } else {
        body.chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32)
            .collect()
    };
    Ok(Vectors { data, n, dim })
}

/// The raw text of `'key': value` in a .npy header dict (value up to the
/// next top-level comma or brace; tuples kept whole).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

/// Parses TEXMEX `.fvecs`.
///
/// # Errors
/// As [`parse_ivecs`].
pub fn parse_fvecs(bytes: &[u8], path: &str) -> Result<Vectors<f32>, VectorFileError> {
    parse_vecs(bytes, path, f32::from_le_bytes)
}

/// Parses TEXMEX `.ivecs`.
///
/// # Errors
/// [`VectorFileError::BadShape`] for a non-positive dimension,
/// [`VectorFileError::InconsistentDim`] when a row's dimension differs from
/// the first, [`VectorFileError::Truncated`] for a partial last row.
pub fn parse_ivecs(bytes: &[u8], path: &str) -> Result<Vectors<i32>, VectorFileError> {
    parse_vecs(bytes, path, i32::from_le_bytes)
}

fn parse_vecs<T>(
    bytes: &[u8],
    path: &str,
    decode: fn([u8; 4]) -> T,
) -> Result<Vectors<T>, VectorFileError> {
    let word = |at: usize| bytes.get(at..at + 4).map(|b| [b[0], b[1], b[2], b[3]]);
    let Some(first) = word(0) else {
        if bytes.is_empty() {
            return Ok(Vectors {
                data: Vec::new(),
                n: 0,
                dim: 0,
            });
        }
        return Err(VectorFileError::Truncated {
            path: path.to_string(),
            expected: 4,
            actual: bytes.len(),
        });
    };
    let d = i32::from_le_bytes(first);
    let dim =
        usize::try_from(d)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| VectorFileError::BadShape {
                path: path.to_string(),
                shape: vec![d.max(0) as usize],
            })?;
    let rec = 4 * (dim + 1);
    if !bytes.len().is_multiple_of(rec) {
        return Err(VectorFileError::Truncated {
            path: path.to_string(),
            expected: (bytes.len() / rec + 1) * rec,
            actual: bytes.len(),
        });
    }
    let n = bytes.len() / rec;
    let mut data = Vec::with_capacity(n * dim);
    for (row, r) in bytes.chunks_exact(rec).enumerate() {
        let rd = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        if rd != d {
            return Err(VectorFileError::InconsistentDim {
                path: path.to_string(),
                row,
                expected: dim,
                actual: rd.max(0) as usize,
            });
        }
        data.extend(
            r[4..]
                .chunks_exact(4)
                .map(|b| decode([b[0], b[1], b[2], b[3]])),
        );
    }
    Ok(Vectors { data, n, dim })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, fortran: &str, shape: &str, body: &[u8]) -> Vec<u8> {
        let mut h =
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn npy_f32_and_f64_round_trip() {
        let vals = [1.5f32, -2.0, 3.25, 0.0, 7.0, 8.5];
        let body: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let v = parse_npy(&npy("<f4", "False", "(3, 2)", &body), "a.npy").unwrap();
        assert_eq!((v.n, v.dim, v.data.as_slice()), (3, 2, &vals[..]));
        let body: Vec<u8> = vals
            .iter()
            .flat_map(|&v| (v as f64).to_le_bytes())
            .collect();
        let v = parse_npy(&npy("<f8", "False", "(2, 3)", &body), "a.npy").unwrap();
        assert_eq!((v.n, v.dim, v.data.as_slice()), (2, 3, &vals[..]));
    }

    #[test]
    fn npy_errors_are_typed() {
        let body = [0u8; 24];
        assert!(matches!(
            parse_npy(b"NOTNUMPY..", "x"),
            Err(VectorFileError::BadNpyHeader { .. })
        ));
        assert!(
            matches!(parse_npy(&npy("<i4", "False", "(3, 2)", &body), "x"), Err(VectorFileError::UnsupportedDtype { descr, .. }) if descr == "<i4")
        );
        assert!(matches!(
            parse_npy(&npy(">f4", "False", "(3, 2)", &body), "x"),
            Err(VectorFileError::UnsupportedDtype { .. })
        ));
        assert!(matches!(
            parse_npy(&npy("<f4", "True", "(3, 2)", &body), "x"),
            Err(VectorFileError::FortranOrder { .. })
        ));
        assert!(
            matches!(parse_npy(&npy("<f4", "False", "(6,)", &body), "x"), Err(VectorFileError::BadShape { shape, .. }) if shape == vec![6])
        );
        assert!(matches!(
            parse_npy(&npy("<f4", "False", "(3, 0)", &[]), "x"),
            Err(VectorFileError::BadShape { .. })
        ));
        assert!(matches!(
            parse_npy(&npy("<f4", "False", "(4, 2)", &body), "x"),
            Err(VectorFileError::Truncated {
                expected: 32,
                actual: 24,
                ..
            })
        ));
        assert!(matches!(
            parse_npy(
                &npy("<f4", "False", "(4000000000000000000, 2000000000)", &body),
                "x"
            ),
            Err(VectorFileError::BadShape { .. })
        ));
    }

    fn vecs(rows: &[(i32, &[f32])]) -> Vec<u8> {
        rows.iter()
            .flat_map(|(d, r)| {
                d.to_le_bytes()
                    .into_iter()
                    .chain(r.iter().flat_map(|v| v.to_le_bytes()))
            })
            .collect()
    }

    #[test]
    fn fvecs_and_ivecs_parse_and_reject_broken_files() {
        let ok = vecs(&[(2, &[1.0, 2.0]), (2, &[3.0, 4.0])]);
        let v = parse_fvecs(&ok, "b.fvecs").unwrap();
        assert_eq!((v.n, v.dim, v.data), (2, 2, vec![1.0, 2.0, 3.0, 4.0]));
        let ids: Vec<u8> = [2i32, 7, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(parse_ivecs(&ids, "g.ivecs").unwrap().data, vec![7, 9]);
        assert!(matches!(
            parse_fvecs(&ok[..ok.len() - 2], "b"),
            Err(VectorFileError::Truncated { .. })
        ));
        let bad = vecs(&[(2, &[1.0, 2.0]), (3, &[3.0, 4.0])]);
        assert!(matches!(
            parse_fvecs(&bad, "b"),
            Err(VectorFileError::InconsistentDim {
                row: 1,
                expected: 2,
                actual: 3,
                ..
            })
        ));
        assert!(matches!(
            parse_fvecs(&vecs(&[(0, &[])]), "b"),
            Err(VectorFileError::BadShape { .. })
        ));
        assert!(matches!(
            parse_fvecs(&vecs(&[(-1, &[])]), "b"),
            Err(VectorFileError::BadShape { .. })
        ));
    }

    #[test]
    fn read_vectors_dispatches_on_extension_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.fvecs");
        std::fs::write(&p, vecs(&[(1, &[5.0])])).unwrap();
        assert_eq!(read_vectors(&p).unwrap().data, vec![5.0]);
        let q = dir.path().join("v.txt");
        std::fs::write(&q, b"x").unwrap();
        assert!(matches!(
            read_vectors(&q),
            Err(VectorFileError::UnknownFormat { .. })
        ));
        assert!(
            matches!(read_vectors(&dir.path().join("missing.npy")), Err(VectorFileError::Io { path, .. }) if path.ends_with("missing.npy"))
        );
    }
}
