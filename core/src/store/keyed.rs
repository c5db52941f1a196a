//! The public keyed API: [`KeyedLimiter`], its builder and the [`OnFull`] policy, over the
//! stores of this module (today the in-process table of [`memory`](super::memory)).

use super::live::{Live, Section};
use super::memory::log::LogStore;
use super::memory::long::{Logs, Routed, Words};
use super::memory::Core;
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
use super::redis::RedisStore;
#[cfg(all(unix, not(sluicegate_loom)))]
use super::shm::ShmStore;
use super::{Store, StoreSpec};
use crate::algorithm::Codec;
use crate::bucket::acquire::{self, AcquirePlan, Next};
use crate::clock::{Clock, DefaultClock};
use crate::metrics::{KeyRef, Metrics, Observe, ObserveOptions, Rejection};
use crate::sync::rcu;
use crate::{Decision, Error, Quota};
use core::borrow::Borrow;
use core::hash::Hash;
use core::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

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

impl OnFull {
    /// Every name [`FromStr`](core::str::FromStr) accepts.
    const NAMES: &'static [(&'static str, OnFull)] = &[
        ("reject", OnFull::RejectNewKeys),
        ("evict", OnFull::EvictFullest),
    ];

    /// The policy's name, as the bindings' options spell it: `"reject"` or `"evict"`.
    pub fn name(self) -> &'static str {
        match self {
            OnFull::RejectNewKeys => "reject",
            OnFull::EvictFullest => "evict",
        }
    }
}

impl core::str::FromStr for OnFull {
    type Err = Error;

    /// `"reject"` or `"evict"` (ASCII case-insensitive), else [`Error::InvalidOption`].
    fn from_str(s: &str) -> Result<Self, Error> {
        crate::error::choose("on_full", s, Self::NAMES)
    }
}

/// Builds a [`KeyedLimiter`]: `KeyedLimiter::<u64>::builder(quota).max_keys(100_000).build()`.
#[derive(Debug)]
#[must_use]
pub struct KeyedBuilder<K, C: Clock = DefaultClock> {
    quota: Quota,
    clock: ClockChoice<C>,
    max_keys: usize,
    /// Whether `max_keys` was given (a shared region's capacity must then match it).
    max_keys_given: bool,
    on_full: OnFull,
    shards: usize,
    store: StoreSpec,
    observe: ObserveOptions<K>,
    sweep_on_grow: bool,
    _key: PhantomData<fn() -> K>,
}

/// A builder's clock: the one given to [`KeyedBuilder::clock`], or the default clock, made
/// only when the limiter is built (the default clock calibrates the time-stamp counter on its
/// first use in a process: a cost that a limiter on a clock of its own never pays).
#[derive(Debug)]
enum ClockChoice<C> {
    Given(C),
    Default(fn() -> C),
}

impl<C> ClockChoice<C> {
    /// The clock, made now if it is the default.
    fn get(&mut self) -> &mut C {
        if let ClockChoice::Default(make) = *self {
            *self = ClockChoice::Given(make());
        }
        match self {
            ClockChoice::Given(c) => c,
            ClockChoice::Default(_) => unreachable!("made above"),
        }
    }

    fn into_clock(self) -> C {
        match self {
            ClockChoice::Given(c) => c,
            ClockChoice::Default(make) => make(),
        }
    }
}

/// The default key bound: 2^20 keys (about 32 MiB for `u64` keys).
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
const DEFAULT_SHARDS: usize = 64;
/// The most shards a keyed limiter has ([`KeyedBuilder::shards`] clamps to it); the bindings
/// refuse a larger count with this bound in the message.
pub const MAX_SHARDS: usize = 4096;

