"""The Starlette/FastAPI integration: through Starlette's TestClient, an ASGI transport on the
test's own loop (a Redis server that does not answer never blocks it), and real uvicorn
servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from fastapi import APIRouter, Depends, FastAPI, WebSocket
from fastapi.routing import APIRoute
from redis_server import RedisServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Host, Route, Router
from starlette.testclient import TestClient
from starlette_app import make_fastapi, make_starlette
from test_redis import url, while_ticking
from test_servers import Server, get, serve, wait_ready

import sluicegate.starlette as starlette_module
from sluicegate import InvalidOptionError, Quota, RateLimited
from sluicegate._web import region_suffix
from sluicegate.starlette import RateLimitMiddleware, Sluicegate, header, key_func, remote_address

TESTS = Path(__file__).resolve().parent


def statuses(client: TestClient, path: str, n: int, **kwargs: object) -> list[int]:
    return [client.get(path, **kwargs).status_code for _ in range(n)]  # type: ignore[arg-type]


def test_default_limits_per_route_with_headers() -> None:
    app, _ = make_fastapi()
    client = TestClient(app)
    first = client.get("/default")
    assert first.status_code == 200 and first.json() == "default"
    assert first.headers["RateLimit-Policy"] == '"default";q=2;w=60'
    assert first.headers["RateLimit"] == '"default";r=1;t=30'
    assert client.get("/default").status_code == 200
    third = client.get("/default")
    assert third.status_code == 429
    assert third.headers["Retry-After"] == "30"
    assert third.headers["RateLimit"] == '"default";r=0;t=30'
    assert third.text == "Too Many Requests: retry after 30 s\n"
    # Each route counts on its own; a path template is one route, however many paths it has.
    assert statuses(client, "/other", 3) == [200, 200, 429]
    assert [client.get(f"/items/{i}").status_code for i in range(3)] == [200, 200, 429]
    # Unmatched paths share one bucket per client: a client cannot make buckets by paths.
    assert [client.get(f"/nowhere/{i}").status_code for i in range(3)] == [404, 404, 429]
    # Another client has buckets of its own.
    other = TestClient(app, client=("10.0.0.9", 1234))
    assert other.get("/default").status_code == 200


def test_a_dependency_limits_its_route_by_its_key() -> None:
    app, _ = make_fastapi()
    client = TestClient(app)
    assert statuses(client, "/dep", 2, headers={"X-Api-Key": "a"}) == [200, 200]
    rejected = client.get("/dep", headers={"X-Api-Key": "a"})
    assert rejected.status_code == 429
    # A token a minute after the first request: 60 s, or 59 once a second has gone by.
    wait = rejected.headers["Retry-After"]
    assert wait in ("59", "60")
    # Answered by the middleware, as its own rejections are (on_breach, or this text).
    assert rejected.text == f"Too Many Requests: retry after {wait} s\n"
    assert rejected.headers["RateLimit"] == f'"default";r=0;t={wait}'
    # Another key, its own bucket; the route's own limit replaces the default limits (2/minute).
    assert statuses(client, "/dep", 2, headers={"X-Api-Key": "b"}) == [200, 200]


def test_the_dependency_gives_the_decision_and_the_fields() -> None:
    app, _ = make_fastapi()
    client = TestClient(app)
    assert [client.get("/value").json() for _ in range(3)] == [4, 3, 2]
    # An endpoint returning a Response of its own: the middleware adds the fields.
    raw = client.get("/raw")
    assert raw.text == "raw" and raw.headers["RateLimit"] == '"default";r=4;t=60'


def test_a_named_limit_is_shared_by_the_routes_that_name_it() -> None:
    app, limiter = make_fastapi()
    client = TestClient(app)
    assert [client.get(p).status_code for p in ("/shared-a", "/shared-b", "/shared-a", "/shared-b")] == [
        200,
        200,
        200,
        429,
    ]
    with pytest.raises(ValueError, match="already has other rates"):
        limiter.dependency("5/minute", name="search")


def test_the_decorator_keeps_any_signature() -> None:
    app, _ = make_fastapi()
    client = TestClient(app)
    answers = [client.post("/decorated/x", params={"q": 3}, json={"a": 1}) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json() == {"name": "x", "q": 3, "body": {"a": 1}}
    assert answers[0].headers["RateLimit"] == '"decorated";r=2;t=60'
    # The limit is the endpoint's, not the path's, and comes before FastAPI validates `q`.
    assert client.post("/decorated/y", params={"q": "no"}).status_code == 429


def test_several_rates_cost_exempt_and_raise() -> None:
    app, _ = make_fastapi()
    client = TestClient(app)
    # Both rates must admit; the reported decision is the one with fewer tokens left.
    first = client.get("/two")
    assert first.headers["RateLimit"] == '"default";r=2;t=60'
    assert statuses(client, "/two", 3) == [200, 200, 429]
    assert client.get("/heavy", params={"n": 7}).status_code == 200
    assert client.get("/heavy", params={"n": 4}).status_code == 429
    assert client.get("/heavy", params={"n": 3}).status_code == 200
    assert statuses(client, "/free", 5) == [200] * 5
    assert "RateLimit" not in client.get("/free").headers
    raised = client.get("/raise")
    assert raised.status_code == 429 and raised.headers["Retry-After"] == "3600"


def test_plain_starlette() -> None:
    app, _ = make_starlette(default_limits="3/minute", headers="legacy")
    client = TestClient(app)
    before = time.time()
    answers = [client.get("/limited") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].headers["X-RateLimit-Limit"] == "2"
    # X-RateLimit-Reset is a Unix time, as slowapi sends it (not 60, 120 and 60 s from now:
    # full again, and for the 429 when a token is back).
    resets = [int(a.headers["X-RateLimit-Reset"]) for a in answers]
    assert before + 59 <= resets[0] <= time.time() + 61 and before + 119 <= resets[1] <= time.time() + 121
    assert before + 59 <= resets[2] <= time.time() + 61
    assert answers[2].headers["Retry-After"] == "60"
    assert statuses(client, "/plain", 4) == [200, 200, 200, 429]


def test_disabled_and_without_the_middleware() -> None:
    app, _ = make_fastapi(enabled=False)
    client = TestClient(app)
    assert statuses(client, "/default", 5) == [200] * 5
    assert statuses(client, "/dep", 5, headers={"X-Api-Key": "a"}) == [200] * 5
    # A dependency works without the middleware (it sets the fields itself).
    limiter = Sluicegate()
    bare = FastAPI()

    @bare.get("/x", dependencies=[Depends(limiter.dependency("1/minute; burst=1"))])
    async def x() -> str:
        return "x"

    client = TestClient(bare)
    first = client.get("/x")
    assert first.status_code == 200 and first.headers["RateLimit"] == '"default";r=0;t=60'
    assert client.get("/x").status_code == 429


def test_the_route_of_a_path_is_found_again_when_the_routes_change() -> None:
    limiter = Sluicegate(default_limits=["2/minute"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    client = TestClient(app)
    # Unmatched: the one bucket of unmatched paths.
    assert statuses(client, "/late", 3) == [404, 404, 429]

    @app.get("/late")
    @limiter.exempt
    async def late() -> str:
        return "late"

    # The route added since is found (the path's earlier resolution is not kept).
    assert statuses(client, "/late", 3) == [200] * 3


def test_a_route_replaced_in_place_is_found_again() -> None:
    limiter = Sluicegate(default_limits=["2/minute"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/a")
    async def a() -> str:
        return "a"

    client = TestClient(app)
    assert statuses(client, "/a", 3) == [200, 200, 429]
    # The route swapped for another of the same path in the same slot (the list keeps its
    # length): the new route's own limit applies from the next request.
    at = next(i for i, r in enumerate(app.router.routes) if getattr(r, "path", None) == "/a")

    @limiter.limit("5/minute")
    async def a2() -> str:
        return "a2"

    app.router.routes[at] = APIRoute("/a", a2, methods=["GET"])
    assert statuses(client, "/a", 6) == [200] * 5 + [429]


def test_the_routes_of_a_mounted_app_are_its_own() -> None:
    """``app.mount`` of a sub-application (and a router in a ``Mount``): the middleware on the
    outer app applies a mounted endpoint's own limit, counts the default limits per mounted
    route (its template the mount's and its own), and a mounted dependency counts per route
    too."""
    limiter = Sluicegate(default_limits=["2/minute"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    sub = FastAPI()

    @sub.get("/limited")
    @limiter.limit("1/minute")
    async def limited() -> str:
        return "limited"

    @sub.get("/a")
    async def a() -> str:
        return "a"

    @sub.get("/items/{item}")
    async def item(item: int) -> int:
        return item

    per_route = limiter.dependency("1/minute; burst=3")

    @sub.get("/dep", dependencies=[Depends(per_route)])
    async def dep() -> str:
        return "dep"

    @sub.get("/dep2", dependencies=[Depends(per_route)])
    async def dep2() -> str:
        return "dep2"

    async def plain(request: Request) -> PlainTextResponse:
        return PlainTextResponse("plain")

    app.mount("/v1", sub)
    app.mount("/r", Router(routes=[Route("/x", plain), Route("/y", plain)]))
    client = TestClient(app)
    # The endpoint's own limit (1/minute), not the default limits (2/minute).
    assert statuses(client, "/v1/limited", 2) == [200, 429]
    # Each mounted route has its own default bucket; a template is one route.
    assert statuses(client, "/v1/a", 3) == [200, 200, 429]
    assert [client.get(f"/v1/items/{i}").status_code for i in range(3)] == [200, 200, 429]
    assert statuses(client, "/r/x", 3) == [200, 200, 429]
    assert statuses(client, "/r/y", 2) == [200, 200]
    # A dependency's limit replaces the default limits, per mounted route.
    assert statuses(client, "/v1/dep", 4) == [200, 200, 200, 429]
    assert statuses(client, "/v1/dep2", 3) == [200, 200, 200]
    # Its buckets are named by the whole template, as the admin calls take it.
    assert per_route.get("testclient", "/v1/dep").remaining == 0  # type: ignore[union-attr]
    assert per_route.get("testclient", "/v1/dep2").remaining == 0  # type: ignore[union-attr]


def test_an_app_that_starts_no_response_is_settled_as_a_500() -> None:
    """An ASGI endpoint that returns without starting a response (the server then answers
    500): its deduct_when limit is settled by that 500, so the request is free."""
    limiter = Sluicegate()

    class Silent:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            return None

    silent = limiter.limit("1/minute; burst=2", deduct_when=lambda r: r.status_code < 400)(Silent())
    app = Starlette(routes=[Route("/silent", silent)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    client = TestClient(app)
    for _ in range(3):
        with pytest.raises(AssertionError):  # the test client's "no response"
            client.get("/silent")
    rule = silent.__sluicegate_limits__[0]
    assert rule.limiter().peek("testclient").remaining == 2


def test_host_routes_are_matched_by_each_request(monkeypatch: pytest.MonkeyPatch) -> None:
    limiter = Sluicegate()

    @limiter.limit("1/minute")
    async def limited(request: Request) -> PlainTextResponse:
        return PlainTextResponse("limited")

    async def free(request: Request) -> PlainTextResponse:
        return PlainTextResponse("free")

    app = Starlette(routes=[Host("free.test", app=Router([Route("/x", free)])), Route("/x", limited)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    client = TestClient(app)
    assert statuses(client, "/x", 2) == [200, 429]
    # The same path on the Host route: its route, not the one the path found before.
    assert statuses(client, "/x", 3, headers={"Host": "free.test"}) == [200] * 3
    # More paths than the middleware keeps: each still finds its route.
    monkeypatch.setattr(starlette_module, "_RESOLVED", 2)
    app, _ = make_fastapi(default_limits=["3/minute"])
    client = TestClient(app)
    assert [client.get(f"/items/{i}").status_code for i in range(5)] == [200, 200, 200, 429, 429]
    assert statuses(client, "/free", 4) == [200] * 4


def test_dependencies_of_one_route_report_the_last_ones_fields() -> None:
    # Without the middleware each dependency sets the fields, as headers.update does: the
    # later one replaces the earlier one's, never a second field of a name.
    limiter = Sluicegate()
    bare = FastAPI()
    first, second = limiter.dependency("1/minute; burst=5"), limiter.dependency("1/minute; burst=3")

    @bare.get("/x", dependencies=[Depends(first), Depends(second)])
    async def x() -> str:
        return "x"

    answer = TestClient(bare).get("/x")
    assert answer.headers.get_list("RateLimit") == ['"default";r=2;t=60']
    assert answer.headers.get_list("RateLimit-Policy") == ['"default";q=3;w=180']


def test_the_middleware_reports_a_dependency_with_fewer_tokens_left() -> None:
    # An endpoint that returns its own Response: FastAPI drops the dependency's fields (set on
    # its sub-response); the middleware reports the binding decision, the dependency's here.
    limiter = Sluicegate(default_limits=["1/minute; burst=10"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/x", dependencies=[Depends(limiter.dependency("1/minute; burst=3"))])
    async def x() -> PlainTextResponse:
        return PlainTextResponse("x")

    @app.get("/y")
    async def y() -> PlainTextResponse:
        return PlainTextResponse("y")

    client = TestClient(app)
    answer = client.get("/x")
    assert answer.headers.get_list("RateLimit") == ['"default";r=2;t=60']
    assert answer.headers.get_list("RateLimit-Policy") == ['"default";q=3;w=180']
    # Without a dependency: the middleware's own limit.
    assert client.get("/y").headers.get_list("RateLimit") == ['"default";r=9;t=60']


def test_configuration_errors_come_at_once() -> None:
    with pytest.raises(InvalidOptionError):
        Sluicegate(headers="nope")
    with pytest.raises(InvalidOptionError):
        Sluicegate(storage="nope://x")
    with pytest.raises(ValueError, match="unknown key function"):
        Sluicegate(key_func="nope")
    with pytest.raises(ValueError, match="at least one rate"):
        Sluicegate().limit([])
    assert key_func("remote_address") is remote_address
    assert key_func("header:X-Key").__name__ == "header_X-Key"
    assert header("X-Key").__name__ == "header_X-Key"


def test_the_shm_store_names_a_region_per_limit(regions: Path) -> None:
    store = f"shm:{regions}/app"
    app, _ = make_fastapi(storage=store)
    client = TestClient(app)
    assert statuses(client, "/default", 3) == [200, 200, 429]
    assert statuses(client, "/shared-a", 4) == [200, 200, 200, 429]
    made = {p.name for p in regions.iterdir()}
    assert f"app.{region_suffix(Quota('2/minute'), 'default#0')}" in made
    assert f"app.{region_suffix(Quota('1/minute; burst=3'), 'shared:search#0')}" in made


def test_the_redis_store(redis_server: RedisServer) -> None:
    app, _ = make_fastapi(storage=url(redis_server, on_error="error"))
    client = TestClient(app)
    assert statuses(client, "/default", 3) == [200, 200, 429]
    assert statuses(client, "/dep", 3, headers={"X-Api-Key": "a"}) == [200, 200, 429]
    assert [client.get("/value").json() for _ in range(2)] == [4, 3]


def test_redis_requests_do_not_block_the_loop(own_redis: RedisServer) -> None:
    """20 requests in flight, on the test's own loop, against a SIGSTOPped server until the
    store's timeout: a ticker on the same loop keeps ticking (on_error=open admits them)."""
    app, _ = make_fastapi(storage=url(own_redis, on_error="open", timeout="2s"), default_limits=["100/minute"])

    async def main() -> tuple[list[httpx2.Response], float, float]:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
            assert (await client.get("/default")).status_code == 200  # connected
            assert (await client.get("/value")).status_code == 200
            own_redis.pause()
            try:
                paths = ["/default", "/value"] * 10
                return await while_ticking(asyncio.gather(*(client.get(p) for p in paths)))
            finally:
                own_redis.resume()

    responses, gap, took = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 20
    assert took >= 1.9, took
    assert gap < 1, (gap, took)  # under half the wait (test_redis.while_ticking)


@contextmanager
def uvicorn(store: str, workers: int = 1) -> Iterator[Server]:
    """`uvicorn starlette_app:app` on 127.0.0.1 (test_servers.serve), its limits on `store`."""
    command = [
        sys.executable, "-m", "uvicorn", "--fd", "{fd}", "--workers", str(workers),
        "--app-dir", str(TESTS), "--log-level", "warning", "starlette_app:app",
    ]  # fmt: skip
    with serve(command, store, lambda server, proc: wait_ready(server, proc, workers=0)) as server:
        yield server


def hammer(url: str, n: int = 60) -> Counter[int]:
    with ThreadPoolExecutor(8) as pool:
        return Counter(status for status, _ in pool.map(lambda _: get(url), range(n)))


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_a_real_uvicorn_server_admits_exactly_the_limit(regions: Path, redis_server: RedisServer, store: str) -> None:
    """60 concurrent requests to a 10/minute default limit: exactly 10 admitted, on one worker
    with each store, and on the shm store across two worker processes."""
    spec = {"memory": "memory", "shm": f"shm:{regions}/uv", "redis": url(redis_server, on_error="error")}[store]
    with uvicorn(spec, workers=2 if store == "shm" else 1) as server:
        assert hammer(f"{server.url}/default") == Counter({200: 10, 429: 50})
        status, fields = get(f"{server.url}/dep")
        assert status == 200 and fields.get("ratelimit") == '"default";r=1;t=60'


def test_a_bytes_key_is_the_bucket_of_its_text_in_per_route_limits() -> None:
    # The core's key rule (b"abc" and "abc" are one bucket) holds for the keys a per-route
    # limit stores (the route's template, a NUL, the key): on the dependency's single-rule
    # path and on check's (two rates), for decisions, `get` and `reset`.
    limiter = Sluicegate()
    one = limiter.dependency("1/minute; burst=2", key=lambda request: b"abc")
    two = limiter.dependency(["1/minute; burst=2", "100/minute"], key=lambda request: b"abc")
    app = FastAPI()

    @app.get("/one", dependencies=[Depends(one)])
    async def first() -> str:
        return "one"

    @app.get("/two", dependencies=[Depends(two)])
    async def second() -> str:
        return "two"

    client = TestClient(app)
    for path, dependency in (("/one", one), ("/two", two)):
        assert client.get(path).status_code == 200
        before = dependency.get("abc", route=path)
        assert before is not None and before.remaining == 1
        assert dependency.get(b"abc", route=path).remaining == 1  # type: ignore[union-attr]
        assert dependency.reset("abc", route=path) >= 1
        assert statuses(client, path, 3) == [200, 200, 429]


def test_routers_included_by_fastapi_keep_their_limits_and_templates() -> None:
    """``app.include_router``: FastAPI matches an included router as one route of its own,
    behind which the middleware saw no endpoint: a route's ``@limit`` and ``exempt`` were
    ignored, every included route shared one default bucket, and a dependency counted by
    the route's path without the router's prefix (two routers' ``/items/{i}`` were one)."""
    from fastapi import APIRouter

    lim = Sluicegate(default_limits="2/minute")
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=lim)
    users, items = APIRouter(), APIRouter()

    @users.get("/items/{i}")
    @lim.limit("3/minute")
    async def own(i: int) -> int:
        return i

    @users.get("/plain")
    async def plain() -> str:
        return "p"

    @items.get("/items/{i}", dependencies=[Depends(lim.dependency("1/minute"))])
    async def dep(i: int) -> int:
        return i

    app.include_router(users, prefix="/users")
    app.include_router(items, prefix="/stock")
    with TestClient(app) as client:
        assert statuses(client, "/users/items/1", 4) == [200, 200, 200, 429]
        assert statuses(client, "/users/plain", 3) == [200, 200, 429]
        assert statuses(client, "/stock/items/1", 2) == [200, 429]
        assert statuses(client, "/stock/items/2", 1) == [429]  # one template, one bucket


