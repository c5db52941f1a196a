//! The calls that touch a Redis store, as Promises: the event loop never waits for the server.
//!
//! **The bridge.** The core's async calls (`try_acquire_async`, `peek_async`, `refund_async`,
//! `try_acquire_many_async`) are executor-agnostic: each hands its request to the core's one
//! Redis thread (which pipelines every caller's requests on one connection) and awaits a
//! channel. Such a future needs no executor of its own: `Task` polls it once on the JavaScript
//! thread (which sends the request), and again on the thread that wakes it (the core's Redis
//! thread, once the reply is in), which finishes the decision and settles the Promise through
//! napi's `JsDeferred` (a threadsafe function). Two thread hops a call, the fewest there can
//! be. napi's own `Env::spawn_future` would poll on a Tokio worker of napi's instead: two more
//! hops (in one quick, noisy run on the shared 2-core machine, 13k against 25k decisions/s at
//! 50 callers).
//!
//! **Blocking fallbacks.** What the core has only in blocking form (a composite's decision and
//! refund, `remove`, `clear`) runs on that runtime's blocking pool (`spawn_blocking`): off the
//! event loop, one pool thread per call in flight, each bounded by the store's timeout.
//!
//! **Outcomes.** Every Promise resolves: with the figures of a decision (`[allowed, limit,
//! remaining, retryAfterMs, resetAfterMs, retryAfterNs, resetAfterNs, windowSeconds]`, the
//! exact figures a `bigint` beyond 2^53), or with the error as a value, an `Error` whose
//! `code` is the core's (`ERR_SLUICEGATE_STORE_TIMEOUT`, ...), which `index.js` throws from
//! its `then`, so the Promise it returns rejects with that error. (napi's own rejection would
//! carry a napi `Status` instead of our code.)

use crate::api::{env_state, u64_of};
use crate::args::MAX_SAFE;
use crate::errors::{from_core, invalid_arg, JsErr};
use crate::keys::with_key;
use crate::state::Entry;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use sluicegate::Decision;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// napi's Tokio runtime, which runs the blocking fallbacks (`spawn_blocking`): one worker,
/// which nothing else uses.
pub(crate) fn configure_runtime() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluicegate-node")
            .build()
        {
            napi::bindgen_prelude::create_custom_tokio_runtime(rt);
        }
        // Else napi builds its default runtime on first use.
    });
}

/// What a call comes to, turned into a JavaScript value on the JavaScript thread.
pub enum Answer {
    /// A decision's figures.
    Decided(Decision),
    /// One per request of a batch, in order.
    Each(Vec<std::result::Result<Decision, sluicegate::Error>>),
    /// `undefined` (a refund, a clear).
    Done,
    /// A boolean (`remove`: whether the key's bucket existed).
    Flag(bool),
    /// The error the Promise rejects with (`index.js` throws it).
    Failed(JsErr),
}

impl From<std::result::Result<Decision, sluicegate::Error>> for Answer {
    fn from(r: std::result::Result<Decision, sluicegate::Error>) -> Self {
        r.map_or_else(|e| Answer::Failed(from_core(e)), Answer::Decided)
    }
}

impl From<std::result::Result<(), sluicegate::Error>> for Answer {
    fn from(r: std::result::Result<(), sluicegate::Error>) -> Self {
        r.map_or_else(|e| Answer::Failed(from_core(e)), |()| Answer::Done)
    }
}

/// A figure as a JavaScript number while it is a safe integer, else a `bigint`.
pub(crate) enum Figure {
    Bool(bool),
    Num(f64),
    Big(u64),
    Null,
}

impl Figure {
    pub(crate) fn exact(x: u64) -> Self {
        if x as f64 <= MAX_SAFE {
            Figure::Num(x as f64)
        } else {
            Figure::Big(x)
        }
    }
}

impl ToNapiValue for Figure {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: forwarded: `env` is the JavaScript thread's live environment.
        unsafe {
            match val {
                Figure::Bool(b) => bool::to_napi_value(env, b),
                Figure::Num(x) => f64::to_napi_value(env, x),
                Figure::Big(x) => BigInt::to_napi_value(env, BigInt::from(x)),
                Figure::Null => Null::to_napi_value(env, Null),
            }
        }
    }
}

