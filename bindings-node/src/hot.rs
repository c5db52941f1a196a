//! The per-request calls, written against Node-API directly.
//!
//! A `#[napi]` function pays for generic argument validation and, for `External`s and class
//! instances, a process-wide registry lookup under a mutex on every call (napi 3): about 3-10x
//! the cost of the decision itself (see `bench/RESULTS.md`). These callbacks do exactly the
//! conversions they need: one `u32` handle, one cost, one boolean back, and the decision's
//! figures written to the environment's scratch buffer for `index.js` to read.
//!
//! Each `*_noop` twin performs the same conversions without a decision: the floor the
//! benchmark compares against.

use crate::args::{js_number, u64_arg, MAX_SAFE};
use crate::errors::{from_core, invalid_arg, throw, JsErr};
use crate::keys::with_key;
use crate::state::{Entry, EnvState};
use napi::sys;
use sluicegate::Decision;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

type Cb = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// The hand-written callbacks, as `(name, callback)` for the module's exports.
pub const EXPORTS: &[(&str, Cb)] = &[
    ("allow", allow),
    ("decide", decide),
    ("peek", peek),
    ("refund", refund),
    ("reserveWithin", reserve_within),
    ("allowNoop", allow_noop),
    // `decide` takes the same arguments and returns through the shared buffer: same floor.
    ("decideNoop", allow_noop),
    ("keyedAllow", keyed_allow),
    ("keyedDecide", keyed_decide),
    ("keyedPeek", keyed_peek),
    ("keyedRefund", keyed_refund),
    ("keyedAllowNoop", keyed_allow_noop),
    ("renderFields", render_fields),
];

/// Slots of the scratch buffer, as f64 (exact integers up to 2^53) and as u64 from `EXACT`.
pub mod slot {
    /// The capacity.
    pub const LIMIT: usize = 0;
    /// Whole tokens left.
    pub const REMAINING: usize = 1;
    /// `retry_after` in ns.
    pub const RETRY_NS: usize = 2;
    /// `reset_after` in ns.
    pub const RESET_NS: usize = 3;
    /// `retry_after` in ms, rounded up.
    pub const RETRY_MS: usize = 4;
    /// `reset_after` in ms, rounded up.
    pub const RESET_MS: usize = 5;
    /// The policy window in seconds.
    pub const WINDOW_S: usize = 6;
    /// 1.0 when one of the four figures above is not a safe integer: read them from `EXACT..`.
    pub const INEXACT: usize = 7;
    /// First of the four exact u64 copies (limit, remaining, retry ns, reset ns).
    pub const EXACT: usize = 8;
    /// 1.0 when shadow mode let a would-be rejection through (`Decision::shadow_rejected`).
    pub const SHADOW: usize = 12;
    /// `renderFields`' input, written by JavaScript as f64: 1.0 admitted, 0.0 rejected; then
    /// the limit, remaining, retry ns, reset ns and window seconds (safe integers).
    pub const RENDER_ALLOWED: usize = 16;
    pub const RENDER_FIGURES: usize = 17;
}

struct Call {
    env: sys::napi_env,
    argv: [sys::napi_value; 3],
    argc: usize,
    /// The function's data: this environment's `EnvState` (`lib.rs`).
    data: *mut c_void,
}

/// Reads up to three arguments.
///
/// # Safety
/// `env` and `info` are the running callback's.
#[inline(always)]
unsafe fn call(env: sys::napi_env, info: sys::napi_callback_info) -> Call {
    let mut c = Call {
        env,
        argv: [ptr::null_mut(); 3],
        argc: 3,
        data: ptr::null_mut(),
    };
    // SAFETY: `argv` has room for `argc` values; `this` is not requested; `data` is a valid
    // out-pointer.
    unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut c.argc,
            c.argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut c.data,
        )
    };
    c
}

impl Call {
    /// The handle (argument 0).
    #[inline(always)]
    fn handle(&self) -> Result<u32, JsErr> {
        let mut h = 0u32;
        // SAFETY: live env and argument of this callback (`undefined` when absent); `h` is a
        // valid out-pointer.
        if unsafe { sys::napi_get_value_uint32(self.env, self.argv[0], &mut h) }
            != sys::Status::napi_ok
        {
            return Err(invalid_arg("not a sluicegate handle"));
        }
        Ok(h)
    }

    /// The cost (argument `i`).
    #[inline(always)]
    fn cost(&self, i: usize) -> Result<u64, JsErr> {
        if self.argc <= i {
            return Err(invalid_arg("expected a cost"));
        }
        // SAFETY: live env and argument of this callback.
        unsafe { u64_arg(self.env, self.argv[i], "cost") }
    }

    /// The handle and the cost.
    #[inline(always)]
    fn handle_cost(&self) -> Result<(u32, u64), JsErr> {
        Ok((self.handle()?, self.cost(1)?))
    }

    /// Runs `f` with the key (argument 1) as bytes.
    #[inline(always)]
    fn key<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R, JsErr> {
        if self.argc < 2 {
            return Err(invalid_arg("expected a key"));
        }
        // SAFETY: live env and argument of this callback; callers' `f` runs core code only.
        unsafe { with_key(self.env, self.argv[1], f) }
    }

