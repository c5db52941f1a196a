//! State codecs: pure functions `(state word, now, cost) -> (decision, new word)`.
//!
//! No atomics and no clock live here: [`cell`](crate::cell) applies a codec to an atomic word
//! with a compare-and-swap loop, and tests apply it to a plain variable. States are handled as
//! `u128`; each codec decides at construction whether its states fit one `u64` for more than a
//! century of clock readings (`narrow`) or need the 128-bit word.

use crate::gcra::Gcra;
use crate::log::SlidingLog;
use crate::queue::LeakyQueue;
use crate::quota::{gcd, Algorithm, Quota, Refill};
use crate::window::{FixedWindow, SlidingWindow};
use crate::{Decision, Error};

/// 100 Julian years in nanoseconds: the least clock range every quota must cover exactly.
pub const CENTURY_NS: u64 = 3_155_760_000_000_000_000;

/// One algorithm's exact arithmetic over a state word.
pub(crate) trait Codec {
    /// The capacity (`limit`).
    fn capacity(&self) -> u64;
    /// The last clock reading this codec's word can represent.
    fn horizon(&self) -> u64;
    /// Whether states need the 128-bit word.
    fn wide(&self) -> bool;
    /// The state of a bucket created at `now`.
    fn fresh(&self, now: u64) -> u128;
    /// The decision for `cost` at `now`, and the word to install (`None`: write nothing).
    /// Callers have checked `cost <= capacity` and `now <= horizon`.
    fn acquire(&self, state: u128, now: u64, cost: u64) -> (Decision, Option<u128>);
    /// Gives `cost` tokens back (capped at capacity); `None` when nothing changes.
    fn refund(&self, state: u128, now: u64, cost: u64) -> Option<u128>;
    /// Whether the bucket is full at `now` (a full bucket is indistinguishable from a new one).
    fn is_full(&self, state: u128, now: u64) -> bool;

    /// The request checks shared by every codec.
    #[inline]
    fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        if cost > self.capacity() {
            return Err(Error::InsufficientCapacity {
                cost,
                capacity: self.capacity(),
            });
        }
        if now > self.horizon() {
            return Err(Error::ClockOutOfRange {
                now,
                horizon: self.horizon(),
            });
        }
        Ok(())
    }
}

/// Continuous refill. The state is `F * k`: the instant at which the bucket is full, in
/// nanoseconds scaled by `k` (after dividing `k` and `P` by their gcd), so that one token is
/// exactly `p` scaled units and every step is integer arithmetic.
#[derive(Clone, Debug)]
pub(crate) struct Continuous {
    k: u64,
    p: u64,
    b: u64,
    bp: u64,
    init_deficit: u64,
    horizon: u64,
    window_s: u64,
    wide: bool,
}

impl Continuous {
    pub(crate) fn new(q: &Quota) -> Self {
        debug_assert_eq!(q.refill_mode(), Refill::Continuous);
        let g = gcd(q.count(), q.period_ns());
        let (k, p, b) = (q.count() / g, q.period_ns() / g, q.capacity());
        // `Quota::validate` guarantees b * p < 2^63.
        let bp = b * p;
        let init_deficit = (b - q.initial_tokens()) * p;
        // Narrow when every state reachable by `now <= horizon` fits a u64: F <= now*k + bp.
        let narrow_horizon = (u64::MAX - bp) / k;
        let wide = narrow_horizon < CENTURY_NS;
        Self {
            k,
            p,
            b,
            bp,
            init_deficit,
            horizon: if wide { u64::MAX } else { narrow_horizon },
            window_s: q.window_secs(),
            wide,
        }
    }
}

/// The continuous step, written once and generated for both word widths: `step_wide` (the
/// `Codec` impl) and `step_narrow`, the all-`u64` twin the limiter's fast path inlines for
/// narrow quotas (`now <= horizon` keeps `now * k + bp` within a `u64`).
macro_rules! continuous_step {
    ($name:ident, $t:ty) => {
        #[inline(always)]
        pub(crate) fn $name(&self, f: $t, now: u64, cost: u64) -> (Decision, Option<$t>) {
            let t = <$t>::from(now) * <$t>::from(self.k);
            // deficit = F - t_e, with the clamp t_e = max(t, F - bp): never more than a bucket.
            let deficit = if f > t {
                let d = f - t;
                if d > <$t>::from(self.bp) {
                    self.bp
                } else {
                    d as u64
                }
            } else {
                0
            };
            let avail = self.bp - deficit;
            let need = cost * self.p; // cost <= b, so need <= bp
            if need <= avail {
                // max(F, t_e) is F when F > t (even when clamped), else t.
                let new = (cost != 0).then(|| f.max(t) + <$t>::from(need));
                let d = Decision::from_parts(
                    true,
                    self.b,
                    avail - need,
                    self.p,
                    0,
                    deficit + need,
                    self.k,
                    self.window_s,
                );
                (d, new)
            } else {
                let d = Decision::from_parts(
                    false,
                    self.b,
                    avail,
                    self.p,
                    need - avail,
                    deficit,
                    self.k,
                    self.window_s,
                );
                (d, None)
            }
        }
    };
}

