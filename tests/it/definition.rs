//! Provider definitions: the examples and the documents the Rust serialiser
//! produces validate against the JSON Schemas; strict parsing turns unknown
//! keys, missing keys and unknown versions into typed errors; index-table
//! locations resolve relative to `index.json` and cannot escape it.

use object_store::path::Path;
use parqivf::distance::Metric;
use parqivf::format::definition::{
    ARTIFACT_MANIFEST, BuildRecord, DefinitionError, IndexDefinition, IndexSource, TableDefinition,
    TableIdentifier,
};
use parqivf::store::uri::{LocationUri, UriError};
use serde_json::{Value, json};

const TABLE_SCHEMA: &str = include_str!("../../manifests/table-definition.schema.json");
const INDEX_SCHEMA: &str = include_str!("../../manifests/index-definition.schema.json");
const TABLE_EXAMPLES: &[&str] = &[
    include_str!("../../manifests/examples/table-definition.json"),
    include_str!("../../manifests/examples/table-definition-pattern.json"),
];
const INDEX_EXAMPLES: &[&str] = &[
    include_str!("../../manifests/examples/index-definition.json"),
    include_str!("../../manifests/examples/index-definition-ducklake.json"),
    include_str!("../../manifests/examples/index-definition-refreshed.json"),
];

fn validator(schema: &str) -> jsonschema::Validator {
    jsonschema::draft202012::new(&serde_json::from_str(schema).unwrap()).unwrap()
}

fn assert_schema_valid(schema: &str, document: &str) {
    let instance: Value = serde_json::from_str(document).unwrap();
    let validator = validator(schema);
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{document}\n{errors:#?}");
}

fn schema_accepts(schema: &str, document: &Value) -> bool {
    validator(schema).is_valid(document)
}

fn build_params() -> BuildRecord {
    BuildRecord {
        vector_column: "embedding".into(),
        id_column: None,
        payload_columns: vec!["title".into(), "lang".into()],
        seed: u64::MAX,
        sample_rows: 1000,
        max_iterations: 25,
        threads: 2,
        skip_invalid: true,
        sort_by: None,
        quantization_error: None,
    }
}

fn index_definition() -> IndexDefinition {
    IndexDefinition::new(
        Metric::InnerProduct,
        96,
        1024,
        32,
        IndexSource::Parquet {
            location: "file:///data/docs/part-*.parquet".into(),
            table_identity: "docs".into(),
        },
        build_params(),
    )
}

fn index_value() -> Value {
    serde_json::from_str(&index_definition().to_json()).unwrap()
}

fn parse_index(value: &Value) -> Result<IndexDefinition, DefinitionError> {
    IndexDefinition::from_json(value.to_string())
}

#[test]
fn examples_validate_against_schemas_and_parse() {
    for example in TABLE_EXAMPLES {
        assert_schema_valid(TABLE_SCHEMA, example);
        TableDefinition::from_json(example).unwrap();
    }
    for example in INDEX_EXAMPLES {
        assert_schema_valid(INDEX_SCHEMA, example);
        IndexDefinition::from_json(example).unwrap();
    }
}

/// Floats in a document read back bit for bit: serde_json's default float
/// parser may land one ulp off (CI's fuzzer found 1.1944440774527283e17
/// read back as …285e17); the crate is built with `float_roundtrip`.
#[test]
fn float_fields_round_trip_exactly() {
    for error in [
        1.1944440774527283e17,
        0.1 + 0.2,
        f64::MIN_POSITIVE,
        1e308,
        5e-324,
    ] {
        let mut definition = index_definition();
        definition.build.quantization_error = Some(error);
        let again = IndexDefinition::from_json(definition.to_json()).unwrap();
        assert_eq!(
            again.build.quantization_error.map(f64::to_bits),
            Some(error.to_bits())
        );
    }
}

#[test]
fn serialised_documents_validate_and_round_trip() {
    let sources = [
        index_definition().source,
        IndexSource::Ducklake {
            catalog: "file:///lake/meta.sqlite".into(),
            schema: "main".into(),
            table: "t".into(),
            snapshot_id: 3,
        },
        IndexSource::VectorFile {
            location: "data/sift_base.fvecs".into(),
        },
    ];
    for source in sources {
        let mut definition = index_definition();
        definition.source = source;
        let text = definition.to_json();
        assert_schema_valid(INDEX_SCHEMA, &text);
        assert_eq!(IndexDefinition::from_json(&text).unwrap(), definition);
    }
    let mut table = TableDefinition::new(
        TableIdentifier {
            catalog: "c".into(),
            namespace: vec!["a".into(), "b".into()],
            name: "t".into(),
        },
        &LocationUri::parse("s3://bucket/t/").unwrap(),
    );
    for identity in [None, Some("stable-id".to_string())] {
        table.properties.table_identity = identity;
        let text = table.to_json();
        assert_schema_valid(TABLE_SCHEMA, &text);
        assert_eq!(TableDefinition::from_json(&text).unwrap(), table);
    }
}

#[test]
fn table_identity_defaults_to_the_serialised_identifier() {
    let table = TableDefinition::from_json(TABLE_EXAMPLES[1]).unwrap();
    assert_eq!(table.properties.table_identity, None);
    assert_eq!(
        table.table_identity(),
        r#"{"catalog":"local","namespace":[],"name":"embeddings"}"#
    );
    let explicit = TableDefinition::from_json(TABLE_EXAMPLES[0]).unwrap();
    assert_eq!(explicit.table_identity(), "lake.public.documents");
}

#[test]
fn unknown_and_missing_keys_are_typed_errors() {
    let mut value = index_value();
    value["extra"] = json!(1);
    assert!(
        matches!(parse_index(&value), Err(DefinitionError::UnknownKey { key, .. }) if key == "extra")
    );
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["tables"]["ivf_postings"]["compression"] = json!("zstd");
    assert!(
        matches!(parse_index(&value), Err(DefinitionError::UnknownKey { key, .. }) if key == "compression")
    );
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["build"]["password"] = json!("x");
    assert!(
        matches!(parse_index(&value), Err(DefinitionError::UnknownKey { key, .. }) if key == "password")
    );

    let mut value = index_value();
    value["source"]["bucket-key"] = json!("x");
    assert!(
        matches!(parse_index(&value), Err(DefinitionError::UnknownKey { key, .. }) if key == "bucket-key")
    );
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value.as_object_mut().unwrap().remove("nlist");
    assert!(
        matches!(parse_index(&value), Err(DefinitionError::MissingKey { key, .. }) if key == "nlist")
    );
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut table: Value = serde_json::from_str(TABLE_EXAMPLES[0]).unwrap();
    table["properties"]["secret-access-key"] = json!("x");
    assert!(matches!(
        TableDefinition::from_json(table.to_string()),
        Err(DefinitionError::UnknownKey { key, .. }) if key == "secret-access-key"
    ));
    assert!(!schema_accepts(TABLE_SCHEMA, &table));

    let mut table: Value = serde_json::from_str(TABLE_EXAMPLES[0]).unwrap();
    table["properties"]
        .as_object_mut()
        .unwrap()
        .remove("location");
    assert!(matches!(
        TableDefinition::from_json(table.to_string()),
        Err(DefinitionError::MissingKey { key, .. }) if key == "location"
    ));

    assert!(matches!(
        IndexDefinition::from_json("{"),
        Err(DefinitionError::Json { .. })
    ));
    let mut value = index_value();
    value["dim"] = json!("96");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Json { .. })
    ));
}

