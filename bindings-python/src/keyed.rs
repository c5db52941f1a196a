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
use crate::ops;
use crate::remote::{self, Remote};
use crate::{quota_arg, stats_dict, PyDecision, PyManualClock, PyQuota};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};
use sluicegate::{
    AnyClock, Clock, Decision, Error, IntKey, KeyedLimiter, OnFull, StoreSpec, MAX_SHARDS,
};

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

/// A key, copied (for a call that outlives the Python object's borrow: an async one).
pub(crate) fn owned_key(obj: &Bound<'_, PyAny>) -> PyResult<Box<[u8]>> {
    Ok(key(obj)?.as_bytes().into())
}

/// The requests of a batch: an iterable of keys (cost 1) or `(key, cost)` pairs.
fn batch(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(Box<[u8]>, u64)>> {
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        match item.cast::<PyTuple>() {
            Ok(pair) if pair.len() == 2 => {
                out.push((
                    owned_key(&pair.get_item(0)?)?,
                    uint(&pair.get_item(1)?, "cost")?,
                ));
            }
            Ok(_) => {
                return Err(PyTypeError::new_err(
                    "a batch's requests are keys or (key, cost) pairs",
                ))
            }
            Err(_) => out.push((owned_key(&item)?, 1)),
        }
    }
    Ok(out)
}

