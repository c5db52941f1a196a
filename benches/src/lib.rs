//! Benchmark subjects and harness helpers shared by `benches/engine.rs` and the `mem` binary.
//!
//! Everything here exists to be measured side by side with [`sluicegate::Limiter`]:
//!
//! * [`MutexBucket`]: the textbook `Mutex<(tokens: f64, last: Instant)>` token bucket, over
//!   std's and parking_lot's mutex ([`StdLock`], [`PlLock`]);
//! * [`Floor`]: the hardware floor of a decision, one clock read plus one uncontended 64-bit
//!   compare-and-swap, with the clock read the same way the engine's clocks read it;
//! * [`setup`]: every subject built in the state a group needs (always allowing, or drained and
//!   always rejecting), checked before it is measured;
//! * [`run_threads`]: N scoped threads released together by a barrier, for `iter_custom`;
//! * [`Rng`]: a tiny xorshift generator for random key access (the same cost for every peer);
//! * [`mem`]: resident set size from `/proc/self/statm`;
//! * [`http`]: the HTTP overhead subjects (axum alone, with sluicegate-tower, with tower_governor).

pub mod http;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The outcome of a textbook bucket: admitted, or the nanoseconds to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the request was admitted.
    pub allowed: bool,
    /// The wait before the request could be admitted (0 when allowed).
    pub retry_after_nanos: u64,
}

/// A mutex over `T`, so one bucket body serves std's and parking_lot's locks.
pub trait Lock<T>: Send + Sync {
    /// Wraps `value`.
    fn new(value: T) -> Self;
    /// Runs `f` under the lock.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

/// `std::sync::Mutex`.
pub struct StdLock<T>(std::sync::Mutex<T>);

impl<T: Send> Lock<T> for StdLock<T> {
    fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

/// `parking_lot::Mutex`.
pub struct PlLock<T>(parking_lot::Mutex<T>);

impl<T: Send> Lock<T> for PlLock<T> {
    fn new(value: T) -> Self {
        Self(parking_lot::Mutex::new(value))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.lock())
    }
}

/// The state of the textbook bucket: fractional tokens as of `last`.
pub struct BucketState {
    tokens: f64,
    last: Instant,
}

/// The textbook token bucket: `Mutex<(tokens: f64, last: Instant)>`, refilled on each call.
///
/// The clock is read before the lock is taken (the shorter critical section; a reading older
/// than `last` counts as no time passed).
pub struct MutexBucket<L> {
    state: L,
    capacity: f64,
    tokens_per_nano: f64,
}

impl<L: Lock<BucketState>> MutexBucket<L> {
    /// `rate` tokens per `period`, `capacity` tokens, starting with `initial`.
    pub fn new(rate: u64, period: Duration, capacity: u64, initial: u64) -> Self {
        Self {
            state: L::new(BucketState {
                tokens: initial as f64,
                last: Instant::now(),
            }),
            capacity: capacity as f64,
            tokens_per_nano: rate as f64 / period.as_nanos() as f64,
        }
    }

    /// Takes `cost` tokens if they are there; else says how long to wait.
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Outcome {
        let now = Instant::now();
        let cost = cost as f64;
        self.state.with(|s| {
            let elapsed = now.saturating_duration_since(s.last).as_nanos() as f64;
            if elapsed > 0.0 {
                s.tokens = (s.tokens + elapsed * self.tokens_per_nano).min(self.capacity);
                s.last = now;
            }
            if s.tokens >= cost {
                s.tokens -= cost;
                Outcome {
                    allowed: true,
                    retry_after_nanos: 0,
                }
            } else {
                Outcome {
                    allowed: false,
                    retry_after_nanos: ((cost - s.tokens) / self.tokens_per_nano).ceil() as u64,
                }
            }
        })
    }
}

/// The floor of a decision: one clock read and one uncontended 64-bit compare-and-swap on a
/// word of its own cache line. `read` is the clock, read exactly as the engine's clock of the
/// same kind reads it.
#[repr(align(128))]
pub struct Floor<F> {
    word: AtomicU64,
    read: F,
}

impl<F: Fn() -> u64> Floor<F> {
    /// A floor over the clock `read`.
    pub fn new(read: F) -> Self {
        Self {
            word: AtomicU64::new(0),
            read,
        }
    }

