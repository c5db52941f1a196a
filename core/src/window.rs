//! Window counters as state codecs: the fixed window and the sliding window counter.
//!
//! Windows have length `W` (the quota's period) and lie on the grid `j * W` of the clock's own
//! epoch (its zero), so every limiter and every key on one clock shares the same boundaries.
//! The state packs a window index with counts: `index << shift | count` (fixed) and
//! `index << 2*shift | prev << shift | curr` (sliding), where `shift` is the number of bits of
//! the limit `N`. It is one `u64` when the index field covers a century of clock readings,
//! else one `u128`.

use crate::algorithm::{Codec, CENTURY_NS};
use crate::quota::Quota;
use crate::Decision;

/// Bits for the values `0..=n`.
fn bits(n: u64) -> u32 {
    u64::BITS - n.leading_zeros()
}

/// Narrow or wide layout for `count_bits` bits of counts; `(wide, horizon)`.
fn layout(w: u64, count_bits: u32) -> (bool, u64) {
    let horizon = |word_bits: u32| -> u64 {
        let index_bits = word_bits.saturating_sub(count_bits);
        if index_bits >= 64 {
            return u64::MAX;
        }
        let windows = 1u128 << index_bits; // indexes 0..windows
        u64::try_from(windows * u128::from(w) - 1).unwrap_or(u64::MAX)
    };
    let narrow = horizon(64);
    if narrow >= CENTURY_NS {
        (false, narrow)
    } else {
        (true, horizon(128))
    }
}

/// The window grid shared by both codecs.
#[derive(Clone, Debug)]
struct Grid {
    n: u64,
    w: u64,
    shift: u32,
    horizon: u64,
    window_s: u64,
    wide: bool,
}

impl Grid {
    fn new(q: &Quota, fields: u32) -> Self {
        let (n, w) = (q.count(), q.period_ns());
        let shift = bits(n);
        let (wide, horizon) = layout(w, shift * fields);
        Self {
            n,
            w,
            shift,
            horizon,
            window_s: q.window_secs(),
            wide,
        }
    }

    #[inline]
    fn mask(&self) -> u128 {
        (1u128 << self.shift) - 1
    }

    #[inline]
    fn start(&self, index: u64) -> u128 {
        u128::from(index) * u128::from(self.w)
    }

    /// `(index, t_e)` for a reading: the reading's window, or the state's window when the
    /// reading is earlier than the state's window (clamped to that window's start).
    #[inline]
    fn at(&self, state_index: u64, now: u64) -> (u64, u128) {
        let index = now / self.w;
        if index >= state_index {
            (index, u128::from(now))
        } else {
            (state_index, self.start(state_index))
        }
    }
}

/// Fixed window: at most `N` per window `[j*W, (j+1)*W)`. State `(j, used)`.
#[derive(Clone, Debug)]
pub(crate) struct FixedWindow {
    g: Grid,
}

impl FixedWindow {
    pub(crate) fn new(q: &Quota) -> Self {
        Self { g: Grid::new(q, 1) }
    }

    #[inline]
    fn pack(&self, index: u64, used: u64) -> u128 {
        (u128::from(index) << self.g.shift) | u128::from(used)
    }

    /// `(index, used, t_e)` as of `now`.
    #[inline]
    fn at(&self, s: u128, now: u64) -> (u64, u64, u128) {
        let (si, su) = ((s >> self.g.shift) as u64, (s & self.g.mask()) as u64);
        let (index, te) = self.g.at(si, now);
        (index, if index == si { su } else { 0 }, te)
    }
}

impl Codec for FixedWindow {
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

    #[inline]
    fn fresh(&self, now: u64) -> u128 {
        self.pack(now / self.g.w, 0)
    }

    #[inline]
    fn acquire(&self, s: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        let (index, used, te) = self.at(s, now);
        let to_next = (self.g.start(index + 1) - te) as u64;
        let n = self.g.n;
        if used + cost <= n {
            let used = used + cost;
            let reset = if used == 0 { 0 } else { to_next };
            let d = Decision::from_parts(true, n, n - used, 1, 0, reset, 1, self.g.window_s);
            (d, (cost != 0).then(|| self.pack(index, used)))
        } else {
            // used > 0 here (cost <= n), so the window holds something until its end.
            let d =
                Decision::from_parts(false, n, n - used, 1, to_next, to_next, 1, self.g.window_s);
            (d, None)
        }
    }

    #[inline]
    fn refund(&self, s: u128, now: u64, cost: u64) -> Option<u128> {
        let (index, used, _) = self.at(s, now);
        let left = used - used.min(cost);
        (left != used).then(|| self.pack(index, left))
    }

    /// Full: nothing counted, and the reading is not before the state's window (an earlier
    /// reading is clamped by this state but not by a new one, so it must not evict).
    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        now / self.g.w >= (s >> self.g.shift) as u64 && self.at(s, now).1 == 0
    }
}

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
    pub(crate) fn new(q: &Quota) -> Self {
        Self { g: Grid::new(q, 2) }
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

impl Codec for SlidingWindow {
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
    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        let v = self.view(s, now);
        now / self.g.w >= (s >> (2 * self.g.shift)) as u64 && v.prev == 0 && v.curr == 0
    }
}
