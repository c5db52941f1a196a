//! The only compare-and-swap loop: a codec applied to one atomic word.
//!
//! Protocol (invariants 1-3 of DESIGN): read the word, compute the decision and the new word
//! from what was read, and install it with one compare-and-swap; on failure recompute from
//! the word the CAS returned. A rejection (or a peek) writes nothing, so a flood of rejected
//! calls only reads the cache line. Orderings are Acquire/AcqRel: the word holds the whole
//! state, so Relaxed would already be enough for the bucket; Acquire/Release is what the keyed
//! store's eviction protocol relies on, and costs nothing extra on x86.

use crate::algorithm::{Codec, Continuous, Log, SlidingLog, StateCodec};
use crate::sync::{AtomicU128, AtomicU64, Mutex, Ordering};
use crate::Decision;

/// A state word of one width: `u64` or `u128`.
pub(crate) trait Word: Copy + Eq {
    type Atomic: Send + Sync;
    /// The mark of a keyed bucket being unlinked (evicted, removed or moved to a new table).
    /// No codec state reaches it: the keyed limiter accepts clock readings only below the
    /// codec's horizon, which keeps every reachable narrow state below `u64::MAX`, and wide
    /// states stay below 2^127.
    const DEAD: Self;
    fn new_atomic(v: u128) -> Self::Atomic;
    fn load(a: &Self::Atomic) -> Self;
    fn store(a: &Self::Atomic, v: Self);
    fn swap(a: &Self::Atomic, v: Self) -> Self;
    fn cas(a: &Self::Atomic, current: Self, new: Self) -> Result<(), Self>;
    fn widen(self) -> u128;
    /// Codecs guarantee (by their horizon) that narrow states fit.
    fn narrow(v: u128) -> Self;
    /// The continuous bucket's step in this word's own width: u64 arithmetic for a narrow
    /// word (callers keep `now` within the codec's horizon and `cost` within capacity).
    fn continuous_step(a: &Continuous, cur: Self, now: u64, cost: u64) -> (Decision, Option<Self>);
}

impl Word for u64 {
    type Atomic = AtomicU64;
    const DEAD: u64 = u64::MAX;
    #[inline]
    fn new_atomic(v: u128) -> AtomicU64 {
        AtomicU64::new(Self::narrow(v))
    }
    #[inline]
    fn load(a: &AtomicU64) -> u64 {
        a.load(Ordering::Acquire)
    }
    #[inline]
    fn store(a: &AtomicU64, v: u64) {
        a.store(v, Ordering::Release)
    }
    #[inline]
    fn swap(a: &AtomicU64, v: u64) -> u64 {
        a.swap(v, Ordering::AcqRel)
    }
    #[inline]
    fn cas(a: &AtomicU64, current: u64, new: u64) -> Result<(), u64> {
        a.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
    }
    #[inline]
    fn widen(self) -> u128 {
        u128::from(self)
    }
    #[inline]
    fn narrow(v: u128) -> u64 {
        debug_assert!(v <= u128::from(u64::MAX), "narrow state overflow");
        v as u64
    }
    #[inline(always)]
    fn continuous_step(a: &Continuous, cur: u64, now: u64, cost: u64) -> (Decision, Option<u64>) {
        a.step_narrow(cur, now, cost)
    }
}

impl Word for u128 {
    type Atomic = AtomicU128;
    const DEAD: u128 = u128::MAX;
    #[inline]
    fn new_atomic(v: u128) -> AtomicU128 {
        AtomicU128::new(v)
    }
    #[inline]
    fn load(a: &AtomicU128) -> u128 {
        a.load(Ordering::Acquire)
    }
    #[inline]
    fn store(a: &AtomicU128, v: u128) {
        a.store(v, Ordering::Release)
    }
    #[inline]
    fn swap(a: &AtomicU128, v: u128) -> u128 {
        a.swap(v, Ordering::AcqRel)
    }
    #[inline]
    fn cas(a: &AtomicU128, current: u128, new: u128) -> Result<(), u128> {
        a.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
    }
    #[inline]
    fn widen(self) -> u128 {
        self
    }
    #[inline]
    fn narrow(v: u128) -> u128 {
        v
    }
    #[inline(always)]
    fn continuous_step(a: &Continuous, cur: u128, now: u64, cost: u64) -> (Decision, Option<u128>) {
        a.step_wide(cur, now, cost)
    }
}