impl<K, C: Clock> KeyedBuilder<K, C> {
    /// The most keys the limiter holds at once (default [`DEFAULT_MAX_KEYS`]; at least 1).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self.max_keys_given = true;
        self
    }

    /// Where the buckets live (default [`StoreSpec::Memory`], this process). With
    /// [`StoreSpec::Shm`] every process that opens the same region shares its buckets; the
    /// region holds `max_keys` keys (or its spec's `capacity`), and the default clock reads
    /// the region's time, which every process reads alike (a manual clock is used as given;
    /// `StdClock` and `CoarseClock` are refused). docs/SHM.md has the details.
    pub fn store(mut self, store: StoreSpec) -> Self {
        self.store = store;
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

    /// Whether a table that must grow for a new key first evicts its full buckets, when that
    /// is lossless (`initial == burst`), so that memory follows the keys that are not full
    /// (default `true`). With `false` the in-process store's tables keep every key until the
    /// key bound, [`sweep`](KeyedLimiter::sweep) or [`remove`](KeyedLimiter::remove): more
    /// memory (up to `max_keys` entries), and no re-insertion under the shard's lock of keys
    /// that come back after their buckets filled up, which is faster when most keys return
    /// (a replay of logs). Such tables also double when they grow (with `true` they grow by
    /// about a quarter past the keys they keep): fewer moves per key, more room held. No
    /// decision differs either way.
    pub fn sweep_on_grow(mut self, sweep: bool) -> Self {
        self.sweep_on_grow = sweep;
        self
    }

    /// Reads `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, C2> {
        KeyedBuilder {
            quota: self.quota,
            clock: ClockChoice::Given(clock),
            max_keys: self.max_keys,
            max_keys_given: self.max_keys_given,
            on_full: self.on_full,
            shards: self.shards,
            store: self.store,
            observe: self.observe,
            sweep_on_grow: self.sweep_on_grow,
            _key: PhantomData,
        }
    }

    /// Starts in shadow (dry-run) mode (default off; switch at runtime with
    /// [`KeyedLimiter::set_shadow`]): see [`LimiterBuilder::shadow`](crate::LimiterBuilder::shadow).
    pub fn shadow(mut self, on: bool) -> Self {
        self.observe.shadow = on;
        self
    }

    /// Counts decisions, evictions and refused keys ([`KeyedLimiter::metrics`]; default
    /// off): see [`LimiterBuilder::metrics`](crate::LimiterBuilder::metrics).
    pub fn metrics(mut self, on: bool) -> Self {
        self.observe.metrics = on;
        self
    }

    /// Calls `hook` for each rejection (shadow ones included), with the request's key, for
    /// logging: on the deciding thread, after the decision, outside the limiter's locks and
    /// read sections. The key is made from the borrowed form the caller passed (one
    /// allocation for a `Box<[u8]>` key, on rejections only). Admissions never call it.
    pub fn on_reject(mut self, hook: impl Fn(&Rejection<'_, K>) + Send + Sync + 'static) -> Self {
        self.observe.hook = Some(Arc::new(hook));
        self
    }

    /// The limiter, or why the quota (or `max_keys == 0`) is invalid. Its clock origin (the
    /// interval grid's anchor) is the clock's reading now.
    pub fn build(mut self) -> Result<KeyedLimiter<K, C>, Error>
    where
        K: Hash + Eq + Send + 'static,
    {
        if self.max_keys == 0 {
            return Err(Error::InvalidOption {
                option: "max_keys",
                value: "0".into(),
                expected: "at least 1".into(),
            });
        }
        match self.store {
            StoreSpec::Shm { .. } => return self.build_shm(),
            StoreSpec::Redis { .. } => return self.build_redis(),
            StoreSpec::Memory => {}
        }
        let now = self.clock.get().now();
        let codec = Codec::new(&self.quota, now)?;
        codec.check(now, 0)?;
        let backend = if let Codec::SlidingLog(log) = &codec {
            Backend::Log(Routed::new(LogStore::new(
                log.clone(),
                self.shards,
                self.max_keys,
                self.on_full,
            )))
        } else if codec.wide() {
            Backend::Wide(Routed::new(Core::new(self.shards)))
        } else {
            Backend::Narrow(Routed::new(Core::new(self.shards)))
        };
        let max_keys = self.max_keys;
        Ok(self.finish(backend, codec, max_keys, 0, now))
    }

    /// The limiter over `backend`. `base`: where the codec's readings start on the limiter's
    /// clock (a shared region runs its codec on readings relative to its creation);
    /// `origin`: the clock reading the codec was compiled for.
    fn finish(
        self,
        backend: Backend<K>,
        codec: Codec,
        max_keys: usize,
        base: u64,
        origin: u64,
    ) -> KeyedLimiter<K, C> {
        let mut cx = Ctx::new(&self.quota, codec, base, max_keys, self.on_full);
        cx.sweep_on_grow = self.sweep_on_grow;
        KeyedLimiter {
            first: Gen {
                backend,
                cx,
                evicted_before: 0,
            },
            live: Live::new(self.quota, origin),
            clock: self.clock.into_clock(),
            obs: Observe::new(self.observe),
            _key: PhantomData,
        }
    }

    /// [`build`](Self::build) on a shared-memory region.
    #[cfg(all(unix, not(sluicegate_loom)))]
    fn build_shm(mut self) -> Result<KeyedLimiter<K, C>, Error>
    where
        K: Hash + Eq + Send + 'static,
    {
        let asked = self.max_keys_given.then_some(self.max_keys as u64);
        if let (
            StoreSpec::Shm {
                capacity: Some(c), ..
            },
            Some(k),
        ) = (&self.store, asked)
        {
            if *c != k {
                // Two sizes for one region: neither is taken silently.
                return Err(Error::InvalidOption {
                    option: "max_keys",
                    value: k.to_string(),
                    expected: format!(
                        "the store string's capacity ({c}), or no max_keys: the two give the \
                         region two sizes"
                    ),
                });
            }
        }
        let default = self.max_keys as u64;
        let store = ShmStore::open_for(&self.store, self.quota, asked, default, self.clock.get())?;
        let sized = matches!(
            self.store,
            StoreSpec::Shm {
                capacity: Some(_),
                ..
            }
        );
        if asked.is_none() && !sized && store.key_capacity() == 1 {
            // A single limiter's region, or a global limit's (the same name, after a limit
            // changed from global to keyed: regions outlive restarts), would be opened at its
            // one key, and every key but the first refused or evicting it: refused here unless
            // one key is asked for.
            return Err(Error::store(
                crate::error::StoreErrorKind::Mismatch,
                self.store.to_string(),
                "the region holds one key (as a single limiter's or a global limit's region \
                 does), and this keyed limiter asked for no key bound: give it a region of its \
                 own, or remove the file once no process has it open (max_keys 1, or \
                 ?capacity=1, to open it at one key)",
            ));
        }
        let codec = store.codec().clone();
        let max_keys = usize::try_from(store.key_capacity()).unwrap_or(usize::MAX);
        let base = store.base();
        Ok(self.finish(Backend::Shm(store), codec, max_keys, base, 0))
    }

    /// [`build`](Self::build) on a Redis store: the limit is the server's (no key bound here;
    /// keys expire on the server the moment their buckets are full).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    fn build_redis(mut self) -> Result<KeyedLimiter<K, C>, Error>
    where
        K: Hash + Eq + Send + 'static,
    {
        let now = self.clock.get().now();
        let codec = Codec::new(&self.quota, now)?;
        codec.check(now, 0)?;
        let store = RedisStore::open(&self.store, &self.quota, now)?;
        Ok(self.finish(Backend::Redis(store), codec, usize::MAX, 0, now))
    }

    #[cfg(not(all(feature = "redis", not(sluicegate_loom))))]
    fn build_redis(self) -> Result<KeyedLimiter<K, C>, Error> {
        Err(Error::store(
            crate::error::StoreErrorKind::Unsupported,
            self.store.to_string(),
            "sluicegate was built without the cargo feature redis",
        ))
    }

    #[cfg(not(all(unix, not(sluicegate_loom))))]
    fn build_shm(self) -> Result<KeyedLimiter<K, C>, Error> {
        Err(Error::store(
            crate::error::StoreErrorKind::Unsupported,
            self.store.to_string(),
            "shared-memory regions need a Unix system",
        ))
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
    /// The store and context the limiter was built with: its first generation.
    first: Gen<K>,
    /// The generations after the first (live reconfiguration, `store/live.rs`).
    live: Live<K>,
    clock: C,
    obs: Observe<K>,
    // Readers on any thread compare keys (K: Sync) and deferred frees drop keys on any
    // thread (K: Send): Send iff K: Send, Sync iff K: Send + Sync.
    _key: PhantomData<(K, std::sync::Mutex<K>)>,
}

/// A store and the context its operations share: one generation of a keyed limiter (a live
/// reconfiguration moves every bucket into a new one: `store/live.rs`).
pub(crate) struct Gen<K> {
    pub(super) backend: Backend<K>,
    pub(super) cx: Ctx,
    /// Evictions counted by the generations this one replaced (metrics): fixed when it is
    /// made, so that a read section on one generation reads the whole count (`metrics`).
    pub(super) evicted_before: u64,
}

/// What every store's operations share: the compiled codec and the key bound's policy.
pub(crate) struct Ctx {
    pub(crate) codec: Codec,
    /// `codec.capacity()` and `codec.limit()` (the first reading at which a state could be
    /// the DEAD mark: the horizon, or a window codec's last window), for the hot path's check.
    capacity: u64,
    horizon: u64,
    pub(crate) max_keys: usize,
    pub(crate) on_full: OnFull,
    /// `initial == burst`: a full bucket is exactly a fresh one, so evicting it loses nothing.
    pub(crate) lossless: bool,
    /// [`KeyedBuilder::sweep_on_grow`].
    pub(crate) sweep_on_grow: bool,
}

impl Ctx {
    /// The context of a store running `codec` for `quota`, whose readings start at `base` on
    /// the limiter's clock.
    pub(crate) fn new(
        quota: &Quota,
        codec: Codec,
        base: u64,
        max_keys: usize,
        on_full: OnFull,
    ) -> Self {
        Ctx {
            lossless: quota.initial() == quota.burst(),
            sweep_on_grow: true,
            capacity: codec.capacity(),
            horizon: codec.limit().saturating_add(base),
            codec,
            max_keys,
            on_full,
        }
    }

    /// A context for `quota` with the clock origin `origin` (the stores' unit tests and loom
    /// models).
    #[cfg(test)]
    pub(crate) fn for_tests(quota: Quota, origin: u64, on_full: OnFull) -> Self {
        let codec = Codec::new(&quota, origin).unwrap();
        Ctx {
            capacity: codec.capacity(),
            horizon: codec.limit(),
            codec,
            max_keys: usize::MAX,
            on_full,
            lossless: quota.initial() == quota.burst(),
            sweep_on_grow: true,
        }
    }
}

/// The store a keyed limiter runs on, chosen at construction (and by a reconfiguration, for a
/// new generation). Every variant implements [`Store`]; the match is on a discriminant that
/// never changes for a given generation.
pub(crate) enum Backend<K> {
    /// In-process words of 64 bits (the default quota and most others).
    Narrow(Words<K, u64>),
    /// In-process words of 128 bits (quotas whose exact state needs them).
    Wide(Words<K, u128>),
    /// In-process sliding logs.
    Log(Logs<K>),
    /// A shared-memory region.
    #[cfg(all(unix, not(sluicegate_loom)))]
    Shm(ShmStore),
    /// A Redis deployment.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    Redis(RedisStore),
}

/// Runs `$e` with `$s` bound to the backend's [`Store`].
macro_rules! with_store {
    ($backend:expr, $s:ident => $e:expr) => {
        match $backend {
            Backend::Narrow($s) => $e,
            Backend::Wide($s) => $e,
            Backend::Log($s) => $e,
            #[cfg(all(unix, not(sluicegate_loom)))]
            Backend::Shm($s) => $e,
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            Backend::Redis($s) => $e,
        }
    };
}

impl<K> KeyedLimiter<K, DefaultClock> {
    /// A builder for `quota` (the key type is usually named here:
    /// `KeyedLimiter::<u64>::builder(q)`).
    pub fn builder(quota: Quota) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder {
            quota,
            clock: ClockChoice::Default(DefaultClock::new),
            max_keys: DEFAULT_MAX_KEYS,
            max_keys_given: false,
            on_full: OnFull::RejectNewKeys,
            shards: DEFAULT_SHARDS,
            store: StoreSpec::Memory,
            observe: ObserveOptions::default(),
            sweep_on_grow: true,
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

    /// `f` on the current generation, inside a read section (`store/live.rs`).
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&Gen<K>) -> R) -> R {
        self.live.with(&self.first, f)
    }

    /// Counts (and, in shadow mode, lets through) a decision a caller asked for; the hook is
    /// shown the key made from its borrowed form.
    #[inline(always)]
    fn observed<Q>(&self, r: Result<Decision, Error>, key: &Q, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match r {
            Ok(d) => Ok(self.obs.decided(d, || Some(owned(key)), cost)),
            Err(e) => {
                self.obs.failed(&e);
                Err(e)
            }
        }
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

    /// Asks the CPU's cache for what a decision on `key` reads first in this process's
    /// store, without waiting for it; changes nothing. A caller with many keys at hand (a
    /// batch of log lines) prefetches them all, then decides them in order: their memory
    /// accesses overlap instead of following one another. A hint with no effect on any
    /// decision; nothing for sliding logs, long keys or a store outside the process.
    #[inline]
    pub fn prefetch<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let section = self.live.section();
        if let Some(g) = self.live.current(&self.first, &section) {
            match &g.backend {
                Backend::Narrow(words) => words.main.prefetch(&section.rcu, words.main.hash(key)),
                Backend::Wide(words) => words.main.prefetch(&section.rcu, words.main.hash(key)),
                _ => {}
            }
        }
    }

    /// [`try_acquire`](Self::try_acquire) at an explicit clock reading.
    #[inline]
    pub fn try_acquire_at<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        // The default store's lock-free path inline, everything else out of line. With the
        // three stores' paths inline (or the slow path's result merged with the fast one's),
        // the compiler passed every decision through memory (docs/KEYED.md).
        // A region's path opens no read section (see `try_acquire_region`): straight there.
        #[cfg(all(unix, not(sluicegate_loom)))]
        if let Backend::Shm(s) = &self.first.backend {
            return self.try_acquire_region(s, key, now, cost);
        }
        let section = self.live.section();
        if let Some(g) = self.live.current(&self.first, &section) {
            if let Some(d) = g.try_fast(&section, key, now, cost) {
                drop(section);
                return Ok(self.obs.decided(d, || Some(owned(key)), cost));
            }
        }
        drop(section);
        self.try_acquire_rest(key, now, cost)
    }

    /// [`try_acquire_at`](Self::try_acquire_at) on a region (`s`, the first generation's
    /// store). A region is never reconfigured (`set_quota` refuses it before it pauses
    /// anything: `live::unsupported`), so its first generation is the only one, and it needs no
    /// read section (nothing of this process's memory is reclaimed under it). With nothing to
    /// observe, its result is returned as it comes (written once, into the caller's). Cold
    /// for the compiler only: the in-process path, inline in the caller, stays laid out
    /// straight past its test; a function of its own, so that the region's path saves only
    /// the registers it uses.
    #[cfg(all(unix, not(sluicegate_loom)))]
    #[cold]
    #[inline(never)]
    fn try_acquire_region<Q>(
        &self,
        s: &ShmStore,
        key: &Q,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let r = match self.first.check(now, cost) {
            Ok(()) if self.obs.quiet() => return s.acquire_at(&self.first.cx, key, now, cost),
            Ok(()) => s.acquire_at(&self.first.cx, key, now, cost),
            Err(e) => Err(e),
        };
        self.observed(r, key, cost)
    }

    /// [`try_acquire_at`](Self::try_acquire_at) past the default store's lock-free path: the
    /// other stores (a region's goes to `try_acquire_region` first), and the default store's
    /// new keys, DEAD marks and errors.
    #[inline(never)]
    fn try_acquire_rest<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let r = self.with(|g| g.try_acquire_at(key, now, cost));
        self.observed(r, key, cost)
    }

    /// Reserves `cost` of `key`'s bucket now, admitted only if the wait is at most `max_wait`:
    /// a leaky queue's slot (which leaves nothing behind otherwise); every other algorithm
    /// admits now or not at all, as [`try_acquire`](Self::try_acquire) does.
    pub fn reserve_within<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let within = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX - 1);
        self.reserve_within_at(key, self.clock.now(), cost, within)
    }

    /// [`reserve_within`](Self::reserve_within) at an explicit clock reading, the bound in
    /// nanoseconds.
    pub fn reserve_within_at<Q>(
        &self,
        key: &Q,
        now: u64,
        cost: u64,
        max_wait_ns: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let r = self.with(|g| g.reserve_within_at(key, now, cost, max_wait_ns));
        self.observed(r, key, cost)
    }

    /// Gives a reservation (or admitted cost) of `key` back: the same as
    /// [`refund`](Self::refund).
    pub fn cancel<Q>(&self, key: &Q, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.refund(key, cost)
    }

    /// Acquires `cost` of `key`'s bucket, blocking the thread for at most `max_wait`
    /// ([`Duration::MAX`]: as long as needed): the policy of [`AcquirePlan`], as
    /// [`Limiter::acquire`](crate::Limiter::acquire).
    pub fn acquire<Q>(&self, key: &Q, cost: u64, max_wait: Duration) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let mut plan = self.start_acquire(cost, max_wait);
        acquire::block_on(|| self.poll_acquire(key, &mut plan))
    }

    /// [`acquire`](Self::acquire) for async code, waiting with `tokio::time::sleep` (cargo
    /// feature `tokio`).
    #[cfg(feature = "tokio")]
    pub async fn acquire_async<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let mut plan = self.start_acquire(cost, max_wait);
        acquire::sleep_on(|| self.poll_acquire(key, &mut plan)).await
    }

    /// Starts an acquire of `cost` with a deadline `max_wait` from now, for callers that do
    /// their own waiting (the bindings): poll it with [`poll_acquire`](Self::poll_acquire).
    pub fn start_acquire(&self, cost: u64, max_wait: Duration) -> AcquirePlan {
        // The algorithm never changes: a reconfiguration keeps it.
        let queue = matches!(self.first.cx.codec, Codec::LeakyQueue(_));
        AcquirePlan::new(self.clock.now(), cost, max_wait, queue)
    }

    /// One round of `plan` for `key` at the clock's reading now: what to do next ([`Next`]).
    /// The outcome (admitted, or rejected for good) is counted once.
    pub fn poll_acquire<Q>(&self, key: &Q, plan: &mut AcquirePlan) -> Result<Next, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let cost = plan.cost();
        let next = plan.poll(self.clock.now(), |now, left| {
            let d = self.with(|g| g.reserve_within_at(key, now, cost, left))?;
            Ok(self.obs.shadowed(d))
        });
        match next {
            Ok(Next::Admit(d)) | Ok(Next::Reject(d)) => {
                self.obs.outcome(d, || Some(owned(key)), cost);
            }
            Ok(Next::Retry(_)) => {}
            Err(ref e) => self.obs.failed(e),
        }
        next
    }

    /// Asks for each `(key, cost)` now, in order: the decisions of as many
    /// [`try_acquire`](Self::try_acquire) calls. On a Redis store every call is sent before
    /// any reply is read (one round trip for the batch); elsewhere it is a loop.
    pub fn try_acquire_many<Q>(&self, requests: &[(&Q, u64)]) -> Vec<Result<Decision, Error>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let now = self.clock.now();
        #[cfg(all(feature = "redis", not(sluicegate_loom)))]
        if let Backend::Redis(s) = &self.first.backend {
            let reqs = self.redis_requests(requests, now);
            let done = s.many_blocking(reqs, now);
            return self.observed_many(done, requests);
        }
        requests
            .iter()
            .map(|(k, c)| self.try_acquire_at(k, now, *c))
            .collect()
    }

    /// A Redis batch's results, counted as its calls.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    fn observed_many<Q>(
        &self,
        done: Vec<Result<Decision, Error>>,
        requests: &[(&Q, u64)],
    ) -> Vec<Result<Decision, Error>>
    where
        K: Borrow<Q>,
        Q: ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        done.into_iter()
            .zip(requests)
            .map(|(r, (k, c))| self.observed(r, *k, *c))
            .collect()
    }

    /// The requests of a batch as a Redis store sends them: a key's fingerprint and cost, or
    /// the error its check gives.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    fn redis_requests<Q: Hash + ?Sized>(
        &self,
        requests: &[(&Q, u64)],
        now: u64,
    ) -> Vec<Result<(u128, u64), Error>> {
        requests
            .iter()
            .map(|(k, c)| {
                self.first.check(now, *c)?;
                Ok((crate::store::redis::key_fingerprint(*k), *c))
            })
            .collect()
    }

    /// [`try_acquire_many`](Self::try_acquire_many) for async code (cargo feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn try_acquire_many_async<'a, Q>(
        &'a self,
        requests: &'a [(&'a Q, u64)],
    ) -> impl core::future::Future<Output = Vec<Result<Decision, Error>>> + 'a
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let now = self.clock.now();
        let ready = match &self.first.backend {
            Backend::Redis(_) => Err(self.redis_requests(requests, now)),
            _ => Ok(requests
                .iter()
                .map(|(k, c)| self.try_acquire_at(k, now, *c))
                .collect()),
        };
        async move {
            match (ready, &self.first.backend) {
                (Ok(done), _) => done,
                (Err(reqs), Backend::Redis(s)) => {
                    let done = s.many_async(reqs, now).await;
                    self.observed_many(done, requests)
                }
                (Err(_), _) => unreachable!("only a Redis store's batch is pending"),
            }
        }
    }

    /// [`try_acquire`](Self::try_acquire) for async code (cargo feature `redis`): on a Redis
    /// store the call is awaited instead of blocking the thread (any executor); every other
    /// store answers at once.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn try_acquire_async<Q>(
        &self,
        key: &Q,
        cost: u64,
    ) -> impl core::future::Future<Output = Result<Decision, Error>> + '_
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let now = self.clock.now();
        let ready = match (&self.first.backend, self.first.check(now, cost)) {
            (_, Err(e)) => Ok(Err(e)),
            (Backend::Redis(_), Ok(())) => Err(crate::store::redis::key_fingerprint(key)),
            _ => Ok(self.try_acquire_at(key, now, cost)),
        };
        // The hook's key, made now: the future does not borrow `key`.
        let hooked: Option<K> = match (&ready, self.obs.hook()) {
            (Err(_), Some(_)) => Some(key.to_owned().into()),
            _ => None,
        };
        async move {
            let redis = ready.is_err();
            let r = self.redis_pending(ready, now, cost, false).await;
            if !redis {
                return r; // counted by try_acquire_at
            }
            match r {
                Ok(d) => Ok(self.obs.decided(d, || hooked.map(KeyRef::Owned), cost)),
                Err(e) => {
                    self.obs.failed(&e);
                    Err(e)
                }
            }
        }
    }

    /// [`peek`](Self::peek) for async code (cargo feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn peek_async<Q>(
        &self,
        key: &Q,
    ) -> impl core::future::Future<Output = Result<Decision, Error>> + '_
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        let ready = match (&self.first.backend, self.first.check(now, 0)) {
            (_, Err(e)) => Ok(Err(e)),
            (Backend::Redis(_), Ok(())) => Err(crate::store::redis::key_fingerprint(key)),
            _ => Ok(self.peek_at(key, now)),
        };
        self.redis_pending(ready, now, 0, true)
    }

    /// [`refund`](Self::refund) for async code (cargo feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn refund_async<Q>(
        &self,
        key: &Q,
        cost: u64,
    ) -> impl core::future::Future<Output = Result<(), Error>> + '_
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        let ready = match &self.first.backend {
            Backend::Redis(_) => Err(crate::store::redis::key_fingerprint(key)),
            _ => Ok(self.refund_at(key, now, cost)),
        };
        async move {
            match (ready, &self.first.backend) {
                (Ok(r), _) => r,
                (Err(fp), Backend::Redis(s)) => s.refund_fp_async(fp, now, cost).await,
                (Err(_), _) => unreachable!("only a Redis store's call is pending"),
            }
        }
    }

    /// A Redis store's call (a store that is never reconfigured: its first generation).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    async fn redis_pending(
        &self,
        ready: Result<Result<Decision, Error>, u128>,
        now: u64,
        cost: u64,
        peek: bool,
    ) -> Result<Decision, Error> {
        match (ready, &self.first.backend) {
            (Ok(r), _) => r,
            (Err(fp), Backend::Redis(s)) => s.decide_fp_async(fp, now, cost, u64::MAX, peek).await,
            (Err(_), _) => unreachable!("only a Redis store's call is pending"),
        }
    }

    /// The Redis store's counters (decisions, cached rejections, each fail policy's
    /// outcomes, timeouts, reconnections), or `None` for other stores (feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn redis_stats(&self) -> Option<crate::RedisStats> {
        match &self.first.backend {
            Backend::Redis(s) => Some(s.stats()),
            _ => None,
        }
    }

    /// The state of `key`'s bucket now, changing nothing. An absent key reports a bucket
    /// created now, without creating it. On Redis, `Err(`[`Error::Store`]`)` when the server
    /// does not answer, whatever the URL's `on_error` says, as `remove`, `clear` and `try_len`
    /// do: a peek is not an admission, and a policy's answer would be no bucket's state
    /// (docs/REDIS.md, "When Redis is slow or down").
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
        self.with(|g| g.peek_at(key, now))
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
        self.with(|g| g.refund_at(key, now, cost))
    }

    /// Forgets `key` (its next request starts a fresh bucket); `true` if it was present.
    /// `Err` only from a store outside the process.
    pub fn remove<Q>(&self, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::remove(s, &g.cx, key)))
    }

    /// Evicts every bucket that is full now; returns how many. Lossless when `initial ==
    /// burst`; otherwise an evicted key starts again with `initial` tokens (conservative).
    /// Locks one shard at a time: lookups never wait for it.
    /// `Err` only from a store outside the process.
    pub fn sweep(&self) -> Result<usize, Error> {
        self.sweep_at(self.clock.now())
    }

    /// [`sweep`](Self::sweep) at an explicit clock reading.
    pub fn sweep_at(&self, now: u64) -> Result<usize, Error> {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::sweep(s, &g.cx, now)))
    }

    /// Forgets every key. `Err` only from a store outside the process.
    pub fn clear(&self) -> Result<(), Error> {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::clear(s)))
    }

    /// The number of keys held (evicted and removed keys are not counted). On Redis, a SCAN
    /// of the limiter's keys, and 0 when the server cannot be asked: see
    /// [`try_len`](Self::try_len).
    pub fn len(&self) -> usize {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::len(s)))
    }

    /// [`len`](Self::len), or the store's error where a store outside the process could not
    /// count (a Redis server down, or a Redis Cluster, whose keys one SCAN does not list).
    pub fn try_len(&self) -> Result<usize, Error> {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::try_len(s)))
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key held and its bucket's state now (a peek), for metrics, but the long keys
    /// (over 64 bytes), which are held as digests and cannot be listed (so `snapshot().len()`
    /// may be below [`len`](Self::len); docs/KEYED.md, "Long keys"). Not an atomic snapshot:
    /// keys inserted or evicted meanwhile may or may not appear, and a shard rebuilt meanwhile
    /// (grown, or compacted by a sweep) may leave some of its keys out.
    /// `Err` from a store that cannot list its keys.
    pub fn snapshot(&self) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        self.snapshot_at(self.clock.now())
    }

    /// [`snapshot`](Self::snapshot) at an explicit clock reading.
    pub fn snapshot_at(&self, now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::snapshot(s, &g.cx, now)))
    }

    /// A shared-memory store's invariants, checked by a scan (for crash tests and operators:
    /// exact only while no process changes the region): live slots, keys in two slots, slots
    /// no lookup reaches, invalid states, and the live count. `None` for other stores.
    #[doc(hidden)]
    pub fn audit(&self) -> Option<crate::StoreAudit> {
        match &self.first.backend {
            #[cfg(all(unix, not(sluicegate_loom)))]
            Backend::Shm(s) => Some(s.audit(&self.first.cx)),
            _ => None,
        }
    }

    /// The key bound.
    pub fn max_keys(&self) -> usize {
        self.first.cx.max_keys
    }

    /// The total number of slots allocated (live, unlinked and empty), for diagnostics:
    /// memory is about `capacity() * (size of the entry + 1 byte)`, an entry being the key
    /// beside an 8-byte (or, for quotas that need it, 16-byte) state word. A sliding log's
    /// entry holds the key and its log (whose runs are allocated apart), plus an 8-byte tag.
    pub fn capacity(&self) -> usize {
        self.with(|g| with_store!(&g.backend, s => Store::<K>::capacity(s)))
    }

    /// Changes the quota of every key now, keeping each bucket's state: what it holds is
    /// carried into the new quota by the carry rule of docs/OPERATIONS.md (as
    /// [`Limiter::set_quota`](crate::Limiter::set_quota) does for one bucket); keys first seen
    /// later start fresh under the new quota. Every key is carried at one instant: decisions
    /// before it ran the old quota, decisions after it run the new one.
    ///
    /// The limiter's operations wait while the buckets are carried (one pass over the keys,
    /// into tables of the new quota's word width), and the call first waits for the
    /// operations under way to finish; so it must not be called from a key's `Hash`, `Eq` or
    /// `Drop` (an error says so). `Err(`[`Error::InvalidOption`]`)` for a quota of another
    /// algorithm or refill mode, `Err(`[`Error::Store`]`)` of kind `Unsupported` on a
    /// shared-memory region or Redis (docs/OPERATIONS.md says why); the limiter is then
    /// unchanged.
    ///
    /// ```
    /// use sluicegate::{KeyedLimiter, ManualClock};
    ///
    /// let limiter = KeyedLimiter::<u64, _>::with_clock("10/s".parse()?, ManualClock::new(0))?;
    /// limiter.try_acquire(&7, 10)?;
    /// limiter.set_quota("20/s; burst=30".parse()?)?;
    /// assert_eq!(limiter.peek(&7)?.remaining(), 0); // carried: still empty
    /// assert_eq!(limiter.peek(&8)?.remaining(), 30); // a new key: the new burst
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), Error> {
        self.reconfigure(quota, None)
    }

    /// [`set_quota`](Self::set_quota) at an explicit clock reading (simulations, tests).
    pub fn set_quota_at(&self, quota: Quota, now: u64) -> Result<(), Error> {
        self.reconfigure(quota, Some(now))
    }

    fn reconfigure(&self, quota: Quota, at: Option<u64>) -> Result<(), Error> {
        let r = self.live.set_quota(&self.first, quota, || {
            at.unwrap_or_else(|| self.clock.now())
        });
        if r.is_ok() {
            self.obs.reconfigured();
        }
        r
    }

    /// Switches shadow (dry-run) mode on or off; the next decisions follow it.
    pub fn set_shadow(&self, on: bool) {
        self.obs.set_shadow(on);
    }

    /// Whether the limiter is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.obs.is_shadow()
    }

    /// The counters ([`Metrics`]: decisions, evictions, refused keys, store errors,
    /// reconfigurations, and the keys held), or `None` when counting is off
    /// ([`KeyedBuilder::metrics`]).
    pub fn metrics(&self) -> Option<Metrics> {
        let mut m = self.obs.snapshot()?;
        // One generation, in one read section: its own evictions and those of the generations
        // it replaced, which it carries (a reconfiguration cannot slip in between two reads).
        let (evicted, keys) = self.with(|g| {
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            if let Backend::Redis(_) = g.backend {
                // Keys live on the server, where counting them is a SCAN of the keyspace:
                // none is sent, and Redis stores count no evictions.
                return (0, None);
            }
            let keys = with_store!(&g.backend, s => Store::<K>::len(s)) as u64;
            let evicted = g
                .evicted_before
                .wrapping_add(super::live::evictions(&g.backend));
            (evicted, Some(keys))
        });
        m.keys_evicted = evicted;
        m.keys = keys;
        Some(m)
    }

    /// The quota every key's bucket enforces now.
    pub fn quota(&self) -> Quota {
        self.live.quota()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// The key a hook is shown, made from the caller's borrowed form.
#[inline(always)]
fn owned<'a, K, Q>(key: &Q) -> KeyRef<'a, K>
where
    K: Borrow<Q> + 'a,
    Q: ToOwned + ?Sized,
    Q::Owned: Into<K>,
{
    KeyRef::Owned(key.to_owned().into())
}

impl<K: Hash + Eq + Send + 'static> Gen<K> {
    /// Ok for a cost within capacity at a reading before the horizon: two comparisons on the
    /// hot path; the errors are built out of line.
    #[inline]
    pub(super) fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        if cost <= self.cx.capacity && now < self.cx.horizon {
            return Ok(());
        }
        self.check_slow(now, cost)
    }

    #[cold]
    fn check_slow(&self, now: u64, cost: u64) -> Result<(), Error> {
        let capacity = self.cx.capacity;
        if cost > capacity {
            return Err(Error::InsufficientCapacity { cost, capacity });
        }
        // The last instant is reserved so that no state equals the DEAD mark (see `cell`).
        // On the limiter's clock: a store whose codec reads time from a base of its own (a
        // region's creation) has its horizon moved by that base.
        let horizon = self.cx.horizon;
        if now >= horizon {
            return Err(Error::ClockOutOfRange {
                now,
                horizon: horizon - 1,
            });
        }
        Ok(())
    }

    /// The default store's lock-free path for a request that passes the checks: `None` for
    /// anything else (another store, a new key, a DEAD mark, an error to report).
    #[inline(always)]
    fn try_fast<Q>(&self, section: &Section<'_>, key: &Q, now: u64, cost: u64) -> Option<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if cost <= self.cx.capacity && now < self.cx.horizon {
            if let Backend::Narrow(words) = &self.backend {
                let core = &words.main;
                let h = core.hash(key);
                return core.acquire_fast(&section.rcu, &self.cx, h, key, now, cost, u64::MAX);
            }
        }
        None
    }

    /// [`KeyedLimiter::try_acquire_at`] on this generation, not counted.
    fn try_acquire_at<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.check(now, cost)?;
        if let Backend::Narrow(words) = &self.backend {
            let core = &words.main;
            let h = core.hash(key);
            if let Some(d) = core.acquire_fast(&rcu::read(), &self.cx, h, key, now, cost, u64::MAX)
            {
                return Ok(d);
            }
            return self.acquire_rest(Some(h), key, now, cost);
        }
        self.acquire_rest(None, key, now, cost)
    }

    /// [`try_acquire_at`](Self::try_acquire_at) past the default store's lock-free path: the
    /// other stores, and the default store's new keys and DEAD marks (under the shard's lock).
    /// `hashed`: the key's hash when the default store's fast path already computed it.
    #[inline(never)]
    fn acquire_rest<Q>(
        &self,
        hashed: Option<u64>,
        key: &Q,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match (&self.backend, hashed) {
            (Backend::Narrow(words), Some(h)) => words.acquire_missed(&self.cx, h, key, now, cost),
            (backend, _) => {
                with_store!(backend, s => Store::<K>::acquire(s, &self.cx, key, now, cost))
            }
        }
    }

    /// [`KeyedLimiter::reserve_within_at`] on this generation, not counted.
    fn reserve_within_at<Q>(
        &self,
        key: &Q,
        now: u64,
        cost: u64,
        max_wait_ns: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.check(now, cost)?;
        // u64::MAX asks for the queue's own bound, which any larger wait is capped at anyway.
        let within = max_wait_ns.min(u64::MAX - 1);
        with_store!(&self.backend, s => Store::<K>::reserve(s, &self.cx, key, now, cost, within))
    }

    /// [`KeyedLimiter::peek_at`] on this generation.
    fn peek_at<Q>(&self, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.check(now, 0)?;
        with_store!(&self.backend, s => Store::<K>::peek(s, &self.cx, key, now))
    }

    /// [`KeyedLimiter::refund_at`] on this generation.
    fn refund_at<Q>(&self, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.check(now, 0)?;
        with_store!(&self.backend, s => Store::<K>::refund(s, &self.cx, key, now, cost))
    }
}

impl<K: Hash + Eq + Send + 'static, C: Clock> core::fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("KeyedLimiter");
        d.field("quota", &self.quota().to_string());
        // On Redis a count is a SCAN of the server's keys, no business of a `{:?}` (and 0
        // when the server is down): the store is shown instead.
        match &self.first.backend {
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            Backend::Redis(s) => d.field("store", &s.printed()),
            _ => d.field("len", &self.len()),
        };
        d.field("max_keys", &self.first.cx.max_keys)
            .field("on_full", &self.first.cx.on_full)
            .finish_non_exhaustive()
    }
}
