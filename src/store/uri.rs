//! Location URIs of the Parquet Relation Profile (§Provider Definitions): a
//! strict parser and validator for the six rules, plus the relative locations
//! that index-table definitions store.
//!
//! A [`LocationUri`] is accepted only in its canonical form, so two spellings of
//! the same location can never both be valid:
//!
//! 1. a lowercase scheme;
//! 2. no user information, query, fragment, `.` segment, `..` segment or
//!    repeated `/`;
//! 3. a lowercase DNS host name;
//! 4. uppercase hexadecimal percent-encodings;
//! 5. no percent-encoded unreserved character and no encoded `/`;
//! 6. one table root or one `*` wildcard pattern.
//!
//! Each rule has its own [`UriError`] variant. A trailing `/` is significant:
//! `s3://b/t/` names a directory (table root), `s3://b/t` names one object.
//! A raw `*` in the path is a wildcard that matches within one segment (never
//! across `/`); a literal asterisk is written `%2A`. Supported schemes: `file`
//! (empty host: `file:///abs/path`), `memory` (host = store name), `s3`
//! (host = bucket); `gs` and `az` are recognised and accepted when the crate is
//! built with the `gcp` / `azure` features. Every other scheme is rejected.
//!
//! ```
//! use parqivf::store::uri::LocationUri;
//! let uri: LocationUri = "s3://bucket/docs/date=*/part-*.parquet".parse().unwrap();
//! assert!(uri.is_pattern());
//! assert_eq!(uri.static_prefix().as_ref(), "docs");
//! assert!("S3://bucket/docs/".parse::<LocationUri>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use object_store::path::Path;
use thiserror::Error;

/// A violated location-URI rule. Every variant carries the offending input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UriError {
    #[error("empty location URI")]
    Empty,
    #[error("{uri:?} is not an absolute URI of the form scheme://host/path")]
    NotAbsolute { uri: String },
    /// Rule 1.
    #[error("{uri:?}: the scheme {scheme:?} must be lowercase")]
    UppercaseScheme { uri: String, scheme: String },
    #[error("{uri:?}: unsupported scheme {scheme:?} (supported: file, memory, s3, gs, az)")]
    UnsupportedScheme { uri: String, scheme: String },
    #[error("{uri:?}: scheme {scheme:?} needs parqivf built with the cargo feature {feature:?}")]
    SchemeNotEnabled {
        uri: String,
        scheme: String,
        feature: &'static str,
    },
    /// Rule 2: user information.
    #[error("{uri:?}: user information is not allowed (credentials come from the environment)")]
    UserInfo { uri: String },
    /// Rule 2: query.
    #[error("{uri:?}: a query ('?') is not allowed")]
    Query { uri: String },
    /// Rule 2: fragment.
    #[error("{uri:?}: a fragment ('#') is not allowed")]
    Fragment { uri: String },
    /// Rule 2: `.` segment.
    #[error("{uri:?}: '.' segment at path segment {segment}")]
    DotSegment { uri: String, segment: usize },
    /// Rule 2: `..` segment.
    #[error("{uri:?}: '..' segment at path segment {segment}")]
    DotDotSegment { uri: String, segment: usize },
    /// Rule 2: repeated `/`.
    #[error("{uri:?}: repeated '/' at byte {position}")]
    RepeatedSeparator { uri: String, position: usize },
    /// Rule 3.
    #[error("{uri:?}: the host {host:?} must be lowercase")]
    UppercaseHost { uri: String, host: String },
    #[error("{uri:?}: invalid host {host:?} (a DNS name: a-z, 0-9, '-', '.', '_')")]
    InvalidHost { uri: String, host: String },
    #[error("{uri:?}: scheme {scheme:?} needs a host (bucket, container or store name)")]
    MissingHost { uri: String, scheme: String },
    #[error("{uri:?}: a file URI has an empty host (file:///absolute/path), found {host:?}")]
    FileHost { uri: String, host: String },
    #[error("{uri:?}: a file URI needs an absolute path")]
    MissingPath { uri: String },
    /// Rule 4.
    #[error("{uri:?}: percent-encoding at byte {position} must use uppercase hex")]
    LowercasePercentEncoding { uri: String, position: usize },
    #[error("{uri:?}: malformed percent-encoding at byte {position}")]
    MalformedPercentEncoding { uri: String, position: usize },
    #[error("{uri:?}: the path is not UTF-8 once percent-decoded")]
    NonUtf8Path { uri: String },
    /// Rule 5: an encoded unreserved character.
    #[error(
        "{uri:?}: {character:?} is unreserved and must not be percent-encoded (byte {position})"
    )]
    EncodedUnreserved {
        uri: String,
        position: usize,
        character: char,
    },
    /// Rule 5: an encoded `/`.
    #[error("{uri:?}: '/' must not be percent-encoded (byte {position})")]
    EncodedSlash { uri: String, position: usize },
    #[error("{uri:?}: character {character:?} at byte {position} must be percent-encoded")]
    InvalidCharacter {
        uri: String,
        position: usize,
        character: char,
    },
    /// Rule 6: a wildcard outside the path.
    #[error("{uri:?}: '*' is only allowed in the path")]
    WildcardInHost { uri: String },
    /// Rule 6: `**` (a wildcard never crosses `/`).
    #[error("{uri:?}: '**' is not a pattern: '*' matches within one path segment")]
    RecursiveWildcard { uri: String, segment: usize },
    /// Rule 6: a pattern names files, not a directory.
    #[error("{uri:?}: a '*' pattern must not end with '/'")]
    PatternTrailingSlash { uri: String },
    /// Rule 6: where one root (not a pattern) is required.
    #[error("{uri:?}: a '*' pattern is not allowed here; name one location")]
    PatternNotAllowed { uri: String },
    /// Rule 6: a pattern segment that does not compile as a glob.
    #[error("{uri:?}: invalid '*' pattern: {reason}")]
    InvalidPattern { uri: String, reason: String },
    #[error("relative location {location:?} must not be empty or start with '/'")]
    NotRelative { location: String },
}

