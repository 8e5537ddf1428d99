//! Reading dense vector files used by benchmarks, build input and query
//! input: `.npy` (float32/float64, and int32 ids, little-endian, C order,
//! 2-D) and TEXMEX `.fvecs`/`.ivecs` (per row an int32 dimension followed by
//! that many f32/i32 values).
//!
//! `.npy` headers and values are read with the `npyz` crate; this module
//! only decides which arrays it accepts and checks the data length against
//! the header. `.fvecs`/`.ivecs` stay hand-written: `npyz` (like every
//! `.npy` crate) does not read TEXMEX files, and the format is a loop over
//! `[dim, values…]` records. `npyz` 0.9.1 multiplies the header's shape
//! without overflow checks, so a hostile shape would panic in a build with
//! overflow checks; `Cargo.toml` turns them off for `npyz`, and this module
//! rejects such a shape with [`VectorFileError::BadShape`] by its own checked
//! arithmetic before any value is read.
//!
//! The parsers work on bytes (testable without files); [`read_vectors`],
//! [`read_ivecs`] and [`VectorReader`] (batches of rows, bounded memory) are
//! the IO edge. Every malformed input is a typed [`VectorFileError`] naming
//! the file and the numbers involved.

use std::io::Read;
use std::path::Path;

use npyz::{DType, NpyHeader, Order};
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
    #[error("{path}: not a .npy file: {reason}")]
    BadNpyHeader { path: String, reason: String },
    #[error("{path}: unsupported .npy dtype {descr} (expected <f4 or <f8 vectors, or <i4/<i8 ids)")]
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
    BadShape { path: String, shape: Vec<u64> },
    #[error("{path}: expected {expected} bytes of data, got {actual}")]
    Truncated {
        path: String,
        expected: usize,
        actual: usize,
    },
    #[error("{path}: rows of {cols} ids do not cover k={k}")]
    TruthTooNarrow { path: String, cols: usize, k: usize },
    #[error("{path}: {rows} rows of ids for {queries} queries")]
    TruthTooShort {
        path: String,
        rows: usize,
        queries: usize,
    },
    #[error("{path}: row {row} has dimension {actual}, the first row has {expected}")]
    InconsistentDim {
        path: String,
        row: usize,
        expected: usize,
        actual: usize,
    },
}

/// The first `k` ids of each of the first `n` rows of a ground-truth file
/// (`.npy` of `<i4`/`<i8`, or `.ivecs`), without the `-1`s a filtered truth
/// pads a row with where fewer than `k` rows match.
///
/// # Errors
/// [`VectorFileError::TruthTooNarrow`] for rows of fewer than `k` ids,
/// [`VectorFileError::TruthTooShort`] for fewer than `n` rows, and the
/// errors of [`VectorReader`].
pub fn read_truth(path: &Path, n: usize, k: usize) -> Result<Vec<Vec<i64>>, VectorFileError> {
    let name = || path.display().to_string();
    let mut reader = VectorReader::open(path)?;
    let cols = reader.dim();
    if cols < k {
        return Err(VectorFileError::TruthTooNarrow {
            path: name(),
            cols,
            k,
        });
    }
    let rows = reader.next_i32(n)?;
    if rows.len() < n * cols {
        return Err(VectorFileError::TruthTooShort {
            path: name(),
            rows: rows.len() / cols,
            queries: n,
        });
    }
    Ok(rows
        .chunks_exact(cols)
        .map(|r| {
            r[..k]
                .iter()
                .filter(|&&t| t >= 0)
                .map(|&t| i64::from(t))
                .collect()
        })
        .collect())
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
    let extension = path.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("npy" | "fvecs")) {
        return Err(VectorFileError::UnknownFormat { path: name });
    }
    if extension == Some("npy")
        && let Some(vectors) = read_npy_f32_in_place(path, &name)?
    {
        return Ok(vectors);
    }
    let bytes = std::fs::read(path).map_err(|source| VectorFileError::Io {
        path: name.clone(),
        source,
    })?;
    match extension {
        Some("npy") => parse_npy(&bytes, &name),
        _ => parse_fvecs(&bytes, &name),
    }
}

