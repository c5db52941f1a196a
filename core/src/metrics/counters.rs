//! The decision counters: one slot per thread, so that counting is a plain load and store on
//! a line no other thread writes (no locked instruction, no shared contended line).
//!
//! # Protocol
//!
//! Every thread that counts gets a small index, dense and reused after the thread exits
//! (`assign`). Index `i` below [`SLOTS`] owns slot `i` of every limiter's counters:
//! only that thread writes it, with a Relaxed load and a Relaxed store (an exact count: no
//! other writer can interleave). A thread's exit gives its index back under a mutex, and the
//! next thread to take it acquires that mutex, so the next owner's first load reads the last
//! store of the previous one. Threads past [`SLOTS`] (and a thread counting while its
//! thread-locals are being destroyed) share one overflow slot, updated by `fetch_add`.
//!
//! The slots are one flat array beside the overflow slot (8 KiB a limiter): a decision's count
//! is then the thread-local load of its index, and one load and one store at the address it
//! gives, with no pointer to follow. (A first version allocated the slots in chunks of 16 on
//! first use: its extra dependent load put a keyed limiter's back-to-back rejections at 1.13x
//! the uncounted time, against 1.08x here; BENCHMARKS.md, "Operations".) A
//! snapshot adds up every slot with Relaxed loads: exact once the counting threads are
//! quiescent (or joined), and otherwise a value each counter held at some moment of the read.
//!
//! The atomics are `sync::real`'s even under loom: counting is not part of any protocol the
//! models check, and loom cannot host thread-locals of its own threads.

use crate::sync::real::{AtomicU64, AtomicUsize, Mutex, Ordering};
use core::cell::Cell;
use crossbeam_utils::CachePadded;

/// Threads with an exclusive slot (at once); the others share the overflow slot.
pub(crate) const SLOTS: usize = 64;

/// What a decision counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Outcome {
    Allowed = 0,
    Rejected = 1,
    ShadowRejected = 2,
}

/// One thread's counts (or the overflow's), on a line of its own.
#[derive(Default)]
struct Slot {
    counts: [AtomicU64; 3],
}

/// Rare events, counted with `fetch_add` where they happen (never on a decision's path).
#[derive(Default)]
pub(crate) struct Rare {
    pub(crate) key_store_full: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) reconfigurations: AtomicU64,
}

/// A limiter's counters.
pub(crate) struct Counters {
    slots: [CachePadded<Slot>; SLOTS],
    overflow: CachePadded<Slot>,
    pub(crate) rare: CachePadded<Rare>,
}

impl Counters {
    pub(crate) fn boxed() -> Box<Self> {
        Box::new(Self {
            slots: core::array::from_fn(|_| CachePadded::default()),
            overflow: CachePadded::new(Slot::default()),
            rare: CachePadded::new(Rare::default()),
        })
    }

    /// Counts one decision on the calling thread's slot.
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        self.count_index(outcome as usize);
    }

    /// [`count`](Self::count) by the outcome's index (`Outcome as usize`, below 3).
    #[inline]
    pub(crate) fn count_index(&self, outcome: usize) {
        debug_assert!(outcome < 3);
        let outcome = outcome % 3;
        // An unassigned index (UNSET) and a departing thread's (GONE) are above SLOTS too:
        // one comparison sends them, with the overflow's threads, out of line.
        let i = INDEX.try_with(Cell::get).unwrap_or(GONE);
        if i < SLOTS {
            let c = &self.slots[i].counts[outcome];
            // The slot's only writer is this thread (module documentation).
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return;
        }
        self.count_slow(i, outcome);
    }

    /// A thread's first count (its index is assigned here), or a thread past the exclusive
    /// slots (the overflow slot).
    #[cold]
    #[inline(never)]
    fn count_slow(&self, i: usize, outcome: usize) {
        let i = if i == UNSET { assign() } else { i };
        if i < SLOTS {
            return self.count_index(outcome);
        }
        self.overflow.counts[outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// The three decision counts, added up over every slot.
    pub(crate) fn sums(&self) -> [u64; 3] {
        let mut sums = [0u64; 3];
        let mut add = |s: &Slot| {
            for (sum, c) in sums.iter_mut().zip(&s.counts) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        };
        add(&self.overflow);
        self.slots.iter().for_each(|s| add(s));
        sums
    }
}

// ---------------------------------------------------------------------------------------------
// Thread indexes.
// ---------------------------------------------------------------------------------------------

/// Not yet assigned.
const UNSET: usize = usize::MAX;
/// Given back while the thread's thread-locals are destroyed: the overflow slot from then on.
const GONE: usize = usize::MAX - 1;

static NEXT: AtomicUsize = AtomicUsize::new(0);
static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's index (no destructor, so reading it is one load).
    static INDEX: Cell<usize> = const { Cell::new(UNSET) };
    /// Registered with the index: gives it back when the thread exits.
    static RELEASE: Release = const { Release };
}

struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let i = INDEX.with(|c| c.replace(GONE));
        if i < GONE {
            free_list().push(i);
        }
    }
}

/// The free indexes (poisoning ignored: a push or a pop leaves the list consistent).
fn free_list() -> std::sync::MutexGuard<'static, Vec<usize>> {
    FREE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Assigns the calling thread its index (see the module documentation); `GONE` while its
/// thread-locals are destroyed.
fn assign() -> usize {
    // Only if the release hook can still be registered (the thread is not exiting).
    if RELEASE.try_with(|_| ()).is_err() {
        return GONE;
    }
    let reused = free_list().pop();
    let i = reused.unwrap_or_else(|| NEXT.fetch_add(1, Ordering::Relaxed));
    INDEX.with(|c| c.set(i));
    i
}

#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_are_exact_across_threads_and_reused_indexes() {
        let c = Arc::new(*Counters::boxed());
        // More threads over time than slots, fewer at once: indexes are reused.
        for round in 0..12 {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        for i in 0..1000 {
                            let o = match (i + t + round) % 3 {
                                0 => Outcome::Allowed,
                                1 => Outcome::Rejected,
                                _ => Outcome::ShadowRejected,
                            };
                            c.count(o);
                        }
                    })
                })
                .collect();
            hs.into_iter().for_each(|h| h.join().unwrap());
        }
        let s = c.sums();
        assert_eq!(s.iter().sum::<u64>(), 12 * 8 * 1000);
        assert!(s.iter().all(|&v| v > 10_000), "{s:?}");
    }

    #[test]
    fn the_overflow_slot_counts_what_exclusive_slots_cannot() {
        let c = Counters::boxed();
        c.overflow.counts[0].fetch_add(5, Ordering::Relaxed);
        c.count(Outcome::Allowed);
        assert_eq!(c.sums(), [6, 0, 0]);
    }
}
