//! `versions/latest-bundle.bin`: the latest commit's copy together with every
//! byte an open of its snapshot reads, in one object. A new process reads it
//! in its first round, beside the hint and the copy, and then holds the
//! snapshot's documents and postings footers at once. So it can start its
//! first query while the commit log confirms that the commit is current
//! ([`crate::format::snapshot::Snapshot::open_latest`]), instead of a round
//! after.
//!
//! The bundle is advisory, like the copy ([`crate::format::warehouse`]):
//! - it is written after the commit and overwritten by the next one;
//! - it is used only when its copy equals `latest-commit.json`;
//! - each document is checked against its pin in that commit, as when read
//!   on its own;
//! - each footer is checked against its pin in `footers.json`, as any
//!   footer.
//!
//! So a stale, torn or edited bundle costs rounds, never a wrong answer.
//!
//! ```text
//! magic    8 bytes   "PQVFOB01"
//! length   u32 LE    n, the length of the header
//! header   n bytes   the copy: latest-commit.json's document (commit and footers-ahead)
//! body               each document the commit pins, in pin order (`size` bytes each),
//!                    then each footer of `footers-ahead`, in order (`length` bytes each)
//! ```
//!
//! Nothing else is in the object; a bundle of any other length is refused. A
//! snapshot whose documents and footers total more than [`OPEN_BUNDLE_BYTES`]
//! gets no bundle, and an open reads its documents a round later.

use bytes::{BufMut, Bytes, BytesMut};

use crate::format::warehouse::LatestCommit;

/// The first 8 bytes of a bundle.
pub const OPEN_BUNDLE_MAGIC: &[u8; 8] = b"PQVFOB01";

/// Most bytes of documents and footers a bundle holds. A larger snapshot gets
/// none: one GET of more than this would outlast the round it saves.
pub const OPEN_BUNDLE_BYTES: u64 = 8 << 20;

/// A parsed bundle: the copy, and the bytes of each pinned document and each
/// listed footer, in the copy's order (slices of the object, not copies).
#[derive(Debug, Clone)]
pub struct OpenBundle {
    pub copy: LatestCommit,
    pub documents: Vec<Bytes>,
    pub footers: Vec<Bytes>,
}

impl OpenBundle {
    /// The bundle of `copy`, or `None` when there is no document (a commit
    /// that pins none), a document's length differs from its pin's size, a
    /// footer's from its listed length, or they total more than
    /// [`OPEN_BUNDLE_BYTES`]. Pure.
    pub fn encode(copy: &LatestCommit, documents: &[Bytes], footers: &[Bytes]) -> Option<Bytes> {
        let pins = &copy.commit.pins;
        let listed = &copy.footers_ahead;
        let lengths_match = !documents.is_empty()
            && documents.len() == pins.len()
            && footers.len() == listed.len()
            && documents
                .iter()
                .zip(pins)
                .all(|(d, p)| d.len() as u64 == p.size)
            && footers
                .iter()
                .zip(listed)
                .all(|(f, l)| f.len() as u64 == l.length);
        let body: u64 = documents
            .iter()
            .chain(footers)
            .map(|b| b.len() as u64)
            .sum();
        if !lengths_match || body > OPEN_BUNDLE_BYTES {
            return None;
        }
        let header = copy.to_json();
        let mut out = BytesMut::with_capacity(12 + header.len() + body as usize);
        out.put_slice(OPEN_BUNDLE_MAGIC);
        out.put_u32_le(u32::try_from(header.len()).ok()?);
        out.put_slice(&header);
        for part in documents.iter().chain(footers) {
            out.put_slice(part);
        }
        Some(out.freeze())
    }

