//! The real backend: a published index opened with [`Index`], behind the
//! server's [`SearchBackend`] trait. The loader resolves a location to its
//! current snapshot through the commit log (never listing), so a reload picks
//! up a newly published snapshot and `IndexInfo::snapshot` names it. The
//! snapshot identity is `v<version>:<snapshot folder>` from the commit log, or
//! `unversioned:<hash>` for a bare snapshot folder (a hash, so that the
//! identity never shows a local path or bucket to HTTP clients).

use std::sync::Arc;

use async_trait::async_trait;

use super::backend::{BackendError, BackendLoader, CacheState, IndexInfo, SearchBackend};
use crate::Error;
use crate::format::warehouse::{self, WarehouseError};
use crate::index::{Index, IndexError, SearchParams, SearchResult};

/// One opened snapshot.
pub struct IndexBackend {
    index: Index,
    location: String,
    snapshot: String,
    preloaded: bool,
}

fn classify(location: &str, e: Error) -> BackendError {
    let message = e.to_string();
    match e {
        Error::Index(
            IndexError::DimensionMismatch { .. }
            | IndexError::NonFinite { .. }
            | IndexError::InvalidK
            | IndexError::InvalidNprobe { .. },
        ) => BackendError::BadRequest { message },
        Error::Probe(crate::probe::ProbeError::Store { .. })
        | Error::Index(IndexError::Store { .. })
        | Error::Store(_)
        | Error::Warehouse(WarehouseError::Store(_)) => BackendError::Storage {
            location: location.to_string(),
            message,
        },
        _ => BackendError::Corrupt {
            location: location.to_string(),
            message,
        },
    }
}

#[async_trait]
impl SearchBackend for IndexBackend {
    fn info(&self) -> IndexInfo {
        let def = self.index.definition();
        IndexInfo {
            dim: def.dim as usize,
            metric: serde_json::to_value(def.metric)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            nlist: def.nlist as usize,
            ntotal: self.index.manifest().ntotal,
            snapshot: self.snapshot.clone(),
            definition: serde_json::from_str(&def.to_json()).unwrap_or_default(),
            cache: {
                let (footer, postings) = self.index.cache_bytes();
                CacheState {
                    preloaded: self.preloaded,
                    footer_cache_bytes: footer as u64,
                    postings_cache_bytes: postings as u64,
                }
            },
        }
    }

    async fn search_batch(
        &self,
        queries: &[f32],
        params: &SearchParams,
    ) -> Result<Vec<SearchResult>, BackendError> {
        self.index
            .search_batch(queries, params)
            .await
            .map_err(|e| classify(&self.location, e))
    }
}

/// Opens locations (`store::location` syntax) at their current snapshot.
#[derive(Debug, Clone, Default)]
pub struct IndexLoader {
    /// Load every posting into memory after opening.
    pub preload: bool,
    /// Read every footer after opening, so each query is one round of requests.
    pub warm: bool,
    /// Retries, timeouts and the publish opt-in for the stores opened.
    pub store: crate::store::options::StoreOptions,
}

/// The current snapshot folder of `path` (`None` when nothing is committed:
/// `path` may be a bare snapshot folder) and the snapshot identity the server
/// reports for it.
async fn resolve(
    location: &str,
    store: &Arc<dyn object_store::ObjectStore>,
    path: &object_store::path::Path,
) -> Result<(Option<object_store::path::Path>, String), BackendError> {
    match warehouse::current_snapshot(store, path).await {
        Ok((commit, folder)) => Ok((
            Some(folder),
            format!("v{}:{}", commit.version, commit.snapshot),
        )),
        Err(WarehouseError::NoSnapshot { .. }) => {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(path.as_ref().as_bytes());
            Ok((None, format!("unversioned:{}", hex::encode(&digest[..6]))))
        }
        Err(e) => Err(classify(location, e.into())),
    }
}

impl IndexLoader {
    fn open_store(
        &self,
        location: &str,
    ) -> Result<(Arc<dyn object_store::ObjectStore>, object_store::path::Path), BackendError> {
        crate::store::location::open_with(location, &self.store).map_err(|e| {
            BackendError::Storage {
                location: location.to_string(),
                message: e.to_string(),
            }
        })
    }
}

#[async_trait]
impl BackendLoader for IndexLoader {
    async fn current_snapshot(&self, location: &str) -> Result<String, BackendError> {
        let (store, path) = self.open_store(location)?;
        Ok(resolve(location, &store, &path).await?.1)
    }

    async fn load(&self, location: &str) -> Result<Arc<dyn SearchBackend>, BackendError> {
        let (store, path) = self.open_store(location)?;
        let (folder, snapshot) = resolve(location, &store, &path).await?;
        // Open exactly the snapshot resolved above, so `snapshot` names what is
        // served even if another version is published meanwhile.
        let index = match folder {
            Some(folder) => Index::open(store, &folder).await,
            None => Index::open_current(store, &path).await,
        }
        .map_err(|e| classify(location, e))?;
        if self.preload {
            index.preload().await.map_err(|e| classify(location, e))?;
        } else if self.warm {
            index.warm().await.map_err(|e| classify(location, e))?;
        }
        Ok(Arc::new(IndexBackend {
            index,
            location: location.to_string(),
            snapshot,
            preloaded: self.preload,
        }))
    }
}
