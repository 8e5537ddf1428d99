//! A sleep as precise as the operating system's own ([`sleep`]), for the
//! latency emulator: tokio's timer wheel ticks in whole milliseconds and
//! rounds a deadline up to the next tick, so a 30 ms `tokio::time::sleep`
//! takes 31.2–31.5 ms on a quiet host. Against S3 a client is woken by its
//! socket, not a timer, so that overshoot would be the emulator's, added to
//! every round it measures.
//!
//! One thread keeps every pending deadline in a heap and sleeps to the
//! earliest with a futex timeout (tens of microseconds late at most), then
//! wakes the waiting tasks. A task never runs on it; it only sends them
//! their wake-up.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A deadline and the task waiting for it.
struct Pending {
    at: Instant,
    wake: oneshot::Sender<()>,
}

// The heap's order: the earliest deadline on top.
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Pending {}

/// The timer thread's inbox, started on first use; `None` where the thread
/// could not be started.
fn timer() -> Option<&'static Sender<Pending>> {
    static TIMER: OnceLock<Option<Sender<Pending>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Pending>();
            std::thread::Builder::new()
                .name("parqivf-timer".into())
                .spawn(move || {
                    let mut heap = BinaryHeap::new();
                    loop {
                        let now = Instant::now();
                        while heap.peek().is_some_and(|p: &Pending| p.at <= now) {
                            let due = heap.pop().expect("peeked");
                            // A task that stopped waiting dropped its end.
                            let _ = due.wake.send(());
                        }
                        let next = match heap.peek() {
                            Some(p) => rx.recv_timeout(p.at - now),
                            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                        };
                        match next {
                            Ok(p) => heap.push(p),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Waits `wait`, never less, and at most the operating system's timer
/// slack more (module comment). Falls back to `tokio::time::sleep` where
/// the timer thread could not be started.
pub async fn sleep(wait: Duration) {
    let at = Instant::now() + wait;
    let (wake, woken) = oneshot::channel();
    match timer().map(|t| t.send(Pending { at, wake })) {
        Some(Ok(())) if woken.await.is_ok() => {}
        _ => tokio::time::sleep_until(at.into()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sleep_never_ends_early() {
        let start = Instant::now();
        let waits = [30u64, 5, 20, 5, 0, 12];
        let ends = futures::future::join_all(waits.iter().map(|&ms| async move {
            sleep(Duration::from_millis(ms)).await;
            start.elapsed()
        }))
        .await;
        for (&ms, end) in waits.iter().zip(&ends) {
            assert!(
                *end >= Duration::from_millis(ms),
                "{ms} ms ended at {end:?}"
            );
        }
    }
}
