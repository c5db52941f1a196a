"""Overhead per request of the Starlette/FastAPI and DRF integrations, next to the framework
with no limiter and to the best-known peer of each (slowapi for FastAPI, DRF's own cache
throttle on Django's local-memory cache), in one process and one run.

Requests are made in process, without a socket: the ASGI app is called with a request scope
(FastAPI), and a DRF view with a request from ``APIRequestFactory``. So the figures are the
framework's and the limiter's own work, with no HTTP parser or network around them (a load
generator against a real server measures the same overhead under far more noise). The limits
admit everything (``10000/minute`` over 1000 clients, so DRF's and slowapi's per-client
histories stay short, as in production); every response must be a 200. The subjects run in
interleaved rounds (each round measures every subject once, in a rotated order), in CPU time
of this process (so that other jobs on a shared machine lengthen no figure), each round
after a full garbage collection (so that one falls into no round by chance); a subject's
figure is the median of its rounds, its overhead that median less the median of the same
framework with no limiter, and the ratio ours / the peer's overhead. A no-op FastAPI
dependency is measured too, for reference: what FastAPI spends on any dependency, part of
the ``Depends`` subject's overhead. Written as a Markdown fragment to bench/WEB_RESULTS.md.

    pip install -r bindings-python/requirements-bench.txt
    python bindings-python/bench/web_bench.py [--rounds 9] [--quick]
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and the
# names they use are local to the functions that build the apps.
import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RATE = "10000/minute"
CLIENTS = [f"10.{i // 250}.{i % 250}.1" for i in range(1000)]


def setup_django(**overrides: Any) -> None:
    """Configures Django for the benchmarks (`overrides`: settings added or replaced, as
    ``http_bench.py``'s servers give theirs)."""
    import django
    from django.conf import settings

    base: dict[str, Any] = {
        "DEBUG": False,
        "SECRET_KEY": "bench",
        "ALLOWED_HOSTS": ["*"],
        "INSTALLED_APPS": ["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"],
        "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        "REST_FRAMEWORK": {
            "DEFAULT_AUTHENTICATION_CLASSES": [],
            "DEFAULT_PERMISSION_CLASSES": [],
            "UNAUTHENTICATED_USER": None,
            "DEFAULT_THROTTLE_RATES": {"anon": RATE},
        },
        "SLUICEGATE": {"STORAGE": "memory"},
    }
    settings.configure(**{**base, **overrides})
    django.setup()


# -- FastAPI ------------------------------------------------------------------------------------


def fastapi_subjects() -> dict[str, Any]:
    from fastapi import Depends, FastAPI, Request, Response
    from slowapi import Limiter as SlowLimiter
    from slowapi import _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    from sluicegate.starlette import RateLimitMiddleware, Sluicegate

    def plain() -> FastAPI:
        app = FastAPI()

        @app.get("/items/{item}")
        async def item(item: int) -> dict[str, int]:
            return {"item": item}

        return app

    def ours_middleware() -> FastAPI:
        limiter = Sluicegate(default_limits=[RATE])
        app = plain()
        app.add_middleware(RateLimitMiddleware, limiter=limiter)
        return app

    def ours_dependency() -> FastAPI:
        limiter = Sluicegate()
        app = FastAPI()

        @app.get("/items/{item}", dependencies=[Depends(limiter.dependency(RATE))])
        async def item(item: int) -> dict[str, int]:
            return {"item": item}

        return app

    def noop_dependency() -> FastAPI:
        # What FastAPI itself spends on a route's dependency, whatever it does.
        async def nothing(request: Request, response: Response) -> None:
            return None

        app = FastAPI()

        @app.get("/items/{item}", dependencies=[Depends(nothing)])
        async def item(item: int) -> dict[str, int]:
            return {"item": item}

        return app

    def slowapi() -> FastAPI:
        limiter = SlowLimiter(key_func=get_remote_address)
        app = FastAPI()
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

        @app.get("/items/{item}")
        @limiter.limit(RATE)
        async def item(request: Request, item: int) -> dict[str, int]:
            return {"item": item}

        return app

    return {
        "FastAPI, no limiter": plain(),
        "sluicegate.starlette RateLimitMiddleware": ours_middleware(),
        "sluicegate.starlette dependency (Depends)": ours_dependency(),
        "a no-op dependency (Depends), for reference": noop_dependency(),
        "slowapi 0.1.10 (limits, memory storage)": slowapi(),
    }


async def asgi_get(app: Any, path: str, client: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": [(b"host", b"bench")], "client": (client, 40000),
        "server": ("bench", 80),
    }  # fmt: skip
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def fastapi_block(app: Any, n: int, offset: int) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        gc.collect()
        start = time.process_time()
        for i in range(n):
            status = await asgi_get(app, f"/items/{i % 50}", CLIENTS[(offset + i) % len(CLIENTS)])
            if status != 200:
                raise SystemExit(f"a request got {status}")
        return (time.process_time() - start) / n * 1e6

    return run


