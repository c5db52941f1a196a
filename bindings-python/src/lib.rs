//! `sluicegate._native`: thin pyo3 wrappers over the `sluicegate` core crate.
//!
//! Conversion and error mapping only; every decision comes from the core. The module declares
//! `gil_used = false`: every class is `frozen` and `Sync`, its state lives in the core's atomics,
//! and the threaded pytest (tests/test_threads.py) checks that no bound is exceeded.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString};
use pyo3::{PyTraverseError, PyVisit};
use sluicegate::http::HeaderStyle;
use sluicegate::{Algorithm, AnyClock, Clock, Limiter, ManualClock, Quota, QuotaOptions, Refill};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

mod acquire;
mod client;
mod composite;
mod convert;
mod errors;
mod keyed;
mod ops;
mod remote;

/// Python's allocator aligns an object to 16 bytes, and pyo3 keeps a class's Rust value inside
/// the object: a value that needs more (the core's limiters are cache-line aligned) would sit
/// misaligned, which is undefined behaviour. Such values are boxed; this keeps it so.
const _: () = {
    const fn aligned_for_python<T>() -> bool {
        core::mem::align_of::<T>() <= 16
    }
    assert!(
        aligned_for_python::<PyLimiter>()
            && aligned_for_python::<keyed::PyKeyedLimiter>()
            && aligned_for_python::<composite::PyComposite>()
            && aligned_for_python::<acquire::PyAcquire>()
            && aligned_for_python::<client::PyClientResolver>()
            && aligned_for_python::<PyManualClock>()
            && aligned_for_python::<PyQuota>()
            && aligned_for_python::<PyDecision>()
            && aligned_for_python::<PyReservation>()
            && aligned_for_python::<ops::PyMetrics>()
            && aligned_for_python::<ops::PyRejection>(),
        "a pyclass needs more alignment than Python gives: box its large fields"
    );
};

use acquire::Acquire;
use convert::{duration, duration_ns, max_wait, opt_uint, uint};
use errors::to_py;
use remote::Remote;

/// A clock that only moves when told to: for tests and simulations.
#[pyclass(module = "sluicegate", name = "ManualClock", frozen)]
pub(crate) struct PyManualClock {
    pub(crate) inner: ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start_ns=None))]
    fn new(start_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let start = opt_uint(start_ns, "start_ns")?.unwrap_or(0);
        Ok(Self {
            inner: ManualClock::new(start),
        })
    }

    /// The reading, in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.now()
    }

    /// Sets the reading (it may go backwards; limiters clamp).
    fn set_ns(&self, ns: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set(uint(ns, "ns")?);
        Ok(())
    }

    /// Moves the reading forward by seconds (int or float) or a timedelta.
    fn advance(&self, by: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance(duration(by, "by")?);
        Ok(())
    }

    /// Moves the reading forward by whole nanoseconds.
    fn advance_ns(&self, ns: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance_nanos(uint(ns, "ns")?);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(start_ns={})", self.inner.now())
    }
}

/// A rate limit: from a rate string (`Quota("10/s; burst=50")`) or keywords
/// (`Quota(count=10, period=1, burst=50)`).
#[pyclass(module = "sluicegate", name = "Quota", frozen, eq, hash, str)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyQuota {
    pub(crate) inner: Quota,
}

impl std::fmt::Display for PyQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

