//! Keyed limiters: one bucket per key, in a sharded open-addressing table of state words.
//!
//! # Layout
//!
//! The store is a fixed number of shards (64 by default), chosen by bits of the key's hash.
//! Each shard owns one table: an array of entries `{ state word, key }` and one control byte
//! per entry, eight to a group word, probed group by group, with no per-entry allocation, no
//! reference count and no pointer: a `u64` key with a 64-bit state word is 16 bytes plus its
//! control byte. A control byte holds 7 bits of the hash (a filter: keys are always compared
//! in full) or one of EMPTY / TOMB (unlinked, key still owned by the table) / MOVED (key
//! moved to a newer table).
//!
//! # Concurrency
//!
//! * **Lookups of existing keys take no lock.** A reader opens a read section
//!   (crate::sync::rcu: no fence instruction on Linux), loads the shard's table pointer, probes,
//!   compares keys and runs the cell's CAS loop on the word it found. It writes nothing but
//!   that word, and a rejection writes nothing at all. (Sliding logs, which are not one word,
//!   are kept apart in `keyed_log.rs`, under a lock per shard.)
//! * **Everything that links or unlinks an entry holds the shard's mutex**: inserting a key,
//!   evicting, removing, clearing and rebuilding a table. A table is never modified in place
//!   except to publish an EMPTY slot (key written before the control word, Release) or to
//!   unlink an entry; keys are never overwritten, so a reader comparing a key never races a
//!   writer. Tombstones are reclaimed by rebuilding the table, and the old table (with the keys
//!   it still owns) is freed once no read section can hold it (crate::sync::rcu).
//! * **Unlinking is lossless.** Before an entry is unlinked, its word is turned into the DEAD
//!   mark by a CAS (eviction: only from a state found full at `now`) or a swap (removal, and
//!   migration to a new table, which copies the state it swapped out). A consumer whose CAS
//!   meets DEAD retries under the shard's lock, where the key is either found (moved) or
//!   re-created; a consume is therefore applied to exactly one bucket, before or after the
//!   eviction, never to an unlinked one.
//! * Anything ambiguous on the lock-free path (key not found, DEAD mark) falls back to the
//!   locked path, which is authoritative: the lock serializes every change of the shard's set
//!   of entries.
//!
//! # Eviction and the key bound
//!
//! A bucket that is full as of now is indistinguishable from a fresh one when `initial ==
//! burst`, so it can be dropped without changing any decision. Full buckets are evicted:
//! * automatically when a shard's table is rebuilt (amortised over inserts), only when
//!   `initial == burst` (exactly lossless);
//! * by [`KeyedLimiter::sweep`], which callers may schedule, and when the key bound is reached:
//!   with `initial < burst` a re-created key starts again with `initial` tokens, which is
//!   conservative (it never admits more than the bucket it replaces would have);
//! * a key re-created after an eviction at time `T` is created at `max(now, T)`, so a request
//!   whose clock reading is older than the eviction's (a preempted thread) never sees more
//!   tokens than the evicted bucket had.
//!
//! At the bound ([`KeyedBuilder::max_keys`]) with no full bucket, [`OnFull`] decides; a new key
//! whose scan had to skip a busy shard waits for it first, holding no lock (see `NoRoom`).

pub(crate) mod log;
pub(crate) mod long;
mod shard;
mod table;

use self::shard::{Shard, ShardState};
use self::table::{tag, Entry, Table, LIVE, MIN_CAP, MOVED, TOMB};
use super::bound::{Bound, NoRoom, Reservation};
use super::keyed::{Ctx, OnFull};
use super::Store;
use crate::bucket::cell::{self, Evict, Word};
#[cfg(not(sluicegate_loom))]
use crate::sync::Mutex;
use crate::sync::{self, rcu, Ordering};
use crate::{Decision, Error};
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::ptr;
use crossbeam_utils::CachePadded;

/// Seeded randomly per limiter, so that collisions cannot be forced from outside (and every
/// key is compared in full regardless). foldhash's `fast` variant, the one its authors made
/// for hash tables (hashbrown's default): its seeding is the same as `quality`'s, which only
/// adds a second multiply for statistics use. The table takes the tag from the hash's top
/// bits, the shard from bits 40 and up, and the home group from its low 32, as hashbrown does.
#[cfg(not(sluicegate_loom))]
pub(crate) type KeyHasher = foldhash::fast::RandomState;
/// loom replays executions and needs every one to hash alike.
#[cfg(sluicegate_loom)]
pub(crate) type KeyHasher = foldhash::fast::FixedState;