#[test]
fn unknown_versions_are_incompatible() {
    let mut value = index_value();
    value["format-version"] = json!(4);
    // A future version may have other keys: reported as a version problem.
    value["new-key"] = json!(true);
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Incompatible { key: "format-version", found, supported, .. }) if found == "4" && supported == "1..=3"
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["definition-version"] = json!("2");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Incompatible { key: "definition-version", found, .. }) if found == "2"
    ));

    let mut value = index_value();
    value["tables"]["ivf_centroids"]["definition-version"] = json!("7");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Incompatible { key: "definition-version", found, .. }) if found == "7"
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut table: Value = serde_json::from_str(TABLE_EXAMPLES[0]).unwrap();
    table["properties"]["definition-version"] = json!("2");
    table["properties"]["scan-options"] = json!("x");
    assert!(matches!(
        TableDefinition::from_json(table.to_string()),
        Err(DefinitionError::Incompatible { found, .. }) if found == "2"
    ));
    assert!(!schema_accepts(TABLE_SCHEMA, &table));
}

#[test]
fn values_are_validated() {
    type Check = fn(&DefinitionError) -> bool;
    let cases: Vec<(&str, Value, Check)> = vec![
        (
            "provider",
            json!("iceberg"),
            |e| matches!(e, DefinitionError::WrongProvider { found, .. } if found == "iceberg"),
        ),
        ("dim", json!(0), |e| {
            matches!(e, DefinitionError::Zero { key: "dim", .. })
        }),
        ("nlist", json!(0), |e| {
            matches!(e, DefinitionError::Zero { key: "nlist", .. })
        }),
        ("roots", json!(2048), |e| {
            matches!(
                e,
                DefinitionError::RootsExceedNlist {
                    roots: 2048,
                    nlist: 1024
                }
            )
        }),
        ("element-type", json!("f16"), |e| {
            matches!(e, DefinitionError::UnsupportedElementType { .. })
        }),
    ];
    for (key, bad, check) in cases {
        let mut value = index_value();
        value[key] = bad;
        let error = parse_index(&value).expect_err(key);
        assert!(check(&error), "{key}: {error}");
        if key != "roots" {
            assert!(
                !schema_accepts(INDEX_SCHEMA, &value),
                "schema accepted bad {key}"
            );
        }
    }

    let mut value = index_value();
    value["tables"]["ivf_postings"]
        .as_object_mut()
        .unwrap()
        .remove("layout");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Layout {
            table: "ivf_postings",
            found: None,
            ..
        })
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["tables"]["ivf_postings"]["layout"] = json!("hive");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Layout {
            table: "ivf_postings",
            ..
        })
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["tables"]["ivf_centroids"]["layout"] = json!(ARTIFACT_MANIFEST);
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Layout {
            table: "ivf_centroids",
            ..
        })
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    let mut value = index_value();
    value["source"]["location"] = json!("S3://bucket/docs/");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Location {
            source: UriError::UppercaseScheme { .. },
            ..
        })
    ));

    let mut table: Value = serde_json::from_str(TABLE_EXAMPLES[0]).unwrap();
    table["properties"]["location"] = json!("s3://bucket/docs/?x=1");
    assert!(matches!(
        TableDefinition::from_json(table.to_string()),
        Err(DefinitionError::Location {
            source: UriError::Query { .. },
            ..
        })
    ));
    assert!(!schema_accepts(TABLE_SCHEMA, &table));
}

