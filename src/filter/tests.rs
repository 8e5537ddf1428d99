//! Unit tests of the filter language: each operator and literal kind, SQL
//! NULL semantics, negation normal form against a direct kernel
//! evaluation of the un-normalised tree, every error variant and its
//! message, never panicking on arbitrary text, and the soundness of
//! pruning (through real Parquet row-group statistics and through
//! statistics computed with Arrow's aggregate kernels).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Float64Array, Int8Array, Int32Array, Int64Array,
    LargeStringArray, ListArray, RecordBatch, StringArray, StringViewArray,
    TimestampMicrosecondArray, UInt64Array,
};
use arrow::compute::{and_kleene, not, or_kleene};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;
use sqlparser::ast::{BinaryOperator, Expr as Sql, InTarget, UnaryOperator};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::*;

/// 2024-01-01 as days since the epoch.
const JAN1: i32 = 19_723;
/// 2024-01-01 00:00:00 in microseconds since the epoch.
const JAN1_US: i64 = 1_704_067_200_000_000;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int32, true),
        Field::new("big", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("small", DataType::Int8, true),
        Field::new("Mixed", DataType::Int32, true),
        Field::new("u", DataType::UInt64, true),
        Field::new(
            "emb",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
    ]))
}

/// Eight rows with NULLs in every column.
fn batch() -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![
            Some(1),
            Some(2),
            None,
            Some(5),
            Some(-3),
            Some(2),
            None,
            Some(7),
        ])),
        Arc::new(Int64Array::from(vec![
            Some(10_000_000_000),
            Some(0),
            Some(-1),
            None,
            Some(5),
            Some(6),
            Some(7),
            Some(8),
        ])),
        Arc::new(Float64Array::from(vec![
            Some(0.5),
            Some(-1.25),
            Some(3.0),
            None,
            Some(f64::NAN),
            Some(2.5),
            Some(0.0),
            Some(1e300),
        ])),
        Arc::new(StringArray::from(vec![
            Some("apple"),
            Some("apricot"),
            Some("Banana"),
            None,
            Some("a_b"),
            Some("ap"),
            Some("cherry"),
            Some(""),
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
            Some(false),
            None,
            Some(true),
            Some(false),
        ])),
        Arc::new(Date32Array::from(vec![
            Some(JAN1 - 1),
            Some(JAN1),
            Some(JAN1 + 1),
            None,
            Some(JAN1 + 30),
            Some(JAN1),
            Some(0),
            Some(JAN1 - 400),
        ])),
        Arc::new(TimestampMicrosecondArray::from(vec![
            Some(JAN1_US),
            Some(JAN1_US + 36_000_000_000),
            Some(JAN1_US - 1),
            Some(JAN1_US + 36_000_000_001),
            None,
            Some(0),
            Some(JAN1_US + 86_400_000_000),
            Some(JAN1_US + 35_999_999_999),
        ])),
        Arc::new(Int8Array::from(vec![
            Some(1),
            Some(-128),
            Some(127),
            None,
            Some(0),
            Some(3),
            Some(4),
            Some(5),
        ])),
        Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5, 6, 7, 8])),
        Arc::new(UInt64Array::from(vec![
            Some(0),
            Some(u64::MAX),
            Some(1 << 63),
            None,
            Some(1),
            Some(2),
            Some(3),
            Some(4),
        ])),
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
            (0..8).map(|i| Some(vec![Some(i)])),
        )),
    ];
    RecordBatch::try_new(schema(), columns).expect("valid batch")
}

