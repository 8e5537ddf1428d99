//! The column-mapping model: how a Parquet file's physical columns resolve to
//! a table's logical fields. One immutable value per physical layout, shaped
//! as RFC 0018's `MappingValue { mapping_id, table_id, map_type, names }`
//! (DuckLake's `ducklake_column_mapping` row with its `ducklake_name_mapping`
//! rows embedded), and one resolver used by every provider.
//!
//! A mapping is a tree of name nodes; each node names a physical column at its
//! level (`source_name`) and the logical field it feeds (`target_field_id`).
//! Three constructors cover every source:
//! - [`ColumnMapping::new`]: a catalog mapping (DuckLake `ducklake_add_data_files`),
//!   validated as RFC 0018 §Staged write lists;
//! - [`ColumnMapping::from_field_ids`]: a file that carries Parquet field ids
//!   (every field with an id becomes a node targeting that id);
//! - [`ColumnMapping::by_name`]: a file without field ids, matched by the
//!   logical field names.
//!
//! [`ColumnMapping::resolve`] then matches the logical fields (Arrow fields
//! whose metadata carries `PARQUET:field_id`) against a file's physical Arrow
//! schema and returns a [`ResolvedColumns`] plan that turns the file's batches
//! into the logical columns:
//!
//! ```text
//! logical field id ──► root node (target_field_id) ──► physical column (source_name)
//!        │                     │ children (parent_column)          │
//!        ▼                     ▼                                   ▼
//!   struct child / list element, level by level; no node ⇒ NULL; is_partition ⇒ hive value
//! ```
//!
//! Extra physical columns are ignored, a logical column with no node reads as
//! NULL, a list element node matches `list`, `element` and `item` alike, and
//! narrower numbers widen (INT32 into BIGINT).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, FixedSizeListArray, GenericListArray, OffsetSizeTrait, RecordBatch,
    StringArray, StructArray, new_null_array,
};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use thiserror::Error;

/// Mapping validation and resolution errors. Each names the mapping (or the
/// file) and the values involved.
#[derive(Debug, Error)]
pub enum MappingError {
    /// A column mapping without name rows (invisible to DuckLake's inner join).
    #[error("mapping {mapping_id} of table {table_id} has no name-mapping rows")]
    EmptyMapping { table_id: i64, mapping_id: i64 },
    /// Name rows whose mapping does not exist.
    #[error("{rows} name-mapping rows reference mapping {mapping_id}, which does not exist")]
    OrphanNameRows { mapping_id: i64, rows: usize },
    /// Two name rows of one mapping share a `column_id`.
    #[error("mapping {mapping_id} of table {table_id} has column_id {column_id} twice")]
    DuplicateColumnId {
        table_id: i64,
        mapping_id: i64,
        column_id: i64,
    },
    /// A name row whose parent is not an earlier node (breaks the one-pass rebuild).
    #[error(
        "mapping {mapping_id} of table {table_id}: column_id {column_id} has parent_column {parent_column} (must be < column_id)"
    )]
    ParentNotBeforeChild {
        table_id: i64,
        mapping_id: i64,
        column_id: i64,
        parent_column: i64,
    },
    /// A name row whose parent is not a node of the mapping.
    #[error(
        "mapping {mapping_id} of table {table_id}: column_id {column_id} has unknown parent_column {parent_column}"
    )]
    UnknownParent {
        table_id: i64,
        mapping_id: i64,
        column_id: i64,
        parent_column: i64,
    },
    /// The same (table_id, mapping_id) twice.
    #[error("mapping {mapping_id} of table {table_id} is defined twice")]
    DuplicateMapping { table_id: i64, mapping_id: i64 },
    /// A logical field without a usable `PARQUET:field_id`.
    #[error("logical field {field} has no valid field id")]
    MissingFieldId { field: String },
    /// A node names a physical column that the file does not have.
    #[error("{file}: mapping {mapping_id} maps `{column}` but the file has no such column")]
    PhysicalColumnMissing {
        file: String,
        mapping_id: i64,
        column: String,
    },
    /// A partition node whose key is absent from the file's hive path.
    #[error("{file}: partition column `{column}` has no `{column}=value` segment in the path")]
    PartitionValueMissing { file: String, column: String },
    /// A hive value that does not convert to the logical type.
    #[error(
        "{file}: partition value `{value}` of `{column}` does not convert to the column type: {source}"
    )]
    PartitionValueInvalid {
        file: String,
        column: String,
        value: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A physical type that does not read as the logical type (not equal, not a widening).
    #[error("{file}: column `{column}` is {actual} in the file, {expected} in the table")]
    TypeMismatch {
        file: String,
        column: String,
        expected: String,
        actual: String,
    },
    /// A list whose element has no mapping node.
    #[error("{file}: list column `{column}` has no mapping node for its element")]
    ListElementUnmapped { file: String, column: String },
    /// A decoded batch that does not have the planned shape.
    #[error("{file}: decoded batch does not match the planned column `{column}`: {source}")]
    Assemble {
        file: String,
        column: String,
        #[source]
        source: arrow::error::ArrowError,
    },
}

