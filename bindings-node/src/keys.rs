//! Keys of a `KeyedLimiter`, read straight from the JavaScript value into bytes.
//!
//! * a string: its UTF-8 bytes (copied to the stack when short);
//! * a `Buffer` or `Uint8Array`: its bytes, borrowed for the call (no copy);
//! * an integer `number` (safe range): its decimal digits, so `42` and `"42"` name one bucket.
//!
//! Anything else (undefined, null, a fraction, NaN, a BigInt, an object) is an
//! `ERR_SLUICEGATE_INVALID_ARG` error.

use crate::args::MAX_SAFE;
use crate::errors::{invalid_arg, JsErr};
use napi::sys;
use std::ffi::c_void;
use std::io::Write;
use std::ptr;

const STACK: usize = 256;

/// Calls `f` with the bytes of the key `v`.
///
/// # Safety
/// `env` and `v` belong to the callback running on this thread, and `f` calls no JavaScript
/// (a Buffer's bytes are borrowed for the duration of `f`).
#[inline]
pub unsafe fn with_key<R>(
    env: sys::napi_env,
    v: sys::napi_value,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, JsErr> {
    let mut ty = 0;
    // SAFETY: live env and value; `ty` is a valid out-pointer.
    unsafe { sys::napi_typeof(env, v, &mut ty) };
    match ty {
        sys::ValueType::napi_string => {
            let mut buf = [0u8; STACK];
            let mut len = 0usize;
            // SAFETY: `buf` has room for STACK bytes including the NUL Node-API writes.
            unsafe {
                sys::napi_get_value_string_utf8(env, v, buf.as_mut_ptr().cast(), STACK, &mut len)
            };
            // Node-API writes at most STACK - 1 bytes, and only whole characters (up to 4 bytes
            // each): a longer string stops within 4 bytes of that, so only `len` below that
            // margin proves the whole string was written. (Testing `len < STACK - 1` let keys of
            // 2- and 4-byte characters be cut at 254 or 252 bytes: distinct keys shared a bucket.)
            if len < STACK - 4 {
                return Ok(f(&buf[..len]));
            }
            // Possibly truncated: ask for the length, then copy the whole string.
            // SAFETY: a null buffer asks only for the length.
            unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) };
            let mut heap = vec![0u8; len + 1];
            let mut written = 0usize;
            // SAFETY: `heap` has room for `len` bytes and the NUL.
            unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    v,
                    heap.as_mut_ptr().cast(),
                    len + 1,
                    &mut written,
                )
            };
            Ok(f(&heap[..written]))
        }
        sys::ValueType::napi_number => {
            let mut x = 0f64;
            // SAFETY: `v` is a number; `x` is a valid out-pointer.
            unsafe { sys::napi_get_value_double(env, v, &mut x) };
            if x.fract() != 0.0 || !(-MAX_SAFE..=MAX_SAFE).contains(&x) {
                return Err(invalid_arg(format!(
                    "a number key must be a safe integer, got {x}"
                )));
            }
            let mut buf = [0u8; 24];
            let mut cur = &mut buf[..];
            // 17 digits and a sign at most: always fits.
            let _ = write!(cur, "{}", x as i64);
            let n = 24 - cur.len();
            Ok(f(&buf[..n]))
        }
        sys::ValueType::napi_object => {
            let mut is_ta = false;
            // SAFETY: live env and value.
            unsafe { sys::napi_is_typedarray(env, v, &mut is_ta) };
            if is_ta {
                let (mut kind, mut len) = (0, 0usize);
                let mut data: *mut c_void = ptr::null_mut();
                // SAFETY: `v` is a typed array; every out-pointer is valid (the ArrayBuffer
                // and offset are not requested).
                unsafe {
                    sys::napi_get_typedarray_info(
                        env,
                        v,
                        &mut kind,
                        &mut len,
                        &mut data,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                };
                if kind == sys::TypedarrayType::uint8_array {
                    if len == 0 || data.is_null() {
                        return Ok(f(&[]));
                    }
                    // SAFETY: Node-API reports `len` bytes at `data`, alive while the array
                    // is (it is an argument of the running call) and not moved or written
                    // while `f` runs, since `f` calls no JavaScript.
                    return Ok(f(unsafe {
                        std::slice::from_raw_parts(data.cast::<u8>(), len)
                    }));
                }
            }
            Err(invalid_arg(
                "a key must be a string, a Buffer or Uint8Array, or an integer number",
            ))
        }
        _ => Err(invalid_arg(
            "a key must be a string, a Buffer or Uint8Array, or an integer number",
        )),
    }
}