fn parse(text: &str) -> Filter {
    Filter::parse(text, &schema()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn rows_of(bits: &BooleanBuffer) -> Vec<usize> {
    bits.set_indices().collect()
}

/// The rows of [`batch`] that `text` selects.
fn select(text: &str) -> Vec<usize> {
    let bits = parse(text).evaluate(&batch()).expect("evaluates");
    assert_eq!(bits.len(), 8);
    rows_of(&bits)
}

fn error(text: &str) -> FilterError {
    match Filter::parse(text, &schema()) {
        Ok(f) => panic!("{text} parsed as {f:?}"),
        Err(e) => e,
    }
}

#[test]
fn comparisons_on_integers() {
    assert_eq!(select("i = 2"), [1, 5]);
    assert_eq!(select("i <> 2"), [0, 3, 4, 7]);
    assert_eq!(select("i != 2"), [0, 3, 4, 7]);
    assert_eq!(select("i < 2"), [0, 4]);
    assert_eq!(select("i <= 2"), [0, 1, 4, 5]);
    assert_eq!(select("i > 2"), [3, 7]);
    assert_eq!(select("i >= 2"), [1, 3, 5, 7]);
    assert_eq!(select("i > -3"), [0, 1, 3, 5, 7]);
    assert_eq!(select("i = - -3"), Vec::<usize>::new());
    assert_eq!(select("i = +5"), [3]);
    assert_eq!(select("big > 9999999999"), [0]);
    assert_eq!(select("u > 9223372036854775807"), [1, 2]);
    assert_eq!(select("small <= -128"), [1]);
}

#[test]
fn literal_first_comparisons_flip_the_operator() {
    for (flipped, plain) in [
        ("2 = i", "i = 2"),
        ("2 <> i", "i <> 2"),
        ("2 < i", "i > 2"),
        ("2 <= i", "i >= 2"),
        ("2 > i", "i < 2"),
        ("2 >= i", "i <= 2"),
        ("'b' > s", "s < 'b'"),
        ("DATE '2024-01-01' <= d", "d >= DATE '2024-01-01'"),
    ] {
        assert_eq!(select(flipped), select(plain), "{flipped}");
    }
    assert_eq!(select("2 < i"), [3, 7]);
}

#[test]
fn in_between_and_null_tests() {
    assert_eq!(select("i IN (1, 5, 100)"), [0, 3]);
    assert_eq!(select("i NOT IN (1, 5)"), [1, 4, 5, 7]);
    assert_eq!(select("i BETWEEN 1 AND 2"), [0, 1, 5]);
    assert_eq!(select("i NOT BETWEEN 1 AND 2"), [3, 4, 7]);
    assert_eq!(select("i BETWEEN 2 AND 1"), Vec::<usize>::new());
    assert_eq!(select("i IS NULL"), [2, 6]);
    assert_eq!(select("i IS NOT NULL"), [0, 1, 3, 4, 5, 7]);
    assert_eq!(select("NOT i IS NULL"), [0, 1, 3, 4, 5, 7]);
    assert_eq!(select("s IN ('ap', 'cherry')"), [5, 6]);
}

#[test]
fn null_semantics_follow_sql() {
    // NULL rows are excluded by every comparison and its negation.
    assert_eq!(select("i <> 5"), [0, 1, 4, 5, 7]);
    assert_eq!(select("NOT (i = 5)"), [0, 1, 4, 5, 7]);
    assert_eq!(select("NOT (NOT (i = 5))"), [3]);
    // A NULL literal makes the comparison NULL: no rows, either way.
    assert_eq!(select("i = NULL"), Vec::<usize>::new());
    assert_eq!(select("NOT (i = NULL)"), Vec::<usize>::new());
    assert_eq!(select("i IN (1, NULL)"), [0]);
    assert_eq!(select("NOT (i IN (1, NULL))"), Vec::<usize>::new());
    assert_eq!(select("i NOT IN (1, NULL)"), Vec::<usize>::new());
    assert_eq!(select("i BETWEEN NULL AND 3"), Vec::<usize>::new());
    // Kleene: NULL OR TRUE is TRUE, NULL AND FALSE is FALSE.
    assert_eq!(select("i = NULL OR i = 1"), [0]);
    assert_eq!(select("NOT (i = NULL AND i = 1)"), [1, 3, 4, 5, 7]);
    assert_eq!(select("NULL"), Vec::<usize>::new());
    assert_eq!(select("NOT NULL"), Vec::<usize>::new());
    assert_eq!(select("TRUE"), (0..8).collect::<Vec<_>>());
    assert_eq!(select("NOT TRUE"), Vec::<usize>::new());
}

#[test]
fn like_and_ilike() {
    assert_eq!(select("s LIKE 'ap%'"), [0, 1, 5]);
    assert_eq!(select("s LIKE 'ap'"), [5]);
    assert_eq!(select("s LIKE '%an%'"), [2]);
    assert_eq!(select("s LIKE 'a_b'"), [4]);
    assert_eq!(select("s LIKE 'a\\_%'"), [4]);
    assert_eq!(select("s LIKE '%'"), [0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(select("s NOT LIKE 'ap%'"), [2, 4, 6, 7]);
    assert_eq!(select("NOT s LIKE 'ap%'"), [2, 4, 6, 7]);
    assert_eq!(select("s ILIKE 'b%'"), [2]);
    assert_eq!(select("s NOT ILIKE 'B%'"), [0, 1, 4, 5, 6, 7]);
    assert_eq!(select("s LIKE NULL"), Vec::<usize>::new());
}

#[test]
fn boolean_columns() {
    assert_eq!(select("flag"), [0, 3, 6]);
    assert_eq!(select("NOT flag"), [1, 4, 7]);
    assert_eq!(select("flag = TRUE"), [0, 3, 6]);
    assert_eq!(select("flag <> TRUE"), [1, 4, 7]);
    assert_eq!(select("flag IS TRUE"), [0, 3, 6]);
    assert_eq!(select("flag IS NOT TRUE"), [1, 2, 4, 5, 7]);
    assert_eq!(select("flag IS FALSE"), [1, 4, 7]);
    assert_eq!(select("flag IS NOT FALSE"), [0, 2, 3, 5, 6]);
    assert_eq!(select("NOT (flag IS TRUE)"), [1, 2, 4, 5, 7]);
    assert_eq!(select("flag AND i > 1"), [3]);
    assert_eq!(select("flag OR i = 2"), [0, 1, 3, 5, 6]);
}

#[test]
fn dates_timestamps_and_floats() {
    assert_eq!(select("d = DATE '2024-01-01'"), [1, 5]);
    assert_eq!(select("d = '2024-01-01'"), [1, 5]);
    assert_eq!(select("d < DATE '2024-01-01'"), [0, 6, 7]);
    assert_eq!(
        select("d BETWEEN '2024-01-01' AND '2024-01-31'"),
        [1, 2, 4, 5]
    );
    assert_eq!(select("ts >= TIMESTAMP '2024-01-01 10:00:00'"), [1, 3, 6]);
    assert_eq!(select("ts < '2024-01-01 00:00:00'"), [2, 5]);
    assert_eq!(select("ts = TIMESTAMP '2024-01-01 10:00:00'"), [1]);
    assert_eq!(select("ts >= DATE '2024-01-02'"), [6]);
    assert_eq!(select("f > 1"), [2, 4, 5, 7]);
    assert_eq!(select("f <= 0.5"), [0, 1, 6]);
    assert_eq!(select("f = 2.5"), [5]);
    assert_eq!(select("f > 1e299"), [4, 7]);
}

#[test]
fn identifiers_resolve_case_insensitively_unless_quoted() {
    assert_eq!(select("MIXED = 3"), [2]);
    assert_eq!(select("mixed = 3"), [2]);
    assert_eq!(select("\"Mixed\" = 3"), [2]);
    assert!(matches!(
        error("\"mixed\" = 3"),
        FilterError::UnknownColumn { column, .. } if column == "mixed"
    ));
    let f = parse("Mixed > 1 AND (I = 1 OR i = 2) AND s LIKE 'a%'");
    assert_eq!(f.columns(), ["Mixed", "i", "s"]);
    assert_eq!(f.text(), "Mixed > 1 AND (I = 1 OR i = 2) AND s LIKE 'a%'");
    // Two names that differ in case only need quoting.
    let twins = Schema::new(vec![
        Field::new("ab", DataType::Int32, true),
        Field::new("AB", DataType::Int32, true),
    ]);
    assert!(Filter::parse("ab = 1", &twins).is_ok());
    assert!(Filter::parse("\"AB\" = 1", &twins).is_ok());
    let e = Filter::parse("Ab = 1", &twins).expect_err("ambiguous");
    assert!(e.to_string().contains("`ab`, `AB`"), "{e}");
}

#[test]
fn other_string_types() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("l", DataType::LargeUtf8, true),
        Field::new("v", DataType::Utf8View, true),
    ]));
    let values = [Some("apple"), None, Some("banana"), Some("apricot")];
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(LargeStringArray::from(values.to_vec())),
            Arc::new(StringViewArray::from(values.to_vec())),
        ],
    )
    .expect("batch");
    for column in ["l", "v"] {
        for (text, rows) in [
            (format!("{column} = 'apple'"), vec![0]),
            (format!("{column} > 'apple'"), vec![2, 3]),
            (format!("{column} LIKE 'ap%'"), vec![0, 3]),
            (format!("{column} ILIKE '%AN%'"), vec![2]),
            (format!("{column} IS NULL"), vec![1]),
        ] {
            let f = Filter::parse(&text, &schema).expect("parses");
            assert_eq!(
                rows_of(&f.evaluate(&batch).expect("evaluates")),
                rows,
                "{text}"
            );
        }
    }
    // Pruning on the statistics of each string type.
    let (mins, maxes) = (
        [Some("a"), Some("apz"), Some("aq"), None],
        [Some("ao"), Some("b"), Some("z"), None],
    );
    let stats = ContainerStats {
        len: 4,
        columns: HashMap::from([
            (
                "l".to_string(),
                ColumnStats {
                    min: Arc::new(LargeStringArray::from(mins.to_vec())),
                    max: Arc::new(LargeStringArray::from(maxes.to_vec())),
                    null_counts: None,
                    row_counts: None,
                },
            ),
            (
                "v".to_string(),
                ColumnStats {
                    min: Arc::new(StringViewArray::from(mins.to_vec())),
                    max: Arc::new(StringViewArray::from(maxes.to_vec())),
                    null_counts: None,
                    row_counts: None,
                },
            ),
        ]),
    };
    for column in ["l", "v"] {
        for (text, containers) in [
            (format!("{column} LIKE 'ap%'"), vec![1, 3]),
            (format!("{column} = 'ap'"), vec![3]),
            (format!("{column} = 'apzz'"), vec![1, 3]),
            (format!("{column} > 'b'"), vec![2, 3]),
        ] {
            let f = Filter::parse(&text, &schema).expect("parses");
            assert_eq!(
                rows_of(&f.prune(&stats).expect("prunes")),
                containers,
                "{text}"
            );
        }
    }
}

