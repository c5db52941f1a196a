//! `acquire` and `acquire_async`: the core's acquire planner (`start_acquire` / `poll_acquire`)
//! driven with Python's sleeps. The binding keeps only its sleep primitives (a thread sleep
//! with the GIL released, in slices that check for Ctrl-C; `asyncio.sleep` in `_aio.py`) and
//! the interruption handling: an admitted wait (a leaky queue's slot) that is interrupted
//! gives its cost back before the interruption is reported. What to reserve, how long to wait
//! and when to give up all come from the core; the outcome when time runs out is the core's
//! rejection Decision.
//!
//! On Redis each step is a round trip, made with the GIL released; `acquire_async` makes it
//! on a thread of the event loop's default executor (`_aio.call`), because the core's acquire
//! steps are blocking calls (a `poll_acquire` future would let it await them instead).

use crate::composite::PyComposite;
use crate::errors::to_py;
use crate::keyed::PyKeyedLimiter;
use crate::remote::{self, Remote};
use crate::{PyDecision, PyLimiter};
use pyo3::exceptions::{PyRuntimeError, PyRuntimeWarning};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{PyTraverseError, PyVisit};
use sluicegate::{AcquirePlan, Error, Next};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest single sleep of a blocking `acquire`, so that Ctrl-C is seen promptly.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// One acquire in progress: what it polls, and the core's plan.
pub(crate) enum Acquire {
    Single(Py<PyLimiter>, AcquirePlan),
    Keyed(Py<PyKeyedLimiter>, Box<[u8]>, AcquirePlan),
    Composite(Py<PyComposite>, AcquirePlan),
}

impl Acquire {
    /// The store outside the process this acquire's steps go to, if any.
    fn remote(&self) -> Option<&Remote> {
        match self {
            Acquire::Single(l, _) => l.get().remote.as_ref(),
            Acquire::Keyed(l, _, _) => l.get().remote.as_ref(),
            Acquire::Composite(c, _) => c.get().remote(),
        }
    }

    /// The core's next step (`poll_acquire`), detached from the interpreter on Redis.
    fn poll(&mut self, py: Python<'_>) -> Result<Next, Error> {
        match self {
            Acquire::Single(l, plan) => {
                let l = l.get();
                remote::call(py, l.remote.as_ref(), || l.inner.poll_acquire(plan))
            }
            Acquire::Keyed(l, key, plan) => {
                let l = l.get();
                remote::call(py, l.remote.as_ref(), || {
                    l.inner.poll_acquire(&key[..], plan)
                })
            }
            Acquire::Composite(c, plan) => {
                let c = c.get();
                remote::call(py, c.remote(), || c.poll_acquire(plan))
            }
        }
    }

    /// Gives an admitted cost back (the core's `cancel`; a composite's `refund`).
    fn cancel(&self, py: Python<'_>) -> Result<(), Error> {
        remote::call(py, self.remote(), || match self {
            Acquire::Single(l, plan) => l.get().inner.cancel(plan.cost()),
            Acquire::Keyed(l, key, plan) => l.get().inner.cancel(&key[..], plan.cost()),
            Acquire::Composite(c, plan) => c.get().refund_cost(plan.cost()),
        })
    }

    /// Runs the plan to its outcome, sleeping with the GIL released: the admitting decision,
    /// or the rejection. A signal (Ctrl-C) during an admitted wait gives the cost back.
    pub(crate) fn block(mut self, py: Python<'_>) -> PyResult<PyDecision> {
        loop {
            let next = self.poll(py).map_err(to_py)?;
            // The core's wait: a leaky queue's slot; none for a request that shadow mode let
            // through (it carries the rejection's figures and took nothing to give back).
            let wait = next.wait();
            match next {
                Next::Admit(d) => {
                    if let Err(interrupted) = sleep_interruptibly(py, wait) {
                        if let Err(e) = self.cancel(py) {
                            give_back_failed(py, &interrupted, to_py(e));
                        }
                        return Err(interrupted);
                    }
                    return Ok(d.into());
                }
                Next::Reject(d) => return Ok(d.into()),
                Next::Retry(d) => sleep_interruptibly(py, d.retry_after())?,
            }
        }
    }

