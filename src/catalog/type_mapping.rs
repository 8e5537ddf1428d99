//! The profile's type mapping (§Type Mapping): which Parquet representations
//! stand for which logical (Iceberg) types, checked against a Parquet file's
//! own schema (from its footer), never against an engine's inferred schema.
//!
//! | logical type | Parquet representation |
//! |---|---|
//! | boolean | BOOLEAN |
//! | int | INT32 (unannotated or INT(32, signed)) |
//! | long | INT64 (unannotated or INT(64, signed)) |
//! | float / double | FLOAT / DOUBLE |
//! | string | BYTE_ARRAY annotated STRING (or legacy UTF8) |
//! | uuid | FIXED_LEN_BYTE_ARRAY(16) annotated UUID |
//! | binary | unannotated BYTE_ARRAY |
//! | fixed(L) | unannotated FIXED_LEN_BYTE_ARRAY(L) |
//! | date | INT32 annotated DATE |
//! | list<string/float/double> | LIST of STRING / FLOAT / DOUBLE elements |
//! | map<string, string/long/uuid> | MAP with STRING keys and STRING / INT64 / UUID values |
//!
//! Anything else (INT96, decimals, timestamps, structs, …) is unmapped: it is
//! reported per column, and is an error only when a caller asks for that
//! column. The profile requires list elements and map values to be
//! `required`; common writers (pyarrow, DuckDB) write them `optional`, so the
//! mapping accepts both and records it in [`MappedField::nullable_elements`]:
//! [`MappedField::conforms_to_profile`] tells the strict answer, and the
//! vector decoder rejects an actual null element row by row.

use std::fmt;

use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as PhysicalType};
use parquet::file::metadata::ParquetMetaData;
use parquet::schema::types::Type;
use thiserror::Error;

/// A column that does not map, or is missing, or cannot hold vectors.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TypeMappingError {
    #[error(
        "column {column:?}: {representation} has no logical type in the profile's type mapping"
    )]
    Unmapped {
        column: String,
        representation: String,
    },
    #[error("column {column:?}: malformed {kind} group: {reason}")]
    MalformedGroup {
        column: String,
        kind: &'static str,
        reason: &'static str,
    },
    #[error("column {column:?} is not in the file schema")]
    MissingColumn { column: String },
    #[error("no column has Parquet field id {field_id}")]
    MissingFieldId { field_id: i32 },
    #[error(
        "column {column:?} is {found}; a vector column is list<float>, list<double> or fixed(4·dim)"
    )]
    NotAVector { column: String, found: String },
    #[error(
        "column {column:?} is fixed({length}); a vector of f32 needs a positive multiple of 4 bytes"
    )]
    FixedLength { column: String, length: usize },
}

/// A list element type allowed by the mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListElement {
    String,
    Float,
    Double,
}

/// A map value type allowed by the mapping (keys are always strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapValue {
    String,
    Long,
    Uuid,
}

/// A logical type of the profile's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogicalKind {
    Boolean,
    Int,
    Long,
    Float,
    Double,
    String,
    Uuid,
    Binary,
    /// `fixed(L)`, L bytes.
    Fixed(usize),
    Date,
    List(ListElement),
    Map(MapValue),
}

impl fmt::Display for LogicalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let element = |e: &ListElement| match e {
            ListElement::String => "string",
            ListElement::Float => "float",
            ListElement::Double => "double",
        };
        match self {
            LogicalKind::Boolean => f.write_str("boolean"),
            LogicalKind::Int => f.write_str("int"),
            LogicalKind::Long => f.write_str("long"),
            LogicalKind::Float => f.write_str("float"),
            LogicalKind::Double => f.write_str("double"),
            LogicalKind::String => f.write_str("string"),
            LogicalKind::Uuid => f.write_str("uuid"),
            LogicalKind::Binary => f.write_str("binary"),
            LogicalKind::Fixed(l) => write!(f, "fixed({l})"),
            LogicalKind::Date => f.write_str("date"),
            LogicalKind::List(e) => write!(f, "list<{}>", element(e)),
            LogicalKind::Map(MapValue::String) => f.write_str("map<string, string>"),
            LogicalKind::Map(MapValue::Long) => f.write_str("map<string, long>"),
            LogicalKind::Map(MapValue::Uuid) => f.write_str("map<string, uuid>"),
        }
    }
}

