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
//!   (crate::reclaim: no fence instruction on Linux), loads the shard's table pointer, probes,
//!   compares keys and runs the cell's CAS loop on the word it found. It writes nothing but
//!   that word, and a rejection writes nothing at all. (Sliding logs, which are not one word,
//!   are kept apart in `keyed_log.rs`, under a lock per shard.)
//! * **Everything that links or unlinks an entry holds the shard's mutex**: inserting a key,
//!   evicting, removing, clearing and rebuilding a table. A table is never modified in place
//!   except to publish an EMPTY slot (key written before the control word, Release) or to
//!   unlink an entry; keys are never overwritten, so a reader comparing a key never races a
//!   writer. Tombstones are reclaimed by rebuilding the table, and the old table (with the keys
//!   it still owns) is freed once no read section can hold it (crate::reclaim).
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
//! At the bound ([`KeyedBuilder::max_keys`]) with no full bucket, [`OnFull`] decides.

use crate::algorithm::Algo;
use crate::bound::{Bound, Reservation};
use crate::cell::{self, Evict, Word};
use crate::clock::{Clock, DefaultClock};
use crate::keyed_log::LogStore;
use crate::sync::{self, epoch, fence, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::{Decision, Error, Quota};
use core::borrow::Borrow;
use core::cell::UnsafeCell;
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr;
use crossbeam_utils::CachePadded;

/// What a keyed limiter does when a new key arrives at [`max_keys`](KeyedBuilder::max_keys)
/// and no bucket is full (full buckets are always evicted first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnFull {
    /// The request fails with [`Error::KeyStoreFull`]; existing keys are untouched. Exact:
    /// no decision ever differs from an unbounded limiter's, except for the refused keys.
    #[default]
    RejectNewKeys,
    /// Evict the bucket closest to being full (the least `reset_after`) among a sample of up
    /// to 32 live keys, starting where the previous eviction stopped (an approximation in the
    /// manner of Redis' sampled LRU, so that a flood costs O(1) per new key). Lossy: the evicted
    /// key starts again with `initial` tokens, so it may be admitted up to `burst` minus the
    /// tokens it had more than an unbounded limiter would admit. Bounded memory beats
    /// exactness under this policy.
    EvictFullest,
}

/// Builds a [`KeyedLimiter`]: `KeyedLimiter::<u64>::builder(quota).max_keys(100_000).build()`.
#[derive(Debug)]
#[must_use]
pub struct KeyedBuilder<K, C: Clock = DefaultClock> {
    quota: Quota,
    clock: C,
    max_keys: usize,
    on_full: OnFull,
    shards: usize,
    _key: PhantomData<fn() -> K>,
}

/// The default key bound: 2^20 keys (about 32 MiB for `u64` keys).
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
const DEFAULT_SHARDS: usize = 64;
const MAX_SHARDS: usize = 4096;

impl<K, C: Clock> KeyedBuilder<K, C> {
    /// The most keys the limiter holds at once (default [`DEFAULT_MAX_KEYS`]; at least 1).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self
    }

    /// What happens at the bound when nothing is evictable (default
    /// [`OnFull::RejectNewKeys`]).
    pub fn on_full(mut self, policy: OnFull) -> Self {
        self.on_full = policy;
        self
    }

    /// The number of shards (rounded up to a power of two, 1 to 4096; default 64). More
    /// shards mean shorter rebuild pauses and less contention between inserting threads.
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n.clamp(1, MAX_SHARDS).next_power_of_two();
        self
    }

    /// Reads `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, C2> {
        KeyedBuilder {
            quota: self.quota,
            clock,
            max_keys: self.max_keys,
            on_full: self.on_full,
            shards: self.shards,
            _key: PhantomData,
        }
    }

    /// The limiter, or why the quota (or `max_keys == 0`) is invalid. Its clock origin (the
    /// interval grid's anchor) is the clock's reading now.
    pub fn build(self) -> Result<KeyedLimiter<K, C>, Error>
    where
        K: Hash + Eq + Send + 'static,
    {
        if self.max_keys == 0 {
            return Err(Error::invalid("max_keys must be at least 1"));
        }
        let now = self.clock.now();
        let algo = Algo::new(&self.quota, now)?;
        algo.check(now, 0)?;
        let store = if let Algo::SlidingLog(log) = &algo {
            Store::Log(LogStore::new(
                log.clone(),
                self.shards,
                self.max_keys,
                self.on_full,
            ))
        } else if algo.wide() {
            Store::Wide(Core::new(self.shards))
        } else {
            Store::Narrow(Core::new(self.shards))
        };
        Ok(KeyedLimiter {
            store,
            cx: Ctx {
                lossless: self.quota.initial_tokens() == self.quota.capacity(),
                capacity: algo.capacity(),
                horizon: algo.horizon(),
                algo,
                hasher: KeyHasher::default(),
                shard_mask: self.shards - 1,
                max_keys: self.max_keys,
                on_full: self.on_full,
            },
            quota: self.quota,
            clock: self.clock,
            _key: PhantomData,
        })
    }
}

