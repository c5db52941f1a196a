//! `sg_quota`: what a limiter allows, from a rate string or from parameters.

use crate::error::{fail, from_core, null, sg_result, write_text};
use crate::handle::{self, Handle};
use crate::options::{self, sg_refill};
use core::ffi::{c_char, CStr};
use sluicegate::Quota;

/// A quota: `count` tokens per `period_ns`, a bucket of `burst` tokens, `initial` tokens at
/// creation, and a refill mode. Opaque; made by `sg_quota_parse` or `sg_quota_new`, released
/// by `sg_quota_free`. Limiters copy it, so it may be freed as soon as they are made.
pub struct sg_quota {
    _private: [u8; 0],
}

impl Handle for Quota {
    type Opaque = sg_quota;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:quota");
    const NAME: &'static str = "sg_quota";
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
    unsafe { out.write(handle::into_raw(quota)) };
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
        unsafe { out.write(handle::into_raw(quota)) };
        Ok(())
    })
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
        let q = unsafe { handle::borrow_mut::<Quota>(quota, "sg_quota_set_initial", "quota")? };
        let changed = q.with_initial(initial);
        changed.validate().map_err(from_core)?;
        *q = changed;
        Ok(())
    })
}

/// Sets the refill mode to an `sg_refill` value. On error the quota is unchanged.
///
/// Errors: `SG_ERR_INVALID_OPTION` (not an `sg_refill` value), `SG_ERR_INVALID_QUOTA`
/// (the mode's arithmetic would overflow for this quota).
///
/// # Safety
/// `quota` is NULL or a live handle, not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn sg_quota_set_refill(quota: *mut sg_quota, refill: u32) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract (exclusive access).
        let q = unsafe { handle::borrow_mut::<Quota>(quota, "sg_quota_set_refill", "quota")? };
        let changed = q.with_refill(options::refill(refill).map_err(from_core)?);
        changed.validate().map_err(from_core)?;
        *q = changed;
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
        let q = unsafe { handle::borrow::<Quota>(quota, F, "quota")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let info = sg_quota_info {
            count: q.count(),
            period_ns: q.period_ns(),
            burst: q.burst(),
            initial: q.initial(),
            refill: q.refill().into(),
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
        crate::error::keeping_last_error(|| {
            // SAFETY: forwarded caller contract.
            let q = unsafe { handle::borrow::<Quota>(quota, "sg_quota_to_string", "quota")? };
            let text = q.to_string();
            // SAFETY: forwarded caller contract.
            unsafe { write_text(&text, buf, len, out_written) }
        })
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
        unsafe { handle::free::<Quota>(quota, "sg_quota_free") }
    })
}