/// One top-level column of a file, mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedField {
    pub name: String,
    /// The Parquet field id, when the writer set one.
    pub field_id: Option<i32>,
    /// Whether the column itself is `required`.
    pub required: bool,
    pub kind: LogicalKind,
    /// For lists and maps: whether elements / map values are `optional`
    /// (outside the profile's strict mapping, accepted, see module docs).
    pub nullable_elements: bool,
}

impl MappedField {
    /// Whether the column follows the profile's table exactly (required list
    /// elements and map values).
    pub fn conforms_to_profile(&self) -> bool {
        !self.nullable_elements
    }
}

/// How a vector column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorLayout {
    /// `list<float>` (also Arrow FixedSizeList<Float32> once written).
    ListFloat,
    /// `list<double>`, converted to f32 when decoded.
    ListDouble,
    /// `fixed(4·dim)`: dim little-endian f32 values.
    FixedF32 { dim: usize },
}

/// The mapping of every top-level column of one file schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMapping {
    /// Columns in file order, each mapped or with the reason it is not.
    pub columns: Vec<Result<MappedField, TypeMappingError>>,
}

impl SchemaMapping {
    /// Maps a file's root schema (the message type).
    pub fn from_schema(schema: &Type) -> SchemaMapping {
        let columns = match schema {
            Type::GroupType { fields, .. } => fields.iter().map(|f| map_field(f)).collect(),
            Type::PrimitiveType { .. } => vec![map_field(schema)],
        };
        SchemaMapping { columns }
    }

    /// Maps the schema in a file's footer.
    pub fn from_metadata(metadata: &ParquetMetaData) -> SchemaMapping {
        SchemaMapping::from_schema(metadata.file_metadata().schema())
    }

    /// The column named `name`.
    ///
    /// # Errors
    /// `MissingColumn`, or the column's own mapping error.
    pub fn column(&self, name: &str) -> Result<&MappedField, TypeMappingError> {
        self.find(|c| match c {
            Ok(field) => field.name == name,
            Err(e) => error_column(e) == Some(name),
        })
        .ok_or_else(|| TypeMappingError::MissingColumn {
            column: name.to_string(),
        })?
    }

    /// The mapped column carrying Parquet field id `field_id`.
    ///
    /// # Errors
    /// `MissingFieldId` when no mapped column has that id.
    pub fn column_by_id(&self, field_id: i32) -> Result<&MappedField, TypeMappingError> {
        self.columns
            .iter()
            .flatten()
            .find(|f| f.field_id == Some(field_id))
            .ok_or(TypeMappingError::MissingFieldId { field_id })
    }

    /// The column `name` checked as a vector column.
    ///
    /// # Errors
    /// As [`SchemaMapping::column`], then `NotAVector` / `FixedLength`.
    pub fn vector_column(&self, name: &str) -> Result<VectorLayout, TypeMappingError> {
        vector_layout(self.column(name)?)
    }

    fn find(
        &self,
        predicate: impl Fn(&Result<MappedField, TypeMappingError>) -> bool,
    ) -> Option<Result<&MappedField, TypeMappingError>> {
        self.columns
            .iter()
            .find(|c| predicate(c))
            .map(|c| c.as_ref().map_err(Clone::clone))
    }
}

fn error_column(error: &TypeMappingError) -> Option<&str> {
    match error {
        TypeMappingError::Unmapped { column, .. }
        | TypeMappingError::MalformedGroup { column, .. } => Some(column),
        _ => None,
    }
}

/// The vector layout of a mapped column.
///
/// # Errors
/// `NotAVector` for any other logical type, `FixedLength` for a `fixed(L)`
/// whose L is not a positive multiple of 4.
pub fn vector_layout(field: &MappedField) -> Result<VectorLayout, TypeMappingError> {
    match field.kind {
        LogicalKind::List(ListElement::Float) => Ok(VectorLayout::ListFloat),
        LogicalKind::List(ListElement::Double) => Ok(VectorLayout::ListDouble),
        LogicalKind::Fixed(length) if length > 0 && length % 4 == 0 => {
            Ok(VectorLayout::FixedF32 { dim: length / 4 })
        }
        LogicalKind::Fixed(length) => Err(TypeMappingError::FixedLength {
            column: field.name.clone(),
            length,
        }),
        other => Err(TypeMappingError::NotAVector {
            column: field.name.clone(),
            found: other.to_string(),
        }),
    }
}

