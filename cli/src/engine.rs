//! The CLI's one door into the core: every use of the `sluicegate` crate's API is in this
//! module, so that a rename in the core is a change to this file alone.
//!
//! Every decision a replay or a simulation reports comes from the core engine: a
//! [`KeyedBucket`] (the core's `KeyedLimiter`) per per-key policy, a [`Bucket`] (the core's
//! `Limiter`) per global policy, and composites by the protocol of `sluicegate::composite` on
//! those same stores (see [`acquire_all`]). Time is the core's `ManualClock`, set from each
//! request's timestamp before the decision, which is taken at that same instant.

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
        // Three significant figures at least: 1/h is 0.000278 tokens/s, not 0.000.
        let r = self.per_second();
        let places = if r >= 1.0 || r == 0.0 {
            3
        } else {
            (2 - r.log10().floor() as i32).clamp(3, 12) as usize
        };
        // A window counts requests (of cost 1; a cost counts as that many) per window, and a
        // queue lets them go at its rate: only the bucket algorithms hold tokens.
        let mut s = match algo {
            Algorithm::TokenBucket | Algorithm::Gcra => format!("{q}: {r:.places$} tokens/s"),
            Algorithm::LeakyQueue => format!("{q}: {r:.places$} requests/s"),
            _ => format!(
                "{q}: {} {} per {} window ({r:.places$}/s on average)",
                q.count(),
                if q.count() == 1 {
                    "request"
                } else {
                    "requests"
                },
                exact_duration(q.period_ns())
            ),
        };
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
                    ", queue bound {} (limit {} at once)",
                    exact_duration(q.max_delay_ns()),
                    1 + u128::from(q.max_delay_ns()) * u128::from(q.count())
                        / u128::from(q.period_ns())
                );
            }
            _ => {}
        }
        if algo != Algorithm::TokenBucket {
            s += &format!(", algorithm {}", algo.name());
        }
        s + &format!("; RateLimit-Policy window {}s", q.window_secs())
    }

    /// What a bucket's state is, in words: the core's one atomic word (64 or 128 bits), or,
    /// for the sliding log, which has none, its timestamps behind a lock.
    pub fn state(&self) -> Result<String, String> {
        Ok(match self.state_bits()? {
            Some(bits) => format!("state word: {bits} bits"),
            None => format!(
                "state: a log of up to {} admission timestamps per bucket, behind a lock (no one-word state)",
                self.0.count()
            ),
        })
    }

    /// The bits of a bucket's state word, or `None` for the sliding log (no one word: its
    /// timestamps behind a lock, docs/SEMANTICS.md).
    pub fn state_bits(&self) -> Result<Option<u64>, String> {
        let wide = self.is_wide()?;
        Ok((self.0.algorithm() != Algorithm::SlidingLog).then_some(if wide { 128 } else { 64 }))
    }

    /// Whether the exact state needs the core's 128-bit word.
    pub fn is_wide(&self) -> Result<bool, String> {
        let l = Limiter::with_clock(self.0, ManualClock::new(0)).map_err(|e| e.to_string())?;
        Ok(l.is_wide())
    }
}