/// The figures `index.js` makes a `Decision` of (the order of its constructor).
pub(crate) fn figures(d: &Decision) -> Vec<Figure> {
    let (retry, reset) = (d.retry_after_nanos(), d.reset_after_nanos());
    vec![
        Figure::Bool(d.allowed()),
        Figure::exact(d.limit()),
        Figure::exact(d.remaining()),
        Figure::Num(retry.div_ceil(1_000_000) as f64),
        Figure::Num(reset.div_ceil(1_000_000) as f64),
        Figure::exact(retry),
        Figure::exact(reset),
        Figure::Num(d.window_secs() as f64),
        Figure::Bool(d.shadow_rejected()),
    ]
}

/// A JavaScript `Error` with the error's `code` and message.
///
/// # Safety
/// `env` is the JavaScript thread's live environment.
unsafe fn error_value(env: sys::napi_env, e: JsErr) -> sys::napi_value {
    // SAFETY: forwarded caller contract.
    unsafe { napi::JsError::from(e).into_value(env) }
}

impl ToNapiValue for Answer {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: every call below gets `env`, the JavaScript thread's live environment, as
        // napi guarantees for a Promise's settlement, and values made in it.
        unsafe {
            match val {
                Answer::Decided(d) => Vec::to_napi_value(env, figures(&d)),
                Answer::Each(all) => {
                    let mut out = Vec::with_capacity(all.len());
                    for r in all {
                        out.push(match r {
                            Ok(d) => Vec::to_napi_value(env, figures(&d))?,
                            Err(e) => error_value(env, from_core(e)),
                        });
                    }
                    let mut arr = std::ptr::null_mut();
                    check(sys::napi_create_array_with_length(env, out.len(), &mut arr))?;
                    for (i, v) in out.into_iter().enumerate() {
                        check(sys::napi_set_element(env, arr, i as u32, v))?;
                    }
                    Ok(arr)
                }
                Answer::Done => <()>::to_napi_value(env, ()),
                Answer::Flag(b) => bool::to_napi_value(env, b),
                Answer::Failed(e) => Ok(error_value(env, e)),
            }
        }
    }
}

fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::from(status),
            "cannot build a batch's answer",
        ))
    }
}

type Settle = Box<dyn FnOnce(Env) -> Result<Answer> + Send>;
type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A call in flight: its future, polled where it is woken, and its Promise's deferred.
///
/// The first poll runs on the JavaScript thread (it hands the request to the core's Redis
/// thread and returns at the reply channel); the next on the thread that wakes it, the core's
/// Redis thread once the reply is in, which finishes the decision and settles the Promise
/// through the deferred's threadsafe function. No thread of ours in between.
struct Task {
    slot: Mutex<Option<(Pending, napi::JsDeferred<Answer, Settle>)>>,
    /// Set by every wake: a poller that finds the slot taken leaves the poll to its holder,
    /// which polls again when it sees the flag after releasing the slot.
    woken: AtomicBool,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.run();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.run();
    }
}

impl Task {
    fn run(self: &Arc<Self>) {
        self.woken.store(true, SeqCst);
        loop {
            let Ok(mut slot) = self.slot.try_lock() else {
                return; // its holder polls again (it sees `woken` after releasing it)
            };
            if !self.woken.swap(false, SeqCst) {
                return;
            }
            if let Some((fut, _)) = slot.as_mut() {
                let waker = Waker::from(self.clone());
                let mut cx = Context::from_waker(&waker);
                let done = match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
                    Ok(Poll::Pending) => None,
                    Ok(Poll::Ready(answer)) => Some(answer),
                    Err(_) => Some(Answer::Failed(invalid_arg(
                        "internal error: a panic in sluicegate (please report it)",
                    ))),
                };
                if let Some(answer) = done {
                    if let Some((_, deferred)) = slot.take() {
                        deferred.resolve(Box::new(move |_| Ok(answer)));
                    }
                }
            }
            drop(slot);
            if !self.woken.load(SeqCst) {
                return;
            }
        }
    }
}

/// Starts `fut`: its Promise, settled on the JavaScript thread with its answer.
fn promise<F>(env: &Env, fut: F) -> std::result::Result<Object<'_>, JsErr>
where
    F: Future<Output = Answer> + Send + 'static,
{
    let (deferred, promise) = env
        .create_deferred::<Answer, Settle>()
        .map_err(|e| invalid_arg(format!("cannot start the call: {}", e.reason)))?;
    let task = Arc::new(Task {
        slot: Mutex::new(Some((Box::pin(fut), deferred))),
        woken: AtomicBool::new(false),
    });
    task.run();
    Ok(promise)
}

