//! The key bound of a keyed store: the count of live keys against `max_keys`, and the hint
//! that spares a flood of new keys at the bound a scan each. Shared by the word store
//! (`keyed.rs`) and the sliding-log store (`keyed_log.rs`), which differ only in what they
//! scan.
//!
//! The hint protocol. A complete scan at the bound that finds nothing to evict records the
//! earliest instant anything can become full (`hint`); until then new keys are refused in
//! O(1). A change that can make a bucket full sooner (a new bucket, a refund) is followed by
//! `gen += 1` and then `hint = min(hint, full_at)`, both read-modify-writes ([`Bound::lowered`]).
//! The scanner reads `gen` (g0) before its scan and, after recording its hint, reads `gen`
//! again with a read-modify-write ([`Bound::found_nothing`]). Either a change's bump comes
//! first in `gen`'s order, and the scanner sees `gen != g0` and drops the hint it set (or the
//! bump preceded g0, and the scan saw the change), or the bump comes after: then the
//! scanner's hint happens before the change's load of `hint`, which sees it and lowers it. A
//! hint of 0 means none, and needs no lowering; lowering a hint to 0 (a bucket full from
//! instant 0 on) leaves none, which is right: no instant is then before the first full one.

use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// The shared counters of the key bound, on a cache line of their own (every new key and
/// every refund writes it; the hot path's read-mostly fields live elsewhere).
pub(crate) struct Bound {
    /// Live keys, plus keys being linked (reserved first, so the bound is never exceeded).
    /// Shared by a store and the store of its long keys' digests ([`Bound::sharing`]), so
    /// that `max_keys` bounds both together.
    len: Arc<AtomicUsize>,
    hint: Hint,
    /// Buckets evicted so far (for the limiter's metrics; a plain counter, in no protocol).
    evicted: crate::sync::real::AtomicU64,
}

/// The hint and the eviction watermark: plain atomics, all zero when new, in a fixed layout,
/// so that a shared-memory region keeps one in its header for every process.
#[repr(C)]
pub(crate) struct Hint {
    /// Bumped after every change that can make a bucket full sooner than `hint` says.
    gen: AtomicU64,
    /// 0, or an instant before which nothing is full: see the module documentation.
    hint: AtomicU64,
    /// The latest `now` at which a full bucket was evicted: re-created keys start there.
    watermark: AtomicU64,
}

/// A unit of the bound taken for a new key, given back on drop unless [`kept`](Self::kept):
/// the key's conversion (user code) may unwind between the reservation and the link.
pub(crate) struct Reservation<'a> {
    bound: &'a Bound,
}

impl Reservation<'_> {
    /// The key was linked: the unit stays taken.
    pub(crate) fn kept(self) {
        core::mem::forget(self);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.bound.give_back(1);
    }
}

/// Why a new key of an in-process store found no room at the bound (nothing to evict, and
/// [`OnFull`](super::OnFull) made none). A scan holds its own shard's lock and only tries the
/// others' (waiting for one could deadlock with its holder waiting for ours), so a busy shard
/// goes unseen, and room being made there (a sweep evicting, a key removed) with it: the
/// caller then lets go of its lock, waits for the shards in turn, and looks again, rather
/// than refusing a key the bound has room for.
pub(crate) enum NoRoom {
    /// Every shard was looked at.
    Full,
    /// A shard was busy.
    Busy,
}

/// After a search for room that made none, for a new key of another store sharing the bound
/// (`long.rs`), `found` being [`Bound::no_room`]'s answer: whether that key looks again. It
/// does when a unit was given back meanwhile, and, once (`waited` unset, then set), when a
/// shard was busy: `wait` then waits for each shard in turn, holding no other lock, and
/// sweeps it, as the store's own new keys do.
pub(crate) fn look_again(found: Option<NoRoom>, waited: &mut bool, wait: impl FnOnce()) -> bool {
    match found {
        None => true,
        Some(NoRoom::Busy) if !*waited => {
            *waited = true;
            wait();
            true
        }
        Some(_) => false,
    }
}

/// A scan at the bound in progress: what [`Bound::found_nothing`] needs.
pub(crate) struct Scan {
    gen: u64,
    hint: u64,
}

impl Bound {
    /// Boxed: its own cache line(s) away from the limiter's read-mostly fields, without
    /// making every `KeyedLimiter` as large as the padding.
    pub(crate) fn boxed() -> Box<CachePadded<Bound>> {
        Box::new(CachePadded::new(Bound {
            len: Arc::new(AtomicUsize::new(0)),
            hint: Hint::new(),
            evicted: crate::sync::real::AtomicU64::new(0),
        }))
    }

    /// A bound of its own (hint, watermark) over the same count of keys as `self`: for a
    /// second store whose keys count against the same `max_keys`.
    pub(crate) fn sharing(&self) -> Box<CachePadded<Bound>> {
        Box::new(CachePadded::new(Bound {
            len: self.len.clone(),
            hint: Hint::new(),
            evicted: crate::sync::real::AtomicU64::new(0),
        }))
    }

