//! Latency hiding in front of a remote store ([`HedgedStore`]): a bound on
//! the requests in flight, every range of a `get_ranges` sent as its own
//! request, and *hedged* gets.
//!
//! - **In flight.** At most [`StoreOptions::max_in_flight`](super::options::StoreOptions::max_in_flight)
//!   requests at once (default [`DEFAULT_MAX_IN_FLIGHT`]); the others wait
//!   for a slot. A round of a query is sent at once, so it costs one time
//!   to first byte while it fits. First copies (and puts) may take all but
//!   a reserve of [`HEDGE_RESERVE`] of the slots, so a hedge never waits
//!   behind a round's queued first copies (without the reserve, a round
//!   larger than the bound left its slow gets unhedged).
//! - **Coalescing.** Ranges are read exactly (the codes exist to skip the
//!   bytes between them). Only when one call has more ranges than the
//!   in-flight bound, so that some would wait a whole second time to first
//!   byte, are the smallest gaps merged, and only gaps whose transfer takes
//!   less than that wait: gap < p50 latency × [`REQUEST_BANDWIDTH`]
//!   ([`merge_for_slots`]).
//! - **Splitting.** One request streams at about [`REQUEST_BANDWIDTH`], so
//!   a large range costs its transfer after its first byte (a probed root's
//!   adjacent lists, read as one range, are a few hundred KB: 2–3 ms at
//!   100 MiB/s). A range whose transfer would take more than
//!   1/[`SPLIT_SHARE`] of the p50 latency is read as that many parts at
//!   once ([`split_for_transfer`]), within [`SPLIT_SLOTS`] of the slots a
//!   call: the parts share one time to first byte.
//! - **Hedging.** A get that has not answered after the observed p95 of
//!   recent gets ([`HedgeAfter::Observed`]; at least 1.25 × their p50, and
//!   1.5 × the slowest while fewer than [`MIN_SAMPLES`] were seen, from
//!   the [`MIN_EARLY`]th on; plus its bytes at [`REQUEST_BANDWIDTH`]) is
//!   sent a second time, if a slot is free; the
//!   first answer wins and the others are dropped. S3's slow tail is a
//!   property of a request, not of the object, so the copy usually answers
//!   within a normal time to first byte; a copy still unanswered after
//!   another such delay gets one more ([`MAX_COPIES`]). At most about 5 % of
//!   gets are hedged (fewer when the latency is steady).
//!
//! The hedges a future's requests sent are counted per query with
//! [`count_hedges`] (a task-local scope: concurrent queries do not mix), and
//! for the process in [`totals`] (the service's metrics).

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, ObjectStore, PutOptions, PutPayload, PutResult,
};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use super::byte_ranges::{coalesce, slice};
use super::pass_through::pass_through_store;

/// Requests in flight by default. One round of a storage-resident query
/// is one ranged get per code chunk and per rowid chunk of each probed list:
/// about 215 at nprobe 128 on 384-d embeddings, which at 64 slots took four
/// waves of a time to first byte (`docs/benchmarks.md`, issue 27, fourth
/// part). S3 serves 5,500 GETs a second per prefix; s5cmd sends 256 at once
/// by default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// The share of the in-flight slots kept for hedges (at least one where
/// there are two slots or more): first copies take at most the others.
pub const HEDGE_RESERVE: f64 = 0.125;
/// The share of gets answered before a hedge is sent.
pub const HEDGE_QUANTILE: f64 = 0.95;
/// Bytes a second one GET streams after its first byte (S3: about 90–100
/// MB/s per connection): a request's expected transfer time, subtracted
/// from its observed latency and added to its hedge delay.
pub const REQUEST_BANDWIDTH: u64 = 100 << 20;
/// A range is split into parts whose transfer at [`REQUEST_BANDWIDTH`]
/// takes at most this share of the p50 latency (1/32: 98 KB at 30 ms).
pub const SPLIT_SHARE: u64 = 32;
/// A call's parts take at most this share of the first copies' slots
/// (other calls of the round, and other queries, need the rest).
pub const SPLIT_SLOTS: usize = 4;
/// No part is smaller than this.
const MIN_PART: u64 = 32 << 10;
/// Copies of one get at most: the first and two hedges (a hedge that also
/// draws the slow tail, 1 % of hedges on S3, gets a second).
pub const MAX_COPIES: usize = 3;
/// Gets observed before the [`HEDGE_QUANTILE`] is used.
pub const MIN_SAMPLES: usize = 32;
/// Gets observed before the first hedge: from here to [`MIN_SAMPLES`] the
/// delay is 1.5 × the slowest get seen.
pub const MIN_EARLY: usize = 4;
/// The most recent gets the quantiles are taken over.
const WINDOW: usize = 512;
/// Quantiles are recomputed every this many observations.
const REFRESH_EVERY: u32 = 16;
/// No hedge is sent sooner than this (a store that answers in microseconds
/// would otherwise be asked everything twice).
const MIN_HEDGE_DELAY: Duration = Duration::from_millis(1);

