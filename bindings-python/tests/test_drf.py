"""The DRF throttle classes, through DRF's APIClient and settings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import drf_app  # (imported first: DRF's views read the default throttle classes now, conftest.py's)
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, override_settings
from redis_server import RedisServer
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory
from test_redis import url

from sluicegate import InvalidOptionError, InvalidQuotaError, Quota
from sluicegate._web import region_suffix
from sluicegate.drf import (
    AnonRateThrottle, ScopedRateThrottle, SluicegateThrottle, UserRateThrottle, _rules, get, limiters, reset,
)  # fmt: skip

RATES = {
    "anon": "1/minute; burst=2", "user": "1/minute; burst=3", "uploads": "1/h; burst=1", "contacts": "1/h; burst=2",
    "successes": "1/h; burst=2", "failures": "1/h; burst=2",
}  # fmt: skip
#: The middleware that makes the refunds of throttles with a deduct_when.
REFUNDS = ["sluicegate.django.RateLimitMiddleware"]


def settings(
    store: str = "memory", *, middleware: list[str] | None = None, sluicegate: dict[str, object] | None = None,
    **more: object,
) -> override_settings:  # fmt: skip
    return override_settings(
        ROOT_URLCONF="drf_app",
        MIDDLEWARE=middleware or [],
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": RATES, "UNAUTHENTICATED_USER": None, **more},
        SLUICEGATE={"STORAGE": store, **(sluicegate or {})},
    )


def internal(request: object) -> bool:
    """The skip hook of the tests: requests that say ``X-Internal: yes``."""
    return bool(request.headers.get("X-Internal") == "yes")  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    """Each test starts with no limiter (the process-wide ones are made at first use)."""
    _rules.clear()
    yield
    _rules.clear()


def statuses(client: APIClient, path: str, n: int, **extra: str) -> list[int]:
    return [client.get(path, **extra).status_code for _ in range(n)]


def test_anon_throttle_with_retry_after() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/anon", 2) == [200, 200]
        rejected = client.get("/anon")
        assert rejected.status_code == 429
        assert rejected["Retry-After"] == "60"
        assert rejected.json() == {"detail": "Request was throttled. Expected available in 60 seconds."}
        # Authenticated requests are not its business; another client has its own bucket.
        assert statuses(client, "/anon", 3, HTTP_X_USER="ann") == [200] * 3
        assert client.get("/anon", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_a_full_key_store_throttles_with_a_wait_of_a_second() -> None:
    """A new client at the key bound, every bucket in use: throttled (429, Retry-After 1), not
    a server error."""
    with settings(sluicegate={"MAX_KEYS": 1}):
        client = APIClient()
        assert client.get("/anon").status_code == 200
        full = client.get("/anon", REMOTE_ADDR="10.0.0.2")
        assert (full.status_code, full["Retry-After"]) == (429, "1")


def test_a_cost_beyond_the_burst_is_refused_without_taking_anything() -> None:
    """A throttle whose cost is more than its rate's burst could never admit a request: an
    error when DRF makes it (it was a request throttled every time), and nothing taken."""

    class Costly(drf_app.ByKey):
        cost = 3

    with settings():
        request = APIRequestFactory().get("/keyed", HTTP_X_API_KEY="k")
        # Refused when DRF makes the throttle (parse_rate), before anything is counted.
        with pytest.raises(InvalidOptionError, match="burst"):
            Costly()
        assert [drf_app.ByKey().allow_request(Request(request), None) for _ in range(3)] == [True, True, False]


def test_a_ratelimit_under_api_view_is_refunded_for_drf_exceptions() -> None:
    """``@api_view`` over ``@ratelimit(deduct_when=...)``: a ValidationError raised in the view
    is DRF's 400, which deduct_when refuses, so the request is free (the decorator hands its
    refunds to the middleware through the HttpRequest DRF's Request wraps)."""
    with settings(middleware=REFUNDS):
        client = APIClient()
        bad = [client.post("/validated", {"ok": "no"}).status_code for _ in range(3)]
        good = [client.post("/validated", {"ok": "yes"}).status_code for _ in range(3)]
        assert (bad, good) == ([400] * 3, [200, 200, 429])


