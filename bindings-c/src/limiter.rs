//! `sg_limiter`: one bucket.

use crate::clock;
use crate::decision::sg_decision;
use crate::error::{from_core, null, sg_result};
use crate::handle::{self, Handle};
use crate::sg_manual_clock;
use crate::sg_quota;
use crate::store;
use core::ffi::c_char;
use sluicegate::{AnyClock, Clock, Quota};
use std::time::Duration;

/// A lock-free rate limiter for one bucket. Opaque and thread-safe: every function taking a
/// `const sg_limiter *` may be called from any number of threads at once. Made by
/// `sg_limiter_new`, `sg_limiter_new_with_clock` or `sg_limiter_new_in_store` (a bucket shared
/// by the processes of a host), released by `sg_limiter_free`.
pub struct sg_limiter {
    _private: [u8; 0],
}

/// The limiter behind an `sg_limiter`: on the default clock or a manual one, chosen at run
/// time (one predictable branch a reading).
///
/// cbindgen:ignore
pub(crate) type Limiter = sluicegate::Limiter<AnyClock>;

impl Handle for Limiter {
    type Opaque = sg_limiter;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:limit");
    const NAME: &'static str = "sg_limiter";
}

/// Makes a limiter of either kind and writes its handle to `out`: checks `quota`, `clock`
/// and `out` in that order, then runs `build` (which maps its own errors).
///
/// # Safety
/// `quota` is NULL or a live handle; `out` is NULL or valid for one write.
pub(crate) unsafe fn new<Made: Handle>(
    quota: *const sg_quota,
    clock: impl FnOnce() -> Result<AnyClock, sg_result>,
    out: *mut *mut Made::Opaque,
    func: &str,
    build: impl FnOnce(Quota, AnyClock) -> Result<Made, sg_result>,
) -> Result<(), sg_result> {
    // SAFETY: forwarded caller contract.
    let quota = unsafe { handle::borrow::<Quota>(quota, func, "quota")? };
    let clock = clock()?;
    if out.is_null() {
        return Err(null(func, "out"));
    }
    let made = build(*quota, clock)?;
    // SAFETY: `out` is non-NULL and valid for one write (caller contract).
    unsafe { out.write(handle::into_raw(made)) };
    Ok(())
}

/// A limiter from its quota and clock.
fn build(quota: Quota, clock: AnyClock) -> Result<Limiter, sg_result> {
    Limiter::with_clock(quota, clock).map_err(from_core)
}

/// Writes a new limiter enforcing `quota` to `*out`, on the default clock (the CPU's
/// time-stamp counter, in nanoseconds since the library's first use in the process). The
/// bucket is created now, holding the quota's initial tokens. The quota is copied.
///
/// # Safety
/// `quota` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_new(
    quota: *const sg_quota,
    out: *mut *mut sg_limiter,
) -> sg_result {
    ffi!({
        let clock = || Ok(AnyClock::default());
        // SAFETY: forwarded caller contract.
        unsafe { new(quota, clock, out, "sg_limiter_new", build) }
    })
}

/// Like `sg_limiter_new`, on a manual clock: the bucket is created at the clock's current
/// reading, and every call without an explicit time reads that clock. The limiter keeps its
/// own share of the clock, so `clock` may be freed first.
///
/// # Safety
/// `quota` and `clock` are NULL or live handles; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_new_with_clock(
    quota: *const sg_quota,
    clock: *const sg_manual_clock,
    out: *mut *mut sg_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_new_with_clock";
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        unsafe { new(quota, || clock::manual(clock, F), out, F, build) }
    })
}

