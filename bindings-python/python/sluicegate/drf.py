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
throttled), ``wait()`` gives the seconds DRF puts in ``Retry-After``; ``get_ident`` (which is
``ident``, below), ``cache_format``, ``parse_rate``, ``num_requests`` and ``duration`` are
there for a ``get_cache_key`` written DRF's way. A rate is checked when the throttle is made
(a class's own ``rate`` when the class is, a scope's at the first request that reads it): a
bad one raises ``InvalidQuotaError``, a ``cost`` more than its burst ``InvalidOptionError``
(both ValueErrors). A rate of 0 (``"0/min"``, DRF's way to refuse every request) is such an
error too: a sluicegate quota admits at least one request per period (refuse with a
permission class instead, or set the rate to None to not throttle). A rate in DRF's form
that the core's grammar does not read is read as DRF reads it, by the period's first letter
(``"5/mins"``, ``"10/secs"``, ``"3/hrs"``); the core's units come first (``"1/ms"`` is a
millisecond).

The algorithm: a rate that names no option (``"100/day"``, ``"5/mins"``) is a sliding window
counter (``algorithm=sliding_window``, ``DEFAULT_ALGORITHM``), the closest to DRF's sliding
log that every store offers: ``"100/day"`` admits 100, then nothing until the window has
moved on, and ``wait()`` (DRF's ``Retry-After``) is the time until a request fits the window
again, in hours for a daily rate as with DRF (the core's own default, a token bucket that
starts full and refills continuously, would admit 100 at once and 99 more over the day, and
say 864 s). The counter weighs the previous calendar window's count by how much of it the
rolling window still covers, as if its requests were spread evenly: a burst at the end of one
window and requests early in the next can exceed the count within one rolling period. DRF's
exact log is ``algorithm=sliding_log`` (memory and Redis stores, not ``shm:``). A rate that names its
algorithm, or a token bucket's options (``"10/s; burst=20"``, ``initial=``, ``refill=``), is
read as the core reads it. DRF keeps its log in the cache and rewrites it for every request;
here the state lives in the store below. One keyed limiter per scope and
rate serves every view and thread of the process (on ``"shm:NAME"`` every worker process of
the host; on Redis every host), on the store of ``SLUICEGATE["STORAGE"]`` as
``sluicegate.django`` reads it; ``SLUICEGATE["ENABLED"] = False`` turns them off, and
``SLUICEGATE["SKIP"]`` (a function of the request) lets chosen requests through. The client
is the peer address (``REMOTE_ADDR``): unlike DRF's ``get_ident``, an ``X-Forwarded-For``
header sent by a client is never its key (``get_ident`` is overridden to say the same). DRF's ``NUM_PROXIES`` is not read (a warning says
so when it is set): behind proxies set ``SLUICEGATE["TRUSTED_PROXIES"]``, a hop count or the
proxies' addresses. As in DRF, every throttle of a view counts a
request, including one that another throttle rejects; views that name one scope
(``throttle_scope``) share its buckets.

Counting by the response: a throttle class with a ``deduct_when`` (a function of the
response) counts an admitted request only if it returns True for the request's response;
the others get their tokens back::

    class UploadThrottle(ScopedRateThrottle):
        deduct_when = staticmethod(lambda response: response.status_code < 400)  # failures are free

DRF asks throttles before the view and never shows them the response, so the refund is made
by ``sluicegate.django.RateLimitMiddleware``, which must then be in ``MIDDLEWARE`` (it sees
every response, a view's uncaught exception as Django's 500): a request to such a throttle
that the middleware does not serve is an ``ImproperlyConfigured`` error, not a request
silently counted. Admin tools: ``get(key, scope)`` and ``reset(key, scope)``. Every
throttle's limiter counts its decisions in each process: ``limiters()`` gives them, labelled
``limit="drf:SCOPE"`` and ``quota``, to ``render_prometheus`` or ``SluicegateCollector`` (with
``sluicegate.django``'s limits, one collector of both lists: two would register the same
families twice).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from sluicegate._native import Decision, InsufficientCapacity, InvalidQuotaError, KeyStoreFull, Quota
from sluicegate._web import Rule, Series, Taken, _check_cost, limiter_series, peek, refusal, watch
from sluicegate._web import reset as _reset_rules
from sluicegate.django import _SETTLE, _get_config, _skipped, remote_address