/// When a get is sent a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HedgeAfter {
    /// Never.
    Off,
    /// After the [`HEDGE_QUANTILE`] of the recent gets' latencies, plus the
    /// request's transfer time (`auto`).
    #[default]
    Observed,
    /// After a fixed delay, plus the request's transfer time.
    Fixed(Duration),
}

/// A hedge setting that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hedge-after {value:?}: expected auto, off or a duration such as 80ms")]
pub struct HedgeAfterError {
    pub value: String,
}

impl FromStr for HedgeAfter {
    type Err = HedgeAfterError;

    /// `auto`, `off`, or a humantime duration (`80ms`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(HedgeAfter::Observed),
            "off" | "none" => Ok(HedgeAfter::Off),
            d => humantime::parse_duration(d)
                .map(HedgeAfter::Fixed)
                .map_err(|_| HedgeAfterError {
                    value: s.to_string(),
                }),
        }
    }
}

/// The process's hedging so far ([`totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HedgeTotals {
    /// Gets sent through a hedged store (first copies).
    pub gets: u64,
    /// Second copies sent.
    pub hedges: u64,
    /// Gets answered by their second copy.
    pub hedges_won: u64,
}

static GETS: AtomicU64 = AtomicU64::new(0);
static HEDGES: AtomicU64 = AtomicU64::new(0);
static HEDGES_WON: AtomicU64 = AtomicU64::new(0);

/// Every hedged store's gets and hedges since the process started.
pub fn totals() -> HedgeTotals {
    HedgeTotals {
        gets: GETS.load(Ordering::Relaxed),
        hedges: HEDGES.load(Ordering::Relaxed),
        hedges_won: HEDGES_WON.load(Ordering::Relaxed),
    }
}

tokio::task_local! {
    static SCOPE: Cell<u64>;
}

/// Run `f` and count the hedges its requests sent (those polled on this
/// task, as a query's are).
pub async fn count_hedges<F: Future>(f: F) -> (F::Output, u64) {
    SCOPE
        .scope(Cell::new(0), async {
            let out = f.await;
            (out, SCOPE.with(Cell::get))
        })
        .await
}

/// Recent gets' latencies, each less its expected transfer time, in µs.
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<u64>,
    since_refresh: u32,
    /// (p50, hedge delay) of `samples`, once there are [`MIN_EARLY`].
    quantiles: Option<(Duration, Duration)>,
}

impl Window {
    fn observe(&mut self, latency: Duration) {
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples
            .push_back(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
        self.since_refresh += 1;
        let n = self.samples.len();
        if n >= MIN_EARLY && (n < MIN_SAMPLES || self.since_refresh >= REFRESH_EVERY) {
            self.since_refresh = 0;
            // Two order statistics, selected (not sorted: this runs every
            // `REFRESH_EVERY` gets, on their path).
            let mut v: Vec<u64> = self.samples.iter().copied().collect();
            let rank = |q: f64| ((n - 1) as f64 * q).round() as usize;
            // Few samples (a new process's first rounds): half again the
            // slowest seen stands in for the quantile.
            let (high, scale) = if n >= MIN_SAMPLES {
                (rank(HEDGE_QUANTILE), 1.0)
            } else {
                (n - 1, 1.5)
            };
            let (below, &mut at_high, _) = v.select_nth_unstable(high);
            let middle = rank(0.5);
            let at_middle = if middle < high {
                *below.select_nth_unstable(middle).1
            } else {
                at_high
            };
            let p50 = Duration::from_micros(at_middle);
            let quantile = Duration::from_micros(at_high).mul_f64(scale);
            // A steady store (p95 close to p50) is not hedged for a
            // scheduling hiccup.
            self.quantiles = Some((p50, quantile.max(p50.mul_f64(1.25))));
        }
    }
}

/// The transfer time of `bytes` at [`REQUEST_BANDWIDTH`].
fn transfer(bytes: u64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / REQUEST_BANDWIDTH as f64)
}