/// Runs the blocking `f` on napi's blocking pool: its Promise.
fn blocking<F>(env: &Env, f: F) -> std::result::Result<Object<'_>, JsErr>
where
    F: FnOnce() -> Answer + Send + 'static,
{
    promise(env, async move {
        spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Answer::Failed(invalid_arg(format!("the call failed: {e}"))))
    })
}

/// The remote entry `handle` names, shared (the Promise keeps it alive).
fn remote(env: &Env, handle: u32) -> std::result::Result<Arc<Entry>, JsErr> {
    let entry = env_state(env)?.get(handle)?;
    entry.remote()?;
    Ok(entry)
}

/// A key's bytes, copied (the call outlives the argument).
fn key_bytes(key: &Unknown) -> std::result::Result<Box<[u8]>, JsErr> {
    // SAFETY: `key` is an argument of the running call; the closure copies the bytes.
    unsafe { with_key(key.env(), key.raw(), |k| Box::<[u8]>::from(k)) }
}

const ACQUIRE: u32 = 0;
const PEEK: u32 = 1;
const REFUND: u32 = 2;

/// A request on a Redis-backed limiter, keyed limiter (with `key`) or composite: `op` 0
/// acquires `cost`, 1 peeks, 2 refunds `cost`. The Promise resolves with the decision's
/// figures (`undefined` for a refund) or with the error to throw.
#[napi(
    ts_args_type = "handle: number, op: number, cost: number | bigint, key?: string | Uint8Array | number | bigint",
    ts_return_type = "Promise<unknown>"
)]
pub fn remote_call<'env>(
    env: &'env Env,
    handle: u32,
    op: u32,
    cost: Unknown,
    key: Option<Unknown>,
) -> std::result::Result<Object<'env>, JsErr> {
    let cost = u64_of(&cost, "cost")?;
    if op > REFUND {
        return Err(invalid_arg("op must be 0, 1 or 2"));
    }
    let entry = remote(env, handle)?;
    match (entry.remote()?, key) {
        (Entry::Keyed(_), Some(key)) => {
            let key = key_bytes(&key)?;
            promise(env, async move {
                let Ok(Entry::Keyed(l)) = entry.remote() else {
                    unreachable!("checked above")
                };
                match op {
                    ACQUIRE => l.try_acquire_async(&key[..], cost).await.into(),
                    PEEK => l.peek_async(&key[..]).await.into(),
                    _ => l.refund_async(&key[..], cost).await.into(),
                }
            })
        }
        (Entry::Keyed(_), None) => Err(invalid_arg("a KeyedLimiter's call needs a key")),
        (Entry::Single(_), None) => promise(env, async move {
            let Ok(Entry::Single(l)) = entry.remote() else {
                unreachable!("checked above")
            };
            match op {
                ACQUIRE => l.try_acquire_async(cost).await.into(),
                // The core's peek: not counted, and a store error under every `on_error`
                // (a peek is not an admission for a fail policy to decide).
                PEEK => l.peek_async().await.into(),
                _ => l.refund_async(cost).await.into(),
            }
        }),
        // The core decides a composite of Redis buckets in one script call, in blocking form
        // only (`Composite::try_acquire_async` needs the core's `Composite`, which owns its
        // parts, while a JavaScript Composite's parts stay usable on their own).
        (Entry::Composite(_), None) => blocking(env, move || {
            let Ok(inner) = entry.remote() else {
                unreachable!("checked above")
            };
            let r = match op {
                ACQUIRE => inner.try_acquire(cost).map(Answer::Decided),
                PEEK => inner.peek().map(Answer::Decided),
                _ => inner.refund(cost).map(|()| Answer::Done),
            };
            r.unwrap_or_else(Answer::Failed)
        }),
        (_, Some(_)) => Err(invalid_arg("only a KeyedLimiter's call takes a key")),
        (Entry::Remote(_), None) => unreachable!("a remote entry is never nested"),
    }
}

/// A batch on a Redis-backed keyed limiter: `keys[i]` for `costs[i]`, every call sent before
/// any reply is read (the core's `try_acquire_many_async`). Resolves with one answer per
/// request: a decision's figures or an `Error`.
#[napi(
    ts_args_type = "handle: number, keys: Array<string | Uint8Array | number | bigint>, costs: Array<number | bigint>",
    ts_return_type = "Promise<unknown>"
)]
pub fn remote_many<'env>(
    env: &'env Env,
    handle: u32,
    keys: Vec<Unknown>,
    costs: Vec<Unknown>,
) -> std::result::Result<Object<'env>, JsErr> {
    if keys.len() != costs.len() {
        return Err(invalid_arg("keys and costs differ in length"));
    }
    let entry = remote(env, handle)?;
    entry.remote()?.keyed()?;
    let mut reqs = Vec::with_capacity(keys.len());
    for (k, c) in keys.iter().zip(&costs) {
        reqs.push((key_bytes(k)?, u64_of(c, "cost")?));
    }
    promise(env, async move {
        let Ok(Entry::Keyed(l)) = entry.remote() else {
            unreachable!("checked above")
        };
        let borrowed: Vec<(&[u8], u64)> = reqs.iter().map(|(k, c)| (&k[..], *c)).collect();
        Answer::Each(l.try_acquire_many_async(&borrowed).await)
    })
}

