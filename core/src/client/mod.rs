//! Client identity: which key a request is limited by.
//!
//! A [`ClientResolver`] turns a request's peer address and its forwarding headers into a
//! [`ClientKey`], by the rules of `docs/CLIENT-IDENTITY.md`:
//!
//! * the **peer address** by default: forwarding headers are read only when the peer is a
//!   proxy trusted by [`TrustedProxies`] (a hop count, or address ranges), so that a client
//!   cannot choose its own key by sending `X-Forwarded-For`;
//! * behind trusted proxies, the **right-most untrusted hop** of the one header the proxies
//!   write ([`ProxyHeader`]: `X-Forwarded-For` or RFC 7239 `Forwarded`);
//! * **IPv6 by prefix** (default /64, the block one subscriber gets), so that one client does
//!   not get a fresh bucket per address of its block; **IPv4-mapped IPv6** (`::ffff:a.b.c.d`)
//!   as the IPv4 address it is;
//! * malformed headers are untrusted input: the key falls back to the peer, with an
//!   [`Issue`] saying why, never a panic;
//! * a setup that makes every client share one key (a proxy that is not trusted, a hop count
//!   larger than the chain) is reported once as a [`Warning`], which each binding turns into
//!   its language's warning.
//!
//! Every binding calls this one implementation: Rust (`sluicegate-tower`), Python and Node
//! pass the peer's text and their header lines.
//!
//! ```
//! use sluicegate::client::{ClientResolver, ForwardingHeaders, TrustedProxies};
//!
//! // Peer only (the default): a forged header changes nothing.
//! let direct = ClientResolver::default();
//! let mut h = ForwardingHeaders::new();
//! h.push(b"x-forwarded-for", b"1.2.3.4");
//! assert_eq!(direct.resolve("203.0.113.7", &h).key().as_str(), "203.0.113.7");
//!
//! // Behind one proxy: the hop it appended.
//! let proxied = ClientResolver::builder()
//!     .trusted_proxies("1".parse::<TrustedProxies>()?)
//!     .build()?;
//! let mut h = ForwardingHeaders::new();
//! h.push(b"X-Forwarded-For", b"1.2.3.4, 2001:db8:1:2:3:4:5:6");
//! assert_eq!(proxied.resolve("10.0.0.2", &h).key().as_str(), "2001:db8:1:2::/64");
//! # Ok::<(), sluicegate::Error>(())
//! ```

mod addr;
mod headers;
mod warning;

pub use addr::{Cidr, ClientKey};
pub use headers::ForwardingHeaders;
use warning::Kind;
pub use warning::Warning;

use crate::sync::real::{AtomicU64, Ordering};
use crate::Error;
use addr::{canonical, is_internal, parse_node, Node};
use core::fmt;
use core::net::{IpAddr, SocketAddr};
use headers::{forwarded_hops, xff_hops, Hop, Lines};

/// The most hops a walk reads (and the largest hop count): a longer chain is malformed.
pub const MAX_HOPS: usize = 64;
/// The default IPv6 prefix: /64, the smallest block a subscriber is given (RFC 6177).
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Which proxies' forwarding headers are believed.
///
/// Text form ([`FromStr`](core::str::FromStr), [`Display`](fmt::Display)), as every binding's
/// option takes it: `none` (or an empty string, or `0`); a hop count `1` to `64`; or a
/// comma-separated list of addresses, CIDR ranges and the names `loopback` (127.0.0.0/8,
/// ::1), `private` (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7) and
/// `linklocal` (169.254.0.0/16, fe80::/10).
///
/// ```
/// use sluicegate::client::TrustedProxies;
/// assert_eq!("none".parse::<TrustedProxies>()?, TrustedProxies::None);
/// assert_eq!("2".parse::<TrustedProxies>()?, TrustedProxies::Hops(2));
/// let r: TrustedProxies = "loopback, 10.0.0.0/8".parse()?;
/// assert_eq!(r.to_string(), "127.0.0.0/8, ::1/128, 10.0.0.0/8");
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TrustedProxies {
    /// No proxy: the key is always the peer's (the default).
    #[default]
    None,
    /// The peer and the `n - 1` hops before it in the header are proxies (`n` from 1 to
    /// [`MAX_HOPS`]): the client is the `n`-th hop from the right of the header. Right when
    /// every request passes the same `n` proxies; a request that can reach the application
    /// past them can forge its key.
    Hops(u8),
    /// Proxies are the peers and hops inside these ranges: the client is the right-most hop
    /// outside them, reading from the peer leftwards. Headers from a peer outside every
    /// range are ignored.
    Ranges(Vec<Cidr>),
}

