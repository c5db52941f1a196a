//! The window grid shared by the window counters ([`FixedWindow`](super::fixed_window::FixedWindow)
//! and [`SlidingWindow`](super::sliding_window::SlidingWindow)).
//!
//! Windows have length `W` (the quota's period) and lie on the grid `j * W` of the clock's own
//! epoch (its zero), so every limiter and every key on one clock shares the same boundaries.
//! The state packs a window index with counts: `index << shift | count` (fixed) and
//! `index << 2*shift | prev << shift | curr` (sliding), where `shift` is the number of bits of
//! the limit `N`. It is one `u64` when the index field covers a century of clock readings,
//! else one `u128`.

use super::Narrow;
use crate::quota::Quota;

/// Bits for the values `0..=n`.
fn bits(n: u64) -> u32 {
    u64::BITS - n.leading_zeros()
}

/// Narrow or wide layout for `count_bits` bits of counts, narrow when `n`'s word covers its
/// span; `(wide, horizon)`.
fn layout(w: u64, count_bits: u32, n: Narrow) -> (bool, u64) {
    let horizon = |word_bits: u32| -> u64 {
        let index_bits = word_bits.saturating_sub(count_bits);
        if index_bits >= 64 {
            return u64::MAX;
        }
        let windows = 1u128 << index_bits; // indexes 0..windows
        u64::try_from(windows * u128::from(w) - 1).unwrap_or(u64::MAX)
    };
    let narrow = horizon(n.bits);
    if narrow >= n.min {
        (false, narrow)
    } else {
        (true, horizon(128))
    }
}

/// The window grid shared by both codecs.
#[derive(Clone, Debug)]
pub(super) struct Grid {
    pub(super) n: u64,
    pub(super) w: u64,
    pub(super) shift: u32,
    pub(super) horizon: u64,
    pub(super) window_s: u64,
    pub(super) wide: bool,
}

impl Grid {
    pub(super) fn new(q: &Quota, fields: u32, n: Narrow) -> Self {
        let (count, w) = (q.count(), q.period_ns());
        let shift = bits(count);
        let (wide, horizon) = layout(w, shift * fields, n);
        Self {
            n: count,
            w,
            shift,
            horizon,
            window_s: q.window_secs(),
            wide,
        }
    }

    /// The first reading of the last window the index field holds: a state of that window
    /// may be all ones (see `StateCodec::limit`), so readings stay below it.
    pub(super) fn limit(&self) -> u64 {
        if self.horizon == u64::MAX {
            return u64::MAX;
        }
        self.horizon - (self.w - 1)
    }

    #[inline]
    pub(super) fn mask(&self) -> u128 {
        (1u128 << self.shift) - 1
    }

    #[inline]
    pub(super) fn start(&self, index: u64) -> u128 {
        u128::from(index) * u128::from(self.w)
    }

    /// `(index, t_e)` for a reading: the reading's window, or the state's window when the
    /// reading is earlier than the state's window (clamped to that window's start).
    #[inline]
    pub(super) fn at(&self, state_index: u64, now: u64) -> (u64, u128) {
        let index = now / self.w;
        if index >= state_index {
            (index, u128::from(now))
        } else {
            (state_index, self.start(state_index))
        }
    }
}
