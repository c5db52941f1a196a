//! Addresses: one hop's text parsed (an IP address with or without a port, brackets or zone;
//! an RFC 7239 obfuscated identifier; `unknown`), CIDR ranges, and the key an address gives.

use crate::Error;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest hop text read (after unquoting): `[` + the longest IPv6 text with a zone and a
/// port fits well within it. Anything longer is not a node (a flood of bytes is refused
/// before it is looked at).
pub(crate) const MAX_NODE: usize = 96;

/// One hop of a forwarding chain, as its text reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node<'a> {
    /// An address (IPv4-mapped IPv6 already turned into IPv4).
    Ip(IpAddr),
    /// An RFC 7239 obfuscated identifier (`_` then letters, digits, `.`, `_`, `-`).
    Obfuscated(&'a str),
    /// RFC 7239 `unknown`: the proxy did not know the address.
    Unknown,
    /// Anything else.
    Invalid,
}

/// Parses one hop: `203.0.113.7`, `203.0.113.7:8080`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:443`, `fe80::1%eth0`, a port that is obfuscated (`:_p1`), an obfuscated
/// identifier (`_hidden`) or `unknown`, these two with a port or not (`_hidden:_p1`,
/// `unknown:8080`); surrounding spaces and tabs are ignored.
pub(crate) fn parse_node(text: &[u8]) -> Node<'_> {
    let t = trim(text);
    if t.is_empty() || t.len() > MAX_NODE {
        return Node::Invalid;
    }
    // `unknown` and an obfuscated name, each with a port or not (RFC 7239's node:
    // `nodename [":" node-port]`); the port is not part of who the client is.
    let colon = t.iter().position(|&c| c == b':');
    let name = match colon {
        Some(i) if t[0] == b'_' || t[..i].eq_ignore_ascii_case(b"unknown") => {
            if !core::str::from_utf8(&t[i + 1..]).is_ok_and(valid_port) {
                return Node::Invalid;
            }
            &t[..i]
        }
        _ => t,
    };
    if name.eq_ignore_ascii_case(b"unknown") {
        return Node::Unknown;
    }
    if name[0] == b'_' {
        let ok = name[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
        return match core::str::from_utf8(name) {
            Ok(s) if ok && name.len() > 1 => Node::Obfuscated(s),
            _ => Node::Invalid,
        };
    }
    let Ok(s) = core::str::from_utf8(t) else {
        return Node::Invalid;
    };
    match parse_ip(s) {
        Some(ip) => Node::Ip(canonical(ip)),
        None => Node::Invalid,
    }
}

/// An address in any of the forms [`parse_node`] reads (not `unknown` nor obfuscated).
fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || valid_port(after.strip_prefix(':')?)) {
            return None;
        }
        return parse_v6(inside).map(IpAddr::V6);
    }
    if let Ok(v4) = s.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    if let Some((host, port)) = s.split_once(':') {
        // One colon: IPv4 and a port (IPv6 text has at least two).
        if !port.contains(':') {
            return valid_port(port)
                .then(|| host.parse::<Ipv4Addr>().ok().map(IpAddr::V4))
                .flatten();
        }
    }
    parse_v6(s).map(IpAddr::V6)
}

/// IPv6 text, with an optional zone (`%eth0`, or `%25eth0` as in URIs) that is dropped.
fn parse_v6(s: &str) -> Option<Ipv6Addr> {
    let addr = match s.split_once('%') {
        Some((a, zone)) if !zone.is_empty() => a,
        Some(_) => return None,
        None => s,
    };
    addr.parse().ok()
}

/// A port: 1 to 5 digits, or an RFC 7239 obfuscated port (`_` then letters, digits, `.`,
/// `_`, `-`).
fn valid_port(p: &str) -> bool {
    let b = p.as_bytes();
    match b.first() {
        Some(b'_') => {
            b.len() > 1
                && b[1..]
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }
        Some(_) => {
            b.len() <= 5
                && b.iter().all(u8::is_ascii_digit)
                && p.parse::<u32>().is_ok_and(|n| n <= 65535)
        }
        None => false,
    }
}

/// Spaces and tabs off both ends.
pub(crate) fn trim(mut t: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = t {
        t = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = t {
        t = rest;
    }
    t
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is, so that one
/// client reaching a dual-stack socket both ways has one key (GHSA-46wh-pxpv-q5gq).
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Whether `ip` is an address that a reverse proxy in front of an application usually has:
/// loopback, private (RFC 1918), shared (RFC 6598, carrier-grade NAT), link-local, or IPv6
/// unique-local.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(a) => {
            let s = a.segments()[0];
            a.is_loopback() || (s & 0xfe00) == 0xfc00 || (s & 0xffc0) == 0xfe80
        }
    }
}