/// A duration in the largest unit that holds it whole (`2s`, `1500ms`, `90m`), as a rate
/// string writes it: exact, and readable where a count of nanoseconds is not.
fn exact_duration(ns: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let (per, unit) = UNITS
        .iter()
        .find(|(per, _)| ns > 0 && ns % per == 0)
        .copied()
        .unwrap_or((1, "ns"));
    format!("{}{unit}", ns / per)
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

/// One decision (the core's `Decision`, or a composite's, combined as the core combines its
/// parts'); a single decision's figures are computed only when read.
#[derive(Clone, Copy, Debug)]
pub struct Verdict(V);

#[derive(Clone, Copy, Debug)]
enum V {
    One(Decision),
    /// A composite's: admitted by every part or by none; the tightest part's (least
    /// remaining) limit and level, and the longest wait of any part.
    All {
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry: u64,
    },
}

impl Verdict {
    /// Admitted.
    #[inline]
    pub fn allowed(&self) -> bool {
        match self.0 {
            V::One(d) => d.allowed(),
            V::All { allowed, .. } => allowed,
        }
    }
    /// Whole tokens left after the decision.
    #[inline]
    pub fn remaining(&self) -> u64 {
        match self.0 {
            V::One(d) => d.remaining(),
            V::All { remaining, .. } => remaining,
        }
    }
    /// The capacity.
    #[inline]
    pub fn limit(&self) -> u64 {
        match self.0 {
            V::One(d) => d.limit(),
            V::All { limit, .. } => limit,
        }
    }
    /// Nanoseconds until the same request would be admitted (rejections); the wait before
    /// going ahead (leaky-queue admissions); else 0.
    #[inline]
    pub fn retry_ns(&self) -> u64 {
        match self.0 {
            V::One(d) => d.retry_after_nanos(),
            V::All { retry, .. } => retry,
        }
    }
}

/// The core's combination of a composite's parts (`sluicegate::composite`): the tightest
/// part (the first with the least remaining) gives limit and level, the longest wait stands.
#[derive(Default)]
struct Combined {
    tightest: Option<(u64, u64)>,
    retry: u64,
}

impl Combined {
    fn add(&mut self, v: Verdict) {
        let r = v.remaining();
        if self.tightest.is_none_or(|(_, t)| r < t) {
            self.tightest = Some((v.limit(), r));
        }
        self.retry = self.retry.max(v.retry_ns());
    }

    fn finish(self, allowed: bool) -> Verdict {
        let (limit, remaining) = self.tightest.unwrap_or((0, 0));
        Verdict(V::All {
            allowed,
            limit,
            remaining,
            retry: self.retry,
        })
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
            Ok(d) => Ok(Verdict(V::One(d))),
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
        Ok(Verdict(V::One(self.0.peek_at(&key, t)?)))
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
            Ok(d) => Ok(Verdict(V::One(d))),
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
        Ok(Verdict(V::One(self.0.peek_at(key as usize, t)?)))
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
        Ok(Verdict(V::One(self.0.try_acquire_at(t, cost)?)))
    }

    /// The bucket at `t`, changing nothing.
    pub fn peek(&self, t: u64) -> Result<Verdict, Refusal> {
        Ok(Verdict(V::One(self.0.try_acquire_at(t, 0)?)))
    }
}

/// The most parts a composite policy may have.
pub const MAX_PARTS: usize = 8;

/// The last reading the quota's exact arithmetic covers for a limiter created at `origin`
/// (every store of the quota created then covers the same readings): `u64::MAX` if all.
pub fn last_reading(rate: &Rate, origin: u64) -> u64 {
    // A probe of its own: a peek changes nothing, and readings past the range are refused
    // whatever the bucket's state.
    let Ok(probe) = Limiter::with_clock(rate.0, ManualClock::new(origin)) else {
        return u64::MAX;
    };
    let ok = |t: u64| {
        probe.clock().set(t);
        !matches!(probe.peek(), Err(Error::ClockOutOfRange { .. }))
    };
    if ok(u64::MAX) {
        return u64::MAX;
    }
    // ok(lo), !ok(hi).
    let (mut lo, mut hi) = (origin, u64::MAX);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The largest cost the quota ever admits (requests above it are refused, `OverCapacity`).
pub fn capacity(rate: &Rate, origin: u64) -> u64 {
    let Ok(probe) = Limiter::with_clock(rate.0, ManualClock::new(origin)) else {
        return u64::MAX;
    };
    match probe.try_acquire_at(origin, u64::MAX) {
        Err(Error::InsufficientCapacity { capacity, .. }) => capacity,
        _ => u64::MAX,
    }
}

/// One part of a composite: one bucket for every key (a global part), or one per key, in
/// the same stores as a single per-key rule's, created at the replay's start (so that an
/// interval refill runs on the same grid as the single rule's).
pub enum Part {
    Global(Box<Bucket>),
    Dense(DenseBucket),
    Keyed(Box<KeyedBucket>),
}

impl Part {
    #[inline]
    fn acquire(&mut self, key: u32, t: u64, cost: u64) -> Result<Verdict, Refusal> {
        match self {
            Part::Global(b) => b.acquire(t, cost),
            Part::Dense(d) => d.acquire(key, t, cost),
            Part::Keyed(k) => k.acquire(key, t, cost),
        }
    }

    #[inline]
    fn refund(&mut self, key: u32, t: u64, cost: u64) -> Result<(), Refusal> {
        match self {
            Part::Global(b) => Ok(b.0.refund_at(t, cost)?),
            Part::Dense(d) => Ok(d.0.refund_at(key as usize, t, cost)?),
            Part::Keyed(k) => Ok(k.0.refund_at(&key, t, cost)?),
        }
    }

    fn peek(&self, key: u32, t: u64) -> Result<Verdict, Refusal> {
        match self {
            Part::Global(b) => b.peek(t),
            Part::Dense(d) => d.peek(key, t),
            Part::Keyed(k) => k.peek(key, t),
        }
    }

    /// Keys held (a global part: none).
    pub fn len(&self) -> usize {
        match self {
            Part::Global(_) => 0,
            Part::Dense(d) => d.len(),
            Part::Keyed(k) => k.len(),
        }
    }
}

/// `cost` from every part at `t` for `key`, or from none: the protocol of
/// `sluicegate::composite::try_acquire_all_at`, on the parts' own stores. Every part's
/// capacity (`caps`) is checked first, so a request above one is refused (`OverCapacity`)
/// before any part (or any key's bucket) is touched; the parts are then taken in order, and
/// on the first rejection the parts taken get their cost back. A rejection's figures are
/// read as the core reads them: the parts before it at level (cost 0), the parts after it
/// as `cost` would find them (taken, and given back when admitted). The reading must be in
/// every part's range (the replay checks it first).
pub fn acquire_all(
    parts: &mut [Part],
    caps: &[u64],
    key: u32,
    t: u64,
    cost: u64,
) -> Result<Verdict, Refusal> {
    if let Some(&capacity) = caps.iter().find(|&&c| cost > c) {
        return Err(Refusal::OverCapacity { cost, capacity });
    }
    let mut acc = Combined::default();
    for j in 0..parts.len() {
        let v = match parts[j].acquire(key, t, cost) {
            Ok(v) => v,
            Err(e) => {
                for p in parts[..j].iter_mut() {
                    let _ = p.refund(key, t, cost);
                }
                return Err(e);
            }
        };
        if v.allowed() {
            acc.add(v);
            continue;
        }
        for p in parts[..j].iter_mut() {
            p.refund(key, t, cost)?;
        }
        let mut acc = Combined::default();
        for p in parts[..j].iter() {
            acc.add(p.peek(key, t)?);
        }
        acc.add(v);
        for p in parts[j + 1..].iter_mut() {
            let w = p.acquire(key, t, cost)?;
            if w.allowed() {
                p.refund(key, t, cost)?;
            }
            acc.add(w);
        }
        return Ok(acc.finish(false));
    }
    Ok(acc.finish(true))
}

/// The composite's state at `t` for `key` (every part's level, combined), changing nothing.
pub fn peek_all(parts: &[Part], key: u32, t: u64) -> Result<Verdict, Refusal> {
    let mut acc = Combined::default();
    for p in parts {
        acc.add(p.peek(key, t)?);
    }
    Ok(acc.finish(true))
}
