//! The CLI's one door into the core: every use of the `sluicegate` crate's API is in this
//! module, so that a rename in the core is a change to this file alone.
//!
//! Every decision a replay or a simulation reports comes from the core engine: a
//! [`KeyedBucket`] (the core's `KeyedLimiter`) per per-key policy, a [`Bucket`] (the core's
//! `Limiter`) per global policy, and composites through `sluicegate::composite`. Time is the
//! core's `ManualClock`, set from each request's timestamp before the decision, which is
//! taken at that same instant.

use sluicegate::{
    Algorithm, Clock as _, Decision, DenseLimiter, Error, KeyedLimiter, Limiter, ManualClock,
    Quota, Refill,
};
use std::fmt;

const S: u64 = 1_000_000_000;

/// A parsed rate string (the core's `Quota`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate(Quota);

impl Rate {
    /// Parses a rate string and validates it; the error quotes the input.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let q: Quota = text.parse().map_err(|e: Error| e.to_string())?;
        q.validate().map_err(|e| format!("{text:?}: {e}"))?;
        Ok(Rate(q))
    }

    /// Tokens per period.
    pub fn count(&self) -> u64 {
        self.0.count()
    }

    /// The period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.0.period_ns()
    }

    /// The capacity: the largest cost ever admitted (`limit` of every decision).
    pub fn burst(&self) -> u64 {
        self.0.burst()
    }

    /// The algorithm's name as rate strings spell it.
    pub fn algorithm(&self) -> &'static str {
        self.0.algorithm().name()
    }

    /// Tokens per second, for display.
    pub fn per_second(&self) -> f64 {
        self.0.count() as f64 * S as f64 / self.0.period_ns() as f64
    }

    /// One line in words: rate, burst, initial tokens, refill, algorithm.
    pub fn describe(&self) -> String {
        let q = &self.0;
        let algo = q.algorithm();
        let mut s = format!("{q}: {:.3} tokens/s", self.per_second());
        match algo {
            Algorithm::TokenBucket | Algorithm::Gcra => {
                s += &format!(
                    ", burst {}, starts with {}, {} refill",
                    q.burst(),
                    q.initial(),
                    match q.refill() {
                        Refill::Continuous => "continuous",
                        Refill::Interval => "interval",
                    }
                );
            }
            Algorithm::LeakyQueue => {
                s += &format!(
                    ", queue bound {} ns (limit {} at once)",
                    q.max_delay_ns(),
                    1 + u128::from(q.max_delay_ns()) * u128::from(q.count())
                        / u128::from(q.period_ns())
                );
            }
            _ => s += &format!(", limit {} per window", q.count()),
        }
        if algo != Algorithm::TokenBucket {
            s += &format!(", algorithm {}", algo.name());
        }
        s + &format!("; RateLimit-Policy window {}s", q.window_secs())
    }

    /// Whether the exact state needs the core's 128-bit word.
    pub fn is_wide(&self) -> Result<bool, String> {
        let l = Limiter::with_clock(self.0, ManualClock::new(0)).map_err(|e| e.to_string())?;
        Ok(l.is_wide())
    }
}

impl fmt::Display for Rate {
    /// The canonical rate string (parses back to an equal rate).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The replay's clock: the core's `ManualClock`, set to each request's timestamp.
#[derive(Clone, Debug)]
pub struct Clock(ManualClock);

impl Clock {
    /// A clock reading `start` ns (limiters built now are created at `start`).
    pub fn new(start: u64) -> Self {
        Clock(ManualClock::new(start))
    }

    /// Sets the reading (it may go backwards: the core clamps).
    #[inline]
    pub fn set(&self, t: u64) {
        self.0.set(t);
    }
}

/// One decision (the core's `Decision`); its figures are computed only when read.
#[derive(Clone, Copy, Debug)]
pub struct Verdict(Decision);

impl Verdict {
    /// Admitted.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.0.allowed()
    }
    /// Whole tokens left after the decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.0.remaining()
    }
    /// The capacity.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.0.limit()
    }
    /// Nanoseconds until the same request would be admitted (rejections); the wait before
    /// going ahead (leaky-queue admissions); else 0.
    #[inline]
    pub fn retry_ns(&self) -> u64 {
        self.0.retry_after_nanos()
    }
}

/// Why a request got no decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The cost exceeds the capacity: it can never be admitted (counted as a rejection).
    OverCapacity { cost: u64, capacity: u64 },
    /// The timestamp is past what the quota's exact arithmetic covers (a century on).
    ClockOutOfRange { now: u64 },
    /// The key bound was reached (the replay's `--max-keys`).
    KeyStoreFull { max_keys: usize },
    /// Anything else the core reports.
    Other(String),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        match e {
            Error::InsufficientCapacity { cost, capacity } => {
                Refusal::OverCapacity { cost, capacity }
            }
            Error::ClockOutOfRange { now, .. } => Refusal::ClockOutOfRange { now },
            Error::KeyStoreFull { max_keys } => Refusal::KeyStoreFull { max_keys },
            e => Refusal::Other(e.to_string()),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::OverCapacity { cost, capacity } => {
                write!(f, "cost {cost} exceeds the capacity {capacity}")
            }
            Refusal::ClockOutOfRange { now } => {
                write!(
                    f,
                    "timestamp {now} ns is past the range the quota covers exactly"
                )
            }
            Refusal::KeyStoreFull { max_keys } => {
                write!(f, "more than {max_keys} distinct keys (raise --max-keys)")
            }
            Refusal::Other(s) => f.write_str(s),
        }
    }
}

