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

    /// The first reading at which a state could be the all-ones word (the mark of a sealed or
    /// unlinked bucket, `cell::Word::DEAD`): readings below it never produce one. The horizon
    /// for the instant-based codecs (a state at the horizon may be exactly all ones); the
    /// window counters keep one whole window below theirs (a state of the last window may be).
    fn limit(&self) -> u64 {
        self.horizon()
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

    /// The request checks of a single bucket, whose word is sealed with the all-ones mark by
    /// a reconfiguration: [`check`](Self::check), and a reading below [`limit`](Self::limit).
    #[inline]
    pub(crate) fn check_word(&self, now: u64, cost: u64) -> Result<(), Error> {
        self.check(now, cost)?;
        self.check_reading(now)
    }

    /// A reading below [`limit`](Self::limit) (no state written at it is the all-ones mark).
    #[inline]
    pub(crate) fn check_reading(&self, now: u64) -> Result<(), Error> {
        let limit = self.limit();
        if now >= limit && limit != u64::MAX {
            return Err(Error::ClockOutOfRange {
                now,
                horizon: limit - 1,
            });
        }
        Ok(())
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

    /// See [`StateCodec::limit`]: readings must stay below it for no state word to be the
    /// all-ones mark (the sliding log has no word: `u64::MAX`).
    pub(crate) fn limit(&self) -> u64 {
        each_codec!(self, a => a.limit(), _ => u64::MAX)
    }

    /// Whether a bucket of this codec can be carried into one of `to` (live reconfiguration):
    /// the same algorithm and, for the token bucket, the same refill mode.
    pub(crate) fn carries_to(&self, to: &Codec) -> bool {
        core::mem::discriminant(self) == core::mem::discriminant(to)
    }

    /// The carry rule of live reconfiguration (docs/OPERATIONS.md): the state `to` gives the
    /// bucket whose state under `self` is `state`, read at `now`. `Err` when the instant the
    /// carry is made at is past `to`'s range. `self.carries_to(to)` must hold; the sliding
    /// log has no word (its log is kept as it is).
    pub(crate) fn carry(&self, state: u128, now: u64, to: &Codec) -> Result<u128, Error> {
        let r = match (self, to) {
            (Codec::Continuous(a), Codec::Continuous(b)) => a.carry(state, now, b),
            (Codec::Interval(a), Codec::Interval(b)) => a.carry(state, now, b),
            (Codec::Gcra(a), Codec::Gcra(b)) => a.carry(state, now, b),
            (Codec::FixedWindow(a), Codec::FixedWindow(b)) => a.carry(state, now, b),
            (Codec::SlidingWindow(a), Codec::SlidingWindow(b)) => a.carry(state, now, b),
            (Codec::LeakyQueue(a), Codec::LeakyQueue(b)) => a.carry(state, now, b),
            _ => unreachable!("carried only between codecs of one algorithm"),
        };
        r.map_err(|at| Error::ClockOutOfRange {
            now: at,
            horizon: to.limit().saturating_sub(1),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The carry rule's arithmetic, shared by the codecs (each codec's `carry` is in its own file).
// ---------------------------------------------------------------------------------------------

/// `ceil(x * a / b)`, exact for any `x` whose result fits 128 bits (`b > 0`).
pub(crate) fn mul_div_ceil(x: u128, a: u64, b: u64) -> u128 {
    let (a, b) = (u128::from(a), u128::from(b));
    (x / b) * a + ((x % b) * a).div_ceil(b)
}

/// `floor(x * a / b)`, exact for any `x` whose result fits 128 bits (`b > 0`).
pub(crate) fn mul_div_floor(x: u128, a: u64, b: u64) -> u128 {
    let (a, b) = (u128::from(a), u128::from(b));
    (x / b) * a + ((x % b) * a) / b
}

/// The instant a carry is made at: the reading `now`, or the instant a state proves (`proven`
/// scaled by `k`, rounded up to a whole nanosecond) when that is later: a state written by a
/// decision whose reading was later than `now` is never read as of an earlier instant, where
/// the codec's clamp would lose what it records.
pub(crate) fn carry_instant(proven: u128, k: u64, now: u64) -> u64 {
    let t = proven.div_ceil(u128::from(k));
    u64::try_from(t).unwrap_or(u64::MAX).max(now)
}

/// Tokens carried: `avail` (scaled: one token is `p` units) clamped to the new bucket's `bp2`
/// and rounded down to its grain (one token is `p2` units): the bucket never gains.
pub(crate) fn carry_tokens(avail: u64, p: u64, bp2: u64, p2: u64) -> u64 {
    let exact = mul_div_floor(u128::from(avail), p2, p);
    u64::try_from(exact).unwrap_or(u64::MAX).min(bp2)
}