/// A lock-free rate limiter with one bucket per key.
///
/// Same request contract and [`Decision`] as [`Limiter`](crate::Limiter), per key, for every
/// algorithm. Lookups take no lock, except with `algorithm=sliding_log`, whose logs live in a
/// store of their own where a shard's mutex is each log's critical section (docs/KEYED.md).
/// Keys are any `K: Hash + Eq`; lookups take any borrowed form `&Q` of the key (`&str` for
/// `String` keys, `&[u8]` for `Vec<u8>` or `Box<[u8]>` keys) and allocate only when the key is
/// new.
///
/// ```
/// use sluicegate::{KeyedLimiter, ManualClock, OnFull};
///
/// let clock = ManualClock::new(0);
/// let limiter = KeyedLimiter::<Box<[u8]>, _>::builder("2/s".parse()?)
///     .max_keys(100_000)
///     .on_full(OnFull::RejectNewKeys)
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.try_acquire(b"alice".as_slice(), 2)?.allowed());
/// assert!(!limiter.try_acquire(b"alice".as_slice(), 1)?.allowed());
/// assert!(limiter.try_acquire(b"bob".as_slice(), 1)?.allowed());
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), sluicegate::Error>(())
/// ```
pub struct KeyedLimiter<K, C: Clock = DefaultClock> {
    store: Store<K>,
    cx: Ctx,
    quota: Quota,
    clock: C,
    // Readers on any thread compare keys (K: Sync) and deferred frees drop keys on any
    // thread (K: Send): Send iff K: Send, Sync iff K: Send + Sync.
    _key: PhantomData<(K, std::sync::Mutex<K>)>,
}

/// Seeded randomly per limiter, so that collisions cannot be forced from outside (and every
/// key is compared in full regardless). foldhash's `fast` variant, the one its authors made
/// for hash tables (hashbrown's default): its seeding is the same as `quality`'s, which only
/// adds a second multiply for statistics use. The table takes the tag from the hash's top
/// bits and the home group from its low 32, as hashbrown does.
#[cfg(not(sluicegate_loom))]
type KeyHasher = foldhash::fast::RandomState;
/// loom replays executions and needs every one to hash alike.
#[cfg(sluicegate_loom)]
type KeyHasher = foldhash::fast::FixedState;

/// What every shard's operations share, whatever the word width.
struct Ctx {
    algo: Algo,
    /// `algo.capacity()` and `algo.horizon()`, for the hot path's check.
    capacity: u64,
    horizon: u64,
    hasher: KeyHasher,
    shard_mask: usize,
    max_keys: usize,
    on_full: OnFull,
    lossless: bool,
}

enum Store<K> {
    Narrow(Core<K, u64>),
    Wide(Core<K, u128>),
    Log(LogStore<K>),
}

impl<K> Store<K> {
    /// Live keys, as each store's bound counts them.
    fn len(&self) -> usize {
        match self {
            Store::Log(log) => log.len(),
            Store::Narrow(core) => core.bound.len(),
            Store::Wide(core) => core.bound.len(),
        }
    }
}

/// Runs `$e` with `$core` bound to the store's core, whatever its word width.
macro_rules! with_core {
    ($store:expr, $core:ident => $e:expr, $log:ident => $l:expr) => {
        match $store {
            Store::Narrow($core) => $e,
            Store::Wide($core) => $e,
            Store::Log($log) => $l,
        }
    };
}

impl<K> KeyedLimiter<K, DefaultClock> {
    /// A builder for `quota` (the key type is usually named here:
    /// `KeyedLimiter::<u64>::builder(q)`).
    pub fn builder(quota: Quota) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder {
            quota,
            clock: DefaultClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            on_full: OnFull::RejectNewKeys,
            shards: DEFAULT_SHARDS,
            _key: PhantomData,
        }
    }
}

impl<K: Hash + Eq + Send + 'static> KeyedLimiter<K, DefaultClock> {
    /// A keyed limiter on the default clock with the default bound.
    ///
    /// # Panics
    /// If the quota is invalid; use [`try_new`](Self::try_new) for configured quotas.
    pub fn new(quota: Quota) -> Self {
        match Self::try_new(quota) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        }
    }

    /// A keyed limiter on the default clock, or the reason the quota is invalid.
    pub fn try_new(quota: Quota) -> Result<Self, Error> {
        Self::builder(quota).build()
    }
}