/// The in-process word store: shards of tables of state words of width `W`.
pub(crate) struct Core<K, W: Word> {
    shards: Box<[CachePadded<Shard<K, W>>]>,
    hasher: KeyHasher,
    /// The shard count (a power of two) minus one.
    shard_mask: usize,
    /// The key bound's counters and hint (crate::bound), on a line of their own.
    bound: Box<CachePadded<Bound>>,
    /// Unlinked tables, each waiting for the read sections that were open when it was
    /// unlinked (crate::sync::rcu). Freed only by [`collect`](Self::collect), which runs with
    /// no shard lock held: freeing a table drops the unlinked keys it owns (user code).
    #[cfg(not(sluicegate_loom))]
    limbo: Mutex<Vec<Retired<K, W>>>,
    /// Whether `limbo` may hold a table (set and cleared under its lock; read without it as
    /// a hint, so that the insert path takes the lock only when there is something to free).
    #[cfg(not(sluicegate_loom))]
    in_limbo: crate::sync::real::AtomicBool,
}

/// An unlinked table and the read sections open when it was unlinked.
#[cfg(not(sluicegate_loom))]
struct Retired<K, W: Word>(*mut Table<K, W>, crate::sync::rcu::Snapshot);

// SAFETY: the pointer is the only owner of the table (from Box::into_raw, unlinked); it is
// turned back into its Box on one thread, once. The table holds keys (Send) and atomics.
#[cfg(not(sluicegate_loom))]
unsafe impl<K: Send, W: Word> Send for Retired<K, W> {}

#[cfg(not(sluicegate_loom))]
impl<K, W: Word> Retired<K, W> {
    fn free(self) {
        // SAFETY: see the Send impl; the caller checked that no read section can hold it.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

#[cfg(not(sluicegate_loom))]
impl<K, W: Word> Drop for Core<K, W> {
    fn drop(&mut self) {
        // `&mut self`: no reader is left.
        let limbo = core::mem::take(&mut *sync::lock(&self.limbo));
        limbo.into_iter().for_each(Retired::free);
    }
}

impl<K: Hash + Eq + Send + 'static, W: Word> Core<K, W> {
    /// A store of `shards` shards (a power of two).
    pub(crate) fn new(shards: usize) -> Self {
        Self::with_bound(shards, Bound::boxed())
    }

    /// A store of `shards` shards (a power of two) under the key bound `bound`.
    pub(crate) fn with_bound(shards: usize, bound: Box<CachePadded<Bound>>) -> Self {
        debug_assert!(shards.is_power_of_two());
        Self {
            shards: (0..shards)
                .map(|_| CachePadded::new(Shard::new()))
                .collect(),
            hasher: KeyHasher::default(),
            shard_mask: shards - 1,
            bound,
            #[cfg(not(sluicegate_loom))]
            limbo: Mutex::new(Vec::new()),
            #[cfg(not(sluicegate_loom))]
            in_limbo: crate::sync::real::AtomicBool::new(false),
        }
    }

    /// Queues `old` (just unlinked from `shard` by this lock holder) to be freed once no
    /// read section can hold it. It is not freed here, under the shard's lock: freeing drops
    /// the keys the table still owns, and a key's `Drop` is user code that may call back into
    /// this limiter (it would deadlock on the shard's lock, or wait on a lock of its own that
    /// a caller of ours holds). The caller runs [`collect`](Self::collect) once it has
    /// released the lock.
    fn retire(&self, shard: &Shard<K, W>, old: *mut Table<K, W>) {
        if old.is_null() {
            return;
        }
        #[cfg(not(sluicegate_loom))]
        {
            let _ = shard;
            // After the unlink (the caller's swap): the heavy fence, then the open sections.
            // Without a snapshot (no fence could be issued) readers may hold the table
            // forever: it is never freed.
            if let Some(s) = crate::sync::rcu::snapshot() {
                let mut limbo = sync::lock(&self.limbo);
                limbo.push(Retired(old, s));
                self.in_limbo
                    .store(true, crate::sync::real::Ordering::Relaxed);
            }
        }
        #[cfg(sluicegate_loom)]
        {
            // SAFETY: from Box::into_raw and unlinked; under loom nothing is freed before the
            // shard is dropped.
            sync::lock(&shard.graveyard).push(unsafe { Box::from_raw(old) });
        }
    }

    /// Takes the retired tables that no read section can hold any more.
    #[cfg(not(sluicegate_loom))]
    fn passed(limbo: &mut Vec<Retired<K, W>>) -> Vec<Retired<K, W>> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < limbo.len() {
            if crate::sync::rcu::passed(&limbo[i].1) {
                done.push(limbo.swap_remove(i));
            } else {
                i += 1;
            }
        }
        done
    }

