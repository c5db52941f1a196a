//! Where buckets live. A keyed limiter's buckets are state words in a store; the codecs
//! (crate::algorithm) decide what a word means and the cell layer (crate::bucket::cell) how it
//! is updated, whatever the store.
//!
//! * [`memory`]: the in-process store (the default): a sharded open-addressing table of words
//!   with lock-free lookups and lossless eviction, and a table of sliding logs.
//! * [`shm`]: a shared-memory region (a memory-mapped file): the buckets of the worker
//!   processes of one host, lock-free and crash-atomic.
//! * `redis` (cargo feature `redis`): a Redis or Valkey deployment that every host shares,
//!   decided by server-side scripts (`redis/SCRIPTS.md`).
//! * [`spec`]: [`StoreSpec`], a store as configured (`"memory"`, `"shm:/api-limits"`,
//!   `"redis://cache:6379/0"`).
//! * [`dense`]: [`DenseLimiter`], one bucket per index in arrays its single owner holds (for
//!   replays that number their keys).
//! * [`bound`]: the key bound every store enforces (`max_keys`, the hint that spares scans).
//! * [`key`]: the key rule every language shares (an integer key is its decimal digits).
//! * [`fork`]: what a store keeps per process, made again in a child after `fork()` (the
//!   Redis store's connections, thread and caches).

pub(crate) mod bound;
mod dense;
#[cfg(not(sluicegate_loom))]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod fork;
mod key;
mod keyed;
mod live;
pub(crate) mod memory;
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
pub(crate) mod redis;
#[cfg(unix)]
pub(crate) mod shm;
pub(crate) mod spec;

#[cfg(all(feature = "redis", not(sluicegate_loom)))]
pub use self::redis::RedisStats;
pub use dense::DenseLimiter;
pub use key::{IntKey, LONG_KEY_BYTES};
pub use keyed::{KeyedBuilder, KeyedLimiter, OnFull, DEFAULT_MAX_KEYS, MAX_SHARDS};
#[cfg(all(unix, not(sluicegate_loom)))]
pub use shm::Audit as StoreAudit;
pub use spec::{
    OnError, RedisOptions, StoreSpec, REDIS_DEFAULT_CONNECTIONS, REDIS_DEFAULT_TIMEOUT,
};
/// A shared-memory store's audit (only where shared memory exists).
#[cfg(not(all(unix, not(sluicegate_loom))))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreAudit;

use crate::{Decision, Error};
use core::borrow::Borrow;
use core::hash::Hash;
use keyed::Ctx;

/// The seam: what a store of keyed buckets does. A store decides where each key's state lives
/// and how a request reaches it; it applies `cx.codec` to that state, exactly as every other
/// store does, so every store answers with the same [`Decision`] for the same requests.
///
/// The keyed limiter holds one store, chosen at construction, and dispatches to it with one
/// `match` (no dynamic call on the hot path). The contract of each operation is the public
/// method of [`KeyedLimiter`] of the same name; the limiter has already checked the request
/// (`cost` within capacity, `now` before the codec's horizon).
pub(crate) trait Store<K> {
    /// Applies a request of `cost` at `now` to `key`'s bucket, creating it (at the key bound,
    /// per `cx.on_full`) on the key's first request.
    fn acquire<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>;

    /// [`acquire`](Self::acquire), but a leaky queue admits only with a wait of at most
    /// `within` nanoseconds (and leaves nothing behind otherwise); other algorithms never wait.
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
        Q::Owned: Into<K>;

    /// The decision `acquire` would give for cost 0, changing nothing; an absent key reads as
    /// a bucket created now.
    fn peek<Q>(&self, cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// Gives `cost` back to `key`'s bucket (capped at capacity); nothing for an absent key.
    fn refund<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// Forgets `key`; whether it was present.
    fn remove<Q>(&self, cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// Evicts every bucket full at `now` (lossless); how many.
    fn sweep(&self, cx: &Ctx, now: u64) -> Result<usize, Error>;

    /// Forgets every key.
    fn clear(&self) -> Result<(), Error>;

    /// Keys held.
    fn len(&self) -> usize;

    /// Keys held, or why a store outside the process could not count them (`len` is 0
    /// then).
    fn try_len(&self) -> Result<usize, Error> {
        Ok(self.len())
    }

    /// Slots allocated (diagnostics).
    fn capacity(&self) -> usize;

    /// Every key held and its state at `now`.
    fn snapshot(&self, cx: &Ctx, now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone;
}
