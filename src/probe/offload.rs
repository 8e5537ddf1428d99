//! The bridge from async callers to the rayon pool: CPU-heavy work (centroid
//! selection, decoding, scans, re-rank) never runs on a tokio worker.
//!
//! A caller that drives its futures from a rayon worker ([`drive_on_rayon`],
//! as the `search` command does) computes each step where it stands: a
//! query then costs no hand-over to the pool and back (two thread wake-ups
//! a step, about a sixth of a single in-memory query's time).

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
    fn a_panic_resumes_in_the_caller_either_way() {
        let handed = std::panic::catch_unwind(|| block_on(on_rayon(|| -> u8 { panic!("boom") })));
        assert!(handed.is_err());
        let in_place = drive_on_rayon(|| {
            std::panic::catch_unwind(|| block_on(on_rayon(|| -> u8 { panic!("boom") }))).is_err()
        });
        assert!(in_place);
    }
}
