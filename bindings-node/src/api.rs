//! The calls made once per limiter (construction, inspection, release) and the manual clock:
//! plain `#[napi]` functions, where convenience beats nanoseconds.

use crate::args::u64_arg;
use crate::errors::{from_core, invalid_arg, JsErr};
use crate::state::{self, Entry, EnvState};
use napi::bindgen_prelude::*;
use napi_derive::napi;
use sluicegate::http::HeaderStyle;
use sluicegate::{
    Algorithm, AnyClock, Decision, KeyedLimiter, Limiter, OnFull, Quota, QuotaOptions, Refill,
    StoreSpec,
};
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// This environment's state (the instance data `lib.rs` sets).
pub(crate) fn env_state(env: &Env) -> std::result::Result<&EnvState, JsErr> {
    let mut data: *mut c_void = ptr::null_mut();
    // SAFETY: `env` is the running call's; `data` is a valid out-pointer.
    unsafe { sys::napi_get_instance_data(env.raw(), &mut data) };
    if data.is_null() {
        return Err(invalid_arg(
            "sluicegate is not initialised in this environment",
        ));
    }
    // SAFETY: the only instance data this addon sets is a `Box<EnvState>`, alive until the
    // environment is torn down (after its last call).
    Ok(unsafe { &*data.cast::<EnvState>() })
}

fn parse(quota: &str) -> std::result::Result<Quota, JsErr> {
    quota.parse::<Quota>().map_err(from_core)
}

/// A non-negative integer argument (safe-integer `number` or `BigInt`).
pub(crate) fn u64_of(v: &Unknown, what: &str) -> std::result::Result<u64, JsErr> {
    // SAFETY: `v` is an argument of the running call, in its env.
    unsafe { u64_arg(v.env(), v.raw(), what) }
}

/// An optional non-negative integer argument: `None` when absent or `undefined`.
pub(crate) fn u64_opt(v: Option<Unknown>, what: &str) -> std::result::Result<Option<u64>, JsErr> {
    match v {
        Some(v) if !matches!(v.get_type(), Ok(ValueType::Undefined)) => u64_of(&v, what).map(Some),
        _ => Ok(None),
    }
}

/// A clock that moves only when told to, for tests and simulations. Readings are integer
/// nanoseconds (`bigint` or safe-integer `number` in, `bigint` out).
#[napi]
pub struct ManualClock {
    inner: sluicegate::ManualClock,
}

#[napi]
impl ManualClock {
    /// A clock reading `startNs` (default 0).
    #[napi(constructor, ts_args_type = "startNs?: bigint | number")]
    pub fn new(start_ns: Option<Unknown>) -> std::result::Result<Self, JsErr> {
        let start = u64_opt(start_ns, "startNs")?.unwrap_or(0);
        Ok(Self {
            inner: sluicegate::ManualClock::new(start),
        })
    }

    /// Sets the reading (it may go backwards: limiters clamp).
    #[napi(ts_args_type = "ns: bigint | number")]
    pub fn set(&self, ns: Unknown) -> std::result::Result<(), JsErr> {
        self.inner.set(u64_of(&ns, "ns")?);
        Ok(())
    }

    /// Moves the reading forward by `ns` nanoseconds (saturating).
    #[napi(ts_args_type = "ns: bigint | number")]
    pub fn advance(&self, ns: Unknown) -> std::result::Result<(), JsErr> {
        self.inner.advance_nanos(u64_of(&ns, "ns")?);
        Ok(())
    }

    /// The reading, in nanoseconds.
    #[napi]
    pub fn now(&self) -> BigInt {
        BigInt::from(sluicegate::Clock::now(&self.inner))
    }
}

