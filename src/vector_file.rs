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
    #[error("{path}: unsupported .npy dtype {descr} (expected <f4 or <f8 vectors, or <i4 ids)")]
    UnsupportedDtype { path: String, descr: String },
    #[error("{path}: holds {found} values; expected {expected}")]
    WrongElement {
        path: String,
        found: &'static str,
        expected: &'static str,
    },
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
    let NpyHeader {
        data_start,
        descr,
        n,
        dim,
    } = npy_header(bytes, path)?;
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
    let shape = vec![n, dim];
    let body = &bytes[data_start..];
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

/// A parsed `.npy` header: where the data starts, the dtype and the shape.
struct NpyHeader {
    data_start: usize,
    descr: String,
    n: usize,
    dim: usize,
}

/// Parse the header at the start of `bytes` (which need only hold the
/// header) of a C-ordered 2-D `.npy` array with `dim ≥ 1`.
fn npy_header(bytes: &[u8], path: &str) -> Result<NpyHeader, VectorFileError> {
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
    Ok(NpyHeader {
        data_start: hstart + hlen,
        descr,
        n,
        dim,
    })
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

/// The element layout of a file read by [`VectorReader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `.npy` body: `width`-byte little-endian values, float or int.
    Npy { width: usize, float: bool },
    /// TEXMEX rows: an int32 dimension, then `dim` 4-byte values.
    Vecs { float: bool },
}

/// Reads a vector file a batch of rows at a time, so memory stays bounded
/// by the batch, not the file: `.npy` (`<f4`, `<f8`, `<i4`), `.fvecs` and
/// `.ivecs`. The header (and, for `.fvecs`/`.ivecs`, the length) is checked
/// when the file is opened; rows are checked as they are read.
pub struct VectorReader {
    path: String,
    file: std::io::BufReader<std::fs::File>,
    layout: Layout,
    dim: usize,
    rows: usize,
    read: usize,
}

