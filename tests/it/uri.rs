//! The six location-URI rules: a table of hand-written bad URIs, each caught
//! by its own `UriError` variant, good URIs and their parts, relative
//! locations, resolution, and property-based round trips.

use object_store::path::Path;
use parqivf::store::uri::{LocationUri, RelativeLocation, Scheme, UriError};
use proptest::prelude::*;

/// Which variant a bad URI must produce (the payload is checked elsewhere).
fn variant(error: &UriError) -> &'static str {
    match error {
        UriError::Empty => "Empty",
        UriError::NotAbsolute { .. } => "NotAbsolute",
        UriError::UppercaseScheme { .. } => "UppercaseScheme",
        UriError::UnsupportedScheme { .. } => "UnsupportedScheme",
        UriError::SchemeNotEnabled { .. } => "SchemeNotEnabled",
        UriError::UserInfo { .. } => "UserInfo",
        UriError::Query { .. } => "Query",
        UriError::Fragment { .. } => "Fragment",
        UriError::DotSegment { .. } => "DotSegment",
        UriError::DotDotSegment { .. } => "DotDotSegment",
        UriError::RepeatedSeparator { .. } => "RepeatedSeparator",
        UriError::UppercaseHost { .. } => "UppercaseHost",
        UriError::InvalidHost { .. } => "InvalidHost",
        UriError::MissingHost { .. } => "MissingHost",
        UriError::FileHost { .. } => "FileHost",
        UriError::MissingPath { .. } => "MissingPath",
        UriError::LowercasePercentEncoding { .. } => "LowercasePercentEncoding",
        UriError::MalformedPercentEncoding { .. } => "MalformedPercentEncoding",
        UriError::NonUtf8Path { .. } => "NonUtf8Path",
        UriError::EncodedUnreserved { .. } => "EncodedUnreserved",
        UriError::EncodedSlash { .. } => "EncodedSlash",
        UriError::InvalidCharacter { .. } => "InvalidCharacter",
        UriError::WildcardInHost { .. } => "WildcardInHost",
        UriError::RecursiveWildcard { .. } => "RecursiveWildcard",
        UriError::PatternTrailingSlash { .. } => "PatternTrailingSlash",
        UriError::PatternNotAllowed { .. } => "PatternNotAllowed",
        UriError::NotRelative { .. } => "NotRelative",
        UriError::InvalidPattern { .. } => "InvalidPattern",
    }
}