/// The store a `store` option names, by the core's parser: `"memory"` (the default),
/// `"shm:NAME[?capacity=N]"` or a Redis URL (`"redis://host:6379/0?prefix=api"`); anything
/// else is `ERR_SLUICEGATE_INVALID_OPTION`. `suffix`, when given, is appended to a region's
/// name or a Redis store's `prefix` (the Express middleware's namespace per limit).
fn store_of(store: Option<&str>, suffix: Option<&str>) -> std::result::Result<StoreSpec, JsErr> {
    let spec = store.map_or(Ok(StoreSpec::Memory), |s| s.parse().map_err(from_core))?;
    Ok(match (spec, suffix) {
        (StoreSpec::Shm { name, capacity }, Some(x)) => StoreSpec::Shm {
            name: name + x,
            capacity,
        },
        (StoreSpec::Redis { url, mut options }, Some(x)) => {
            options.prefix.push_str(x);
            StoreSpec::Redis { url, options }
        }
        (spec, _) => spec,
    })
}

/// Creates a limiter for `quota` (a rate string) on the system clock or `clock`, its bucket
/// in `store` (default memory; a shared-memory region holds it as its one key); returns its
/// handle in this environment. `metrics` turns the counters on, `shadow` starts it in shadow
/// mode, `onReject([key, cost, figures])` is queued for each rejection (`ops.rs`).
#[napi(
    ts_args_type = "quota: string, clock?: ManualClock | undefined | null, store?: string | undefined | null, metrics?: boolean | undefined | null, shadow?: boolean | undefined | null, onReject?: ((rejection: [null, number | bigint, Array<number | bigint | boolean>]) => void) | undefined | null"
)]
#[allow(clippy::too_many_arguments)]
pub fn limiter_new(
    env: Env,
    quota: String,
    clock: Option<&ManualClock>,
    store: Option<String>,
    metrics: Option<bool>,
    shadow: Option<bool>,
    on_reject: Option<crate::ops::HookFn<'_>>,
) -> std::result::Result<u32, JsErr> {
    let mut builder = Limiter::builder(parse(&quota)?)
        .clock(AnyClock::new(clock.map(|c| &c.inner)))
        .store(store_of(store.as_deref(), None)?)
        .metrics(metrics.unwrap_or(false))
        .shadow(shadow.unwrap_or(false));
    if let Some(hook) = crate::ops::hook_of(on_reject)? {
        builder =
            builder.on_reject(move |r| crate::ops::show(&hook, None, r.cost(), *r.decision()));
    }
    let limiter = builder.build().map_err(from_core)?;
    env_state(&env)?.insert(Arc::new(Entry::new(Entry::Single(limiter))))
}

/// `store` (parsed and printed by the core, a Redis password redacted) with `suffix` appended
/// to a region's name or a Redis store's prefix: `"shm:/api?capacity=9"` and `"-x"` give
/// `"shm:/api-x?capacity=9"`, `"redis://h/0?prefix=api"` gives `"redis://h/0?prefix=api-x"`;
/// `"memory"` stays `"memory"`. The Express middleware names one namespace per limit with it
/// (and builds its limiter with `keyedNew`'s `storeSuffix`, so the password is kept).
#[napi]
pub fn store_suffixed(store: String, suffix: String) -> std::result::Result<String, JsErr> {
    Ok(store_of(Some(&store), Some(&suffix))?.to_string())
}

/// The limiter named `name` in this process (created with `quota` on first use, on the system
/// clock); every worker thread that asks for the name gets the same bucket.
#[napi]
pub fn limiter_shared(env: Env, name: String, quota: String) -> std::result::Result<u32, JsErr> {
    let quota = parse(&quota)?;
    let entry = state::shared(&format!("limiter:{name}"), format!("\"{quota}\""), || {
        Limiter::with_clock(quota, AnyClock::default())
            .map(Entry::Single)
            .map_err(from_core)
    })?;
    env_state(&env)?.insert(entry)
}

/// `onFull` by the core's names (`"reject"`, the default, or `"evict"`).
fn on_full_of(name: Option<&str>) -> std::result::Result<OnFull, JsErr> {
    name.map_or(Ok(OnFull::default()), |n| n.parse().map_err(from_core))
}

/// What a keyed limiter observes (`ops.rs`): counters, shadow mode, the rejection hook.
#[derive(Default)]
struct Observe {
    metrics: bool,
    shadow: bool,
    hook: Option<crate::ops::Hook>,
}

