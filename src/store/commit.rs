//! Create-if-absent publication: the one place where a lost
//! `PutMode::Create` race (`AlreadyExists`, or `Precondition` on stores that
//! report it that way) becomes [`StoreError::AlreadyExists`]. Manifests,
//! `index.json` and catalog documents all publish through [`put_if_absent`];
//! retrying is the caller's decision.

use super::StoreError;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult};

/// Writes `bytes` to `path` only if nothing is there yet.
///
/// # Errors
/// [`StoreError::AlreadyExists`] when the object exists (nothing is
/// overwritten); [`StoreError::ObjectStore`] for any other store failure.
pub async fn put_if_absent(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Bytes,
) -> Result<PutResult, StoreError> {
    let options = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    store
        .put_opts(path, PutPayload::from(bytes), options)
        .await
        .map_err(|source| match source {
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => StoreError::AlreadyExists {
                path: path.to_string(),
            },
            source => StoreError::ObjectStore {
                path: path.to_string(),
                source,
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn second_put_is_a_typed_conflict_and_keeps_the_first_bytes() {
        let store = InMemory::new();
        let path = Path::from("t/manifest.json");
        put_if_absent(&store, &path, Bytes::from_static(b"first"))
            .await
            .unwrap();
        let err = put_if_absent(&store, &path, Bytes::from_static(b"second"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { ref path } if path == "t/manifest.json"));
        let got = object_store::ObjectStoreExt::get(&store, &path)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&got[..], b"first");
    }
}
