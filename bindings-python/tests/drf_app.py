"""The DRF views of test_drf.py (``ROOT_URLCONF="drf_app"``)."""

from __future__ import annotations

from typing import Any

from django.urls import path
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from sluicegate.django import ratelimit
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


class ContactsToo(Base):
    """Another view of the "contacts" scope: it shares the scope's buckets."""

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


def succeeded(response: Any) -> bool:
    return bool(response.status_code < 400)


def failed(response: Any) -> bool:
    return bool(response.status_code >= 400)


class SuccessesCount(ScopedRateThrottle):
    """Counts the requests that succeed: a failed one gets its token back."""

    deduct_when = staticmethod(succeeded)


class FailuresCount(ScopedRateThrottle):
    """Counts the requests that fail (login attempts, say): a successful one gets its token
    back. A plain function as the attribute works as the staticmethod does."""

    deduct_when = failed


class Answer(Base):
    """Answers ``?status=``: 404 by raising DRF's NotFound (DRF makes the response), 500 by
    an uncaught exception (Django makes the 500), any other status as a Response."""

    def get(self, request: Any) -> Response:
        status = int(request.query_params["status"])
        if status == 404:
            raise NotFound()
        if status == 500:
            raise RuntimeError("the handler failed")
        return Response({"status": status}, status=status)


class Successes(Answer):
    throttle_classes = [SuccessesCount]
    throttle_scope = "successes"


class Failures(Answer):
    throttle_classes = [FailuresCount]
    throttle_scope = "failures"


@api_view(["POST"])  # type: ignore[misc]
@throttle_classes([])  # type: ignore[misc]  # this limit alone
@ratelimit("1/minute; burst=2", deduct_when=lambda response: response.status_code < 400)
def validated(request: Any) -> Response:
    """A function view of DRF's under @ratelimit: DRF's exceptions are its 400s."""
    if request.data.get("ok") != "yes":
        raise ValidationError("not ok")
    return Response({"ok": True})


urlpatterns = [
    path("anon", Anon.as_view()),
    path("user", PerUser.as_view()),
    path("both", Both.as_view()),
    path("uploads", Uploads.as_view()),
    path("contacts", Contacts.as_view()),
    path("contacts-too", ContactsToo.as_view()),
    path("unscoped", Unscoped.as_view()),
    path("keyed", Keyed.as_view()),
    path("defaults", Defaults.as_view()),
    path("successes", Successes.as_view()),
    path("failures", Failures.as_view()),
    path("validated", validated),
]