def test_a_dependency_in_a_mount_with_a_parameter_counts_by_the_template() -> None:
    """A dependency within ``Mount("/{tenant}", ...)`` counted by the path the mount matched:
    a client had a new bucket for every value it wrote there."""
    lim = Sluicegate()
    sub = FastAPI()

    @sub.get("/items", dependencies=[Depends(lim.dependency("2/minute"))])
    async def listed() -> str:
        return "x"

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=lim)
    app.mount("/{tenant}", sub)
    with TestClient(app) as client:
        got = [client.get(f"/t{i}/items").status_code for i in range(4)]
    assert got == [200, 200, 429, 429]


def test_header_keys_fall_back_to_the_limiters_own_client() -> None:
    """``header(...)``'s fallback and ``key="remote_address"`` believe the limiter's trusted
    proxies: behind one, every client without the header had the proxy's key."""
    lim = Sluicegate(trusted_proxies="loopback")
    app = Starlette()
    app.add_middleware(RateLimitMiddleware, limiter=lim)

    @lim.limit("2/minute", key=header("X-Api-Key"))
    async def keyed(request: Request) -> PlainTextResponse:
        return PlainTextResponse("k")

    @lim.limit("2/minute", key="remote_address")
    async def named(request: Request) -> PlainTextResponse:
        return PlainTextResponse("n")

    app.add_route("/keyed", keyed)
    app.add_route("/named", named)
    with TestClient(app, client=("127.0.0.1", 5000)) as client:
        for path in ("/keyed", "/named"):
            got = [
                client.get(path, headers={"X-Forwarded-For": f"198.51.100.{n}"}).status_code
                for n in (1, 1, 2, 3)
            ]
            assert got == [200, 200, 200, 200], path
    assert remote_address(Request({"type": "http", "client": ("127.0.0.1", 1), "headers": []})) == "127.0.0.1"


