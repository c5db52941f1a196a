//! `sg_manual_clock`: a clock that moves only when told to (tests, simulations), and the
//! conversion of a C clock argument to the core's run-time clock choice, `AnyClock`.

use crate::error::{null, sg_result};
use crate::handle::{self, Handle};
use sluicegate::{AnyClock, Clock, ManualClock};

/// A clock that reads what it was last set to, in nanoseconds. Opaque and thread-safe; made
/// by `sg_manual_clock_new`, released by `sg_manual_clock_free`. Limiters made with it share
/// its reading, and keep it alive: the handle may be freed before them.
pub struct sg_manual_clock {
    _private: [u8; 0],
}

impl Handle for ManualClock {
    type Opaque = sg_manual_clock;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:clock");
    const NAME: &'static str = "sg_manual_clock";
}

/// The clock of a limiter made with the manual clock `clock` (a share of it: the handle may
/// be freed first).
///
/// # Safety
/// `clock` is NULL or a live handle (of any kind).
pub(crate) unsafe fn manual(
    clock: *const sg_manual_clock,
    func: &str,
) -> Result<AnyClock, sg_result> {
    // SAFETY: forwarded caller contract.
    let manual = unsafe { handle::borrow::<ManualClock>(clock, func, "clock")? };
    Ok(AnyClock::new(Some(manual)))
}

/// Writes a new manual clock reading `start_ns` to `*out`.
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_manual_clock_new(
    start_ns: u64,
    out: *mut *mut sg_manual_clock,
) -> sg_result {
    ffi!({
        if out.is_null() {
            return Err(null("sg_manual_clock_new", "out"));
        }
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(ManualClock::new(start_ns))) };
        Ok(())
    })
}

/// Sets the reading. It may go backwards: a limiter then sees its bucket as it stood at the
/// latest instant its state proves (at most a spurious rejection, never an extra admission).
///
/// # Safety
/// `clock` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_manual_clock_set(
    clock: *const sg_manual_clock,
    now_ns: u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let c = unsafe { handle::borrow::<ManualClock>(clock, "sg_manual_clock_set", "clock")? };
        c.set(now_ns);
        Ok(())
    })
}

/// Moves the reading forward by `ns`, saturating at `UINT64_MAX`.
///
/// # Safety
/// `clock` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_manual_clock_advance(
    clock: *const sg_manual_clock,
    ns: u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let c =
            unsafe { handle::borrow::<ManualClock>(clock, "sg_manual_clock_advance", "clock")? };
        c.advance_nanos(ns);
        Ok(())
    })
}

/// Writes the current reading to `*out_ns`.
///
/// # Safety
/// `clock` is NULL or a live handle; `out_ns` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_manual_clock_now(
    clock: *const sg_manual_clock,
    out_ns: *mut u64,
) -> sg_result {
    ffi!({
        const F: &str = "sg_manual_clock_now";
        // SAFETY: forwarded caller contract.
        let c = unsafe { handle::borrow::<ManualClock>(clock, F, "clock")? };
        if out_ns.is_null() {
            return Err(null(F, "out_ns"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_ns.write(c.now()) };
        Ok(())
    })
}

/// Releases the handle (limiters made with the clock keep their share of it). NULL is a
/// no-op; a handle of another kind is left alone.
///
/// # Safety
/// `clock` is NULL or a live handle that nothing uses any more.
#[no_mangle]
pub unsafe extern "C" fn sg_manual_clock_free(clock: *mut sg_manual_clock) {
    ffi_or!((), {
        // SAFETY: forwarded caller contract.
        unsafe { handle::free::<ManualClock>(clock, "sg_manual_clock_free") }
    })
}
