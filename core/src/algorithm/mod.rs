//! State codecs: pure functions `(state word, now, cost) -> (decision, new word)`.
//!
//! No atomics and no clock live here: [`cell`](crate::bucket::cell) applies a codec to an atomic word
//! with a compare-and-swap loop, and tests apply it to a plain variable. States are handled as
//! `u128`; each codec decides at construction whether its states fit one `u64` for more than a
//! century of clock readings (`narrow`) or need the 128-bit word.

mod fixed_window;
mod gcra;
mod leaky_queue;
mod sliding_log;
mod sliding_window;
mod token_bucket;
mod window;

pub(crate) use fixed_window::FixedWindow;
pub(crate) use gcra::Gcra;
pub(crate) use leaky_queue::LeakyQueue;
pub(crate) use sliding_log::{Log, SlidingLog};
pub(crate) use sliding_window::SlidingWindow;
pub(crate) use token_bucket::{Continuous, Interval};

use crate::quota::{Algorithm, Quota, Refill};
use crate::{Decision, Error};

/// 100 Julian years in nanoseconds: the least clock range every quota must cover exactly.
pub const CENTURY_NS: u64 = 3_155_760_000_000_000_000;

/// The last clock reading a window counter's packing covers (for `Quota::validate`, which
/// refuses a window quota whose packing cannot cover a century).
pub(crate) fn window_horizon(q: &Quota) -> u64 {
    match q.algorithm() {
        Algorithm::FixedWindow => FixedWindow::new(q, Narrow::IN_PROCESS).horizon(),
        Algorithm::SlidingWindow => SlidingWindow::new(q, Narrow::IN_PROCESS).horizon(),
        _ => u64::MAX,
    }
}

/// The narrow word a codec's states should fit: `bits` wide, for a span of at least `min` ns
/// of readings (else its states are wide: 128 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Narrow {
    pub(crate) bits: u32,
    pub(crate) min: u64,
}

impl Narrow {
    /// The in-process store's words: 64 bits for a century.
    pub(crate) const IN_PROCESS: Narrow = Narrow {
        bits: 64,
        min: CENTURY_NS,
    };

    /// The largest state the word holds.
    pub(crate) const fn max(self) -> u128 {
        (1u128 << self.bits) - 1
    }

    /// The last reading `now` whose scaled states, up to `now * k + room`, the word holds:
    /// `(max - room) / k`, capped at `u64::MAX`.
    pub(crate) fn horizon(self, room: u128, k: u64) -> u64 {
        let h = self.max().saturating_sub(room) / u128::from(k);
        u64::try_from(h).unwrap_or(u64::MAX)
    }
}

/// One algorithm's exact arithmetic over a state word.
pub(crate) trait StateCodec {
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

    /// Whether every step of this codec on `state` stays within its arithmetic's range, for a
    /// reading up to the horizon (a word that did not come from this codec may not: see
    /// `Codec::valid`). Every state is, unless a codec says otherwise.
    fn valid(&self, state: u128) -> bool {
        let _ = state;
        true
    }

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

/// The codec a quota compiles to, chosen once at construction.
#[derive(Clone, Debug)]
pub(crate) enum Codec {
    Continuous(Continuous),
    Interval(Interval),
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    LeakyQueue(LeakyQueue),
    /// Not a word codec: its slot is a log behind a short lock (see `log.rs`).
    SlidingLog(SlidingLog),
}

/// Runs `$body` with `$a` bound to the word codec of `$codec`, or `$log` for the sliding log.
macro_rules! each_codec {
    ($codec:expr, $a:ident => $body:expr, $l:pat => $log:expr) => {
        match $codec {
            Codec::Continuous($a) => $body,
            Codec::Interval($a) => $body,
            Codec::Gcra($a) => $body,
            Codec::FixedWindow($a) => $body,
            Codec::SlidingWindow($a) => $body,
            Codec::LeakyQueue($a) => $body,
            Codec::SlidingLog($l) => $log,
        }
    };
}

impl Codec {
    /// Compiles a quota (validated here) for a limiter whose clock origin is `origin`: a
    /// 64-bit word when it covers a century of readings, else a 128-bit one.
    pub(crate) fn new(q: &Quota, origin: u64) -> Result<Self, Error> {
        let codec = Self::compile(q, origin, Narrow::IN_PROCESS)?;
        // `validate` refused every quota whose packing cannot cover a century.
        debug_assert!(codec.horizon() >= CENTURY_NS, "{q}");
        Ok(codec)
    }