def test_header_lines_as_lists_from_a_proxy_peer() -> None:
    """ASGI lets header lines be any two-item iterables (lists, from some servers and
    adapters): from a private or loopback peer, whose forwarding headers are looked at, that
    was a 500 on every request."""
    lim = Sluicegate(trusted_proxies="loopback")
    request = Request(
        {"type": "http", "client": ("127.0.0.1", 1), "headers": [[b"host", b"x"], [b"x-forwarded-for", b"198.51.100.7"]]}
    )
    assert lim.client(request) == "198.51.100.7"
    assert Sluicegate().client(Request({"type": "http", "client": ("10.0.0.7", 1), "headers": [[b"host", b"x"]]})) == "10.0.0.7"


def test_the_middleware_wrapped_around_the_app_from_outside() -> None:
    """``RateLimitMiddleware(app, limiter=...)`` in front of the app (not added to it): the
    scope has no app until the request reaches it, so every route's limits were ignored and
    every path shared one default bucket."""
    lim = Sluicegate(default_limits="2/minute")

    @lim.limit("1/minute")
    async def strict(request: Request) -> PlainTextResponse:
        return PlainTextResponse("s")

    async def plain(request: Request) -> PlainTextResponse:
        return PlainTextResponse("p")

    inner = Starlette(routes=[Route("/strict", strict), Route("/a", plain), Route("/b", plain)])
    with TestClient(RateLimitMiddleware(inner, limiter=lim)) as client:
        assert statuses(client, "/strict", 2) == [200, 429]
        assert statuses(client, "/a", 3) == [200, 200, 429]
        assert statuses(client, "/b", 3) == [200, 200, 429]