    /// Frees the retired tables that no read section can hold any more. Never call it with
    /// a shard's lock held (see [`retire`](Self::retire)).
    fn collect(&self) {
        #[cfg(not(sluicegate_loom))]
        {
            let freed = {
                let mut limbo = sync::lock(&self.limbo);
                let freed = Self::passed(&mut limbo);
                self.in_limbo
                    .store(!limbo.is_empty(), crate::sync::real::Ordering::Relaxed);
                freed
            };
            // Dropped outside the lock too: keys' destructors are the user's code.
            freed.into_iter().for_each(Retired::free);
        }
    }

    /// [`collect`](Self::collect) when a retired table may be waiting (one load otherwise).
    fn collect_pending(&self) {
        #[cfg(not(sluicegate_loom))]
        if self.in_limbo.load(crate::sync::real::Ordering::Relaxed) {
            self.collect();
        }
    }

    /// The key's hash under this store's seed.
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, h: u64) -> &Shard<K, W> {
        let i = (h >> 40) as usize & self.shard_mask;
        debug_assert!(i < self.shards.len());
        // SAFETY: `shard_mask` is the shard count (a power of two) minus one.
        unsafe { self.shards.get_unchecked(i) }
    }

    /// Asks the cache for what a lookup of hash `h` reads first (the home group of its
    /// shard's table); changes nothing.
    #[inline]
    pub(crate) fn prefetch(&self, guard: &rcu::Guard, h: u64) {
        if let Some(t) = self.shard(h).view(guard) {
            t.prefetch(h);
        }
    }

    /// The lock-free path: `None` when the key is absent or its word DEAD (nothing was
    /// applied; the caller goes on under the lock, [`acquire_slow`](Self::acquire_slow)).
    #[inline(always)]
    ///
    /// `within`: a leaky queue admits only with a wait of at most this many nanoseconds
    /// (`u64::MAX`: its own bound; other algorithms never wait). `guard`: the caller's read
    /// section (the keyed limiter's operation holds one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire_fast<Q>(
        &self,
        guard: &rcu::Guard,
        cx: &Ctx,
        h: u64,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Option<Decision>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let t = self.shard(h).view(guard)?;
        let i = t.find(h, key)?;
        cell::reserve_live::<W>(&t.found(i).word, &cx.codec, now, cost, within)
    }

    /// The lock-free path, then the locked one.
    #[inline]
    fn acquire_hashed<Q>(
        &self,
        cx: &Ctx,
        h: u64,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match self.acquire_fast(&rcu::read(), cx, h, key, now, cost, within) {
            Some(d) => Ok(d),
            None => self.acquire_locked(cx, h, key, now, cost, within),
        }
    }

    /// The decision under the shard's lock (a new key, or a DEAD mark met without it), then
    /// the freeing of what a rebuild retired, once the lock is released.
    pub(crate) fn acquire_locked<Q>(
        &self,
        cx: &Ctx,
        h: u64,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let d = self.acquire_slow(cx, self.shard(h), h, key, (now, cost, within), &rcu::read());
        self.collect_pending();
        d
    }

    #[cold]
    fn acquire_slow<Q>(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        h: u64,
        key: &Q,
        (now, cost, within): (u64, u64, u64),
        guard: &rcu::Guard,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let mut waited = false;
        let (mut st, reserved) = loop {
            let mut st = sync::lock(&shard.lock);
            if let Some(t) = shard.table(guard) {
                if let Some(i) = t.find(h, key) {
                    // Under the lock a linked entry is never DEAD: only lock holders install
                    // the mark, and they unlink the entry before releasing the lock.
                    let word = &t.entry(i).word;
                    if let Some(d) = cell::reserve_live::<W>(word, &cx.codec, now, cost, within) {
                        return Ok(d);
                    }
                }
            }
            match self.reserve(cx, shard, &mut st, now, guard) {
                Ok(r) => break (st, r),
                Err(NoRoom::Busy) if !waited => {
                    // Another shard was busy (a sweep, a removal, another insert there may be
                    // making room): wait for each shard in turn, holding no other lock (so no
                    // two waiters wait for each other), sweeping it, then look again. Once.
                    waited = true;
                    drop(st);
                    self.sweep_each(cx, now, guard);
                }
                Err(_) => {
                    return Err(Error::KeyStoreFull {
                        max_keys: cx.max_keys,
                    })
                }
            }
        };
        let e = self.link(cx, shard, &mut st, h, key.to_owned().into(), now, guard);
        reserved.kept();
        let d = cell::reserve_live::<W>(&e.word, &cx.codec, now, cost, within);
        // The new bucket is linked and we hold the lock: it cannot be DEAD.
        let d = d.unwrap_or_else(|| unreachable!("a bucket linked under the lock is live"));
        self.bound
            .lowered(now.saturating_add(d.reset_after_nanos()));
        Ok(d)
    }

    /// Links a fresh bucket for `key` (absent, bound already reserved) and returns it.
    #[allow(clippy::too_many_arguments)]
    fn link<'g>(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        h: u64,
        key: K,
        now: u64,
        guard: &'g rcu::Guard,
    ) -> &'g Entry<K, W> {
        let needs_room = match shard.table(guard) {
            None => true,
            // Keep the load (live + unlinked) at most 7/8: with groups of eight, a lookup
            // still ends in its first group almost always, at 17 bytes a slot for a u64 key.
            Some(t) => (st.used + 1) * 8 > t.cap() * 7,
        };
        if needs_room {
            self.rebuild(cx, shard, st, now, guard, true);
        }
        let t = shard
            .table(guard)
            .unwrap_or_else(|| unreachable!("rebuilt"));
        let i = t.free_slot(h);
        let e = t.entry(i);
        // SAFETY: the slot is EMPTY, so no reader dereferences its key (readers only compare
        // keys behind a LIVE control word), and only lock holders write slots.
        unsafe { (*e.key.get()).write(key) };
        let at = now.max(self.bound.watermark());
        W::store(&e.word, W::narrow(cx.codec.fresh(at)));
        t.set_ctrl(i, tag(h));
        st.used += 1;
        st.live += 1;
        e
    }

    /// Takes one unit of the key bound for a new key, making room if needed (see
    /// [`NoRoom`]).
    fn reserve(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
    ) -> Result<Reservation<'_>, NoRoom> {
        loop {
            if let Some(r) = self.bound.reserve(cx.max_keys) {
                return Ok(r);
            }
            let mut busy = false;
            if self.evict_full_somewhere(cx, shard, st, now, guard, &mut busy) {
                continue;
            }
            if cx.on_full == OnFull::EvictFullest
                && self.evict_fullest_somewhere(cx, shard, st, now, guard, &mut busy)
            {
                continue;
            }
            if let Some(no_room) = self.bound.no_room(cx.max_keys, busy) {
                return Err(no_room);
            }
        }
    }

    /// Sweeps every shard in turn at `now`, holding one shard's lock at a time (the caller
    /// holds none): a new key at the bound that found a shard busy waits for it so.
    fn sweep_each(&self, cx: &Ctx, now: u64, guard: &rcu::Guard) {
        for shard in self.shards.iter() {
            let mut st = sync::lock(&shard.lock);
            self.sweep_locked(cx, shard, &mut st, now, guard);
        }
    }

    /// At the bound: evicts the full buckets of this shard, else of the first other shard
    /// (not busy) that has any. When every shard was scanned and none had a full bucket, the
    /// earliest instant one can become full is recorded, so that new keys are refused in O(1)
    /// until then; when a shard was busy, `busy` is set.
    fn evict_full_somewhere(
        &self,
        cx: &Ctx,
        own: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
        busy: &mut bool,
    ) -> bool {
        let Some(scan) = self.bound.scan(now) else {
            return false;
        };
        let (evicted, mut soonest) = self.sweep_locked(cx, own, st, now, guard);
        if evicted > 0 {
            return true;
        }
        let mut complete = true;
        for other in self.shards.iter() {
            if ptr::eq(&**other, own) {
                continue;
            }
            let Some(mut ost) = sync::try_lock(&other.lock) else {
                complete = false;
                continue;
            };
            let (evicted, s) = self.sweep_locked(cx, other, &mut ost, now, guard);
            if evicted > 0 {
                return true;
            }
            soonest = soonest.min(s);
        }
        if complete {
            self.bound.found_nothing(scan, soonest);
        }
        *busy |= !complete;
        false
    }

    /// Evicts the full buckets of one shard (lock held). Returns how many, and the earliest
    /// instant a kept bucket becomes full (`u64::MAX` if none).
    fn sweep_locked(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
    ) -> (usize, u64) {
        let Some(t) = shard.table(guard) else {
            return (0, u64::MAX);
        };
        let (mut evicted, mut soonest) = (0, u64::MAX);
        // Raised before the first mark, so that whoever re-creates an evicted key (under this
        // lock, or a peek that no longer finds it) reads it.
        let raise = || {
            self.bound.raise_watermark(now);
        };
        for i in 0..t.cap() {
            if t.ctrl(i) & LIVE == 0 {
                continue;
            }
            match cell::evict_if_full::<W>(&t.entry(i).word, &cx.codec, now, raise) {
                Evict::Killed => {
                    self.unlink(t, i, st);
                    self.bound.evicted(1);
                    evicted += 1;
                }
                Evict::Kept { full_in } => soonest = soonest.min(now.saturating_add(full_in)),
                Evict::Dead => unreachable!("a linked bucket is live under the lock"),
            }
        }
        (evicted, soonest)
    }

    /// Unlinks an entry whose word this lock holder just marked DEAD.
    fn unlink(&self, t: &Table<K, W>, i: usize, st: &mut ShardState) {
        t.set_ctrl(i, TOMB);
        st.live -= 1;
        self.bound.give_back(1);
    }

    /// [`OnFull::EvictFullest`]: evicts the bucket with the least `reset_after` among up to 32
    /// live entries of this shard (or of the first other shard, not busy, that has some); when
    /// a shard was busy, `busy` is set.
    fn evict_fullest_somewhere(
        &self,
        cx: &Ctx,
        own: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
        busy: &mut bool,
    ) -> bool {
        if self.evict_fullest_in(cx, own, st, now, guard) {
            return true;
        }
        for other in self.shards.iter() {
            if ptr::eq(&**other, own) {
                continue;
            }
            let Some(mut ost) = sync::try_lock(&other.lock) else {
                *busy = true;
                continue;
            };
            if self.evict_fullest_in(cx, other, &mut ost, now, guard) {
                return true;
            }
        }
        false
    }

    fn evict_fullest_in(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
    ) -> bool {
        const SAMPLE: usize = 32;
        let Some(t) = shard.table(guard) else {
            return false;
        };
        let cap = t.cap();
        // A CAS can lose to a consume; each retry re-samples (a consume only delays fullness).
        for _ in 0..4 {
            if st.live == 0 {
                return false;
            }
            let mut best: Option<(u64, usize, W)> = None;
            let (mut seen, mut i) = (0, st.cursor % cap);
            for _ in 0..cap {
                let slot = i;
                i = if i + 1 == cap { 0 } else { i + 1 };
                if t.ctrl(slot) & LIVE == 0 {
                    continue;
                }
                let w = W::load(&t.entry(slot).word);
                let reset = cx.codec.decide(w.widen(), now, 0).0.reset_after_nanos();
                if best.as_ref().is_none_or(|b| reset < b.0) {
                    best = Some((reset, slot, w));
                }
                seen += 1;
                if seen == SAMPLE {
                    break;
                }
            }
            st.cursor = i;
            if let Some((_, slot, w)) = best {
                self.bound.raise_watermark(now);
                if cell::kill_from::<W>(&t.entry(slot).word, w) {
                    self.unlink(t, slot, st);
                    self.bound.evicted(1);
                    return true;
                }
            }
        }
        false
    }

    /// Replaces the shard's table by one sized for its live entries (load about 0.7),
    /// dropping the unlinked ones and, when that is lossless (and not turned off,
    /// [`KeyedBuilder::sweep_on_grow`](crate::KeyedBuilder::sweep_on_grow)), the full ones.
    fn rebuild(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &rcu::Guard,
        grow: bool,
    ) {
        if cx.lossless && cx.sweep_on_grow {
            self.sweep_locked(cx, shard, st, now, guard);
        }
        let old = shard.table(guard);
        // Room for 10/7 of the live keys: the table grows by a quarter before the next
        // rebuild, which (with `sweep_on_grow`) first evicts the full buckets, so that memory
        // follows the keys that are not full. A table that keeps every key
        // (`sweep_on_grow(false)`: most keys return) doubles instead: each key is moved about
        // once as the table grows, not about four times.
        let doubled = match old {
            Some(t) if grow && !cx.sweep_on_grow => t.cap() * 2,
            _ => 0,
        };
        let cap = ((st.live + 1) * 10 / 7 + 1).max(doubled).max(MIN_CAP);
        let new = Table::<K, W>::new(cap);
        if let Some(old) = old {
            // The keys' hashes first: `Hash` is user code and may unwind, which it must do
            // before anything is moved. (Hashing in the move loop, a panic after a key's
            // bitwise copy was taken dropped that copy while the old slot still owned the
            // original: a double free, and freed memory under concurrent readers.) The move
            // below runs no user code.
            let hashes: Vec<u64> = (0..old.cap())
                .filter(|&oi| old.ctrl(oi) & LIVE != 0)
                .map(|oi| {
                    // SAFETY: LIVE: the key is initialised, and only lock holders (us) unlink
                    // or move it.
                    self.hasher
                        .hash_one(unsafe { (*old.entry(oi).key.get()).assume_init_ref() })
                })
                .collect();
            let mut hashes = hashes.into_iter();
            for oi in 0..old.cap() {
                if old.ctrl(oi) & LIVE == 0 {
                    continue;
                }
                let h = hashes
                    .next()
                    .unwrap_or_else(|| unreachable!("one hash per live slot, under the lock"));
                let e = old.entry(oi);
                // Freeze the bucket: consumers that lose to this swap retry under the lock,
                // which we hold until the new table is published.
                let state = cell::kill::<W>(&e.word)
                    .unwrap_or_else(|| unreachable!("a linked bucket is live under the lock"));
                // SAFETY: LIVE: the key is initialised. It is moved bitwise into the new table,
                // which owns it from now on (the old slot becomes MOVED and is not dropped);
                // readers pinned on the old table may still compare the old copy, whose heap
                // parts stay alive until the new owner is dropped, which happens only through
                // a later retire, after those readers unpin.
                let key = unsafe { ptr::read((*e.key.get()).assume_init_ref()) };
                let i = new.free_slot(h);
                let ne = new.entry(i);
                // SAFETY: the new table is not published yet: we are its only user.
                unsafe { (*ne.key.get()).write(key) };
                W::store(&ne.word, state);
                new.set_ctrl(i, tag(h));
                old.set_ctrl(oi, MOVED);
            }
        }
        st.used = st.live;
        st.cursor = 0;
        let old_ptr = shard.publish(Box::into_raw(new));
        self.retire(shard, old_ptr);
    }

    fn peek_hashed<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(h);
        let guard = rcu::read();
        if let Some(e) = shard
            .table(&guard)
            .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
        {
            if let Some(d) = cell::acquire_live::<W>(&e.word, &cx.codec, now, 0) {
                return d;
            }
            // DEAD: being unlinked; ask again once the lock holder is done.
            let _st = sync::lock(&shard.lock);
            if let Some(e) = shard
                .table(&guard)
                .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
            {
                if let Some(d) = cell::acquire_live::<W>(&e.word, &cx.codec, now, 0) {
                    return d;
                }
            }
        }
        let at = now.max(self.bound.watermark());
        cx.codec.decide(cx.codec.fresh(at), now, 0).0
    }

    fn refund_hashed<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64, cost: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(h);
        let guard = rcu::read();
        let done = match shard
            .table(&guard)
            .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
        {
            Some(e) => cell::refund_live::<W>(&e.word, &cx.codec, now, cost),
            None => true, // absent: nothing to give back to
        };
        if !done {
            let _st = sync::lock(&shard.lock);
            if let Some(e) = shard
                .table(&guard)
                .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
            {
                cell::refund_live::<W>(&e.word, &cx.codec, now, cost);
            }
        }
        // A refund can make a bucket full sooner than the hint says: as soon as now.
        self.bound.lowered(now);
    }

    fn remove_hashed<Q>(&self, h: u64, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(h);
        let guard = rcu::read();
        let mut st = sync::lock(&shard.lock);
        let Some(t) = shard.table(&guard) else {
            return false;
        };
        let Some(i) = t.find(h, key) else {
            return false;
        };
        if cell::kill::<W>(&t.entry(i).word).is_none() {
            unreachable!("a linked bucket is live under the lock");
        }
        self.unlink(t, i, &mut st);
        true
    }

    fn sweep_all(&self, cx: &Ctx, now: u64) -> usize {
        self.collect();
        let guard = rcu::read();
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut st = sync::lock(&shard.lock);
            total += self.sweep_locked(cx, shard, &mut st, now, &guard).0;
            // Mostly tombstones: compact (and shrink) the table now rather than at the next
            // insert, so that memory follows the number of keys.
            if let Some(t) = shard.table(&guard) {
                if t.cap() > MIN_CAP && st.live * 4 < st.used {
                    self.rebuild(cx, shard, &mut st, now, &guard, false);
                }
            }
        }
        drop(guard);
        self.collect();
        total
    }

    fn clear_all(&self) {
        let guard = rcu::read();
        for shard in self.shards.iter() {
            let mut st = sync::lock(&shard.lock);
            if let Some(t) = shard.table(&guard) {
                for i in 0..t.cap() {
                    if t.ctrl(i) & LIVE != 0 && cell::kill::<W>(&t.entry(i).word).is_some() {
                        self.unlink(t, i, &mut st);
                    }
                }
            }
            let old = shard.publish(ptr::null_mut());
            *st = ShardState::default();
            self.retire(shard, old);
        }
        drop(guard);
        self.collect();
    }

    fn snapshot_all(&self, cx: &Ctx, now: u64) -> Vec<(K, Decision)>
    where
        K: Clone,
    {
        let guard = rcu::read();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let Some(t) = shard.table(&guard) else {
                continue;
            };
            for i in 0..t.cap() {
                if t.ctrl_ordered(i, Ordering::Acquire) & LIVE == 0 {
                    continue;
                }
                let e = t.entry(i);
                let w = W::load(&e.word);
                if w == W::DEAD {
                    continue;
                }
                // SAFETY: LIVE control word loaded with Acquire: the key is initialised and
                // stays readable while `guard` is held (see `Table::find`).
                let k = unsafe { (*e.key.get()).assume_init_ref() }.clone();
                out.push((k, cx.codec.decide(w.widen(), now, 0).0));
            }
        }
        out
    }

    /// Evictions so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.bound.evictions()
    }

    /// Live reconfiguration: a store of the same shards and hasher (its words `W2` wide)
    /// holding every live bucket of this one, its state converted by `carry`. This store is
    /// left empty (its tables retired); with `Err` (a state `carry` refused) nothing changed.
    /// The caller guarantees that no other thread uses this store (`KeyedLimiter::set_quota`
    /// stopped every operation and waited for them), so nothing here waits for a reader.
    ///
    /// User code (the keys' `Hash`) runs before anything moves: a panic there leaves this
    /// store as it was. Keys are then moved bitwise into the new tables, as a rebuild does.
    ///
    /// In two halves, so that a store and the store of its long keys' digests move together
    /// or not at all (`long.rs`): this one changes nothing and returns every live slot as
    /// (shard, slot, its hash, its state carried by `carry`); [`moved`](Self::moved) moves them.
    pub(crate) fn carried<W2: Word>(
        &self,
        mut carry: impl FnMut(W) -> Result<W2, Error>,
    ) -> Result<Vec<(usize, usize, u64, W2)>, Error> {
        let guard = rcu::read();
        let mut found: Vec<(usize, usize, u64, W2)> = Vec::new();
        for (si, shard) in self.shards.iter().enumerate() {
            let Some(t) = shard.table(&guard) else {
                continue;
            };
            for i in 0..t.cap() {
                if t.ctrl(i) & LIVE == 0 {
                    continue;
                }
                let e = t.entry(i);
                let state = carry(W::load(&e.word))?;
                // SAFETY: LIVE: the key is initialised, and nobody else uses the store.
                let h = self
                    .hasher
                    .hash_one(unsafe { (*e.key.get()).assume_init_ref() });
                found.push((si, i, h, state));
            }
        }
        Ok(found)
    }

    /// The second half of live reconfiguration: the slots `found` by
    /// [`carried`](Self::carried) moved into a new store under `bound`; this one left empty.
    pub(crate) fn moved<W2: Word>(
        &self,
        found: Vec<(usize, usize, u64, W2)>,
        bound: Box<CachePadded<Bound>>,
    ) -> Core<K, W2> {
        let guard = rcu::read();
        let to = Core::<K, W2> {
            shards: (0..self.shards.len())
                .map(|_| CachePadded::new(Shard::new()))
                .collect(),
            hasher: self.hasher.clone(),
            shard_mask: self.shard_mask,
            bound,
            #[cfg(not(sluicegate_loom))]
            limbo: Mutex::new(Vec::new()),
            #[cfg(not(sluicegate_loom))]
            in_limbo: crate::sync::real::AtomicBool::new(false),
        };
        let mut per_shard = vec![0usize; to.shards.len()];
        for &(_, _, h, _) in &found {
            per_shard[(h >> 40) as usize & to.shard_mask] += 1;
        }
        let tables: Vec<Box<Table<K, W2>>> = per_shard
            .iter()
            .map(|&n| Table::new(((n + 1) * 10 / 7 + 1).max(MIN_CAP)))
            .collect();
        for (si, i, h, state) in found.iter().copied() {
            // SAFETY: as above; no reader can hold this table (the caller's guarantee).
            let t = self.shards[si]
                .table(&guard)
                .expect("a table with a live slot");
            let e = t.entry(i);
            // SAFETY: LIVE: the key is initialised. It is moved bitwise into the new table,
            // which owns it from now on (the old slot becomes MOVED and is not dropped).
            let key = unsafe { ptr::read((*e.key.get()).assume_init_ref()) };
            t.set_ctrl(i, MOVED);
            let nt = &tables[(h >> 40) as usize & to.shard_mask];
            let ni = nt.free_slot(h);
            let ne = nt.entry(ni);
            // SAFETY: the new table is not published yet: we are its only user.
            unsafe { (*ne.key.get()).write(key) };
            W2::store(&ne.word, state);
            nt.set_ctrl(ni, tag(h));
        }
        for ((shard, table), n) in to.shards.iter().zip(tables).zip(per_shard) {
            let mut st = sync::lock(&shard.lock);
            (st.used, st.live) = (n, n);
            let old = shard.publish(Box::into_raw(table));
            debug_assert!(old.is_null());
        }
        to.bound.moved_in(found.len());
        to.bound.raise_watermark(self.bound.watermark());
        // This store is empty now: unlinked keys (TOMB) are dropped with their tables.
        for shard in self.shards.iter() {
            let mut st = sync::lock(&shard.lock);
            let old = shard.publish(ptr::null_mut());
            *st = ShardState::default();
            self.retire(shard, old);
        }
        self.bound.give_back(found.len());
        drop(guard);
        self.collect();
        to
    }

    fn slots(&self) -> usize {
        let guard = rcu::read();
        self.shards
            .iter()
            .map(|s| s.table(&guard).map_or(0, |t| t.cap()))
            .sum()
    }
}

