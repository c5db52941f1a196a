//! `KeyedLimiter`: one bucket per key, keys being `str`, `bytes` or `int`.
//!
//! Two core stores share the clock: one keyed by byte strings (a `bytes` key is looked up as
//! the `&[u8]` Python already holds, and a `str` key as its UTF-8 `&str` bytes, both without
//! a copy; a key is copied only when its bucket is created), and one keyed by `i64`. So a str
//! and its UTF-8 encoding name the same bucket, and `max_keys` bounds each store.

use crate::convert::{self, duration, opt_uint, uint};
use crate::errors::to_py;
use crate::{is_queue, quota_arg, wait, PyDecision, PyManualClock, PyQuota, RuntimeClock};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString, PyTuple};
use sluicegate::{Decision, Error, KeyedLimiter, MonotonicClock, OnFull, Quota};
use std::time::Duration;

/// A key, borrowed from the Python object for the duration of one call.
pub(crate) enum KeyRef<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

/// Reads a key without copying it. `None`, floats, tuples, bools and other types are refused.
#[inline]
pub(crate) fn key<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<KeyRef<'a>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(KeyRef::Bytes(s.to_str()?.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(KeyRef::Bytes(b.as_bytes()));
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return obj.extract::<i64>().map(KeyRef::Int).map_err(|_| {
            PyOverflowError::new_err(format!(
                "int key {obj} does not fit a signed 64-bit integer"
            ))
        });
    }
    let ty = obj.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "key must be str, bytes or int, not {ty}"
    )))
}

type Bytes = Box<[u8]>;

/// A rate limiter with one bucket per key (str, bytes or int). Safe to share between threads.
#[pyclass(module = "sluicegate", name = "KeyedLimiter", frozen)]
pub(crate) struct PyKeyedLimiter {
    bytes: KeyedLimiter<Bytes, RuntimeClock>,
    ints: KeyedLimiter<i64, RuntimeClock>,
    quota: Quota,
    clock: RuntimeClock,
    manual: Option<Py<PyManualClock>>,
}

impl PyKeyedLimiter {
    #[inline]
    pub(crate) fn acquire_at(
        &self,
        key: &KeyRef<'_>,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        match key {
            KeyRef::Bytes(k) => self.bytes.try_acquire_at(*k, now, cost),
            KeyRef::Int(k) => self.ints.try_acquire_at(k, now, cost),
        }
    }

    #[inline]
    pub(crate) fn acquire_now(&self, key: &KeyRef<'_>, cost: u64) -> Result<Decision, Error> {
        match key {
            KeyRef::Bytes(k) => self.bytes.try_acquire(*k, cost),
            KeyRef::Int(k) => self.ints.try_acquire(k, cost),
        }
    }

    /// The core's `reserve_within` for one key, from `try_acquire` (which is the core's
    /// `reserve`). Only a leaky queue differs: an admission whose delay exceeds `max_wait` is
    /// given back and reported as a rejection with the bucket's figures after the refund, and
    /// a rejection reports `retry_after = delay - min(max_delay, max_wait)`, as the core does.
    pub(crate) fn reserve_within(
        &self,
        key: &KeyRef<'_>,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decision, Error> {
        let now = sluicegate::Clock::now(&self.clock);
        let d = self.acquire_at(key, now, cost)?;
        if !is_queue(&self.quota) {
            return Ok(d);
        }
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let bound = self.quota.max_delay_ns();
        if !d.allowed() {
            // Rejected by the queue bound: the delay is retry_after + max_delay.
            let extra = bound.saturating_sub(max_wait);
            return Ok(Decision::from_figures(
                false,
                d.limit(),
                d.remaining(),
                d.retry_after_nanos().saturating_add(extra),
                d.reset_after_nanos(),
                d.window_secs(),
            ));
        }
        if d.retry_after_nanos() <= max_wait {
            return Ok(d);
        }
        match key {
            KeyRef::Bytes(k) => self.bytes.refund_at(*k, now, cost)?,
            KeyRef::Int(k) => self.ints.refund_at(k, now, cost)?,
        }
        let after = match key {
            KeyRef::Bytes(k) => self.bytes.peek_at(*k, now)?,
            KeyRef::Int(k) => self.ints.peek_at(k, now)?,
        };
        Ok(Decision::from_figures(
            false,
            after.limit(),
            after.remaining(),
            d.retry_after_nanos() - max_wait,
            after.reset_after_nanos(),
            after.window_secs(),
        ))
    }

    pub(crate) fn refund_key(&self, key: &KeyRef<'_>, cost: u64) -> Result<(), Error> {
        match key {
            KeyRef::Bytes(k) => self.bytes.refund(*k, cost),
            KeyRef::Int(k) => self.ints.refund(k, cost),
        }
    }
}

fn on_full(s: &str) -> PyResult<OnFull> {
    match s {
        "reject" => Ok(OnFull::RejectNewKeys),
        "evict" => Ok(OnFull::EvictFullest),
        other => Err(PyValueError::new_err(format!(
            "on_full must be \"reject\" or \"evict\", not {other:?}"
        ))),
    }
}