impl Continuous {
    continuous_step!(step_wide, u128);
    continuous_step!(step_narrow, u64);

    /// Whether the u64 fast path applies to this request (else the general path reports the
    /// error or takes the wide word).
    #[inline(always)]
    pub(crate) fn fast_ok(&self, now: u64, cost: u64) -> bool {
        !self.wide && cost <= self.b && now <= self.horizon
    }
}

impl Codec for Continuous {
    #[inline]
    fn capacity(&self) -> u64 {
        self.b
    }
    #[inline]
    fn horizon(&self) -> u64 {
        self.horizon
    }
    #[inline]
    fn wide(&self) -> bool {
        self.wide
    }

    #[inline]
    fn fresh(&self, now: u64) -> u128 {
        u128::from(now) * u128::from(self.k) + u128::from(self.init_deficit)
    }

    #[inline(always)]
    fn acquire(&self, f: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        self.step_wide(f, now, cost)
    }

    #[inline]
    fn refund(&self, f: u128, now: u64, cost: u64) -> Option<u128> {
        let t = u128::from(now) * u128::from(self.k);
        if f <= t || cost == 0 {
            return None; // already full: nothing to give back
        }
        let give = u128::from(cost.min(self.b) * self.p);
        Some(f.saturating_sub(give).max(t))
    }

    #[inline]
    fn is_full(&self, f: u128, now: u64) -> bool {
        f <= u128::from(now) * u128::from(self.k)
    }
}

/// Interval refill. The state packs `(n, tau)`: `tau` tokens as of period `n` of the grid
/// `origin + j * P`, as `n << shift | tau`.
#[derive(Clone, Debug)]
pub(crate) struct Interval {
    k: u64,
    p: u64,
    b: u64,
    origin: u64,
    shift: u32,
    init: u64,
    horizon: u64,
    window_s: u64,
    wide: bool,
}

impl Interval {
    pub(crate) fn new(q: &Quota, origin: u64) -> Self {
        debug_assert_eq!(q.refill_mode(), Refill::Interval);
        let (k, p, b) = (q.count(), q.period_ns(), q.capacity());
        let shift = u64::BITS - b.leading_zeros(); // bits for 0..=b; b < 2^63 so shift <= 63
        let index_bits = 64 - shift;
        let max_index = (1u128 << index_bits) - 1;
        let narrow_horizon = u128::from(origin) + max_index * u128::from(p);
        let wide = narrow_horizon < u128::from(origin) + u128::from(CENTURY_NS);
        let horizon = if wide {
            u64::MAX
        } else {
            u64::try_from(narrow_horizon).unwrap_or(u64::MAX)
        };
        Self {
            k,
            p,
            b,
            origin,
            shift,
            init: q.initial_tokens(),
            horizon,
            window_s: q.window_secs(),
            wide,
        }
    }

    #[inline]
    fn index(&self, now: u64) -> u64 {
        now.saturating_sub(self.origin) / self.p
    }

    #[inline]
    fn boundary(&self, index: u64) -> u128 {
        u128::from(self.origin) + u128::from(index) * u128::from(self.p)
    }

    #[inline]
    fn unpack(&self, s: u128) -> (u64, u64) {
        (
            (s >> self.shift) as u64,
            (s & ((1u128 << self.shift) - 1)) as u64,
        )
    }

    #[inline]
    fn pack(&self, n: u64, tau: u64) -> u128 {
        (u128::from(n) << self.shift) | u128::from(tau)
    }

    /// `(p_e, tokens at p_e, t_e)` for a reading `now` of state `s`.
    #[inline]
    fn at(&self, s: u128, now: u64) -> (u64, u64, u128) {
        let (n, tau) = self.unpack(s);
        let start = self.boundary(n);
        let now128 = u128::from(now);
        if now128 < start + u128::from(self.p) {
            // Same period as the state (or an earlier reading, clamped): no division.
            (n, tau, now128.max(start))
        } else {
            let pe = self.index(now);
            let added = self.k.saturating_mul(pe - n);
            (pe, tau.saturating_add(added).min(self.b), now128)
        }
    }

    /// Nanoseconds from `te` until `need` more tokens have been added after period `pe`.
    #[inline]
    fn wait(&self, pe: u64, need: u64, te: u128) -> u64 {
        if need == 0 {
            return 0;
        }
        let periods = need.div_ceil(self.k);
        (self.boundary(pe) + u128::from(periods) * u128::from(self.p) - te) as u64
    }
}

impl Codec for Interval {
    #[inline]
    fn capacity(&self) -> u64 {
        self.b
    }
    #[inline]
    fn horizon(&self) -> u64 {
        self.horizon
    }
    #[inline]
    fn wide(&self) -> bool {
        self.wide
    }