#[test]
fn timestamps_with_a_time_zone() {
    let millis = JAN1_US / 1000;
    for zone in ["+02:00", "UTC", "Europe/Paris"] {
        let data_type = DataType::Timestamp(TimeUnit::Millisecond, Some(zone.into()));
        let schema = Arc::new(Schema::new(vec![Field::new("t", data_type, true)]));
        let array = arrow::array::TimestampMillisecondArray::from(vec![millis, millis - 1])
            .with_timezone(zone);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(array)]).expect("batch");
        // A literal without an offset is a UTC instant; one with an offset
        // is that instant.
        for (text, rows) in [
            ("t >= TIMESTAMP '2024-01-01 00:00:00'", vec![0]),
            ("t < '2024-01-01 00:00:00'", vec![1]),
            ("t >= TIMESTAMP '2024-01-01 02:00:00'", vec![]),
            ("t >= '2024-01-01T02:00:00+02:00'", vec![0]),
            ("t >= '2024-01-01T00:00:00Z'", vec![0]),
            ("t >= DATE '2024-01-01'", vec![0]),
        ] {
            let f = Filter::parse(text, &schema).unwrap_or_else(|e| panic!("{zone} {text}: {e}"));
            assert_eq!(
                rows_of(&f.evaluate(&batch).expect("evaluates")),
                rows,
                "{zone} {text}"
            );
        }
    }
}

#[test]
fn evaluation_finds_columns_by_name_and_checks_types() {
    let f = parse("i > 1 AND s LIKE 'a%'");
    let full = batch();
    // Only the needed columns, in another order.
    let narrow = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("i", DataType::Int32, true),
        ])),
        vec![full.column(3).clone(), full.column(0).clone()],
    )
    .expect("batch");
    assert_eq!(rows_of(&f.evaluate(&narrow).expect("evaluates")), [1, 5]);
    let missing = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("i", DataType::Int32, true)])),
        vec![full.column(0).clone()],
    )
    .expect("batch");
    let e = f.evaluate(&missing).expect_err("no column s");
    assert!(
        matches!(&e, FilterError::Evaluate { column, .. } if column == "s"),
        "{e}"
    );
    let retyped = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("i", DataType::Int64, true),
        ])),
        vec![full.column(3).clone(), full.column(1).clone()],
    )
    .expect("batch");
    let e = f.evaluate(&retyped).expect_err("i is Int64 there");
    assert!(
        e.to_string().contains("Int64") && e.to_string().contains("Int32"),
        "{e}"
    );
    // An empty batch gives an empty bitmap.
    let empty = full.slice(0, 0);
    assert_eq!(f.evaluate(&empty).expect("evaluates").len(), 0);
}