/// One `ducklake_name_mapping` row (RFC 0018 `NameMapping`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameMapping {
    /// 0-based ordinal local to the mapping (preorder DFS upstream; not required contiguous).
    pub column_id: i64,
    /// The physical column name at this tree level.
    pub source_name: String,
    /// The logical field id this node feeds.
    pub target_field_id: i64,
    /// The parent node's `column_id`; `None` for roots.
    pub parent_column: Option<i64>,
    /// The value comes from the file's hive path (`name=value`), not the Parquet body.
    pub is_partition: bool,
}

/// One immutable mapping value keyed `(table_id, mapping_id)`, name rows embedded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    /// The table; -1 for a mapping implied by a file (field ids, by name).
    pub table_id: i64,
    /// The catalog's mapping id; -1 for a mapping implied by a file.
    pub mapping_id: i64,
    /// Stored verbatim (`map_by_name` upstream), never validated (RFC 0018).
    pub map_type: String,
    names: Vec<NameMapping>,
    /// Node indexes by parent `column_id` (`None` = roots), in row order.
    children: HashMap<Option<i64>, Vec<usize>>,
}

impl ColumnMapping {
    /// A catalog mapping, validated as RFC 0018 §Staged write lists: at least one
    /// name row, unique `column_id`s, every `parent_column` an existing node with a
    /// smaller `column_id`. Contiguity and `map_type` are deliberately not checked.
    ///
    /// # Errors
    /// [`MappingError::EmptyMapping`], [`MappingError::DuplicateColumnId`],
    /// [`MappingError::ParentNotBeforeChild`], [`MappingError::UnknownParent`].
    pub fn new(
        table_id: i64,
        mapping_id: i64,
        map_type: impl Into<String>,
        names: Vec<NameMapping>,
    ) -> Result<Self, MappingError> {
        if names.is_empty() {
            return Err(MappingError::EmptyMapping {
                table_id,
                mapping_id,
            });
        }
        let mut seen = std::collections::HashSet::new();
        for n in &names {
            if !seen.insert(n.column_id) {
                return Err(MappingError::DuplicateColumnId {
                    table_id,
                    mapping_id,
                    column_id: n.column_id,
                });
            }
        }
        for n in &names {
            if let Some(parent_column) = n.parent_column {
                if parent_column >= n.column_id {
                    return Err(MappingError::ParentNotBeforeChild {
                        table_id,
                        mapping_id,
                        column_id: n.column_id,
                        parent_column,
                    });
                }
                if !seen.contains(&parent_column) {
                    return Err(MappingError::UnknownParent {
                        table_id,
                        mapping_id,
                        column_id: n.column_id,
                        parent_column,
                    });
                }
            }
        }
        Ok(Self::from_valid_names(
            table_id,
            mapping_id,
            map_type.into(),
            names,
        ))
    }

