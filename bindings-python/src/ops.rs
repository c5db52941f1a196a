//! Operating a limiter (docs/OPERATIONS.md): the metrics snapshot, the rejection hook, and the
//! Prometheus text of the core's `render_prometheus`. Conversion only: counting, shadow mode
//! and the text are the core's.

use crate::errors::to_py;
use crate::keyed::PyKeyedLimiter;
use crate::{PyDecision, PyLimiter};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMapping, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};
use sluicegate::{Decision, Metrics, Rejection};
use std::sync::{Arc, Mutex, PoisonError};

/// A snapshot of a limiter's counters (`Limiter.metrics()`): every decision a caller asked
/// for is counted once as `allowed`, `rejected` or `shadow_rejected`.
#[pyclass(module = "sluicegate", name = "Metrics", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyMetrics {
    pub(crate) inner: Metrics,
}

#[pymethods]
impl PyMetrics {
    /// Requests admitted.
    #[getter]
    fn allowed(&self) -> u64 {
        self.inner.allowed
    }
    /// Requests rejected (enforced).
    #[getter]
    fn rejected(&self) -> u64 {
        self.inner.rejected
    }
    /// Requests enforcement would have rejected, let through by shadow mode.
    #[getter]
    fn shadow_rejected(&self) -> u64 {
        self.inner.shadow_rejected
    }
    /// Keys evicted (full buckets, or the fullest at the key bound).
    #[getter]
    fn keys_evicted(&self) -> u64 {
        self.inner.keys_evicted
    }
    /// New keys refused at the key bound (`KeyStoreFull`).
    #[getter]
    fn key_store_full(&self) -> u64 {
        self.inner.key_store_full
    }
    /// Calls that failed with a store's error (`StoreError`).
    #[getter]
    fn store_errors(&self) -> u64 {
        self.inner.store_errors
    }
    /// Quotas set by `set_quota`.
    #[getter]
    fn reconfigurations(&self) -> u64 {
        self.inner.reconfigurations
    }
    /// Keys held now (keyed limiters in memory or a region; None otherwise).
    #[getter]
    fn keys(&self) -> Option<u64> {
        self.inner.keys
    }
    /// Whether the limiter was in shadow mode.
    #[getter]
    fn shadow(&self) -> bool {
        self.inner.shadow
    }

    /// The fields as a dict.
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &self.inner;
        let out = PyDict::new(py);
        for (name, n) in [
            ("allowed", m.allowed),
            ("rejected", m.rejected),
            ("shadow_rejected", m.shadow_rejected),
            ("keys_evicted", m.keys_evicted),
            ("key_store_full", m.key_store_full),
            ("store_errors", m.store_errors),
            ("reconfigurations", m.reconfigurations),
        ] {
            out.set_item(name, n)?;
        }
        out.set_item("keys", m.keys)?;
        out.set_item("shadow", m.shadow)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        let m = &self.inner;
        let keys = m.keys.map_or_else(|| "None".to_string(), |k| k.to_string());
        format!(
            "Metrics(allowed={}, rejected={}, shadow_rejected={}, keys_evicted={}, \
             key_store_full={}, store_errors={}, reconfigurations={}, keys={keys}, shadow={})",
            m.allowed,
            m.rejected,
            m.shadow_rejected,
            m.keys_evicted,
            m.key_store_full,
            m.store_errors,
            m.reconfigurations,
            if m.shadow { "True" } else { "False" },
        )
    }
}

impl From<Metrics> for PyMetrics {
    fn from(inner: Metrics) -> Self {
        Self { inner }
    }
}

/// A rejection as the `on_reject` hook sees it: the key (bytes, the one key rule; None for a
/// single-bucket limiter), the cost asked for, and the decision returned (in shadow mode it
/// is allowed, with `shadow_rejected` set).
#[pyclass(module = "sluicegate", name = "Rejection", frozen)]
pub(crate) struct PyRejection {
    key: Option<Py<PyBytes>>,
    #[pyo3(get)]
    cost: u64,
    decision: Decision,
}