    /// This environment's state.
    #[inline(always)]
    fn state(&self) -> Result<&EnvState, JsErr> {
        if self.data.is_null() {
            return Err(invalid_arg(
                "sluicegate is not initialised in this environment",
            ));
        }
        // SAFETY: every hot function is created in `lib.rs` with its environment's
        // `Box<EnvState>` (also the instance data) as its data; it is freed only when the
        // environment is torn down, after its last callback.
        Ok(unsafe { &*self.data.cast::<EnvState>() })
    }

    #[inline(always)]
    fn boolean(&self, b: bool) -> sys::napi_value {
        let mut out = ptr::null_mut();
        // SAFETY: live env; `out` is a valid out-pointer.
        unsafe { sys::napi_get_boolean(self.env, b, &mut out) };
        out
    }
}

/// Runs `body`, turning an `Err` or a panic into a thrown JavaScript error.
#[inline(always)]
fn guard(
    env: sys::napi_env,
    body: impl FnOnce() -> Result<sys::napi_value, JsErr>,
) -> sys::napi_value {
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => invalid_arg("internal error: a panic in sluicegate (please report it)"),
    };
    // SAFETY: `env` is the running callback's.
    unsafe { throw(env, err) };
    ptr::null_mut()
}

#[inline(always)]
fn decision_of(e: &Entry, cost: u64) -> Result<Decision, JsErr> {
    e.try_acquire(cost)
}

/// Writes `d`'s figures to the scratch buffer.
#[inline(always)]
pub(crate) fn write_scratch(state: &EnvState, d: &Decision) {
    let (limit, remaining, retry, reset) = (
        d.limit(),
        d.remaining(),
        d.retry_after_nanos(),
        d.reset_after_nanos(),
    );
    let p = state.scratch.as_ptr().cast_mut();
    let f = p.cast::<f64>();
    let exact = [limit, remaining, retry, reset];
    let inexact = exact.iter().any(|&x| x as f64 > MAX_SAFE);
    // SAFETY: `p` points to `SCRATCH_WORDS` (16) u64 words owned by `state`, alive for the
    // environment; every index below is < 16. JavaScript reads this memory only between
    // calls, on this same thread, so no access races with these writes. (The buffer is
    // shared with JavaScript through an ArrayBuffer, hence raw writes, not `&mut`.)
    unsafe {
        f.add(slot::LIMIT).write(limit as f64);
        f.add(slot::REMAINING).write(remaining as f64);
        f.add(slot::RETRY_NS).write(retry as f64);
        f.add(slot::RESET_NS).write(reset as f64);
        f.add(slot::RETRY_MS)
            .write(retry.div_ceil(1_000_000) as f64);
        f.add(slot::RESET_MS)
            .write(reset.div_ceil(1_000_000) as f64);
        f.add(slot::WINDOW_S).write(d.window_secs() as f64);
        f.add(slot::INEXACT).write(if inexact { 1.0 } else { 0.0 });
        f.add(slot::SHADOW)
            .write(if d.shadow_rejected() { 1.0 } else { 0.0 });
        if inexact {
            for (i, x) in exact.iter().enumerate() {
                p.add(slot::EXACT + i).write(*x);
            }
        }
    }
}

/// `renderFields(renderer) -> string`: the HTTP fields of the decision whose figures
/// JavaScript wrote to the scratch buffer (`slot::RENDER_*`), rendered by the core's
/// `Decision::headers` in the style and policy of `renderer` (`headerRenderer`), as one string
/// `name\nvalue\nname\nvalue...` (empty for no fields): one string crosses to JavaScript
/// where `renderHeaders` builds an array of them. The figures are checked as `u64_arg` checks
/// an argument.
unsafe extern "C" fn render_fields(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let id = c.handle()?;
        let state = c.state()?;
        let f = state.scratch.as_ptr().cast::<f64>();
        // SAFETY: `f` points to `SCRATCH_WORDS` (24) words owned by `state`; every index is
        // below 24. JavaScript writes this memory only between calls, on this thread.
        let read = |i: usize| unsafe { f.add(i).read() };
        let mut n = [0u64; 5];
        for (k, x) in n.iter_mut().enumerate() {
            let v = read(slot::RENDER_FIGURES + k);
            if !((0.0..=MAX_SAFE).contains(&v) && v.fract() == 0.0) {
                return Err(invalid_arg(format!(
                    "a decision's figures must be non-negative safe integers, got {}",
                    js_number(v)
                )));
            }
            *x = v as u64;
        }
        let d = Decision::from_figures(
            read(slot::RENDER_ALLOWED) != 0.0,
            n[0],
            n[1],
            n[2],
            n[3],
            n[4],
        );
        let text = state
            .with_renderer(id, |style, policy| {
                let mut text = String::with_capacity(128 + policy.len());
                d.for_each_header(style, policy, |name, value| {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(name);
                    text.push('\n');
                    text.push_str(value);
                });
                text
            })
            .ok_or_else(|| invalid_arg("not a header renderer"))?;
        let mut out = ptr::null_mut();
        // The core's fields are ASCII, which Latin-1 reads as it is (V8 then copies the bytes
        // without decoding UTF-8).
        debug_assert!(text.is_ascii());
        // SAFETY: live env; `text` is `text.len()` bytes of ASCII (valid Latin-1); `out` is a
        // valid out-pointer.
        unsafe {
            sys::napi_create_string_latin1(env, text.as_ptr().cast(), text.len() as isize, &mut out)
        };
        Ok(out)
    })
}

