"""Flask integration: ``Sluicegate(app)`` or ``Sluicegate().init_app(app)``.

    from flask import Flask
    from sluicegate.flask import Sluicegate, header

    app = Flask(__name__)
    app.config["SLUICEGATE_DEFAULT_LIMITS"] = ["100/minute"]
    limiter = Sluicegate(app)

    @app.get("/search")
    @limiter.limit("10/s; burst=20", key=header("X-Api-Key"))
    def search(): ...

Configuration (``app.config``, read by ``init_app``; constructor arguments win):

* ``SLUICEGATE_ENABLED`` (True): turn every check off, e.g. in tests.
* ``SLUICEGATE_SKIP`` (None): a function of the request; True lets the request through
  unlimited (an allowlist, health checks). Constructor: ``skip=``.
* ``SLUICEGATE_DEFAULT_LIMITS`` ([]): rates applied to every view without its own
  ``@limit``, counted per view and client; not to Flask's ``static`` endpoints (the app's
  and blueprints' static files), as in flask-limiter (a ``@limit`` or a blueprint's limit on
  them still applies).
* ``SLUICEGATE_KEY_FUNC`` (``remote_address``): a callable, or "remote_address",
  "header:NAME" or "user".

Key functions, cost functions and ``skip`` take the request, or no argument (flask-limiter's
form, ``get_remote_address`` or ``lambda: request.headers["X-Api-Key"]``, which read
``flask.request``): which is decided by the signature when they are configured. They must be
plain functions: ``before_request`` cannot await an ``async def`` one (a TypeError when it is
configured).

``on_breach=`` (constructor), a function of the ``RateLimited`` error (its ``decision``,
``retry_after``), called in the request's context (``flask.request``), is told of every
rejection: None answers the default 429; anything else Flask can make a response of (a
Response, a string, a ``(body, status)`` tuple, a dict) answers it, its status made 429 if it
is not an error status (a rejection is never answered as a success). The RateLimit fields and
``Retry-After`` are set on it.
* ``SLUICEGATE_HEADERS`` ("ietf"): "ietf", "draft6", "draft7", "legacy" or "none"
  ("legacy": ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``, the last a Unix time in
  seconds as flask-limiter sends it).
* ``SLUICEGATE_HEADERS_ON_ALLOWED`` (True): add the RateLimit fields to allowed responses too.
* ``SLUICEGATE_POLICY`` ("default"): the policy name in the IETF fields.
* ``SLUICEGATE_MAX_KEYS`` (the core's default): the key bound of each limit.
* ``SLUICEGATE_TRUSTED_PROXIES`` (None): whose forwarding headers ``remote_address``
  believes: None (the peer address is the client: a client-sent ``X-Forwarded-For`` changes
  nothing), a hop count, or a list of addresses, CIDR ranges and "loopback", "private",
  "linklocal"; the client is then the right-most untrusted hop (docs/CLIENT-IDENTITY.md).
  ``SLUICEGATE_PROXY_HEADER`` ("x-forwarded-for"): the header they write, or "forwarded"
  (RFC 7239). ``SLUICEGATE_IPV6_PREFIX`` (64): an IPv6 client is keyed by its /64.
  Constructor: ``trusted_proxies=``, ``proxy_header=``, ``ipv6_prefix=``.
* ``SLUICEGATE_STORAGE`` ("memory"): where the limits' buckets live. "memory" is each
  process's own; ``"shm:NAME"`` is a shared-memory region per limit that every worker process
  of the host shares (``gunicorn -w 4`` then enforces one ``10/minute``, not four): the limit
  of rate R on view V lives in the region ``NAME.<hash of R and V>`` (``shm:/myapp`` ->
  ``/dev/shm/myapp.3f0c...``), a default limit in ``NAME.<hash of R and its place in the
  list>``. The region's capacity is the limit's ``max_keys``. ``"redis://HOST:6379/0"``
  (also ``rediss://``, ``redis+unix://``, ``redis+cluster://``, ``redis+sentinel://``) keeps
  them on a Redis or Valkey server that every worker of every host shares, each limit under
  a key prefix of its own (``PREFIX:<hash of R and V>``, ``PREFIX`` the URL's ``prefix=``,
  default ``sluicegate``), opened in each worker at its first request; ``on_error=`` in the
  URL says what happens while the server is slow or down (``local``, the default, ``open``,
  ``closed``: the request is decided, never an exception; ``error``: the ``StoreError``
  propagates, a 500 unless handled). Constructor: ``storage=``.

Views run their checks in ``before_request``, which Flask calls synchronously for async views
too: on Redis the check waits for the server with the GIL released.

``limit(...)`` and ``exempt`` take a view function, a blueprint (its views without limits of
their own, and its nested blueprints'), a class-based view (``MethodView``) class or one of its
handlers.

A rejected request gets ``429 Too Many Requests`` with ``Retry-After`` and the RateLimit
fields: ``on_breach``'s answer, else the app's own handler of 429 (``@app.errorhandler(429)``
or a blueprint's, given a ``RateLimitExceeded``), else a plain-text one. ``raise sluicegate.RateLimited(decision)`` in a view gets the same response. Flask is
imported only when this module is.

Every limit counts its decisions in each process: ``limiter.limiters()`` gives them to
``render_prometheus`` or, as ``SluicegateCollector(limiter.limiters)``, to
``prometheus_client`` (docs/OPERATIONS.md, "Metrics").
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flask import Blueprint, Flask, current_app, g, has_app_context, request
from werkzeug.exceptions import TooManyRequests

from sluicegate._native import Decision, RateLimited
from sluicegate._web import (
    MEMORY,
    PEER_ONLY,
    KeyFunc,
    Rates,
    Rule,
    Series,
    Taken,
    check,
    checked_store,
    client_resolver,
    default_rules,
    header_style,
    limiter_series,
    message,
    peek,
    quotas,
    refuse_async,
    reset,
    setting_count,
    setting_flag,
    settle,
    shared_rules,
    view_rules,
)
from sluicegate._web import fields as _fields

__all__ = ["RateLimitExceeded", "Sluicegate", "header", "key_func", "remote_address", "user"]


def _handles_429(app: Flask) -> bool:
    """Whether the app, or a blueprint of the request, has a handler registered for 429 (by
    the code or by ``TooManyRequests``; Flask files both under the code)."""
    spec = app.error_handler_spec
    return any(spec.get(name, {}).get(429) for name in (*request.blueprints, None))


class RateLimitExceeded(TooManyRequests):
    """What an app's own handler of 429 gets (``@app.errorhandler(429)``, or of
    ``TooManyRequests``, as flask-limiter's users write them): werkzeug's 429, with the
    rejection's ``decision``, ``retry_after`` in whole seconds (werkzeug's, as
    ``Retry-After`` says it), the ``RateLimited`` ``error``, and ``description`` the default
    answer's text. Raised by nothing: the extension hands it to the handler, and answers
    itself where the app has none."""

    def __init__(self, error: RateLimited) -> None:
        super().__init__(message(error.decision).strip(), retry_after=error.decision.retry_after_header)
        self.decision: Decision = error.decision
        self.error = error


#: What `limit` and `exempt` decorate: a view (function, `MethodView` class) or a blueprint.
F = TypeVar("F", bound=Callable[..., Any] | Blueprint)

_LIMITS = "__sluicegate_limits__"
_EXEMPT = "__sluicegate_exempt__"


def remote_address(req: Any = None) -> str:
    """The client: the peer address, or behind the app's trusted proxies the right-most hop
    they did not add (``SLUICEGATE_TRUSTED_PROXIES``); IPv6 by its /64."""
    found = current_app.extensions.get("sluicegate")
    resolver = found[1].resolver if found is not None else PEER_ONLY
    req = request if req is None else req
    return resolver.resolve(req.remote_addr, req.headers.items())


def of_request(fn: Callable[..., Any], what: str) -> Callable[[Any], Any]:
    """`fn`, a key function, a cost function or ``skip``, as a function of the request. It may
    take the request (one argument), or none (flask-limiter's form: ``get_remote_address``,
    ``lambda: request.headers["X-Api-Key"]``, reading ``flask.request``); which is decided here,
    once, by its signature. Anything else, and an async function (``before_request`` cannot
    await it), is a TypeError now rather than at a request."""
    refuse_async(fn, what, "Flask's before_request")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (a builtin): given the request
        return fn
    try:
        signature.bind(None)
        return fn
    except TypeError:
        pass
    try:
        signature.bind()
    except TypeError:
        raise TypeError(
            f"{what} {getattr(fn, '__qualname__', fn)!r} must take the request, or no argument "
            f"(reading flask.request), not {signature}"
        ) from None

    def call(req: Any) -> Any:
        return fn()

    # Its name, for errors that name it (not functools.wraps: its __wrapped__ would give the
    # wrapper the signature of no argument).
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        found = getattr(fn, attr, None)
        if found is not None:
            setattr(call, attr, found)
    return call


def header(name: str, fallback: KeyFunc = remote_address) -> KeyFunc:
    """Keys by a request header (an API key, a tenant id); `fallback` when it is absent."""
    fallback = of_request(fallback, "the fallback key function")

    def key(req: Any = None) -> Any:
        value = (request if req is None else req).headers.get(name)
        return f"{name}:{value}" if value else fallback(req)

    key.__name__ = f"header_{name}"
    return key


def user(attribute: str = "id", fallback: KeyFunc = remote_address) -> KeyFunc:
    """Keys by the logged-in user: flask-login's ``current_user`` when it is installed and
    authenticated, else ``g.user``; anonymous requests fall back to `fallback`."""
    fallback = of_request(fallback, "the fallback key function")

    def key(req: Any = None) -> Any:
        who = _current_user()
        if who is not None:
            return f"user:{getattr(who, attribute)}"
        return fallback(req)

    return key


def _current_user() -> Any:
    try:
        from flask_login import current_user  # type: ignore[import-not-found]
    except ImportError:
        current_user = None
    if current_user is not None and getattr(current_user, "is_authenticated", False):
        return current_user
    return g.get("user")


def key_func(spec: str | KeyFunc | Callable[[], Any]) -> KeyFunc:
    """A key function from a callable (of the request, or of no argument: ``of_request``) or a
    name: "remote_address", "header:NAME", "user"."""
    if callable(spec):
        return of_request(spec, "the key function")
    if spec == "remote_address":
        return remote_address
    if spec == "user":
        return user()
    if spec.startswith("header:") and len(spec) > len("header:"):
        return header(spec[len("header:") :])
    raise ValueError(f'unknown key function {spec!r} (use "remote_address", "header:NAME" or "user")')


class _State:
    """One app's configuration, read by ``init_app``."""

    defaults: list[Rule]
    enabled: bool
    headers_on_allowed: bool
    key_func: KeyFunc
    policy: str
    style: Any
    max_keys: int | None
    resolver: Any
    skip: Callable[[Any], bool] | None
    store: str


