//! Payload filters (`parqivf::filter`) against independent evaluations of
//! the same filters on the same rows: pyarrow's compute expressions, and
//! DuckDB's SQL (the reference for NULL semantics) when it is installed.
//! One Parquet file of ~2 000 payload rows covers every column type the
//! postings payload commonly has; every operator of the filter language
//! has a case. Pruning by the file's row-group statistics is checked to
//! keep every row group that holds a selected row.

use crate::support;

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use parqivf::filter::{ContainerStats, Filter};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

const ROWS: usize = 2_000;
/// 2024-01-01 as days since the epoch.
const JAN1: i32 = 19_723;
/// 2024-01-01 00:00:00 in microseconds since the epoch.
const JAN1_US: i64 = 1_704_067_200_000_000;
const HOUR_US: i64 = 3_600_000_000;

/// The payload rows, `rn` being the row number. Deterministic, with NULLs
/// in every nullable column and shared string prefixes.
fn payload() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("rn", DataType::Int64, false),
        Field::new("i32", DataType::Int32, true),
        Field::new("i64", DataType::Int64, false),
        Field::new("f64", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new(
            "tsz",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]));
    let prefixes = [
        "apple", "apricot", "ap", "banana", "Band", "b_x", "cherry", "Apple", "",
    ];
    let rn: Vec<i64> = (0..ROWS as i64).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(rn.clone())),
        Arc::new(Int32Array::from_iter(
            rn.iter()
                .map(|r| (r % 7 != 3).then_some(((r * 37) % 101) as i32 - 50)),
        )),
        Arc::new(Int64Array::from_iter_values(
            rn.iter()
                .map(|r| (r * 1_000_003 % 9_973) * 1_000_000 - 5_000_000_000),
        )),
        Arc::new(Float64Array::from_iter(rn.iter().map(|r| {
            (r % 19 != 4).then_some(((r * 13) % 1000) as f64 / 8.0 - 60.0)
        }))),
        Arc::new(StringArray::from_iter(rn.iter().map(|r| {
            (r % 11 != 5).then(|| format!("{}{}", prefixes[(r % 9) as usize], r % 13))
        }))),
        Arc::new(BooleanArray::from_iter(
            rn.iter().map(|r| (r % 5 != 0).then_some(r % 3 == 0)),
        )),
        Arc::new(Date32Array::from_iter(rn.iter().map(|r| {
            (r % 17 != 2).then_some(JAN1 - 500 + ((r * 7) % 1000) as i32)
        }))),
        Arc::new(TimestampMicrosecondArray::from_iter(rn.iter().map(|r| {
            (r % 23 != 8).then_some(JAN1_US + ((r * 7) % 9_600) * HOUR_US - 240 * HOUR_US + r)
        }))),
        Arc::new(
            TimestampMicrosecondArray::from_iter(rn.iter().map(|r| {
                (r % 29 != 1).then_some(JAN1_US + ((r * 11) % 4_000) * HOUR_US - 2_000 * HOUR_US)
            }))
            .with_timezone("UTC"),
        ),
    ];
    RecordBatch::try_new(schema, columns).expect("payload batch")
}