    fn from_valid_names(
        table_id: i64,
        mapping_id: i64,
        map_type: String,
        names: Vec<NameMapping>,
    ) -> Self {
        let mut children: HashMap<Option<i64>, Vec<usize>> = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            children.entry(n.parent_column).or_default().push(i);
        }
        Self {
            table_id,
            mapping_id,
            map_type,
            names,
            children,
        }
    }

    /// The mapping implied by a file's own Parquet field ids: every physical
    /// field (nested included) that carries `PARQUET:field_id` becomes a node
    /// named after it and targeting that id. Fields without an id get no node.
    /// This is how files DuckLake wrote (`mapping_id` NULL) resolve.
    pub fn from_field_ids(physical: &Schema) -> Self {
        let mut names = Vec::new();
        for f in physical.fields() {
            push_field_id_nodes(f, None, &mut names);
        }
        Self::from_valid_names(-1, -1, "field_id".to_string(), names)
    }

    /// The mapping for a file without field ids, matched by the logical field
    /// names at every level (the Parquet provider's fallback): a node for each
    /// logical field (with a field id) whose name the file has at that level; a
    /// list's element matches the file's list child whatever its name.
    /// Logical fields the file lacks get no node and read as NULL.
    pub fn by_name(logical: &Schema, physical: &Schema) -> Self {
        let mut names = Vec::new();
        for f in logical.fields() {
            if let Some(pf) = physical.fields().find(f.name()).map(|(_, pf)| pf) {
                push_by_name_nodes(f, pf, None, &mut names);
            }
        }
        Self::from_valid_names(-1, -1, "map_by_name".to_string(), names)
    }

    /// Field ids when the file has any, else by name: the rule for Parquet
    /// files written by anyone.
    pub fn for_file(logical: &Schema, physical: &Schema) -> Self {
        if physical.fields().iter().any(|f| has_any_field_id(f)) {
            Self::from_field_ids(physical)
        } else {
            Self::by_name(logical, physical)
        }
    }

    /// The embedded name rows, in catalog order.
    pub fn names(&self) -> &[NameMapping] {
        &self.names
    }

    fn child_nodes(&self, parent: Option<i64>) -> impl Iterator<Item = &NameMapping> {
        self.children
            .get(&parent)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.names.get(i))
    }

    fn node_for(&self, parent: Option<i64>, target: i64) -> Option<&NameMapping> {
        self.child_nodes(parent)
            .find(|n| n.target_field_id == target)
    }

    /// Plans how `logical` fields (each with a `PARQUET:field_id`) read from a
    /// file whose physical Arrow schema is `physical`. `file` names the file in
    /// errors; `partitions` are the `name=value` segments of its path.
    ///
    /// # Errors
    /// [`MappingError::MissingFieldId`], [`MappingError::PhysicalColumnMissing`],
    /// [`MappingError::PartitionValueMissing`], [`MappingError::TypeMismatch`],
    /// [`MappingError::ListElementUnmapped`].
    pub fn resolve(
        &self,
        logical: &[FieldRef],
        physical: &Schema,
        file: &str,
        partitions: &[(String, String)],
    ) -> Result<ResolvedColumns, MappingError> {
        let mut columns = Vec::with_capacity(logical.len());
        for field in logical {
            let id = field_id(field).ok_or_else(|| MappingError::MissingFieldId {
                field: field.name().clone(),
            })?;
            let source = match self.node_for(None, id) {
                None => ColumnSource::Null,
                Some(node) if node.is_partition => {
                    let value = partitions
                        .iter()
                        .find(|(k, _)| *k == node.source_name)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| MappingError::PartitionValueMissing {
                            file: file.to_string(),
                            column: node.source_name.clone(),
                        })?;
                    ColumnSource::Partition(value)
                }
                Some(node) => {
                    let (index, pf) =
                        physical
                            .column_with_name(&node.source_name)
                            .ok_or_else(|| MappingError::PhysicalColumnMissing {
                                file: file.to_string(),
                                mapping_id: self.mapping_id,
                                column: node.source_name.clone(),
                            })?;
                    // `slot` holds the physical index until the projection is known.
                    ColumnSource::Physical {
                        slot: index,
                        plan: self.plan(field, pf, node, file)?,
                    }
                }
            };
            columns.push((field.clone(), source));
        }
        let order: Vec<usize> = columns
            .iter()
            .filter_map(|(_, s)| match s {
                ColumnSource::Physical { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for (_, source) in &mut columns {
            if let ColumnSource::Physical { slot, .. } = source {
                *slot = order.partition_point(|&o| o < *slot);
            }
        }
        Ok(ResolvedColumns {
            file: file.to_string(),
            physical_roots: order,
            columns,
        })
    }

    fn plan(
        &self,
        logical: &Field,
        physical: &Field,
        node: &NameMapping,
        file: &str,
    ) -> Result<FieldPlan, MappingError> {
        let mismatch = || MappingError::TypeMismatch {
            file: file.to_string(),
            column: logical.name().clone(),
            expected: logical.data_type().to_string(),
            actual: physical.data_type().to_string(),
        };
        match logical.data_type() {
            DataType::List(lc) | DataType::LargeList(lc) | DataType::FixedSizeList(lc, _) => {
                let kind = ListKind::of(logical.data_type()).ok_or_else(mismatch)?;
                let pc = match (kind, physical.data_type()) {
                    (
                        ListKind::List | ListKind::LargeList,
                        DataType::List(pc) | DataType::LargeList(pc),
                    ) => pc,
                    (ListKind::FixedSize(n), DataType::FixedSizeList(pc, m)) if n == *m => pc,
                    _ => return Err(mismatch()),
                };
                let element = field_id(lc)
                    .and_then(|id| self.node_for(Some(node.column_id), id))
                    .filter(|c| list_child_matches(&c.source_name, pc.name()))
                    .ok_or_else(|| MappingError::ListElementUnmapped {
                        file: file.to_string(),
                        column: logical.name().clone(),
                    })?;
                let element = self.plan(lc, pc, element, file)?;
                Ok(FieldPlan::List {
                    kind,
                    field: lc.clone(),
                    element: Box::new(element),
                })
            }
            DataType::Struct(lfields) => {
                let DataType::Struct(pfields) = physical.data_type() else {
                    return Err(mismatch());
                };
                let mut children = Vec::with_capacity(lfields.len());
                for lf in lfields {
                    let child =
                        match field_id(lf).and_then(|id| self.node_for(Some(node.column_id), id)) {
                            None => None,
                            Some(c) => {
                                let (i, pf) = pfields.find(&c.source_name).ok_or_else(|| {
                                    MappingError::PhysicalColumnMissing {
                                        file: file.to_string(),
                                        mapping_id: self.mapping_id,
                                        column: format!("{}.{}", physical.name(), c.source_name),
                                    }
                                })?;
                                Some((i, self.plan(lf, pf, c, file)?))
                            }
                        };
                    children.push(child);
                }
                Ok(FieldPlan::Struct {
                    fields: lfields.clone(),
                    children,
                })
            }
            DataType::Map(..) => Err(mismatch()),
            target => {
                if reads_as(physical.data_type(), target) {
                    Ok(FieldPlan::Leaf {
                        target: target.clone(),
                    })
                } else {
                    Err(mismatch())
                }
            }
        }
    }
}

fn push_field_id_nodes(field: &Field, parent: Option<i64>, out: &mut Vec<NameMapping>) {
    let mut this = parent;
    if let Some(id) = field_id(field) {
        let column_id = out.len() as i64;
        out.push(NameMapping {
            column_id,
            source_name: field.name().clone(),
            target_field_id: id,
            parent_column: parent,
            is_partition: false,
        });
        this = Some(column_id);
    }
    for child in child_fields(field) {
        push_field_id_nodes(child, this, out);
    }
}

fn push_by_name_nodes(
    logical: &Field,
    physical: &Field,
    parent: Option<i64>,
    out: &mut Vec<NameMapping>,
) {
    let Some(id) = field_id(logical) else { return };
    let column_id = out.len() as i64;
    out.push(NameMapping {
        column_id,
        source_name: physical.name().clone(),
        target_field_id: id,
        parent_column: parent,
        is_partition: false,
    });
    match (logical.data_type(), physical.data_type()) {
        (
            DataType::List(lc) | DataType::LargeList(lc) | DataType::FixedSizeList(lc, _),
            DataType::List(pc) | DataType::LargeList(pc) | DataType::FixedSizeList(pc, _),
        ) => {
            push_by_name_nodes(lc, pc, Some(column_id), out);
        }
        (DataType::Struct(lfs), DataType::Struct(pfs)) => {
            for lf in lfs {
                if let Some((_, pf)) = pfs.find(lf.name()) {
                    push_by_name_nodes(lf, pf, Some(column_id), out);
                }
            }
        }
        _ => {}
    }
}

fn child_fields(field: &Field) -> Vec<&FieldRef> {
    match field.data_type() {
        DataType::List(c)
        | DataType::LargeList(c)
        | DataType::FixedSizeList(c, _)
        | DataType::Map(c, _) => vec![c],
        DataType::Struct(fs) => fs.iter().collect(),
        _ => Vec::new(),
    }
}

fn has_any_field_id(field: &Field) -> bool {
    field_id(field).is_some() || child_fields(field).into_iter().any(|c| has_any_field_id(c))
}

/// The `PARQUET:field_id` of an Arrow field, if it has a valid one.
pub fn field_id(field: &Field) -> Option<i64> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)?
        .parse()
        .ok()
}