/// A supported URI scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Local file system, `file:///absolute/path`.
    File,
    /// A process-global in-memory store, `memory://name/prefix` (tests).
    Memory,
    /// Amazon S3 or an S3-compatible endpoint, `s3://bucket/prefix`.
    S3,
    /// Google Cloud Storage, `gs://bucket/prefix` (feature `gcp`).
    Gs,
    /// Azure Blob Storage, `az://container/prefix` (feature `azure`).
    Az,
}

impl Scheme {
    /// The scheme as written in a URI.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::File => "file",
            Scheme::Memory => "memory",
            Scheme::S3 => "s3",
            Scheme::Gs => "gs",
            Scheme::Az => "az",
        }
    }

    fn from_lowercase(uri: &str, scheme: &str) -> Result<Scheme, UriError> {
        let not_enabled = |feature| UriError::SchemeNotEnabled {
            uri: uri.to_string(),
            scheme: scheme.to_string(),
            feature,
        };
        match scheme {
            "file" => Ok(Scheme::File),
            "memory" => Ok(Scheme::Memory),
            "s3" => Ok(Scheme::S3),
            "gs" if cfg!(feature = "gcp") => Ok(Scheme::Gs),
            "gs" => Err(not_enabled("gcp")),
            "az" if cfg!(feature = "azure") => Ok(Scheme::Az),
            "az" => Err(not_enabled("azure")),
            _ => Err(UriError::UnsupportedScheme {
                uri: uri.to_string(),
                scheme: scheme.to_string(),
            }),
        }
    }
}

/// A validated, canonical location URI: one table root, one object, or one
/// `*` pattern. Displays exactly as parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocationUri {
    raw: String,
    scheme: Scheme,
    /// Byte range of the host in `raw`.
    host_start: usize,
    /// Byte offset where the path (empty or starting with `/`) begins.
    path_start: usize,
}

