"""Flask and Django on the Redis store (``SLUICEGATE_STORAGE`` / ``SLUICEGATE["STORAGE"]`` a
Redis URL): each limit under a key prefix of its own, each fail policy with a killed server
(a decision, or for ``on_error=error`` the StoreError), and Django's async views and async
middleware awaiting the server without blocking the event loop."""

from __future__ import annotations

import asyncio
import re

import pytest
import test_flask
from django.test import AsyncClient, Client, override_settings
from redis_server import RedisServer
from test_redis import url, while_ticking

from sluicegate import Quota, StoreError
from sluicegate._web import region_suffix

MIDDLEWARE = "sluicegate.django.RateLimitMiddleware"


def prefixes(server: RedisServer, prefix: str) -> dict[str, int]:
    """The limits' key prefixes under `prefix`: each `PREFIX:SUFFIX` with its number of keys."""
    out: dict[str, int] = {}
    for key in server.keys(f"{prefix}:*"):
        head = ":".join(key.split(":")[:2])
        out[head] = out.get(head, 0) + 1
    return out


def test_flask_on_redis_gives_each_limit_its_own_prefix(redis_server: RedisServer) -> None:
    store = url(redis_server, on_error="error")
    prefix = re.search(r"prefix=([^&]+)", store)[1]  # type: ignore[index]
    app, _ = test_flask.make_app(SLUICEGATE_STORAGE=store, SLUICEGATE_DEFAULT_LIMITS=["2/minute"])
    client = app.test_client()
    assert [client.get("/default").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/other").status_code for _ in range(3)] == [200, 200, 429]
    for _ in range(2):
        assert client.get("/limited", headers={"X-Api-Key": "a"}).status_code == 200
    assert client.get("/limited", headers={"X-Api-Key": "a"}).status_code == 429
    # The default limit (one prefix; its keys carry the view) and /limited's (another).
    default = f"{prefix}:{region_suffix(Quota('2/minute'), 'default#0')}"
    limited = f"{prefix}:{region_suffix(Quota('1/minute; burst=2'), 'test_flask.make_app.<locals>.limited#0')}"
    assert prefixes(redis_server, prefix) == {default: 2, limited: 1}


def test_django_on_redis_gives_each_limit_its_own_prefix(redis_server: RedisServer) -> None:
    store = url(redis_server, on_error="error")
    prefix = re.search(r"prefix=([^&]+)", store)[1]  # type: ignore[index]
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"], "STORAGE": store}):
        client = Client()
        assert [client.get("/plain").status_code for _ in range(3)] == [200, 200, 429]
        assert client.get("/other").status_code == 200
        assert [client.get("/limited", HTTP_X_API_KEY="k").status_code for _ in range(4)] == [200] * 3 + [429]
    default = f"{prefix}:{region_suffix(Quota('2/minute'), 'default#0')}"
    limited = f"{prefix}:{region_suffix(Quota('1/minute; burst=3'), 'django_app.limited#0')}"
    assert prefixes(redis_server, prefix) == {default: 2, limited: 1}


def test_max_keys_does_not_name_a_redis_prefix(redis_server: RedisServer) -> None:
    """A Redis store keeps no key bound: two deploys differing only in ``MAX_KEYS`` share the
    limit's buckets (a new prefix reset every client's count, and a rolling deploy counted
    old and new hosts apart)."""
    store = url(redis_server, on_error="error")
    prefix = re.search(r"prefix=([^&]+)", store)[1]  # type: ignore[index]
    statuses = []
    for max_keys in (1000, 2000):
        app, _ = test_flask.make_app(
            SLUICEGATE_STORAGE=store, SLUICEGATE_DEFAULT_LIMITS=["2/minute"], SLUICEGATE_MAX_KEYS=max_keys
        )
        statuses += [app.test_client().get("/default").status_code for _ in range(2)]
    assert statuses == [200, 200, 429, 429]
    assert list(prefixes(redis_server, prefix)) == [f"{prefix}:{region_suffix(Quota('2/minute'), 'default#0')}"]


#: What a request gets while the server is down, under each policy (2/minute, so `local`
#: admits 2 from its in-process bucket).
STATUSES = {"open": [200, 200, 200], "closed": [429, 429, 429], "local": [200, 200, 429]}


@pytest.mark.parametrize("policy", ["open", "closed", "local", "error"])
def test_flask_with_a_killed_server(own_redis: RedisServer, policy: str) -> None:
    """No exception reaches a view unless the policy is `error`, whose StoreError is the
    app's to handle (unhandled: a 500)."""
    store = url(own_redis, on_error=policy)
    app, _ = test_flask.make_app(SLUICEGATE_STORAGE=store, SLUICEGATE_DEFAULT_LIMITS=["2/minute"])
    client = app.test_client()
    assert client.get("/default").status_code == 200
    own_redis.kill()
    statuses = [client.get("/default").status_code for _ in range(3)]
    if policy == "error":
        assert statuses == [500] * 3
        app.testing = True  # exceptions propagate: it is the store's
        with pytest.raises(StoreError) as info:
            client.get("/default")
        assert info.value.kind == "unavailable"
    else:
        assert statuses == STATUSES[policy]


def test_an_outage_after_the_first_connection_is_logged_when_it_begins_and_ends(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose Redis store goes down after it connected says so once on the
    ``sluicegate`` logger (its limits are then each process's own), and once more when the
    server decides again; nothing is logged while it answers."""
    import time

    from sluicegate import _web

    monkeypatch.setattr(_web, "WATCH_EVERY", 0.0)  # the counters looked at every request
    store = url(own_redis, on_error="local")
    app, _ = test_flask.make_app(SLUICEGATE_STORAGE=store, SLUICEGATE_DEFAULT_LIMITS=["100/minute"])
    client = app.test_client()
    with caplog.at_level("INFO", logger="sluicegate"):
        assert [client.get("/default").status_code for _ in range(3)] == [200] * 3
        assert not caplog.records
        own_redis.kill()
        assert [client.get("/default").status_code for _ in range(3)] == [200] * 3  # local
        failing = [r for r in caplog.records if "is failing" in r.getMessage()]
        assert len(failing) == 1 and failing[0].levelname == "WARNING", caplog.records
        assert "on_error policy in this process (on_error=local: by each process alone" in failing[0].getMessage()
        own_redis.start()
        deadline = time.monotonic() + 20  # the reconnection backs off up to a second
        while not any(r.levelname == "WARNING" and "answers again:" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, caplog.records
            assert client.get("/default").status_code == 200
            time.sleep(0.05)
        assert len([r for r in caplog.records if "is failing" in r.getMessage()]) == 1

        def said() -> list[tuple[str, str]]:
            return [("failing" if "is failing" in r.getMessage() else "again", r.levelname) for r in caplog.records]

        assert said() == [("failing", "WARNING"), ("again", "WARNING")]
        # The next outage is reported again.
        own_redis.kill()
        assert [client.get("/default").status_code for _ in range(3)] == [200] * 3
        assert said() == [("failing", "WARNING"), ("again", "WARNING"), ("failing", "WARNING")]


@pytest.mark.parametrize("policy", ["open", "closed", "local", "error"])
def test_django_with_a_killed_server(own_redis: RedisServer, policy: str) -> None:
    store = url(own_redis, on_error=policy)
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"], "STORAGE": store}):
        client = Client()
        assert client.get("/plain").status_code == 200
        own_redis.kill()
        if policy == "error":
            with pytest.raises(StoreError) as info:
                client.get("/plain")
            assert info.value.kind == "unavailable"
        else:
            assert [client.get("/plain").status_code for _ in range(3)] == STATUSES[policy]
            asynchronous = asyncio.run(AsyncClient().get("/aplain"))
            assert asynchronous.status_code in (200, 429)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_django_async_views_and_middleware(redis_server: RedisServer, store: str) -> None:
    """An async stack (ASGI: Django's AsyncClient) with the middleware alone: the default limit
    of an async view, and the decorator on one, through the limiters' async methods."""
    storage = "memory" if store == "memory" else url(redis_server, on_error="error")
    settings = {"DEFAULT_LIMITS": ["2/minute"], "STORAGE": storage}
    with override_settings(MIDDLEWARE=[MIDDLEWARE], SLUICEGATE=settings):

        async def main() -> None:
            client = AsyncClient()
            for path in ("/aplain", "/alimited"):
                responses = [await client.get(path) for _ in range(3)]
                assert [r.status_code for r in responses] == [200, 200, 429], path
                assert responses[0]["RateLimit"] == '"default";r=1;t=30'

        asyncio.run(main())
        # A sync stack (WSGI) serves the async view too (Django runs it in a loop of its own).
        assert [Client().get("/alimited", REMOTE_ADDR="10.0.0.8").status_code for _ in range(3)] == [200, 200, 429]


def test_django_async_requests_do_not_block_the_loop(own_redis: RedisServer) -> None:
    """20 requests in flight through the async middleware against a SIGSTOPped server until
    the store's timeout: a ticker on the same loop keeps ticking (on_error=open admits them)."""
    store = url(own_redis, on_error="open", timeout="2s")
    with override_settings(MIDDLEWARE=[MIDDLEWARE], SLUICEGATE={"DEFAULT_LIMITS": ["100/minute"], "STORAGE": store}):
        client = AsyncClient()
        assert asyncio.run(client.get("/aplain")).status_code == 200  # connected
        own_redis.pause()
        try:

            async def flood() -> list:
                paths = ["/aplain", "/alimited"] * 10
                return await asyncio.gather(*(client.get(p) for p in paths))

            responses, gap, took = asyncio.run(while_ticking(flood()))
        finally:
            own_redis.resume()
    assert [r.status_code for r in responses] == [200] * 20
    assert took >= 1.9, took
    assert gap < 1, (gap, took)  # under half the wait (test_redis.while_ticking)
    # They were in flight together: each timed out on its own (one at a time, the first's
    # timeout would have dropped the connection and the others failed at once, unsent).
    stats = django_limiter(store).redis_stats()
    assert stats is not None and stats["timeouts"] >= 20, stats


def django_limiter(store: str):  # type: ignore[no-untyped-def]
    from sluicegate.django import _get_config

    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["100/minute"], "STORAGE": store}):
        return _get_config().defaults[0].limiter(store)
