"""A Django project in one module for test_servers.py, served by gunicorn:
``gunicorn -w 4 gunicorn_django:application``.

The store comes from the environment (SLUICEGATE_TEST_STORE). ``/limited`` has its own
``@ratelimit``; ``/plain`` gets the middleware's default limit. Every response names the
worker that served it (X-Worker) and the process that loaded the middleware (X-Imported-In:
the master under ``--preload``), where the default limit's region was opened. Every request
takes 20 ms (before the limits are asked), so that concurrent clients keep every worker busy
and gunicorn spreads the requests evenly.
"""

from __future__ import annotations

import os
import time

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
    SLUICEGATE={"DEFAULT_LIMITS": ["10/minute"], "STORAGE": os.environ["SLUICEGATE_TEST_STORE"]},
)
django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402

from sluicegate.django import exempt, ratelimit  # noqa: E402

IMPORTED_IN = os.getpid()


class WhoMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        time.sleep(0.02)
        response = self.get_response(request)
        response["X-Worker"] = str(os.getpid())
        response["X-Imported-In"] = str(IMPORTED_IN)
        return response


@ratelimit("10/minute")
def limited(request):
    return HttpResponse("ok")


def plain(request):
    return HttpResponse("ok")


@exempt
def ready(request):
    return HttpResponse("ready")


urlpatterns = [path("limited", limited), path("plain", plain), path("ready", ready)]

application = get_wsgi_application()
