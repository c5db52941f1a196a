//! `sluicegate._native`: thin pyo3 wrappers over the `sluicegate` core crate.
//!
//! Conversion and error mapping only; every decision comes from the core. The module declares
//! `gil_used = false`: every class is `frozen` and `Sync`, its state lives in the core's atomics,
//! and the threaded pytest (tests/test_threads.py) checks that no bound is exceeded.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};
use sluicegate::http::HeaderStyle;
use sluicegate::{Clock, Limiter, ManualClock, MonotonicClock, Quota, Refill};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod convert;
mod errors;
mod keyed;

use convert::{duration, duration_ns, opt_uint, uint};
use errors::to_py;

/// The clock a limiter reads, chosen at run time: the core's TSC clock, or a manual clock
/// shared with Python. An enum rather than `Box<dyn Clock>`: one predictable branch, no call
/// through a pointer on the hot path.
#[derive(Clone)]
pub(crate) enum RuntimeClock {
    Monotonic(MonotonicClock),
    Manual(ManualClock),
}

impl Clock for RuntimeClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            RuntimeClock::Monotonic(c) => c.now(),
            RuntimeClock::Manual(c) => c.now(),
        }
    }
}

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

fn refill_mode(s: &str) -> PyResult<Refill> {
    match s {
        "continuous" => Ok(Refill::Continuous),
        "interval" => Ok(Refill::Interval),
        other => Err(PyValueError::new_err(format!(
            "refill must be \"continuous\" or \"interval\", not {other:?}"
        ))),
    }
}

#[pymethods]
impl PyQuota {
    #[new]
    #[pyo3(signature = (rate=None, /, *, count=None, period=None, period_ns=None, burst=None, initial=None, refill=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        rate: Option<&Bound<'_, PyAny>>,
        count: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        period_ns: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        initial: Option<&Bound<'_, PyAny>>,
        refill: Option<&str>,
    ) -> PyResult<Self> {
        let keywords = [count, period, period_ns, burst, initial]
            .iter()
            .any(Option::is_some)
            || refill.is_some();
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
        let burst = opt_uint(burst, "burst")?.unwrap_or(count);
        let mut q = Quota::try_new(count, period_ns, burst).map_err(to_py)?;
        if let Some(i) = opt_uint(initial, "initial")? {
            q = q.initial(i);
        }
        if let Some(r) = refill {
            q = q.refill(refill_mode(r)?);
        }
        q.validate().map_err(to_py)?;
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
        self.inner.capacity()
    }
    /// Tokens in the bucket at creation.
    #[getter]
    fn initial(&self) -> u64 {
        self.inner.initial_tokens()
    }
    /// `"continuous"` or `"interval"`.
    #[getter]
    fn refill(&self) -> &'static str {
        match self.inner.refill_mode() {
            Refill::Continuous => "continuous",
            Refill::Interval => "interval",
        }
    }
    /// The policy window in whole seconds (`w` of the `RateLimit-Policy` field).
    #[getter]
    fn window_secs(&self) -> u64 {
        self.inner.window_secs()
    }

    fn __repr__(&self) -> String {
        format!("Quota({:?})", self.inner.to_string())
    }
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

fn header_style(s: &str) -> PyResult<HeaderStyle> {
    match s {
        "ietf" => Ok(HeaderStyle::Ietf),
        "draft6" => Ok(HeaderStyle::Draft6),
        "draft7" => Ok(HeaderStyle::Draft7),
        "legacy" => Ok(HeaderStyle::Legacy),
        "none" => Ok(HeaderStyle::None),
        other => Err(PyValueError::new_err(format!(
            "style must be one of \"ietf\", \"draft6\", \"draft7\", \"legacy\", \"none\", not {other:?}"
        ))),
    }
}

const NS_PER_S: f64 = 1e9;

/// The answer to a request. Truthy when allowed.
#[pyclass(module = "sluicegate", name = "Decision", frozen)]
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
    /// The `Retry-After` value in whole seconds (at least 1), or None when allowed.
    #[getter]
    fn retry_after_header(&self) -> Option<u64> {
        self.inner.retry_after_header()
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
        for (name, value) in self.inner.headers(header_style(style)?, policy) {
            out.set_item(name, value)?;
        }
        Ok(out)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyDecision>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after_ns={}, reset_after_ns={})",
            if d.allowed() { "True" } else { "False" },
            d.limit(),
            d.remaining(),
            d.retry_after_nanos(),
            d.reset_after_nanos()
        )
    }
}

/// A lock-free rate limiter for one bucket. Safe to share between threads.
#[pyclass(module = "sluicegate", name = "Limiter", frozen)]
struct PyLimiter {
    inner: Limiter<RuntimeClock>,
    clock: Option<Py<PyManualClock>>,
}

/// The longest single sleep of a blocking `acquire`, so that Ctrl-C is seen promptly.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

static AIO_ACQUIRE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pymethods]
impl PyLimiter {
    #[new]
    #[pyo3(signature = (quota, *, clock=None))]
    fn new(quota: &Bound<'_, PyAny>, clock: Option<Py<PyManualClock>>) -> PyResult<Self> {
        let quota = quota_arg(quota)?;
        let runtime = match &clock {
            Some(c) => RuntimeClock::Manual(c.get().inner.clone()),
            None => RuntimeClock::Monotonic(MonotonicClock::new()),
        };
        let inner = Limiter::with_clock(quota, runtime).map_err(to_py)?;
        Ok(Self { inner, clock })
    }

