//! Property-based fuzzing of every parser of untrusted input: `manifest.json`,
//! `index.json`, the commit log's version documents, the latest commit's
//! bundle (`versions/latest-bundle.bin`), and the `.npy`,
//! `.fvecs` and `.ivecs` readers. Each parser gets three kinds of input:
//! arbitrary bytes, byte-level mutations of a valid document (flips,
//! insertions, deletions, truncation), and JSON-level mutations (one value
//! anywhere in the document replaced by another of any JSON type, including
//! huge, negative and fractional numbers). The property: the parser returns
//! `Ok` or a typed error and never panics; what it accepts, it accepts
//! consistently (re-serialising an accepted document and parsing it again
//! gives the same value).
//!
//! `PARQIVF_FUZZ_CASES` sets the cases per property (default 2000, so the
//! suite runs in seconds in CI; the closing notes give longer runs).

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::format::definition::IndexDefinition;
use parqivf::format::manifest::Manifest;
use parqivf::format::open_bundle::{OpenBundle, Part};
use parqivf::format::warehouse::{self, LatestCommit};
use parqivf::vector_file::{parse_fvecs, parse_ivecs, parse_npy};
use proptest::prelude::*;
use serde_json::Value;

const MANIFESTS: [&str; 2] = [
    include_str!("../../manifests/examples/manifest-empty.json"),
    include_str!("../../manifests/examples/manifest-spanning-cid.json"),
];
const DEFINITIONS: [&str; 2] = [
    include_str!("../../manifests/examples/index-definition.json"),
    include_str!("../../manifests/examples/index-definition-ducklake.json"),
];
const COMMIT: &str = include_str!("../../manifests/examples/commit.json");
const LATEST_COMMIT: &str = include_str!("../../manifests/examples/latest-commit.json");

/// A valid bundle: the example copy, each pinned document and listed
/// footer as that many bytes.
fn bundle() -> Vec<u8> {
    let copy = LatestCommit::parse(LATEST_COMMIT.as_bytes()).unwrap();
    let part = |path: String, offset: Option<u64>, length: u64, b: u8| {
        let bytes = Bytes::from(vec![b; length as usize]);
        (
            Part {
                path,
                offset,
                length,
            },
            bytes,
        )
    };
    let folder = copy.commit.snapshot.clone();
    let documents = copy
        .commit
        .pins
        .iter()
        .map(|p| part(format!("{folder}/{}", p.path), None, p.size, b'd'))
        .collect();
    let footers = copy
        .footers_ahead
        .iter()
        .map(|f| {
            part(
                format!("{folder}/{}", f.path),
                Some(f.offset),
                f.length,
                b'f',
            )
        })
        .collect();
    let b = OpenBundle {
        copy: serde_json::from_str(LATEST_COMMIT).unwrap(),
        documents,
        footers,
    };
    b.encode().unwrap().to_vec()
}

/// The bundle parser: never panics; an accepted bundle encodes again to
/// one that parses the same.
fn check_bundle(bytes: &[u8]) {
    if let Some(b) = OpenBundle::parse(&Bytes::copy_from_slice(bytes)) {
        let again = b.encode().expect("re-encode an accepted bundle");
        let again = OpenBundle::parse(&again).expect("re-parse an accepted bundle");
        assert_eq!(
            (again.copy, again.documents, again.footers),
            (b.copy, b.documents, b.footers)
        );
    }
}

fn cases() -> u32 {
    std::env::var("PARQIVF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// One byte-level edit of a document.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, m)| Edit::Flip(i, m)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(doc: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = doc.to_vec();
    for e in edits {
        let n = out.len().max(1);
        match *e {
            Edit::Flip(i, m) if !out.is_empty() => out[i % n] ^= m,
            Edit::Insert(i, b) => out.insert(i % (out.len() + 1), b),
            Edit::Delete(i) if !out.is_empty() => {
                out.remove(i % n);
            }
            Edit::Truncate(i) => out.truncate(i % (out.len() + 1)),
            _ => {}
        }
    }
    out
}

/// A JSON value of any type, with the numbers parsers trip on.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            Just(u64::MAX),
            Just(u64::from(u32::MAX) + 1),
            Just(0u64),
            Just(1u64)
        ]
        .prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        "[a-z0-9/._*=:-]{0,12}".prop_map(Value::from),
        Just(Value::from("../../etc/passwd")),
        Just(Value::from("s3://bucket/x")),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z-]{1,10}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every path (object keys and array indices) to a value in `v`.
