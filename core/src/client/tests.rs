use super::*;

fn resolver(trust: &str) -> ClientResolver {
    ClientResolver::builder()
        .trusted_proxies(trust.parse().unwrap())
        .build()
        .unwrap()
}

fn xff(v: &str) -> ForwardingHeaders<'_> {
    let mut h = ForwardingHeaders::new();
    h.push(b"X-Forwarded-For", v.as_bytes());
    h
}

fn fwd(v: &str) -> ForwardingHeaders<'_> {
    let mut h = ForwardingHeaders::new();
    h.push(b"forwarded", v.as_bytes());
    h
}

fn key(r: &ClientResolver, peer: &str, h: &ForwardingHeaders<'_>) -> String {
    r.resolve(peer, h).key().to_string()
}

#[test]
fn the_peer_by_default_and_forged_headers_change_nothing() {
    let r = ClientResolver::default();
    let none = ForwardingHeaders::new();
    assert_eq!(key(&r, "203.0.113.7", &none), "203.0.113.7");
    assert_eq!(key(&r, "203.0.113.7:52100", &none), "203.0.113.7");
    for forged in ["1.2.3.4", "1.2.3.4, 5.6.7.8", "garbage", ""] {
        let res = r.resolve("203.0.113.7", &xff(forged));
        assert_eq!(res.key().as_str(), "203.0.113.7");
        assert_eq!(res.source(), Source::Peer);
        assert_eq!(res.issue(), None);
        // A public peer sending the header is a client, not a proxy: no warning.
        assert_eq!(res.warning(), None);
    }
    let res = r.resolve("203.0.113.7", &fwd("for=1.2.3.4"));
    assert_eq!(res.key().as_str(), "203.0.113.7");
}

#[test]
fn an_untrusted_private_proxy_is_reported_once() {
    let r = ClientResolver::default();
    let first = r.resolve("10.0.0.2", &xff("198.51.100.9"));
    assert_eq!(first.key().as_str(), "10.0.0.2");
    let w = first.warning().expect("a warning");
    assert_eq!(w.code(), "untrusted_proxy");
    assert!(w.to_string().contains("X-Forwarded-For"), "{w}");
    assert!(w.to_string().contains("10.0.0.2"), "{w}");
    for _ in 0..3 {
        assert_eq!(r.resolve("10.0.0.3", &xff("198.51.100.9")).warning(), None);
    }
    // A Unix-socket peer (not an address) behind a proxy too.
    let r = ClientResolver::default();
    let mut h = ForwardingHeaders::new();
    h.push(b"X-Real-IP", b"198.51.100.9");
    let res = r.resolve("/run/app.sock", &h);
    assert_eq!(res.key().as_str(), "/run/app.sock");
    assert_eq!(res.warning().map(Warning::code), Some("untrusted_proxy"));
    // Trusted by range but the peer is outside it.
    let r = resolver("192.168.0.0/16");
    let res = r.resolve("10.0.0.2", &xff("198.51.100.9"));
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(res.warning().map(Warning::code), Some("untrusted_proxy"));
}

#[test]
fn hop_counts_take_the_nth_hop_from_the_right() {
    let one = resolver("1");
    let h = xff("1.1.1.1, 198.51.100.9");
    let res = one.resolve("10.0.0.2", &h);
    assert_eq!(res.key().as_str(), "198.51.100.9");
    assert_eq!(res.source(), Source::Header(ProxyHeader::XForwardedFor));
    assert_eq!(res.issue(), None);
    let two = resolver("2");
    assert_eq!(
        key(&two, "10.0.0.2", &xff("6.6.6.6, 198.51.100.9, 10.0.0.7")),
        "198.51.100.9"
    );
    // Several header lines read as one list, in order.
    let mut h = ForwardingHeaders::new();
    h.push(b"x-forwarded-for", b"6.6.6.6, 198.51.100.9");
    h.push(b"x-forwarded-for", b"10.0.0.7");
    assert_eq!(key(&two, "10.0.0.2", &h), "198.51.100.9");
    // Fewer hops than trusted: the left-most, reported once.
    let three = resolver("3");
    let res = three.resolve("10.0.0.2", &xff("198.51.100.9"));
    assert_eq!(res.key().as_str(), "198.51.100.9");
    assert_eq!(res.issue(), Some(Issue::ShortChain));
    assert_eq!(res.warning(), Some(&Warning::ShortChain { trusted: 3 }));
    assert_eq!(
        three.resolve("10.0.0.2", &xff("198.51.100.9")).warning(),
        None
    );
    // No header: the peer, with the reason.
    let res = one.resolve("10.0.0.2", &ForwardingHeaders::new());
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(res.issue(), Some(Issue::NoHeader));
    assert_eq!(res.warning(), None);
    let res = one.resolve("10.0.0.2", &xff(" , ,"));
    assert_eq!(res.issue(), Some(Issue::NoHeader));
}

