//! The token bucket as state codecs: continuous refill (the default: the state is one instant)
//! and interval refill (whole tokens at each period of a grid).

use super::{carry_instant, carry_tokens, Narrow, StateCodec};
use crate::quota::{gcd, Quota, Refill};
use crate::Decision;

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
    /// `n`: the narrow word a state should fit for a span of readings (else it is wide).
    pub(crate) fn new(q: &Quota, n: Narrow) -> Self {
        debug_assert_eq!(q.refill(), Refill::Continuous);
        let g = gcd(q.count(), q.period_ns());
        let (k, p, b) = (q.count() / g, q.period_ns() / g, q.burst());
        // `Quota::validate` guarantees b * p < 2^63.
        let bp = b * p;
        let init_deficit = (b - q.initial()) * p;
        // Narrow when every state reachable by `now <= horizon` fits a u64: F <= now*k + bp.
        let narrow_horizon = n.horizon(u128::from(bp), k);
        let wide = narrow_horizon < n.min;
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
/// `StateCodec` impl) and `step_narrow`, the all-`u64` twin the limiter's fast path inlines for
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
    /// error or takes the wide word). The horizon itself is left to the general path: a state
    /// written there may be the all-ones mark of a sealed word ([`StateCodec::limit`]).
    #[inline(always)]
    pub(crate) fn fast_ok(&self, now: u64, cost: u64) -> bool {
        !self.wide && cost <= self.b && now < self.horizon
    }

    /// The carry rule of live reconfiguration: the tokens the bucket has at `T` (the reading,
    /// or the instant its state proves when later), clamped to the new burst and rounded down
    /// to the new bucket's grain, are the new bucket's tokens at `T`. `Err(T)` past `to`'s
    /// range.
    pub(crate) fn carry(&self, f: u128, now: u64, to: &Continuous) -> Result<u128, u64> {
        let at = carry_instant(f.saturating_sub(u128::from(self.bp)), self.k, now);
        if at >= to.horizon {
            return Err(at);
        }
        // at * k >= F - bp, so the deficit is at most a bucket.
        let deficit = f.saturating_sub(u128::from(at) * u128::from(self.k)) as u64;
        let avail = carry_tokens(self.bp - deficit, self.p, to.bp, to.p);
        Ok(u128::from(at) * u128::from(to.k) + u128::from(to.bp - avail))
    }
}

impl StateCodec for Continuous {
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
    /// `n`: the narrow word a state should fit for a span of readings from `origin`.
    pub(crate) fn new(q: &Quota, origin: u64, n: Narrow) -> Self {
        debug_assert_eq!(q.refill(), Refill::Interval);
        let (k, p, b) = (q.count(), q.period_ns(), q.burst());
        let shift = u64::BITS - b.leading_zeros(); // bits for 0..=b; b < 2^63 so shift <= 63
        let index_bits = n.bits - shift;
        let max_index = (1u128 << index_bits) - 1;
        let narrow_horizon =
            u128::from(origin).saturating_add(max_index.saturating_mul(u128::from(p)));
        let wide = narrow_horizon < u128::from(origin) + u128::from(n.min);
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
            init: q.initial(),
            horizon,
            window_s: q.window_secs(),
            wide,
        }
    }

    #[inline]
    fn index(&self, now: u64) -> u64 {
        now.saturating_sub(self.origin) / self.p
    }

    /// The carry rule: the whole tokens the bucket has at `T` (the reading, or the start of
    /// its state's period when later), clamped to the new burst, as of `T`'s period on the new
    /// grid (which keeps the limiter's origin). `Err(T)` past `to`'s range.
    pub(crate) fn carry(&self, s: u128, now: u64, to: &Interval) -> Result<u128, u64> {
        let (_, tokens, te) = self.at(s, now);
        let at = u64::try_from(te).unwrap_or(u64::MAX);
        if at >= to.horizon {
            return Err(at);
        }
        Ok(to.pack(to.index(at), tokens.min(to.b)))
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

impl StateCodec for Interval {
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

    /// Tokens above the burst would underflow `b - remaining`.
    fn valid(&self, s: u128) -> bool {
        self.unpack(s).1 <= self.b
    }

    /// Full only at a reading within or past the state's period: a reading before it (a
    /// stale clock, clamped) is never full, so an eviction cannot take a bucket back to an
    /// earlier period than it proved (docs/SEMANTICS.md, "When a bucket is full").
    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        let start = self.boundary(self.unpack(s).0);
        u128::from(now) >= start && self.at(s, now).1 == self.b
    }
}
