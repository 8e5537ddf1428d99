//! `versions/latest-bundle.bin`: the latest commit's copy together with every
//! byte an open of its snapshot reads, in one object. A new process reads it
//! in its first round, beside the hint and the copy, and then holds the
//! snapshot's documents and postings footers at once (a refreshed
//! snapshot's too: its base's documents and every delta table's). So it can
//! start its first query while the commit log confirms that the commit is
//! current ([`crate::format::snapshot::Snapshot::open_latest`]), instead of
//! a round after.
//!
//! The bundle is advisory, like the copy ([`crate::format::warehouse`]):
//! - the snapshot writer writes it after the commit
//!   ([`crate::format::snapshot_writer::publish_bundle`]), from what an open
//!   of the committed snapshot reads, and the next commit overwrites it;
//! - it is used only when its copy equals `latest-commit.json`;
//! - each document is checked against its pin, as when read on its own;
//! - each footer is checked against its pin in `footers.json`, as any
//!   footer.
//!
//! So a stale, torn or edited bundle costs rounds, never a wrong answer.
//!
//! ```text
//! magic    8 bytes   "PQVFOB01"
//! length   u32 LE    n, the length of the header
//! header   n bytes   JSON: {"copy": latest-commit.json's document,
//!                           "documents": [{"path", "length"}, …],
//!                           "footers": [{"path", "offset", "length"}, …]}
//! body               each document's bytes, then each footer's, in the header's order
//! ```
//!
//! Paths are relative to the index location (`snapshots/<id>/…`). A footer
//! is the `length` bytes from `offset` of its postings object. Nothing else
//! is in the object; a bundle of any other length is refused. A snapshot
//! whose documents and footers total more than [`OPEN_BUNDLE_BYTES`] gets a
//! bundle of its documents alone, or none when they alone are larger.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// The first 8 bytes of a bundle.
pub const OPEN_BUNDLE_MAGIC: &[u8; 8] = b"PQVFOB01";

/// Most bytes of documents and footers a bundle holds: one GET of more
/// than this would outlast the round it saves.
pub const OPEN_BUNDLE_BYTES: u64 = 8 << 20;

/// Where one part of the body comes from: an object relative to the index
/// location, its first byte (`None`: a whole document) and its length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Part {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub length: u64,
}

/// The header of a bundle.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    copy: serde_json::Value,
    documents: Vec<Part>,
    footers: Vec<Part>,
}

/// A bundle: the copy, and each document and footer with its bytes (slices
/// of the object when parsed, not copies). The copy is kept as JSON: its
/// reader ([`crate::format::warehouse::Latest::bundle`]) parses it and
/// compares it with `latest-commit.json`.
#[derive(Debug, Clone)]
pub struct OpenBundle {
    pub copy: serde_json::Value,
    pub documents: Vec<(Part, Bytes)>,
    pub footers: Vec<(Part, Bytes)>,
}

impl OpenBundle {
    /// The object's bytes, or `None` when there is no document, a part's
    /// length differs from its bytes', a document has an offset or a footer
    /// none, or the parts total more than [`OPEN_BUNDLE_BYTES`]. Pure.
    pub fn encode(&self) -> Option<Bytes> {
        let fits = |parts: &[(Part, Bytes)], ranged: bool| {
            parts
                .iter()
                .all(|(p, b)| p.length == b.len() as u64 && p.offset.is_some() == ranged)
        };
        let parts = || self.documents.iter().chain(&self.footers);
        let body: u64 = parts().map(|(_, b)| b.len() as u64).sum();
        if self.documents.is_empty()
            || !fits(&self.documents, false)
            || !fits(&self.footers, true)
            || body > OPEN_BUNDLE_BYTES
        {
            return None;
        }
        let header = Header {
            copy: self.copy.clone(),
            documents: self.documents.iter().map(|(p, _)| p.clone()).collect(),
            footers: self.footers.iter().map(|(p, _)| p.clone()).collect(),
        };
        let header = serde_json::to_vec(&header).ok()?;
        let mut out = BytesMut::with_capacity(12 + header.len() + body as usize);
        out.put_slice(OPEN_BUNDLE_MAGIC);
        out.put_u32_le(u32::try_from(header.len()).ok()?);
        out.put_slice(&header);
        for (_, bytes) in parts() {
            out.put_slice(bytes);
        }
        Some(out.freeze())
    }