#[test]
fn ranges_take_the_right_most_untrusted_hop() {
    let r = resolver("loopback, 10.0.0.0/8");
    // The client forged two hops; its proxy appended its real address.
    let h = xff("1.1.1.1, 10.9.9.9, 198.51.100.9, 10.0.0.5");
    assert_eq!(key(&r, "10.0.0.2", &h), "198.51.100.9");
    assert_eq!(key(&r, "127.0.0.1", &xff("203.0.113.7")), "203.0.113.7");
    // A peer outside the ranges: its own key, headers ignored.
    assert_eq!(key(&r, "198.51.100.1", &xff("203.0.113.7")), "198.51.100.1");
    // Every hop trusted: the left-most.
    let res = r.resolve("10.0.0.2", &xff("10.0.0.9, 10.0.0.5"));
    assert_eq!(res.key().as_str(), "10.0.0.9");
    assert_eq!(res.issue(), Some(Issue::AllTrusted));
    // IPv4-mapped peers and hops match IPv4 ranges.
    assert_eq!(
        key(&r, "::ffff:10.0.0.2", &xff("::ffff:203.0.113.7")),
        "203.0.113.7"
    );
    // Longer than MAX_HOPS trusted hops: malformed, the peer.
    let long = vec!["10.0.0.1"; MAX_HOPS + 1].join(",");
    let res = r.resolve("10.0.0.2", &xff(&long));
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(res.issue(), Some(Issue::Malformed));
}

#[test]
fn forwarded_header() {
    let r = ClientResolver::builder()
        .trusted_proxies(TrustedProxies::Hops(1))
        .header(ProxyHeader::Forwarded)
        .build()
        .unwrap();
    let k = |v: &str| key(&r, "10.0.0.2", &fwd(v));
    assert_eq!(k("for=192.0.2.60;proto=http;by=203.0.113.43"), "192.0.2.60");
    assert_eq!(
        k("for=1.2.3.4, For=\"[2001:db8:cafe::17]:4711\""),
        "2001:db8:cafe::/64"
    );
    assert_eq!(k("for=\"_gazonk\""), "_gazonk");
    // RFC 7239 nodes with a port (they were malformed: the proxy's key for every client).
    assert_eq!(k("for=\"_gazonk:_p1\""), "_gazonk");
    assert_eq!(k("for=\"_gazonk:8080\""), "_gazonk");
    let res = r.resolve("10.0.0.2", &fwd("for=\"unknown:8080\""));
    assert_eq!(res.issue(), Some(Issue::UnknownHop));
    assert_eq!(k("for=192.0.2.43:47011"), "192.0.2.43");
    // A client's junk to the left of its proxy's element is never read.
    assert_eq!(k("for=\"oops, for=198.51.100.9"), "198.51.100.9");
    let res = r.resolve("10.0.0.2", &fwd("for=unknown"));
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(res.issue(), Some(Issue::UnknownHop));
    let res = r.resolve("10.0.0.2", &fwd("proto=https"));
    assert_eq!(res.issue(), Some(Issue::UnknownHop));
    // The header the resolver does not read: the peer, and a warning.
    let res = r.resolve("10.0.0.2", &xff("198.51.100.9"));
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(
        res.warning(),
        Some(&Warning::UnreadHeader {
            configured: "Forwarded",
            present: "X-Forwarded-For"
        })
    );
}

#[test]
fn malformed_hops_fall_back_to_the_peer() {
    let r = resolver("1");
    for bad in ["garbage", "1.2.3.4, junk", "999.1.1.1", "1.2.3.4:99999"] {
        let res = r.resolve("10.0.0.2", &xff(bad));
        assert_eq!(res.key().as_str(), "10.0.0.2", "{bad:?}");
        assert_eq!(res.issue(), Some(Issue::Malformed), "{bad:?}");
    }
    let r = resolver("1");
    let first = r.resolve("10.0.0.2", &xff("junk"));
    assert_eq!(first.warning().map(Warning::code), Some("malformed_header"));
    assert_eq!(r.resolve("10.0.0.2", &xff("junk")).warning(), None);
    // The client's own junk, left of the hop read, is fine.
    assert_eq!(
        key(&r, "10.0.0.2", &xff("junk, 198.51.100.9")),
        "198.51.100.9"
    );
    // Non-UTF-8 bytes.
    let mut h = ForwardingHeaders::new();
    h.push(b"x-forwarded-for", &[0xff, 0xfe, b'1']);
    assert_eq!(r.resolve("10.0.0.2", &h).issue(), Some(Issue::Malformed));
}