fn paths(v: &Value, prefix: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                prefix.push(Value::from(k.as_str()));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                prefix.push(Value::from(i));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// `doc` with the value at its `pick`-th path replaced by `with` (or, with
/// `remove`, the key deleted), serialised.
fn mutate_json(doc: &str, pick: usize, with: Value, remove: bool) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(doc).unwrap();
    let mut all = Vec::new();
    paths(&v, &mut Vec::new(), &mut all);
    let path = &all[pick % all.len()];
    if let Some((last, parent)) = path.split_last() {
        let mut node = &mut v;
        for step in parent {
            node = match step {
                Value::String(k) => node.get_mut(k.as_str()).unwrap(),
                _ => node.get_mut(step.as_u64().unwrap() as usize).unwrap(),
            };
        }
        match (node, last) {
            (Value::Object(m), Value::String(k)) if remove => {
                m.remove(k.as_str());
            }
            (Value::Object(m), Value::String(k)) => {
                m.insert(k.clone(), with);
            }
            (Value::Array(a), i) => a[i.as_u64().unwrap() as usize] = with,
            _ => {}
        }
    } else {
        v = with;
    }
    serde_json::to_vec(&v).unwrap()
}

/// The manifest parser: never panics; an accepted manifest round-trips.
fn check_manifest(bytes: &[u8]) {
    if let Ok(m) = Manifest::parse(bytes) {
        let again = Manifest::parse(&m.to_json_bytes()).expect("re-parse an accepted manifest");
        assert_eq!(again, m);
    }
}

/// The index-definition parser: never panics; an accepted one round-trips.
fn check_definition(bytes: &[u8]) {
    if let Ok(d) = IndexDefinition::from_json(bytes) {
        let again =
            IndexDefinition::from_json(d.to_json()).expect("re-parse an accepted definition");
        assert_eq!(again, d);
    }
}

/// The commit log reader over a store holding `bytes` as version 1 (and,
/// with `hint`, a `_latest` hint naming a version): never panics.
fn check_commit(bytes: &[u8], hint: Option<&[u8]>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let index = Path::from("idx");
        store
            .put(
                &warehouse::version_path(&index, 1),
                PutPayload::from(bytes.to_vec()),
            )
            .await
            .unwrap();
        if let Some(h) = hint {
            // Where the writer keeps its hint to the newest version.
            let hint_path = index.clone().join("versions").join("latest-hint.json");
            store
                .put(&hint_path, PutPayload::from(h.to_vec()))
                .await
                .unwrap();
        }
        if let Ok(Some(c)) = warehouse::current(&store, &index).await {
            assert_eq!(
                c.version, 1,
                "an accepted commit is the version it is stored as"
            );
        }
        // The same bytes as the latest commit's copy, read while the log is
        // checked: it is used only when it is the current version.
        let copy = index.clone().join("versions").join("latest-commit.json");
        store
            .put(&copy, PutPayload::from(bytes.to_vec()))
            .await
            .unwrap();
        let got = warehouse::current_ahead(&store, &index, |c, _| async move { c }).await;
        if let Ok((Some(c), early)) = got {
            assert_eq!(c.version, 1);
            assert!(
                early.is_none_or(|e| e == c),
                "a copy used only when current"
            );
        }
    });
}

/// A valid `.npy` file: version `v`, `n × dim` little-endian f32.
fn npy(v: u8, n: usize, dim: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n}, {dim}), }}");
    let pre = if v == 1 { 10 } else { 12 };
    let mut header = dict.into_bytes();
    while (pre + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([v, 0]);
    if v == 1 {
        out.extend((header.len() as u16).to_le_bytes());
    } else {
        out.extend((header.len() as u32).to_le_bytes());
    }
    out.extend(header);
    for i in 0..n * dim {
        out.extend((i as f32).to_le_bytes());
    }
    out
}

