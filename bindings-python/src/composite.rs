//! `Composite`: several `Limiter`s consumed all-or-nothing, a thin wrapper over
//! `sluicegate::composite::try_acquire_all` (the parts stay ordinary limiters, usable alone).
//! Parts all on one Redis deployment are decided by one script call on the server.
//!
//! The `*_async` methods run the blocking call on a thread of the event loop's default
//! executor when a part is on Redis (`_aio.call`): the core's async composite is a method of
//! its own `Composite`, which owns its parts, where this class shares them with Python.

use crate::acquire::Acquire;
use crate::convert::{self, uint};
use crate::errors::to_py;
use crate::remote::{self, Remote};
use crate::{PyDecision, PyLimiter};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use pyo3::{PyTraverseError, PyVisit};
use sluicegate::composite::{self, peek_all, try_acquire_all, try_acquire_all_at};
use sluicegate::{AcquirePlan, AnyClock, Error, Limiter, Next};

/// Limiters (per user, per tenant, global, any algorithms) consumed all-or-nothing: a request
/// is taken from every part, or from none. The decision reports the tightest part's `limit`
/// and `remaining` and the longest `retry_after` and `reset_after` (docs/SEMANTICS.md,
/// "Composite limits"). The parts must read one clock: all the system clock, or one
/// `ManualClock`.
#[pyclass(module = "sluicegate", name = "Composite", frozen)]
pub(crate) struct PyComposite {
    parts: Vec<Py<PyLimiter>>,
    /// The first part's Redis store, if a part is on one.
    remote: Option<Remote>,
}

impl PyComposite {
    /// Runs `f` over the parts (detached from the interpreter when a part is on Redis).
    fn with_parts<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&[&Limiter<AnyClock>]) -> Result<R, Error> + Send,
    ) -> Result<R, Error> {
        let parts = self.cores();
        remote::call(py, self.remote.as_ref(), || f(&parts))
    }

    /// The store outside the process a part is on, if any.
    pub(crate) fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }

    /// `sluicegate._aio.call(method, remote, *args)`: the coroutine of an `*_async` method.
    fn offload<'py>(
        slf: &Bound<'py, Self>,
        method: &str,
        cost: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        static AIO_CALL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = slf.py();
        let call = AIO_CALL.import(py, "sluicegate._aio", "call")?;
        let (method, remote) = (slf.getattr(method)?, slf.get().remote.is_some());
        match cost {
            Some(c) => call.call1((method, remote, c)),
            None => call.call1((method, remote)),
        }
    }
}

