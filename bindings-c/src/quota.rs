//! `sg_quota`: what a limiter allows, from a rate string or from parameters.

use crate::error::{fail, from_core, sg_result, write_text};
use crate::handle::{self, Handle};
use core::ffi::{c_char, CStr};
use sluicegate::{Quota, Refill};

/// A quota: `count` tokens per `period_ns`, a bucket of `burst` tokens, `initial` tokens at
/// creation, and a refill mode. Opaque; made by `sg_quota_parse` or `sg_quota_new`, released
/// by `sg_quota_free`. Limiters copy it, so it may be freed as soon as they are made.
pub struct sg_quota {
    _private: [u8; 0],
}

pub(crate) struct Q(pub(crate) Quota);

impl Handle for Q {
    type C = sg_quota;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:quota");
    const NAME: &'static str = "sg_quota";
}

/// How tokens come back (the rate string's `refill=` option).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_refill {
    /// Fractional tokens accrue continuously (the default): `count / period_ns` per ns.
    SG_REFILL_CONTINUOUS = 0,
    /// `count` whole tokens at each full period, on a grid anchored at the limiter's creation.
    SG_REFILL_INTERVAL = 1,
}

/// A quota's parameters, as `sg_quota_get_info` reports them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sg_quota_info {
    /// Tokens added per period.
    pub count: u64,
    /// The refill period in nanoseconds.
    pub period_ns: u64,
    /// The bucket's capacity (the `limit` of every decision).
    pub burst: u64,
    /// Tokens in a new bucket.
    pub initial: u64,
    /// An `sg_refill` value.
    pub refill: sg_refill,
}

/// Parses a rate string such as `"10/s; burst=50"`, `"100 per minute"`,
/// `"1/s; burst=4; initial=1; refill=interval"` or `"5/s; algorithm=gcra"` (grammar in
/// docs/SEMANTICS.md) and writes a new quota to `*out`.
///
/// Errors: `SG_ERR_PARSE` (the detail quotes the text and the byte offset; text that is not
/// UTF-8 is a parse error too) or `SG_ERR_INVALID_QUOTA` (it parses, but e.g. `burst=0`).
///
/// # Safety
/// `rate` is NULL or a NUL-terminated string; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_parse(rate: *const c_char, out: *mut *mut sg_quota) -> sg_result {
    ffi!({
        const F: &str = "sg_quota_parse";
        if rate.is_null() || out.is_null() {
            let arg = if rate.is_null() { "rate" } else { "out" };
            return Err(null(F, arg));
        }
        // SAFETY: non-NULL and NUL-terminated (caller contract); only read during this call.
        let bytes = unsafe { CStr::from_ptr(rate) }.to_bytes();
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { parse_into(bytes, out) }
    })
}

/// `sg_quota_parse` of the `rate_len` bytes at `rate` (no NUL needed, for runtimes whose
/// strings carry a length). A NUL byte inside the text is a parse error like any other
/// stray character; `rate` may be NULL only when `rate_len` is 0 (the empty string, a parse
/// error).
///
/// # Safety
/// `rate` is NULL or valid for `rate_len` bytes of reads; `out` is NULL or valid for one
/// write.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_parse_len(
    rate: *const u8,
    rate_len: usize,
    out: *mut *mut sg_quota,
) -> sg_result {
    ffi!({
        const F: &str = "sg_quota_parse_len";
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let bytes: &[u8] = if rate_len == 0 {
            &[]
        } else if rate.is_null() {
            return Err(fail(
                sg_result::SG_ERR_NULL_ARGUMENT,
                format_args!("{F}: `rate` is NULL but `rate_len` is {rate_len}"),
            ));
        } else if rate_len > isize::MAX as usize {
            return Err(fail(
                sg_result::SG_ERR_INVALID_ARGUMENT,
                format_args!("{F}: `rate_len` {rate_len} is larger than any object"),
            ));
        } else {
            // SAFETY: non-NULL and valid for `rate_len` reads (caller contract), at most
            // `isize::MAX` bytes; only read during this call.
            unsafe { core::slice::from_raw_parts(rate, rate_len) }
        };
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { parse_into(bytes, out) }
    })
}

/// Parses `bytes` and writes the quota to `out`.
///
/// # Safety
/// `out` is non-NULL and valid for one write.
unsafe fn parse_into(bytes: &[u8], out: *mut *mut sg_quota) -> Result<(), sg_result> {
    let text = core::str::from_utf8(bytes).map_err(|e| {
        fail(
            sg_result::SG_ERR_PARSE,
            format_args!(
                "invalid rate {:?}: not UTF-8 at byte {}",
                String::from_utf8_lossy(bytes),
                e.valid_up_to()
            ),
        )
    })?;
    let quota = text.parse::<Quota>().map_err(from_core)?;
    // SAFETY: forwarded caller contract.
    unsafe { out.write(handle::into_raw(Q(quota))) };
    Ok(())
}