#[pymethods]
impl PyQuota {
    #[new]
    #[pyo3(signature = (rate=None, /, *, count=None, period=None, period_ns=None, burst=None, initial=None, refill=None, algorithm=None, max_delay=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        rate: Option<&Bound<'_, PyAny>>,
        count: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        period_ns: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        initial: Option<&Bound<'_, PyAny>>,
        refill: Option<&str>,
        algorithm: Option<&str>,
        max_delay: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let keywords = [count, period, period_ns, burst, initial, max_delay]
            .iter()
            .any(Option::is_some)
            || refill.is_some()
            || algorithm.is_some();
        if let Some(rate) = rate {
            if keywords {
                return Err(PyTypeError::new_err(
                    "give either a rate string or keywords (count=, period=, burst=, ...), not both",
                ));
            }
            let Ok(text) = rate.cast::<PyString>() else {
                let ty = rate.get_type().name()?;
                return Err(PyTypeError::new_err(format!(
                    "the rate must be a str such as \"10/s; burst=50\", not {ty}"
                )));
            };
            let inner = text.to_cow()?.parse::<Quota>().map_err(to_py)?;
            return Ok(Self { inner });
        }
        let Some(count) = opt_uint(count, "count")? else {
            return Err(PyTypeError::new_err(
                "Quota needs a rate string, or count= and period= (or period_ns=)",
            ));
        };
        let period_ns = match (period, period_ns) {
            (Some(p), None) => duration_ns(p, "period")?,
            (None, Some(p)) => uint(p, "period_ns")?,
            (None, None) => return Err(PyTypeError::new_err("Quota needs period= or period_ns=")),
            (Some(_), Some(_)) => {
                return Err(PyTypeError::new_err("give period= or period_ns=, not both"))
            }
        };
        let options = QuotaOptions {
            count,
            period_ns,
            burst: opt_uint(burst, "burst")?,
            initial: opt_uint(initial, "initial")?,
            refill: refill
                .map(str::parse::<Refill>)
                .transpose()
                .map_err(to_py)?,
            algorithm: algorithm
                .map(str::parse::<Algorithm>)
                .transpose()
                .map_err(to_py)?,
            max_delay_ns: match max_delay.filter(|d| !d.is_none()) {
                Some(d) => Some(duration_ns(d, "max_delay")?),
                None => None,
            },
        };
        let q = options.build().map_err(to_py)?;
        Ok(Self { inner: q })
    }

    /// Tokens added per period.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }
    /// The refill period in nanoseconds.
    #[getter]
    fn period_ns(&self) -> u64 {
        self.inner.period_ns()
    }
    /// The refill period in seconds.
    #[getter]
    fn period(&self) -> f64 {
        self.inner.period().as_secs_f64()
    }
    /// The bucket's capacity (`limit` of every decision).
    #[getter]
    fn burst(&self) -> u64 {
        self.inner.burst()
    }
    /// Tokens in the bucket at creation.
    #[getter]
    fn initial(&self) -> u64 {
        self.inner.initial()
    }
    /// `"continuous"` or `"interval"`.
    #[getter]
    fn refill(&self) -> &'static str {
        self.inner.refill().name()
    }
    /// The policy window in whole seconds (`w` of the `RateLimit-Policy` field).
    #[getter]
    fn window_secs(&self) -> u64 {
        self.inner.window_secs()
    }
    /// The algorithm's name, as in rate strings (`"token_bucket"`, `"gcra"`, ...).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm().name()
    }
    /// A leaky queue's bound in nanoseconds (None for the other algorithms).
    #[getter]
    fn max_delay_ns(&self) -> Option<u64> {
        is_queue(&self.inner).then(|| self.inner.max_delay_ns())
    }

    fn __repr__(&self) -> String {
        format!("Quota({:?})", self.inner.to_string())
    }

    /// Pickled (and copied) as its canonical rate string, which parses back to an equal
    /// quota: a quota crosses to `multiprocessing` workers.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        Ok((slf.get_type().into_any(), (slf.get().inner.to_string(),)))
    }
}

/// Whether the quota runs the leaky queue (the one algorithm whose admissions may wait).
pub(crate) fn is_queue(q: &Quota) -> bool {
    q.algorithm() == Algorithm::LeakyQueue
}

pub(crate) fn quota_arg(obj: &Bound<'_, PyAny>) -> PyResult<Quota> {
    if let Ok(q) = obj.cast::<PyQuota>() {
        return Ok(q.get().inner);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s.to_cow()?.parse::<Quota>().map_err(to_py);
    }
    let ty = obj.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "quota must be a Quota or a rate string, not {ty}"
    )))
}

const NS_PER_S: f64 = 1e9;

/// Nanoseconds as a `Duration` rounded up to whole microseconds (a timedelta's resolution).
fn micros_up(ns: u64) -> Duration {
    Duration::from_micros(ns.div_ceil(1_000))
}

/// The answer to a request. Truthy when allowed.
// `freelist`: decisions are made and dropped at the call rate, and reusing their memory saves
// a part of `try_acquire`'s cost (BENCHMARKS.md, "Python bindings"; the rest of the object's
// cost is CPython's allocation and reference protocol, which `Limiter.allow` skips).
#[pyclass(module = "sluicegate", name = "Decision", frozen, freelist = 64)]
pub(crate) struct PyDecision {
    inner: sluicegate::Decision,
}