    /// Compiles a quota with states that fit `n`'s word over its span of readings from
    /// `origin` (a store whose words are narrower than 128 bits), or `None` when they do not.
    pub(crate) fn narrow(q: &Quota, origin: u64, n: Narrow) -> Result<Option<Self>, Error> {
        let codec = Self::compile(q, origin, n)?;
        Ok((!codec.wide()).then_some(codec))
    }

    fn compile(q: &Quota, origin: u64, min: Narrow) -> Result<Self, Error> {
        q.validate()?;
        Ok(match (q.algorithm(), q.refill()) {
            (Algorithm::TokenBucket, Refill::Continuous) => {
                Codec::Continuous(Continuous::new(q, min))
            }
            (Algorithm::TokenBucket, Refill::Interval) => {
                Codec::Interval(Interval::new(q, origin, min))
            }
            (Algorithm::Gcra, _) => Codec::Gcra(Gcra::new(q, min)),
            (Algorithm::FixedWindow, _) => Codec::FixedWindow(FixedWindow::new(q, min)),
            (Algorithm::SlidingWindow, _) => Codec::SlidingWindow(SlidingWindow::new(q, min)),
            (Algorithm::LeakyQueue, _) => Codec::LeakyQueue(LeakyQueue::new(q, min)),
            (Algorithm::SlidingLog, _) => Codec::SlidingLog(SlidingLog::new(q)),
        })
    }

    #[inline]
    pub(crate) fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        match self {
            Codec::Continuous(a) => a.check(now, cost),
            Codec::Interval(a) => a.check(now, cost),
            Codec::Gcra(a) => a.check(now, cost),
            Codec::FixedWindow(a) => a.check(now, cost),
            Codec::SlidingWindow(a) => a.check(now, cost),
            Codec::LeakyQueue(a) => a.check(now, cost),
            Codec::SlidingLog(l) => {
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

    /// [`decide`](Self::decide), but a leaky queue admits only with a wait of at most `within`
    /// ns (`u64::MAX`: its own bound); other algorithms never wait.
    pub(crate) fn decide_within(
        &self,
        state: u128,
        now: u64,
        cost: u64,
        within: u64,
    ) -> (Decision, Option<u128>) {
        match self {
            Codec::LeakyQueue(q) if within != u64::MAX => {
                q.reserve(state, now, cost, q.bound_units(within))
            }
            _ => self.decide(state, now, cost),
        }
    }

    /// Gives `cost` back on a plain state word; `None` when nothing changes.
    pub(crate) fn refund(&self, state: u128, now: u64, cost: u64) -> Option<u128> {
        each_codec!(self, a => a.refund(state, now, cost),
            _ => unreachable!("the sliding log has no state word"))
    }

    /// Whether a plain state word is full at `now`.
    pub(crate) fn is_full(&self, state: u128, now: u64) -> bool {
        each_codec!(self, a => a.is_full(state, now),
            _ => unreachable!("the sliding log has no state word"))
    }

    /// Whether `state` is a word this codec can step without any arithmetic going out of its
    /// range: for words read from outside the process (a shared-memory region), whose bytes
    /// are untrusted.
    pub(crate) fn valid(&self, state: u128) -> bool {
        each_codec!(self, a => a.valid(state), _ => false)
    }
}
