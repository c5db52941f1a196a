//! Client identity (`sluicegate::client`) under arbitrary peers, forwarding header lines and
//! settings: it never panics, a key is always the peer's or a hop's, and the part of a header
//! that a client writes itself (the lines to the left of the hops read) never changes the
//! outcome. The option parsers (`TrustedProxies`, `Cidr`, `ProxyHeader`) take any text and
//! round-trip what they accept.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use sluicegate::client::{
    Cidr, ClientResolver, ForwardingHeaders, Issue, ProxyHeader, Source, TrustedProxies,
};

/// Ranges the proxies may be in (so that the walk meets trusted hops often).
const RANGES: &[&str] = &[
    "10.0.0.0/8",
    "127.0.0.1",
    "2001:db8::/32",
    "::ffff:192.0.2.0/120",
    "0.0.0.0/0",
];

#[derive(Arbitrary, Debug)]
enum Trust {
    None,
    Hops(u8),
    Ranges(Vec<u8>),
    Text(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    trust: Trust,
    forwarded: bool,
    v6: u8,
    v4: u8,
    peer: Option<String>,
    /// Header lines: (which header, value).
    lines: Vec<(u8, Vec<u8>)>,
    /// A line a client might send before its proxies' lines.
    junk: Vec<u8>,
}

fn name(which: u8) -> &'static [u8] {
    [
        &b"X-Forwarded-For"[..],
        b"forwarded",
        b"X-Real-IP",
        b"accept",
    ][usize::from(which % 4)]
}

fuzz_target!(|input: Input| {
    let trust = match &input.trust {
        Trust::None => TrustedProxies::None,
        Trust::Hops(n) => TrustedProxies::Hops(n % 70),
        Trust::Ranges(ix) => TrustedProxies::Ranges(
            ix.iter()
                .take(4)
                .map(|i| RANGES[usize::from(*i) % RANGES.len()].parse().unwrap())
                .collect(),
        ),
        Trust::Text(t) => match t.parse::<TrustedProxies>() {
            Ok(tp) => {
                let again: TrustedProxies = tp.to_string().parse().expect("round trip");
                assert_eq!(again, tp);
                tp
            }
            Err(e) => {
                assert_eq!(e.code(), "invalid_option");
                let _ = e.to_string();
                if let Ok(c) = t.parse::<Cidr>() {
                    panic!("{t:?} parses as the range {c} but not as trusted proxies");
                }
                let _ = t.parse::<ProxyHeader>();
                return;
            }
        },
    };
    let header = if input.forwarded {
        ProxyHeader::Forwarded
    } else {
        ProxyHeader::XForwardedFor
    };
    let built = ClientResolver::builder()
        .trusted_proxies(trust.clone())
        .header(header)
        .ipv6_prefix(input.v6)
        .ipv4_prefix(input.v4)
        .build();
    let Ok(r) = built else {
        return; // a prefix or hop count out of range: a typed error, checked by the unit tests
    };
    let peer = input.peer.as_deref();
    let mut h = ForwardingHeaders::new();
    for (which, v) in &input.lines {
        h.push(name(*which), v);
    }
    let res = r.resolve(peer, &h);
    let again = r.resolve(peer, &h);
    assert_eq!(res.key(), again.key());
    let _ = res.warning().map(|w| (w.code(), w.to_string()));

    // The peer's own key, whatever the headers.
    let alone = r.resolve(peer, &ForwardingHeaders::new());
    match res.source() {
        Source::Peer => assert_eq!(res.key(), alone.key()),
        Source::Header(hd) => {
            assert_eq!(hd, header);
            assert!(
                !matches!(trust, TrustedProxies::None),
                "a header read with no proxy trusted"
            );
        }
        _ => unreachable!(),
    }
    // An address key's text is its network, in the configured prefix.
    if let Some((net, prefix)) = res.key().network() {
        let full = if net.is_ipv4() { 32 } else { 128 };
        let want = if net.is_ipv4() { input.v4 } else { input.v6 };
        assert_eq!(prefix, want.min(full));
        let text = res.key().as_str();
        let c: Cidr = text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!((c.addr(), c.prefix()), (net, prefix), "{text:?}");
        assert!(
            net.to_string()
                .parse::<std::net::IpAddr>()
                .unwrap()
                .to_canonical()
                == net
        );
    }

    // A line the client wrote before its proxies' lines is never read, unless the walk went
    // past every hop the proxies wrote.
    let walked_all = matches!(
        res.issue(),
        Some(Issue::ShortChain | Issue::AllTrusted | Issue::NoHeader)
    );
    if !walked_all && input.lines.len() < 8 {
        let mut with_junk = ForwardingHeaders::new();
        with_junk.push(header.header_name().as_bytes(), &input.junk);
        for (which, v) in &input.lines {
            with_junk.push(name(*which), v);
        }
        let other = r.resolve(peer, &with_junk);
        assert_eq!(
            (other.key(), other.source(), other.issue()),
            (res.key(), res.source(), res.issue()),
            "the client's line {:?} changed the outcome",
            String::from_utf8_lossy(&input.junk)
        );
    }
});