#[test]
fn errors_name_the_column_types_and_literal() {
    let e = error("i = ");
    assert!(matches!(&e, FilterError::Syntax { filter, .. } if filter == "i = "));
    assert!(e.to_string().contains("`i = `"), "{e}");
    assert!(matches!(error("i = 1 i"), FilterError::Syntax { .. }));
    assert!(matches!(error(""), FilterError::Syntax { .. }));
    assert!(matches!(error("i = 1;"), FilterError::Syntax { .. }));

    let e = error("nope > 3");
    assert_eq!(
        e.to_string(),
        "filter names unknown column `nope`; the payload columns are i, big, f, s, flag, d, ts, \
         small, Mixed, u, emb"
    );
    let e = Filter::parse("x = 1", &Schema::empty()).expect_err("no columns");
    assert_eq!(
        e.to_string(),
        "filter names unknown column `x`; the index has no payload columns"
    );

    for (text, column, column_type, literal) in [
        ("i = 'abc'", "i", "Int32", "'abc'"),
        ("i = 1.5", "i", "Int32", "1.5"),
        ("1.5 < i", "i", "Int32", "1.5"),
        ("small = 300", "small", "Int8", "300"),
        ("u = -1", "u", "UInt64", "-1"),
        ("s = 5", "s", "Utf8", "5"),
        ("s IN ('a', 5)", "s", "Utf8", "5"),
        ("d = '2024-13-45'", "d", "Date32", "'2024-13-45'"),
        ("d = DATE 'soon'", "d", "Date32", "DATE 'soon'"),
        (
            "d = TIMESTAMP '2024-01-01 10:00:00'",
            "d",
            "Date32",
            "TIMESTAMP",
        ),
        ("flag = 1", "flag", "Boolean", "1"),
        ("flag = 'true'", "flag", "Boolean", "'true'"),
        ("i = TRUE", "i", "Int32", "true"),
        ("i LIKE 'a%'", "i", "Int32", "'a%'"),
        ("s LIKE 5", "s", "Utf8", "5"),
        ("i", "i", "Int32", "TRUE"),
        ("i IS TRUE", "i", "Int32", "TRUE"),
    ] {
        let e = error(text);
        let FilterError::TypeMismatch {
            column: c,
            column_type: t,
            literal: l,
        } = &e
        else {
            panic!("{text}: {e:?}");
        };
        assert_eq!((c.as_str(), t.as_str()), (column, column_type), "{text}");
        assert!(
            l.to_lowercase().contains(&literal.to_lowercase()),
            "{text}: {l}"
        );
        let message = e.to_string();
        assert!(
            message.starts_with(&format!(
                "column `{column}` is {column_type}: cannot compare it with"
            )),
            "{message}"
        );
    }
    let e = error("i = 'abc'");
    assert_eq!(
        e.to_string(),
        "column `i` is Int32: cannot compare it with 'abc' (a string)"
    );

    let e = error("emb IS NULL");
    assert!(
        matches!(&e, FilterError::UnsupportedType { column, column_type } if column == "emb" && column_type.starts_with("List")),
        "{e:?}"
    );
    assert!(e.to_string().contains("`emb`"), "{e}");

    for (text, mentions) in [
        ("lower(s) = 'a'", "function calls"),
        ("i = abs(-1)", "function calls"),
        ("i < big", "two columns"),
        ("i + 1 > 2", "`i + 1`"),
        ("1 = 1", "column on one side"),
        ("i IN (SELECT 1)", "subquery"),
        ("EXISTS (SELECT 1)", "subqueries"),
        ("s LIKE 'a!%' ESCAPE '!'", "ESCAPE"),
        ("s SIMILAR TO 'a'", "regular-expression"),
        ("CAST(i AS BIGINT) = 1", "`CAST(i AS BIGINT)`"),
        ("t.i = 1", "qualified name `t.i`"),
        ("i IN (big)", "where a literal belongs"),
        ("i BETWEEN 1 AND big", "where a literal belongs"),
        ("5", "the literal `5`"),
        ("i IS DISTINCT FROM 1", "DISTINCT"),
        ("d = INTERVAL '1 day'", "intervals"),
        ("s = - 'a'", "sign applies to numbers"),
        ("d = TIME '10:00'", "typed literal"),
    ] {
        let e = error(text);
        assert!(
            matches!(e, FilterError::Unsupported { .. }),
            "{text}: {e:?}"
        );
        assert!(e.to_string().contains(mentions), "{text}: {e}");
    }

    let long = format!("i IN ({})", vec!["1"; MAX_FILTER_BYTES / 2].join(","));
    let e = error(&long);
    assert!(
        matches!(e, FilterError::TooLong { bytes, limit } if bytes == long.len() && limit == MAX_FILTER_BYTES)
    );
    assert!(e.to_string().contains(&long.len().to_string()));
    // A syntax error on long text quotes an excerpt only.
    let e = error(&format!("{} AND", vec!["i = 1"; 5000].join(" AND ")));
    assert!(e.to_string().len() < 1000, "{}", e.to_string().len());
}

#[test]
fn evaluate_errors_on_a_batch_with_a_wrong_column() {
    let f = parse("s LIKE 'a%'");
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("s", DataType::Int32, true)])),
        vec![Arc::new(Int32Array::from(vec![1]))],
    )
    .expect("batch");
    let e = f.evaluate(&batch).expect_err("wrong type");
    assert!(matches!(e, FilterError::Evaluate { ref column, .. } if column == "s"));
}

#[test]
fn deep_long_and_wide_filters_do_not_overflow() {
    // Nesting beyond the recursion limit is a syntax error, not a crash.
    let deep = format!("{}i = 1{}", "(".repeat(10_000), ")".repeat(10_000));
    assert!(matches!(error(&deep), FilterError::Syntax { .. }));
    let nots = format!("{}i = 1", "NOT ".repeat(10_000));
    assert!(matches!(error(&nots), FilterError::Syntax { .. }));
    let minus = format!("i = {}1", "- ".repeat(10_000));
    assert!(matches!(error(&minus), FilterError::Syntax { .. }));
    // Nesting within it works.
    assert_eq!(
        select(&format!("{}i = 1{}", "(".repeat(20), ")".repeat(20))),
        [0]
    );
    assert_eq!(select(&format!("{}i = 1", "NOT ".repeat(20))), [0]);
    // A long AND/OR chain is as deep as it is long in the parse tree.
    let chain = vec!["i <> 100"; 4500].join(" AND ");
    assert!(chain.len() < MAX_FILTER_BYTES);
    let run = move || select(&chain);
    let rows = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(run)
        .expect("thread")
        .join()
        .expect("no stack overflow");
    assert_eq!(rows, [0, 1, 3, 4, 5, 7]);
    let chain = vec!["i = 100"; 4500].join(" OR ");
    assert_eq!(select(&chain), Vec::<usize>::new());
    // A wide IN list.
    let list = (0..10_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(select(&format!("i IN ({list})")), [0, 1, 3, 5, 7]);
}

#[test]
fn random_text_never_panics() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 3000,
        ..ProptestConfig::default()
    });
    let schema = schema();
    let batch = batch();
    let pieces = prop::collection::vec(
        prop_oneof![
            Just("i".to_string()),
            Just("s".to_string()),
            Just("flag".to_string()),
            Just("d".to_string()),
            Just("f".to_string()),
            Just("emb".to_string()),
            Just(" ".to_string()),
            Just("(".to_string()),
            Just(")".to_string()),
            Just("NOT".to_string()),
            Just("AND".to_string()),
            Just("OR".to_string()),
            Just("IN".to_string()),
            Just("BETWEEN".to_string()),
            Just("LIKE".to_string()),
            Just("IS".to_string()),
            Just("NULL".to_string()),
            Just("DATE".to_string()),
            Just("=".to_string()),
            Just("<".to_string()),
            Just(",".to_string()),
            Just("-".to_string()),
            Just("'".to_string()),
            Just("\"".to_string()),
            "[0-9.e]{1,25}",
            "'[ -~]{0,6}'",
            "[ -~]{0,3}",
            "\\PC{0,3}",
        ],
        0..24,
    );
    runner
        .run(&pieces, |pieces| {
            let text = pieces.join(" ");
            if let Ok(filter) = Filter::parse(&text, &schema) {
                let _ = filter.evaluate(&batch);
            }
            let glued = pieces.concat();
            if let Ok(filter) = Filter::parse(&glued, &schema) {
                let _ = filter.evaluate(&batch);
            }
            Ok(())
        })
        .expect("no panic");
    for text in [
        "\u{0}",
        "'",
        "\"",
        "i = '\u{10FFFF}'",
        "i = 1e999999999",
        "f = 1e999999",
    ] {
        if let Ok(filter) = Filter::parse(text, &schema) {
            let _ = filter.evaluate(&batch);
        }
    }
}