// A single bucket's word is a codec state or `W::DEAD`, the seal of a live reconfiguration
// (`Limiter::set_quota`): the reconfiguring thread swaps the word to DEAD, converts the state
// it swapped out, and publishes a new generation holding the converted word. A DEAD word is
// never written again. Every loop below gives up (`None`) on meeting it, having applied
// nothing, and the limiter goes on with the newer generation; a CAS can only succeed against
// a codec state, so a decision lands before the seal (and is in the converted state) or after
// it (on the converted state). The limiter's readings stay below the codec's `limit`, which
// keeps every state below DEAD.

/// `codec.acquire` on the word, until the CAS succeeds or nothing is to be written; `None`
/// when the word is sealed.
#[inline(always)]
fn acquire<W: Word, A: StateCodec>(
    word: &W::Atomic,
    codec: &A,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    live_loop::<W>(word, |cur| {
        let (decision, new) = codec.acquire(cur.widen(), now, cost);
        (decision, new.map(W::narrow))
    })
}

/// `codec.refund` on the word, until the CAS succeeds or nothing changes; `None` when the
/// word is sealed.
#[inline]
fn refund<W: Word, A: StateCodec>(word: &W::Atomic, codec: &A, now: u64, cost: u64) -> Option<()> {
    let mut cur = W::load(word);
    loop {
        if cur == W::DEAD {
            return None;
        }
        let Some(new) = codec.refund(cur.widen(), now, cost) else {
            return Some(());
        };
        match W::cas(word, cur, W::narrow(new)) {
            Ok(()) => return Some(()),
            Err(actual) => cur = actual,
        }
    }
}

/// The decision `acquire` would return for the current word, writing nothing; `None` when
/// the word is sealed.
#[inline]
fn peek<W: Word, A: StateCodec>(
    word: &W::Atomic,
    codec: &A,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    let cur = W::load(word);
    (cur != W::DEAD).then(|| codec.acquire(cur.widen(), now, cost).0)
}

/// Whether the bucket is full at `now`; `None` when the word is sealed.
#[inline]
fn is_full<W: Word, A: StateCodec>(word: &W::Atomic, codec: &A, now: u64) -> Option<bool> {
    let cur = W::load(word);
    (cur != W::DEAD).then(|| codec.is_full(cur.widen(), now))
}

/// One bucket's word, of the width its codec chose; or, for the sliding log only, its log.
#[derive(Debug)]
pub(crate) enum Slot {
    Narrow(AtomicU64),
    Wide(AtomicU128),
    /// Boxed so that the word slots stay two words wide.
    Log(Box<LogCell>),
    /// Outside the process (a shared-memory region, a Redis server): the limiter calls it
    /// before the dispatch below (whose operations are infallible, and a store's are not).
    #[allow(dead_code)]
    External(Box<crate::bucket::limiter::External>),
}

/// What a reconfiguration took out of a sealed slot: the state word, or the log.
pub(crate) enum Sealed {
    Word(u128),
    Log(Log),
}

