//! Changes between snapshots, by row version ([`DuckLakeTable::changes_since`]
//! and [`DuckLakeSource::changes`] / [`DuckLakeSource::open_changes`]),
//! against DuckDB's answers (`expected.json`, `rowid, id, title` at every
//! snapshot): for `s1.docs`, `s1.compacted` and `s1.merged` and every pair
//! of snapshots `from <= to` where the table exists, DuckDB's rows at `from`
//! minus the removed rowids plus the inserted rows (read through the changes
//! source) are DuckDB's rows at `to`, and a row that did not change is
//! neither removed nor inserted (every UPDATE of the fixture changes the
//! title, so "unchanged" is visible in `rowid, id, title`). Also: compactions
//! that only moved rows change nothing, an update across a compaction is
//! found, files that cannot differ are never opened, and the typed errors.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use parqivf::builder::source::ducklake::DuckLakeSource;
use parqivf::builder::{BuildError, VectorSource};
use parqivf::catalog::CatalogError;
use parqivf::catalog::ducklake::{Catalog, DuckLakeError, DuckLakeOptions, DuckLakeTable};
use parqivf::catalog::paths;
use parqivf::format::definition::IndexSource;
use parqivf::store::counting::CountingStore;
use serde_json::Value;

use crate::on_both_catalogs;
use crate::support::ducklake::{Kind, Lake, expected};

/// `id, title` by rowid.
type Rows = BTreeMap<i64, (i64, Option<String>)>;

/// The only row of the fixture with a NULL embedding (skipped by the source).
const NULL_EMBEDDING_ID: i64 = 150;

fn payload() -> Vec<String> {
    vec!["id".into(), "title".into()]
}

fn open(catalog: &Catalog, table: &str, snapshot: u64) -> DuckLakeTable {
    let options = DuckLakeOptions {
        snapshot: Some(snapshot),
        ..Default::default()
    };
    DuckLakeTable::open(catalog, table, &options)
        .unwrap_or_else(|e| panic!("{table}@{snapshot}: {e}"))
}

/// DuckDB's rows of `table` at every snapshot from its creation to the latest.
fn duckdb_rows(expected: &Value, table: &str) -> BTreeMap<u64, Rows> {
    let latest = expected["latest_snapshot"].as_u64().unwrap();
    let at = expected["tables"][table]["at_snapshot"]
        .as_object()
        .unwrap();
    let mut keys: Vec<u64> = at.keys().map(|k| k.parse().unwrap()).collect();
    keys.sort_unstable();
    (keys[0]..=latest)
        .map(|v| {
            let key = keys.iter().rev().find(|&&k| k <= v).unwrap();
            let rows = at[&key.to_string()]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r[0].as_i64().unwrap(),
                        (r[1].as_i64().unwrap(), r[2].as_str().map(str::to_string)),
                    )
                })
                .collect();
            (v, rows)
        })
        .collect()
}

/// Every row the changes source yields, with the rows it skipped (NULL
/// embeddings); checks `part_rows` is exact for every part.
async fn inserted(source: &DuckLakeSource) -> (Rows, u64) {
    let mut rows = Rows::new();
    for part in 0..source.parts() {
        let before = source.skipped_rows();
        let batch = source.read_part(part).await.unwrap();
        let skipped = source.skipped_rows() - before;
        assert_eq!(
            batch.len() as u64 + skipped,
            source.part_rows(part).await.unwrap(),
            "part {part}: part_rows is exact"
        );
        let payload = batch.payload.unwrap();
        let ids = payload.column(0).as_primitive::<Int64Type>();
        let titles = payload.column(1).as_string::<i32>();
        for (i, &rowid) in batch.rowids.iter().enumerate() {
            let title = titles.is_valid(i).then(|| titles.value(i).to_string());
            let previous = rows.insert(rowid, (ids.value(i), title));
            assert!(previous.is_none(), "rowid {rowid} inserted twice");
        }
    }
    (rows, source.skipped_rows())
}

