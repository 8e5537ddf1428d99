//! The served indexes and atomic snapshot swaps.
//!
//! Each name holds an `RwLock<Arc<dyn SearchBackend>>`. A request clones the
//! `Arc` once (a read lock held for a pointer copy) and uses that snapshot for
//! validation and for every query of the request, so an answer always comes
//! from exactly one snapshot and in-flight requests finish on the snapshot
//! they started with (it is dropped when its last request ends). A reload
//! opens the location's current snapshot through the [`BackendLoader`] outside
//! any lock, then swaps the pointer under a write lock held for a pointer
//! store. A failed reload keeps serving the old snapshot.
//!
//! A reload first asks the loader for the identity of the currently published
//! snapshot (one read of the commit log) and opens nothing when it is the one
//! served, so an unchanged index costs no re-open and no re-preload. Reloads
//! of one name are serialised and coalesce: a request that waited while
//! another reload ran gets that reload's result instead of running its own.
//! Client-requested reloads are also rate-limited: one starting less than
//! `min_interval` after the previous one finished is refused with
//! [`ReloadError::RateLimited`].

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::backend::{BackendError, BackendLoader, SearchBackend};

/// The last finished reload of one name.
struct Finished {
    at: Instant,
    result: Result<ReloadOutcome, BackendError>,
}

struct Slot {
    location: String,
    current: RwLock<Arc<dyn SearchBackend>>,
    /// Serialises reloads; holds the last one's result for coalescing.
    reload: tokio::sync::Mutex<Option<Finished>>,
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
    /// This is the result of a concurrent reload this call waited for (not
    /// shown to clients; the metrics count it apart).
    #[serde(skip)]
    pub coalesced: bool,
}

/// Why a reload did not run or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The loader failed; the old snapshot stays in service.
    #[error(transparent)]
    Open(#[from] BackendError),
    /// The previous reload of `name` finished less than the minimum interval ago.
    #[error(
        "index {name:?} was reloaded {since_ms} ms ago; reloads are limited to one per {interval_ms} ms"
    )]
    RateLimited {
        name: String,
        since_ms: u64,
        interval_ms: u64,
    },
}

impl ReloadError {
    /// How long until a reload of this name is accepted again (rate limit only).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited {
                since_ms,
                interval_ms,
                ..
            } => Some(Duration::from_millis(interval_ms.saturating_sub(*since_ms))),
            Self::Open(_) => None,
        }
    }
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
                    reload: tokio::sync::Mutex::new(None),
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

    /// The location `name` is served from.
    pub fn location(&self, name: &str) -> Option<&str> {
        self.slots.get(name).map(|slot| slot.location.as_str())
    }

    /// Publishes `change` to `name`'s index, then swaps in the version it
    /// made (a reload that ignores the rate limit: the change is the
    /// reason). `None` for an unknown name.
    pub async fn change(
        &self,
        name: &str,
        change: super::backend::Change,
    ) -> Option<Result<(serde_json::Value, ReloadOutcome), BackendError>> {
        let slot = self.slots.get(name)?;
        let done = match self.loader.change(&slot.location, change).await {
            Ok(done) => done,
            Err(e) => return Some(Err(e)),
        };
        let mut last = slot.reload.lock().await;
        let result = self.reload_now(name, slot).await;
        *last = Some(Finished {
            at: Instant::now(),
            result: result.clone(),
        });
        Some(result.map(|outcome| (done, outcome)))
    }

    /// Names served, ordered.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(String::as_str)
    }

    /// Swaps in the snapshot currently published at `name`'s location if it
    /// differs from the one served (opening nothing when it does not). A call
    /// that waited for a concurrent reload of `name` returns that reload's
    /// result; a call less than `min_interval` after the previous reload
    /// finished is refused (`Duration::ZERO`: never). `None` if `name` is not
    /// served.
    ///
    /// # Errors
    /// [`ReloadError::Open`] with the loader's error (the old snapshot stays
    /// in service), [`ReloadError::RateLimited`].
    pub async fn reload(
        &self,
        name: &str,
        min_interval: Duration,
    ) -> Option<Result<ReloadOutcome, ReloadError>> {
        let slot = self.slots.get(name)?;
        let asked = Instant::now();
        let mut last = slot.reload.lock().await;
        if let Some(done) = last.as_ref() {
            if done.at >= asked {
                // It ran while this call waited: its view is as fresh as ours.
                return Some(
                    done.result
                        .clone()
                        .map(|outcome| ReloadOutcome {
                            coalesced: true,
                            ..outcome
                        })
                        .map_err(ReloadError::Open),
                );
            }
            let since = asked.duration_since(done.at);
            if since < min_interval {
                return Some(Err(ReloadError::RateLimited {
                    name: name.to_owned(),
                    since_ms: u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
                    interval_ms: u64::try_from(min_interval.as_millis()).unwrap_or(u64::MAX),
                }));
            }
        }
        let result = self.reload_now(name, slot).await;
        *last = Some(Finished {
            at: Instant::now(),
            result: result.clone(),
        });
        Some(result.map_err(ReloadError::Open))
    }

    async fn reload_now(&self, name: &str, slot: &Slot) -> Result<ReloadOutcome, BackendError> {
        let previous = slot.get().info().snapshot;
        let published = self.loader.current_snapshot(&slot.location).await?;
        if published == previous {
            return Ok(ReloadOutcome {
                snapshot: previous.clone(),
                previous,
                changed: false,
                coalesced: false,
            });
        }
        let fresh = self.loader.load(&slot.location).await?;
        let snapshot = fresh.info().snapshot;
        let changed = snapshot != previous;
        if changed {
            *slot
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
            tracing::info!(index = %name, %previous, %snapshot, "snapshot swapped");
        }
        Ok(ReloadOutcome {
            previous,
            snapshot,
            changed,
            coalesced: false,
        })
    }
}
