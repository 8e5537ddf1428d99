//! Provider definitions (profile §Provider Definitions): the table-definition
//! of a Parquet source, and the index-provider-definition (`index.json`) of a
//! built index snapshot with its two index-table-definitions.
//!
//! Parsing is strict and versioned: the version keys are read first, and a
//! version this reader does not know is [`DefinitionError::Incompatible`]
//! (never a best-effort parse); then every object is parsed with unknown keys
//! and missing keys as typed errors; then the values are validated (URIs by
//! the six rules, provider, layout, numbers). The JSON Schemas
//! `manifests/table-definition.schema.json` and
//! `manifests/index-definition.schema.json` describe the same documents, and
//! `docs/definitions.md` the decisions.
//!
//! Index-table locations are stored relative to `index.json` and resolved at
//! resolution time against wherever the snapshot is found (seed 004: relative
//! by default, absolute only as an escape hatch the caller must allow).
//! `IndexDefinition`'s fields are the shared contract between the build job
//! (writer) and `Index::open` (reader).

use object_store::path::Path;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::distance::Metric;
use crate::store::uri::{LocationUri, RelativeLocation, UriError};

/// The only `definition-version` this reader knows.
pub const DEFINITION_VERSION: &str = "1";
/// The `format-version` of `index.json` this crate writes. Version 2 stores
/// the vectors of a cosine index unit-normalised (the scan's cosine is
/// `1 − dot`); otherwise it equals version 1. Version 3 adds the optional
/// `layers` (a refreshed snapshot: [`crate::format::layers`]) and
/// `source-files` ([`crate::format::source_files`]); a reader that knows
/// only version 2 must not open a refreshed snapshot, as it would return
/// deleted rows.
pub const INDEX_FORMAT_VERSION: u32 = 3;
/// The oldest `format-version` of `index.json` this reader opens: version 1
/// indexes are read as before, except cosine ones, which stored raw vectors
/// and must be rebuilt.
pub const INDEX_FORMAT_VERSION_MIN: u32 = 1;

/// Whether this reader opens an `index.json` of `format-version` `v`.
pub fn is_readable_index_version(v: u64) -> bool {
    (u64::from(INDEX_FORMAT_VERSION_MIN)..=u64::from(INDEX_FORMAT_VERSION)).contains(&v)
}

/// The readable `format-version`s, for error messages.
fn readable_index_versions() -> String {
    format!("{INDEX_FORMAT_VERSION_MIN}..={INDEX_FORMAT_VERSION}")
}
/// An optional document `location` of `index.json` (its `key`), resolved
/// against the snapshot directory.
fn resolve_optional(
    location: Option<&str>,
    key: &str,
    snapshot: &Path,
) -> Result<Option<Path>, DefinitionError> {
    location
        .map(|location| {
            RelativeLocation::parse(location)
                .map(|rel| rel.resolve_path(snapshot))
                .map_err(|source| DefinitionError::Location {
                    document: INDEX_DOC,
                    key: key.to_string(),
                    source,
                })
        })
        .transpose()
}

/// The provider of every table and index this crate writes.
pub const PROVIDER: &str = "parquet";
/// The layout whose location names an authoritative `manifest.json`.
pub const ARTIFACT_MANIFEST: &str = "artifact-manifest";
/// The only element type stored today: little-endian IEEE-754 f32.
pub const ELEMENT_TYPE_F32: &str = "f32";
/// Default location of `ivf_centroids`, relative to `index.json`.
pub const CENTROIDS_LOCATION: &str = "centroids/centroids.parquet";
/// Default location of `ivf_postings`' manifest, relative to `index.json`.
pub const POSTINGS_LOCATION: &str = "postings/manifest.json";

/// The documents of a delta postings table that its layer reference pins,
/// relative to the delta's snapshot folder: its `manifest.json` at the
/// default postings location, and the `footers.json` beside it.
pub fn delta_documents() -> Vec<String> {
    vec![
        POSTINGS_LOCATION.to_string(),
        crate::format::footers::footers_location(POSTINGS_LOCATION),
    ]
}