static AIO_ACQUIRE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (quota, *, clock=None, max_keys=None, on_full="reject", shards=None))]
    fn new(
        quota: &Bound<'_, PyAny>,
        clock: Option<Py<PyManualClock>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        on_full: &str,
        shards: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let quota = quota_arg(quota)?;
        let runtime = match &clock {
            Some(c) => RuntimeClock::Manual(c.get().inner.clone()),
            None => RuntimeClock::Monotonic(MonotonicClock::new()),
        };
        let max_keys = match opt_uint(max_keys, "max_keys")? {
            Some(n) => usize::try_from(n)
                .map_err(|_| PyOverflowError::new_err("max_keys does not fit usize"))?,
            None => sluicegate::DEFAULT_MAX_KEYS,
        };
        let policy = self::on_full(on_full)?;
        let shards = opt_uint(shards, "shards")?.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        macro_rules! build {
            ($k:ty) => {{
                let mut b = KeyedLimiter::<$k>::builder(quota)
                    .max_keys(max_keys)
                    .on_full(policy);
                if let Some(n) = shards {
                    b = b.shards(n);
                }
                b.clock(runtime.clone()).build().map_err(to_py)?
            }};
        }
        Ok(Self {
            bytes: build!(Bytes),
            ints: build!(i64),
            quota,
            clock: runtime,
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
        match self.acquire_now(&key, cost) {
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
        match self.acquire_now(&key, cost) {
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
        self.acquire_at(&key, now, cost)
            .map(Into::into)
            .map_err(to_py)
    }

    /// `key`'s current state, changing nothing (creates no bucket).
    fn peek(&self, key: &Bound<'_, PyAny>) -> PyResult<PyDecision> {
        let d = match self::key(key)? {
            KeyRef::Bytes(k) => self.bytes.peek(k),
            KeyRef::Int(k) => self.ints.peek(&k),
        };
        d.map(Into::into).map_err(to_py)
    }

    /// Gives `cost` tokens back to `key`'s bucket, capped at the burst.
    #[pyo3(signature = (key, cost=1))]
    fn refund(
        &self,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        self.refund_key(&self::key(key)?, cost).map_err(to_py)
    }

    /// `refund` at an explicit clock reading.
    #[pyo3(signature = (key, now_ns, cost=1))]
    fn refund_at(
        &self,
        key: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let now = uint(now_ns, "now_ns")?;
        let r = match self::key(key)? {
            KeyRef::Bytes(k) => self.bytes.refund_at(k, now, cost),
            KeyRef::Int(k) => self.ints.refund_at(&k, now, cost),
        };
        r.map_err(to_py)
    }

    /// Reserves `cost` of `key` now. The keyed store has no reservation call of its own: for
    /// every algorithm the core's `reserve` is `try_acquire` (a leaky queue may admit with a
    /// delay, `Reservation.delay`), and `cancel()` is `refund`. With `max_wait`, a leaky-queue
    /// admission whose delay exceeds it is given back at once and reported as a rejection
    /// (`retry_after` = delay - max_wait, as the core's `reserve_within` reports it).
    #[pyo3(signature = (key, cost=1, *, max_wait=None))]
    fn reserve(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::PyReservation> {
        let max_wait = match max_wait.filter(|m| !m.is_none()) {
            Some(m) => duration(m, "max_wait")?,
            None => Duration::MAX,
        };
        let decision = slf
            .get()
            .reserve_within(&self::key(key)?, cost, max_wait)
            .map_err(to_py)?;
        Ok(crate::PyReservation::new(
            crate::Target::Keyed(slf.clone().unbind(), key.clone().unbind()),
            cost,
            decision,
        ))
    }

    /// Waits (GIL released, Ctrl-C checked) until `cost` of `key` is admitted or the wait
    /// would overrun `timeout`; returns the last decision. As `Limiter.acquire`.
    #[pyo3(signature = (key, cost=1, timeout=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        wait(
            py,
            timeout,
            is_queue(&self.quota),
            |left| self.reserve_within(&key, cost, left),
            || self.refund_key(&key, cost),
        )
    }

    /// `acquire` for asyncio.
    #[pyo3(signature = (key, cost=1, timeout=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        self::key(key)?;
        let timeout = match timeout.filter(|t| !t.is_none()) {
            Some(t) => Some(duration(t, "timeout")?.as_secs_f64()),
            None => None,
        };
        let queue = is_queue(&slf.get().quota);
        let helper = AIO_ACQUIRE.import(py, "sluicegate._aio", "acquire")?;
        let args = PyTuple::new(py, [key.clone(), cost.into_pyobject(py)?.into_any()])?;
        helper.call1((slf.getattr("reserve")?, args, timeout, queue))
    }

    /// Forgets `key`'s bucket; True if it existed.
    fn remove(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(match self::key(key)? {
            KeyRef::Bytes(k) => self.bytes.remove(k),
            KeyRef::Int(k) => self.ints.remove(&k),
        })
    }

    /// Evicts every bucket that is full now; returns how many.
    fn sweep(&self) -> usize {
        self.bytes.sweep() + self.ints.sweep()
    }

    /// Forgets every bucket.
    fn clear(&self) {
        self.bytes.clear();
        self.ints.clear();
    }

    fn __len__(&self) -> usize {
        self.bytes.len() + self.ints.len()
    }

    /// The key bound (of each store: str/bytes keys, int keys).
    #[getter]
    fn max_keys(&self) -> usize {
        self.bytes.max_keys()
    }

    /// A reading of this limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64 {
        sluicegate::Clock::now(&self.clock)
    }

    /// The quota every key's bucket enforces.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota { inner: self.quota }
    }

    /// The manual clock given at construction, or None for the system clock.
    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.manual.as_ref().map(|c| c.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyedLimiter({:?}, max_keys={})",
            self.quota.to_string(),
            self.bytes.max_keys()
        )
    }
}
