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
//! their wake-up. A new deadline signals the thread only when it is the
//! earliest ([`Timer::push`]).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
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

/// The pending deadlines, and the signal that one earlier than all before
/// it arrived.
struct Timer {
    heap: Mutex<BinaryHeap<Pending>>,
    earlier: Condvar,
}

/// The timer, its thread started on first use; `None` where the thread
/// could not be started.
fn timer() -> Option<&'static Timer> {
    static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            heap: Mutex::new(BinaryHeap::new()),
            earlier: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("parqivf-timer".into())
            .spawn(move || timer.run())
            .ok()
            .map(|_| timer)
    })
}

impl Timer {
    /// The timer thread: wake every task whose deadline passed (outside the
    /// lock), then sleep to the earliest deadline left, or until an earlier
    /// one is pushed.
    fn run(&self) {
        let lock = || self.heap.lock().unwrap_or_else(PoisonError::into_inner);
        let mut due = Vec::new();
        loop {
            let mut heap = lock();
            let now = Instant::now();
            while heap.peek().is_some_and(|p| p.at <= now) {
                due.push(heap.pop().expect("peeked"));
            }
            if !due.is_empty() {
                drop(heap);
                for p in due.drain(..) {
                    // A task that stopped waiting dropped its end.
                    let _ = p.wake.send(());
                }
                continue;
            }
            // Poisoning is ignored, as where the lock is taken.
            drop(match heap.peek().map(|p| p.at - now) {
                Some(wait) => self
                    .earlier
                    .wait_timeout(heap, wait)
                    .map_or_else(|e| e.into_inner().0, |(h, _)| h),
                None => self
                    .earlier
                    .wait(heap)
                    .unwrap_or_else(PoisonError::into_inner),
            });
        }
    }

    /// Add a deadline. The thread is signalled only when it is earlier than
    /// every pending one: a later deadline is seen when the thread wakes
    /// for the earliest, so a round of requests sent at once (the same
    /// wait each) wakes it once, not once a request, as a client sending
    /// requests to S3 wakes no thread of its own.
    fn push(&self, pending: Pending) {
        let mut heap = self.heap.lock().unwrap_or_else(PoisonError::into_inner);
        let earliest = heap.peek().is_none_or(|p| pending.at < p.at);
        heap.push(pending);
        drop(heap);
        if earliest {
            self.earlier.notify_one();
        }
    }
}

/// Waits `wait`, never less, and at most the operating system's timer
/// slack more (module comment). Falls back to `tokio::time::sleep` where
/// the timer thread could not be started.
pub async fn sleep(wait: Duration) {
    let at = Instant::now() + wait;
    if let Some(timer) = timer() {
        let (wake, woken) = oneshot::channel();
        timer.push(Pending { at, wake });
        if woken.await.is_ok() {
            return;
        }
    }
    tokio::time::sleep_until(at.into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline earlier than the one the thread sleeps toward wakes it:
    /// the short sleep ends long before the long one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_deadline_is_not_kept_waiting_for_a_later_one() {
        let long = tokio::spawn(sleep(Duration::from_secs(2)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = Instant::now();
        sleep(Duration::from_millis(5)).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(5) && took < Duration::from_secs(1),
            "a 5 ms sleep behind a 2 s one took {took:?}"
        );
        assert!(!long.is_finished(), "the 2 s sleep ended after {took:?}");
        long.abort();
    }

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
