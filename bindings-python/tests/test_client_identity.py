"""Client identity (the core's ``sluicegate::client``) in the binding and in every web
adapter: the peer address by default, so that a client-sent ``X-Forwarded-For`` is never its
key; behind trusted proxies (a hop count or ranges) the right-most hop they did not add; IPv6
keyed by its /64, IPv4-mapped IPv6 as IPv4; a setup that would key every client alike warned
about once."""

from __future__ import annotations

import ipaddress
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import drf_app  # noqa: F401  (DRF's views read the default throttle classes now: conftest.py's)
import pytest
from django.test import Client, override_settings
from rest_framework.test import APIClient
from starlette.testclient import TestClient
from starlette_app import make_fastapi
from test_flask import make_app

from sluicegate import ClientResolver, InvalidOptionError, KeyedLimiter
from sluicegate.drf import _rules

PUBLIC = "203.0.113.9"
PROXY = "10.0.0.1"


def test_the_peer_by_default() -> None:
    peer_only = ClientResolver()
    assert peer_only.resolve(PUBLIC) == PUBLIC
    assert peer_only.resolve(PUBLIC, [("X-Forwarded-For", "1.2.3.4")]) == PUBLIC
    assert peer_only.resolve("::ffff:192.0.2.1") == "192.0.2.1"
    assert peer_only.resolve("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"
    assert peer_only.resolve("testclient") == "testclient"
    assert repr(peer_only) == 'ClientResolver(trusted_proxies="none", header="X-Forwarded-For", ipv6_prefix=64, ipv4_prefix=32)'


def test_trusted_proxies_by_hops_and_ranges() -> None:
    one_hop = ClientResolver(trusted_proxies=1)
    headers = [(b"x-forwarded-for", b"6.6.6.6, 1.2.3.4")]
    assert one_hop.resolve(PROXY, headers) == "1.2.3.4"
    two_hops = ClientResolver(trusted_proxies=2)
    assert two_hops.resolve(PROXY, headers) == "6.6.6.6"
    ranges = ClientResolver(trusted_proxies=["loopback", "10.0.0.0/8"])
    assert ranges.trusted_proxies == "127.0.0.0/8, ::1/128, 10.0.0.0/8"
    assert ranges.resolve(PROXY, [("X-Forwarded-For", "6.6.6.6, 1.2.3.4, 10.9.9.9")]) == "1.2.3.4"
    # A peer outside the ranges is the client, whatever it sends.
    assert ranges.resolve(PUBLIC, headers) == PUBLIC
    assert ClientResolver(trusted_proxies="loopback, private").resolve("127.0.0.1", headers) == "1.2.3.4"
    forwarded = ClientResolver(trusted_proxies=1, header="forwarded")
    assert forwarded.header == "Forwarded"
    assert forwarded.resolve(PROXY, [("Forwarded", 'for="[2001:db8::7]:4711"')]) == "2001:db8::/64"
    assert ClientResolver(ipv6_prefix=48).resolve("2001:db8:1:2::1") == "2001:db8:1::/48"


def test_bad_options_are_typed_errors() -> None:
    for bad in ({"trusted_proxies": "10.0.0.0/99"}, {"trusted_proxies": 65}, {"ipv6_prefix": 0}, {"header": "via"}):
        with pytest.raises(InvalidOptionError):
            ClientResolver(**bad)  # type: ignore[arg-type]
    for bad in ({"trusted_proxies": True}, {"trusted_proxies": 1.5}, {"trusted_proxies": [1]}):
        with pytest.raises(TypeError):
            ClientResolver(**bad)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        ClientResolver(ipv6_prefix=256)
    with pytest.raises(TypeError, match="header value must be str or bytes"):
        ClientResolver(trusted_proxies=1).resolve(PROXY, [("x-forwarded-for", 5)])
    with pytest.raises(ValueError):
        ClientResolver(trusted_proxies=1).resolve(PROXY, [("x-forwarded-for",)])


def test_hostile_headers_fall_back_to_the_peer() -> None:
    one_hop = ClientResolver(trusted_proxies=1)
    for value in ["", "not an address", "1.2.3.4, " * 10_000, "\x00\xff", "[::1", "999.1.1.1"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert one_hop.resolve(PROXY, [("X-Forwarded-For", value)]) in (PROXY, "1.2.3.4")


def test_a_warning_once_when_every_client_would_share_the_proxys_key() -> None:
    peer_only = ClientResolver()
    with pytest.warns(UserWarning, match=r"\[untrusted_proxy\].*10\.0\.0\.1 carries X-Forwarded-For"):
        assert peer_only.resolve(PROXY, [("X-Forwarded-For", "1.2.3.4")]) == PROXY
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert peer_only.resolve(PROXY, [("X-Forwarded-For", "5.6.7.8")]) == PROXY


def test_65536_addresses_of_one_64_share_one_bucket() -> None:
    resolver = ClientResolver()
    limiter = KeyedLimiter("10/minute")
    base = int(ipaddress.IPv6Address("2001:db8:aa:bb::"))
    admitted = sum(bool(limiter.try_acquire(resolver.resolve(str(ipaddress.IPv6Address(base + i * 0x1_0001_0001)))))
                   for i in range(1 << 16))  # fmt: skip
    assert admitted == 10 and len(limiter) == 1
    # The next /64 is another client.
    assert limiter.try_acquire(resolver.resolve("2001:db8:aa:bc::1"))


# -- every adapter: (peer, X-Forwarded-For or None) -> status, on a 2/minute limit ------------

Send = Callable[[str, "str | None"], int]


def flask_sender(header: str = "X-Forwarded-For", **config: Any) -> Send:
    app, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["2/minute"], **config)
    client = app.test_client()

    def send(peer: str, xff: str | None) -> int:
        headers = {header: xff} if xff else {}
        return client.get("/default", headers=headers, environ_base={"REMOTE_ADDR": peer}).status_code

    return send


#: The settings overrides of the running test, undone after it.
_overrides: list[override_settings] = []


@pytest.fixture(autouse=True)
def undo_overrides() -> Iterator[None]:
    yield
    while _overrides:
        _overrides.pop().disable()


def override(**settings: Any) -> None:
    """Settings for the rest of the test (the limiters live as long as the settings do)."""
    _overrides.append(override_settings(**settings))
    _overrides[-1].enable()


def django_sender(header: str = "X-Forwarded-For", **config: Any) -> Send:
    override(SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"], **config})
    meta = "HTTP_" + header.upper().replace("-", "_")

    def send(peer: str, xff: str | None) -> int:
        extra = {meta: xff} if xff else {}
        return Client().get("/plain", REMOTE_ADDR=peer, **extra).status_code

    return send


def starlette_sender(header: str = "X-Forwarded-For", **config: Any) -> Send:
    app, _ = make_fastapi(**config)

    def send(peer: str, xff: str | None) -> int:
        headers = {header: xff} if xff else {}
        return TestClient(app, client=(peer, 4000)).get("/default", headers=headers).status_code

    return send


def drf_sender(header: str = "X-Forwarded-For", **config: Any) -> Send:
    _rules.clear()
    override(
        ROOT_URLCONF="drf_app",
        MIDDLEWARE=[],
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"anon": "1/minute; burst=2"}, "UNAUTHENTICATED_USER": None},
        SLUICEGATE=config,
    )

    meta = "HTTP_" + header.upper().replace("-", "_")

    def send(peer: str, xff: str | None) -> int:
        extra = {meta: xff} if xff else {}
        return APIClient().get("/anon", REMOTE_ADDR=peer, **extra).status_code

    return send


