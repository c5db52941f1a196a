"""What people expect of a web limiter, in every adapter: a skip (allowlist) hook, a global off
switch, and counting that depends on the response (``deduct_when``: a refused response gets
its tokens back through the core's refund)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import flask
import pytest
from django.http import HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache
from fastapi import Depends, FastAPI
from fastapi.responses import PlainTextResponse
from redis_server import RedisServer
from starlette.testclient import TestClient
from test_redis import url

from sluicegate import InvalidOptionError, Quota
from sluicegate.django import ratelimit
from sluicegate.flask import Sluicegate as FlaskSluicegate
from sluicegate.starlette import RateLimitMiddleware
from sluicegate.starlette import Sluicegate as StarletteSluicegate


def succeeded(response: Any) -> bool:
    return bool(response.status_code < 400)


def internal(request: Any) -> bool:
    headers = getattr(request, "headers", None)
    return bool(headers is not None and headers.get("X-Internal") == "yes")


#: Status sequences every adapter must answer alike: (query status, expected status).
#: `/counted` is 1/minute with burst 2 and deduct_when=succeeded: failures are free.
FAILURES_ARE_FREE = [(500, 500), (404, 404), (200, 200), (500, 500), (200, 200), (200, 429), (500, 429)]


# -- Flask -------------------------------------------------------------------------------------


def flask_app(**options: Any) -> flask.Flask:
    app = flask.Flask(__name__)
    app.config["SLUICEGATE_DEFAULT_LIMITS"] = ["1/minute; burst=1"]
    limiter = FlaskSluicegate(**options)

    @app.get("/counted")
    @limiter.limit("1/minute; burst=2", deduct_when=succeeded)
    def counted() -> Any:
        return "x", int(flask.request.args["status"])

    @app.get("/plain")
    def plain() -> str:
        return "plain"

    limiter.init_app(app)
    return app


def test_flask_deduct_when() -> None:
    client = flask_app().test_client()
    assert [client.get(f"/counted?status={s}").status_code for s, _ in FAILURES_ARE_FREE] == [
        e for _, e in FAILURES_ARE_FREE
    ]


def test_flask_a_view_raising_rate_limited_is_settled_by_its_429() -> None:
    """A view that raises RateLimited itself (an inner limit of its own): its 429 is a
    response deduct_when refuses, so the view's limit gets its token back."""
    import sluicegate

    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)
    spent = sluicegate.Limiter("1/h; burst=1")
    spent.try_acquire()
    raising = [True]

    @app.get("/inner")
    @limiter.limit("1/minute; burst=2", deduct_when=succeeded)
    def inner() -> str:
        if raising[0]:
            raise sluicegate.RateLimited(spent.try_acquire())
        return "ok"

    client = app.test_client()
    assert [client.get("/inner").status_code for _ in range(4)] == [429] * 4
    raising[0] = False
    assert [client.get("/inner").status_code for _ in range(3)] == [200, 200, 429]


def test_a_full_key_store_is_a_429_in_every_adapter() -> None:
    """A new client at a limit's key bound, every bucket in use (none full to evict): a 429
    with Retry-After 1, as sluicegate-tower answers, not a 500."""
    app = flask.Flask(__name__)
    app.config.update(SLUICEGATE_DEFAULT_LIMITS=["1/minute; burst=5"], SLUICEGATE_MAX_KEYS=1)
    app.get("/plain")(lambda: "plain")
    FlaskSluicegate(app)
    client = app.test_client()
    assert client.get("/plain", environ_base={"REMOTE_ADDR": "10.0.0.1"}).status_code == 200
    full = client.get("/plain", environ_base={"REMOTE_ADDR": "10.0.0.2"})
    assert (full.status_code, full.headers["Retry-After"]) == (429, "1")

    with django_settings(MAX_KEYS=1):
        assert Client(REMOTE_ADDR="10.0.0.1").get("/plain").status_code == 200
        full = Client(REMOTE_ADDR="10.0.0.2").get("/plain")
        assert (full.status_code, full["Retry-After"]) == (429, "1")

    limiter = StarletteSluicegate(default_limits=["1/minute; burst=5"], max_keys=1)
    sapp = FastAPI()
    sapp.add_middleware(RateLimitMiddleware, limiter=limiter)
    per_route = limiter.dependency("1/minute; burst=5", max_keys=1)

    @sapp.get("/plain")
    async def splain() -> str:
        return "plain"

    @sapp.get("/dep", dependencies=[Depends(per_route)])
    async def dep() -> str:
        return "dep"

    for path in ("/plain", "/dep"):
        assert TestClient(sapp, client=("10.0.0.1", 1)).get(path).status_code == 200
        full = TestClient(sapp, client=("10.0.0.2", 1)).get(path)
        assert (full.status_code, full.headers["Retry-After"]) == (429, "1"), path


def test_an_unreachable_redis_store_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """A Redis host that cannot be reached (a typo, a server down) at a worker's first
    request: the limits go to the URL's on_error policy (local: each process alone) with a
    warning, once per store, the password not shown. It was silent: a misspelt host turned a
    shared limit into one per worker, and nothing said so."""
    caplog.set_level("WARNING", logger="sluicegate")
    app = flask.Flask(__name__)
    app.config.update(SLUICEGATE_STORAGE="redis://user:s3cret@127.0.0.1:1/0?timeout=100ms")
    limiter = FlaskSluicegate(app)
    app.get("/a", endpoint="a")(limiter.limit("5/minute")(lambda: "a"))
    app.get("/b", endpoint="b")(limiter.limit("5/minute")(lambda: "b"))
    client = app.test_client()
    assert [client.get(p).status_code for p in ("/a", "/a", "/b")] == [200, 200, 200]
    warned = [r.getMessage() for r in caplog.records if r.name == "sluicegate" and "cannot reach" in r.getMessage()]
    assert len(warned) == 1 and "127.0.0.1:1" in warned[0] and "s3cret" not in warned[0], warned
    assert "(on_error=local, the default: by each process alone" in warned[0], warned
    # The warning names the URL's own policy (it said local whatever the URL said).
    caplog.clear()
    app = flask.Flask(__name__)
    # (The policy's name in any case, as the core reads it.)
    app.config.update(SLUICEGATE_STORAGE="redis://127.0.0.1:1/0?timeout=100ms&on_error=Closed")
    limiter = FlaskSluicegate(app)
    app.get("/c", endpoint="c")(limiter.limit("5/minute")(lambda: "c"))
    assert app.test_client().get("/c").status_code == 429
    warned = [r.getMessage() for r in caplog.records if r.name == "sluicegate" and "cannot reach" in r.getMessage()]
    assert len(warned) == 1 and "(on_error=closed: every request refused)" in warned[0], warned


def test_the_settings_key_bound_applies_to_decorated_limits(tmp_path: Any) -> None:
    """``SLUICEGATE_MAX_KEYS`` (Flask) and ``SLUICEGATE["MAX_KEYS"]`` (Django) bound every
    limit that sets none of its own: the decorated ones had the core's default (2^20 keys, a
    38 MB region on a shared-memory store). And a new bound opens a new region: the old one
    keeps its capacity, and every worker of a redeploy failed to boot on the mismatch."""
    from sluicegate._web import region_suffix

    def flask_statuses(max_keys: int) -> list[int]:
        app = flask.Flask(__name__)
        app.config.update(SLUICEGATE_MAX_KEYS=max_keys, SLUICEGATE_STORAGE=f"shm:{tmp_path}/flask")
        limiter = FlaskSluicegate(app)
        app.get("/limited")(limiter.limit("5/minute")(lambda: "limited"))
        client = app.test_client()
        return [client.get("/limited", environ_base={"REMOTE_ADDR": f"10.0.0.{i}"}).status_code for i in range(4)]

    assert flask_statuses(2) == [200, 200, 429, 429]
    assert flask_statuses(3) == [200, 200, 200, 429]  # a new region, not a mismatch
    regions = sorted(p.name for p in tmp_path.iterdir())
    assert len(regions) == 2, regions

    with django_settings(MAX_KEYS=2, DEFAULT_LIMITS=[]):
        statuses = [Client(REMOTE_ADDR=f"10.0.1.{i}").get("/batch").status_code for i in range(4)]
        assert statuses == [200, 200, 429, 429]
    assert region_suffix(Quota("5/minute"), "v#0") != region_suffix(Quota("5/minute"), "v#0", 2)
    assert region_suffix(Quota("5/minute"), "v#0") == region_suffix(Quota("5/minute"), "v#0", None)