impl From<sluicegate::Decision> for PyDecision {
    #[inline]
    fn from(inner: sluicegate::Decision) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl PyDecision {
    fn __bool__(&self) -> bool {
        self.inner.allowed()
    }
    /// Whether the request was admitted.
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed()
    }
    /// The bucket's capacity.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }
    /// Whole tokens left after this decision.
    #[getter]
    fn remaining(&self) -> u64 {
        self.inner.remaining()
    }
    /// Seconds to wait before the same request would be admitted (0.0 when allowed).
    #[getter]
    fn retry_after(&self) -> f64 {
        self.inner.retry_after_nanos() as f64 / NS_PER_S
    }
    /// `retry_after` in exact nanoseconds.
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.inner.retry_after_nanos()
    }
    /// Seconds until the bucket is full again (0.0 when full).
    #[getter]
    fn reset_after(&self) -> f64 {
        self.inner.reset_after_nanos() as f64 / NS_PER_S
    }
    /// `reset_after` in exact nanoseconds.
    #[getter]
    fn reset_after_ns(&self) -> u64 {
        self.inner.reset_after_nanos()
    }
    /// `retry_after` as a `datetime.timedelta`, rounded up to whole microseconds (a timedelta's
    /// resolution), so that waiting it is always enough.
    #[getter]
    fn retry_after_td(&self) -> Duration {
        micros_up(self.inner.retry_after_nanos())
    }
    /// `reset_after` as a `datetime.timedelta`, rounded up to whole microseconds.
    #[getter]
    fn reset_after_td(&self) -> Duration {
        micros_up(self.inner.reset_after_nanos())
    }
    /// The `Retry-After` value in whole seconds (at least 1), or None when allowed.
    #[getter]
    fn retry_after_header(&self) -> Option<u64> {
        self.inner.retry_after_header()
    }
    /// The policy window in whole seconds (`w` of the `RateLimit-Policy` field).
    #[getter]
    fn window_secs(&self) -> u64 {
        self.inner.window_secs()
    }
    /// Whether enforcement would have rejected this request, let through by shadow mode
    /// (then `allowed` is True, with the rejection's `remaining` and `retry_after`).
    #[getter]
    fn shadow_rejected(&self) -> bool {
        self.inner.shadow_rejected()
    }

    /// A decision from its figures (e.g. ones stored elsewhere), so that `headers()` renders
    /// them exactly as the core renders its own decisions. `shadow_rejected=True` is a shadow
    /// limiter's rejection let through (`allowed` must then be True; the other figures are
    /// the rejection's).
    #[staticmethod]
    #[pyo3(signature = (*, allowed, limit, remaining, retry_after_ns=None, reset_after_ns=None, window_secs=None, shadow_rejected=None))]
    fn from_figures(
        allowed: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        remaining: &Bound<'_, PyAny>,
        retry_after_ns: Option<&Bound<'_, PyAny>>,
        reset_after_ns: Option<&Bound<'_, PyAny>>,
        window_secs: Option<&Bound<'_, PyAny>>,
        shadow_rejected: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let flag = |v: &Bound<'_, PyAny>, name: &str| match v.cast::<PyBool>() {
            Ok(b) => Ok(b.is_true()),
            Err(_) => {
                let ty = v.get_type().name()?;
                Err(PyTypeError::new_err(format!(
                    "{name} must be a bool, not {ty}"
                )))
            }
        };
        let allowed = flag(allowed, "allowed")?;
        let shadow = match shadow_rejected {
            Some(v) => flag(v, "shadow_rejected")?,
            None => false,
        };
        Self::_from_pickle(
            allowed,
            uint(limit, "limit")?,
            uint(remaining, "remaining")?,
            opt_uint(retry_after_ns, "retry_after_ns")?.unwrap_or(0),
            opt_uint(reset_after_ns, "reset_after_ns")?.unwrap_or(0),
            opt_uint(window_secs, "window_secs")?.unwrap_or(1),
            shadow,
        )
    }

    /// Pickled (and copied) as its figures, which `from_figures` makes back into an equal
    /// decision with the same fields: a decision crosses to `multiprocessing` workers and
    /// into caches.
    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (bool, u64, u64, u64, u64, u64, bool))> {
        let d = &slf.get().inner;
        let rebuild = slf.get_type().getattr(intern!(slf.py(), "_from_pickle"))?;
        Ok((
            rebuild,
            (
                d.allowed(),
                d.limit(),
                d.remaining(),
                d.retry_after_nanos(),
                d.reset_after_nanos(),
                d.window_secs(),
                d.shadow_rejected(),
            ),
        ))
    }

    /// `__reduce__`'s rebuilder, and `from_figures` once its arguments are checked: the
    /// figures in `__reduce__`'s order.
    #[staticmethod]
    fn _from_pickle(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
        window_secs: u64,
        shadow_rejected: bool,
    ) -> PyResult<Self> {
        if shadow_rejected && !allowed {
            return Err(PyValueError::new_err(
                "shadow_rejected=True is a rejection let through: allowed must be True",
            ));
        }
        let d = sluicegate::Decision::from_figures(
            allowed && !shadow_rejected,
            limit,
            remaining,
            retry_after_ns,
            reset_after_ns,
            window_secs,
        );
        Ok(if shadow_rejected { d.shadowed() } else { d }.into())
    }

    /// The HTTP response fields for this decision, in order: `style` is "ietf", "draft6",
    /// "draft7", "legacy" or "none" (only `Retry-After`); `policy` names the IETF policy.
    #[pyo3(signature = (style="ietf", policy="default"))]
    fn headers<'py>(
        &self,
        py: Python<'py>,
        style: &str,
        policy: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let style = style.parse::<HeaderStyle>().map_err(to_py)?;
        let mut set = Ok(());
        self.inner.for_each_header(style, policy, |name, value| {
            if set.is_ok() {
                set = out.set_item(name, value);
            }
        });
        set.map(|()| out)
    }

    /// `headers(style, policy)` as raw header lines, the way ASGI servers take them: a list
    /// of `(name, value)` pairs of bytes, names in lower case.
    #[pyo3(signature = (style="ietf", policy="default"))]
    fn header_lines<'py>(
        &self,
        py: Python<'py>,
        style: &str,
        policy: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let style = style.parse::<HeaderStyle>().map_err(to_py)?;
        let out = PyList::empty(py);
        let mut appended = Ok(());
        self.inner.for_each_header(style, policy, |name, value| {
            if appended.is_err() {
                return;
            }
            // The core's names are short: lower-cased on the stack.
            let mut buf = [0u8; 32];
            let owned;
            let lower: &[u8] = match buf.get_mut(..name.len()) {
                Some(b) => {
                    b.copy_from_slice(name.as_bytes());
                    b.make_ascii_lowercase();
                    b
                }
                None => {
                    owned = name.to_ascii_lowercase();
                    owned.as_bytes()
                }
            };
            appended = out.append((PyBytes::new(py, lower), PyBytes::new(py, value.as_bytes())));
        });
        appended.map(|()| out)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyDecision>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after_ns={}, reset_after_ns={}{})",
            if d.allowed() { "True" } else { "False" },
            d.limit(),
            d.remaining(),
            d.retry_after_nanos(),
            d.reset_after_nanos(),
            if d.shadow_rejected() {
                ", shadow_rejected=True"
            } else {
                ""
            }
        )
    }
}

