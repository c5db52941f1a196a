"""Django integration: a middleware and a view decorator, configured from settings.

    # settings.py
    MIDDLEWARE = [..., "sluicegate.django.RateLimitMiddleware"]
    SLUICEGATE = {
        "DEFAULT_LIMITS": ["100/minute"],   # every view without its own limit, per view
        "KEY": "remote_address",            # or "header:X-Api-Key", "user", a dotted path, a callable
        "HEADERS": "ietf",                  # "draft6", "draft7", "legacy", "none"
        "HEADERS_ON_ALLOWED": True,
        "POLICY": "default",
        "ENABLED": True,
        "MAX_KEYS": None,
        "STORAGE": "memory",                # or "shm:NAME" (one host), "redis://HOST:6379/0" (every host)
        "TRUSTED_PROXIES": None,            # or a hop count, or ["10.0.0.0/8", "loopback", ...]
        "PROXY_HEADER": "x-forwarded-for",  # or "forwarded" (RFC 7239): what the trusted proxies write
        "IPV6_PREFIX": 64,
        "SKIP": None,                       # a function of the request (or its dotted path): True = unlimited
    }

    # views.py
    from sluicegate.django import ratelimit, exempt

    @ratelimit("10/s; burst=20", key="user")
    def search(request): ...

A rejected request gets ``429 Too Many Requests`` with ``Retry-After`` and the RateLimit
fields (``"legacy"``: ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``, the last a Unix
time in seconds, as slowapi and flask-limiter send it). The decorator works with or without
the middleware. Django is imported only when this module is.

``STORAGE`` ``"shm:NAME"`` keeps every limit's buckets in a shared-memory region of its own,
which all the worker processes of the host share (``gunicorn -w 4`` then enforces one
``10/minute``, not four): the limit of rate R on view V (its dotted name) lives in the region
``NAME.<hash of R and V>`` (``shm:/myapp`` -> ``/dev/shm/myapp.3f0c...``), a default limit in
``NAME.<hash of R and its place in DEFAULT_LIMITS>``; its capacity is the limit's ``max_keys``.
A Redis URL (``redis://``, ``rediss://``, ``redis+unix://``, ``redis+cluster://``,
``redis+sentinel://``) keeps them on a server that every worker of every host shares, each
limit under a key prefix of its own (``PREFIX:<the same hash>``, ``PREFIX`` the URL's
``prefix=``, default ``sluicegate``), opened in each worker at its first request; the URL's
``on_error=`` says what happens while the server is slow or down (``local``, the default,
``open``, ``closed``: the request is decided; ``error``: the ``StoreError`` propagates).

Async views (``async def``) and an async middleware stack are served without a thread: the
decorator on an async view and the middleware under ASGI await the limiters' ``*_async``
methods (on Redis, without blocking the event loop). There ``KEY``, ``SKIP`` and a
decorator's ``key`` and ``cost`` may be async functions, awaited; a sync view or stack cannot
await them: ``@ratelimit`` with an async key or cost on a sync view, and the middleware in a
sync stack with an async ``KEY`` or ``SKIP``, are a TypeError when made, and an async one met
on a sync path anyway (a sync view under an async ``KEY``) a TypeError at the request, never
its coroutine taken for a key.

Every limit counts its decisions in each process: ``sluicegate.django.limiters()`` gives them
to ``render_prometheus`` or, as ``SluicegateCollector(sluicegate.django.limiters)``, to
``prometheus_client`` (docs/OPERATIONS.md, "Metrics").
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.signals import setting_changed
from django.http import HttpResponse
from django.utils.module_loading import import_string

from sluicegate._native import Decision, RateLimited
from sluicegate._web import (
    MEMORY,
    Held,
    KeyFunc,
    Outcome,
    Rates,
    Rule,
    Series,
    Taken,
    check,
    check_async,
    checked_store,
    client_resolver,
    default_rules,
    header_key,
    header_style,
    is_async,
    limiter_series,
    message,
    not_awaitable,
    peek,
    quotas,
    refund_all,
    refund_all_async,
    settle,
    setting_count,
    setting_flag,
    settle_async,
    shared_rules,
    view_name,
    view_rules,
)
from sluicegate._web import fields as _fields
from sluicegate._web import reset as _reset_rules

__all__ = [
    "RateLimitMiddleware", "exempt", "get", "header", "key_func", "limiters", "ratelimit", "remote_address", "reset",
    "user",
]  # fmt: skip

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class ViewDecorator(Protocol):
    """What ``ratelimit(...)`` returns: a decorator of a view function, sync or async, whose
    wrapper takes the view's arguments and answers its response, or a 429 ``HttpResponse``."""

    @overload
    def __call__(
        self, view: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | HttpResponse]]: ...
    @overload
    def __call__(self, view: Callable[P, R], /) -> Callable[P, R | HttpResponse]: ...

