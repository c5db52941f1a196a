//! Operating a limiter (docs/OPERATIONS.md): live reconfiguration, shadow mode, the counters'
//! snapshot, their Prometheus text (the core's `render_prometheus`) and the rejection hook.
//! Conversion only: every figure and the text are the core's.

use crate::api::env_state;
use crate::errors::{from_core, invalid_arg, JsErr};
use crate::remote::{figures, Figure};
use crate::state::Entry;
use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use sluicegate::{Decision, Metrics, Quota};

/// The entry a handle names, looking through a Redis-backed one (which refuses what its
/// store cannot do with the core's error).
fn inner(e: &Entry) -> &Entry {
    match e {
        Entry::Remote(inner) => inner,
        other => other,
    }
}

/// Changes the quota of a limiter or keyed limiter live (the core's `set_quota`, its carry
/// rule); a shared-memory region or Redis store refuses with
/// `ERR_SLUICEGATE_STORE_UNSUPPORTED`, another algorithm with `ERR_SLUICEGATE_INVALID_OPTION`.
#[napi]
pub fn set_quota(env: Env, handle: u32, quota: String) -> std::result::Result<(), JsErr> {
    let quota = quota.parse::<Quota>().map_err(from_core)?;
    env_state(&env)?.with(handle, |e| match inner(e) {
        Entry::Single(l) => l.set_quota(quota).map_err(from_core),
        Entry::Keyed(l) => l.set_quota(quota).map_err(from_core),
        _ => Err(invalid_arg(
            "a Composite has one quota per part: set it on a part",
        )),
    })?
}

/// `set_quota` at an explicit clock reading (simulations, tests).
#[napi(ts_args_type = "handle: number, quota: string, nowNs: bigint | number")]
pub fn set_quota_at(
    env: Env,
    handle: u32,
    quota: String,
    now_ns: Unknown,
) -> std::result::Result<(), JsErr> {
    let quota = quota.parse::<Quota>().map_err(from_core)?;
    let now = crate::api::u64_of(&now_ns, "nowNs")?;
    env_state(&env)?.with(handle, |e| match inner(e) {
        Entry::Single(l) => l.set_quota_at(quota, now).map_err(from_core),
        Entry::Keyed(l) => l.set_quota_at(quota, now).map_err(from_core),
        _ => Err(invalid_arg(
            "a Composite has one quota per part: set it on a part",
        )),
    })?
}

/// Turns shadow (dry-run) mode on or off.
#[napi]
pub fn set_shadow(env: Env, handle: u32, on: bool) -> std::result::Result<(), JsErr> {
    env_state(&env)?.with(handle, |e| {
        match inner(e) {
            Entry::Single(l) => l.set_shadow(on),
            Entry::Keyed(l) => l.set_shadow(on),
            _ => {
                return Err(invalid_arg(
                    "shadow mode is set on a Limiter or KeyedLimiter",
                ))
            }
        }
        Ok(())
    })?
}

/// Whether the limiter is in shadow mode.
#[napi]
pub fn is_shadow(env: Env, handle: u32) -> std::result::Result<bool, JsErr> {
    env_state(&env)?.with(handle, |e| match inner(e) {
        Entry::Single(l) => Ok(l.is_shadow()),
        Entry::Keyed(l) => Ok(l.is_shadow()),
        _ => Ok(false),
    })?
}

/// The core's snapshot of a limiter (`None`: counting is off; a composite counts nothing).
fn snapshot(e: &Entry) -> Option<Metrics> {
    match inner(e) {
        Entry::Single(l) => l.metrics(),
        Entry::Keyed(l) => l.metrics(),
        _ => None,
    }
}