/// `field` carrying `PARQUET:field_id = id`.
pub fn with_field_id(field: Field, id: i64) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string());
    field.with_metadata(metadata)
}

/// A list element node matches the list's child by name, and the
/// conventional element names (`list`, `element`, `item`) match each other.
fn list_child_matches(source_name: &str, physical_name: &str) -> bool {
    const ELEMENT_NAMES: [&str; 3] = ["list", "element", "item"];
    source_name == physical_name
        || (ELEMENT_NAMES.contains(&source_name) && ELEMENT_NAMES.contains(&physical_name))
}

/// Whether a physical leaf type reads as the logical one: equal, or a lossless widening.
fn reads_as(physical: &DataType, logical: &DataType) -> bool {
    use DataType::*;
    physical == logical
        || matches!(
            (physical, logical),
            (Int8 | Int16 | Int32 | UInt8 | UInt16 | UInt32, Int64)
                | (Int8 | Int16 | UInt8 | UInt16, Int32)
                | (Int8 | UInt8, Int16)
                | (UInt8 | UInt16 | UInt32, UInt64)
                | (UInt8 | UInt16, UInt32)
                | (UInt8, UInt16)
                | (Float16 | Float32, Float64)
                | (Float16, Float32)
                | (LargeUtf8 | Utf8View, Utf8)
                | (LargeBinary | BinaryView, Binary)
        )
}

/// How one logical column of a file is produced.
#[derive(Debug, Clone)]
pub enum ColumnSource {
    /// No mapping node: the column reads as NULL.
    Null,
    /// A hive-path value, converted to the logical type.
    Partition(String),
    /// A projected physical root column (`slot` indexes the projected batch).
    Physical { slot: usize, plan: FieldPlan },
}