    /// Clock read + load + CAS (retried only under contention): what an allowed decision can
    /// at best cost.
    #[inline]
    pub fn cas(&self) -> u64 {
        let now = (self.read)();
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let new = cur.max(now) + 1;
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return new,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Clock read + load, no write: what a rejection (a read) can at best cost.
    #[inline]
    pub fn read_only(&self) -> u64 {
        let now = (self.read)();
        now.wrapping_sub(self.word.load(Ordering::Acquire))
    }
}

/// The quanta TSC clock read as `sluicegate::MonotonicClock` reads it (raw counter, scaled to
/// nanoseconds since an origin).
pub fn quanta_reader() -> impl Fn() -> u64 + Send + Sync {
    let clock = quanta::Clock::new();
    let origin = clock.raw();
    move || clock.delta_as_nanos(origin, clock.raw())
}

/// `std::time::Instant` read as `sluicegate::StdClock` reads it.
pub fn std_reader() -> impl Fn() -> u64 + Send + Sync {
    let origin = Instant::now();
    move || {
        let d = Instant::now().saturating_duration_since(origin);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Every subject in the state its group measures. Each constructor checks that state (an
/// allow-path subject allows, a reject-path subject rejects with a non-zero wait) so that a
/// change of defaults cannot silently measure the other path.
pub mod setup {
    use super::{BucketState, Lock, MutexBucket};
    use governor::clock::Clock as _;
    use sluicegate::{Clock, Limiter, Quota};
    use std::num::NonZeroU32;
    use std::time::Duration;

    /// Allow path: 10^9 tokens per second with a burst of 10^9. A thread makes at most a few
    /// 10^8 decisions per second, so the bucket never runs dry.
    pub const ALLOW_RATE: u32 = 1_000_000_000;
    /// Reject path: one token per hour, burst 1, drained once at construction.
    pub const REJECT_PERIOD: Duration = Duration::from_secs(3600);

    /// Which path a subject is built for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Path {
        /// Always admitted (huge rate).
        Allow,
        /// Always rejected (tiny rate, drained bucket); the wait is read on every call.
        Reject,
    }

    impl Path {
        /// `"allow"` or `"reject"`.
        pub fn name(self) -> &'static str {
            match self {
                Path::Allow => "allow",
                Path::Reject => "reject",
            }
        }
    }

    /// The engine's quota for `path` (continuous refill).
    pub fn quota(path: Path) -> Quota {
        match path {
            Path::Allow => {
                Quota::try_new(u64::from(ALLOW_RATE), 1_000_000_000, u64::from(ALLOW_RATE))
                    .expect("allow quota")
            }
            Path::Reject => {
                Quota::try_new(1, REJECT_PERIOD.as_nanos() as u64, 1).expect("reject quota")
            }
        }
    }

    /// Puts an engine limiter in the state `path` measures, and checks it.
    pub fn prime<C: Clock>(limiter: Limiter<C>, path: Path) -> Limiter<C> {
        if path == Path::Reject {
            assert!(limiter.try_acquire(1).expect("drain").allowed());
        }
        let d = limiter.try_acquire(1).expect("probe");
        match path {
            Path::Allow => assert!(d.allowed(), "allow-path limiter rejected"),
            Path::Reject => {
                assert!(!d.allowed(), "reject-path limiter allowed");
                assert!(d.retry_after_nanos() > 0);
            }
        }
        limiter
    }

    /// The engine on clock `clock`, built with [`quota`] and [`prime`]d.
    pub fn ours<C: Clock>(clock: C, path: Path) -> Limiter<C> {
        prime(
            Limiter::with_clock(quota(path), clock).expect("limiter"),
            path,
        )
    }

    /// governor's quota for `path`.
    pub fn governor_quota(path: Path) -> governor::Quota {
        match path {
            Path::Allow => {
                let n = NonZeroU32::new(ALLOW_RATE).expect("non-zero");
                governor::Quota::per_second(n).allow_burst(n)
            }
            Path::Reject => governor::Quota::with_period(REJECT_PERIOD)
                .expect("period")
                .allow_burst(NonZeroU32::MIN),
        }
    }

    /// governor's direct limiter (default quanta clock, no middleware).
    pub type Governor = governor::DefaultDirectRateLimiter;

    /// governor's direct limiter for `path`, checked.
    pub fn governor(path: Path) -> Governor {
        let l = governor::RateLimiter::direct(governor_quota(path));
        if path == Path::Reject {
            assert!(l.check().is_ok());
        }
        match (path, l.check()) {
            (Path::Allow, r) => assert!(r.is_ok(), "allow-path governor rejected"),
            (Path::Reject, Err(nu)) => {
                assert!(nu.wait_time_from(l.clock().now()) > Duration::ZERO)
            }
            (Path::Reject, Ok(())) => panic!("reject-path governor allowed"),
        }
        l
    }

    /// governor's decision with the wait read, as a caller answering 429 must: a rejection
    /// costs governor a second clock read.
    #[inline]
    pub fn governor_acquire(l: &Governor) -> u64 {
        match l.check() {
            Ok(()) => 0,
            Err(nu) => nu.wait_time_from(l.clock().now()).as_nanos() as u64,
        }
    }

    /// sluicegate's keyed limiter (default clock), bounded well above the key counts measured.
    pub type OursKeyed = sluicegate::KeyedLimiter<u64>;

    /// The keyed allow-path quota: 1000/s with a burst of 10^9. Setup spends half of each
    /// key's burst, so every bucket stays below full (for days) while still admitting. A full
    /// bucket is indistinguishable from an absent key and the keyed store drops it (lossless
    /// eviction), so with [`quota`]'s allow path (refilled within a nanosecond) the keys would
    /// be gone and the row would time key creation, not the lookup of existing keys that
    /// governor's row (which never evicts) times.
    pub fn keyed_allow_quota() -> Quota {
        Quota::try_new(1_000, 1_000_000_000, 1_000_000_000).expect("keyed allow quota")
    }

    /// sluicegate's keyed limiter holding `keys` keys (0..keys), each in the state `path`
    /// measures; every key is checked.
    pub fn ours_keyed(path: Path, keys: u64) -> OursKeyed {
        ours_keyed_in(path, keys, sluicegate::StoreSpec::default())
    }

    /// [`ours_keyed`] with its buckets in `store` (a shared-memory region, for `shmpath`).
    pub fn ours_keyed_in(path: Path, keys: u64, store: sluicegate::StoreSpec) -> OursKeyed {
        ours_keyed_sized(path, keys, 2 * keys as usize + 16, store)
    }

    /// [`ours_keyed_in`] with a key bound of `max_keys` (a region's capacity).
    pub fn ours_keyed_sized(
        path: Path,
        keys: u64,
        max_keys: usize,
        store: sluicegate::StoreSpec,
    ) -> OursKeyed {
        let q = match path {
            Path::Allow => keyed_allow_quota(),
            Path::Reject => quota(path),
        };
        let l = OursKeyed::builder(q)
            .max_keys(max_keys)
            .store(store)
            .build()
            .expect("keyed limiter");
        let first = q.burst().div_ceil(2);
        for key in 0..keys {
            let d = l.try_acquire(&key, first).expect("cost");
            assert!(d.allowed(), "a new key starts full");
            if path == Path::Reject {
                let d = l.try_acquire(&key, 1).expect("cost");
                assert!(!d.allowed(), "reject-path key allowed");
            }
        }
        assert_eq!(l.len() as u64, keys);
        l
    }

    /// What an operations subject adds to the plain limiter (docs/OPERATIONS.md's costs).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Mode {
        /// As built by default: no counters, enforcing, never reconfigured.
        Plain,
        /// Counters on.
        Metrics,
        /// Shadow mode on (a would-be rejection is let through, flagged).
        Shadow,
        /// Reconfigured once (to the same quota): decisions go through the published
        /// generation.
        Reconfigured,
    }

    impl Mode {
        /// Every mode, in report order.
        pub const ALL: [Mode; 4] = [Mode::Plain, Mode::Metrics, Mode::Shadow, Mode::Reconfigured];

        /// The subject's suffix.
        pub fn name(self) -> &'static str {
            match self {
                Mode::Plain => "plain",
                Mode::Metrics => "metrics",
                Mode::Shadow => "shadow",
                Mode::Reconfigured => "reconfigured",
            }
        }
    }

