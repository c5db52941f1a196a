//! Live reconfiguration of a keyed limiter: [`KeyedLimiter::set_quota`](crate::KeyedLimiter::set_quota).
//!
//! # Generations
//!
//! A generation is a store and the context (codec, key bound) its operations share. The
//! limiter's first one lives inline; a reconfiguration moves every bucket into a new store
//! (tables of the new quota's word width, narrow or wide), converting each state by the carry
//! rule, and publishes it behind [`Live::current`]. Every operation of the limiter runs inside
//! one read section (crate::sync::rcu) around its whole use of a generation, which the keyed
//! store's lookups open anyway: the fast path pays one load of `current` and one comparison.
//!
//! # The switch (one writer at a time, under `writer`)
//!
//! 1. The writer stores the PAUSED mark in `current`, then waits for a grace period: every
//!    read section open at that moment ends. An operation that starts afterwards reads PAUSED
//!    (the section's fence and the grace period's heavy fence order the two sides, as for a
//!    table's unlink) and waits, outside any section, for the switch to end.
//! 2. No operation touches the current generation now: the writer reads the clock (every
//!    decision applied before read its own clock earlier), moves every bucket into the new
//!    store, converting it, with nothing to race.
//! 3. It publishes the new generation (Release) and frees the old one if it was a published
//!    one (no operation can hold it: the grace period passed before it was unpublished, and
//!    none could start on it since). The first generation is left empty. The new generation
//!    carries the evictions every generation before it counted (the old one's count is final
//!    once the grace period passed), so `metrics` reads the total from the one generation its
//!    read section meets: a count kept beside the generations and added to after the publish
//!    let a reader racing the switch count the old generation's evictions twice, or miss them.
//!
//! Every key is therefore carried at one instant: an operation ran wholly on the old
//! generation before it or wholly on the new one after it. A carry that fails (the new
//! codec cannot hold the instant) happens before anything moves, and the writer publishes
//! the old generation again. The loom model `keyed_reconfiguration_is_atomic`
//! (core/tests/loom/reconfigure.rs) checks operations racing a switch; under loom a read
//! section is a stand-in, so the grace period is a loom `RwLock` (sections read-lock it, the
//! writer write-locks it once), which gives the same guarantee with loom's own primitives.
//!
//! Operations stop for the switch's pass over the keys (measured in BENCHMARKS.md); a writer
//! that is itself inside a read section (a key's `Hash`, `Eq` or `Drop` calling `set_quota`)
//! would wait for itself, and gets an error instead.

use super::keyed::{Backend, Ctx, Gen};
use crate::algorithm::Codec;
use crate::bucket::cell::Word;
use crate::bucket::live::not_carried;
use crate::error::StoreErrorKind;
use crate::sync::{self, rcu, AtomicPtr, Mutex, Ordering};
use crate::{Error, Quota};
use core::hash::Hash;
use core::ptr;

/// The mark of a switch under way in `current` (never dereferenced).
const PAUSED: usize = 1;

/// The writer's side: the quota in force and the clock origin codecs are compiled for.
struct Writer {
    quota: Quota,
    origin: u64,
}

/// The read section of one operation of a keyed limiter: the process-wide read section (which
/// the store's lookups use as well) and, under loom, the grace period's read lock.
pub(crate) struct Section<'a> {
    pub(crate) rcu: rcu::Guard,
    #[cfg(sluicegate_loom)]
    _quiesce: loom::sync::RwLockReadGuard<'a, ()>,
    _live: core::marker::PhantomData<&'a ()>,
}

/// The generations of one keyed limiter after its first (see the module documentation).
pub(crate) struct Live<K> {
    /// The current generation: null while the first one is, PAUSED during a switch.
    current: AtomicPtr<Gen<K>>,
    writer: Mutex<Writer>,
    /// Under loom: the grace period (see the module documentation).
    #[cfg(sluicegate_loom)]
    quiesce: loom::sync::RwLock<()>,
}

impl<K> Live<K> {
    pub(crate) fn new(quota: Quota, origin: u64) -> Self {
        Self {
            current: AtomicPtr::new(ptr::null_mut()),
            writer: Mutex::new(Writer { quota, origin }),
            #[cfg(sluicegate_loom)]
            quiesce: loom::sync::RwLock::new(()),
        }
    }