/// A batch's outcomes as a list: each a Decision, or the exception its request would have
/// raised alone (not raised: the other requests were decided).
fn outcomes(py: Python<'_>, results: Vec<Result<Decision, Error>>) -> PyResult<Py<PyList>> {
    let items = results
        .into_iter()
        .map(|r| match r {
            Ok(d) => Ok(Bound::new(py, PyDecision::from(d))?.into_any()),
            Err(e) => Ok(to_py(e).into_value(py).into_bound(py).into_any()),
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.unbind())
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
/// the host opening that name shares; `max_keys` is then the region's capacity. With
/// `store="redis://..."` they are keys of a Redis or Valkey server that every host on the
/// same URL and quota shares.
#[pyclass(module = "sluicegate", name = "KeyedLimiter", frozen)]
pub(crate) struct PyKeyedLimiter {
    /// Boxed: the core's keyed limiter holds cache-line aligned parts (see `PyLimiter`).
    pub(crate) inner: Box<KeyedLimiter<Box<[u8]>, AnyClock>>,
    manual: Option<Py<PyManualClock>>,
    /// Set for buckets on Redis.
    pub(crate) remote: Option<Remote>,
    /// The `on_reject` callable, for the cycle collector (`ops::HookSlot`).
    hook: ops::HookSlot,
}

impl PyKeyedLimiter {
    /// Runs `f` on the core's limiter (detached from the interpreter on Redis).
    #[inline]
    pub(crate) fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&KeyedLimiter<Box<[u8]>, AnyClock>) -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        let inner = &self.inner;
        remote::call(py, self.remote.as_ref(), || f(inner))
    }

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

/// `shards`: 1 to the core's [`MAX_SHARDS`] (the core rounds it up to a power of two), or a
/// `ValueError` with Node's message, where the core would silently clamp any other count. A
/// value that is no int stays a `TypeError`.
fn shards_arg(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    let range = || {
        PyValueError::new_err(format!(
            "shards must be an integer between 1 and {MAX_SHARDS}"
        ))
    };
    let n = opt_uint(obj, "shards").map_err(|e| {
        // Negative (a ValueError) or past u64 (an OverflowError): out of the range as well.
        if e.is_instance_of::<PyValueError>(py) || e.is_instance_of::<PyOverflowError>(py) {
            range()
        } else {
            e
        }
    })?;
    match n {
        None => Ok(None),
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_SHARDS).contains(n))
            .map(Some)
            .ok_or_else(range),
    }
}

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (quota, *, clock=None, max_keys=None, on_full="reject", shards=None, store=None, metrics=false, shadow=false, on_reject=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        quota: &Bound<'_, PyAny>,
        clock: Option<Py<PyManualClock>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        on_full: &str,
        shards: Option<&Bound<'_, PyAny>>,
        store: Option<&str>,
        metrics: bool,
        shadow: bool,
        on_reject: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let quota = quota_arg(quota)?;
        let on_full = on_full.parse::<OnFull>().map_err(to_py)?;
        let spec = convert::store(store)?;
        let remote = Remote::of(&spec).map_err(to_py)?;
        let shm = matches!(spec, StoreSpec::Shm { .. });
        let mut builder = KeyedLimiter::<Box<[u8]>>::builder(quota)
            .on_full(on_full)
            .store(spec)
            .metrics(metrics)
            .shadow(shadow);
        let hook = ops::hook_arg(on_reject, py)?.unwrap_or_default();
        if hook.is_set() {
            builder = builder.on_reject(ops::hook::<Box<[u8]>>(hook.clone()));
        }
        // Given, a region must have this capacity (a new one is made with it); not given, the
        // core's default bound, or an existing region's capacity.
        if let Some(n) = opt_uint(max_keys, "max_keys")? {
            let n = usize::try_from(n)
                .map_err(|_| PyOverflowError::new_err("max_keys does not fit usize"))?;
            builder = builder.max_keys(n);
        }
        if let Some(n) = shards_arg(py, shards)? {
            builder = builder.shards(n);
        }
        let runtime = AnyClock::new(clock.as_ref().map(|c| &c.get().inner));
        let builder = builder.clock(runtime);
        let inner = remote::build(py, remote.as_ref(), shm, || builder.build()).map_err(to_py)?;
        Ok(Self {
            inner: Box::new(inner),
            manual: clock,
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

    /// Asks for `cost` tokens of `key`'s bucket now (created on the key's first request).
    #[pyo3(signature = (key, cost=1))]
    #[inline]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        match self.call(py, |l| l.try_acquire(key, cost)) {
            Ok(d) => Ok(d.into()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` answering only whether `cost` of `key` was admitted (and taken).
    #[pyo3(signature = (key, cost=1))]
    #[inline]
    fn allow(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<bool> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        match self.call(py, |l| l.try_acquire(key, cost)) {
            Ok(d) => Ok(d.allowed()),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire` at an explicit reading of this limiter's clock, in nanoseconds.
    #[pyo3(signature = (key, now_ns, cost=1))]
    fn try_acquire_at(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        let now = uint(now_ns, "now_ns")?;
        self.call(py, |l| l.try_acquire_at(key, now, cost))
            .map(Into::into)
            .map_err(to_py)
    }

    /// `key`'s current state, changing nothing (creates no bucket).
    fn peek(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyDecision> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        self.call(py, |l| l.peek(key))
            .map(Into::into)
            .map_err(to_py)
    }

    /// Gives `cost` tokens back to `key`'s bucket, capped at the burst.
    #[pyo3(signature = (key, cost=1))]
    fn refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        self.call(py, |l| l.refund(key, cost)).map_err(to_py)
    }

    /// `refund` at an explicit clock reading.
    #[pyo3(signature = (key, now_ns, cost=1))]
    fn refund_at(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        let now = uint(now_ns, "now_ns")?;
        self.call(py, |l| l.refund_at(key, now, cost))
            .map_err(to_py)
    }

    /// `try_acquire` for asyncio: a coroutine. On Redis the call is awaited without blocking
    /// the event loop (the core's `try_acquire_async`); an in-process store answers at once.
    #[pyo3(signature = (key, cost=1))]
    async fn try_acquire_async(
        &self,
        #[pyo3(from_py_with = owned_key)] key: Box<[u8]>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<PyDecision> {
        remote::relayed(
            self.remote.as_ref(),
            self.inner.try_acquire_async(&key[..], cost),
        )
        .await
        .and_then(|r| r)
        .map(Into::into)
        .map_err(to_py)
    }

    /// `peek` for asyncio.
    async fn peek_async(
        &self,
        #[pyo3(from_py_with = owned_key)] key: Box<[u8]>,
    ) -> PyResult<PyDecision> {
        remote::relayed(self.remote.as_ref(), self.inner.peek_async(&key[..]))
            .await
            .and_then(|r| r)
            .map(Into::into)
            .map_err(to_py)
    }

    /// `refund` for asyncio.
    #[pyo3(signature = (key, cost=1))]
    async fn refund_async(
        &self,
        #[pyo3(from_py_with = owned_key)] key: Box<[u8]>,
        #[pyo3(from_py_with = convert::cost)] cost: u64,
    ) -> PyResult<()> {
        remote::relayed(
            self.remote.as_ref(),
            self.inner.refund_async(&key[..], cost),
        )
        .await
        .and_then(|r| r)
        .map_err(to_py)
    }

    /// Asks for each request now, in order: `requests` is an iterable of keys (cost 1) or
    /// `(key, cost)` pairs. Returns a list with, for each, its Decision, or the exception it
    /// would have raised alone (an instance, not raised: the others were decided). On Redis
    /// the whole batch is one round trip (the core's `try_acquire_many`).
    fn try_acquire_many(
        &self,
        py: Python<'_>,
        requests: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyList>> {
        let requests = batch(requests)?;
        let refs: Vec<(&[u8], u64)> = requests.iter().map(|(k, c)| (&k[..], *c)).collect();
        let results = self.call(py, |l| Ok(l.try_acquire_many(&refs)));
        match results {
            Ok(r) => outcomes(py, r),
            Err(e) => Err(to_py(e)),
        }
    }

    /// `try_acquire_many` for asyncio: one round trip on Redis, awaited without blocking the
    /// event loop.
    async fn try_acquire_many_async(
        &self,
        #[pyo3(from_py_with = batch)] requests: Vec<(Box<[u8]>, u64)>,
    ) -> PyResult<Py<PyList>> {
        let refs: Vec<(&[u8], u64)> = requests.iter().map(|(k, c)| (&k[..], *c)).collect();
        let results = remote::relayed(
            self.remote.as_ref(),
            self.inner.try_acquire_many_async(&refs),
        )
        .await
        .map_err(to_py)?;
        Python::attach(|py| outcomes(py, results))
    }

    /// The Redis store's counters of each outcome (see `Limiter.redis_stats`); None for
    /// other stores.
    fn redis_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.inner
            .redis_stats()
            .map(|s| stats_dict(py, s))
            .transpose()
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
            .call(slf.py(), |l| l.reserve_within(&key[..], cost, max_wait))
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
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = self::key(key)?;
        let key = key.as_bytes();
        self.call(py, |l| l.remove(key)).map_err(to_py)
    }

    /// Evicts every bucket that is full now; returns how many (0 on Redis, where a full
    /// bucket's key expires by itself).
    fn sweep(&self, py: Python<'_>) -> PyResult<usize> {
        self.call(py, KeyedLimiter::sweep).map_err(to_py)
    }

    /// Forgets every bucket (on Redis: deletes this limiter's keys).
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, KeyedLimiter::clear).map_err(to_py)
    }

    /// The number of keys with a bucket (on Redis: this limiter's keys, counted by a SCAN;
    /// a `StoreError` when the server cannot be asked).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.call(py, KeyedLimiter::try_len).map_err(to_py)
    }

    /// The key bound (on a Redis store, which has none, the largest `usize`: the server's
    /// memory bounds the keys, and a `max_keys` given is not used).
    #[getter]
    fn max_keys(&self) -> usize {
        self.inner.max_keys()
    }

    /// A reading of this limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.clock().now()
    }

    /// The quota every key's bucket enforces now.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota {
            inner: self.inner.quota(),
        }
    }

    /// Changes the quota live for every key (see `Limiter.set_quota`; keys first seen
    /// afterwards start fresh under the new quota). A StoreError (kind "unsupported") on a
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

    /// Shadow (dry-run) mode (see `Limiter.shadow`). Settable.
    #[getter]
    fn shadow(&self) -> bool {
        self.inner.is_shadow()
    }

    #[setter]
    fn set_shadow(&self, on: bool) {
        self.inner.set_shadow(on);
    }

    /// A snapshot of the counters, or None when built without `metrics=True`. On Redis it is
    /// a call like any other (detached from the interpreter).
    fn metrics(&self, py: Python<'_>) -> PyResult<Option<ops::PyMetrics>> {
        self.call(py, |l| Ok(l.metrics()))
            .map(|m| m.map(Into::into))
            .map_err(to_py)
    }

    /// The manual clock given at construction, or None for the system clock.
    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyManualClock>> {
        self.manual.as_ref().map(|c| c.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        let quota = self.inner.quota().to_string();
        match self.inner.max_keys() {
            // A Redis store: no bound of its own (the server's memory bounds the keys).
            usize::MAX => format!("KeyedLimiter({quota:?})"),
            n => format!("KeyedLimiter({quota:?}, max_keys={n})"),
        }
    }
}
