//! Long keys: a key whose content is longer than [`LONG_KEY_BYTES`] is held as its 16-byte
//! keyed digest, in a second store of the same kind, so that the key bound (`max_keys`) bounds
//! memory whatever length of key request data chooses (docs/KEYED.md, "Long keys").
//!
//! [`Routed`] is a store of the caller's keys (`main`) plus, made on the first long key, a
//! store of digests (`long`) with a secret of its own. A key goes to one of the two by its
//! length alone, so it always meets the same bucket. Both count against one key count (their
//! bounds share it, crate::store::bound): a new key refused at the bound by one store asks
//! the other to evict a full bucket (or, with `OnFull::EvictFullest`, its fullest) and tries
//! again, so that "refused only when nothing is evictable" holds across both. The other store
//! scans as for its own new keys (its shard 0 locked, the others try-locked): when it evicts
//! nothing but skipped a busy shard (a sweep, a removal, another new key making room there),
//! it lets go of its lock, waits for each shard in turn, sweeping it, and the new key looks
//! again, once per request (`Twin::make_room`, crate::store::bound's `look_again`); a unit of
//! the bound given back meanwhile is looked for too. With `OnFull::EvictFullest` a key that
//! may be new first has the other store evict its full buckets (`Twin::evict_full_first`),
//! so that a bucket that is not full is evicted only when neither store holds a full one.
//!
//! The short keys' path is the main store's, unchanged: the default store's lock-free lookup
//! runs first (a long key is never found there, as it is never linked there), and only a
//! lookup that misses measures its key (the lengths of its byte strings, no byte read).
//! Listing the keys ([`Store::snapshot`]) lists the main store's only: a digest is not a key.

use super::log::LogStore;
use super::Core;
use crate::algorithm::SlidingLog;
use crate::bucket::cell::Word;
use crate::store::bound::{look_again, Bound};
use crate::store::key::{content_len, random_secret, Digest, LONG_KEY_BYTES};
use crate::store::keyed::Ctx;
use crate::store::{OnFull, Store};
use crate::sync::real::OnceLock;
use crate::sync::{self, rcu};
use crate::{Decision, Error};
use core::borrow::Borrow;
use core::hash::Hash;

/// A store of keys and, beside it, the store of its long keys' digests.
pub(crate) struct Routed<S, L> {
    pub(crate) main: S,
    /// The digests' store and its secret, made on the first long key.
    long: OnceLock<(L, [u64; 2])>,
}

/// The in-process word store with its long keys' store.
pub(crate) type Words<K, W> = Routed<Core<K, W>, Core<Digest, W>>;
/// The in-process sliding logs with their long keys' store.
pub(crate) type Logs<K> = Routed<LogStore<K>, LogStore<Digest>>;

/// What a store does for [`Routed`]: make the store of its digests, and make room at the key
/// bound for the other store's new key.
pub(crate) trait Twin<K>: Store<K> {
    /// The store of digests of the same kind.
    type Long: Twin<Digest>;

    /// An empty store of digests, sharing this store's key count.
    fn twin(&self) -> Self::Long;

    /// Evicts a full bucket (or, with `OnFull::EvictFullest`, the fullest of a sample) for a
    /// new key of the other store; whether that key should look again: a bucket was evicted,
    /// a unit of the bound was given back meanwhile, or a shard was busy and every shard was
    /// then waited for, once per new key (`waited`, crate::store::bound::look_again). The
    /// caller holds no lock.
    fn make_room(&self, cx: &Ctx, now: u64, waited: &mut bool) -> bool;

    /// Under `OnFull::EvictFullest`, before a new key of the other store may evict a bucket
    /// that is not full there: evicts this store's full buckets (lossless), if the key bound
    /// is reached and one may be full now (the bound's hint). The caller holds no lock.
    fn evict_full_first(&self, cx: &Ctx, now: u64);
}

/// Runs `op` until it is not refused at the key bound, or `room` makes none (its argument:
/// whether it waited for a busy shard already, for this key).
fn with_room<T>(
    mut op: impl FnMut() -> Result<T, Error>,
    mut room: impl FnMut(&mut bool) -> bool,
) -> Result<T, Error> {
    let mut waited = false;
    loop {
        match op() {
            Err(Error::KeyStoreFull { .. }) if room(&mut waited) => continue,
            r => return r,
        }
    }
}