const BAD: &[(&str, &str)] = &[
    ("", "Empty"),
    ("/data/table/", "NotAbsolute"),
    ("s3:bucket/table", "NotAbsolute"),
    ("3s://bucket/", "NotAbsolute"),
    // rule 1
    ("S3://bucket/table/", "UppercaseScheme"),
    ("File:///data/", "UppercaseScheme"),
    ("http://example.com/table/", "UnsupportedScheme"),
    ("hdfs://namenode/table/", "UnsupportedScheme"),
    // rule 2
    ("s3://key:secret@bucket/table/", "UserInfo"),
    ("s3://user@bucket/table/", "UserInfo"),
    ("s3://bucket/table/?versionId=3", "Query"),
    ("s3://bucket/table/#part", "Fragment"),
    ("s3://bucket/./table/", "DotSegment"),
    ("s3://bucket/table/.", "DotSegment"),
    ("s3://bucket/a/../table/", "DotDotSegment"),
    ("file:///data/..", "DotDotSegment"),
    ("s3://bucket//table/", "RepeatedSeparator"),
    ("s3://bucket/table//part.parquet", "RepeatedSeparator"),
    ("file:////data/", "RepeatedSeparator"),
    // rule 3
    ("s3://Bucket/table/", "UppercaseHost"),
    ("memory://Store/x", "UppercaseHost"),
    ("s3://bucket:9000/table/", "InvalidHost"),
    ("s3://buck%20et/table/", "InvalidHost"),
    ("s3://.bucket/table/", "InvalidHost"),
    ("s3:///table/", "MissingHost"),
    ("memory:///x", "MissingHost"),
    ("file://localhost/data/", "FileHost"),
    ("file://", "MissingPath"),
    // rule 4
    ("s3://bucket/a%2cb/", "LowercasePercentEncoding"),
    ("s3://bucket/a%e2%82%ac/", "LowercasePercentEncoding"),
    ("s3://bucket/a%2/", "MalformedPercentEncoding"),
    ("s3://bucket/a%G0/", "MalformedPercentEncoding"),
    ("s3://bucket/a%FF/", "NonUtf8Path"),
    // rule 5
    ("s3://bucket/%41bc/", "EncodedUnreserved"),
    ("s3://bucket/a%2Db/", "EncodedUnreserved"),
    ("s3://bucket/a%7E/", "EncodedUnreserved"),
    ("s3://bucket/a%2Fb/", "EncodedSlash"),
    ("s3://bucket/a b/", "InvalidCharacter"),
    ("s3://bucket/é/", "InvalidCharacter"),
    ("s3://bucket/a\\b/", "InvalidCharacter"),
    // rule 6
    ("s3://buck*/table/", "WildcardInHost"),
    ("s3://bucket/**/part.parquet", "RecursiveWildcard"),
    ("s3://bucket/t/a**b.parquet", "RecursiveWildcard"),
    ("s3://bucket/t/*/", "PatternTrailingSlash"),
];

#[test]
fn every_bad_uri_is_caught_by_its_rule() {
    for (uri, expected) in BAD {
        match LocationUri::parse(uri) {
            Ok(parsed) => panic!("{uri:?} was accepted as {parsed:?}, expected {expected}"),
            Err(error) => assert_eq!(variant(&error), *expected, "{uri:?}: {error}"),
        }
    }
}

#[test]
fn cloud_schemes_need_their_feature() {
    let gs = LocationUri::parse("gs://bucket/table/");
    if cfg!(feature = "gcp") {
        assert_eq!(gs.unwrap().scheme(), Scheme::Gs);
    } else {
        assert!(matches!(
            gs,
            Err(UriError::SchemeNotEnabled { feature: "gcp", .. })
        ));
    }
    let az = LocationUri::parse("az://container/table/");
    if cfg!(feature = "azure") {
        assert_eq!(az.unwrap().scheme(), Scheme::Az);
    } else {
        assert!(matches!(
            az,
            Err(UriError::SchemeNotEnabled {
                feature: "azure",
                ..
            })
        ));
    }
}

#[test]
fn errors_carry_positions() {
    assert_eq!(
        LocationUri::parse("s3://bucket/ab%2c"),
        Err(UriError::LowercasePercentEncoding {
            uri: "s3://bucket/ab%2c".into(),
            position: 14
        })
    );
    assert_eq!(
        LocationUri::parse("s3://b/x//y"),
        Err(UriError::RepeatedSeparator {
            uri: "s3://b/x//y".into(),
            position: 8
        })
    );
    assert_eq!(
        LocationUri::parse("s3://b/x/../y"),
        Err(UriError::DotDotSegment {
            uri: "s3://b/x/../y".into(),
            segment: 1
        })
    );
}

