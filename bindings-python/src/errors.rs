//! The exception tree, and the one function that maps a core error to it.
//!
//! The classes are declared here, in Python source, because `InvalidQuotaError` and
//! `InvalidOptionError` must subclass both `sluicegate.Error` and the builtin `ValueError` (a
//! tuple of bases, which pyo3's
//! `create_exception!` cannot express), and `RateLimited` carries a `Decision`. They are created
//! once, when the module is first imported, and cached for the mapping function.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use sluicegate::Error;

const SOURCE: &std::ffi::CStr = cr#"
class Error(Exception):
    """Base class of every sluicegate error. `code` is a stable machine-readable name."""
    code = "error"
    __module__ = "sluicegate"


class InvalidQuotaError(Error, ValueError):
    """A quota is out of its domain, or a rate string does not parse (the message quotes it).

    Parse errors have `code == "parse_error"` and carry `input`, `offset` and `fragment`.
    """
    code = "invalid_quota"
    __module__ = "sluicegate"


class InvalidOptionError(Error, ValueError):
    """A named setting has a value outside its choices (a refill mode, an algorithm, a header
    style, an `on_full` policy). Carries `option`, `value` and `expected` (the choices, in words).
    """
    code = "invalid_option"
    __module__ = "sluicegate"


class InsufficientCapacity(Error):
    """`cost` exceeds the bucket's capacity: the request can never be admitted."""
    code = "insufficient_capacity"
    __module__ = "sluicegate"


class KeyStoreFull(Error):
    """A keyed limiter is at its key bound and refuses new keys."""
    code = "key_store_full"
    __module__ = "sluicegate"


class StoreError(Error):
    """A store outside the process failed or refused: a shared-memory region that cannot be
    opened, does not match this limiter, or is corrupt; a Redis server that is down, did not
    answer within the store's timeout, or refused (raised only under `on_error=error`: the
    other policies decide the request instead). `kind` says which ("unavailable", "mismatch",
    "corrupt", "permission", "unsupported", "timeout"; `code` is "store_" + kind), `store`
    names it (a URL's password redacted) and `reason` says what happened.
    """
    code = "store_unavailable"
    __module__ = "sluicegate"


class ClockOutOfRange(Error):
    """The clock reads past the last instant the quota's exact arithmetic covers."""
    code = "clock_out_of_range"
    __module__ = "sluicegate"


class RateLimited(Error):
    """Raised by framework integrations and decorators when a request is rejected.

    `decision` is the rejected `Decision`; `retry_after` is its wait in seconds.
    """
    code = "rate_limited"
    __module__ = "sluicegate"

    def __init__(self, decision, message=None):
        self.decision = decision
        if message is None:
            message = f"rate limited: retry after {decision.retry_after:.3f} s"
        super().__init__(message)

    def __reduce__(self):
        # copy and pickle rebuild it from its arguments (the default passes only `args`, the
        # message, which was taken for the decision).
        return (type(self), (self.decision, str(self)), self.__dict__)

    @property
    def retry_after(self):
        return self.decision.retry_after
"#;

/// The exception classes, created once per process.
pub(crate) struct Exceptions {
    pub(crate) base: Py<PyType>,
    pub(crate) invalid_quota: Py<PyType>,
    pub(crate) invalid_option: Py<PyType>,
    pub(crate) insufficient_capacity: Py<PyType>,
    pub(crate) key_store_full: Py<PyType>,
    pub(crate) clock_out_of_range: Py<PyType>,
    pub(crate) store: Py<PyType>,
    pub(crate) rate_limited: Py<PyType>,
}

static EXCEPTIONS: PyOnceLock<Exceptions> = PyOnceLock::new();

/// The exception classes, created on first use.
pub(crate) fn exceptions(py: Python<'_>) -> PyResult<&Exceptions> {
    EXCEPTIONS.get_or_try_init(py, || {
        let ns = PyDict::new(py);
        py.run(SOURCE, Some(&ns), None)?;
        let get = |name: &str| -> PyResult<Py<PyType>> {
            Ok(ns
                .get_item(name)?
                .expect("declared in SOURCE")
                .cast_into::<PyType>()?
                .unbind())
        };
        Ok(Exceptions {
            base: get("Error")?,
            invalid_quota: get("InvalidQuotaError")?,
            invalid_option: get("InvalidOptionError")?,
            store: get("StoreError")?,
            insufficient_capacity: get("InsufficientCapacity")?,
            key_store_full: get("KeyStoreFull")?,
            clock_out_of_range: get("ClockOutOfRange")?,
            rate_limited: get("RateLimited")?,
        })
    })
}

/// Adds every exception class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let e = exceptions(m.py())?;
    for (name, ty) in [
        ("Error", &e.base),
        ("InvalidQuotaError", &e.invalid_quota),
        ("InvalidOptionError", &e.invalid_option),
        ("StoreError", &e.store),
        ("InsufficientCapacity", &e.insufficient_capacity),
        ("KeyStoreFull", &e.key_store_full),
        ("ClockOutOfRange", &e.clock_out_of_range),
        ("RateLimited", &e.rate_limited),
    ] {
        m.add(name, ty.clone_ref(m.py()))?;
    }
    Ok(())
}

/// The one mapping from a core error to a Python exception: the class by variant, the core's
/// message, `code` from [`Error::code`], and the variant's fields as attributes.
pub(crate) fn to_py(err: Error) -> PyErr {
    Python::attach(|py| build(py, &err).unwrap_or_else(|e| e))
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let e = exceptions(py)?;
    let mut attrs: Vec<(&str, Py<PyAny>)> = Vec::new();
    // Exhaustive, no wildcard arm: a variant added to the core does not compile until it is
    // mapped here; tests/test_errors.py pins every variant to its class.
    let ty = match err {
        Error::InvalidQuota { .. } => {
            // A quota that parsed but is not valid: no place in the text to point at.
            for name in ["input", "offset", "fragment"] {
                attrs.push((name, py.None()));
            }
            &e.invalid_quota
        }
        Error::Parse {
            input,
            offset,
            fragment,
            ..
        } => {
            attrs.push(("input", input.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("offset", offset.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("fragment", fragment.into_pyobject(py)?.into_any().unbind()));
            &e.invalid_quota
        }
        Error::InsufficientCapacity { cost, capacity } => {
            attrs.push(("cost", cost.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("capacity", capacity.into_pyobject(py)?.into_any().unbind()));
            &e.insufficient_capacity
        }
        Error::ClockOutOfRange { now, horizon } => {
            attrs.push(("now_ns", now.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("horizon_ns", horizon.into_pyobject(py)?.into_any().unbind()));
            &e.clock_out_of_range
        }
        Error::InvalidOption {
            option,
            value,
            expected,
        } => {
            attrs.push(("option", option.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("value", value.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("expected", expected.into_pyobject(py)?.into_any().unbind()));
            &e.invalid_option
        }
        Error::KeyStoreFull { max_keys } => {
            attrs.push(("max_keys", max_keys.into_pyobject(py)?.into_any().unbind()));
            &e.key_store_full
        }
        Error::Store {
            kind,
            store,
            reason,
        } => {
            let kind = kind.code().trim_start_matches("store_");
            attrs.push(("kind", kind.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("store", store.into_pyobject(py)?.into_any().unbind()));
            attrs.push(("reason", reason.into_pyobject(py)?.into_any().unbind()));
            &e.store
        }
    };
    let exc = ty.bind(py).call1((err.to_string(),))?;
    exc.setattr("code", err.code())?;
    for (name, value) in attrs {
        exc.setattr(name, value)?;
    }
    Ok(PyErr::from_value(exc))
}