    /// Opens the read section of one operation.
    #[inline(always)]
    pub(crate) fn section(&self) -> Section<'_> {
        Section {
            rcu: rcu::read(),
            #[cfg(sluicegate_loom)]
            _quiesce: self.quiesce.read().unwrap(),
            _live: core::marker::PhantomData,
        }
    }

    /// The current generation as of `section` (`first` while none was published); `None`
    /// during a switch (close the section and wait: [`with`](Self::with) does).
    #[inline(always)]
    pub(crate) fn current<'s>(
        &'s self,
        first: &'s Gen<K>,
        _section: &'s Section<'_>,
    ) -> Option<&'s Gen<K>> {
        let p = self.current.load(Ordering::Acquire);
        if p.is_null() {
            return Some(first);
        }
        if p as usize == PAUSED {
            return None;
        }
        // SAFETY: a published generation is freed only after a grace period that began once
        // it was unpublished (`set_quota`); the section is open for 's.
        Some(unsafe { &*p })
    }

    /// `f` on the current generation (`first` while none was published), inside a read
    /// section that lasts as long as `f`; waits while a switch is under way.
    #[inline(always)]
    pub(crate) fn with<R>(&self, first: &Gen<K>, f: impl FnOnce(&Gen<K>) -> R) -> R {
        loop {
            let section = self.section();
            if let Some(g) = self.current(first, &section) {
                return f(g);
            }
            drop(section);
            Self::wait_for_switch();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_for_switch() {
        sync::yield_now();
    }

    /// The quota in force.
    pub(crate) fn quota(&self) -> Quota {
        sync::lock(&self.writer).quota
    }

    /// Sets `quota` on every key (see the module documentation); `now()` is read once the
    /// operations under way are done.
    pub(crate) fn set_quota(
        &self,
        first: &Gen<K>,
        quota: Quota,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Error>
    where
        K: Hash + Eq + Send + 'static,
    {
        #[cfg(not(sluicegate_loom))]
        if rcu::in_section() {
            return Err(Error::InvalidOption {
                option: "set_quota",
                value: "a call from inside one of the limiter's operations".into(),
                expected: "a call from outside the keys' Hash, Eq and Drop (it waits for \
                           every operation under way, which would include its caller)"
                    .into(),
            });
        }
        let mut w = sync::lock(&self.writer);
        let codec = Codec::new(&quota, w.origin)?;
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: only writers replace or free a published generation, and we hold their
        // lock (so `current` is not PAUSED either).
        let cur: &Gen<K> = unsafe { p.as_ref() }.unwrap_or(first);
        if !cur.cx.codec.carries_to(&codec) {
            return Err(not_carried(&w.quota, &quota));
        }
        unsupported(&cur.backend)?;
        // 1. Stop every operation, and wait for those under way.
        self.current.store(PAUSED as *mut Gen<K>, Ordering::Release);
        if !grace_period(self) {
            self.current.store(p, Ordering::Release);
            return Err(Error::store(
                StoreErrorKind::Unavailable,
                "memory",
                "the memory barrier that waits for the operations under way failed",
            ));
        }
        // 2. Carry every bucket at one instant.
        let now = now();
        let next = match carried(cur, codec, &quota, now) {
            Ok(next) => next,
            Err(e) => {
                self.current.store(p, Ordering::Release);
                return Err(e);
            }
        };
        // 3. Publish (with the evictions of every generation before it: `carried`).
        self.current
            .store(Box::into_raw(Box::new(next)), Ordering::Release);
        w.quota = quota;
        drop(w);
        if !p.is_null() {
            // SAFETY: from Box::into_raw, unpublished before the grace period above, and
            // never read since (operations met PAUSED, then the new generation). Dropped
            // outside the writer's lock: the unlinked keys it still owns run user code.
            drop(unsafe { Box::from_raw(p) });
        }
        Ok(())
    }
}

/// Waits until no operation can be using the current generation (see the module docs).
fn grace_period<K>(live: &Live<K>) -> bool {
    #[cfg(not(sluicegate_loom))]
    {
        let _ = live;
        rcu::synchronize()
    }
    #[cfg(sluicegate_loom)]
    {
        drop(live.quiesce.write().unwrap());
        true
    }
}

/// A store outside the process cannot be carried (docs/OPERATIONS.md).
fn unsupported<K>(backend: &Backend<K>) -> Result<(), Error> {
    match backend {
        Backend::Narrow(_) | Backend::Wide(_) | Backend::Log(_) => Ok(()),
        #[cfg(all(unix, not(sluicegate_loom)))]
        Backend::Shm(s) => Err(Error::store(
            StoreErrorKind::Unsupported,
            s.store_name(),
            "live reconfiguration of a shared-memory region: every process decides with the \
             quota in the region's checksummed header, compiled once when it opened the \
             region; a new quota needs every process to switch its codec at one instant \
             (a header generation that each slot is converted under). Open a new region \
             for the new quota (docs/OPERATIONS.md)",
        )),
        #[cfg(all(feature = "redis", not(sluicegate_loom)))]
        Backend::Redis(s) => Err(Error::store(
            StoreErrorKind::Unsupported,
            s.printed(),
            "live reconfiguration on Redis: the keys embed a hash of the quota, and every \
             host's scripts decide with the quota it was built with; a new quota needs the \
             scripts to convert an old key's state on first touch, and every host to switch \
             at once (docs/OPERATIONS.md)",
        )),
    }
}

/// The evictions a generation's store counted (none for stores outside the process).
pub(crate) fn evictions<K: Hash + Eq + Send + 'static>(backend: &Backend<K>) -> u64 {
    match backend {
        Backend::Narrow(c) => c.evictions(),
        Backend::Wide(c) => c.evictions(),
        Backend::Log(c) => c.evictions(),
        #[cfg(all(unix, not(sluicegate_loom)))]
        Backend::Shm(_) => 0,
        #[cfg(all(feature = "redis", not(sluicegate_loom)))]
        Backend::Redis(_) => 0,
    }
}

/// The next generation: every bucket of `cur` carried into `codec` at `now`, in a store of
/// the width `codec` needs. Nothing moves unless every bucket can be carried.
fn carried<K: Hash + Eq + Send + 'static>(
    cur: &Gen<K>,
    codec: Codec,
    quota: &Quota,
    now: u64,
) -> Result<Gen<K>, Error> {
    codec.check(now, 0)?;
    codec.check_reading(now)?;
    let from = &cur.cx.codec;
    let carry = |w: u128| from.carry(w, now, &codec);
    let backend = match (&cur.backend, &codec) {
        (Backend::Log(s), Codec::SlidingLog(log)) => Backend::Log(s.move_into(log.clone())),
        (Backend::Narrow(c), _) if codec.wide() => {
            Backend::Wide(c.move_into(|w: u64| carry(Word::widen(w)))?)
        }
        (Backend::Narrow(c), _) => {
            Backend::Narrow(c.move_into(|w: u64| carry(Word::widen(w)).map(<u64 as Word>::narrow))?)
        }
        (Backend::Wide(c), _) if codec.wide() => Backend::Wide(c.move_into(|w: u128| carry(w))?),
        (Backend::Wide(c), _) => {
            Backend::Narrow(c.move_into(|w: u128| carry(w).map(<u64 as Word>::narrow))?)
        }
        _ => unreachable!("checked by `unsupported` and `carries_to`"),
    };
    let mut cx = Ctx::new(quota, codec, 0, cur.cx.max_keys, cur.cx.on_full);
    cx.sweep_on_grow = cur.cx.sweep_on_grow;
    // The old generation's count is final: no operation can reach it any more (the grace
    // period passed). The new one starts from it, so that `metrics` reads the whole count
    // from whichever generation its read section meets, never one generation's evictions
    // twice or not at all.
    let evicted_before = cur.evicted_before.wrapping_add(evictions(&cur.backend));
    Ok(Gen {
        backend,
        cx,
        evicted_before,
    })
}

impl<K> Drop for Live<K> {
    fn drop(&mut self) {
        let p = self.current.load(Ordering::Relaxed);
        if !p.is_null() && p as usize != PAUSED {
            // SAFETY: published from Box::into_raw; `&mut self`: no operation is running.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