    /// The bundle in `bytes`, or `None` unless it is one exactly: the
    /// magic, a header holding a valid copy and parts, and a body of
    /// exactly the parts' lengths. Pure; never panics.
    pub fn parse(bytes: &Bytes) -> Option<OpenBundle> {
        let rest = bytes.strip_prefix(OPEN_BUNDLE_MAGIC)?;
        let (n, rest) = rest.split_first_chunk::<4>()?;
        let n = u32::from_le_bytes(*n) as usize;
        let header: Header = serde_json::from_slice(rest.get(..n)?).ok()?;
        let copy = header.copy;
        let mut at = 12usize.checked_add(n)?;
        let mut take = |parts: Vec<Part>, ranged: bool| -> Option<Vec<(Part, Bytes)>> {
            parts
                .into_iter()
                .map(|p| {
                    let end = at.checked_add(usize::try_from(p.length).ok()?)?;
                    if end > bytes.len() || p.offset.is_some() != ranged {
                        return None;
                    }
                    let part = bytes.slice(at..end);
                    at = end;
                    Some((p, part))
                })
                .collect()
        };
        let documents = take(header.documents, false)?;
        let footers = take(header.footers, true)?;
        (at == bytes.len() && !documents.is_empty()).then_some(OpenBundle {
            copy,
            documents,
            footers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(path: &str, offset: Option<u64>, bytes: &'static [u8]) -> (Part, Bytes) {
        let length = bytes.len() as u64;
        let path = path.to_string();
        (
            Part {
                path,
                offset,
                length,
            },
            Bytes::from_static(bytes),
        )
    }

    fn fixture() -> OpenBundle {
        let docs = [
            part("snapshots/s/index.json", None, b"{}"),
            part("snapshots/s/postings/manifest.json", None, b"[1,2,3]"),
            part("snapshots/base/centroids/centroids.parquet", None, b""),
        ];
        let copy = serde_json::json!({
            "format-version": 2,
            "version": 3,
            "snapshot": "snapshots/s",
            "parent": 2,
            "committed-at-ms": 1,
            "pins": []
        });
        OpenBundle {
            copy,
            documents: docs.to_vec(),
            footers: vec![
                part("snapshots/s/postings/f0.parquet", Some(100), b"PAR1x"),
                part("snapshots/d/postings/f1.parquet", Some(7), b"abc"),
            ],
        }
    }

    #[test]
    fn a_bundle_reads_back_what_was_written() {
        let b = fixture();
        let bytes = b.encode().unwrap();
        assert_eq!(&bytes[..8], OPEN_BUNDLE_MAGIC);
        let back = OpenBundle::parse(&bytes).unwrap();
        assert_eq!(back.copy, b.copy);
        assert_eq!(back.documents, b.documents);
        assert_eq!(back.footers, b.footers);
    }

    /// Lengths that disagree with the bytes, a document with an offset or
    /// a footer without one, no document, and a body over the bound give no
    /// bundle.
    #[test]
    fn a_bundle_is_written_only_when_its_parts_agree() {
        let b = fixture();
        let mut short = b.clone();
        short.documents[1].0.length = 5;
        assert!(short.encode().is_none());
        let mut ranged = b.clone();
        ranged.documents[0].0.offset = Some(0);
        assert!(ranged.encode().is_none());
        let mut whole = b.clone();
        whole.footers[0].0.offset = None;
        assert!(whole.encode().is_none());
        let mut none = b.clone();
        none.documents.clear();
        assert!(none.encode().is_none());
        let mut big = b.clone();
        let n = OPEN_BUNDLE_BYTES as usize - 2 - 7 - 5 - 3;
        big.documents[2] = (
            Part {
                path: "snapshots/s/big".into(),
                offset: None,
                length: n as u64,
            },
            Bytes::from(vec![0u8; n]),
        );
        assert!(big.encode().is_some());
        big.documents[2].0.length += 1;
        big.documents[2].1 = Bytes::from(vec![0u8; n + 1]);
        assert!(big.encode().is_none());
    }

    /// Every prefix, one byte more, another magic, a header that is not one
    /// and a huge header length: refused, never a panic.
    #[test]
    fn anything_but_an_exact_bundle_is_refused() {
        let bytes = fixture().encode().unwrap();
        for end in 0..bytes.len() {
            assert!(OpenBundle::parse(&bytes.slice(..end)).is_none(), "{end}");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(OpenBundle::parse(&Bytes::from(longer)).is_none());
        let mut magic = bytes.to_vec();
        magic[7] = b'2';
        assert!(OpenBundle::parse(&Bytes::from(magic)).is_none());
        let mut header = bytes.to_vec();
        header[12] = b'[';
        assert!(OpenBundle::parse(&Bytes::from(header)).is_none());
        let mut huge = bytes.to_vec();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(OpenBundle::parse(&Bytes::from(huge)).is_none());
    }
}