class Sluicegate:
    """The Flask extension. One instance may serve several apps (``init_app``)."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        key_func: str | KeyFunc | Callable[[], Any] | None = None,
        default_limits: Rates | None = None,
        headers: str | None = None,
        enabled: bool | None = None,
        policy: str | None = None,
        on_breach: Callable[[RateLimited], Any] | None = None,
        storage: str | None = None,
        trusted_proxies: int | str | Iterable[str] | None = None,
        ipv6_prefix: int | None = None,
        skip: Callable[[Any], bool] | Callable[[], bool] | None = None,
        proxy_header: str | None = None,
    ) -> None:
        self._key_func = key_func
        self._skip = skip
        self._trusted_proxies = trusted_proxies
        self._ipv6_prefix = ipv6_prefix
        self._proxy_header = proxy_header
        self._storage = storage
        # The decorated limits, and the stores of the apps this extension serves: a limit
        # opens its store when both are known (at import, so that a server that forks after
        # loading the app, like ``gunicorn --preload``, shares regions opened before the fork).
        self._rules: list[Rule] = []
        self._shared: dict[str, list[Rule]] = {}
        self._stores: list[str] = []
        # The configuration of each app served (while it lives), for ``limiters()``.
        self._states: weakref.WeakKeyDictionary[Flask, _State] = weakref.WeakKeyDictionary()
        # ``SLUICEGATE_MAX_KEYS`` of the app served: the key bound of decorated limits that set
        # none of their own.
        self._max_keys: int | None = None
        # Limits and exemptions of blueprints, by the blueprint's name.
        self._blueprints: dict[str, list[Rule] | None] = {}
        self._default_limits = default_limits
        self._headers = headers
        self._enabled = enabled
        self._policy = policy
        self._on_breach = on_breach
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        cfg = app.config
        state = _State()

        def pick(arg: Any, name: str, default: Any) -> Any:
            return arg if arg is not None else cfg.get(name, default)

        state.enabled = setting_flag(pick(self._enabled, "SLUICEGATE_ENABLED", True), "SLUICEGATE_ENABLED")
        skip = pick(self._skip, "SLUICEGATE_SKIP", None)
        state.skip = None if skip is None else of_request(skip, "SLUICEGATE_SKIP")
        state.key_func = key_func(pick(self._key_func, "SLUICEGATE_KEY_FUNC", "remote_address"))
        state.style = header_style(pick(self._headers, "SLUICEGATE_HEADERS", "ietf"))
        state.policy = pick(self._policy, "SLUICEGATE_POLICY", "default")
        state.headers_on_allowed = setting_flag(
            cfg.get("SLUICEGATE_HEADERS_ON_ALLOWED", True), "SLUICEGATE_HEADERS_ON_ALLOWED"
        )
        state.max_keys = setting_count(cfg.get("SLUICEGATE_MAX_KEYS"), "SLUICEGATE_MAX_KEYS")
        state.resolver = client_resolver(
            pick(self._trusted_proxies, "SLUICEGATE_TRUSTED_PROXIES", None),
            pick(self._ipv6_prefix, "SLUICEGATE_IPV6_PREFIX", None),
            pick(self._proxy_header, "SLUICEGATE_PROXY_HEADER", None),
        )
        state.store = checked_store(pick(self._storage, "SLUICEGATE_STORAGE", MEMORY))
        state.defaults = default_rules(
            pick(self._default_limits, "SLUICEGATE_DEFAULT_LIMITS", None), state.max_keys
        )
        self._max_keys = state.max_keys
        for rule in self._rules:
            rule.use_max_keys(state.max_keys)
        for rule in [*state.defaults, *self._rules]:
            rule.open_early(state.store)
        if state.store not in self._stores:
            self._stores.append(state.store)
        app.extensions["sluicegate"] = (self, state)
        self._states[app] = state
        app.before_request(self._before_request)
        app.after_request(self._after_request)
        app.teardown_request(self._teardown_request)
        app.register_error_handler(RateLimited, self._rate_limited)

    @property
    def enabled(self) -> bool:
        """Whether the limits are checked: ``SLUICEGATE_ENABLED`` (or the constructor's
        ``enabled``) as read by ``init_app``, until set. ``limiter.enabled = False`` turns
        every check of every app this extension serves off at once (a test fixture, as with
        flask-limiter), and True back on; an app served later starts as it is set."""
        if self._enabled is not None:
            return bool(self._enabled)
        return all(state.enabled for state in self._states.values())

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"enabled must be a bool, not {type(value).__name__}")
        self._enabled = value
        for state in self._states.values():
            state.enabled = value

    def limit(
        self,
        rates: Rates,
        *,
        key: str | KeyFunc | Callable[[], Any] | None = None,
        cost: int | Callable[[Any], int] | Callable[[], int] = 1,
        policy: str | None = None,
        max_keys: int | None = None,
        deduct_when: Callable[[Any], bool] | None = None,
        name: str | None = None,
        shadow: bool = False,
    ) -> Callable[[F], F]:
        """Limits a view (replacing the default limits for it). Several rates, or several
        decorators, must all admit a request. `key` defaults to the app's key function;
        `cost` may be a function of the request; key and cost functions may take the request or
        no argument (flask-limiter's form, reading ``flask.request``), and must not be async.
        Each view it decorates counts on its own.
        `deduct_when`, a function of the response, counts only the requests whose response
        it accepts (``lambda r: r.status_code < 400``: failures are free); the others get
        their tokens back. A `name` makes it one limit shared by every view that names it.
        `shadow=True` decides and counts but never rejects (a dry run of a new limit: the
        would-be rejections are logged on the ``sluicegate`` logger).
        """
        kf = None if key is None else key_func(key)
        if callable(cost):
            cost = of_request(cost, "the cost function")
        parsed = quotas(rates, cost)
        if not parsed:
            raise ValueError("limit() needs at least one rate")

        def decorate(view: F) -> F:
            options: dict[str, Any] = {
                "cost": cost, "policy": policy, "max_keys": max_keys, "deduct_when": deduct_when, "shadow": shadow,
            }  # fmt: skip
            if isinstance(view, Blueprint):
                self._limit_blueprint(view, name, parsed, kf, options)
                return view
            existing = view.__dict__.get(_LIMITS) or []
            if name is not None:
                rules = shared_rules(self._shared, name, parsed, kf, **options)
            else:
                rules = view_rules(view, existing, parsed, kf, **options)
            for rule in rules:
                rule.use_max_keys(self._max_keys)
            for store in self._stores:
                for rule in rules:
                    rule.open_early(store)
            self._rules.extend(rules)
            setattr(view, _LIMITS, [*rules, *existing])
            return view

        return decorate

    def exempt(self, view: F) -> F:
        """No limit applies to this view (not even the default limits); on a blueprint, to
        its views that have no limits of their own."""
        if isinstance(view, Blueprint):
            self._blueprints[view.name] = None
        else:
            setattr(view, _EXEMPT, True)
        return view

    def _limit_blueprint(
        self, bp: Blueprint, name: str | None, parsed: list[Any], kf: KeyFunc | None, options: dict[str, Any]
    ) -> None:
        """``limit(...)(blueprint)``: the limits of each view of `bp` (and of the blueprints
        registered in it) that has none of its own, counted per view, or, with a `name`, one
        limit shared by all of them."""
        if name is not None:
            rules = shared_rules(self._shared, name, parsed, kf, **options)
        else:
            before = self._blueprints.get(bp.name) or []
            rules = [
                Rule(q, kf, scope=f"blueprint:{bp.name}#{len(before) + i}", scoped=True, **options)
                for i, q in enumerate(parsed)
            ]
        for rule in rules:
            rule.use_max_keys(self._max_keys)
        for store in self._stores:
            for rule in rules:
                rule.open_early(store)
        self._rules.extend(rules)
        self._blueprints[bp.name] = [*rules, *(self._blueprints.get(bp.name) or [])]

    def _limits_of(self, view: Any, method: str, endpoint: str, defaults: list[Rule]) -> list[Rule]:
        """The rules of a request to `view` at `endpoint`: a class-based view's handler's or
        class's own, the view's own, its blueprints' (innermost first), else `defaults`; none
        where an exemption comes first."""
        cls = getattr(view, "view_class", None)
        if cls is not None:
            # As MethodView dispatches: the method's handler, HEAD by GET's.
            handler = getattr(cls, method.lower(), None)
            if handler is None and method == "HEAD":
                handler = getattr(cls, "get", None)
            for target in (handler, cls):
                if target is not None:
                    if getattr(target, _EXEMPT, False):
                        return []
                    own = getattr(target, _LIMITS, None)
                    if own:
                        return own  # type: ignore[no-any-return]
        if getattr(view, _EXEMPT, False):
            return []
        own = getattr(view, _LIMITS, None)
        if own:
            return own  # type: ignore[no-any-return]
        if self._blueprints:
            blueprint = endpoint.rpartition(".")[0]
            while blueprint:
                if blueprint in self._blueprints:
                    return self._blueprints[blueprint] or []
                blueprint = blueprint.rpartition(".")[0]
        if endpoint == "static" or endpoint.endswith(".static"):
            # Flask's static files (the app's, a blueprint's): no default limit, as in
            # flask-limiter (a page's images and scripts would spend its client's quota).
            return []
        return defaults

    # -- admin -------------------------------------------------------------------------------

    def get(self, key: Any, endpoint: str) -> Decision | None:
        """What the limits of `endpoint` (its own, or the default limits) would say of `key`
        (what the key function returns: a client address, an API key) now, taking nothing.
        In an app context."""
        rules, state = self._admin(endpoint)
        return peek(rules, key, endpoint, state.store)

    def reset(self, key: Any, endpoint: str) -> int:
        """Gives `key` full buckets in the limits of `endpoint`; how many held it."""
        rules, state = self._admin(endpoint)
        return reset(rules, key, endpoint, state.store)

    def limiters(self, app: Flask | None = None) -> Series:
        """The limiters of `app`'s limits (default: the current app's when this extension
        serves it, else the one app it serves), as ``(labels, limiter)`` pairs for
        ``render_prometheus`` or a ``SluicegateCollector`` (pass the method itself,
        ``ext.limiters``, or ``functools.partial(ext.limiters, app)``, and each scrape reads
        the limits made since). Each counts its decisions in this process; labels: ``limit``
        (the view's dotted name and the limit's place, ``default#0``, ``blueprint:NAME#0``,
        ``shared:NAME#0``) and ``quota``."""
        if app is None and has_app_context():
            current = current_app._get_current_object()  # type: ignore[attr-defined]
            if current in self._states:
                app = current
        if app is not None:
            state = self._states.get(app)
            if state is None:
                raise RuntimeError(f"this Sluicegate extension does not serve the app {app.name!r}")
        else:
            states = list(self._states.values())
            if len(states) != 1:
                raise RuntimeError(
                    f"limiters() needs the app: this extension serves {len(states)} apps "
                    "(functools.partial(ext.limiters, app) names one)"
                )
            state = states[0]
        return limiter_series([*state.defaults, *self._rules], state.store)

    def _admin(self, endpoint: str, method: str = "GET") -> tuple[list[Rule], _State]:
        _, state = current_app.extensions["sluicegate"]
        view = current_app.view_functions[endpoint]
        return self._limits_of(view, method, endpoint, state.defaults), state

    # -- hooks -------------------------------------------------------------------------------

    def _before_request(self) -> Any:
        # The app and the request behind Flask's proxies, looked up once (each use of a proxy
        # is a context-variable lookup and a few calls).
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        req = request._get_current_object()  # type: ignore[attr-defined]
        _, state = app.extensions["sluicegate"]
        endpoint = req.endpoint
        if not state.enabled or endpoint is None or (state.skip is not None and state.skip(req)):
            return None
        view = app.view_functions.get(endpoint)
        if view is None:
            return None
        rules = self._limits_of(view, req.method, endpoint, state.defaults)
        if not rules:
            return None
        taken: Taken = []
        decision, rule, allowed = check(rules, req, state.key_func, endpoint, state.store, taken)
        g._sluicegate = (decision, rule, taken)
        if not allowed:
            return self._rate_limited(RateLimited(decision))  # type: ignore[arg-type]
        return None

    def _after_request(self, response: Any) -> Any:
        found = g.pop("_sluicegate", None)
        if found is None:
            return response
        _, state = current_app.extensions["sluicegate"]
        decision, rule, taken = found
        settle(taken, response)
        if decision and state.headers_on_allowed:
            self._add_headers(response, decision, (rule and rule.policy) or state.policy, state)
        return response

    @staticmethod
    def _teardown_request(error: BaseException | None) -> None:
        """A request whose response never went through ``after_request``: a view's exception
        propagated (``PROPAGATE_EXCEPTIONS``, on when testing or debugging), where a server
        would have answered 500. Its refunds are settled as that 500's, and nothing is left in
        ``g`` for a later request of the same app context."""
        found = g.pop("_sluicegate", None)
        if found is not None and found[2]:
            settle(found[2], current_app.response_class(status=500))

    def _rate_limited(self, error: RateLimited) -> Any:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        _, state = app.extensions["sluicegate"]
        answer = None
        if self._on_breach is not None:
            answer = self._on_breach(error)  # None: a notification only, the default 429 answers
        if answer is None and _handles_429(app):
            # The app's own handler of 429 (``@app.errorhandler(429)``, a blueprint's, or of
            # TooManyRequests), as flask-limiter's 429 reaches it, through Flask's own lookup.
            # Only where one is registered for 429: a catch-all handler (of HTTPException or
            # Exception, often a 500 and a log line) is not made to answer rate limits.
            exceeded = RateLimitExceeded(error)
            handled = app.handle_http_exception(exceeded)
            if handled is not exceeded:
                answer = handled
        response = None
        if answer is not None:
            response = app.make_response(answer)
            if response.status_code < 400:  # a rejection is never answered as a success
                response.status_code = 429
        if response is None:
            response = current_app.response_class(
                message(error.decision), status=429, mimetype="text/plain"
            )
        found = g.pop("_sluicegate", None)
        policy = state.policy
        if found is not None:
            decision, rule, taken = found
            # A view that raised RateLimited itself: what its limits with a deduct_when took is
            # settled by this 429 (a rejection by the limits took nothing).
            settle(taken, response)
            if decision is error.decision and rule is not None and rule.policy:
                policy = rule.policy
        self._add_headers(response, error.decision, policy, state, force=True)
        return response

    @staticmethod
    def _add_headers(response: Any, decision: Decision, policy: str, state: _State, force: bool = False) -> None:
        """Sets the decision's fields, keeping those the view set itself (unless `force`)."""
        headers = response.headers
        fields = _fields(decision, state.style, policy)
        if force:
            for name, value in fields.items():
                headers[name] = value
            return
        # The names present, in one pass: werkzeug's `name in headers` raises and catches a
        # KeyError (an HTTP exception object) for every absent name.
        present = {name.lower() for name in headers.keys()}
        for name, value in fields.items():
            if name.lower() not in present:
                headers.add(name, value)