/// One bucket per key (the core's `KeyedLimiter`), keys being the replay's interned ids.
pub struct KeyedBucket(KeyedLimiter<u32, ManualClock>);

impl KeyedBucket {
    /// A keyed limiter on `clock`, created at the clock's reading, holding at most `max_keys`.
    /// Its tables keep full buckets until the bound (`sweep_on_grow(false)`): a replay's
    /// keys come back, and a bucket evicted when full would be re-inserted under the shard's
    /// lock at the key's next request. No decision differs (that eviction is lossless); the
    /// store's memory follows the replay's keys, as the interner's does.
    pub fn new(rate: &Rate, clock: &Clock, max_keys: usize) -> Result<Self, String> {
        KeyedLimiter::builder(rate.0)
            .max_keys(max_keys)
            .sweep_on_grow(false)
            .clock(clock.0.clone())
            .build()
            .map(KeyedBucket)
            .map_err(|e| e.to_string())
    }

    /// `cost` from `key`'s bucket at `t`.
    #[inline]
    pub fn acquire(&self, key: u32, t: u64, cost: u64) -> Result<Verdict, Refusal> {
        match self.0.try_acquire_at(&key, t, cost) {
            Ok(d) => Ok(Verdict(d)),
            Err(e) => Err(e.into()),
        }
    }

    /// Asks the cache for what a decision on `key` reads first (the core's
    /// `KeyedLimiter::prefetch`: a hint, no effect on any decision).
    #[inline]
    pub fn prefetch(&self, key: u32) {
        self.0.prefetch(&key);
    }

    /// `key`'s bucket at `t`, changing nothing.
    pub fn peek(&self, key: u32, t: u64) -> Result<Verdict, Refusal> {
        Ok(Verdict(self.0.peek_at(&key, t)?))
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// One bucket per key in an array indexed by the key's id (the core's `DenseLimiter`): the
/// decisions of a [`KeyedBucket`] on the same rate built at the same instant, with no hash
/// table between the id and its bucket and no locked insert for a new key. It never evicts:
/// a new key past `max_keys` buckets is refused (`KeyStoreFull`) where a `KeyedBucket` would
/// first evict full buckets, so a replay that meets its bound starts over on `KeyedBucket`s.
pub struct DenseBucket(DenseLimiter);

impl DenseBucket {
    /// Created at the clock's reading, holding at most `max_keys` buckets.
    pub fn new(rate: &Rate, clock: &Clock, max_keys: usize) -> Result<Self, String> {
        DenseLimiter::new(rate.0, clock.0.now(), max_keys)
            .map(DenseBucket)
            .map_err(|e| e.to_string())
    }

    /// `cost` from `key`'s bucket at `t`.
    #[inline]
    pub fn acquire(&mut self, key: u32, t: u64, cost: u64) -> Result<Verdict, Refusal> {
        match self.0.try_acquire_at(key as usize, t, cost) {
            Ok(d) => Ok(Verdict(d)),
            Err(e) => Err(e.into()),
        }
    }

    /// Asks the cache for `key`'s bucket (a hint, no effect on any decision).
    #[inline]
    pub fn prefetch(&self, key: u32) {
        self.0.prefetch(key as usize);
    }

    /// `key`'s bucket at `t`, changing nothing.
    pub fn peek(&self, key: u32, t: u64) -> Result<Verdict, Refusal> {
        Ok(Verdict(self.0.peek_at(key as usize, t)?))
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// One bucket (the core's `Limiter`): a global policy, or one part of a composite.
pub struct Bucket(Limiter<ManualClock>);

impl Bucket {
    /// A bucket created at the clock's reading now.
    pub fn new(rate: &Rate, clock: &Clock) -> Result<Self, String> {
        Limiter::with_clock(rate.0, clock.0.clone())
            .map(Bucket)
            .map_err(|e| e.to_string())
    }

    /// `cost` at `t`.
    #[inline]
    pub fn acquire(&self, t: u64, cost: u64) -> Result<Verdict, Refusal> {
        Ok(Verdict(self.0.try_acquire_at(t, cost)?))
    }

    /// The bucket at `t`, changing nothing.
    pub fn peek(&self, t: u64) -> Result<Verdict, Refusal> {
        Ok(Verdict(self.0.try_acquire_at(t, 0)?))
    }
}

/// The most parts a composite policy may have.
pub const MAX_PARTS: usize = 8;

/// `cost` from every bucket at `t`, or from none: `sluicegate::composite::try_acquire_all_at`.
/// `parts` holds at least one and at most [`MAX_PARTS`] buckets.
#[inline]
pub fn acquire_all(parts: &[&Bucket], t: u64, cost: u64) -> Result<Verdict, Refusal> {
    let mut refs: [&Limiter<ManualClock>; MAX_PARTS] = [&parts[0].0; MAX_PARTS];
    for (slot, b) in refs.iter_mut().zip(parts) {
        *slot = &b.0;
    }
    let d = sluicegate::composite::try_acquire_all_at(&refs[..parts.len()], t, cost)?;
    Ok(Verdict(d))
}

/// The composite's state at `t` (a peek of every part, read as the core combines them).
pub fn peek_all(parts: &[&Bucket], t: u64) -> Result<Verdict, Refusal> {
    acquire_all(parts, t, 0)
}