// ---- negation normal form against a direct evaluation ----

/// Evaluates the SQL tree as written: `NOT` with the `not` kernel, AND/OR
/// with the Kleene kernels, IN/BETWEEN expanded, and only single
/// un-negated comparisons handed to [`Filter`].
fn reference(expr: &Sql, batch: &RecordBatch) -> BooleanArray {
    let leaf = |text: String| parse(&text).evaluate_kleene(batch).expect("leaf evaluates");
    match expr {
        Sql::Nested(e) => reference(e, batch),
        Sql::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => not(&reference(expr, batch)).expect("not"),
        Sql::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => and_kleene(&reference(left, batch), &reference(right, batch)).expect("and"),
        Sql::BinaryOp {
            left,
            op: BinaryOperator::Or,
            right,
        } => or_kleene(&reference(left, batch), &reference(right, batch)).expect("or"),
        Sql::In {
            expr,
            target: InTarget::List(list),
            negated,
            ..
        } => {
            let mut acc = BooleanArray::from(vec![false; batch.num_rows()]);
            for item in list {
                acc = or_kleene(&acc, &leaf(format!("{expr} = {item}"))).expect("or");
            }
            if *negated {
                not(&acc).expect("not")
            } else {
                acc
            }
        }
        Sql::Between {
            expr,
            negated,
            low,
            high,
        } => {
            let inside = and_kleene(
                &leaf(format!("{expr} >= {low}")),
                &leaf(format!("{expr} <= {high}")),
            )
            .expect("and");
            if *negated {
                not(&inside).expect("not")
            } else {
                inside
            }
        }
        Sql::Like {
            negated: true,
            expr,
            pattern,
            ..
        } => not(&leaf(format!("{expr} LIKE {pattern}"))).expect("not"),
        Sql::ILike {
            negated: true,
            expr,
            pattern,
            ..
        } => not(&leaf(format!("{expr} ILIKE {pattern}"))).expect("not"),
        Sql::IsNotNull(e) => not(&leaf(format!("{e} IS NULL"))).expect("not"),
        other => leaf(other.to_string()),
    }
}

/// Atoms over the columns of [`batch`], NULL-heavy on purpose.
fn leaf_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]),
            -4..9i32,
            any::<bool>()
        )
            .prop_map(|(op, v, first)| if first {
                format!("{v} {op} i")
            } else {
                format!("i {op} {v}")
            }),
        prop::sample::select(vec![
            "i IN (1, 5, NULL)",
            "i NOT IN (2, 7)",
            "i IN (2)",
            "i BETWEEN 0 AND 4",
            "i NOT BETWEEN 1 AND 6",
            "i IS NULL",
            "i IS NOT NULL",
            "i = NULL",
            "s LIKE 'ap%'",
            "s LIKE '%a%'",
            "s NOT LIKE 'a%'",
            "s ILIKE 'B%'",
            "s NOT ILIKE '%R%'",
            "s IS NULL",
            "s >= 'apricot'",
            "s < 'b'",
            "flag",
            "flag = FALSE",
            "flag IS NOT TRUE",
            "flag IS FALSE",
            "f > 0.5",
            "f <> 2.5",
            "d <= DATE '2024-01-01'",
            "ts > TIMESTAMP '2024-01-01 10:00:00'",
            "u >= 2",
            "TRUE",
            "FALSE",
            "NULL",
        ])
        .prop_map(str::to_string),
    ]
}

fn expr_strategy() -> impl Strategy<Value = String> {
    leaf_strategy().prop_recursive(5, 32, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| format!("NOT ({e})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(a, b, c)| format!("NOT ({a} OR NOT {b} AND {c})")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn negation_normal_form_matches_direct_evaluation(text in expr_strategy()) {
        let batch = batch();
        let sql = Parser::new(&GenericDialect {})
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_expr())
            .expect("generated SQL parses");
        let expected = reference(&sql, &batch);
        let filter = parse(&text);
        let kleene = filter.evaluate_kleene(&batch).expect("evaluates");
        // The same three-valued result, not only the same TRUE rows.
        prop_assert_eq!(&kleene, &expected, "{}", text);
        prop_assert_eq!(filter.evaluate(&batch).expect("evaluates"), true_only(&expected));
    }
}

// ---- pruning ----

fn stats_for(columns: Vec<(&str, ColumnStats)>, len: usize) -> ContainerStats {
    ContainerStats {
        len,
        columns: columns
            .into_iter()
            .map(|(name, stats)| (name.to_string(), stats))
            .collect(),
    }
}

fn int_stats(
    min: Vec<Option<i32>>,
    max: Vec<Option<i32>>,
    nulls: Vec<u64>,
    rows: Vec<u64>,
) -> ColumnStats {
    ColumnStats {
        min: Arc::new(Int32Array::from(min)),
        max: Arc::new(Int32Array::from(max)),
        null_counts: Some(UInt64Array::from(nulls)),
        row_counts: Some(UInt64Array::from(rows)),
    }
}

fn pruned(text: &str, stats: &ContainerStats) -> Vec<usize> {
    rows_of(&parse(text).prune(stats).expect("prunes"))
}