/// Runs `$f::<Word, StateCodec>(word, codec, args...)` for the slot's width and the codec's codec,
/// or `$log` for the sliding log. The token bucket's arms come first; the whole dispatch is
/// one match on two discriminants that never change for a given generation (predicted).
macro_rules! dispatch {
    ($slot:expr, $codec:expr, $f:ident ( $($arg:expr),* ), $l:ident, $la:ident => $log:expr) => {
        match ($slot, $codec) {
            (Slot::Narrow(w), Codec::Continuous(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::Continuous(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Codec::Interval(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::Interval(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Codec::Gcra(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::Gcra(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Codec::FixedWindow(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::FixedWindow(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Codec::SlidingWindow(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::SlidingWindow(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Codec::LeakyQueue(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Codec::LeakyQueue(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Log($l), Codec::SlidingLog($la)) => $log,
            _ => unreachable!("a slot is only ever used with the codec that made it"),
        }
    };
}

impl Slot {
    /// A fresh bucket at `now`, in the width `codec` needs.
    pub(crate) fn new(codec: &Codec, now: u64) -> Self {
        if let Codec::SlidingLog(_) = codec {
            return Slot::Log(Box::new(LogCell::new(Log::new(now))));
        }
        Self::word(codec, codec.fresh(now))
    }

    /// A bucket holding `state`, in the width `codec` needs.
    fn word(codec: &Codec, state: u128) -> Self {
        if codec.wide() {
            Slot::Wide(<u128 as Word>::new_atomic(state))
        } else {
            Slot::Narrow(<u64 as Word>::new_atomic(state))
        }
    }

    /// A bucket holding what a reconfiguration carried into `codec` (`carried`: the state
    /// word, or the log).
    pub(crate) fn carried(codec: &Codec, carried: Sealed) -> Self {
        match carried {
            Sealed::Word(s) => Self::word(codec, s),
            Sealed::Log(log) => Slot::Log(Box::new(LogCell::new(log))),
        }
    }

    /// `codec` must be the one the slot was made for; `codec.check(now, cost)` must have passed.
    /// `None`: the slot is sealed (nothing was applied).
    #[inline(always)]
    pub(crate) fn acquire(&self, codec: &Codec, now: u64, cost: u64) -> Option<Decision> {
        dispatch!(self, codec, acquire(now, cost), l, a => l.decide(a, now, cost, true))
    }

    #[inline]
    pub(crate) fn refund(&self, codec: &Codec, now: u64, cost: u64) -> Option<()> {
        dispatch!(self, codec, refund(now, cost), l, a => l.refund(a, now, cost))
    }

    #[inline]
    pub(crate) fn is_full(&self, codec: &Codec, now: u64) -> Option<bool> {
        dispatch!(self, codec, is_full(now), l, a => l.is_full(a, now))
    }

    /// The decision `acquire` would return, changing nothing.
    #[inline]
    pub(crate) fn peek(&self, codec: &Codec, now: u64, cost: u64) -> Option<Decision> {
        dispatch!(self, codec, peek(now, cost), l, a => l.decide(a, now, cost, false))
    }

    /// Like `acquire`, but a leaky-queue reservation is admitted only with a wait of at most
    /// `max_wait_ns` (other algorithms admit without waiting or not at all).
    #[inline]
    pub(crate) fn reserve(
        &self,
        codec: &Codec,
        now: u64,
        cost: u64,
        max_wait_ns: u64,
    ) -> Option<Decision> {
        match (self, codec) {
            (Slot::Narrow(w), Codec::LeakyQueue(q)) if max_wait_ns != u64::MAX => {
                let bound = q.bound_units(max_wait_ns);
                live_loop::<u64>(w, |s| {
                    let (d, new) = q.reserve(Word::widen(s), now, cost, bound);
                    (d, new.map(<u64 as Word>::narrow))
                })
            }
            (Slot::Wide(w), Codec::LeakyQueue(q)) if max_wait_ns != u64::MAX => {
                let bound = q.bound_units(max_wait_ns);
                live_loop::<u128>(w, |s| q.reserve(s, now, cost, bound))
            }
            _ => self.acquire(codec, now, cost),
        }
    }

    /// Whether a reconfiguration sealed the slot (its generation is no longer current).
    pub(crate) fn is_sealed(&self) -> bool {
        match self {
            Slot::Narrow(w) => <u64 as Word>::load(w) == <u64 as Word>::DEAD,
            Slot::Wide(w) => <u128 as Word>::load(w) == <u128 as Word>::DEAD,
            Slot::Log(l) => l.with(|_| ()).is_none(),
            Slot::External(_) => false,
        }
    }

    /// Seals the slot and takes what it held (a reconfiguration, under its writer's lock: the
    /// slot is not sealed yet). Every later operation on the slot gives up (`None`).
    pub(crate) fn seal(&self) -> Sealed {
        match self {
            Slot::Narrow(w) => {
                Sealed::Word(Word::widen(<u64 as Word>::swap(w, <u64 as Word>::DEAD)))
            }
            Slot::Wide(w) => Sealed::Word(<u128 as Word>::swap(w, <u128 as Word>::DEAD)),
            Slot::Log(l) => Sealed::Log(l.take().expect("sealed once, by the writer")),
            Slot::External(_) => unreachable!("an external bucket is never reconfigured"),
        }
    }

    /// Gives a sealed slot back what [`seal`](Self::seal) took (a reconfiguration that failed
    /// after sealing): the slot is as it was, and the decisions that waited go on with it.
    pub(crate) fn unseal(&self, sealed: Sealed) {
        match (self, sealed) {
            (Slot::Narrow(w), Sealed::Word(s)) => <u64 as Word>::store(w, <u64 as Word>::narrow(s)),
            (Slot::Wide(w), Sealed::Word(s)) => <u128 as Word>::store(w, s),
            (Slot::Log(l), Sealed::Log(log)) => l.put(log),
            _ => unreachable!("a slot gets back what it held"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keyed buckets: the same CAS loops, plus the DEAD mark of the keyed store's eviction protocol.
//
// A keyed bucket's word is either a codec state or `W::DEAD`. Only the holder of the shard's
// lock installs DEAD (eviction, removal, migration to a new table), always by one CAS or swap
// from an observed state, and the holder unlinks the entry before releasing the lock. A
// consumer that observes DEAD gives up on that entry and looks the key up again under the
// lock; since its own CAS can only succeed against a codec state, a consume is applied either
// before the mark (and the marker saw it) or to the bucket the key has after the mark.
// ---------------------------------------------------------------------------------------------

/// Runs `$e` with `$a` bound to the codec's word codec. The keyed store keeps sliding logs
/// (which have no state word) in `keyed_log.rs`, never in a word table, so that arm cannot be
/// reached.
macro_rules! with_codec {
    ($codec:expr, $a:ident => $e:expr) => {
        match $codec {
            Codec::Continuous($a) => $e,
            Codec::Interval($a) => $e,
            Codec::Gcra($a) => $e,
            Codec::FixedWindow($a) => $e,
            Codec::SlidingWindow($a) => $e,
            Codec::LeakyQueue($a) => $e,
            Codec::SlidingLog(_) => unreachable!("sliding logs are kept by keyed_log.rs"),
        }
    };
}

/// `acquire` on a keyed bucket; `None` when the word is DEAD (nothing was applied). The
/// default quota steps in the word's own width (u64 arithmetic on a narrow word, as
/// `Limiter`'s fast path does; the keyed store's check keeps `now` within the horizon).
#[inline(always)]
pub(crate) fn acquire_live<W: Word>(
    word: &W::Atomic,
    codec: &Codec,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    if let Codec::Continuous(a) = codec {
        return live_loop::<W>(word, |cur| W::continuous_step(a, cur, now, cost));
    }
    with_codec!(codec, a => live_loop::<W>(word, |cur| {
        let (decision, new) = a.acquire(cur.widen(), now, cost);
        (decision, new.map(W::narrow))
    }))
}

/// One decision on a plain word that its caller owns alone (`store::dense`): the step
/// [`acquire_live`] applies to an atomic word, in the same arithmetic (the default quota's
/// u64 twin on a narrow word), with no CAS. `word` must be a state of `codec`, never DEAD.
#[inline(always)]
pub(crate) fn step_owned<W: Word>(
    word: W,
    codec: &Codec,
    now: u64,
    cost: u64,
) -> (Decision, Option<W>) {
    if let Codec::Continuous(a) = codec {
        return W::continuous_step(a, word, now, cost);
    }
    with_codec!(codec, a => {
        let (decision, new) = a.acquire(word.widen(), now, cost);
        (decision, new.map(W::narrow))
    })
}

/// [`acquire_live`], but a leaky queue admits only with a wait of at most `within` ns
/// (`u64::MAX`: its own bound, which is `acquire_live` exactly; callers that pass the constant
/// get `acquire_live` with no extra branch).
#[inline(always)]
pub(crate) fn reserve_live<W: Word>(
    word: &W::Atomic,
    codec: &Codec,
    now: u64,
    cost: u64,
    within: u64,
) -> Option<Decision> {
    if within != u64::MAX {
        if let Codec::LeakyQueue(q) = codec {
            let bound = q.bound_units(within);
            return live_loop::<W>(word, |cur| {
                let (decision, new) = q.reserve(cur.widen(), now, cost, bound);
                (decision, new.map(W::narrow))
            });
        }
    }
    acquire_live::<W>(word, codec, now, cost)
}

/// Applies `step` to a keyed bucket's word until the CAS succeeds or nothing is to be
/// written; `None` when the word is DEAD.
#[inline(always)]
pub(crate) fn live_loop<W: Word>(
    word: &W::Atomic,
    step: impl Fn(W) -> (Decision, Option<W>),
) -> Option<Decision> {
    let mut cur = W::load(word);
    loop {
        if cur == W::DEAD {
            return None;
        }
        let (decision, new) = step(cur);
        let Some(new) = new else {
            return Some(decision);
        };
        match W::cas(word, cur, new) {
            Ok(()) => return Some(decision),
            Err(actual) => cur = actual,
        }
    }
}

/// `refund` on a keyed bucket; `false` when the word is DEAD (nothing was applied).
#[inline]
pub(crate) fn refund_live<W: Word>(word: &W::Atomic, codec: &Codec, now: u64, cost: u64) -> bool {
    with_codec!(codec, a => {
        let mut cur = W::load(word);
        loop {
            if cur == W::DEAD {
                return false;
            }
            let Some(new) = a.refund(cur.widen(), now, cost) else {
                return true;
            };
            match W::cas(word, cur, W::narrow(new)) {
                Ok(()) => return true,
                Err(actual) => cur = actual,
            }
        }
    })
}

/// What [`evict_if_full`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evict {
    /// The bucket was full at `now` and is now DEAD.
    Killed,
    /// The bucket is not full: it will be in `full_in` ns (absent further requests).
    Kept { full_in: u64 },
    /// The word was already DEAD.
    Dead,
}

/// Marks the bucket DEAD if it is full at `now`. The mark is installed by a CAS from the very
/// state that was found full, so a consume racing with it either lands first (and the CAS
/// fails, and the bucket is re-examined) or finds DEAD and re-creates the key.
/// `before_mark` runs before each attempt to install the mark.
#[inline]
pub(crate) fn evict_if_full<W: Word>(
    word: &W::Atomic,
    codec: &Codec,
    now: u64,
    mut before_mark: impl FnMut(),
) -> Evict {
    with_codec!(codec, a => {
        let mut cur = W::load(word);
        loop {
            if cur == W::DEAD {
                return Evict::Dead;
            }
            if !a.is_full(cur.widen(), now) {
                let full_in = a.acquire(cur.widen(), now, 0).0.reset_after_nanos();
                return Evict::Kept { full_in };
            }
            before_mark();
            match W::cas(word, cur, W::DEAD) {
                Ok(()) => return Evict::Killed,
                Err(actual) => cur = actual,
            }
        }
    })
}

/// Marks the bucket DEAD unconditionally; returns the state it had (`None`: already DEAD).
#[inline]
pub(crate) fn kill<W: Word>(word: &W::Atomic) -> Option<W> {
    let old = W::swap(word, W::DEAD);
    (old != W::DEAD).then_some(old)
}

/// Marks the bucket DEAD if its word is still `observed`.
#[inline]
pub(crate) fn kill_from<W: Word>(word: &W::Atomic, observed: W) -> bool {
    observed != W::DEAD && W::cas(word, observed, W::DEAD).is_ok()
}

/// One bucket's log behind its lock; `None` once a reconfiguration sealed it (the log moved to
/// the new generation).
#[derive(Debug)]
pub(crate) struct LogCell {
    log: Mutex<Option<Log>>,
}

impl LogCell {
    pub(crate) fn new(log: Log) -> Self {
        Self {
            log: Mutex::new(Some(log)),
        }
    }

    /// `f` on the log; `None` when the cell is sealed.
    fn with<R>(&self, f: impl FnOnce(&mut Log) -> R) -> Option<R> {
        let mut guard = match self.log.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.as_mut().map(f)
    }

    fn take(&self) -> Option<Log> {
        crate::sync::lock(&self.log).take()
    }

    fn put(&self, log: Log) {
        *crate::sync::lock(&self.log) = Some(log);
    }

    /// The decision for `cost` at `now`; admitted cost is recorded when `commit`.
    pub(crate) fn decide(
        &self,
        a: &SlidingLog,
        now: u64,
        cost: u64,
        commit: bool,
    ) -> Option<Decision> {
        self.with(|log| log.decide(a, now, cost, commit))
    }

    /// Removes up to `cost` units still in the window, newest first.
    pub(crate) fn refund(&self, a: &SlidingLog, now: u64, cost: u64) -> Option<()> {
        self.with(|log| log.refund(a, now, cost))
    }

    /// See [`Log::is_full`].
    pub(crate) fn is_full(&self, a: &SlidingLog, now: u64) -> Option<bool> {
        self.with(|log| log.is_full(a, now))
    }
}
