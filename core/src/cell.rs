//! The only compare-and-swap loop: a codec applied to one atomic word.
//!
//! Protocol (invariants 1-3 of DESIGN): read the word, compute the decision and the new word
//! from what was read, and install it with one compare-and-swap; on failure recompute from
//! the word the CAS returned. A rejection (or a peek) writes nothing, so a flood of rejected
//! calls only reads the cache line. Orderings are Acquire/AcqRel: the word holds the whole
//! state, so Relaxed would already be enough for the bucket; Acquire/Release is what the keyed
//! store's eviction protocol relies on, and costs nothing extra on x86.

use crate::algorithm::{Algo, Codec};
use crate::sync::{AtomicU128, AtomicU64, Ordering};
use crate::Decision;

/// A state word of one width: `u64` or `u128`.
pub(crate) trait Word: Copy + Eq {
    type Atomic;
    fn new_atomic(v: u128) -> Self::Atomic;
    fn load(a: &Self::Atomic) -> Self;
    fn cas(a: &Self::Atomic, current: Self, new: Self) -> Result<(), Self>;
    fn widen(self) -> u128;
    /// Codecs guarantee (by their horizon) that narrow states fit.
    fn narrow(v: u128) -> Self;
}

impl Word for u64 {
    type Atomic = AtomicU64;
    #[inline]
    fn new_atomic(v: u128) -> AtomicU64 {
        AtomicU64::new(Self::narrow(v))
    }
    #[inline]
    fn load(a: &AtomicU64) -> u64 {
        a.load(Ordering::Acquire)
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
}

impl Word for u128 {
    type Atomic = AtomicU128;
    #[inline]
    fn new_atomic(v: u128) -> AtomicU128 {
        AtomicU128::new(v)
    }
    #[inline]
    fn load(a: &AtomicU128) -> u128 {
        a.load(Ordering::Acquire)
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
}

/// Applies `codec.acquire` to the word until the CAS succeeds or nothing is to be written.
#[inline(always)]
pub(crate) fn acquire<W: Word, A: Codec>(
    word: &W::Atomic,
    codec: &A,
    now: u64,
    cost: u64,
) -> Decision {
    let mut cur = W::load(word);
    loop {
        let (decision, new) = codec.acquire(cur.widen(), now, cost);
        let Some(new) = new else {
            return decision;
        };
        match W::cas(word, cur, W::narrow(new)) {
            Ok(()) => return decision,
            Err(actual) => cur = actual,
        }
    }
}

/// Applies `codec.refund` to the word until the CAS succeeds or nothing changes.
#[inline]
pub(crate) fn refund<W: Word, A: Codec>(word: &W::Atomic, codec: &A, now: u64, cost: u64) {
    let mut cur = W::load(word);
    while let Some(new) = codec.refund(cur.widen(), now, cost) {
        match W::cas(word, cur, W::narrow(new)) {
            Ok(()) => return,
            Err(actual) => cur = actual,
        }
    }
}

/// Reads the word and tells whether the bucket is full at `now`.
#[inline]
pub(crate) fn is_full<W: Word, A: Codec>(word: &W::Atomic, codec: &A, now: u64) -> bool {
    codec.is_full(W::load(word).widen(), now)
}

/// One bucket's word, of the width its codec chose.
#[derive(Debug)]
pub(crate) enum Slot {
    Narrow(AtomicU64),
    Wide(AtomicU128),
}

/// Runs `$f::<Word, Codec>(word, codec, args...)` for the slot's width and the algo's codec.
macro_rules! dispatch {
    ($slot:expr, $algo:expr, $f:ident ( $($arg:expr),* )) => {
        match ($slot, $algo) {
            (Slot::Narrow(w), Algo::Continuous(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Algo::Continuous(a)) => $f::<u128, _>(w, a, $($arg),*),
            (Slot::Narrow(w), Algo::Interval(a)) => $f::<u64, _>(w, a, $($arg),*),
            (Slot::Wide(w), Algo::Interval(a)) => $f::<u128, _>(w, a, $($arg),*),
        }
    };
}

impl Slot {
    /// A fresh bucket at `now`, in the width `algo` needs.
    pub(crate) fn new(algo: &Algo, now: u64) -> Self {
        let state = algo.fresh(now);
        if algo.wide() {
            Slot::Wide(<u128 as Word>::new_atomic(state))
        } else {
            Slot::Narrow(<u64 as Word>::new_atomic(state))
        }
    }

    /// `algo` must be the one the slot was made for; `algo.check(now, cost)` must have passed.
    #[inline(always)]
    pub(crate) fn acquire(&self, algo: &Algo, now: u64, cost: u64) -> Decision {
        dispatch!(self, algo, acquire(now, cost))
    }

    #[inline]
    pub(crate) fn refund(&self, algo: &Algo, now: u64, cost: u64) {
        dispatch!(self, algo, refund(now, cost))
    }

    #[inline]
    pub(crate) fn is_full(&self, algo: &Algo, now: u64) -> bool {
        dispatch!(self, algo, is_full(now))
    }
}
