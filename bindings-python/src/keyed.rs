//! `KeyedLimiter`: one bucket per key, keys being `str`, `bytes` or `int`.
//!
//! The one key rule (`sluicegate::IntKey`): a key is a byte string. A `str` key is its UTF-8
//! bytes and a `bytes` key its bytes, both looked up as the `&[u8]` Python already holds
//! (copied only when the key's bucket is created); an `int` key is its decimal digits,
//! rendered on the stack. So `42`, `"42"` and `b"42"` name one bucket, and count once toward
//! `max_keys`, as in every other language.

use crate::acquire::Acquire;
use crate::convert::{self, opt_uint, uint};
use crate::errors::to_py;
use crate::{quota_arg, PyDecision, PyManualClock, PyQuota};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use sluicegate::{AnyClock, Clock, IntKey, KeyedLimiter, OnFull};

/// A key's bytes, borrowed from the Python object for the duration of one call where it has
/// them (`str`, `bytes`), else rendered (`int`).
pub(crate) enum Key<'a> {
    Borrowed(&'a [u8]),
    Int(IntKey),
    /// An int past `i128`: `str(int)`.
    Wide(String),
}

impl Key<'_> {
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Borrowed(b) => b,
            Key::Int(k) => k.as_bytes(),
            Key::Wide(s) => s.as_bytes(),
        }
    }
}

/// Reads a key. `None`, floats, tuples, bools and other types are refused with a TypeError.
#[inline]
pub(crate) fn key<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Key<'a>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Key::Borrowed(s.to_str()?.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Key::Borrowed(b.as_bytes()));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        if let Ok(n) = obj.extract::<i64>() {
            return Ok(Key::Int(IntKey::new(n.into())));
        }
        return wide_int_key(obj);
    }
    let ty = obj.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "key must be str, bytes or int, not {ty}"
    )))
}

/// An int key past `i64`: `IntKey` up to `i128`, then its decimal text (`int.__repr__`, so
/// that an int subclass is its digits too).
#[cold]
fn wide_int_key<'a>(obj: &Bound<'_, PyAny>) -> PyResult<Key<'a>> {
    if let Ok(n) = obj.extract::<i128>() {
        return Ok(Key::Int(IntKey::new(n)));
    }
    let digits = obj
        .py()
        .get_type::<PyInt>()
        .call_method1("__repr__", (obj,))?;
    Ok(Key::Wide(digits.extract()?))
}

/// A rate limiter with one bucket per key (str, bytes or int). Safe to share between threads.
/// With `store="shm:NAME"` the buckets live in a shared-memory region that every process of
/// the host opening that name shares; `max_keys` is then the region's capacity.
#[pyclass(module = "sluicegate", name = "KeyedLimiter", frozen)]
pub(crate) struct PyKeyedLimiter {
    pub(crate) inner: KeyedLimiter<Box<[u8]>, AnyClock>,
    manual: Option<Py<PyManualClock>>,
}

