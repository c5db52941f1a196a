//! Live reconfiguration of one bucket: [`Limiter::set_quota`](crate::Limiter::set_quota).
//!
//! # Generations
//!
//! A bucket's state is a word whose meaning is its codec's, and a new quota is a new codec
//! (possibly of another word width). A *generation* is a codec and the slot it runs on. The
//! limiter's first generation lives inline, in its padded block, so that a limiter never
//! reconfigured decides exactly as before: one extra comparison of the word it loads with the
//! seal mark. Later generations are published behind [`Live::current`] and read inside a read
//! section (crate::sync::rcu), which keeps a generation allocated while a decision uses it.
//!
//! # Hand-over (one writer at a time, under `writer`)
//!
//! 1. The writer seals the current generation's slot: it swaps the word to the DEAD mark (or
//!    takes the log out of its cell) and gets the final state. No decision can apply to that
//!    slot afterwards: every CAS of a decision expects a codec state, and every decision that
//!    meets DEAD gives up having applied nothing.
//! 2. It reads the clock (after the seal: every decision applied before the seal read its
//!    clock before, so the carry is made at an instant no earlier than theirs) and carries the
//!    state into the new codec (docs/OPERATIONS.md, "The carry rule").
//! 3. It publishes the new generation (Release); decisions that met the seal retry on it.
//!
//! A decision therefore runs the old codec on the old word, landing before the seal (and the
//! seal's state includes it), or the new codec on the converted word: never a mix, since each
//! generation carries its own codec and word, and a sealed word is never written again. A
//! decision that meets the seal between steps 1 and 3 waits (yields) for the writer's few
//! instructions; a carry that fails (the new codec cannot hold the instant) gives the sealed
//! state back, and the waiting decisions go on with the old generation. The loom model
//! `reconfiguration_is_atomic` (core/tests/loom/reconfigure.rs) checks every interleaving of
//! decisions and refunds with a reconfiguration against the sequential model.
//!
//! A replaced generation is freed once every read section open at its replacement has ended
//! (the same deferred free as the keyed tables'); under loom, when the limiter is dropped.

use crate::algorithm::Codec;
use crate::bucket::cell::{Sealed, Slot};
use crate::sync::{self, rcu, AtomicPtr, Mutex, Ordering};
use crate::{Error, Quota};
use core::ptr;
use crossbeam_utils::CachePadded;

/// One generation: the codec and the slot it runs on.
pub(crate) struct Stage {
    pub(crate) slot: Slot,
    pub(crate) codec: Codec,
}

impl Stage {
    /// The default quota's decision (continuous refill, one u64 word) in u64 arithmetic,
    /// inlined into the caller; `None` for any other codec or width, a request the general
    /// path must check, or a sealed word.
    #[inline(always)]
    pub(crate) fn fast(&self, now: u64, cost: u64) -> Option<crate::Decision> {
        if let (Slot::Narrow(word), Codec::Continuous(a)) = (&self.slot, &self.codec) {
            if a.fast_ok(now, cost) {
                return crate::bucket::cell::live_loop::<u64>(word, |f| {
                    a.step_narrow(f, now, cost)
                });
            }
        }
        None
    }
}

/// A replaced generation and the read sections open when it was replaced.
#[cfg(not(sluicegate_loom))]
type Retired = (Box<CachePadded<Stage>>, rcu::Snapshot);
#[cfg(sluicegate_loom)]
type Retired = Box<CachePadded<Stage>>;

/// The writer's side: the quota in force, the clock origin codecs are compiled for, and the
/// generations waiting to be freed.
struct Writer {
    quota: Quota,
    origin: u64,
    retired: Vec<Retired>,
}

/// The generations of one limiter after its first (see the module documentation).
pub(crate) struct Live {
    /// The current generation, or null while the inline first one is.
    current: AtomicPtr<CachePadded<Stage>>,
    writer: Mutex<Writer>,
}

impl Live {
    /// No generation but the first, which enforces `quota` on codecs compiled for `origin`.
    pub(crate) fn new(quota: Quota, origin: u64) -> Self {
        Self {
            current: AtomicPtr::new(ptr::null_mut()),
            writer: Mutex::new(Writer {
                quota,
                origin,
                retired: Vec::new(),
            }),
        }
    }

    /// Whether a generation was published (the first one is sealed). A hint for callers that
    /// go straight to [`decide`](Self::decide): once true, it stays true.
    #[inline]
    pub(crate) fn published(&self) -> bool {
        !self.current.load(Ordering::Relaxed).is_null()
    }

    /// The quota in force.
    pub(crate) fn quota(&self) -> Quota {
        sync::lock(&self.writer).quota
    }

    /// `f` on the current generation, as a writer sees it (`first` if none was published).
    pub(crate) fn inspect<R>(&self, first: &Stage, f: impl FnOnce(&Stage) -> R) -> R {
        let _w = sync::lock(&self.writer);
        // SAFETY: only writers replace or free a published generation, and we hold their lock.
        f(unsafe { self.current.load(Ordering::Acquire).as_ref() }.map_or(first, |g| g))
    }