def test_a_forged_forwarded_for_does_not_change_the_key() -> None:
    """DRF's own get_ident keys by the whole X-Forwarded-For header when NUM_PROXIES is unset:
    a client picks a fresh key per request. Ours keys by the peer."""
    with settings():
        client = APIClient()
        # The test client's peer is 127.0.0.1: the header it carries is warned about, once.
        with pytest.warns(UserWarning, match="untrusted_proxy"):
            forged = [client.get("/anon", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}").status_code for i in range(3)]
        assert forged == [200, 200, 429]


def test_user_throttle_by_user_and_by_client() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/user", 4, HTTP_X_USER="ann") == [200, 200, 200, 429]
        assert statuses(client, "/user", 4, HTTP_X_USER="bob") == [200, 200, 200, 429]
        assert statuses(client, "/user", 4) == [200, 200, 200, 429]


def test_the_longest_wait_of_several_throttles() -> None:
    with settings():
        client = APIClient()
        # Anonymous: anon (burst 2) rejects the third; user (burst 3) the fourth.
        assert statuses(client, "/both", 4) == [200, 200, 429, 429]
        assert client.get("/both")["Retry-After"] == "60"


def test_scoped_throttle_counts_each_scope() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/uploads", 2) == [200, 429]
        assert client.get("/uploads")["Retry-After"] == "3600"
        assert statuses(client, "/contacts", 3) == [200, 200, 429]
        assert statuses(client, "/unscoped", 5) == [200] * 5


def test_a_throttle_with_a_rate_and_a_key_of_its_own() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/keyed", 3, HTTP_X_API_KEY="k") == [200, 200, 429]
        assert statuses(client, "/keyed", 3) == [200, 200, 200]  # no key: not throttled


def test_default_throttle_classes_and_the_off_switch() -> None:
    """The view without throttle_classes has conftest.py's DEFAULT_THROTTLE_CLASSES."""
    with settings():
        assert statuses(APIClient(), "/defaults", 3) == [200, 200, 429]
    _rules.clear()
    with settings(), override_settings(SLUICEGATE={"ENABLED": False}):
        assert statuses(APIClient(), "/defaults", 5) == [200] * 5


def test_one_limiter_per_scope_and_rate() -> None:
    with settings():
        client = APIClient()
        client.get("/anon")
        client.get("/both")
        client.get("/user")
        assert sorted((s, str(q)) for s, q in _rules) == [("anon", "1/m; burst=2"), ("user", "1/m; burst=3")]
        # A new rate for a scope is a new limiter.
    with settings() as _, override_settings(
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "5/minute"}, "UNAUTHENTICATED_USER": None}
    ):
        assert statuses(APIClient(), "/anon", 6) == [200] * 5 + [429]


def test_misconfiguration() -> None:
    with settings():

        class NoScope(SluicegateThrottle):
            def get_cache_key(self, request: object, view: object) -> None:
                return None

        with pytest.raises(ImproperlyConfigured, match="scope"):
            NoScope()

        class Unknown(AnonRateThrottle):
            scope = "nope"

        with pytest.raises(ImproperlyConfigured, match="'nope'"):
            Unknown()


def test_the_shm_store(regions: Path) -> None:
    with settings(store=f"shm:{regions}/drf"):
        assert statuses(APIClient(), "/anon", 3) == [200, 200, 429]
    assert (regions / f"drf.{region_suffix(Quota(RATES['anon']), 'drf:anon')}").exists()


def test_the_redis_store(redis_server: RedisServer) -> None:
    with settings(store=url(redis_server, on_error="error")):
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        assert statuses(client, "/uploads", 2) == [200, 429]


def test_the_skip_hook_lets_requests_through_uncounted() -> None:
    with settings(sluicegate={"SKIP": f"{__name__}.internal"}):
        client = APIClient()
        assert statuses(client, "/anon", 5, HTTP_X_INTERNAL="yes") == [200] * 5
        # The skipped requests took nothing: the client's burst of 2 is whole.
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        assert statuses(client, "/anon", 2, HTTP_X_INTERNAL="yes") == [200, 200]
        assert statuses(client, "/anon", 1, HTTP_X_INTERNAL="no") == [429]


def test_views_of_one_scope_share_its_buckets() -> None:
    with settings():
        client = APIClient()
        got = [client.get(p).status_code for p in ("/contacts", "/contacts-too", "/contacts", "/contacts-too")]
        assert got == [200, 200, 429, 429]
        # Another scope, and the views without one, are not touched.
        assert statuses(client, "/uploads", 1) == [200]