/// A table-definition or index definition that is not acceptable.
#[derive(Debug, Error)]
pub enum DefinitionError {
    #[error("{document}: not valid JSON or a wrong value type: {source}")]
    Json {
        document: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{document}: unknown key {key:?}")]
    UnknownKey { document: &'static str, key: String },
    #[error("{document}: missing key {key:?}")]
    MissingKey { document: &'static str, key: String },
    #[error("{document}: {key} {found} is not supported (supported: {supported})")]
    Incompatible {
        document: &'static str,
        key: &'static str,
        found: String,
        supported: String,
    },
    #[error("{document}: provider must be \"parquet\", found {found:?}")]
    WrongProvider {
        document: &'static str,
        found: String,
    },
    #[error("{document}: {key} is not a valid location: {source}")]
    Location {
        document: &'static str,
        key: String,
        #[source]
        source: UriError,
    },
    #[error(
        "index table {table}: location {location:?} is absolute, and absolute locations are not allowed here"
    )]
    AbsoluteLocationNotAllowed {
        table: &'static str,
        location: String,
    },
    #[error("index table {table}: layout {found:?} is not supported (expected {expected})")]
    Layout {
        table: &'static str,
        found: Option<String>,
        expected: String,
    },
    #[error("index.json: element type {found:?} is not supported (supported: f32)")]
    UnsupportedElementType { found: String },
    #[error("index.json: {key} must be at least 1, found {found}")]
    Zero { key: &'static str, found: u64 },
    #[error("index.json: roots {roots} exceed nlist {nlist}")]
    RootsExceedNlist { roots: u32, nlist: u32 },
    #[error(transparent)]
    Layers(#[from] crate::format::layers::LayersError),
    #[error("{document}: {key} must not be empty")]
    EmptyValue {
        document: &'static str,
        key: &'static str,
    },
}

const TABLE_DOC: &str = "table-definition";
/// The file name of the index definition at a snapshot root.
pub const INDEX_DEFINITION_FILE: &str = "index.json";
const INDEX_DOC: &str = INDEX_DEFINITION_FILE;

/// The runtime table name of a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableIdentifier {
    pub catalog: String,
    pub namespace: Vec<String>,
    pub name: String,
}

/// The versioned, non-secret provider properties of a Parquet source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TableProperties {
    /// `"1"`.
    pub definition_version: String,
    /// A canonical absolute URI or `*` pattern (the pattern is persisted, not
    /// its expansion).
    pub location: String,
    /// Stable logical identity; defaults to the serialized identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_identity: Option<String>,
}

/// A Parquet source's table-definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDefinition {
    pub identifier: TableIdentifier,
    /// Always `"parquet"`.
    pub provider: String,
    pub properties: TableProperties,
}

impl TableDefinition {
    /// A version-1 Parquet table-definition.
    pub fn new(identifier: TableIdentifier, location: &LocationUri) -> TableDefinition {
        TableDefinition {
            identifier,
            provider: PROVIDER.to_string(),
            properties: TableProperties {
                definition_version: DEFINITION_VERSION.to_string(),
                location: location.to_string(),
                table_identity: None,
            },
        }
    }

    /// Parses and validates a table-definition document.
    ///
    /// # Errors
    /// [`DefinitionError::Incompatible`] for an unknown `definition-version`,
    /// `UnknownKey`/`MissingKey`/`Json` for a malformed document, then the
    /// errors of [`TableDefinition::validate`].
    pub fn from_json(text: impl AsRef<[u8]>) -> Result<TableDefinition, DefinitionError> {
        let value = parse_value(TABLE_DOC, text)?;
        check_version(
            TABLE_DOC,
            value
                .get("properties")
                .and_then(|p| p.get("definition-version")),
            "definition-version",
        )?;
        let definition: TableDefinition = from_value(TABLE_DOC, value)?;
        definition.validate()?;
        Ok(definition)
    }