__all__ = [
    "DEFAULT_ALGORITHM", "AnonRateThrottle", "ScopedRateThrottle", "SluicegateThrottle", "UserRateThrottle", "get",
    "limiters", "reset",
]  # fmt: skip

#: One rule per (scope, quota), shared by every throttle instance of the process (DRF makes
#: an instance per request).
_rules: dict[tuple[str, Quota], Rule] = {}
#: The same found by (scope, the rate's text), so that a request does not parse its rate
#: again; an entry counts only while `_rules` holds its rule.
_by_text: dict[tuple[str, str], Rule] = {}
_lock = threading.Lock()

#: DRF's rate periods, read by their first letter as DRF's ``parse_rate`` reads them
#: ("5/mins", "10/secs", "3/hrs", "100/d"), in the core's words.
_DRF_PERIODS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_DRF_RATE = re.compile(r"\s*(\d+)\s*/\s*([smhd])[a-z]*\s*")
#: The quotas of the rates read so far, by their text (at most `_QUOTAS_KEPT`).
_quotas: dict[str, Quota] = {}
_QUOTAS_KEPT = 1024


#: The options a rate may name: a rate that names none of them is a sliding window counter
#: (DRF's window semantics); one that names any keeps the core's reading (``burst=``,
#: ``initial=`` and ``refill=`` are the token bucket's, ``algorithm=`` the user's choice).
_OPTION = re.compile(r"[;,]\s*(?:algorithm|codec|burst|initial|refill|max_delay)\s*=", re.IGNORECASE)
#: The algorithm of a rate that names none: the closest to DRF's sliding log that every store
#: (memory, shm, Redis) offers.
DEFAULT_ALGORITHM = "sliding_window"
#: A rate of no request ("0/min"): DRF refuses every request, which no quota represents.
_ZERO = re.compile(r"\s*0+\s*(?:/|per\b)", re.IGNORECASE)


def quota_of(rate: str) -> Quota:
    """A throttle rate's quota: a sluicegate quota (``"100/day"``, ``"10/s; burst=20"``,
    ``"100/day; algorithm=sliding_log"``), or one the core's grammar does not read in DRF's
    form, a count and a period DRF reads by its first letter (``"5/mins"``, ``"10/secs"``,
    ``"3/hrs"``), read as DRF reads it. A rate that names no option (``"100/day"``) is a
    sliding window counter (``algorithm=sliding_window``): at most its count per window, as
    DRF's own throttles admit, where the core's default token bucket would start full and
    refill continuously (``"100/day"`` would admit 199 in a day). A rate that names the
    algorithm, or a token bucket's option (``burst=``, ``initial=``, ``refill=``), is read as
    the core reads it. A bad rate is an ``InvalidQuotaError`` (a ValueError) naming it; so is
    a rate of 0 (DRF's way to refuse every request), which no quota represents."""
    found = _quotas.get(rate)
    if found is None:
        try:
            found = Quota(rate)
        except ValueError:
            drf = _DRF_RATE.fullmatch(rate) if isinstance(rate, str) else None
            if drf is None or int(drf[1]) == 0:
                if isinstance(rate, str) and _ZERO.match(rate):
                    raise InvalidQuotaError(
                        f"the throttle rate {rate!r} admits no request (DRF's way to refuse every request), "
                        "which a sluicegate quota cannot represent: it admits at least 1 request per period. "
                        "Refuse the requests with a permission class, or set the rate to None to not throttle"
                    ) from None
                raise
            found = Quota(f"{drf[1]}/{_DRF_PERIODS[drf[2]]}")
        if found.algorithm == "token_bucket" and not _OPTION.search(rate):
            found = Quota(count=found.count, period_ns=found.period_ns, algorithm=DEFAULT_ALGORITHM)
        if len(_quotas) >= _QUOTAS_KEPT:
            _quotas.clear()
        _quotas[rate] = found
    return found