    /// Asks for `cost` tokens now. A rejection is a falsy Decision; errors mean misuse.
    #[pyo3(signature = (cost=1))]
    #[inline]
    fn try_acquire(&self, #[pyo3(from_py_with = convert::cost)] cost: u64) -> PyResult<PyDecision> {
        match self.inner.try_acquire(cost) {
            Ok(d) => Ok(d.into()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` at an explicit reading of this limiter's clock, in nanoseconds.
    #[pyo3(signature = (now_ns, cost=1))]
    fn try_acquire_at(
        &self,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let now = uint(now_ns, "now_ns")?;
        self.inner
            .try_acquire_at(now, cost)
            .map(Into::into)
            .map_err(to_py)
    }

    /// The current state, changing nothing (a request of cost 0).
    fn peek(&self) -> PyResult<PyDecision> {
        self.inner.peek().map(Into::into).map_err(to_py)
    }

    /// Gives `cost` tokens back (work admitted but not done), capped at the burst.
    #[pyo3(signature = (cost=1))]
    fn refund(&self, #[pyo3(from_py_with = convert::cost)] cost: u64) -> PyResult<()> {
        self.inner.refund(cost).map_err(to_py)
    }

    /// `refund` at an explicit clock reading.
    #[pyo3(signature = (now_ns, cost=1))]
    fn refund_at(
        &self,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let now = uint(now_ns, "now_ns")?;
        self.inner.refund_at(now, cost).map_err(to_py)
    }

    /// Takes `cost` tokens if they are available now; the reservation's `cancel()` gives them
    /// back (once). A falsy reservation took nothing.
    #[pyo3(signature = (cost=1))]
    fn reserve(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyReservation> {
        let decision = slf.get().inner.try_acquire(cost).map_err(to_py)?;
        Ok(PyReservation::new(
            Target::Single(slf.clone().unbind()),
            cost,
            decision,
        ))
    }

    /// Waits (with the GIL released) until `cost` tokens are taken, or until `timeout`
    /// (seconds or timedelta; None waits as long as needed) would be exceeded. Returns the
    /// last decision: falsy if the wait would overrun the timeout.
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        wait(py, timeout, || self.inner.try_acquire(cost))
    }

    /// `acquire` for asyncio: awaits `asyncio.sleep` between tries.
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let timeout = match timeout.filter(|t| !t.is_none()) {
            Some(t) => Some(duration(t, "timeout")?.as_secs_f64()),
            None => None,
        };
        let helper = AIO_ACQUIRE.import(py, "sluicegate._aio", "acquire")?;
        let args = PyTuple::new(py, [cost])?;
        helper.call1((slf.getattr("try_acquire")?, args, timeout))
    }

    /// Whether the bucket is full now.
    fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    /// A reading of this limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.clock().now()
    }

    /// The quota this limiter enforces.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota {
            inner: *self.inner.quota(),
        }
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

/// What a reservation gives its tokens back to.
pub(crate) enum Target {
    Single(Py<PyLimiter>),
    Keyed(Py<keyed::PyKeyedLimiter>, Py<PyAny>),
}

/// Tokens taken by `reserve`; `cancel()` gives them back once.
#[pyclass(module = "sluicegate", name = "Reservation", frozen)]
pub(crate) struct PyReservation {
    target: Target,
    cost: u64,
    decision: sluicegate::Decision,
    open: AtomicBool,
}

impl PyReservation {
    pub(crate) fn new(target: Target, cost: u64, decision: sluicegate::Decision) -> Self {
        Self {
            target,
            cost,
            decision,
            open: AtomicBool::new(decision.allowed() && cost > 0),
        }
    }
}

#[pymethods]
impl PyReservation {
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
    /// Gives the reserved tokens back. True the first time on an allowed reservation; False
    /// if it took nothing or was already cancelled.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        if !self.open.swap(false, Ordering::AcqRel) {
            return Ok(false);
        }
        let refunded = match &self.target {
            Target::Single(l) => l.get().inner.refund(self.cost),
            Target::Keyed(l, key) => l.get().refund_key(&keyed::key(key.bind(py))?, self.cost),
        };
        refunded.map_err(to_py)?;
        Ok(true)
    }
}

/// The blocking wait shared by `Limiter.acquire` and `KeyedLimiter.acquire`: tries, and
/// sleeps the core's `retry_after` (in slices, with the GIL released, checking for signals)
/// until admitted, or returns the rejection at once when the wait would overrun `timeout`.
pub(crate) fn wait(
    py: Python<'_>,
    timeout: Option<&Bound<'_, PyAny>>,
    mut attempt: impl FnMut() -> Result<sluicegate::Decision, sluicegate::Error>,
) -> PyResult<PyDecision> {
    let deadline = match timeout.filter(|t| !t.is_none()) {
        Some(t) => Some(Instant::now() + duration(t, "timeout")?),
        None => None,
    };
    loop {
        let d = attempt().map_err(to_py)?;
        if d.allowed() {
            return Ok(d.into());
        }
        let wait = d.retry_after();
        if let Some(deadline) = deadline {
            if Instant::now() + wait > deadline {
                return Ok(d.into());
            }
        }
        py.detach(|| std::thread::sleep(wait.clamp(Duration::from_micros(1), SLEEP_SLICE)));
        py.check_signals()?;
    }
}

/// An empty module function: the floor of a call into this module, for benchmarks.
#[pyfunction]
fn _noop() {}

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQuota>()?;
    m.add_class::<PyLimiter>()?;
    m.add_class::<PyDecision>()?;
    m.add_class::<PyManualClock>()?;
    m.add_class::<PyReservation>()?;
    m.add_class::<keyed::PyKeyedLimiter>()?;
    m.add("DEFAULT_MAX_KEYS", sluicegate::DEFAULT_MAX_KEYS)?;
    m.add_function(wrap_pyfunction!(_noop, m)?)?;
    m.add("CENTURY_NS", sluicegate::CENTURY_NS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    Ok(())
}