# -- DRF ----------------------------------------------------------------------------------------


def drf_subjects() -> dict[str, Any]:
    from rest_framework import throttling
    from rest_framework.response import Response
    from rest_framework.views import APIView

    import sluicegate.drf

    def view(throttles: list[Any]) -> Any:
        class Item(APIView):
            throttle_classes = throttles

            def get(self, request: Any) -> Response:
                return Response({"item": 1})

        return Item.as_view()

    return {
        "DRF APIView, no throttle": view([]),
        "sluicegate.drf.AnonRateThrottle": view([sluicegate.drf.AnonRateThrottle]),
        "DRF AnonRateThrottle (locmem cache)": view([throttling.AnonRateThrottle]),
    }


def drf_block(view: Any, n: int, offset: int) -> Callable[[], float]:
    from rest_framework.test import APIRequestFactory

    factory = APIRequestFactory()

    def run() -> float:
        requests = [factory.get("/item", REMOTE_ADDR=CLIENTS[(offset + i) % len(CLIENTS)]) for i in range(n)]
        gc.collect()
        start = time.process_time()
        for request in requests:
            response = view(request)
            if response.status_code != 200:
                raise SystemExit(f"a request got {response.status_code}")
        return (time.process_time() - start) / n * 1e6

    return run


# -- the run ------------------------------------------------------------------------------------


def interleaved(names: list[str], measure: Callable[[str, int], float], rounds: int) -> dict[str, list[float]]:
    """Every subject once a round, in an order rotated each round."""
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            out[name].append(measure(name, r))
    return out


def table(title: str, base: str, peer: str, ours: list[str], results: dict[str, list[float]]) -> list[str]:
    med = {name: statistics.median(v) for name, v in results.items()}
    peer_over = med[peer] - med[base]
    lines = [
        f"### {title}",
        "",
        "| subject | CPU µs per request (median) | range over rounds | overhead µs | overhead / the peer's |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in results.items():
        over = med[name] - med[base]
        ratio = "" if name == base else f"{over / peer_over:.2f}×" if peer_over > 0 else "n/a"
        lines.append(
            f"| {name} | {med[name]:.1f} | {min(values):.1f}–{max(values):.1f} | "
            f"{'' if name == base else f'{over:.1f}'} | {ratio} |"
        )
    lines.append("")
    for name in ours:
        over = med[name] - med[base]
        verdict = "met" if peer_over > 0 and over < peer_over / 3 else "not met"
        lines.append(f"* {name}: {over:.1f} µs against {peer_over:.1f} µs, target under a third: **{verdict}**.")
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    rounds, n = (3, 300) if args.quick else (args.rounds, 3000)

    setup_django()
    import django
    import fastapi
    import rest_framework

    apps = fastapi_subjects()
    loop = asyncio.new_event_loop()
    # Warm up (first requests build routes, caches, the limiters' buckets).
    for app in apps.values():
        loop.run_until_complete(fastapi_block(app, len(CLIENTS), 0)())
    fast = interleaved(
        list(apps), lambda name, r: loop.run_until_complete(fastapi_block(apps[name], n, r * 7)()), rounds
    )
    views = drf_subjects()
    for view in views.values():
        drf_block(view, len(CLIENTS), 0)()
    drf = interleaved(list(views), lambda name, r: drf_block(views[name], n, r * 7)(), rounds)

    load = os.getloadavg()
    md = [
        "## Python web integrations: overhead per request (`bindings-python/bench/web_bench.py`)",
        "",
        f"Python {platform.python_version()}, FastAPI {fastapi.__version__}, Django {django.__version__}, "
        f"DRF {rest_framework.__version__}, {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load[0]:.1f}; in-process requests (no socket), {n} a round over 1000 clients, {rounds} "
        f"interleaved rounds; limits of `{RATE}` that admit every request.",
        "",
        *table(
            "FastAPI",
            "FastAPI, no limiter",
            "slowapi 0.1.10 (limits, memory storage)",
            ["sluicegate.starlette RateLimitMiddleware", "sluicegate.starlette dependency (Depends)"],
            fast,
        ),
        *table(
            "Django REST framework",
            "DRF APIView, no throttle",
            "DRF AnonRateThrottle (locmem cache)",
            ["sluicegate.drf.AnonRateThrottle"],
            drf,
        ),
    ]
    text = "\n".join(md)
    print(text)
    if not args.quick:
        (HERE / "WEB_RESULTS.md").write_text(text)


if __name__ == "__main__":
    sys.exit(main())
