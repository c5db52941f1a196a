//! Leaky bucket as a queue (a shaper) as a state codec.
//!
//! Requests leave the queue at rate `r = k/P`. A request of cost `c` arriving at `t` gets the
//! slot `s = max(t, L + c/r)` where `L` is the previous request's slot; it is admitted with
//! the wait `s - t` when that wait is at most the queue bound `D` (`max_delay`), else it is
//! rejected and nothing changes. The state is one instant, stored as `(L + Q/r) * k` in scaled
//! nanoseconds (after dividing `k` and `P` by their gcd), where `Q = 1 + floor(D * r)` is the
//! number of unit requests an idle queue accepts at one instant (the `limit`). An idle queue
//! (`L <= t - Q/r`) is indistinguishable from a new one, which is what eviction needs.

use crate::algorithm::{carry_instant, mul_div_ceil, mul_div_floor, Narrow, StateCodec};
use crate::quota::{gcd, Quota};
use crate::Decision;

#[derive(Clone, Debug)]
pub(crate) struct LeakyQueue {
    k: u64,
    /// Scaled units per token (`P / g`).
    p: u64,
    /// `Q`: the capacity (limit).
    q: u64,
    /// `Q * p`: the clamp, in scaled units.
    qp: u64,
    /// `D * k`: the queue bound, in scaled units.
    dk: u64,
    horizon: u64,
    window_s: u64,
    wide: bool,
}

impl LeakyQueue {
    /// `n`: the narrow word a state should fit for a span of readings (else it is wide).
    pub(crate) fn new(quota: &Quota, n: Narrow) -> Self {
        let g = gcd(quota.count(), quota.period_ns());
        let (k, p) = (quota.count() / g, quota.period_ns() / g);
        // `Quota::validate` guarantees D * k + p < 2^62, so Q * p <= D * k + p fits too.
        let dk = quota.max_delay_ns() * k;
        let q = 1 + dk / p;
        let qp = q * p;
        let narrow_horizon = n.horizon(u128::from(qp) + u128::from(dk), k);
        let wide = narrow_horizon < n.min;
        Self {
            k,
            p,
            q,
            qp,
            dk,
            horizon: if wide { u64::MAX } else { narrow_horizon },
            window_s: quota.window_secs(),
            wide,
        }
    }

    /// The carry rule: the last slot handed out stands (its requests keep their slots; new
    /// ones queue behind it at the new rate), rounded up to the new grain, then kept between
    /// the new quota's idle mark `T - Q'/r'` (an idle queue is idle, with at most the burst
    /// it had) and `T + max_delay'` (a backlog longer than the new bound is cut to it). `T`:
    /// the reading, or the instant the state proves when later. `Err(T)` past `to`'s range.
    pub(crate) fn carry(&self, s: u128, now: u64, to: &LeakyQueue) -> Result<u128, u64> {
        let at = carry_instant(s.saturating_sub(u128::from(self.qp + self.dk)), self.k, now);
        if at >= to.horizon {
            return Err(at);
        }
        // The effective last slot, scaled: max(L, T - Q/r) * k = max(s, T*k) - Q*p.
        let e = s.max(u128::from(at) * u128::from(self.k));
        let qp = u128::from(self.qp);
        let q2p2 = u128::from(to.qp);
        // (L' + Q'/r') * k' with L' * k' = ceil(L * k'): below zero only for a queue idle
        // since before the clock's zero, which the clamp below makes idle anyway.
        let s2 = if e >= qp {
            q2p2 + mul_div_ceil(e - qp, to.k, self.k)
        } else {
            q2p2.saturating_sub(mul_div_floor(qp - e, to.k, self.k))
        };
        let t2 = u128::from(at) * u128::from(to.k);
        Ok(s2.clamp(t2, t2 + u128::from(to.dk + to.qp)))
    }

    /// Converts a bound in nanoseconds to scaled units, capped at the queue bound.
    #[inline]
    pub(crate) fn bound_units(&self, max_wait_ns: u64) -> u64 {
        u64::try_from(u128::from(max_wait_ns) * u128::from(self.k))
            .unwrap_or(u64::MAX)
            .min(self.dk)
    }

    /// A reservation admitted only when its wait is at most `bound` scaled units (`<= D*k`).
    #[inline]
    pub(crate) fn reserve(
        &self,
        s: u128,
        now: u64,
        cost: u64,
        bound: u64,
    ) -> (Decision, Option<u128>) {
        let now = u128::from(now) * u128::from(self.k);
        // The clamp: the state proves a reading of at least L - D; an earlier one sees that.
        let te = now.max(s.saturating_sub(u128::from(self.qp + self.dk)));
        // x = max(s, t_e) - t_e <= Q*p + D*k < 2^63.
        let x = s.saturating_sub(te) as u64;
        // Wait until the slot max(t, L + c/r): max(0, x + c*p - Q*p), scaled.
        let wait = (x + cost * self.p).saturating_sub(self.qp);
        if cost == 0 || wait <= bound {
            let s2 = if cost == 0 {
                s
            } else {
                te + u128::from(self.qp + wait)
            };
            let d = self.decision(true, s2, te, if cost == 0 { 0 } else { wait });
            (d, (cost != 0).then_some(s2))
        } else {
            (self.decision(false, s, te, wait - bound), None)
        }
    }

    #[inline]
    fn decision(&self, allowed: bool, s: u128, te: u128, retry: u64) -> Decision {
        let ahead = s.saturating_sub(te) as u64; // <= Q*p + D*k
                                                 // remaining = floor((t + D - max(L, t - 1/r)) * r), never below zero.
        let room = (self.dk + self.qp).saturating_sub(ahead.max(self.qp - self.p));
        Decision::from_parts(
            allowed,
            self.q,
            room,
            self.p,
            retry,
            ahead,
            self.k,
            self.window_s,
        )
    }
}

impl StateCodec for LeakyQueue {
    #[inline]
    fn capacity(&self) -> u64 {
        self.q
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
        u128::from(now) * u128::from(self.k)
    }

    #[inline]
    fn acquire(&self, s: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        self.reserve(s, now, cost, self.dk)
    }

    /// Cancel: `L := max(L - c/r, t - Q/r)`, nothing when the queue is idle.
    #[inline]
    fn refund(&self, s: u128, now: u64, cost: u64) -> Option<u128> {
        let now = u128::from(now) * u128::from(self.k);
        if s <= now || cost == 0 {
            return None;
        }
        let back = u128::from(cost.min(self.q) * self.p);
        Some(s.saturating_sub(back).max(now))
    }

    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        s <= u128::from(now) * u128::from(self.k)
    }
}