#[allow(clippy::too_many_arguments)]
fn keyed_build(
    quota: Quota,
    clock: AnyClock,
    max_keys: Option<u32>,
    on_full: OnFull,
    shards: Option<u32>,
    store: StoreSpec,
    observe: Observe,
) -> std::result::Result<Entry, JsErr> {
    let mut b = KeyedLimiter::<Box<[u8]>>::builder(quota)
        .clock(clock)
        .store(store)
        .metrics(observe.metrics)
        .shadow(observe.shadow);
    if let Some(hook) = observe.hook {
        b = b.on_reject(move |r| {
            crate::ops::show(&hook, Some(r.key().clone()), r.cost(), *r.decision());
        });
    }
    if let Some(n) = max_keys {
        if n == 0 {
            return Err(invalid_arg("maxKeys must be at least 1"));
        }
        b = b.max_keys(n as usize);
    }
    b = b.on_full(on_full);
    if let Some(n) = shards {
        b = b.shards(n as usize);
    }
    Ok(Entry::new(Entry::Keyed(b.build().map_err(from_core)?)))
}

/// Creates a keyed limiter; `maxKeys` bounds the keys held at once (default 2^20; a
/// shared-memory region's capacity, which an opener that gives none takes from the region),
/// `onFull` says what a new key meets at the bound when no bucket is full: `"reject"` (the
/// default: `ERR_SLUICEGATE_KEY_STORE_FULL`) or `"evict"` (the bucket nearest to full is
/// evicted); `store` is where the buckets live (default memory), `storeSuffix` appended to its
/// region name or Redis prefix (see `storeSuffixed`). `metrics`, `shadow` and `onReject`
/// (called with the key's bytes) as for `limiterNew`.
#[napi(
    ts_args_type = "quota: string, clock?: ManualClock | undefined | null, maxKeys?: number | undefined | null, onFull?: string | undefined | null, shards?: number | undefined | null, store?: string | undefined | null, storeSuffix?: string | undefined | null, metrics?: boolean | undefined | null, shadow?: boolean | undefined | null, onReject?: ((rejection: [Uint8Array, number | bigint, Array<number | bigint | boolean>]) => void) | undefined | null"
)]
#[allow(clippy::too_many_arguments)]
pub fn keyed_new(
    env: Env,
    quota: String,
    clock: Option<&ManualClock>,
    max_keys: Option<u32>,
    on_full: Option<String>,
    shards: Option<u32>,
    store: Option<String>,
    store_suffix: Option<String>,
    metrics: Option<bool>,
    shadow: Option<bool>,
    on_reject: Option<crate::ops::HookFn<'_>>,
) -> std::result::Result<u32, JsErr> {
    let clock = AnyClock::new(clock.map(|c| &c.inner));
    let on_full = on_full_of(on_full.as_deref())?;
    let store = store_of(store.as_deref(), store_suffix.as_deref())?;
    let observe = Observe {
        metrics: metrics.unwrap_or(false),
        shadow: shadow.unwrap_or(false),
        hook: crate::ops::hook_of(on_reject)?,
    };
    let entry = keyed_build(
        parse(&quota)?,
        clock,
        max_keys,
        on_full,
        shards,
        store,
        observe,
    )?;
    env_state(&env)?.insert(Arc::new(entry))
}

/// The keyed limiter named `name` in this process (created on first use, on the system clock);
/// every worker thread that asks for the name gets the same table. Asking again with another
/// quota or other options throws.
#[napi]
pub fn keyed_shared(
    env: Env,
    name: String,
    quota: String,
    max_keys: Option<u32>,
    on_full: Option<String>,
    shards: Option<u32>,
) -> std::result::Result<u32, JsErr> {
    let quota = parse(&quota)?;
    let on_full = on_full_of(on_full.as_deref())?;
    let signature = format!(
        "\"{quota}\" (maxKeys {max_keys:?}, onFull {:?}, shards {shards:?})",
        on_full.name()
    );
    let entry = state::shared(&format!("keyed:{name}"), signature, || {
        keyed_build(
            quota,
            AnyClock::default(),
            max_keys,
            on_full,
            shards,
            StoreSpec::Memory,
            Observe::default(),
        )
    })?;
    env_state(&env)?.insert(entry)
}