    /// The bundle in `bytes`, or `None` unless it is one exactly: the
    /// magic, a header that is a valid copy, and a body of exactly the
    /// lengths the copy gives. Pure; never panics.
    pub fn parse(bytes: &Bytes) -> Option<OpenBundle> {
        let rest = bytes.strip_prefix(OPEN_BUNDLE_MAGIC)?;
        let (n, rest) = rest.split_first_chunk::<4>()?;
        let n = u32::from_le_bytes(*n) as usize;
        let header = rest.get(..n)?;
        let copy = LatestCommit::parse(header)?;
        let mut at = 12usize.checked_add(n)?;
        let lengths = copy
            .commit
            .pins
            .iter()
            .map(|p| p.size)
            .chain(copy.footers_ahead.iter().map(|f| f.length));
        let mut parts = Vec::new();
        for len in lengths {
            let end = at.checked_add(usize::try_from(len).ok()?)?;
            if end > bytes.len() {
                return None;
            }
            parts.push(bytes.slice(at..end));
            at = end;
        }
        if at != bytes.len() {
            return None;
        }
        let footers = parts.split_off(copy.commit.pins.len());
        Some(OpenBundle {
            copy,
            documents: parts,
            footers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pin::Pin;
    use crate::format::warehouse::{COMMIT_FORMAT_VERSION, Commit, FooterAhead};

    fn copy(docs: &[(&str, &[u8])], footers: &[u64]) -> LatestCommit {
        LatestCommit {
            commit: Commit {
                format_version: COMMIT_FORMAT_VERSION,
                version: 3,
                snapshot: "snapshots/s".into(),
                parent: Some(2),
                committed_at_ms: 1,
                pins: docs.iter().map(|(p, b)| Pin::of(p, b)).collect(),
            },
            footers_ahead: footers
                .iter()
                .enumerate()
                .map(|(i, &length)| FooterAhead {
                    path: format!("postings/f{i}.parquet"),
                    offset: 100,
                    length,
                })
                .collect(),
        }
    }

    fn fixture() -> (LatestCommit, Vec<Bytes>, Vec<Bytes>) {
        let docs: [(&str, &[u8]); 3] = [
            ("index.json", b"{}"),
            ("postings/manifest.json", b"[1,2,3]"),
            ("centroids/centroids.parquet", b""),
        ];
        let c = copy(&docs, &[5, 3]);
        let documents = docs
            .iter()
            .map(|(_, b)| Bytes::copy_from_slice(b))
            .collect();
        let footers = vec![Bytes::from_static(b"PAR1x"), Bytes::from_static(b"abc")];
        (c, documents, footers)
    }

    #[test]
    fn a_bundle_reads_back_what_was_written() {
        let (c, documents, footers) = fixture();
        let bytes = OpenBundle::encode(&c, &documents, &footers).unwrap();
        assert_eq!(&bytes[..8], OPEN_BUNDLE_MAGIC);
        let back = OpenBundle::parse(&bytes).unwrap();
        assert_eq!(back.copy.commit, c.commit);
        assert_eq!(back.copy.footers_ahead, c.footers_ahead);
        assert_eq!(back.documents, documents);
        assert_eq!(back.footers, footers);
    }

    /// Lengths that disagree with the copy, and a body over the bound, give
    /// no bundle.
    #[test]
    fn a_bundle_is_written_only_for_the_lengths_its_copy_gives() {
        let (c, documents, footers) = fixture();
        let mut short = documents.clone();
        short[1] = Bytes::from_static(b"[1,2]");
        assert!(OpenBundle::encode(&c, &short, &footers).is_none());
        assert!(OpenBundle::encode(&c, &documents, &footers[..1]).is_none());
        let none = copy(&[], &[]);
        assert!(OpenBundle::encode(&none, &[], &[]).is_none());
        let big = Bytes::from(vec![0u8; OPEN_BUNDLE_BYTES as usize + 1]);
        let c = copy(&[("index.json", &big)], &[]);
        assert!(OpenBundle::encode(&c, &[big], &[]).is_none());
        let fits = Bytes::from(vec![0u8; OPEN_BUNDLE_BYTES as usize]);
        let c = copy(&[("index.json", &fits)], &[]);
        assert!(OpenBundle::encode(&c, &[fits], &[]).is_some());
    }

    /// Every prefix, one byte more, another magic and a header that is not a
    /// copy: refused, never a panic.
    #[test]
    fn anything_but_an_exact_bundle_is_refused() {
        let (c, documents, footers) = fixture();
        let bytes = OpenBundle::encode(&c, &documents, &footers).unwrap();
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
