"""A tiny Django URLconf for test_django.py."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

import sluicegate
from sluicegate.django import exempt, ratelimit


class FakeAuthMiddleware:
    """Sets request.user from an X-User header (no database needed)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        name = request.headers.get("X-User")
        request.user = type("U", (), {"is_authenticated": bool(name), "pk": name})()
        return self.get_response(request)


def plain(request):
    return HttpResponse("plain")


def other(request):
    return HttpResponse("other")


@ratelimit("1/minute; burst=3", key="header:X-Api-Key", policy="api")
def limited(request):
    return HttpResponse("limited")


@ratelimit("1/minute", key="user")
def me(request):
    return HttpResponse("me")


@exempt
def free(request):
    return HttpResponse("free")


async def aplain(request):
    return HttpResponse("aplain")


@ratelimit("2/minute")
async def alimited(request):
    return HttpResponse("alimited")


def raises(request):
    limiter = sluicegate.Limiter("1/h; burst=1")
    limiter.try_acquire()
    raise sluicegate.RateLimited(limiter.try_acquire())


urlpatterns = [
    path("plain", plain),
    path("other", other),
    path("limited", limited),
    path("me", me),
    path("free", free),
    path("raise", raises),
    path("aplain", aplain),
    path("alimited", alimited),
]
