//! The bridge from async callers to the rayon pool: CPU-heavy work (centroid
//! selection, decoding, scans, re-rank) never runs on a tokio worker.
//!
//! A caller that drives its futures from a rayon worker ([`drive_on_rayon`],
//! as the `search` command does) computes each step where it stands: a
//! query then costs no hand-over to the pool and back (two thread wake-ups
//! a step, about a sixth of a single in-memory query's time). A caller on
//! a tokio worker (`serve`) or a thread that other searches share (Python)
//! starts each search on a rayon worker instead ([`start_on_rayon`]): one
//! hand-over for a search whose reads are all served in place.

use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Run the CPU-bound `f` on the rayon pool and await its result, so that the
/// calling tokio worker stays free for IO and other tasks meanwhile. On a
/// rayon worker already (never a tokio worker) `f` runs in place. A panic
/// in `f` resumes in the caller (as if `f` had run there).
pub async fn on_rayon<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if rayon::current_thread_index().is_some() {
        return f();
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The receiver is gone only when the caller dropped the search.
        let _ = tx.send(out);
    });
    match rx.await {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // `rayon::spawn` runs every job and the job always sends: a closed
        // channel cannot happen short of the pool being torn down.
        Err(_) => std::panic::panic_any("rayon dropped a spawned job"),
    }
}

/// The most bytes a step may read and still run where it is awaited, a
/// tokio worker included ([`on_rayon_unless_small`]): a few microseconds at
/// memory speed (64 KiB checksummed and compared at 10 GB/s or more), under
/// the cost of handing it to rayon and back, two thread wake-ups of tens of
/// microseconds each on a small virtual machine (docs/benchmarks.md, "A
/// step that reads little runs where it is awaited").
pub const IN_PLACE_BYTES: usize = 64 << 10;

/// [`on_rayon`], except for a step that reads at most [`IN_PLACE_BYTES`]
/// (`bytes`, what it reads, bounds its work): that one runs in place, as
/// its hand-over would cost more than it does and it holds its thread for
/// no longer than a poll that parses a request.
pub async fn on_rayon_unless_small<T, F>(bytes: usize, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    on_rayon_above(bytes, IN_PLACE_BYTES, f).await
}

/// [`on_rayon`] for a step of `bytes` bytes of work when that is above
/// `in_place`, the most of its kind that costs less than the hand-over
/// (what [`IN_PLACE_BYTES`] is for steps at memory speed); else in place.
pub async fn on_rayon_above<T, F>(bytes: usize, in_place: usize, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if bytes <= in_place {
        return f();
    }
    on_rayon(f).await
}

/// Await `future`, first polled on a rayon worker (in the caller's tokio
/// runtime context, where it has one): every [`on_rayon`] step it reaches
/// there runs in place, so a search whose reads are all served in place (a
/// mapped local file, the RAM tier, preloaded codes) completes in that one
/// poll, at the cost of one hand-over to the pool and back instead of two
/// a step. A future that must wait (a read from a remote store) is awaited
/// on from where it stopped by the caller, whose waker it registers on
/// that next poll (the first poll's waker does nothing).
///
/// Unlike [`drive_on_rayon`], no worker ever blocks: a worker that takes
/// up another search while it waits in a parallel step of its own polls
/// that one as well, and neither waits on IO.
pub async fn start_on_rayon<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok();
    let mut future = Box::pin(future);
    let first = on_rayon(move || {
        let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(out) => Ok(out),
            Poll::Pending => Err(future),
        }
    })
    .await;
    match first {
        Ok(out) => out,
        Err(rest) => rest.await,
    }
}

/// Run `f` (typically a runtime's `block_on`) on a worker of the current
/// rayon pool, blocking the calling thread until it returns, so that every
/// [`on_rayon`] under it runs in place. For a thread that does nothing else
/// meanwhile: while `f` waits for IO, its worker computes nothing, so a
/// server's tasks must not be driven this way.
pub fn drive_on_rayon<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // `scope` runs its closure on a worker, injecting it when called from
    // outside the pool.
    rayon::scope(|_| f())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn work_runs_on_rayon_and_in_place_on_a_driving_worker() {
        // From outside the pool: handed over to a worker.
        assert!(block_on(on_rayon(rayon::current_thread_index)).is_some());
        // Driven from a worker: in place, on the driving thread.
        let (driver, ran) = drive_on_rayon(|| {
            let ran = block_on(on_rayon(|| std::thread::current().id()));
            (std::thread::current().id(), ran)
        });
        assert_eq!(driver, ran);
        assert_ne!(driver, std::thread::current().id());
    }

    #[test]
    fn a_small_step_runs_in_place_and_a_large_one_on_rayon() {
        let here = std::thread::current().id();
        let small = block_on(on_rayon_unless_small(IN_PLACE_BYTES, || {
            std::thread::current().id()
        }));
        assert_eq!(small, here);
        let large = block_on(on_rayon_unless_small(IN_PLACE_BYTES + 1, || {
            rayon::current_thread_index()
        }));
        assert!(large.is_some(), "a step over the bound runs on rayon");
    }

    #[test]
    fn a_panic_resumes_in_the_caller_either_way() {
        let handed = std::panic::catch_unwind(|| block_on(on_rayon(|| -> u8 { panic!("boom") })));
        assert!(handed.is_err());
        let in_place = drive_on_rayon(|| {
            std::panic::catch_unwind(|| block_on(on_rayon(|| -> u8 { panic!("boom") }))).is_err()
        });
        assert!(in_place);
    }

    /// A future whose steps are all in place completes in its first poll,
    /// on a rayon worker, with every step there.
    #[tokio::test]
    async fn a_search_served_in_place_completes_on_one_worker() {
        let (driver, steps) = start_on_rayon(async {
            let mut steps = Vec::new();
            for _ in 0..3 {
                steps.push(on_rayon(|| std::thread::current().id()).await);
            }
            (std::thread::current().id(), steps)
        })
        .await;
        assert_ne!(driver, std::thread::current().id());
        assert!(
            steps.iter().all(|&s| s == driver),
            "{steps:?} on {driver:?}"
        );
    }

    /// A future that must wait is finished by the caller, from where it
    /// stopped: its first step on a worker (with the caller's runtime
    /// entered, so that it may start a timer), the rest after the wait.
    #[tokio::test]
    async fn a_search_that_waits_is_finished_by_the_caller() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let waited = tokio::spawn(start_on_rayon(async move {
            let first = rayon::current_thread_index();
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let value = rx.await.expect("sent");
            (first, rayon::current_thread_index(), value)
        }));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        tx.send(7).expect("the future waits for it");
        let (first, after, value) = waited.await.expect("no panic");
        assert!(first.is_some(), "the first poll runs on a rayon worker");
        assert_eq!(after, None, "the rest runs on a tokio worker");
        assert_eq!(value, 7);
    }

    #[tokio::test]
    async fn a_panic_in_the_first_poll_resumes_in_the_caller() {
        let started = tokio::spawn(start_on_rayon(async { panic!("boom") }));
        let err = started.await.expect_err("the panic reaches the caller");
        assert!(err.is_panic());
    }
}