#[pymethods]
impl PyComposite {
    /// Reports the parts to the cycle collector: a cycle through a composite (a service
    /// object holding a limiter whose hook is its own method, and a composite of it) is
    /// collected; its references went unreported, and the cycle was kept for ever.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.parts.iter().try_for_each(|p| visit.call(p))
    }

    #[new]
    fn new(parts: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut out: Vec<Py<PyLimiter>> = Vec::new();
        for part in parts.try_iter()? {
            let part = part?;
            let Ok(limiter) = part.cast::<PyLimiter>() else {
                let ty = part.get_type().name()?;
                return Err(PyTypeError::new_err(format!(
                    "the parts of a Composite must be Limiter objects, not {ty}"
                )));
            };
            out.push(limiter.clone().unbind());
        }
        let Some(first) = out.first() else {
            return Err(PyValueError::new_err(
                "a Composite needs at least one Limiter",
            ));
        };
        let same_clock = |p: &Py<PyLimiter>| match (&first.get().clock, &p.get().clock) {
            (None, None) => true,
            (Some(a), Some(b)) => a.is(b),
            _ => false,
        };
        if !out.iter().all(same_clock) {
            return Err(PyValueError::new_err(
                "the parts of a Composite must read one clock (all the system clock, or one ManualClock)",
            ));
        }
        let remote = out.iter().find_map(|p| p.get().remote.clone());
        Ok(Self { parts: out, remote })
    }

    /// Takes `cost` from every part now, or from none.
    #[pyo3(signature = (cost=1))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        self.with_parts(py, |p| try_acquire_all(p, cost))
            .map(Into::into)
            .map_err(to_py)
    }

    /// `try_acquire` answering only whether `cost` was admitted (and taken from every part).
    #[pyo3(signature = (cost=1))]
    fn allow(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<bool> {
        self.with_parts(py, |p| try_acquire_all(p, cost))
            .map(|d| d.allowed())
            .map_err(to_py)
    }

    /// `try_acquire` at an explicit clock reading, in nanoseconds.
    #[pyo3(signature = (now_ns, cost=1))]
    fn try_acquire_at(
        &self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let now = uint(now_ns, "now_ns")?;
        self.with_parts(py, |p| try_acquire_all_at(p, now, cost))
            .map(Into::into)
            .map_err(to_py)
    }

    /// The combined current state, changing nothing and counting nothing (each part's
    /// `peek`; on Redis a server that does not answer is a `StoreError` whatever `on_error`
    /// says).
    fn peek(&self, py: Python<'_>) -> PyResult<PyDecision> {
        self.with_parts(py, |p| peek_all(p))
            .map(Into::into)
            .map_err(to_py)
    }

    /// `try_acquire` for asyncio: a coroutine that never blocks the event loop (with a part on
    /// Redis, the call runs on the loop's default executor).
    #[pyo3(signature = (cost=1))]
    fn try_acquire_async<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::offload(slf, "try_acquire", Some(cost))
    }

    /// `peek` for asyncio.
    fn peek_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::offload(slf, "peek", None)
    }

    /// `refund` for asyncio.
    #[pyo3(signature = (cost=1))]
    fn refund_async<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::offload(slf, "refund", Some(cost))
    }

    /// Waits (GIL released, Ctrl-C checked) until `cost` is admitted by every part, or
    /// returns the rejection when it cannot be within `timeout`. As `Limiter.acquire`; a
    /// leaky-queue part admits with its own wait, and an interrupted wait refunds every part.
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        Self::start(slf, cost, timeout)?.block(slf.py())
    }

    /// `acquire` for asyncio.
    #[pyo3(signature = (cost=1, timeout=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::start(slf, cost, timeout)?.into_coroutine(slf.py())
    }

    /// Gives `cost` back to every part.
    #[pyo3(signature = (cost=1))]
    fn refund(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        remote::call(py, self.remote(), || self.refund_cost(cost)).map_err(to_py)
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
        self.with_parts(py, |p| composite::refund_all_at(p, now, cost))
            .map_err(to_py)
    }

    /// The limiters, in order.
    #[getter]
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.parts.iter().map(|p| p.clone_ref(py)))
    }

    fn __len__(&self) -> usize {
        self.parts.len()
    }

    fn __repr__(&self) -> String {
        let quotas: Vec<String> = self
            .parts
            .iter()
            .map(|p| format!("{:?}", p.get().inner.quota().to_string()))
            .collect();
        format!("Composite([{}])", quotas.join(", "))
    }
}

impl PyComposite {
    /// Refunds every part now (the core's `refund_all`); a blocking call on Redis.
    pub(crate) fn refund_cost(&self, cost: u64) -> Result<(), Error> {
        composite::refund_all(&self.cores(), cost)
    }

    /// The parts' core limiters.
    fn cores(&self) -> Vec<&Limiter<AnyClock>> {
        self.parts.iter().map(|p| &*p.get().inner).collect()
    }

    /// An acquire of `cost` within `timeout`, starting now.
    fn start(
        slf: &Bound<'_, Self>,
        cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Acquire> {
        let max_wait = convert::max_wait(timeout, "timeout")?;
        let plan = composite::start_acquire_all(&slf.get().cores(), cost, max_wait);
        Ok(Acquire::Composite(slf.clone().unbind(), plan))
    }

    /// One round of `plan` at the clock's reading now (the core's `poll_acquire_all`); a
    /// blocking call on Redis.
    pub(crate) fn poll_acquire(&self, plan: &mut AcquirePlan) -> Result<Next, Error> {
        composite::poll_acquire_all(&self.cores(), plan)
    }
}
