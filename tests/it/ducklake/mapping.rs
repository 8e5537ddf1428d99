//! RFC 0018 mapping validation on catalogs corrupted with SQL (one test per
//! rule, each caught as its typed error naming the mapping), the two rules
//! deliberately not enforced, and column resolution details (element/item,
//! hive partitions, missing columns, INT32 widening) on the fixture.

use std::path::Path;

use crate::on_both_catalogs;
use crate::support::ducklake::*;
use parqivf::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use parqivf::catalog::mapping::MappingError;
use serde_json::json;

fn corrupted(kind: Kind, dir: &Path, sql: &str) -> Lake {
    let lake = Lake::copy(kind, dir);
    lake.execute(sql);
    lake
}

fn open_err(lake: &Lake) -> MappingError {
    let catalog = &lake.catalog;
    match DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()) {
        Err(DuckLakeError::Mapping(e)) => e,
        other => panic!("expected a mapping error, got {other:?}"),
    }
}

on_both_catalogs!(mapping_without_name_rows);
fn mapping_without_name_rows(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "DELETE FROM ducklake_name_mapping WHERE mapping_id = 16",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::EmptyMapping {
            table_id: 2,
            mapping_id: 16
        }
    ));
}

on_both_catalogs!(orphan_name_rows);
fn orphan_name_rows(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "INSERT INTO ducklake_name_mapping VALUES (77, 0, 'id', 1, NULL, false), (77, 1, 'title', 2, NULL, false)",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::OrphanNameRows {
            mapping_id: 77,
            rows: 2
        }
    ));
}

on_both_catalogs!(duplicate_column_id);
fn duplicate_column_id(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "INSERT INTO ducklake_name_mapping VALUES (12, 1, 'again', 2, NULL, false)",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::DuplicateColumnId {
            table_id: 2,
            mapping_id: 12,
            column_id: 1
        }
    ));
}

on_both_catalogs!(parent_column_not_before_child);
fn parent_column_not_before_child(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    // Mapping 31 (nested): `tags` (4) sits under `meta` (2); point it at a later node.
    let lake = corrupted(
        kind,
        dir.path(),
        "UPDATE ducklake_name_mapping SET parent_column = 5 WHERE mapping_id = 31 AND column_id = 4",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::ParentNotBeforeChild {
            table_id: 5,
            mapping_id: 31,
            column_id: 4,
            parent_column: 5
        }
    ));
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "UPDATE ducklake_name_mapping SET parent_column = 3 WHERE mapping_id = 12 AND column_id = 3",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::ParentNotBeforeChild {
            mapping_id: 12,
            column_id: 3,
            ..
        }
    ));
}

on_both_catalogs!(duplicate_table_and_mapping_id);
fn duplicate_table_and_mapping_id(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "INSERT INTO ducklake_column_mapping VALUES (12, 2, 'map_by_name')",
    );
    assert!(matches!(
        open_err(&lake),
        MappingError::DuplicateMapping {
            table_id: 2,
            mapping_id: 12
        }
    ));
}

async fn docs_rows(catalog: &Catalog) -> Vec<serde_json::Value> {
    let t = DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()).unwrap();
    rows(
        &t.scan(&["rowid", "id", "title", "embedding"])
            .await
            .unwrap(),
    )
}

on_both_catalogs!(async contiguity_and_map_type_are_not_enforced);
async fn contiguity_and_map_type_are_not_enforced(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    // Ordinals 0,1,2,3 → 0,10,20,30 (parent < child kept) and a future map type.
    let lake = corrupted(
        kind,
        dir.path(),
        "UPDATE ducklake_name_mapping SET column_id = column_id * 10, parent_column = parent_column * 10 \
           WHERE mapping_id = 12; \
         UPDATE ducklake_column_mapping SET type = 'map_by_future' WHERE mapping_id = 12;",
    );
    let want = expected()["tables"]["s1.docs"]["rows"].clone();
    assert_eq!(json!(docs_rows(&lake.catalog).await), want);
}

on_both_catalogs!(async resolution_rules_on_registered_files);
async fn resolution_rules_on_registered_files(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let got = docs_rows(&lake.catalog).await;
    let by_id = |id: i64| {
        got.iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("id {id}"))
            .clone()
    };
    // missing_title.parquet: no node for title → NULL; embedding still read.
    assert!(by_id(1300)["title"].is_null());
    assert!(by_id(1300)["embedding"].is_array());
    // int32_id.parquet: INT32 ids widen into BIGINT.
    assert_eq!(by_id(1400)["title"], "i32 1400");
    // pyarrow_item.parquet: the list child is `item`, the mapping node `list`.
    assert_eq!(by_id(1500)["embedding"].as_array().unwrap().len(), 8);
    // reordered.parquet and extra_col.parquet: matched by name, extra column ignored.
    assert_eq!(by_id(1100)["title"], "rev 1100");
    assert_eq!(by_id(1200)["title"], "xtra 1200");

    // parted: `part` is a partition node, its value comes from the hive path.
    let t = DuckLakeTable::open(&lake.catalog, "s1.parted", &DuckLakeOptions::default()).unwrap();
    let parted = rows(&t.scan(&["rowid", "id", "part"]).await.unwrap());
    for r in &parted {
        let id = r["id"].as_i64().unwrap();
        let want = if (2000..2005).contains(&id) {
            1
        } else if (2100..2105).contains(&id) {
            2
        } else {
            id % 2
        };
        assert_eq!(r["part"], want, "{r}");
    }
}

on_both_catalogs!(async partition_node_without_hive_value_is_typed);
async fn partition_node_without_hive_value_is_typed(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = corrupted(
        kind,
        dir.path(),
        "UPDATE ducklake_name_mapping SET source_name = 'region' WHERE mapping_id = 25 AND column_id = 4",
    );
    let t = DuckLakeTable::open(&lake.catalog, "s1.parted", &DuckLakeOptions::default()).unwrap();
    let err = t.scan(&["rowid", "part"]).await.unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::Mapping(MappingError::PartitionValueMissing { column, .. }) if column == "region"),
        "{err}"
    );
}

on_both_catalogs!(async incompatible_physical_type_is_typed);
async fn incompatible_physical_type_is_typed(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    // Map the table's BIGINT id onto the file's VARCHAR title.
    let lake = corrupted(
        kind,
        dir.path(),
        "UPDATE ducklake_name_mapping SET source_name = 'title' WHERE mapping_id = 12 AND column_id = 0",
    );
    let t = DuckLakeTable::open(&lake.catalog, "s1.docs", &DuckLakeOptions::default()).unwrap();
    let err = t.scan(&["rowid", "id"]).await.unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::Mapping(MappingError::TypeMismatch { column, .. }) if column == "id"),
        "{err}"
    );
}
