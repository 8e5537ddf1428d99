//! Named indexes and their snapshots: which snapshot of an index is current,
//! and how a build makes its snapshot current without overwriting anything.
//!
//! An index *name* is a location (a folder on any object store). Under it:
//!
//! ```text
//! <index>/snapshots/<snapshot-id>/index.json …     immutable snapshots (written by builds)
//! <index>/versions/00000000000000000001.json       the commit log: created with create-if-absent
//! <index>/versions/00000000000000000002.json
//! <index>/versions/latest-hint.json                advisory pointer, overwritten, never trusted alone
//! ```
//!
//! A build writes every object of its snapshot first (postings, manifest,
//! centroids, `index.json`), then creates version `N + 1` with
//! create-if-absent. Two builds racing for `N + 1` get one winner; the loser
//! gets [`WarehouseError::Conflict`] and nothing is overwritten. A build that
//! dies before that step leaves an unreferenced snapshot folder and the
//! previous version stays current.
//!
//! Readers find the current version **without listing**: they read the hint
//! (missing means 0), then GET `N + 1`, `N + 2`, … until one is absent. The
//! hint only shortens that walk; a stale hint is harmless.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::store::StoreError;

/// The version-document format this reader understands.
pub const COMMIT_FORMAT_VERSION: u32 = 1;

/// One entry of an index's commit log: `versions/<20-digit version>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Commit {
    pub format_version: u32,
    /// 1, 2, 3, … with no gaps.
    pub version: u64,
    /// Snapshot folder relative to the index location, e.g. `snapshots/<id>`.
    pub snapshot: String,
    /// The version this one replaced (`None` for the first).
    pub parent: Option<u64>,
    /// Milliseconds since the Unix epoch when the commit was made.
    pub committed_at_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Hint {
    version: u64,
}