    /// Live keys (and keys being linked).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Takes one unit of the bound; `false` when `max` units are taken.
    pub(crate) fn take(&self, max: usize) -> bool {
        let mut n = self.len.load(Ordering::Acquire);
        while n < max {
            match self
                .len
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }

    /// After a search for room that made none: `None` if a unit was given back meanwhile
    /// (take it: look again), else why there is no room.
    pub(crate) fn no_room(&self, max: usize, busy: bool) -> Option<NoRoom> {
        if self.len() < max {
            None
        } else if busy {
            Some(NoRoom::Busy)
        } else {
            Some(NoRoom::Full)
        }
    }

    /// [`take`](Self::take) as a guard that gives the unit back unless kept.
    pub(crate) fn reserve(&self, max: usize) -> Option<Reservation<'_>> {
        // Built only once the unit is taken: a guard built before the check (as `then_some`
        // would) gives back, when dropped, a unit that was never taken.
        if self.take(max) {
            Some(Reservation { bound: self })
        } else {
            None
        }
    }

    /// Gives back `n` units (keys unlinked, or a reservation not used).
    #[inline]
    pub(crate) fn give_back(&self, n: usize) {
        self.len.fetch_sub(n, Ordering::AcqRel);
    }

    /// Counts `n` evictions.
    #[inline]
    pub(crate) fn evicted(&self, n: usize) {
        self.evicted
            .fetch_add(n as u64, crate::sync::real::Ordering::Relaxed);
    }

    /// The evictions counted so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.evicted.load(crate::sync::real::Ordering::Relaxed)
    }

    /// Takes `n` units for keys moved in by a live reconfiguration (which came from a store
    /// under the same bound, so they fit).
    pub(crate) fn moved_in(&self, n: usize) {
        self.len.fetch_add(n, Ordering::AcqRel);
    }

    /// [`Hint::lowered`].
    pub(crate) fn lowered(&self, full_at: u64) {
        self.hint.lowered(full_at);
    }

    /// [`Hint::scan`].
    pub(crate) fn scan(&self, now: u64) -> Option<Scan> {
        self.hint.scan(now)
    }

    /// [`Hint::found_nothing`].
    pub(crate) fn found_nothing(&self, scan: Scan, soonest: u64) {
        self.hint.found_nothing(scan, soonest);
    }

    /// [`Hint::watermark`].
    #[inline]
    pub(crate) fn watermark(&self) -> u64 {
        self.hint.watermark()
    }

    /// [`Hint::raise_watermark`].
    #[inline]
    pub(crate) fn raise_watermark(&self, now: u64) {
        self.hint.raise_watermark(now);
    }
}

impl Hint {
    /// No hint, watermark 0 (the same as all-zero bytes).
    pub(crate) fn new() -> Self {
        Self {
            gen: AtomicU64::new(0),
            hint: AtomicU64::new(0),
            watermark: AtomicU64::new(0),
        }
    }

    /// Back to new: no hint, watermark 0 (a shared-memory region being initialised).
    pub(crate) fn reset(&self) {
        self.gen.store(0, Ordering::Relaxed);
        self.hint.store(0, Ordering::Relaxed);
        self.watermark.store(0, Ordering::Relaxed);
    }

    /// Records that a bucket can be full from `full_at` on, maybe sooner than the hint says:
    /// a new bucket, or a refund. Called after the change (a shared-memory region's table
    /// calls it before the change too, so that a process killed between the two leaves no
    /// hint later than the bucket's `full_at`: see `shm::table`'s `claim`).
    pub(crate) fn lowered(&self, full_at: u64) {
        self.gen.fetch_add(1, Ordering::AcqRel);
        if self.hint.load(Ordering::Acquire) != 0 {
            // Not clamped to 1: a bucket full from instant 0 on must leave no hint (0), for a
            // hint of 1 would refuse a new key at instant 0 without the scan that evicts it.
            self.hint.fetch_min(full_at, Ordering::AcqRel);
        }
    }

    /// Starts a scan for full buckets at `now`; `None` when the hint says that nothing can be
    /// full yet (the new key is refused without a scan).
    pub(crate) fn scan(&self, now: u64) -> Option<Scan> {
        self.scan_below(now, u64::MAX)
    }

    /// [`scan`](Self::scan), believing no hint past `bound`: one no bucket can have given,
    /// written by someone else (a shared-memory region's bytes are untrusted), is taken for none.
    pub(crate) fn scan_below(&self, now: u64, bound: u64) -> Option<Scan> {
        let gen = self.gen.load(Ordering::Acquire);
        let hint = self.hint.load(Ordering::Acquire);
        if hint != 0 && now < hint && hint <= bound {
            return None;
        }
        Some(Scan { gen, hint })
    }

    /// A complete scan found nothing to evict, and nothing becomes full before `soonest`:
    /// records it as the hint, unless a change lowered the hint or bumped `gen` meanwhile.
    pub(crate) fn found_nothing(&self, scan: Scan, soonest: u64) {
        if self
            .hint
            .compare_exchange(scan.hint, soonest, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && self.gen.fetch_add(0, Ordering::AcqRel) != scan.gen
        {
            // Something was created or refunded meanwhile, maybe where the scan had passed.
            self.hint.store(0, Ordering::Release);
        }
    }

    /// Where re-created keys start: the latest eviction of a full bucket.
    #[inline]
    pub(crate) fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }

    /// Called before a full bucket is marked for eviction at `now`, so that whoever
    /// re-creates its key reads it.
    #[inline]
    pub(crate) fn raise_watermark(&self, now: u64) {
        self.watermark.fetch_max(now, Ordering::AcqRel);
    }
}