/// A store whose requests are bounded in flight and whose slow gets are
/// hedged (module docs).
pub struct HedgedStore {
    inner: Arc<dyn ObjectStore>,
    /// Every request in flight, first copies and hedges.
    slots: Arc<Semaphore>,
    /// First copies in flight: all the slots but the hedges' reserve.
    firsts: Semaphore,
    /// Slots first copies may take (`firsts`' permits).
    first_slots: usize,
    after: HedgeAfter,
    window: Mutex<Window>,
}

impl HedgedStore {
    /// `inner` with at most `max_in_flight` requests at once (at least 1)
    /// and gets hedged `after`.
    pub fn new(inner: Arc<dyn ObjectStore>, max_in_flight: usize, after: HedgeAfter) -> Self {
        let max_in_flight = max_in_flight.max(1);
        let reserve =
            ((max_in_flight as f64 * HEDGE_RESERVE).ceil() as usize).min(max_in_flight - 1);
        let first_slots = max_in_flight - reserve;
        HedgedStore {
            inner,
            slots: Arc::new(Semaphore::new(max_in_flight)),
            firsts: Semaphore::new(first_slots),
            first_slots,
            after,
            window: Mutex::new(Window::default()),
        }
    }

    /// A slot for a first copy (or a put): one of the first copies' and
    /// one of all, held together.
    async fn first_slot(&self) -> (SemaphorePermit<'_>, SemaphorePermit<'_>) {
        let never_closed = "the semaphores are never closed";
        let first = self.firsts.acquire().await.expect(never_closed);
        (first, self.slots.acquire().await.expect(never_closed))
    }

    fn quantiles(&self) -> Option<(Duration, Duration)> {
        self.window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .quantiles
    }

    fn observe(&self, elapsed: Duration, bytes: u64) {
        let latency = elapsed.saturating_sub(transfer(bytes));
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.observe(latency);
    }

    /// How long a get of `bytes` may take before it is hedged.
    fn hedge_delay(&self, bytes: u64) -> Option<Duration> {
        let base = match self.after {
            HedgeAfter::Off => return None,
            HedgeAfter::Fixed(d) => d,
            HedgeAfter::Observed => self.quantiles()?.1,
        };
        Some(base.max(MIN_HEDGE_DELAY) + transfer(bytes))
    }

    /// A get, sent again each time it has waited another
    /// [`HedgedStore::hedge_delay`] without an answer (at most
    /// [`MAX_COPIES`] copies, each while a slot is free). The first answer
    /// wins; an error wins only when every copy sent has failed.
    async fn hedged_get(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let _slot = self.first_slot().await;
        GETS.fetch_add(1, Ordering::Relaxed);
        let bytes = match &options.range {
            Some(GetRange::Bounded(r)) => r.end.saturating_sub(r.start),
            _ => 0,
        };
        let start = Instant::now();
        let Some(delay) = self.hedge_delay(bytes) else {
            let result = self.inner.get_opts(location, options).await;
            if result.is_ok() {
                self.observe(start.elapsed(), bytes);
            }
            return result;
        };
        type Copy<'a> = BoxFuture<'a, (usize, object_store::Result<GetResult>)>;
        let copy = |n: usize, slot: Option<OwnedSemaphorePermit>| -> Copy<'_> {
            let options = options.clone();
            Box::pin(async move {
                let _slot = slot;
                (n, self.inner.get_opts(location, options).await)
            })
        };
        let mut copies = FuturesUnordered::new();
        copies.push(copy(0, None));
        let (mut sent, mut failed) = (1, None);
        let mut next = std::pin::pin!(tokio::time::sleep(delay));
        loop {
            tokio::select! {
                answer = copies.next() => match answer {
                    Some((n, Ok(result))) => {
                        if n > 0 {
                            HEDGES_WON.fetch_add(1, Ordering::Relaxed);
                        }
                        self.observe(start.elapsed(), bytes);
                        return Ok(result);
                    }
                    Some((_, Err(e))) => {
                        if copies.is_empty() {
                            return Err(failed.unwrap_or(e));
                        }
                        failed.get_or_insert(e);
                    }
                    // Never: the last copy's error returned above.
                    None => return Err(failed.unwrap_or_else(|| object_store::Error::Generic {
                        store: "HedgedStore",
                        source: format!("{location}: no copy of the get was sent").into(),
                    })),
                },
                () = &mut next, if sent < MAX_COPIES && failed.is_none() => {
                    match Arc::clone(&self.slots).try_acquire_owned() {
                        Ok(slot) => {
                            HEDGES.fetch_add(1, Ordering::Relaxed);
                            let _ = SCOPE.try_with(|c| c.set(c.get() + 1));
                            copies.push(copy(sent, Some(slot)));
                            sent += 1;
                        }
                        // No slot: the bound wins; wait for what was sent.
                        Err(_) => sent = MAX_COPIES,
                    }
                    next.as_mut().reset(tokio::time::Instant::now() + delay);
                }
            }
        }
    }
}

