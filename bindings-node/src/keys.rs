//! Keys of a `KeyedLimiter`, read straight from the JavaScript value into bytes by the core's
//! one key rule (`sluicegate::IntKey`, docs/SEMANTICS.md "Keys"):
//!
//! * a string: its UTF-8 bytes (copied to the stack when short); a string that is not
//!   well-formed UTF-16 (a lone surrogate, which has no UTF-8 form) is refused, where Node-API
//!   would silently turn it into U+FFFD and so give distinct strings one bucket;
//! * a `Buffer` or `Uint8Array`: its bytes, borrowed for the call (no copy), or copied first
//!   when they live in a `SharedArrayBuffer` (another thread may write them meanwhile);
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
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

const STACK: usize = 256;

const NOT_A_KEY: &str =
    "a key must be a string, a Buffer or Uint8Array, a safe-integer number or a BigInt";

const NOT_WELL_FORMED: &str = "a string key must be well-formed UTF-16: this one has a lone \
     surrogate, which has no UTF-8 form (Node would make it U+FFFD, one bucket for distinct \
     keys); key by a Buffer of the bytes instead";

/// Whether Node-API's UTF-8 form `s` of a string may stand for a lone surrogate: it holds
/// U+FFFD (`EF BF BD`, what `napi_get_value_string_utf8` writes for one) or a surrogate's
/// own three bytes (`ED A0..BF ..`, should a Node write them as they are). ASCII, the
/// common key, is ruled out by one vectorised pass; only a match is checked against the
/// string's UTF-16 (`well_formed`).
#[inline]
fn may_hide_surrogate(s: &[u8]) -> bool {
    !s.is_ascii()
        && s.windows(3)
            .any(|w| matches!(w, [0xEF, 0xBF, 0xBD] | [0xED, 0xA0..=0xBF, _]))
}

/// Whether the string `v` is well-formed UTF-16 (no lone surrogate), read from its UTF-16.
///
/// # Safety
/// `env` and `v` belong to the callback running on this thread, and `v` is a string.
#[cold]
unsafe fn well_formed(env: sys::napi_env, v: sys::napi_value) -> bool {
    let mut len = 0usize;
    // SAFETY: `v` is a string; a null buffer asks only for the length (in UTF-16 units).
    unsafe { sys::napi_get_value_string_utf16(env, v, ptr::null_mut(), 0, &mut len) };
    let mut units = vec![0u16; len + 1];
    let mut written = 0usize;
    // SAFETY: `units` has room for `len` units and the NUL Node-API writes.
    unsafe { sys::napi_get_value_string_utf16(env, v, units.as_mut_ptr(), len + 1, &mut written) };
    char::decode_utf16(units[..written].iter().copied()).all(|c| c.is_ok())
}

/// Calls `f` with the string `v`'s UTF-8 bytes `s`, or refuses `v` if it is not well-formed.
///
/// # Safety
/// As [`well_formed`].
#[inline]
unsafe fn checked_str<R>(
    env: sys::napi_env,
    v: sys::napi_value,
    s: &[u8],
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, JsErr> {
    // SAFETY: forwarded caller contract.
    if may_hide_surrogate(s) && !unsafe { well_formed(env, v) } {
        return Err(invalid_arg(NOT_WELL_FORMED));
    }
    Ok(f(s))
}

/// Calls `f` with a copy of the `len` bytes at `data`, which another thread may be writing (a
/// `SharedArrayBuffer`'s): read with relaxed atomic loads, as V8 copies shared memory
/// (`base::Relaxed_Memcpy`), so that this side of a race is no data race; `f` then sees one
/// snapshot that nothing changes while the core hashes and compares it. On the stack up to
/// `STACK` bytes, else on the heap.
///
/// # Safety
/// `data` is valid for reads of `len` bytes, and aligned memory accessed by other threads only
/// through JavaScript (atomic or racy plain accesses, never a Rust reference), for the call.
#[cold]
unsafe fn with_shared_copy<R>(data: *mut u8, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
    let read = |i: usize| {
        // SAFETY: `i < len`: in bounds; u8 needs no alignment; the memory is only ever
        // accessed atomically, or by JavaScript's racy plain accesses (which the ECMAScript
        // memory model defines), while this reads it (caller contract).
        unsafe { AtomicU8::from_ptr(data.add(i)) }.load(Relaxed)
    };
    if len <= STACK {
        let mut buf = [0u8; STACK];
        for (i, b) in buf[..len].iter_mut().enumerate() {
            *b = read(i);
        }
        f(&buf[..len])
    } else {
        let copy: Vec<u8> = (0..len).map(read).collect();
        f(&copy)
    }
}

/// Calls `f` with the bytes of the key `v`.
///
/// # Safety
/// `env` and `v` belong to the callback running on this thread, and `f` calls no JavaScript
/// (a Buffer's bytes are borrowed for the duration of `f`, unless they are shared: then `f`
/// gets a copy).
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
                // SAFETY: live env and string value of this callback.
                return unsafe { checked_str(env, v, &buf[..len], f) };
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
            // SAFETY: live env and string value of this callback.
            unsafe { checked_str(env, v, &heap[..written], f) }
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
                let mut buffer: sys::napi_value = ptr::null_mut();
                // SAFETY: `v` is a typed array; every out-pointer is valid (the offset is not
                // requested).
                unsafe {
                    sys::napi_get_typedarray_info(
                        env,
                        v,
                        &mut kind,
                        &mut len,
                        &mut data,
                        &mut buffer,
                        ptr::null_mut(),
                    )
                };
                if kind == sys::TypedarrayType::uint8_array {
                    if len == 0 || data.is_null() {
                        return Ok(f(&[]));
                    }
                    // Node-API's `napi_is_arraybuffer` is false for a SharedArrayBuffer (V8's
                    // `IsArrayBuffer`), the one kind of backing store another thread can write.
                    let mut plain = false;
                    // SAFETY: live env; `buffer` is the array's buffer; `plain` is a valid
                    // out-pointer (left false on a failure: then the bytes are copied).
                    unsafe { sys::napi_is_arraybuffer(env, buffer, &mut plain) };
                    if !plain {
                        // SAFETY: Node-API reports `len` bytes at `data`, alive while the
                        // array is (an argument of the running call; `f` calls no
                        // JavaScript, so it is not detached or shrunk meanwhile); other
                        // threads touch them only through JavaScript.
                        return Ok(unsafe { with_shared_copy(data.cast::<u8>(), len, f) });
                    }
                    // SAFETY: Node-API reports `len` bytes at `data`, in a buffer that is not
                    // shared, so only this thread can write them: alive while the array is
                    // (an argument of the running call), and neither moved, detached nor
                    // written while `f` runs, since `f` calls no JavaScript.
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