def senders() -> list[Any]:
    return [
        pytest.param(lambda trusted: flask_sender(**({"SLUICEGATE_TRUSTED_PROXIES": trusted} if trusted else {})), id="flask"),
        pytest.param(lambda trusted: django_sender(**({"TRUSTED_PROXIES": trusted} if trusted else {})), id="django"),
        pytest.param(lambda trusted: starlette_sender(trusted_proxies=trusted), id="starlette"),
        pytest.param(lambda trusted: drf_sender(**({"TRUSTED_PROXIES": trusted} if trusted else {})), id="drf"),
    ]


@pytest.mark.parametrize("make", senders())
def test_a_forged_forwarded_for_keeps_the_peers_key(make: Callable[[Any], Send]) -> None:
    send = make(None)
    assert [send(PUBLIC, f"1.2.3.{i}") for i in range(3)] == [200, 200, 429]
    assert send("198.51.100.1", None) == 200


@pytest.mark.parametrize("make", senders())
def test_behind_a_trusted_proxy_the_right_hop_is_the_key(make: Callable[[Any], Send]) -> None:
    send = make(["10.0.0.0/8"])
    # The client's own left-most entries are not its key: the hop the proxy appended is.
    assert [send(PROXY, f"6.6.6.{i}, 1.2.3.4") for i in range(3)] == [200, 200, 429]
    assert send(PROXY, "6.6.6.6, 1.2.3.5") == 200
    # A request that reaches the app past the proxy is keyed by its own address.
    assert [send(PUBLIC, "1.2.3.5") for _ in range(3)] == [200, 200, 429]


