//! The fixed window counter as a state codec: at most `N` per window of the grid `j * W`.

use super::window::Grid;
use super::StateCodec;
use crate::quota::Quota;
use crate::Decision;

/// Fixed window: at most `N` per window `[j*W, (j+1)*W)`. State `(j, used)`.
#[derive(Clone, Debug)]
pub(crate) struct FixedWindow {
    g: Grid,
}

impl FixedWindow {
    /// `n`: the narrow word a state should fit for a span of readings (else it is wide).
    pub(crate) fn new(q: &Quota, n: super::Narrow) -> Self {
        Self {
            g: Grid::new(q, 1, n),
        }
    }

    #[inline]
    fn pack(&self, index: u64, used: u64) -> u128 {
        (u128::from(index) << self.g.shift) | u128::from(used)
    }

    /// The carry rule: the count used in the window of `T` (the reading, or the start of the
    /// state's window when later) is carried, clamped to the new limit: into the same window
    /// when the length is unchanged, else into `T`'s window of the new grid. `Err(T)` past
    /// `to`'s range.
    pub(crate) fn carry(&self, s: u128, now: u64, to: &FixedWindow) -> Result<u128, u64> {
        let (index, used, te) = self.at(s, now);
        let at = u64::try_from(te).unwrap_or(u64::MAX);
        if at >= to.g.limit() {
            return Err(at);
        }
        let index = if to.g.w == self.g.w {
            index
        } else {
            at / to.g.w
        };
        Ok(to.pack(index, used.min(to.g.n)))
    }

    /// `(index, used, t_e)` as of `now`.
    #[inline]
    fn at(&self, s: u128, now: u64) -> (u64, u64, u128) {
        let (si, su) = ((s >> self.g.shift) as u64, (s & self.g.mask()) as u64);
        let (index, te) = self.g.at(si, now);
        (index, if index == si { su } else { 0 }, te)
    }
}

impl StateCodec for FixedWindow {
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

    /// More used than the limit would underflow `n - used`.
    fn valid(&self, s: u128) -> bool {
        ((s & self.g.mask()) as u64) <= self.g.n
    }

    /// Full: nothing counted, and the reading is not before the state's window (an earlier
    /// reading is clamped by this state but not by a new one, so it must not evict).
    #[inline]
    fn is_full(&self, s: u128, now: u64) -> bool {
        now / self.g.w >= (s >> self.g.shift) as u64 && self.at(s, now).1 == 0
    }
}