impl LocationUri {
    /// Parses and validates `uri` against the six rules.
    ///
    /// # Errors
    /// The [`UriError`] variant of the first violated rule.
    pub fn parse(uri: &str) -> Result<LocationUri, UriError> {
        if uri.is_empty() {
            return Err(UriError::Empty);
        }
        let not_absolute = || UriError::NotAbsolute {
            uri: uri.to_string(),
        };
        let colon = uri.find(':').ok_or_else(not_absolute)?;
        let scheme = &uri[..colon];
        let valid_scheme = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !valid_scheme || !uri[colon..].starts_with("://") {
            return Err(not_absolute());
        }
        if scheme.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(UriError::UppercaseScheme {
                uri: uri.to_string(),
                scheme: scheme.to_string(),
            });
        }
        let scheme = Scheme::from_lowercase(uri, scheme)?;
        if uri.contains('?') {
            return Err(UriError::Query {
                uri: uri.to_string(),
            });
        }
        if uri.contains('#') {
            return Err(UriError::Fragment {
                uri: uri.to_string(),
            });
        }
        let host_start = colon + 3;
        let path_start = uri[host_start..]
            .find('/')
            .map_or(uri.len(), |i| host_start + i);
        let host = &uri[host_start..path_start];
        validate_host(uri, scheme, host)?;
        let path = &uri[path_start..];
        if scheme == Scheme::File && path.is_empty() {
            return Err(UriError::MissingPath {
                uri: uri.to_string(),
            });
        }
        if let Some(rest) = path.strip_prefix('/') {
            validate_segments(uri, rest, path_start + 1, true)?;
        }
        Ok(LocationUri {
            raw: uri.to_string(),
            scheme,
            host_start,
            path_start,
        })
    }

    /// Parses `uri` and requires it to name one location, not a pattern.
    ///
    /// # Errors
    /// As [`LocationUri::parse`], or [`UriError::PatternNotAllowed`].
    pub fn parse_root(uri: &str) -> Result<LocationUri, UriError> {
        let parsed = LocationUri::parse(uri)?;
        if parsed.is_pattern() {
            return Err(UriError::PatternNotAllowed {
                uri: uri.to_string(),
            });
        }
        Ok(parsed)
    }

    /// The URI exactly as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host: bucket, container or store name; empty for `file`.
    pub fn host(&self) -> &str {
        &self.raw[self.host_start..self.path_start]
    }

    /// The percent-encoded path: empty or starting with `/`.
    pub fn path(&self) -> &str {
        &self.raw[self.path_start..]
    }

    /// Whether the path contains a `*` wildcard.
    pub fn is_pattern(&self) -> bool {
        self.path().contains('*')
    }

    /// Whether the URI names a directory (a table root): it ends with `/` or
    /// has an empty path.
    pub fn is_directory(&self) -> bool {
        self.path().is_empty() || self.path().ends_with('/')
    }

    fn encoded_segments(&self) -> impl Iterator<Item = &str> {
        self.path()
            .strip_prefix('/')
            .unwrap_or("")
            .split('/')
            .filter(|s| !s.is_empty())
    }

    /// The decoded object-store path inside the host (no wildcard handling:
    /// for a pattern, use [`LocationUri::static_prefix`] and
    /// [`LocationMatcher::matches`]).
    pub fn object_path(&self) -> Path {
        store_path(self.encoded_segments().map(decode))
    }

    /// The longest leading run of segments without a wildcard: the prefix to
    /// list when expanding a pattern. For a root it is the whole path.
    pub fn static_prefix(&self) -> Path {
        store_path(
            self.encoded_segments()
                .take_while(|s| !s.contains('*'))
                .map(decode),
        )
    }

    /// The matcher of this URI: which objects (paths inside its host) it
    /// names. A pattern matches objects with as many segments, each segment
    /// matched by a `globset` glob in which the raw `*` is the only wildcard
    /// (never crossing `/`); a directory root matches every object below it;
    /// any other root matches itself. Compile it once, then match every
    /// listed object.
    ///
    /// # Errors
    /// [`UriError::InvalidPattern`] when a segment does not compile as a glob.
    pub fn matcher(&self) -> Result<LocationMatcher, UriError> {
        if !self.is_pattern() && self.is_directory() {
            return Ok(LocationMatcher::Below(
                self.encoded_segments().map(decode).collect(),
            ));
        }
        let segments = self
            .encoded_segments()
            .map(|segment| {
                let glob: Vec<String> = segment
                    .split('*')
                    .map(|piece| globset::escape(&decode(piece)))
                    .collect();
                globset::GlobBuilder::new(&glob.join("*"))
                    .literal_separator(true)
                    .backslash_escape(false)
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|e| UriError::InvalidPattern {
                        uri: self.raw.clone(),
                        reason: e.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(LocationMatcher::Segments(segments))
    }

    /// The `file:///` URI of `path`, a location written in an object store's
    /// own path syntax (`object_store` path segments, whose reserved bytes are
    /// percent-encoded) in which a raw `*` is a wildcard. This is how a
    /// location inside a store without a URI of its own (a `LocalFileSystem`
    /// rooted at `/`, a test store) enters the location model: its
    /// [`LocationUri::static_prefix`], [`LocationUri::object_path`] and
    /// [`LocationUri::matcher`] then read that store.
    ///
    /// # Errors
    /// The [`UriError`] of the rule the path breaks (a `.` or `..` segment,
    /// `**`, a repeated `/`, …).
    pub fn from_store_path(path: &str) -> Result<LocationUri, UriError> {
        let encoded: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(|segment| {
                segment
                    .split('*')
                    .map(|piece| encode_path(&decode(piece)).replace('*', "%2A"))
                    .collect::<Vec<_>>()
                    .join("*")
            })
            .collect();
        LocationUri::parse(&format!("file:///{}", encoded.join("/")))
    }

    /// Resolves `relative` against this URI the way RFC 3986 does: relative to
    /// the directory this URI names (itself when it ends with `/`, else its
    /// parent). `s3://b/snap/index.json` + `postings/manifest.json` =
    /// `s3://b/snap/postings/manifest.json`.
    ///
    /// # Errors
    /// [`UriError::PatternNotAllowed`] when this URI is a pattern.
    pub fn join(&self, relative: &RelativeLocation) -> Result<LocationUri, UriError> {
        if self.is_pattern() {
            return Err(UriError::PatternNotAllowed {
                uri: self.raw.clone(),
            });
        }
        let dir_end = self.raw[self.path_start..]
            .rfind('/')
            .map_or(self.raw.len(), |i| self.path_start + i);
        let joined = format!("{}/{}", &self.raw[..dir_end], relative.as_str());
        LocationUri::parse(&joined)
    }
}

impl fmt::Display for LocationUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl FromStr for LocationUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LocationUri::parse(s)
    }
}

