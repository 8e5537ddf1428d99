//! Shared helpers for the DuckLake integration tests: copying the read-only
//! fixture into a temp dir, corrupting the copy with SQL, reading DuckDB's
//! answers from `expected.json`, and turning scanned batches into the same
//! JSON shape.

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt64Type};
use parqivf::catalog::ducklake::{DuckLakeError, DuckLakeOptions, DuckLakeTable};
use serde_json::{Map, Value, json};

pub const TABLES: [&str; 6] = [
    "s1.docs",
    "s1.parted",
    "s1.nested",
    "s1.merged",
    "s1.compacted",
    "s1.outside",
];

fn fixture() -> PathBuf {
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

fn copy_dir(from: &Path, to: &Path) {
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
fn tuples(batches: &[RecordBatch]) -> Vec<Value> {
    rows(batches)
        .into_iter()
        .map(|v| Value::Array(v.as_object().unwrap().values().cloned().collect()))
        .collect()
}

/// `table` at `snapshot` with the other options of `base`.
fn open_at(
    catalog: &Path,
    table: &str,
    snapshot: Option<u64>,
    base: &DuckLakeOptions,
) -> DuckLakeTable {
    let options = DuckLakeOptions {
        snapshot,
        ..base.clone()
    };
    DuckLakeTable::open(catalog, table, &options)
        .unwrap_or_else(|e| panic!("{table}@{snapshot:?}: {e}"))
}

fn latest_columns(expected: &Value) -> Vec<String> {
    let mut cols = vec!["rowid".to_string()];
    cols.extend(
        expected["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c[0].as_str().unwrap().to_string()),
    );
    cols
}

/// Every table at the latest snapshot and at every snapshot from its creation
/// to the latest (content at v = at_snapshot[max key <= v]); with
/// `every_snapshot` false, only at the snapshots `expected.json` lists.
pub async fn check_all_tables(catalog: &Path, base: &DuckLakeOptions, every_snapshot: bool) {
    let expected = expected();
    let latest = expected["latest_snapshot"].as_u64().unwrap();
    for table in TABLES {
        let exp = &expected["tables"][table];
        let cols = latest_columns(exp);
        let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
        let t = open_at(catalog, table, None, base);
        assert_eq!(t.snapshot(), latest as i64);
        let got = rows(&t.scan(&cols).await.unwrap());
        let want = exp["rows"].as_array().unwrap();
        assert_eq!(
            got.len() as u64,
            exp["row_count"].as_u64().unwrap(),
            "{table} row count"
        );
        assert_eq!(&got, want, "{table} latest");

        let fields: Vec<&str> = exp["at_snapshot_fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        let at = exp["at_snapshot"].as_object().unwrap();
        let mut keys: Vec<u64> = at.keys().map(|k| k.parse().unwrap()).collect();
        keys.sort_unstable();
        let created = keys[0];
        // Before its creation the table does not exist.
        let before = DuckLakeTable::open(
            catalog,
            table,
            &DuckLakeOptions {
                snapshot: Some(created - 1),
                ..base.clone()
            },
        );
        assert!(
            matches!(before, Err(DuckLakeError::TableNotFound { .. })),
            "{table} before {created}"
        );
        let snapshots: Vec<u64> = if every_snapshot {
            (created..=latest).collect()
        } else {
            keys.clone()
        };
        for v in snapshots {
            let key = keys.iter().rev().find(|&&k| k <= v).unwrap();
            let want = &at[&key.to_string()];
            let t = open_at(catalog, table, Some(v), base);
            let got = tuples(&t.scan(&fields).await.unwrap());
            assert_eq!(&Value::Array(got), want, "{table} at snapshot {v}");
        }
    }
}