/// A lock-free rate limiter for one bucket. Safe to share between threads. With
/// `store="shm:NAME"` the bucket lives in a shared-memory region that every process of the
/// host opening that name shares (a region of one key); with `store="redis://..."` it is one
/// key of a Redis or Valkey server that every host on the same URL and quota shares.
#[pyclass(module = "sluicegate", name = "Limiter", frozen)]
pub(crate) struct PyLimiter {
    /// Boxed: the core's limiter is cache-line aligned (128 bytes), more than the 16 bytes
    /// Python's allocator gives an object (`aligned_for_python` below).
    pub(crate) inner: Box<Limiter<AnyClock>>,
    clock: Option<Py<PyManualClock>>,
    /// Set for a bucket on Redis.
    remote: Option<Remote>,
    /// The `on_reject` callable, for the cycle collector (`ops::HookSlot`).
    hook: ops::HookSlot,
}

#[pymethods]
impl PyLimiter {
    #[new]
    #[pyo3(signature = (quota, *, clock=None, store=None, metrics=false, shadow=false, on_reject=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        quota: &Bound<'_, PyAny>,
        clock: Option<Py<PyManualClock>>,
        store: Option<&str>,
        metrics: bool,
        shadow: bool,
        on_reject: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let quota = quota_arg(quota)?;
        let runtime = AnyClock::new(clock.as_ref().map(|c| &c.get().inner));
        let spec = convert::store(store)?;
        let remote = Remote::of(&spec).map_err(to_py)?;
        let shm = matches!(spec, sluicegate::StoreSpec::Shm { .. });
        let mut builder = Limiter::builder(quota)
            .store(spec)
            .clock(runtime)
            .metrics(metrics)
            .shadow(shadow);
        let hook = ops::hook_arg(on_reject, py)?.unwrap_or_default();
        if hook.is_set() {
            builder = builder.on_reject(ops::single_hook(hook.clone()));
        }
        let inner = remote::build(py, remote.as_ref(), shm, || builder.build()).map_err(to_py)?;
        Ok(Self {
            inner: Box::new(inner),
            clock,
            remote,
            hook,
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.hook.traverse(&visit)
    }

    fn __clear__(&self) {
        self.hook.clear();
    }

    /// Asks for `cost` tokens now. A rejection is a falsy Decision; errors mean misuse.
    #[pyo3(signature = (cost=1))]
    #[inline]
    fn try_acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        match self.call(py, |l| l.try_acquire(cost)) {
            Ok(d) => Ok(d.into()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` answering only whether `cost` was admitted (and taken): the fast path
    /// for callers that need no figures (no Decision object is made).
    #[pyo3(signature = (cost=1))]
    #[inline]
    fn allow(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<bool> {
        match self.call(py, |l| l.try_acquire(cost)) {
            Ok(d) => Ok(d.allowed()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` at an explicit reading of this limiter's clock, in nanoseconds.
    #[pyo3(signature = (now_ns, cost=1))]
    fn try_acquire_at(
        &self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let now = uint(now_ns, "now_ns")?;
        self.call(py, |l| l.try_acquire_at(now, cost))
            .map(Into::into)
            .map_err(to_py)
    }

    /// The current state, changing nothing (a request of cost 0).
    fn peek(&self, py: Python<'_>) -> PyResult<PyDecision> {
        self.call(py, Limiter::peek).map(Into::into).map_err(to_py)
    }

    /// Gives `cost` tokens back (work admitted but not done), capped at the burst.
    #[pyo3(signature = (cost=1))]
    fn refund(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        self.call(py, |l| l.refund(cost)).map_err(to_py)
    }

    /// `refund` at an explicit clock reading.
    #[pyo3(signature = (now_ns, cost=1))]
    fn refund_at(
        &self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let now = uint(now_ns, "now_ns")?;
        self.call(py, |l| l.refund_at(now, cost)).map_err(to_py)
    }

    /// `try_acquire` for asyncio: a coroutine. On Redis the call is awaited without blocking
    /// the event loop (the core's `try_acquire_async`); an in-process store answers at once.
    #[pyo3(signature = (cost=1))]
    async fn try_acquire_async(
        &self,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        remote::relayed(self.remote.as_ref(), self.inner.try_acquire_async(cost))
            .await
            .and_then(|r| r)
            .map(Into::into)
            .map_err(to_py)
    }

    /// `peek` for asyncio (not counted, as `peek`).
    async fn peek_async(&self) -> PyResult<PyDecision> {
        remote::relayed(self.remote.as_ref(), self.inner.peek_async())
            .await
            .and_then(|r| r)
            .map(Into::into)
            .map_err(to_py)
    }

    /// `refund` for asyncio.
    #[pyo3(signature = (cost=1))]
    async fn refund_async(&self, #[pyo3(from_py_with = convert::cost)] cost: u64) -> PyResult<()> {
        remote::relayed(self.remote.as_ref(), self.inner.refund_async(cost))
            .await
            .and_then(|r| r)
            .map_err(to_py)
    }

    /// The Redis store's counters of each outcome (a dict of ints: `decided`,
    /// `cached_rejections`, `failed_open`, `failed_closed`, `failed_local`, `failed_error`,
    /// `timeouts`, `unavailable`, `server_errors`, `connects`, `script_loads`, `redirects`), shared by every
    /// limiter of this process on the same URL; None for other stores.
    fn redis_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.inner
            .redis_stats()
            .map(|s| stats_dict(py, s))
            .transpose()
    }

    /// Reserves `cost` now through the core's `reserve` (`max_wait`: its `reserve_within`).
    /// A leaky queue may admit with a delay (`Reservation.delay`, seconds) that the caller
    /// must let pass before going ahead; with `max_wait` (seconds or timedelta) a longer delay
    /// is a rejection and reserves nothing. For every other algorithm this is `try_acquire`:
    /// admitted now, or rejected. `cancel()` gives an admitted reservation back (the core's
    /// `cancel`; once).
    #[pyo3(signature = (cost=1, *, max_wait=None))]
    fn reserve(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyReservation> {
        let max_wait = match max_wait.filter(|m| !m.is_none()) {
            Some(m) => Some(duration(m, "max_wait")?),
            None => None,
        };
        let decision = slf
            .get()
            .call(slf.py(), |l| match max_wait {
                Some(m) => l.reserve_within(cost, m),
                None => l.reserve(cost),
            })
            .map_err(to_py)?;
        Ok(PyReservation::new(
            Target::Single(slf.clone().unbind()),
            cost,
            decision,
        ))
    }

    /// Waits (with the GIL released, in slices that check for Ctrl-C) until `cost` is
    /// admitted, or returns the rejection when it cannot be admitted within `timeout` (seconds
    /// or timedelta; None waits as long as needed): the core's acquire policy
    /// (`start_acquire` / `poll_acquire`). A leaky queue reserves a slot within the timeout
    /// and sleeps until it (an interrupted sleep cancels the slot); other algorithms sleep the
    /// core's `retry_after` and try again.
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        Self::start(slf, cost, timeout)?.block(slf.py())
    }

    /// `acquire` for asyncio: awaits `asyncio.sleep` between the core's steps (a cancelled
    /// task gives a leaky-queue slot back).
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::start(slf, cost, timeout)?.into_coroutine(slf.py())
    }

    /// Whether the bucket is full now.
    fn is_full(&self, py: Python<'_>) -> PyResult<bool> {
        self.call(py, Limiter::is_full).map_err(to_py)
    }

    /// A reading of this limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.clock().now()
    }