_LIMITS = "__sluicegate_limits__"
_EXEMPT = "__sluicegate_exempt__"
_ATTR = "_sluicegate"
#: On a ``@ratelimit`` wrapper: (the wrapper, the view it runs, the limits it checks), so that
#: a ``@ratelimit`` put directly on it checks every limit at once (copied by an unrelated
#: decorator's ``functools.wraps``, it names another wrapper than its holder, and is ignored).
_STACKED = "__sluicegate_stacked__"
#: Where the middleware collects what a request's limits with a ``deduct_when`` took (its
#: default limits', and ``sluicegate.drf`` throttles': DRF asks throttles before the view and
#: never shows them the response), to settle it once the response is known: a list it puts
#: on every request it serves, so that a throttle that finds none knows that no refund would
#: be made.
_SETTLE = "_sluicegate_settle"


def remote_address(request: Any) -> str:
    """The client: ``REMOTE_ADDR``, or behind the trusted proxies of
    ``SLUICEGATE["TRUSTED_PROXIES"]`` the right-most hop they did not add of
    ``X-Forwarded-For`` (or ``Forwarded`` with ``"PROXY_HEADER": "forwarded"``); IPv6 by its /64 (``IPV6_PREFIX``). A client-sent
    ``X-Forwarded-For`` without a trusted proxy changes nothing."""
    meta = request.META
    peer = meta.get("REMOTE_ADDR")
    resolver = _get_config().resolver
    if not resolver.wants_headers(peer):
        return resolver.resolve(peer)
    lines = [(name, meta[field]) for name, field in _FORWARDING if field in meta]
    return resolver.resolve(peer, lines)


#: X-Real-IP is never read, but the resolver's checks of the setup look for it.
_FORWARDING = (
    ("x-forwarded-for", "HTTP_X_FORWARDED_FOR"),
    ("forwarded", "HTTP_FORWARDED"),
    ("x-real-ip", "HTTP_X_REAL_IP"),
)


def header(name: str, fallback: KeyFunc = remote_address) -> KeyFunc:
    """Keys by a request header; `fallback` when it is absent."""
    return header_key(name, fallback)


def user(fallback: KeyFunc = remote_address) -> KeyFunc:
    """Keys by ``request.user.pk`` when authenticated; anonymous requests use `fallback`.
    Async views and an ASGI middleware stack get the user with ``request.auser()`` (reading
    ``request.user`` there queries the session on the event loop, which Django refuses)."""

    def key(request: Any) -> Any:
        who = getattr(request, "user", None)
        if who is not None and who.is_authenticated:
            return f"user:{who.pk}"
        return fallback(request)

    async def aio(request: Any) -> Any:
        auser = getattr(request, "auser", None)
        if auser is None:
            # Django before 5.0 (no auser()), or no AuthenticationMiddleware: the lazy user,
            # if any, is read in a thread.
            return await sync_to_async(key)(request)
        who = await auser()
        if who is not None and who.is_authenticated:
            return f"user:{who.pk}"
        fall = getattr(fallback, "aio", None)
        if fall is not None:
            return await fall(request)
        found = fallback(request)
        return await found if inspect.isawaitable(found) else found

    key.aio = aio  # type: ignore[attr-defined]  # check_async's form of it
    return key


def key_func(spec: str | KeyFunc) -> KeyFunc:
    """A key function from a callable, "remote_address", "header:NAME", "user", or a dotted
    path to a function of the request."""
    if callable(spec):
        return spec
    if spec == "remote_address":
        return remote_address
    if spec == "user":
        return user()
    if spec.startswith("header:") and len(spec) > len("header:"):
        return header(spec[len("header:") :])
    if "." in spec:
        return key_func(import_string(spec))
    raise ValueError(f'unknown key function {spec!r} (use "remote_address", "header:NAME", "user" or a dotted path)')


