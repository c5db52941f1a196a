//! Quotas: what a limiter allows, built in code or parsed from a rate string.

mod parse;

use crate::error::{choose, Error};
use core::fmt;
use core::num::NonZeroU64;
use core::str::FromStr;
use std::time::Duration;

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_MIN: u64 = 60 * NS_PER_S;
const NS_PER_H: u64 = 60 * NS_PER_MIN;
const NS_PER_D: u64 = 24 * NS_PER_H;

/// How tokens come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Refill {
    /// Fractional tokens accrue continuously: `k/P` tokens per nanosecond (the default).
    #[default]
    Continuous,
    /// `k` whole tokens are added at each full period, on a grid anchored at the limiter's
    /// creation; partial periods are kept, never lost.
    Interval,
}

/// Which algorithm a limiter runs (every one answers with the same [`Decision`](crate::Decision);
/// `docs/SEMANTICS.md` gives each one's exact rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Token bucket (the default): `burst` tokens refilled at `count` per `period`
    /// (continuously, or in whole steps with [`Refill::Interval`]).
    #[default]
    TokenBucket,
    /// GCRA (leaky bucket as a meter): one theoretical-arrival-time word; exactly the
    /// admissions of the continuous token bucket.
    Gcra,
    /// `count` per window of length `period`, windows aligned to the clock's epoch.
    FixedWindow,
    /// Sliding window counter: the previous window's count weighted by the part of it the
    /// sliding window still covers, plus the current window's count, must stay within `count`.
    SlidingWindow,
    /// Sliding log: the cost admitted in the last `period` (each instant counted exactly)
    /// must stay within `count`. Keeps up to `count` timestamps per bucket.
    SlidingLog,
    /// Leaky bucket as a queue (a shaper): requests are admitted with a delay that spaces
    /// them at `count` per `period`, and rejected when the delay would exceed `max_delay`.
    LeakyQueue,
}

impl Algorithm {
    /// The name used in rate strings (`; algorithm=NAME`).
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::LeakyQueue => "leaky_queue",
        }
    }

    /// Every name [`FromStr`] accepts (canonical names first, then aliases).
    const NAMES: &'static [(&'static str, Algorithm)] = &[
        ("token_bucket", Algorithm::TokenBucket),
        ("gcra", Algorithm::Gcra),
        ("fixed_window", Algorithm::FixedWindow),
        ("sliding_window", Algorithm::SlidingWindow),
        ("sliding_log", Algorithm::SlidingLog),
        ("leaky_queue", Algorithm::LeakyQueue),
        ("bucket", Algorithm::TokenBucket),
        ("leaky_meter", Algorithm::Gcra),
        ("leaky_bucket_meter", Algorithm::Gcra),
        ("sliding_window_counter", Algorithm::SlidingWindow),
        ("leaky_bucket_queue", Algorithm::LeakyQueue),
        ("shaper", Algorithm::LeakyQueue),
    ];

    /// Whether the algorithm counts within windows (`burst`, `initial` and `refill` do not apply).
    pub const fn is_window(self) -> bool {
        matches!(
            self,
            Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::SlidingLog
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// A name as written in rate strings (ASCII case-insensitive; a few aliases), else
    /// [`Error::InvalidOption`].
    fn from_str(s: &str) -> Result<Self, Error> {
        choose("algorithm", s, Self::NAMES)
    }
}

impl Refill {
    /// The name used in rate strings (`; refill=NAME`).
    pub const fn name(self) -> &'static str {
        match self {
            Refill::Continuous => "continuous",
            Refill::Interval => "interval",
        }
    }
}

impl fmt::Display for Refill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Refill {
    type Err = Error;

    /// `"continuous"` or `"interval"` (ASCII case-insensitive), else [`Error::InvalidOption`].
    fn from_str(s: &str) -> Result<Self, Error> {
        choose(
            "refill",
            &s.to_ascii_lowercase(),
            &[
                ("continuous", Refill::Continuous),
                ("interval", Refill::Interval),
            ],
        )
    }
}

/// The most timestamps a sliding log keeps per bucket (its `count`): 8 bytes each.
pub const MAX_SLIDING_LOG: u64 = 1 << 20;

