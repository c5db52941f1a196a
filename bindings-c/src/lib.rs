//! The C ABI of sluicegate: `libsluicegate.so` / `libsluicegate.a` and `include/sluicegate.h`.
//!
//! Conventions (bindings-c/README.md says them for C programmers): every symbol starts with
//! `sg_`; handles are opaque, made by `_new` and released by `_free`; a `const` handle may be
//! used from many threads at once; functions return an `sg_result` and write their
//! out-parameters only on `SG_OK`; every pointer is checked for NULL, every handle for its
//! kind; every body runs inside a panic guard (`panic.rs`), written inside the body so that
//! cbindgen reads the literal `extern "C" fn` signatures.
//!
//! This crate holds no engine logic: conversion, handle checks and the one error mapping.

// C names (`sg_limiter`, `SG_OK`) are the API.
#![allow(non_camel_case_types)]

#[macro_use]
mod panic;
mod clock;
mod composite;
mod decision;
mod error;
mod handle;
mod http;
mod keyed;
mod limiter;
mod ops;
mod options;
mod quota;
mod redis;
mod store;
#[cfg(test)]
mod tests;

pub use clock::{
    sg_manual_clock, sg_manual_clock_advance, sg_manual_clock_free, sg_manual_clock_new,
    sg_manual_clock_now, sg_manual_clock_set,
};
pub use composite::{
    sg_composite_refund, sg_composite_refund_at, sg_composite_try_acquire,
    sg_composite_try_acquire_at,
};
pub use decision::sg_decision;
pub use error::{sg_last_error_message, sg_result, sg_result_message, sg_result_name};
pub use http::sg_decision_headers;
pub use keyed::{
    sg_keyed_limiter, sg_keyed_limiter_acquire_timeout, sg_keyed_limiter_clear,
    sg_keyed_limiter_free, sg_keyed_limiter_len, sg_keyed_limiter_new,
    sg_keyed_limiter_new_in_store, sg_keyed_limiter_new_with_clock, sg_keyed_limiter_now,
    sg_keyed_limiter_peek, sg_keyed_limiter_refund, sg_keyed_limiter_refund_at,
    sg_keyed_limiter_remove, sg_keyed_limiter_sweep, sg_keyed_limiter_try_acquire,
    sg_keyed_limiter_try_acquire_at, SG_KEYED_DEFAULT_MAX_KEYS,
};
pub use limiter::{
    sg_limiter, sg_limiter_acquire_timeout, sg_limiter_cancel, sg_limiter_free, sg_limiter_new,
    sg_limiter_new_in_store, sg_limiter_new_with_clock, sg_limiter_now, sg_limiter_peek,
    sg_limiter_refund, sg_limiter_refund_at, sg_limiter_reserve, sg_limiter_try_acquire,
    sg_limiter_try_acquire_at,
};
pub use ops::{
    sg_keyed_limiter_is_shadow, sg_keyed_limiter_metrics, sg_keyed_limiter_new_observed,
    sg_keyed_limiter_set_quota, sg_keyed_limiter_set_quota_at, sg_keyed_limiter_set_shadow,
    sg_label, sg_limiter_is_shadow, sg_limiter_metrics, sg_limiter_new_observed,
    sg_limiter_set_quota, sg_limiter_set_quota_at, sg_limiter_set_shadow, sg_metrics, sg_observe,
    sg_reject_fn, sg_render_prometheus, sg_series,
};
pub use options::{sg_header_style, sg_on_full, sg_refill};
pub use quota::{
    sg_quota, sg_quota_free, sg_quota_get_info, sg_quota_info, sg_quota_new, sg_quota_parse,
    sg_quota_parse_len, sg_quota_set_initial, sg_quota_set_refill, sg_quota_to_string,
};
pub use redis::{sg_keyed_limiter_redis_stats, sg_limiter_redis_stats, sg_redis_stats};

/// The library's version, e.g. `"0.1.0"`: a static NUL-terminated string, never freed.
#[no_mangle]
pub extern "C" fn sg_version() -> *const core::ffi::c_char {
    ffi_or!(c"".as_ptr(), {
        const V: &core::ffi::CStr = match core::ffi::CStr::from_bytes_with_nul(
            concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
        ) {
            Ok(v) => v,
            Err(_) => panic!("version has a NUL"),
        };
        V.as_ptr()
    })
}