#[test]
fn pruning_rules_per_atom() {
    // Containers: [1..=3], [5..=5], [unknown], all NULL, [0..=9] with NULLs.
    let stats = stats_for(
        vec![(
            "i",
            int_stats(
                vec![Some(1), Some(5), None, None, Some(0)],
                vec![Some(3), Some(5), None, None, Some(9)],
                vec![0, 0, 0, 4, 2],
                vec![3, 2, 7, 4, 10],
            ),
        )],
        5,
    );
    assert_eq!(pruned("i = 2", &stats), [0, 2, 4]);
    assert_eq!(pruned("i = 5", &stats), [1, 2, 4]);
    assert_eq!(pruned("i <> 5", &stats), [0, 2, 4]);
    assert_eq!(pruned("i < 1", &stats), [2, 4]);
    assert_eq!(pruned("i <= 1", &stats), [0, 2, 4]);
    assert_eq!(pruned("i > 5", &stats), [2, 4]);
    assert_eq!(pruned("i >= 5", &stats), [1, 2, 4]);
    assert_eq!(pruned("5 <= i", &stats), [1, 2, 4]);
    assert_eq!(pruned("i IN (4, 10)", &stats), [2, 4]);
    assert_eq!(pruned("i IN (4, 11)", &stats), [2, 4]);
    assert_eq!(pruned("i IN (-1, 11)", &stats), [2]);
    assert_eq!(pruned("i IN (2, 5)", &stats), [0, 1, 2, 4]);
    assert_eq!(pruned("i BETWEEN 4 AND 4", &stats), [2, 4]);
    assert_eq!(pruned("i NOT BETWEEN 1 AND 5", &stats), [2, 4]);
    assert_eq!(pruned("i IS NULL", &stats), [3, 4]);
    assert_eq!(pruned("i IS NOT NULL", &stats), [0, 1, 2, 4]);
    assert_eq!(pruned("i = NULL", &stats), Vec::<usize>::new());
    assert_eq!(pruned("FALSE", &stats), Vec::<usize>::new());
    assert_eq!(pruned("NOT (i = 2 OR i IS NULL)", &stats), [0, 1, 2, 4]);
    assert_eq!(pruned("i = 2 OR i IS NULL", &stats), [0, 2, 3, 4]);
    // A column without statistics may match anywhere (but an all-NULL
    // container of `i` still cannot).
    assert_eq!(pruned("big = 1", &stats), [0, 1, 2, 3, 4]);
    assert_eq!(pruned("big = 1 AND i = 100", &stats), [2]);
    // Without counts, the all-NULL rule is unknown.
    let no_counts = stats_for(
        vec![(
            "i",
            ColumnStats {
                null_counts: None,
                row_counts: None,
                ..int_stats(vec![None], vec![None], vec![0], vec![0])
            },
        )],
        1,
    );
    assert_eq!(pruned("i = 2", &no_counts), [0]);
    assert_eq!(pruned("i IS NULL", &no_counts), [0]);
    assert_eq!(pruned("i IS NOT NULL", &no_counts), [0]);
}

#[test]
fn pruning_strings_floats_and_errors() {
    let strings = |min: Vec<Option<&str>>, max: Vec<Option<&str>>| ColumnStats {
        min: Arc::new(StringArray::from(min)),
        max: Arc::new(StringArray::from(max)),
        null_counts: None,
        row_counts: None,
    };
    let stats = stats_for(
        vec![(
            "s",
            strings(
                vec![Some("a"), Some("apz"), Some("aq"), Some("ab"), Some("ap")],
                vec![Some("ao"), Some("b"), Some("z"), Some("ap"), Some("ap")],
            ),
        )],
        5,
    );
    assert_eq!(pruned("s LIKE 'ap%'", &stats), [1, 3, 4]);
    assert_eq!(
        pruned("s LIKE 'ap'", &stats),
        [1, 3, 4]
            .iter()
            .copied()
            .filter(|&c| c != 1)
            .collect::<Vec<_>>()
    );
    assert_eq!(pruned("s LIKE 'a_%'", &stats), [0, 1, 2, 3, 4]);
    assert_eq!(pruned("s NOT LIKE 'ap%'", &stats), [0, 1, 2, 3, 4]);
    assert_eq!(pruned("s ILIKE 'ap%'", &stats), [0, 1, 2, 3, 4]);
    assert_eq!(pruned("s = 'ap'", &stats), [3, 4]);
    assert_eq!(pruned("s <> 'ap'", &stats), [0, 1, 2, 3]);

    // Float maxima leave NaN out: `>`, `>=`, `<>` cannot use them.
    let floats = stats_for(
        vec![(
            "f",
            ColumnStats {
                min: Arc::new(Float64Array::from(vec![1.0])),
                max: Arc::new(Float64Array::from(vec![1.0])),
                null_counts: Some(UInt64Array::from(vec![0])),
                row_counts: Some(UInt64Array::from(vec![2])),
            },
        )],
        1,
    );
    assert_eq!(pruned("f > 5", &floats), [0]);
    assert_eq!(pruned("f <> 1", &floats), [0]);
    assert_eq!(pruned("f = 5", &floats), Vec::<usize>::new());
    assert_eq!(pruned("f < 1", &floats), Vec::<usize>::new());

    // Malformed statistics are errors, not panics.
    let short = stats_for(
        vec![(
            "i",
            int_stats(vec![Some(1)], vec![Some(1)], vec![0], vec![1]),
        )],
        2,
    );
    let e = parse("i = 1").prune(&short).expect_err("short stats");
    assert!(
        matches!(e, FilterError::Evaluate { ref column, .. } if column == "i"),
        "{e}"
    );
    let retyped = stats_for(
        vec![(
            "i",
            ColumnStats {
                min: Arc::new(Int64Array::from(vec![1])),
                ..int_stats(vec![Some(1)], vec![Some(1)], vec![0], vec![1])
            },
        )],
        1,
    );
    let e = parse("i = 1").prune(&retyped).expect_err("Int64 stats");
    assert!(e.to_string().contains("Int64"), "{e}");
    let counts = stats_for(
        vec![(
            "i",
            int_stats(vec![Some(1)], vec![Some(1)], vec![0, 0], vec![1]),
        )],
        1,
    );
    assert!(parse("i = 1").prune(&counts).is_err());
    // No containers.
    assert_eq!(
        parse("i = 1")
            .prune(&stats_for(vec![], 0))
            .expect("prunes")
            .len(),
        0
    );
}

/// Rows for the pruning property: small domains so that filters hit.
#[derive(Debug, Clone)]
struct Rows {
    i: Vec<Option<i32>>,
    f: Vec<Option<f64>>,
    s: Vec<Option<String>>,
    flag: Vec<Option<bool>>,
    d: Vec<Option<i32>>,
    ts: Vec<Option<i64>>,
    u: Vec<Option<u64>>,
}

