"""The DRF views of test_drf.py (``ROOT_URLCONF="drf_app"``)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.authentication import BaseAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from sluicegate.drf import AnonRateThrottle, ScopedRateThrottle, SluicegateThrottle, UserRateThrottle


class User:
    is_authenticated = True

    def __init__(self, pk: str) -> None:
        self.pk = pk


class HeaderAuthentication(BaseAuthentication):  # type: ignore[misc]
    """``X-User: NAME`` logs NAME in; no header, anonymous (``request.user`` None)."""

    def authenticate(self, request: Any) -> Any:
        name = request.META.get("HTTP_X_USER")
        return (User(name), None) if name else None


class Base(APIView):  # type: ignore[misc]
    authentication_classes = [HeaderAuthentication]

    def get(self, request: Any) -> Response:
        return Response({"ok": True})


class Anon(Base):
    throttle_classes = [AnonRateThrottle]


class PerUser(Base):
    throttle_classes = [UserRateThrottle]


class Both(Base):
    throttle_classes = [AnonRateThrottle, UserRateThrottle]


class Uploads(Base):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "uploads"


class Contacts(Base):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "contacts"


class Unscoped(Base):
    throttle_classes = [ScopedRateThrottle]


class ByKey(SluicegateThrottle):
    rate = "1/minute; burst=2"
    cost = 1

    def get_cache_key(self, request: Any, view: Any) -> Any:
        return request.META.get("HTTP_X_API_KEY")


class Keyed(Base):
    throttle_classes = [ByKey]


class Defaults(Base):
    """The throttles of REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]."""


urlpatterns = [
    path("anon", Anon.as_view()),
    path("user", PerUser.as_view()),
    path("both", Both.as_view()),
    path("uploads", Uploads.as_view()),
    path("contacts", Contacts.as_view()),
    path("unscoped", Unscoped.as_view()),
    path("keyed", Keyed.as_view()),
    path("defaults", Defaults.as_view()),
]
