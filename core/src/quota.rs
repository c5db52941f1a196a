//! Quotas: what a limiter allows, built in code or parsed from a rate string.

use crate::error::Error;
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

    /// Parses a name as written in rate strings (case-insensitive; a few aliases).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "token_bucket" | "bucket" => Algorithm::TokenBucket,
            "gcra" | "leaky_meter" | "leaky_bucket_meter" => Algorithm::Gcra,
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" | "sliding_window_counter" => Algorithm::SlidingWindow,
            "sliding_log" => Algorithm::SlidingLog,
            "leaky_queue" | "leaky_bucket_queue" | "shaper" => Algorithm::LeakyQueue,
            _ => return None,
        })
    }

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

/// The most timestamps a sliding log keeps per bucket (its `count`): 8 bytes each.
pub const MAX_SLIDING_LOG: u64 = 1 << 20;

/// A rate limit: `count` tokens per `period`, a bucket of `burst` tokens holding `initial`
/// at creation, enforced by one [`Algorithm`] (default: the token bucket).
///
/// ```
/// use sluicegate::Quota;
/// use std::num::NonZeroU64;
/// let q = Quota::per_second(NonZeroU64::new(10).unwrap()).burst(NonZeroU64::new(50).unwrap());
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

    /// The bucket's capacity: the largest burst admitted at once.
    #[must_use]
    pub const fn burst(mut self, burst: NonZeroU64) -> Self {
        self.burst = burst.get();
        self
    }

    /// Tokens in the bucket when it is created (default: `burst`). Checked by [`validate`](Self::validate).
    #[must_use]
    pub const fn initial(mut self, tokens: u64) -> Self {
        self.initial = Some(tokens);
        self
    }

    /// The refill mode (default: continuous).
    #[must_use]
    pub const fn refill(mut self, refill: Refill) -> Self {
        self.refill = refill;
        self
    }

    /// Shorthand for `refill(Refill::Interval)`.
    #[must_use]
    pub const fn interval(self) -> Self {
        self.refill(Refill::Interval)
    }

    /// The algorithm that enforces the quota (default: the token bucket).
    #[must_use]
    pub const fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The queue bound of [`Algorithm::LeakyQueue`]: the longest delay a request is admitted
    /// with (default: one period). Checked by [`validate`](Self::validate); saturates at
    /// `u64::MAX` nanoseconds.
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay_ns = Some(u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// The configured algorithm.
    pub const fn algorithm_kind(&self) -> Algorithm {
        self.algorithm
    }

    /// The leaky queue's bound in nanoseconds (the period unless set).
    pub const fn max_delay_ns(&self) -> u64 {
        match self.max_delay_ns {
            Some(d) => d,
            None => self.period_ns,
        }
    }

    /// Tokens added per period.
    pub const fn count(&self) -> u64 {
        self.count
    }
    /// The refill period in nanoseconds.
    pub const fn period_ns(&self) -> u64 {
        self.period_ns
    }
    /// The refill period.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }
    /// The bucket's capacity (`limit` in every decision).
    pub const fn capacity(&self) -> u64 {
        self.burst
    }
    /// Tokens at creation.
    pub const fn initial_tokens(&self) -> u64 {
        match self.initial {
            Some(i) => i,
            None => self.burst,
        }
    }
    /// The refill mode.
    pub const fn refill_mode(&self) -> Refill {
        self.refill
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
        if self.initial_tokens() > self.burst {
            return Err(Error::invalid(format!(
                "initial tokens {} exceed the burst {}",
                self.initial_tokens(),
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
            return Err(Error::invalid(format!(
                "{self}: burst x time per token is too large to compute exactly \
                 (the bucket would take over 292 years to fill)"
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
            self.initial_tokens(),
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
                    return Err(Error::invalid(format!(
                        "{self}: max_delay x rate is too large to compute exactly"
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

/// The largest unit that divides `ns` exactly (`ns` for zero).
fn best_unit(ns: u64) -> (u64, &'static str) {
    let units = [
        (NS_PER_D, "d"),
        (NS_PER_H, "h"),
        (NS_PER_MIN, "m"),
        (NS_PER_S, "s"),
        (NS_PER_MS, "ms"),
        (NS_PER_US, "us"),
    ];
    units
        .iter()
        .copied()
        .find(|(u, _)| ns != 0 && ns % u == 0)
        .unwrap_or((1, "ns"))
}

impl fmt::Display for Quota {
    /// The canonical rate string; [`FromStr`] parses it back to an equal quota.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit_ns, unit) = best_unit(self.period_ns);
        let n = self.period_ns / unit_ns;
        if n == 1 {
            write!(f, "{}/{}", self.count, unit)?;
        } else {
            write!(f, "{}/{}{}", self.count, n, unit)?;
        }
        if self.burst != self.count {
            write!(f, "; burst={}", self.burst)?;
        }
        if let Some(i) = self.initial {
            if i != self.burst {
                write!(f, "; initial={i}")?;
            }
        }
        if self.refill == Refill::Interval {
            write!(f, "; refill=interval")?;
        }
        if self.algorithm != Algorithm::TokenBucket {
            write!(f, "; algorithm={}", self.algorithm)?;
        }
        if let Some(d) = self.max_delay_ns {
            let (unit_ns, unit) = best_unit(d);
            write!(f, "; max_delay={}{}", d / unit_ns, unit)?;
        }
        Ok(())
    }
}

/// A tiny cursor over the (lower-cased) input that remembers byte offsets for errors.
struct Cursor<'a> {
    input: &'a str,
    lower: String,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            input,
            lower: input.to_ascii_lowercase(),
            pos: 0,
        }
    }

    fn rest(&self) -> &str {
        &self.lower[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.pos == self.lower.len()
    }

    fn error(&self, at: usize, len: usize, reason: impl Into<String>) -> Error {
        let end = (at + len).min(self.input.len());
        let fragment = if at >= self.input.len() {
            String::from("end of input")
        } else {
            self.input[at..end].to_string()
        };
        Error::Parse {
            input: self.input.to_string(),
            offset: at,
            fragment,
            reason: reason.into(),
        }
    }

    /// The next token: a run of ASCII digits, a run of letters, or one other character.
    fn peek_token(&mut self) -> (usize, usize) {
        self.skip_ws();
        let rest = self.rest();
        let mut chars = rest.char_indices();
        let len = match chars.next() {
            None => 0,
            Some((_, c)) if c.is_ascii_digit() => rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len()),
            Some((_, c)) if c.is_ascii_alphabetic() || c == '_' => rest
                .find(|c: char| !(c.is_ascii_alphabetic() || c == '_'))
                .unwrap_or(rest.len()),
            Some((_, c)) => c.len_utf8(),
        };
        (self.pos, len)
    }

    fn take_token(&mut self) -> (usize, String) {
        let (at, len) = self.peek_token();
        self.pos = at + len;
        (at, self.lower[at..at + len].to_string())
    }

    fn number(&mut self, what: &str) -> Result<u64, Error> {
        let (at, tok) = self.take_token();
        if tok.is_empty() {
            return Err(self.error(at, 0, format!("expected {what}")));
        }
        if !tok.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(at, tok.len(), format!("expected {what} (a whole number)")));
        }
        let len = tok.len();
        let value = tok
            .parse::<u64>()
            .map_err(|_| self.error(at, len, format!("{what} is too large")))?;
        if self.rest().starts_with('.') {
            return Err(self.error(at, len + 1, format!("{what} must be a whole number")));
        }
        Ok(value)
    }
}

fn unit_ns(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" => NS_PER_US,
        "ms" => NS_PER_MS,
        "s" | "sec" | "second" | "seconds" => NS_PER_S,
        "m" | "min" | "minute" | "minutes" => NS_PER_MIN,
        "h" | "hr" | "hour" | "hours" => NS_PER_H,
        "d" | "day" | "days" => NS_PER_D,
        _ => return None,
    })
}

impl FromStr for Quota {
    type Err = Error;

    /// Parses `COUNT (/|per) [N] UNIT (; burst=B | ; initial=I | ; refill=continuous|interval)*`.
    fn from_str(input: &str) -> Result<Self, Error> {
        let mut c = Cursor::new(input);
        if c.at_end() {
            return Err(c.error(0, 0, "empty rate: expected COUNT/UNIT, e.g. \"10/s\""));
        }
        let count = c.number("a count")?;
        let (at, sep) = c.take_token();
        if sep != "/" && sep != "per" {
            let len = sep.len();
            return Err(c.error(at, len, "expected \"/\" or \"per\""));
        }
        let (at, len) = c.peek_token();
        let mut multiple = 1u64;
        if c.lower[at..at + len]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
        {
            multiple = c.number("a period multiple")?;
        }
        let (uat, unit) = c.take_token();
        let Some(per) = unit_ns(&unit) else {
            let len = unit.len().max(1);
            return Err(c.error(
                uat,
                len,
                "unknown time unit (ns, us, ms, s, sec, second(s), m, min, minute(s), h, hr, \
                 hour(s), d, day(s))",
            ));
        };
        let Some(period_ns) = multiple.checked_mul(per) else {
            return Err(c.error(at, uat + unit.len() - at, "the period is too long"));
        };
        let mut q = Quota {
            count,
            period_ns,
            burst: count,
            initial: None,
            refill: Refill::Continuous,
            algorithm: Algorithm::TokenBucket,
            max_delay_ns: None,
        };
        let mut seen = [false; 5];
        while !c.at_end() {
            let (at, sep) = c.take_token();
            if sep != ";" && sep != "," {
                let len = c.rest().len() + sep.len();
                return Err(c.error(at, len, "unexpected text; options follow \";\""));
            }
            let (kat, key) = c.take_token();
            let (eat, eq) = c.take_token();
            if eq != "=" {
                let len = eq.len();
                return Err(c.error(eat, len, format!("expected \"=\" after {key:?}")));
            }
            let idx = match key.as_str() {
                "burst" => 0,
                "initial" => 1,
                "refill" => 2,
                "algorithm" | "algo" => 3,
                "max_delay" => 4,
                _ => {
                    return Err(c.error(
                        kat,
                        key.len().max(1),
                        "unknown option (burst, initial, refill, algorithm, max_delay)",
                    ))
                }
            };
            if seen[idx] {
                return Err(c.error(kat, key.len(), "option given twice"));
            }
            seen[idx] = true;
            match idx {
                0 => q.burst = c.number("a burst")?,
                1 => q.initial = Some(c.number("an initial token count")?),
                3 => {
                    let (vat, v) = c.take_token();
                    q.algorithm = Algorithm::from_name(&v).ok_or_else(|| {
                        c.error(
                            vat,
                            v.len().max(1),
                            "unknown algorithm (token_bucket, gcra, fixed_window, \
                             sliding_window, sliding_log, leaky_queue)",
                        )
                    })?;
                }
                4 => {
                    let (nat, _) = c.peek_token();
                    let n = c.number("a delay")?;
                    let (uat, unit) = c.take_token();
                    let Some(per) = unit_ns(&unit) else {
                        let len = unit.len().max(1);
                        return Err(c.error(
                            uat,
                            len,
                            "expected a time unit (ns, us, ms, s, m, h, d)",
                        ));
                    };
                    let ns = n.checked_mul(per).ok_or_else(|| {
                        c.error(nat, uat + unit.len() - nat, "the delay is too long")
                    })?;
                    q.max_delay_ns = Some(ns);
                }
                _ => {
                    let (vat, v) = c.take_token();
                    q.refill = match v.as_str() {
                        "continuous" => Refill::Continuous,
                        "interval" => Refill::Interval,
                        _ => {
                            let len = v.len().max(1);
                            return Err(c.error(vat, len, "expected continuous or interval"));
                        }
                    };
                }
            }
        }
        q.validate().map_err(|e| match e {
            Error::InvalidQuota { reason } => Error::InvalidQuota {
                reason: format!("{reason} (in {input:?})"),
            },
            other => other,
        })?;
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_initial_equal_to_burst_is_the_same_quota() {
        let a: Quota = "10/s; initial=10".parse().unwrap();
        let b: Quota = "10/s".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "10/s");
        assert_ne!(a, "10/s; initial=9".parse::<Quota>().unwrap());
    }

    #[test]
    fn errors_quote_the_offending_text() {
        let e = "10/fortnight".parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "parse_error");
        assert!(e.to_string().contains("\"fortnight\""), "{e}");
        assert!(e.to_string().contains("byte 3"), "{e}");
        let e = "10/s; burst=0".parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "invalid_quota");
        let e = "1.5/s".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        let e = "1/d; burst=1000000000".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }
}
