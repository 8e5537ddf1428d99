//! The strict manifest: one hand-made broken manifest per rule, each caught
//! with its own typed error; determinism; the JSON Schema and its examples.

use crate::support;

use parqivf::format::manifest::{FORMAT_VERSION, Manifest, ManifestError};
use serde_json::{Value, json};

fn sha(c: char) -> String {
    c.to_string().repeat(64)
}

/// A valid manifest: roots [0,3) and [3,8), cid 5 spanning two files.
fn valid() -> Value {
    json!({
        "format-version": 1,
        "nlist": 8,
        "ntotal": 21,
        "cid-offsets": [0, 3, 8],
        "files": [
            {"path": "cid_bucket=000000/part-00000.parquet", "cid-bucket": 0, "min-cid": 0, "max-cid": 2,
             "rows": 6, "size": 100, "sha256": sha('a')},
            {"path": "cid_bucket=000001/part-00000.parquet", "cid-bucket": 1, "min-cid": 3, "max-cid": 5,
             "rows": 8, "size": 100, "sha256": sha('b')},
            {"path": "cid_bucket=000001/part-00001.parquet", "cid-bucket": 1, "min-cid": 5, "max-cid": 7,
             "rows": 7, "size": 100, "sha256": sha('c')}
        ]
    })
}

fn parse_with(edit: impl FnOnce(&mut Value)) -> Result<Manifest, ManifestError> {
    let mut doc = valid();
    edit(&mut doc);
    Manifest::parse(&serde_json::to_vec(&doc).unwrap())
}

fn file(doc: &mut Value, i: usize) -> &mut serde_json::Map<String, Value> {
    doc["files"][i].as_object_mut().unwrap()
}

#[test]
fn valid_manifest_parses_and_shared_boundary_cid_is_not_overlap() {
    let m = parse_with(|_| {}).unwrap();
    assert_eq!(m.format_version, FORMAT_VERSION);
    assert_eq!(m.files.len(), 3);
    assert_eq!((m.files[2].min_cid, m.files[1].max_cid), (5, 5));
}

#[test]
fn serialisation_is_deterministic_and_round_trips() {
    let m = parse_with(|_| {}).unwrap();
    let bytes = m.to_json_bytes();
    assert_eq!(bytes, m.clone().to_json_bytes());
    let again = Manifest::parse(&bytes).unwrap();
    assert_eq!(again, m);
    assert_eq!(again.to_json_bytes(), bytes);
    // Key order on disk is the documented order, whatever the input order.
    let text = String::from_utf8(bytes).unwrap();
    let pos = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(pos("format-version") < pos("nlist") && pos("nlist") < pos("ntotal"));
    assert!(pos("ntotal") < pos("cid-offsets") && pos("cid-offsets") < pos("files"));
}

#[test]
fn not_json() {
    assert!(matches!(Manifest::parse(b"{"), Err(ManifestError::Json(_))));
}

#[test]
fn unknown_key_top_level_and_in_entry() {
    let err = parse_with(|d| {
        d["extra"] = json!(1);
    });
    assert!(
        matches!(err, Err(ManifestError::UnknownKey { ref entry, ref key }) if entry == "manifest" && key == "extra")
    );
    let err = parse_with(|d| {
        file(d, 1).insert("crc".into(), json!(0));
    });
    assert!(
        matches!(err, Err(ManifestError::UnknownKey { ref entry, ref key }) if entry == "files[1]" && key == "crc")
    );
}

#[test]
fn missing_key_top_level_and_in_entry() {
    let err = parse_with(|d| {
        d.as_object_mut().unwrap().remove("ntotal");
    });
    assert!(
        matches!(err, Err(ManifestError::MissingKey { ref entry, key: "ntotal" }) if entry == "manifest")
    );
    let err = parse_with(|d| {
        file(d, 2).remove("sha256");
    });
    assert!(
        matches!(err, Err(ManifestError::MissingKey { ref entry, key: "sha256" }) if entry == "files[2]")
    );
}