/// Merge the smallest gaps of the sorted, disjoint `ranges` until at most
/// `slots` remain, merging only gaps below `max_gap` (what a request's
/// time to first byte could transfer instead).
pub fn merge_for_slots(ranges: &[Range<u64>], slots: usize, max_gap: u64) -> Vec<Range<u64>> {
    let n = ranges.len();
    let mut merge = vec![false; n.saturating_sub(1)];
    if n > slots.max(1) {
        let mut gaps: Vec<(u64, usize)> = ranges
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[1].start.saturating_sub(w[0].end), i))
            .filter(|&(gap, _)| gap < max_gap)
            .collect();
        gaps.sort_unstable();
        for &(_, i) in gaps.iter().take(n - slots.max(1)) {
            merge[i] = true;
        }
    }
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(n);
    for (i, r) in ranges.iter().enumerate() {
        match merged.last_mut() {
            Some(last) if i > 0 && merge[i - 1] => last.end = last.end.max(r.end),
            _ => merged.push(r.clone()),
        }
    }
    merged
}

/// The sorted, disjoint `requests` cut into parts of at most `part` bytes
/// (each request into equal, adjacent parts), with `part` doubled until
/// the call takes at most `slots` requests; `requests` as they are when
/// `part` is 0 or they already take `slots` or more. Returns the parts
/// and, per request, how many of them it became.
pub fn split_for_transfer(
    requests: &[Range<u64>],
    part: u64,
    slots: usize,
) -> (Vec<Range<u64>>, Vec<usize>) {
    let len = |r: &Range<u64>| r.end.saturating_sub(r.start);
    let mut counts = vec![1; requests.len()];
    if part > 0 && requests.len() < slots {
        // Ends: once every request is one part, they take fewer than `slots`.
        let mut part = part.max(MIN_PART);
        loop {
            let n: Vec<usize> = requests
                .iter()
                .map(|r| usize::try_from(len(r).div_ceil(part)).map_or(usize::MAX, |n| n.max(1)))
                .collect();
            if n.iter()
                .try_fold(0usize, |a, &b| a.checked_add(b))
                .is_some_and(|t| t <= slots)
            {
                counts = n;
                break;
            }
            part = part.saturating_mul(2);
        }
    }
    let parts = requests
        .iter()
        .zip(&counts)
        .flat_map(|(r, &n)| {
            let (start, l, n) = (r.start, len(r), n as u64);
            (0..n).map(move |i| start + l * i / n..start + l * (i + 1) / n)
        })
        .collect();
    (parts, counts)
}

impl fmt::Debug for HedgedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgedStore")
            .field("first_slots", &self.first_slots)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for HedgedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HedgedStore({})", self.inner)
    }
}