    /// The quota this limiter enforces now.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota {
            inner: self.inner.quota(),
        }
    }

    /// Changes the quota live (a Quota or a rate string of the same algorithm): the bucket
    /// keeps its tokens, clamped to the new burst, and refills at the new rate
    /// (docs/OPERATIONS.md, "The carry rule"). A StoreError (kind "unsupported") on a
    /// shared-memory region or Redis.
    fn set_quota(&self, py: Python<'_>, quota: &Bound<'_, PyAny>) -> PyResult<()> {
        let quota = quota_arg(quota)?;
        self.call(py, |l| l.set_quota(quota)).map_err(to_py)
    }

    /// `set_quota` at an explicit reading of this limiter's clock, in nanoseconds.
    fn set_quota_at(
        &self,
        py: Python<'_>,
        quota: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let quota = quota_arg(quota)?;
        let now = uint(now_ns, "now_ns")?;
        self.call(py, |l| l.set_quota_at(quota, now)).map_err(to_py)
    }

    /// Shadow (dry-run) mode: decisions are made and counted, but every request goes through
    /// (`Decision.shadow_rejected` marks the ones enforcement would reject). Settable.
    #[getter]
    fn shadow(&self) -> bool {
        self.inner.is_shadow()
    }

    #[setter]
    fn set_shadow(&self, on: bool) {
        self.inner.set_shadow(on);
    }

    /// A snapshot of the counters, or None when built without `metrics=True`.
    fn metrics(&self) -> Option<ops::PyMetrics> {
        self.inner.metrics().map(Into::into)
    }

    /// The manual clock given at construction, or None for the system clock.
    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.clock.as_ref().map(|c| c.clone_ref(py))
    }

    /// An empty method: the floor of a call into this module, for benchmarks.
    fn _noop(&self) {}

    fn __repr__(&self) -> String {
        format!("Limiter({:?})", self.inner.quota().to_string())
    }
}

