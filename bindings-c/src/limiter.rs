//! `sg_limiter`: one bucket.

use crate::clock::C;
use crate::decision::sg_decision;
use crate::error::{fail, from_core, sg_result};
use crate::handle::{self, Handle};
use crate::quota::{sg_quota, Q};
use crate::sg_manual_clock;
use sluicegate::{Clock, Decision, Error, Limiter, ManualClock, MonotonicClock};
use std::time::{Duration, Instant};

/// A lock-free rate limiter for one bucket. Opaque and thread-safe: every function taking a
/// `const sg_limiter *` may be called from any number of threads at once. Made by
/// `sg_limiter_new` / `sg_limiter_new_with_clock`, released by `sg_limiter_free`.
pub struct sg_limiter {
    _private: [u8; 0],
}

/// One limiter type per clock, so the hot path stays monomorphic after one branch.
pub(crate) enum L {
    Monotonic(Limiter<MonotonicClock>),
    Manual(Limiter<ManualClock>),
}

impl Handle for L {
    type C = sg_limiter;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:limit");
    const NAME: &'static str = "sg_limiter";
}

macro_rules! with {
    ($l:expr, $x:ident => $e:expr) => {
        match $l {
            L::Monotonic($x) => $e,
            L::Manual($x) => $e,
        }
    };
}

impl L {
    #[inline]
    fn now(&self) -> u64 {
        with!(self, l => l.clock().now())
    }

    // Inlined into the exported function, so that the decision's figures go straight to the
    // caller's `sg_decision` (the divisions by a denominator of 1 fold away).
    #[inline(always)]
    fn try_acquire(&self, cost: u64) -> Result<Decision, Error> {
        with!(self, l => l.try_acquire(cost))
    }

    #[inline(always)]
    fn try_acquire_at(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        with!(self, l => l.try_acquire_at(now, cost))
    }

    fn refund_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        with!(self, l => l.refund_at(now, cost))
    }

    fn acquire_timeout(&self, cost: u64, timeout_ns: u64) -> Result<Decision, Error> {
        with!(self, l => l.acquire(cost, Duration::from_nanos(timeout_ns)))
    }

    fn reserve_within(&self, cost: u64, max_wait_ns: u64) -> Result<Decision, Error> {
        with!(self, l => l.reserve_within(cost, Duration::from_nanos(max_wait_ns)))
    }

    fn cancel(&self, cost: u64) -> Result<(), Error> {
        with!(self, l => l.cancel(cost))
    }
}

/// Waits (sleeping, never spinning) until `attempt` is admitted or `timeout_ns` has passed.
/// Returns the rejection at once when its `retry_after` already exceeds the time left. Time
/// left is measured on both the limiter's clock and the real clock, whichever has moved
/// further, so a manual clock that nobody advances cannot wait forever.
pub(crate) fn acquire_timeout(
    now: impl Fn() -> u64,
    attempt: impl Fn() -> Result<Decision, Error>,
    timeout_ns: u64,
) -> Result<Decision, Error> {
    let (start, start_real) = (now(), Instant::now());
    loop {
        let d = attempt()?;
        if d.allowed() {
            return Ok(d);
        }
        let real = u64::try_from(start_real.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let waited = now().saturating_sub(start).max(real);
        let wait = d.retry_after_nanos().max(1);
        if wait > timeout_ns.saturating_sub(waited) {
            return Ok(d);
        }
        std::thread::sleep(Duration::from_nanos(wait));
    }
}

#[cold]
#[inline(never)]
pub(crate) fn null(func: &str, arg: &str) -> sg_result {
    fail(
        sg_result::SG_ERR_NULL_ARGUMENT,
        format_args!("{func}: `{arg}` is NULL"),
    )
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
        const F: &str = "sg_limiter_new";
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, F, "quota")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let l = Limiter::with_clock(q.0, MonotonicClock::new()).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(L::Monotonic(l))) };
        Ok(())
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
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, F, "quota")? };
        // SAFETY: forwarded caller contract.
        let c = unsafe { handle::borrow::<C>(clock, F, "clock")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let l = Limiter::with_clock(q.0, c.0.clone()).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(L::Manual(l))) };
        Ok(())
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.try_acquire(0).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<L>(limiter, "sg_limiter_refund", "limiter")? };
        l.refund_at(l.now(), cost).map_err(from_core)
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
        let l = unsafe { handle::borrow::<L>(limiter, "sg_limiter_refund_at", "limiter")? };
        l.refund_at(now_ns, cost).map_err(from_core)
    })
}

/// Blocks the calling thread (sleeping) until `cost` tokens are admitted or `timeout_ns`
/// nanoseconds have passed, and writes the final decision to `*out`: `allowed == true` if
/// admitted, else the last rejection. A rejection whose `retry_after_ns` exceeds the time
/// left is returned at once, without sleeping. A leaky queue (`algorithm=leaky_queue`)
/// reserves a slot whose wait is at most `timeout_ns` and sleeps until it, so an admission
/// returned here may go ahead at once. On a manual clock the thread still sleeps in real
/// time, and a clock that did not move meanwhile gets the rejection instead of a second
/// try. `timeout_ns == 0` is `sg_limiter_try_acquire` (except that a leaky queue admits
/// only a request that needs no wait).
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.acquire_timeout(cost, timeout_ns).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.reserve_within(cost, max_wait_ns).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<L>(limiter, "sg_limiter_cancel", "limiter")? };
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
        let l = unsafe { handle::borrow::<L>(limiter, F, "limiter")? };
        if out_ns.is_null() {
            return Err(null(F, "out_ns"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_ns.write(l.now()) };
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
        unsafe { handle::free::<L>(limiter, "sg_limiter_free") }
    })
}
