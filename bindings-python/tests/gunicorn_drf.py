"""A Django REST framework project in one module for test_servers.py, served by gunicorn:
``gunicorn -w 4 gunicorn_drf:application``.

The store comes from the environment (SLUICEGATE_TEST_STORE). ``/limited`` is throttled by
``sluicegate.drf.AnonRateThrottle`` at ``10/minute``; ``/failing`` by a throttle of the same
rate whose ``deduct_when`` counts only successes, and its view always fails (503), so that
``sluicegate.django.RateLimitMiddleware`` refunds every request it admits. Every response
names the worker that served it (X-Worker) and the process that imported this module
(X-Imported-In: the master under ``--preload``). Every request takes 20 ms (before the
throttles are asked), so that concurrent clients keep every worker busy and gunicorn spreads
the requests evenly.
"""

from __future__ import annotations

import os
import time
from typing import Any

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="tests",
    ALLOWED_HOSTS=["127.0.0.1"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[f"{__name__}.WhoMiddleware", "sluicegate.django.RateLimitMiddleware"],
    INSTALLED_APPS=[],
    DATABASES={},
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": [],
        "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
        "DEFAULT_THROTTLE_RATES": {"anon": "10/minute", "failing": "10/minute"},
        "UNAUTHENTICATED_USER": None,
    },
    SLUICEGATE={"STORAGE": os.environ["SLUICEGATE_TEST_STORE"]},
)
django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from sluicegate.drf import AnonRateThrottle, ScopedRateThrottle  # noqa: E402

IMPORTED_IN = os.getpid()


class WhoMiddleware:
    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        time.sleep(0.02)
        response = self.get_response(request)
        response["X-Worker"] = str(os.getpid())
        response["X-Imported-In"] = str(IMPORTED_IN)
        return response


class Limited(APIView):  # type: ignore[misc]
    throttle_classes = [AnonRateThrottle]

    def get(self, request: Any) -> Response:
        return Response("ok")


class SuccessesCount(ScopedRateThrottle):
    deduct_when = staticmethod(lambda response: response.status_code < 400)


class Failing(APIView):  # type: ignore[misc]
    throttle_classes = [SuccessesCount]
    throttle_scope = "failing"

    def get(self, request: Any) -> Response:
        return Response("unavailable", status=503)


class Ready(APIView):  # type: ignore[misc]
    throttle_classes: list[Any] = []

    def get(self, request: Any) -> Response:
        return Response("ready")


urlpatterns = [
    path("limited", Limited.as_view()),
    path("failing", Failing.as_view()),
    path("ready", Ready.as_view()),
]

application = get_wsgi_application()