#[pymethods]
impl PyRejection {
    /// The key whose bucket rejected the request (None for a single bucket).
    #[getter]
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.key.as_ref().map(|k| k.clone_ref(py))
    }
    /// The decision returned to the caller.
    #[getter]
    fn decision(&self) -> PyDecision {
        self.decision.into()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let key = self.key.as_ref().map_or_else(
            || "None".to_string(),
            |k| format!("{:?}", String::from_utf8_lossy(k.as_bytes(py))),
        );
        format!(
            "Rejection(key={key}, cost={}, shadow_rejected={})",
            self.cost,
            if self.decision.shadow_rejected() {
                "True"
            } else {
                "False"
            }
        )
    }
}

/// A limiter object's `on_reject` callable, shared by the object and the core's hook. The
/// object reports it to Python's cycle collector (`__traverse__`) and lets go of it
/// (`__clear__`); the hook reads it at each rejection. Held by the hook alone, it was a
/// reference no traversal reports: a hook that refers to its own limiter (`on_reject=lambda r:
/// log(limiter.metrics())`) kept the limiter, and its native state, alive for ever.
#[derive(Clone, Default)]
pub(crate) struct HookSlot(Arc<Mutex<Option<Py<PyAny>>>>);

impl HookSlot {
    fn new(callable: Py<PyAny>) -> Self {
        Self(Arc::new(Mutex::new(Some(callable))))
    }

    /// Whether a callable was given.
    pub(crate) fn is_set(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The callable, unless cleared. The lock is never held while Python code runs.
    fn get(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref().map(|c| c.clone_ref(py))
    }

    /// Reports the callable to the cycle collector. Never blocks: if another thread reads it
    /// at this moment, it is not reported, and the collector takes it for referred to from
    /// outside (kept, for this pass).
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(held) = self.0.try_lock() {
            if let Some(c) = held.as_ref() {
                visit.call(c)?;
            }
        }
        Ok(())
    }

    /// Lets go of the callable (the collector breaking a cycle); later rejections call nothing.
    pub(crate) fn clear(&self) {
        let taken = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(taken); // after the lock: dropping it may run Python code
    }
}

/// The core's hook calling `callable(Rejection)`. It attaches to the interpreter (a decision
/// on Redis runs detached); an exception the callable raises is reported as unraisable
/// (`sys.unraisablehook`), never raised into the decision, which was already made.
pub(crate) fn hook<K: AsRef<[u8]> + ?Sized + 'static>(
    slot: HookSlot,
) -> impl Fn(&Rejection<'_, K>) + Send + Sync + 'static {
    move |r: &Rejection<'_, K>| {
        Python::attach(|py| {
            if let Some(callable) = slot.get(py) {
                let key = Some(PyBytes::new(py, r.key().as_ref()).unbind());
                call(py, &callable, key, r.cost(), *r.decision());
            }
        });
    }
}

/// The hook of a single-bucket limiter (its key is `()`).
pub(crate) fn single_hook(slot: HookSlot) -> impl Fn(&Rejection<'_>) + Send + Sync + 'static {
    move |r: &Rejection<'_>| {
        Python::attach(|py| {
            if let Some(callable) = slot.get(py) {
                call(py, &callable, None, r.cost(), *r.decision());
            }
        });
    }
}

fn call(py: Python<'_>, callable: &Py<PyAny>, key: Option<Py<PyBytes>>, cost: u64, d: Decision) {
    let rejection = PyRejection {
        key,
        cost,
        decision: d,
    };
    let called = Bound::new(py, rejection).and_then(|r| callable.bind(py).call1((r,)));
    if let Err(e) = called {
        e.write_unraisable(py, Some(callable.bind(py)));
    }
}

/// Checks an `on_reject=` argument: None or a callable, held in a slot of its own.
pub(crate) fn hook_arg(obj: Option<Py<PyAny>>, py: Python<'_>) -> PyResult<Option<HookSlot>> {
    match obj {
        Some(o) if o.is_none(py) => Ok(None),
        Some(o) if !o.bind(py).is_callable() => {
            let ty = o.bind(py).get_type().name()?;
            Err(PyTypeError::new_err(format!(
                "on_reject must be callable, not {ty}"
            )))
        }
        other => Ok(other.map(HookSlot::new)),
    }
}