impl PyLimiter {
    /// Runs `f` on the core's limiter (detached from the interpreter on Redis).
    #[inline]
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Limiter<AnyClock>) -> Result<T, sluicegate::Error> + Send,
    ) -> Result<T, sluicegate::Error> {
        let inner = &self.inner;
        remote::call(py, self.remote.as_ref(), || f(inner))
    }

    /// The core's `start_acquire` for `cost` within `timeout`.
    fn start(
        slf: &Bound<'_, Self>,
        cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Acquire> {
        let plan = slf
            .get()
            .inner
            .start_acquire(cost, max_wait(timeout, "timeout")?);
        Ok(Acquire::Single(slf.clone().unbind(), plan))
    }
}

/// What a reservation gives its tokens back to.
pub(crate) enum Target {
    Single(Py<PyLimiter>),
    Keyed(Py<keyed::PyKeyedLimiter>, Box<[u8]>),
}

/// Tokens taken by `reserve`; `cancel()` gives them back once.
#[pyclass(module = "sluicegate", name = "Reservation", frozen)]
pub(crate) struct PyReservation {
    target: Target,
    cost: u64,
    decision: sluicegate::Decision,
    /// [`OPEN`] (tokens to give back), [`CANCELLING`] (a `cancel` is giving them back) or
    /// [`CLOSED`].
    state: AtomicU8,
}

