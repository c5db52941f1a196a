//! `sg_redis_stats`: the counters of a Redis store (the core's `RedisStats`).
//!
//! A limiter on a Redis store (`"redis://HOST:PORT/DB?prefix=..&timeout=..&on_error=.."`)
//! answers every call by blocking the calling thread for a round trip (at most the store's
//! `timeout`, 50 ms by default, then its `on_error` policy decides). Nothing in this library
//! holds a lock while a call waits: handles are plain heap blocks, and the core releases its
//! caches' locks before it sends a request, so the other threads' calls go on (and are
//! pipelined on the same connection).

use crate::error::{fail, null, sg_result};
use crate::handle;
use crate::keyed::{sg_keyed_limiter, KeyedLimiter};
use crate::limiter::{sg_limiter, Limiter};

/// What a Redis store's calls came to, counted since the store was opened. Every limiter on
/// the same URL in the process shares one connection and these counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_redis_stats {
    /// Requests the server decided (one per key of a batch; a composite counts once).
    pub decided: u64,
    /// Requests rejected by the negative cache, without a round trip.
    pub cached_rejections: u64,
    /// Requests admitted by `on_error=open`.
    pub failed_open: u64,
    /// Requests rejected by `on_error=closed`.
    pub failed_closed: u64,
    /// Requests decided by the in-process limiter of `on_error=local`.
    pub failed_local: u64,
    /// Failures returned to the caller as an error (`on_error=error`, and peeks under every
    /// policy).
    pub failed_error: u64,
    /// Calls that got no reply within the timeout.
    pub timeouts: u64,
    /// Calls made while there was no connection, or that lost theirs.
    pub unavailable: u64,
    /// Calls the server answered with an error.
    pub server_errors: u64,
    /// Connections opened (the first included).
    pub connects: u64,
    /// Times the server-side scripts were loaded.
    pub script_loads: u64,
    /// Calls sent again to the node a Redis Cluster's MOVED or ASK reply named (at most once
    /// a call).
    pub redirects: u64,
}

impl sg_redis_stats {
    fn new(s: &sluicegate::RedisStats) -> Self {
        Self {
            decided: s.decided,
            cached_rejections: s.cached_rejections,
            failed_open: s.failed_open,
            failed_closed: s.failed_closed,
            failed_local: s.failed_local,
            failed_error: s.failed_error,
            timeouts: s.timeouts,
            unavailable: s.unavailable,
            server_errors: s.server_errors,
            connects: s.connects,
            script_loads: s.script_loads,
            redirects: s.redirects,
        }
    }
}

/// Writes `stats` (or the error of a store that is not Redis) to `out`.
///
/// # Safety
/// `out` is NULL or valid for one write.
unsafe fn write(
    stats: Option<sluicegate::RedisStats>,
    out: *mut sg_redis_stats,
    func: &str,
) -> Result<(), sg_result> {
    if out.is_null() {
        return Err(null(func, "out"));
    }
    let Some(s) = stats else {
        return Err(fail(
            sg_result::SG_ERR_STORE_UNSUPPORTED,
            format_args!("{func}: the limiter's store is not Redis"),
        ));
    };
    // SAFETY: non-NULL and valid for one write (caller contract).
    unsafe { out.write(sg_redis_stats::new(&s)) };
    Ok(())
}

/// Writes the counters of the Redis store `limiter`'s bucket is on to `*out`.
///
/// Errors: `SG_ERR_STORE_UNSUPPORTED` (the limiter is not on a Redis store).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_redis_stats(
    limiter: *const sg_limiter,
    out: *mut sg_redis_stats,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_redis_stats";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        unsafe { write(l.redis_stats(), out, F) }
    })
}

/// Writes the counters of the Redis store `limiter`'s buckets are on to `*out`.
///
/// Errors: `SG_ERR_STORE_UNSUPPORTED` (the limiter is not on a Redis store).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_redis_stats(
    limiter: *const sg_keyed_limiter,
    out: *mut sg_redis_stats,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_redis_stats";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        unsafe { write(l.redis_stats(), out, F) }
    })
}
