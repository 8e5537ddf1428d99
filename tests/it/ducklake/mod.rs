//! DuckLake provider against the DuckDB-written fixture: every table, at the
//! latest snapshot and at every snapshot since its creation, reads exactly
//! DuckDB's answers (`expected.json`), for the moved fixture and for a
//! data-path override; plus path, lineage and read-only rules. The other
//! DuckLake tests are its submodules: `build` (an index over
//! a DuckLake table), `changes` (what changed between two snapshots, by row
//! version), `mapping` (RFC 0018 mapping validation), `orphans`
//! (orphan files are never opened) and `store` (the lake on an object store).
//!
//! Every test runs on the fixture with its catalog in SQLite and, when
//! `PARQIVF_PG_CONNINFO` names a PostgreSQL server, in PostgreSQL
//! (`<test>::sqlite`, `<test>::postgres`; see `on_both_catalogs!`).

mod build;
mod changes;
mod mapping;
mod orphans;
mod refresh;
mod store;
use crate::on_both_catalogs;
use crate::support;

use std::path::Path;

use parqivf::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use parqivf::catalog::lineage::{LineageError, MissingRowId};
use parqivf::catalog::paths::PathError;
use support::ducklake::*;

fn open(
    catalog: &Catalog,
    table: &str,
    snapshot: Option<u64>,
    data_path: Option<String>,
) -> DuckLakeTable {
    let options = DuckLakeOptions {
        snapshot,
        data_path,
        store: None,
    };
    DuckLakeTable::open(catalog, table, &options)
        .unwrap_or_else(|e| panic!("{table}@{snapshot:?}: {e}"))
}

on_both_catalogs!(async moved_fixture_reads_duckdb_answers);
async fn moved_fixture_reads_duckdb_answers(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    lake.rewrite_outside(&dir.path().join("outside/o.parquet"));
    check_all_tables(catalog, &DuckLakeOptions::default(), true).await;
}

on_both_catalogs!(async data_path_override_reads_duckdb_answers);
async fn data_path_override_reads_duckdb_answers(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let lake_dir = lake;
    let lake = Lake::copy(kind, &lake_dir);
    let catalog = &lake.catalog;
    // Catalog and data live apart; the catalog's own data_path would point at nothing.
    let moved = dir.path().join("elsewhere/lake-files");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(lake_dir.join("data"), &moved).unwrap();
    lake.rewrite_outside(&lake_dir.join("outside/o.parquet"));
    let without = DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()).unwrap();
    // data/ is gone from the catalog folder: the catalog's own data_path finds nothing.
    let err = without.scan(&["rowid"]).await.unwrap_err();
    assert!(matches!(err, DuckLakeError::Parquet { .. }), "{err}");
    check_all_tables(
        catalog,
        &DuckLakeOptions {
            data_path: Some(moved.display().to_string()),
            ..Default::default()
        },
        true,
    )
    .await;
}

on_both_catalogs!(async relative_data_path_resolves_against_the_catalog_folder_not_the_cwd);
async fn relative_data_path_resolves_against_the_catalog_folder_not_the_cwd(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    if kind == Kind::Postgres {
        // No catalog folder: a relative data_path is refused, never read from the cwd.
        lake.execute(
            "UPDATE ducklake_metadata SET value = 'data/' WHERE key = 'data_path' AND scope IS NULL",
        );
        let err = DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()).unwrap_err();
        assert!(
            matches!(&err, DuckLakeError::RelativeDataPath { data_path, .. } if data_path == "data/"),
            "{err}"
        );
        return;
    }
    let t = open(catalog, "s1.docs", None, None);
    let folder = dir.path().canonicalize().unwrap();
    assert_eq!(t.data_root().to_file_path().unwrap(), folder.join("data"));
    for location in t.locations() {
        assert!(
            location
                .to_file_path()
                .unwrap()
                .starts_with(folder.join("data/s1/docs")),
            "{location}"
        );
    }
    // The process's working directory holds no data/ folder: reading works anyway.
    assert!(!Path::new("data/s1").exists());
    assert!(!t.scan(&["rowid", "embedding"]).await.unwrap().is_empty());
}

on_both_catalogs!(async verbatim_relative_path_is_refused_not_read_from_the_cwd);
async fn verbatim_relative_path_is_refused_not_read_from_the_cwd(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let err = DuckLakeTable::open(catalog, "s1.outside", &DuckLakeOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::Path(PathError::NotAbsolute { path }) if path == "outside/o.parquet"),
        "{err}"
    );
}