    #[inline]
    fn fresh(&self, now: u64) -> u128 {
        self.pack(self.index(now), self.init)
    }

    #[inline]
    fn acquire(&self, s: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        let (pe, tokens, te) = self.at(s, now);
        if tokens >= cost {
            let rem = tokens - cost;
            let new = (cost != 0).then(|| self.pack(pe, rem));
            let reset = self.wait(pe, self.b - rem, te);
            let d = Decision::from_parts(true, self.b, rem, 1, 0, reset, 1, self.window_s);
            (d, new)
        } else {
            let retry = self.wait(pe, cost - tokens, te);
            let reset = self.wait(pe, self.b - tokens, te);
            let d = Decision::from_parts(false, self.b, tokens, 1, retry, reset, 1, self.window_s);
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, s: u128, now: u64, cost: u64) -> Option<u128> {
        let (pe, tokens, _) = self.at(s, now);
        let new_tokens = tokens.saturating_add(cost).min(self.b);
        (new_tokens != tokens).then(|| self.pack(pe, new_tokens))
    }

    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        self.at(s, now).1 == self.b
    }
}

/// The codec a quota compiles to, chosen once at construction.
#[derive(Clone, Debug)]
pub(crate) enum Algo {
    Continuous(Continuous),
    Interval(Interval),
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    LeakyQueue(LeakyQueue),
    /// Not a word codec: its slot is a log behind a short lock (see `log.rs`).
    SlidingLog(SlidingLog),
}

/// Runs `$body` with `$a` bound to the word codec of `$algo`, or `$log` for the sliding log.
macro_rules! each_codec {
    ($algo:expr, $a:ident => $body:expr, $l:pat => $log:expr) => {
        match $algo {
            Algo::Continuous($a) => $body,
            Algo::Interval($a) => $body,
            Algo::Gcra($a) => $body,
            Algo::FixedWindow($a) => $body,
            Algo::SlidingWindow($a) => $body,
            Algo::LeakyQueue($a) => $body,
            Algo::SlidingLog($l) => $log,
        }
    };
}

impl Algo {
    /// Compiles a quota (validated here) for a limiter whose clock origin is `origin`.
    pub(crate) fn new(q: &Quota, origin: u64) -> Result<Self, Error> {
        q.validate()?;
        let algo = match (q.algorithm_kind(), q.refill_mode()) {
            (Algorithm::TokenBucket, Refill::Continuous) => Algo::Continuous(Continuous::new(q)),
            (Algorithm::TokenBucket, Refill::Interval) => Algo::Interval(Interval::new(q, origin)),
            (Algorithm::Gcra, _) => Algo::Gcra(Gcra::new(q)),
            (Algorithm::FixedWindow, _) => Algo::FixedWindow(FixedWindow::new(q)),
            (Algorithm::SlidingWindow, _) => Algo::SlidingWindow(SlidingWindow::new(q)),
            (Algorithm::LeakyQueue, _) => Algo::LeakyQueue(LeakyQueue::new(q)),
            (Algorithm::SlidingLog, _) => Algo::SlidingLog(SlidingLog::new(q)),
        };
        if algo.horizon() < CENTURY_NS {
            return Err(Error::invalid(format!(
                "{q}: the limit is too large to pack with a century of window indexes"
            )));
        }
        Ok(algo)
    }

    #[inline]
    pub(crate) fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        match self {
            Algo::Continuous(a) => a.check(now, cost),
            Algo::Interval(a) => a.check(now, cost),
            Algo::Gcra(a) => a.check(now, cost),
            Algo::FixedWindow(a) => a.check(now, cost),
            Algo::SlidingWindow(a) => a.check(now, cost),
            Algo::LeakyQueue(a) => a.check(now, cost),
            Algo::SlidingLog(l) => {
                if cost > l.capacity() {
                    return Err(Error::InsufficientCapacity {
                        cost,
                        capacity: l.capacity(),
                    });
                }
                Ok(())
            }
        }
    }

    /// The largest cost a request may ask for.
    pub(crate) fn capacity(&self) -> u64 {
        each_codec!(self, a => a.capacity(), l => l.capacity())
    }

    /// The last clock reading the codec accepts.
    pub(crate) fn horizon(&self) -> u64 {
        each_codec!(self, a => a.horizon(), _ => u64::MAX)
    }

    /// The codec's decision for `cost` at `now` on a plain state word (no atomics). The
    /// sliding log has no state word; the keyed store keeps its logs apart (`keyed_log.rs`).
    pub(crate) fn decide(&self, state: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        each_codec!(self, a => a.acquire(state, now, cost),
            _ => unreachable!("the sliding log has no state word"))
    }

    pub(crate) fn wide(&self) -> bool {
        each_codec!(self, a => a.wide(), _ => false)
    }

    /// The initial state word (the sliding log keeps no word: its slot is made by `Slot::new`).
    pub(crate) fn fresh(&self, now: u64) -> u128 {
        each_codec!(self, a => a.fresh(now), _ => u128::from(now))
    }
}