/// Maps one (top-level) field.
///
/// # Errors
/// `Unmapped` for a representation outside the table, `MalformedGroup` for a
/// LIST/MAP group that breaks the Parquet nesting rules.
pub fn map_field(field: &Type) -> Result<MappedField, TypeMappingError> {
    let info = field.get_basic_info();
    let (kind, nullable_elements) = match field {
        Type::PrimitiveType { .. } => (map_primitive(field)?, false),
        Type::GroupType { fields, .. } => {
            let annotation = (info.logical_type_ref(), info.converted_type());
            match annotation {
                (Some(LogicalType::List), _) | (None, ConvertedType::LIST) => {
                    map_list(field.name(), fields)?
                }
                (Some(LogicalType::Map), _)
                | (None, ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE) => {
                    map_map(field.name(), fields)?
                }
                _ => return Err(unmapped(field)),
            }
        }
    };
    if info.has_repetition() && info.repetition() == Repetition::REPEATED {
        return Err(unmapped(field));
    }
    Ok(MappedField {
        name: field.name().to_string(),
        field_id: info.has_id().then(|| info.id()),
        required: info.has_repetition() && info.repetition() == Repetition::REQUIRED,
        kind,
        nullable_elements,
    })
}

fn unmapped(field: &Type) -> TypeMappingError {
    let info = field.get_basic_info();
    let physical = match field {
        Type::PrimitiveType {
            physical_type: PhysicalType::FIXED_LEN_BYTE_ARRAY,
            type_length,
            ..
        } => format!("FIXED_LEN_BYTE_ARRAY({type_length})"),
        Type::PrimitiveType { physical_type, .. } => physical_type.to_string(),
        Type::GroupType { .. } => "group".to_string(),
    };
    let annotation = match (info.logical_type_ref(), info.converted_type()) {
        (Some(logical), _) => format!(" annotated {logical:?}"),
        (None, ConvertedType::NONE) => String::new(),
        (None, converted) => format!(" annotated {converted}"),
    };
    let repetition = if info.has_repetition() {
        format!("{} ", info.repetition())
    } else {
        String::new()
    };
    TypeMappingError::Unmapped {
        column: field.name().to_string(),
        representation: format!("{repetition}{physical}{annotation}"),
    }
}

fn map_primitive(field: &Type) -> Result<LogicalKind, TypeMappingError> {
    let Type::PrimitiveType {
        basic_info,
        physical_type,
        type_length,
        ..
    } = field
    else {
        return Err(unmapped(field));
    };
    let logical = basic_info.logical_type_ref();
    let converted = basic_info.converted_type();
    let plain = logical.is_none() && converted == ConvertedType::NONE;
    let int = |bits| matches!(logical, Some(LogicalType::Integer(t)) if t.is_signed && t.bit_width == bits);
    let kind = match physical_type {
        PhysicalType::BOOLEAN if plain => LogicalKind::Boolean,
        PhysicalType::INT32
            if plain || int(32) || (logical.is_none() && converted == ConvertedType::INT_32) =>
        {
            LogicalKind::Int
        }
        PhysicalType::INT32
            if matches!(logical, Some(LogicalType::Date)) || converted == ConvertedType::DATE =>
        {
            LogicalKind::Date
        }
        PhysicalType::INT64
            if plain || int(64) || (logical.is_none() && converted == ConvertedType::INT_64) =>
        {
            LogicalKind::Long
        }
        PhysicalType::FLOAT if plain => LogicalKind::Float,
        PhysicalType::DOUBLE if plain => LogicalKind::Double,
        PhysicalType::BYTE_ARRAY
            if matches!(logical, Some(LogicalType::String)) || converted == ConvertedType::UTF8 =>
        {
            LogicalKind::String
        }
        PhysicalType::BYTE_ARRAY if plain => LogicalKind::Binary,
        PhysicalType::FIXED_LEN_BYTE_ARRAY
            if *type_length == 16 && matches!(logical, Some(LogicalType::Uuid)) =>
        {
            LogicalKind::Uuid
        }
        PhysicalType::FIXED_LEN_BYTE_ARRAY if plain => {
            LogicalKind::Fixed(usize::try_from(*type_length).map_err(|_| unmapped(field))?)
        }
        _ => return Err(unmapped(field)),
    };
    Ok(kind)
}

