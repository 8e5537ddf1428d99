//! A fault-injecting store: wraps any store and, at chosen requests, loses
//! an answer after the write landed, fails before the write, delays, or
//! "kills" the caller. Tests and drills put it in front of memory, local or
//! S3 stores to check what every publisher promises: a commit that landed is
//! a success, a lost race deletes nothing a version names, and a failure
//! anywhere leaves the previous version current.
//!
//! Each rule fires at the `nth` (0-based) request of its kind whose path
//! contains a given string, once. A kill leaves the request pending forever
//! and wakes [`FaultStore::killed`]: the caller races its work against that
//! and drops the work, which is what a process killed at that request
//! leaves behind (nothing after the request runs).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, MultipartUpload, ObjectStore, PutMultipartOptions, PutOptions,
    PutPayload, PutResult,
};
use tokio::sync::watch;

use super::pass_through::pass_through_store;

/// What happens at a faulty request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The write is applied, its answer lost, and the client retries it as
    /// `object_store` does after a dropped connection: the caller gets the
    /// retry's answer (`AlreadyExists` for a create-if-absent).
    LoseResponse,
    /// The write is applied, then an error is returned (every answer lost).
    ErrorAfter,
    /// An error before the request reaches the store.
    FailBefore,
    /// The caller dies at the request, before it reaches the store.
    Kill,
    /// The caller dies at the request, after the write landed.
    KillAfter,
    /// The request waits this long, then goes on.
    Delay(Duration),
}

/// Which requests a rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `put_opts` and `put_multipart_opts` (a multipart upload's faults
    /// fire when it starts: after-write faults act as [`Fault::FailBefore`]).
    Put,
    /// `get_opts` and `get_ranges`.
    Get,
}

#[derive(Debug)]
struct Rule {
    op: Op,
    contains: String,
    /// Matching requests still to let through before firing.
    skip: usize,
    fault: Fault,
    fired: bool,
}

/// A store that injects [`Fault`]s into chosen requests of `inner`.
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    rules: Mutex<Vec<Rule>>,
    killed: watch::Sender<bool>,
}

impl FaultStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            rules: Mutex::new(Vec::new()),
            killed: watch::channel(false).0,
        }
    }

    /// Apply `fault` once, at the `nth` (0-based) `op` request whose path
    /// contains `contains` (`""`: every path).
    #[must_use]
    pub fn on(self, op: Op, contains: &str, nth: usize, fault: Fault) -> Self {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Rule {
                op,
                contains: contains.to_string(),
                skip: nth,
                fault,
                fired: false,
            });
        self
    }

    /// How many rules have fired.
    pub fn fired(&self) -> usize {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| r.fired)
            .count()
    }

    /// Resolves once a [`Fault::Kill`] or [`Fault::KillAfter`] fired.
    pub async fn killed(&self) {
        let mut rx = self.killed.subscribe();
        let _ = rx.wait_for(|k| *k).await;
    }

    /// The fault of this request, if a rule fires at it.
    fn fault(&self, op: Op, location: &Path) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        for rule in rules.iter_mut() {
            if rule.fired || rule.op != op || !location.as_ref().contains(&rule.contains) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            rule.fired = true;
            return Some(rule.fault);
        }
        None
    }

    /// Die here: wake [`FaultStore::killed`] and never return.
    async fn die(&self) -> ! {
        self.killed.send_replace(true);
        futures::future::pending::<()>().await;
        unreachable!("a pending future never resolves")
    }

    fn injected(location: &Path, fault: Fault) -> object_store::Error {
        object_store::Error::Generic {
            store: "FaultStore",
            source: format!("injected {fault:?} at {location}").into(),
        }
    }

    /// The faults that act before the request: fail, kill or delay.
    async fn before(&self, location: &Path, fault: Option<Fault>) -> object_store::Result<()> {
        match fault {
            Some(f @ Fault::FailBefore) => Err(Self::injected(location, f)),
            Some(Fault::Kill) => self.die().await,
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

pass_through_store!(FaultStore, [], {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fault = self.fault(Op::Put, location);
        self.before(location, fault).await?;
        match fault {
            Some(Fault::LoseResponse) => {
                self.inner
                    .put_opts(location, payload.clone(), opts.clone())
                    .await?;
                self.inner.put_opts(location, payload, opts).await
            }
            Some(f @ Fault::ErrorAfter) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(Self::injected(location, f))
            }
            Some(Fault::KillAfter) => {
                self.inner.put_opts(location, payload, opts).await?;
                self.die().await
            }
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let fault = self.fault(Op::Put, location).map(|f| match f {
            Fault::LoseResponse | Fault::ErrorAfter => Fault::FailBefore,
            Fault::KillAfter => Fault::Kill,
            other => other,
        });
        self.before(location, fault).await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let fault = self.fault(Op::Get, location);
        self.before(location, fault).await?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let fault = self.fault(Op::Get, location);
        self.before(location, fault).await?;
        self.inner.get_ranges(location, ranges).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    fn create() -> PutOptions {
        PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        }
    }

    #[tokio::test]
    async fn a_lost_response_lands_the_write_and_answers_with_the_retry() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = FaultStore::new(inner.clone()).on(Op::Put, "v/", 1, Fault::LoseResponse);
        let (a, b) = (Path::from("v/1"), Path::from("v/2"));
        store.put_opts(&a, "a".into(), create()).await.unwrap();
        let e = store.put_opts(&b, "b".into(), create()).await.unwrap_err();
        assert!(
            matches!(e, object_store::Error::AlreadyExists { .. }),
            "{e}"
        );
        assert_eq!(inner.get(&b).await.unwrap().bytes().await.unwrap(), "b");
        assert_eq!(store.fired(), 1);
    }

    #[tokio::test]
    async fn fail_before_writes_nothing_and_error_after_writes() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = FaultStore::new(inner.clone())
            .on(Op::Put, "x", 0, Fault::FailBefore)
            .on(Op::Put, "y", 0, Fault::ErrorAfter);
        assert!(store.put(&Path::from("x"), "x".into()).await.is_err());
        assert!(inner.head(&Path::from("x")).await.is_err());
        assert!(store.put(&Path::from("y"), "y".into()).await.is_err());
        assert!(inner.head(&Path::from("y")).await.is_ok());
        // Each rule fires once.
        store.put(&Path::from("x"), "x".into()).await.unwrap();
    }

    #[tokio::test]
    async fn a_kill_leaves_the_request_pending_and_wakes_the_watcher() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = Arc::new(FaultStore::new(inner.clone()).on(Op::Put, "k", 0, Fault::KillAfter));
        let s = store.clone();
        tokio::select! {
            _ = async move { s.put(&Path::from("k"), "k".into()).await } => panic!("returned"),
            () = store.killed() => {}
        }
        assert!(
            inner.head(&Path::from("k")).await.is_ok(),
            "landed before the kill"
        );
    }
}
