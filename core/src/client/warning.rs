//! The misconfigurations a resolver reports, once each: data that every binding turns into
//! its own language's warning (Python `warnings.warn`, Node `process.emitWarning`, a value in
//! Rust), with a stable [`code`](Warning::code).

use super::Cidr;
use core::fmt;

/// A setup that makes clients share keys, or that a client can exploit. Reported once per
/// [`ClientResolver`](super::ClientResolver) and kind, by
/// [`Resolution::warning`](super::Resolution::warning).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Warning {
    /// A request came from a private or loopback peer (or one that is not an IP address, such
    /// as a Unix socket) with a forwarding header, and no trusted proxy covers the peer: the
    /// application is behind a proxy it does not trust, so every client shares the proxy's
    /// key. The analogue of express-rate-limit's `ERR_ERL_UNEXPECTED_X_FORWARDED_FOR`.
    UntrustedProxy {
        /// The peer's key text.
        peer: String,
        /// The forwarding header that came (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`).
        header: &'static str,
    },
    /// A request passed fewer proxies than the trusted hop count: its left-most hop was
    /// used, which the client may have written itself.
    ShortChain {
        /// The trusted hop count.
        trusted: u8,
    },
    /// A request had no peer address: it was keyed `unknown`, with every other such request.
    MissingPeer,
    /// A trusted proxy's forwarding header could not be read where the client's hop should
    /// be: the peer's key was used.
    MalformedHeader {
        /// The header (`Forwarded` or `X-Forwarded-For`).
        header: &'static str,
    },
    /// A trusted peer sent the other forwarding header than the one configured: the peer's
    /// key was used (set the resolver's header to the one the proxy writes).
    UnreadHeader {
        /// The header the resolver reads.
        configured: &'static str,
        /// The header that came instead.
        present: &'static str,
    },
    /// A trusted range holds every address (`0.0.0.0/0`, `::/0`): any client can choose its
    /// key. The analogue of express-rate-limit's `ERR_ERL_PERMISSIVE_TRUST_PROXY`.
    PermissiveTrust {
        /// The range.
        range: Cidr,
    },
    /// A trusted proxy's forwarding header named no client at the client's hop (`unknown`, or
    /// a `Forwarded` element without `for=`): the request was keyed by the proxy, with every
    /// other such request.
    UnknownClient {
        /// The header (`Forwarded` or `X-Forwarded-For`).
        header: &'static str,
    },
}

/// The kind of a [`Warning`], one bit each in a resolver's set of reported kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    UntrustedProxy = 1,
    ShortChain = 2,
    MissingPeer = 4,
    MalformedHeader = 8,
    UnreadHeader = 16,
    PermissiveTrust = 32,
    UnknownClient = 64,
}

impl Kind {
    pub(crate) fn bit(self) -> u64 {
        self as u64
    }
}

impl Warning {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Warning::UntrustedProxy { .. } => Kind::UntrustedProxy,
            Warning::ShortChain { .. } => Kind::ShortChain,
            Warning::MissingPeer => Kind::MissingPeer,
            Warning::MalformedHeader { .. } => Kind::MalformedHeader,
            Warning::UnreadHeader { .. } => Kind::UnreadHeader,
            Warning::PermissiveTrust { .. } => Kind::PermissiveTrust,
            Warning::UnknownClient { .. } => Kind::UnknownClient,
        }
    }

    /// A stable, machine-readable name: `untrusted_proxy`, `short_chain`, `missing_peer`,
    /// `malformed_header`, `unread_header`, `permissive_trust`, `unknown_client` (Node prefixes it,
    /// `SLUICEGATE_UNTRUSTED_PROXY`; Python puts it on the warning).
    pub fn code(&self) -> &'static str {
        match self.kind() {
            Kind::UntrustedProxy => "untrusted_proxy",
            Kind::ShortChain => "short_chain",
            Kind::MissingPeer => "missing_peer",
            Kind::MalformedHeader => "malformed_header",
            Kind::UnreadHeader => "unread_header",
            Kind::PermissiveTrust => "permissive_trust",
            Kind::UnknownClient => "unknown_client",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::UntrustedProxy { peer, header } => write!(
                f,
                "a request from {peer} carries {header}, but no trusted proxy covers {peer}: \
                 if this application runs behind a proxy, every client shares the proxy's key. \
                 Set trusted_proxies to the proxy's address range or hop count \
                 (docs/CLIENT-IDENTITY.md)"
            ),
            Warning::ShortChain { trusted } => write!(
                f,
                "trusted_proxies is {trusted} hops, but a request came through fewer: it was \
                 keyed by its left-most hop, which a client that reaches the application past \
                 the proxies can write itself"
            ),
            Warning::MissingPeer => f.write_str(
                "a request has no peer address: it is keyed \"unknown\", together with every \
                 other request without one",
            ),
            Warning::MalformedHeader { header } => write!(
                f,
                "a trusted proxy's {header} header could not be read at the client's hop: the \
                 request was keyed by its peer"
            ),
            Warning::UnreadHeader {
                configured,
                present,
            } => write!(
                f,
                "a trusted proxy sent {present} but the resolver reads {configured}: the \
                 request was keyed by the proxy ({})",
                if *present == "X-Real-IP" {
                    "have the proxy write X-Forwarded-For or Forwarded: X-Real-IP is never read"
                } else {
                    "set the proxy header to the one it writes"
                }
            ),
            Warning::PermissiveTrust { range } => write!(
                f,
                "trusted_proxies holds {range}, every address: any client can choose its own \
                 key by sending a forwarding header"
            ),
            Warning::UnknownClient { header } => write!(
                f,
                "a trusted proxy's {header} header named no client at the client's hop \
                 (`unknown`, or an element without `for=`): the request was keyed by the \
                 proxy, together with every other such request (have the proxy write the \
                 client's address)"
            ),
        }
    }
}