def test_an_http_endpoints_handlers_keep_their_limits() -> None:
    """``@limit`` and ``exempt`` on an ``HTTPEndpoint``'s handlers: the route's endpoint is
    the class, which has neither, so they were ignored (the default limits applied)."""
    from starlette.endpoints import HTTPEndpoint

    lim = Sluicegate(default_limits="1/minute")

    class Items(HTTPEndpoint):
        @lim.limit("3/minute")
        async def get(self, request: Request) -> PlainTextResponse:
            return PlainTextResponse("g")

        @lim.exempt
        async def post(self, request: Request) -> PlainTextResponse:
            return PlainTextResponse("p")

        async def put(self, request: Request) -> PlainTextResponse:
            return PlainTextResponse("u")

    app = Starlette(routes=[Route("/items", Items)])
    app.add_middleware(RateLimitMiddleware, limiter=lim)
    with TestClient(app) as client:
        assert statuses(client, "/items", 4) == [200, 200, 200, 429]
        assert [client.head("/items").status_code] == [429]  # HEAD runs `get`: its limit
        assert [client.post("/items").status_code for _ in range(3)] == [200, 200, 200]
        assert [client.put("/items").status_code for _ in range(2)] == [200, 429]


def test_a_websocket_routes_own_limit_refuses_the_handshake() -> None:
    """``@limit`` on a WebSocket endpoint: the middleware passed every WebSocket through, so
    the limit did nothing. A refused connection is closed before it is accepted (1008)."""
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    lim = Sluicegate(default_limits="1/minute")

    @lim.limit("2/minute")
    async def chat(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("hi")
        await ws.close()

    async def free(ws: WebSocket) -> None:
        await ws.accept()
        await ws.close()

    app = Starlette(routes=[WebSocketRoute("/chat", chat), WebSocketRoute("/free", free)])
    app.add_middleware(RateLimitMiddleware, limiter=lim)
    with TestClient(app) as client:
        for _ in range(2):
            with client.websocket_connect("/chat") as ws:
                assert ws.receive_text() == "hi"
        with pytest.raises(WebSocketDisconnect) as refused:
            with client.websocket_connect("/chat") as ws:
                ws.receive_text()
        assert refused.value.code == 1008
        for _ in range(3):  # the default limits count HTTP requests only
            with client.websocket_connect("/free"):
                pass


def test_an_app_or_router_dependency_limits_websockets_too() -> None:
    """A dependency of the app or a router reaches its WebSocket routes: every connection
    failed (``__call__() missing 1 required positional argument: 'request'``, FastAPI gives a
    WebSocket route no ``Request``). It counts the handshakes, and a refused one is closed
    before it is accepted (1008), as ``@limit`` on a WebSocket endpoint is."""
    from starlette.websockets import WebSocketDisconnect

    limiter = Sluicegate()
    # deduct_when too: a handshake has no response to judge, and counts.
    router = APIRouter(dependencies=[Depends(limiter.dependency("2/minute", deduct_when=lambda r: r.status_code < 500))])

    @router.websocket("/ws")
    async def ws_route(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("hi")
        await ws.close()

    app = FastAPI(dependencies=[Depends(limiter.dependency("5/minute", name="app-wide"))])
    app.include_router(router)

    @app.get("/plain")
    async def plain() -> str:
        return "ok"

    with TestClient(app) as client:
        for _ in range(2):
            with client.websocket_connect("/ws") as ws:
                assert ws.receive_text() == "hi"
        with pytest.raises(WebSocketDisconnect) as refused:
            with client.websocket_connect("/ws") as ws:
                ws.receive_text()
        assert refused.value.code == 1008
        # The app-wide limit counted the two handshakes admitted (the third's token given back
        # when the router's limit refused it): three HTTP requests are left.
        assert statuses(client, "/plain", 4) == [200, 200, 200, 429]


def test_async_key_cost_and_skip_functions_are_awaited_on_every_store() -> None:
    """On the memory store the checks were not awaited: an async key function's coroutine was
    the key (its repr, a new bucket for every request), an async skip's a truthy answer."""

    async def api_key(request: Request) -> str:
        return request.headers.get("X-Api-Key", "anon")

    async def internal(request: Request) -> bool:
        return request.headers.get("X-Internal") == "yes"

    async def size(request: Request) -> int:
        return int(request.query_params.get("n", "1"))

    limiter = Sluicegate(default_limits="1/minute; burst=2", key_func=api_key, skip=internal)
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/default")
    async def default() -> str:
        return "ok"

    @app.get("/dep", dependencies=[Depends(limiter.dependency("1/minute; burst=2"))])
    async def dep() -> str:
        return "ok"

    @app.get("/heavy")
    @limiter.limit("1/minute; burst=3", cost=size)
    async def heavy() -> str:
        return "ok"

    client = TestClient(app)
    for path in ("/default", "/dep"):
        assert statuses(client, path, 3, headers={"X-Api-Key": "a"}) == [200, 200, 429]
        assert statuses(client, path, 1, headers={"X-Api-Key": "b"}) == [200]
        assert statuses(client, path, 2, headers={"X-Api-Key": "a", "X-Internal": "yes"}) == [200, 200]
    assert client.get("/heavy", params={"n": 2}).status_code == 200
    assert client.get("/heavy", params={"n": 2}).status_code == 429

    # A dependency's own async key, on an app whose other functions are plain.
    plain = Sluicegate()
    bare = FastAPI()

    @bare.get("/x", dependencies=[Depends(plain.dependency("1/minute; burst=1", key=api_key))])
    async def x() -> str:
        return "x"

    client = TestClient(bare)
    assert statuses(client, "/x", 2, headers={"X-Api-Key": "a"}) == [200, 429]


def test_limit_without_the_middleware_is_an_error() -> None:
    """``@limit`` alone enforced nothing: a request the middleware does not serve is a
    RuntimeError, not a request let through unlimited."""

    def make(middleware: bool) -> tuple[FastAPI, Sluicegate]:
        limiter = Sluicegate()
        app = FastAPI()
        if middleware:
            app.add_middleware(RateLimitMiddleware, limiter=limiter)

        @app.get("/limited")
        @limiter.limit("1/minute; burst=1")
        async def limited(q: int = 0) -> int:
            return q

        @app.get("/sync")
        @limiter.limit("1/minute; burst=1")
        def sync() -> str:
            return "sync"

        return app, limiter

    app, limiter = make(middleware=False)
    client = TestClient(app)
    for path in ("/limited", "/sync"):
        with pytest.raises(RuntimeError, match="RateLimitMiddleware"):
            client.get(path)
    limiter.enabled = False
    assert client.get("/limited", params={"q": 3}).json() == 3

    # With the middleware, the wrapped endpoint keeps its signature and is limited.
    app, _ = make(middleware=True)
    client = TestClient(app)
    assert client.get("/limited", params={"q": 3}).json() == 3
    assert client.get("/limited").status_code == 429
    assert statuses(client, "/sync", 2) == [200, 429]


def test_a_dependencys_rejection_is_answered_by_on_breach() -> None:
    def on_breach(request: Request, error: RateLimited) -> PlainTextResponse:
        return PlainTextResponse(f"slow down, {request.url.path}", status_code=429)

    limiter = Sluicegate(on_breach=on_breach)
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/dep", dependencies=[Depends(limiter.dependency("1/minute; burst=1", policy="dep"))])
    async def dep() -> str:
        return "dep"

    client = TestClient(app)
    assert client.get("/dep").status_code == 200
    rejected = client.get("/dep")
    assert (rejected.status_code, rejected.text) == (429, "slow down, /dep")
    assert rejected.headers["Retry-After"] == "60" and rejected.headers["RateLimit"] == '"dep";r=0;t=60'

    # Without the middleware nothing would call on_breach: an error, not another answer.
    bare = FastAPI()

    @bare.get("/x", dependencies=[Depends(limiter.dependency("1/minute; burst=1"))])
    async def x() -> str:
        return "x"

    client = TestClient(bare)
    assert client.get("/x").status_code == 200
    with pytest.raises(RuntimeError, match="on_breach"):
        client.get("/x")


def api_key(request: Request) -> str:
    """slowapi users' key function: the API key, a 401 when it is missing."""
    from fastapi import HTTPException as FastAPIHTTPException

    found = request.headers.get("X-Api-Key")
    if found is None:
        raise FastAPIHTTPException(401, "an API key is required", headers={"WWW-Authenticate": "ApiKey"})
    return found


@pytest.mark.parametrize("where", ["key", "async key", "cost", "skip", "default key"])
def test_an_http_exception_of_a_key_function_is_the_apps_answer_under_the_middleware(where: str) -> None:
    """A key (or cost, or skip) function that raises FastAPI's ``HTTPException(401)``: the 401
    FastAPI sends for it in a dependency (JSON ``detail``, its headers), not a 500 (the
    middleware runs outside the app's ExceptionMiddleware)."""

    async def async_key(request: Request) -> str:
        return api_key(request)

    def cost(request: Request) -> int:
        api_key(request)
        return 1

    def skip(request: Request) -> bool:
        api_key(request)
        return False

    options: dict[str, Any] = {
        "key": {"key": api_key}, "async key": {"key": async_key}, "cost": {"cost": cost}, "skip": {}, "default key": {},
    }[where]  # fmt: skip
    limiter = Sluicegate(
        skip=skip if where == "skip" else None,
        key_func=api_key if where == "default key" else "remote_address",
        default_limits=["1/minute; burst=2"] if where == "default key" else None,
    )
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/limited")
    @limiter.limit("1/minute; burst=2", **options)
    async def limited() -> str:
        return "ok"

    @app.get("/default")
    async def default() -> str:
        return "default"

    client = TestClient(app)
    path = "/default" if where == "default key" else "/limited"
    missing = client.get(path)
    assert missing.status_code == 401, missing.text
    assert missing.json() == {"detail": "an API key is required"}
    assert missing.headers["WWW-Authenticate"] == "ApiKey"
    # The 401s took nothing: a key's two requests, then its 429.
    assert statuses(client, path, 3, headers={"X-Api-Key": "k"}) == [200, 200, 429]


def test_an_http_exception_of_a_key_function_under_plain_starlette_and_a_handler_of_its_own() -> None:
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import JSONResponse

    def key(request: Request) -> str:
        if "X-Api-Key" not in request.headers:
            raise StarletteHTTPException(403, "no key")
        return request.headers["X-Api-Key"]

    limiter = Sluicegate(key_func=key, default_limits=["1/minute"])

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", home)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    got = TestClient(app).get("/")
    assert (got.status_code, got.text) == (403, "no key")  # Starlette's plain text

    async def by_status(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"error": str(getattr(error, "detail", ""))}, status_code=403)

    app = Starlette(routes=[Route("/", home)], exception_handlers={403: by_status})
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    got = TestClient(app).get("/")
    assert (got.status_code, got.json()) == (403, {"error": "no key"})


async def async_breach(request: Request, error: RateLimited) -> PlainTextResponse:
    return PlainTextResponse(f"async: {request.url.path}", status_code=429)


@pytest.mark.parametrize(
    ("on_breach", "status", "body"),
    [
        (lambda request, error: None, 429, "Too Many Requests: retry after 60 s\n"),
        (async_breach, 429, "async: /"),
        (lambda request, error: PlainTextResponse("fine, really"), 429, "fine, really"),
        (lambda request, error: PlainTextResponse("gone fishing", status_code=503), 503, "gone fishing"),
    ],
    ids=["none", "async", "a success made 429", "an error status kept"],
)
def test_on_breach_like_flasks(on_breach: Any, status: int, body: str) -> None:
    """None (a notification) is the default 429, an ``async def`` handler is awaited, and a
    rejection is never answered as a success; the fields are on every answer (they were 500s,
    and a 200 for a success)."""
    limiter = Sluicegate(default_limits=["1/minute"], on_breach=on_breach)

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", home)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    client = TestClient(app)
    assert client.get("/").status_code == 200
    rejected = client.get("/")
    assert (rejected.status_code, rejected.text) == (status, body)
    assert rejected.headers["Retry-After"] == "60" and rejected.headers["RateLimit"] == '"default";r=0;t=60'


def test_on_breach_answering_anything_but_a_response_is_a_type_error_that_says_so() -> None:
    limiter = Sluicegate(default_limits=["1/minute"], on_breach=lambda request, error: {"detail": "slow down"})
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/")
    async def home() -> str:
        return "ok"

    client = TestClient(app)
    assert client.get("/").status_code == 200
    with pytest.raises(TypeError, match="returned dict: it must return a starlette Response .* or None"):
        client.get("/")


def test_a_limit_above_the_routes_decorator_is_warned_of_at_the_first_request(caplog: pytest.LogCaptureFixture) -> None:
    """``@limiter.limit`` above ``@app.get(...)``: FastAPI registered the function before the
    limit wrapped it, so the route is silently without its limit. The middleware says so,
    once, at its first request."""
    limiter = Sluicegate()
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @limiter.limit("1/minute")
    @app.get("/misplaced")
    async def misplaced() -> str:
        return "unlimited"

    @app.get("/placed")
    @limiter.limit("1/minute")
    async def placed() -> str:
        return "limited"

    client = TestClient(app)
    with caplog.at_level("WARNING", logger="sluicegate"):
        assert statuses(client, "/misplaced", 3) == [200, 200, 200]
        assert statuses(client, "/placed", 2) == [200, 429]
    warned = [r.getMessage() for r in caplog.records if "above the route's decorator" in r.getMessage()]
    assert len(warned) == 1 and "misplaced" in warned[0], warned


def test_enabled_may_be_turned_off_and_on_at_runtime() -> None:
    limiter = Sluicegate(default_limits=["1/minute"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/dep", dependencies=[Depends(limiter.dependency("1/minute"))])
    async def dep() -> str:
        return "dep"

    @app.get("/")
    async def home() -> str:
        return "ok"

    client = TestClient(app)
    limiter.enabled = False
    assert statuses(client, "/", 3) == [200] * 3 and statuses(client, "/dep", 3) == [200] * 3
    limiter.enabled = True
    assert statuses(client, "/", 2) == [200, 429] and statuses(client, "/dep", 2) == [200, 429]
    for _, keyed in limiter.limiters():
        keyed.clear()
    assert statuses(client, "/", 2) == [200, 429]