pass_through_store!(HedgedStore, [put_multipart_opts], {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let _slot = self.first_slot().await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.hedged_get(location, options).await
    }

    /// Each range its own hedged get, all at once (within the in-flight
    /// bound); ranges are merged only where [`merge_for_slots`] says.
    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        // Sorted and with overlaps folded, so the gaps are well defined.
        let sorted = coalesce(ranges.iter().cloned());
        let max_gap = self.quantiles().map_or(0, |(p50, _)| {
            (p50.as_secs_f64() * REQUEST_BANDWIDTH as f64) as u64
        });
        let requests = merge_for_slots(&sorted, self.first_slots, max_gap);
        let (parts, counts) = split_for_transfer(
            &requests,
            max_gap / SPLIT_SHARE,
            self.first_slots / SPLIT_SLOTS,
        );
        let mut fetched = futures::future::try_join_all(parts.iter().map(|r| async move {
            let options = GetOptions {
                range: Some(GetRange::Bounded(r.clone())),
                ..GetOptions::default()
            };
            self.hedged_get(location, options).await?.bytes().await
        }))
        .await?
        .into_iter();
        // A split request's parts, joined again.
        let fetched: Vec<Bytes> = requests
            .iter()
            .zip(&counts)
            .map(|(r, &n)| match n {
                1 => fetched.next().unwrap_or_default(),
                _ => {
                    let len = r.end.saturating_sub(r.start);
                    let mut joined = BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
                    for piece in fetched.by_ref().take(n) {
                        joined.extend_from_slice(&piece);
                    }
                    joined.freeze()
                }
            })
            .collect();
        ranges
            .iter()
            .map(|want| {
                slice(&requests, &fetched, want).ok_or_else(|| object_store::Error::Generic {
                    store: "HedgedStore",
                    source: format!(
                        "{location}: range {}..{} is not within what was answered",
                        want.start, want.end
                    )
                    .into(),
                })
            })
            .collect()
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::latency::{Latency, LatencyStore};
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[test]
    fn the_window_gives_the_quantiles_of_its_sorted_samples() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut window = Window::default();
        let mut all: Vec<u64> = Vec::new();
        for i in 0..2_000 {
            let micros = rng.random_range(1_000..40_000);
            all.push(micros);
            window.observe(Duration::from_micros(micros));
            let n = all.len().min(WINDOW);
            if n < MIN_EARLY {
                assert_eq!(window.quantiles, None);
                continue;
            }
            if !(n < MIN_SAMPLES || window.since_refresh == 0) {
                continue;
            }
            let mut v = all[all.len() - n..].to_vec();
            v.sort_unstable();
            let at = |q: f64| Duration::from_micros(v[((n - 1) as f64 * q).round() as usize]);
            let p50 = at(0.5);
            let quantile = if n >= MIN_SAMPLES {
                at(HEDGE_QUANTILE)
            } else {
                at(1.0).mul_f64(1.5)
            };
            let want = (p50, quantile.max(p50.mul_f64(1.25)));
            assert_eq!(window.quantiles, Some(want), "after {i} samples");
        }
    }

    #[test]
    fn settings_parse_and_a_bad_one_is_named() {
        assert_eq!("auto".parse(), Ok(HedgeAfter::Observed));
        assert_eq!("off".parse(), Ok(HedgeAfter::Off));
        assert_eq!(
            "80ms".parse(),
            Ok(HedgeAfter::Fixed(Duration::from_millis(80)))
        );
        let err = "soon".parse::<HedgeAfter>().unwrap_err();
        assert!(err.to_string().contains("\"soon\""), "{err}");
    }

    #[test]
    fn gaps_merge_smallest_first_and_only_past_the_slots() {
        let ranges = [0..10, 12..20, 100..110, 111..120, 1000..1010];
        // Enough slots: nothing merges.
        assert_eq!(merge_for_slots(&ranges, 5, u64::MAX), ranges.to_vec());
        // Three slots: the two smallest gaps (1 and 2 bytes) merge.
        let got = merge_for_slots(&ranges, 3, u64::MAX);
        assert_eq!(got, vec![0..20, 100..120, 1000..1010]);
        // A gap at or above the bound never merges, whatever the slots.
        let got = merge_for_slots(&ranges, 1, 80);
        assert_eq!(got, vec![0..20, 100..120, 1000..1010]);
    }

    #[test]
    fn large_ranges_split_into_parts_within_the_slots() {
        let k = 1u64 << 10;
        let ranges = [0..10 * k, 100 * k..400 * k, 500 * k..501 * k];
        // No latency observed yet (part 0): nothing splits.
        let (parts, counts) = split_for_transfer(&ranges, 0, 64);
        assert_eq!((parts, counts), (ranges.to_vec(), vec![1, 1, 1]));
        // 100 KiB parts: the 300 KiB range becomes three adjacent ones.
        let (parts, counts) = split_for_transfer(&ranges, 100 * k, 64);
        assert_eq!(counts, vec![1, 3, 1]);
        assert_eq!(
            parts,
            vec![
                0..10 * k,
                100 * k..200 * k,
                200 * k..300 * k,
                300 * k..400 * k,
                500 * k..501 * k
            ]
        );
        // Four slots: the part doubles until the call fits them.
        let (parts, counts) = split_for_transfer(&ranges, 40 * k, 4);
        assert_eq!(counts, vec![1, 2, 1]);
        assert_eq!(parts.len(), 4);
        // No part is below the floor, and a call with no spare slot stays.
        assert_eq!(split_for_transfer(&ranges, 1, 64).1, vec![1, 10, 1]);
        assert_eq!(split_for_transfer(&ranges, 40 * k, 3).1, vec![1, 1, 1]);
    }

    /// A store that counts its requests in flight and the most at once;
    /// with `slow_first`, its first get of offset 0 takes 300 ms and every
    /// other get 5 ms (one slow request in a round).
    #[derive(Debug)]
    struct Gauge {
        inner: Arc<dyn ObjectStore>,
        now: AtomicU64,
        most: AtomicU64,
        slow_first: Option<std::sync::atomic::AtomicBool>,
    }

    impl Gauge {
        fn new(inner: Arc<dyn ObjectStore>, slow_first: bool) -> Arc<Gauge> {
            Arc::new(Gauge {
                inner,
                now: AtomicU64::new(0),
                most: AtomicU64::new(0),
                slow_first: slow_first.then(Default::default),
            })
        }
    }

    impl fmt::Display for Gauge {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Gauge")
        }
    }

    pass_through_store!(Gauge, [put_multipart_opts, get_ranges], {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            if let Some(slowed) = &self.slow_first {
                let at_zero = matches!(&options.range, Some(GetRange::Bounded(r)) if r.start == 0);
                let slow = at_zero && !slowed.swap(true, Ordering::SeqCst);
                let wait = if slow { 300 } else { 5 };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let r = self.inner.get_opts(location, options).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            r
        }
    });

    #[tokio::test]
    async fn a_round_larger_than_the_bound_still_hedges_its_slow_get() {
        let (inner, path, data) = object(1 << 16).await;
        let gauge = Gauge::new(inner, true);
        // Four slots: three for first copies, one kept for hedges.
        let after = HedgeAfter::Fixed(Duration::from_millis(20));
        let store = HedgedStore::new(Arc::clone(&gauge) as _, 4, after);
        let ranges: Vec<Range<u64>> = (0..40u64).map(|i| i * 1000..i * 1000 + 100).collect();
        let t = Instant::now();
        let (got, hedges) = count_hedges(store.get_ranges(&path, &ranges)).await;
        let took = t.elapsed();
        for (r, b) in ranges.iter().zip(got.unwrap()) {
            assert_eq!(b.as_ref(), &data[r.start as usize..r.end as usize]);
        }
        // The other first copies queue for their slots the whole time; the
        // slow get's hedge takes the reserved slot after 20 ms.
        assert!(hedges >= 1, "{hedges} hedges");
        assert!(
            took < Duration::from_millis(200),
            "{took:?}: the 300 ms get was waited for"
        );
        let most = gauge.most.load(Ordering::SeqCst);
        assert!(most <= 4, "{most} requests in flight, hedges included");
    }

    async fn object(bytes: usize) -> (Arc<dyn ObjectStore>, Path, Vec<u8>) {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("obj");
        let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        inner.put(&path, data.clone().into()).await.unwrap();
        (inner, path, data)
    }

    #[tokio::test]
    async fn ranges_come_back_exact_and_in_order_within_the_bound() {
        let (inner, path, data) = object(1 << 20).await;
        let latency: Latency = "ttfb=5ms,jitter=0.5".parse().unwrap();
        let gauge = Gauge::new(Arc::new(LatencyStore::new(inner, latency)), false);
        let store = HedgedStore::new(Arc::clone(&gauge) as _, 8, HedgeAfter::Off);
        // Unsorted, overlapping and repeated ranges, more than the slots.
        let ranges: Vec<Range<u64>> = (0..40u64)
            .map(|i| {
                let s = (i * 7919) % 1_000_000;
                s..s + 100 + i * 13
            })
            .chain([5..50, 5..50, 20..30])
            .collect();
        let got = store.get_ranges(&path, &ranges).await.unwrap();
        for (r, b) in ranges.iter().zip(&got) {
            assert_eq!(b.as_ref(), &data[r.start as usize..r.end as usize]);
        }
        let most = gauge.most.load(Ordering::SeqCst);
        assert!((2..=8).contains(&most), "{most} requests in flight");
    }

    #[tokio::test]
    async fn a_large_range_is_read_in_parts_and_comes_back_whole() {
        let (inner, path, data) = object(1 << 20).await;
        let latency: Latency = "ttfb=5ms,jitter=0".parse().unwrap();
        let gauge = Gauge::new(Arc::new(LatencyStore::new(inner, latency)), false);
        let store = HedgedStore::new(Arc::clone(&gauge) as _, 64, HedgeAfter::Off);
        // Before any latency is observed, a range is one request.
        let ranges = [1000..901_000, 950_000..950_010];
        let got = store.get_ranges(&path, &ranges).await.unwrap();
        assert_eq!(gauge.most.load(Ordering::SeqCst), 2);
        for i in 0..40u64 {
            store.get_range(&path, i..i + 10).await.unwrap();
        }
        gauge.most.store(0, Ordering::SeqCst);
        let again = store.get_ranges(&path, &ranges).await.unwrap();
        for (r, (b, c)) in ranges.iter().zip(got.iter().zip(&again)) {
            assert_eq!(b.as_ref(), &data[r.start as usize..r.end as usize]);
            assert_eq!(b, c);
        }
        // p50 5 ms: 16 KB parts, at least 32 KiB, doubled to fit 14 slots
        // (56 / 4): 900 KB in 7 parts of 128 KiB, with the small range 8
        // requests at once (at least 5 on a host too busy to start them
        // within 5 ms of each other).
        let most = gauge.most.load(Ordering::SeqCst);
        assert!((5..=8).contains(&most), "{most} requests in flight");
    }

    /// 100 sequential 1,000-byte gets of `path` through a hedged store
    /// over `inner` with `latency`: how many took past `slow`, and the
    /// hedges sent.
    async fn gets(
        inner: &Arc<dyn ObjectStore>,
        path: &Path,
        data: &[u8],
        latency: Latency,
        after: HedgeAfter,
        slow: Duration,
    ) -> (usize, u64) {
        let store = HedgedStore::new(
            Arc::new(LatencyStore::new(Arc::clone(inner), latency)),
            64,
            after,
        );
        let mut slow_gets = 0;
        let ((), hedges) = count_hedges(async {
            for i in 0..100u64 {
                let t = Instant::now();
                let b = store.get_range(path, i..i + 1000).await.unwrap();
                assert_eq!(b.as_ref(), &data[i as usize..i as usize + 1000]);
                slow_gets += usize::from(t.elapsed() >= slow);
            }
        })
        .await;
        (slow_gets, hedges)
    }

    #[tokio::test]
    async fn hedging_cuts_the_slow_tail() {
        // 10 % of gets wait 150 ms instead of 5 ms.
        let (inner, path, data) = object(64 << 10).await;
        let latency: Latency = "ttfb=5ms,jitter=0.2,tail=0.1@150ms,seed=3".parse().unwrap();
        let slow = Duration::from_millis(100);
        let (slow_plain, none) = gets(&inner, &path, &data, latency, HedgeAfter::Off, slow).await;
        let (slow_hedged, hedges) =
            gets(&inner, &path, &data, latency, HedgeAfter::Observed, slow).await;
        assert_eq!(none, 0);
        // Hedging starts at the MIN_EARLY-th get; the seeded draws put
        // tail gets after it.
        assert!(slow_plain >= 4, "{slow_plain} slow gets unhedged");
        // Hedged, a late tail get waits only if its copy draws the tail too.
        assert!(slow_hedged < slow_plain, "{slow_hedged} vs {slow_plain}");
        assert!(hedges >= 2, "{hedges} hedges");
    }
}