/// Every option of a quota at once, as the bindings receive them (keyword arguments, an
/// options object): [`build`](Self::build) sets them all, then validates once, so a window
/// algorithm's count is never checked as a token bucket's first.
///
/// ```
/// use sluicegate::{Algorithm, QuotaOptions};
/// let q = QuotaOptions {
///     count: 50,
///     period_ns: 60_000_000_000,
///     algorithm: Some(Algorithm::SlidingWindow),
///     ..QuotaOptions::default()
/// }
/// .build()?;
/// assert_eq!(q.to_string(), "50/m; algorithm=sliding_window");
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaOptions {
    /// Tokens per period (at least 1).
    pub count: u64,
    /// The period in nanoseconds (at least 1).
    pub period_ns: u64,
    /// The bucket's capacity (default: the count).
    pub burst: Option<u64>,
    /// Tokens at creation (default: the burst).
    pub initial: Option<u64>,
    /// The refill mode (default: continuous).
    pub refill: Option<Refill>,
    /// The algorithm (default: the token bucket).
    pub algorithm: Option<Algorithm>,
    /// A leaky queue's bound in nanoseconds (default: one period).
    pub max_delay_ns: Option<u64>,
}

impl QuotaOptions {
    /// The quota, or the core's error for the first invalid option (a zero count, period or
    /// burst first, as [`Quota::try_new`] names them).
    pub fn build(&self) -> Result<Quota, Error> {
        let burst = self.burst.unwrap_or(self.count);
        let q = Quota {
            count: self.count,
            period_ns: self.period_ns,
            burst,
            initial: self.initial,
            refill: self.refill.unwrap_or_default(),
            algorithm: self.algorithm.unwrap_or_default(),
            max_delay_ns: self.max_delay_ns,
        };
        q.validate()?;
        Ok(q)
    }
}

/// A rate limit: `count` tokens per `period`, a bucket of `burst` tokens holding `initial`
/// at creation, enforced by one [`Algorithm`] (default: the token bucket).
///
/// ```
/// use sluicegate::Quota;
/// use std::num::NonZeroU64;
/// let q = Quota::per_second(NonZeroU64::new(10).unwrap()).with_burst(NonZeroU64::new(50).unwrap());
/// assert_eq!(q, "10/s; burst=50".parse().unwrap());
/// assert_eq!(q.to_string(), "10/s; burst=50");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Quota {
    count: u64,
    period_ns: u64,
    burst: u64,
    initial: Option<u64>,
    refill: Refill,
    algorithm: Algorithm,
    max_delay_ns: Option<u64>,
}

impl Quota {
    /// `n` tokens per `period_ns` nanoseconds; burst `n`, starting full, continuous refill.
    pub const fn new(n: NonZeroU64, period_ns: NonZeroU64) -> Self {
        Self {
            count: n.get(),
            period_ns: period_ns.get(),
            burst: n.get(),
            initial: None,
            refill: Refill::Continuous,
            algorithm: Algorithm::TokenBucket,
            max_delay_ns: None,
        }
    }

    const fn per_unit(n: NonZeroU64, unit: u64) -> Self {
        Self {
            count: n.get(),
            period_ns: unit,
            burst: n.get(),
            initial: None,
            refill: Refill::Continuous,
            algorithm: Algorithm::TokenBucket,
            max_delay_ns: None,
        }
    }

    /// `n` per second.
    pub const fn per_second(n: NonZeroU64) -> Self {
        Self::per_unit(n, NS_PER_S)
    }
    /// `n` per minute.
    pub const fn per_minute(n: NonZeroU64) -> Self {
        Self::per_unit(n, NS_PER_MIN)
    }
    /// `n` per hour.
    pub const fn per_hour(n: NonZeroU64) -> Self {
        Self::per_unit(n, NS_PER_H)
    }
    /// `n` per day.
    pub const fn per_day(n: NonZeroU64) -> Self {
        Self::per_unit(n, NS_PER_D)
    }

    /// `n` per `period`; `None` if the period is zero or longer than `u64::MAX` nanoseconds.
    pub fn with_period(n: NonZeroU64, period: Duration) -> Option<Self> {
        let ns = u64::try_from(period.as_nanos()).ok()?;
        Some(Self::new(n, NonZeroU64::new(ns)?))
    }

    /// The validated constructor every binding uses: `count` per `period_ns`, burst `burst`.
    pub fn try_new(count: u64, period_ns: u64, burst: u64) -> Result<Self, Error> {
        let q = Self {
            count,
            period_ns,
            burst,
            initial: None,
            refill: Refill::Continuous,
            algorithm: Algorithm::TokenBucket,
            max_delay_ns: None,
        };
        q.validate()?;
        Ok(q)
    }

    /// The bucket's capacity: the largest burst admitted at once (default: the count).
    /// Read back with [`burst`](Self::burst).
    #[must_use]
    pub const fn with_burst(mut self, burst: NonZeroU64) -> Self {
        self.burst = burst.get();
        self
    }

