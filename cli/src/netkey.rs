//! Client keys from IP addresses: IPv4 by a prefix (default /32, the address), IPv6 by a
//! prefix (default /64, one subscriber's network: a client that rotates through its /64 is
//! still one client), and IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
//!
//! Self-contained (std only), so that it can move into the core as it is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How addresses are grouped into keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefixes {
    /// Leading bits of an IPv4 address kept (0 to 32).
    pub v4: u8,
    /// Leading bits of an IPv6 address kept (0 to 128).
    pub v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { v4: 32, v6: 64 }
    }
}

/// A client network: the address with the bits past the prefix cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetKey {
    /// An IPv4 network (also for IPv4-mapped IPv6 addresses).
    V4 { addr: u32, prefix: u8 },
    /// An IPv6 network.
    V6 { addr: u128, prefix: u8 },
}

impl Prefixes {
    /// The key of `ip`.
    pub fn key(&self, ip: IpAddr) -> NetKey {
        let v4 = |a: Ipv4Addr| NetKey::V4 {
            addr: u32::from(a) & mask32(self.v4),
            prefix: self.v4,
        };
        match ip {
            IpAddr::V4(a) => v4(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(m) => v4(m),
                None => NetKey::V6 {
                    addr: u128::from(a) & mask128(self.v6),
                    prefix: self.v6,
                },
            },
        }
    }

    /// The key of an address written as text (`1.2.3.4`, `2001:db8::1`, `[2001:db8::1]`,
    /// `2001:db8::1%eth0`, `1.2.3.4:5678`); `None` if it is not an address.
    #[cfg(test)]
    pub fn key_of_text(&self, text: &[u8]) -> Option<NetKey> {
        parse_ip(text).map(|ip| self.key(ip))
    }
}

fn mask32(bits: u8) -> u32 {
    match bits {
        0 => 0,
        b if b >= 32 => u32::MAX,
        b => u32::MAX << (32 - b),
    }
}

fn mask128(bits: u8) -> u128 {
    match bits {
        0 => 0,
        b if b >= 128 => u128::MAX,
        b => u128::MAX << (128 - b),
    }
}

/// An IPv4 or IPv6 address, tolerating the forms logs write: brackets, a port after an
/// IPv4 address or a bracketed IPv6 one, a zone index. A fast path reads dotted quads by hand.
pub fn parse_ip(text: &[u8]) -> Option<IpAddr> {
    if let Some(a) = parse_v4_fast(text) {
        return Some(IpAddr::V4(a));
    }
    let s = std::str::from_utf8(text).ok()?.trim();
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        return parse_v6(&rest[..end]).map(IpAddr::V6);
    }
    if s.contains(':') {
        if let Some(a) = parse_v6(s) {
            return Some(IpAddr::V6(a));
        }
        // "1.2.3.4:port"
        let (host, port) = s.rsplit_once(':')?;
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return host.parse::<Ipv4Addr>().ok().map(IpAddr::V4);
    }
    s.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn parse_v6(s: &str) -> Option<Ipv6Addr> {
    let s = s.split_once('%').map_or(s, |(a, _zone)| a);
    s.parse().ok()
}

/// `a.b.c.d` exactly (no port, no spaces; one to three digits an octet), or `None` to take
/// the general path. An octet at a time, its digits tested without a loop.
#[inline]
fn parse_v4_fast(t: &[u8]) -> Option<Ipv4Addr> {
    let mut out = [0u8; 4];
    let mut i = 0;
    for (k, o) in out.iter_mut().enumerate() {
        let (v, n) = octet(t.get(i..)?)?;
        *o = v;
        i += n;
        if k < 3 {
            if t.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
    }
    (i == t.len()).then(|| Ipv4Addr::from(out))
}

/// The octet `t` starts with (one to three digits, at most 255) and its length.
#[inline(always)]
fn octet(t: &[u8]) -> Option<(u8, usize)> {
    let digit = |j: usize| t.get(j).map(|b| b.wrapping_sub(b'0')).filter(|&d| d <= 9);
    let a = digit(0)?;
    let Some(b) = digit(1) else {
        return Some((a, 1));
    };
    let Some(c) = digit(2) else {
        return Some((a * 10 + b, 2));
    };
    if digit(3).is_some() {
        return None;
    }
    let v = u32::from(a) * 100 + u32::from(b) * 10 + u32::from(c);
    (v <= 255).then_some((v as u8, 3))
}

impl NetKey {
    /// A compact byte form for the key interner: a tag byte then the network's bytes (4 or
    /// 16) and the prefix length.
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        match *self {
            NetKey::V4 { addr, prefix } => {
                out.push(4);
                out.extend_from_slice(&addr.to_be_bytes());
                out.push(prefix);
            }
            NetKey::V6 { addr, prefix } => {
                out.push(6);
                out.extend_from_slice(&addr.to_be_bytes());
                out.push(prefix);
            }
        }
    }

    /// The inverse of [`write_bytes`](Self::write_bytes), with the length it read.
    pub fn read_bytes(b: &[u8]) -> Option<(NetKey, usize)> {
        match b.first()? {
            4 if b.len() >= 6 => Some((
                NetKey::V4 {
                    addr: u32::from_be_bytes(b[1..5].try_into().ok()?),
                    prefix: b[5],
                },
                6,
            )),
            6 if b.len() >= 18 => Some((
                NetKey::V6 {
                    addr: u128::from_be_bytes(b[1..17].try_into().ok()?),
                    prefix: b[17],
                },
                18,
            )),
            _ => None,
        }
    }
}