#[test]
fn good_uris_parse_into_parts() {
    let uri = LocationUri::parse("s3://my-bucket.v2/warehouse/docs/").unwrap();
    assert_eq!(
        (uri.scheme(), uri.host(), uri.path()),
        (Scheme::S3, "my-bucket.v2", "/warehouse/docs/")
    );
    assert!(uri.is_directory() && !uri.is_pattern());
    assert_eq!(uri.object_path(), Path::from("warehouse/docs"));

    let file = LocationUri::parse("file:///data/a%20b/x.parquet").unwrap();
    assert_eq!((file.scheme(), file.host()), (Scheme::File, ""));
    assert!(!file.is_directory());
    assert_eq!(
        file.object_path(),
        Path::from_iter(["data", "a b", "x.parquet"])
    );

    let bucket = LocationUri::parse("s3://bucket").unwrap();
    assert!(bucket.is_directory());
    assert_eq!(bucket.object_path(), Path::default());

    let memory = LocationUri::parse("memory://tests/idx").unwrap();
    assert_eq!((memory.scheme(), memory.host()), (Scheme::Memory, "tests"));
    // Reserved characters stay encoded when they must, a literal '*' is %2A.
    let literal = LocationUri::parse("s3://b/a%2A/").unwrap();
    assert!(!literal.is_pattern());
}

#[test]
fn trailing_slash_is_significant() {
    let dir = LocationUri::parse("s3://b/t/").unwrap();
    let object = LocationUri::parse("s3://b/t").unwrap();
    assert_ne!(dir, object);
    assert!(dir.is_directory() && !object.is_directory());
    let rel = RelativeLocation::parse("x.parquet").unwrap();
    assert_eq!(dir.join(&rel).unwrap().as_str(), "s3://b/t/x.parquet");
    assert_eq!(object.join(&rel).unwrap().as_str(), "s3://b/x.parquet");
}

#[test]
fn patterns_are_one_root_or_one_pattern() {
    let pattern = LocationUri::parse("file:///data/emb/date=*/part-*.parquet").unwrap();
    assert!(pattern.is_pattern());
    assert_eq!(pattern.static_prefix(), Path::from("data/emb"));
    let matcher = pattern.matcher().unwrap();
    assert!(matcher.matches(&Path::from("data/emb/date=2024-01-01/part-3.parquet")));
    assert!(!matcher.matches(&Path::from("data/emb/date=2024-01-01/sub/part-3.parquet")));
    assert!(matches!(
        LocationUri::parse_root("s3://b/t/*.parquet"),
        Err(UriError::PatternNotAllowed { .. })
    ));
    assert!(matches!(
        pattern.join(&RelativeLocation::parse("x").unwrap()),
        Err(UriError::PatternNotAllowed { .. })
    ));
}

#[test]
fn relative_locations_cannot_escape() {
    let cases: &[(&str, &str)] = &[
        ("", "NotRelative"),
        ("/abs/path", "NotRelative"),
        ("../other/manifest.json", "DotDotSegment"),
        ("postings/../../x", "DotDotSegment"),
        ("./postings", "DotSegment"),
        ("postings//manifest.json", "RepeatedSeparator"),
        ("postings/*.json", "PatternNotAllowed"),
        ("postings/%2E%2E/x", "EncodedUnreserved"),
        ("a%2Fb", "EncodedSlash"),
        ("a?b", "Query"),
    ];
    for (location, expected) in cases {
        let error = RelativeLocation::parse(location).expect_err(location);
        assert_eq!(variant(&error), *expected, "{location:?}: {error}");
    }
    let rel = RelativeLocation::parse("postings/manifest.json").unwrap();
    assert_eq!(
        rel.resolve_path(&Path::from("warehouse/idx/snap-1")),
        Path::from("warehouse/idx/snap-1/postings/manifest.json")
    );
    let base = LocationUri::parse("memory://m/idx/snap-1/index.json").unwrap();
    assert_eq!(
        base.join(&rel).unwrap().as_str(),
        "memory://m/idx/snap-1/postings/manifest.json"
    );
}

/// A path segment in canonical form: unreserved and sub-delim characters, and
/// uppercase encodings of characters that must be encoded.
fn segment() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[A-Za-z0-9._~!$&'()+,;=:@-]{1,6}",
        prop::sample::select(vec!["%20", "%2A", "%25", "%3F", "%23", "%E2%82%AC", "%5B"])
            .prop_map(str::to_string),
    ];
    prop::collection::vec(piece, 1..4)
        .prop_map(|p| p.concat())
        .prop_filter("dot segments", |s| s != "." && s != "..")
}

