//! The Redis/Valkey store (cargo feature `redis`): the buckets of a keyed limiter, a single
//! limiter's bucket, and composite limits, as keys of one Redis deployment that every host
//! shares. The decisions are the in-process engine's, computed by the server-side scripts of
//! `scripts/` (their contract: `SCRIPTS.md`) on the server's clock.
//!
//! * [`scripts`]: the two forms of the scripts (FUNCTION LOAD, EVAL), their names, and a
//!   quota's spec in the scripts' terms.
//! * [`link`]: the connection to a deployment (one server, a cluster, a master behind
//!   Sentinel): one multiplexed connection that pipelines every concurrent caller's calls,
//!   the per-call timeout, reconnection without replay, and the outcome counters.
//! * [`store`]: the store itself: key names, the fail policy, the negative cache, replies
//!   to decisions; [`RedisStore`] (a keyed limiter's buckets).
//! * [`bucket`]: [`RedisBucket`] (a single limiter's bucket) and composite limits in one call.
//!
//! `StoreSpec::Redis` and `RedisOptions` document the URLs and options.

mod bucket;
pub(crate) mod link;
pub(crate) mod scripts;
mod store;

pub(crate) use bucket::{composite, composite_async, RedisBucket};
pub use link::RedisStats;
pub(crate) use store::{key_fingerprint, RedisStore};