/// How a physical array becomes the logical one, level by level.
#[derive(Debug, Clone)]
pub enum FieldPlan {
    /// Equal type, or a widening cast.
    Leaf { target: DataType },
    /// Rebuild the list (as `kind`) around the planned element.
    List {
        kind: ListKind,
        field: FieldRef,
        element: Box<FieldPlan>,
    },
    /// Rebuild the struct: each logical child is a physical child index + plan, or NULL.
    Struct {
        fields: Fields,
        children: Vec<Option<(usize, FieldPlan)>>,
    },
}

/// The list type a logical list column has. `List` and `LargeList` read from
/// either physical list; a fixed-size list reads only from a fixed-size list
/// of the same length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    List,
    LargeList,
    FixedSize(i32),
}

impl ListKind {
    fn of(data_type: &DataType) -> Option<ListKind> {
        match data_type {
            DataType::List(_) => Some(ListKind::List),
            DataType::LargeList(_) => Some(ListKind::LargeList),
            DataType::FixedSizeList(_, n) => Some(ListKind::FixedSize(*n)),
            _ => None,
        }
    }
}

/// The plan for reading one file's logical columns.
#[derive(Debug, Clone)]
pub struct ResolvedColumns {
    file: String,
    physical_roots: Vec<usize>,
    columns: Vec<(FieldRef, ColumnSource)>,
}

impl ResolvedColumns {
    /// Indexes of the physical root columns to read, ascending (a Parquet
    /// `ProjectionMask::roots`); the projected batch has them in this order.
    pub fn physical_roots(&self) -> &[usize] {
        &self.physical_roots
    }

    /// The logical fields produced, in request order.
    pub fn fields(&self) -> Vec<FieldRef> {
        self.columns.iter().map(|(f, _)| f.clone()).collect()
    }

    /// The logical columns of one projected batch (`batch` holds exactly
    /// [`Self::physical_roots`], in order).
    ///
    /// # Errors
    /// [`MappingError::Assemble`] when the batch does not have the planned
    /// shape, [`MappingError::PartitionValueInvalid`] for a bad hive value.
    pub fn assemble(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, MappingError> {
        let rows = batch.num_rows();
        self.columns
            .iter()
            .map(|(field, source)| match source {
                ColumnSource::Null => Ok(new_null_array(field.data_type(), rows)),
                ColumnSource::Partition(value) => {
                    let strings: ArrayRef = Arc::new(StringArray::from(vec![value.as_str(); rows]));
                    cast_with_options(&strings, field.data_type(), &strict()).map_err(|source| {
                        MappingError::PartitionValueInvalid {
                            file: self.file.clone(),
                            column: field.name().clone(),
                            value: value.clone(),
                            source,
                        }
                    })
                }
                ColumnSource::Physical { slot, plan } => {
                    let array = batch
                        .columns()
                        .get(*slot)
                        .ok_or_else(|| self.shape_error(field, "missing column"))?;
                    apply(plan, array).map_err(|source| MappingError::Assemble {
                        file: self.file.clone(),
                        column: field.name().clone(),
                        source,
                    })
                }
            })
            .collect()
    }

    fn shape_error(&self, field: &Field, what: &str) -> MappingError {
        MappingError::Assemble {
            file: self.file.clone(),
            column: field.name().clone(),
            source: arrow::error::ArrowError::SchemaError(what.to_string()),
        }
    }
}

fn strict() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..Default::default()
    }
}

fn apply(plan: &FieldPlan, array: &ArrayRef) -> Result<ArrayRef, arrow::error::ArrowError> {
    use arrow::error::ArrowError;
    match plan {
        FieldPlan::Leaf { target } => {
            if array.data_type() == target {
                Ok(array.clone())
            } else {
                cast_with_options(array, target, &strict())
            }
        }
        FieldPlan::List {
            kind: ListKind::List,
            field,
            element,
        } => rebuild_list::<i32>(array, field, element),
        FieldPlan::List {
            kind: ListKind::LargeList,
            field,
            element,
        } => rebuild_list::<i64>(array, field, element),
        FieldPlan::List {
            kind: ListKind::FixedSize(size),
            field,
            element,
        } => {
            let list = array
                .as_any()
                .downcast_ref::<FixedSizeListArray>()
                .ok_or_else(|| {
                    ArrowError::SchemaError(format!(
                        "expected a fixed-size list, found {}",
                        array.data_type()
                    ))
                })?;
            let values = apply(element, list.values())?;
            Ok(Arc::new(FixedSizeListArray::try_new(
                field.clone(),
                *size,
                values,
                list.nulls().cloned(),
            )?))
        }
        FieldPlan::Struct { fields, children } => {
            let st = array
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| {
                    ArrowError::SchemaError(format!(
                        "expected a struct, found {}",
                        array.data_type()
                    ))
                })?;
            let mut arrays = Vec::with_capacity(fields.len());
            for (lf, child) in fields.iter().zip(children) {
                arrays.push(match child {
                    None => new_null_array(lf.data_type(), st.len()),
                    Some((i, p)) => {
                        let col = st.columns().get(*i).ok_or_else(|| {
                            ArrowError::SchemaError(format!("struct child {i} missing"))
                        })?;
                        apply(p, col)?
                    }
                });
            }
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                arrays,
                st.nulls().cloned(),
            )?))
        }
    }
}