def test_a_capacity_in_the_store_string_names_the_region(tmp_path: Any) -> None:
    """``?capacity=N`` in ``SLUICEGATE_STORAGE`` is the region's key bound as ``MAX_KEYS`` is:
    a redeploy with another capacity opens a new region (it named the old one, whose
    capacity refused it: a mismatch in every worker). Redis keeps no bound: none names it."""

    def flask_statuses(store: str) -> list[int]:
        app = flask.Flask(__name__)
        app.config.update(SLUICEGATE_STORAGE=store)
        limiter = FlaskSluicegate(app)
        app.get("/limited")(limiter.limit("5/minute")(lambda: "limited"))
        client = app.test_client()
        return [client.get("/limited", environ_base={"REMOTE_ADDR": f"10.0.0.{i}"}).status_code for i in range(4)]

    assert flask_statuses(f"shm:{tmp_path}/flask?capacity=2") == [200, 200, 429, 429]
    assert flask_statuses(f"shm:{tmp_path}/flask?capacity=3") == [200, 200, 200, 429]  # a new region
    assert len(list(tmp_path.iterdir())) == 2
    from sluicegate._web import region_bound

    assert region_bound(f"shm:{tmp_path}/x?capacity=7", None) == 7
    assert region_bound(f"shm:{tmp_path}/x?capacity=0007", 7) == 7
    assert region_bound(f"shm:{tmp_path}/x", 5) == 5
    assert region_bound(f"shm:{tmp_path}/x", None) is None
    assert region_bound("redis://127.0.0.1:6379/0?prefix=p", 5) is None
    assert region_bound("memory", 5) == 5


def test_a_cost_beyond_the_burst_is_refused_when_declared_and_429_when_computed() -> None:
    """A fixed cost more than the burst would refuse every request: an InvalidOptionError when
    the limit is declared. A cost computed from the request (a batch's size) beyond the burst
    is the client's doing: a 429 that says when the bucket is full again, as the peers answer,
    not a 500 a client could fill the error log with (the core's InsufficientCapacity)."""
    for declare in (
        lambda: FlaskSluicegate().limit("5/minute", cost=6),
        lambda: ratelimit("5/minute", cost=6),
        lambda: StarletteSluicegate().limit("5/minute", cost=6),
        lambda: StarletteSluicegate().dependency("5/minute", cost=6),
        lambda: StarletteSluicegate().limit("5/minute", cost=-1),
        lambda: FlaskSluicegate().limit("5/minute", cost=True),
        lambda: FlaskSluicegate().limit("5/minute", cost=1.5),
    ):
        with pytest.raises(InvalidOptionError) as info:
            declare()
        assert info.value.option == "cost"
    # At the burst is fine: a full bucket admits it.
    FlaskSluicegate().limit("5/minute", cost=5)

    def n(request: Any) -> int:
        for name in ("args", "GET", "query_params"):  # Flask, Django, Starlette
            if hasattr(request, name):
                return int(getattr(request, name).get("n", "1"))
        raise AssertionError(request)

    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)
    app.get("/batch")(limiter.limit("5/minute", cost=n)(lambda: "batch"))
    client = app.test_client()
    over = client.get("/batch?n=6")
    assert (over.status_code, over.headers["Retry-After"]) == (429, "60")
    assert over.headers["RateLimit"] == '"default";r=0;t=60'
    # Refused, it took nothing: the whole burst is still there.
    assert [client.get("/batch?n=5").status_code, client.get("/batch").status_code] == [200, 429]

    with django_settings(DEFAULT_LIMITS=[]):
        django = Client()
        assert (django.get("/batch?n=6").status_code, django.get("/batch?n=6")["Retry-After"]) == (429, "60")
        assert [django.get("/batch?n=5").status_code, django.get("/batch").status_code] == [200, 429]

    slimiter = StarletteSluicegate()
    sapp = FastAPI()
    sapp.add_middleware(RateLimitMiddleware, limiter=slimiter)

    @sapp.get("/batch")
    @slimiter.limit("5/minute", cost=n)
    async def sbatch() -> str:
        return "batch"

    @sapp.get("/dep", dependencies=[Depends(slimiter.dependency("5/minute", cost=n))])
    async def dep() -> str:
        return "dep"

    sclient = TestClient(sapp)
    for where in ("/batch", "/dep"):
        over = sclient.get(f"{where}?n=6")
        assert (over.status_code, over.headers["Retry-After"]) == (429, "60"), where
        assert [sclient.get(f"{where}?n=5").status_code, sclient.get(where).status_code] == [200, 429], where


def test_a_shadow_limit_the_store_refuses_lets_the_request_through(caplog: pytest.LogCaptureFixture) -> None:
    """A shadow limit never refuses, also where its store does (a new key at the key bound, a
    cost beyond its burst): the request goes on and the refusal is logged."""
    caplog.set_level("INFO", logger="sluicegate")
    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)

    @app.get("/tried")
    @limiter.limit("1/minute; burst=2", shadow=True, max_keys=1, cost=lambda request: int(request.args["n"]))
    @limiter.limit("1/minute; burst=9")
    def tried() -> str:
        return "tried"

    client = app.test_client()
    assert client.get("/tried?n=1", environ_base={"REMOTE_ADDR": "10.0.0.1"}).status_code == 200
    assert client.get("/tried?n=1", environ_base={"REMOTE_ADDR": "10.0.0.2"}).status_code == 200
    assert client.get("/tried?n=3", environ_base={"REMOTE_ADDR": "10.0.0.1"}).status_code == 200
    records = shadow_records(caplog)
    assert len(records) == 2 and "key store full" in records[0] and "exceeds the capacity 2" in records[1]


def test_flask_deduct_when_with_exceptions_propagating() -> None:
    """Testing (or debugging): a view's exception propagates and after_request never runs;
    the request is settled as the 500 a server would send, so it is free."""
    app = flask_app()
    app.config["TESTING"] = True

    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("boom")

    limiter = app.extensions["sluicegate"][0]
    boom_rules = limiter.limit("1/minute; burst=2", deduct_when=succeeded)
    app.view_functions["boom"] = boom_rules(boom)
    client = app.test_client()
    for _ in range(3):
        with pytest.raises(RuntimeError):
            client.get("/boom")
    assert boom.__sluicegate_limits__[0].limiter().peek("127.0.0.1").remaining == 2  # type: ignore[attr-defined]


def test_flask_skip_and_off_switch() -> None:
    client = flask_app(skip=internal).test_client()
    assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
    assert [client.get("/plain", headers={"X-Internal": "yes"}).status_code for _ in range(3)] == [200] * 3
    off = flask.Flask(__name__)
    off.config.update(SLUICEGATE_ENABLED=False, SLUICEGATE_DEFAULT_LIMITS=["1/minute; burst=1"])
    off.get("/plain")(lambda: "plain")
    FlaskSluicegate(off)
    assert [off.test_client().get("/plain").status_code for _ in range(3)] == [200] * 3


# -- Django (this module is its URL conf) ------------------------------------------------------


@ratelimit("1/minute; burst=2", deduct_when=succeeded)
def counted(request: Any) -> HttpResponse:
    return HttpResponse("x", status=int(request.GET["status"]))


@ratelimit("1/minute; burst=2", deduct_when=succeeded)
async def acounted(request: Any) -> HttpResponse:
    return HttpResponse("x", status=int(request.GET["status"]))


def plain(request: Any) -> HttpResponse:
    return HttpResponse("plain")


@ratelimit("5/minute", cost=lambda request: int(request.GET.get("n", "1")))
def batch(request: Any) -> HttpResponse:
    return HttpResponse("batch")


urlpatterns = [path("counted", counted), path("acounted", acounted), path("plain", plain), path("batch", batch)]


def django_settings(**sluicegate: Any) -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["sluicegate.django.RateLimitMiddleware"],
        SLUICEGATE={"DEFAULT_LIMITS": ["1/minute; burst=1"], **sluicegate},
    )


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_django_deduct_when(redis_server: RedisServer, store: str) -> None:
    storage = "memory" if store == "memory" else url(redis_server, on_error="error")
    with django_settings(STORAGE=storage):
        client = Client()
        got = [client.get(f"/counted?status={s}").status_code for s, _ in FAILURES_ARE_FREE]
        assert got == [e for _, e in FAILURES_ARE_FREE]

        async def main() -> list[int]:
            client = AsyncClient()
            return [(await client.get(f"/acounted?status={s}")).status_code for s, _ in FAILURES_ARE_FREE]

        assert asyncio.run(main()) == [e for _, e in FAILURES_ARE_FREE]