/// The one repeated child of a LIST or MAP group.
fn repeated_child<'a>(
    column: &str,
    kind: &'static str,
    fields: &'a [parquet::schema::types::TypePtr],
) -> Result<&'a Type, TypeMappingError> {
    let malformed = |reason| TypeMappingError::MalformedGroup {
        column: column.to_string(),
        kind,
        reason,
    };
    let [child] = fields else {
        return Err(malformed("it must have exactly one child"));
    };
    let info = child.get_basic_info();
    if !(info.has_repetition() && info.repetition() == Repetition::REPEATED) {
        return Err(malformed("its child must be repeated"));
    }
    Ok(child)
}

fn is_optional(field: &Type) -> bool {
    let info = field.get_basic_info();
    info.has_repetition() && info.repetition() == Repetition::OPTIONAL
}

/// LIST: 3-level (`repeated group list { <element> }`) or legacy 2-level
/// (`repeated <primitive> element`, required elements).
fn map_list(
    column: &str,
    fields: &[parquet::schema::types::TypePtr],
) -> Result<(LogicalKind, bool), TypeMappingError> {
    let repeated = repeated_child(column, "LIST", fields)?;
    let (element, nullable) = match repeated {
        Type::PrimitiveType { .. } => (repeated, false),
        Type::GroupType { fields, .. } => match fields.as_slice() {
            [element] => (element.as_ref(), is_optional(element)),
            _ => {
                return Err(TypeMappingError::MalformedGroup {
                    column: column.to_string(),
                    kind: "LIST",
                    reason: "the repeated group must hold exactly one element field",
                });
            }
        },
    };
    let element_kind = match map_primitive(element) {
        Ok(LogicalKind::String) => ListElement::String,
        Ok(LogicalKind::Float) => ListElement::Float,
        Ok(LogicalKind::Double) => ListElement::Double,
        Ok(other) => {
            return Err(TypeMappingError::Unmapped {
                column: column.to_string(),
                representation: format!("LIST of {other}"),
            });
        }
        Err(_) => {
            return Err(TypeMappingError::Unmapped {
                column: column.to_string(),
                representation: "LIST of an unmapped element".to_string(),
            });
        }
    };
    Ok((LogicalKind::List(element_kind), nullable))
}

/// MAP: `repeated group key_value { required binary key (STRING); <value> }`.
fn map_map(
    column: &str,
    fields: &[parquet::schema::types::TypePtr],
) -> Result<(LogicalKind, bool), TypeMappingError> {
    let repeated = repeated_child(column, "MAP", fields)?;
    let malformed = |reason| TypeMappingError::MalformedGroup {
        column: column.to_string(),
        kind: "MAP",
        reason,
    };
    let Type::GroupType { fields, .. } = repeated else {
        return Err(malformed("the repeated child must be a key/value group"));
    };
    let [key, value] = fields.as_slice() else {
        return Err(malformed(
            "the key/value group must have exactly two fields",
        ));
    };
    if is_optional(key) || !matches!(map_primitive(key), Ok(LogicalKind::String)) {
        return Err(TypeMappingError::Unmapped {
            column: column.to_string(),
            representation: "MAP whose keys are not required STRING".to_string(),
        });
    }
    let value_kind = match map_primitive(value) {
        Ok(LogicalKind::String) => MapValue::String,
        Ok(LogicalKind::Long) => MapValue::Long,
        Ok(LogicalKind::Uuid) => MapValue::Uuid,
        _ => {
            return Err(TypeMappingError::Unmapped {
                column: column.to_string(),
                representation: "MAP whose values are not STRING, INT64 or UUID".to_string(),
            });
        }
    };
    Ok((LogicalKind::Map(value_kind), is_optional(value)))
}