impl<K: Hash + Eq + Send + 'static, C: Clock> KeyedLimiter<K, C> {
    /// A keyed limiter reading `clock`, with the default bound.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, Error> {
        KeyedLimiter::builder(quota).clock(clock).build()
    }

    /// Ok for a cost within capacity at a reading before the horizon: two comparisons on the
    /// hot path; the errors are built out of line.
    #[inline]
    fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        if cost <= self.cx.capacity && now < self.cx.horizon {
            return Ok(());
        }
        self.check_slow(now, cost)
    }

    #[cold]
    fn check_slow(&self, now: u64, cost: u64) -> Result<(), Error> {
        self.cx.algo.check(now, cost)?;
        // The last instant is reserved so that no state equals the DEAD mark (see `cell`).
        let horizon = self.cx.algo.horizon();
        if now >= horizon {
            return Err(Error::ClockOutOfRange {
                now,
                horizon: horizon - 1,
            });
        }
        Ok(())
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.cx.hasher.hash_one(key)
    }

    /// Asks for `cost` tokens of `key`'s bucket now, creating the bucket (with the quota's
    /// initial tokens) on the key's first request. `Err` for a cost above the capacity, a
    /// clock out of range, or a new key refused at the bound ([`Error::KeyStoreFull`]).
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.try_acquire_at(key, self.clock.now(), cost)
    }

    /// [`try_acquire`](Self::try_acquire) at an explicit clock reading.
    #[inline]
    pub fn try_acquire_at<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.check(now, cost)?;
        let h = self.hash(key);
        // The default store's lock-free path inline, everything else out of line. With the
        // three stores' paths inline (or the slow path's result merged with the fast one's),
        // the compiler passed every decision through memory: about 40 more instructions a
        // decision, 2 ns at 100 000 keys.
        if let Store::Narrow(core) = &self.store {
            if let Some(d) = core.acquire_fast(&self.cx, h, key, now, cost) {
                return Ok(d);
            }
        }
        self.acquire_rest(h, key, now, cost)
    }

    /// [`try_acquire_at`](Self::try_acquire_at) past the default store's lock-free path: the
    /// other stores, and the default store's new keys and DEAD marks (under the shard's lock).
    #[inline(never)]
    fn acquire_rest<Q>(&self, h: u64, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match &self.store {
            Store::Narrow(core) => core.acquire_locked(&self.cx, h, key, now, cost),
            Store::Wide(core) => core.acquire(&self.cx, h, key, now, cost),
            Store::Log(log) => log.acquire(h, key, now, cost),
        }
    }

    /// The state of `key`'s bucket now, changing nothing. An absent key reports a bucket
    /// created now, without creating it.
    pub fn peek<Q>(&self, key: &Q) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.peek_at(key, self.clock.now())
    }

    /// [`peek`](Self::peek) at an explicit clock reading.
    pub fn peek_at<Q>(&self, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.check(now, 0)?;
        let h = self.hash(key);
        let d = with_core!(&self.store, core => core.peek(&self.cx, h, key, now),
            log => log.peek(h, key, now));
        Ok(d)
    }

    /// Gives `cost` tokens back to `key`'s bucket, capped at capacity. Refunding an absent
    /// key does nothing (it is as full as a fresh bucket, or was never asked for).
    pub fn refund<Q>(&self, key: &Q, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.refund_at(key, self.clock.now(), cost)
    }

    /// [`refund`](Self::refund) at an explicit clock reading.
    pub fn refund_at<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.check(now, 0)?;
        let h = self.hash(key);
        with_core!(&self.store, core => core.refund(&self.cx, h, key, now, cost),
            log => log.refund(h, key, now, cost));
        Ok(())
    }

    /// Forgets `key` (its next request starts a fresh bucket); `true` if it was present.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        with_core!(&self.store, core => core.remove(&self.cx, h, key), log => log.remove(h, key))
    }

    /// Evicts every bucket that is full now; returns how many. Lossless when `initial ==
    /// burst`; otherwise an evicted key starts again with `initial` tokens (conservative).
    /// Locks one shard at a time: lookups never wait for it.
    pub fn sweep(&self) -> usize {
        self.sweep_at(self.clock.now())
    }

    /// [`sweep`](Self::sweep) at an explicit clock reading.
    pub fn sweep_at(&self, now: u64) -> usize {
        with_core!(&self.store, core => core.sweep(&self.cx, now), log => log.sweep(now))
    }

    /// Forgets every key.
    pub fn clear(&self) {
        with_core!(&self.store, core => core.clear(), log => log.clear())
    }

    /// The number of keys held (evicted and removed keys are not counted).
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key held and its bucket's state now (a peek), for metrics. Not an atomic
    /// snapshot: keys inserted or evicted meanwhile may or may not appear.
    pub fn snapshot(&self) -> Vec<(K, Decision)>
    where
        K: Clone,
    {
        self.snapshot_at(self.clock.now())
    }

    /// [`snapshot`](Self::snapshot) at an explicit clock reading.
    pub fn snapshot_at(&self, now: u64) -> Vec<(K, Decision)>
    where
        K: Clone,
    {
        with_core!(&self.store, core => core.snapshot(&self.cx, now), log => log.snapshot(now))
    }

    /// The key bound.
    pub fn max_keys(&self) -> usize {
        self.cx.max_keys
    }

    /// The total number of slots allocated (live, unlinked and empty), for diagnostics:
    /// memory is about `capacity() * (size of the entry + 1 byte)`, an entry being the key
    /// beside an 8-byte (or, for quotas that need it, 16-byte) state word. A sliding log's
    /// entry holds the key and its log (whose runs are allocated apart), plus an 8-byte tag.
    pub fn capacity(&self) -> usize {
        with_core!(&self.store, core => core.capacity(), log => log.capacity())
    }

    /// The quota every key's bucket enforces.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<K, C: Clock> core::fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota.to_string())
            .field("len", &self.store.len())
            .field("max_keys", &self.cx.max_keys)
            .field("on_full", &self.cx.on_full)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------------------------

// Control bytes, eight to a group word. A slot's byte goes EMPTY -> LIVE -> TOMB or MOVED and
// never back, so a key is always found before the first group with an EMPTY byte on its probe
// sequence, and a key, once written, is never overwritten while its table lives.
const EMPTY: u8 = 0;
/// Unlinked; the table still owns the key (dropped with the table).
const TOMB: u8 = 1;
/// Unlinked; the key was moved (bitwise) into a newer table, which owns it.
const MOVED: u8 = 2;
/// Set in every live control byte, whose other 7 bits are hash bits.
const LIVE: u8 = 0x80;

/// Slots per group: one `u64` of control bytes, compared with one SWAR step.
const GROUP: usize = 8;
/// The first table of a shard: one group.
const MIN_CAP: usize = GROUP;

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The control byte of a live entry: the hash's top 7 bits (the group and shard come from
/// other bits), with LIVE set.
#[inline]
fn tag(h: u64) -> u8 {
    ((h >> 57) as u8) | LIVE
}