on_both_catalogs!(async changes_between_every_pair_of_snapshots_apply_to_duckdb_answers);
async fn changes_between_every_pair_of_snapshots_apply_to_duckdb_answers(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let expected = expected();
    let mut pairs = 0;
    for table in ["s1.docs", "s1.compacted", "s1.merged"] {
        let answers = duckdb_rows(&expected, table);
        let tables: BTreeMap<u64, Arc<DuckLakeTable>> = answers
            .keys()
            .map(|&v| (v, Arc::new(open(&lake.catalog, table, v))))
            .collect();
        for (&from, older) in &tables {
            for (&to, newer) in tables.range(from..) {
                let what = format!("{table} {from}→{to}");
                let changes = newer.changes_since(older).await.unwrap();
                assert_eq!((changes.from, changes.to), (from as i64, to as i64));
                let (source, removed) =
                    DuckLakeSource::changes(newer.clone(), older, "embedding", &payload(), true)
                        .await
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(removed, changes.removed, "{what}");
                assert_eq!(source.since(), Some(from as i64));
                assert_eq!(source.parts(), changes.new_row_files.len(), "{what}");
                for (part, file) in changes.new_row_files.iter().enumerate() {
                    assert_eq!(source.part_file(part), Some(file.file_index), "{what}");
                    assert_eq!(source.part_rows(part).await.unwrap(), file.rows, "{what}");
                    assert!(file.rows > 0, "{what}");
                }
                assert!(
                    matches!(source.definition().source,
                        IndexSource::Ducklake { snapshot_id, .. } if snapshot_id == to as i64),
                    "{what}: the definition records the `to` snapshot"
                );
                if from == to {
                    assert!(changes.is_empty(), "{what}: {changes:?}");
                }

                let (at_from, at_to) = (&answers[&from], &answers[&to]);
                assert!(
                    removed.windows(2).all(|w| w[0] < w[1]),
                    "{what}: removed is ascending and unique"
                );
                let (new_rows, skipped) = inserted(&source).await;
                assert_eq!(
                    new_rows.len() as u64 + skipped,
                    changes.inserted_rows(),
                    "{what}"
                );
                // Applying the changes to DuckDB's `from` gives DuckDB's `to`.
                let mut applied = at_from.clone();
                for rowid in &removed {
                    assert!(
                        applied.remove(rowid).is_some(),
                        "{what}: removed rowid {rowid} was not live at {from}"
                    );
                }
                for (rowid, row) in &new_rows {
                    assert!(
                        applied.insert(*rowid, row.clone()).is_none(),
                        "{what}: inserted rowid {rowid} is still live from {from}"
                    );
                }
                // The rows the source skipped: exactly those with a NULL embedding.
                let missing: Vec<(&i64, &(i64, Option<String>))> = at_to
                    .iter()
                    .filter(|(rowid, _)| !applied.contains_key(rowid))
                    .collect();
                assert_eq!(missing.len() as u64, skipped, "{what}: {missing:?}");
                assert!(
                    missing.iter().all(|(_, (id, _))| *id == NULL_EMBEDDING_ID),
                    "{what}: {missing:?}"
                );
                for (rowid, _) in &missing {
                    applied.insert(**rowid, at_to[*rowid].clone());
                }
                assert_eq!(&applied, at_to, "{what}");
                // Minimality: a row whose version did not change is neither
                // removed nor inserted.
                let unchanged: HashSet<i64> = at_from
                    .iter()
                    .filter(|(rowid, row)| at_to.get(rowid) == Some(row))
                    .map(|(rowid, _)| *rowid)
                    .collect();
                for rowid in removed.iter().chain(new_rows.keys()) {
                    assert!(
                        !unchanged.contains(rowid),
                        "{what}: rowid {rowid} did not change"
                    );
                }
                pairs += 1;
            }
        }
    }
    assert_eq!(pairs, 44 * 45 / 2 + 11 * 12 / 2 + 17 * 18 / 2);
}

on_both_catalogs!(async compaction_moves_nothing_and_an_update_across_it_is_found);
async fn compaction_moves_nothing_and_an_update_across_it_is_found(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    // rewrite_data_files at 41, merge_adjacent_files at 42 (compacted); merge at 34 (merged).
    for (table, from, to) in [
        ("s1.compacted", 40, 41),
        ("s1.compacted", 41, 42),
        ("s1.compacted", 40, 42),
        ("s1.merged", 33, 34),
    ] {
        let changes = open(catalog, table, to)
            .changes_since(&open(catalog, table, from))
            .await
            .unwrap();
        assert!(changes.is_empty(), "{table} {from}→{to}: {changes:?}");
    }

    // Id 5021 updated at 40, then the table rewritten and merged, then 5030..5034 inserted.
    let (source, removed) = DuckLakeSource::open_changes(
        catalog,
        "s1.compacted",
        "embedding",
        &payload(),
        39,
        Some(43),
        None,
        false,
    )
    .await
    .unwrap();
    let at39 = &duckdb_rows(&expected(), "s1.compacted")[&39];
    let rowid_5021 = *at39.iter().find(|(_, (id, _))| *id == 5021).unwrap().0;
    assert_eq!(removed, vec![rowid_5021]);
    let (rows, skipped) = inserted(&source).await;
    assert_eq!(skipped, 0);
    let ids: Vec<(i64, Option<&str>)> = rows.values().map(|(id, t)| (*id, t.as_deref())).collect();
    assert_eq!(
        ids,
        [
            (5021, Some("upd 5021")),
            (5030, Some("doc 5030")),
            (5031, Some("doc 5031")),
            (5032, Some("doc 5032")),
            (5033, Some("doc 5033")),
            (5034, Some("doc 5034")),
        ]
    );
    assert_eq!(
        rows.keys().next(),
        Some(&rowid_5021),
        "the new version keeps its rowid"
    );
    assert_eq!(source.dim(), 8);
    assert!(matches!(
        source.definition().source,
        IndexSource::Ducklake { snapshot_id: 43, ref table, .. } if table == "compacted"
    ));

    // Nothing changed since 20 in docs: no parts, no removals, dimension 0.
    let (source, removed) =
        DuckLakeSource::open_changes(catalog, "s1.docs", "embedding", &[], 20, None, None, false)
            .await
            .unwrap();
    assert!(removed.is_empty());
    assert_eq!((source.parts(), source.dim()), (0, 0));
    assert!(matches!(
        source.definition().source,
        IndexSource::Ducklake {
            snapshot_id: 45,
            ..
        }
    ));
}