/// Bytes of the `.npy` body one task of [`read_npy_f32_in_place`] reads.
#[cfg_attr(not(all(unix, target_endian = "little")), allow(dead_code))]
const READ_CHUNK: usize = 8 << 20;

/// A `<f4` `.npy` file read straight into its `Vec<f32>`, the body in
/// [`READ_CHUNK`] ranges on the rayon pool's threads: one copy out of the
/// page cache instead of a read then a conversion (a 512 MB file took 0.49 s
/// on one core that way). `None` where this fast path does not apply (a
/// header this function does not recognise, another dtype, a big-endian or
/// non-Unix machine): [`parse_npy`] then reads the file and gives the error
/// if there is one. The length check and errors are [`parse_npy`]'s.
fn read_npy_f32_in_place(path: &Path, name: &str) -> Result<Option<Vectors<f32>>, VectorFileError> {
    #[cfg(all(unix, target_endian = "little"))]
    {
        use rayon::prelude::*;
        use std::os::unix::fs::FileExt;
        let io = |source| VectorFileError::Io {
            path: name.to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        // Magic (6 bytes), version (2), then the header's length: 2 bytes
        // little-endian in version 1, 4 in versions 2 and 3.
        let mut start = [0u8; 12];
        if len < 12 || file.read_exact_at(&mut start, 0).is_err() || &start[..6] != b"\x93NUMPY" {
            return Ok(None);
        }
        let data_offset = match start[6] {
            1 => 10 + u64::from(u16::from_le_bytes([start[8], start[9]])),
            2 | 3 => {
                12 + u64::from(u32::from_le_bytes([
                    start[8], start[9], start[10], start[11],
                ]))
            }
            _ => return Ok(None),
        };
        if data_offset > len {
            return Ok(None);
        }
        let mut header = vec![0u8; data_offset as usize];
        file.read_exact_at(&mut header, 0).map_err(io)?;
        let mut rest = &header[..];
        let array = NpyArray::read(&mut rest, name)?;
        if !rest.is_empty() || array.element(&[Element::F4], name).is_err() {
            return Ok(None);
        }
        array.check_len(Element::F4, (len - data_offset) as usize, name)?;
        let mut data = vec![0.0f32; array.n * array.dim];
        // SAFETY: every bit pattern is a valid f32, and the byte view covers
        // exactly `data`'s initialised values, which it borrows mutably.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), data.len() * 4)
        };
        bytes
            .par_chunks_mut(READ_CHUNK)
            .enumerate()
            .try_for_each(|(i, chunk)| {
                file.read_exact_at(chunk, data_offset + (i * READ_CHUNK) as u64)
            })
            .map_err(io)?;
        Ok(Some(Vectors {
            data,
            n: array.n,
            dim: array.dim,
        }))
    }
    #[cfg(not(all(unix, target_endian = "little")))]
    {
        let _ = (path, name);
        Ok(None)
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
    let mut body = bytes;
    let array = NpyArray::read(&mut body, path)?;
    let element = array.element(&[Element::F4, Element::F8], path)?;
    array.check_len(element, body.len(), path)?;
    let data = match element {
        Element::F8 => le_values(body, |b: [u8; 8]| f64::from_le_bytes(b) as f32),
        _ => le_values(body, f32::from_le_bytes),
    };
    Ok(Vectors {
        data,
        n: array.n,
        dim: array.dim,
    })
}

/// Reads row ids (for `parqivf delete --ids` and `upsert --ids`) from a
/// `.npy` file: a 1-D array, or a 2-D one of one column, of `<i8` or `<i4`.
///
/// # Errors
/// [`VectorFileError::Io`] and the errors of [`parse_ids`].
pub fn read_ids(path: &Path) -> Result<Vec<i64>, VectorFileError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| VectorFileError::Io {
        path: name.clone(),
        source,
    })?;
    parse_ids(&bytes, &name)
}