def _rule(scope: str, rate: str) -> Rule:
    found = _by_text.get((scope, rate))
    if found is not None and _rules.get((scope, found.quota)) is found:
        return found
    quota = quota_of(rate)
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
    #: None: every admitted request counts. A function of the response (a class attribute,
    #: plain or a staticmethod): an admitted request counts only if it returns True for the
    #: request's response (``lambda r: r.status_code < 400``: failures are free), the others
    #: get their tokens back. Needs ``sluicegate.django.RateLimitMiddleware``, which makes
    #: the refunds.
    deduct_when: Callable[[Any], bool] | None = None
    #: DRF's ``SimpleRateThrottle.cache_format``, for a ``get_cache_key`` written DRF's way
    #: (``self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}``).
    cache_format = "throttle_%(scope)s_%(ident)s"
    #: DRF's: the rate's requests and its period in seconds, here the quota's burst and the
    #: seconds an empty bucket takes to fill (``parse_rate``); None without a rate.
    num_requests: int | None = None
    duration: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``rate`` is checked when the class is made (a bad rate, or a
        ``cost`` its burst can never admit, fails at import, not at a request)."""
        super().__init_subclass__(**kwargs)
        rate = cls.__dict__.get("rate")
        if isinstance(rate, str):
            _check_cost(cls.cost, quota_of(rate))

    def __init__(self) -> None:
        if not getattr(self, "rate", None):
            self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.decision: Decision | None = None

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        """DRF's: ``(num_requests, duration)`` of `rate` (the quota's burst and window in
        seconds), ``(None, None)`` for None. The rate is checked here, when DRF makes the
        throttle (a bad rate raises ``InvalidQuotaError``, a ``cost`` more than its burst
        ``InvalidOptionError``), before any request is counted."""
        if rate is None:
            return None, None
        quota = quota_of(rate)
        cost = self.cost
        if type(cost) is not int or cost != 1:
            _check_cost(cost, quota)
        return quota.burst, quota.window_secs

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
        """The client: the peer address, or behind ``SLUICEGATE["TRUSTED_PROXIES"]`` the
        right-most hop they did not add (DRF's ``NUM_PROXIES`` is not read: a warning says so
        once, when it is set and no trusted proxies are)."""
        _check_num_proxies()
        # The HttpRequest a DRF Request wraps: its META without the Request's __getattr__.
        return remote_address(getattr(request, "_request", request))

    def get_ident(self, request: Any) -> str:
        """``ident``: a ``get_cache_key`` written DRF's way keys by the same client (DRF's own
        ``get_ident`` believes a client's ``X-Forwarded-For`` by ``NUM_PROXIES``)."""
        return self.ident(request)

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        config = _get_config()
        # Read from the class, so that a plain function there is not bound as a method.
        deduct_when = type(self).deduct_when
        settling = None if deduct_when is None or not config.enabled else _settling(request, self)
        if _skipped(request, config):
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        rule = _rule(self._scope_name(), self.rate)
        limiter = rule.limiter(config.store)
        watch(config.store)
        try:
            decision = limiter.try_acquire(key, self.cost)
        except (KeyStoreFull, InsufficientCapacity) as error:
            decision = refusal(rule, error, self.cost)
        self.decision = decision
        if settling is not None and decision:
            settling.append((limiter, key, self.cost, deduct_when))  # type: ignore[arg-type]
        return decision.allowed

    def _scope_name(self) -> str:
        """The scope whose buckets this throttle counts in: a throttle class with a rate and
        no scope counts on its own."""
        return self.scope or f"{type(self).__module__}.{type(self).__qualname__}"

    def wait(self) -> float | None:
        """Seconds until the rejected request could be admitted (DRF's ``Retry-After``)."""
        if self.decision is None or self.decision:
            return None
        return self.decision.retry_after


