//! Conversions of JavaScript arguments, with one error for every wrong type or value.

use crate::errors::{invalid_arg, JsErr};
use napi::sys;

/// `Number.MAX_SAFE_INTEGER`: larger numbers are not exact integers in a double.
pub const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// `f` as JavaScript writes it where Rust's spelling differs: `Infinity`, `-Infinity` (Rust:
/// `inf`), `0` for -0, and exponents below 1e-6 (`1e-7`) and from 1e21 (`1e+300`, where Rust
/// writes 301 digits).
pub fn js_number(f: f64) -> String {
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if f == 0.0 {
        return "0".to_string(); // -0 too, as String(-0) is
    }
    if f.abs() < 1e-6 {
        return format!("{f:e}"); // 1e-7, 1.5e-10
    }
    if f.abs() >= 1e21 {
        let s = format!("{f:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    f.to_string()
}

/// A non-negative integer given as a safe-integer `number` or a `BigInt` within `u64`.
///
/// # Safety
/// `env` and `v` must belong to the callback currently running on this thread.
#[inline]
pub unsafe fn u64_arg(env: sys::napi_env, v: sys::napi_value, what: &str) -> Result<u64, JsErr> {
    let mut f = 0f64;
    // SAFETY: live env and value (caller's contract); `f` is a valid out-pointer. A non-number
    // yields a status, not a pending exception.
    if unsafe { sys::napi_get_value_double(env, v, &mut f) } == sys::Status::napi_ok {
        // NaN fails both comparisons.
        if (0.0..=MAX_SAFE).contains(&f) && f.fract() == 0.0 {
            return Ok(f as u64);
        }
        return Err(invalid_arg(format!(
            "{what} must be a non-negative safe integer or a BigInt, got {}",
            js_number(f)
        )));
    }
    let (mut x, mut lossless) = (0u64, false);
    // SAFETY: as above; a non-BigInt yields a status, not an exception.
    if unsafe { sys::napi_get_value_bigint_uint64(env, v, &mut x, &mut lossless) }
        == sys::Status::napi_ok
    {
        if lossless {
            return Ok(x);
        }
        return Err(invalid_arg(format!(
            "{what} must be a BigInt between 0 and 2^64-1"
        )));
    }
    Err(invalid_arg(format!("{what} must be a number or a BigInt")))
}

#[cfg(test)]
mod tests {
    use super::js_number;

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        for (f, js) in [
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
            (1.5, "1.5"),
            (-1.0, "-1"),
            (1e300, "1e+300"),
            (-2.5e21, "-2.5e+21"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (-0.0, "0"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-1.5e-10, "-1.5e-10"),
        ] {
            assert_eq!(js_number(f), js, "{f}");
        }
    }
}