    /// The engine on the default clock for `path`, [`prime`]d, then set in `mode`.
    pub fn ours_mode(path: Path, mode: Mode) -> Limiter<sluicegate::MonotonicClock> {
        let l = Limiter::builder(quota(path))
            .clock(sluicegate::MonotonicClock::new())
            .metrics(mode == Mode::Metrics)
            .build()
            .expect("limiter");
        let l = prime(l, path);
        match mode {
            Mode::Shadow => l.set_shadow(true),
            Mode::Reconfigured => l.set_quota(quota(path)).expect("same quota"),
            Mode::Plain | Mode::Metrics => {}
        }
        l
    }

    /// The keyed limiter of [`ours_keyed`] (its keys in the state `path` measures), built
    /// with counters for [`Mode::Metrics`], then set in `mode`.
    pub fn ours_keyed_mode(path: Path, keys: u64, mode: Mode) -> OursKeyed {
        let q = match path {
            Path::Allow => keyed_allow_quota(),
            Path::Reject => quota(path),
        };
        let l = OursKeyed::builder(q)
            .max_keys(2 * keys as usize + 16)
            .metrics(mode == Mode::Metrics)
            .build()
            .expect("keyed limiter");
        let first = q.burst().div_ceil(2);
        for key in 0..keys {
            assert!(l.try_acquire(&key, first).expect("cost").allowed());
            if path == Path::Reject {
                assert!(!l.try_acquire(&key, 1).expect("cost").allowed());
            }
        }
        match mode {
            Mode::Shadow => l.set_shadow(true),
            Mode::Reconfigured => l.set_quota(q).expect("same quota"),
            Mode::Plain | Mode::Metrics => {}
        }
        assert_eq!(l.len() as u64, keys);
        l
    }

