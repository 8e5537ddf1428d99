//! The profile's type mapping checked against Parquet file schemas: every row
//! of the table, what is unmapped, malformed LIST/MAP groups, and vector
//! columns in real files written by the Arrow writer and decoded back.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, FixedSizeBinaryArray, FixedSizeListArray, Float32Array, Int64Array, ListArray,
    RecordBatch,
};
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type};
use bytes::Bytes;
use parqivf::catalog::type_mapping::{
    ListElement, LogicalKind, MapValue, SchemaMapping, TypeMappingError, VectorLayout,
};
use parqivf::catalog::vector_column;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::schema::parser::parse_message_type;

fn mapping(message: &str) -> SchemaMapping {
    SchemaMapping::from_schema(&parse_message_type(message).unwrap())
}

#[test]
fn every_row_of_the_profile_table_maps() {
    let schema = mapping(
        "message m {
            required boolean b;
            required int32 i;
            optional int32 i2 (INTEGER(32, true));
            required int64 l = 7;
            required float f;
            required double d;
            required binary s (STRING);
            required binary s2 (UTF8);
            required fixed_len_byte_array(16) u (UUID);
            required binary bin;
            required fixed_len_byte_array(512) fx;
            required int32 dt (DATE);
            required group ls (LIST) { repeated group list { required binary element (STRING); } }
            required group lf (LIST) { repeated group list { required float element; } }
            required group ld (LIST) { repeated group list { required double element; } }
            required group ms (MAP) { repeated group key_value { required binary key (STRING); required binary value (STRING); } }
            required group ml (MAP) { repeated group key_value { required binary key (STRING); required int64 value; } }
            required group mu (MAP) { repeated group key_value { required binary key (STRING); required fixed_len_byte_array(16) value (UUID); } }
        }",
    );
    let expected = [
        ("b", LogicalKind::Boolean),
        ("i", LogicalKind::Int),
        ("i2", LogicalKind::Int),
        ("l", LogicalKind::Long),
        ("f", LogicalKind::Float),
        ("d", LogicalKind::Double),
        ("s", LogicalKind::String),
        ("s2", LogicalKind::String),
        ("u", LogicalKind::Uuid),
        ("bin", LogicalKind::Binary),
        ("fx", LogicalKind::Fixed(512)),
        ("dt", LogicalKind::Date),
        ("ls", LogicalKind::List(ListElement::String)),
        ("lf", LogicalKind::List(ListElement::Float)),
        ("ld", LogicalKind::List(ListElement::Double)),
        ("ms", LogicalKind::Map(MapValue::String)),
        ("ml", LogicalKind::Map(MapValue::Long)),
        ("mu", LogicalKind::Map(MapValue::Uuid)),
    ];
    assert_eq!(schema.columns.len(), expected.len());
    for (name, kind) in expected {
        let field = schema.column(name).unwrap();
        assert_eq!(field.kind, kind, "{name}");
        assert!(field.conforms_to_profile(), "{name}");
    }
    assert_eq!(schema.column("l").unwrap().field_id, Some(7));
    assert_eq!(schema.column_by_id(7).unwrap().name, "l");
    assert!(!schema.column("i2").unwrap().required);
    assert_eq!(
        LogicalKind::Map(MapValue::Long).to_string(),
        "map<string, long>"
    );
}

#[test]
fn representations_outside_the_table_are_unmapped_per_column() {
    let schema = mapping(
        "message m {
            required float ok;
            required int96 ts96;
            required int64 ts (TIMESTAMP(MILLIS, true));
            required int32 small (INTEGER(8, true));
            required int32 dec (DECIMAL(9, 2));
            required binary js (JSON);
            required fixed_len_byte_array(2) half (FLOAT16);
            required group st { required int32 a; }
            repeated float bare;
            required group li (LIST) { repeated group list { required int32 element; } }
            required group mk (MAP) { repeated group key_value { required int32 key; required binary value (STRING); } }
            required group mv (MAP) { repeated group key_value { required binary key (STRING); required double value; } }
        }",
    );
    assert_eq!(schema.column("ok").unwrap().kind, LogicalKind::Float);
    for name in [
        "ts96", "ts", "small", "dec", "js", "half", "st", "bare", "li", "mk", "mv",
    ] {
        assert!(
            matches!(schema.column(name), Err(TypeMappingError::Unmapped { column, .. }) if column == name),
            "{name}: {:?}",
            schema.column(name)
        );
    }
    assert!(matches!(
        schema.column("absent"),
        Err(TypeMappingError::MissingColumn { .. })
    ));
    assert!(matches!(
        schema.column_by_id(99),
        Err(TypeMappingError::MissingFieldId { field_id: 99 })
    ));
}

