//! Composite limits: several `sg_limiter`s (per user, per tenant, global) consumed
//! all-or-nothing, over the core's `sluicegate::composite`.

use crate::decision::sg_decision;
use crate::error::{fail, from_core, null, sg_result};
use crate::handle;
use crate::limiter::{sg_limiter, Limiter};
use sluicegate::composite::{self, try_acquire_all, try_acquire_all_at};
use sluicegate::{Decision, Error};

/// Parts up to this many are gathered on the stack; more take one allocation per call.
const INLINE: usize = 8;

/// Checks `limiters[0..n]` and runs `f` over them as core limiters: gathered on the stack up
/// to `INLINE` parts, all on the same kind of clock.
///
/// # Safety
/// `limiters` is NULL or valid for `n` reads of pointers, each NULL or a live handle.
unsafe fn with_parts<Out>(
    limiters: *const *const sg_limiter,
    n: usize,
    func: &str,
    f: impl FnOnce(&[&Limiter]) -> Out,
) -> Result<Out, sg_result> {
    if limiters.is_null() {
        return Err(null(func, "limiters"));
    }
    if n == 0 || n > isize::MAX as usize / core::mem::size_of::<*const sg_limiter>() {
        return Err(bad_count(func, n));
    }
    // SAFETY: non-NULL and valid for `n` reads (caller contract); `n` pointers fit in one
    // object (checked above); the array is only read during this call.
    let ptrs = unsafe { core::slice::from_raw_parts(limiters, n) };
    // SAFETY: each element is NULL or a live handle (caller contract).
    let first = unsafe { part(ptrs, 0, func)? };
    let manual = first.clock().manual().is_some();
    let mut inline = [first; INLINE];
    // Grown as the parts are read, not sized by `n` (as `sg_render_prometheus` does): a garbage
    // count is an error at its first bad element or the caller's broken contract, never an
    // allocation that aborts the process.
    let mut heap = Vec::new();
    if n > INLINE {
        heap.push(first);
    }
    for i in 1..n {
        // SAFETY: as above.
        let l = unsafe { part(ptrs, i, func)? };
        if l.clock().manual().is_some() != manual {
            return Err(mixed_clocks(func, i));
        }
        match inline.get_mut(i) {
            Some(slot) if n <= INLINE => *slot = l,
            _ => heap.push(l),
        }
    }
    Ok(f(if n <= INLINE { &inline[..n] } else { &heap }))
}

/// The limiter at `ptrs[i]`, or its error (the detail names the index).
///
/// # Safety
/// `ptrs[i]` is NULL or a live handle.
#[inline]
unsafe fn part<'a>(
    ptrs: &[*const sg_limiter],
    i: usize,
    func: &str,
) -> Result<&'a Limiter, sg_result> {
    // SAFETY: forwarded caller contract.
    match unsafe { handle::borrow::<Limiter>(ptrs[i], func, "limiters[i]") } {
        Ok(l) => Ok(l),
        // SAFETY: as above; the second look only records the index in the detail.
        Err(_) => Err(unsafe { element_error(ptrs[i], func, i) }),
    }
}

#[cold]
#[inline(never)]
unsafe fn element_error(p: *const sg_limiter, func: &str, i: usize) -> sg_result {
    // SAFETY: forwarded caller contract of `part`.
    match unsafe { handle::borrow::<Limiter>(p, func, &format!("limiters[{i}]")) } {
        Ok(_) => sg_result::SG_ERR_PANIC,
        Err(code) => code,
    }
}

#[cold]
#[inline(never)]
fn bad_count(func: &str, n: usize) -> sg_result {
    fail(
        sg_result::SG_ERR_INVALID_ARGUMENT,
        format_args!("{func}: `n` is {n}: a composite limit needs at least one limiter"),
    )
}

#[cold]
#[inline(never)]
fn mixed_clocks(func: &str, i: usize) -> sg_result {
    fail(
        sg_result::SG_ERR_INVALID_ARGUMENT,
        format_args!(
            "{func}: `limiters[{i}]` and `limiters[0]` read different kinds of clock (the \
             default clock and a manual clock): the parts of a composite limit share one timeline"
        ),
    )
}