/// Which objects a [`LocationUri`] names, compiled once
/// ([`LocationUri::matcher`]).
#[derive(Debug, Clone)]
pub enum LocationMatcher {
    /// A directory root: every object strictly below these decoded segments.
    Below(Vec<String>),
    /// A pattern or one object: one glob per segment, as many segments.
    Segments(Vec<globset::GlobMatcher>),
}

impl LocationMatcher {
    /// Whether the object `path` (inside the URI's host) is named.
    pub fn matches(&self, path: &Path) -> bool {
        let parts = path.parts().map(|p| decode(p.as_ref()));
        match self {
            LocationMatcher::Below(prefix) => {
                let parts: Vec<String> = parts.collect();
                parts.len() > prefix.len() && prefix.iter().zip(&parts).all(|(p, s)| p == s)
            }
            LocationMatcher::Segments(globs) => {
                let mut count = 0;
                for (i, part) in parts.enumerate() {
                    count += 1;
                    if globs.get(i).is_none_or(|g| !g.is_match(part.as_str())) {
                        return false;
                    }
                }
                count == globs.len()
            }
        }
    }
}

/// The hive `name=value` partitions of an object's folders, outermost first:
/// each folder segment of `path` percent-decoded (object_store's encoding)
/// and split at its first `=`; the last segment, the object's own name, never
/// counts, nor does a segment with an empty name. The one partition parser
/// of the crate (Parquet and DuckLake sources alike).
pub fn hive_partitions(path: &Path) -> Vec<(String, String)> {
    let parts: Vec<String> = path.parts().map(|p| decode(p.as_ref())).collect();
    let folders = parts.len().saturating_sub(1);
    parts[..folders]
        .iter()
        .filter_map(|s| {
            let (k, v) = s.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// A relative location (`postings/manifest.json`, `centroids/`): segments
/// follow the same rules as a URI path, with no wildcard, no leading `/`, and
/// no `.`/`..` segment, so it can never escape the base it is resolved against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelativeLocation {
    raw: String,
}

impl RelativeLocation {
    /// Parses and validates a relative location.
    ///
    /// # Errors
    /// [`UriError::NotRelative`] for an empty or `/`-rooted input,
    /// [`UriError::PatternNotAllowed`] for a `*`, otherwise the path-rule
    /// variant (`DotDotSegment`, `RepeatedSeparator`, …).
    pub fn parse(location: &str) -> Result<RelativeLocation, UriError> {
        if location.is_empty() || location.starts_with('/') {
            return Err(UriError::NotRelative {
                location: location.to_string(),
            });
        }
        if location.contains('*') {
            return Err(UriError::PatternNotAllowed {
                uri: location.to_string(),
            });
        }
        if location.contains('?') {
            return Err(UriError::Query {
                uri: location.to_string(),
            });
        }
        if location.contains('#') {
            return Err(UriError::Fragment {
                uri: location.to_string(),
            });
        }
        validate_segments(location, location, 0, false)?;
        Ok(RelativeLocation {
            raw: location.to_string(),
        })
    }

    /// The location as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Resolves against an object-store directory `base` (segment by segment,
    /// percent-decoded).
    pub fn resolve_path(&self, base: &Path) -> Path {
        let mut path = base.clone();
        for segment in self.raw.split('/').filter(|s| !s.is_empty()) {
            path = path.join(decode(segment));
        }
        path
    }
}

impl fmt::Display for RelativeLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

fn validate_host(uri: &str, scheme: Scheme, host: &str) -> Result<(), UriError> {
    let err_uri = || uri.to_string();
    if host.contains('@') {
        return Err(UriError::UserInfo { uri: err_uri() });
    }
    if host.contains('*') {
        return Err(UriError::WildcardInHost { uri: err_uri() });
    }
    if host.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(UriError::UppercaseHost {
            uri: err_uri(),
            host: host.to_string(),
        });
    }
    let dns =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_');
    if !host.chars().all(dns) || host.starts_with('.') || host.ends_with('.') || host.contains("..")
    {
        return Err(UriError::InvalidHost {
            uri: err_uri(),
            host: host.to_string(),
        });
    }
    match (scheme, host.is_empty()) {
        (Scheme::File, false) => Err(UriError::FileHost {
            uri: err_uri(),
            host: host.to_string(),
        }),
        (Scheme::File, true) | (_, false) => Ok(()),
        (_, true) => Err(UriError::MissingHost {
            uri: err_uri(),
            scheme: scheme.as_str().to_string(),
        }),
    }
}

/// `path` as the path of a canonical URI: every byte the rules do not allow
/// raw (non-ASCII, spaces, `%`, `#`, `?`, …) percent-encoded, `/` kept, so
/// `données é/*.parquet` becomes `donn%C3%A9es%20%C3%A9/*.parquet`.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b == b'/' || is_allowed_raw(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_allowed_raw(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Validates `path` (the part after the leading `/`, segments separated by
/// `/`). `offset` is the byte position of `path` inside `uri`, for errors.
fn validate_segments(uri: &str, path: &str, offset: usize, absolute: bool) -> Result<(), UriError> {
    let err_uri = || uri.to_string();
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let position = offset + i;
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
            let Some(hex) = hex else {
                return Err(UriError::MalformedPercentEncoding {
                    uri: err_uri(),
                    position,
                });
            };
            if hex.iter().any(u8::is_ascii_lowercase) {
                return Err(UriError::LowercasePercentEncoding {
                    uri: err_uri(),
                    position,
                });
            }
            let value = hex_value(hex[0]) * 16 + hex_value(hex[1]);
            if value == b'/' {
                return Err(UriError::EncodedSlash {
                    uri: err_uri(),
                    position,
                });
            }
            if is_unreserved(value) {
                return Err(UriError::EncodedUnreserved {
                    uri: err_uri(),
                    position,
                    character: char::from(value),
                });
            }
            i += 3;
        } else if b == b'/' || is_allowed_raw(b) {
            i += 1;
        } else {
            let character = path[i..]
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            return Err(UriError::InvalidCharacter {
                uri: err_uri(),
                position,
                character,
            });
        }
    }
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len() - 1;
    let mut position = offset;
    for (index, segment) in segments.iter().enumerate() {
        match *segment {
            "" if index != last || (index == 0 && !absolute) => {
                return Err(UriError::RepeatedSeparator {
                    uri: err_uri(),
                    position: position.saturating_sub(1),
                });
            }
            "." => {
                return Err(UriError::DotSegment {
                    uri: err_uri(),
                    segment: index,
                });
            }
            ".." => {
                return Err(UriError::DotDotSegment {
                    uri: err_uri(),
                    segment: index,
                });
            }
            s if s.contains("**") => {
                return Err(UriError::RecursiveWildcard {
                    uri: err_uri(),
                    segment: index,
                });
            }
            _ => {}
        }
        position += segment.len() + 1;
    }
    if path.contains('*') && path.ends_with('/') {
        return Err(UriError::PatternTrailingSlash { uri: err_uri() });
    }
    if percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .is_err()
    {
        return Err(UriError::NonUtf8Path { uri: err_uri() });
    }
    Ok(())
}

