//! The panic boundary. Unwinding out of an `extern "C"` function aborts the process, so every
//! exported body runs inside `catch_unwind`, and a panic becomes `SG_ERR_PANIC` (or the
//! function's documented default) plus a last-error detail.
//!
//! The macros go *inside* each function body, so every `extern "C" fn` signature stays
//! literal in the source and cbindgen reads it without expanding macros.

use crate::error::{fail, sg_result};
use std::any::Any;

/// Records the panic as this thread's last error; the caller then returns its default.
pub(crate) fn caught(payload: Box<dyn Any + Send>) {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    fail(
        sg_result::SG_ERR_PANIC,
        format_args!("sluicegate panicked (a bug: please report it): {what}"),
    );
}

/// Runs a body of type `Result<(), sg_result>` inside the panic guard; `Ok(())` becomes
/// `SG_OK`, `Err(code)` that code (its detail is already recorded), a panic `SG_ERR_PANIC`.
macro_rules! ffi {
    ($body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
            || -> ::core::result::Result<(), $crate::error::sg_result> { $body },
        )) {
            Ok(Ok(())) => $crate::error::sg_result::SG_OK,
            Ok(Err(code)) => code,
            Err(payload) => {
                $crate::panic::caught(payload);
                $crate::error::sg_result::SG_ERR_PANIC
            }
        }
    };
}

/// Runs a body returning a plain value inside the panic guard; a panic returns `$default`.
macro_rules! ffi_or {
    ($default:expr, $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(value) => value,
            Err(payload) => {
                $crate::panic::caught(payload);
                $default
            }
        }
    };
}