/// Writes a new limiter enforcing `quota` to `*out`, its one bucket kept in `store`, a
/// NUL-terminated string: `"memory"` (this process, as `sg_limiter_new`) or
/// `"shm:NAME[?capacity=N]"`, a shared-memory region that every process of the host opening
/// the same NAME shares, so that the limit holds for all of them together. A NAME with no
/// `/` after its leading one (`"shm:/api-limits"`) is a file in /dev/shm; anything else is a
/// path (`"shm:/run/app/limits"`). The first opener creates the region (mode 0600); the
/// others open it, and must ask for the same quota. A region mapped before `fork()` keeps
/// working in the children.
///
/// `store` may also be a Redis/Valkey URL, `"redis://[user:password@]HOST[:PORT][/DB]"`
/// (also `rediss://`, `redis+unix://`, `redis+cluster://`, `redis+sentinel://`) with the
/// store's options in its query: `prefix=NAME` (the bucket's key; limiters with one URL and
/// quota share it), `timeout=50ms`, `on_error=local|open|closed|error`, `hosts=N`,
/// `negative_cache=off`, `scripts=eval`, `connections=N`. Every host's processes then share
/// the bucket, decided on the server's clock; each call blocks the calling thread for one
/// round trip (at most the timeout; then `on_error` decides: `error` returns
/// `SG_ERR_STORE_UNAVAILABLE` or `SG_ERR_STORE_TIMEOUT`, the others a decision), holding no
/// lock meanwhile. On one server (TCP or a unix socket) the calling thread makes the round
/// trip itself on a connection of the process's pool (up to `connections=N`, default 4; `0`:
/// one shared connection a process). The connection is made here (blocking at most
/// max(timeout, 1 s)); a server that is down is retried in the background. A limiter made
/// before `fork()` works in the children: each opens connections (and a thread to drive
/// them) of its own at its first call there.
/// `sg_limiter_redis_stats` reads its counters.
///
/// `clock` NULL: the default clock, which on a region reads the region's timeline (every
/// process reads the same one); a manual clock is used as given (tests; on Redis the
/// server's clock decides, unless the library was built for tests with `clock=test`).
///
/// Errors: `SG_ERR_INVALID_OPTION` (a bad store string, the detail naming the option
/// `store`), `SG_ERR_STORE_MISMATCH` (the region holds another quota or layout: the detail
/// names both), `SG_ERR_STORE_PERMISSION` (a symbolic link, another user's file, a file
/// open to other users), `SG_ERR_STORE_UNSUPPORTED` (a quota a region cannot keep exactly:
/// the sliding log, or one whose exact state outgrows a region's 95 bits),
/// `SG_ERR_STORE_UNAVAILABLE` (e.g. a missing directory), `SG_ERR_STORE_CORRUPT`,
/// `SG_ERR_STORE_TIMEOUT`, and the errors of `sg_limiter_new`.
///
/// # Safety
/// `quota` and `clock` are NULL or live handles; `store` is NULL or a NUL-terminated string;
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_new_in_store(
    quota: *const sg_quota,
    store: *const c_char,
    clock: *const sg_manual_clock,
    out: *mut *mut sg_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_new_in_store";
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        let clock = || unsafe { store::clock(clock, F) };
        // SAFETY: forwarded caller contract.
        unsafe {
            new(quota, clock, out, F, |quota, clock| {
                let spec = store::spec(store, F)?;
                let built = sluicegate::Limiter::builder(quota)
                    .store(spec)
                    .clock(clock)
                    .build();
                built.map_err(from_core)
            })
        }
    })
}

/// Asks for `cost` tokens now and writes the decision to `*out`. A rejection is `SG_OK` with
/// `out->allowed == false` (and nothing changes); `cost == 0` is a peek.
///
/// Errors: `SG_ERR_INSUFFICIENT_CAPACITY` (`cost` above the burst: it can never succeed),
/// `SG_ERR_CLOCK_OUT_OF_RANGE`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_try_acquire(
    limiter: *const sg_limiter,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_try_acquire";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.try_acquire(cost).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// `sg_limiter_try_acquire` at an explicit clock reading `now_ns` (on the limiter's clock's
/// timeline: see `sg_limiter_now`). A reading earlier than one the state proves sees the
/// bucket as it stood then: at most a spurious rejection, never an extra admission.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_try_acquire_at(
    limiter: *const sg_limiter,
    now_ns: u64,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_try_acquire_at";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.try_acquire_at(now_ns, cost).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Writes the current state to `*out`, changing nothing (a request of cost 0).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_peek(
    limiter: *const sg_limiter,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_peek";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.peek().map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Gives `cost` tokens back (work admitted but not done), capped at the burst.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_refund(limiter: *const sg_limiter, cost: u64) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, "sg_limiter_refund", "limiter")? };
        l.refund(cost).map_err(from_core)
    })
}

