//! Deleting a folder of objects: every object below a prefix and, on a local
//! file system, the directory itself with the `object_store` staging files
//! (`part-N.parquet#1`) that listing does not show. The one place an
//! unpublished snapshot folder is removed from storage; which folders may be
//! removed is the commit protocol's rule
//! ([`crate::format::snapshot_writer`]).

use std::path::PathBuf;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::error::StoreError;

/// Delete every object below `prefix`.
///
/// # Errors
/// Listing or deleting fails (naming `prefix`).
pub async fn delete_prefix(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Result<(), StoreError> {
    let locations = store.list(Some(prefix)).map_ok(|m| m.location).boxed();
    store
        .delete_stream(locations)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|source| StoreError::ObjectStore {
            path: prefix.to_string(),
            source,
        })?;
    Ok(())
}

/// Delete the folder `folder`: `first` (a path inside it, deleted before
/// anything else, so that a reader of the folder fails on it rather than on
/// a half-deleted rest), then every object below `folder`, then, on a local
/// file system, the directory with its staging files.
///
/// # Errors
/// Listing or deleting fails.
pub async fn delete_folder(
    store: &Arc<dyn ObjectStore>,
    folder: &Path,
    first: Option<&Path>,
) -> Result<(), StoreError> {
    if let Some(first) = first {
        match store.delete(first).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(StoreError::ObjectStore {
                    path: first.to_string(),
                    source,
                });
            }
        }
    }
    delete_prefix(store, folder).await?;
    if let Some(dir) = local_folder(&store.to_string(), folder) {
        let shown = dir.display().to_string();
        let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        removed.map_err(|e| StoreError::ObjectStore {
            path: shown,
            source: object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            },
        })?;
    }
    Ok(())
}

/// The local folder of `location` when `store_display` is a
/// `LocalFileSystem(file:///root/)` store, possibly inside wrappers (their
/// `Display` nests the inner store's); `None` for other stores.
fn local_folder(store_display: &str, location: &Path) -> Option<PathBuf> {
    super::local_read::file_below(super::local_read::local_root(store_display)?, location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_folder_goes_with_its_staging_files() {
        let dir = tempfile::tempdir().unwrap();
        let (store, root) = crate::store::location::open(dir.path().to_str().unwrap()).unwrap();
        let folder = root.clone().join("snapshots").join("s1");
        store
            .put(
                &folder.clone().join("index.json"),
                object_store::PutPayload::from_static(b"{}"),
            )
            .await
            .unwrap();
        let staging = dir.path().join("snapshots/s1/postings/part-0.parquet#1");
        std::fs::create_dir_all(staging.parent().unwrap()).unwrap();
        std::fs::write(&staging, b"partial").unwrap();
        delete_folder(&store, &folder, Some(&folder.clone().join("index.json")))
            .await
            .unwrap();
        assert!(!dir.path().join("snapshots/s1").exists());
        assert!(dir.path().join("snapshots").exists());
    }
}