/// A snapshot of what `obj` names: a Limiter or KeyedLimiter (counting on), or a Metrics.
fn snapshot(obj: &Bound<'_, PyAny>) -> PyResult<Metrics> {
    let counted = if let Ok(m) = obj.cast::<PyMetrics>() {
        return Ok(m.get().inner);
    } else if let Ok(l) = obj.cast::<PyLimiter>() {
        l.get().inner.metrics()
    } else if let Ok(l) = obj.cast::<PyKeyedLimiter>() {
        // On Redis as any call of the limiter: detached.
        l.get().call(obj.py(), |l| Ok(l.metrics())).map_err(to_py)?
    } else {
        let ty = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "render_prometheus takes Limiter, KeyedLimiter or Metrics objects, not {ty}"
        )));
    };
    counted.ok_or_else(|| {
        PyValueError::new_err(format!(
            "{} counts nothing: build it with metrics=True",
            obj.repr()
                .map_or_else(|_| "the limiter".into(), |r| r.to_string())
        ))
    })
}

/// The label pairs of a `{name: value}` dict, in its order.
fn labels(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let Ok(map) = obj.cast::<PyMapping>() else {
        let ty = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "labels must be a dict of str to str, not {ty}"
        )));
    };
    let mut out = Vec::new();
    for item in map.items()?.iter() {
        let (name, value) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
        let (Ok(name), Ok(value)) = (name.cast::<PyString>(), value.cast::<PyString>()) else {
            return Err(PyTypeError::new_err("label names and values must be str"));
        };
        out.push((name.to_str()?.to_owned(), value.to_str()?.to_owned()));
    }
    Ok(out)
}

/// The Prometheus text format (0.0.4) of limiters' counters, by the core's
/// `render_prometheus`. `series` is a dict `{name: limiter}` (each series labelled
/// `limiter="name"`) or an iterable of `(labels, limiter)` pairs, `labels` a dict of str; a
/// limiter is a `Limiter` or `KeyedLimiter` built with `metrics=True`, or a `Metrics`.
#[pyfunction]
pub(crate) fn render_prometheus(series: &Bound<'_, PyAny>) -> PyResult<String> {
    let mut rows: Vec<(Vec<(String, String)>, Metrics)> = Vec::new();
    // Any mapping (a dict, `MappingProxyType`, a `UserDict`), as the stub's `Mapping` says.
    let items = match series.cast::<PyDict>() {
        Ok(map) => Some(map.items().into_any()),
        Err(_) => match series.cast::<PyMapping>() {
            Ok(map) => Some(map.items()?.into_any()),
            Err(_) => None,
        },
    };
    if let Some(items) = items {
        for item in items.try_iter()? {
            let (name, limiter): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let Ok(name) = name.cast::<PyString>() else {
                return Err(PyTypeError::new_err("limiter names must be str"));
            };
            rows.push((
                vec![("limiter".into(), name.to_str()?.to_owned())],
                snapshot(&limiter)?,
            ));
        }
    } else {
        for item in series.try_iter()? {
            let item = item?;
            let pair = item
                .cast::<PyTuple>()
                .ok()
                .filter(|t| t.len() == 2)
                .ok_or_else(|| {
                    PyTypeError::new_err(
                        "render_prometheus takes a dict {name: limiter} or (labels, limiter) pairs",
                    )
                })?;
            rows.push((labels(&pair.get_item(0)?)?, snapshot(&pair.get_item(1)?)?));
        }
    }
    let label_refs: Vec<Vec<(&str, &str)>> = rows
        .iter()
        .map(|(l, _)| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect())
        .collect();
    let input: Vec<(&[(&str, &str)], Metrics)> = label_refs
        .iter()
        .zip(&rows)
        .map(|(l, (_, m))| (l.as_slice(), *m))
        .collect();
    sluicegate::render_prometheus(&input).map_err(to_py)
}