def forwarded_senders() -> list[Any]:
    """Senders of a ``Forwarded`` header (RFC 7239), behind 10.0.0.0/8 trusted, with the
    integration told (``proxy`` True) or not that the proxies write it."""
    trusted = ["10.0.0.0/8"]

    def told(proxy: bool, name: str) -> dict[str, Any]:
        return {name: "forwarded"} if proxy else {}

    return [
        pytest.param(
            lambda proxy: flask_sender(
                "Forwarded", SLUICEGATE_TRUSTED_PROXIES=trusted, **told(proxy, "SLUICEGATE_PROXY_HEADER")
            ),
            id="flask",
        ),
        pytest.param(
            lambda proxy: django_sender("Forwarded", TRUSTED_PROXIES=trusted, **told(proxy, "PROXY_HEADER")), id="django"
        ),
        pytest.param(
            lambda proxy: starlette_sender("Forwarded", trusted_proxies=trusted, **told(proxy, "proxy_header")),
            id="starlette",
        ),
        pytest.param(
            lambda proxy: drf_sender("Forwarded", TRUSTED_PROXIES=trusted, **told(proxy, "PROXY_HEADER")), id="drf"
        ),
    ]


@pytest.mark.parametrize("make", forwarded_senders())
def test_a_proxy_writing_forwarded_is_read_when_the_integration_is_told(make: Callable[[bool], Send]) -> None:
    """``PROXY_HEADER`` / ``proxy_header="forwarded"``: the right-most hop of ``Forwarded`` the
    trusted proxies did not add is the client. No integration could be told (the resolver
    took the option, the integrations never passed it), so behind such a proxy every client
    had the proxy's key."""
    send = make(True)
    assert [send(PROXY, f'for=6.6.6.{i}, for="1.2.3.4"') for i in range(3)] == [200, 200, 429]
    assert send(PROXY, "for=1.2.3.5") == 200


