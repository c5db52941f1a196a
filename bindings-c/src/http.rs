//! HTTP response fields rendered from an `sg_decision` (the core's `Decision::headers`).

use crate::decision::sg_decision;
use crate::error::{fail, from_core, null, sg_result, write_output};
use crate::options;
use core::ffi::c_char;

/// Renders the HTTP response fields for `*decision` into `buf` as `Name: value\r\n` lines
/// (NUL-terminated; `*out_written` gets the bytes written, NUL excluded), like
/// `sg_result_message`. `policy` (`policy_len` bytes, NULL only with 0) names the policy in
/// the IETF fields; it is quoted as a Structured-Field string, with `"` and `\\` escaped and
/// every byte that is not printable ASCII replaced by `_`. The figures are the decision's
/// own (docs/SEMANTICS.md, "HTTP fields"); `window_s` is the `w` of `RateLimit-Policy`.
///
/// A buffer of `4 * policy_len + 256` bytes holds every rendering; a smaller one may get
/// `SG_ERR_BUFFER_TOO_SMALL` and a truncated (still NUL-terminated) text.
///
/// Errors: `SG_ERR_NULL_ARGUMENT`, `SG_ERR_INVALID_OPTION` (`style` is not an
/// `sg_header_style` value), `SG_ERR_INVALID_ARGUMENT` (`policy_len` larger than any object),
/// `SG_ERR_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `decision` is NULL or valid for one read; `policy` is NULL or valid for `policy_len`
/// bytes of reads; `buf` is NULL (only with `len == 0`) or valid for `len` bytes of writes;
/// `out_written` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_decision_headers(
    decision: *const sg_decision,
    style: u32,
    policy: *const u8,
    policy_len: usize,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> sg_result {
    ffi!({
        const F: &str = "sg_decision_headers";
        if decision.is_null() {
            return Err(null(F, "decision"));
        }
        let style = options::header_style(style).map_err(from_core)?;
        let policy: &[u8] = if policy_len == 0 {
            &[]
        } else if policy.is_null() {
            return Err(fail(
                sg_result::SG_ERR_NULL_ARGUMENT,
                format_args!("{F}: `policy` is NULL but `policy_len` is {policy_len}"),
            ));
        } else if policy_len > isize::MAX as usize {
            return Err(fail(
                sg_result::SG_ERR_INVALID_ARGUMENT,
                format_args!("{F}: `policy_len` {policy_len} is larger than any object"),
            ));
        } else {
            // SAFETY: non-NULL and valid for `policy_len` reads (caller contract), at most
            // `isize::MAX` bytes; only read during this call.
            unsafe { core::slice::from_raw_parts(policy, policy_len) }
        };
        // Bytes that are not UTF-8 become U+FFFD, which the renderer replaces by `_`.
        let policy = String::from_utf8_lossy(policy);
        if buf.is_null() && len > 0 {
            return Err(null(F, "buf"));
        }
        // SAFETY: non-NULL and valid for one read (caller contract); `sg_decision` is plain
        // data in which every bit pattern but `allowed`'s is valid, so read it field by
        // field with `allowed` as a byte (any non-zero byte is true).
        let d = unsafe { read_decision(decision) };
        let mut text = String::new();
        for (name, value) in d.to_core().headers(style, &policy) {
            text.push_str(name);
            text.push_str(": ");
            text.push_str(&value);
            text.push_str("\r\n");
        }
        // SAFETY: forwarded caller contract.
        unsafe { write_output(F, &text, buf, len, out_written) }
    })
}

/// Reads a caller's decision without assuming that its `allowed` byte is 0 or 1.
///
/// # Safety
/// `p` is non-NULL, aligned and valid for one read of an `sg_decision`.
unsafe fn read_decision(p: *const sg_decision) -> sg_decision {
    // SAFETY: forwarded caller contract; `addr_of!` takes field addresses without making a
    // reference to a possibly invalid `bool`.
    unsafe {
        sg_decision {
            allowed: core::ptr::addr_of!((*p).allowed).cast::<u8>().read() != 0,
            limit: core::ptr::addr_of!((*p).limit).read(),
            remaining: core::ptr::addr_of!((*p).remaining).read(),
            retry_after_ns: core::ptr::addr_of!((*p).retry_after_ns).read(),
            reset_after_ns: core::ptr::addr_of!((*p).reset_after_ns).read(),
            window_s: core::ptr::addr_of!((*p).window_s).read(),
            shadow_rejected: core::ptr::addr_of!((*p).shadow_rejected)
                .cast::<u8>()
                .read()
                != 0,
        }
    }
}