    /// Pretty-printed JSON.
    pub fn to_json(&self) -> String {
        to_pretty_json(self)
    }

    /// Checks provider, version, identifier and location.
    ///
    /// # Errors
    /// `WrongProvider`, `Incompatible`, `EmptyValue`, or `Location` with the
    /// violated URI rule.
    pub fn validate(&self) -> Result<(), DefinitionError> {
        check_provider(TABLE_DOC, &self.provider)?;
        check_version_str(
            TABLE_DOC,
            "definition-version",
            &self.properties.definition_version,
        )?;
        if self.identifier.name.is_empty() {
            return Err(DefinitionError::EmptyValue {
                document: TABLE_DOC,
                key: "identifier.name",
            });
        }
        if self.properties.table_identity.as_deref() == Some("") {
            return Err(DefinitionError::EmptyValue {
                document: TABLE_DOC,
                key: "table-identity",
            });
        }
        self.location().map(|_| ())
    }

    /// The validated source location.
    ///
    /// # Errors
    /// `Location` with the violated URI rule.
    pub fn location(&self) -> Result<LocationUri, DefinitionError> {
        LocationUri::parse(&self.properties.location).map_err(|source| DefinitionError::Location {
            document: TABLE_DOC,
            key: "properties.location".to_string(),
            source,
        })
    }

    /// `table-identity`, or when omitted the serialized logical identifier:
    /// the compact JSON of `identifier` (unambiguous even when names contain
    /// dots).
    pub fn table_identity(&self) -> String {
        self.properties
            .table_identity
            .clone()
            .unwrap_or_else(|| serde_json::to_string(&self.identifier).unwrap_or_default())
    }
}

/// `index.json` at the root of an index snapshot: the index-provider-definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IndexDefinition {
    pub format_version: u32,
    /// Always `"parquet"`.
    pub provider: String,
    /// `"1"`.
    pub definition_version: String,
    pub metric: Metric,
    pub dim: u32,
    /// `"f32"`.
    pub element_type: String,
    pub nlist: u32,
    pub roots: u32,
    pub tables: IndexTables,
    /// The quantiser parameters of the postings' `code` column
    /// (`quantizer.json`, relative to `index.json`); absent when the index
    /// has no codes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantizer: Option<String>,
    /// How recall grows with the lists probed (`calibration.json`,
    /// relative to `index.json`, a base document like the centroids);
    /// absent when the build measured none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// The indexed files of a Parquet source (`source-files.json`, relative
    /// to `index.json`), which `refresh` compares with a new listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_files: Option<String>,
    /// A refreshed snapshot's layers: the base snapshot (whose centroids,
    /// quantiser and postings the `tables` and `quantizer` locations then
    /// name, relative to the base folder), the delta postings tables and the
    /// deletions. Absent in a built snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<crate::format::layers::Layers>,
    /// What the index was built from.
    pub source: IndexSource,
    /// How it was built (enough to rebuild it byte-identically).
    pub build: BuildRecord,
}

/// The two tables of an index snapshot, with locations relative to `index.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexTables {
    pub ivf_centroids: IndexTableDefinition,
    pub ivf_postings: IndexTableDefinition,
}

/// An index-table-definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IndexTableDefinition {
    pub definition_version: String,
    /// Relative to `index.json` (or absolute where the caller allows it).
    pub location: String,
    /// `Some("artifact-manifest")`: `location` names the authoritative
    /// `manifest.json`; `None`: it names a Parquet table directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
}

/// The source table of an index. The provider tag selects the variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "kebab-case", deny_unknown_fields)]
pub enum IndexSource {
    /// A Parquet table-definition's location and identity.
    #[serde(rename_all = "kebab-case")]
    Parquet {
        location: String,
        table_identity: String,
    },
    /// A DuckLake table at one snapshot.
    #[serde(rename_all = "kebab-case")]
    Ducklake {
        /// The catalog metadata location: the SQLite file, or
        /// `postgres:<conninfo>` with the password removed.
        catalog: String,
        schema: String,
        table: String,
        snapshot_id: i64,
    },
    /// A benchmark vector file (`.npy`, `.fvecs`); rowid = row number.
    #[serde(rename_all = "kebab-case")]
    VectorFile { location: String },
}

