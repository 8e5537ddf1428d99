//! An index over a real DuckLake table (`s1.docs` of the fixture written by
//! DuckDB): every posting carries DuckLake's rowid, so a query equal to a
//! stored embedding returns that row's DuckDB rowid first, and results join
//! back with `SELECT * FROM lake.s1.docs WHERE rowid IN (…)`.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use parqivf::builder::source::ducklake::DuckLakeSource;
use parqivf::builder::{BuildError, BuildParams, ProgressMode, VectorSource, build};
use parqivf::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use parqivf::format::definition::IndexSource;
use parqivf::index::{Index, SearchParams};

use crate::on_both_catalogs;
use crate::support::ducklake::{Kind, Lake, pg_conninfo};

fn params(nlist: u32) -> BuildParams {
    BuildParams {
        nlist,
        progress: ProgressMode::Quiet,
        ..BuildParams::default()
    }
}

on_both_catalogs!(async docs_index_returns_duckdb_rowids);
async fn docs_index_returns_duckdb_rowids(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;

    // Row 150 has a NULL embedding: a typed error unless asked to skip it.
    let strict = DuckLakeSource::open(catalog, "s1.docs", "embedding", &[], None, None, false)
        .await
        .unwrap();
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = build(Arc::new(strict), out.clone(), &Path::from("i"), &params(8))
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::VectorColumn { .. }), "{err}");

    let source = DuckLakeSource::open(catalog, "s1.docs", "embedding", &[], None, None, true)
        .await
        .unwrap();
    let def = source.definition();
    assert!(matches!(
        def.source,
        IndexSource::Ducklake { ref schema, ref table, snapshot_id: 45, .. } if schema == "s1" && table == "docs"
    ));
    let source = Arc::new(source);
    let idx = Path::from("idx");
    let summary = build(source.clone(), out.clone(), &idx, &params(8))
        .await
        .unwrap();
    assert_eq!(source.skipped_rows(), 1, "only row 150 has no embedding");

    // DuckDB's own answer: `SELECT rowid, * FROM lake.s1.docs ORDER BY rowid`.
    let expected = crate::support::ducklake::expected();
    let rows = expected["tables"]["s1.docs"]["rows"]
        .as_array()
        .unwrap()
        .clone();
    let with_vectors: Vec<(i64, Vec<f32>)> = rows
        .iter()
        .filter(|r| !r["embedding"].is_null())
        .map(|r| {
            (
                r["rowid"].as_i64().unwrap(),
                r["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(summary.rows as usize, with_vectors.len());

    let index = Index::open_current(out, &idx).await.unwrap();
    // Every row a re-rank candidate (274 rows): what is checked is the
    // exact tie-break on DuckDB's rowids, not the codes' ranking.
    let sp = SearchParams {
        k: 3,
        nprobe: Some(8),
        rerank: Some(100),
        ..SearchParams::default()
    };
    // Equal embeddings tie; the smaller rowid wins. Count duplicates first.
    let mut first_rowid: HashMap<Vec<u32>, i64> = HashMap::new();
    for (rowid, v) in &with_vectors {
        first_rowid
            .entry(v.iter().map(|x| x.to_bits()).collect())
            .or_insert(*rowid);
    }
    for (rowid, v) in &with_vectors {
        let r = index.search(v, &sp).await.unwrap();
        let best = &r.hits[0];
        let key: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        assert_eq!(
            best.rowid, first_rowid[&key],
            "query = embedding of rowid {rowid}"
        );
        assert_eq!(best.distance, 0.0);
    }
}

on_both_catalogs!(async lake_columns_carried_as_payload_filter_the_search);
/// Lake columns carried as payload: a filter on them returns exactly the
/// rows DuckDB holds with those values, and each hit's payload is DuckDB's.
async fn lake_columns_carried_as_payload_filter_the_search(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let payload = ["id".to_string(), "title".to_string()];
    let source = DuckLakeSource::open(catalog, "s1.docs", "embedding", &payload, None, None, true)
        .await
        .unwrap();
    assert_eq!(source.definition().payload_columns, payload.to_vec());
    let unknown = DuckLakeSource::open(
        catalog,
        "s1.docs",
        "embedding",
        &["colour".to_string()],
        None,
        None,
        true,
    )
    .await;
    assert!(unknown.is_err());
    let out: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let idx = Path::from("idx");
    build(Arc::new(source), out.clone(), &idx, &params(8))
        .await
        .unwrap();
    let index = Index::open_current(out, &idx).await.unwrap();

    let expected = crate::support::ducklake::expected();
    let rows = expected["tables"]["s1.docs"]["rows"].as_array().unwrap();
    let by_rowid: HashMap<i64, &serde_json::Value> = rows
        .iter()
        .map(|r| (r["rowid"].as_i64().unwrap(), r))
        .collect();
    let keep = |r: &serde_json::Value| {
        !r["embedding"].is_null()
            && r["title"].as_str().is_some_and(|t| t.starts_with("doc 1"))
            && r["id"].as_i64().is_some_and(|i| i < 150)
    };
    let matching = rows.iter().filter(|r| keep(r)).count();
    assert!(matching > 20, "{matching}");
    let query: Vec<f32> = rows[0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let sp = SearchParams {
        k: 500,
        nprobe: Some(8),
        include_payload: true,
        filter: Some("title LIKE 'doc 1%' AND id < 150".into()),
        ..SearchParams::default()
    };
    let r = index.search(&query, &sp).await.unwrap();
    assert_eq!(r.hits.len(), matching);
    for h in &r.hits {
        let row = by_rowid[&h.rowid];
        assert!(keep(row), "rowid {} fails the filter: {row}", h.rowid);
        let p = h.payload.as_ref().unwrap();
        assert_eq!(p["id"], row["id"], "rowid {}", h.rowid);
        assert_eq!(p["title"], row["title"], "rowid {}", h.rowid);
    }
}

/// A PostgreSQL conninfo's password shows nowhere: not in the error of a
/// failed connection (nor its `Debug`), not in the catalog's name, and not in
/// the `index.json` of an index built from a PostgreSQL catalog.
#[test]
fn postgres_password_never_shows() {
    let secret = "pw-never-shown-71";
    let catalog = Catalog::parse(&format!(
        "postgres:host=127.0.0.1 port=1 user=u password={secret} dbname=lake connect_timeout=5"
    ))
    .unwrap();
    assert!(!format!("{catalog} {catalog:?}").contains(secret));
    let err = DuckLakeTable::open(&catalog, "s1.docs", &DuckLakeOptions::default()).unwrap_err();
    assert!(matches!(err, DuckLakeError::Postgres { .. }), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(
        shown.contains("dbname=lake"),
        "the error names the database: {shown}"
    );
}

#[tokio::test]
async fn postgres_index_json_has_no_password() {
    let Some(conninfo) = pg_conninfo() else {
        return;
    };
    let password = postgres::Config::from_str(&conninfo)
        .unwrap()
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(Kind::Postgres, &dir.path().join("lake"));
    let source = DuckLakeSource::open(&lake.catalog, "s1.docs", "embedding", &[], None, None, true)
        .await
        .unwrap();
    let out_dir = dir.path().join("index");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&out_dir).unwrap());
    build(Arc::new(source), out, &Path::from("idx"), &params(8))
        .await
        .unwrap();
    let mut documents = Vec::new();
    let mut stack = vec![out_dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "index.json") {
                documents.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    assert!(!documents.is_empty(), "index.json written");
    for doc in documents {
        assert!(doc.contains("postgres:"), "{doc}");
        assert!(!doc.contains("password"), "{doc}");
        if let Some(p) = &password
            && !conninfo
                .replace(&format!("password={p}"), "")
                .contains(p.as_str())
        {
            assert!(!doc.contains(p.as_str()), "{doc}");
        }
    }
}