on_both_catalogs!(async relative_override_is_refused);
async fn relative_override_is_refused(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let options = DuckLakeOptions {
        data_path: Some("data/".into()),
        ..Default::default()
    };
    let err = DuckLakeTable::open(catalog, "s1.docs", &options).unwrap_err();
    assert!(
        matches!(err, DuckLakeError::Path(PathError::NotAbsolute { .. })),
        "{err}"
    );
}

on_both_catalogs!(async lineage_columns_under_one_mechanism);
async fn lineage_columns_under_one_mechanism(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let t = open(catalog, "s1.docs", None, None);
    let all = [
        "rowid",
        "id",
        "snapshot_id",
        "file_index",
        "filename",
        "file_row_number",
    ];
    let got = rows(&t.scan(&all).await.unwrap());
    let files = t.files();
    for row in &got {
        let file = &files[row["file_index"].as_u64().unwrap() as usize];
        assert_eq!(row["filename"].as_str().unwrap(), file.lineage.filename);
        assert_eq!(
            row["snapshot_id"].as_i64().unwrap(),
            file.lineage.begin_snapshot,
            "{row}"
        );
        let pos = row["file_row_number"].as_u64().unwrap();
        assert!(pos < file.record_count.unwrap());
        // Files written by INSERT: rowid = row_id_start + file_row_number.
        if file.location.path().contains("f9a4") || file.location.path().contains("ext/") {
            assert_eq!(
                row["rowid"].as_i64().unwrap(),
                file.lineage.row_id_start.unwrap() + pos as i64,
                "{row}"
            );
        }
    }
    // UPDATE rewrote id 5 into a file that embeds its rowid (5, not row_id_start + pos).
    let id5 = got.iter().find(|r| r["id"] == 5).unwrap();
    assert_eq!(id5["rowid"], 5);
    let file = &files[id5["file_index"].as_u64().unwrap() as usize];
    assert_ne!(file.lineage.row_id_start, Some(5));

    // merge_adjacent_files embedded each row's snapshot: ids 40k0..40k9 came in 30, 31, 32, 33.
    let merged = open(catalog, "s1.merged", None, None);
    for row in rows(&merged.scan(&["rowid", "id", "snapshot_id"]).await.unwrap()) {
        let id = row["id"].as_i64().unwrap();
        let want = if id >= 4100 {
            33
        } else {
            30 + (id - 4000) / 10
        };
        assert_eq!(row["snapshot_id"].as_i64().unwrap(), want, "{row}");
    }
}

on_both_catalogs!(async missing_row_id_start_is_null_or_a_clear_error);
async fn missing_row_id_start_is_null_or_a_clear_error(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    lake.execute("UPDATE ducklake_data_file SET row_id_start = NULL WHERE data_file_id = 9");
    let t = open(catalog, "s1.docs", None, None);
    let got = rows(&t.scan(&["rowid", "id"]).await.unwrap());
    let nulls: Vec<i64> = got
        .iter()
        .filter(|r| r["rowid"].is_null())
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(nulls, (190..200).collect::<Vec<_>>());
    let err = t
        .scan_with(&["rowid", "id"], MissingRowId::Error)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            DuckLakeError::Lineage(LineageError::MissingRowIdStart { .. })
        ),
        "{err}"
    );
}

on_both_catalogs!(async rowid_overflow_is_a_typed_error);
async fn rowid_overflow_is_a_typed_error(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    lake.execute(
        "UPDATE ducklake_data_file SET row_id_start = 9223372036854775800 WHERE data_file_id = 9",
    );
    let t = open(catalog, "s1.docs", None, None);
    let err = t.scan(&["rowid"]).await.unwrap_err();
    assert!(
        matches!(
            err,
            DuckLakeError::Lineage(LineageError::RowIdOverflow {
                row_id_start: 9223372036854775800,
                ..
            })
        ),
        "{err}"
    );
}