/// A composite limit over the limiters `handles` (in order, at least one): consumed
/// all-or-nothing through `allow`/`decide`/`refund`, reading the first part's clock.
#[napi]
pub fn composite_new(env: Env, handles: Vec<u32>) -> std::result::Result<u32, JsErr> {
    if handles.is_empty() {
        return Err(invalid_arg("a Composite needs at least one Limiter"));
    }
    let state = env_state(&env)?;
    let mut parts = Vec::with_capacity(handles.len());
    let mut manual = None;
    for h in handles {
        let part = state.get(h)?;
        let is_manual = match &*part {
            Entry::Remote(inner) => inner.single()?.clock().manual().is_some(),
            other => other.single()?.clock().manual().is_some(),
        };
        // The first part's reading decides every part whose clock shares its timeline: a
        // manual clock's readings beside the system clock's would leave a part's bucket
        // clamped at the other's time (as the Python binding refuses too).
        if *manual.get_or_insert(is_manual) != is_manual {
            return Err(invalid_arg(
                "the parts of a Composite must read one kind of clock: all the system clock, or all manual clocks",
            ));
        }
        parts.push(part);
    }
    state.insert(Arc::new(Entry::new(Entry::Composite(parts))))
}

fn key_op<R>(
    env: &Env,
    handle: u32,
    key: &Unknown,
    f: impl FnOnce(&state::Keyed, &[u8]) -> R,
) -> std::result::Result<R, JsErr> {
    env_state(env)?.with(handle, |e| {
        let l = e.keyed()?;
        // SAFETY: `key` is an argument of the running call; `f` runs core code only.
        unsafe { crate::keys::with_key(key.env(), key.raw(), |k| f(l, k)) }
    })?
}

/// Forgets `key`'s bucket; whether it existed.
#[napi(ts_args_type = "handle: number, key: string | Uint8Array | number | bigint")]
pub fn keyed_remove(env: Env, handle: u32, key: Unknown) -> std::result::Result<bool, JsErr> {
    key_op(&env, handle, &key, |l, k| l.remove(k).map_err(from_core))?
}

/// Evicts every bucket that is full now; how many.
#[napi]
pub fn keyed_sweep(env: Env, handle: u32) -> std::result::Result<u32, JsErr> {
    env_state(&env)?.with(handle, |e| {
        let swept = e.keyed()?.sweep().map_err(from_core)?;
        Ok(u32::try_from(swept).unwrap_or(u32::MAX))
    })?
}

/// Forgets every bucket.
#[napi]
pub fn keyed_clear(env: Env, handle: u32) -> std::result::Result<(), JsErr> {
    env_state(&env)?.with(handle, |e| e.keyed()?.clear().map_err(from_core))?
}

/// Keys held now.
#[napi]
pub fn keyed_len(env: Env, handle: u32) -> std::result::Result<u32, JsErr> {
    env_state(&env)?.with(handle, |e| {
        Ok(u32::try_from(e.keyed()?.len()).unwrap_or(u32::MAX))
    })?
}

/// The key bound.
#[napi]
pub fn keyed_max_keys(env: Env, handle: u32) -> std::result::Result<u32, JsErr> {
    env_state(&env)?.with(handle, |e| {
        Ok(u32::try_from(e.keyed()?.max_keys()).unwrap_or(u32::MAX))
    })?
}

/// Frees a handle (the wrapper's `FinalizationRegistry` calls this).
#[napi]
pub fn release(env: Env, handle: u32) -> std::result::Result<(), JsErr> {
    env_state(&env)?.release(handle);
    Ok(())
}

/// The canonical rate string of a limiter's quota.
#[napi]
pub fn quota_of(env: Env, handle: u32) -> std::result::Result<String, JsErr> {
    env_state(&env)?.with(handle, |e| Ok(e.quota()?.to_string()))?
}