#: (the status a view answers, the status the client gets) in turn, on a scope of burst 2
#: that counts only successes: failures, DRF's own (404) or the handler's (500: Django's),
#: are free; once 2 successes have taken the bucket, every request is rejected before its
#: view runs.
SUCCESSES_COUNT = [(500, 500), (404, 404), (200, 200), (400, 400), (500, 500), (201, 201), (200, 429), (500, 429)]
#: The other way round, on a scope of burst 2 that counts only failures (login attempts).
FAILURES_COUNT = [(200, 200), (401, 401), (201, 201), (200, 200), (500, 500), (200, 429), (401, 429)]


@pytest.mark.parametrize(("path", "answers"), [("/successes", SUCCESSES_COUNT), ("/failures", FAILURES_COUNT)])
def test_deduct_when_refunds_by_the_response(path: str, answers: list[tuple[int, int]]) -> None:
    with settings(middleware=REFUNDS):
        client = APIClient(raise_request_exception=False)
        got = [client.get(f"{path}?status={answer}").status_code for answer, _ in answers]
        assert got == [expected for _, expected in answers]
        assert get("127.0.0.1", path[1:]).remaining == 0  # type: ignore[union-attr]
        # Each client has its own bucket.
        assert client.get(f"{path}?status=200", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_deduct_when_under_asgi() -> None:
    """In an async middleware stack (ASGI) the middleware awaits the refunds; DRF's view runs
    in a thread meanwhile."""

    async def main() -> list[int]:
        client = AsyncClient(raise_request_exception=False)
        return [(await client.get(f"/successes?status={answer}")).status_code for answer, _ in SUCCESSES_COUNT]

    with settings(middleware=REFUNDS):
        assert asyncio.run(main()) == [expected for _, expected in SUCCESSES_COUNT]


def test_deduct_when_on_redis(redis_server: RedisServer) -> None:
    with settings(store=url(redis_server, on_error="error"), middleware=REFUNDS):
        client = APIClient(raise_request_exception=False)
        got = [client.get(f"/successes?status={answer}").status_code for answer, _ in SUCCESSES_COUNT]
        assert got == [expected for _, expected in SUCCESSES_COUNT]


def test_deduct_when_without_the_middleware_is_an_error() -> None:
    """Without the middleware nobody would make the refunds: every request would count. The
    throttle says so instead of counting, and takes nothing."""
    with settings():
        with pytest.raises(ImproperlyConfigured, match="SuccessesCount.*RateLimitMiddleware"):
            APIClient().get("/successes?status=200")
        assert get("127.0.0.1", "successes").remaining == 2  # type: ignore[union-attr]
        # Throttles without a deduct_when need no middleware.
        assert statuses(APIClient(), "/anon", 1, REMOTE_ADDR="10.0.0.7") == [200]
    with settings(sluicegate={"ENABLED": False}):
        assert statuses(APIClient(), "/successes?status=200", 3) == [200] * 3


def test_get_and_reset_by_scope() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        spent = get("127.0.0.1", "anon")
        assert spent is not None and spent.limit == 2 and spent.remaining == 0 and spent.reset_after > 0
        assert get("10.0.0.2", "anon").remaining == 2  # type: ignore[union-attr]  # a peek takes nothing
        assert get("10.0.0.2", "anon").remaining == 2  # type: ignore[union-attr]
        assert reset("127.0.0.1", "anon") == 1
        assert reset("127.0.0.1", "anon") == 0
        assert get("127.0.0.1", "anon").remaining == 2  # type: ignore[union-attr]
        assert client.get("/anon").status_code == 200
        # A user's key, by scope or by throttle class (which reads its rate as DRF does).
        assert statuses(client, "/user", 1, HTTP_X_USER="ann") == [200]
        assert get("user:ann", "user").remaining == 2  # type: ignore[union-attr]
        assert get("user:ann", UserRateThrottle).remaining == 2  # type: ignore[union-attr]
        # A view's throttle_scope, and a throttle class with a rate of its own.
        assert statuses(client, "/uploads", 2) == [200, 429]
        assert reset("127.0.0.1", "uploads") == 1
        assert client.get("/uploads").status_code == 200
        assert statuses(client, "/keyed", 3, HTTP_X_API_KEY="k") == [200, 200, 429]
        assert get("k", drf_app.ByKey).remaining == 0  # type: ignore[union-attr]
        assert reset("k", drf_app.ByKey) == 1
        assert client.get("/keyed", HTTP_X_API_KEY="k").status_code == 200
        with pytest.raises(ImproperlyConfigured, match="'nope'"):
            get("k", "nope")
        with pytest.raises(TypeError, match="pass the scope's name"):
            get("k", ScopedRateThrottle)
    with settings(), override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"off": None}}):
        assert get("k", "off") is None and reset("k", "off") == 0


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_limiters_count_each_throttle_for_prometheus(regions: Path, redis_server: RedisServer, store: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sluicegate import render_prometheus
    from sluicegate.prometheus import SluicegateCollector

    stores = {"memory": "memory", "shm": f"shm:{regions}/drf-metrics", "redis": url(redis_server, on_error="error")}
    with settings(store=stores[store]):
        assert limiters() == []  # no throttle used yet
        registry = CollectorRegistry()
        SluicegateCollector(limiters, registry=registry)  # read again at each scrape
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        assert statuses(client, "/uploads", 2) == [200, 429]
        series = limiters()
        assert [labels for labels, _ in series] == [
            {"limit": "drf:anon", "quota": str(Quota(RATES["anon"]))},
            {"limit": "drf:uploads", "quota": str(Quota(RATES["uploads"]))},
        ]
        anon = series[0][1].metrics()
        assert anon is not None and (anon.allowed, anon.rejected) == (2, 1)
        text = generate_latest(registry).decode()
        assert 'limit="drf:anon",quota="1/m; burst=2",outcome="allowed"} 2' in render_prometheus(limiters())
        assert 'sluicegate_decisions_total{limit="drf:uploads",outcome="rejected",quota="1/h"} 1.0' in text


def test_drf_num_proxies_without_trusted_proxies_is_warned_of_once() -> None:
    with settings(NUM_PROXIES=1), pytest.warns(UserWarning, match="NUM_PROXIES"):
        assert statuses(APIClient(), "/anon", 3) == [200, 200, 429]
    import warnings

    with settings(NUM_PROXIES=0), warnings.catch_warnings():  # DRF's REMOTE_ADDR, as here
        warnings.simplefilter("error")
        assert statuses(APIClient(), "/anon", 1, REMOTE_ADDR="10.0.0.7") == [200]
    with settings(NUM_PROXIES=1, sluicegate={"TRUSTED_PROXIES": 1}), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert statuses(APIClient(), "/anon", 1, HTTP_X_FORWARDED_FOR="6.6.6.6") == [200]


class DrfWay(SluicegateThrottle):
    """A throttle written DRF's way: ``cache_format`` and ``get_ident``."""

    scope = "drfway"
    rate = "1/minute; burst=1"

    def get_cache_key(self, request: Any, view: Any) -> Any:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class DrfWayView(drf_app.Base):
    throttle_classes = [DrfWay]


def test_a_throttle_written_drfs_way_keys_by_the_trusted_client() -> None:
    """DRF's own ``get_ident`` believes a client's ``X-Forwarded-For``: a throttle that called
    it could be dodged by sending another one each time."""
    factory = APIRequestFactory()
    view = DrfWayView.as_view()
    with settings():
        answers = [view(factory.get("/x", HTTP_X_FORWARDED_FOR=f"10.9.9.{i}")).status_code for i in range(3)]
        assert answers == [200, 429, 429]
        throttle = DrfWay()
        assert (throttle.num_requests, throttle.duration) == (1, 60)
        assert throttle.parse_rate("100/day") == (100, 86400) and throttle.parse_rate(None) == (None, None)
        assert get("throttle_drfway_127.0.0.1", DrfWay) is not None


def test_drfs_spellings_of_a_rate_are_read_as_drf_reads_them() -> None:
    rates = {**RATES, "anon": "2/mins", "user": "1/hrs"}
    with override_settings(
        ROOT_URLCONF="drf_app", MIDDLEWARE=[], SLUICEGATE={},
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": rates, "UNAUTHENTICATED_USER": None},
    ):  # fmt: skip
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        # A rate without options is a sliding window (DRF's semantics): the wait is until the
        # estimate has room, 30 s into the next minute, not one token's 30 s.
        assert 30 < int(client.get("/anon")["Retry-After"]) <= 90
        assert statuses(client, "/user", 2, HTTP_X_USER="ann") == [200, 429]
    assert DrfWay().parse_rate("10/secs") == (10, 1)


def test_a_bad_rate_or_cost_fails_when_the_throttle_is_made() -> None:
    with pytest.raises(ValueError, match="fortnight"):  # InvalidQuotaError

        class Misspelt(SluicegateThrottle):  # noqa: F841 - checked when the class is made
            rate = "1/fortnight"

    with pytest.raises(InvalidOptionError, match="burst"):

        class TooDear(SluicegateThrottle):  # noqa: F841
            rate = "1/minute; burst=2"
            cost = 3

    # A scope's rate from the settings: when DRF makes the throttle, before any request counts.
    with override_settings(
        ROOT_URLCONF="drf_app", MIDDLEWARE=[], SLUICEGATE={},
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "5/fortnight"}, "UNAUTHENTICATED_USER": None},
    ):  # fmt: skip
        with pytest.raises(ValueError, match="fortnight"):
            AnonRateThrottle()
        with pytest.raises(ValueError, match="fortnight"):
            APIClient().get("/anon")


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_a_rate_without_options_admits_its_count_per_window_as_drf_does(
    regions: Path, redis_server: RedisServer, store: str
) -> None:
    """DRF's "100/day" admits at most 100 in any day. The core's default token bucket starts
    full and refills continuously (100 at once, then one every 864 s: 199 in a day), so a rate
    that names no option is a sliding window counter, on every store; a rate that names its
    algorithm, or a token bucket's option, keeps it."""
    stores = {"memory": "memory", "shm": f"shm:{regions}/drf-window", "redis": url(redis_server, on_error="error")}
    rates = {**RATES, "anon": "100/day", "user": "100/day; algorithm=token_bucket"}
    with settings(store=stores[store]), override_settings(
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": rates, "UNAUTHENTICATED_USER": None}
    ):
        client = APIClient()
        assert statuses(client, "/anon", 101) == [200] * 100 + [429]
        # Until the window has moved on (the next calendar day, 864 s into it), not a token's 864 s.
        assert int(client.get("/anon")["Retry-After"]) > 864
        assert str(_rules_of("anon")) == "100/d; algorithm=sliding_window"
        # The user's own choice of algorithm stands.
        assert statuses(client, "/user", 101, HTTP_X_USER="ann") == [200] * 100 + [429]
        assert client.get("/user", HTTP_X_USER="ann")["Retry-After"] == "864"
        assert str(_rules_of("user")) == "100/d"
    assert DrfWay().parse_rate("100/day") == (100, 86400)