/// Rebuilds a `List` (`O = i32`) or `LargeList` (`O = i64`) around the
/// planned element, casting the offsets when the file has the other list type
/// (the values are shared, not copied).
fn rebuild_list<O: OffsetSizeTrait>(
    array: &ArrayRef,
    field: &FieldRef,
    element: &FieldPlan,
) -> Result<ArrayRef, arrow::error::ArrowError> {
    let recast = match array.data_type() {
        DataType::List(c) if O::IS_LARGE => Some(DataType::LargeList(c.clone())),
        DataType::LargeList(c) if !O::IS_LARGE => Some(DataType::List(c.clone())),
        _ => None,
    };
    let array = match recast {
        Some(target) => cast_with_options(array, &target, &strict())?,
        None => array.clone(),
    };
    let list = array
        .as_any()
        .downcast_ref::<GenericListArray<O>>()
        .ok_or_else(|| {
            arrow::error::ArrowError::SchemaError(format!(
                "expected a list, found {}",
                array.data_type()
            ))
        })?;
    let values = apply(element, list.values())?;
    Ok(Arc::new(GenericListArray::<O>::try_new(
        field.clone(),
        list.offsets().clone(),
        values,
        list.nulls().cloned(),
    )?))
}

/// All mappings of a catalog, keyed `(table_id, mapping_id)`: the RFC 0018
/// child-row fold over `ducklake_column_mapping` and `ducklake_name_mapping`.
#[derive(Debug, Clone, Default)]
pub struct MappingSet {
    mappings: HashMap<(i64, i64), Arc<ColumnMapping>>,
}

/// One `ducklake_column_mapping` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMappingRow {
    pub mapping_id: i64,
    pub table_id: i64,
    pub map_type: String,
}

impl MappingSet {
    /// Folds the name rows (`(mapping_id, row)`) under their column-mapping
    /// rows, validating each mapping ([`ColumnMapping::new`]), orphans and
    /// duplicate keys.
    ///
    /// # Errors
    /// Every [`ColumnMapping::new`] error, [`MappingError::OrphanNameRows`],
    /// [`MappingError::DuplicateMapping`].
    pub fn from_rows(
        columns: Vec<ColumnMappingRow>,
        names: Vec<(i64, NameMapping)>,
    ) -> Result<Self, MappingError> {
        let mut groups: BTreeMap<i64, Vec<NameMapping>> = BTreeMap::new();
        for (mapping_id, row) in names {
            groups.entry(mapping_id).or_default().push(row);
        }
        let mut mappings = HashMap::new();
        for row in columns {
            let key = (row.table_id, row.mapping_id);
            if mappings.contains_key(&key) {
                return Err(MappingError::DuplicateMapping {
                    table_id: row.table_id,
                    mapping_id: row.mapping_id,
                });
            }
            let group = groups.remove(&row.mapping_id).unwrap_or_default();
            let mapping = ColumnMapping::new(row.table_id, row.mapping_id, row.map_type, group)?;
            mappings.insert(key, Arc::new(mapping));
        }
        if let Some((&mapping_id, rows)) = groups.iter().next() {
            return Err(MappingError::OrphanNameRows {
                mapping_id,
                rows: rows.len(),
            });
        }
        Ok(Self { mappings })
    }

