//! Shared helpers for the DuckLake integration tests: copying the read-only
//! fixture into a temp dir, corrupting the copy with SQL, reading DuckDB's
//! answers from `expected.json`, and turning scanned batches into the same
//! JSON shape.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt64Type};
use serde_json::{Map, Value, json};

pub const TABLES: [&str; 6] = [
    "s1.docs",
    "s1.parted",
    "s1.nested",
    "s1.merged",
    "s1.compacted",
    "s1.outside",
];

pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/ducklake")
}

fn fixture_dir() -> PathBuf {
    let local = fixture();
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/fixtures/ducklake")
    }
}

pub fn expected() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The fixture copied into `dir` (catalog, data/, outside/).
pub fn copy_fixture(dir: &Path) -> PathBuf {
    copy_dir(&fixture_dir(), dir);
    dir.join("meta.sqlite")
}

pub fn execute(catalog: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(catalog).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// Rewrites the outside table's verbatim path (`outside/o.parquet`) to the
/// absolute path of `file`.
pub fn rewrite_outside(catalog: &Path, file: &Path) {
    let abs = file.canonicalize().unwrap();
    let sql = format!(
        "UPDATE ducklake_data_file SET path = '{}' WHERE path = 'outside/o.parquet' AND path_is_relative = 0",
        abs.display()
    );
    execute(catalog, &sql);
}

fn value(array: &ArrayRef, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Int64 => json!(array.as_primitive::<Int64Type>().value(row)),
        DataType::Int32 => json!(array.as_primitive::<Int32Type>().value(row)),
        DataType::UInt64 => json!(array.as_primitive::<UInt64Type>().value(row)),
        DataType::Float32 => json!(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => json!(array.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => json!(array.as_string::<i32>().value(row)),
        DataType::List(_) => {
            let values = array.as_list::<i32>().value(row);
            Value::Array((0..values.len()).map(|i| value(&values, i)).collect())
        }
        DataType::Struct(fields) => {
            let st = array.as_struct();
            let mut m = Map::new();
            for (f, c) in fields.iter().zip(st.columns()) {
                m.insert(f.name().clone(), value(c, row));
            }
            Value::Object(m)
        }
        other => panic!("unexpected type {other}"),
    }
}

/// Rows as JSON objects keyed by column name, sorted by `rowid`.
pub fn rows(batches: &[RecordBatch]) -> Vec<Value> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let mut m = Map::new();
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                m.insert(f.name().clone(), value(c, r));
            }
            out.push(Value::Object(m));
        }
    }
    out.sort_by_key(|v| v["rowid"].as_i64());
    out
}

/// Rows as JSON arrays in column order, sorted by `rowid` (first column).
pub fn tuples(batches: &[RecordBatch]) -> Vec<Value> {
    rows(batches)
        .into_iter()
        .map(|v| Value::Array(v.as_object().unwrap().values().cloned().collect()))
        .collect()
}