    /// The coroutine of `acquire_async`: `sluicegate._aio.acquire` over this plan.
    pub(crate) fn into_coroutine(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        static AIO_ACQUIRE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let plan = PyAcquire {
            remote: self.remote().is_some(),
            inner: Mutex::new((self, false)),
        };
        AIO_ACQUIRE
            .import(py, "sluicegate._aio", "acquire")?
            .call1((plan,))
    }
}

/// Reports a give-back that failed (`error`: a `StoreError` on Redis under `on_error=error`)
/// after `interrupted` (Ctrl-C) ended an admitted wait: a `RuntimeWarning`, as `_aio` reports
/// one for a cancelled task, so that the interruption stays the exception raised. A warning
/// that is itself raised (`-W error`) becomes the interruption's `__context__`.
#[cold]
fn give_back_failed(py: Python<'_>, interrupted: &PyErr, error: PyErr) {
    let kind = error
        .get_type(py)
        .name()
        .map_or_else(|_| "Exception".to_owned(), |n| n.to_string());
    let message = std::ffi::CString::new(format!(
        "sluicegate: an interrupted acquire could not give back the cost it was admitted \
         ({kind}: {}); the tokens stay taken",
        error.value(py)
    ))
    .unwrap_or_else(|_| {
        c"sluicegate: an interrupted acquire could not give back the cost it was admitted"
            .to_owned()
    });
    if let Err(raised) = PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1) {
        interrupted.set_context(py, Some(raised));
    }
}

/// Sleeps `total` with the GIL released, in slices that check for signals (Ctrl-C).
fn sleep_interruptibly(py: Python<'_>, total: Duration) -> PyResult<()> {
    // A wait past what `Instant` can represent never ends: sleep slice after slice.
    let end = Instant::now().checked_add(total);
    loop {
        let left = end.map_or(total, |e| e.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Ok(());
        }
        py.detach(|| std::thread::sleep(left.min(SLEEP_SLICE)));
        py.check_signals()?;
    }
}

/// An acquire in progress, polled by `sluicegate._aio.acquire` between its `asyncio.sleep`s.
#[pyclass(module = "sluicegate._native", name = "_Acquire", frozen)]
pub(crate) struct PyAcquire {
    /// The acquire, and whether its last poll admitted (not yet given back by `cancel`).
    inner: Mutex<(Acquire, bool)>,
    remote: bool,
}

impl PyAcquire {
    /// The acquire, for one step. Never waits for the lock: a step on Redis runs with the GIL
    /// released, and a thread waiting here with the GIL held would keep it from finishing.
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, (Acquire, bool)>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "another step of this acquire is running",
            )),
        }
    }
}

#[pymethods]
impl PyAcquire {
    /// Reports the limiter (or composite) the acquire runs on (see `Composite.__traverse__`).
    /// A step in progress holds the lock, and the references are then not reported: the
    /// collector must not wait.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let Ok(inner) = self.inner.try_lock() else {
            return Ok(());
        };
        match &inner.0 {
            Acquire::Single(l, _) => visit.call(l),
            Acquire::Keyed(l, _, _) => visit.call(l),
            Acquire::Composite(c, _) => visit.call(c),
        }
    }

    /// The core's next step: `("admit", d)` (wait `d.retry_after`, then go ahead),
    /// `("reject", d)` (the outcome) or `("retry", d)` (wait `d.retry_after`, poll again).
    fn poll(&self, py: Python<'_>) -> PyResult<(&'static str, PyDecision)> {
        let mut inner = self.lock()?;
        let next = inner.0.poll(py).map_err(to_py)?;
        // A shadow mode's admission took nothing: there is nothing to give back.
        inner.1 = matches!(next, Next::Admit(d) if !d.shadow_rejected());
        Ok(match next {
            Next::Admit(d) => ("admit", d.into()),
            Next::Reject(d) => ("reject", d.into()),
            Next::Retry(d) => ("retry", d.into()),
        })
    }

    /// Gives an admitted cost back (its wait was cancelled). True the first time after an
    /// admission; False otherwise.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        let mut inner = self.lock()?;
        if !std::mem::take(&mut inner.1) {
            return Ok(false);
        }
        inner.0.cancel(py).map_err(to_py)?;
        Ok(true)
    }

    /// Whether the steps are round trips to a store outside the process (Redis): blocking
    /// calls, which `_aio.acquire` makes off the event loop's thread.
    #[getter]
    fn remote(&self) -> bool {
        self.remote
    }
}
