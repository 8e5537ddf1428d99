//! Object-store helpers: a store that fails its n-th write (the library's
//! fault-injecting store), reading a whole snapshot back, and writing a JSON
//! document in place.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};
use parqivf::store::fault::{Fault, FaultStore, Op};

/// A store whose `n`-th write (0-based, puts and multipart uploads together)
/// fails before it reaches `inner`, as a crash at that point of a publisher
/// would.
pub fn fail_nth_write(inner: &Arc<dyn ObjectStore>, n: usize) -> FaultStore {
    FaultStore::new(inner.clone()).on(Op::Put, "", n, Fault::FailBefore)
}

/// Every object below `snapshot`, as (relative path, bytes), sorted.
pub async fn snapshot_files(
    store: &Arc<dyn ObjectStore>,
    snapshot: &Path,
) -> Vec<(String, bytes::Bytes)> {
    use futures::TryStreamExt;
    let metas: Vec<ObjectMeta> = store.list(Some(snapshot)).try_collect().await.unwrap();
    let mut out = Vec::new();
    for m in metas {
        let rel = m.location.as_ref()[snapshot.as_ref().len()..].to_string();
        let b = store.get(&m.location).await.unwrap().bytes().await.unwrap();
        out.push((rel, b));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Writes `v` as pretty JSON at `path` (to replace a document in place).
pub async fn put_json<T: serde::Serialize>(store: &dyn ObjectStore, path: &str, v: &T) {
    let bytes = serde_json::to_vec_pretty(v).unwrap();
    store
        .put(&Path::from(path), PutPayload::from(bytes))
        .await
        .unwrap();
}
