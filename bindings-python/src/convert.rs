//! Argument conversion with clear errors: every wrong type or value becomes a `TypeError`,
//! `ValueError` or `OverflowError` naming the argument, never a panic.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyType};
use sluicegate::StoreSpec;
use std::time::Duration;

/// A non-negative integer argument that fits `u64` (costs, counts, clock readings).
#[inline]
pub(crate) fn uint(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(v) = obj.extract::<u64>() {
            return Ok(v);
        }
    }
    uint_slow(obj, what)
}

#[cold]
fn uint_slow(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not bool"
        )));
    }
    // Anything with __index__ (int subclasses, numpy integers) is an integer; nothing else is.
    let Ok(index) = obj.call_method0("__index__") else {
        let ty = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "{what} must be a non-negative int, not {ty}"
        )));
    };
    if let Ok(v) = index.extract::<u64>() {
        return Ok(v);
    }
    if index.lt(0)? {
        return Err(PyValueError::new_err(format!(
            "{what} must be >= 0, got {index}"
        )));
    }
    Err(PyOverflowError::new_err(format!(
        "{what} {index} is too large (at most 2**64 - 1)"
    )))
}

/// An optional non-negative integer argument.
pub(crate) fn opt_uint(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u64>> {
    obj.filter(|o| !o.is_none())
        .map(|o| uint(o, what))
        .transpose()
}

/// A cost argument (`from_py_with`).
#[inline]
pub(crate) fn cost(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    uint(obj, "cost")
}

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A length of time: a `datetime.timedelta`, or a number of seconds (int or float). Negative,
/// NaN and out-of-range values are refused.
pub(crate) fn duration(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let py = obj.py();
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a timedelta, not bool"
        )));
    }
    if obj.is_instance(TIMEDELTA.import(py, "datetime", "timedelta")?)? {
        let days: i64 = obj.getattr("days")?.extract()?;
        let secs: i64 = obj.getattr("seconds")?.extract()?;
        let micros: i64 = obj.getattr("microseconds")?.extract()?;
        if days < 0 {
            return Err(PyValueError::new_err(format!(
                "{what} must not be negative"
            )));
        }
        let total = u64::try_from(days)
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .and_then(|d| d.checked_add(u64::try_from(secs).ok()?));
        let Some(total) = total else {
            return Err(PyOverflowError::new_err(format!("{what} is too long")));
        };
        let micros = u32::try_from(micros).unwrap_or(0);
        return Ok(Duration::new(total, micros * 1_000));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(Duration::from_secs(uint(obj, what)?));
    }
    if !obj.is_instance_of::<PyFloat>() {
        let ty = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a timedelta, not {ty}"
        )));
    }
    let secs: f64 = obj.extract()?;
    if secs.is_nan() {
        return Err(PyValueError::new_err(format!("{what} must not be NaN")));
    }
    if secs < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{what} must not be negative, got {secs}"
        )));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| PyOverflowError::new_err(format!("{what} {secs} is too long")))
}

/// A bound on a wait (`timeout=`, `max_wait=`) as the core's `max_wait`: None is no bound
/// (`Duration::MAX`).
pub(crate) fn max_wait(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Duration> {
    match obj.filter(|o| !o.is_none()) {
        Some(o) => duration(o, what),
        None => Ok(Duration::MAX),
    }
}

/// A duration in whole nanoseconds that fits `u64`.
pub(crate) fn duration_ns(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    let d = duration(obj, what)?;
    u64::try_from(d.as_nanos())
        .map_err(|_| PyOverflowError::new_err(format!("{what} is too long (at most 2**64 - 1 ns)")))
}

/// A `store=` argument: the core's spelling (`"memory"`, `"shm:NAME[?capacity=N]"`), parsed by
/// the core; None is the default store (this process's memory).
pub(crate) fn store(spec: Option<&str>) -> PyResult<StoreSpec> {
    spec.map_or(Ok(StoreSpec::Memory), |s| {
        s.parse::<StoreSpec>().map_err(crate::errors::to_py)
    })
}
