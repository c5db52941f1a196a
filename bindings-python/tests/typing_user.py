"""A user's app, type-checked by ``mypy --strict`` in test_typing.py (never imported by the
tests): what the package's types promise a user, including what they must refuse (each
``type: ignore`` below must be needed, or strict mypy reports it unused)."""

from __future__ import annotations

from collections.abc import Coroutine, Iterator
from typing import Any, assert_type

from django.http import HttpRequest, HttpResponse
from flask import Blueprint, Flask
from prometheus_client.metrics_core import Metric
from starlette.requests import HTTPConnection, Request

import sluicegate
from sluicegate.django import ratelimit
from sluicegate.flask import Sluicegate as FlaskSluicegate
from sluicegate.prometheus import SluicegateCollector
from sluicegate.starlette import Sluicegate as StarletteSluicegate


def errors() -> None:
    """Every error's figures, as the README reads them."""
    try:
        sluicegate.KeyedLimiter("1/s", max_keys=1).try_acquire("k", 5)
    except sluicegate.InsufficientCapacity as e:
        assert_type(e.cost, int)
        assert_type(e.capacity, int)
    except sluicegate.KeyStoreFull as e:
        assert_type(e.max_keys, int)
    except sluicegate.ClockOutOfRange as e:
        assert_type(e.horizon_ns, int)
    except sluicegate.InvalidQuotaError as e:
        assert_type(e.fragment, str | None)


def configured(style: str, on_full: str) -> None:
    """Names read from a configuration are str: the core checks them."""
    d = sluicegate.Limiter("1/s").try_acquire()
    d.headers(style)
    sluicegate.KeyedLimiter("1/s", on_full=on_full)


def flask_app() -> Flask:
    app = Flask(__name__)
    limiter = FlaskSluicegate(app, trusted_proxies=("10.0.0.0/8",))
    api = Blueprint("api", __name__)
    assert_type(limiter.limit("100/minute")(api), Blueprint)
    assert_type(limiter.exempt(Blueprint("health", __name__)), Blueprint)
    return app


def skip(conn: HTTPConnection) -> bool:
    return conn.url.path == "/health"


def skip_requests(request: Request) -> bool:
    return request.method == "OPTIONS"


starlette_limiter = StarletteSluicegate(trusted_proxies={"10.0.0.0/8"}, skip=skip)
http_only_limiter = StarletteSluicegate(skip=skip_requests)


class Page:
    pass


@ratelimit("5/minute")
def page(request: HttpRequest, pk: int) -> Page:
    return Page()


@ratelimit("5/minute")
async def async_page(request: HttpRequest) -> Page:
    return Page()


def django_views(request: HttpRequest) -> None:
    # A rejected request is answered with a 429 HttpResponse, not the view's own type.
    assert_type(page(request, 1), Page | HttpResponse)
    pending = async_page(request)
    _ = assert_type(pending, Coroutine[Any, Any, Page | HttpResponse])
    pending.close()
    page(request, "1")  # type: ignore[arg-type]


def metrics(collector: SluicegateCollector) -> Iterator[Metric]:
    return collector.collect()


def web_metrics(app: Flask) -> None:
    """Every integration's limiters, for Prometheus: as a scrape-time source or rendered."""
    import sluicegate.django
    import sluicegate.drf

    ext = FlaskSluicegate(app)
    SluicegateCollector(ext.limiters)
    SluicegateCollector(starlette_limiter.limiters)
    SluicegateCollector(sluicegate.django.limiters)
    SluicegateCollector(sluicegate.drf.limiters)
    text: str = sluicegate.render_prometheus(ext.limiters(app))
    for labels, limiter in starlette_limiter.limiters():
        assert_type(labels["limit"], str)
        assert_type(limiter, sluicegate.KeyedLimiter)
    SluicegateCollector(ext.limiters())
    SluicegateCollector(lambda: 3)  # type: ignore[arg-type,return-value]
    del text