/// A bit (the byte's top bit) for exactly the bytes of `g` equal to `b` (SWAR: adding 0x7f to
/// a byte's low seven bits carries into its top bit iff they are not all zero; no borrow
/// crosses bytes, so there are no false matches).
#[inline]
fn match_byte(g: u64, b: u8) -> u64 {
    const LOW7: u64 = !HI;
    let x = g ^ (LO * u64::from(b));
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

#[cfg(test)]
mod match_tests {
    use super::*;

    #[test]
    fn match_byte_flags_exactly_the_equal_bytes() {
        let naive = |g: u64, b: u8| {
            (0..8).fold(0u64, |m, i| {
                if (g >> (8 * i)) as u8 == b {
                    m | (0x80 << (8 * i))
                } else {
                    m
                }
            })
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bias some bytes towards the interesting values (0, 1, 0x80, 0x81, 0xff).
            let mut g = x;
            if round % 2 == 0 {
                for i in 0..8 {
                    let pick = [0u8, 1, 0x80, 0x81, 0xff, 0x7f][((x >> (3 * i)) % 6) as usize];
                    if (x >> (40 + i)) & 1 == 1 {
                        g = (g & !(0xff << (8 * i))) | (u64::from(pick) << (8 * i));
                    }
                }
            }
            for b in [
                0u8,
                1,
                2,
                0x7f,
                0x80,
                0x81,
                0xfe,
                0xff,
                (x >> 56) as u8,
                g as u8,
            ] {
                assert_eq!(match_byte(g, b), naive(g, b), "g={g:#018x} b={b:#04x}");
            }
        }
    }
}

struct Entry<K, W: Word> {
    word: W::Atomic,
    /// Initialised iff the control byte is LIVE or TOMB (or MOVED, as a stale bitwise copy
    /// that only readers that entered before the move may still compare).
    key: UnsafeCell<MaybeUninit<K>>,
}

/// An open-addressing table probed group by group: `ctrl[g]` holds the control bytes of
/// `slots[8g..8g + 8]`. A lookup loads one control word, compares the key only where the tag
/// matches (almost always once, at the first group), and stops at the first group with an
/// EMPTY byte: its branches are predictable, so the out-of-order core overlaps consecutive
/// lookups' cache misses (a slot-by-slot linear probe mispredicts on every collision).
struct Table<K, W: Word> {
    ctrl: Box<[AtomicU64]>,
    slots: Box<[Entry<K, W>]>,
}

impl<K, W: Word> Table<K, W> {
    /// A table of at least `cap` slots (a whole number of groups).
    fn new(cap: usize) -> Box<Self> {
        let groups = cap.div_ceil(GROUP).max(1);
        let ctrl = (0..groups).map(|_| AtomicU64::new(0)).collect();
        let slots = (0..groups * GROUP)
            .map(|_| Entry {
                word: W::new_atomic(0),
                key: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Box::new(Self { ctrl, slots })
    }

    #[inline]
    fn cap(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn entry(&self, i: usize) -> &Entry<K, W> {
        &self.slots[i]
    }

    /// Slot `i`'s control byte (Relaxed: for lock holders, who wrote every byte themselves).
    #[inline]
    fn ctrl(&self, i: usize) -> u8 {
        self.ctrl_ordered(i, Ordering::Relaxed)
    }

    /// Slot `i`'s control byte, loaded with `order` (Acquire for readers without the lock: a
    /// LIVE byte's key is then visible, as in `find`).
    #[inline]
    fn ctrl_ordered(&self, i: usize, order: Ordering) -> u8 {
        (self.ctrl[i / GROUP].load(order) >> (8 * (i % GROUP))) as u8
    }

    /// Sets slot `i`'s control byte. Lock holders only (the one writer of the table's control
    /// words), so the read-modify-write of the group word loses nothing. Release: a reader
    /// that sees LIVE (Acquire) sees the key and the word written before.
    #[inline]
    fn set_ctrl(&self, i: usize, b: u8) {
        let g = &self.ctrl[i / GROUP];
        let shift = 8 * (i % GROUP);
        let v = g.load(Ordering::Relaxed);
        g.store(
            (v & !(0xff << shift)) | (u64::from(b) << shift),
            Ordering::Release,
        );
    }

    /// The table as a lookup sees it.
    #[inline]
    fn probe(&self) -> Probe<'_, K, W> {
        Probe {
            ctrl: &self.ctrl,
            slots: &self.slots,
        }
    }

    /// [`Probe::home`] of this table.
    #[inline]
    fn home(&self, h: u64) -> usize {
        self.probe().home(h)
    }

    /// [`Probe::find`] in this table.
    #[inline]
    fn find<Q>(&self, h: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.probe().find(h, key)
    }

    /// The first EMPTY slot on `h`'s probe sequence (lock holders; the table is not full).
    fn free_slot(&self, h: u64) -> usize {
        let groups = self.ctrl.len();
        let mut g = self.home(h);
        loop {
            let m = match_byte(self.ctrl[g].load(Ordering::Relaxed), EMPTY);
            if m != 0 {
                return g * GROUP + (m.trailing_zeros() / 8) as usize;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
    }
}

/// What a lookup reads of a table: its control words and its slots (`slots.len()` is
/// `GROUP * ctrl.len()`, and `ctrl` is never empty). Borrowed from a [`Table`], or from the
/// view its shard publishes ([`Shard::view`]).
struct Probe<'a, K, W: Word> {
    ctrl: &'a [AtomicU64],
    slots: &'a [Entry<K, W>],
}

impl<K, W: Word> Clone for Probe<'_, K, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, W: Word> Copy for Probe<'_, K, W> {}

impl<'a, K, W: Word> Probe<'a, K, W> {
    /// The entry of a slot [`find`](Self::find) returned (unchecked: `find` returns only
    /// indexes of these slots).
    #[inline]
    fn found(self, i: usize) -> &'a Entry<K, W> {
        debug_assert!(i < self.slots.len());
        // SAFETY: `find` returns only indexes of this table's slots.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// The first group to probe: a multiply-shift of the hash's low 32 bits.
    #[inline]
    fn home(self, h: u64) -> usize {
        ((u64::from(h as u32) * self.ctrl.len() as u64) >> 32) as usize
    }

    /// Asks the cache for group `g`'s entries while its control word is being loaded, so
    /// that a lookup waits for one memory access instead of two in a row (a hint: no effect
    /// on what is read).
    #[inline(always)]
    fn prefetch_group(self, g: usize) {
        #[cfg(all(target_arch = "x86_64", not(sluicegate_loom)))]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let first = self.slots.as_ptr().wrapping_add(g * GROUP).cast::<i8>();
            let bytes = GROUP * core::mem::size_of::<Entry<K, W>>();
            let mut off = 0;
            while off < bytes {
                // SAFETY: a prefetch never faults and reads nothing; the address is within (or
                // one group past the end of) this table's slots.
                unsafe { _mm_prefetch(first.wrapping_add(off), _MM_HINT_T0) };
                off += 64;
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(sluicegate_loom))))]
        let _ = g;
    }

    /// Probes for `key`; returns its slot, live as of its control word's load.
    ///
    /// The home group inline, the rest of the probe out of line: at a load of at most 7/8 a
    /// lookup almost always ends in its home group (a match, or an EMPTY byte), and without
    /// the probe loop's bookkeeping the hot path keeps its values in registers.
    #[inline]
    fn find<Q>(self, h: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let want = tag(h);
        let g = self.home(h);
        self.prefetch_group(g);
        // SAFETY: a table has at least one group (`new`) and `home` maps into 0..groups.
        let word = unsafe { self.ctrl.get_unchecked(g) }.load(Ordering::Acquire);
        if let Some(i) = self.match_group(g, word, want, key) {
            return Some(i);
        }
        if match_byte(word, EMPTY) != 0 {
            return None;
        }
        Self::find_after(self.ctrl, self.slots.as_ptr(), g, want, key)
    }

    /// [`find`](Self::find) past a full home group `first`: the following groups, wrapping,
    /// up to the first one with an EMPTY byte. The probe comes in as its parts, in registers:
    /// passed whole, it was written to the stack on every lookup for this rare call.
    #[cold]
    #[inline(never)]
    fn find_after<Q>(
        ctrl: &'a [AtomicU64],
        slots: *const Entry<K, W>,
        first: usize,
        want: u8,
        key: &Q,
    ) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // SAFETY: `slots` is the slots' pointer of the probe that `ctrl` came from: its
        // `GROUP * ctrl.len()` entries live for 'a.
        let slots = unsafe { core::slice::from_raw_parts(slots, GROUP * ctrl.len()) };
        let p = Probe { ctrl, slots };
        let groups = ctrl.len();
        let mut g = first;
        for _ in 1..groups {
            g += 1;
            if g == groups {
                g = 0;
            }
            let word = p.ctrl[g].load(Ordering::Acquire);
            if let Some(i) = p.match_group(g, word, want, key) {
                return Some(i);
            }
            if match_byte(word, EMPTY) != 0 {
                return None;
            }
        }
        None
    }

    /// The slot of group `g` (whose control word, loaded with Acquire, is `word`) holding
    /// `key`, among those tagged `want`.
    #[inline(always)]
    fn match_group<Q>(self, g: usize, word: u64, want: u8, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut m = match_byte(word, want);
        while m != 0 {
            let b = (m.trailing_zeros() / 8) as usize;
            m &= m - 1;
            let i = g * GROUP + b;
            // SAFETY: `slots` has GROUP slots per control word, so `i` is in bounds. This
            // slot's control byte, as loaded (Acquire) in `word`, is LIVE: it was stored
            // (Release) after the key was written, and keys are never overwritten while the
            // table lives, which it does while our caller's read section (or the shard lock)
            // lasts. A key moved to a newer table since is a bitwise copy whose owner is kept
            // alive by the same section (see `Core::rebuild`).
            let k = unsafe { (*self.slots.get_unchecked(i).key.get()).assume_init_ref() };
            if k.borrow() == key {
                return Some(i);
            }
        }
        None
    }
}

