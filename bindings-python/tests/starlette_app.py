"""The FastAPI and Starlette apps of test_starlette.py; ``uvicorn starlette_app:app`` serves
the FastAPI one (its store from SLUICEGATE_TEST_STORE, default "memory")."""

from __future__ import annotations

import os
from typing import Any

from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

import sluicegate
from sluicegate import Decision
from sluicegate.starlette import RateLimitMiddleware, Sluicegate, header


def make_fastapi(**options: Any) -> tuple[FastAPI, Sluicegate]:
    options.setdefault("default_limits", ["2/minute"])
    limiter = Sluicegate(**options)
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    by_key = limiter.dependency("1/minute; burst=2", key=header("X-Api-Key"))
    shared = limiter.dependency("1/minute; burst=3", name="search")

    @app.get("/default")
    def default() -> str:
        return "default"

    @app.get("/other")
    async def other() -> str:
        return "other"

    @app.get("/items/{item}")
    async def item(item: int) -> int:
        return item

    @app.get("/dep", dependencies=[Depends(by_key)])
    async def dep() -> str:
        return "dep"

    @app.get("/value")
    async def value(d: Decision = Depends(limiter.dependency("1/minute; burst=5"))) -> int:
        return d.remaining

    @app.get("/raw", dependencies=[Depends(limiter.dependency("1/minute; burst=5"))])
    async def raw() -> PlainTextResponse:
        # A Response of the endpoint's own: the middleware adds the fields.
        return PlainTextResponse("raw")

    @app.get("/shared-a", dependencies=[Depends(shared)])
    async def shared_a() -> str:
        return "a"

    @app.get("/shared-b", dependencies=[Depends(limiter.dependency("1/minute; burst=3", name="search"))])
    async def shared_b() -> str:
        return "b"

    @app.post("/decorated/{name}")
    @limiter.limit("1/minute; burst=3", policy="decorated")
    async def decorated(name: str, q: int = 0, body: dict[str, int] | None = None) -> dict[str, Any]:
        # Any signature: the decorator returns the endpoint unchanged.
        return {"name": name, "q": q, "body": body}

    @app.get("/two")
    @limiter.limit(["100/s; burst=5", "1/minute; burst=3"])
    async def two() -> str:
        return "two"

    @app.get("/heavy")
    @limiter.limit("10/minute", cost=lambda request: int(request.query_params.get("n", "1")))
    async def heavy() -> str:
        return "heavy"

    @app.get("/free")
    @limiter.exempt
    async def free() -> str:
        return "free"

    @app.get("/raise")
    async def raises() -> str:
        one = sluicegate.Limiter("1/h; burst=1")
        one.try_acquire()
        raise sluicegate.RateLimited(one.try_acquire())

    return app, limiter


def make_starlette(**options: Any) -> tuple[Starlette, Sluicegate]:
    limiter = Sluicegate(**options)

    @limiter.limit("1/minute; burst=2")
    async def limited(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def plain(request: Request) -> PlainTextResponse:
        return PlainTextResponse("plain")

    app = Starlette(routes=[Route("/limited", limited), Route("/plain", plain)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app, limiter


app, limiter = make_fastapi(storage=os.environ.get("SLUICEGATE_TEST_STORE", "memory"), default_limits=["10/minute"])


@app.get("/ready")
@limiter.exempt
async def ready() -> str:
    return "ready"