fn valid_uri() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["file", "memory", "s3"]),
        "[a-z0-9][a-z0-9-]{0,8}",
        prop::collection::vec(segment(), 0..4),
        prop::option::of(0usize..4),
        any::<bool>(),
    )
        .prop_map(|(scheme, host, mut segments, wildcard, trailing)| {
            let host = if scheme == "file" {
                String::new()
            } else {
                host
            };
            if segments.is_empty() && scheme == "file" {
                segments.push("root".to_string());
            }
            let pattern = match wildcard {
                Some(at) if !segments.is_empty() => {
                    let at = at % segments.len();
                    segments[at] = format!("{}*", segments[at]);
                    true
                }
                _ => false,
            };
            let slash = if trailing && !pattern { "/" } else { "" };
            let path = if segments.is_empty() {
                String::new()
            } else {
                format!("/{}{slash}", segments.join("/"))
            };
            format!("{scheme}://{host}{path}")
        })
}

proptest! {
    #[test]
    fn canonical_uris_round_trip(uri in valid_uri()) {
        let parsed = LocationUri::parse(&uri).unwrap();
        prop_assert_eq!(parsed.to_string(), uri.clone());
        let reparsed: LocationUri = parsed.to_string().parse().unwrap();
        prop_assert_eq!(&reparsed, &parsed);
        prop_assert_eq!(format!("{}://{}{}", parsed.scheme().as_str(), parsed.host(), parsed.path()), uri);
        if !parsed.is_pattern() {
            prop_assert!(parsed.is_directory() || parsed.matcher().unwrap().matches(&parsed.object_path()));
        }
    }

    #[test]
    fn uppercasing_the_scheme_breaks_rule_1(uri in valid_uri()) {
        let (scheme, rest) = uri.split_once("://").unwrap();
        let upper = format!("{}://{rest}", scheme.to_ascii_uppercase());
        let is_uppercase_scheme = matches!(LocationUri::parse(&upper), Err(UriError::UppercaseScheme { .. }));
        prop_assert!(is_uppercase_scheme);
    }

    #[test]
    fn doubling_a_separator_breaks_rule_2(uri in valid_uri()) {
        let parsed = LocationUri::parse(&uri).unwrap();
        prop_assume!(parsed.path().len() > 1);
        // The path's first separator doubled (not the first match of the
        // path's text, which may sit in the host: `memory://x/x`).
        let doubled = format!("{}://{}/{}", parsed.scheme().as_str(), parsed.host(), parsed.path());
        let is_repeated = matches!(LocationUri::parse(&doubled), Err(UriError::RepeatedSeparator { .. }));
        prop_assert!(is_repeated);
    }

    #[test]
    fn lowercasing_hex_breaks_rule_4(uri in valid_uri()) {
        let lowered = uri.replace("%2A", "%2a").replace("%E2%82%AC", "%e2%82%ac").replace("%5B", "%5b").replace("%3F", "%3f");
        prop_assume!(lowered != uri);
        let is_lowercase = matches!(LocationUri::parse(&lowered), Err(UriError::LowercasePercentEncoding { .. }));
        prop_assert!(is_lowercase);
    }

    #[test]
    fn arbitrary_input_never_panics(input in "\\PC{0,40}") {
        let _ = LocationUri::parse(&input);
        let _ = RelativeLocation::parse(&input);
    }

    #[test]
    fn relative_resolution_stays_below_base(segments in prop::collection::vec(segment(), 1..4)) {
        let rel = RelativeLocation::parse(&segments.join("/")).unwrap();
        let base = Path::from("base/dir");
        let resolved = rel.resolve_path(&base);
        prop_assert!(resolved.prefix_matches(&base));
        prop_assert_eq!(resolved.parts().count(), 2 + segments.len());
    }
}