on_both_catalogs!(async snapshot_selection_and_table_lookup);
async fn snapshot_selection_and_table_lookup(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let err = DuckLakeTable::open(
        catalog,
        "s1.docs",
        &DuckLakeOptions {
            snapshot: Some(46),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            DuckLakeError::SnapshotNotFound {
                requested: 46,
                latest: 45,
                ..
            }
        ),
        "{err}"
    );
    let err = DuckLakeTable::open(catalog, "s1.nope", &DuckLakeOptions::default()).unwrap_err();
    assert!(matches!(err, DuckLakeError::TableNotFound { .. }), "{err}");
    let err = DuckLakeTable::open(catalog, "docs", &DuckLakeOptions::default()).unwrap_err();
    assert!(
        matches!(err, DuckLakeError::TableNotFound { ref table, .. } if table == "main.docs"),
        "{err}"
    );
    let t = open(catalog, "s1.docs", None, None);
    let err = t.scan(&["nope"]).await.unwrap_err();
    assert!(matches!(err, DuckLakeError::UnknownColumn { .. }), "{err}");
    // All of insert D (ids 180..189) was deleted at 9: its file ended there.
    let at8 = open(catalog, "s1.docs", Some(8), None);
    let at9 = open(catalog, "s1.docs", Some(9), None);
    assert_eq!(at8.files().len(), at9.files().len() + 1);
}

on_both_catalogs!(async the_catalog_is_never_written);
async fn the_catalog_is_never_written(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    lake.rewrite_outside(&dir.path().join("outside/o.parquet"));
    let before = lake.contents();
    for table in TABLES {
        let t = open(catalog, table, None, None);
        t.scan(&["rowid", "id"]).await.unwrap();
    }
    assert!(lake.contents() == before, "the catalog changed");
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !entries
            .iter()
            .any(|n| n.to_string_lossy().starts_with("meta.sqlite-")),
        "{entries:?}"
    );
}

on_both_catalogs!(async corrupt_catalogs_give_typed_errors);
async fn corrupt_catalogs_give_typed_errors(kind: Kind) {
    let case = |sql: &str| {
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::copy(kind, dir.path());
        lake.execute(sql);
        (dir, lake)
    };
    // Two visible delete files for one data file.
    let (_d, lake) =
        case("UPDATE ducklake_delete_file SET end_snapshot = NULL WHERE delete_file_id = 4");
    let catalog = &lake.catalog;
    let err = DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            DuckLakeError::MultipleDeleteFiles {
                data_file_id: 0,
                ..
            }
        ),
        "{err}"
    );
    // Inlined data is refused rather than silently missed.
    let (_d, lake) =
        case("INSERT INTO ducklake_inlined_data_tables VALUES (2, 'ducklake_inlined_data_2_2', 2)");
    let catalog = &lake.catalog;
    let err = DuckLakeTable::open(catalog, "s1.docs", &DuckLakeOptions::default()).unwrap_err();
    assert!(matches!(err, DuckLakeError::InlinedData { .. }), "{err}");
    // The catalog's record_count disagrees with the file.
    let (_d, lake) = case("UPDATE ducklake_data_file SET record_count = 61 WHERE data_file_id = 0");
    let catalog = &lake.catalog;
    let t = open(catalog, "s1.docs", None, None);
    let err = t.scan(&["rowid"]).await.unwrap_err();
    assert!(
        matches!(
            err,
            DuckLakeError::RowCountMismatch {
                expected: 61,
                actual: 60,
                ..
            }
        ),
        "{err}"
    );
    // A column type this reader does not read fails only when that column is asked for.
    let (_d, lake) = case(
        "UPDATE ducklake_column SET column_type = 'timestamp_ns' WHERE table_id = 2 AND column_id = 2",
    );
    let catalog = &lake.catalog;
    let t = open(catalog, "s1.docs", None, None);
    assert!(!t.scan(&["rowid", "id"]).await.unwrap().is_empty());
    let err = t.scan(&["title"]).await.unwrap_err();
    assert!(
        matches!(err, DuckLakeError::UnsupportedType { ref column_type, .. } if column_type == "timestamp_ns"),
        "{err}"
    );
    // A malformed partial_file_info.
    let (_d, lake) =
        case("UPDATE ducklake_data_file SET partial_file_info = '30-10' WHERE data_file_id = 38");
    let catalog = &lake.catalog;
    let err = DuckLakeTable::open(catalog, "s1.merged", &DuckLakeOptions::default()).unwrap_err();
    assert!(
        matches!(err, DuckLakeError::PartialFileInfo { .. }),
        "{err}"
    );
}
