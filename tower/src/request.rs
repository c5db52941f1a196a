//! What a key extractor and the hooks see of a request.

use http::{HeaderMap, Method, Request, Uri};
use sluicegate::client::{ClientKey, ClientResolver, ForwardingHeaders, Peer, Resolution};
use std::cell::OnceCell;
use std::net::{IpAddr, SocketAddr};

/// A request as the hooks ([`KeyBy::Custom`](crate::KeyBy::Custom), `skip`) see it: its
/// parts, and its client's key, resolved on first use by the layer's
/// [`ClientResolver`](sluicegate::client::ClientResolver).
pub struct RequestRef<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    extensions: &'a http::Extensions,
    resolver: &'a ClientResolver,
    client: OnceCell<Client>,
}

/// A request's client: its key alone where the headers cannot matter (a peer address that
/// is not a trusted proxy's, nothing to warn about), else the resolver's whole answer.
enum Client {
    Key(ClientKey),
    Resolved(Resolution),
}

impl<'a> RequestRef<'a> {
    pub(crate) fn new<B>(req: &'a Request<B>, resolver: &'a ClientResolver) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            resolver,
            client: OnceCell::new(),
        }
    }

    /// The request's method.
    pub fn method(&self) -> &Method {
        self.method
    }

    /// The request's URI.
    pub fn uri(&self) -> &Uri {
        self.uri
    }

    /// The request's headers.
    pub fn headers(&self) -> &HeaderMap {
        self.headers
    }

    /// The request's extensions (axum's `ConnectInfo`, your middleware's values).
    pub fn extensions(&self) -> &http::Extensions {
        self.extensions
    }

    /// The connection's peer address: axum's `ConnectInfo<SocketAddr>` (feature `axum`), else
    /// a `SocketAddr` or `IpAddr` extension; `None` when the server put none there.
    pub fn peer(&self) -> Option<IpAddr> {
        #[cfg(feature = "axum")]
        if let Some(c) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(c.0.ip());
        }
        if let Some(a) = self.extensions.get::<SocketAddr>() {
            return Some(a.ip());
        }
        self.extensions.get::<IpAddr>().copied()
    }

    /// The client's key (docs/CLIENT-IDENTITY.md): the peer, or the right-most untrusted hop
    /// of the forwarding header when the peer is a trusted proxy.
    pub fn client(&self) -> &ClientKey {
        match self.resolve() {
            Client::Key(k) => k,
            Client::Resolved(r) => r.key(),
        }
    }

    fn resolve(&self) -> &Client {
        self.client.get_or_init(|| {
            let peer: Peer<'_> = self.peer().into();
            if !self.resolver.wants_headers(peer) {
                return match peer {
                    // What `resolve` gives such a peer, without its bookkeeping.
                    Peer::Ip(ip) => Client::Key(self.resolver.key_of(ip)),
                    _ => Client::Resolved(self.resolver.resolve_peer(peer)),
                };
            }
            let mut fwd = ForwardingHeaders::new();
            for name in ["x-forwarded-for", "forwarded"] {
                for v in self.headers.get_all(name) {
                    fwd.push(name.as_bytes(), v.as_bytes());
                }
            }
            if self.headers.contains_key("x-real-ip") {
                fwd.push(b"x-real-ip", b"");
            }
            Client::Resolved(self.resolver.resolve(peer, &fwd))
        })
    }

    /// The resolution, if one was made.
    pub(crate) fn resolved(&self) -> Option<&Resolution> {
        match self.client.get()? {
            Client::Resolved(r) => Some(r),
            Client::Key(_) => None,
        }
    }
}