on_both_catalogs!(async files_that_cannot_differ_are_not_opened);
async fn files_that_cannot_differ_are_not_opened(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let counted = |snapshot: u64| {
        let store = Arc::new(CountingStore::new(Arc::new(
            object_store::local::LocalFileSystem::new(),
        )));
        let options = DuckLakeOptions {
            snapshot: Some(snapshot),
            store: Some(store.clone()),
            ..Default::default()
        };
        (
            DuckLakeTable::open(&lake.catalog, "s1.docs", &options).unwrap(),
            store,
        )
    };
    // docs did not change after 20: nothing is read.
    let (at20, store20) = counted(20);
    let (at45, store45) = counted(45);
    assert!(at45.changes_since(&at20).await.unwrap().is_empty());
    assert!(store20.read_paths().is_empty() && store45.read_paths().is_empty());

    // 18→20: deletes at 19 (files 13, 17) and an update at 20 (file 14's delete, new file 23).
    let (at18, store18) = counted(18);
    let (at20, store20) = counted(20);
    let changes = at20.changes_since(&at18).await.unwrap();
    let changed_ids = [13, 14, 17, 23];
    let path = |u: &url::Url| paths::object_path(u).unwrap().to_string();
    let mut may_read = HashSet::new();
    for t in [&at18, &at20] {
        for f in t.files() {
            if changed_ids.contains(&f.data_file_id) {
                may_read.insert(path(&f.location));
                may_read.extend(f.delete.as_ref().map(|d| path(&d.location)));
            }
        }
    }
    let reads: HashSet<String> = store18
        .read_paths()
        .into_iter()
        .chain(store20.read_paths())
        .collect();
    assert!(!reads.is_empty());
    assert!(reads.is_subset(&may_read), "{reads:?} ⊄ {may_read:?}");
    let new_file = at20
        .files()
        .iter()
        .position(|f| f.data_file_id == 23)
        .unwrap();
    assert_eq!(changes.new_row_files.len(), 1);
    assert_eq!(changes.new_row_files[0].file_index, new_file);
    assert_eq!(changes.new_row_files[0].rows, 1);
    // Removed: 1005, 1305 (deleted at 19) and the old version of 1105 (updated at 20).
    let at18_rows = &duckdb_rows(&expected(), "s1.docs")[&18];
    let mut want: Vec<i64> = at18_rows
        .iter()
        .filter(|(_, (id, _))| [1005, 1105, 1305].contains(id))
        .map(|(rowid, _)| *rowid)
        .collect();
    want.sort_unstable();
    assert_eq!(changes.removed, want);
}

on_both_catalogs!(async changes_errors_name_the_table_and_snapshots);
async fn changes_errors_name_the_table_and_snapshots(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::copy(kind, dir.path());
    let catalog = &lake.catalog;
    let docs45 = open(catalog, "s1.docs", 45);
    let err = docs45
        .changes_since(&open(catalog, "s1.merged", 45))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::DifferentTable { table, other, .. }
            if table == "s1.docs" && other == "s1.merged"),
        "{err}"
    );
    let err = open(catalog, "s1.docs", 10)
        .changes_since(&open(catalog, "s1.docs", 20))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::SnapshotOrder { table, from: 20, to: 10 } if table == "s1.docs"),
        "{err}"
    );
    let err = DuckLakeSource::open_changes(
        catalog,
        "s1.docs",
        "embedding",
        &[],
        20,
        Some(10),
        None,
        false,
    )
    .await
    .err()
    .unwrap();
    assert!(
        matches!(
            err,
            BuildError::Catalog(CatalogError::DuckLake(DuckLakeError::SnapshotOrder { .. }))
        ),
        "{err}"
    );

    // Insert E (file 9, snapshot 10) without rowids: an error only where it must be read.
    lake.execute("UPDATE ducklake_data_file SET row_id_start = NULL WHERE data_file_id = 9");
    let err = open(catalog, "s1.docs", 10)
        .changes_since(&open(catalog, "s1.docs", 9))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DuckLakeError::MissingRowId { table, from: 9, to: 10, file }
            if table == "s1.docs" && file.ends_with("fa53-75ed-8cc8-5b49df4be3b6.parquet")),
        "{err}"
    );
    let err = DuckLakeSource::open_changes(
        catalog,
        "s1.docs",
        "embedding",
        &[],
        9,
        Some(12),
        None,
        false,
    )
    .await
    .err()
    .unwrap();
    assert!(
        matches!(
            err,
            BuildError::Catalog(CatalogError::DuckLake(DuckLakeError::MissingRowId { .. }))
        ),
        "{err}"
    );
    // Unchanged since 10: the file is not read, and nothing is missing.
    let changes = docs45
        .changes_since(&open(catalog, "s1.docs", 20))
        .await
        .unwrap();
    assert!(changes.is_empty());
}