def test_django_skip_and_off_switch() -> None:
    with django_settings(SKIP=f"{__name__}.internal"):
        client = Client()
        assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
        assert [client.get("/plain", HTTP_X_INTERNAL="yes").status_code for _ in range(3)] == [200] * 3
        assert [client.get("/counted?status=200", HTTP_X_INTERNAL="yes").status_code for _ in range(3)] == [200] * 3
    with django_settings(ENABLED=False):
        assert [Client().get("/plain").status_code for _ in range(3)] == [200] * 3


def test_django_rejects_an_unknown_skip() -> None:
    with django_settings(SKIP=f"{__name__}.nothing_here"), pytest.raises(ImportError):
        Client().get("/plain")


# -- Starlette / FastAPI -----------------------------------------------------------------------


def fastapi_app(**options: Any) -> FastAPI:
    limiter = StarletteSluicegate(default_limits=["1/minute; burst=1"], **options)
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/counted")
    @limiter.limit("1/minute; burst=2", deduct_when=succeeded)
    async def counted(status: int) -> PlainTextResponse:
        return PlainTextResponse("x", status_code=status)

    @app.get("/dep", dependencies=[Depends(limiter.dependency("1/minute; burst=2", deduct_when=succeeded))])
    async def dep(status: int) -> PlainTextResponse:
        if status == 500:
            raise RuntimeError("the handler failed")
        return PlainTextResponse("x", status_code=status)

    @app.get("/plain")
    async def plain() -> str:
        return "plain"

    return app


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_starlette_deduct_when(redis_server: RedisServer, store: str) -> None:
    storage = "memory" if store == "memory" else url(redis_server, on_error="error")
    client = TestClient(fastapi_app(storage=storage), raise_server_exceptions=False)
    for route in ("/counted", "/dep"):
        got = [client.get(f"{route}?status={s}").status_code for s, _ in FAILURES_ARE_FREE]
        assert got == [e for _, e in FAILURES_ARE_FREE], route


def test_starlette_skip_and_off_switch() -> None:
    client = TestClient(fastapi_app(skip=internal))
    assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
    assert [client.get("/plain", headers={"X-Internal": "yes"}).status_code for _ in range(3)] == [200] * 3
    assert [client.get("/dep?status=200", headers={"X-Internal": "yes"}).status_code for _ in range(4)] == [200] * 4
    off = TestClient(fastapi_app(enabled=False))
    assert [off.get("/plain").status_code for _ in range(3)] == [200] * 3


# -- admin: get (peek) and reset ---------------------------------------------------------------


def test_flask_get_and_reset() -> None:
    app = flask_app()
    client = app.test_client()
    limiter = app.extensions["sluicegate"][0]
    assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
    assert client.get("/counted?status=200").status_code == 200
    with app.app_context():
        assert limiter.get("127.0.0.1", "plain").remaining == 0
        assert limiter.get("127.0.0.1", "counted").remaining == 1
        assert limiter.get("10.0.0.1", "plain").remaining == 1  # a peek takes nothing
        assert limiter.get("10.0.0.1", "plain").remaining == 1
        assert limiter.reset("127.0.0.1", "plain") == 1
        assert limiter.reset("127.0.0.1", "plain") == 0
    assert client.get("/plain").status_code == 200