/// Writes `d` to `out` (checked non-NULL by the caller).
///
/// # Safety
/// `out` is valid for one write.
unsafe fn put(out: *mut sg_decision, d: Result<Decision, Error>) -> Result<(), sg_result> {
    let d = d.map_err(from_core)?;
    // SAFETY: forwarded caller contract.
    unsafe { out.write(sg_decision::new(&d)) };
    Ok(())
}

/// Acquires `cost` from every one of `limiters[0..n]` now, or from none, and writes the
/// combined decision to `*out`: all-or-nothing at one clock reading (the first limiter's).
///
/// The parts are tried in order (put the one most likely to reject first). If part `j`
/// rejects, the cost already taken from parts `0..j` is given back and the request is
/// rejected. The decision reports the tightest part (least `remaining`, the first on
/// ties: its `limit`, `remaining` and `window_s`) and the longest `retry_after_ns` and
/// `reset_after_ns` over the parts (docs/SEMANTICS.md, "Composite limits"). Concurrent
/// callers may see a transient, conservative rejection; never an over-admission.
///
/// Every part must read the same kind of clock: all the default clock, or all manual
/// clocks (whose readings are then taken from the first part's clock). A part whose default
/// clock counts from another origin than the first part's (a shared-memory region's, or this
/// process's beside a region) is decided at its own reading, taken at the same moment.
///
/// Errors: `SG_ERR_NULL_ARGUMENT` (`limiters`, an element or `out` NULL),
/// `SG_ERR_WRONG_HANDLE` (an element is no `sg_limiter`), `SG_ERR_INVALID_ARGUMENT`
/// (`n == 0`, or clocks of both kinds), `SG_ERR_INSUFFICIENT_CAPACITY` (`cost` above any
/// part's capacity: nothing is consumed), `SG_ERR_CLOCK_OUT_OF_RANGE`.
///
/// # Safety
/// `limiters` is NULL or valid for `n` reads, each element NULL or a live handle; `out` is
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_composite_try_acquire(
    limiters: *const *const sg_limiter,
    n: usize,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_composite_try_acquire";
        if out.is_null() {
            return Err(null(F, "out"));
        }
        // SAFETY: forwarded caller contract.
        let d = unsafe { with_parts(limiters, n, F, |p| try_acquire_all(p, cost))? };
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { put(out, d) }
    })
}

/// `sg_composite_try_acquire` at an explicit clock reading `now_ns` for every part.
///
/// # Safety
/// As `sg_composite_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn sg_composite_try_acquire_at(
    limiters: *const *const sg_limiter,
    n: usize,
    now_ns: u64,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_composite_try_acquire_at";
        if out.is_null() {
            return Err(null(F, "out"));
        }
        // SAFETY: forwarded caller contract.
        let d = unsafe { with_parts(limiters, n, F, |p| try_acquire_all_at(p, now_ns, cost))? };
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { put(out, d) }
    })
}

/// Gives `cost` back to every one of `limiters[0..n]` (work admitted by
/// `sg_composite_try_acquire` but not done), at the first limiter's clock reading.
///
/// Errors: as `sg_composite_try_acquire`, less `SG_ERR_INSUFFICIENT_CAPACITY` (a refund is
/// capped at each part's capacity).
///
/// # Safety
/// `limiters` is NULL or valid for `n` reads, each element NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_composite_refund(
    limiters: *const *const sg_limiter,
    n: usize,
    cost: u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            with_parts(limiters, n, "sg_composite_refund", |p| {
                composite::refund_all(p, cost)
            })?
        };
        r.map_err(from_core)
    })
}

/// `sg_composite_refund` at an explicit clock reading.
///
/// # Safety
/// As `sg_composite_refund`.
#[no_mangle]
pub unsafe extern "C" fn sg_composite_refund_at(
    limiters: *const *const sg_limiter,
    n: usize,
    now_ns: u64,
    cost: u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            with_parts(limiters, n, "sg_composite_refund_at", |p| {
                composite::refund_all_at(p, now_ns, cost)
            })?
        };
        r.map_err(from_core)
    })
}