/// The build parameters recorded in `index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BuildRecord {
    pub vector_column: String,
    /// `None`: rowid from file order and row number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_column: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub payload_columns: Vec<String>,
    pub seed: u64,
    pub sample_rows: u64,
    pub max_iterations: u32,
    pub threads: u32,
    pub skip_invalid: bool,
    /// The payload column the rows of each list are sorted by (then by
    /// rowid); absent: by rowid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_by: Option<String>,
    /// The mean squared L2 distance of the indexed rows to their leaf
    /// centroids at build time (format version 3): the baseline of
    /// `refresh`'s drift report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization_error: Option<f64>,
}

impl IndexTableDefinition {
    /// A version-1 index-table-definition.
    pub fn new(location: &str, layout: Option<&str>) -> IndexTableDefinition {
        IndexTableDefinition {
            definition_version: DEFINITION_VERSION.to_string(),
            location: location.to_string(),
            layout: layout.map(str::to_string),
        }
    }

    /// Resolves `location` against the object-store directory holding
    /// `index.json` (the usual, relocatable case).
    ///
    /// # Errors
    /// `AbsoluteLocationNotAllowed` for an absolute location, `Location` for
    /// `..`, `.`, `*` or any other path-rule violation.
    pub fn resolve_path(&self, table: &'static str, base: &Path) -> Result<Path, DefinitionError> {
        Ok(self.relative(table)?.resolve_path(base))
    }

    /// Resolves `location` against the URI of `index.json` (or its directory,
    /// ending in `/`). An absolute URI location is accepted only when
    /// `allow_absolute` (the escape hatch), and must then be a valid root.
    ///
    /// # Errors
    /// As [`IndexTableDefinition::resolve_path`]; `Location` for a bad
    /// absolute URI.
    pub fn resolve_uri(
        &self,
        table: &'static str,
        base: &LocationUri,
        allow_absolute: bool,
    ) -> Result<LocationUri, DefinitionError> {
        let location_err = |source| DefinitionError::Location {
            document: INDEX_DOC,
            key: format!("tables.{table}.location"),
            source,
        };
        if allow_absolute && self.location.contains("://") {
            return LocationUri::parse_root(&self.location).map_err(location_err);
        }
        base.join(&self.relative(table)?).map_err(location_err)
    }

    fn relative(&self, table: &'static str) -> Result<RelativeLocation, DefinitionError> {
        if self.location.starts_with('/') || self.location.contains("://") {
            return Err(DefinitionError::AbsoluteLocationNotAllowed {
                table,
                location: self.location.clone(),
            });
        }
        RelativeLocation::parse(&self.location).map_err(|source| DefinitionError::Location {
            document: INDEX_DOC,
            key: format!("tables.{table}.location"),
            source,
        })
    }

    fn validate(
        &self,
        table: &'static str,
        expected_layout: Option<&str>,
    ) -> Result<(), DefinitionError> {
        check_version_str(INDEX_DOC, "definition-version", &self.definition_version)?;
        if self.layout.as_deref() != expected_layout {
            return Err(DefinitionError::Layout {
                table,
                found: self.layout.clone(),
                expected: expected_layout.map_or("no layout (a Parquet table)".to_string(), |l| {
                    format!("{l:?}")
                }),
            });
        }
        if self.location.contains("://") {
            // Validated at resolution time, where the caller says whether
            // absolute locations are allowed; the syntax is checked now.
            LocationUri::parse_root(&self.location)
                .map(|_| ())
                .map_err(|source| DefinitionError::Location {
                    document: INDEX_DOC,
                    key: format!("tables.{table}.location"),
                    source,
                })
        } else {
            self.relative(table).map(|_| ())
        }
    }
}