/// The named ranges of [`TrustedProxies`]'s text form.
const NAMED: &[(&str, &[&str])] = &[
    ("loopback", &["127.0.0.0/8", "::1/128"]),
    (
        "private",
        &[
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",
            "fc00::/7",
        ],
    ),
    ("linklocal", &["169.254.0.0/16", "fe80::/10"]),
];

impl TrustedProxies {
    /// The ranges of a list of addresses, CIDR ranges and names (see the type's text form).
    pub fn ranges<I, S>(items: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Vec::new();
        for item in items {
            let item = item.as_ref().trim();
            match NAMED.iter().find(|(n, _)| n.eq_ignore_ascii_case(item)) {
                Some((_, nets)) => out.extend(
                    nets.iter()
                        .map(|n| n.parse::<Cidr>().expect("a valid named range")),
                ),
                None => out.push(item.parse()?),
            }
        }
        Ok(if out.is_empty() {
            TrustedProxies::None
        } else {
            TrustedProxies::Ranges(out)
        })
    }

    /// Whether the peer (and, with ranges, each hop) is believed.
    fn trusts(&self, ip: Option<IpAddr>) -> bool {
        match self {
            TrustedProxies::None => false,
            TrustedProxies::Hops(_) => true,
            TrustedProxies::Ranges(r) => ip.is_some_and(|ip| r.iter().any(|c| c.contains(ip))),
        }
    }
}

impl core::str::FromStr for TrustedProxies {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("none") || t == "0" {
            return Ok(TrustedProxies::None);
        }
        if t.bytes().all(|c| c.is_ascii_digit()) {
            return match t.parse::<usize>() {
                Ok(n) if (1..=MAX_HOPS).contains(&n) => Ok(TrustedProxies::Hops(n as u8)),
                _ => Err(Error::InvalidOption {
                    option: "trusted_proxies",
                    value: s.to_string(),
                    expected: format!("a hop count from 1 to {MAX_HOPS}"),
                }),
            };
        }
        Self::ranges(t.split(','))
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustedProxies::None => f.write_str("none"),
            TrustedProxies::Hops(n) => write!(f, "{n}"),
            TrustedProxies::Ranges(r) => {
                for (i, c) in r.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c}")?;
                }
                Ok(())
            }
        }
    }
}

/// The forwarding header that trusted proxies write, and the only one read. Never both, and
/// never "whichever is present": a proxy that appends to one passes the other through
/// untouched, so reading the other would let the client write its own key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default: what nginx, HAProxy, cloud
    /// load balancers and CDNs write).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (quoted strings, ports, IPv6 in
    /// brackets, obfuscated identifiers).
    Forwarded,
}

impl ProxyHeader {
    const NAMES: &'static [(&'static str, ProxyHeader)] = &[
        ("x-forwarded-for", ProxyHeader::XForwardedFor),
        ("xff", ProxyHeader::XForwardedFor),
        ("forwarded", ProxyHeader::Forwarded),
    ];

    /// The header's name as it is written on the wire.
    pub fn header_name(self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "X-Forwarded-For",
            ProxyHeader::Forwarded => "Forwarded",
        }
    }
}

impl core::str::FromStr for ProxyHeader {
    type Err = Error;

