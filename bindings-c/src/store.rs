//! The store argument of `sg_*_new_in_store`: where a limiter's buckets live, as a string
//! the core parses (`"memory"`, `"shm:NAME[?capacity=N]"` or a Redis URL such as
//! `"redis://HOST:6379/0?prefix=api&on_error=local"`, one spelling in every language).

use crate::error::{from_core, null, sg_result};
use core::ffi::{c_char, CStr};
use sluicegate::{AnyClock, Error, StoreSpec};

/// The store named by the NUL-terminated string `store`, parsed by the core: a bad string
/// (text that is not UTF-8 included) is the core's `invalid_option` for the option `store`.
///
/// # Safety
/// `store` is NULL or a NUL-terminated string, only read during the call.
pub(crate) unsafe fn spec(store: *const c_char, func: &str) -> Result<StoreSpec, sg_result> {
    if store.is_null() {
        return Err(null(func, "store"));
    }
    // SAFETY: non-NULL and NUL-terminated (caller contract).
    let bytes = unsafe { CStr::from_ptr(store) }.to_bytes();
    let parsed = match core::str::from_utf8(bytes) {
        Ok(text) => text.parse::<StoreSpec>(),
        Err(e) => Err(Error::InvalidOption {
            option: "store",
            value: String::from_utf8_lossy(bytes).into_owned(),
            expected: format!("UTF-8 text (not UTF-8 at byte {})", e.valid_up_to()),
        }),
    };
    parsed.map_err(from_core)
}

/// The clock of a limiter in a store: the default clock for a NULL `clock` (on a region it
/// reads the region's timeline, which every process shares), else a share of the manual one.
///
/// # Safety
/// `clock` is NULL or a live handle (of any kind).
pub(crate) unsafe fn clock(
    clock: *const crate::sg_manual_clock,
    func: &str,
) -> Result<AnyClock, sg_result> {
    if clock.is_null() {
        return Ok(AnyClock::default());
    }
    // SAFETY: forwarded caller contract.
    unsafe { crate::clock::manual(clock, func) }
}