#[test]
fn malformed_list_and_map_groups_are_reported() {
    let schema = mapping(
        "message m {
            required group two (LIST) { repeated group list { required float a; required float b; } }
            required group norep (LIST) { required group list { required float element; } }
            required group many (LIST) { repeated float a; repeated float b; }
            required group onekey (MAP) { repeated group key_value { required binary key (STRING); } }
        }",
    );
    for name in ["two", "norep", "many", "onekey"] {
        assert!(
            matches!(schema.column(name), Err(TypeMappingError::MalformedGroup { column, .. }) if column == name),
            "{name}"
        );
    }
}

#[test]
fn legacy_and_nullable_lists() {
    let schema = mapping(
        "message m {
            optional group legacy (LIST) { repeated float element; }
            optional group nullable (LIST) { repeated group list { optional float element; } }
        }",
    );
    let legacy = schema.column("legacy").unwrap();
    assert_eq!(legacy.kind, LogicalKind::List(ListElement::Float));
    assert!(legacy.conforms_to_profile());
    let nullable = schema.column("nullable").unwrap();
    assert_eq!(nullable.kind, LogicalKind::List(ListElement::Float));
    assert!(nullable.nullable_elements && !nullable.conforms_to_profile());
}

#[test]
fn vector_columns_are_lists_of_float_or_double_or_fixed() {
    let schema = mapping(
        "message m {
            required group lf (LIST) { repeated group list { required float element; } }
            required group ld (LIST) { repeated group list { required double element; } }
            required fixed_len_byte_array(512) fx;
            required fixed_len_byte_array(6) odd;
            required group ls (LIST) { repeated group list { required binary element (STRING); } }
            required int64 id;
        }",
    );
    assert_eq!(schema.vector_column("lf").unwrap(), VectorLayout::ListFloat);
    assert_eq!(
        schema.vector_column("ld").unwrap(),
        VectorLayout::ListDouble
    );
    assert_eq!(
        schema.vector_column("fx").unwrap(),
        VectorLayout::FixedF32 { dim: 128 }
    );
    assert!(matches!(
        schema.vector_column("odd"),
        Err(TypeMappingError::FixedLength { length: 6, .. })
    ));
    assert!(
        matches!(schema.vector_column("ls"), Err(TypeMappingError::NotAVector { found, .. }) if found == "list<string>")
    );
    assert!(matches!(
        schema.vector_column("id"),
        Err(TypeMappingError::NotAVector { .. })
    ));
    assert!(matches!(
        schema.vector_column("nope"),
        Err(TypeMappingError::MissingColumn { .. })
    ));
}

/// Writes one batch to Parquet in memory and reads the footer and the data back.
fn round_trip(columns: Vec<(&str, ArrayRef)>) -> (SchemaMapping, RecordBatch) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(buffer)).unwrap();
    let mapping = SchemaMapping::from_metadata(builder.metadata());
    let read = builder.build().unwrap().next().unwrap().unwrap();
    (mapping, read)
}

#[test]
fn vectors_in_real_files_map_and_decode() {
    let rows = [[1.0_f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Float32Type, _, _>(
        rows.iter().map(|r| Some(r.iter().map(|v| Some(*v)))),
    ));
    let list64: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(
        rows.iter()
            .map(|r| Some(r.iter().map(|v| Some(f64::from(*v))))),
    ));
    let fixed_list: ArrayRef = Arc::new(FixedSizeListArray::new(
        Arc::new(Field::new("item", DataType::Float32, false)),
        3,
        Arc::new(Float32Array::from(flat.clone())),
        None,
    ));
    let binary: ArrayRef = Arc::new(
        FixedSizeBinaryArray::try_from_iter(
            rows.iter()
                .map(|r| r.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
        )
        .unwrap(),
    );
    let id: ArrayRef = Arc::new(Int64Array::from(vec![10, 11]));
    let (mapping, batch) = round_trip(vec![
        ("list", list),
        ("list64", list64),
        ("fsl", fixed_list),
        ("fixed", binary),
        ("id", id),
    ]);
    assert_eq!(
        mapping.vector_column("list").unwrap(),
        VectorLayout::ListFloat
    );
    assert_eq!(
        mapping.vector_column("list64").unwrap(),
        VectorLayout::ListDouble
    );
    // A FixedSizeList is written as a Parquet LIST: it maps as list<float>.
    assert_eq!(
        mapping.vector_column("fsl").unwrap(),
        VectorLayout::ListFloat
    );
    assert_eq!(
        mapping.vector_column("fixed").unwrap(),
        VectorLayout::FixedF32 { dim: 3 }
    );
    assert_eq!(mapping.column("id").unwrap().kind, LogicalKind::Long);
    for name in ["list", "list64", "fsl", "fixed"] {
        let column = batch.column_by_name(name).unwrap();
        assert_eq!(
            vector_column::to_f32_rows(column.as_ref(), Some(3)).unwrap(),
            (flat.clone(), 3),
            "{name}"
        );
    }
}
