//! Shared helpers for the DuckLake integration tests: copying the read-only
//! fixture into a temp dir with its catalog in SQLite or in PostgreSQL
//! ([`Lake`]), corrupting the copy with SQL, reading DuckDB's answers from
//! `expected.json`, and turning scanned batches into the same JSON shape.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type, UInt64Type};
use parqivf::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use serde_json::{Map, Value, json};

use crate::support::python::run_python;

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

/// Where a test lake keeps its catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// The PostgreSQL server the tests use (`PARQIVF_PG_CONNINFO`, libpq
/// `key=value` pairs, set by `scripts/test.sh`). Unset: `None` with a note,
/// a failure when `PARQIVF_REQUIRE_INTEROP=1`.
pub fn pg_conninfo() -> Option<String> {
    if let Ok(conninfo) = std::env::var("PARQIVF_PG_CONNINFO") {
        return Some(conninfo);
    }
    let required = std::env::var("PARQIVF_REQUIRE_INTEROP").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "PARQIVF_REQUIRE_INTEROP=1 but PARQIVF_PG_CONNINFO is unset (scripts/test.sh starts PostgreSQL)"
    );
    eprintln!(
        "skipping the PostgreSQL catalog case: PARQIVF_PG_CONNINFO is unset (run scripts/test.sh)"
    );
    None
}

/// Runs `f` on a client of `conninfo` on its own thread (the sync client
/// must not run on the test's tokio runtime).
pub fn with_pg<T: Send>(conninfo: &str, f: impl FnOnce(&mut postgres::Client) -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut client = postgres::Client::connect(conninfo, postgres::NoTls)
                .unwrap_or_else(|e| panic!("connect to PostgreSQL: {e}"));
            f(&mut client)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The fixture copied into a folder, its catalog in SQLite (the copied
/// `meta.sqlite`) or in a PostgreSQL schema of its own (dropped with the lake).
pub struct Lake {
    pub kind: Kind,
    pub catalog: Catalog,
    /// The SQLite file, or the conninfo (with its password) with
    /// `search_path` set to the schema.
    pub target: String,
    schema: Option<String>,
}

impl Lake {
    /// Copies the fixture into `dir` (catalog, data/, outside/); for
    /// [`Kind::Postgres`], DuckDB also creates the catalog in a fresh schema
    /// and fills it with the fixture catalog's rows (`pg_lake.py`), with
    /// `data_path` the absolute `dir/data/`.
    pub fn copy(kind: Kind, dir: &Path) -> Lake {
        copy_dir(&fixture_dir(), dir);
        let sqlite = dir.join("meta.sqlite");
        eprintln!("DuckLake catalog: {kind:?}");
        match kind {
            Kind::Sqlite => Lake {
                kind,
                catalog: Catalog::Sqlite(sqlite.clone()),
                target: sqlite.display().to_string(),
                schema: None,
            },
            Kind::Postgres => {
                let base = pg_conninfo().expect("PARQIVF_PG_CONNINFO");
                let python = crate::support::python::python_with("duckdb")
                    .expect("a Python with duckdb for the PostgreSQL lake");
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos();
                let schema = format!(
                    "lake_{}_{}_{nanos}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let data = format!("{}/", dir.canonicalize().unwrap().join("data").display());
                let script = include_str!("../../ducklake/pg_lake.py");
                run_python(
                    &python,
                    script,
                    &[&base, &schema, sqlite.to_str().unwrap(), &data],
                );
                let target = format!("{base} options=-csearch_path={schema}");
                Lake {
                    kind,
                    catalog: Catalog::parse(&format!("postgres:{target}")).unwrap(),
                    target,
                    schema: Some(schema),
                }
            }
        }
    }

    /// Runs `sql` (statements that work on both databases) on the catalog.
    pub fn execute(&self, sql: &str) {
        match self.kind {
            Kind::Sqlite => {
                let conn = rusqlite::Connection::open(&self.target).unwrap();
                conn.execute_batch(sql).unwrap();
            }
            Kind::Postgres => with_pg(&self.target, |c| c.batch_execute(sql).unwrap()),
        }
    }

    /// The first column of `sql`'s rows, as text.
    pub fn strings(&self, sql: &str) -> Vec<String> {
        match self.kind {
            Kind::Sqlite => {
                let conn = rusqlite::Connection::open(&self.target).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                stmt.query_map([], |r| r.get::<_, String>(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            Kind::Postgres => with_pg(&self.target, |c| {
                c.query(sql, &[])
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect()
            }),
        }
    }

    /// Everything the catalog holds, to compare before and after a read:
    /// the SQLite file's bytes, or every row of the schema's tables as text.
    pub fn contents(&self) -> Vec<u8> {
        match (&self.kind, &self.schema) {
            (Kind::Postgres, Some(schema)) => {
                let tables = self.strings(&format!(
                    "SELECT table_name::text FROM information_schema.tables \
                     WHERE table_schema = '{schema}' ORDER BY table_name"
                ));
                assert!(tables.len() >= 20, "{tables:?}");
                let mut out = Vec::new();
                for t in tables {
                    let rows = self.strings(&format!(
                        "SELECT COALESCE(string_agg(x::text, E'\\n' ORDER BY x::text), '') FROM {t} x"
                    ));
                    out.extend(format!("{t}:{}\n", rows.concat()).into_bytes());
                }
                out
            }
            _ => std::fs::read(&self.target).unwrap(),
        }
    }

    /// Rewrites the outside table's verbatim path (`outside/o.parquet`) to
    /// `path` (made absolute when it is a local file).
    pub fn rewrite_outside(&self, file: &Path) {
        let abs = file.canonicalize().unwrap();
        self.set_outside(&abs.display().to_string());
    }

    /// Sets the outside table's verbatim path to `location`.
    pub fn set_outside(&self, location: &str) {
        self.execute(&format!(
            "UPDATE ducklake_data_file SET path = '{location}' \
             WHERE path = 'outside/o.parquet' AND NOT path_is_relative"
        ));
    }
}

impl Drop for Lake {
    fn drop(&mut self) {
        if let Some(schema) = &self.schema
            && !std::thread::panicking()
        {
            let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            with_pg(&self.target, |c| {
                let _ = c.batch_execute(&sql);
            });
        }
    }
}

/// `test` run on a lake of each kind: `mod <test> { sqlite, postgres }`.
/// The PostgreSQL case is skipped with a note without `PARQIVF_PG_CONNINFO`.
#[macro_export]
macro_rules! on_both_catalogs {
    (async $test:ident) => {
        mod $test {
            use $crate::support::ducklake::{Kind, pg_conninfo};
            #[tokio::test]
            async fn sqlite() {
                super::$test(Kind::Sqlite).await
            }
            #[tokio::test]
            async fn postgres() {
                if pg_conninfo().is_some() {
                    super::$test(Kind::Postgres).await
                }
            }
        }
    };
    ($test:ident) => {
        mod $test {
            use $crate::support::ducklake::{Kind, pg_conninfo};
            #[test]
            fn sqlite() {
                super::$test(Kind::Sqlite)
            }
            #[test]
            fn postgres() {
                if pg_conninfo().is_some() {
                    super::$test(Kind::Postgres)
                }
            }
        }
    };
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
    catalog: &Catalog,
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
pub async fn check_all_tables(catalog: &Catalog, base: &DuckLakeOptions, every_snapshot: bool) {
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