#[test]
fn a_huge_header_is_read_only_as_far_as_needed() {
    let r = resolver("1");
    let mut big = "9.9.9.9,".repeat(1 << 20); // 8 MiB of client-written hops
    big.push_str("198.51.100.9");
    assert_eq!(key(&r, "10.0.0.2", &xff(&big)), "198.51.100.9");
    let junk = "x".repeat(10 << 20);
    assert_eq!(
        r.resolve("10.0.0.2", &xff(&junk)).issue(),
        Some(Issue::Malformed)
    );
    let r = ClientResolver::builder()
        .trusted_proxies(TrustedProxies::Hops(1))
        .header(ProxyHeader::Forwarded)
        .build()
        .unwrap();
    let quoted = format!("for=\"{}\"", "a".repeat(10 << 20));
    assert_eq!(
        r.resolve("10.0.0.2", &fwd(&quoted)).issue(),
        Some(Issue::Malformed)
    );
}

#[test]
fn ipv6_by_prefix_and_mapped_ipv4() {
    let r = ClientResolver::default();
    let none = ForwardingHeaders::new();
    let mut keys = std::collections::HashSet::new();
    for i in 0..(1u32 << 16) {
        let ip = format!("2001:db8:1:2:{:x}:{:x}:1:2", i >> 8, i & 0xff);
        keys.insert(key(&r, &ip, &none));
    }
    assert_eq!(
        keys.into_iter().collect::<Vec<_>>(),
        vec!["2001:db8:1:2::/64"]
    );
    assert_ne!(
        key(&r, "2001:db8:1:3::1", &none),
        key(&r, "2001:db8:1:2::1", &none)
    );
    assert_eq!(key(&r, "::ffff:203.0.113.7", &none), "203.0.113.7");
    assert_eq!(key(&r, "[::ffff:203.0.113.7]:8080", &none), "203.0.113.7");
    let wide = ClientResolver::builder()
        .ipv6_prefix(56)
        .ipv4_prefix(24)
        .build()
        .unwrap();
    assert_eq!(
        key(&wide, "2001:db8:1:2ff::1", &none),
        "2001:db8:1:200::/56"
    );
    assert_eq!(key(&wide, "203.0.113.7", &none), "203.0.113.0/24");
    let exact = ClientResolver::builder().ipv6_prefix(128).build().unwrap();
    assert_eq!(key(&exact, "2001:db8::7", &none), "2001:db8::7");
}

#[test]
fn peers_without_an_address() {
    let r = ClientResolver::default();
    let none = ForwardingHeaders::new();
    let res = r.resolve(None::<&str>, &none);
    assert_eq!(res.key().as_str(), "unknown");
    assert_eq!(res.issue(), Some(Issue::NoPeer));
    assert_eq!(res.warning(), Some(&Warning::MissingPeer));
    assert_eq!(r.resolve("", &none).warning(), None);
    assert_eq!(r.resolve("", &none).key().as_str(), "unknown");
    assert_eq!(key(&r, "testclient", &none), "testclient");
    let sock: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
    assert_eq!(r.resolve(sock, &none).key().as_str(), "2001:db8::/64");
}

#[test]
fn options_and_their_errors() {
    assert_eq!("".parse::<TrustedProxies>().unwrap(), TrustedProxies::None);
    assert_eq!("0".parse::<TrustedProxies>().unwrap(), TrustedProxies::None);
    assert_eq!(
        " 64 ".parse::<TrustedProxies>().unwrap(),
        TrustedProxies::Hops(64)
    );
    let t: TrustedProxies = "private, linklocal, 2001:db8::/32, 192.0.2.1"
        .parse()
        .unwrap();
    let TrustedProxies::Ranges(r) = &t else {
        panic!("{t:?}")
    };
    assert_eq!(r.len(), 5 + 2 + 2);
    assert_eq!(t.to_string().parse::<TrustedProxies>().unwrap(), t);
    for bad in [
        "65",
        "99999999999999999999",
        "10.0.0.0/33",
        "proxy",
        "10.0.0.1,,",
    ] {
        let e = bad.parse::<TrustedProxies>().unwrap_err();
        assert_eq!(e.code(), "invalid_option", "{bad:?}");
        assert!(e.to_string().starts_with("trusted_proxies"), "{e}");
    }
    assert_eq!(
        "XFF".parse::<ProxyHeader>().unwrap(),
        ProxyHeader::XForwardedFor
    );
    assert_eq!(
        " Forwarded".parse::<ProxyHeader>().unwrap(),
        ProxyHeader::Forwarded
    );
    assert_eq!(
        "x-real-ip".parse::<ProxyHeader>().unwrap_err().code(),
        "invalid_option"
    );
    for (v6, v4) in [(0, 32), (129, 32), (64, 0), (64, 33)] {
        let e = ClientResolver::builder()
            .ipv6_prefix(v6)
            .ipv4_prefix(v4)
            .build()
            .unwrap_err();
        assert_eq!(e.code(), "invalid_option");
    }
    for n in [0, 65] {
        let e = ClientResolver::builder()
            .trusted_proxies(TrustedProxies::Hops(n))
            .build()
            .unwrap_err();
        assert_eq!(e.code(), "invalid_option");
    }
}