fn rows_strategy() -> impl Strategy<Value = Rows> {
    (1..40usize).prop_flat_map(|n| {
        fn v<T: std::fmt::Debug + Clone + 'static>(
            s: BoxedStrategy<T>,
            n: usize,
        ) -> impl Strategy<Value = Vec<Option<T>>> {
            prop::collection::vec(prop::option::weighted(0.8, s), n)
        }
        (
            v((-4..9i32).boxed(), n),
            v(
                prop::sample::select(vec![
                    -1.25,
                    -0.0,
                    0.0,
                    0.5,
                    1.0,
                    2.5,
                    f64::NAN,
                    f64::INFINITY,
                ])
                .boxed(),
                n,
            ),
            v("[abpBrz]{0,5}".boxed(), n),
            v(any::<bool>().boxed(), n),
            v((JAN1 - 3..JAN1 + 3).boxed(), n),
            v(
                prop::sample::select(vec![
                    0,
                    JAN1_US - 1,
                    JAN1_US,
                    JAN1_US + 36_000_000_000,
                    JAN1_US + 36_000_000_001,
                ])
                .boxed(),
                n,
            ),
            v(
                prop::sample::select(vec![0, 1, 2, 1 << 63, u64::MAX]).boxed(),
                n,
            ),
        )
            .prop_map(|(i, f, s, flag, d, ts, u)| Rows {
                i,
                f,
                s,
                flag,
                d,
                ts,
                u,
            })
    })
}

fn rows_batch(rows: &Rows) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("u", DataType::UInt64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(rows.i.clone())),
            Arc::new(Float64Array::from(rows.f.clone())),
            Arc::new(StringArray::from(rows.s.clone())),
            Arc::new(BooleanArray::from(rows.flag.clone())),
            Arc::new(Date32Array::from(rows.d.clone())),
            Arc::new(TimestampMicrosecondArray::from(rows.ts.clone())),
            Arc::new(UInt64Array::from(rows.u.clone())),
        ],
    )
    .expect("batch")
}

/// Filters over the columns of [`rows_batch`].
fn prune_filter_strategy() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (
            prop::sample::select(vec!["=", "<>", "<", "<=", ">", ">="]),
            prop::sample::select(vec![
                ("i", "-4"),
                ("i", "0"),
                ("i", "3"),
                ("i", "8"),
                ("f", "0"),
                ("f", "-0"),
                ("f", "0.5"),
                ("f", "2.5"),
                ("f", "-2"),
                ("f", "1e308"),
                ("s", "''"),
                ("s", "'a'"),
                ("s", "'ab'"),
                ("s", "'bz'"),
                ("s", "'r'"),
                ("s", "'pzzzzz'"),
                ("flag", "TRUE"),
                ("flag", "FALSE"),
                ("d", "DATE '2024-01-01'"),
                ("d", "'2023-12-30'"),
                ("ts", "TIMESTAMP '2024-01-01 10:00:00'"),
                ("ts", "'2024-01-01 00:00:00'"),
                ("u", "1"),
                ("u", "9223372036854775808"),
                ("u", "18446744073709551615"),
            ]),
            any::<bool>(),
        )
            .prop_map(|(op, (column, value), first)| if first {
                format!("{value} {op} {column}")
            } else {
                format!("{column} {op} {value}")
            }),
        prop::sample::select(vec!["i", "f", "s", "flag", "d", "ts", "u"]).prop_flat_map(|c| {
            prop::sample::select(vec!["IS NULL", "IS NOT NULL"])
                .prop_map(move |t| format!("{c} {t}"))
        }),
        (
            prop::sample::select(vec!["", "NOT "]),
            prop::sample::select(vec!["LIKE", "ILIKE"]),
            "[abpBrz%_]{0,4}"
        )
            .prop_map(|(not, op, p)| format!("s {not}{op} '{p}'")),
        prop::sample::select(vec![
            "i IN (0, 3, NULL)",
            "i NOT IN (1, 2)",
            "i BETWEEN 2 AND 5",
            "i NOT BETWEEN -1 AND 7",
            "f BETWEEN 0 AND 1",
            "s BETWEEN 'ab' AND 'b'",
            "u IN (2, 9223372036854775808)",
            "flag",
            "NOT flag",
            "flag IS NOT TRUE",
            "d IN ('2024-01-01', '2023-12-31')",
            "TRUE",
            "NULL",
        ])
        .prop_map(str::to_string),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| format!("NOT ({e})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("({a} OR {b})")),
        ]
    })
}

/// Every container holding a row the filter selects must be kept.
fn assert_sound(
    filter: &Filter,
    selected: &BooleanBuffer,
    bounds: &[(usize, usize)],
    may: &BooleanBuffer,
) {
    assert_eq!(may.len(), bounds.len());
    for (k, &(start, end)) in bounds.iter().enumerate() {
        let hit = (start..end).any(|row| selected.value(row));
        assert!(
            !hit || may.value(k),
            "`{}` pruned container {k} (rows {start}..{end}) that holds a match",
            filter.text()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Through a real Parquet file and `ContainerStats::row_groups`.
    #[test]
    fn pruning_by_parquet_row_groups_is_sound(
        rows in rows_strategy(),
        group in 1..7usize,
        truncate in prop::option::of(1..3usize),
        filters in prop::collection::vec(prune_filter_strategy(), 8),
    ) {
        let batch = rows_batch(&rows);
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .set_statistics_truncate_length(truncate)
            .build();
        let mut file = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut file, batch.schema(), Some(props)).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file)).expect("reader");
        let metadata = builder.metadata().clone();
        let mut bounds = Vec::new();
        let mut start = 0;
        for row_group in metadata.row_groups() {
            let end = start + usize::try_from(row_group.num_rows()).expect("rows");
            bounds.push((start, end));
            start = end;
        }
        prop_assert_eq!(start, batch.num_rows());
        for text in &filters {
            let filter = Filter::parse(text, &batch.schema()).expect("parses");
            let stats = ContainerStats::row_groups(&metadata, builder.schema(), filter.columns()).expect("stats");
            prop_assert_eq!(stats.len, bounds.len());
            let may = filter.prune(&stats).expect("prunes");
            let selected = filter.evaluate(&batch).expect("evaluates");
            assert_sound(&filter, &selected, &bounds, &may);
        }
    }

    /// With statistics computed by Arrow's aggregate kernels on slices.
    #[test]
    fn pruning_by_arrow_aggregates_is_sound(
        rows in rows_strategy(),
        group in 1..7usize,
        filters in prop::collection::vec(prune_filter_strategy(), 8),
    ) {
        use arrow::compute::{max, max_string, min, min_string};
        let batch = rows_batch(&rows);
        let n = batch.num_rows();
        let bounds: Vec<(usize, usize)> = (0..n).step_by(group).map(|s| (s, (s + group).min(n))).collect();
        let (mut imin, mut imax, mut smin, mut smax, mut nulls_i, mut nulls_s, mut counts) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        for &(start, end) in &bounds {
            let i = batch.column(0).slice(start, end - start);
            let i = i.as_any().downcast_ref::<Int32Array>().expect("Int32");
            let s = batch.column(2).slice(start, end - start);
            let s = s.as_any().downcast_ref::<StringArray>().expect("Utf8");
            imin.push(min(i));
            imax.push(max(i));
            smin.push(min_string(s).map(str::to_string));
            smax.push(max_string(s).map(str::to_string));
            nulls_i.push(i.null_count() as u64);
            nulls_s.push(s.null_count() as u64);
            counts.push((end - start) as u64);
        }
        let stats = ContainerStats {
            len: bounds.len(),
            columns: HashMap::from([
                ("i".to_string(), ColumnStats {
                    min: Arc::new(Int32Array::from(imin)),
                    max: Arc::new(Int32Array::from(imax)),
                    null_counts: Some(UInt64Array::from(nulls_i)),
                    row_counts: Some(UInt64Array::from(counts.clone())),
                }),
                ("s".to_string(), ColumnStats {
                    min: Arc::new(StringArray::from(smin)),
                    max: Arc::new(StringArray::from(smax)),
                    null_counts: Some(UInt64Array::from(nulls_s)),
                    row_counts: Some(UInt64Array::from(counts)),
                }),
            ]),
        };
        for text in &filters {
            let filter = Filter::parse(text, &batch.schema()).expect("parses");
            let may = filter.prune(&stats).expect("prunes");
            let selected = filter.evaluate(&batch).expect("evaluates");
            assert_sound(&filter, &selected, &bounds, &may);
        }
    }
}