impl<K, W: Word> Drop for Table<K, W> {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            let c = self.ctrl(i);
            if c == TOMB || c & LIVE != 0 {
                // SAFETY: LIVE and TOMB slots own an initialised key (MOVED ones do not), and
                // `&mut self` means no reader is left.
                unsafe { self.slots[i].key.get_mut().assume_init_drop() };
            }
        }
    }
}

/// Bookkeeping under the shard's lock.
#[derive(Default)]
struct ShardState {
    /// Slots not EMPTY in the current table (live + unlinked).
    used: usize,
    /// Live entries in the current table.
    live: usize,
    /// Where the next sampled eviction starts.
    cursor: usize,
}

struct Shard<K, W: Word> {
    table: AtomicPtr<Table<K, W>>,
    /// The current table's geometry, published beside its pointer under a sequence lock, so
    /// that a lookup reads where to probe from this line instead of from the table's header
    /// behind the pointer: one dependent load fewer between the key's hash and its control
    /// word (1.4 ns an admission at 100 000 keys). Even while stable, odd while a lock
    /// holder rewrites the fields ([`publish`](Self::publish), [`view`](Self::view)).
    seq: AtomicU64,
    /// The table's control words (null with no table), their count, and its slots.
    view_ctrl: AtomicPtr<AtomicU64>,
    view_groups: AtomicUsize,
    view_slots: AtomicPtr<Entry<K, W>>,
    lock: Mutex<ShardState>,
    /// Under loom, retired tables are kept until the store is dropped (no epoch).
    #[cfg(sluicegate_loom)]
    #[allow(clippy::vec_box)] // the tables were boxes, and are dropped as boxes
    graveyard: Mutex<Vec<Box<Table<K, W>>>>,
}