fn hex_value(h: u8) -> u8 {
    match h {
        b'0'..=b'9' => h - b'0',
        b'a'..=b'f' => h - b'a' + 10,
        _ => h - b'A' + 10,
    }
}

/// Percent-decodes a validated segment (validation guarantees UTF-8).
/// The object-store path of decoded segments, spelled the way stores spell
/// the keys they list: `Path::parse` keeps a non-ASCII or space character as
/// it is (a local file system lists `données é`, where `Path::from` would
/// give `donn%C3%A9es%20%C3%A9`). A segment holding `%`, or one `parse`
/// refuses, is percent-encoded instead, so that [`LocationMatcher`], which
/// decodes listed segments, reads it back unchanged.
fn store_path(segments: impl Iterator<Item = String>) -> Path {
    let segments: Vec<String> = segments.collect();
    if segments.iter().any(|s| s.contains('%')) {
        return segments.into_iter().collect();
    }
    Path::parse(segments.join("/")).unwrap_or_else(|_| segments.into_iter().collect())
}

fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(uri: &str, path: &str) -> bool {
        let uri = LocationUri::parse(uri).unwrap();
        uri.matcher().unwrap().matches(&Path::from(path))
    }

    #[test]
    fn segment_wildcards_match_within_one_segment() {
        let m = |pattern: &str, name: &str| matches(&format!("memory://m/{pattern}"), name);
        assert!(m("part-*.parquet", "part-00001.parquet"));
        assert!(m("*", "anything"));
        assert!(m("a*b*c", "abc"));
        assert!(!m("a*b*c", "acb"));
        assert!(!m("part-*.parquet", "part-1.txt"));
        assert!(m("%2A*", "*x"));
        assert!(!m("%2A", "x"));
        assert!(!m("ab*ba", "aba"));
        // Glob syntax other than the raw `*` is literal text.
        assert!(m("%5Ba%5D*", "[a]1"));
        assert!(!m("%5Ba%5D*", "a1"));
        assert!(m("%7Bx,y%7D-*", "{x,y}-1"));
        assert!(m("%3F*", "?z"));
        assert!(!m("%3F*", "az"));
        assert!(m("%5C*", "\\q"));
    }

    #[test]
    fn pattern_matching_and_prefix() {
        let uri = LocationUri::parse("memory://m/t/date=*/part-*.parquet").unwrap();
        assert_eq!(uri.static_prefix(), Path::from("t"));
        assert!(matches(uri.as_str(), "t/date=2024/part-1.parquet"));
        assert!(!matches(uri.as_str(), "t/date=2024/x/part-1.parquet"));
        assert!(!matches(uri.as_str(), "t/date=2024"));
        assert!(!matches(uri.as_str(), "u/date=2024/part-1.parquet"));
        assert!(matches("memory://m/t/", "t/a/b.parquet"));
        assert!(!matches("memory://m/t/", "t"));
        assert!(!matches("memory://m/t/", "tx/a.parquet"));
        assert!(matches("memory://m/t/a.parquet", "t/a.parquet"));
        assert!(!matches("memory://m/t/a.parquet", "t/a.parquet/b"));
    }

    #[test]
    fn store_paths_become_file_uris_with_their_wildcards() {
        let uri = LocationUri::from_store_path("/données é/x%2Ay/*.parquet").unwrap();
        assert_eq!(
            uri.as_str(),
            "file:///donn%C3%A9es%20%C3%A9/x%2Ay/*.parquet"
        );
        // spelled as a local file system lists it (see `store_path`)
        assert_eq!(uri.static_prefix(), Path::parse("données é/x*y").unwrap());
        let matcher = uri.matcher().unwrap();
        assert!(matcher.matches(&Path::from_iter(["données é", "x*y", "a.parquet"])));
        assert!(!matcher.matches(&Path::from_iter(["données é", "xzy", "a.parquet"])));
        assert!(matches!(
            LocationUri::from_store_path("t/**/a.parquet"),
            Err(UriError::RecursiveWildcard { .. })
        ));
    }
}
