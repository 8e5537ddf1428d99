//! Create-if-absent publication: the one place where a lost
//! `PutMode::Create` race (`AlreadyExists`, or `Precondition` on stores that
//! report it that way) becomes [`StoreError::AlreadyExists`]. Manifests,
//! `index.json` and catalog documents all publish through [`put_if_absent`];
//! retrying is the caller's decision.
//!
//! A store without conditional put (an S3-compatible service configured with
//! `AWS_CONDITIONAL_PUT=disabled`, which object_store answers with
//! `NotImplemented`) refuses to publish: [`StoreError::NoConditionalPut`].
//! Only when the user accepts the risk
//! ([`super::options::StoreOptions::unconditional_publish`]) is the store
//! wrapped in [`CheckThenPut`], which emulates create with a HEAD then a PUT:
//! an existing object is still never overwritten by a *sequential*
//! publisher, but two publishers racing between HEAD and PUT can both
//! "win", the later PUT replacing the earlier object.

use super::error::StoreError;
use super::pass_through::pass_through_store;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};
use std::fmt;
use std::sync::Arc;

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
            object_store::Error::NotImplemented { .. } => StoreError::NoConditionalPut {
                path: path.to_string(),
                store: store.to_string(),
            },
            source => StoreError::ObjectStore {
                path: path.to_string(),
                source,
            },
        })
}

/// Emulated create-if-absent for stores without conditional put: when the
/// inner store answers `PutMode::Create` with `NotImplemented`, HEAD the path
/// and PUT only if it is absent. Racy by nature (see the module docs); used
/// only when the user opted in.
#[derive(Debug)]
pub struct CheckThenPut {
    inner: Arc<dyn ObjectStore>,
}

impl CheckThenPut {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }
}

impl fmt::Display for CheckThenPut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CheckThenPut({})", self.inner)
    }
}

pass_through_store!(CheckThenPut, [put_multipart_opts, get_opts, get_ranges], {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if opts.mode != PutMode::Create {
            return self.inner.put_opts(location, payload, opts).await;
        }
        match self
            .inner
            .put_opts(location, payload.clone(), opts.clone())
            .await
        {
            Err(object_store::Error::NotImplemented { .. }) => {}
            other => return other,
        }
        match self.inner.head(location).await {
            Ok(_) => {
                return Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: "checked with HEAD before an unconditional PUT".into(),
                });
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let opts = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        self.inner.put_opts(location, payload, opts).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    /// An in-memory store that, like S3 with conditional put disabled,
    /// answers every `PutMode::Create` with `NotImplemented`.
    /// A store without create-if-absent (its `Create` puts are
    /// `NotImplemented`), everything else in memory.
    #[derive(Debug)]
    struct NoCreate {
        inner: InMemory,
    }

    impl fmt::Display for NoCreate {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "NoCreate")
        }
    }

    pass_through_store!(NoCreate, [put_multipart_opts, get_opts], {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            if opts.mode == PutMode::Create {
                return Err(object_store::Error::NotImplemented {
                    operation: "create".into(),
                    implementer: "NoCreate".into(),
                });
            }
            self.inner.put_opts(location, payload, opts).await
        }
    });

    async fn read(store: &dyn ObjectStore, path: &Path) -> Bytes {
        store.get(path).await.unwrap().bytes().await.unwrap()
    }

    #[tokio::test]
    async fn a_store_without_conditional_put_refuses_to_publish() {
        let store = NoCreate {
            inner: InMemory::new(),
        };
        let path = Path::from("t/manifest.json");
        let err = put_if_absent(&store, &path, Bytes::from_static(b"m"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::NoConditionalPut { ref path, .. } if path == "t/manifest.json"),
            "{err}"
        );
        assert!(
            err.to_string().contains("--allow-unconditional-publish"),
            "{err}"
        );
        assert!(matches!(
            store.head(&path).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn the_opt_in_publishes_once_and_never_overwrites_sequentially() {
        let store = CheckThenPut::new(Arc::new(NoCreate {
            inner: InMemory::new(),
        }));
        let path = Path::from("t/manifest.json");
        put_if_absent(&store, &path, Bytes::from_static(b"first"))
            .await
            .unwrap();
        let err = put_if_absent(&store, &path, Bytes::from_static(b"second"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
        assert_eq!(&read(&store, &path).await[..], b"first");
        // On a store that has conditional put, the wrapper is a pass-through.
        let native = CheckThenPut::new(Arc::new(InMemory::new()));
        put_if_absent(&native, &path, Bytes::from_static(b"a"))
            .await
            .unwrap();
        assert!(matches!(
            put_if_absent(&native, &path, Bytes::from_static(b"b")).await,
            Err(StoreError::AlreadyExists { .. })
        ));
    }

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
        assert_eq!(&read(&store, &path).await[..], b"first");
    }
}