impl<K, W: Word> Shard<K, W> {
    fn new() -> Self {
        Self {
            table: AtomicPtr::new(ptr::null_mut()),
            seq: AtomicU64::new(0),
            view_ctrl: AtomicPtr::new(ptr::null_mut()),
            view_groups: AtomicUsize::new(0),
            view_slots: AtomicPtr::new(ptr::null_mut()),
            lock: Mutex::new(ShardState::default()),
            #[cfg(sluicegate_loom)]
            graveyard: Mutex::new(Vec::new()),
        }
    }

    /// The current table, if any, valid while `_guard` is held.
    #[inline]
    fn table<'g>(&self, _guard: &'g epoch::Guard) -> Option<&'g Table<K, W>> {
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: a published table is freed only after it was unlinked and every guard
        // pinned before that was dropped (`retire`); ours is alive for 'g.
        unsafe { t.as_ref() }
    }

    /// Replaces the shard's table by `new` (null: none), returning the old one for the
    /// caller to retire. Lock holders only. The view's fields are rewritten under the
    /// sequence lock (a seqlock's writer: odd, Release fence, fields, even with Release), then
    /// the pointer is swapped; both before the old table is retired, so that the grace period
    /// that protects a reader of the old pointer protects a reader of the old view alike.
    fn publish(&self, new: *mut Table<K, W>) -> *mut Table<K, W> {
        // SAFETY: `new` is null or a table built by the caller, not freed before it is
        // retired, which follows this publication.
        let (ctrl, groups, slots) = match unsafe { new.as_ref() } {
            Some(t) => (
                t.ctrl.as_ptr().cast_mut(),
                t.ctrl.len(),
                t.slots.as_ptr().cast_mut(),
            ),
            None => (ptr::null_mut(), 0, ptr::null_mut()),
        };
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.view_ctrl.store(ctrl, Ordering::Relaxed);
        self.view_groups.store(groups, Ordering::Relaxed);
        self.view_slots.store(slots, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        self.table.swap(new, Ordering::AcqRel)
    }

    /// The current table as a lookup reads it, valid while `_guard` is held: the view's
    /// fields, read as a seqlock's reader does (sequence with Acquire, fields, Acquire fence,
    /// sequence again). `None` with no table, and when read while a lock holder rewrites the
    /// fields: the caller then goes on under the shard's lock, as for an absent key.
    ///
    /// Why the view outlives nothing it names: validated, its fields all come from one
    /// [`publish`](Self::publish) of a table `t`. If a later publish replaced `t`, it wrote
    /// the view before the heavy fence of `t`'s retirement, and this section read the older
    /// fields after its own light fence: as for the table pointer (crate::reclaim), the
    /// retirement's snapshot then saw this section open, and `t` is freed only after `guard`
    /// is dropped.
    #[inline(always)]
    fn view<'g>(&self, _guard: &'g epoch::Guard) -> Option<Probe<'g, K, W>> {
        let s1 = self.seq.load(Ordering::Acquire);
        let ctrl = self.view_ctrl.load(Ordering::Relaxed);
        let groups = self.view_groups.load(Ordering::Relaxed);
        let slots = self.view_slots.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        if s1 != s2 || s1 & 1 != 0 || ctrl.is_null() {
            return None;
        }
        // SAFETY: validated by the sequence, the fields describe one published table: its
        // `groups` control words at `ctrl` and `GROUP * groups` slots at `slots`, alive while
        // `guard` is held (above), and written only through atomics and the key cells that
        // lookups read as before.
        unsafe {
            Some(Probe {
                ctrl: core::slice::from_raw_parts(ctrl, groups),
                slots: core::slice::from_raw_parts(slots, groups * GROUP),
            })
        }
    }
}

impl<K, W: Word> Drop for Shard<K, W> {
    fn drop(&mut self) {
        let t = self.table.load(Ordering::Relaxed);
        if !t.is_null() {
            // SAFETY: `&mut self`: no reader is left, and the pointer came from Box::into_raw.
            drop(unsafe { Box::from_raw(t) });
        }
    }
}