impl<K: Hash + Eq + Send + 'static, W: Word> Store<K> for Core<K, W> {
    #[inline]
    fn acquire<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.acquire_hashed(cx, self.hash(key), key, now, cost, u64::MAX)
    }

    fn reserve<Q>(
        &self,
        cx: &Ctx,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.acquire_hashed(cx, self.hash(key), key, now, cost, within)
    }

    fn peek<Q>(&self, cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Ok(self.peek_hashed(cx, self.hash(key), key, now))
    }

    fn refund<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.refund_hashed(cx, self.hash(key), key, now, cost);
        Ok(())
    }

    fn remove<Q>(&self, _cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Ok(self.remove_hashed(self.hash(key), key))
    }

    fn sweep(&self, cx: &Ctx, now: u64) -> Result<usize, Error> {
        Ok(self.sweep_all(cx, now))
    }

    fn clear(&self) -> Result<(), Error> {
        self.clear_all();
        Ok(())
    }

    fn len(&self) -> usize {
        self.bound.len()
    }

    fn capacity(&self) -> usize {
        self.slots()
    }

    fn snapshot(&self, cx: &Ctx, now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        Ok(self.snapshot_all(cx, now))
    }
}

/// The store's unsafe code (the table's key cells, the shard's published view, deferred frees
/// through read sections) exercised at a size Miri runs in seconds: `ci/miri.sh` runs the
/// library's unit tests under Miri, which reports any undefined behaviour, data race or leak.
#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use crate::{KeyedLimiter, ManualClock, OnFull};
    use std::sync::Arc;

    fn limiter(max_keys: usize, shards: usize) -> (KeyedLimiter<String, ManualClock>, ManualClock) {
        let clock = ManualClock::new(0);
        let kl = KeyedLimiter::builder("2/s".parse().unwrap())
            .max_keys(max_keys)
            .shards(shards)
            .on_full(OnFull::EvictFullest)
            .clock(clock.clone())
            .build()
            .unwrap();
        (kl, clock)
    }

    #[test]
    fn keys_move_through_rebuilds_and_are_freed_once() {
        let (kl, clock) = limiter(64, 2);
        // Heap-owning keys, so that a double free or a leak of a moved key shows.
        for round in 0..3u64 {
            for i in 0..48u64 {
                let k = format!("key-{i}-{}", "x".repeat(i as usize % 7));
                assert!(
                    kl.try_acquire(k.as_str(), 1).unwrap().allowed(),
                    "{round} {i}"
                );
            }
            for i in (0..48u64).step_by(3) {
                let k = format!("key-{i}-{}", "x".repeat(i as usize % 7));
                assert!(kl.remove(k.as_str()).unwrap());
            }
            clock.advance_nanos(2_000_000_000);
            assert!(kl.sweep().unwrap() > 0);
        }
        assert_eq!(kl.snapshot().unwrap().len(), kl.len());
        kl.clear().unwrap();
        assert!(kl.is_empty());
    }

    #[test]
    fn readers_race_rebuilds_and_evictions() {
        let (kl, clock) = limiter(16, 1);
        let kl = Arc::new(kl);
        let readers: Vec<_> = (0..2)
            .map(|t| {
                let kl = kl.clone();
                std::thread::spawn(move || {
                    for i in 0..40u64 {
                        let k = format!("r{t}-{}", i % 10);
                        let _ = kl.try_acquire(k.as_str(), 1);
                        let _ = kl.peek(k.as_str());
                    }
                })
            })
            .collect();
        for i in 0..40u64 {
            // New keys past the bound evict (the fullest under EvictFullest) and rebuild.
            let _ = kl.try_acquire(format!("w{i}").as_str(), 2);
            if i % 8 == 0 {
                clock.advance_nanos(1_000_000_000);
                let _ = kl.sweep();
            }
        }
        for r in readers {
            r.join().unwrap();
        }
        assert!(kl.len() <= 16);
    }
}