    /// `"x-forwarded-for"` (or `"xff"`) or `"forwarded"`, in any case.
    fn from_str(s: &str) -> Result<Self, Error> {
        crate::error::choose("proxy_header", s.trim(), Self::NAMES)
    }
}

/// A request's peer (the other end of its connection), as a binding knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer<'a> {
    /// An IP address.
    Ip(IpAddr),
    /// Text: an address in any form [`Peer::parse`] reads, or something that is not an
    /// address (a Unix socket's path, a test client's name), which keys as it is.
    Text(&'a str),
    /// No peer known.
    Missing,
}

impl<'a> Peer<'a> {
    /// A peer from its text: an address (`203.0.113.7`, `203.0.113.7:52100`, `::1`,
    /// `[::1]:443`, `fe80::1%eth0`) becomes [`Peer::Ip`], an empty text [`Peer::Missing`],
    /// anything else [`Peer::Text`].
    pub fn parse(text: &'a str) -> Self {
        if text.trim().is_empty() {
            return Peer::Missing;
        }
        match parse_node(text.as_bytes()) {
            Node::Ip(ip) => Peer::Ip(ip),
            _ => Peer::Text(text),
        }
    }

    fn ip(self) -> Option<IpAddr> {
        match self {
            Peer::Ip(ip) => Some(canonical(ip)),
            _ => None,
        }
    }
}

impl From<IpAddr> for Peer<'_> {
    fn from(ip: IpAddr) -> Self {
        Peer::Ip(ip)
    }
}

impl From<SocketAddr> for Peer<'_> {
    fn from(a: SocketAddr) -> Self {
        Peer::Ip(a.ip())
    }
}

impl<'a> From<&'a str> for Peer<'a> {
    fn from(text: &'a str) -> Self {
        Peer::parse(text)
    }
}

impl<'a, T: Into<Peer<'a>>> From<Option<T>> for Peer<'a> {
    fn from(p: Option<T>) -> Self {
        p.map_or(Peer::Missing, Into::into)
    }
}

/// Where a key came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The peer address (or its text, or `unknown` without one).
    Peer,
    /// A hop of the configured forwarding header.
    Header(ProxyHeader),
}

/// Why a key is not simply the client's hop (the key used is said with each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Issue {
    /// The header could not be read at a hop the walk needed (syntax, not an address, more
    /// than [`MAX_HOPS`] hops or header lines): the peer's key.
    Malformed,
    /// The client's hop was `unknown` or named no `for`: the peer's key.
    UnknownHop,
    /// The peer is trusted but the configured header did not come: the peer's key.
    NoHeader,
    /// Fewer hops than the trusted count: the left-most hop's key (the peer's when that hop
    /// is `unknown`).
    ShortChain,
    /// Every hop is a trusted proxy: the left-most hop's key.
    AllTrusted,
    /// No peer: the key `unknown`.
    NoPeer,
}

/// What [`ClientResolver::resolve`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Resolution {
    key: ClientKey,
    source: Source,
    issue: Option<Issue>,
    /// Boxed: rare, and a resolution is moved on every request.
    warning: Option<Box<Warning>>,
}

impl Resolution {
    /// The key to limit by.
    pub fn key(&self) -> &ClientKey {
        &self.key
    }

    /// The key, owned.
    pub fn into_key(self) -> ClientKey {
        self.key
    }

    /// Where the key came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Why the key is not simply the client's hop, if it is not.
    pub fn issue(&self) -> Option<Issue> {
        self.issue
    }

    /// A misconfiguration, the first time this resolver sees it (each kind is reported once
    /// per resolver): the binding shows it as a warning.
    pub fn warning(&self) -> Option<&Warning> {
        self.warning.as_deref()
    }
}

