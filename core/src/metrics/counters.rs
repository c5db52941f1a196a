//! The decision counters: one slot per thread, so that counting is a plain load and store on
//! a line no other thread writes (no locked instruction, no shared contended line).
//!
//! # Protocol
//!
//! Every thread that counts gets a small index, dense and reused after the thread exits
//! ([`thread_index`]). Index `i` below [`SLOTS`] owns slot `i` of every limiter's counters:
//! only that thread writes it, with a Relaxed load and a Relaxed store (an exact count: no
//! other writer can interleave). A thread's exit gives its index back under a mutex, and the
//! next thread to take it acquires that mutex, so the next owner's first load reads the last
//! store of the previous one. Threads past [`SLOTS`] (and a thread counting while its
//! thread-locals are being destroyed) share one overflow slot, updated by `fetch_add`.
//!
//! Slots are allocated in chunks of [`CHUNK`], on first use by a thread of the chunk (one
//! CAS publishes it), so a limiter used by a few threads holds a few kilobytes. A snapshot
//! adds up every slot with Relaxed loads: exact once the counting threads are quiescent (or
//! joined), and otherwise a value each counter held at some moment of the read.
//!
//! The atomics are `sync::real`'s even under loom: counting is not part of any protocol the
//! models check, and loom cannot host thread-locals of its own threads.

use crate::sync::real::{AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering};
use core::cell::Cell;
use core::ptr;
use crossbeam_utils::CachePadded;

/// Slots per chunk.
pub(crate) const CHUNK: usize = 16;
const CHUNKS: usize = 64;
/// Threads with an exclusive slot (at once); the others share the overflow slot.
pub(crate) const SLOTS: usize = CHUNK * CHUNKS;

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

type Chunk = [CachePadded<Slot>; CHUNK];

/// Rare events, counted with `fetch_add` where they happen (never on a decision's path).
#[derive(Default)]
pub(crate) struct Rare {
    pub(crate) key_store_full: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) reconfigurations: AtomicU64,
}

/// A limiter's counters.
pub(crate) struct Counters {
    chunks: [AtomicPtr<Chunk>; CHUNKS],
    overflow: CachePadded<Slot>,
    pub(crate) rare: CachePadded<Rare>,
}

impl Counters {
    pub(crate) fn boxed() -> Box<Self> {
        Box::new(Self {
            chunks: [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS],
            overflow: CachePadded::new(Slot::default()),
            rare: CachePadded::new(Rare::default()),
        })
    }

    /// Counts one decision on the calling thread's slot.
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        let i = thread_index();
        if i < SLOTS {
            // SAFETY: `i / CHUNK < CHUNKS` since `i < SLOTS`.
            let chunk = unsafe { self.chunks.get_unchecked(i / CHUNK) }.load(Ordering::Acquire);
            if let Some(chunk) = unsafe_ref(chunk) {
                let c = &chunk[i % CHUNK].counts[outcome as usize];
                // The slot's only writer is this thread (module documentation).
                c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                return;
            }
            return self.count_new_chunk(i, outcome);
        }
        self.overflow.counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The first count of a thread of a chunk not yet allocated: allocates it and publishes
    /// it with one CAS (a thread that loses the race frees its own and uses the winner's).
    #[cold]
    #[inline(never)]
    fn count_new_chunk(&self, i: usize, outcome: Outcome) {
        let fresh: Box<Chunk> = Box::new(core::array::from_fn(|_| CachePadded::default()));
        let fresh = Box::into_raw(fresh);
        let cell = &self.chunks[i / CHUNK];
        if let Err(_winner) =
            cell.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `fresh` came from Box::into_raw just above and was never published.
            drop(unsafe { Box::from_raw(fresh) });
        }
        self.count(outcome);
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
        for cell in &self.chunks {
            if let Some(chunk) = unsafe_ref(cell.load(Ordering::Acquire)) {
                chunk.iter().for_each(|s| add(s));
            }
        }
        sums
    }
}

/// A published chunk, if any.
#[inline(always)]
fn unsafe_ref<'a>(p: *mut Chunk) -> Option<&'a Chunk> {
    // SAFETY: a non-null chunk pointer was published (Release, read with Acquire) fully
    // initialised, and is freed only with its `Counters` (whose borrow 'a is).
    unsafe { p.as_ref() }
}

impl Drop for Counters {
    fn drop(&mut self) {
        for cell in &self.chunks {
            let p = cell.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: published from Box::into_raw, and `&mut self` means no counter is
                // being written.
                drop(unsafe { Box::from_raw(p) });
            }
        }
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

/// The calling thread's index (see the module documentation).
#[inline(always)]
fn thread_index() -> usize {
    match INDEX.try_with(Cell::get) {
        Ok(UNSET) => assign(),
        Ok(i) => i,
        Err(_) => GONE,
    }
}

#[cold]
#[inline(never)]
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
        // More threads over time than one chunk, fewer at once: indexes are reused.
        for round in 0..4 {
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
        assert_eq!(s.iter().sum::<u64>(), 4 * 8 * 1000);
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