/// `remove(key)` (op 0: whether the bucket existed) or `clear()` (op 1) on a Redis-backed
/// keyed limiter, on the blocking pool (the core has them in blocking form only).
#[napi(
    ts_args_type = "handle: number, op: number, key?: string | Uint8Array | number | bigint",
    ts_return_type = "Promise<unknown>"
)]
pub fn remote_keys<'env>(
    env: &'env Env,
    handle: u32,
    op: u32,
    key: Option<Unknown>,
) -> std::result::Result<Object<'env>, JsErr> {
    let entry = remote(env, handle)?;
    entry.remote()?.keyed()?;
    let key = match (op, key) {
        (0, Some(k)) => Some(key_bytes(&k)?),
        (1, None) => None,
        _ => return Err(invalid_arg("remove takes a key, clear none")),
    };
    blocking(env, move || {
        let Ok(Entry::Keyed(l)) = entry.remote() else {
            unreachable!("checked above")
        };
        match key {
            Some(k) => l
                .remove(&k[..])
                .map_or_else(|e| Answer::Failed(from_core(e)), Answer::Flag),
            None => l.clear().into(),
        }
    })
}

/// Whether the limiter `handle` names has a bucket on a Redis store (its calls are async).
#[napi]
pub fn is_remote(env: Env, handle: u32) -> std::result::Result<bool, JsErr> {
    env_state(&env)?.with(handle, |e| matches!(e, Entry::Remote(_)))
}

/// What a Redis store's calls came to, counted since the store was built (every limiter on one
/// URL in the process shares the counters).
#[napi(object)]
pub struct RedisStats {
    /// Requests the server decided (one per key of a batch; a composite counts once).
    pub decided: f64,
    /// Requests rejected by the negative cache, without a round trip.
    pub cached_rejections: f64,
    /// Requests admitted by `on_error=open`.
    pub failed_open: f64,
    /// Requests rejected by `on_error=closed`.
    pub failed_closed: f64,
    /// Requests decided by the in-process limiter of `on_error=local`.
    pub failed_local: f64,
    /// Failures returned to the caller (`on_error=error`).
    pub failed_error: f64,
    /// Calls that got no reply within the timeout.
    pub timeouts: f64,
    /// Calls made while there was no connection, or that lost theirs.
    pub unavailable: f64,
    /// Calls the server answered with an error.
    pub server_errors: f64,
    /// Connections opened (the first included).
    pub connects: f64,
    /// Times the scripts were loaded.
    pub script_loads: f64,
    /// Calls sent again to the node a Redis Cluster's MOVED or ASK reply named.
    pub redirects: f64,
}

/// The Redis store's counters of a limiter or keyed limiter (a composite's: its first part's),
/// or `null` when it is not on Redis.
#[napi]
pub fn redis_stats(env: Env, handle: u32) -> std::result::Result<Option<RedisStats>, JsErr> {
    fn of(e: &Entry) -> Option<sluicegate::RedisStats> {
        match e {
            Entry::Single(l) => l.redis_stats(),
            Entry::Keyed(l) => l.redis_stats(),
            Entry::Composite(parts) => parts.iter().find_map(|p| of(p)),
            Entry::Remote(inner) => of(inner),
        }
    }
    let s = env_state(&env)?.with(handle, of)?;
    Ok(s.map(|s| RedisStats {
        decided: s.decided as f64,
        cached_rejections: s.cached_rejections as f64,
        failed_open: s.failed_open as f64,
        failed_closed: s.failed_closed as f64,
        failed_local: s.failed_local as f64,
        failed_error: s.failed_error as f64,
        timeouts: s.timeouts as f64,
        unavailable: s.unavailable as f64,
        server_errors: s.server_errors as f64,
        connects: s.connects as f64,
        script_loads: s.script_loads as f64,
        redirects: s.redirects as f64,
    }))
}
