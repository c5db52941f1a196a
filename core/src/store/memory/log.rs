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
//! Each shard owns an open-addressing table probed linearly from the limiter's (seeded) hash
//! of the key: an array of hash tags (eight to a cache line, walked by the probe) beside an
//! array of `Option<{key, log}>` entries (one of them touched per lookup). Deletion shifts the
//! following entries back, so there are no tombstones. The capacity is a power of two, the
//! load at most 7/8; a sweep that leaves a table under a quarter full shrinks it. Nothing is
//! read outside the lock, so there is no `unsafe`, no epoch and no per-key allocation but the
//! key's own and the log's runs (an empty log allocates nothing). A `u64` key costs 64 bytes
//! of table plus its runs (16 bytes each, in the log's own buffer).
//!
//! Measured (`tests/keyed_log.rs`, `timing_keyed_log_decisions`, release, one thread, a shared
//! 2-core VM, noisy): about 20 ns per decision on one key (the word store's sliding window: 29
//! ns); at 100 000 keys about 150 ns with one run per log and 190-240 ns with ten, against 51
//! ns for the sliding window, whose 24-byte entries stay in cache: a log decision there pays a
//! miss on the table and another on the log's runs.
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
//! word store: under contention a new key may be refused while a full log sits in a shard busy
//! at that moment (the scan is then incomplete and records no hint). A complete scan at the bound that finds no
//! full log records the earliest instant one can become full (`hint`), so a flood of new keys
//! costs O(1) each until then. New logs and refunds can make a log full sooner: they bump
//! `gen` and lower `hint` after their change (both read-modify-writes), and a scanner drops
//! the hint it just set when `gen` moved during its scan (crate::bound, shared with the word
//! store).

use super::KeyHasher;
use crate::algorithm::{Log, SlidingLog};
use crate::store::bound::{Bound, Reservation};
use crate::store::keyed::Ctx;
use crate::store::OnFull;
use crate::store::Store;
use crate::sync::{self, Mutex};
use crate::{Decision, Error};
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use crossbeam_utils::CachePadded;

/// The first (and smallest) table of a shard.
const MIN_CAP: usize = 8;
/// Logs looked at per [`OnFull::EvictFullest`] eviction.
const SAMPLE: usize = 32;

/// A key and its log.
struct Entry<K> {
    key: K,
    log: Log,
}

/// The limiter's hash of a key as stored: 0 marks an empty place (`h == 0` shares tag 1 with
/// `h == 1`, harmless: keys are compared in full). Probing and moving entries use the tag,
/// never the key's `Hash`.
#[inline]
fn tag(h: u64) -> u64 {
    h.max(1)
}

/// One shard's keys, under the shard's lock: parallel arrays of tags and entries, so that a
/// probe walks the compact tags (eight to a cache line) and touches only the entry it wants.
struct Table<K> {
    /// Empty, or a power of two of places, at most 7/8 of them used: the tag of the key in
    /// the same place, or 0.
    tags: Vec<u64>,
    /// `Some` exactly where the tag is not 0.
    entries: Vec<Option<Entry<K>>>,
    live: usize,
    /// Where the next sampled eviction starts.
    cursor: usize,
}

impl<K> Table<K> {
    fn new() -> Self {
        Self {
            tags: Vec::new(),
            entries: Vec::new(),
            live: 0,
            cursor: 0,
        }
    }

    #[inline]
    fn cap(&self) -> usize {
        self.tags.len()
    }

    #[inline]
    fn mask(&self) -> usize {
        self.tags.len().wrapping_sub(1)
    }

