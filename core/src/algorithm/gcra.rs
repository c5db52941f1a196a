//! GCRA (the generic cell rate algorithm, or leaky bucket as a meter) as a state codec.
//!
//! Written in GCRA's own terms: the state is the theoretical arrival time `TAT`, a token costs
//! one emission interval `T = 1/r`, and the tolerance is `tau = b * T`. A request of cost `c`
//! at `t` is admitted iff `max(TAT, t) + c*T - t <= tau`, which is exactly the continuous
//! token bucket's admission with `TAT = F` (the instant the bucket is full); the property
//! tests check that every decision is identical. Times are scaled by `k` (after dividing `k`
//! and `P` by their gcd), so `T` is the integer `p` and every step is exact.

use crate::algorithm::{carry_instant, carry_tokens, Narrow, StateCodec};
use crate::quota::{gcd, Quota};
use crate::Decision;

/// GCRA over one virtual-time word: `TAT * k`.
#[derive(Clone, Debug)]
pub(crate) struct Gcra {
    /// Scaled nanoseconds per unit of wall time (`k / g`).
    k: u64,
    /// The emission interval `T` of one token, in scaled units (`P / g`).
    t: u64,
    b: u64,
    /// The tolerance `tau = b * T`.
    tau: u64,
    init_delay: u64,
    horizon: u64,
    window_s: u64,
    wide: bool,
}

impl Gcra {
    /// `n`: the narrow word a state should fit for a span of readings (else it is wide).
    pub(crate) fn new(q: &Quota, n: Narrow) -> Self {
        let g = gcd(q.count(), q.period_ns());
        let (k, t, b) = (q.count() / g, q.period_ns() / g, q.burst());
        // `Quota::validate` guarantees b * T < 2^63.
        let tau = b * t;
        let narrow_horizon = n.horizon(u128::from(tau), k);
        let wide = narrow_horizon < n.min;
        Self {
            k,
            t,
            b,
            tau,
            init_delay: (b - q.initial()) * t,
            horizon: if wide { u64::MAX } else { narrow_horizon },
            window_s: q.window_secs(),
            wide,
        }
    }
}

impl Gcra {
    /// The carry rule, as the continuous token bucket's (`TAT` is its `F`): the tokens at `T`
    /// (the reading, or `TAT - tau` when later), clamped to the new burst and rounded down to
    /// the new grain, as of `T`. `Err(T)` past `to`'s range.
    pub(crate) fn carry(&self, tat: u128, now: u64, to: &Gcra) -> Result<u128, u64> {
        let at = carry_instant(tat.saturating_sub(u128::from(self.tau)), self.k, now);
        if at >= to.horizon {
            return Err(at);
        }
        let backlog = tat.saturating_sub(u128::from(at) * u128::from(self.k)) as u64;
        let avail = carry_tokens(self.tau - backlog, self.t, to.tau, to.t);
        Ok(u128::from(at) * u128::from(to.k) + u128::from(to.tau - avail))
    }
}

impl StateCodec for Gcra {
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
        // A bucket with i tokens: TAT = t0 + (b - i) * T.
        u128::from(now) * u128::from(self.k) + u128::from(self.init_delay)
    }

    #[inline]
    fn acquire(&self, tat: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        let now = u128::from(now) * u128::from(self.k);
        // A reading earlier than TAT - tau is seen as TAT - tau (no more than a full bucket).
        let arrival = now.max(tat.saturating_sub(u128::from(self.tau)));
        let start = tat.max(arrival);
        let new_tat = start + u128::from(cost * self.t);
        // Both differences are at most tau + c*T <= 2 tau < 2^64.
        let backlog = (start - arrival) as u64;
        let after = (new_tat - arrival) as u64;
        if after <= self.tau {
            let d = Decision::from_parts(
                true,
                self.b,
                self.tau - after,
                self.t,
                0,
                after,
                self.k,
                self.window_s,
            );
            (d, (cost != 0).then_some(new_tat))
        } else {
            let d = Decision::from_parts(
                false,
                self.b,
                self.tau - backlog,
                self.t,
                after - self.tau,
                backlog,
                self.k,
                self.window_s,
            );
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, tat: u128, now: u64, cost: u64) -> Option<u128> {
        let now = u128::from(now) * u128::from(self.k);
        if tat <= now || cost == 0 {
            return None;
        }
        let back = u128::from(cost.min(self.b) * self.t);
        Some(tat.saturating_sub(back).max(now))
    }

    #[inline]
    fn is_full(&self, tat: u128, now: u64) -> bool {
        tat <= u128::from(now) * u128::from(self.k)
    }
}
