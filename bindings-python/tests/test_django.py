"""The Django middleware and decorator, through Django's test client (settings: conftest.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("django")
from django.http import HttpResponse  # noqa: E402
from django.test import AsyncClient, Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

import sluicegate  # noqa: E402
from sluicegate.django import key_func, ratelimit, remote_address  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_config():
    # Each test gets fresh default-limit buckets (the settings signal rebuilds the config).
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"]}):
        yield


def test_middleware_default_limits_per_view() -> None:
    client = Client()
    first = client.get("/plain")
    assert first.status_code == 200
    assert first["RateLimit-Policy"] == '"default";q=2;w=60'
    assert first["RateLimit"] == '"default";r=1;t=30'
    assert client.get("/plain").status_code == 200
    denied = client.get("/plain")
    assert denied.status_code == 429
    assert denied["Retry-After"] == "30" and denied["RateLimit"] == '"default";r=0;t=30'
    assert client.get("/other").status_code == 200
    assert client.get("/plain", REMOTE_ADDR="10.0.0.9").status_code == 200


def test_decorator_replaces_the_defaults() -> None:
    client = Client()
    for _ in range(3):
        r = client.get("/limited", HTTP_X_API_KEY="k1")
        assert r.status_code == 200 and r["RateLimit-Policy"] == '"api";q=3;w=180'
    r = client.get("/limited", HTTP_X_API_KEY="k1")
    # A token a minute after the first request: 60 s, or 59 once a second has gone by.
    assert r.status_code == 429 and r["Retry-After"] in ("59", "60")
    assert client.get("/limited", HTTP_X_API_KEY="k2").status_code == 200


def test_user_key_exempt_and_raised() -> None:
    client = Client()
    assert client.get("/me", HTTP_X_USER="ann").status_code == 200
    assert client.get("/me", HTTP_X_USER="ann").status_code == 429
    assert client.get("/me", HTTP_X_USER="bob").status_code == 200
    for _ in range(4):
        r = client.get("/free")
        assert r.status_code == 200 and not r.has_header("RateLimit")
    r = client.get("/raise")
    assert r.status_code == 429 and r["Retry-After"] == "3600"


def test_settings() -> None:
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["1/minute"], "HEADERS": "legacy", "KEY": "header:X-Tenant"}):
        client = Client()
        before = time.time()
        first = client.get("/plain", HTTP_X_TENANT="a")
        assert first["X-RateLimit-Remaining"] == "0"
        r = client.get("/plain", HTTP_X_TENANT="a")
        assert r.status_code == 429 and r["X-RateLimit-Limit"] == "1"
        # X-RateLimit-Reset is a Unix time, as slowapi and flask-limiter send it (not 60).
        for answer in (first, r):
            assert before + 59 <= int(answer["X-RateLimit-Reset"]) <= time.time() + 61
        assert client.get("/plain", HTTP_X_TENANT="b").status_code == 200
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["1/minute"], "ENABLED": False}):
        assert all(Client().get("/plain").status_code == 200 for _ in range(3))
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["1/minute"], "HEADERS_ON_ALLOWED": False}):
        assert not Client().get("/plain").has_header("RateLimit")
    with override_settings(SLUICEGATE={"KEY": "sluicegate.django.remote_address"}):
        assert Client().get("/plain").status_code == 200
    assert key_func("sluicegate.django.remote_address") is remote_address


@pytest.mark.parametrize(
    ("config", "exc"),
    [
        ({"HEADERS": "rfc"}, sluicegate.InvalidOptionError),
        ({"KEY": "cookie"}, ValueError),
        ({"COLOUR": 1}, ValueError),
        ({"DEFAULT_LIMITS": ["10/fortnight"]}, sluicegate.InvalidQuotaError),
    ],
)
def test_bad_settings(config: dict, exc: type) -> None:
    with override_settings(SLUICEGATE=config):
        with pytest.raises(exc):
            Client().get("/plain")


# -- async key, cost and skip functions (this module is the URL conf of these tests) -----------


async def api_key(request: Any) -> str:
    return str(request.headers.get("X-Api-Key", "anon"))


async def internal(request: Any) -> bool:
    return bool(request.headers.get("X-Internal") == "yes")


async def size(request: Any) -> int:
    return int(request.GET.get("n", "1"))


async def aplain(request: Any) -> HttpResponse:
    return HttpResponse("aplain")


@ratelimit("1/minute; burst=3", key=api_key, cost=size)
async def akeyed(request: Any) -> HttpResponse:
    return HttpResponse("akeyed")


urlpatterns = [path("aplain", aplain), path("akeyed", akeyed)]


def async_settings() -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["sluicegate.django.RateLimitMiddleware"],
        SLUICEGATE={"DEFAULT_LIMITS": ["1/minute; burst=2"], "KEY": api_key, "SKIP": internal},
    )


def test_async_key_cost_and_skip_are_awaited_on_async_paths() -> None:
    """An async SKIP's coroutine was a truthy answer (every request skipped), an async cost's
    the cost."""

    async def main() -> list[list[int]]:
        client = AsyncClient()

        async def get(path: str, n: int, **headers: str) -> list[int]:
            return [(await client.get(path, headers=headers)).status_code for _ in range(n)]

        return [
            await get("/aplain", 3, x_api_key="a"),
            await get("/aplain", 1, x_api_key="b"),
            await get("/aplain", 2, x_api_key="a", x_internal="yes"),
            await get("/akeyed?n=2", 2, x_api_key="a"),
            await get("/akeyed?n=1", 1, x_api_key="a"),
        ]

    with async_settings():
        assert asyncio.run(main()) == [[200, 200, 429], [200], [200, 200], [200, 429], [200]]


def test_async_functions_on_sync_paths_are_refused() -> None:
    with pytest.raises(TypeError, match="async"):

        @ratelimit("1/minute", key=api_key)
        def sync_view(request: Any) -> HttpResponse:  # noqa: F841 - refused when decorated
            return HttpResponse("x")

    # A sync (WSGI) stack cannot await an async KEY or SKIP: refused when the middleware loads.
    with async_settings(), pytest.raises(TypeError, match="SLUICEGATE"):
        Client().get("/aplain")
