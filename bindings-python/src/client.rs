//! `ClientResolver`: which key a web request is limited by (the core's
//! `sluicegate::client`, docs/CLIENT-IDENTITY.md). Conversion only: the peer's text and the
//! request's header lines go to the core, its key comes back as `str`, and a warning the
//! core reports (once per kind and resolver) becomes a Python `warnings.warn`.

use crate::errors::to_py;
use pyo3::exceptions::{PyTypeError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};
use sluicegate::client::{
    ClientResolver, ForwardingHeaders, ProxyHeader, Resolution, TrustedProxies,
};

/// Turns a request's peer address and forwarding headers into the key it is limited by:
/// the peer by default; a forwarding header (`header`: "x-forwarded-for" or "forwarded")
/// only from a trusted proxy (`trusted_proxies`: a hop count, or addresses, CIDR ranges and
/// the names "loopback", "private", "linklocal", as a list or comma-separated), its
/// right-most untrusted hop; IPv6 by `ipv6_prefix` bits (default 64), IPv4-mapped IPv6 as
/// IPv4.
#[pyclass(module = "sluicegate", name = "ClientResolver", frozen)]
pub(crate) struct PyClientResolver {
    inner: ClientResolver,
}

#[pymethods]
impl PyClientResolver {
    #[new]
    #[pyo3(signature = (*, trusted_proxies=None, header="x-forwarded-for", ipv6_prefix=64, ipv4_prefix=32))]
    fn new(
        trusted_proxies: Option<&Bound<'_, PyAny>>,
        header: &str,
        ipv6_prefix: u8,
        ipv4_prefix: u8,
    ) -> PyResult<Self> {
        let inner = ClientResolver::builder()
            .trusted_proxies(trust(trusted_proxies)?)
            .header(header.parse::<ProxyHeader>().map_err(to_py)?)
            .ipv6_prefix(ipv6_prefix)
            .ipv4_prefix(ipv4_prefix)
            .build()
            .map_err(to_py)?;
        Ok(Self { inner })
    }

    /// The key of a request from `peer` (its address as text; None or "" when the server
    /// does not know it) with `headers`, an iterable of `(name, value)` pairs of str or
    /// bytes (every header line of the request, or only its forwarding ones).
    #[pyo3(signature = (peer, headers=None))]
    fn resolve(
        &self,
        py: Python<'_>,
        peer: Option<&str>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let peer = peer.unwrap_or("");
        let lines = match headers {
            Some(h) if self.inner.wants_headers(peer) => forwarding_lines(h)?,
            _ => Vec::new(),
        };
        let mut fwd = ForwardingHeaders::new();
        for (name, value) in &lines {
            fwd.push(name, value);
        }
        let resolution = self.inner.resolve(peer, &fwd);
        warn(py, &resolution)?;
        Ok(resolution.key().as_str().to_owned())
    }

    /// Whether `resolve` would read headers for a request from `peer` (a trusted proxy, or a
    /// setup to warn about): when False, an adapter need not gather them.
    fn wants_headers(&self, peer: Option<&str>) -> bool {
        self.inner.wants_headers(peer.unwrap_or(""))
    }

    /// The trusted proxies in the core's text form ("none", a hop count, or ranges).
    #[getter]
    fn trusted_proxies(&self) -> String {
        self.inner.trusted_proxies().to_string()
    }

    /// The forwarding header read from trusted proxies.
    #[getter]
    fn header(&self) -> &'static str {
        self.inner.header().header_name()
    }

    #[getter]
    fn ipv6_prefix(&self) -> u8 {
        self.inner.ipv6_prefix()
    }

    #[getter]
    fn ipv4_prefix(&self) -> u8 {
        self.inner.ipv4_prefix()
    }

    fn __repr__(&self) -> String {
        format!(
            "ClientResolver(trusted_proxies={:?}, header={:?}, ipv6_prefix={}, ipv4_prefix={})",
            self.trusted_proxies(),
            self.header(),
            self.ipv6_prefix(),
            self.ipv4_prefix()
        )
    }
}

/// `trusted_proxies=`: None, an int (hop count; 0 is none), a str in the core's text form,
/// or an iterable of str (addresses, ranges, names).
fn trust(value: Option<&Bound<'_, PyAny>>) -> PyResult<TrustedProxies> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(TrustedProxies::None);
    };
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "trusted_proxies must be a hop count, a str or a list of str, not bool",
        ));
    }
    if value.is_instance_of::<PyInt>() {
        let text = value.str()?.to_string();
        return text.parse::<TrustedProxies>().map_err(to_py);
    }
    if let Ok(s) = value.cast::<PyString>() {
        return s.to_str()?.parse::<TrustedProxies>().map_err(to_py);
    }
    let items = value
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err("trusted_proxies must be a hop count, a str or a list of str")
        })?
        .map(|item| item?.extract::<String>())
        .collect::<PyResult<Vec<String>>>()?;
    TrustedProxies::ranges(items).map_err(to_py)
}

/// The forwarding header lines of `headers` (copied: the core's walk borrows them).
/// `X-Real-IP` is among them: never read, but the core's checks of the setup look for it (a
/// proxy that writes only it, a peer no trusted proxy covers that sends it).
fn forwarding_lines(headers: &Bound<'_, PyAny>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for pair in headers.try_iter()? {
        let pair = pair?;
        // A (name, value) tuple, or any two-item iterable (ASGI allows lists: some servers
        // and adapters send them).
        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = match pair.extract() {
            Ok(t) => t,
            Err(_) => {
                let items = pair
                    .try_iter()?
                    .take(3)
                    .collect::<PyResult<Vec<Bound<'_, PyAny>>>>()?;
                match <[Bound<'_, PyAny>; 2]>::try_from(items) {
                    Ok([n, v]) => (n, v),
                    Err(_) => {
                        return Err(PyValueError::new_err(
                            "a header line must be a (name, value) pair",
                        ))
                    }
                }
            }
        };
        // Every line's name is looked at in place; only the forwarding lines are copied.
        let forwarding = with_bytes(&name, "header name", |n| {
            n.eq_ignore_ascii_case(b"x-forwarded-for")
                || n.eq_ignore_ascii_case(b"forwarded")
                || n.eq_ignore_ascii_case(b"x-real-ip")
        })?;
        if forwarding {
            out.push((
                with_bytes(&name, "header name", <[u8]>::to_vec)?,
                with_bytes(&value, "header value", <[u8]>::to_vec)?,
            ));
        }
    }
    Ok(out)
}

/// `f` of the bytes of `obj`, a str (its UTF-8) or bytes; a TypeError naming `what` else.
fn with_bytes<R>(obj: &Bound<'_, PyAny>, what: &str, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(f(s.to_str()?.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    let ty = obj.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "{what} must be str or bytes, not {ty}"
    )))
}

/// The core's warning, if it gave one, as a Python `UserWarning` (the core gives each kind
/// once per resolver).
fn warn(py: Python<'_>, resolution: &Resolution) -> PyResult<()> {
    if let Some(w) = resolution.warning() {
        let message = std::ffi::CString::new(format!("sluicegate [{}]: {w}", w.code()))
            .unwrap_or_else(|_| c"sluicegate: a client identity warning".to_owned());
        PyErr::warn(py, &py.get_type::<PyUserWarning>(), &message, 2)?;
    }
    Ok(())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyClientResolver>()
}