impl IndexDefinition {
    /// The snapshot-relative paths of the documents a reader needs besides
    /// the postings files, as this definition names them: what a commit pins
    /// and a reader checks. A built snapshot: `index.json`, the postings
    /// `manifest.json` and its sibling `footers.json`, the centroids, and the
    /// quantiser when there are codes. A refreshed snapshot (with `layers`):
    /// `index.json`, its delta table ([`delta_documents`]) and the deletions;
    /// its base is pinned in `layers`. Either way `source-files.json` when
    /// named.
    pub fn documents(&self) -> Vec<String> {
        let mut documents = vec![INDEX_DEFINITION_FILE.to_string()];
        match &self.layers {
            Some(_) => {
                documents.extend(delta_documents());
                documents.push(crate::format::layers::DELETIONS_FILE.to_string());
            }
            None => {
                let manifest = &self.tables.ivf_postings.location;
                documents.push(manifest.clone());
                documents.push(crate::format::footers::footers_location(manifest));
                documents.push(self.tables.ivf_centroids.location.clone());
                documents.extend(self.quantizer.clone());
                documents.extend(self.calibration.clone());
            }
        }
        documents.extend(self.source_files.clone());
        documents
    }

    /// A version-1 definition with the default table locations
    /// ([`CENTROIDS_LOCATION`], [`POSTINGS_LOCATION`]) and f32 elements.
    pub fn new(
        metric: Metric,
        dim: u32,
        nlist: u32,
        roots: u32,
        source: IndexSource,
        build: BuildRecord,
    ) -> IndexDefinition {
        IndexDefinition {
            format_version: INDEX_FORMAT_VERSION,
            provider: PROVIDER.to_string(),
            definition_version: DEFINITION_VERSION.to_string(),
            metric,
            dim,
            element_type: ELEMENT_TYPE_F32.to_string(),
            nlist,
            roots,
            tables: IndexTables {
                ivf_centroids: IndexTableDefinition::new(CENTROIDS_LOCATION, None),
                ivf_postings: IndexTableDefinition::new(POSTINGS_LOCATION, Some(ARTIFACT_MANIFEST)),
            },
            quantizer: None,
            calibration: None,
            source_files: None,
            layers: None,
            source,
            build,
        }
    }

    /// Parses and validates `index.json`.
    ///
    /// # Errors
    /// [`DefinitionError::Incompatible`] for an unknown `format-version` or
    /// `definition-version` (top level or per table), `UnknownKey` /
    /// `MissingKey` / `Json` for a malformed document, then the errors of
    /// [`IndexDefinition::validate`].
    pub fn from_json(text: impl AsRef<[u8]>) -> Result<IndexDefinition, DefinitionError> {
        let value = parse_value(INDEX_DOC, text)?;
        match value.get("format-version") {
            Some(Value::Number(n)) if !n.as_u64().is_some_and(is_readable_index_version) => {
                return Err(DefinitionError::Incompatible {
                    document: INDEX_DOC,
                    key: "format-version",
                    found: n.to_string(),
                    supported: readable_index_versions(),
                });
            }
            _ => {}
        }
        check_version(
            INDEX_DOC,
            value.get("definition-version"),
            "definition-version",
        )?;
        for table in ["ivf_centroids", "ivf_postings"] {
            let version = value
                .get("tables")
                .and_then(|t| t.get(table))
                .and_then(|t| t.get("definition-version"));
            check_version(INDEX_DOC, version, "definition-version")?;
        }
        let definition: IndexDefinition = from_value(INDEX_DOC, value)?;
        definition.validate()?;
        Ok(definition)
    }

    /// The `ivf_postings` `manifest.json`, resolved against the snapshot
    /// directory holding `index.json`.
    ///
    /// # Errors
    /// As [`IndexTableDefinition::resolve_path`].
    pub fn postings_manifest_path(&self, snapshot: &Path) -> Result<Path, DefinitionError> {
        self.tables
            .ivf_postings
            .resolve_path("ivf_postings", snapshot)
    }