/// An address range: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`; a bare
/// address is the range of that address alone).
///
/// ```
/// use sluicegate::client::Cidr;
/// let net: Cidr = "10.0.0.0/8".parse()?;
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(net.contains("::ffff:10.1.2.3".parse().unwrap())); // IPv4-mapped is IPv4
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// assert_eq!(net.to_string(), "10.0.0.0/8");
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network address (host bits zero).
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The range of `prefix` leading bits of `addr` (host bits are cleared), or `None` for a
    /// prefix longer than the address. An IPv4-mapped address is taken as IPv4 (its prefix
    /// then counts the IPv4 bits only when it is at least 96: `::ffff:10.0.0.0/104` is
    /// `10.0.0.0/8`).
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() && prefix >= 96 => {
                (canonical(addr), prefix - 96)
            }
            _ => (addr, prefix),
        };
        if prefix > full_len(addr) {
            return None;
        }
        Some(Self {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` (IPv4-mapped IPv6 taken as IPv4) is in the range. An IPv6 range holds the
    /// IPv4 addresses whose mapped form it holds (`::/0` every address, `::fffe:0:0/95`
    /// every IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (canonical(ip), self.addr) {
            (IpAddr::V4(v4), IpAddr::V6(_)) => {
                mask(IpAddr::V6(v4.to_ipv6_mapped()), self.prefix) == self.addr
            }
            (ip, _) => ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr,
        }
    }

    /// Whether the range holds every address of its family (`0.0.0.0/0`, `::/0`).
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl core::str::FromStr for Cidr {
    type Err = Error;

    /// `ADDRESS[/PREFIX]`, IPv4 or IPv6, else [`Error::InvalidOption`] (option
    /// `trusted_proxies`). The address must be the range's first (`10.0.0.0/8`): one with
    /// bits set past the prefix (`10.0.0.1/8`, often a mistyped `/32`) is refused, where
    /// [`Cidr::new`] clears them.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidOption {
            option: "trusted_proxies",
            value: s.to_string(),
            expected: "a hop count, or addresses and CIDR ranges (\"10.0.0.0/8\", \
                       \"2001:db8::/32\") or the names loopback, private, linklocal"
                .to_string(),
        };
        let t = s.trim();
        let (a, p) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix = match p {
            None => full_len(addr),
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|c| c.is_ascii_digit()) => {
                p.parse().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
        };
        let range = Cidr::new(addr, prefix).ok_or_else(bad)?;
        if mask(addr, prefix) != addr {
            return Err(Error::InvalidOption {
                option: "trusted_proxies",
                value: s.to_string(),
                expected: format!(
                    "a range written from its first address: {} (the bits past /{prefix} of \
                     {a} are set; for that address alone, write it without a prefix)",
                    range
                ),
            });
        }
        Ok(range)
    }
}

/// 32 or 128.
pub(crate) fn full_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// `ip` with all but its `prefix` leading bits cleared.
pub(crate) fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// The longest key text: an IPv6 address (39 characters at most) and `/127`.
const KEY_INLINE: usize = 44;

/// A client's key: the text a limiter is keyed by (docs/CLIENT-IDENTITY.md, "The key").
///
/// * an IPv4 address keyed by its whole address: `203.0.113.7`; by a shorter prefix:
///   `203.0.113.0/24`;
/// * an IPv6 address keyed by a prefix (default /64): its network and the prefix,
///   `2001:db8:1:2::/64` (RFC 5952 text); by its whole address: `2001:db8::1`;
/// * an IPv4-mapped IPv6 address: as the IPv4 address it maps;
/// * an RFC 7239 obfuscated identifier given by a trusted proxy: as written, `_hidden`;
/// * a peer that is not an IP address (a Unix socket, a test client's name): its text;
/// * no peer at all: `unknown`.
///
/// IP keys are built on the stack (no allocation).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientKey {
    repr: Repr,
    ip: Option<(IpAddr, u8)>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Inline { buf: [u8; KEY_INLINE], len: u8 },
    Text(Box<str>),
}

impl ClientKey {
    /// The key of `ip` (IPv4-mapped IPv6 taken as IPv4) under the given prefixes.
    pub fn from_ip(ip: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> Self {
        let ip = canonical(ip);
        let prefix = match ip {
            IpAddr::V4(_) => ipv4_prefix.min(32),
            IpAddr::V6(_) => ipv6_prefix.min(128),
        };
        let net = mask(ip, prefix);
        let mut w = Inline {
            buf: [0; KEY_INLINE],
            len: 0,
        };
        match net {
            IpAddr::V4(a) => w.v4(a),
            // std's Display is RFC 5952's text (lower case, the longest zero run compressed).
            IpAddr::V6(a) => {
                let _ = fmt::write(&mut w, format_args!("{a}"));
            }
        }
        if prefix < full_len(net) {
            w.push(b'/');
            w.num(u32::from(prefix));
        }
        Self {
            repr: Repr::Inline {
                buf: w.buf,
                len: w.len as u8,
            },
            ip: Some((net, prefix)),
        }
    }

    /// A key that is not an address: its text as given.
    pub(crate) fn text(s: &str) -> Self {
        Self {
            repr: Repr::Text(s.into()),
            ip: None,
        }
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        match &self.repr {
            // Only ASCII is ever written inline.
            Repr::Inline { buf, len } => {
                core::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Text(s) => s,
        }
    }

    /// The key's bytes (what a [`KeyedLimiter`](crate::KeyedLimiter) is keyed by): the text's,
    /// without the UTF-8 check `as_str` makes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Inline { buf, len } => &buf[..usize::from(*len)],
            Repr::Text(s) => s.as_bytes(),
        }
    }

    /// The network the key stands for (its address with the host bits cleared) and its
    /// prefix length, when the key is an address.
    pub fn network(&self) -> Option<(IpAddr, u8)> {
        self.ip
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl AsRef<[u8]> for ClientKey {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The inline key's writer (ASCII only; never past its buffer, which the longest key fits).
struct Inline {
    buf: [u8; KEY_INLINE],
    len: usize,
}

impl Inline {
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// A number up to 999 (an octet, a prefix length), in decimal.
    fn num(&mut self, n: u32) {
        if n >= 100 {
            self.push(b'0' + (n / 100 % 10) as u8);
        }
        if n >= 10 {
            self.push(b'0' + (n / 10 % 10) as u8);
        }
        self.push(b'0' + (n % 10) as u8);
    }

    /// Dotted decimal, without going through `fmt` (the per-request path of IPv4 keys):
    /// at most 15 bytes, written at fixed bounds.
    fn v4(&mut self, a: Ipv4Addr) {
        let mut out = [0u8; 16];
        let mut n = 0;
        for (i, o) in a.octets().into_iter().enumerate() {
            if i > 0 {
                out[n & 15] = b'.';
                n += 1;
            }
            if o >= 100 {
                out[n & 15] = b'0' + o / 100;
                n += 1;
            }
            if o >= 10 {
                out[n & 15] = b'0' + o / 10 % 10;
                n += 1;
            }
            out[n & 15] = b'0' + o % 10;
            n += 1;
        }
        self.buf[..16].copy_from_slice(&out);
        self.len = n;
    }
}

impl fmt::Write for Inline {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.len + s.len() > self.buf.len() {
            return Err(fmt::Error);
        }
        s.bytes().for_each(|b| self.push(b));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn nodes_in_every_form() {
        let v6 = ip("2001:db8::1");
        for (text, want) in [
            ("203.0.113.7", Node::Ip(ip("203.0.113.7"))),
            (" 203.0.113.7\t", Node::Ip(ip("203.0.113.7"))),
            ("203.0.113.7:8080", Node::Ip(ip("203.0.113.7"))),
            ("203.0.113.7:_p1", Node::Ip(ip("203.0.113.7"))),
            ("2001:db8::1", Node::Ip(v6)),
            ("[2001:db8::1]", Node::Ip(v6)),
            ("[2001:db8::1]:443", Node::Ip(v6)),
            ("[2001:db8::1]:_x", Node::Ip(v6)),
            ("fe80::1%eth0", Node::Ip(ip("fe80::1"))),
            ("[fe80::1%25eth0]:80", Node::Ip(ip("fe80::1"))),
            ("::ffff:203.0.113.7", Node::Ip(ip("203.0.113.7"))),
            ("[::ffff:cb00:7107]", Node::Ip(ip("203.0.113.7"))),
            ("unknown", Node::Unknown),
            ("UNKNOWN", Node::Unknown),
            ("_hidden", Node::Obfuscated("_hidden")),
            ("_a.b-c_d", Node::Obfuscated("_a.b-c_d")),
            // RFC 7239 nodes with a port: the port is not part of the client.
            ("_hidden:_p1", Node::Obfuscated("_hidden")),
            ("_hidden:8080", Node::Obfuscated("_hidden")),
            ("unknown:8080", Node::Unknown),
            ("Unknown:_p", Node::Unknown),
        ] {
            assert_eq!(parse_node(text.as_bytes()), want, "{text:?}");
        }
        for bad in [
            "",
            "   ",
            "_",
            "_:80",
            "_hidden:",
            "_hidden:99999",
            "_hidden:_",
            "unknown:",
            "unknown:x",
            "unknownx:80",
            "_a b",
            "_a/b",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4:",
            "1.2.3.4:123456",
            "1.2.3.4:65536",
            "1.2.3.4:-1",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[2001:db8::1]:",
            "[1.2.3.4]",
            "2001:db8::1%",
            "host.example",
            "1.2.3.4, 5.6.7.8",
        ] {
            assert_eq!(parse_node(bad.as_bytes()), Node::Invalid, "{bad:?}");
        }
        assert_eq!(parse_node(&[0xff, b'1']), Node::Invalid);
        assert_eq!(
            parse_node("1".repeat(MAX_NODE + 1).as_bytes()),
            Node::Invalid
        );
    }

    #[test]
    fn keys_are_stable_text() {
        let k = |s: &str, v4: u8, v6: u8| ClientKey::from_ip(ip(s), v4, v6).to_string();
        assert_eq!(k("203.0.113.7", 32, 64), "203.0.113.7");
        assert_eq!(k("203.0.113.7", 24, 64), "203.0.113.0/24");
        assert_eq!(k("255.255.255.255", 32, 64), "255.255.255.255");
        assert_eq!(k("2001:db8:1:2:3:4:5:6", 32, 64), "2001:db8:1:2::/64");
        assert_eq!(k("2001:db8:1:2:3:4:5:6", 32, 56), "2001:db8:1::/56");
        assert_eq!(k("2001:db8:1:2:3:4:5:6", 32, 128), "2001:db8:1:2:3:4:5:6");
        assert_eq!(
            k("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 32, 127),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"
        );
        assert_eq!(k("::ffff:203.0.113.7", 32, 64), "203.0.113.7");
        assert_eq!(k("::1", 32, 64), "::/64");
        assert_eq!(k("::1", 32, 128), "::1");
        assert_eq!(k("0.0.0.0", 1, 64), "0.0.0.0/1");
    }

    #[test]
    fn cidrs() {
        let c: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(c.contains(ip("2001:db8:ffff::1")));
        assert!(!c.contains(ip("2001:db9::1")));
        assert!(!c.contains(ip("10.0.0.1")));
        let one: Cidr = "192.0.2.1".parse().unwrap();
        assert_eq!(one.prefix(), 32);
        assert!(one.contains(ip("::ffff:192.0.2.1")));
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        // Bits past the prefix are refused in text (a mistyped /32 trusted 16M addresses):
        // Cidr::new clears them.
        let e = "10.9.9.9/8".parse::<Cidr>().unwrap_err();
        assert!(e.to_string().contains("10.0.0.0/8"), "{e}");
        assert_eq!(
            Cidr::new(ip("10.9.9.9"), 8).unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().is_everything());
        // An IPv6 range holds the IPv4 addresses whose mapped form it holds.
        let all: Cidr = "::/0".parse().unwrap();
        assert!(all.contains(ip("10.0.0.1")) && all.contains(ip("2001:db8::1")));
        let v4: Cidr = "::ffff:0.0.0.0/96".parse().unwrap();
        assert_eq!(v4.to_string(), "0.0.0.0/0");
        let wide: Cidr = "::fffe:0:0/95".parse().unwrap();
        assert!(wide.contains(ip("10.0.0.1")) && wide.contains(ip("::fffe:0:1")));
        assert!(!"2001:db8::/32"
            .parse::<Cidr>()
            .unwrap()
            .contains(ip("32.1.13.184")));
        for bad in [
            "10.9.9.9/8",
            "::ffff:10.0.0.0/95",
            "2001:db8::1/32",
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x/8",
            "10/8",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert_eq!(e.code(), "invalid_option", "{bad:?}");
        }
    }

    #[test]
    fn internal_addresses() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip(a)), "{a}");
        }
        for a in ["203.0.113.7", "100.128.0.1", "2001:db8::1", "8.8.8.8"] {
            assert!(!is_internal(ip(a)), "{a}");
        }
    }
}