    /// Tokens in the bucket when it is created (default: the burst). Checked by
    /// [`validate`](Self::validate); read back with [`initial`](Self::initial).
    #[must_use]
    pub const fn with_initial(mut self, tokens: u64) -> Self {
        self.initial = Some(tokens);
        self
    }

    /// The refill mode (default: continuous); read back with [`refill`](Self::refill).
    #[must_use]
    pub const fn with_refill(mut self, refill: Refill) -> Self {
        self.refill = refill;
        self
    }

    /// The algorithm that enforces the quota (default: the token bucket); read back with
    /// [`algorithm`](Self::algorithm).
    #[must_use]
    pub const fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The queue bound of [`Algorithm::LeakyQueue`]: the longest delay a request is admitted
    /// with (default: one period). Checked by [`validate`](Self::validate); saturates at
    /// `u64::MAX` nanoseconds; read back with [`max_delay`](Self::max_delay).
    #[must_use]
    pub fn with_max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay_ns = Some(u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// Tokens added per period.
    pub const fn count(&self) -> u64 {
        self.count
    }
    /// The refill period.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }
    /// The refill period in nanoseconds.
    pub const fn period_ns(&self) -> u64 {
        self.period_ns
    }
    /// The bucket's capacity: `limit` in every decision.
    pub const fn burst(&self) -> u64 {
        self.burst
    }
    /// Tokens in the bucket at creation.
    pub const fn initial(&self) -> u64 {
        match self.initial {
            Some(i) => i,
            None => self.burst,
        }
    }
    /// The refill mode.
    pub const fn refill(&self) -> Refill {
        self.refill
    }
    /// The algorithm that enforces the quota.
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// The leaky queue's bound (the period unless set).
    pub const fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.max_delay_ns())
    }
    /// The leaky queue's bound in nanoseconds (the period unless set).
    pub const fn max_delay_ns(&self) -> u64 {
        match self.max_delay_ns {
            Some(d) => d,
            None => self.period_ns,
        }
    }

    /// The most one request may cost: a request above it is `InsufficientCapacity`, which no
    /// wait admits. The burst; for the leaky queue, the requests its queue bound holds
    /// (`1 + max_delay * count / period`, whole requests). Errors as
    /// [`validate`](Self::validate) for an invalid quota.
    ///
    /// ```
    /// let q: sluicegate::Quota = "10/s; burst=50".parse()?;
    /// assert_eq!(q.max_cost()?, 50);
    /// let queue: sluicegate::Quota = "10/s; algorithm=leaky_queue; max_delay=2s".parse()?;
    /// assert_eq!(queue.max_cost()?, 21);
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn max_cost(&self) -> Result<u64, Error> {
        Ok(crate::algorithm::Codec::new(self, 0)?.capacity())
    }

    /// The policy window for the HTTP `RateLimit-Policy` field: the whole seconds an empty
    /// bucket takes to fill, `max(1, ceil(burst / rate))`.
    pub fn window_secs(&self) -> u64 {
        let fill_ns = u128::from(self.burst) * u128::from(self.period_ns);
        let secs = fill_ns.div_ceil(u128::from(self.count) * u128::from(NS_PER_S));
        u64::try_from(secs).unwrap_or(u64::MAX).max(1)
    }

    /// Checks every parameter, and that the quota's exact arithmetic cannot overflow.
    pub fn validate(&self) -> Result<(), Error> {
        if self.count == 0 {
            return Err(Error::invalid("the rate count must be at least 1"));
        }
        if self.period_ns == 0 {
            return Err(Error::invalid("the period must be at least 1 ns"));
        }
        if self.burst == 0 {
            return Err(Error::invalid("the burst (capacity) must be at least 1"));
        }
        if self.initial() > self.burst {
            return Err(Error::invalid(format!(
                "initial tokens {} exceed the burst {}",
                self.initial(),
                self.burst
            )));
        }
        self.validate_algorithm()?;
        // Continuous: a token is P/gcd(k,P) scaled units, and the bucket holds burst of them.
        // Interval: waits reach (burst/k + 2) periods. Both must stay below 2^63.
        let g = gcd(self.count, self.period_ns);
        let token_units = u128::from(self.period_ns / g);
        let limit = 1u128 << 63;
        let fits = match self.refill {
            _ if !matches!(self.algorithm, Algorithm::TokenBucket | Algorithm::Gcra) => true,
            Refill::Continuous => u128::from(self.burst) * token_units < limit,
            Refill::Interval => {
                (u128::from(self.burst / self.count) + 2) * u128::from(self.period_ns) < limit
            }
        };
        if !fits {
            // The bound is on the burst in the state's units (a token is P/gcd(k,P) of them),
            // which is a time only when gcd(k,P) is 1 time per token: say which it is.
            let fill_ns =
                u128::from(self.burst) * u128::from(self.period_ns) / u128::from(self.count);
            if matches!(self.refill, Refill::Interval) || fill_ns >= limit {
                return Err(Error::invalid(format!(
                    "{self}: burst x time per token is too large to compute exactly \
                     (the bucket would take over 292 years to fill)"
                )));
            }
            let most = (limit - 1) / token_units;
            if most == 0 {
                return Err(Error::invalid(format!(
                    "{self}: no burst can be counted exactly at this rate (a token is period / \
                     gcd(count, period) = {token_units} units, and a bucket must hold less \
                     than 2^63 of them): give a count that divides the period, or a shorter \
                     period"
                )));
            }
            return Err(Error::invalid(format!(
                "{self}: the burst is too large to count exactly at this rate (burst x \
                 period / gcd(count, period) must stay below 2^63: {} x {token_units}); \
                 give a burst of at most {most}",
                self.burst
            )));
        }
        Ok(())
    }
}