    /// The `ivf_postings` table root: the folder holding `manifest.json` (and
    /// `footers.json` beside it), resolved against the snapshot directory.
    ///
    /// # Errors
    /// As [`IndexTableDefinition::resolve_path`].
    pub fn postings_root(&self, snapshot: &Path) -> Result<Path, DefinitionError> {
        let postings = &self.tables.ivf_postings;
        let manifest = postings.relative("ivf_postings")?;
        match manifest.as_str().rsplit_once('/') {
            Some((dir, _)) => {
                IndexTableDefinition::new(dir, None).resolve_path("ivf_postings", snapshot)
            }
            None => Ok(snapshot.clone()),
        }
    }

    /// The `ivf_centroids` Parquet object, resolved against the snapshot
    /// directory holding `index.json`.
    ///
    /// # Errors
    /// As [`IndexTableDefinition::resolve_path`].
    pub fn centroids_path(&self, snapshot: &Path) -> Result<Path, DefinitionError> {
        self.tables
            .ivf_centroids
            .resolve_path("ivf_centroids", snapshot)
    }

    /// The quantiser parameters (`quantizer.json`), resolved against the
    /// snapshot directory; `None` for an index without codes.
    ///
    /// # Errors
    /// `Location` when the location is not a relative path.
    pub fn quantizer_path(&self, snapshot: &Path) -> Result<Option<Path>, DefinitionError> {
        resolve_optional(self.quantizer.as_deref(), "quantizer", snapshot)
    }

    /// The recall calibration (`calibration.json`), resolved against the
    /// snapshot directory; `None` when the build measured none.
    ///
    /// # Errors
    /// `Location` when the location is not a relative path.
    pub fn calibration_path(&self, snapshot: &Path) -> Result<Option<Path>, DefinitionError> {
        resolve_optional(self.calibration.as_deref(), "calibration", snapshot)
    }

    /// Pretty-printed JSON, the bytes the build job writes.
    pub fn to_json(&self) -> String {
        to_pretty_json(self)
    }

    /// Checks versions, provider, numbers, element type, table layouts and
    /// locations, and the source.
    ///
    /// # Errors
    /// The first violated rule, as its own [`DefinitionError`] variant.
    pub fn validate(&self) -> Result<(), DefinitionError> {
        if !is_readable_index_version(u64::from(self.format_version)) {
            return Err(DefinitionError::Incompatible {
                document: INDEX_DOC,
                key: "format-version",
                found: self.format_version.to_string(),
                supported: readable_index_versions(),
            });
        }
        if self.format_version < 2 && self.metric == Metric::Cosine {
            return Err(DefinitionError::Incompatible {
                document: INDEX_DOC,
                key: "format-version",
                found: format!(
                    "{} with metric cosine (raw vectors; rebuild the index)",
                    self.format_version
                ),
                supported: "2 for cosine".to_string(),
            });
        }
        check_version_str(INDEX_DOC, "definition-version", &self.definition_version)?;
        check_provider(INDEX_DOC, &self.provider)?;
        for (key, found) in [
            ("dim", self.dim),
            ("nlist", self.nlist),
            ("roots", self.roots),
        ] {
            if found == 0 {
                return Err(DefinitionError::Zero {
                    key,
                    found: u64::from(found),
                });
            }
        }
        if self.roots > self.nlist {
            return Err(DefinitionError::RootsExceedNlist {
                roots: self.roots,
                nlist: self.nlist,
            });
        }
        if self.element_type != ELEMENT_TYPE_F32 {
            return Err(DefinitionError::UnsupportedElementType {
                found: self.element_type.clone(),
            });
        }
        self.tables.ivf_centroids.validate("ivf_centroids", None)?;
        self.tables
            .ivf_postings
            .validate("ivf_postings", Some(ARTIFACT_MANIFEST))?;
        self.quantizer_path(&Path::default())?;
        self.calibration_path(&Path::default())?;
        self.source.validate()?;
        if self.format_version < 3 && (self.layers.is_some() || self.source_files.is_some()) {
            return Err(DefinitionError::Incompatible {
                document: INDEX_DOC,
                key: "format-version",
                found: format!("{} with layers or source-files", self.format_version),
                supported: "3".to_string(),
            });
        }
        if let Some(location) = &self.source_files {
            RelativeLocation::parse(location).map_err(|source| DefinitionError::Location {
                document: INDEX_DOC,
                key: "source-files".to_string(),
                source,
            })?;
        }
        if let Some(layers) = &self.layers {
            let mut base = self.clone();
            base.layers = None;
            base.source_files = None;
            layers.validate(&base.documents(), &delta_documents())?;
        }
        if self.build.vector_column.is_empty() {
            return Err(DefinitionError::EmptyValue {
                document: INDEX_DOC,
                key: "build.vector-column",
            });
        }
        if self.build.threads == 0 {
            return Err(DefinitionError::Zero {
                key: "build.threads",
                found: 0,
            });
        }
        Ok(())
    }
}

