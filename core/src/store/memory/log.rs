//! Keyed sliding logs: one [`Log`] per key, in sharded tables, each shard behind a mutex.
//!
//! # Why a shard lock, and lookups that take it
//!
//! The word store (`keyed.rs`) reads without a lock because a bucket is one word: a consume is
//! one CAS, and unlinking is one CAS or swap to a DEAD mark that consumers can see. A sliding
//! log is not one word: an admission reads one entry and writes several plus the head, a
//! multi-word transaction (see `log.rs`), so it runs under a lock in any case. Giving every
//! key its own lock ([`LogCell`](crate::algorithm::LogCell)) would take two locks per decision (the
//! lookup's, then the log's) and need a protocol for a log unlinked while a consumer waits on
//! its lock. Here the shard's lock is the log's critical section: lookup, decision, refund,
//! eviction and insertion of a key all run under its shard's mutex, so they are serialised
//! per key and eviction is trivially lossless (the evictor holds the lock every consumer of
//! the key needs). The price is that lookups of this algorithm take a lock, which the design
//! allows for the sliding log only, and that keys of one shard (64 by default) wait for each
//! other for a probe and a decision (tens of nanoseconds). The lock is `crate::sync::Mutex`
//! (`std`'s, or loom's in the models). No critical section panics by itself (indexes are
//! masked, arithmetic cannot overflow); a panic in the key's `Eq`, `Clone`, `Drop` or
//! conversion leaves the shard consistent after each statement, so a poisoned lock is entered.
//!
//! # Layout
//!
//! Each shard owns a `hashbrown::HashTable` of `{hash, key, log}` entries, hashed by the
//! limiter's seeded hash of the key, which the entry keeps so that a rehash never runs the
//! key's `Hash` (user code) under the lock. A sweep that leaves a table under a quarter full
//! shrinks it. Nothing is read outside the lock, so there is no `unsafe` here, no read section
//! and no per-key allocation but the key's own and the log's runs (an empty log allocates
//! nothing). The table was a hand-written linear-probing table until hashbrown's `HashTable`
//! offered what eviction needs (bucket indexes for the sampled eviction's cursor,
//! `extract_if` for a sweep); docs/KEYED.md has the comparison.
//!
//! # Eviction and the key bound
//!
//! A log is full at `now` when its window holds nothing and `now` is not before its newest
//! admission ([`Log::is_full`]); from a reading at or after `now` it decides exactly as a new
//! log. Full logs are evicted by [`sweep`](LogStore::sweep) and, at the key bound, by the new
//! key that needs their place (its own shard first, then the first other shard it can lock
//! without waiting), never otherwise on the hot path. A key is created at `max(now, T)`, `T`
//! the latest instant at which a log was evicted: a preempted thread's older reading sees the
//! room the evicted log had at `T` (none of it used), never more.
//!
//! `len` is one atomic counter, reserved (CAS) before a key is linked, so the bound is never
//! exceeded even by new keys of different shards. Other shards are only try-locked, as in the
//! word store; a scan that skipped a busy shard is incomplete and records no hint, and its new
//! key lets go of its lock, waits for each shard in turn (sweeping it) and looks again, once,
//! rather than refusing while a full log sits in the busy shard (crate::store::bound's
//! `NoRoom`). So does this store when the store sharing its bound (of long keys' digests, or
//! of the keys beside them: `long.rs`) asks it for room for a new key. A complete scan at the
//! bound that finds no full log records the earliest instant one can become full (`hint`), so
//! a flood of new keys costs O(1) each until then. New logs and refunds can make a log full
//! sooner: they bump `gen` and lower `hint` after their change (both read-modify-writes), and
//! a scanner drops the hint it just set when `gen` moved during its scan (crate::bound,
//! shared with the word store).

use super::KeyHasher;
use crate::algorithm::{Log, SlidingLog};
use crate::store::bound::{look_again, Bound, NoRoom, Reservation};
use crate::store::keyed::Ctx;
use crate::store::OnFull;
use crate::store::Store;
use crate::sync::{self, Mutex};
use crate::{Decision, Error};
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;

/// Logs looked at per [`OnFull::EvictFullest`] eviction.
const SAMPLE: usize = 32;

/// A key, its hash under the store's seed (so that the table never hashes a key again, and
/// a rehash runs no user code), and its log.
struct Entry<K> {
    hash: u64,
    key: K,
    log: Log,
}