#[test]
fn trusting_everything_is_reported() {
    let r = resolver("0.0.0.0/0, ::/0");
    let res = r.resolve("203.0.113.7", &xff("1.2.3.4"));
    // Exactly what the setting asks (the client picked its key), and said once.
    assert_eq!(res.key().as_str(), "1.2.3.4");
    assert_eq!(res.warning().map(Warning::code), Some("permissive_trust"));
    assert_eq!(r.resolve("203.0.113.7", &xff("1.2.3.4")).warning(), None);
}

#[test]
fn resolvers_are_shared_between_threads() {
    let r = std::sync::Arc::new(ClientResolver::default());
    let warned: usize = (0..4)
        .map(|_| {
            let r = r.clone();
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| r.resolve("10.0.0.2", &xff("1.2.3.4")).warning().is_some())
                    .count()
            })
        })
        .map(|t| t.join().unwrap())
        .sum();
    assert_eq!(warned, 1);
}

#[test]
fn headers_are_wanted_only_where_they_count() {
    let r = ClientResolver::default();
    assert!(!r.wants_headers("203.0.113.7"));
    assert!(r.wants_headers("10.0.0.2"));
    assert!(r.wants_headers("/run/app.sock"));
    assert!(!r.wants_headers(None::<&str>));
    let _ = r.resolve("10.0.0.2", &xff("1.2.3.4"));
    assert!(!r.wants_headers("10.0.0.2"), "reported already");
    let t = resolver("10.0.0.0/8");
    assert!(t.wants_headers("10.0.0.2"));
    assert!(!t.wants_headers("203.0.113.7"));
    assert!(resolver("1").wants_headers("203.0.113.7"));
}

#[test]
fn a_proxy_on_a_unix_socket_under_a_hop_count_is_read() {
    // nginx in front over a Unix socket: the server gives no peer address.
    let r = resolver("1");
    let res = r.resolve(None::<&str>, &xff("6.6.6.6, 198.51.100.9"));
    assert_eq!(res.key().as_str(), "198.51.100.9");
    assert_eq!(res.source(), Source::Header(ProxyHeader::XForwardedFor));
    assert_eq!(res.warning(), None);
    // Without its header: keyed `unknown`, as any request without a peer, and warned of.
    let res = r.resolve(None::<&str>, &ForwardingHeaders::new());
    assert_eq!(res.key().as_str(), "unknown");
    assert_eq!(res.issue(), Some(Issue::NoHeader));
    assert_eq!(res.warning(), Some(&Warning::MissingPeer));
    // Ranges cover addresses only: no address, no trust.
    let ranges = resolver("loopback");
    let res = ranges.resolve(None::<&str>, &xff("198.51.100.9"));
    assert_eq!(res.key().as_str(), "unknown");
    assert_eq!(res.issue(), Some(Issue::NoPeer));
}

#[test]
fn a_trusted_proxy_that_names_no_client_is_warned_of() {
    for (h, header) in [
        (xff("unknown"), "X-Forwarded-For"),
        (fwd("proto=https;host=example.com"), "Forwarded"),
    ] {
        let r = if header == "Forwarded" {
            ClientResolver::builder()
                .trusted_proxies("private".parse().unwrap())
                .header(ProxyHeader::Forwarded)
                .build()
                .unwrap()
        } else {
            resolver("private")
        };
        let res = r.resolve("10.0.0.2", &h);
        assert_eq!(res.key().as_str(), "10.0.0.2", "{header}");
        assert_eq!(res.issue(), Some(Issue::UnknownHop), "{header}");
        assert_eq!(
            res.warning(),
            Some(&Warning::UnknownClient { header }),
            "{header}"
        );
        assert_eq!(res.warning().unwrap().code(), "unknown_client");
        // Once per resolver.
        assert_eq!(r.resolve("10.0.0.2", &h).warning(), None);
    }
}

#[test]
fn a_trusted_proxy_that_writes_only_x_real_ip_is_warned_of() {
    let r = resolver("private");
    let mut h = ForwardingHeaders::new();
    h.push(b"X-Real-IP", b"198.51.100.9");
    let res = r.resolve("10.0.0.2", &h);
    assert_eq!(res.key().as_str(), "10.0.0.2");
    assert_eq!(res.issue(), Some(Issue::NoHeader));
    let w = res.warning().unwrap();
    assert_eq!(
        w,
        &Warning::UnreadHeader {
            configured: "X-Forwarded-For",
            present: "X-Real-IP"
        }
    );
    assert!(w.to_string().contains("X-Real-IP is never read"), "{w}");
}