#[test]
fn wrong_json_types() {
    let err = parse_with(|d| d["nlist"] = json!("8"));
    assert!(matches!(err, Err(ManifestError::WrongType { ref key, .. }) if key == "nlist"));
    let err = parse_with(|d| d["ntotal"] = json!(21.5));
    assert!(matches!(err, Err(ManifestError::WrongType { ref key, .. }) if key == "ntotal"));
    let err = parse_with(|d| d["files"] = json!({}));
    assert!(matches!(err, Err(ManifestError::WrongType { ref key, .. }) if key == "files"));
    let err = parse_with(|d| {
        file(d, 0).insert("path".into(), json!(7));
    });
    assert!(
        matches!(err, Err(ManifestError::WrongType { ref entry, ref key, .. }) if entry == "files[0]" && key == "path")
    );
    let err = parse_with(|d| d["files"][1] = json!([]));
    assert!(matches!(err, Err(ManifestError::WrongType { ref entry, .. }) if entry == "files[1]"));
}

#[test]
fn negative_numbers() {
    let err = parse_with(|d| {
        file(d, 1).insert("rows".into(), json!(-8));
    });
    assert!(
        matches!(err, Err(ManifestError::Negative { ref entry, ref key, value: -8 }) if entry == "files[1]" && key == "rows")
    );
    let err = parse_with(|d| d["cid-offsets"][1] = json!(-3));
    assert!(
        matches!(err, Err(ManifestError::Negative { ref entry, .. }) if entry == "cid-offsets[1]")
    );
}

#[test]
fn numbers_beyond_their_physical_range() {
    let err = parse_with(|d| {
        file(d, 0).insert("max-cid".into(), json!(1u64 << 31));
    });
    assert!(matches!(err, Err(ManifestError::OutOfRange { ref key, .. }) if key == "max-cid"));
}

#[test]
fn unsupported_format_version_is_incompatible() {
    let err = parse_with(|d| d["format-version"] = json!(2));
    assert!(matches!(
        err,
        Err(ManifestError::Incompatible {
            found: 2,
            supported: FORMAT_VERSION
        })
    ));
}

#[test]
fn cid_offsets_must_start_at_zero() {
    let err = parse_with(|d| d["cid-offsets"] = json!([1, 3, 8]));
    assert!(matches!(
        err,
        Err(ManifestError::CidOffsetsStart { found: 1 })
    ));
}

#[test]
fn cid_offsets_must_not_decrease() {
    let err = parse_with(|d| d["cid-offsets"] = json!([0, 3, 2, 8]));
    assert!(matches!(
        err,
        Err(ManifestError::CidOffsetsDecreasing {
            index: 2,
            previous: 3,
            value: 2
        })
    ));
}

#[test]
fn cid_offsets_must_end_at_nlist() {
    let err = parse_with(|d| d["nlist"] = json!(9));
    assert!(matches!(
        err,
        Err(ManifestError::CidOffsetsEnd { last: 8, nlist: 9 })
    ));
}

#[test]
fn cid_offsets_need_one_root() {
    let err = parse_with(|d| {
        d["cid-offsets"] = json!([0]);
        d["nlist"] = json!(0);
    });
    assert!(matches!(
        err,
        Err(ManifestError::CidOffsetsTooShort { len: 1 })
    ));
}

#[test]
fn min_cid_above_max_cid() {
    let err = parse_with(|d| {
        file(d, 0).insert("min-cid".into(), json!(2));
        file(d, 0).insert("max-cid".into(), json!(1));
    });
    assert!(matches!(
        err,
        Err(ManifestError::MinAboveMax {
            index: 0,
            min_cid: 2,
            max_cid: 1,
            ..
        })
    ));
}

#[test]
fn file_range_outside_its_bucket() {
    // Bucket 0 owns [0, 3): a file reaching cid 3 leaks into root 1.
    let err = parse_with(|d| {
        file(d, 0).insert("max-cid".into(), json!(3));
    });
    assert!(matches!(
        err,
        Err(ManifestError::OutsideBucket {
            index: 0,
            bucket: 0,
            start: 0,
            end: 3,
            max_cid: 3,
            ..
        })
    ));
    let err = parse_with(|d| {
        file(d, 0).insert("path".into(), json!("cid_bucket=000002/part-00000.parquet"));
        file(d, 0).insert("cid-bucket".into(), json!(2));
    });
    assert!(matches!(
        err,
        Err(ManifestError::UnknownBucket {
            index: 0,
            bucket: 2,
            roots: 2,
            ..
        })
    ));
}

