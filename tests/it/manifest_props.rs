//! Property tests of the manifest: any valid manifest (random hierarchy,
//! random files per bucket with CIDs spanning consecutive files) serialises to
//! bytes that parse back to the same value, re-serialise to the same bytes,
//! and satisfy the JSON Schema.

use crate::support;

use parqivf::format::manifest::{FORMAT_VERSION, FileEntry, Manifest};
use parqivf::format::postings_table::part_path;
use proptest::prelude::*;

/// A valid manifest: root sizes, then per root a sorted list of file
/// boundaries inside the root's range (consecutive files may share a CID).
fn manifest() -> impl Strategy<Value = Manifest> {
    prop::collection::vec(0u32..6, 1..5)
        .prop_flat_map(|sizes| {
            let files = sizes
                .iter()
                .map(|&n| {
                    if n == 0 {
                        Just(vec![]).boxed()
                    } else {
                        prop::collection::vec((0..n, 0..n, 1u64..50, any::<[u8; 32]>()), 0..4)
                            .boxed()
                    }
                })
                .collect::<Vec<_>>();
            (Just(sizes), files)
        })
        .prop_map(|(sizes, per_root)| {
            let mut cid_offsets = vec![0u32];
            for n in &sizes {
                cid_offsets.push(cid_offsets.last().unwrap() + n);
            }
            let mut files = Vec::new();
            for (bucket, raw) in per_root.into_iter().enumerate() {
                let start = cid_offsets[bucket];
                let mut bounds: Vec<(u32, u32, u64, [u8; 32])> = raw
                    .into_iter()
                    .map(|(a, b, rows, sha)| (a.min(b), a.max(b), rows, sha))
                    .collect();
                bounds.sort();
                // Make ranges non-overlapping: each starts at or after the previous end.
                let mut previous_max = 0;
                for (part, (lo, hi, rows, sha)) in bounds.into_iter().enumerate() {
                    let lo = lo.max(previous_max);
                    let hi = hi.max(lo);
                    previous_max = hi;
                    files.push(FileEntry {
                        path: part_path(bucket as u32, part as u32),
                        cid_bucket: bucket as u32,
                        min_cid: start + lo,
                        max_cid: start + hi,
                        rows,
                        size: rows * 100,
                        sha256: hex::encode(sha),
                    });
                }
            }
            Manifest {
                format_version: FORMAT_VERSION,
                nlist: *cid_offsets.last().unwrap(),
                ntotal: files.iter().map(|f| f.rows).sum(),
                cid_offsets,
                files,
            }
        })
}

proptest! {
    #[test]
    fn valid_manifests_round_trip_byte_for_byte(m in manifest()) {
        prop_assert!(m.validate().is_ok(), "{:?}", m.validate());
        let bytes = m.to_json_bytes();
        let parsed = Manifest::parse(&bytes).unwrap();
        prop_assert_eq!(&parsed, &m);
        prop_assert_eq!(parsed.to_json_bytes(), bytes.clone());
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(support::postings::schema_errors(&doc), Vec::<String>::new());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Manifest::parse(&bytes);
    }
}