    /// The keyed decision with the wait read on rejection.
    #[inline]
    pub fn ours_keyed_acquire(l: &OursKeyed, key: u64) -> u64 {
        let d = l.try_acquire(&key, 1).expect("cost within capacity");
        if d.allowed() {
            0
        } else {
            d.retry_after_nanos()
        }
    }

    /// governor's keyed limiter (DashMap store, default quanta clock).
    pub type GovernorKeyed = governor::DefaultKeyedRateLimiter<u64>;

    /// governor's keyed limiter holding `keys` keys (0..keys), each in the state `path`
    /// measures; every key is checked.
    pub fn governor_keyed(path: Path, keys: u64) -> GovernorKeyed {
        let l = governor::RateLimiter::keyed(governor_quota(path));
        for key in 0..keys {
            let first = l.check_key(&key).is_ok();
            assert!(first, "a new key starts full");
            if path == Path::Reject {
                assert!(l.check_key(&key).is_err(), "reject-path key allowed");
            }
        }
        assert_eq!(l.len() as u64, keys);
        l
    }

    /// The keyed decision with the wait read on rejection.
    #[inline]
    pub fn governor_keyed_acquire(l: &GovernorKeyed, key: u64) -> u64 {
        match l.check_key(&key) {
            Ok(()) => 0,
            Err(nu) => nu.wait_time_from(l.clock().now()).as_nanos() as u64,
        }
    }

    /// The `ratelimit` crate's limiter (its default std clock) for `path`, checked.
    pub fn ratelimit(path: Path) -> ratelimit::Ratelimiter {
        let l = match path {
            Path::Allow => ratelimit::Ratelimiter::builder(u64::from(ALLOW_RATE))
                .max_tokens(u64::from(ALLOW_RATE))
                .initial_available(u64::from(ALLOW_RATE))
                .build(),
            Path::Reject => ratelimit::Ratelimiter::builder(1)
                .period(REJECT_PERIOD)
                .max_tokens(1)
                .initial_available(0)
                .build(),
        }
        .expect("ratelimit");
        match (path, l.try_wait()) {
            (Path::Allow, r) => assert!(r.is_ok(), "allow-path ratelimit rejected"),
            (Path::Reject, Err(ratelimit::TryWaitError::Insufficient(wait))) => {
                assert!(wait > Duration::ZERO)
            }
            (Path::Reject, r) => panic!("reject-path ratelimit: {r:?}"),
        }
        l
    }

    /// `ratelimit`'s decision with the wait read on rejection.
    #[inline]
    pub fn ratelimit_acquire(l: &ratelimit::Ratelimiter) -> u64 {
        match l.try_wait() {
            Ok(()) => 0,
            Err(ratelimit::TryWaitError::Insufficient(wait)) => wait.as_nanos() as u64,
            Err(_) => u64::MAX,
        }
    }

    /// The textbook bucket for `path`, checked.
    pub fn mutex<L: Lock<BucketState>>(path: Path) -> MutexBucket<L> {
        let b = match path {
            Path::Allow => MutexBucket::new(
                u64::from(ALLOW_RATE),
                Duration::from_secs(1),
                u64::from(ALLOW_RATE),
                u64::from(ALLOW_RATE),
            ),
            Path::Reject => MutexBucket::new(1, REJECT_PERIOD, 1, 0),
        };
        let o = b.try_acquire(1);
        match path {
            Path::Allow => assert!(o.allowed, "allow-path mutex bucket rejected"),
            Path::Reject => assert!(!o.allowed && o.retry_after_nanos > 0),
        }
        b
    }
}

/// Runs `op` `iters` times on each of `threads` scoped threads, released together by a barrier,
/// and returns the wall time from the release until the last thread is done.
pub fn run_threads<F: Fn() + Sync>(threads: usize, iters: u64, op: F) -> Duration {
    run_threads_indexed(threads, iters, |_, n| {
        for _ in 0..n {
            op();
        }
    })
}

/// Runs `op(t, iters)` on `threads` threads at once (`t` is the thread's index) and returns the
/// wall time from the common start to the last thread's end.
pub fn run_threads_indexed<F: Fn(usize, u64) + Sync>(
    threads: usize,
    iters: u64,
    op: F,
) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    op(t, iters);
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("bench thread panicked");
        }
        start.elapsed()
    })
}