/// A reservation's tokens are taken, not given back yet.
const OPEN: u8 = 0;
/// A `cancel` is giving them back (on Redis, with the GIL released).
const CANCELLING: u8 = 1;
/// Nothing to give back: given back, or nothing was taken.
const CLOSED: u8 = 2;

impl PyReservation {
    pub(crate) fn new(target: Target, cost: u64, decision: sluicegate::Decision) -> Self {
        Self {
            target,
            cost,
            decision,
            // A request shadow mode let through took nothing: nothing to give back.
            state: AtomicU8::new(
                if decision.allowed() && !decision.shadow_rejected() && cost > 0 {
                    OPEN
                } else {
                    CLOSED
                },
            ),
        }
    }
}

#[pymethods]
impl PyReservation {
    /// Reports the limiter the tokens go back to (see `Composite.__traverse__`).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match &self.target {
            Target::Single(l) => visit.call(l),
            Target::Keyed(l, _) => visit.call(l),
        }
    }

    fn __bool__(&self) -> bool {
        self.decision.allowed()
    }
    /// The decision taken at reservation.
    #[getter]
    fn decision(&self) -> PyDecision {
        self.decision.into()
    }
    /// The tokens reserved.
    #[getter]
    fn cost(&self) -> u64 {
        self.cost
    }
    /// Seconds to wait before going ahead: a leaky queue's delay until the reserved slot
    /// (0.0 for every other algorithm, for a rejection, and for a request shadow mode let
    /// through, whose decision carries the rejection's figures).
    #[getter]
    fn delay(&self) -> f64 {
        if self.decision.allowed() && !self.decision.shadow_rejected() {
            self.decision.retry_after_nanos() as f64 / NS_PER_S
        } else {
            0.0
        }
    }
    /// Gives the reserved tokens back (the core's `cancel`, the same as a refund). True the
    /// first time on an allowed reservation; False if it took nothing, was already cancelled,
    /// or another thread's `cancel` is giving them back now. A give-back that fails (a
    /// StoreError on Redis) raises and leaves the reservation open: a later `cancel` tries
    /// again.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        // Taken for the give-back (not waited for: on Redis it runs detached, and a thread
        // waiting here with the GIL held would keep it from finishing).
        if self
            .state
            .compare_exchange(OPEN, CANCELLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(false);
        }
        let cancelled = match &self.target {
            Target::Single(l) => l.get().call(py, |l| l.cancel(self.cost)),
            Target::Keyed(l, key) => l.get().call(py, |l| l.cancel(&key[..], self.cost)),
        };
        let (state, outcome) = match cancelled {
            Ok(()) => (CLOSED, Ok(true)),
            Err(e) => (OPEN, Err(to_py(e))),
        };
        self.state.store(state, Ordering::Release);
        outcome
    }

    fn __repr__(&self) -> String {
        format!(
            "Reservation(allowed={}, cost={}, delay={})",
            if self.decision.allowed() {
                "True"
            } else {
                "False"
            },
            self.cost,
            self.delay()
        )
    }
}