    /// The mapping `(table_id, mapping_id)`, if any.
    pub fn get(&self, table_id: i64, mapping_id: i64) -> Option<&Arc<ColumnMapping>> {
        self.mappings.get(&(table_id, mapping_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int32Array, Int64Array, ListArray};
    use arrow::datatypes::{Float32Type, Int64Type};

    fn id(name: &str, data_type: DataType, id: i64) -> Field {
        with_field_id(Field::new(name, data_type, true), id)
    }

    fn list_of(name: &str, id_: i64, element: Field) -> Field {
        id(name, DataType::List(Arc::new(element)), id_)
    }

    /// The table `(id BIGINT, title VARCHAR, embedding FLOAT[])` with DuckLake's ids.
    fn logical() -> Schema {
        Schema::new(vec![
            id("id", DataType::Int64, 1),
            id("title", DataType::Utf8, 2),
            list_of("embedding", 3, id("element", DataType::Float32, 4)),
        ])
    }

    fn node(column_id: i64, name: &str, target: i64, parent: Option<i64>) -> NameMapping {
        NameMapping {
            column_id,
            source_name: name.into(),
            target_field_id: target,
            parent_column: parent,
            is_partition: false,
        }
    }

    fn fields(schema: &Schema) -> Vec<FieldRef> {
        schema.fields().iter().cloned().collect()
    }

    /// A pyarrow-style file without ids: `embedding` (list<item>), `id` INT32, an extra column.
    fn foreign_batch() -> RecordBatch {
        let embedding = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(1.0), Some(2.0)]),
            None,
        ]);
        let schema = Schema::new(vec![
            Field::new("embedding", embedding.data_type().clone(), true),
            Field::new("extra", DataType::Int64, true),
            Field::new("id", DataType::Int32, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(embedding),
                Arc::new(Int64Array::from(vec![9, 9])),
                Arc::new(Int32Array::from(vec![7, 8])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn fixed_size_and_large_lists_resolve_by_name_and_keep_their_shape() {
        use arrow::array::{FixedSizeListArray, Float32Array, LargeListArray};
        let element = Arc::new(Field::new("item", DataType::Float32, true));
        let fsl = FixedSizeListArray::new(
            element.clone(),
            2,
            Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0, 4.0])),
            None,
        );
        let large = LargeListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(5.0)]),
            Some(vec![Some(6.0), Some(7.0)]),
        ]);
        let physical = Schema::new(vec![
            Field::new("fixed", fsl.data_type().clone(), true),
            Field::new("large", large.data_type().clone(), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(physical.clone()),
            vec![Arc::new(fsl.clone()), Arc::new(large.clone())],
        )
        .unwrap();
        let logical = Schema::new(vec![
            id(
                "fixed",
                DataType::FixedSizeList(Arc::new(id("item", DataType::Float32, 2)), 2),
                1,
            ),
            id(
                "large",
                DataType::LargeList(Arc::new(id("item", DataType::Float32, 4))),
                3,
            ),
        ]);
        let resolved = ColumnMapping::by_name(&logical, &physical)
            .resolve(&fields(&logical), &physical, "f.parquet", &[])
            .unwrap();
        let columns = resolved.assemble(&batch).unwrap();
        assert_eq!(columns[0].data_type(), logical.field(0).data_type());
        assert_eq!(columns[0].as_fixed_size_list().values(), fsl.values());
        assert_eq!(columns[1].data_type(), logical.field(1).data_type());
        assert_eq!(
            columns[1].as_list::<i64>().value_offsets(),
            large.value_offsets()
        );

        // A fixed-size list of another length does not read as this one.
        let three = Schema::new(vec![Field::new(
            "fixed",
            DataType::FixedSizeList(element, 3),
            true,
        )]);
        let logical = Schema::new(vec![logical.field(0).clone()]);
        let e = ColumnMapping::by_name(&logical, &three)
            .resolve(&fields(&logical), &three, "g.parquet", &[])
            .unwrap_err();
        assert!(
            matches!(&e, MappingError::TypeMismatch { file, column, .. } if file == "g.parquet" && column == "fixed"),
            "{e}"
        );
    }

    #[test]
    fn by_name_resolves_item_lists_widens_and_nulls_missing() {
        let logical = logical();
        let batch = foreign_batch();
        let mapping = ColumnMapping::for_file(&logical, &batch.schema());
        assert_eq!(mapping.map_type, "map_by_name");
        let resolved = mapping
            .resolve(&fields(&logical), &batch.schema(), "f", &[])
            .unwrap();
        // Only the two mapped roots are read, the extra column is not.
        assert_eq!(resolved.physical_roots(), &[0, 2]);
        let cols = resolved
            .assemble(&batch.project(resolved.physical_roots()).unwrap())
            .unwrap();
        assert_eq!(cols[0].as_primitive::<Int64Type>().values(), &[7, 8]);
        assert_eq!(cols[1].null_count(), 2);
        assert_eq!(cols[2].data_type(), logical.field(2).data_type());
        let list = cols[2].as_list::<i32>();
        assert!(list.is_null(1));
        assert_eq!(
            list.value(0).as_primitive::<Float32Type>().values(),
            &[1.0, 2.0]
        );
    }

    #[test]
    fn field_ids_win_over_names() {
        // A file with ids whose names differ from the table's.
        let physical = Schema::new(vec![id("renamed_id", DataType::Int64, 1)]);
        let mapping = ColumnMapping::for_file(&logical(), &physical);
        let resolved = mapping
            .resolve(&fields(&logical()), &physical, "f", &[])
            .unwrap();
        assert_eq!(resolved.physical_roots(), &[0]);
        assert!(matches!(resolved.columns[1].1, ColumnSource::Null));
    }

    #[test]
    fn partition_nodes_read_the_hive_value() {
        let logical = Schema::new(vec![id("part", DataType::Int32, 5)]);
        let mut n = node(0, "part", 5, None);
        n.is_partition = true;
        let mapping = ColumnMapping::new(3, 25, "map_by_name", vec![n]).unwrap();
        let batch = foreign_batch();
        let parts = vec![("part".to_string(), "2".to_string())];
        let resolved = mapping
            .resolve(&fields(&logical), &batch.schema(), "f", &parts)
            .unwrap();
        let cols = resolved
            .assemble(&batch.project(resolved.physical_roots()).unwrap())
            .unwrap();
        assert_eq!(
            cols[0]
                .as_primitive::<arrow::datatypes::Int32Type>()
                .values(),
            &[2, 2]
        );
        let bad = vec![("part".to_string(), "x".to_string())];
        let resolved = mapping
            .resolve(&fields(&logical), &batch.schema(), "f", &bad)
            .unwrap();
        let err = resolved.assemble(&batch.project(resolved.physical_roots()).unwrap());
        assert!(
            matches!(err, Err(MappingError::PartitionValueInvalid { ref value, .. }) if value == "x")
        );
    }

    #[test]
    fn narrowing_is_a_type_mismatch() {
        let logical = Schema::new(vec![id("id", DataType::Int32, 1)]);
        let physical = Schema::new(vec![Field::new("id", DataType::Int64, true)]);
        let err = ColumnMapping::by_name(&logical, &physical).resolve(
            &fields(&logical),
            &physical,
            "f",
            &[],
        );
        assert!(
            matches!(err, Err(MappingError::TypeMismatch { ref column, .. }) if column == "id")
        );
    }

    #[test]
    fn structs_match_children_by_node_and_null_the_unmapped() {
        let inner = Fields::from(vec![
            id("src", DataType::Utf8, 3),
            id("score", DataType::Float64, 4),
        ]);
        let logical = Schema::new(vec![id("meta", DataType::Struct(inner), 2)]);
        let pfields = Fields::from(vec![Field::new("s", DataType::Utf8, true)]);
        let physical = Schema::new(vec![Field::new(
            "m",
            DataType::Struct(pfields.clone()),
            true,
        )]);
        let mapping = ColumnMapping::new(
            5,
            31,
            "map_by_name",
            vec![node(0, "m", 2, None), node(1, "s", 3, Some(0))],
        )
        .unwrap();
        let st = StructArray::new(
            pfields,
            vec![Arc::new(StringArray::from(vec!["a"])) as ArrayRef],
            None,
        );
        let batch = RecordBatch::try_new(Arc::new(physical.clone()), vec![Arc::new(st)]).unwrap();
        let resolved = mapping
            .resolve(&fields(&logical), &physical, "f", &[])
            .unwrap();
        let cols = resolved.assemble(&batch).unwrap();
        let out = cols[0].as_struct();
        assert_eq!(out.column(0).as_string::<i32>().value(0), "a");
        assert!(out.column(1).is_null(0));
    }

    #[test]
    fn validation_rules_are_typed() {
        let err = ColumnMapping::new(2, 12, "map_by_name", vec![]);
        assert!(matches!(
            err,
            Err(MappingError::EmptyMapping {
                table_id: 2,
                mapping_id: 12
            })
        ));
        let err = ColumnMapping::new(
            2,
            12,
            "x",
            vec![node(0, "a", 1, None), node(0, "b", 2, None)],
        );
        assert!(matches!(
            err,
            Err(MappingError::DuplicateColumnId { column_id: 0, .. })
        ));
        let err = ColumnMapping::new(2, 12, "x", vec![node(1, "a", 1, Some(1))]);
        assert!(matches!(
            err,
            Err(MappingError::ParentNotBeforeChild {
                column_id: 1,
                parent_column: 1,
                ..
            })
        ));
        let err = ColumnMapping::new(2, 12, "x", vec![node(5, "a", 1, Some(2))]);
        assert!(matches!(
            err,
            Err(MappingError::UnknownParent {
                parent_column: 2,
                ..
            })
        ));
        // Non-contiguous ordinals and any map type are accepted.
        assert!(
            ColumnMapping::new(
                2,
                12,
                "future",
                vec![node(3, "a", 1, None), node(9, "b", 2, Some(3))]
            )
            .is_ok()
        );

        let row = |mapping_id| ColumnMappingRow {
            mapping_id,
            table_id: 2,
            map_type: "map_by_name".into(),
        };
        let err = MappingSet::from_rows(
            vec![row(12)],
            vec![(12, node(0, "a", 1, None)), (13, node(0, "a", 1, None))],
        );
        assert!(matches!(
            err,
            Err(MappingError::OrphanNameRows {
                mapping_id: 13,
                rows: 1
            })
        ));
        let err = MappingSet::from_rows(vec![row(12), row(12)], vec![(12, node(0, "a", 1, None))]);
        assert!(matches!(
            err,
            Err(MappingError::DuplicateMapping {
                table_id: 2,
                mapping_id: 12
            })
        ));
        let set = MappingSet::from_rows(vec![row(12)], vec![(12, node(0, "a", 1, None))]).unwrap();
        assert_eq!(set.get(2, 12).unwrap().names().len(), 1);
        assert!(set.get(3, 12).is_none());
    }
}