def test_django_get_and_reset() -> None:
    from sluicegate.django import get, reset

    with django_settings():
        client = Client()
        assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
        assert get("127.0.0.1", plain).remaining == 0
        assert reset("127.0.0.1", plain) == 1
        assert client.get("/plain").status_code == 200
        # The view's own limit lives as long as the view (other tests used it): reset it.
        reset("127.0.0.1", counted)
        assert get("127.0.0.1", counted).remaining == 2
        assert client.get("/counted?status=200").status_code == 200
        assert get("127.0.0.1", counted).remaining == 1


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_starlette_limits_of_one_request_are_all_or_nothing(redis_server: RedisServer, store: str) -> None:
    """The middleware's default limits, an app-wide dependency and a route's dependency decide
    one request: when a later one rejects it, what the earlier ones took goes back. A
    rejected request took the app-wide limit's token for nothing, and the next requests of
    the client were refused by a limit they were within."""
    storage = "memory" if store == "memory" else url(redis_server, on_error="error")
    limiter = StarletteSluicegate(default_limits=["5/minute"], storage=storage)
    app_wide = limiter.dependency("3/minute", name="app")
    app = FastAPI(dependencies=[Depends(app_wide)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    tight = limiter.dependency("1/minute", deduct_when=succeeded)

    @app.get("/tight", dependencies=[Depends(tight)])
    async def tight_route() -> str:
        return "tight"

    @app.get("/other")
    async def other() -> str:
        return "other"

    client = TestClient(app)
    assert [client.get("/tight").status_code for _ in range(3)] == [200, 429, 429]
    # The two refused requests gave the app-wide and the default limits their tokens back:
    # the app-wide limit (3) has 2 left, and /other's default limit (its own route) is whole.
    assert [client.get("/other").status_code for _ in range(3)] == [200, 200, 429]
    assert app_wide.get("testclient").remaining == 0


def test_starlette_get_and_reset() -> None:
    limiter = StarletteSluicegate(default_limits=["1/minute; burst=1"])
    shared = limiter.dependency("1/minute; burst=2", name="search")
    per_route = limiter.dependency("1/minute; burst=2")
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/items/{item}")
    async def items(item: int) -> int:
        return item

    @app.get("/search", dependencies=[Depends(shared)])
    async def search() -> str:
        return "s"

    @app.get("/own", dependencies=[Depends(per_route)])
    async def own() -> str:
        return "o"

    client = TestClient(app)
    assert [client.get("/items/1").status_code for _ in range(2)] == [200, 429]
    assert limiter.get("testclient", route="/items/{item}").remaining == 0
    assert limiter.reset("testclient", route="/items/{item}") == 1
    assert client.get("/items/2").status_code == 200
    client.get("/search")
    assert limiter.get("testclient", name="search").remaining == 1
    client.get("/own")
    assert per_route.get("testclient", "/own").remaining == 1
    assert per_route.reset("testclient", "/own") == 1
    assert per_route.get("testclient", "/own").remaining == 2
    with pytest.raises(TypeError, match="one of"):
        limiter.get("testclient")


# -- shared limits across views, several limits on one view ------------------------------------


def test_flask_shared_and_stacked_limits() -> None:
    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)

    @app.get("/a")
    @limiter.limit("1/minute; burst=3", name="search")
    def a() -> str:
        return "a"

    @app.get("/b")
    @limiter.limit("100/minute; burst=1", key=lambda _: "everyone")
    @limiter.limit("1/minute; burst=3", name="search")
    def b() -> str:
        return "b"

    client = app.test_client()
    assert [client.get(p).status_code for p in ("/a", "/b", "/b", "/a", "/a")] == [200, 200, 429, 200, 429]
    with pytest.raises(ValueError, match="other rates"):
        limiter.limit("5/minute", name="search")(lambda: "c")
    # Other options under one name were silently the first declaration's.
    with pytest.raises(ValueError, match="shadow=True"):
        limiter.limit("1/minute; burst=3", name="search", shadow=True)(lambda: "d")
    with pytest.raises(ValueError, match="cost=2"):
        limiter.limit("1/minute; burst=3", name="search", cost=2)(lambda: "e")
    limiter.limit("1/minute; burst=3", name="search")(lambda: "f")  # the same options: fine


def test_django_shared_limits() -> None:
    @ratelimit("1/minute; burst=2", name="django-shared")
    def one(request: Any) -> HttpResponse:
        return HttpResponse("1")

    @ratelimit("1/minute; burst=2", name="django-shared")
    def two(request: Any) -> HttpResponse:
        return HttpResponse("2")

    from django.test import RequestFactory

    factory = RequestFactory()
    with django_settings():
        assert [v(factory.get("/")).status_code for v in (one, two, one)] == [200, 200, 429]


@ratelimit("1/minute; burst=3", policy="loose")
@ratelimit("1/minute; burst=2", policy="tight")
def stacked(request: Any) -> HttpResponse:
    return HttpResponse("stacked")


urlpatterns.append(path("stacked", stacked))


def test_django_two_enforcing_limits_on_one_view() -> None:
    """Both limits count every admitted request, and the response reports the tighter one;
    when the tighter one (asked second: the outer decorator's limit is asked first) rejects,
    the looser one gets back the token it had just taken, so a rejected request costs
    nothing anywhere (the project's all-or-nothing rule for several limits)."""
    loose, tight = stacked.__sluicegate_limits__  # type: ignore[attr-defined]
    assert (loose.policy, tight.policy) == ("loose", "tight")

    def left(rule: Any) -> int:
        return int(rule.limiter().peek("127.0.0.1").remaining)

    with django_settings():
        from sluicegate.django import get, reset

        reset("127.0.0.1", stacked)
        client = Client()
        first = client.get("/stacked")
        assert first.status_code == 200 and first["RateLimit"].startswith('"tight";r=1;')
        assert (left(loose), left(tight)) == (2, 1)
        assert client.get("/stacked").status_code == 200
        assert (left(loose), left(tight)) == (1, 0)
        for _ in range(3):
            denied = client.get("/stacked")
            assert denied.status_code == 429 and denied["RateLimit"].startswith('"tight";r=0;')
            # The loose limit took a token for each and was refunded it.
            assert (left(loose), left(tight)) == (1, 0)
        assert get("127.0.0.1", stacked).remaining == 0  # type: ignore[union-attr]
        assert reset("127.0.0.1", stacked) == 2
        assert (left(loose), left(tight)) == (3, 2)


def editing(edit: Any) -> Any:
    """An unrelated decorator that edits the view's response (its wrapper copies the view's
    attributes, ours included)."""

    def decorate(view: Any) -> Any:
        @functools.wraps(view)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> HttpResponse:
            response = view(request, *args, **kwargs)
            edit(response)
            return response

        return wrapper

    return decorate


def tag(response: Any) -> None:
    response["X-Tagged"] = "yes"


def serve_anyway(response: Any) -> None:
    """Serves a refused request's page anyway (a 429 made a 200)."""
    if response.status_code == 429:
        response.status_code = 200


tagged = editing(tag)


@ratelimit("1/minute; burst=3")
@tagged
@ratelimit("1/minute; burst=2")
def between(request: Any) -> HttpResponse:
    return HttpResponse("between")


urlpatterns.append(path("between", between))


def atagged(view: Any) -> Any:
    """`tagged` for async views."""

    @functools.wraps(view)
    async def wrapper(request: Any, *args: Any, **kwargs: Any) -> HttpResponse:
        response = await view(request, *args, **kwargs)
        tag(response)
        return response

    return wrapper


@ratelimit("1/minute; burst=3")
@atagged
@ratelimit("1/minute; burst=2")
async def abetween(request: Any) -> HttpResponse:
    return HttpResponse("between")


urlpatterns.append(path("abetween", abetween))


@ratelimit("1/minute; burst=3")
@tagged
def raising(request: Any) -> HttpResponse:
    """Refuses by raising, as a view's own check does (the middleware answers the 429)."""
    if "refuse" in request.GET:
        from sluicegate import Decision, RateLimited

        raise RateLimited(Decision.from_figures(allowed=False, limit=1, remaining=0, retry_after_ns=10**9))
    return HttpResponse("raising")


@ratelimit("1/minute; burst=3")
@editing(serve_anyway)
@ratelimit("1/minute; burst=1")
def fallback(request: Any) -> HttpResponse:
    return HttpResponse("fallback")


urlpatterns += [path("raising", raising), path("fallback", fallback)]


def test_django_limits_around_another_decorator() -> None:
    """A decorator between two ``@ratelimit`` runs between their checks: the inner limit is
    checked when the call reaches it, and its rejection (through the other decorator) gives
    the outer limit back its token: all or nothing, as for decorators directly stacked."""
    from sluicegate.django import reset

    def outer_left(view: Any) -> int:
        outer = next(r for r in view.__sluicegate_limits__ if r.quota.burst == 3)
        return int(outer.limiter().peek("127.0.0.1").remaining)

    with django_settings():
        reset("127.0.0.1", between)
        client = Client()
        got = [client.get("/between") for _ in range(4)]
        assert [r.status_code for r in got] == [200, 200, 429, 429]
        assert [r.get("X-Tagged") for r in got] == ["yes"] * 4
        assert got[2]["RateLimit"].startswith('"default";r=0;')
        assert outer_left(between) == 1  # 2 admitted; the two refused took nothing

        reset("127.0.0.1", abetween)

        async def main() -> list[int]:
            aclient = AsyncClient()
            return [(await aclient.get("/abetween")).status_code for _ in range(4)]

        assert asyncio.run(main()) == [200, 200, 429, 429]
        assert outer_left(abetween) == 1

        # RateLimited raised further in: the same.
        reset("127.0.0.1", raising)
        assert [client.get("/raising?refuse").status_code for _ in range(4)] == [429] * 4
        assert outer_left(raising) == 3
        # A 429 a decorator between served as another status: the request was served, and the
        # outer limit keeps what it took.
        reset("127.0.0.1", fallback)
        assert [client.get("/fallback").status_code for _ in range(4)] == [200] * 3 + [429]


@ratelimit("1/minute; burst=2", deduct_when=succeeded)
def crashing(request: Any) -> HttpResponse:
    if "crash" in request.GET:
        raise RuntimeError("the view failed")
    return HttpResponse("x")


@ratelimit("1/minute; burst=2", deduct_when=succeeded)
async def acrashing(request: Any) -> HttpResponse:
    if "crash" in request.GET:
        raise RuntimeError("the view failed")
    return HttpResponse("x")


urlpatterns += [path("crashing", crashing), path("acrashing", acrashing)]

#: (crash?, expected status): the view's exceptions are Django's 500s, which deduct_when
#: refuses, so they are free; then the burst of 2 admits two and refuses the third.
CRASHES_ARE_FREE = [(True, 500), (True, 500), (True, 500), (False, 200), (False, 200), (False, 429), (True, 429)]


def test_django_deduct_when_refunds_a_view_that_raises() -> None:
    """A decorated view that raises: the middleware settles its refunds by the 500 Django
    makes of the exception (the request is free), and that response carries the fields."""
    from sluicegate.django import reset

    with django_settings():
        reset("127.0.0.1", crashing)
        reset("127.0.0.1", acrashing)
        client = Client(raise_request_exception=False)
        got = [client.get("/crashing?crash" if crash else "/crashing") for crash, _ in CRASHES_ARE_FREE]
        assert [r.status_code for r in got] == [e for _, e in CRASHES_ARE_FREE]
        assert got[0]["RateLimit"].startswith('"default";r=1;')

        async def main() -> list[int]:
            aclient = AsyncClient(raise_request_exception=False)
            return [
                (await aclient.get("/acrashing?crash" if crash else "/acrashing")).status_code
                for crash, _ in CRASHES_ARE_FREE
            ]

        assert asyncio.run(main()) == [e for _, e in CRASHES_ARE_FREE]


def test_django_a_later_limit_that_raises_gives_back_what_the_earlier_took() -> None:
    """All or nothing when a limit raises instead of rejecting (its key function here): the
    request goes no further, and the outer limit's token goes back."""

    def no_key(request: Any) -> str:
        raise LookupError("no key for this request")

    @ratelimit("1/minute; burst=2", policy="outer")
    @ratelimit("1/minute; burst=2", key=no_key, policy="inner")
    def view(request: Any) -> HttpResponse:
        return HttpResponse("x")

    outer = view.__sluicegate_limits__[0]  # type: ignore[attr-defined]
    assert outer.policy == "outer"
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    with django_settings():
        for _ in range(3):
            with pytest.raises(LookupError):
                view(request)
        from sluicegate.django import _scope

        assert outer.limiter().peek(f"{_scope(view)}\x00127.0.0.1").remaining == 2


@method_decorator(ratelimit("1/minute; burst=2"), name="dispatch")
class Upload(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("up")


urlpatterns.append(path("upload", Upload.as_view()))


def test_django_method_decorator_on_a_class_based_view() -> None:
    """``@method_decorator(ratelimit(...), name="dispatch")``: Django decorates a new partial
    of the method on every request; the limit is still one limit (it was a new one per
    request, so it never refused)."""
    with django_settings():
        assert [Client().get("/upload").status_code for _ in range(3)] == [200, 200, 429]


#: One decorator on two classes' inherited `dispatch` (a `decorators = [...]` list shared by
#: views does the same).
_shared_decorator = method_decorator(ratelimit("1/minute; burst=2"), name="dispatch")


@_shared_decorator
class Orders(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("orders")


@_shared_decorator
class Invoices(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("invoices")


@method_decorator(ratelimit("1/minute; burst=2"), name="dispatch")
class Receipts(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("receipts")


urlpatterns += [path("orders", Orders.as_view()), path("invoices", Invoices.as_view()), path("receipts", Receipts.as_view())]


@method_decorator(ratelimit("1/minute; burst=2"), name="post")
@method_decorator(ratelimit("1/minute; burst=2"), name="post")
class TwoOnPost(View):
    def post(self, request: Any) -> HttpResponse:
        return HttpResponse("posted")


@method_decorator([ratelimit("1/minute; burst=2"), never_cache], name="dispatch")
class WithNeverCache(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("fresh")


urlpatterns += [path("two-on-post", TwoOnPost.as_view()), path("with-never-cache", WithNeverCache.as_view())]


def test_django_admin_of_method_decorator_views_reads_the_limits_their_requests_spent() -> None:
    """``get``/``reset`` on a view limited through ``method_decorator`` (on ``dispatch`` or
    on ``get``), once this process has served it, read the limits its requests spend. They
    read those of the stand-in function Django decorates to copy the decorator's attributes
    (``..._update_method_wrapper.<locals>.dummy#0``), or, for ``get``'s, the default limits."""
    from django.urls import resolve

    from sluicegate.django import get, reset

    with django_settings():
        client = Client(REMOTE_ADDR="10.6.0.1")
        assert [client.get("/receipts").status_code for _ in range(3)] == [200, 200, 429]
        view = resolve("/receipts").func
        assert get("10.6.0.1", view).remaining == 0  # type: ignore[union-attr]
        assert reset("10.6.0.1", view) == 1
        assert client.get("/receipts").status_code == 200
        # get's own limit (OwnGet: burst 3).
        assert [client.get("/own-get").status_code for _ in range(4)] == [200, 200, 200, 429]
        own_get = resolve("/own-get").func
        found = get("10.6.0.1", own_get)
        assert found is not None and (found.limit, found.remaining) == (3, 0)
        assert reset("10.6.0.1", own_get) == 1
        assert client.get("/own-get").status_code == 200


@pytest.mark.parametrize("store", ["memory", "shm"])
def test_django_method_decorator_forms_keep_their_limits_apart_and_stable(tmp_path: Any, store: str) -> None:
    """Two limits of one rate on one method are two (a region each on shm: each request
    takes one token from each), and a limit under another method decorator is one limit
    across requests (made anew per request, it never refused)."""
    from sluicegate.django import limiters

    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/md-forms"}[store]
    with django_settings(STORAGE=storage):
        client = Client(REMOTE_ADDR=f"10.5.0.{1 + (store == 'shm')}")
        assert [client.post("/two-on-post").status_code for _ in range(3)] == [200, 200, 429]
        before = len(limiters())
        assert [client.get("/with-never-cache").status_code for _ in range(3)] == [200, 200, 429]
        assert len(limiters()) <= before + 1
        names = [labels["limit"] for labels, _ in limiters()]
        assert f"{__name__}.TwoOnPost.post#0" in names and f"{__name__}.TwoOnPost.post#1" in names
        assert f"{__name__}.WithNeverCache.dispatch#0" in names
    if store == "shm":
        regions = sorted(p.name for p in tmp_path.iterdir())
        assert len(regions) == len(set(regions)) >= 3, regions


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_django_method_decorator_on_two_classes_is_two_limits(redis_server: RedisServer, tmp_path: Any, store: str) -> None:
    """Two classes whose inherited ``View.dispatch`` is decorated (by one decorator or two of
    one rate) are two views on every store. Both were named by ``View.dispatch``: one region
    or prefix on shm and Redis (``/invoices`` refused after ``/orders``' two), and one limit
    even in memory for one decorator on both."""
    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/cbv-dispatch", "redis": url(redis_server, on_error="error")}[store]
    with django_settings(STORAGE=storage):
        client = Client(REMOTE_ADDR=f"10.8.0.{['memory', 'shm', 'redis'].index(store) + 1}")
        for route in ("orders", "invoices", "receipts"):
            assert [client.get(f"/{route}").status_code for _ in range(3)] == [200, 200, 429], route


class Page(View):
    text = ""
    extra_context: Any = None

    def get(self, request: Any) -> HttpResponse:
        return HttpResponse(self.text)


page_a = Page.as_view(text="a")
page_c = ratelimit("1/minute; burst=2")(Page.as_view(text="c"))
urlpatterns += [
    path("page-a", page_a),
    path("page-a.json", page_a),  # one view at two routes (as format suffixes make)
    path("page-b", Page.as_view(text="b")),
    path("page-c", page_c),
    path("page-d", ratelimit("1/minute; burst=2")(Page.as_view(text="d"))),
    # One view (one class, the same arguments) under two decorators, at two routes.
    path("page-e", ratelimit("1/minute; burst=2")(Page.as_view(text="e"))),
    path("page-e2", ratelimit("1/minute; burst=2")(Page.as_view(text="e"))),
]


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_django_class_based_views_count_each_on_its_own(redis_server: RedisServer, tmp_path: Any, store: str) -> None:
    """Two ``as_view()`` views of one class (``TemplateView.as_view(template_name=...)`` at two
    routes) are two views: the default limits and a ``@ratelimit`` put on each in the URLconf
    count each on its own, on every store. (They shared the class's buckets: the default
    limits everywhere, the decorated ones on shared memory and Redis.) One such view at two
    routes is one view, and so are two made alike (one class, the same arguments), each under
    a ``@ratelimit`` of the same rate."""
    from sluicegate.django import _scope, get, reset

    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/cbv", "redis": url(redis_server, on_error="error")}[store]
    with django_settings(STORAGE=storage):
        client = Client()
        assert [client.get("/page-a").status_code for _ in range(2)] == [200, 429]
        assert client.get("/page-a.json").status_code == 429
        assert client.get("/page-b").status_code == 200
        assert [client.get("/page-c").status_code for _ in range(3)] == [200, 200, 429]
        assert [client.get("/page-d").status_code for _ in range(3)] == [200, 200, 429]
        assert get("127.0.0.1", page_a).remaining == 0  # type: ignore[union-attr]
        assert get("127.0.0.1", page_c).remaining == 0  # type: ignore[union-attr]
        assert reset("127.0.0.1", page_c) == 1
        assert client.get("/page-c").status_code == 200
        assert client.get("/page-d").status_code == 429
        # Two decorators on one view share its buckets on every store (they did on shared
        # memory and Redis, not in memory).
        assert [client.get("/page-e").status_code, client.get("/page-e2").status_code] == [200, 200]
        assert [client.get("/page-e").status_code, client.get("/page-e2").status_code] == [429, 429]
    assert _scope(page_a) == f"{__name__}.Page(text='a')"
    assert _scope(Page.as_view()) == f"{__name__}.Page"


@pytest.mark.parametrize("store", ["memory", "shm"])
def test_django_class_based_views_of_one_limit_are_one_series_whichever_came_first(tmp_path: Any, store: str) -> None:
    """Views of one class under ``@ratelimit`` of one rate (one region on a shared store) are
    one limiter on every store, so one series, labelled alike at every scrape whichever view
    was requested first. On shm each had a limiter of its own, and the second made got a
    `` (2)`` label that moved to the other view's counts once the first was requested."""
    from sluicegate.django import limiters

    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/cbv-series"}[store]
    name = f"{__name__}.Page.as_view#0"
    with django_settings(STORAGE=storage):
        client = Client(REMOTE_ADDR=f"10.9.9.{1 + (store == 'shm')}")  # a client of its own

        def series() -> list[tuple[dict[str, str], Any]]:
            return [(labels, lim) for labels, lim in limiters() if labels["limit"].startswith(name)]

        before = [x.metrics().allowed for _, x in series()]  # other tests' counts (memory)
        assert client.get("/page-d").status_code == 200
        first = series()
        assert [labels for labels, _ in first] == [{"limit": name, "quota": "1/m; burst=2"}]
        assert client.get("/page-c").status_code == 200
        assert client.get("/page-e").status_code == 200
        again = series()
        assert [labels for labels, _ in again] == [labels for labels, _ in first]
        assert again[0][1] is first[0][1]
        assert again[0][1].metrics().allowed == sum(before) + 3


def test_django_ratelimit_on_a_class_is_a_type_error_naming_what_to_decorate() -> None:
    """``@ratelimit`` on a class-based view's class replaced the class with a function: the
    URLconf's ``C.as_view()`` then failed with an AttributeError far from the mistake."""
    with pytest.raises(TypeError, match=r"not the class .*as_view\(\).*method_decorator"):
        ratelimit("1/minute")(Page)


def test_django_view_names_run_no_code_of_the_arguments() -> None:
    """``as_view``'s arguments name a view by what every process writes alike, and running
    none of their code: a QuerySet by its model (evaluating it would query the database), a
    class or function by its qualified name, anything else by its type; long ones hashed."""
    from sluicegate.django import _scope, _stable

    class Model:
        pass

    class QuerySet:
        def __init__(self) -> None:
            self.model = Model

        def __repr__(self) -> str:
            raise AssertionError("evaluated")

    class Opaque:
        def __repr__(self) -> str:
            raise AssertionError("repr ran")

    given = {"qs": QuerySet(), "f": plain, "o": Opaque()}
    text = _stable(given)
    assert "QuerySet(" in text and "Model)" in text and f"{__name__}.plain" in text, text
    assert "Opaque" in text and "0x" not in text, text
    assert _scope(Page.as_view(extra_context=given)) == _scope(Page.as_view(extra_context=given))
    long = _scope(Page.as_view(text="x" * 500))
    assert len(long) < 100 and long == _scope(Page.as_view(text="x" * 500))
    assert long != _scope(Page.as_view(text="x" * 499))


def test_a_drf_viewsets_list_and_detail_views_are_two_views() -> None:
    """A ViewSet's router makes one view function per set of actions (DRF sets ``cls`` and
    ``actions``, not ``view_class``): list and detail were one view, sharing the default
    limits' buckets."""
    from rest_framework import viewsets
    from rest_framework.response import Response

    from sluicegate.django import _scope

    class Books(viewsets.ViewSet):
        def list(self, request: Any) -> Response:
            return Response([])

        def retrieve(self, request: Any, pk: Any = None) -> Response:
            return Response({})

    listed = Books.as_view({"get": "list"}, basename="book", detail=False)
    one = Books.as_view({"get": "retrieve"}, basename="book", detail=True)
    assert _scope(listed) != _scope(one)
    assert _scope(listed) == _scope(Books.as_view({"get": "list"}, basename="book", detail=False))
    assert _scope(listed).startswith(f"{__name__}.")


@method_decorator(ratelimit("1/minute; burst=3"), name="get")
class OwnGet(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse("get")

    def post(self, request: Any) -> HttpResponse:
        return HttpResponse("post")


urlpatterns.append(path("own-get", OwnGet.as_view()))


def test_django_a_handlers_own_limit_replaces_the_defaults() -> None:
    """``@method_decorator(ratelimit(...), name="get")``: the handler's limit replaces the
    default limits for GET, as on ``dispatch`` (both counted, the default limit refused
    first); other methods keep the default limits."""
    with django_settings():  # the default limit: 1/minute, burst 1
        client = Client()
        assert [client.get("/own-get").status_code for _ in range(4)] == [200, 200, 200, 429]
        assert [client.post("/own-get").status_code for _ in range(2)] == [200, 429]
    # HEAD runs `get` (the class has no `head`): its limit alone, not the default one too
    # (which HEAD requests spent, refusing the next POST).
    with django_settings():
        client = Client(REMOTE_ADDR="10.7.0.1")
        assert [client.head("/own-get").status_code for _ in range(2)] == [200, 200]
        assert client.post("/own-get").status_code == 200


def test_django_views_are_named_alike_in_every_process() -> None:
    """A partial or a callable object as a view: named by what it calls, never by an address
    (which differs per process, so workers sharing a store would not share the limit)."""
    from sluicegate._web import view_name
    from sluicegate.django import _scope

    part = functools.partial(plain)
    assert view_name(part) == f"{__name__}.plain(partial)" == _scope(part)
    assert "0x" not in _scope(Upload())


def test_django_admin_of_a_limited_view_over_exempt() -> None:
    """``@ratelimit`` over ``@exempt``: the limit is enforced, and the admin helpers see it."""
    from django.test import RequestFactory

    from sluicegate.django import exempt, get

    @ratelimit("1/minute; burst=2")
    @exempt
    def both(request: Any) -> HttpResponse:
        return HttpResponse("both")

    with django_settings():
        assert both(RequestFactory().get("/")).status_code == 200
        assert get("127.0.0.1", both).remaining == 1  # type: ignore[union-attr]


def test_django_process_view_without_the_middlewares_call() -> None:
    """``process_view`` reached without ``__call__`` (``decorator_from_middleware`` does
    that) still decides: the default limit admits one and refuses the next."""
    from django.test import RequestFactory
    from django.utils.decorators import decorator_from_middleware

    from sluicegate.django import RateLimitMiddleware as DjangoMiddleware

    limited = decorator_from_middleware(DjangoMiddleware)(plain)
    with django_settings():
        got = [limited(RequestFactory().get("/")).status_code for _ in range(2)]
    assert got == [200, 429]


# -- shadow (dry-run) limits -------------------------------------------------------------------
#: A shadow limit of 1/minute with burst 2 beside an enforcing one of 1/minute with burst 4, on
#: one route: the first two requests pass both, the next two pass only because the shadow
#: limit lets them through (each logged), and the fifth is rejected by the enforcing limit.
#: An adapter asks a view's limits from the outer decorator in.
SHADOWED = [200, 200, 200, 200, 429]


def shadow_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sluicegate" and "would have rejected" in r.getMessage()]


def test_flask_shadow_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sluicegate")
    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)

    @app.get("/tried")
    @limiter.limit("1/minute; burst=2", shadow=True)
    @limiter.limit("1/minute; burst=4")
    def tried() -> str:
        return "tried"

    client = app.test_client()
    assert [client.get("/tried").status_code for _ in SHADOWED] == SHADOWED
    # The outer decorator's limit is asked first: the shadow one would have rejected requests
    # 3, 4 and 5 (taking nothing, so the enforcing limit's rejection of 5 refunds nothing).
    assert len(shadow_records(caplog)) == 3


@ratelimit("1/minute; burst=4")
@ratelimit("1/minute; burst=2", shadow=True)
def tried(request: Any) -> HttpResponse:
    return HttpResponse("tried")


urlpatterns.append(path("tried", tried))


def test_django_shadow_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sluicegate")
    with django_settings():
        client = Client()
        assert [client.get("/tried").status_code for _ in SHADOWED] == SHADOWED
    # The enforcing limit (the outer decorator) is asked first and rejects request 5 before
    # the shadow one sees it: requests 3 and 4 are logged.
    assert len(shadow_records(caplog)) == 2


def test_starlette_shadow_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="sluicegate")
    limiter = StarletteSluicegate()
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/tried")
    @limiter.limit("1/minute; burst=2", shadow=True)
    @limiter.limit("1/minute; burst=4")
    async def tried_route() -> str:
        return "tried"

    @app.get("/dep", dependencies=[Depends(limiter.dependency("1/minute; burst=2", shadow=True))])
    async def dep() -> str:
        return "dep"

    client = TestClient(app)
    assert [client.get("/tried").status_code for _ in SHADOWED] == SHADOWED
    assert [client.get("/dep").status_code for _ in range(5)] == [200] * 5
    # /tried as in Flask (3), and the dependency's requests 3 to 5.
    assert len(shadow_records(caplog)) == 3 + 3


def test_web_limits_refuse_a_leaky_queue() -> None:
    """A leaky queue admits with a wait the caller must let pass first; the adapters went on
    at once (a 1/s queue with max_delay=5s served 6 requests in a few milliseconds). A web
    limit refuses it, typed, where it is made."""
    from sluicegate import InvalidOptionError

    q = "1/s; algorithm=leaky_queue; max_delay=5s"
    limiter = FlaskSluicegate(flask.Flask(__name__))
    with pytest.raises(InvalidOptionError, match="leaky queue") as info:
        limiter.limit(q)(lambda: "x")
    assert info.value.option == "algorithm"

    def view(request: Any) -> HttpResponse:
        return HttpResponse("x")

    with pytest.raises(InvalidOptionError, match="leaky queue"):
        ratelimit(q)(view)

    async def endpoint(request: Any) -> PlainTextResponse:
        return PlainTextResponse("x")

    with pytest.raises(InvalidOptionError, match="leaky queue"):
        StarletteSluicegate().limit(q)(endpoint)
    with pytest.raises(InvalidOptionError, match="leaky queue"):
        StarletteSluicegate(default_limits=[q])
    # Every other algorithm is a web limit.
    StarletteSluicegate(default_limits=["1/s; algorithm=gcra", "1/s; algorithm=sliding_log"])



# -- counters: every adapter's limiters() for Prometheus ---------------------------------------


def decisions(series: list[tuple[dict[str, str], Any]], limit: str) -> tuple[int, int, int]:
    """(allowed, rejected, shadow_rejected) of the limiter labelled `limit` in `series`."""
    found = [limiter for labels, limiter in series if labels["limit"] == limit]
    assert len(found) == 1, (limit, [labels for labels, _ in series])
    m = found[0].metrics()
    return m.allowed, m.rejected, m.shadow_rejected


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_flask_limiters_count_every_limit(redis_server: RedisServer, tmp_path: Any, store: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sluicegate import render_prometheus
    from sluicegate.prometheus import SluicegateCollector

    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/m", "redis": url(redis_server, on_error="error")}[store]
    app = flask.Flask(__name__)
    app.config.update(SLUICEGATE_DEFAULT_LIMITS=["1/minute; burst=1"], SLUICEGATE_STORAGE=storage)
    limiter = FlaskSluicegate(app)

    @app.get("/own")
    @limiter.limit("1/minute; burst=2")
    @limiter.limit("1/minute; burst=5", shadow=True)
    def own() -> str:
        return "own"

    @app.get("/plain")
    def plain() -> str:
        return "plain"

    registry = CollectorRegistry()
    SluicegateCollector(limiter.limiters, registry=registry)  # the method: read at each scrape
    client = app.test_client()
    assert [client.get("/own").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
    series = limiter.limiters()  # outside a request: the one app this extension serves
    own_name = f"{__name__}.test_flask_limiters_count_every_limit.<locals>.own"
    assert sorted(labels["limit"] for labels, _ in series) == ["default#0", f"{own_name}#0", f"{own_name}#1"]
    # The outer (enforcing) limit rejects the third; the shadow limit decided only two.
    assert decisions(series, f"{own_name}#1") == (2, 1, 0)
    assert decisions(series, f"{own_name}#0") == (2, 0, 0)
    assert decisions(series, "default#0") == (1, 1, 0)
    with app.app_context():
        assert limiter.limiters() == series
    text = generate_latest(registry).decode()
    assert 'sluicegate_decisions_total{limit="default#0",outcome="rejected",quota="1/m"} 1.0' in text
    assert 'sluicegate_shadow_mode{limit="' + own_name + '#0",quota="1/m; burst=5"} 1.0' in text
    assert render_prometheus(series).count("sluicegate_decisions_total{") == 9
    # Another app: the one to read must be named outside its context.
    other = flask.Flask("other")
    limiter.init_app(other)
    with pytest.raises(RuntimeError, match="2 apps"):
        limiter.limiters()
    assert limiter.limiters(app) == series
    with pytest.raises(RuntimeError, match="does not serve"):
        limiter.limiters(flask.Flask("third"))


def test_django_limiters_count_every_limit() -> None:
    from sluicegate.django import limiters

    with django_settings():
        client = Client()
        client.get("/batch?n=1")  # a limit is made at its first request (other tests may have)
        before = decisions(limiters(), f"{__name__}.batch#0")
        client.get("/batch?n=4")
        client.get("/batch?n=2")
        after = decisions(limiters(), f"{__name__}.batch#0")
        assert after[0] + after[1] == before[0] + before[1] + 2
        assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
        assert decisions(limiters(), "default#0")[1] >= 1
        client.get("/stacked")
        labels = [labels for labels, _ in limiters()]
        # Places count from the innermost decorator, as the regions' names do.
        assert {"limit": f"{__name__}.stacked#0", "quota": "1/m; burst=2"} in labels
        assert {"limit": f"{__name__}.stacked#1", "quota": "1/m; burst=3"} in labels
        assert len({(x["limit"], x["quota"]) for x in labels}) == len(labels)


def test_starlette_limiters_count_middleware_and_dependency_limits(redis_server: RedisServer) -> None:
    from sluicegate import render_prometheus

    for storage in ("memory", url(redis_server, on_error="error")):
        limiter = StarletteSluicegate(default_limits=["1/minute; burst=1"], storage=storage)
        dep = limiter.dependency("1/minute; burst=2")
        app = FastAPI()
        app.add_middleware(RateLimitMiddleware, limiter=limiter)

        @app.get("/dep", dependencies=[Depends(dep)])
        async def with_dependency() -> str:
            return "d"

        @app.get("/plain")
        async def plain() -> str:
            return "plain"

        # On Redis a limit is made at its first request in the process.
        assert len(limiter.limiters()) == (2 if storage == "memory" else 0)
        client = TestClient(app)
        assert [client.get("/dep").status_code for _ in range(3)] == [200, 200, 429]
        assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]
        series = limiter.limiters()
        assert decisions(series, "route#0") == (2, 1, 0)
        assert decisions(series, "default#0") == (1, 1, 0)
        assert 'limit="route#0",quota="1/m; burst=2",outcome="rejected"} 1' in render_prometheus(series)


@pytest.mark.parametrize("store", ["memory", "shm", "redis"])
def test_starlette_two_dependencies_of_one_rate_are_two_limits_on_every_store(
    redis_server: RedisServer, tmp_path: Any, store: str
) -> None:
    """An app-wide and a router's dependency of one rate, both on one route: each counts the
    request once, as in memory. On shm and Redis both had the scope ``route#0``, one region
    or prefix, and the same keys: one bucket charged twice a request (3 of 6 admitted)."""
    from fastapi import APIRouter

    storage = {"memory": "memory", "shm": f"shm:{tmp_path}/deps", "redis": url(redis_server, on_error="error")}[store]
    limiter = StarletteSluicegate(storage=storage)
    app = FastAPI(dependencies=[Depends(limiter.dependency("6/minute"))])
    router = APIRouter(dependencies=[Depends(limiter.dependency("6/minute"))])

    @router.get("/z")
    async def z() -> str:
        return "z"

    app.include_router(router)
    client = TestClient(app)
    assert [client.get("/z").status_code for _ in range(7)] == [200] * 6 + [429]
    assert sorted(labels["limit"] for labels, _ in limiter.limiters()) == ["route#0", "route#0 (2)"]
    if store == "shm":  # one region for the rate, as before: a dependency's place is in its keys
        assert len(list(tmp_path.iterdir())) == 1


def test_flask_limiters_with_an_app_factory() -> None:
    """The extension made before its apps (``init_app`` in a factory): a collector made first
    is fine, apps gone are forgotten, and a scrape in another app's context reads the app
    this extension serves."""
    import gc

    from prometheus_client import CollectorRegistry, generate_latest

    from sluicegate.prometheus import SluicegateCollector

    limiter = FlaskSluicegate()
    registry = CollectorRegistry()
    SluicegateCollector(limiter.limiters, registry=registry)  # no app yet: read at scrapes only

    def create_app() -> flask.Flask:
        app = flask.Flask(__name__)
        app.config["SLUICEGATE_DEFAULT_LIMITS"] = ["1/minute; burst=1"]
        limiter.init_app(app)

        @app.get("/x")
        def x() -> str:
            return "x"

        return app

    create_app()  # a test's app, dropped
    gc.collect()
    app = create_app()
    assert [app.test_client().get("/x").status_code for _ in range(2)] == [200, 429]
    assert decisions(limiter.limiters(), "default#0") == (1, 1, 0)
    with flask.Flask("admin").app_context():
        assert decisions(limiter.limiters(), "default#0") == (1, 1, 0)
    assert 'limit="default#0",outcome="rejected",quota="1/m"} 1.0' in generate_latest(registry).decode()


def test_a_collector_whose_function_fails_logs_and_leaves_the_other_metrics(caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from sluicegate.prometheus import SluicegateCollector

    registry = CollectorRegistry()
    Counter("other_total", "another metric of the app", registry=registry).inc()
    calls: list[int] = []

    def failing() -> list[tuple[dict[str, str], Any]]:
        calls.append(1)
        raise RuntimeError("no app")

    SluicegateCollector(failing, registry=registry)
    assert calls == []  # called at scrapes, not when made
    text = generate_latest(registry).decode()
    assert "other_total 1.0" in text and "sluicegate_" not in text
    assert "no app" in caplog.text


def test_starlette_a_dependency_with_deduct_when_needs_the_middleware() -> None:
    """Without ``RateLimitMiddleware`` nothing refunds by the response: failures counted
    silently (``[400, 400, 400, 429]`` on a burst of 3 that should have let failures through).
    It is an error now, as for DRF's throttles; without ``deduct_when`` a dependency needs no
    middleware."""
    limiter = StarletteSluicegate()
    app = FastAPI()

    @app.get("/counted", dependencies=[Depends(limiter.dependency("1/minute; burst=3", deduct_when=succeeded))])
    async def counted() -> PlainTextResponse:
        return PlainTextResponse("x", status_code=400)

    @app.get("/plain", dependencies=[Depends(limiter.dependency("1/minute; burst=1"))])
    async def plain() -> str:
        return "plain"

    client = TestClient(app)
    with pytest.raises(RuntimeError, match="RateLimitMiddleware"):
        client.get("/counted")
    assert [client.get("/plain").status_code for _ in range(2)] == [200, 429]


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_starlette_async_admin_calls(redis_server: RedisServer, store: str) -> None:
    """``get_async`` / ``reset_async`` for async admin endpoints: on Redis the sync ones wait
    for the server on the event loop."""
    storage = "memory" if store == "memory" else url(redis_server, on_error="error")
    limiter = StarletteSluicegate(default_limits=["1/minute; burst=1"], storage=storage)
    dep = limiter.dependency("1/minute; burst=2")
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/items/{item}")
    async def items(item: int) -> int:
        return item

    @app.get("/own", dependencies=[Depends(dep)])
    async def own() -> str:
        return "o"

    @app.get("/admin")
    async def admin() -> dict[str, Any]:
        before = await limiter.get_async("testclient", route="/items/{item}")
        dep_before = await dep.get_async("testclient", "/own")
        assert before is not None and dep_before is not None
        return {
            "remaining": before.remaining,
            "reset": await limiter.reset_async("testclient", route="/items/{item}"),
            "dep": dep_before.remaining,
            "dep_reset": await dep.reset_async("testclient", "/own"),
        }

    client = TestClient(app)
    assert [client.get("/items/1").status_code for _ in range(2)] == [200, 429]
    assert client.get("/own").status_code == 200
    assert client.get("/admin").json() == {"remaining": 0, "reset": 1, "dep": 1, "dep_reset": 1}
    assert client.get("/items/2").status_code == 200


class LazyAuthMiddleware:
    """Django's AuthenticationMiddleware without a database: ``request.user`` a lazy object
    whose evaluation Django refuses on the event loop (it queries the session there), and
    ``request.auser()`` for async code."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        from django.utils.asyncio import async_unsafe
        from django.utils.functional import SimpleLazyObject

        name = request.headers.get("X-User")
        user = type("U", (), {"is_authenticated": bool(name), "pk": name})()

        @async_unsafe
        def load() -> Any:
            return user

        async def auser() -> Any:
            return user

        request.user = SimpleLazyObject(load)
        request.auser = auser
        return self.get_response(request)


@ratelimit("1/minute; burst=2", key="user")
async def auser_view(request: Any) -> HttpResponse:
    return HttpResponse("me")


urlpatterns.append(path("auser", auser_view))


class LazyAuthWithoutAuserMiddleware(LazyAuthMiddleware):
    """As Django before 5.0: the lazy ``request.user`` and no ``request.auser()``."""

    def __call__(self, request: Any) -> Any:
        response_of = self.get_response

        def strip(req: Any) -> Any:
            del req.auser
            return response_of(req)

        self.get_response = strip
        try:
            return super().__call__(request)
        finally:
            self.get_response = response_of


def test_django_the_user_key_in_async_code_without_auser_reads_the_user_in_a_thread() -> None:
    from django.test import AsyncClient

    async def statuses(n: int, user: str) -> list[int]:
        client = AsyncClient()
        return [(await client.get("/auser", headers={"X-User": user})).status_code for _ in range(n)]

    with override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[f"{__name__}.LazyAuthWithoutAuserMiddleware", "sluicegate.django.RateLimitMiddleware"],
    ):
        assert asyncio.run(statuses(3, "fay")) == [200, 200, 429]
        assert asyncio.run(statuses(1, "gus")) == [200]


def test_django_the_user_key_in_async_code_awaits_auser() -> None:
    """``key="user"`` on an async view, and as the middleware's KEY under ASGI, read
    ``request.user`` on the event loop: Django's lazy user refuses that
    (``SynchronousOnlyOperation``, a 500 for every logged-in user)."""
    from django.test import AsyncClient

    async def statuses(client: Any, path: str, n: int, user: str) -> list[int]:
        return [(await client.get(path, headers={"X-User": user})).status_code for _ in range(n)]

    with override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[f"{__name__}.LazyAuthMiddleware", "sluicegate.django.RateLimitMiddleware"],
        SLUICEGATE={"DEFAULT_LIMITS": ["1/minute; burst=1"], "KEY": "user"},
    ):
        client = AsyncClient()
        assert asyncio.run(statuses(client, "/auser", 3, "ann")) == [200, 200, 429]
        assert asyncio.run(statuses(client, "/auser", 1, "bob")) == [200]
        # The middleware's default limits, keyed by the user, on a sync view under ASGI.
        assert asyncio.run(statuses(client, "/plain", 2, "cat")) == [200, 429]
        assert asyncio.run(statuses(client, "/plain", 1, "dan")) == [200]
        # Sync code reads request.user as before.
        assert [Client().get("/auser", HTTP_X_USER="eve").status_code for _ in range(3)] == [200, 200, 429]


def test_on_off_settings_read_from_the_environment() -> None:
    """``ENABLED`` from an environment variable is a string: ``bool("false")`` was True, so
    limiting could not be turned off that way; an unclear value is an error naming it."""
    with django_settings(ENABLED="false"):
        assert [Client().get("/plain").status_code for _ in range(3)] == [200] * 3
    with django_settings(ENABLED="no way"), pytest.raises(ValueError, match="ENABLED"):
        Client().get("/plain")
    off = flask.Flask(__name__)
    off.config.update(SLUICEGATE_DEFAULT_LIMITS=["1/minute; burst=1"], SLUICEGATE_ENABLED="off")
    FlaskSluicegate(off)

    @off.get("/x")
    def x() -> str:
        return "x"

    assert [off.test_client().get("/x").status_code for _ in range(3)] == [200] * 3


def test_key_bounds_read_from_the_environment() -> None:
    """``MAX_KEYS`` from an environment variable is a string of digits: read as the number
    (it was a TypeError); words or a fraction are an error naming the setting."""
    with django_settings(MAX_KEYS="1"):
        assert Client(REMOTE_ADDR="10.0.0.1").get("/plain").status_code == 200
        # The bound of one key, held by 10.0.0.1's bucket (not full): a second is refused.
        assert Client(REMOTE_ADDR="10.0.0.2").get("/plain").status_code == 429
    with django_settings(MAX_KEYS="lots"), pytest.raises(ValueError, match="MAX_KEYS"):
        Client().get("/plain")
    app = flask.Flask(__name__)
    app.config.update(SLUICEGATE_DEFAULT_LIMITS=["1/minute; burst=5"], SLUICEGATE_MAX_KEYS=" 1 ")
    FlaskSluicegate(app)

    @app.get("/x")
    def x() -> str:
        return "x"

    client = app.test_client()
    assert client.get("/x", environ_base={"REMOTE_ADDR": "10.0.0.1"}).status_code == 200
    assert client.get("/x", environ_base={"REMOTE_ADDR": "10.0.0.2"}).status_code == 429
    bad = flask.Flask(__name__)
    bad.config.update(SLUICEGATE_MAX_KEYS="1.5")
    with pytest.raises(ValueError, match="SLUICEGATE_MAX_KEYS must be a whole number"):
        FlaskSluicegate(bad)


def test_a_key_function_returning_none_is_an_error_naming_it() -> None:
    app = flask.Flask(__name__)
    limiter = FlaskSluicegate(app)

    def no_key(request: Any) -> Any:
        return None

    @app.get("/k")
    @limiter.limit("1/minute", key=no_key)
    def k() -> str:
        return "k"

    app.config["PROPAGATE_EXCEPTIONS"] = True
    with pytest.raises(TypeError, match="no_key.*returned None"):
        app.test_client().get("/k")
