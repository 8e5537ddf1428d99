//! The lake on an object store: data under an `s3://` data path, read only
//! through `Arc<dyn ObjectStore>`. Always on an in-memory store holding the
//! objects at the S3 keys; also on a real S3 API (moto) when the test script
//! provides one (`PARQIVF_S3_BUCKET` + `AWS_*`), required when
//! `PARQIVF_REQUIRE_INTEROP=1`.

use std::path::Path;
use std::sync::Arc;

use crate::on_both_catalogs;
use crate::support::ducklake::*;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::catalog::ducklake::DuckLakeOptions;

/// Uploads every file under `dir` to `store` at `prefix/<relative path>`.
async fn upload(store: &dyn ObjectStore, dir: &Path, prefix: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = format!("{prefix}/{name}");
        if entry.file_type().unwrap().is_dir() {
            Box::pin(upload(store, &entry.path(), &key)).await;
        } else {
            let bytes = std::fs::read(entry.path()).unwrap();
            store
                .put(&key.as_str().into(), PutPayload::from(bytes))
                .await
                .unwrap();
        }
    }
}

/// A catalog copy whose data lives at `s3://<bucket>/lake/` and whose
/// outside file is the absolute `s3://<bucket>/outside/o.parquet`.
async fn lake_on(kind: Kind, store: &dyn ObjectStore, bucket: &str, dir: &Path) -> Lake {
    let lake = Lake::copy(kind, dir);
    upload(store, &dir.join("data"), "lake").await;
    upload(store, &dir.join("outside"), "outside").await;
    std::fs::remove_dir_all(dir.join("data")).unwrap();
    std::fs::remove_dir_all(dir.join("outside")).unwrap();
    lake.set_outside(&format!("s3://{bucket}/outside/o.parquet"));
    lake
}

on_both_catalogs!(async lake_on_an_object_store_reads_duckdb_answers);
async fn lake_on_an_object_store_reads_duckdb_answers(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    let lake = lake_on(kind, store.as_ref(), "lake-bucket", dir.path()).await;
    let options = DuckLakeOptions {
        data_path: Some("s3://lake-bucket/lake/".into()),
        store: Some(store),
        ..Default::default()
    };
    check_all_tables(&lake.catalog, &options, true).await;
}

on_both_catalogs!(async lake_on_s3_reads_duckdb_answers);
async fn lake_on_s3_reads_duckdb_answers(kind: Kind) {
    let Ok(bucket) = std::env::var("PARQIVF_S3_BUCKET") else {
        assert!(
            std::env::var("PARQIVF_REQUIRE_INTEROP").is_err(),
            "PARQIVF_REQUIRE_INTEROP is set but no S3 endpoint (PARQIVF_S3_BUCKET) was provided"
        );
        eprintln!("no PARQIVF_S3_BUCKET: S3 case not run (scripts/test.sh provides moto)");
        return;
    };
    let url = url::Url::parse(&format!("s3://{bucket}/")).unwrap();
    let env = std::env::vars().filter(|(k, _)| k.starts_with("AWS_"));
    let (store, _) = object_store::parse_url_opts(&url, env).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lake = lake_on(kind, store.as_ref(), &bucket, dir.path()).await;
    // No injected store: the reader builds its own S3 client from the URL and AWS_* variables.
    let options = DuckLakeOptions {
        data_path: Some(format!("s3://{bucket}/lake/")),
        ..Default::default()
    };
    // Latest and the listed snapshots: every snapshot is covered locally, and moto is slow.
    check_all_tables(&lake.catalog, &options, false).await;
}