/// Builds a [`ClientResolver`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ClientResolverBuilder {
    trust: TrustedProxies,
    header: ProxyHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl ClientResolverBuilder {
    /// Which proxies are believed (default [`TrustedProxies::None`]).
    pub fn trusted_proxies(mut self, t: TrustedProxies) -> Self {
        self.trust = t;
        self
    }

    /// Which header the trusted proxies write (default `X-Forwarded-For`).
    pub fn header(mut self, h: ProxyHeader) -> Self {
        self.header = h;
        self
    }

    /// The bits of an IPv6 address that make its key (1 to 128, default 64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits;
        self
    }

    /// The bits of an IPv4 address that make its key (1 to 32, default 32).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.ipv4_prefix = bits;
        self
    }

    /// The resolver, or [`Error::InvalidOption`] for a prefix out of range or a hop count
    /// outside 1 to [`MAX_HOPS`].
    pub fn build(self) -> Result<ClientResolver, Error> {
        let range = |option, value: u8, max: u8| {
            if (1..=max).contains(&value) {
                Ok(())
            } else {
                Err(Error::InvalidOption {
                    option,
                    value: value.to_string(),
                    expected: format!("a prefix length from 1 to {max}"),
                })
            }
        };
        range("ipv6_prefix", self.ipv6_prefix, 128)?;
        range("ipv4_prefix", self.ipv4_prefix, 32)?;
        if let TrustedProxies::Hops(n) = self.trust {
            if n == 0 || usize::from(n) > MAX_HOPS {
                return Err(Error::InvalidOption {
                    option: "trusted_proxies",
                    value: n.to_string(),
                    expected: format!("a hop count from 1 to {MAX_HOPS}"),
                });
            }
        }
        let permissive = match &self.trust {
            TrustedProxies::Ranges(r) => r.iter().copied().find(Cidr::is_everything),
            _ => None,
        };
        Ok(ClientResolver {
            trust: self.trust,
            header: self.header,
            ipv4_prefix: self.ipv4_prefix,
            ipv6_prefix: self.ipv6_prefix,
            permissive,
            reported: AtomicU64::new(0),
        })
    }
}

/// Turns a request's peer and forwarding headers into its client's key (see the module).
/// `Sync`: one resolver serves every request; each [`Warning`] kind is reported once per
/// resolver.
#[derive(Debug)]
pub struct ClientResolver {
    trust: TrustedProxies,
    header: ProxyHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    /// A trusted range that holds every address (reported once).
    permissive: Option<Cidr>,
    /// The warning kinds already reported (bits of [`Warning::bit`]).
    reported: AtomicU64,
}

impl Default for ClientResolver {
    /// The peer address, IPv6 by /64, no proxy trusted.
    fn default() -> Self {
        Self::builder()
            .build()
            .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

impl ClientResolver {
    /// A builder with the defaults: no proxy trusted, `X-Forwarded-For`, IPv6 /64, IPv4 /32.
    pub fn builder() -> ClientResolverBuilder {
        ClientResolverBuilder {
            trust: TrustedProxies::None,
            header: ProxyHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The proxies believed.
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trust
    }

    /// The header read.
    pub fn header(&self) -> ProxyHeader {
        self.header
    }

    /// The IPv6 prefix length of keys.
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// The IPv4 prefix length of keys.
    pub fn ipv4_prefix(&self) -> u8 {
        self.ipv4_prefix
    }

    /// The key of an address under this resolver's prefixes.
    pub fn key_of(&self, ip: IpAddr) -> ClientKey {
        ClientKey::from_ip(ip, self.ipv4_prefix, self.ipv6_prefix)
    }

    /// Whether a request from `peer` needs its forwarding headers read: when the peer is a
    /// trusted proxy, or when they could show an untrusted proxy not reported yet. A binding
    /// may skip collecting them otherwise (and pass [`ForwardingHeaders::new`]): the
    /// resolution is the same.
    pub fn wants_headers<'a>(&self, peer: impl Into<Peer<'a>>) -> bool {
        let peer = peer.into();
        let ip = peer.ip();
        match peer {
            Peer::Missing => false,
            _ if self.trust.trusts(ip) => true,
            _ => {
                ip.is_none_or(is_internal)
                    && self.reported.load(Ordering::Relaxed) & Kind::UntrustedProxy.bit() == 0
            }
        }
    }

    /// The client of a request from `peer` without forwarding headers (what
    /// [`resolve`](Self::resolve) gives when [`wants_headers`](Self::wants_headers) says no).
    pub fn resolve_peer<'a>(&self, peer: impl Into<Peer<'a>>) -> Resolution {
        self.resolve(peer, &headers::NONE)
    }

    /// The client of a request from `peer` with these forwarding headers.
    pub fn resolve<'a>(
        &self,
        peer: impl Into<Peer<'a>>,
        headers: &ForwardingHeaders<'_>,
    ) -> Resolution {
        let peer = peer.into();
        let mut warn = WarningSlot::new(self);
        if let Some(range) = self.permissive {
            warn.offer(Kind::PermissiveTrust, || Warning::PermissiveTrust { range });
        }
        let (key, source, issue) = self.decide(peer, headers, &mut warn);
        Resolution {
            key,
            source,
            issue,
            warning: warn.taken,
        }
    }