#: The configuration whose NUM_PROXIES was looked at (once per settings).
_num_proxies_checked: list[object] = [None]


def _check_num_proxies() -> None:
    """Warns once per settings when DRF's ``NUM_PROXIES`` is set and sluicegate trusts no
    proxy: a project moving from DRF's throttles would otherwise key every client behind its
    proxies by the proxy's address, silently."""
    config = _get_config()
    if _num_proxies_checked[0] is config:
        return
    _num_proxies_checked[0] = config
    num = api_settings.NUM_PROXIES
    if num and config.resolver.trusted_proxies == "none":  # 0 and None: REMOTE_ADDR, as here
        warnings.warn(
            f"REST_FRAMEWORK['NUM_PROXIES'] = {num!r} is not read by sluicegate's throttles: set "
            f"SLUICEGATE['TRUSTED_PROXIES'] = {num!r} (a hop count) or the proxies' addresses, "
            "or every client behind the proxies is keyed by the proxy's address",
            UserWarning,
            stacklevel=4,
        )


def _settling(request: Any, throttle: SluicegateThrottle) -> Taken:
    """Where ``RateLimitMiddleware`` collects the request's refunds by response (on the
    HttpRequest a DRF Request wraps); ImproperlyConfigured when it does not serve the
    request, since no refund would then be made."""
    found: Taken | None = getattr(request, "_request", request).__dict__.get(_SETTLE)
    if found is None:
        raise ImproperlyConfigured(
            f"'{type(throttle).__name__}' has a deduct_when, whose refunds are made by"
            ' "sluicegate.django.RateLimitMiddleware": add it to MIDDLEWARE'
        )
    return found


def get(key: Any, scope: str | type[SluicegateThrottle]) -> Decision | None:
    """What the throttle of `scope` would say of `key` now, taking nothing; for admin tools.
    `scope` is a scope's name ("anon", "user", a view's ``throttle_scope``), its rate read from
    ``DEFAULT_THROTTLE_RATES``, or a throttle class (its own ``rate`` or ``THROTTLE_RATES``);
    `key` is what its ``get_cache_key`` returns: ``"user:42"`` for a user, the client address
    for an anonymous request. None when the scope's rate is None (not throttled)."""
    rule = _admin_rule(scope)
    return None if rule is None else peek([rule], key, None, _get_config().store)


def reset(key: Any, scope: str | type[SluicegateThrottle]) -> int:
    """Gives `key` a full bucket in the throttle of `scope` (as for ``get``); 1 if the bucket
    was held, else 0."""
    rule = _admin_rule(scope)
    return 0 if rule is None else _reset_rules([rule], key, None, _get_config().store)


def limiters() -> Series:
    """The limiters of the throttles this process has used, as ``(labels, limiter)`` pairs
    for ``render_prometheus``, or ``SluicegateCollector(sluicegate.drf.limiters)`` (each scrape
    reads the throttles used since): labels ``limit`` (``drf:anon``, ``drf:SCOPE``; ``drf:module.Class`` for a throttle
    class with a rate and no scope) and
    ``quota``."""
    with _lock:
        rules = list(_rules.values())
    return limiter_series(rules, _get_config().store)


def _admin_rule(scope: str | type[SluicegateThrottle]) -> Rule | None:
    """The rule that serves `scope` now (its rate as a request would read it)."""
    if isinstance(scope, str):
        rates = api_settings.DEFAULT_THROTTLE_RATES
        if scope not in rates:
            raise ImproperlyConfigured(f"No default throttle rate set for '{scope}' scope")
        rate = rates[scope]
        return None if rate is None else _rule(scope, rate)
    throttle = scope()
    if throttle.rate is None and not throttle.scope:
        raise TypeError(f"{scope.__name__} takes its scope from the view: pass the scope's name")
    return None if throttle.rate is None else _rule(throttle._scope_name(), throttle.rate)


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
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> Any:
        return _user_key(self, request)
