//! Node.js bindings for sluicegate (npm package `sluicegate`).
//!
//! Thin by design: argument conversion and error mapping only; every decision is the core's.
//! `index.js` builds the JavaScript API (classes, `Decision` objects, `acquire()` promises)
//! over the functions exported here:
//!
//! * `hot.rs`: the per-request calls, hand-written against Node-API (see there why);
//! * `api.rs`: construction, inspection and the `ManualClock` class, through `#[napi]`;
//! * `remote.rs`: the calls on a Redis store, as Promises (the event loop never waits);
//! * `ops.rs`: live reconfiguration, shadow mode, counters, Prometheus text, rejection hook;
//! * `acquire.rs`: `acquire()`'s plan (the core's), polled from `index.js`'s timers;
//! * `state.rs`: per-environment handle slab and scratch buffer, shared-limiter registry;
//! * `errors.rs`: the one core-error mapping; `args.rs`: number/BigInt conversion;
//!   `keys.rs`: keys (string, Buffer, integer) as bytes by the core's key rule.

// Under `cargo test` napi-rs registers nothing, so the exported functions look unused.
#![cfg_attr(test, allow(dead_code))]

mod acquire;
mod api;
mod args;
mod client;
mod errors;
mod hot;
mod keys;
mod ops;
mod remote;
mod state;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::ffi::c_void;
use std::ptr;

/// Frees the environment's state when Node tears the environment down.
unsafe extern "C" fn finalize_state(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<EnvState>` leaked in `init`, handed back exactly once.
    drop(unsafe { Box::from_raw(data.cast::<state::EnvState>()) });
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::GenericFailure,
            format!("sluicegate init: {what} failed"),
        ))
    }
}

/// Before any environment starts: the runtime napi settles the Redis calls' Promises on.
#[napi_derive::module_init]
fn init_runtime() {
    remote::configure_runtime();
}

/// Module initialisation: per-environment state, the scratch buffer and the hot callbacks.
#[napi(module_exports)]
pub fn init(mut exports: Object, env: Env) -> Result<()> {
    let raw_env = env.raw();
    let state = Box::into_raw(Box::new(state::EnvState::new()));
    // SAFETY: `state` is a live heap allocation that `finalize_state` frees; this addon sets
    // no other instance data (napi-rs leaves the slot to the addon).
    let status = unsafe {
        sys::napi_set_instance_data(raw_env, state.cast(), Some(finalize_state), ptr::null_mut())
    };
    check(status, "napi_set_instance_data")?;
    let mut buf = ptr::null_mut();
    // SAFETY: the scratch words live in the `EnvState` (a separate heap block that never
    // moves) until the environment is torn down, when no JavaScript can read the buffer;
    // no finalizer, because the state owns the memory.
    let status = unsafe {
        sys::napi_create_external_arraybuffer(
            raw_env,
            (*state).scratch.as_mut_ptr().cast(),
            state::SCRATCH_WORDS * 8,
            None,
            ptr::null_mut(),
            &mut buf,
        )
    };
    check(status, "napi_create_external_arraybuffer")?;
    // SAFETY: `buf` was just created in this env.
    exports.set_named_property("scratch", unsafe {
        Unknown::from_raw_unchecked(raw_env, buf)
    })?;
    for (name, cb) in hot::EXPORTS {
        let mut f = ptr::null_mut();
        // SAFETY: `name` is valid UTF-8 of the given length; `cb` is an `extern "C"` callback
        // with Node-API's signature. Its data is this environment's state (alive as long as
        // the environment, hence as the function), so a call gets it from the
        // `napi_get_cb_info` it makes anyway instead of a second `napi_get_instance_data`.
        let status = unsafe {
            sys::napi_create_function(
                raw_env,
                name.as_ptr().cast(),
                name.len() as isize,
                Some(*cb),
                state.cast(),
                &mut f,
            )
        };
        check(status, "napi_create_function")?;
        // SAFETY: `f` was just created in this env.
        exports.set_named_property(name, unsafe { Unknown::from_raw_unchecked(raw_env, f) })?;
    }
    Ok(())
}