impl<S, L: Twin<Digest>> Routed<S, L> {
    pub(crate) fn new(main: S) -> Self {
        Self {
            main,
            long: OnceLock::new(),
        }
    }

    /// The digest of `key` if it is long, and the digests' store (made now if needed).
    #[inline]
    fn long_key<K, Q: Hash + ?Sized>(&self, key: &Q) -> Option<(&L, Digest)>
    where
        S: Twin<K, Long = L>,
    {
        if content_len(key) <= LONG_KEY_BYTES {
            return None;
        }
        let (l, secret) = self
            .long
            .get_or_init(|| (self.main.twin(), random_secret()));
        Some((l, Digest::of(*secret, key)))
    }

    /// `OnFull::EvictFullest` loses a bucket that is not full only when neither store holds a
    /// full one: a key of the main store that may be new first has the digests' store evict
    /// its full buckets, as the main store evicts its own before its fullest (the digests'
    /// store, for its new keys, asks the main store the same in `acquire_long`).
    fn full_first_in_long(&self, cx: &Ctx, now: u64) {
        if cx.on_full == OnFull::EvictFullest {
            if let Some((l, _)) = self.long.get() {
                l.evict_full_first(cx, now);
            }
        }
    }

    /// Room made in the digests' store, if it exists.
    fn room_in_long(&self, cx: &Ctx, now: u64, waited: &mut bool) -> bool {
        self.long
            .get()
            .is_some_and(|(l, _)| l.make_room(cx, now, waited))
    }

    /// A long key's request (at the bound, the main store makes room).
    fn acquire_long<K>(
        &self,
        cx: &Ctx,
        (l, d): (&L, Digest),
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        S: Twin<K, Long = L>,
    {
        if cx.on_full == OnFull::EvictFullest {
            self.main.evict_full_first(cx, now);
        }
        with_room(
            || l.reserve(cx, &d, now, cost, within),
            |waited| self.main.make_room(cx, now, waited),
        )
    }
}

impl<K: Hash + Eq + Send + 'static, W: Word> Words<K, W> {
    /// [`Store::acquire`] after the main store's lock-free path missed (`h`: the key's hash
    /// there): a new key, a DEAD mark, or a long key.
    pub(crate) fn acquire_missed<Q>(
        &self,
        cx: &Ctx,
        h: u64,
        key: &Q,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        if let Some(long) = self.long_key(key) {
            return self.acquire_long(cx, long, now, cost, u64::MAX);
        }
        self.full_first_in_long(cx, now);
        with_room(
            || self.main.acquire_locked(cx, h, key, now, cost, u64::MAX),
            |waited| self.room_in_long(cx, now, waited),
        )
    }
}

impl<K, S> Store<K> for Routed<S, S::Long>
where
    S: Twin<K>,
{
    fn acquire<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.reserve(cx, key, now, cost, u64::MAX)
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
        if let Some(long) = self.long_key(key) {
            return self.acquire_long(cx, long, now, cost, within);
        }
        self.full_first_in_long(cx, now);
        with_room(
            || self.main.reserve(cx, key, now, cost, within),
            |waited| self.room_in_long(cx, now, waited),
        )
    }

    fn peek<Q>(&self, cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.long_key(key) {
            Some((l, d)) => l.peek(cx, &d, now),
            None => self.main.peek(cx, key, now),
        }
    }

    fn refund<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.long_key(key) {
            Some((l, d)) => l.refund(cx, &d, now, cost),
            None => self.main.refund(cx, key, now, cost),
        }
    }

    fn remove<Q>(&self, cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.long_key(key) {
            Some((l, d)) => l.remove(cx, &d),
            None => self.main.remove(cx, key),
        }
    }

    fn sweep(&self, cx: &Ctx, now: u64) -> Result<usize, Error> {
        let long = match self.long.get() {
            Some((l, _)) => l.sweep(cx, now)?,
            None => 0,
        };
        Ok(self.main.sweep(cx, now)? + long)
    }

    fn clear(&self) -> Result<(), Error> {
        if let Some((l, _)) = self.long.get() {
            l.clear()?;
        }
        self.main.clear()
    }

    /// Both stores' keys: they share one count.
    fn len(&self) -> usize {
        self.main.len()
    }

    fn capacity(&self) -> usize {
        self.main.capacity() + self.long.get().map_or(0, |(l, _)| l.capacity())
    }

    /// The main store's keys (a long key's digest is not its key).
    fn snapshot(&self, cx: &Ctx, now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        self.main.snapshot(cx, now)
    }
}

