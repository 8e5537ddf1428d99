//! The served indexes and atomic snapshot swaps.
//!
//! Each name holds an `RwLock<Arc<dyn SearchBackend>>`. A request clones the
//! `Arc` once (a read lock held for a pointer copy) and uses that snapshot for
//! validation and for every query of the request, so an answer always comes
//! from exactly one snapshot and in-flight requests finish on the snapshot
//! they started with (it is dropped when its last request ends). A reload
//! opens the location's current snapshot through the [`BackendLoader`] outside
//! any lock, then swaps the pointer under a write lock held for a pointer
//! store. Reloads of one name are serialised; a failed reload keeps serving the
//! old snapshot.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use super::backend::{BackendError, BackendLoader, SearchBackend};

struct Slot {
    location: String,
    current: RwLock<Arc<dyn SearchBackend>>,
    reload: tokio::sync::Mutex<()>,
}

impl Slot {
    fn get(&self) -> Arc<dyn SearchBackend> {
        // The lock only guards a pointer store, which cannot leave it half-written.
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadOutcome {
    /// Snapshot served before the reload.
    pub previous: String,
    /// Snapshot served after it.
    pub snapshot: String,
    /// Whether a different snapshot was swapped in.
    pub changed: bool,
}

/// Why opening an index failed at start-up.
#[derive(Debug, thiserror::Error)]
#[error("cannot open index {name:?} at {location}: {source}")]
pub struct OpenError {
    pub name: String,
    pub location: String,
    #[source]
    pub source: BackendError,
}

/// The named indexes this server answers for.
pub struct Registry {
    loader: Arc<dyn BackendLoader>,
    slots: BTreeMap<String, Slot>,
}

impl Registry {
    /// Opens every `(name, location)` through `loader`.
    ///
    /// # Errors
    /// [`OpenError`] naming the first index that failed to open.
    pub async fn open(
        indexes: &[(String, String)],
        loader: Arc<dyn BackendLoader>,
    ) -> Result<Self, OpenError> {
        let mut slots = BTreeMap::new();
        for (name, location) in indexes {
            let backend = loader.load(location).await.map_err(|source| OpenError {
                name: name.clone(),
                location: location.clone(),
                source,
            })?;
            tracing::info!(index = %name, %location, snapshot = %backend.info().snapshot, "index opened");
            slots.insert(
                name.clone(),
                Slot {
                    location: location.clone(),
                    current: RwLock::new(backend),
                    reload: tokio::sync::Mutex::new(()),
                },
            );
        }
        Ok(Self { loader, slots })
    }

    /// The snapshot currently served under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn SearchBackend>> {
        self.slots.get(name).map(Slot::get)
    }

    /// Names and current snapshots, ordered by name.
    pub fn all(&self) -> Vec<(String, Arc<dyn SearchBackend>)> {
        self.slots
            .iter()
            .map(|(name, slot)| (name.clone(), slot.get()))
            .collect()
    }

    /// Names served, ordered.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// Opens the current snapshot of `name`'s location and swaps it in if it
    /// differs from the one served. `None` if `name` is not served.
    ///
    /// # Errors
    /// The loader's [`BackendError`]; the old snapshot stays in service.
    pub async fn reload(&self, name: &str) -> Option<Result<ReloadOutcome, BackendError>> {
        let slot = self.slots.get(name)?;
        let _serialised = slot.reload.lock().await;
        let previous = slot.get().info().snapshot;
        let fresh = match self.loader.load(&slot.location).await {
            Ok(fresh) => fresh,
            Err(err) => return Some(Err(err)),
        };
        let snapshot = fresh.info().snapshot;
        let changed = snapshot != previous;
        if changed {
            *slot
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
            tracing::info!(index = %name, %previous, %snapshot, "snapshot swapped");
        }
        Some(Ok(ReloadOutcome {
            previous,
            snapshot,
            changed,
        }))
    }
}