impl PyKeyedLimiter {
    /// The core's `start_acquire` for `cost` of `key` within `timeout`.
    fn start(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Acquire> {
        let key = self::key(key)?.as_bytes().into();
        let plan = slf
            .get()
            .inner
            .start_acquire(cost, convert::max_wait(timeout, "timeout")?);
        Ok(Acquire::Keyed(slf.clone().unbind(), key, plan))
    }
}

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (quota, *, clock=None, max_keys=None, on_full="reject", shards=None, store=None))]
    fn new(
        quota: &Bound<'_, PyAny>,
        clock: Option<Py<PyManualClock>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        on_full: &str,
        shards: Option<&Bound<'_, PyAny>>,
        store: Option<&str>,
    ) -> PyResult<Self> {
        let quota = quota_arg(quota)?;
        let on_full = on_full.parse::<OnFull>().map_err(to_py)?;
        let mut builder = KeyedLimiter::<Box<[u8]>>::builder(quota)
            .on_full(on_full)
            .store(convert::store(store)?);
        // Given, a region must have this capacity (a new one is made with it); not given, the
        // core's default bound, or an existing region's capacity.
        if let Some(n) = opt_uint(max_keys, "max_keys")? {
            let n = usize::try_from(n)
                .map_err(|_| PyOverflowError::new_err("max_keys does not fit usize"))?;
            builder = builder.max_keys(n);
        }
        if let Some(n) = opt_uint(shards, "shards")? {
            builder = builder.shards(usize::try_from(n).unwrap_or(usize::MAX));
        }
        let runtime = AnyClock::new(clock.as_ref().map(|c| &c.get().inner));
        let inner = builder.clock(runtime).build().map_err(to_py)?;
        Ok(Self {
            inner,
            manual: clock,
        })
    }

    /// Asks for `cost` tokens of `key`'s bucket now (created on the key's first request).
    #[pyo3(signature = (key, cost=1))]
    #[inline]
    fn try_acquire(
        &self,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        match self.inner.try_acquire(key.as_bytes(), cost) {
            Ok(d) => Ok(d.into()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` answering only whether `cost` of `key` was admitted (and taken).
    #[pyo3(signature = (key, cost=1))]
    #[inline]
    fn allow(
        &self,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<bool> {
        let key = self::key(key)?;
        match self.inner.try_acquire(key.as_bytes(), cost) {
            Ok(d) => Ok(d.allowed()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` at an explicit reading of this limiter's clock, in nanoseconds.
    #[pyo3(signature = (key, now_ns, cost=1))]
    fn try_acquire_at(
        &self,
        key: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        let now = uint(now_ns, "now_ns")?;
        self.inner
            .try_acquire_at(key.as_bytes(), now, cost)
            .map(Into::into)
            .map_err(to_py)
    }

    /// `key`'s current state, changing nothing (creates no bucket).
    fn peek(&self, key: &Bound<'_, PyAny>) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        self.inner
            .peek(key.as_bytes())
            .map(Into::into)
            .map_err(to_py)
    }

    /// Gives `cost` tokens back to `key`'s bucket, capped at the burst.
    #[pyo3(signature = (key, cost=1))]
    fn refund(
        &self,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let key = self::key(key)?;
        self.inner.refund(key.as_bytes(), cost).map_err(to_py)
    }

    /// `refund` at an explicit clock reading.
    #[pyo3(signature = (key, now_ns, cost=1))]
    fn refund_at(
        &self,
        key: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let key = self::key(key)?;
        let now = uint(now_ns, "now_ns")?;
        self.inner
            .refund_at(key.as_bytes(), now, cost)
            .map_err(to_py)
    }

    /// Reserves `cost` of `key` now: the core's `reserve_within` (`max_wait`: seconds or
    /// timedelta; None waits as long as the quota allows). A leaky queue may admit with a
    /// delay (`Reservation.delay`) that the caller must let pass before going ahead, and a
    /// longer delay than `max_wait` is a rejection that reserves nothing; every other
    /// algorithm admits now or not at all. `cancel()` gives an admitted reservation back.
    #[pyo3(signature = (key, cost=1, *, max_wait=None))]
    fn reserve(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::PyReservation> {
        let max_wait = convert::max_wait(max_wait, "max_wait")?;
        let key: Box<[u8]> = self::key(key)?.as_bytes().into();
        let decision = slf
            .get()
            .inner
            .reserve_within(&key[..], cost, max_wait)
            .map_err(to_py)?;
        Ok(crate::PyReservation::new(
            crate::Target::Keyed(slf.clone().unbind(), key),
            cost,
            decision,
        ))
    }

    /// Waits (GIL released, Ctrl-C checked) until `cost` of `key` is admitted, or returns the
    /// rejection when it cannot be within `timeout`. As `Limiter.acquire`.
    #[pyo3(signature = (key, cost=1, timeout=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        Self::start(slf, key, cost, timeout)?.block(slf.py())
    }

    /// `acquire` for asyncio.
    #[pyo3(signature = (key, cost=1, timeout=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::start(slf, key, cost, timeout)?.into_coroutine(slf.py())
    }

    /// Forgets `key`'s bucket; True if it existed.
    fn remove(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = self::key(key)?;
        self.inner.remove(key.as_bytes()).map_err(to_py)
    }

    /// Evicts every bucket that is full now; returns how many.
    fn sweep(&self) -> PyResult<usize> {
        self.inner.sweep().map_err(to_py)
    }

    /// Forgets every bucket.
    fn clear(&self) -> PyResult<()> {
        self.inner.clear().map_err(to_py)
    }

    /// The number of keys with a bucket.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The key bound.
    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    /// A reading of this limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.clock().now()
    }

    /// The quota every key's bucket enforces.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota {
            inner: self.inner.quota(),
        }
    }

    /// The manual clock given at construction, or None for the system clock.
    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.manual.as_ref().map(|c| c.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyedLimiter({:?}, max_keys={})",
            self.inner.quota().to_string(),
            self.inner.max_keys()
        )
    }
}