class _Config:
    """``settings.SLUICEGATE``, read once and again whenever a test overrides it."""

    style: Any

    def __init__(self) -> None:
        raw = dict(getattr(settings, "SLUICEGATE", {}))
        known = {
            "DEFAULT_LIMITS", "KEY", "HEADERS", "HEADERS_ON_ALLOWED", "POLICY", "ENABLED", "MAX_KEYS", "STORAGE",
            "TRUSTED_PROXIES", "PROXY_HEADER", "IPV6_PREFIX", "SKIP",
        }  # fmt: skip
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown SLUICEGATE settings: {sorted(unknown)}")
        self.enabled = setting_flag(raw.get("ENABLED", True), 'SLUICEGATE["ENABLED"]')
        skip = raw.get("SKIP")
        self.skip: Callable[[Any], bool] | None = import_string(skip) if isinstance(skip, str) else skip
        self.key_func = key_func(raw.get("KEY", "remote_address"))
        self.style = header_style(raw.get("HEADERS", "ietf"))
        self.headers_on_allowed = setting_flag(raw.get("HEADERS_ON_ALLOWED", True), 'SLUICEGATE["HEADERS_ON_ALLOWED"]')
        self.policy = raw.get("POLICY", "default")
        self.store = checked_store(raw.get("STORAGE", MEMORY))
        self.max_keys = setting_count(raw.get("MAX_KEYS"), 'SLUICEGATE["MAX_KEYS"]')
        self.resolver = client_resolver(raw.get("TRUSTED_PROXIES"), raw.get("IPV6_PREFIX"), raw.get("PROXY_HEADER"))
        self.defaults = default_rules(raw.get("DEFAULT_LIMITS"), self.max_keys)
        for rule in self.defaults:
            rule.open_early(self.store)
        #: The middleware's plan for each view it has seen: the default limits that apply to
        #: it (none when it has its own or is exempt) and its scope (kept with these settings:
        #: a view's attributes are set when it is decorated, not per request).
        self.views: dict[Any, tuple[list[Rule], str]] = {}


_config: _Config | None = None
#: The shared limits of ``ratelimit(..., name=)``, by name.
_shared: dict[str, list[Rule]] = {}
#: Every ``@ratelimit`` rule made in this process (for ``limiters()``), each once.
_made: dict[int, Rule] = {}
_made_lock = threading.Lock()
#: The rules method_decorator limits spend, by the view's class and the method's name, in
#: the order made (for admin tools: the view function carries the rules of the stand-in
#: function Django decorates to copy the decorator's attributes, not these).
_by_method: dict[tuple[type, str], dict[int, Rule]] = {}


def _use_max_keys(rules: list[Rule], config: _Config) -> None:
    """``SLUICEGATE["MAX_KEYS"]`` as the key bound of the view's limits that set none of
    their own (a decorator runs before the settings are read)."""
    for rule in rules:
        rule.use_max_keys(config.max_keys)


def _get_config() -> _Config:
    global _config
    if _config is None:
        _config = _Config()
    return _config


def _reset(setting: str = "", **_: Any) -> None:
    global _config
    if setting in ("SLUICEGATE", ""):
        _config = None


setting_changed.connect(_reset)


#: The limiters of ``@ratelimit`` on ``as_view()`` views, by store and region (see ``decorate``).
_AS_VIEWS: dict[tuple[str, str, bool], Any] = {}