/// Parses the ids [`read_ids`] reads.
///
/// # Errors
/// As [`parse_npy`]; [`VectorFileError::BadShape`] for more than one column.
pub fn parse_ids(bytes: &[u8], path: &str) -> Result<Vec<i64>, VectorFileError> {
    let mut body = bytes;
    let array = NpyArray::read_with(&mut body, path, true)?;
    if array.dim != 1 {
        return Err(VectorFileError::BadShape {
            path: path.to_string(),
            shape: array.header.shape().to_vec(),
        });
    }
    let element = array.element(&[Element::I8, Element::I4], path)?;
    array.check_len(element, body.len(), path)?;
    Ok(match element {
        Element::I4 => le_values(body, |b: [u8; 4]| i64::from(i32::from_le_bytes(b))),
        _ => le_values(body, i64::from_le_bytes),
    })
}

/// The little-endian values of `body`, `W` bytes each (its length checked
/// against the header: every accepted dtype is little-endian), converted by
/// `f`: one pass over the bytes, which compiles to a copy for `<f4` on a
/// little-endian machine.
fn le_values<const W: usize, T>(body: &[u8], f: impl Fn([u8; W]) -> T) -> Vec<T> {
    let (whole, _) = body.as_chunks::<W>();
    whole.iter().map(|&b| f(b)).collect()
}

/// The `.npy` element types this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    F4,
    F8,
    I4,
    I8,
}

impl Element {
    fn descr(self) -> &'static str {
        match self {
            Element::F4 => "<f4",
            Element::F8 => "<f8",
            Element::I4 => "<i4",
            Element::I8 => "<i8",
        }
    }

    fn width(self) -> usize {
        match self {
            Element::F8 | Element::I8 => 8,
            Element::F4 | Element::I4 => 4,
        }
    }
}

/// A checked `.npy` header: a C-ordered 2-D array with `dim ≥ 1` whose
/// byte size fits a `usize`.
struct NpyArray {
    header: NpyHeader,
    /// The dtype as numpy writes it (`<f4`).
    descr: String,
    n: usize,
    dim: usize,
}

impl NpyArray {
    /// Reads the header from `reader`, leaving it at the first data byte.
    fn read(reader: impl Read, path: &str) -> Result<NpyArray, VectorFileError> {
        Self::read_with(reader, path, false)
    }

