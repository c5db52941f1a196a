"""Django REST framework throttle classes, decided by sluicegate's limiters.

    # settings.py
    REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": ["sluicegate.drf.AnonRateThrottle", "sluicegate.drf.UserRateThrottle"],
        "DEFAULT_THROTTLE_RATES": {"anon": "100/day", "user": "10/s; burst=20"},
    }
    SLUICEGATE = {"STORAGE": "shm:/myapp"}   # optional: "memory" (default), "shm:NAME", a Redis URL

They are drop-in replacements for DRF's classes of the same names (``AnonRateThrottle``,
``UserRateThrottle``, ``ScopedRateThrottle``; subclass ``SluicegateThrottle`` for others):
``scope`` and ``rate`` class attributes, rates from ``DEFAULT_THROTTLE_RATES`` by scope (or a
``THROTTLE_RATES`` attribute), ``get_cache_key(request, view)`` picks the bucket (None: not
throttled), ``wait()`` gives the seconds DRF puts in ``Retry-After``.

What differs from DRF's cache-backed throttles: a rate is a sluicegate quota, so ``"100/day"``
is a token bucket of 100 that refills continuously (not a log of the last 100 timestamps
read and rewritten in the cache for every request), and anything a quota string says
(``burst=``, ``algorithm=sliding_window``, ...) is allowed. One keyed limiter per scope and
rate serves every view and thread of the process (on ``"shm:NAME"`` every worker process of
the host; on Redis every host), on the store of ``SLUICEGATE["STORAGE"]`` as
``sluicegate.django`` reads it; ``SLUICEGATE["ENABLED"] = False`` turns them off, and
``SLUICEGATE["SKIP"]`` (a function of the request) lets chosen requests through. The client
is the peer address (``REMOTE_ADDR``): unlike DRF's ``get_ident``, an ``X-Forwarded-For``
header sent by a client is never its key. As in DRF, every throttle of a view counts a
request, including one that another throttle rejects.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from sluicegate._native import Decision, Quota
from sluicegate._web import Rule
from sluicegate.django import _get_config, _skipped, remote_address

__all__ = ["AnonRateThrottle", "ScopedRateThrottle", "SluicegateThrottle", "UserRateThrottle"]

#: One rule per (scope, quota), shared by every throttle instance of the process (DRF makes
#: an instance per request).
_rules: dict[tuple[str, Quota], Rule] = {}
#: The same found by (scope, the rate's text), so that a request does not parse its rate
#: again; an entry counts only while `_rules` holds its rule.
_by_text: dict[tuple[str, str], Rule] = {}
_lock = threading.Lock()


def _rule(scope: str, rate: str) -> Rule:
    found = _by_text.get((scope, rate))
    if found is not None and _rules.get((scope, found.quota)) is found:
        return found
    quota = Quota(rate)
    with _lock:
        found = _rules.get((scope, quota))
        if found is None:
            found = Rule(quota, None, scope=f"drf:{scope}", max_keys=_get_config().max_keys)
            _rules[(scope, quota)] = found
        _by_text[(scope, rate)] = found
    return found


class SluicegateThrottle(BaseThrottle):  # type: ignore[misc]
    """A throttle with a ``scope`` and a ``rate``, like DRF's ``SimpleRateThrottle``:
    subclasses say which bucket a request takes (``get_cache_key``)."""

    scope: str | None = None
    rate: str | None = None
    #: The rates by scope; None: ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``, read when the
    #: throttle is made (so that ``override_settings`` applies).
    THROTTLE_RATES: dict[str, str | None] | None = None
    #: Tokens one request takes.
    cost: int = 1

    def __init__(self) -> None:
        if not getattr(self, "rate", None):
            self.rate = self.get_rate()
        self.decision: Decision | None = None

    def get_rate(self) -> str | None:
        """The rate of ``scope`` (None: the scope is not throttled)."""
        scope = self.scope
        if not scope:
            raise ImproperlyConfigured(f"You must set either `.scope` or `.rate` for '{type(self).__name__}' throttle")
        rates = self.THROTTLE_RATES if self.THROTTLE_RATES is not None else api_settings.DEFAULT_THROTTLE_RATES
        try:
            return rates[scope]
        except KeyError:
            raise ImproperlyConfigured(f"No default throttle rate set for '{scope}' scope") from None

    def get_cache_key(self, request: Any, view: Any) -> Any:
        """The request's key within this throttle's scope (str, bytes or int), or None to let
        it through."""
        raise NotImplementedError(".get_cache_key() must be overridden")

    def ident(self, request: Any) -> str:
        """The client: the peer address."""
        # The HttpRequest a DRF Request wraps: its META without the Request's __getattr__.
        return remote_address(getattr(request, "_request", request))

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        config = _get_config()
        if _skipped(request, config):
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        # A throttle class with a rate and no scope counts on its own.
        scope = self.scope or f"{type(self).__module__}.{type(self).__qualname__}"
        limiter = _rule(scope, self.rate).limiter(config.store)
        self.decision = decision = limiter.try_acquire(key, self.cost)
        return decision.allowed

    def wait(self) -> float | None:
        """Seconds until the rejected request could be admitted (DRF's ``Retry-After``)."""
        if self.decision is None or self.decision:
            return None
        return self.decision.retry_after


def _user_key(throttle: SluicegateThrottle, request: Any) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return throttle.ident(request)


class AnonRateThrottle(SluicegateThrottle):
    """Throttles anonymous requests by client; authenticated ones are let through."""

    scope = "anon"

    def get_cache_key(self, request: Any, view: Any) -> Any:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return None
        return self.ident(request)


class UserRateThrottle(SluicegateThrottle):
    """Throttles by user (``user.pk``), anonymous requests by client."""

    scope = "user"

    def get_cache_key(self, request: Any, view: Any) -> Any:
        return _user_key(self, request)


class ScopedRateThrottle(SluicegateThrottle):
    """Throttles the views that have a ``throttle_scope`` attribute, each scope on its own,
    by user or client; views without one are let through."""

    scope_attr = "throttle_scope"

    def __init__(self) -> None:
        # The rate depends on the view: found in allow_request.
        self.decision = None

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> Any:
        return _user_key(self, request)