/// A valid `.fvecs`/`.ivecs` file: per row, `dim` as i32 then `dim` values.
fn xvecs(n: usize, dim: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.extend((dim as i32).to_le_bytes());
        for j in 0..dim {
            out.extend(((i * dim + j) as f32).to_le_bytes());
        }
    }
    out
}

fn check_vectors(bytes: &[u8]) {
    for parsed in [
        parse_npy(bytes, "fuzz.npy").map(|v| (v.n, v.dim, v.data.len())),
        parse_fvecs(bytes, "fuzz.fvecs").map(|v| (v.n, v.dim, v.data.len())),
        parse_ivecs(bytes, "fuzz.ivecs").map(|v| (v.n, v.dim, v.data.len())),
    ]
    .into_iter()
    .flatten()
    {
        let (n, dim, len) = parsed;
        assert_eq!(
            n.checked_mul(dim),
            Some(len),
            "an accepted file has n × dim values"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn manifest_parser_never_panics(
        doc in prop::sample::select(MANIFESTS.to_vec()),
        edits in prop::collection::vec(edit(), 1..5),
        raw in prop::collection::vec(any::<u8>(), 0..256),
        pick in any::<usize>(),
        with in json_value(),
        remove in any::<bool>(),
    ) {
        check_manifest(&raw);
        check_manifest(&apply(doc.as_bytes(), &edits));
        check_manifest(&mutate_json(doc, pick, with, remove));
    }

    #[test]
    fn index_definition_parser_never_panics(
        doc in prop::sample::select(DEFINITIONS.to_vec()),
        edits in prop::collection::vec(edit(), 1..5),
        raw in prop::collection::vec(any::<u8>(), 0..256),
        pick in any::<usize>(),
        with in json_value(),
        remove in any::<bool>(),
    ) {
        check_definition(&raw);
        check_definition(&apply(doc.as_bytes(), &edits));
        check_definition(&mutate_json(doc, pick, with, remove));
    }

    #[test]
    fn commit_reader_never_panics(
        edits in prop::collection::vec(edit(), 1..5),
        raw in prop::collection::vec(any::<u8>(), 0..128),
        pick in any::<usize>(),
        with in json_value(),
        remove in any::<bool>(),
        hint in json_value(),
    ) {
        check_commit(&raw, None);
        check_commit(&apply(COMMIT.as_bytes(), &edits), None);
        let hint = serde_json::to_vec(&serde_json::json!({ "version": hint })).unwrap();
        check_commit(&mutate_json(COMMIT, pick, with, remove), Some(&hint));
    }

    #[test]
    fn bundle_parser_never_panics(
        edits in prop::collection::vec(edit(), 1..5),
        raw in prop::collection::vec(any::<u8>(), 0..128),
        header in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        check_bundle(&raw);
        check_bundle(&apply(&bundle(), &edits));
        // A plausible start (the magic and a length) before arbitrary bytes.
        let mut framed = b"PQVFOB01".to_vec();
        framed.extend((header.len() as u32).to_le_bytes());
        framed.extend(&header);
        check_bundle(&framed);
    }

    #[test]
    fn vector_file_parsers_never_panic(
        version in prop::sample::select(vec![1u8, 2, 3]),
        n in 0usize..4,
        dim in 1usize..6,
        edits in prop::collection::vec(edit(), 1..5),
        raw in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        check_vectors(&raw);
        check_vectors(&apply(&npy(version, n, dim), &edits));
        check_vectors(&apply(&xvecs(n, dim), &edits));
    }
}

#[test]
fn the_valid_seeds_parse() {
    for m in MANIFESTS {
        Manifest::parse(m.as_bytes()).unwrap();
    }
    for d in DEFINITIONS {
        IndexDefinition::from_json(d).unwrap();
    }
    assert!(OpenBundle::parse(&Bytes::from(bundle())).is_some());
    let v = parse_npy(&npy(1, 3, 4), "seed.npy").unwrap();
    assert_eq!((v.n, v.dim), (3, 4));
    let v = parse_fvecs(&xvecs(3, 4), "seed.fvecs").unwrap();
    assert_eq!((v.n, v.dim), (3, 4));
}