def _scope(view: Any) -> str:
    """A view's name among the app's views, the same in every process. A class-based view's
    ``as_view()`` function is named by its class and what ``as_view`` was given
    (``TemplateView.as_view(template_name="about.html")`` and ``(template_name="terms.html")``
    are two views, ``ListView.as_view(model=Book)`` and ``(model=Author)`` too; a DRF
    ViewSet's list and detail views by their actions); one such function at several routes
    (format suffixes, language prefixes) is one view. Any other view by its qualified name."""
    cls = _view_class(view)
    if cls is not None:
        name = f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', '')}"
        given: list[tuple[str, Any]] = []
        actions = getattr(view, "actions", None)
        if actions:
            given.append(("actions", actions))
        kwargs = getattr(view, "view_initkwargs", None) or getattr(view, "initkwargs", None)
        if isinstance(kwargs, dict):
            given.extend(sorted(kwargs.items(), key=lambda kv: str(kv[0])))
        if not given:
            return name
        text = ",".join(f"{k}={_stable(v)}" for k, v in given)
        if len(text) > 120:
            text = "#" + hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:24]
        return f"{name}({text})"
    method = _method_of(view)
    if method is not None:
        return _method_label(*method)
    qualname = getattr(view, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{getattr(view, '__module__', '')}.{qualname}"
    # A partial or a callable object: named by what it calls, the same in every process
    # (its repr holds an address).
    return view_name(view)


def _method_of(view: Any) -> tuple[type, Any] | None:
    """The class and method function of the bound method ``method_decorator`` decorates on
    each call (a partial made like the method: its name is the defining class's,
    ``View.dispatch``), found under `view` itself or under the wrappers of decorators applied
    before this one (their ``__wrapped__``); None for any other view."""
    for _ in range(16):
        if isinstance(view, functools.partial):
            bound = view.func
            owner, func = getattr(bound, "__self__", None), getattr(bound, "__func__", None)
            if owner is None or func is None or isinstance(owner, type):
                return None
            if getattr(view, "__wrapped__", None) is not func:
                return None  # a partial of the app's own, not method_decorator's
            return type(owner), func
        view = getattr(view, "__wrapped__", None)
        if view is None:
            return None
    return None


def _method_label(cls: type, func: Any) -> str:
    """A method_decorator limit's name: the instance's class and the method's name, so that
    two classes inheriting one decorated method (``View.dispatch``) are two views."""
    return f"{cls.__module__}.{cls.__qualname__}.{getattr(func, '__name__', '')}"


def _own_handler_limits(view: Any, request: Any) -> bool:
    """Whether the handler a class-based view runs for this request's method has limits of
    its own (``@method_decorator(ratelimit(...), name="get")``), which replace the default
    limits for it as a decorated view's do. (On ``dispatch`` they are on the view function,
    which ``as_view`` gives ``dispatch``'s attributes.)"""
    cls = getattr(view, "view_class", None)
    if cls is None:
        return False
    method = getattr(request, "method", None)
    handler = getattr(cls, method.lower(), None) if isinstance(method, str) else None
    if handler is None and method == "HEAD":
        # Django's View answers HEAD with `get` when the class has no `head`.
        handler = getattr(cls, "get", None)
    return bool(getattr(handler, _LIMITS, None))


def _view_class(view: Any) -> type | None:
    """The class of a view function that ``as_view()`` made (Django's ``view_class``, a DRF
    ViewSet's ``cls``), else None."""
    for attr in ("view_class", "cls"):
        cls = getattr(view, attr, None)
        if isinstance(cls, type):
            return cls
    return None


def _stable(value: Any, depth: int = 0) -> str:
    """`value` as text that every process writes alike, without running code of the value's
    own: plain values by their repr, classes and functions by their qualified names, a
    QuerySet or Manager by its model (never evaluated), anything else by its type."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if depth < 3:
        if isinstance(value, (list, tuple)):
            return "[" + ",".join(_stable(v, depth + 1) for v in value) + "]"
        if isinstance(value, dict):
            items = sorted(((_stable(k, depth + 1), _stable(v, depth + 1)) for k, v in value.items()))
            return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
        if isinstance(value, (set, frozenset)):
            return "{" + ",".join(sorted(_stable(v, depth + 1) for v in value)) + "}"
    if isinstance(value, type) or inspect.isroutine(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
    model = inspect.getattr_static(value, "model", None)  # no property of the value's runs
    if isinstance(model, type):
        return f"{type(value).__qualname__}({model.__module__}.{model.__qualname__})"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _target(view: Any) -> Any:
    """What a decoration stands for: the view, or, for the bound method that
    ``method_decorator`` makes and decorates anew on every call (under the wrappers of the
    decorators before this one), its class and function: two classes inheriting one decorated
    method are two views."""
    method = _method_of(view)
    if method is not None:
        return method
    if isinstance(view, functools.partial):
        f = view.func
        return getattr(f, "__func__", f)
    return view

#: The most views whose plan a configuration keeps (cleared when full: views are few, but a
#: URLconf could make callbacks on the fly).
_VIEWS_KEPT = 4096


#: Marks the 429 of a limit's rejection: a ``@ratelimit`` further out, with another decorator
#: between them (which ``@ratelimit`` directly on ``@ratelimit`` checks together), gives back
#: what it took for a request that such a response answers (all or nothing over the
#: request's limits).
_REFUSED = "_sluicegate_refused"


def _too_many(decision: Decision, rule: Rule | None, config: _Config) -> HttpResponse:
    response = HttpResponse(message(decision), status=429, content_type="text/plain")
    _add_headers(response, decision, rule, config, force=True)
    setattr(response, _REFUSED, True)
    return response


def _refused(response: Any) -> bool:
    """Whether `response` is a limit's 429 (an inner ``@ratelimit`` refused the request), as
    it left that limit (a decorator between that turned it into another status served the
    request some other way)."""
    return getattr(response, _REFUSED, False) is True and getattr(response, "status_code", None) == 429


def _add_headers(response: Any, decision: Decision, rule: Rule | None, config: _Config, force: bool = False) -> None:
    policy = (rule and rule.policy) or config.policy
    for name, value in _fields(decision, config.style, policy).items():
        if force or not response.has_header(name):
            response[name] = value


def _skipped(request: Any, config: _Config) -> bool:
    """Whether the limits let `request` through: off, or ``SKIP`` says so (synchronous: an
    async ``SKIP``'s coroutine is a TypeError here, never a truthy answer)."""
    if not config.enabled:
        return True
    if config.skip is None:
        return False
    found = config.skip(request)
    if found is not True and found is not False:
        not_awaitable(found, config.skip, 'SLUICEGATE["SKIP"]')
    return bool(found)


async def _skipped_async(request: Any, config: _Config) -> bool:
    """``_skipped`` for async views and middleware: an async ``SKIP`` awaited."""
    if not config.enabled:
        return True
    if config.skip is None:
        return False
    found = config.skip(request)
    if found is not True and found is not False and inspect.isawaitable(found):
        found = await found
    return bool(found)


def _run(rules: list[Rule], request: Any, config: _Config, scope: str) -> HttpResponse | None:
    taken = _pending(request)
    return _outcome(check(rules, request, config.key_func, scope, config.store, taken), request, config)


async def _run_async(rules: list[Rule], request: Any, config: _Config, scope: str) -> HttpResponse | None:
    taken = _pending(request)
    outcome = await check_async(rules, request, config.key_func, scope, config.store, taken)
    return _outcome(outcome, request, config)


def _outcome(outcome: Outcome, request: Any, config: _Config) -> HttpResponse | None:
    """A 429 for a rejected request; otherwise None, the decision kept for the headers (what
    it took is in the request's refunds by response, which the middleware settles)."""
    decision, rule, allowed = outcome
    if not allowed:
        return _too_many(decision, rule, config)  # type: ignore[arg-type]
    if decision is not None:
        setattr(request, _ATTR, (decision, rule))
    return None


def _pending(request: Any) -> Taken:
    """The request's refunds by response, which the middleware's ``__call__`` settles once it
    has the response; a list of its own for a request that came another way (``process_view``
    called without ``__call__``, as ``decorator_from_middleware`` does)."""
    found: Taken | None = request.__dict__.get(_SETTLE)
    if found is None:
        found = request.__dict__[_SETTLE] = []
    return found


def _defer(request: Any, taken: Taken, decision: Decision | None, rule: Rule | None) -> None:
    """A decorated view raised: with the middleware installed (it made the request's list of
    refunds), its refunds and fields go to the response Django makes of the exception (a 500,
    a 404 for ``Http404``, a 429 for ``RateLimited``), which the middleware gets. Without it
    there is no response to judge: the tokens stay taken (never more than the policy allows)."""
    # A DRF view's decorator gets DRF's Request, which wraps the HttpRequest the middleware saw.
    request = getattr(request, "_request", request)
    pending: Taken | None = request.__dict__.get(_SETTLE)
    if pending is None:
        return
    pending.extend(taken)
    if decision is not None:
        setattr(request, _ATTR, (decision, rule))


def _with_headers(response: Any, request: Any, config: _Config) -> Any:
    """The response with the fields of the decision the middleware's default limits kept."""
    found = request.__dict__.pop(_ATTR, None)
    if found is not None and config.headers_on_allowed:
        _add_headers(response, found[0], found[1], config)
    return response


def _finish(response: Any, decision: Decision | None, rule: Rule | None, taken: Taken, config: _Config) -> Any:
    """An admitted request's response: what `taken` took refunded where the response does not
    earn it (``deduct_when``), and the decision's fields added."""
    settle(taken, response)
    if decision is not None and config.headers_on_allowed:
        _add_headers(response, decision, rule, config)
    return response


def ratelimit(
    rates: Rates,
    *,
    key: str | KeyFunc | None = None,
    cost: int | Callable[[Any], int] = 1,
    policy: str | None = None,
    max_keys: int | None = None,
    deduct_when: Callable[[Any], bool] | None = None,
    name: str | None = None,
    shadow: bool = False,
) -> ViewDecorator:
    """Limits a view function (replacing the middleware's default limits for it). Each view
    it decorates counts on its own; a limit opens its store at the first request it sees. An
    async view (``async def``) gets an async wrapper, which awaits the limiters. Several
    rates, and ``@ratelimit`` decorators put directly on one another, must all admit a
    request: the limits are checked at once, outer decorator first, and when one rejects,
    the tokens the others took are refunded (with another decorator between two, the inner
    one is checked when the call reaches it, and its 429, or a ``RateLimited`` raised further
    in, refunds the outer one's tokens).
    `deduct_when`, a function of the response, counts only the requests whose response it
    accepts (``lambda r: r.status_code < 400``); the others get their tokens back. A `name`
    makes it one limit shared by every view that names it. `shadow=True` decides and counts
    but never rejects (a dry run: would-be rejections are logged on the ``sluicegate``
    logger)."""
    kf = None if key is None else key_func(key)
    parsed = quotas(rates, cost)
    if not parsed:
        raise ValueError("ratelimit() needs at least one rate")

    # The rules and scope of each view decorated, made once: `method_decorator` calls this
    # decorator on every request, with a new partial of the method each time.
    made: dict[Any, tuple[list[Rule], str]] = {}

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        if isinstance(view, type):
            # The wrapper would replace the class (`C.as_view()` then fails far from here).
            raise TypeError(
                f"@ratelimit decorates view functions, not the class {view.__qualname__}: "
                "decorate its as_view() (ratelimit(...)(View.as_view())) or, with "
                "method_decorator, its dispatch or handlers"
            )
        below = getattr(view, _LIMITS, None) or []
        target = _target(view)
        found = made.get(target)
        if found is None:
            options: dict[str, Any] = {
                "cost": cost, "policy": policy, "max_keys": max_keys, "deduct_when": deduct_when, "shadow": shadow,
            }  # fmt: skip
            if name is not None:
                rules = shared_rules(_shared, name, parsed, kf, **options)
            elif _view_class(view) is not None:
                # Every as_view() view of a class has the rules' scope (their region or prefix
                # on a shared store): the key carries the view's. Two decorators on views of
                # one class made with the same arguments are on one view (as one such view at
                # two routes is), so they share buckets on a shared store: in memory too.
                rules = view_rules(view, below, parsed, kf, scoped=True, memory_pool=_AS_VIEWS, **options)
            else:
                method = _method_of(view)
                label = None if method is None else _method_label(*method)
                rules = view_rules(view, below, parsed, kf, label=label, **options)
            found = made.setdefault(target, (rules, _scope(view)))
            with _made_lock:
                for rule in found[0]:
                    _made.setdefault(id(rule), rule)
                if isinstance(target, tuple):  # method_decorator's (class, function)
                    spent = _by_method.setdefault((target[0], getattr(target[1], "__name__", "")), {})
                    for rule in found[0]:
                        spent.setdefault(id(rule), rule)
        rules, scope = found
        stacked = getattr(view, _STACKED, None)
        if stacked is not None and stacked[0] is view:
            # Directly on another @ratelimit: one check of both's limits, all or nothing,
            # around the view below both.
            inner, every = stacked[1], [*rules, *stacked[2]]
        else:
            inner, every = view, rules

        @functools.wraps(view)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            config = _get_config()
            if _skipped(request, config):
                return inner(request, *args, **kwargs)
            if every[0].fallback_max_keys != config.max_keys:
                _use_max_keys(every, config)
            taken: Taken = []
            held: Held = []
            decision, rule, allowed = check(every, request, config.key_func, scope, config.store, taken, held)
            if not allowed:
                return _too_many(decision, rule, config)  # type: ignore[arg-type]
            try:
                response = inner(request, *args, **kwargs)
            except RateLimited:
                # A limit further in refused the request by raising (the middleware answers
                # the 429): all or nothing, as for its 429.
                refund_all(held)
                raise
            except BaseException:
                _defer(request, taken, decision, rule)
                raise
            if _refused(response):
                # A limit further in (another decorator between) refused the request.
                refund_all(held)
                return response
            return _finish(response, decision, rule, taken, config)

        @functools.wraps(view)
        async def async_wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            config = _get_config()
            if await _skipped_async(request, config):
                return await inner(request, *args, **kwargs)
            if every[0].fallback_max_keys != config.max_keys:
                _use_max_keys(every, config)
            taken: Taken = []
            held: Held = []
            decision, rule, allowed = await check_async(
                every, request, config.key_func, scope, config.store, taken, held
            )
            if not allowed:
                return _too_many(decision, rule, config)  # type: ignore[arg-type]
            try:
                response = await inner(request, *args, **kwargs)
            except RateLimited:
                await asyncio.shield(refund_all_async(held))
                raise
            except BaseException:
                _defer(request, taken, decision, rule)
                raise
            if _refused(response):
                # Shielded, as check_async's give-back: a cancelled request still gives back.
                await asyncio.shield(refund_all_async(held))
                return response
            await settle_async(taken, response)
            return _finish(response, decision, rule, [], config)

        if iscoroutinefunction(view):
            wrapper = async_wrapper  # type: ignore[assignment, unused-ignore]
        elif any(rule.awaits for rule in rules):
            # A sync view's wrapper cannot await it: its coroutine was the key (its repr).
            raise TypeError(
                f"@ratelimit on the sync view {getattr(view, '__qualname__', view)!r} has an async key or "
                "cost function, which only an async view (async def) awaits: give a plain function"
            )
        # Every rule of the view, this decorator's and those below (a view's rules are
        # numbered from the innermost decorator).
        setattr(wrapper, _LIMITS, [*rules, *below])
        setattr(wrapper, _STACKED, (wrapper, inner, every))
        return wrapper

    return cast(ViewDecorator, decorate)


def get(key: Any, view: Any) -> Decision | None:
    """What the limits of `view` (its ``@ratelimit`` ones, or the default limits) would say
    of `key` (what the key function returns: a client address, ``"user:42"``) now, taking
    nothing. For admin tools. A class-based view limited through ``method_decorator`` (on
    ``dispatch`` or ``get``) is read by the limits its requests spent once this process has
    served it (Django decorates a stand-in function first, whose limits the view carries)."""
    return peek(_admin_rules(view), key, _scope(view), _get_config().store)


def reset(key: Any, view: Any) -> int:
    """Gives `key` full buckets in the limits of `view`; how many held it."""
    return _reset_rules(_admin_rules(view), key, _scope(view), _get_config().store)


def limiters() -> Series:
    """The limiters of the default limits and of every ``@ratelimit`` this process has made,
    as ``(labels, limiter)`` pairs for ``render_prometheus``, or
    ``SluicegateCollector(sluicegate.django.limiters)`` (each scrape reads the limits made
    since): labels ``limit`` (the view's dotted name and the limit's place, ``default#0``,
    ``shared:NAME#0``) and ``quota``. Each counts its decisions in this process; a limit on
    Redis appears at its first request. ``sluicegate.drf.limiters()`` gives the throttles'."""
    config = _get_config()
    with _made_lock:
        rules = list(_made.values())
    return limiter_series([*config.defaults, *rules], config.store)


def _admin_rules(view: Any) -> list[Rule]:
    cls = _view_class(view)
    if cls is not None:
        # method_decorator's limits, once this process has served the view: on dispatch,
        # else on get (what an admin tool asks of a page).
        with _made_lock:
            for method in ("dispatch", "get"):
                spent = _by_method.get((cls, method))
                if spent:
                    return list(spent.values())
    own: list[Rule] | None = getattr(view, _LIMITS, None)
    if own:  # enforced whatever is below (an @exempt under @ratelimit included)
        return own
    if getattr(view, _EXEMPT, False):
        return []
    return _get_config().defaults


def exempt(view: F) -> F:
    """The middleware's default limits do not apply to this view."""
    setattr(view, _EXEMPT, True)
    return view


class RateLimitMiddleware:
    """Applies ``SLUICEGATE["DEFAULT_LIMITS"]`` to every view that has neither its own
    ``@ratelimit`` nor ``@exempt``, counted per view and client, and turns a
    ``RateLimited`` raised by a view into a 429. A class-based view's ``as_view()`` function
    counts on its own, named by its class and ``as_view``'s arguments (see ``_scope``). Sync and async: in an async stack (ASGI)
    it awaits the limiters instead of running in a thread. It also makes the refunds of
    ``sluicegate.drf`` throttles with a ``deduct_when``, by the response it gets (a view's
    uncaught exception is Django's 500 by then)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)
            # Django awaits a coroutine function's process_view in the event loop, and runs
            # a plain one in a thread.
            self.process_view = self._process_view_async  # type: ignore[method-assign]
        # The settings are read, and the default limits' store opened, when Django loads the
        # middleware: a bad setting fails at startup, and a server that forks after loading
        # the app (``gunicorn --preload``) shares regions opened before the fork (a Redis
        # store is opened in each worker at its first request instead).
        config = _get_config()
        if not self._async:
            # A sync stack cannot await them (their coroutine was a key, a truthy SKIP).
            for fn, what in ((config.key_func, 'SLUICEGATE["KEY"]'), (config.skip, 'SLUICEGATE["SKIP"]')):
                if is_async(fn):
                    raise TypeError(
                        f"{what} is async (a coroutine function), and the middleware runs in a sync (WSGI) "
                        "stack, which cannot await it: give a plain function, or serve the app with ASGI"
                    )

    def __call__(self, request: Any) -> Any:
        if self._async:
            return self.__acall__(request)
        taken: Taken = []
        request.__dict__[_SETTLE] = taken
        response = self.get_response(request)
        if taken:
            settle(taken, response)
        return _with_headers(response, request, _get_config())

    async def __acall__(self, request: Any) -> Any:
        taken: Taken = []
        request.__dict__[_SETTLE] = taken
        response = await self.get_response(request)
        if taken:
            await settle_async(taken, response)
        return _with_headers(response, request, _get_config())

    @staticmethod
    def _plan(config: _Config, view: Any) -> tuple[list[Rule], str]:
        """The default limits that apply to `view` (none if it has its own or is exempt, or
        the limits are off) and its scope, kept per view with the settings."""
        try:
            return config.views[view]
        except KeyError:
            pass
        except TypeError:  # an unhashable callback: worked out each time
            return RateLimitMiddleware._plan_of(config, view)
        plan = RateLimitMiddleware._plan_of(config, view)
        if len(config.views) >= _VIEWS_KEPT:
            config.views.clear()
        config.views[view] = plan
        return plan

    @staticmethod
    def _plan_of(config: _Config, view: Any) -> tuple[list[Rule], str]:
        if not config.enabled or getattr(view, _EXEMPT, False) or getattr(view, _LIMITS, None):
            return [], ""
        return config.defaults, _scope(view)

    def process_view(self, request: Any, view: Any, args: Any, kwargs: Any) -> Any:
        config = _get_config()
        rules, scope = self._plan(config, view)
        if not rules or _skipped(request, config) or _own_handler_limits(view, request):
            return None
        return _run(rules, request, config, scope)

    async def _process_view_async(self, request: Any, view: Any, args: Any, kwargs: Any) -> Any:
        config = _get_config()
        rules, scope = self._plan(config, view)
        if not rules or await _skipped_async(request, config) or _own_handler_limits(view, request):
            return None
        return await _run_async(rules, request, config, scope)

    def process_exception(self, request: Any, exception: Exception) -> Any:
        if isinstance(exception, RateLimited):
            return _too_many(exception.decision, None, _get_config())
        return None