impl IndexSource {
    fn validate(&self) -> Result<(), DefinitionError> {
        let empty = |key| {
            Err(DefinitionError::EmptyValue {
                document: INDEX_DOC,
                key,
            })
        };
        match self {
            IndexSource::Parquet {
                location,
                table_identity,
            } => {
                if table_identity.is_empty() {
                    return empty("source.table-identity");
                }
                LocationUri::parse(location).map(|_| ()).map_err(|source| {
                    DefinitionError::Location {
                        document: INDEX_DOC,
                        key: "source.location".to_string(),
                        source,
                    }
                })
            }
            IndexSource::Ducklake { catalog, table, .. }
                if catalog.is_empty() || table.is_empty() =>
            {
                empty("source.catalog/table")
            }
            IndexSource::VectorFile { location } if location.is_empty() => empty("source.location"),
            IndexSource::Ducklake { .. } | IndexSource::VectorFile { .. } => Ok(()),
        }
    }
}

fn parse_value(document: &'static str, text: impl AsRef<[u8]>) -> Result<Value, DefinitionError> {
    serde_json::from_slice(text.as_ref())
        .map_err(|source| DefinitionError::Json { document, source })
}

/// Deserialises a strict document, turning serde's unknown/missing-field
/// errors into typed variants.
fn from_value<T: DeserializeOwned>(
    document: &'static str,
    value: Value,
) -> Result<T, DefinitionError> {
    serde_json::from_value(value).map_err(|source| {
        let message = source.to_string();
        let quoted = || message.split('`').nth(1).unwrap_or_default().to_string();
        if message.starts_with("unknown field") {
            DefinitionError::UnknownKey {
                document,
                key: quoted(),
            }
        } else if message.starts_with("missing field") {
            DefinitionError::MissingKey {
                document,
                key: quoted(),
            }
        } else {
            DefinitionError::Json { document, source }
        }
    })
}

/// Checks a version key before the strict parse, so a future version is
/// reported as incompatible rather than as unknown keys. A missing or
/// non-string version is left to the strict parse.
fn check_version(
    document: &'static str,
    version: Option<&Value>,
    key: &'static str,
) -> Result<(), DefinitionError> {
    match version {
        Some(Value::String(found)) => check_version_str(document, key, found),
        _ => Ok(()),
    }
}

fn check_version_str(
    document: &'static str,
    key: &'static str,
    found: &str,
) -> Result<(), DefinitionError> {
    if found == DEFINITION_VERSION {
        Ok(())
    } else {
        Err(DefinitionError::Incompatible {
            document,
            key,
            found: found.to_string(),
            supported: DEFINITION_VERSION.to_string(),
        })
    }
}

fn check_provider(document: &'static str, provider: &str) -> Result<(), DefinitionError> {
    if provider == PROVIDER {
        Ok(())
    } else {
        Err(DefinitionError::WrongProvider {
            document,
            found: provider.to_string(),
        })
    }
}

fn to_pretty_json<T: Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}