/// One shard's keys, under the shard's lock: a SwissTable (`hashbrown::HashTable`) of
/// entries, and where the next sampled eviction starts.
struct Table<K> {
    map: HashTable<Entry<K>>,
    /// A bucket index (below `map.num_buckets()` after a rehash, taken modulo it).
    cursor: usize,
}

impl<K> Table<K> {
    fn new() -> Self {
        Self {
            map: HashTable::new(),
            cursor: 0,
        }
    }

    #[inline]
    fn log_mut<Q>(&mut self, h: u64, key: &Q) -> Option<&mut Log>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.map
            .find_mut(h, |e| e.key.borrow() == key)
            .map(|e| &mut e.log)
    }

    /// Links a key known to be absent.
    fn insert(&mut self, entry: Entry<K>) {
        self.map.insert_unique(entry.hash, entry, |e| e.hash);
    }

    /// Unlinks `key` and returns its entry.
    fn remove<Q>(&mut self, h: u64, key: &Q) -> Option<Entry<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let found = self.map.find_entry(h, |e| e.key.borrow() == key).ok()?;
        Some(found.remove().0)
    }

    /// Shrinks a table less than a quarter full.
    fn maybe_shrink(&mut self) {
        if self.map.len() * 4 < self.map.capacity() {
            self.map.shrink_to_fit(|e| e.hash);
        }
    }
}

/// The keyed store of sliding logs (see the module documentation).
pub(crate) struct LogStore<K> {
    shards: Box<[CachePadded<Mutex<Table<K>>>]>,
    hasher: KeyHasher,
    log: SlidingLog,
    mask: usize,
    max_keys: usize,
    on_full: OnFull,
    b: Box<CachePadded<Bound>>,
}