@pytest.mark.parametrize("make", forwarded_senders())
def test_a_forwarded_header_is_not_read_unless_the_integration_is_told(
    make: Callable[[bool], Send], recwarn: pytest.WarningsRecorder
) -> None:
    send = make(False)
    # Without it every client behind the proxy has the proxy's key (and a warning says so).
    assert [send(PROXY, f"for=1.2.3.{i}") for i in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("make", senders())
def test_addresses_of_one_64_share_one_bucket(make: Callable[[Any], Send]) -> None:
    send = make(None)
    assert [send(f"2001:db8:5:6:{i:x}::{i:x}", None) for i in range(1, 4)] == [200, 200, 429]
    assert send("::ffff:198.51.100.2", None) == 200
    assert send("198.51.100.2", None) == 200
    assert send("198.51.100.2", None) == 429


def test_the_starlette_default_key_keeps_peers_keys_only_where_no_header_counts() -> None:
    from starlette.requests import Request

    from sluicegate.starlette import Sluicegate

    limiter = Sluicegate(trusted_proxies=["10.0.0.0/8"], ipv6_prefix=48)

    def request(peer: str, forwarded_for: str | None = None) -> Request:
        headers = [] if forwarded_for is None else [(b"x-forwarded-for", forwarded_for.encode())]
        return Request({"type": "http", "client": (peer, 1234), "headers": headers})

    # More peers than the limiter keeps, twice over: each key is the resolver's.
    peers = [f"2001:db8:{i:x}::{i}" if i % 2 else f"198.51.{i >> 8}.{i & 255}" for i in range(5000)]
    for _ in range(2):
        for peer in peers:
            assert limiter.client(request(peer)) == limiter.resolver.resolve(peer, [])
    # A trusted proxy's requests are keyed by their headers every time, a known proxy or not.
    assert limiter.client(request("10.0.0.9")) == "10.0.0.9"
    assert limiter.client(request("10.0.0.9", "203.0.113.7")) == "203.0.113.7"
    assert limiter.client(request("10.0.0.9", "203.0.113.8")) == "203.0.113.8"
    # A client's forged header is ignored, before and after its key is kept.
    assert limiter.client(request("198.51.0.1", "203.0.113.7")) == "198.51.0.1"


def test_the_starlette_default_key_warns_of_an_untrusted_proxy_behind_kept_keys() -> None:
    """With nothing trusted, a private peer's key is its own whatever its headers say, so it
    is kept too; its requests are still looked at for forwarding headers until the resolver
    has warned, once, that the peer is a proxy every client behind would share."""
    from starlette.requests import Request

    from sluicegate.starlette import Sluicegate

    limiter = Sluicegate()

    def request(peer: str, *headers: tuple[bytes, bytes]) -> Request:
        return Request({"type": "http", "client": (peer, 1234), "headers": [(b"host", b"x"), *headers]})

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):  # kept after the first: no warning, the peer's own key
            assert limiter.client(request("10.1.2.3")) == "10.1.2.3"
            assert limiter.client(request("192.168.0.7", (b"accept", b"*/*"))) == "192.168.0.7"
    # Then X-Real-IP from a kept private peer (never read, but looked for): warned, and the
    # peer's key.
    with pytest.warns(UserWarning, match=r"\[untrusted_proxy\].*10\.1\.2\.3 carries X-Real-IP"):
        assert limiter.client(request("10.1.2.3", (b"X-Real-IP", b"203.0.113.9"))) == "10.1.2.3"
    limiter = Sluicegate()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert limiter.client(request("10.1.2.3")) == "10.1.2.3"  # kept
    # Then X-Forwarded-For from a kept private peer, in any case: warned.
    with pytest.warns(UserWarning, match=r"\[untrusted_proxy\].*10\.1\.2\.3 carries X-Forwarded-For"):
        assert limiter.client(request("10.1.2.3", (b"X-Forwarded-For", b"203.0.113.9"))) == "10.1.2.3"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only, and the keys are still the peers'
        assert limiter.client(request("10.1.2.3", (b"x-forwarded-for", b"203.0.113.9"))) == "10.1.2.3"
        assert limiter.client(request("192.168.0.7", (b"forwarded", b"for=203.0.113.9"))) == "192.168.0.7"


def test_a_trusted_proxy_that_writes_only_x_real_ip_is_warned_of() -> None:
    """X-Real-IP is never read (it holds one address, which a client may have written), but
    a trusted proxy that writes only it keys every client by the proxy: the resolver warns,
    through the resolver and Django's key alike (the lines did not reach it)."""
    from django.test import RequestFactory

    from sluicegate.django import remote_address

    resolver = ClientResolver(trusted_proxies="private")
    with pytest.warns(UserWarning, match=r"\[unread_header\].*X-Real-IP is never read"):
        assert resolver.resolve("10.0.0.1", [("X-Real-IP", "203.0.113.9")]) == "10.0.0.1"
    with override_settings(SLUICEGATE={"TRUSTED_PROXIES": "private"}):
        request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_REAL_IP="203.0.113.9")
        with pytest.warns(UserWarning, match=r"\[unread_header\]"):
            assert remote_address(request) == "10.0.0.1"


@pytest.mark.parametrize("peer", ["10.0.0.7", "127.0.0.1"])
def test_the_flask_default_key_warns_once_of_an_untrusted_proxy(peer: str) -> None:
    """A Flask app behind a proxy that nobody told it to trust: every request comes from the
    proxy's (private or loopback) address with the client in X-Forwarded-For, so every client
    shares the proxy's key. The app's resolver warns of it once, over many requests (Python's
    own once-per-place filter is off here: the once is the resolver's), and keeps the peer's
    key."""
    send = flask_sender()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [send(peer, f"203.0.113.{i}") for i in range(20)]
    assert got == [200, 200] + [429] * 18  # one bucket: the proxy's
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].category is UserWarning
    assert re.search(rf"\[untrusted_proxy\].*{re.escape(peer)} carries X-Forwarded-For", str(caught[0].message))
    # A new app is a new resolver, which warns again.
    with pytest.warns(UserWarning, match=rf"\[untrusted_proxy\].*{re.escape(peer)} carries X-Forwarded-For"):
        flask_sender()(peer, "203.0.113.99")
