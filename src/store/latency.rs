//! Object-store latency as S3 has it, in front of any store
//! ([`LatencyStore`]): every request waits a time to first byte, with
//! jitter and a rare slow tail, plus its bytes at a per-request bandwidth,
//! before its answer is returned. Tests and benches put it in front of a
//! local folder or memory to measure what a user on S3 would see without
//! the emulator (moto serves about 200 requests a second) being the
//! bottleneck.
//!
//! `object_store::throttle::ThrottledStore` waits a fixed time per call and
//! per byte; S3's latency is not fixed (a GET's first byte takes about
//! 30–60 ms at p50 and about 120 ms at p999, with rare far slower ones), and
//! hedging or a tail budget can only be measured against a distribution.
//! So the wait here is drawn per request from a seeded stream
//! ([`Latency::sample`]): reproducible, and concurrent requests overlap as
//! they do against S3 (each waits its own time).
//!
//! In front of a bare local folder, a ranged get of an object read before
//! is answered from its file's memory map once its wait is over
//! ([`InPlaceObjects`]), so that the wait is all the emulator adds:
//! `LocalFileSystem` opens the file and reads the range on a blocking
//! thread, twice handed over per request, about 2 ms a query of 35–40
//! ranged gets on two cores, which S3 does not cost a client.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, ObjectStore, PutOptions, PutPayload, PutResult,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::local_read::InPlaceObjects;
use super::pass_through::pass_through_store;
use super::timer;

/// How long a request takes ([`LatencyStore`]), parsed from
/// `ttfb=30ms,jitter=0.2,tail=0.01@500ms,mib_per_s=100,seed=1` (every key
/// optional but `ttfb`; see [`FromStr`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Time to first byte of a request.
    pub first_byte: Duration,
    /// Each request's time to first byte is `first_byte × (1 ± jitter)`,
    /// uniform (0 to 1; default 0.2).
    pub jitter: f64,
    /// The share of requests that wait `tail` instead (default 0).
    pub tail_share: f64,
    pub tail: Duration,
    /// Bytes per second of one request's transfer (default 100 MiB/s).
    pub bytes_per_second: u64,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            first_byte: Duration::ZERO,
            jitter: 0.2,
            tail_share: 0.0,
            tail: Duration::ZERO,
            bytes_per_second: 100 << 20,
            seed: 0,
        }
    }
}

/// A latency spec that does not parse: names the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "latency {spec:?}: {reason} (expected e.g. ttfb=30ms,jitter=0.2,tail=0.01@500ms,mib_per_s=100,seed=1)"
)]
pub struct LatencyError {
    pub spec: String,
    pub reason: String,
}

impl FromStr for Latency {
    type Err = LatencyError;

    /// Comma-separated `key=value`: `ttfb` (a duration, required), `jitter`
    /// (a fraction in [0, 1]), `tail` (`SHARE@DURATION`, the share in
    /// [0, 1]), `mib_per_s` (a positive integer) and `seed`.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| LatencyError {
            spec: spec.to_string(),
            reason,
        };
        let duration = |key: &str, v: &str| {
            humantime::parse_duration(v).map_err(|e| bad(format!("{key}: not a duration: {e}")))
        };
        let fraction = |key: &str, v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|f| (0.0..=1.0).contains(f))
                .ok_or_else(|| bad(format!("{key}: {v:?} is not a fraction in [0, 1]")))
        };
        let mut latency = Latency::default();
        let mut first_byte = None;
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = part
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            match key {
                "ttfb" => first_byte = Some(duration(key, value)?),
                "jitter" => latency.jitter = fraction(key, value)?,
                "tail" => {
                    let (share, wait) = value
                        .split_once('@')
                        .ok_or_else(|| bad(format!("tail: {value:?} is not SHARE@DURATION")))?;
                    latency.tail_share = fraction(key, share)?;
                    latency.tail = duration(key, wait)?;
                }
                "mib_per_s" => {
                    let mib = value
                        .parse::<u64>()
                        .ok()
                        .filter(|&m| m > 0)
                        .ok_or_else(|| {
                            bad(format!("mib_per_s: {value:?} is not a positive integer"))
                        })?;
                    latency.bytes_per_second = mib.saturating_mul(1 << 20);
                }
                "seed" => {
                    latency.seed = value
                        .parse()
                        .map_err(|_| bad(format!("seed: {value:?} is not an integer")))?;
                }
                _ => return Err(bad(format!("unknown key {key:?}"))),
            }
        }
        latency.first_byte = first_byte.ok_or_else(|| bad("no ttfb".into()))?;
        Ok(latency)
    }
}