/// A Redis store's counters as a dict (`redis_stats()`).
pub(crate) fn stats_dict(py: Python<'_>, s: sluicegate::RedisStats) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (name, n) in [
        ("decided", s.decided),
        ("cached_rejections", s.cached_rejections),
        ("failed_open", s.failed_open),
        ("failed_closed", s.failed_closed),
        ("failed_local", s.failed_local),
        ("failed_error", s.failed_error),
        ("timeouts", s.timeouts),
        ("unavailable", s.unavailable),
        ("server_errors", s.server_errors),
        ("connects", s.connects),
        ("script_loads", s.script_loads),
        ("redirects", s.redirects),
    ] {
        out.set_item(name, n)?;
    }
    Ok(out)
}

/// An empty module function: the floor of a call into this module, for benchmarks.
#[pyfunction]
fn _noop() {}

/// The store of one limit among an app's limits, `suffix` naming the limit (the web
/// integrations give each limit its own): a shared-memory region's name gets `.SUFFIX`
/// (`"shm:/app"` -> `"shm:/app.x1"`, a `?capacity=` kept); a Redis URL's `prefix` gets
/// `:SUFFIX` (`"redis://h/0?prefix=app&on_error=open"` -> `"redis://h/0?on_error=open&prefix=app:x1"`,
/// no prefix given: `sluicegate:x1`), the rest of the URL as given (a password included);
/// `"memory"` stays `"memory"`. The core parses `spec` and the result (a bad one is its
/// InvalidOptionError).
#[pyfunction]
fn _store_with_suffix(spec: &str, suffix: &str) -> PyResult<String> {
    let named = match convert::store(Some(spec))? {
        sluicegate::StoreSpec::Shm { name, capacity } => sluicegate::StoreSpec::Shm {
            name: format!("{name}.{suffix}"),
            capacity,
        }
        .to_string(),
        sluicegate::StoreSpec::Redis { options, .. } => {
            // Edited as text: the spec's `Display` redacts the password.
            let (base, query) = spec.trim().split_once('?').unwrap_or((spec.trim(), ""));
            let mut pairs: Vec<String> = query
                .split('&')
                .filter(|p| !p.is_empty() && p.split('=').next() != Some("prefix"))
                .map(str::to_string)
                .collect();
            pairs.push(format!("prefix={}:{suffix}", options.prefix));
            format!("{base}?{}", pairs.join("&"))
        }
        other => other.to_string(),
    };
    convert::store(Some(&named))?;
    Ok(named)
}

/// `spec` as the core prints it (`StoreSpec`'s `Display`: a Redis URL's password `***`), for
/// messages.
#[pyfunction]
fn _store_shown(spec: &str) -> PyResult<String> {
    Ok(convert::store(Some(spec))?.to_string())
}

/// What kind of store `spec` names: `"memory"`, `"shm"` or `"redis"` (the core parses it).
#[pyfunction]
fn _store_kind(spec: &str) -> PyResult<&'static str> {
    Ok(match convert::store(Some(spec))? {
        sluicegate::StoreSpec::Shm { .. } => "shm",
        sluicegate::StoreSpec::Redis { .. } => "redis",
        _ => "memory",
    })
}

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQuota>()?;
    m.add_class::<PyLimiter>()?;
    m.add_class::<PyDecision>()?;
    m.add_class::<PyManualClock>()?;
    m.add_class::<PyReservation>()?;
    m.add_class::<keyed::PyKeyedLimiter>()?;
    m.add_class::<composite::PyComposite>()?;
    m.add_class::<acquire::PyAcquire>()?;
    m.add_class::<ops::PyMetrics>()?;
    m.add_class::<ops::PyRejection>()?;
    m.add_function(wrap_pyfunction!(ops::render_prometheus, m)?)?;
    m.add("DEFAULT_MAX_KEYS", sluicegate::DEFAULT_MAX_KEYS)?;
    m.add_function(wrap_pyfunction!(_noop, m)?)?;
    m.add_function(wrap_pyfunction!(_store_with_suffix, m)?)?;
    m.add_function(wrap_pyfunction!(_store_kind, m)?)?;
    m.add_function(wrap_pyfunction!(_store_shown, m)?)?;
    // Whether `?clock=test` works on Redis URLs: the test build only (tests/test_redis*.py).
    m.add("_REDIS_TEST_CLOCK", cfg!(feature = "redis-test-clock"))?;
    m.add("CENTURY_NS", sluicegate::CENTURY_NS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    client::register(m)?;
    Ok(())
}