#[test]
fn index_table_locations_are_relative_and_cannot_escape() {
    let definition = index_definition();
    let snapshot = Path::from("warehouse/idx/snapshots/000001");
    assert_eq!(
        definition
            .tables
            .ivf_postings
            .resolve_path("ivf_postings", &snapshot)
            .unwrap(),
        Path::from("warehouse/idx/snapshots/000001/postings/manifest.json")
    );
    assert_eq!(
        definition.centroids_path(&snapshot).unwrap(),
        Path::from("warehouse/idx/snapshots/000001/centroids/centroids.parquet")
    );
    assert_eq!(
        definition.postings_manifest_path(&snapshot).unwrap(),
        Path::from("warehouse/idx/snapshots/000001/postings/manifest.json")
    );
    let index_json = LocationUri::parse("s3://b/idx/snapshots/000001/index.json").unwrap();
    assert_eq!(
        definition
            .tables
            .ivf_centroids
            .resolve_uri("ivf_centroids", &index_json, false)
            .unwrap()
            .as_str(),
        "s3://b/idx/snapshots/000001/centroids/centroids.parquet"
    );

    for escape in ["../other/manifest.json", "postings/../../manifest.json"] {
        let mut value = index_value();
        value["tables"]["ivf_postings"]["location"] = json!(escape);
        assert!(
            matches!(
                parse_index(&value),
                Err(DefinitionError::Location {
                    source: UriError::DotDotSegment { .. },
                    ..
                })
            ),
            "{escape}"
        );
        assert!(!schema_accepts(INDEX_SCHEMA, &value), "{escape}");
    }
    let mut value = index_value();
    value["tables"]["ivf_postings"]["location"] = json!("/etc/manifest.json");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::AbsoluteLocationNotAllowed { .. })
    ));
    assert!(!schema_accepts(INDEX_SCHEMA, &value));

    // An absolute URI is syntactically allowed in the document, but only the
    // caller can allow it at resolution time.
    let mut value = index_value();
    value["tables"]["ivf_postings"]["location"] = json!("s3://elsewhere/idx/manifest.json");
    assert!(schema_accepts(INDEX_SCHEMA, &value));
    let definition = parse_index(&value).unwrap();
    let table = &definition.tables.ivf_postings;
    assert!(matches!(
        table.resolve_path("ivf_postings", &snapshot),
        Err(DefinitionError::AbsoluteLocationNotAllowed { .. })
    ));
    assert!(matches!(
        table.resolve_uri("ivf_postings", &index_json, false),
        Err(DefinitionError::AbsoluteLocationNotAllowed { .. })
    ));
    assert_eq!(
        table
            .resolve_uri("ivf_postings", &index_json, true)
            .unwrap()
            .as_str(),
        "s3://elsewhere/idx/manifest.json"
    );

    let mut value = index_value();
    value["tables"]["ivf_postings"]["location"] = json!("s3://Elsewhere/idx/manifest.json");
    assert!(matches!(
        parse_index(&value),
        Err(DefinitionError::Location {
            source: UriError::UppercaseHost { .. },
            ..
        })
    ));
}