/// `allow(handle, cost) -> boolean`: the fast path (no figures).
unsafe extern "C" fn allow(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = c.handle_cost()?;
        let allowed = c.state()?.with(h, |e| decision_of(e, cost))??.allowed();
        Ok(c.boolean(allowed))
    })
}

/// `decide(handle, cost) -> boolean`, with the figures in the scratch buffer.
unsafe extern "C" fn decide(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = c.handle_cost()?;
        let state = c.state()?;
        let d = state.with(h, |e| decision_of(e, cost))??;
        write_scratch(state, &d);
        Ok(c.boolean(d.allowed()))
    })
}

/// `peek(handle) -> boolean`, figures in the scratch buffer: a limiter's or a composite's
/// current state by the core's `peek` (changing nothing, and not counted by `metrics`).
unsafe extern "C" fn peek(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let h = c.handle()?;
        let state = c.state()?;
        let d = state.with(h, |e| e.peek())??;
        write_scratch(state, &d);
        Ok(c.boolean(d.allowed()))
    })
}

/// `refund(handle, cost) -> undefined`.
unsafe extern "C" fn refund(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = c.handle_cost()?;
        c.state()?.with(h, |e| e.refund(cost))??;
        Ok(ptr::null_mut())
    })
}

/// `reserveWithin(handle, cost, maxWaitNs) -> boolean`, figures in the scratch buffer: the
/// core's `reserve_within` (a leaky queue admits only if the wait until the slot is at most
/// `maxWaitNs`; other algorithms decide as `decide`).
unsafe extern "C" fn reserve_within(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = c.handle_cost()?;
        if c.argc < 3 {
            return Err(invalid_arg("expected maxWaitNs"));
        }
        // SAFETY: live env and argument of this callback.
        let max_wait = unsafe { u64_arg(c.env, c.argv[2], "maxWaitNs") }?;
        let state = c.state()?;
        let d = state.with(h, |e| {
            e.single()?
                .reserve_within(cost, std::time::Duration::from_nanos(max_wait))
                .map_err(from_core)
        })??;
        write_scratch(state, &d);
        Ok(c.boolean(d.allowed()))
    })
}

/// The floor of `allow` and `decide`: the same conversions and result, no state, no decision.
unsafe extern "C" fn allow_noop(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = c.handle_cost()?;
        Ok(c.boolean(u64::from(h) <= cost))
    })
}

/// `keyedAllow(handle, key, cost) -> boolean`.
unsafe extern "C" fn keyed_allow(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = (c.handle()?, c.cost(2)?);
        let d = c.state()?.with(h, |e| {
            let l = e.keyed()?;
            c.key(|k| l.try_acquire(k, cost).map_err(from_core))?
        })??;
        Ok(c.boolean(d.allowed()))
    })
}

/// `keyedDecide(handle, key, cost) -> boolean`, figures in the scratch buffer.
unsafe extern "C" fn keyed_decide(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = (c.handle()?, c.cost(2)?);
        let state = c.state()?;
        let d = state.with(h, |e| {
            let l = e.keyed()?;
            c.key(|k| l.try_acquire(k, cost).map_err(from_core))?
        })??;
        write_scratch(state, &d);
        Ok(c.boolean(d.allowed()))
    })
}

/// `keyedPeek(handle, key) -> true`, figures in the scratch buffer; creates no bucket.
unsafe extern "C" fn keyed_peek(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let h = c.handle()?;
        let state = c.state()?;
        let d = state.with(h, |e| {
            let l = e.keyed()?;
            c.key(|k| l.peek(k).map_err(from_core))?
        })??;
        write_scratch(state, &d);
        Ok(c.boolean(d.allowed()))
    })
}

/// `keyedRefund(handle, key, cost) -> undefined`.
unsafe extern "C" fn keyed_refund(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = (c.handle()?, c.cost(2)?);
        c.state()?.with(h, |e| {
            let l = e.keyed()?;
            c.key(|k| l.refund(k, cost).map_err(from_core))?
        })??;
        Ok(ptr::null_mut())
    })
}

/// The floor of `keyedAllow`: the same conversions (key bytes included), no decision.
unsafe extern "C" fn keyed_allow_noop(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node passes this callback's own env and info.
    let c = unsafe { call(env, info) };
    guard(env, || {
        let (h, cost) = (c.handle()?, c.cost(2)?);
        let n = c.key(|k| k.len())?;
        Ok(c.boolean(u64::from(h) + n as u64 <= cost))
    })
}