impl Latency {
    /// One request's wait before its first byte, drawn from `rng`: the tail
    /// with probability `tail_share`, else `first_byte × (1 + jitter × u)`
    /// with `u` uniform in [-1, 1].
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let tail = rng.random::<f64>() < self.tail_share;
        let u: f64 = rng.random_range(-1.0..=1.0);
        if tail {
            self.tail
        } else {
            self.first_byte.mul_f64((1.0 + self.jitter * u).max(0.0))
        }
    }

    /// The transfer time of `bytes` at `bytes_per_second`.
    pub fn transfer(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.bytes_per_second.max(1) as f64)
    }
}

/// A store whose every request waits as [`Latency`] draws before it is
/// answered (gets, heads and single puts; multipart uploads, lists,
/// deletes and copies pass through at once). A `get_ranges` is its ranges sent concurrently: it waits the
/// longest of their draws, then its bytes.
pub struct LatencyStore {
    inner: Arc<dyn ObjectStore>,
    /// `inner`'s objects read in place when it is a bare local folder
    /// (module comment).
    in_place: Option<InPlaceObjects>,
    latency: Latency,
    rng: Mutex<ChaCha8Rng>,
}

impl LatencyStore {
    /// `inner` behind `latency`.
    pub fn new(inner: Arc<dyn ObjectStore>, latency: Latency) -> Self {
        LatencyStore {
            in_place: InPlaceObjects::of(inner.as_ref()),
            inner,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(latency.seed)),
            latency,
        }
    }

    /// The wait of `requests` concurrent requests moving `bytes` in all.
    fn wait(&self, requests: usize, bytes: u64) -> Duration {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let first = (0..requests.max(1))
            .map(|_| self.latency.sample(&mut *rng))
            .max()
            .unwrap_or_default();
        first + self.latency.transfer(bytes)
    }

    /// Waits [`LatencyStore::wait`] on the precise timer (`tokio`'s
    /// rounds up to the next millisecond); a wait of zero goes on at once,
    /// without a timer entry.
    async fn delay(&self, requests: usize, bytes: u64) {
        let wait = self.wait(requests, bytes);
        if !wait.is_zero() {
            timer::sleep(wait).await;
        }
    }
}

impl fmt::Debug for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyStore")
            .field("latency", &self.latency)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for LatencyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LatencyStore({})", self.inner)
    }
}

