//! The sliding window counter as a state codec: the previous window's count weighted by the
//! part of it the sliding window still covers, plus the current window's count.

use super::window::Grid;
use super::StateCodec;
use crate::quota::Quota;
use crate::Decision;

/// Sliding window counter: admit iff `prev * (W - e) / W + curr + c <= N`, evaluated exactly
/// as `prev * (W - e) + (curr + c) * W <= N * W`. State `(j, prev, curr)`.
#[derive(Clone, Debug)]
pub(crate) struct SlidingWindow {
    g: Grid,
}

/// The effective counts as of a reading.
struct View {
    index: u64,
    prev: u64,
    curr: u64,
    /// `t_e - index * W`.
    e: u64,
    te: u128,
}

impl SlidingWindow {
    /// `n`: the narrow word a state should fit for a span of readings (else it is wide).
    pub(crate) fn new(q: &Quota, n: super::Narrow) -> Self {
        Self {
            g: Grid::new(q, 2, n),
        }
    }

    #[inline]
    fn pack(&self, index: u64, prev: u64, curr: u64) -> u128 {
        (u128::from(index) << (2 * self.g.shift))
            | (u128::from(prev) << self.g.shift)
            | u128::from(curr)
    }

    #[inline]
    fn view(&self, s: u128, now: u64) -> View {
        let shift = self.g.shift;
        let si = (s >> (2 * shift)) as u64;
        let sp = ((s >> shift) & self.g.mask()) as u64;
        let sc = (s & self.g.mask()) as u64;
        let (index, te) = self.g.at(si, now);
        let (prev, curr) = match index - si {
            0 => (sp, sc),
            1 => (sc, 0),
            _ => (0, 0),
        };
        let e = (te - self.g.start(index)) as u64;
        View {
            index,
            prev,
            curr,
            e,
            te,
        }
    }

    /// The carry rule: with the window length unchanged, both counts of `T`'s view (the
    /// reading, or the start of the state's window when later) are carried, each clamped to
    /// the new limit; with a new length, the count the sliding window weighs at `T` (rounded
    /// up) becomes the current count of `T`'s window on the new grid. `Err(T)` past `to`'s
    /// range.
    pub(crate) fn carry(&self, s: u128, now: u64, to: &SlidingWindow) -> Result<u128, u64> {
        let v = self.view(s, now);
        let at = u64::try_from(v.te).unwrap_or(u64::MAX);
        if at >= to.g.limit() {
            return Err(at);
        }
        let n2 = to.g.n;
        if to.g.w == self.g.w {
            return Ok(to.pack(v.index, v.prev.min(n2), v.curr.min(n2)));
        }
        let w = u128::from(self.g.w);
        let weighted = (u128::from(v.prev) * u128::from(self.g.w - v.e)).div_ceil(w) as u64;
        Ok(to.pack(at / to.g.w, 0, (weighted + v.curr).min(n2)))
    }

    /// `reset_after` for counts `(prev, curr)` in the view's window.
    #[inline]
    fn reset(&self, v: &View, prev: u64, curr: u64) -> u64 {
        let ends = if curr > 0 {
            2
        } else if prev > 0 {
            1
        } else {
            return 0;
        };
        (self.g.start(v.index + ends) - v.te) as u64
    }

    /// `remaining = floor(N - curr - prev * (W - e) / W)`, never below zero.
    #[inline]
    fn remaining(&self, v: &View, curr: u64) -> u64 {
        let w = u128::from(self.g.w);
        let weighted = (u128::from(v.prev) * u128::from(self.g.w - v.e)).div_ceil(w) as u64;
        self.g.n.saturating_sub(curr).saturating_sub(weighted)
    }

    /// The least wait from `t_e` until `cost` would be admitted (the request is rejected now).
    #[inline]
    fn retry(&self, v: &View, cost: u64) -> u64 {
        let (n, w) = (self.g.n, u128::from(self.g.w));
        if v.curr + cost <= n {
            // In this window: the least e' with prev * (W - e') <= (N - curr - c) * W.
            // prev > 0 here, or the request would have been admitted.
            let room = u128::from(n - v.curr - cost) * w;
            let e2 = w - (room / u128::from(v.prev)).min(w);
            (self.g.start(v.index) + e2 - v.te) as u64
        } else {
            // Next window: prev becomes curr (> 0, since cost <= N) and curr becomes 0.
            let room = u128::from(n - cost) * w;
            let e2 = w - (room / u128::from(v.curr)).min(w);
            (self.g.start(v.index + 1) + e2 - v.te) as u64
        }
    }
}

impl StateCodec for SlidingWindow {
    #[inline]
    fn capacity(&self) -> u64 {
        self.g.n
    }
    #[inline]
    fn horizon(&self) -> u64 {
        self.g.horizon
    }
    #[inline]
    fn wide(&self) -> bool {
        self.g.wide
    }
    fn limit(&self) -> u64 {
        self.g.limit()
    }

    #[inline]
    fn fresh(&self, now: u64) -> u128 {
        self.pack(now / self.g.w, 0, 0)
    }

    #[inline]
    fn acquire(&self, s: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        let v = self.view(s, now);
        let (n, w) = (u128::from(self.g.n), u128::from(self.g.w));
        let weighted = u128::from(v.prev) * u128::from(self.g.w - v.e);
        let ws = self.g.window_s;
        if weighted + u128::from(v.curr + cost) * w <= n * w {
            let curr = v.curr + cost;
            let rem = self.remaining(&v, curr);
            let reset = self.reset(&v, v.prev, curr);
            let d = Decision::from_parts(true, self.g.n, rem, 1, 0, reset, 1, ws);
            (d, (cost != 0).then(|| self.pack(v.index, v.prev, curr)))
        } else {
            let rem = self.remaining(&v, v.curr);
            let retry = self.retry(&v, cost);
            let reset = self.reset(&v, v.prev, v.curr);
            let d = Decision::from_parts(false, self.g.n, rem, 1, retry, reset, 1, ws);
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, s: u128, now: u64, cost: u64) -> Option<u128> {
        let v = self.view(s, now);
        let curr = v.curr - v.curr.min(cost);
        (curr != v.curr).then(|| self.pack(v.index, v.prev, curr))
    }

    /// Full: nothing weighs, and the reading is not before the state's window.
    /// Counts above the limit would underflow the room left.
    fn valid(&self, s: u128) -> bool {
        let m = self.g.mask();
        (((s >> self.g.shift) & m) as u64) <= self.g.n && ((s & m) as u64) <= self.g.n
    }

    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        let v = self.view(s, now);
        now / self.g.w >= (s >> (2 * self.g.shift)) as u64 && v.prev == 0 && v.curr == 0
    }
}