impl<K: Hash + Eq + Send + 'static, W: Word> Twin<K> for Core<K, W> {
    type Long = Core<Digest, W>;

    fn twin(&self) -> Core<Digest, W> {
        Core::with_bound(self.shards.len(), self.bound.sharing())
    }

    fn make_room(&self, cx: &Ctx, now: u64, waited: &mut bool) -> bool {
        let guard = rcu::read();
        let own = &*self.shards[0];
        let found = {
            let mut st = sync::lock(&own.lock);
            let busy = &mut false;
            let made = self.evict_full_somewhere(cx, own, &mut st, now, &guard, busy)
                || (cx.on_full == OnFull::EvictFullest
                    && self.evict_fullest_somewhere(cx, own, &mut st, now, &guard, busy));
            if made {
                None
            } else {
                self.bound.no_room(cx.max_keys, *busy)
            }
        };
        // The lock is released: a busy shard is waited for holding none.
        let again = look_again(found, waited, || self.sweep_each(cx, now, &guard));
        drop(guard);
        self.collect_pending();
        again
    }

    fn evict_full_first(&self, cx: &Ctx, now: u64) {
        if self.bound.len() < cx.max_keys || self.bound.scan(now).is_none() {
            return;
        }
        let guard = rcu::read();
        let own = &*self.shards[0];
        {
            let mut st = sync::lock(&own.lock);
            self.evict_full_somewhere(cx, own, &mut st, now, &guard, &mut false);
        }
        drop(guard);
        self.collect_pending();
    }
}

impl<K: Hash + Eq + Send + 'static> Twin<K> for LogStore<K> {
    type Long = LogStore<Digest>;

    fn twin(&self) -> LogStore<Digest> {
        self.sharing_bound()
    }

    fn make_room(&self, _cx: &Ctx, now: u64, waited: &mut bool) -> bool {
        self.make_room_at(now, waited)
    }

    fn evict_full_first(&self, _cx: &Ctx, now: u64) {
        self.evict_full_first_at(now);
    }
}

/// Live reconfiguration (crate::store::live) of both stores: nothing moves unless every
/// bucket of both can be carried; the digests' store keeps its secret and shares the new main
/// store's key count.
impl<K: Hash + Eq + Send + 'static, W: Word> Words<K, W> {
    pub(crate) fn move_into<W2: Word>(
        &self,
        mut carry: impl FnMut(W) -> Result<W2, Error>,
    ) -> Result<Words<K, W2>, Error> {
        let main = self.main.carried(&mut carry)?;
        let long = match self.long.get() {
            Some((l, secret)) => Some((l, l.carried(&mut carry)?, *secret)),
            None => None,
        };
        let to = Routed::new(self.main.moved(main, Bound::boxed()));
        if let Some((l, found, secret)) = long {
            let moved = l.moved(found, to.main.bound.sharing());
            let _ = to.long.set((moved, secret));
        }
        Ok(to)
    }

    /// Evictions so far, of both stores.
    pub(crate) fn evictions(&self) -> u64 {
        self.main.evictions() + self.long.get().map_or(0, |(l, _)| l.evictions())
    }
}

impl<K: Hash + Eq + Send + 'static> Logs<K> {
    /// [`Words::move_into`] for sliding logs (a log is carried as it is: nothing can fail).
    pub(crate) fn move_into(&self, log: SlidingLog) -> Logs<K> {
        let to = Routed::new(self.main.move_into(log.clone()));
        if let Some((l, secret)) = self.long.get() {
            let _ = to
                .long
                .set((l.moved(log, to.main.bound_sharing()), *secret));
        }
        to
    }

    /// Evictions so far, of both stores.
    pub(crate) fn evictions(&self) -> u64 {
        self.main.evictions() + self.long.get().map_or(0, |(l, _)| l.evictions())
    }
}