/// Errors of the commit protocol.
#[derive(Debug, Error)]
pub enum WarehouseError {
    /// Another build committed version `version` first.
    #[error(
        "index {index}: version {version} was committed by another build first; \
         nothing was overwritten (rebuild to publish on top of it)"
    )]
    Conflict { index: String, version: u64 },
    #[error("index {index}: no published snapshot (no {first} and no index.json)")]
    NoSnapshot { index: String, first: String },
    #[error("{path}: invalid commit document: {reason}")]
    InvalidCommit { path: String, reason: String },
    #[error("{path}: commit format version {found} is not supported (supported: {supported})")]
    Incompatible {
        path: String,
        found: u32,
        supported: u32,
    },
    #[error("{path}: snapshot path {snapshot:?} must be a relative path below the index")]
    BadSnapshotPath { path: String, snapshot: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn versions_dir(index: &Path) -> Path {
    index.clone().join("versions")
}

/// The path of version `v`'s commit document.
pub fn version_path(index: &Path, v: u64) -> Path {
    versions_dir(index).join(format!("{v:020}.json"))
}

fn hint_path(index: &Path) -> Path {
    versions_dir(index).join("latest-hint.json")
}

async fn get_opt(store: &dyn ObjectStore, path: &Path) -> Result<Option<Bytes>, StoreError> {
    match store.get(path).await {
        Ok(r) => r
            .bytes()
            .await
            .map(Some)
            .map_err(|source| StoreError::ObjectStore {
                path: path.to_string(),
                source,
            }),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err(StoreError::ObjectStore {
            path: path.to_string(),
            source,
        }),
    }
}

fn parse_commit(path: &Path, bytes: &[u8], expect: u64) -> Result<Commit, WarehouseError> {
    let invalid = |reason: String| WarehouseError::InvalidCommit {
        path: path.to_string(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if let Some(found) = value.get("format-version").and_then(|v| v.as_u64())
        && found != u64::from(COMMIT_FORMAT_VERSION)
    {
        return Err(WarehouseError::Incompatible {
            path: path.to_string(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: COMMIT_FORMAT_VERSION,
        });
    }
    let c: Commit = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if c.version != expect {
        return Err(invalid(format!(
            "holds version {} but is named {expect}",
            c.version
        )));
    }
    if c.snapshot.is_empty()
        || c.snapshot.starts_with('/')
        || c.snapshot
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(WarehouseError::BadSnapshotPath {
            path: path.to_string(),
            snapshot: c.snapshot,
        });
    }
    Ok(c)
}

/// The current commit of the index at `index`, or `None` when nothing was
/// ever committed there. Never lists: one GET for the hint, then one GET per
/// version past it.
///
/// # Errors
/// Storage failures, and commit documents that do not parse.
pub async fn current(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<Option<Commit>, WarehouseError> {
    let hint = match get_opt(store.as_ref(), &hint_path(index)).await? {
        Some(b) => serde_json::from_slice::<Hint>(&b)
            .map(|h| h.version)
            .unwrap_or(0),
        None => 0,
    };
    let mut found: Option<Commit> = None;
    // A hint may point past a version that does not exist (never written as
    // such, but be robust): then walk from the start.
    let mut v = hint;
    if v > 0 {
        let p = version_path(index, v);
        match get_opt(store.as_ref(), &p).await? {
            Some(b) => found = Some(parse_commit(&p, &b, v)?),
            None => v = 0,
        }
    }
    loop {
        let next = v + 1;
        let p = version_path(index, next);
        match get_opt(store.as_ref(), &p).await? {
            Some(b) => {
                found = Some(parse_commit(&p, &b, next)?);
                v = next;
            }
            None => return Ok(found),
        }
    }
}

/// The snapshot folder of the current version (`<index>/<snapshot>`).
///
/// # Errors
/// [`WarehouseError::NoSnapshot`] when nothing was committed.
pub async fn current_snapshot(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
) -> Result<(Commit, Path), WarehouseError> {
    match current(store, index).await? {
        Some(c) => {
            let mut p = index.clone();
            for part in c.snapshot.split('/') {
                p = p.join(part);
            }
            Ok((c, p))
        }
        None => Err(WarehouseError::NoSnapshot {
            index: index.to_string(),
            first: version_path(index, 1).to_string(),
        }),
    }
}

/// Make `snapshot` (relative to `index`) current as version `parent + 1`.
/// `parent` is the version the build started from (`None` for a new index).
///
/// # Errors
/// [`WarehouseError::Conflict`] when another build committed that version
/// first; nothing is overwritten.
pub async fn commit(
    store: &Arc<dyn ObjectStore>,
    index: &Path,
    snapshot: &str,
    parent: Option<u64>,
    committed_at_ms: u64,
) -> Result<Commit, WarehouseError> {
    let version = parent.unwrap_or(0) + 1;
    let c = Commit {
        format_version: COMMIT_FORMAT_VERSION,
        version,
        snapshot: snapshot.to_string(),
        parent,
        committed_at_ms,
    };
    let path = version_path(index, version);
    let mut bytes = serde_json::to_vec_pretty(&c).map_err(|e| WarehouseError::InvalidCommit {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    match crate::store::commit::put_if_absent(store.as_ref(), &path, Bytes::from(bytes)).await {
        Ok(_) => {}
        Err(StoreError::AlreadyExists { .. }) => {
            return Err(WarehouseError::Conflict {
                index: index.to_string(),
                version,
            });
        }
        Err(e) => return Err(e.into()),
    }
    // Advisory: a failure here only makes the next reader walk a little further.
    let hint = serde_json::to_vec(&Hint { version }).unwrap_or_default();
    let _ = store.put(&hint_path(index), PutPayload::from(hint)).await;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn mem() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[tokio::test]
    async fn empty_index_has_no_current_version() {
        let s = mem();
        let idx = Path::from("idx");
        assert!(current(&s, &idx).await.unwrap().is_none());
        assert!(matches!(
            current_snapshot(&s, &idx).await,
            Err(WarehouseError::NoSnapshot { .. })
        ));
    }

    #[tokio::test]
    async fn commits_chain_and_current_follows_without_hint() {
        let s = mem();
        let idx = Path::from("idx");
        let c1 = commit(&s, &idx, "snapshots/a", None, 1).await.unwrap();
        assert_eq!(c1.version, 1);
        let c2 = commit(&s, &idx, "snapshots/b", Some(1), 2).await.unwrap();
        assert_eq!(c2.parent, Some(1));
        // Remove the hint: readers still find version 2 by walking.
        s.delete(&hint_path(&idx)).await.unwrap();
        let (c, p) = current_snapshot(&s, &idx).await.unwrap();
        assert_eq!(c.version, 2);
        assert_eq!(p.as_ref(), "idx/snapshots/b");
    }

    #[tokio::test]
    async fn stale_hint_is_harmless() {
        let s = mem();
        let idx = Path::from("idx");
        commit(&s, &idx, "snapshots/a", None, 1).await.unwrap();
        commit(&s, &idx, "snapshots/b", Some(1), 2).await.unwrap();
        s.put(
            &hint_path(&idx),
            PutPayload::from(br#"{"version":1}"#.to_vec()),
        )
        .await
        .unwrap();
        assert_eq!(current(&s, &idx).await.unwrap().unwrap().version, 2);
        // A hint past the end walks from the start.
        s.put(
            &hint_path(&idx),
            PutPayload::from(br#"{"version":9}"#.to_vec()),
        )
        .await
        .unwrap();
        assert_eq!(current(&s, &idx).await.unwrap().unwrap().version, 2);
    }

    #[tokio::test]
    async fn racing_commits_have_one_winner_and_overwrite_nothing() {
        let s = mem();
        let idx = Path::from("idx");
        let mut tasks = Vec::new();
        for i in 0..16 {
            let s = s.clone();
            let idx = idx.clone();
            tasks.push(tokio::spawn(async move {
                commit(&s, &idx, &format!("snapshots/s{i}"), None, i).await
            }));
        }
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(c) => winners.push(c),
                Err(WarehouseError::Conflict { version: 1, .. }) => conflicts += 1,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1);
        assert_eq!(conflicts, 15);
        let cur = current(&s, &idx).await.unwrap().unwrap();
        assert_eq!(cur, winners[0]);
    }

    #[tokio::test]
    async fn rejects_escaping_snapshot_paths_and_unknown_versions() {
        let s = mem();
        let idx = Path::from("idx");
        let p = version_path(&idx, 1);
        s.put(
            &p,
            PutPayload::from(
                br#"{"format-version":1,"version":1,"snapshot":"../other","parent":null,"committed-at-ms":0}"#
                    .to_vec(),
            ),
        )
        .await
        .unwrap();
        assert!(matches!(
            current(&s, &idx).await,
            Err(WarehouseError::BadSnapshotPath { .. })
        ));
        s.put(
            &p,
            PutPayload::from(
                br#"{"format-version":7,"version":1,"snapshot":"snapshots/a","parent":null,"committed-at-ms":0}"#
                    .to_vec(),
            ),
        )
        .await
        .unwrap();
        assert!(matches!(
            current(&s, &idx).await,
            Err(WarehouseError::Incompatible {
                found: 7,
                supported: 1,
                ..
            })
        ));
    }
}