#[test]
fn row_groups_reads_parquet_statistics() {
    let batch = batch();
    // Leave out the list column, which has no flat statistics.
    let batch = batch.project(&[0, 3, 5]).expect("project");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(3))
        .build();
    let mut file = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut file, batch.schema(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file)).expect("reader");
    let columns = ["i".to_string(), "s".to_string()];
    let stats =
        ContainerStats::row_groups(builder.metadata(), builder.schema(), &columns).expect("stats");
    assert_eq!(stats.len, 3);
    let i = &stats.columns["i"];
    assert_eq!(
        i.min.as_any().downcast_ref::<Int32Array>().expect("Int32"),
        &Int32Array::from(vec![1, -3, 7])
    );
    assert_eq!(
        i.max.as_any().downcast_ref::<Int32Array>().expect("Int32"),
        &Int32Array::from(vec![2, 5, 7])
    );
    assert_eq!(i.null_counts, Some(UInt64Array::from(vec![1, 0, 1])));
    assert_eq!(i.row_counts, Some(UInt64Array::from(vec![3, 3, 2])));
    assert_eq!(rows_of(&parse("i > 5").prune(&stats).expect("prunes")), [2]);
    assert_eq!(
        rows_of(&parse("s LIKE 'c%'").prune(&stats).expect("prunes")),
        [2]
    );
    let e = ContainerStats::row_groups(builder.metadata(), builder.schema(), &["nope".to_string()])
        .expect_err("no such column");
    assert!(
        matches!(e, FilterError::UnknownColumn { ref column, .. } if column == "nope"),
        "{e}"
    );
}

#[test]
fn long_infix_chains_do_not_overflow_the_stack() {
    let cases = [
        format!("i {} > 2", "+ 1 ".repeat(15_000)),
        format!("i{} = 1", " IS NULL".repeat(7_000)),
        format!("i{} = 1", "::INT".repeat(12_000)),
        format!("s{}", " LIKE 'a'".repeat(6_000)),
        format!("i = 1 {}", "+ 1 ".repeat(15_000)),
    ];
    for text in cases {
        assert!(text.len() <= MAX_FILTER_BYTES, "{}", text.len());
        let outcome = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                Filter::parse(&text, &schema())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
        let message = outcome.expect_err("unsupported");
        assert!(message.len() < 1000, "{}", message.len());
    }
}

#[test]
fn other_date_and_timestamp_types() {
    use arrow::array::{Date64Array, TimestampNanosecondArray, TimestampSecondArray};
    let schema = Arc::new(Schema::new(vec![
        Field::new("d64", DataType::Date64, true),
        Field::new("sec", DataType::Timestamp(TimeUnit::Second, None), true),
        Field::new(
            "ns",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            true,
        ),
    ]));
    let day_ms = 86_400_000;
    let jan1_ms = i64::from(JAN1) * day_ms;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Date64Array::from(vec![
                Some(jan1_ms),
                Some(jan1_ms + day_ms),
                None,
            ])),
            Arc::new(TimestampSecondArray::from(vec![
                Some(JAN1_US / 1_000_000),
                Some(JAN1_US / 1_000_000 + 1),
                None,
            ])),
            Arc::new(
                TimestampNanosecondArray::from(vec![
                    Some(JAN1_US * 1000),
                    Some(JAN1_US * 1000 - 1),
                    None,
                ])
                .with_timezone("UTC"),
            ),
        ],
    )
    .expect("batch");
    for (text, rows) in [
        ("d64 = DATE '2024-01-01'", vec![0]),
        ("d64 > '2024-01-01'", vec![1]),
        ("sec = DATE '2024-01-01'", vec![0]),
        ("sec > TIMESTAMP '2024-01-01 00:00:00'", vec![1]),
        ("ns >= DATE '2024-01-01'", vec![0]),
        ("ns < TIMESTAMP '2024-01-01 00:00:00'", vec![1]),
        ("ns IS NULL", vec![2]),
    ] {
        let f = Filter::parse(text, &schema).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(
            rows_of(&f.evaluate(&batch).expect("evaluates")),
            rows,
            "{text}"
        );
    }
    let e = Filter::parse("sec = TIMESTAMP 'noon'", &schema).expect_err("bad timestamp");
    assert!(
        e.to_string().starts_with("column `sec` is Timestamp(") && e.to_string().contains("'noon'"),
        "{e}"
    );
}

#[test]
fn integer_columns_take_integer_literals() {
    assert!(matches!(error("i = 1.0"), FilterError::TypeMismatch { .. }));
    assert!(matches!(error("i = 1e0"), FilterError::TypeMismatch { .. }));
    assert_eq!(select("f = 1"), Vec::<usize>::new());
    assert_eq!(select("f >= 3"), [2, 4, 7]);
}