impl VectorReader {
    /// Open `path`, chosen by extension.
    ///
    /// # Errors
    /// [`VectorFileError::Io`], [`VectorFileError::UnknownFormat`], the header
    /// errors of [`parse_npy`] ([`VectorFileError::UnsupportedDtype`] for
    /// dtypes other than `<f4`, `<f8`, `<i4`), and
    /// [`VectorFileError::Truncated`] when the length does not match.
    pub fn open(path: &Path) -> Result<Self, VectorFileError> {
        use std::io::Read;
        let name = path.display().to_string();
        let io = |source| VectorFileError::Io {
            path: name.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        let mut file = std::io::BufReader::new(file);
        let truncated = |expected: usize| VectorFileError::Truncated {
            path: name.clone(),
            expected,
            actual: len,
        };
        let ext = path.extension().and_then(|e| e.to_str());
        let (layout, dim, rows) = match ext {
            Some("npy") => {
                // Magic, version and header length, then the header itself.
                let mut head = vec![0u8; 12.min(len)];
                file.read_exact(&mut head).map_err(io)?;
                let hlen = match head.get(6) {
                    Some(1) if head.len() >= 10 => {
                        10 + u16::from_le_bytes([head[8], head[9]]) as usize
                    }
                    Some(2 | 3) if head.len() >= 12 => {
                        12 + u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize
                    }
                    _ => return Err(VectorFileError::BadNpyHeader { path: name }),
                };
                if hlen > len {
                    return Err(VectorFileError::BadNpyHeader { path: name });
                }
                let mut rest = vec![0u8; hlen - head.len()];
                file.read_exact(&mut rest).map_err(io)?;
                head.extend_from_slice(&rest);
                let h = npy_header(&head, &name)?;
                let (width, float) = match h.descr.as_str() {
                    "<f4" => (4, true),
                    "<f8" => (8, true),
                    "<i4" => (4, false),
                    _ => {
                        return Err(VectorFileError::UnsupportedDtype {
                            path: name,
                            descr: h.descr,
                        });
                    }
                };
                let body =
                    h.n.checked_mul(h.dim)
                        .and_then(|v| v.checked_mul(width))
                        .ok_or_else(|| VectorFileError::BadShape {
                            path: name.clone(),
                            shape: vec![h.n, h.dim],
                        })?;
                if len - h.data_start != body {
                    return Err(VectorFileError::Truncated {
                        path: name,
                        expected: body,
                        actual: len - h.data_start,
                    });
                }
                (Layout::Npy { width, float }, h.dim, h.n)
            }
            Some(e @ ("fvecs" | "ivecs")) => {
                if len == 0 {
                    (
                        Layout::Vecs {
                            float: e == "fvecs",
                        },
                        0,
                        0,
                    )
                } else {
                    let mut word = [0u8; 4];
                    file.read_exact(&mut word).map_err(|_| truncated(4))?;
                    let d = i32::from_le_bytes(word);
                    let dim = usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                        VectorFileError::BadShape {
                            path: name.clone(),
                            shape: vec![d.max(0) as usize],
                        }
                    })?;
                    let rec = 4 * (dim + 1);
                    if !len.is_multiple_of(rec) {
                        return Err(truncated((len / rec + 1) * rec));
                    }
                    // Back to the start: every row, the first included, is
                    // read with its dimension word.
                    file.seek_relative(-4).map_err(io)?;
                    (
                        Layout::Vecs {
                            float: e == "fvecs",
                        },
                        dim,
                        len / rec,
                    )
                }
            }
            _ => return Err(VectorFileError::UnknownFormat { path: name }),
        };
        Ok(Self {
            path: name,
            file,
            layout,
            dim,
            rows,
            read: 0,
        })
    }

    /// Values per row (0 for an empty `.fvecs`/`.ivecs` file).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows in the file.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The next up to `max_rows` rows as raw little-endian 4- or 8-byte
    /// values (the `.fvecs`/`.ivecs` dimension words checked and removed);
    /// empty at the end.
    fn next_raw(&mut self, max_rows: usize) -> Result<(Vec<u8>, usize), VectorFileError> {
        use std::io::Read;
        let n = max_rows.max(1).min(self.rows - self.read);
        let io = |source| VectorFileError::Io {
            path: self.path.clone(),
            source,
        };
        let (row_bytes, words) = match self.layout {
            Layout::Npy { width, .. } => (self.dim * width, 0),
            Layout::Vecs { .. } => (4 * (self.dim + 1), 1),
        };
        let mut buf = vec![0u8; n * row_bytes];
        self.file.read_exact(&mut buf).map_err(io)?;
        if words == 0 {
            self.read += n;
            return Ok((buf, n));
        }
        let mut out = Vec::with_capacity(n * self.dim * 4);
        for (i, r) in buf.chunks_exact(row_bytes).enumerate() {
            let d = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            if usize::try_from(d).ok() != Some(self.dim) {
                return Err(VectorFileError::InconsistentDim {
                    path: self.path.clone(),
                    row: self.read + i,
                    expected: self.dim,
                    actual: d.max(0) as usize,
                });
            }
            out.extend_from_slice(&r[4..]);
        }
        self.read += n;
        Ok((out, n))
    }

    /// The next up to `max_rows` rows of a float file (`<f4`/`<f8` `.npy`,
    /// `.fvecs`), row-major; empty at the end.
    ///
    /// # Errors
    /// [`VectorFileError::UnsupportedDtype`] for an integer file, IO errors and
    /// [`VectorFileError::InconsistentDim`].
    pub fn next_f32(&mut self, max_rows: usize) -> Result<Vec<f32>, VectorFileError> {
        let wide = match self.layout {
            Layout::Npy { width, float: true } => width == 8,
            Layout::Vecs { float: true } => false,
            _ => return Err(self.wrong_kind("float vectors (<f4 or <f8 .npy, .fvecs)")),
        };
        let (raw, _) = self.next_raw(max_rows)?;
        Ok(if wide {
            raw.chunks_exact(8)
                .map(|b| {
                    f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
                })
                .collect()
        } else {
            raw.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
    }

    /// The next up to `max_rows` rows of an int32 file (`<i4` `.npy`,
    /// `.ivecs`), row-major; empty at the end.
    ///
    /// # Errors
    /// [`VectorFileError::UnsupportedDtype`] for a float file, IO errors and
    /// [`VectorFileError::InconsistentDim`].
    pub fn next_i32(&mut self, max_rows: usize) -> Result<Vec<i32>, VectorFileError> {
        if !matches!(
            self.layout,
            Layout::Npy {
                width: 4,
                float: false
            } | Layout::Vecs { float: false }
        ) {
            return Err(self.wrong_kind("int32 rows (<i4 .npy or .ivecs)"));
        }
        let (raw, _) = self.next_raw(max_rows)?;
        Ok(raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn wrong_kind(&self, expected: &'static str) -> VectorFileError {
        let found = match self.layout {
            Layout::Npy {
                width: 4,
                float: true,
            } => "<f4",
            Layout::Npy { width: 8, .. } => "<f8",
            Layout::Npy { .. } => "<i4",
            Layout::Vecs { float: true } => ".fvecs float",
            Layout::Vecs { float: false } => ".ivecs int32",
        };
        VectorFileError::WrongElement {
            path: self.path.clone(),
            found,
            expected,
        }
    }
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
    #[test]
    fn reader_streams_the_same_rows_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<f32> = (0..21).map(|i| i as f32 * 0.5).collect();
        let body: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let npy_path = dir.path().join("q.npy");
        std::fs::write(&npy_path, npy("<f4", "False", "(7, 3)", &body)).unwrap();
        let rows: Vec<(i32, &[f32])> = values.chunks(3).map(|c| (3, c)).collect();
        let fvecs_path = dir.path().join("q.fvecs");
        std::fs::write(&fvecs_path, vecs(&rows)).unwrap();
        for path in [&npy_path, &fvecs_path] {
            let mut r = VectorReader::open(path).unwrap();
            assert_eq!((r.rows(), r.dim()), (7, 3));
            let mut got = Vec::new();
            let mut sizes = Vec::new();
            loop {
                let b = r.next_f32(3).unwrap();
                if b.is_empty() {
                    break;
                }
                sizes.push(b.len() / 3);
                got.extend(b);
            }
            assert_eq!(sizes, vec![3, 3, 1], "{}", path.display());
            assert_eq!(got, values);
            assert!(matches!(
                r.next_i32(1),
                Err(VectorFileError::WrongElement { .. })
            ));
        }
        // int32 ids from .npy <i4 and .ivecs.
        let ids: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let ids_path = dir.path().join("gt.npy");
        std::fs::write(&ids_path, npy("<i4", "False", "(2, 2)", &ids)).unwrap();
        let mut r = VectorReader::open(&ids_path).unwrap();
        assert_eq!(r.next_i32(5).unwrap(), vec![1, 2, 3, 4]);
        assert!(r.next_i32(5).unwrap().is_empty());
    }

    #[test]
    fn reader_rejects_truncated_and_inconsistent_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short.npy");
        std::fs::write(&p, npy("<f4", "False", "(2, 3)", &[0u8; 20])).unwrap();
        assert!(matches!(
            VectorReader::open(&p),
            Err(VectorFileError::Truncated {
                expected: 24,
                actual: 20,
                ..
            })
        ));
        let p = dir.path().join("mixed.fvecs");
        // 12 + 16 + 8 bytes: a whole number of 12-byte rows of dimension 2,
        // but row 1 says dimension 3.
        let mut bytes = vecs(&[(2, &[1.0, 2.0])]);
        bytes.extend(vecs(&[(3, &[3.0, 4.0, 5.0]), (1, &[6.0])]));
        std::fs::write(&p, bytes).unwrap();
        let mut r = VectorReader::open(&p).unwrap();
        assert!(matches!(
            r.next_f32(10),
            Err(VectorFileError::InconsistentDim { row: 1, .. })
        ));
    }
}