    #[inline]
    fn find<Q>(&self, h: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if self.tags.is_empty() {
            return None;
        }
        let (want, mask) = (tag(h), self.mask());
        let mut i = want as usize & mask;
        // The load is below 1: an empty place ends every probe.
        loop {
            let t = self.tags[i];
            if t == 0 {
                return None;
            }
            if t == want
                && self.entries[i]
                    .as_ref()
                    .is_some_and(|e| e.key.borrow() == key)
            {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn log_mut<Q>(&mut self, h: u64, key: &Q) -> Option<&mut Log>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let i = self.find(h, key)?;
        self.entries[i].as_mut().map(|e| &mut e.log)
    }

    /// Links a key known to be absent.
    fn insert(&mut self, h: u64, entry: Entry<K>) {
        if (self.live + 1) * 8 > self.cap() * 7 {
            self.resize((self.cap() * 2).max(MIN_CAP));
        }
        self.place(tag(h), entry);
        self.live += 1;
    }

    fn place(&mut self, t: u64, entry: Entry<K>) {
        let mask = self.mask();
        let mut i = t as usize & mask;
        while self.tags[i] != 0 {
            i = (i + 1) & mask;
        }
        self.tags[i] = t;
        self.entries[i] = Some(entry);
    }

    /// Re-places every entry into `cap` places (a power of two above the live count).
    fn resize(&mut self, cap: usize) {
        let tags = core::mem::replace(&mut self.tags, vec![0; cap]);
        let entries = core::iter::repeat_with(|| None).take(cap).collect();
        let entries = core::mem::replace(&mut self.entries, entries);
        for (t, e) in tags.into_iter().zip(entries) {
            if let Some(e) = e {
                self.place(t, e);
            }
        }
        self.cursor = 0;
    }

    /// Shrinks a table less than a quarter full (to at most half full).
    fn maybe_shrink(&mut self) {
        if self.cap() > MIN_CAP && self.live * 4 < self.cap() {
            self.resize((self.live * 2).next_power_of_two().max(MIN_CAP));
        }
    }

    /// Unlinks the entry at `i` and returns it; later entries of the same probe run shift
    /// back into the hole, so every probe still ends at the first empty place.
    fn take(&mut self, i: usize) -> Option<Entry<K>> {
        let mask = self.mask();
        let i = i & mask;
        let gone = self.entries[i].take()?;
        self.tags[i] = 0;
        self.live -= 1;
        let (mut hole, mut j) = (i, i);
        loop {
            j = (j + 1) & mask;
            let t = self.tags[j];
            if t == 0 {
                break;
            }
            // The entry at j may fill the hole iff the hole is on its probe path home..=j.
            let home = t as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.tags[hole] = t;
                self.entries[hole] = self.entries[j].take();
                self.tags[j] = 0;
                hole = j;
            }
        }
        Some(gone)
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
        let mut t = sync::lock(&self.shards[si]);
        if let Some(log) = t.log_mut(h, key) {
            return Ok(log.decide(&self.log, now, cost, true));
        }
        let reserved = self.reserve(si, &mut t, now, &mut dead)?;
        let key: K = key.to_owned().into();
        // Under the shard's lock: every eviction of this key raised the watermark before.
        let at = now.max(self.b.watermark());
        let mut log = Log::new(at);
        let d = log.decide(&self.log, now, cost, true);
        let full_at = log.full_at(&self.log);
        t.insert(h, Entry { key, log });
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
        let Some(i) = t.find(h, key) else {
            return false;
        };
        let gone = t.take(i);
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
            self.b.give_back(old.live);
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
            for e in t.entries.iter_mut().flatten() {
                out.push((e.key.clone(), e.log.decide(&self.log, now, 0, false)));
            }
        }
        out
    }

    /// Places allocated in every shard's table (live and empty).
    fn slots(&self) -> usize {
        self.shards.iter().map(|s| sync::lock(s).cap()).sum()
    }