/// The keyed floor: a read-only std `HashMap` from key to state word (foldhash, the keyed
/// store's own hash family), a clock read and one CAS (or one load, for rejections) per
/// decision. What any keyed limiter must at least do.
pub struct KeyedFloor<F> {
    map: std::collections::HashMap<u64, AtomicU64, foldhash::fast::RandomState>,
    read: F,
}

impl<F: Fn() -> u64> KeyedFloor<F> {
    /// A floor holding keys `0..keys`.
    pub fn new(keys: u64, read: F) -> Self {
        let mut map =
            std::collections::HashMap::with_capacity_and_hasher(keys as usize, Default::default());
        for k in 0..keys {
            map.insert(k, AtomicU64::new(0));
        }
        Self { map, read }
    }

    /// Clock + lookup + CAS (allow) or clock + lookup + load (reject).
    #[inline]
    pub fn decide(&self, key: u64, path: setup::Path) -> u64 {
        let w = self.map.get(&key).expect("every key exists");
        let now = (self.read)();
        let old = w.load(Ordering::Relaxed);
        if path == setup::Path::Reject {
            return old.wrapping_add(now);
        }
        match w.compare_exchange(old, old.max(now) + 1, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(v) | Err(v) => v,
        }
    }
}

/// Thread counts for the shared-bucket groups: 1, 2, 4, 8, 16 up to the available parallelism
/// (2 is always included, even on one core, so the 2-thread row exists everywhere).
pub fn thread_counts() -> Vec<usize> {
    let max = std::thread::available_parallelism().map_or(2, |n| n.get());
    [1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&n| n <= max.max(2))
        .collect()
}

/// xorshift64*: a few cycles a number, the same for every peer.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed (0 becomes 1).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next number.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A uniform number below `n` (multiply-shift, no division).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Resident memory of this process.
pub mod mem {
    use std::fs;

    /// The page size from the auxiliary vector (`AT_PAGESZ`); 4096 if it cannot be read.
    pub fn page_size() -> u64 {
        const AT_PAGESZ: u64 = 6;
        let Ok(auxv) = fs::read("/proc/self/auxv") else {
            return 4096;
        };
        auxv.chunks_exact(16)
            .map(|e| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                (word(&e[..8]), word(&e[8..]))
            })
            .find(|&(key, _)| key == AT_PAGESZ)
            .map_or(4096, |(_, v)| v)
    }

    /// Resident set size in bytes, from `/proc/self/statm` (its second field, in pages).
    pub fn rss_bytes() -> Option<u64> {
        let statm = fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * page_size())
    }

    /// Peak resident set size in bytes (`VmHWM` of `/proc/self/status`: statm has no peak).
    pub fn peak_rss_bytes() -> Option<u64> {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::setup::{self, Path};
    use super::*;

    #[test]
    fn every_subject_is_in_its_path() {
        for path in [Path::Allow, Path::Reject] {
            setup::ours(sluicegate::MonotonicClock::new(), path);
            setup::ours(sluicegate::StdClock::new(), path);
            setup::governor(path);
            let _ = setup::ratelimit(path);
            setup::mutex::<StdLock<_>>(path);
            setup::mutex::<PlLock<_>>(path);
            setup::governor_keyed(path, 100);
        }
        assert!(!setup::ours(sluicegate::MonotonicClock::new(), Path::Allow).is_wide());
    }

    #[test]
    fn floor_advances_and_threads_run() {
        let floor = Floor::new(quanta_reader());
        let a = floor.cas();
        assert!(floor.cas() > a);
        let d = run_threads(2, 1000, || {
            floor.cas();
        });
        assert!(d > Duration::ZERO);
        assert!(floor.cas() > a + 2000);
    }

    #[test]
    fn rng_stays_below() {
        let mut r = Rng::new(7);
        assert!((0..10_000).all(|_| r.below(10) < 10));
    }

    #[test]
    fn rss_is_read() {
        assert!(mem::rss_bytes().unwrap() > 0);
        assert!(mem::peak_rss_bytes().unwrap() >= mem::rss_bytes().unwrap() / 2);
        assert!(mem::page_size().is_power_of_two());
    }
}
