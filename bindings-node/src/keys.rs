//! Keys of a `KeyedLimiter`, read straight from the JavaScript value into bytes by the core's
//! one key rule (`sluicegate::IntKey`, docs/SEMANTICS.md "Keys"):
//!
//! * a string: its UTF-8 bytes (copied to the stack when short);
//! * a `Buffer` or `Uint8Array`: its bytes, borrowed for the call (no copy);
//! * an integer: a safe-integer `number` or a `BigInt` (within 128 bits): its decimal digits
//!   (`IntKey`), so `42`, `42n` and `"42"` name one bucket.
//!
//! Anything else (undefined, null, a fraction, NaN, a larger BigInt, an object) is an
//! `ERR_SLUICEGATE_INVALID_ARG` error.

use crate::args::{js_number, MAX_SAFE};
use crate::errors::{invalid_arg, JsErr};
use napi::sys;
use sluicegate::IntKey;
use std::ffi::c_void;
use std::ptr;

const STACK: usize = 256;

const NOT_A_KEY: &str =
    "a key must be a string, a Buffer or Uint8Array, a safe-integer number or a BigInt";

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
                    "a number key must be a safe integer, got {}",
                    js_number(x)
                )));
            }
            Ok(f(IntKey::new(x as i128).as_bytes()))
        }
        sys::ValueType::napi_bigint => {
            let (mut sign, mut count) = (0, 2usize);
            let mut words = [0u64; 2];
            // SAFETY: `v` is a BigInt; `words` has room for `count` words, and Node-API sets
            // `count` to the words the value needs (more than 2: it did not fit).
            unsafe {
                sys::napi_get_value_bigint_words(env, v, &mut sign, &mut count, words.as_mut_ptr())
            };
            let magnitude = u128::from(words[0]) | (u128::from(words[1]) << 64);
            let n = match (count <= 2, sign != 0) {
                (true, false) => i128::try_from(magnitude).ok(),
                (true, true) => 0i128.checked_sub_unsigned(magnitude),
                (false, _) => None,
            };
            match n {
                Some(n) => Ok(f(IntKey::new(n).as_bytes())),
                None => Err(invalid_arg(
                    "a BigInt key must be between -2^127 and 2^127-1",
                )),
            }
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
            Err(invalid_arg(NOT_A_KEY))
        }
        _ => Err(invalid_arg(NOT_A_KEY)),
    }
}