impl<K: Hash + Eq + Send + 'static> LogStore<K> {
    /// `shards` is a power of two (the builder rounds it).
    pub(crate) fn new(log: SlidingLog, shards: usize, max_keys: usize, on_full: OnFull) -> Self {
        let shards = shards.max(1).next_power_of_two();
        Self {
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(Table::new())))
                .collect(),
            hasher: KeyHasher::default(),
            log,
            mask: shards - 1,
            max_keys,
            on_full,
            b: Bound::boxed(),
        }
    }

    /// An empty store like this one (log, shards, bound, policy) whose keys count against
    /// this one's key bound: the store of its long keys' digests (`long.rs`).
    pub(crate) fn sharing_bound<K2: Hash + Eq + Send + 'static>(&self) -> LogStore<K2> {
        let mut twin = LogStore::new(self.log.clone(), self.mask + 1, self.max_keys, self.on_full);
        twin.b = self.b.sharing();
        twin
    }

    /// A bound over this store's key count (for a store of digests moved beside it).
    pub(super) fn bound_sharing(&self) -> Box<CachePadded<Bound>> {
        self.b.sharing()
    }

    /// Evicts a full log (or, with [`OnFull::EvictFullest`], the fullest of a sample) for a
    /// new key of the store that shares this one's bound; whether that key should look again
    /// (`long.rs`'s `Twin::make_room`: once per key, a busy shard is waited for).
    pub(crate) fn make_room_at(&self, now: u64, waited: &mut bool) -> bool {
        let mut dead = Vec::new();
        let found = {
            let mut t = sync::lock(&self.shards[0]);
            let busy = &mut false;
            let made = self.evict_full_somewhere(0, &mut t, now, &mut dead, busy)
                || (self.on_full == OnFull::EvictFullest
                    && self.evict_fullest_somewhere(0, &mut t, now, &mut dead, busy));
            if made {
                None
            } else {
                self.b.no_room(self.max_keys, *busy)
            }
        };
        // The lock is released: a busy shard is waited for holding none.
        let again = look_again(found, waited, || self.sweep_each(now, &mut dead));
        drop(dead); // the keys' destructors run outside the lock
        again
    }

    /// Evicts full logs (lossless) if the key bound is reached and the hint says one may be
    /// full: `long.rs`'s `Twin::evict_full_first`. The caller holds no lock.
    pub(crate) fn evict_full_first_at(&self, now: u64) {
        if self.b.len() < self.max_keys || self.b.scan(now).is_none() {
            return;
        }
        let mut dead = Vec::new();
        {
            let mut t = sync::lock(&self.shards[0]);
            self.evict_full_somewhere(0, &mut t, now, &mut dead, &mut false);
        }
        drop(dead); // the keys' destructors run outside the lock
    }

    #[inline]
    fn shard_of(&self, h: u64) -> usize {
        (h >> 40) as usize & self.mask
    }

    /// The decision for `cost` at `now` on `key`'s log, created on the key's first request.
    /// Kept out of line: the word store's hot path dispatches past it.
    #[inline(never)]
    fn acquire_hashed<Q>(&self, h: u64, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let si = self.shard_of(h);
        // Logs evicted to make room: dropped after the lock (declared first, so dropped last,
        // on every return): a key's `Drop` is user code and may call back into this limiter.
        let mut dead = Vec::new();
        let mut waited = false;
        let (mut t, reserved) = loop {
            let mut t = sync::lock(&self.shards[si]);
            if let Some(log) = t.log_mut(h, key) {
                return Ok(log.decide(&self.log, now, cost, true));
            }
            match self.reserve(si, &mut t, now, &mut dead) {
                Ok(r) => break (t, r),
                Err(NoRoom::Busy) if !waited => {
                    // Another shard was busy: wait for each in turn, holding no other lock,
                    // sweeping it, then look again (once). See `NoRoom`.
                    waited = true;
                    drop(t);
                    self.sweep_each(now, &mut dead);
                }
                Err(_) => {
                    return Err(Error::KeyStoreFull {
                        max_keys: self.max_keys,
                    })
                }
            }
        };
        let key: K = key.to_owned().into();
        // Under the shard's lock: every eviction of this key raised the watermark before.
        let at = now.max(self.b.watermark());
        let mut log = Log::new(at);
        let d = log.decide(&self.log, now, cost, true);
        let full_at = log.full_at(&self.log);
        t.insert(Entry { hash: h, key, log });
        reserved.kept();
        drop(t);
        self.b.lowered(full_at);
        Ok(d)
    }

    /// The decision a request of cost 0 would get, changing nothing; an absent key reports a
    /// log created now.
    fn peek_hashed<Q>(&self, h: u64, key: &Q, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut t = sync::lock(&self.shards[self.shard_of(h)]);
        if let Some(log) = t.log_mut(h, key) {
            return log.decide(&self.log, now, 0, false);
        }
        let at = now.max(self.b.watermark());
        drop(t);
        Log::new(at).decide(&self.log, now, 0, false)
    }

    /// Removes up to `cost` units of `key`'s window, newest first; an absent key is left
    /// absent.
    fn refund_hashed<Q>(&self, h: u64, key: &Q, now: u64, cost: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut t = sync::lock(&self.shards[self.shard_of(h)]);
        let Some(log) = t.log_mut(h, key) else {
            return;
        };
        let before = log.full_at(&self.log);
        log.refund(&self.log, now, cost);
        let after = log.full_at(&self.log);
        drop(t);
        if after < before {
            self.b.lowered(after);
        }
    }

    /// Forgets `key`; `true` if it was present.
    fn remove_hashed<Q>(&self, h: u64, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut t = sync::lock(&self.shards[self.shard_of(h)]);
        let Some(gone) = t.remove(h, key) else {
            return false;
        };
        self.b.give_back(1);
        drop(t);
        drop(gone);
        true
    }

    /// Evicts every log that is full at `now`; returns how many. One shard at a time.
    fn sweep_all(&self, now: u64) -> usize {
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut dead = Vec::new();
            let mut t = sync::lock(shard);
            total += self.evict_full_in(&mut t, now, &mut dead).0;
            t.maybe_shrink();
            drop(t);
            drop(dead); // the keys' destructors run outside the lock
        }
        total
    }

    /// Forgets every key.
    fn clear_all(&self) {
        for shard in self.shards.iter() {
            let mut t = sync::lock(shard);
            let old = core::mem::replace(&mut *t, Table::new());
            self.b.give_back(old.map.len());
            drop(t);
            drop(old); // the keys' destructors run outside the lock
        }
    }

    /// Every key and its log's state at `now` (each shard locked in turn, not one snapshot).
    fn snapshot_all(&self, now: u64) -> Vec<(K, Decision)>
    where
        K: Clone,
    {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut t = sync::lock(shard);
            for e in t.map.iter_mut() {
                out.push((e.key.clone(), e.log.decide(&self.log, now, 0, false)));
            }
        }
        out
    }

    /// Places allocated in every shard's table (live and empty).
    fn slots(&self) -> usize {
        self.shards
            .iter()
            .map(|s| sync::lock(s).map.num_buckets())
            .sum()
    }

    /// Takes one unit of the key bound for a new key of shard `si` (whose lock `own` is),
    /// making room if needed (see [`NoRoom`]); evicted entries go to `dead`, for the caller to
    /// drop once it holds no lock.
    fn reserve(
        &self,
        si: usize,
        own: &mut Table<K>,
        now: u64,
        dead: &mut Vec<Entry<K>>,
    ) -> Result<Reservation<'_>, NoRoom> {
        loop {
            if let Some(r) = self.b.reserve(self.max_keys) {
                return Ok(r);
            }
            let mut busy = false;
            if self.evict_full_somewhere(si, own, now, dead, &mut busy) {
                continue;
            }
            if self.on_full == OnFull::EvictFullest
                && self.evict_fullest_somewhere(si, own, now, dead, &mut busy)
            {
                continue;
            }
            if let Some(no_room) = self.b.no_room(self.max_keys, busy) {
                return Err(no_room);
            }
        }
    }

    /// Evicts the full logs of every shard in turn at `now`, holding one shard's lock at a time
    /// (the caller holds none): a new key at the bound that found a shard busy waits for it so.
    fn sweep_each(&self, now: u64, dead: &mut Vec<Entry<K>>) {
        for shard in self.shards.iter() {
            let mut t = sync::lock(shard);
            self.evict_full_in(&mut t, now, dead);
        }
    }

    /// At the bound: evicts the full logs of this shard, else of the first other shard (not
    /// busy) that has any. When every shard was scanned and none had a full log, records the
    /// earliest instant one can become full, so that new keys are refused in O(1) until then
    /// (the hint protocol of crate::bound; new logs and refunds are made under their shard's
    /// lock, so a scan that starts after their `gen` bump sees them); when a shard was busy,
    /// `busy` is set.
    fn evict_full_somewhere(
        &self,
        si: usize,
        own: &mut Table<K>,
        now: u64,
        dead: &mut Vec<Entry<K>>,
        busy: &mut bool,
    ) -> bool {
        let Some(scan) = self.b.scan(now) else {
            return false;
        };
        let (evicted, mut soonest) = self.evict_full_in(own, now, dead);
        if evicted > 0 {
            return true;
        }
        let mut complete = true;
        for (i, shard) in self.shards.iter().enumerate() {
            if i == si {
                continue;
            }
            let Some(mut t) = sync::try_lock(shard) else {
                complete = false;
                continue;
            };
            let (evicted, s) = self.evict_full_in(&mut t, now, dead);
            if evicted > 0 {
                return true;
            }
            soonest = soonest.min(s);
        }
        if complete {
            self.b.found_nothing(scan, soonest);
        }
        *busy |= !complete;
        false
    }

    /// Evicts the full logs of one table (its lock held) into `dead`. Returns how many, and
    /// the earliest instant a kept log becomes full (`u64::MAX` if none).
    fn evict_full_in(&self, t: &mut Table<K>, now: u64, dead: &mut Vec<Entry<K>>) -> (usize, u64) {
        let (mut evicted, mut soonest) = (0, u64::MAX);
        let before = dead.len();
        dead.extend(t.map.extract_if(|e| {
            if !e.log.is_full(&self.log, now) {
                soonest = soonest.min(e.log.full_at(&self.log));
                return false;
            }
            if evicted == 0 {
                // Before the first eviction, so that whoever re-creates the key reads it.
                self.b.raise_watermark(now);
            }
            evicted += 1;
            true
        }));
        debug_assert_eq!(dead.len() - before, evicted);
        self.b.give_back(evicted);
        self.b.evicted(evicted);
        (evicted, soonest)
    }

    /// [`OnFull::EvictFullest`]: evicts the log with the least `reset_after` among up to 32
    /// live logs of this shard (or of the first other shard, not busy, that has some).
    fn evict_fullest_somewhere(
        &self,
        si: usize,
        own: &mut Table<K>,
        now: u64,
        dead: &mut Vec<Entry<K>>,
        busy: &mut bool,
    ) -> bool {
        if self.evict_fullest_in(own, now, dead) {
            return true;
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if i == si {
                continue;
            }
            let Some(mut t) = sync::try_lock(shard) else {
                *busy = true;
                continue;
            };
            if self.evict_fullest_in(&mut t, now, dead) {
                return true;
            }
        }
        false
    }

    fn evict_fullest_in(&self, t: &mut Table<K>, now: u64, dead: &mut Vec<Entry<K>>) -> bool {
        let buckets = t.map.num_buckets();
        if t.map.is_empty() || buckets == 0 {
            return false;
        }
        let (mut best, mut seen, mut i) = (None::<(u64, usize)>, 0, t.cursor % buckets);
        for _ in 0..buckets {
            let at = i;
            i = if i + 1 == buckets { 0 } else { i + 1 };
            let Some(e) = t.map.get_bucket_mut(at) else {
                continue;
            };
            let reset = e.log.decide(&self.log, now, 0, false).reset_after_nanos();
            if best.is_none_or(|b| reset < b.0) {
                best = Some((reset, at));
            }
            seen += 1;
            if seen == SAMPLE {
                break;
            }
        }
        t.cursor = i;
        let Some(found) = best.and_then(|(_, at)| t.map.get_bucket_entry(at).ok()) else {
            return false;
        };
        self.b.raise_watermark(now);
        dead.push(found.remove().0);
        self.b.give_back(1);
        self.b.evicted(1);
        true
    }

    /// Live reconfiguration: a store of the same shards, hasher and key bound whose logs are
    /// this store's (a log is carried as it is), decided by `log`. This store is left empty.
    /// The caller guarantees that no other thread uses it (`KeyedLimiter::set_quota` stopped
    /// every operation and waited for them), so nothing here waits.
    pub(crate) fn move_into(&self, log: SlidingLog) -> LogStore<K> {
        self.moved(log, Bound::boxed())
    }

    /// [`move_into`](Self::move_into) under `b` (a bound shared with another store).
    pub(crate) fn moved(&self, log: SlidingLog, b: Box<CachePadded<Bound>>) -> LogStore<K> {
        let to = LogStore {
            shards: (0..self.shards.len())
                .map(|_| CachePadded::new(Mutex::new(Table::new())))
                .collect(),
            hasher: self.hasher.clone(),
            log,
            mask: self.mask,
            max_keys: self.max_keys,
            on_full: self.on_full,
            b,
        };
        let mut moved = 0;
        for (from, into) in self.shards.iter().zip(to.shards.iter()) {
            let t = core::mem::replace(&mut *sync::lock(from), Table::new());
            moved += t.map.len();
            *sync::lock(into) = t;
        }
        self.b.give_back(moved);
        to.b.moved_in(moved);
        to.b.raise_watermark(self.b.watermark());
        to
    }

    /// Evictions so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.b.evictions()
    }
}