impl Quota {
    /// What a quota means, for equality: an explicit `initial` equal to the burst is the
    /// same quota as none (found by the `rate_string` fuzz target).
    fn meaning(&self) -> (u64, u64, u64, u64, Refill, Algorithm, u64) {
        (
            self.count,
            self.period_ns,
            self.burst,
            self.initial(),
            self.refill,
            self.algorithm,
            self.max_delay_ns(),
        )
    }
}

impl PartialEq for Quota {
    fn eq(&self, other: &Self) -> bool {
        self.meaning() == other.meaning()
    }
}

impl Eq for Quota {}

impl core::hash::Hash for Quota {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.meaning().hash(state);
    }
}

impl Quota {
    /// The options each algorithm accepts, and its own arithmetic bounds.
    fn validate_algorithm(&self) -> Result<(), Error> {
        let name = self.algorithm.name();
        if self.max_delay_ns.is_some() && self.algorithm != Algorithm::LeakyQueue {
            return Err(Error::invalid(format!(
                "max_delay applies to leaky_queue only, not {name}"
            )));
        }
        if self.algorithm == Algorithm::TokenBucket {
            return Ok(());
        }
        if self.refill != Refill::Continuous {
            return Err(Error::invalid(format!(
                "refill=interval applies to the token bucket only, not {name}"
            )));
        }
        if self.algorithm.is_window() || self.algorithm == Algorithm::LeakyQueue {
            if self.burst != self.count {
                return Err(Error::invalid(format!(
                    "{name} takes no burst: its limit is the count {}",
                    self.count
                )));
            }
            if self.initial.is_some_and(|i| i != self.burst) {
                return Err(Error::invalid(format!("{name} takes no initial")));
            }
        }
        let limit = 1u128 << 62;
        if self.algorithm.is_window() && u128::from(self.period_ns) >= limit {
            return Err(Error::invalid(format!(
                "{name}: the window must be shorter than 2^62 ns"
            )));
        }
        match self.algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow
                if u128::from(self.count) >= limit =>
            {
                Err(Error::invalid(format!(
                    "{name}: the count must be below 2^62"
                )))
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow
                if crate::algorithm::window_horizon(self) < crate::algorithm::CENTURY_NS =>
            {
                Err(Error::invalid(format!(
                    "{self}: the limit is too large to pack with a century of window indexes"
                )))
            }
            Algorithm::SlidingLog if self.count > MAX_SLIDING_LOG => Err(Error::invalid(format!(
                "sliding_log keeps one timestamp per unit of count: at most {MAX_SLIDING_LOG}"
            ))),
            Algorithm::LeakyQueue => {
                // Scaled units are ns * k / g; the bound D and one request of the queue's
                // capacity must stay below 2^62 of them.
                let g = gcd(self.count, self.period_ns);
                let (k, p) = (u128::from(self.count / g), u128::from(self.period_ns / g));
                let dk = u128::from(self.max_delay_ns()) * k;
                if dk + p >= limit {
                    // The longest bound that fits at this rate, if any.
                    let most = match (limit - 1).checked_sub(p) {
                        Some(room) => {
                            let ns = room / k;
                            if ns >= 1_000_000_000 {
                                format!(
                                    ": at this rate max_delay is at most {}s",
                                    ns / 1_000_000_000
                                )
                            } else {
                                format!(": at this rate max_delay is at most {ns}ns")
                            }
                        }
                        None => String::new(),
                    };
                    return Err(Error::invalid(format!(
                        "{self}: max_delay x rate is too large to compute exactly{most}"
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

pub(crate) const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}
