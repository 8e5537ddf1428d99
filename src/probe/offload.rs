//! The bridge from async callers to the rayon pool: CPU-heavy work (centroid
//! selection, decoding, scans, re-rank) never runs on a tokio worker.

/// Run the CPU-bound `f` on the rayon pool and await its result, so that the
/// calling tokio worker stays free for IO and other tasks meanwhile. A panic
/// in `f` resumes in the caller (as if `f` had run there).
pub async fn on_rayon<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
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