impl<K: Hash + Eq + Send + 'static> Store<K> for LogStore<K> {
    /// Kept out of line: the word store's hot path dispatches past it.
    #[inline(never)]
    fn acquire<Q>(&self, _cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.acquire_hashed(self.hasher.hash_one(key), key, now, cost)
    }

    /// A sliding log never admits with a wait: the same as `acquire`.
    fn reserve<Q>(
        &self,
        cx: &Ctx,
        key: &Q,
        now: u64,
        cost: u64,
        _within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.acquire(cx, key, now, cost)
    }

    fn peek<Q>(&self, _cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Ok(self.peek_hashed(self.hasher.hash_one(key), key, now))
    }

    fn refund<Q>(&self, _cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.refund_hashed(self.hasher.hash_one(key), key, now, cost);
        Ok(())
    }

    fn remove<Q>(&self, _cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Ok(self.remove_hashed(self.hasher.hash_one(key), key))
    }

    fn sweep(&self, _cx: &Ctx, now: u64) -> Result<usize, Error> {
        Ok(self.sweep_all(now))
    }

    fn clear(&self) -> Result<(), Error> {
        self.clear_all();
        Ok(())
    }

    fn len(&self) -> usize {
        self.b.len()
    }

    fn capacity(&self) -> usize {
        self.slots()
    }

    fn snapshot(&self, _cx: &Ctx, now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        Ok(self.snapshot_all(now))
    }
}