/// `sg_limiter_refund` at an explicit clock reading.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_refund_at(
    limiter: *const sg_limiter,
    now_ns: u64,
    cost: u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, "sg_limiter_refund_at", "limiter")? };
        l.refund_at(now_ns, cost).map_err(from_core)
    })
}

/// Blocks the calling thread (sleeping, never spinning) until `cost` tokens are admitted
/// or `timeout_ns` nanoseconds have run out, and writes the outcome to `*out` with `SG_OK`:
/// the admission, or, when the quota cannot admit `cost` within `timeout_ns`, the rejection
/// (`out->allowed == false`: a decision, not an error).
///
/// The wait policy is the core's, the same in every language: a rejection whose
/// `retry_after_ns` exceeds the time left is the outcome at once, without sleeping; otherwise
/// the thread sleeps `retry_after_ns` and tries again. A leaky queue
/// (`algorithm=leaky_queue`) reserves a slot whose wait is at most `timeout_ns` (else the
/// rejection is the outcome at once), sleeps until it and returns the admission, whose
/// `retry_after_ns` is the wait already slept: go ahead at once. Time left is read on the
/// limiter's clock. On a manual clock the thread still sleeps in real time, and a clock
/// that did not move while it slept makes the last rejection the outcome: a manual clock
/// that nobody advances returns the rejection instead of waiting forever.
/// `timeout_ns == 0` is `sg_limiter_try_acquire` (a leaky queue then admits only a request
/// that needs no wait); `timeout_ns == UINT64_MAX` sets no deadline. Signals do not cut the
/// sleep short.
///
/// Errors: as `sg_limiter_try_acquire`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_acquire_timeout(
    limiter: *const sg_limiter,
    cost: u64,
    timeout_ns: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_acquire_timeout";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l
            .acquire(cost, Duration::from_nanos(timeout_ns))
            .map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Reserves `cost` tokens now without blocking, and writes the decision to `*out`.
///
/// For a leaky queue (`algorithm=leaky_queue`) an admitted reservation may come with a
/// wait: `out->retry_after_ns` is then the delay until the request's slot, which the caller
/// must let pass before going ahead, or give back with `sg_limiter_cancel(limiter, cost)`.
/// It is admitted only if that wait is at most `max_wait_ns` (and the queue's `max_delay`);
/// otherwise the decision is a rejection whose `retry_after_ns` is the least wait until it
/// would fit, and nothing is reserved. `max_wait_ns == UINT64_MAX` bounds the wait by the
/// queue alone. Every other algorithm never waits: this is `sg_limiter_try_acquire`.
///
/// Errors: as `sg_limiter_try_acquire`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_reserve(
    limiter: *const sg_limiter,
    cost: u64,
    max_wait_ns: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_reserve";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l
            .reserve_within(cost, Duration::from_nanos(max_wait_ns))
            .map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Gives back a reservation of `cost` (or admitted cost: the same as `sg_limiter_refund`).
/// A leaky queue frees the latest `cost` slots, so the next reservation waits less.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_cancel(limiter: *const sg_limiter, cost: u64) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, "sg_limiter_cancel", "limiter")? };
        l.cancel(cost).map_err(from_core)
    })
}

/// Writes the current reading of the limiter's clock (nanoseconds) to `*out_ns`: the
/// timeline `sg_limiter_try_acquire_at` and `sg_limiter_refund_at` expect.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out_ns` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_now(limiter: *const sg_limiter, out_ns: *mut u64) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_now";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, F, "limiter")? };
        if out_ns.is_null() {
            return Err(null(F, "out_ns"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_ns.write(l.clock().now()) };
        Ok(())
    })
}

/// Releases a limiter. NULL is a no-op; a handle of another kind is left alone.
///
/// # Safety
/// `limiter` is NULL or a live handle that no thread uses any more.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_free(limiter: *mut sg_limiter) {
    ffi_or!((), {
        // SAFETY: forwarded caller contract.
        unsafe { handle::free::<Limiter>(limiter, "sg_limiter_free") }
    })
}