#[test]
fn files_out_of_order() {
    let err = parse_with(|d| {
        let files = d["files"].as_array_mut().unwrap();
        files.swap(1, 2);
    });
    assert!(matches!(
        err,
        Err(ManifestError::OutOfOrder { index: 2, .. })
    ));
    // Same (bucket, min-cid): ordered by part, so part 1 before part 0 fails.
    let err = parse_with(|d| {
        file(d, 1).insert("path".into(), json!("cid_bucket=000001/part-00002.parquet"));
        file(d, 2).insert("min-cid".into(), json!(3));
    });
    assert!(matches!(
        err,
        Err(ManifestError::OutOfOrder { index: 2, .. })
    ));
}

#[test]
fn overlapping_ranges() {
    // File 2 starts at cid 4, inside file 1's [3, 5]: more than the shared boundary.
    let err = parse_with(|d| {
        file(d, 2).insert("min-cid".into(), json!(4));
    });
    assert!(matches!(
        err,
        Err(ManifestError::Overlap {
            index: 2,
            min_cid: 4,
            previous_max_cid: 5,
            ..
        })
    ));
}

#[test]
fn non_canonical_paths() {
    for bad in [
        "cid_bucket=1/part-00000.parquet",
        "cid_bucket=000001/part-0.parquet",
        "cid_bucket=000001/part-00000.PARQUET",
        "/cid_bucket=000001/part-00000.parquet",
    ] {
        let err = parse_with(|d| {
            file(d, 1).insert("path".into(), json!(bad));
        });
        assert!(
            matches!(err, Err(ManifestError::NonCanonicalPath { index: 1, ref path }) if path == bad)
        );
    }
    let err = parse_with(|d| {
        file(d, 1).insert("path".into(), json!("cid_bucket=000000/part-00001.parquet"));
    });
    assert!(matches!(
        err,
        Err(ManifestError::PathBucketMismatch {
            index: 1,
            path_bucket: 0,
            cid_bucket: 1,
            ..
        })
    ));
}

#[test]
fn sha256_must_be_64_lowercase_hex() {
    for bad in [sha('A'), "ab".repeat(31), sha('g')] {
        let err = parse_with(|d| {
            file(d, 0).insert("sha256".into(), json!(bad));
        });
        assert!(
            matches!(err, Err(ManifestError::BadSha256 { index: 0, ref sha256, .. }) if *sha256 == bad)
        );
    }
}

#[test]
fn rows_must_sum_to_ntotal() {
    let err = parse_with(|d| d["ntotal"] = json!(20));
    assert!(matches!(
        err,
        Err(ManifestError::RowsSum {
            sum: 21,
            ntotal: 20
        })
    ));
}

#[test]
fn files_hold_at_least_one_row() {
    let err = parse_with(|d| {
        file(d, 0).insert("rows".into(), json!(0));
        d["ntotal"] = json!(15);
    });
    assert!(matches!(
        err,
        Err(ManifestError::EmptyFile { index: 0, .. })
    ));
}

#[test]
fn schema_accepts_the_examples_and_they_parse() {
    let schema: Value =
        serde_json::from_str(include_str!("../../manifests/manifest.schema.json")).unwrap();
    let mut documents: Vec<Value> = schema["examples"].as_array().unwrap().clone();
    for entry in
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/examples")).unwrap()
    {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("manifest")
        {
            documents.push(serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap());
        }
    }
    assert!(documents.len() >= 3);
    for doc in documents.iter().chain([&valid()]) {
        assert_eq!(support::postings::schema_errors(doc), Vec::<String>::new());
        Manifest::parse(&serde_json::to_vec(doc).unwrap()).unwrap();
    }
}

#[test]
fn schema_rejects_what_the_parser_rejects_structurally() {
    let broken: [fn(&mut Value); 6] = [
        |d| d["extra"] = json!(1),
        |d| d["format-version"] = json!(2),
        |d| d["files"][0]["rows"] = json!(-1),
        |d| d["files"][0]["sha256"] = json!(sha('A')),
        |d| d["files"][0]["path"] = json!("cid_bucket=0/part-00000.parquet"),
        |d| d["cid-offsets"] = json!([1, 8]),
    ];
    for edit in broken {
        let mut doc = valid();
        edit(&mut doc);
        assert!(!support::postings::schema_errors(&doc).is_empty(), "{doc}");
        assert!(Manifest::parse(&serde_json::to_vec(&doc).unwrap()).is_err());
    }
}