struct Core<K, W: Word> {
    shards: Box<[CachePadded<Shard<K, W>>]>,
    /// The key bound's counters and hint (crate::bound), on a line of their own.
    bound: Box<CachePadded<Bound>>,
    /// Unlinked tables, each waiting for the read sections that were open when it was
    /// unlinked (crate::reclaim). Freed only by [`collect`](Self::collect), which runs with
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
struct Retired<K, W: Word>(*mut Table<K, W>, crate::reclaim::Snapshot);

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
    fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards)
                .map(|_| CachePadded::new(Shard::new()))
                .collect(),
            bound: Bound::boxed(),
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
            if let Some(s) = crate::reclaim::snapshot() {
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
            if crate::reclaim::passed(&limbo[i].1) {
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

    #[inline]
    fn shard(&self, cx: &Ctx, h: u64) -> &Shard<K, W> {
        let i = (h >> 40) as usize & cx.shard_mask;
        debug_assert!(i < self.shards.len());
        // SAFETY: `shard_mask` is the shard count (a power of two) minus one.
        unsafe { self.shards.get_unchecked(i) }
    }

    /// The lock-free path: `None` when the key is absent or its word DEAD (nothing was
    /// applied; the caller goes on under the lock, [`acquire_slow`](Self::acquire_slow)).
    #[inline(always)]
    fn acquire_fast<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64, cost: u64) -> Option<Decision>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let guard = epoch::pin();
        let t = self.shard(cx, h).view(&guard)?;
        let i = t.find(h, key)?;
        cell::acquire_live::<W>(&t.found(i).word, &cx.algo, now, cost)
    }

    /// The lock-free path, then the locked one.
    #[inline]
    fn acquire<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match self.acquire_fast(cx, h, key, now, cost) {
            Some(d) => Ok(d),
            None => self.acquire_locked(cx, h, key, now, cost),
        }
    }

    /// The decision under the shard's lock (a new key, or a DEAD mark met without it), then
    /// the freeing of what a rebuild retired, once the lock is released.
    fn acquire_locked<Q>(
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
        let d = self.acquire_slow(cx, self.shard(cx, h), h, key, now, cost, &epoch::pin());
        self.collect_pending();
        d
    }

    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn acquire_slow<Q>(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        h: u64,
        key: &Q,
        now: u64,
        cost: u64,
        guard: &epoch::Guard,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let mut st = sync::lock(&shard.lock);
        if let Some(t) = shard.table(guard) {
            if let Some(i) = t.find(h, key) {
                // Under the lock a linked entry is never DEAD: only lock holders install the
                // mark, and they unlink the entry before releasing the lock.
                if let Some(d) = cell::acquire_live::<W>(&t.entry(i).word, &cx.algo, now, cost) {
                    return Ok(d);
                }
            }
        }
        let reserved = self.reserve(cx, shard, &mut st, now, guard)?;
        let e = self.link(cx, shard, &mut st, h, key.to_owned().into(), now, guard);
        reserved.kept();
        let d = cell::acquire_live::<W>(&e.word, &cx.algo, now, cost);
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
        guard: &'g epoch::Guard,
    ) -> &'g Entry<K, W> {
        let needs_room = match shard.table(guard) {
            None => true,
            // Keep the load (live + unlinked) at most 7/8: with groups of eight, a lookup
            // still ends in its first group almost always, at 17 bytes a slot for a u64 key.
            Some(t) => (st.used + 1) * 8 > t.cap() * 7,
        };
        if needs_room {
            self.rebuild(cx, shard, st, now, guard);
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
        W::store(&e.word, W::narrow(cx.algo.fresh(at)));
        t.set_ctrl(i, tag(h));
        st.used += 1;
        st.live += 1;
        e
    }

    /// Takes one unit of the key bound for a new key, making room if needed.
    fn reserve(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &epoch::Guard,
    ) -> Result<Reservation<'_>, Error> {
        loop {
            if let Some(r) = self.bound.reserve(cx.max_keys) {
                return Ok(r);
            }
            if self.evict_full_somewhere(cx, shard, st, now, guard) {
                continue;
            }
            if cx.on_full == OnFull::EvictFullest
                && self.evict_fullest_somewhere(cx, shard, st, now, guard)
            {
                continue;
            }
            return Err(Error::KeyStoreFull {
                max_keys: cx.max_keys,
            });
        }
    }

    /// At the bound: evicts the full buckets of this shard, else of the first other shard
    /// (not busy) that has any. When every shard was scanned and none had a full bucket, the
    /// earliest instant one can become full is recorded, so that new keys are refused in O(1)
    /// until then.
    fn evict_full_somewhere(
        &self,
        cx: &Ctx,
        own: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &epoch::Guard,
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
        guard: &epoch::Guard,
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
            match cell::evict_if_full::<W>(&t.entry(i).word, &cx.algo, now, raise) {
                Evict::Killed => {
                    self.unlink(t, i, st);
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
    /// live entries of this shard (or of the first other shard, not busy, that has some).
    fn evict_fullest_somewhere(
        &self,
        cx: &Ctx,
        own: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &epoch::Guard,
    ) -> bool {
        if self.evict_fullest_in(cx, own, st, now, guard) {
            return true;
        }
        for other in self.shards.iter() {
            if ptr::eq(&**other, own) {
                continue;
            }
            if let Some(mut ost) = sync::try_lock(&other.lock) {
                if self.evict_fullest_in(cx, other, &mut ost, now, guard) {
                    return true;
                }
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
        guard: &epoch::Guard,
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
                let reset = cx.algo.decide(w.widen(), now, 0).0.reset_after_nanos();
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
                    return true;
                }
            }
        }
        false
    }

    /// Replaces the shard's table by one sized for its live entries (load about 0.7),
    /// dropping the unlinked ones and, when that is lossless, the full ones.
    fn rebuild(
        &self,
        cx: &Ctx,
        shard: &Shard<K, W>,
        st: &mut ShardState,
        now: u64,
        guard: &epoch::Guard,
    ) {
        if cx.lossless {
            self.sweep_locked(cx, shard, st, now, guard);
        }
        let old = shard.table(guard);
        let cap = ((st.live + 1) * 10 / 7 + 1).max(MIN_CAP);
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
                    cx.hasher
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

    fn peek<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(cx, h);
        let guard = epoch::pin();
        if let Some(e) = shard
            .table(&guard)
            .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
        {
            if let Some(d) = cell::acquire_live::<W>(&e.word, &cx.algo, now, 0) {
                return d;
            }
            // DEAD: being unlinked; ask again once the lock holder is done.
            let _st = sync::lock(&shard.lock);
            if let Some(e) = shard
                .table(&guard)
                .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
            {
                if let Some(d) = cell::acquire_live::<W>(&e.word, &cx.algo, now, 0) {
                    return d;
                }
            }
        }
        let at = now.max(self.bound.watermark());
        cx.algo.decide(cx.algo.fresh(at), now, 0).0
    }

    fn refund<Q>(&self, cx: &Ctx, h: u64, key: &Q, now: u64, cost: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(cx, h);
        let guard = epoch::pin();
        let done = match shard
            .table(&guard)
            .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
        {
            Some(e) => cell::refund_live::<W>(&e.word, &cx.algo, now, cost),
            None => true, // absent: nothing to give back to
        };
        if !done {
            let _st = sync::lock(&shard.lock);
            if let Some(e) = shard
                .table(&guard)
                .and_then(|t| t.find(h, key).map(|i| t.entry(i)))
            {
                cell::refund_live::<W>(&e.word, &cx.algo, now, cost);
            }
        }
        // A refund can make a bucket full sooner than the hint says: as soon as now.
        self.bound.lowered(now);
    }

    fn remove<Q>(&self, cx: &Ctx, h: u64, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(cx, h);
        let guard = epoch::pin();
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

    fn sweep(&self, cx: &Ctx, now: u64) -> usize {
        self.collect();
        let guard = epoch::pin();
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut st = sync::lock(&shard.lock);
            total += self.sweep_locked(cx, shard, &mut st, now, &guard).0;
            // Mostly tombstones: compact (and shrink) the table now rather than at the next
            // insert, so that memory follows the number of keys.
            if let Some(t) = shard.table(&guard) {
                if t.cap() > MIN_CAP && st.live * 4 < st.used {
                    self.rebuild(cx, shard, &mut st, now, &guard);
                }
            }
        }
        drop(guard);
        self.collect();
        total
    }

    fn clear(&self) {
        let guard = epoch::pin();
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

    fn snapshot(&self, cx: &Ctx, now: u64) -> Vec<(K, Decision)>
    where
        K: Clone,
    {
        let guard = epoch::pin();
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
                out.push((k, cx.algo.decide(w.widen(), now, 0).0));
            }
        }
        out
    }

    fn capacity(&self) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .map(|s| s.table(&guard).map_or(0, |t| t.cap()))
            .sum()
    }
}