/// For a web limit's `cost`: `null` when the limiter's burst holds it, else the figures of the
/// answer a web adapter gives a request no wait would admit (a refusal that says to come back
/// after the policy's window, the time an empty bucket takes to fill; not a server error).
/// Throws as `tryAcquire` does for a cost that is not a whole number of tokens.
#[napi(
    ts_args_type = "handle: number, cost: number | bigint",
    ts_return_type = "Array<boolean | number | bigint> | null"
)]
pub fn over_capacity(
    env: Env,
    handle: u32,
    cost: Unknown,
) -> std::result::Result<Option<Vec<crate::remote::Figure>>, JsErr> {
    let cost = u64_of(&cost, "cost")?;
    let quota = env_state(&env)?.with(handle, |e| e.quota())??;
    if cost <= quota.max_cost().map_err(from_core)? {
        return Ok(None);
    }
    let window = quota.window_secs();
    let refusal = sluicegate::Decision::from_figures(
        false,
        quota.burst(),
        0,
        window.saturating_mul(1_000_000_000),
        0,
        window,
    );
    Ok(Some(crate::remote::figures(&refusal)))
}

/// The figures of a web adapter's answer to a new key its store has no room for
/// (`ERR_SLUICEGATE_KEY_STORE_FULL`: every bucket in use at the key bound, none full to
/// evict): a refusal, retry in a second (as sluicegate-tower and the Python adapters answer),
/// not a server error.
#[napi(ts_return_type = "Array<boolean | number | bigint>")]
pub fn store_full_refusal(
    env: Env,
    handle: u32,
) -> std::result::Result<Vec<crate::remote::Figure>, JsErr> {
    let quota = env_state(&env)?.with(handle, |e| e.quota())??;
    let refusal = sluicegate::Decision::from_figures(
        false,
        quota.burst(),
        0,
        1_000_000_000,
        0,
        quota.window_secs(),
    );
    Ok(crate::remote::figures(&refusal))
}

/// Whether the limiter's bucket is full now.
#[napi]
pub fn is_full(env: Env, handle: u32) -> std::result::Result<bool, JsErr> {
    env_state(&env)?.with(handle, |e| e.single()?.is_full().map_err(from_core))?
}

/// The canonical form of a rate string (throws as `new Limiter` would).
#[napi]
pub fn canonical_quota(quota: String) -> std::result::Result<String, JsErr> {
    Ok(parse(&quota)?.to_string())
}

/// The canonical rate string of a quota given by its parts (`index.js`'s options object):
/// the core's `Quota::try_new` and builders, `refill` and `algorithm` by the core's names.
#[napi(
    ts_args_type = "count: number | bigint, periodNs: number | bigint, burst?: number | bigint, initial?: number | bigint, refill?: string, algorithm?: string, maxDelayNs?: number | bigint"
)]
pub fn quota_from_options(
    count: Unknown,
    period_ns: Unknown,
    burst: Option<Unknown>,
    initial: Option<Unknown>,
    refill: Option<String>,
    algorithm: Option<String>,
    max_delay_ns: Option<Unknown>,
) -> std::result::Result<String, JsErr> {
    let options = QuotaOptions {
        count: u64_of(&count, "count")?,
        period_ns: u64_of(&period_ns, "periodNs")?,
        burst: u64_opt(burst, "burst")?,
        initial: u64_opt(initial, "initial")?,
        refill: refill
            .map(|r| r.parse::<Refill>())
            .transpose()
            .map_err(from_core)?,
        algorithm: algorithm
            .map(|a| a.parse::<Algorithm>())
            .transpose()
            .map_err(from_core)?,
        max_delay_ns: u64_opt(max_delay_ns, "maxDelayNs")?,
    };
    let q = options.build().map_err(from_core)?;
    Ok(q.to_string())
}

/// A header style by the core's names (`ietf`, `draft6`, `draft7`, `legacy`, `none`).
fn style_of(style: &str) -> std::result::Result<HeaderStyle, JsErr> {
    style.parse().map_err(from_core)
}

