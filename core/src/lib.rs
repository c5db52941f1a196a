//! # sluicegate
//!
//! Lock-free, exact rate limiting. A bucket's whole state is one atomic word, updated by a
//! compare-and-swap loop: never decrement-then-check, never a lock, and a rejection writes
//! nothing. Arithmetic is exact integer arithmetic (no float drift, ever); time comes from an
//! injectable [`Clock`].
//!
//! # Quick example
//!
//! ```
//! use sluicegate::{Limiter, Quota};
//!
//! let limiter = Limiter::new("10/s; burst=50".parse::<Quota>()?);
//! let decision = limiter.try_acquire(1)?;
//! assert!(decision.allowed());
//! assert_eq!(decision.limit(), 50);
//! assert_eq!(decision.remaining(), 49);
//!
//! let too_big = limiter.try_acquire(51);
//! assert!(matches!(too_big, Err(sluicegate::Error::InsufficientCapacity { .. })));
//! # Ok::<(), sluicegate::Error>(())
//! ```
//!
//! # Layers
//!
//! | module | what it holds |
//! |---|---|
//! | `quota` | [`Quota`]: the builder, its getters, the rate-string grammar |
//! | `algorithm` | one pure state codec per [`Algorithm`]: `(state, now, cost) -> (decision, state)` |
//! | `bucket` | the one CAS loop, [`Limiter`], [`composite`], the acquire planner |
//! | `store` | where buckets live: [`KeyedLimiter`] over the in-process table (the seam for other stores) |
//! | [`metrics`] | counters ([`Metrics`]), their Prometheus text ([`render_prometheus`]), the rejection hook |
//! | `decision` | [`Decision`] and its HTTP fields ([`http`]) |
//! | [`client`] | client identity: the key of a request's client (peer, trusted proxies, IPv6 prefix) |
//! | [`clock`] | monotonic nanoseconds: TSC, std, coarse, manual |
//! | `sync` | the atomics facade (loom or std) and the read sections (RCU) of the tables |
//!
//! The semantics every binding and store shares are in `docs/SEMANTICS.md`; the file map in
//! `docs/ARCHITECTURE.md`; live reconfiguration ([`Limiter::set_quota`]), shadow mode and
//! metrics in `docs/OPERATIONS.md`.

#![warn(missing_docs)]
// A loom build exists for its models alone: what only the real stores use is dead there.
#![cfg_attr(sluicegate_loom, allow(dead_code, unused_imports))]

mod algorithm;
mod bucket;
pub mod client;
pub mod clock;
mod decision;
mod error;
pub mod metrics;
mod quota;
mod store;
mod sync;

pub use algorithm::CENTURY_NS;
pub use bucket::composite;
pub use bucket::{AcquirePlan, Limiter, LimiterBuilder, Next};
pub use clock::{
    AnyClock, Clock, CoarseClock, DefaultClock, ManualClock, MonotonicClock, SharedTimeline,
    StdClock, Timeline,
};
pub use decision::http;
pub use decision::http::HeaderStyle;
pub use decision::Decision;
pub use error::{Error, StoreErrorKind};
pub use metrics::{render_prometheus, Metrics, RejectHook, Rejection};
pub use quota::{Algorithm, Quota, QuotaOptions, Refill, MAX_SLIDING_LOG};
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
pub use store::RedisStats;
/// The process generation of the Redis store's fork handling (0, or one more in each child
/// forked since the first Redis store was opened): for bindings that keep per-process state
/// beside the store's (a thread of their own). Not a stable API.
#[doc(hidden)]
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
pub fn __process_generation() -> u64 {
    store::fork::generation()
}
#[doc(hidden)]
pub use store::StoreAudit;
pub use store::{
    DenseLimiter, IntKey, KeyedBuilder, KeyedLimiter, OnError, OnFull, RedisOptions, StoreSpec,
    DEFAULT_MAX_KEYS, LONG_KEY_BYTES, MAX_SHARDS, REDIS_DEFAULT_CONNECTIONS, REDIS_DEFAULT_TIMEOUT,
};

/// The README's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// docs/SHM.md's Rust snippets, run as doc tests.
#[cfg(all(doctest, unix))]
#[doc = include_str!("../../docs/SHM.md")]
struct ShmDoctests;

/// docs/OPERATIONS.md's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/OPERATIONS.md")]
struct OperationsDoctests;

/// docs/CLIENT-IDENTITY.md's example for adapters, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../docs/CLIENT-IDENTITY.md")]
struct ClientIdentityDoctests;