def _rules_of(scope: str) -> Quota:
    (quota,) = [q for s, q in _rules if s == scope]
    return quota


def test_a_rate_of_zero_is_a_clear_error_when_the_throttle_is_made() -> None:
    """DRF's "0/min" refuses every request; a sluicegate quota admits at least one request a
    period, so the rate is refused with a message that says so (it was the core's "count must
    be at least 1" at the first request)."""
    with pytest.raises(InvalidQuotaError, match="'0/min' admits no request.*permission class"):

        class Closed(SluicegateThrottle):  # noqa: F841 - checked when the class is made
            rate = "0/min"

    with override_settings(
        ROOT_URLCONF="drf_app", MIDDLEWARE=[], SLUICEGATE={},
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "0/mins"}, "UNAUTHENTICATED_USER": None},
    ):  # fmt: skip
        with pytest.raises(InvalidQuotaError, match="'0/mins' admits no request"):
            AnonRateThrottle()
        with pytest.raises(InvalidQuotaError, match="admits no request"):
            APIClient().get("/anon")


def test_the_readmes_reset_between_tests_clears_every_throttle() -> None:
    """DRF's ``cache.clear()`` does not reset these throttles; clearing the limiters of
    ``limiters()`` does (the README's fixture)."""
    from django.core.cache import cache

    with settings():
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        cache.clear()
        assert statuses(client, "/anon", 1) == [429]
        for _, limiter in limiters():
            limiter.clear()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