/// (name, SQL, pyarrow expression): one per operator of the language.
const CASES: &[(&str, &str, &str)] = &[
    ("eq", "i32 = 7", r#"pc.field("i32") == 7"#),
    ("neq", "i32 <> 7", r#"pc.field("i32") != 7"#),
    ("neq_bang", "i32 != -7", r#"pc.field("i32") != -7"#),
    ("lt", "i32 < -20", r#"pc.field("i32") < -20"#),
    ("lt_eq", "i32 <= 0", r#"pc.field("i32") <= 0"#),
    ("gt", "i64 > 3000000000", r#"pc.field("i64") > 3000000000"#),
    ("gt_eq", "f64 >= 12.5", r#"pc.field("f64") >= 12.5"#),
    ("literal_first", "10 > i32", r#"pc.field("i32") < 10"#),
    (
        "negative_float",
        "f64 < -59.5",
        r#"pc.field("f64") < -59.5"#,
    ),
    (
        "in",
        "i32 IN (1, 5, -50, 50)",
        r#"pc.field("i32").isin([1, 5, -50, 50])"#,
    ),
    ("in_null", "i32 IN (1, NULL)", r#"pc.field("i32") == 1"#),
    (
        "not_in",
        "i32 NOT IN (1, 5, -50)",
        r#"(pc.field("i32") != 1) & (pc.field("i32") != 5) & (pc.field("i32") != -50)"#,
    ),
    (
        "not_in_null",
        "i32 NOT IN (1, NULL)",
        r#"(pc.field("i32") != 1) & pc.scalar(pa.scalar(None, pa.bool_()))"#,
    ),
    (
        "not_of_in_null",
        "NOT (i32 IN (1, NULL))",
        r#"~((pc.field("i32") == 1) | pc.scalar(pa.scalar(None, pa.bool_())))"#,
    ),
    (
        "between",
        "i32 BETWEEN -5 AND 5",
        r#"(pc.field("i32") >= -5) & (pc.field("i32") <= 5)"#,
    ),
    (
        "not_between",
        "i32 NOT BETWEEN -40 AND 40",
        r#"(pc.field("i32") < -40) | (pc.field("i32") > 40)"#,
    ),
    ("is_null", "s IS NULL", r#"pc.field("s").is_null()"#),
    (
        "is_not_null",
        "i32 IS NOT NULL",
        r#"pc.field("i32").is_valid()"#,
    ),
    ("str_eq", "s = 'apple3'", r#"pc.field("s") == "apple3""#),
    ("str_lt", "s < 'b'", r#"pc.field("s") < "b""#),
    (
        "like_prefix",
        "s LIKE 'ap%'",
        r#"pc.starts_with(pc.field("s"), "ap")"#,
    ),
    (
        "like_general",
        "s LIKE '%an%1_'",
        r#"pc.match_like(pc.field("s"), "%an%1_")"#,
    ),
    (
        "like_underscore",
        "s LIKE 'b_x%'",
        r#"pc.match_like(pc.field("s"), "b_x%")"#,
    ),
    (
        "not_like",
        "s NOT LIKE 'ap%'",
        r#"~pc.match_like(pc.field("s"), "ap%")"#,
    ),
    (
        "ilike",
        "s ILIKE 'APP%'",
        r#"pc.match_like(pc.field("s"), "app%", ignore_case=True)"#,
    ),
    (
        "not_ilike",
        "s NOT ILIKE '%AN%'",
        r#"~pc.match_like(pc.field("s"), "%an%", ignore_case=True)"#,
    ),
    (
        "and",
        "i32 > 0 AND s LIKE 'b%'",
        r#"(pc.field("i32") > 0) & pc.starts_with(pc.field("s"), "b")"#,
    ),
    (
        "or",
        "i32 < -45 OR s = 'cherry0'",
        r#"(pc.field("i32") < -45) | (pc.field("s") == "cherry0")"#,
    ),
    (
        "not",
        "NOT (i32 > 0 OR f64 < 0)",
        r#"~((pc.field("i32") > 0) | (pc.field("f64") < 0))"#,
    ),
    (
        "not_eq_null_rows",
        "NOT (i32 = 7)",
        r#"~(pc.field("i32") == 7)"#,
    ),
    (
        "nested",
        "(flag OR i32 IS NULL) AND NOT (s LIKE 'a%' OR d < DATE '2023-06-01')",
        r#"(pc.field("flag") | pc.field("i32").is_null()) & ~(pc.starts_with(pc.field("s"), "a") | (pc.field("d") < pa.scalar(datetime.date(2023, 6, 1))))"#,
    ),
    (
        "date_eq",
        "d = DATE '2024-01-01'",
        r#"pc.field("d") == pa.scalar(datetime.date(2024, 1, 1))"#,
    ),
    (
        "date_string",
        "d >= '2024-06-30'",
        r#"pc.field("d") >= pa.scalar(datetime.date(2024, 6, 30))"#,
    ),
    (
        "date_between",
        "d BETWEEN DATE '2023-10-01' AND DATE '2023-10-31'",
        r#"(pc.field("d") >= pa.scalar(datetime.date(2023, 10, 1))) & (pc.field("d") <= pa.scalar(datetime.date(2023, 10, 31)))"#,
    ),
    (
        "timestamp_gt",
        "ts > TIMESTAMP '2024-06-01 10:00:00'",
        r#"pc.field("ts") > pa.scalar(datetime.datetime(2024, 6, 1, 10), type=pa.timestamp("us"))"#,
    ),
    (
        "timestamp_lt_eq",
        "ts <= TIMESTAMP '2023-12-25 00:00:00'",
        r#"pc.field("ts") <= pa.scalar(datetime.datetime(2023, 12, 25), type=pa.timestamp("us"))"#,
    ),
    (
        "timestamp_utc",
        "tsz >= TIMESTAMP '2024-01-10 12:00:00'",
        r#"pc.field("tsz") >= pa.scalar(datetime.datetime(2024, 1, 10, 12, tzinfo=datetime.timezone.utc), type=pa.timestamp("us", tz="UTC"))"#,
    ),
    (
        "timestamp_utc_offset",
        "tsz < '2023-12-01 02:00:00+02:00'",
        r#"pc.field("tsz") < pa.scalar(datetime.datetime(2023, 12, 1, 0, tzinfo=datetime.timezone.utc), type=pa.timestamp("us", tz="UTC"))"#,
    ),
    ("bool", "flag", r#"pc.field("flag")"#),
    ("not_bool", "NOT flag", r#"~pc.field("flag")"#),
    (
        "bool_eq_false",
        "flag = FALSE",
        r#"pc.field("flag") == False"#,
    ),
    (
        "bool_is_not_true",
        "flag IS NOT TRUE",
        r#"pc.field("flag").is_null() | ~pc.field("flag")"#,
    ),
];

/// Cases whose answer is no row at all, by SQL NULL semantics.
const EMPTY: &[&str] = &["not_in_null", "not_of_in_null"];

fn write_payload(path: &std::path::Path, batch: &RecordBatch) {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(250))
        .build();
    let file = File::create(path).expect("create payload file");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
}

#[test]
fn filters_select_what_pyarrow_and_duckdb_select() {
    let Some(python) = support::python::python_with("pyarrow") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but no Python with pyarrow is available (set PARQIVF_PYTHON)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("payload.parquet");
    let payload = payload();
    write_payload(&path, &payload);

    // Our evaluation, on the batches read back from the file.
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(File::open(&path).expect("open")).expect("reader");
    let metadata = builder.metadata().clone();
    let file_schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder
        .build()
        .expect("reader")
        .collect::<Result<_, _>>()
        .expect("read payload");
    let payload_schema = Schema::new(
        file_schema
            .fields()
            .iter()
            .filter(|f| f.name() != "rn")
            .cloned()
            .collect::<Vec<_>>(),
    );
    let mut ours = BTreeMap::new();
    for &(name, sql, _) in CASES {
        let filter = Filter::parse(sql, &payload_schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut rows = Vec::new();
        for batch in &batches {
            let bits = filter
                .evaluate(batch)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let rn = batch
                .column_by_name("rn")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .expect("rn column");
            rows.extend(bits.set_indices().map(|i| rn.value(i)));
        }
        // The in-memory batch gives the same rows.
        let direct: Vec<i64> = filter
            .evaluate(&payload)
            .expect("evaluates")
            .set_indices()
            .map(|i| i as i64)
            .collect();
        assert_eq!(
            rows, direct,
            "{name}: file batches and in-memory batch differ"
        );
        ours.insert(name, (filter, rows));
    }

    let cases: Vec<serde_json::Value> = CASES
        .iter()
        .map(|(name, sql, pyarrow)| serde_json::json!({"name": name, "sql": sql, "pyarrow": pyarrow}))
        .collect();
    let cases = serde_json::to_string(&cases).expect("cases JSON");
    let out = support::python::run_python(
        &python,
        include_str!("../interop/filter_eval.py"),
        &[path.to_str().expect("utf-8 path"), &cases],
    );
    let answer: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("the script prints its answer"))
            .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer["rows"], ROWS);
    let rows_of = |engine: &str, name: &str| -> Vec<i64> {
        serde_json::from_value(answer[engine][name].clone())
            .unwrap_or_else(|e| panic!("{engine} {name}: {e}"))
    };

    let stats = ContainerStats::row_groups(
        &metadata,
        &file_schema,
        &payload_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>(),
    )
    .expect("row-group statistics");
    let row_group_rows = 250;

    let duckdb = !answer["duckdb"].is_null();
    if !duckdb {
        eprintln!("duckdb is not installed: checking against pyarrow only");
    }
    for &(name, sql, _) in CASES {
        let (filter, rows) = &ours[name];
        let expected = rows_of("pyarrow", name);
        assert_eq!(rows, &expected, "{name} (`{sql}`): ours vs pyarrow");
        if duckdb {
            assert_eq!(
                rows,
                &rows_of("duckdb", name),
                "{name} (`{sql}`): ours vs DuckDB"
            );
        }
        // Cases must discriminate: some rows and not all, unless SQL
        // says none.
        if EMPTY.contains(&name) {
            assert!(rows.is_empty(), "{name}: {} rows", rows.len());
        } else {
            assert!(
                !rows.is_empty() && rows.len() < ROWS,
                "{name}: {} rows",
                rows.len()
            );
        }
        // Pruning keeps every row group with a selected row.
        let may = filter.prune(&stats).expect("prunes");
        assert_eq!(may.len(), ROWS / row_group_rows);
        for &rn in rows {
            let group = rn as usize / row_group_rows;
            assert!(
                may.value(group),
                "{name}: row group {group} pruned but holds row {rn}"
            );
        }
    }
}