/// Writes a new quota to `*out`: `count` tokens per `period_ns` nanoseconds, a bucket of
/// `burst` tokens starting full, continuous refill. `sg_quota_set_initial` and
/// `sg_quota_set_refill` change the rest.
///
/// Errors: `SG_ERR_INVALID_QUOTA` (a zero parameter, or a bucket whose exact arithmetic
/// would overflow: over 292 years to fill).
///
/// # Safety
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_new(
    count: u64,
    period_ns: u64,
    burst: u64,
    out: *mut *mut sg_quota,
) -> sg_result {
    ffi!({
        if out.is_null() {
            return Err(null("sg_quota_new", "out"));
        }
        let quota = Quota::try_new(count, period_ns, burst).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(Q(quota))) };
        Ok(())
    })
}

fn null(func: &str, arg: &str) -> sg_result {
    fail(
        sg_result::SG_ERR_NULL_ARGUMENT,
        format_args!("{func}: `{arg}` is NULL"),
    )
}

/// Sets the tokens a new bucket holds (default: the burst). On error the quota is unchanged.
///
/// Errors: `SG_ERR_INVALID_QUOTA` (`initial` above the burst).
///
/// # Safety
/// `quota` is NULL or a live handle, not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_set_initial(quota: *mut sg_quota, initial: u64) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract (exclusive access).
        let q = unsafe { handle::borrow_mut::<Q>(quota, "sg_quota_set_initial", "quota")? };
        let changed = q.0.initial(initial);
        changed.validate().map_err(from_core)?;
        q.0 = changed;
        Ok(())
    })
}

/// Sets the refill mode to an `sg_refill` value. On error the quota is unchanged.
///
/// Errors: `SG_ERR_INVALID_ARGUMENT` (not an `sg_refill` value), `SG_ERR_INVALID_QUOTA`
/// (the mode's arithmetic would overflow for this quota).
///
/// # Safety
/// `quota` is NULL or a live handle, not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_set_refill(quota: *mut sg_quota, refill: u32) -> sg_result {
    ffi!({
        const F: &str = "sg_quota_set_refill";
        // SAFETY: forwarded caller contract (exclusive access).
        let q = unsafe { handle::borrow_mut::<Q>(quota, F, "quota")? };
        let mode = match refill {
            r if r == sg_refill::SG_REFILL_CONTINUOUS as u32 => Refill::Continuous,
            r if r == sg_refill::SG_REFILL_INTERVAL as u32 => Refill::Interval,
            other => {
                return Err(fail(
                    sg_result::SG_ERR_INVALID_ARGUMENT,
                    format_args!("{F}: {other} is not an sg_refill value (0 or 1)"),
                ))
            }
        };
        let changed = q.0.refill(mode);
        changed.validate().map_err(from_core)?;
        q.0 = changed;
        Ok(())
    })
}

/// Writes the quota's parameters to `*out`.
///
/// # Safety
/// `quota` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_get_info(
    quota: *const sg_quota,
    out: *mut sg_quota_info,
) -> sg_result {
    ffi!({
        const F: &str = "sg_quota_get_info";
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, F, "quota")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let q = &q.0;
        let info = sg_quota_info {
            count: q.count(),
            period_ns: q.period_ns(),
            burst: q.capacity(),
            initial: q.initial_tokens(),
            refill: match q.refill_mode() {
                Refill::Continuous => sg_refill::SG_REFILL_CONTINUOUS,
                Refill::Interval => sg_refill::SG_REFILL_INTERVAL,
            },
        };
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(info) };
        Ok(())
    })
}

/// Writes the canonical rate string of the quota (which `sg_quota_parse` reads back to an
/// equal quota, e.g. `"10/s; burst=50"`) into `buf`, like `sg_result_message`.
///
/// # Safety
/// `quota` is NULL or a live handle; `buf` is NULL (only with `len == 0`) or valid for `len`
/// bytes of writes; `out_written` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_to_string(
    quota: *const sg_quota,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, "sg_quota_to_string", "quota")? };
        let text = q.0.to_string();
        // SAFETY: forwarded caller contract.
        unsafe { write_text(&text, buf, len, out_written) }
    })
}

/// Releases a quota. NULL is a no-op; a handle of another kind is left alone.
///
/// # Safety
/// `quota` is NULL or a live handle that nothing uses any more.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_free(quota: *mut sg_quota) {
    ffi_or!((), {
        // SAFETY: forwarded caller contract.
        unsafe { handle::free::<Q>(quota, "sg_quota_free") }
    })
}