    /// [`Self::read`]; `one_d`: a 1-D array is read as one column.
    fn read_with(reader: impl Read, path: &str, one_d: bool) -> Result<NpyArray, VectorFileError> {
        let header = NpyHeader::from_reader(reader).map_err(|e| VectorFileError::BadNpyHeader {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        if header.order() == Order::Fortran {
            return Err(VectorFileError::FortranOrder {
                path: path.to_string(),
            });
        }
        let shape = header.shape().to_vec();
        let bad_shape = || VectorFileError::BadShape {
            path: path.to_string(),
            shape: shape.clone(),
        };
        let (n, dim) = match shape[..] {
            [n, dim] => (n, dim),
            [n] if one_d => (n, 1),
            _ => return Err(bad_shape()),
        };
        let (Ok(n), Ok(dim)) = (usize::try_from(n), usize::try_from(dim)) else {
            return Err(bad_shape());
        };
        // The widest element is 8 bytes: the body size of any accepted dtype
        // fits a usize.
        if dim == 0 || n.checked_mul(dim).and_then(|c| c.checked_mul(8)).is_none() {
            return Err(bad_shape());
        }
        let descr = match header.dtype() {
            DType::Plain(t) => t.to_string(),
            other => other.descr(),
        };
        Ok(NpyArray {
            header,
            descr,
            n,
            dim,
        })
    }

    /// The element type, when it is one of `accepted`.
    fn element(&self, accepted: &[Element], path: &str) -> Result<Element, VectorFileError> {
        accepted
            .iter()
            .copied()
            .find(|e| e.descr() == self.descr)
            .ok_or_else(|| VectorFileError::UnsupportedDtype {
                path: path.to_string(),
                descr: self.descr.clone(),
            })
    }

    /// Checks that the data holds exactly `n × dim` elements.
    fn check_len(
        &self,
        element: Element,
        actual: usize,
        path: &str,
    ) -> Result<(), VectorFileError> {
        let expected = self.n * self.dim * element.width();
        if actual != expected {
            return Err(VectorFileError::Truncated {
                path: path.to_string(),
                expected,
                actual,
            });
        }
        Ok(())
    }
}

/// `file`'s values as `T` (whose dtype the caller has checked).
fn npy_values<T: npyz::Deserialize, R: Read>(
    file: npyz::NpyFile<R>,
    path: &str,
) -> Result<npyz::NpyReader<T, R>, VectorFileError> {
    file.data::<T>()
        .map_err(|e| VectorFileError::UnsupportedDtype {
            path: path.to_string(),
            descr: e.to_string(),
        })
}

/// The next `count` values of `reader`, converted by `f`.
fn values<T, U>(
    reader: impl Iterator<Item = std::io::Result<T>>,
    count: usize,
    path: &str,
    f: impl Fn(T) -> U,
) -> Result<Vec<U>, VectorFileError> {
    let mut out = Vec::with_capacity(count);
    for v in reader.take(count) {
        out.push(f(v.map_err(|source| VectorFileError::Io {
            path: path.to_string(),
            source,
        })?));
    }
    Ok(out)
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
                shape: vec![d.max(0) as u64],
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

/// What a [`VectorReader`] reads from.
enum Body {
    NpyF32(npyz::NpyReader<f32, std::io::BufReader<std::fs::File>>),
    NpyF64(npyz::NpyReader<f64, std::io::BufReader<std::fs::File>>),
    NpyI32(npyz::NpyReader<i32, std::io::BufReader<std::fs::File>>),
    /// TEXMEX rows: an int32 dimension, then `dim` 4-byte values.
    Vecs {
        file: std::io::BufReader<std::fs::File>,
        float: bool,
    },
}

/// Reads a vector file a batch of rows at a time, so memory stays bounded
/// by the batch, not the file: `.npy` (`<f4`, `<f8`, `<i4`), `.fvecs` and
/// `.ivecs`. The header (and, for `.fvecs`/`.ivecs`, the length) is checked
/// when the file is opened; rows are checked as they are read.
pub struct VectorReader {
    path: String,
    body: Body,
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
        use std::io::Seek;
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
        let (body, dim, rows) = match ext {
            Some("npy") => {
                let array = NpyArray::read(&mut file, &name)?;
                let element = array.element(&[Element::F4, Element::F8, Element::I4], &name)?;
                let start = file.stream_position().map_err(io)? as usize;
                array.check_len(element, len.saturating_sub(start), &name)?;
                let (dim, rows) = (array.dim, array.n);
                let npy = npyz::NpyFile::with_header(array.header, file);
                let body = match element {
                    Element::F4 => Body::NpyF32(npy_values(npy, &name)?),
                    Element::F8 => Body::NpyF64(npy_values(npy, &name)?),
                    Element::I4 => Body::NpyI32(npy_values(npy, &name)?),
                    Element::I8 => {
                        return Err(VectorFileError::UnsupportedDtype {
                            path: name.clone(),
                            descr: Element::I8.descr().into(),
                        });
                    }
                };
                (body, dim, rows)
            }
            Some(e @ ("fvecs" | "ivecs")) => {
                let float = e == "fvecs";
                if len == 0 {
                    (Body::Vecs { file, float }, 0, 0)
                } else {
                    let mut word = [0u8; 4];
                    file.read_exact(&mut word).map_err(|_| truncated(4))?;
                    let d = i32::from_le_bytes(word);
                    let dim = usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                        VectorFileError::BadShape {
                            path: name.clone(),
                            shape: vec![d.max(0) as u64],
                        }
                    })?;
                    let rec = 4 * (dim + 1);
                    if !len.is_multiple_of(rec) {
                        return Err(truncated((len / rec + 1) * rec));
                    }
                    // Back to the start: every row, the first included, is
                    // read with its dimension word.
                    file.seek_relative(-4).map_err(io)?;
                    (Body::Vecs { file, float }, dim, len / rec)
                }
            }
            _ => return Err(VectorFileError::UnknownFormat { path: name }),
        };
        Ok(Self {
            path: name,
            body,
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

    /// How many rows the next batch of at most `max_rows` holds.
    fn batch_rows(&self, max_rows: usize) -> usize {
        max_rows.max(1).min(self.rows - self.read)
    }

    /// The next `n` `.fvecs`/`.ivecs` rows as raw little-endian 4-byte
    /// values, the dimension words checked and removed.
    fn next_vecs(
        file: &mut std::io::BufReader<std::fs::File>,
        path: &str,
        dim: usize,
        first_row: usize,
        n: usize,
    ) -> Result<Vec<u8>, VectorFileError> {
        let row_bytes = 4 * (dim + 1);
        let mut buf = vec![0u8; n * row_bytes];
        file.read_exact(&mut buf)
            .map_err(|source| VectorFileError::Io {
                path: path.to_string(),
                source,
            })?;
        let mut out = Vec::with_capacity(n * dim * 4);
        for (i, r) in buf.chunks_exact(row_bytes).enumerate() {
            let d = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            if usize::try_from(d).ok() != Some(dim) {
                return Err(VectorFileError::InconsistentDim {
                    path: path.to_string(),
                    row: first_row + i,
                    expected: dim,
                    actual: d.max(0) as usize,
                });
            }
            out.extend_from_slice(&r[4..]);
        }
        Ok(out)
    }

    /// The next up to `max_rows` rows of a float file (`<f4`/`<f8` `.npy`,
    /// `.fvecs`), row-major; empty at the end.
    ///
    /// # Errors
    /// [`VectorFileError::WrongElement`] for an integer file, IO errors and
    /// [`VectorFileError::InconsistentDim`].
    pub fn next_f32(&mut self, max_rows: usize) -> Result<Vec<f32>, VectorFileError> {
        let n = self.batch_rows(max_rows);
        let count = n * self.dim;
        let out = match &mut self.body {
            Body::NpyF32(r) => values(r.by_ref(), count, &self.path, |v| v)?,
            Body::NpyF64(r) => values(r.by_ref(), count, &self.path, |v| v as f32)?,
            Body::Vecs { file, float: true } => {
                Self::next_vecs(file, &self.path, self.dim, self.read, n)?
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            }
            _ => return Err(self.wrong_kind("float vectors (<f4 or <f8 .npy, .fvecs)")),
        };
        self.read += n;
        Ok(out)
    }

    /// The next up to `max_rows` rows of an int32 file (`<i4` `.npy`,
    /// `.ivecs`), row-major; empty at the end.
    ///
    /// # Errors
    /// [`VectorFileError::WrongElement`] for a float file, IO errors and
    /// [`VectorFileError::InconsistentDim`].
    pub fn next_i32(&mut self, max_rows: usize) -> Result<Vec<i32>, VectorFileError> {
        let n = self.batch_rows(max_rows);
        let count = n * self.dim;
        let out = match &mut self.body {
            Body::NpyI32(r) => values(r.by_ref(), count, &self.path, |v| v)?,
            Body::Vecs { file, float: false } => {
                Self::next_vecs(file, &self.path, self.dim, self.read, n)?
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            }
            _ => return Err(self.wrong_kind("int32 rows (<i4 .npy or .ivecs)")),
        };
        self.read += n;
        Ok(out)
    }

    fn wrong_kind(&self, expected: &'static str) -> VectorFileError {
        let found = match self.body {
            Body::NpyF32(_) => "<f4",
            Body::NpyF64(_) => "<f8",
            Body::NpyI32(_) => "<i4",
            Body::Vecs { float: true, .. } => ".fvecs float",
            Body::Vecs { float: false, .. } => ".ivecs int32",
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

    /// A truth's first k ids a row, its -1 padding dropped; too few ids a
    /// row or too few rows are typed errors naming the numbers.
    #[test]
    fn a_truth_keeps_k_ids_a_row_and_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gt.npy");
        let ids = [7i32, 3, 9, 4, -1, -1];
        let body: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, npy("<i4", "False", "(2, 3)", &body)).unwrap();
        assert_eq!(
            read_truth(&path, 2, 2).unwrap(),
            vec![vec![7i64, 3], vec![4]]
        );
        assert!(matches!(
            read_truth(&path, 2, 4),
            Err(VectorFileError::TruthTooNarrow { cols: 3, k: 4, .. })
        ));
        assert!(matches!(
            read_truth(&path, 3, 2),
            Err(VectorFileError::TruthTooShort {
                rows: 2,
                queries: 3,
                ..
            })
        ));
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

    /// `read_vectors` on a `.npy` file gives what `parse_npy` gives on its
    /// bytes: through the in-place path (`<f4`, header versions 1 and 2, a
    /// body of several read chunks) and through the fallback (`<f8`, a
    /// header it does not recognise), with the same typed errors for a
    /// short or long body, a Fortran array and another dtype.
    #[test]
    fn npy_files_read_in_place_equal_the_parsed_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.npy");
        let check = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let (read, parsed) = (
                read_vectors(&path),
                parse_npy(bytes, &path.display().to_string()),
            );
            match (read, parsed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("read {a:?}, parsed {b:?}"),
            }
        };
        // Three chunks and a partial one: every chunk lands at its offset.
        let dim = 16;
        let n = (2 * READ_CHUNK + READ_CHUNK / 2) / (4 * dim) + 1;
        let vals: Vec<f32> = (0..n * dim).map(|i| i as f32 * 0.25 - 7.0).collect();
        let body: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let v1 = npy("<f4", "False", &format!("({n}, {dim})"), &body);
        check(&v1);
        std::fs::write(&path, &v1).unwrap();
        assert_eq!(read_vectors(&path).unwrap().data, vals);
        // Version 2: a 4-byte header length.
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        let header = &v1[10..10 + usize::from(u16::from_le_bytes([v1[8], v1[9]]))];
        v2.extend_from_slice(&(header.len() as u32).to_le_bytes());
        v2.extend_from_slice(header);
        v2.extend_from_slice(&body);
        check(&v2);
        let small: Vec<u8> = [1.5f64, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        check(&npy("<f8", "False", "(1, 2)", &small));
        check(&npy("<f4", "False", "(3, 2)", &[0u8; 20]));
        check(&npy("<f4", "False", "(3, 2)", &[0u8; 28]));
        check(&npy("<f4", "True", "(3, 2)", &[0u8; 24]));
        check(&npy("<i4", "False", "(3, 2)", &[0u8; 24]));
        check(b"\x93NUMPY\x09\x00garbage");
        check(b"\x93NUMPY\x01\x00\xff\xff{");
        assert!(matches!(
            read_vectors(&dir.path().join("missing.npy")),
            Err(VectorFileError::Io { .. })
        ));
    }

    #[test]
    fn ids_read_from_1d_or_one_column_int64_and_int32() {
        let ids = [7i64, -3, 1 << 40];
        let body: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            parse_ids(&npy("<i8", "False", "(3,)", &body), "i.npy").unwrap(),
            ids
        );
        assert_eq!(
            parse_ids(&npy("<i8", "False", "(3, 1)", &body), "i.npy").unwrap(),
            ids
        );
        let body: Vec<u8> = [1i32, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            parse_ids(&npy("<i4", "False", "(2,)", &body), "i.npy").unwrap(),
            [1, 2]
        );
        assert!(matches!(
            parse_ids(&npy("<i8", "False", "(1, 2)", &[0u8; 16]), "i.npy"),
            Err(VectorFileError::BadShape { .. })
        ));
        assert!(matches!(
            parse_ids(&npy("<f4", "False", "(2,)", &[0u8; 8]), "i.npy"),
            Err(VectorFileError::UnsupportedDtype { .. })
        ));
        assert!(matches!(
            parse_ids(&npy("<i8", "False", "(3,)", &[0u8; 16]), "i.npy"),
            Err(VectorFileError::Truncated { .. })
        ));
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

    #[test]
    fn npy_headers_in_any_key_order_and_spacing_parse_and_errors_give_the_reason() {
        let body: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let h = "{\"shape\":(1,2),\"fortran_order\":False,\"descr\":\"<f4\"}";
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
        bytes.extend_from_slice(h.as_bytes());
        bytes.extend_from_slice(&body);
        let v = parse_npy(&bytes, "a.npy").unwrap();
        assert_eq!((v.n, v.dim, v.data), (1, 2, vec![1.0, 2.0]));
        let e = parse_npy(b"\x93NUMPY\x01\x00\x04\x00{'x}", "b.npy").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("b.npy: not a .npy file: "), "{text}");
        assert!(text.len() > "b.npy: not a .npy file: ".len(), "{text}");
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