    fn peer_key(&self, peer: Peer<'_>) -> ClientKey {
        match peer {
            Peer::Ip(ip) => self.key_of(ip),
            Peer::Text(t) => ClientKey::text(t.trim()),
            Peer::Missing => ClientKey::text("unknown"),
        }
    }

    fn decide(
        &self,
        peer: Peer<'_>,
        h: &ForwardingHeaders<'_>,
        warn: &mut WarningSlot<'_>,
    ) -> (ClientKey, Source, Option<Issue>) {
        let at_peer = |issue| (self.peer_key(peer), Source::Peer, issue);
        let no_peer = |warn: &mut WarningSlot<'_>| {
            warn.offer(Kind::MissingPeer, || Warning::MissingPeer);
            (self.peer_key(peer), Source::Peer, Some(Issue::NoPeer))
        };
        // A peer the server gives no address for (a proxy on a Unix socket): under a hop
        // count of trusted proxies it is the nearest of them, and its header is read, as a
        // proxy's at an address would be; under ranges it is no address they cover.
        if peer == Peer::Missing && !matches!(self.trust, TrustedProxies::Hops(_)) {
            return no_peer(warn);
        }
        let peer_ip = peer.ip();
        if !self.trust.trusts(peer_ip) {
            // A private peer that forwards headers is a proxy in front of the app: unless it
            // is trusted, every client behind it shares its key.
            if h.any() && peer_ip.is_none_or(is_internal) {
                if let Some(header) = h.first_name() {
                    warn.offer(Kind::UntrustedProxy, || Warning::UntrustedProxy {
                        peer: self.peer_key(peer).to_string(),
                        header,
                    });
                }
            }
            return at_peer(None);
        }
        let (lines, other): (&Lines<'_>, &Lines<'_>) = match self.header {
            ProxyHeader::XForwardedFor => (&h.xff, &h.forwarded),
            ProxyHeader::Forwarded => (&h.forwarded, &h.xff),
        };
        if lines.is_empty() {
            let present = if !other.is_empty() {
                Some(match self.header {
                    ProxyHeader::XForwardedFor => "Forwarded",
                    ProxyHeader::Forwarded => "X-Forwarded-For",
                })
            } else {
                // A proxy that writes only X-Real-IP: never read (it holds one address,
                // which a client in front of another proxy could have written).
                h.x_real_ip.then_some("X-Real-IP")
            };
            if let Some(present) = present {
                warn.offer(Kind::UnreadHeader, || Warning::UnreadHeader {
                    configured: self.header.header_name(),
                    present,
                });
            }
            if peer == Peer::Missing {
                // Keyed `unknown`, as any request without a peer (warned of); the issue is the
                // header's absence, as for a trusted peer at an address.
                warn.offer(Kind::MissingPeer, || Warning::MissingPeer);
            }
            return at_peer(Some(Issue::NoHeader));
        }
        let walked = match self.header {
            ProxyHeader::XForwardedFor => self.walk(xff_hops(lines), lines.dropped),
            ProxyHeader::Forwarded => self.walk(forwarded_hops(lines), lines.dropped),
        };
        let source = Source::Header(self.header);
        match walked {
            Walk::Client(Node::Ip(ip), issue) => {
                if issue == Some(Issue::ShortChain) {
                    if let TrustedProxies::Hops(n) = self.trust {
                        warn.offer(Kind::ShortChain, || Warning::ShortChain { trusted: n });
                    }
                }
                (self.key_of(ip), source, issue)
            }
            Walk::Client(Node::Obfuscated(id), issue) => (ClientKey::text(id), source, issue),
            Walk::Client(Node::Unknown, issue) => {
                warn.offer(Kind::UnknownClient, || Warning::UnknownClient {
                    header: self.header.header_name(),
                });
                at_peer(issue.or(Some(Issue::UnknownHop)))
            }
            Walk::Client(Node::Invalid, _) | Walk::Malformed => {
                warn.offer(Kind::MalformedHeader, || Warning::MalformedHeader {
                    header: self.header.header_name(),
                });
                at_peer(Some(Issue::Malformed))
            }
            Walk::Empty => at_peer(Some(Issue::NoHeader)),
        }
    }

    /// Walks the hops from the right to the client's.
    fn walk<'h>(&self, hops: impl Iterator<Item = Hop<'h>>, dropped: bool) -> Walk<'h> {
        let mut last: Option<Node<'h>> = None;
        for (i, hop) in hops.enumerate() {
            if i == MAX_HOPS {
                return Walk::Malformed;
            }
            let Ok(node) = hop else {
                return Walk::Malformed;
            };
            match &self.trust {
                TrustedProxies::Hops(n) if i + 1 == usize::from(*n) => {
                    return Walk::Client(node, None)
                }
                TrustedProxies::Ranges(r) => match node {
                    Node::Ip(ip) if r.iter().any(|c| c.contains(ip)) => {}
                    _ => return Walk::Client(node, None),
                },
                _ => {}
            }
            last = Some(node);
        }
        match last {
            // The chain went on in header lines that were not kept.
            Some(_) if dropped => Walk::Malformed,
            Some(node) => {
                let issue = match self.trust {
                    TrustedProxies::Hops(_) => Issue::ShortChain,
                    _ => Issue::AllTrusted,
                };
                Walk::Client(node, Some(issue))
            }
            None => Walk::Empty,
        }
    }
}

/// Where a walk ended.
enum Walk<'h> {
    /// The client's hop (and why it is only the best guess, if it is).
    Client(Node<'h>, Option<Issue>),
    /// A hop that could not be read, or too many.
    Malformed,
    /// No hop at all (only empty list elements).
    Empty,
}

/// The one warning a resolution may carry: the first offered whose kind this resolver has
/// not reported yet.
struct WarningSlot<'r> {
    resolver: &'r ClientResolver,
    taken: Option<Box<Warning>>,
}

impl<'r> WarningSlot<'r> {
    fn new(resolver: &'r ClientResolver) -> Self {
        Self {
            resolver,
            taken: None,
        }
    }

    /// Takes the warning `make` builds, unless one is taken already or its kind was
    /// reported. Cheap when it was: one load.
    fn offer(&mut self, kind: Kind, make: impl FnOnce() -> Warning) {
        if self.taken.is_some() {
            return;
        }
        let bit = kind.bit();
        let r = &self.resolver.reported;
        if r.load(Ordering::Relaxed) & bit == 0 && r.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            let w = make();
            debug_assert_eq!(w.kind(), kind);
            self.taken = Some(Box::new(w));
        }
    }
}

#[cfg(test)]
mod tests;