pass_through_store!(LatencyStore, [put_multipart_opts], {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.delay(1, payload.content_length() as u64).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if let Some(hit) = self
            .in_place
            .as_ref()
            .and_then(|o| o.get(location, &options))
        {
            self.delay(1, hit.range.end - hit.range.start).await;
            return Ok(hit);
        }
        // Only ranged reads come back for more of the same object (a
        // query's pages); a whole document is read once.
        let ranged = matches!(options.range, Some(GetRange::Bounded(_)));
        let result = self.inner.get_opts(location, options).await;
        let bytes = result.as_ref().map_or(0, |r| r.range.end - r.range.start);
        if let (Some(objects), Ok(got), true) = (&self.in_place, &result, ranged) {
            objects.remember(&got.meta);
        }
        self.delay(1, bytes).await;
        result
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let bytes = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        self.delay(ranges.len(), bytes).await;
        self.inner.get_ranges(location, ranges).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[test]
    fn a_spec_parses_and_a_bad_one_names_its_key() {
        let l: Latency = "ttfb=30ms,jitter=0.1,tail=0.01@500ms,mib_per_s=50,seed=7"
            .parse()
            .unwrap();
        assert_eq!(l.first_byte, Duration::from_millis(30));
        assert_eq!((l.jitter, l.tail_share), (0.1, 0.01));
        assert_eq!(l.tail, Duration::from_millis(500));
        assert_eq!((l.bytes_per_second, l.seed), (50 << 20, 7));
        let plain: Latency = "ttfb=60ms".parse().unwrap();
        assert_eq!(
            plain,
            Latency {
                first_byte: Duration::from_millis(60),
                ..Latency::default()
            }
        );
        for (spec, needle) in [
            ("jitter=0.1", "no ttfb"),
            ("ttfb=30", "ttfb"),
            ("ttfb=30ms,jitter=2", "jitter"),
            ("ttfb=30ms,tail=0.01", "SHARE@DURATION"),
            ("ttfb=30ms,mib_per_s=0", "mib_per_s"),
            ("ttfb=30ms,speed=1", "unknown key"),
            ("ttfb", "key=value"),
        ] {
            let err = spec.parse::<Latency>().unwrap_err();
            assert!(err.to_string().contains(needle), "{spec}: {err}");
        }
    }

    #[test]
    fn draws_stay_within_the_jitter_and_the_tail_takes_its_share() {
        let l: Latency = "ttfb=30ms,jitter=0.2,tail=0.01@500ms".parse().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let draws: Vec<Duration> = (0..100_000).map(|_| l.sample(&mut rng)).collect();
        let tail = draws.iter().filter(|&&d| d == l.tail).count();
        // 1 % of 100,000: a binomial's 5 standard deviations is ±157.
        assert!((843..=1157).contains(&tail), "{tail} tail draws");
        let (lo, hi) = (Duration::from_millis(24), Duration::from_millis(36));
        assert!(draws.iter().all(|&d| d == l.tail || (lo..=hi).contains(&d)));
        assert_eq!(l.transfer(100 << 20), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_local_folder_behind_it_answers_what_it_holds_now() {
        use object_store::ObjectStoreExt;
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let store = LatencyStore::new(Arc::clone(&inner), "ttfb=0ms".parse().unwrap());
        assert!(store.in_place.is_some());
        let path = Path::from("versions/latest.bin");
        for byte in [1u8, 2, 3] {
            inner.put(&path, vec![byte; 100].into()).await.unwrap();
            // The first get from the store, the next ones in place.
            for _ in 0..3 {
                let got = store.get_range(&path, 10..20).await.unwrap();
                assert_eq!(&got[..], &[byte; 10][..]);
            }
        }
        inner.delete(&path).await.unwrap();
        let gone = store.get_range(&path, 10..20).await.unwrap_err();
        assert!(
            matches!(gone, object_store::Error::NotFound { .. }),
            "{gone}"
        );
        let memory = LatencyStore::new(Arc::new(InMemory::new()), "ttfb=0ms".parse().unwrap());
        assert!(memory.in_place.is_none());
    }

    #[tokio::test]
    async fn a_request_waits_its_draw_and_its_bytes() {
        use object_store::ObjectStoreExt;
        use std::time::Instant;
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("a");
        inner.put(&path, vec![7u8; 1 << 20].into()).await.unwrap();
        let latency: Latency = "ttfb=30ms,jitter=0,mib_per_s=1".parse().unwrap();
        let store = LatencyStore::new(Arc::clone(&inner), latency);
        // 64 KiB at 1 MiB/s: 62.5 ms after the first byte.
        let expected = Duration::from_millis(30) + Duration::from_secs_f64(1.0 / 16.0);
        let t = Instant::now();
        let bytes = store.get_range(&path, 0..(64 << 10)).await.unwrap();
        assert_eq!(bytes.len(), 64 << 10);
        assert!(t.elapsed() >= expected, "{:?}", t.elapsed());
        // Two ranges at once: one first byte (no jitter), both transfers.
        let t = Instant::now();
        let got = store.get_ranges(&path, &[0..(32 << 10), (100 << 10)..(132 << 10)]);
        assert_eq!(got.await.unwrap().len(), 2);
        assert!(t.elapsed() >= expected, "{:?}", t.elapsed());
        // Lists pass through without waiting for a first byte.
        let t = Instant::now();
        let listed = store.list_with_delimiter(None).await.unwrap();
        assert_eq!(listed.objects.len(), 1);
        assert!(t.elapsed() < Duration::from_millis(30), "{:?}", t.elapsed());
    }
}