/// A snapshot of the counters as `[allowed, rejected, shadowRejected, keysEvicted,
/// keyStoreFull, storeErrors, reconfigurations, keys (null: not a keyed limiter in this
/// process or a region), shadow]`, counts as numbers while safe integers, else BigInts; `null`
/// when the limiter was built without `metrics: true`.
#[napi(ts_return_type = "Array<number | bigint | boolean | null> | null")]
pub fn metrics_of(env: Env, handle: u32) -> std::result::Result<Option<Vec<Figure>>, JsErr> {
    let m = env_state(&env)?.with(handle, snapshot)?;
    Ok(m.map(|m| {
        vec![
            Figure::exact(m.allowed),
            Figure::exact(m.rejected),
            Figure::exact(m.shadow_rejected),
            Figure::exact(m.keys_evicted),
            Figure::exact(m.key_store_full),
            Figure::exact(m.store_errors),
            Figure::exact(m.reconfigurations),
            m.keys.map_or(Figure::Null, Figure::exact),
            Figure::Bool(m.shadow),
        ]
    }))
}

/// The Prometheus text (format 0.0.4) of the limiters `handles`, each with its label set
/// (`labels[i]`: `[name, value, name, value, ...]`), by the core's `render_prometheus`; a
/// limiter without counters is `ERR_SLUICEGATE_INVALID_ARG`, a bad or repeated label set the
/// core's `ERR_SLUICEGATE_INVALID_OPTION`.
#[napi]
pub fn render_prometheus(
    env: Env,
    labels: Vec<Vec<String>>,
    handles: Vec<u32>,
) -> std::result::Result<String, JsErr> {
    if labels.len() != handles.len() {
        return Err(invalid_arg("one label set per limiter"));
    }
    let state = env_state(&env)?;
    let mut pairs: Vec<Vec<(&str, &str)>> = Vec::with_capacity(labels.len());
    for flat in &labels {
        if flat.len() % 2 != 0 {
            return Err(invalid_arg("a label set is [name, value, ...] pairs"));
        }
        pairs.push(
            flat.chunks(2)
                .map(|p| (p[0].as_str(), p[1].as_str()))
                .collect(),
        );
    }
    let mut series: Vec<(&[(&str, &str)], Metrics)> = Vec::with_capacity(handles.len());
    for (h, l) in handles.iter().zip(&pairs) {
        let Some(m) = state.with(*h, snapshot)? else {
            return Err(invalid_arg(
                "a limiter counts nothing: build it with { metrics: true }",
            ));
        };
        series.push((l.as_slice(), m));
    }
    sluicegate::render_prometheus(&series).map_err(from_core)
}

/// What a rejection shows the JavaScript hook: the key (`None` for one bucket), the cost,
/// and the decision.
pub(crate) type Shown = (Option<Box<[u8]>>, u64, Decision);

/// The hook's threadsafe function: `index.js`'s wrapper, called on the JavaScript thread of
/// the limiter's environment (a decision may run on another: a worker sharing the limiter,
/// the Redis thread), after the decision returned. Weak: it keeps no event loop alive.
pub(crate) type Hook =
    ThreadsafeFunction<Shown, (), (Option<Buffer>, Figure, Vec<Figure>), Status, false, true>;

/// The JavaScript function given as `onReject` (what it returns is ignored).
pub(crate) type HookFn<'a> = Function<'a, (), ()>;

/// The threadsafe function of `on_reject` (`([key, cost, figures]) => void`: napi passes the
/// tuple as one array).
pub(crate) fn hook_of(f: Option<HookFn<'_>>) -> std::result::Result<Option<Hook>, JsErr> {
    let Some(f) = f else {
        return Ok(None);
    };
    let tsfn = f
        .build_threadsafe_function::<Shown>()
        .callee_handled::<false>()
        .weak::<true>()
        .build_callback(|ctx| {
            let (key, cost, d) = ctx.value;
            Ok((
                key.map(|k| Buffer::from(k.into_vec())),
                Figure::exact(cost),
                figures(&d),
            ))
        })
        .map_err(|e| invalid_arg(format!("onReject: {}", e.reason)))?;
    Ok(Some(tsfn))
}

/// Queues a rejection for the hook. Never blocks and never fails the decision: a queue that
/// is closing (the environment is shutting down) drops it.
pub(crate) fn show(hook: &Hook, key: Option<Box<[u8]>>, cost: u64, d: Decision) {
    let _ = hook.call((key, cost, d), ThreadsafeFunctionCallMode::NonBlocking);
}