impl std::fmt::Display for NetKey {
    /// `1.2.3.4` for a whole address, `10.0.0.0/8` and `2001:db8::/64` for networks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            NetKey::V4 { addr, prefix } if prefix >= 32 => write!(f, "{}", Ipv4Addr::from(addr)),
            NetKey::V4 { addr, prefix } => write!(f, "{}/{prefix}", Ipv4Addr::from(addr)),
            NetKey::V6 { addr, prefix } if prefix >= 128 => write!(f, "{}", Ipv6Addr::from(addr)),
            NetKey::V6 { addr, prefix } => write!(f, "{}/{prefix}", Ipv6Addr::from(addr)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(p: Prefixes, s: &str) -> String {
        p.key_of_text(s.as_bytes()).unwrap().to_string()
    }

    /// `a.b.c.d` exactly (no port, no spaces), or `None` to take the general path.
    fn parse_v4_reference(t: &[u8]) -> Option<Ipv4Addr> {
        let mut out = [0u8; 4];
        let mut part = 0;
        let mut val: u32 = 0;
        let mut digits = 0;
        for &b in t {
            match b {
                b'0'..=b'9' => {
                    val = val * 10 + u32::from(b - b'0');
                    digits += 1;
                    if digits > 3 || val > 255 {
                        return None;
                    }
                }
                b'.' if digits > 0 && part < 3 => {
                    out[part] = val as u8;
                    part += 1;
                    val = 0;
                    digits = 0;
                }
                _ => return None,
            }
        }
        if part != 3 || digits == 0 {
            return None;
        }
        out[3] = val as u8;
        Some(Ipv4Addr::from(out))
    }

    #[test]
    fn fast_v4_agrees_with_the_byte_loop() {
        let mut cases: Vec<Vec<u8>> = [
            "1.2.3.4",
            "255.255.255.255",
            "256.1.1.1",
            "0.0.0.0",
            "01.2.3.4",
            "001.2.3.4",
            "0001.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "1..3.4",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4 ",
            "a.b.c.d",
            "1.2.3.4:80",
            "",
            "999.1.1.1",
            "10.55.121.177",
            "1.2.3.25a",
            "300",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        // Every string of up to 9 bytes over digits, '.', and one other byte, in a pseudo-random sample.
        let alphabet = b"0123456789..x";
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 16) as usize;
            cases.push(
                (0..n)
                    .map(|k| alphabet[((x >> (4 * k)) % 13) as usize])
                    .collect(),
            );
        }
        for c in cases {
            assert_eq!(
                parse_v4_fast(&c),
                parse_v4_reference(&c),
                "{:?}",
                String::from_utf8_lossy(&c)
            );
        }
    }

    #[test]
    fn prefixes_group_addresses() {
        let p = Prefixes::default();
        assert_eq!(k(p, "192.0.2.7"), "192.0.2.7");
        assert_eq!(k(p, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            p.key_of_text(b"2001:db8:1:2::1"),
            p.key_of_text(b"2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(
            p.key_of_text(b"2001:db8:1:2::1"),
            p.key_of_text(b"2001:db8:1:3::1")
        );
        let wide = Prefixes { v4: 24, v6: 48 };
        assert_eq!(k(wide, "192.0.2.7"), "192.0.2.0/24");
        assert_eq!(k(wide, "2001:db8:1:2::1"), "2001:db8:1::/48");
        assert_eq!(k(Prefixes { v4: 0, v6: 0 }, "8.8.8.8"), "0.0.0.0/0");
        assert_eq!(
            k(Prefixes { v4: 32, v6: 128 }, "2001:db8::1"),
            "2001:db8::1"
        );
    }

    #[test]
    fn mapped_ipv4_is_ipv4() {
        let p = Prefixes::default();
        assert_eq!(k(p, "::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(
            p.key_of_text(b"::ffff:192.0.2.7"),
            p.key_of_text(b"192.0.2.7")
        );
    }

    #[test]
    fn log_forms() {
        let p = Prefixes::default();
        assert_eq!(k(p, "[2001:db8::1]:443"), "2001:db8::/64");
        assert_eq!(k(p, "192.0.2.7:5555"), "192.0.2.7");
        assert_eq!(k(p, "fe80::1%eth0"), "fe80::/64");
        for bad in [
            "",
            "-",
            "1.2.3",
            "1.2.3.256",
            "example.com",
            "1.2.3.4:x",
            "::g",
        ] {
            assert_eq!(p.key_of_text(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn bytes_round_trip() {
        let p = Prefixes::default();
        for s in ["192.0.2.7", "2001:db8::1", "::ffff:10.1.2.3"] {
            let key = p.key_of_text(s.as_bytes()).unwrap();
            let mut b = Vec::new();
            key.write_bytes(&mut b);
            assert_eq!(NetKey::read_bytes(&b), Some((key, b.len())));
        }
    }
}
