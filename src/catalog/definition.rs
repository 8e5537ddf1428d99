//! Provider definitions: the table-definition of a Parquet source, and the
//! index-provider-definition (`index.json`) of a built index snapshot.
//! SKELETON: owned by the URI/definitions helper (issue 5), who makes parsing
//! strict and adds the JSON Schemas. `IndexDefinition`'s fields are the shared
//! contract between the build job (writer) and `Index::open` (reader).

use serde::{Deserialize, Serialize};

/// `index.json` at the root of an index snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IndexDefinition {
    pub format_version: u32,
    /// Always `"parquet"`.
    pub provider: String,
    /// `"1"`.
    pub definition_version: String,
    pub metric: crate::distance::Metric,
    pub dim: u32,
    /// `"f32"`.
    pub element_type: String,
    pub nlist: u32,
    pub roots: u32,
    pub tables: IndexTables,
}

/// The two tables of an index snapshot, with locations relative to `index.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexTables {
    pub ivf_centroids: IndexTableDefinition,
    pub ivf_postings: IndexTableDefinition,
}

/// An index-table-definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IndexTableDefinition {
    pub definition_version: String,
    pub location: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
}