    /// `f` on the current generation, inside a read section: the published one, or `first`
    /// (the inline one) while none is published; again (after a yield) while `f` meets a
    /// sealed slot: a reconfiguration is handing over. For callers whose first generation's
    /// slot was sealed. While none is published, `first` is tried again: a first hand-over
    /// whose carry failed unseals it, and nothing else would ever end the wait.
    #[cold]
    #[inline(never)]
    pub(crate) fn decide<R>(
        &self,
        first: &Stage,
        f: &impl Fn(&Stage) -> Result<Option<R>, Error>,
    ) -> Result<R, Error> {
        loop {
            let r = {
                let _section = rcu::read();
                let p = self.current.load(Ordering::Acquire);
                // SAFETY: a published generation is freed only once it was replaced and every
                // read section open then has ended (`retire`); ours is open.
                match unsafe { p.as_ref() } {
                    Some(g) => f(g)?,
                    // Sealed (a hand-over under way: None) or unsealed again (it failed).
                    None => f(first)?,
                }
            };
            if let Some(r) = r {
                return Ok(r);
            }
            sync::yield_now();
        }
    }

    /// [`Stage::fast`] on the published generation, inside a read section: the default
    /// quota's path of a reconfigured limiter. `None` for anything the general path decides
    /// (including a hand-over under way).
    #[inline(always)]
    pub(crate) fn fast(&self, now: u64, cost: u64) -> Option<crate::Decision> {
        let _section = rcu::read();
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: as in `decide`.
        unsafe { p.as_ref() }?.fast(now, cost)
    }

    /// Sets `quota`, carrying the current generation's state (`first`: the inline one) at the
    /// instant `now()` gives, read after the seal. See the module documentation.
    pub(crate) fn reconfigure(
        &self,
        first: &Stage,
        quota: Quota,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Error> {
        let mut w = sync::lock(&self.writer);
        let codec = Codec::new(&quota, w.origin)?;
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: only writers replace or free a published generation, and we hold their lock.
        let cur: &Stage = unsafe { p.as_ref() }.map_or(first, |g| g);
        if !cur.codec.carries_to(&codec) {
            return Err(not_carried(&w.quota, &quota));
        }
        // Allocated before the seal: decisions wait from the seal to the publication.
        let mut next = Box::new(CachePadded::new(Stage {
            slot: Slot::new(&codec, 0),
            codec,
        }));
        let sealed = cur.slot.seal();
        let now = now();
        match carry(&cur.codec, sealed, now, &next.codec) {
            Ok(carried) => next.slot = Slot::carried(&next.codec, carried),
            Err((e, sealed)) => {
                cur.slot.unseal(sealed);
                return Err(e);
            }
        }
        let old = self.current.swap(Box::into_raw(next), Ordering::AcqRel);
        w.quota = quota;
        if !old.is_null() {
            // SAFETY: `old` was published from Box::into_raw and is now unpublished; we are
            // its only owner, and free it only once no read section can hold it.
            retire(&mut w, unsafe { Box::from_raw(old) });
        }
        Ok(())
    }
}

/// The error for a quota of another algorithm (or refill mode) than the limiter's.
pub(crate) fn not_carried(current: &Quota, new: &Quota) -> Error {
    Error::InvalidOption {
        option: "quota",
        value: new.to_string(),
        expected: format!(
            "a quota of the limiter's algorithm ({}, {} refill): live reconfiguration carries \
             a bucket's state within one algorithm",
            current.algorithm(),
            current.refill()
        ),
    }
}

/// The carry of a sealed slot's content into `to` at `now`; on failure, the error and the
/// content (for the slot to get back).
#[allow(clippy::result_large_err)]
fn carry(from: &Codec, sealed: Sealed, now: u64, to: &Codec) -> Result<Sealed, (Error, Sealed)> {
    if let Err(e) = to.check_reading(now) {
        return Err((e, sealed));
    }
    match sealed {
        Sealed::Word(s) => match from.carry(s, now, to) {
            Ok(s2) => Ok(Sealed::Word(s2)),
            Err(e) => Err((e, Sealed::Word(s))),
        },
        // A sliding log is kept as it is: its admissions are facts under any quota.
        Sealed::Log(log) => Ok(Sealed::Log(log)),
    }
}

/// Queues a replaced generation until no read section can hold it, and frees those whose
/// sections have all ended.
fn retire(w: &mut Writer, old: Box<CachePadded<Stage>>) {
    #[cfg(not(sluicegate_loom))]
    {
        // Without a snapshot (no fence could be issued) readers may hold it forever: never
        // freed, as the keyed store's tables.
        match rcu::snapshot() {
            Some(s) => w.retired.push((old, s)),
            None => {
                Box::leak(old);
            }
        }
        w.retired.retain(|(_, s)| !rcu::passed(s));
    }
    #[cfg(sluicegate_loom)]
    w.retired.push(old);
}

impl Drop for Live {
    fn drop(&mut self) {
        let p = self.current.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published from Box::into_raw; `&mut self`: no decision is running.
            drop(unsafe { Box::from_raw(p) });
        }
        // The retired ones drop with the writer (`&mut self`: no section of ours is open).
    }
}