#[cfg(all(test, sluicegate_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    fn geometry(t: *mut Table<u64, u64>) -> (usize, usize, usize) {
        // SAFETY: the tables of the model live until its end.
        let t = unsafe { &*t };
        (
            t.ctrl.as_ptr() as usize,
            t.ctrl.len(),
            t.slots.as_ptr() as usize,
        )
    }

    /// A lookup's view of a shard, read while a lock holder publishes a table of another
    /// size, is `None` or exactly one published table's geometry, never a mix of two (the
    /// sequence lock of `Shard::publish` and `Shard::view`). Without the sequence check the
    /// reader can pair one table's control words with the other's group count.
    #[test]
    fn a_shard_view_is_never_torn() {
        loom::model(|| {
            let shard = Arc::new(Shard::<u64, u64>::new());
            let a = Box::into_raw(Table::<u64, u64>::new(GROUP));
            let b = Box::into_raw(Table::<u64, u64>::new(4 * GROUP));
            let (ga, gb) = (geometry(a), geometry(b));
            assert!(shard.publish(a).is_null());
            let writer = {
                let shard = shard.clone();
                // The pointer travels as an integer: the table outlives the model's threads.
                let b = b as usize;
                loom::thread::spawn(move || shard.publish(b as *mut Table<u64, u64>) as usize)
            };
            let guard = epoch::pin();
            if let Some(p) = shard.view(&guard) {
                let g = (
                    p.ctrl.as_ptr() as usize,
                    p.ctrl.len(),
                    p.slots.as_ptr() as usize,
                );
                assert!(g == ga || g == gb, "a torn view: {g:?}");
                assert_eq!(p.slots.len(), GROUP * p.ctrl.len());
            }
            assert_eq!(writer.join().unwrap(), a as usize);
            assert_eq!(shard.publish(ptr::null_mut()), b);
            // SAFETY: both came from Box::into_raw and are unpublished; no reader is left.
            unsafe {
                drop(Box::from_raw(a));
                drop(Box::from_raw(b));
            }
        });
    }
}