/// The id `renderFields` renders `style` and `policy` by (the same pair, the same id), or -1
/// when this environment holds its maximum of pairs (then `renderHeaders` does).
#[napi]
pub fn header_renderer(env: Env, style: String, policy: String) -> std::result::Result<i32, JsErr> {
    let style = style_of(&style)?;
    Ok(env_state(&env)?
        .renderer(style, &policy)
        .map_or(-1, |id| id as i32))
}

/// The HTTP fields of a decision given by its figures, rendered by the core
/// (`Decision::from_figures` + `Decision::headers`): `[name, value, name, value, ...]`.
#[napi(
    ts_args_type = "allowed: boolean, limit: number | bigint, remaining: number | bigint, retryAfterNs: number | bigint, resetAfterNs: number | bigint, windowSeconds: number | bigint, style: string, policy: string"
)]
#[allow(clippy::too_many_arguments)]
pub fn render_headers(
    allowed: bool,
    limit: Unknown,
    remaining: Unknown,
    retry_after_ns: Unknown,
    reset_after_ns: Unknown,
    window_seconds: Unknown,
    style: String,
    policy: String,
) -> std::result::Result<Vec<String>, JsErr> {
    let style = style_of(&style)?;
    let d = Decision::from_figures(
        allowed,
        u64_of(&limit, "limit")?,
        u64_of(&remaining, "remaining")?,
        u64_of(&retry_after_ns, "retryAfterNs")?,
        u64_of(&reset_after_ns, "resetAfterNs")?,
        u64_of(&window_seconds, "windowSeconds")?,
    );
    let fields = d.headers(style, &policy);
    let mut out = Vec::with_capacity(fields.len() * 2);
    for (k, v) in fields {
        out.push(k.to_owned());
        out.push(v);
    }
    Ok(out)
}

/// One request rendered by the core's own `Decision::headers` straight from the core's
/// decision (used by the tests to pin `Decision#headers`, whose figures crossed to JavaScript
/// and back, to it): `[allowed, [[name, value], ...]]`.
#[napi(ts_return_type = "[boolean, Array<[string, string]>]")]
pub fn core_headers(
    env: Env,
    handle: u32,
    cost: Unknown,
    style: String,
    policy: String,
) -> std::result::Result<(bool, Vec<Vec<String>>), JsErr> {
    let cost = u64_of(&cost, "cost")?;
    let style = style_of(&style)?;
    let d =
        env_state(&env)?.with(handle, |e| e.single()?.try_acquire(cost).map_err(from_core))??;
    let fields = d
        .headers(style, &policy)
        .into_iter()
        .map(|(k, v)| vec![k.to_string(), v])
        .collect();
    Ok((d.allowed(), fields))
}

/// Nanoseconds per `try_acquire` of the Rust core alone (system clock, one bucket), over
/// `iterations` calls: the "Rust decision" term of the benchmark's floor. `allow` picks an
/// admitting quota, else a rejecting one.
#[napi]
pub fn core_decision_ns(iterations: u32, allow: bool) -> std::result::Result<f64, JsErr> {
    let quota = if allow {
        "1000000000/ms"
    } else {
        "1/h; burst=1; initial=0"
    };
    let l = Limiter::with_clock(parse(quota)?, AnyClock::default()).map_err(from_core)?;
    let start = std::time::Instant::now();
    let mut admitted = 0u64;
    for _ in 0..iterations {
        admitted += u64::from(
            std::hint::black_box(&l)
                .try_acquire(1)
                .map_err(from_core)?
                .allowed(),
        );
    }
    std::hint::black_box(admitted);
    Ok(start.elapsed().as_nanos() as f64 / f64::from(iterations.max(1)))
}

/// Benchmark floor: an empty `#[napi]` class method of the `allow` shape.
#[napi]
pub struct NoopLimiter {}

#[napi]
impl NoopLimiter {
    /// An object with one empty method.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self {}
    }

    /// Does nothing with `cost`.
    #[napi]
    pub fn allow(&self, cost: f64) -> bool {
        cost >= 0.0
    }
}

/// Benchmark floor: an empty `#[napi]` function of the `allow` shape.
#[napi]
pub fn noop_napi_allow(handle: u32, cost: f64) -> bool {
    f64::from(handle) <= cost
}