    /// Takes one unit of the key bound for a new key of shard `si` (whose lock `own` is),
    /// making room if needed; evicted entries go to `dead`, for the caller to drop once it
    /// holds no lock.
    fn reserve(
        &self,
        si: usize,
        own: &mut Table<K>,
        now: u64,
        dead: &mut Vec<Entry<K>>,
    ) -> Result<Reservation<'_>, Error> {
        loop {
            if let Some(r) = self.b.reserve(self.max_keys) {
                return Ok(r);
            }
            if self.evict_full_somewhere(si, own, now, dead) {
                continue;
            }
            if self.on_full == OnFull::EvictFullest
                && self.evict_fullest_somewhere(si, own, now, dead)
            {
                continue;
            }
            return Err(Error::KeyStoreFull {
                max_keys: self.max_keys,
            });
        }
    }

    /// At the bound: evicts the full logs of this shard, else of the first other shard (not
    /// busy) that has any. When every shard was scanned and none had a full log, records the
    /// earliest instant one can become full, so that new keys are refused in O(1) until then
    /// (the hint protocol of crate::bound; new logs and refunds are made under their shard's
    /// lock, so a scan that starts after their `gen` bump sees them).
    fn evict_full_somewhere(
        &self,
        si: usize,
        own: &mut Table<K>,
        now: u64,
        dead: &mut Vec<Entry<K>>,
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
        false
    }

    /// Evicts the full logs of one table (its lock held) into `dead`. Returns how many, and
    /// the earliest instant a kept log becomes full (`u64::MAX` if none).
    fn evict_full_in(&self, t: &mut Table<K>, now: u64, dead: &mut Vec<Entry<K>>) -> (usize, u64) {
        let (mut evicted, mut soonest) = (0, u64::MAX);
        let mut i = 0;
        while i < t.cap() {
            let Some(e) = &t.entries[i] else {
                i += 1;
                continue;
            };
            if !e.log.is_full(&self.log, now) {
                soonest = soonest.min(e.log.full_at(&self.log));
                i += 1;
                continue;
            }
            if evicted == 0 {
                self.b.raise_watermark(now);
            }
            // An entry shifted back into place i is looked at next (entries from the start of
            // the table, already looked at and kept, may come back: they are kept again).
            dead.extend(t.take(i));
            self.b.give_back(1);
            evicted += 1;
        }
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
    ) -> bool {
        if self.evict_fullest_in(own, now, dead) {
            return true;
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if i == si {
                continue;
            }
            if let Some(mut t) = sync::try_lock(shard) {
                if self.evict_fullest_in(&mut t, now, dead) {
                    return true;
                }
            }
        }
        false
    }

    fn evict_fullest_in(&self, t: &mut Table<K>, now: u64, dead: &mut Vec<Entry<K>>) -> bool {
        if t.live == 0 {
            return false;
        }
        let mask = t.mask();
        let (mut best, mut seen, mut i) = (None::<(u64, usize)>, 0, t.cursor & mask);
        for _ in 0..t.cap() {
            let at = i;
            i = (i + 1) & mask;
            let Some(e) = &mut t.entries[at] else {
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
        let Some((_, at)) = best else {
            return false;
        };
        self.b.raise_watermark(now);
        dead.extend(t.take(at));
        self.b.give_back(1);
        true
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

#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use super::*;

    fn entry(k: u64) -> Entry<u64> {
        Entry {
            key: k,
            log: Log::new(0),
        }
    }

    /// Backward-shift deletion keeps every key findable, including runs that wrap around the
    /// end of the table and keys whose home is taken.
    #[test]
    fn table_insert_take_find() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let mut t = Table::<u64>::new();
            let mut present = std::collections::BTreeSet::new();
            for _ in 0..300 {
                // 64 keys on 8 homes (bits 3..32 clear): long runs, wrapping at the end.
                let k = rnd() % 64;
                let h = (k % 8) | (k << 32) | if round % 2 == 0 { 0 } else { 1 << 60 };
                match t.find(h, &h) {
                    Some(i) => {
                        assert_eq!(t.take(i).map(|e| e.key), Some(h));
                        present.remove(&h);
                    }
                    None => {
                        t.insert(h, entry(h));
                        present.insert(h);
                    }
                }
                assert_eq!(t.live, present.len());
                assert!(t.live * 8 <= t.cap() * 7);
                for (tg, e) in t.tags.iter().zip(&t.entries) {
                    assert_eq!(*tg != 0, e.is_some());
                }
                for &k in &present {
                    let i = t.find(k, &k).expect("present key found");
                    assert_eq!(t.entries[i].as_ref().map(|e| e.key), Some(k));
                }
                for k in 0..64u64 {
                    let h = (k % 8) | (k << 32) | if round % 2 == 0 { 0 } else { 1 << 60 };
                    assert_eq!(t.find(h, &h).is_some(), present.contains(&h));
                }
            }
            t.maybe_shrink();
            for &k in &present {
                assert!(t.find(k, &k).is_some());
            }
        }
    }
}
