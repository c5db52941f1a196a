//! Client identity for the web adapters: the core's `sluicegate::client::ClientResolver`, which
//! turns a request's peer address and forwarding headers into the key it is limited by
//! (docs/CLIENT-IDENTITY.md). `web.js` passes the peer's text and the three header values
//! Node gives (repeated lines joined by `, `, which reads as the one list they make).

use crate::errors::{from_core, invalid_arg, JsErr};
use napi::bindgen_prelude::Either;
use napi_derive::napi;
use sluicegate::client::{self, ForwardingHeaders, ProxyHeader, TrustedProxies};

/// Which key a request is limited by: the peer address by default; forwarding headers only
/// from trusted proxies; IPv6 by prefix (default /64); IPv4-mapped IPv6 as IPv4.
#[napi]
pub struct ClientResolver {
    inner: client::ClientResolver,
}

/// A prefix length argument as the core's `u8` (the core checks its range).
fn prefix(v: Option<u32>, what: &str) -> Result<Option<u8>, JsErr> {
    v.map(|n| {
        u8::try_from(n).map_err(|_| invalid_arg(format!("{what} must be a prefix length, got {n}")))
    })
    .transpose()
}

#[napi]
impl ClientResolver {
    /// `trustedProxies`: the core's text form (`none`, a hop count, or addresses, CIDR ranges
    /// and `loopback`/`private`/`linklocal`, comma-separated); `header`: `x-forwarded-for`
    /// (default) or `forwarded`; `ipv6Prefix` (default 64) and `ipv4Prefix` (default 32).
    #[napi(constructor)]
    pub fn new(
        trusted_proxies: Option<String>,
        header: Option<String>,
        ipv6_prefix: Option<u32>,
        ipv4_prefix: Option<u32>,
    ) -> Result<Self, JsErr> {
        let mut b = client::ClientResolver::builder();
        if let Some(t) = trusted_proxies {
            b = b.trusted_proxies(t.parse::<TrustedProxies>().map_err(from_core)?);
        }
        if let Some(h) = header {
            b = b.header(h.parse::<ProxyHeader>().map_err(from_core)?);
        }
        if let Some(p) = prefix(ipv6_prefix, "ipv6Prefix")? {
            b = b.ipv6_prefix(p);
        }
        if let Some(p) = prefix(ipv4_prefix, "ipv4Prefix")? {
            b = b.ipv4_prefix(p);
        }
        Ok(Self {
            inner: b.build().map_err(from_core)?,
        })
    }

    /// The key of a request from `peer` (`undefined`: no peer) with these header values: the
    /// key's text, or, the first time this resolver meets a misconfiguration of a kind,
    /// `[key, warningCode, warningMessage]` (the caller emits the warning).
    #[napi]
    pub fn resolve(
        &self,
        peer: Option<String>,
        x_forwarded_for: Option<String>,
        forwarded: Option<String>,
        x_real_ip: Option<String>,
    ) -> Either<String, Vec<String>> {
        let peer = peer.as_deref().unwrap_or("");
        let mut h = ForwardingHeaders::new();
        for (name, value) in [
            (&b"x-forwarded-for"[..], &x_forwarded_for),
            (b"forwarded", &forwarded),
            (b"x-real-ip", &x_real_ip),
        ] {
            if let Some(v) = value {
                h.push(name, v.as_bytes());
            }
        }
        let r = self.inner.resolve(peer, &h);
        let key = r.key().as_str().to_owned();
        match r.warning() {
            None => Either::A(key),
            Some(w) => Either::B(vec![key, w.code().to_owned(), w.to_string()]),
        }
    }

    /// The trusted proxies, in the core's text form.
    #[napi(getter)]
    pub fn trusted_proxies(&self) -> String {
        self.inner.trusted_proxies().to_string()
    }

    /// The IPv6 prefix length of keys.
    #[napi(getter)]
    pub fn ipv6_prefix(&self) -> u32 {
        u32::from(self.inner.ipv6_prefix())
    }
}
