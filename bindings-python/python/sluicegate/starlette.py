"""Starlette and FastAPI integration: a pure ASGI middleware and a ``Depends`` dependency.

    from fastapi import Depends, FastAPI
    from sluicegate.starlette import RateLimitMiddleware, Sluicegate

    limiter = Sluicegate(default_limits=["100/minute"])
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/search", dependencies=[Depends(limiter.dependency("10/s; burst=20"))])
    async def search(q: str): ...

Two ways to limit a route, which may be combined:

* ``RateLimitMiddleware`` (plain ASGI, so it works under any ASGI server and in front of any
  Starlette or FastAPI app) applies the default limits to every route, counted per route and
  client, and the limits of ``@limiter.limit(...)`` on an endpoint. The decorator alone
  enforces nothing: it wraps a function endpoint (``functools.wraps``: FastAPI sees the
  endpoint's own signature, whatever it is) in a check that the middleware serves the
  request, and a request it does not serve is a ``RuntimeError`` (a 500), not a request let
  through unlimited. A route is found the way Starlette's router finds it (its first full match);
  ``@limiter.exempt`` endpoints and FastAPI routes with a ``limiter.dependency`` get no default
  limit. It also turns ``raise sluicegate.RateLimited(decision)`` in an endpoint into a 429,
  and adds the RateLimit fields to allowed responses.
* ``limiter.dependency(...)`` is a FastAPI dependency (a callable object: FastAPI reads its
  ``__call__(request, response)``, never the endpoint's parameters). It counts each route
  (path template) separately, also when one object is in the ``Depends`` of several routes,
  unless it has a ``name``: the same ``name`` on several routes is one shared limit. Two
  dependencies made apart are two limits, on every store. A rejection is answered by the
  middleware as its own are (``on_breach``, or a plain-text 429 with ``Retry-After`` and the
  RateLimit fields); without the middleware it raises ``HTTPException(429)`` with those
  fields (the app's handler of HTTPException answers: FastAPI's JSON ``detail``), and a
  limiter with ``on_breach`` raises ``RuntimeError``. The dependency's value is the Decision.

Configuration (constructor arguments):

* ``default_limits`` ([]): rates applied by the middleware to every route without limits of
  its own, counted per route and client.
* ``key_func`` ("remote_address"): a callable of the Request, or "remote_address" (the
  client, ``Sluicegate.client``), "header:NAME". Key functions, cost functions and ``skip``
  may be async (``async def``): they are awaited, on every store. A plain one runs on the
  event loop, as the middleware does: keep it cheap, and make one that does I/O (a database,
  a cache) ``async def``. One that raises an ``HTTPException`` (a missing API key's 401) is
  answered as the app answers it (FastAPI: JSON ``{"detail": ...}`` with its status and
  headers; the app's own handler of it if it has one), under the middleware as in a
  dependency.
* ``trusted_proxies`` (None): whose forwarding headers the client identity believes: None
  (the peer address is the client: a client-sent ``X-Forwarded-For`` changes nothing), a hop
  count, or a list of addresses, CIDR ranges and "loopback", "private", "linklocal"; the client
  is then the right-most untrusted hop (docs/CLIENT-IDENTITY.md) of ``proxy_header``
  ("x-forwarded-for", or "forwarded": RFC 7239). ``ipv6_prefix`` (64): an IPv6 client is
  keyed by its /64. The peer is the server's: uvicorn's ``--proxy-headers``, on by default,
  rewrites it from ``X-Forwarded-For`` for connections from ``--forwarded-allow-ips``
  (``127.0.0.1`` by default) before this sees it. With ``trusted_proxies`` set, run uvicorn
  with ``--no-proxy-headers``; never with ``--forwarded-allow-ips='*'``, which lets any client
  name its own address.
* ``headers`` ("ietf"): "ietf", "draft6", "draft7", "legacy" or "none" ("legacy":
  ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``, the last a Unix time in seconds as
  slowapi sends it);
  ``headers_on_allowed`` (True): the RateLimit fields on allowed responses too.
* ``policy`` ("default"): the policy name in the IETF fields.
* ``enabled`` (True): turn every check off, e.g. in tests.
* ``on_breach`` (None): a function of the ``Request`` and the ``RateLimited`` error, plain or
  ``async def`` (awaited), told of every rejection (the middleware's, and a dependency's
  through it): None answers the default 429 (a notification); a Starlette ``Response``
  answers as it is, its status made 429 if it is not an error status (a rejection is never
  answered as a success); anything else (a dict, a string) is a ``TypeError`` that says so.
  The RateLimit fields and ``Retry-After`` are added to the answer.
* ``skip`` (None): a function of the connection (the ``Request``; for a WebSocket route, its
  ``HTTPConnection``, which has no ``method``); True lets it through unlimited (an allowlist,
  health checks).

``deduct_when=`` on ``limit`` and ``dependency`` (a function of the response: its
``status_code`` and ``headers``) counts only the requests whose response it accepts
(``lambda r: r.status_code < 400``: failures are free); the others get their tokens back once
the response starts. A dependency's are refunded by ``RateLimitMiddleware``: without it, a
dependency with ``deduct_when`` raises ``RuntimeError`` (it counted every response).
* ``max_keys``: the key bound of each limit (the core's default).
* ``storage`` ("memory"): "memory" (each process's own), ``"shm:NAME"`` (a shared-memory
  region per limit, shared by every worker process of the host) or a Redis URL (every
  worker of every host), named as in ``sluicegate.flask``. An in-process or shm decision
  takes well under a microsecond and is made directly on the event loop; a Redis decision is
  awaited (the round trip happens off the loop, so the loop never waits for the server).

Every limit counts its decisions in each process: ``limiter.limiters()`` gives them to
``render_prometheus`` or, as ``SluicegateCollector(limiter.limiters)``, to
``prometheus_client`` (docs/OPERATIONS.md, "Metrics").

Starlette is imported only when this module is.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any, TypeVar, Union, cast

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException, WebSocketException
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Match, Mount, Route, WebSocketRoute

from sluicegate._native import ClientResolver, Decision, InsufficientCapacity, KeyStoreFull, RateLimited
from sluicegate._web import (
    MEMORY,
    PEER_ONLY,
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
    named_key,
    opens_early,
    peek,
    quotas,
    reset,
    scoped_key,
    settle,
    shared_rules,
    settle_async,
    view_rules,
    refusal,
    unsettled,
    refund_all,
    refund_all_async,
)
from sluicegate._web import field_lines, fields
from sluicegate._web import peek_async as _peek_async
from sluicegate._web import reset_async as _reset_async

__all__ = ["RateLimit", "RateLimitMiddleware", "Sluicegate", "header", "key_func", "remote_address"]

F = TypeVar("F", bound=Callable[..., Any])
_log = logging.getLogger("sluicegate")
#: An async key function (``async def``), awaited on every store.
AsyncKeyFunc = Callable[[Any], Awaitable[Union[str, bytes, int]]]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_LIMITS = "__sluicegate_limits__"
_EXEMPT = "__sluicegate_exempt__"
#: The scope entry where the dependency leaves its decisions for the middleware's headers.
_DECISIONS = "sluicegate.decisions"
#: The scope entry where checks leave what rules with a `deduct_when` took.
_TAKEN = "sluicegate.taken"
#: The scope entry where checks leave what every admitting rule took: a later check of the
#: same request that rejects it (a route's dependency after the middleware's default limits,
#: or after an app-wide dependency) gives it back, all or nothing over the request.
_HELD = "sluicegate.held"
#: The path template the middleware matched (mounts and included routers' prefixes in it),
#: which the app's dependencies count by too.
_TEMPLATE = "sluicegate.template"
#: The ``Sluicegate`` whose middleware or dependency is deciding: ``remote_address`` (and
#: ``header``'s fallback) then believe its trusted proxies.
_LIMITER = "sluicegate.limiter"
#: The scope entry where a dependency that rejected the request leaves a ``RateLimited`` of its
#: decision and its rule: the middleware answers with its own 429 (``on_breach``, the rule's
#: policy in the fields) in place of the app's answer to the dependency's HTTPException.
_REJECTED = "sluicegate.rejected"
#: On a ``@limit`` endpoint's wrapper: the endpoint it calls.
_WRAPPED = "__sluicegate_wrapped__"

#: The ``Sluicegate``s whose ``RateLimitMiddleware`` serves the request being handled (an
#: endpoint of ``@limit`` checks that its own is among them: without it nothing applies the
#: limits).
_SERVING: contextvars.ContextVar[tuple[Sluicegate, ...]] = contextvars.ContextVar("sluicegate_serving", default=())


def remote_address(request: Request) -> str:
    """The client's address (IPv6 by its /64). Within a ``Sluicegate``'s limits (its
    middleware or its dependency) that is ``Sluicegate.client``: behind its trusted proxies,
    the right-most hop they did not add. Elsewhere the peer address, whatever forwarding
    headers say."""
    limiter = request.scope.get(_LIMITER)
    if limiter is not None:
        return limiter.client(request)  # type: ignore[no-any-return]
    return _client(PEER_ONLY, request)


def _client(resolver: ClientResolver, request: Request) -> str:
    scope = request.scope
    client = scope.get("client")  # what request.client reads, without making an Address
    return resolver.resolve(client[0] if client is not None else None, scope.get("headers"))


#: The peers' keys a ``_PeerKeys`` keeps (cleared when full).
_PEERS_KEPT = 4096


#: The forwarding headers' names (ASGI sends names in lower case; str names too, for servers
#: that send those).
_FORWARDING = frozenset(
    (b"x-forwarded-for", b"forwarded", b"x-real-ip", "x-forwarded-for", "forwarded", "x-real-ip")
)


def _forwards(headers: Any) -> bool:
    """Whether any of these header lines is a forwarding header."""
    if headers:
        for name, _ in headers:
            if name.lower() in _FORWARDING:
                return True
    return False


class _PeerKeys:
    """``_client`` with the keys of peers that are not trusted proxies kept: such a key
    depends on the peer alone (no header is read for it), so a peer seen before skips the
    native call.

    A private peer's requests may still show an untrusted proxy (forwarding headers from a
    private address), which the resolver warns about once: while it has not, and when nothing
    is trusted (so that no header can change a key), such a peer's key is kept too, and only a
    request that carries a forwarding header goes to the resolver, whose answer is the same
    and which then warns."""

    __slots__ = ("_keys", "_resolver", "_untrusting", "_watched")

    def __init__(self, resolver: ClientResolver) -> None:
        self._resolver = resolver
        self._keys: dict[str, str] = {}
        self._watched: dict[str, str] = {}
        self._untrusting = resolver.trusted_proxies == "none"

    def __call__(self, request: Request) -> str:
        scope = request.scope
        client = scope.get("client")
        peer = client[0] if client is not None else None
        if peer:
            key = self._keys.get(peer)
            if key is not None:
                return key
            key = self._watched.get(peer)
            if key is not None and not _forwards(scope.get("headers")):
                return key
        resolver = self._resolver
        key = resolver.resolve(peer, scope.get("headers"))
        if peer:
            if not resolver.wants_headers(peer):
                if self._watched:  # warned: every peer's key stands alone now
                    self._watched.clear()
                _keep(self._keys, peer, key)
            elif self._untrusting:
                _keep(self._watched, peer, key)
        return key


def _keep(keys: dict[str, str], peer: str, key: str) -> None:
    if len(keys) >= _PEERS_KEPT:
        keys.clear()
    keys[peer] = key


async def _skipped(limiter: Sluicegate, connection: HTTPConnection) -> bool:
    """Whether `limiter`'s ``skip`` lets the connection through (an async ``skip`` awaited:
    its coroutine was a truthy answer)."""
    skip: Any = limiter.skip  # (typed for Requests, or for every connection: given what it has)
    found = skip(connection)
    if found is not True and found is not False and inspect.isawaitable(found):
        found = await found
    return bool(found)


def header(name: str, fallback: KeyFunc = remote_address) -> KeyFunc:
    """Keys by a request header (an API key, a tenant id); `fallback` when it is absent."""
    return header_key(name, fallback)


def key_func(spec: str | KeyFunc | AsyncKeyFunc) -> KeyFunc:
    """A key function from a callable or a name: "remote_address", "header:NAME"."""
    # (An async one is a key function too: the checks await what it answers.)
    return named_key(cast(Union[str, KeyFunc], spec), {"remote_address": remote_address}, header)


_key_of = key_func  # the constructor's parameter of that name hides the function


class Sluicegate:
    """The configuration every limit of an app shares, and the factory of its limits."""

    def __init__(
        self,
        *,
        default_limits: Rates | None = None,
        key_func: str | KeyFunc | AsyncKeyFunc = "remote_address",
        headers: str = "ietf",
        headers_on_allowed: bool = True,
        policy: str = "default",
        enabled: bool = True,
        max_keys: int | None = None,
        storage: str = MEMORY,
        on_breach: Callable[[Request, RateLimited], Response | None | Awaitable[Response | None]] | None = None,
        trusted_proxies: int | str | Iterable[str] | None = None,
        ipv6_prefix: int = 64,
        skip: Callable[[Request], bool | Awaitable[bool]] | Callable[[HTTPConnection], bool | Awaitable[bool]] | None = None,
        proxy_header: str = "x-forwarded-for",
    ) -> None:
        self.enabled = enabled
        self.skip = skip
        self.resolver = client_resolver(trusted_proxies, ipv6_prefix, proxy_header)
        self._peer_keys = _PeerKeys(self.resolver)
        # The default: what ``client`` answers, one call less.
        self.key_func = self._peer_keys if key_func == "remote_address" else _key_of(key_func)
        self.style: Any = header_style(headers)
        self.headers_on_allowed = headers_on_allowed
        self.policy = policy
        self.max_keys = max_keys
        self.store = checked_store(storage)
        self.on_breach = on_breach
        self.defaults = default_rules(default_limits, max_keys)
        self._shared: dict[str, list[Rule]] = {}
        # Every rule of a `limit` or `dependency` made, each once (for `limiters`).
        self._made: dict[int, Rule] = {}
        self._made_lock = threading.Lock()
        # Unnamed dependencies made (each names its limit's store by its place).
        self._dependencies = 0
        # The function endpoints `limit` wrapped (for the middleware's look, at its first
        # request, for a decorator put above the route's).
        self._wrappers: list[Any] = []
        self._remote = not opens_early(self.store)
        #: Whether checks are awaited (``check_async``): on Redis, and once a key or cost
        #: function is async (the app's or a limit's), on every store.
        self._awaits = self._remote or is_async(self.key_func)
        for rule in self.defaults:
            rule.open_early(self.store)

    def client(self, request: Request) -> str:
        """The client a request comes from: the peer address, or behind the trusted proxies
        the right-most hop they did not add; IPv6 by its prefix."""
        return self._peer_keys(request)

    def limit(
        self,
        rates: Rates,
        *,
        key: str | KeyFunc | AsyncKeyFunc | None = None,
        cost: int | Callable[[Any], int] | Callable[[Any], Awaitable[int]] = 1,
        policy: str | None = None,
        max_keys: int | None = None,
        name: str | None = None,
        deduct_when: Callable[[Any], bool] | None = None,
        shadow: bool = False,
    ) -> Callable[[F], F]:
        """Limits an endpoint with limits that ``RateLimitMiddleware`` applies (instead of the
        default limits). Several rates, or several decorators, must all admit a request; a
        `name` makes it a limit shared by every endpoint that names it. `shadow=True` decides
        and counts but never rejects (would-be rejections are logged on the ``sluicegate``
        logger).

        The middleware decides, before the endpoint runs: a function endpoint is returned
        wrapped (``functools.wraps``: FastAPI and Starlette see its own signature) in a check
        that this limiter's middleware serves the request, a ``RuntimeError`` when it does not
        (the limits would not apply: an endpoint's decorator alone cannot see the request of a
        FastAPI endpoint that takes none). Other endpoints (an ``HTTPEndpoint`` class) are
        marked and returned unchanged."""
        rules_of = self._rules(rates, key, cost, policy, max_keys, name, deduct_when, shadow)

        def decorate(endpoint: F) -> F:
            existing = endpoint.__dict__.get(_LIMITS) or []
            rules = [*rules_of(endpoint, existing), *existing]
            if inspect.isfunction(endpoint) and _WRAPPED not in endpoint.__dict__:
                endpoint = self._guarded(endpoint)
                with self._made_lock:
                    self._wrappers.append(endpoint)
            setattr(endpoint, _LIMITS, rules)
            return endpoint

        return decorate

    def _guarded(self, endpoint: F) -> F:
        """`endpoint`, which raises ``RuntimeError`` when it runs without this limiter's
        ``RateLimitMiddleware`` (while the limits are on)."""

        def unserved() -> RuntimeError:
            return RuntimeError(
                f"the endpoint {endpoint.__qualname__} has @limit limits, which RateLimitMiddleware "
                "applies, and it does not serve this request: "
                "app.add_middleware(RateLimitMiddleware, limiter=limiter)"
            )

        if inspect.iscoroutinefunction(endpoint):

            @functools.wraps(endpoint)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                if self.enabled and self not in _SERVING.get():
                    raise unserved()
                return await endpoint(*args, **kwargs)

            wrapper: Any = guarded_async
        else:

            @functools.wraps(endpoint)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                if self.enabled and self not in _SERVING.get():
                    raise unserved()
                return endpoint(*args, **kwargs)

            wrapper = guarded
        setattr(wrapper, _WRAPPED, endpoint)
        return wrapper  # type: ignore[no-any-return]

    def dependency(
        self,
        rates: Rates,
        *,
        key: str | KeyFunc | AsyncKeyFunc | None = None,
        cost: int | Callable[[Any], int] | Callable[[Any], Awaitable[int]] = 1,
        policy: str | None = None,
        max_keys: int | None = None,
        name: str | None = None,
        deduct_when: Callable[[Any], bool] | None = None,
        shadow: bool = False,
    ) -> RateLimit:
        """A FastAPI dependency: ``Depends(limiter.dependency("10/s"))``. Counted per route
        (the route's path template) unless `name` makes it one limit shared by the routes
        that name it."""
        rules = self._rules(rates, key, cost, policy, max_keys, name, deduct_when, shadow)(None, [])
        nth = 1
        if name is None:
            with self._made_lock:
                self._dependencies += 1
                nth = self._dependencies
        return RateLimit(self, rules, "" if nth == 1 else f"\x00dependency{nth}")

    def exempt(self, endpoint: F) -> F:
        """No default limit applies to this endpoint."""
        setattr(endpoint, _EXEMPT, True)
        return endpoint

    def _rules(
        self,
        rates: Rates,
        key: str | KeyFunc | AsyncKeyFunc | None,
        cost: int | Callable[[Any], int] | Callable[[Any], Awaitable[int]],
        policy: str | None,
        max_keys: int | None,
        name: str | None,
        deduct_when: Callable[[Any], bool] | None,
        shadow: bool = False,
    ) -> Callable[[Any, Sequence[Rule]], list[Rule]]:
        """The rules of one `limit` or `dependency`, given the endpoint (None: a dependency,
        counted per route) and the rules it has already."""
        kf = None if key is None else key_func(key)
        parsed = quotas(rates, cast(Union[int, Callable[[Any], int]], cost))
        if not parsed:
            raise ValueError("a limit needs at least one rate")
        options: dict[str, Any] = {
            "cost": cost, "policy": policy, "max_keys": max_keys or self.max_keys, "deduct_when": deduct_when,
            "shadow": shadow,
        }  # fmt: skip

        def make(endpoint: Any, existing: Sequence[Rule]) -> list[Rule]:
            if name is not None:
                rules = shared_rules(self._shared, name, parsed, kf, **options)
            elif endpoint is None:
                rules = [Rule(q, kf, scope=f"route#{i}", scoped=True, **options) for i, q in enumerate(parsed)]
            else:
                rules = view_rules(endpoint, existing, parsed, kf, **options)
            with self._made_lock:
                for rule in rules:
                    self._made.setdefault(id(rule), rule)
            if any(rule.awaits for rule in rules):
                self._awaits = True  # an async key or cost function: every check awaited
            for rule in rules:
                rule.open_early(self.store)
            return rules

        return make

    def limiters(self) -> Series:
        """The limiters of the default limits and of every ``limit`` and ``dependency`` made,
        as ``(labels, limiter)`` pairs for ``render_prometheus``, or
        ``SluicegateCollector(limiter.limiters)`` (each scrape reads the limits made since):
        labels ``limit`` (an endpoint's dotted name and the limit's place, ``default#0``,
        ``route#0`` for a dependency's, ``route#0 (2)`` for a second one of that rate,
        ``shared:NAME#0``) and ``quota``. Each counts its
        decisions in this process; a limit on Redis appears at its first request."""
        with self._made_lock:
            rules = list(self._made.values())
        return limiter_series([*self.defaults, *rules], self.store)

    def get(self, key: Any, *, route: str | None = None, name: str | None = None, endpoint: Any = None) -> Decision | None:
        """What limits would say of `key` (what the key function returns: a client address,
        an API key) now, taking nothing: the default limits of the route with path template
        `route`, the shared limit `name`, or the ``@limit`` ones of `endpoint`. For admin
        tools; a dependency's own limits: ``RateLimit.get``."""
        rules, scope = self._admin(route, name, endpoint)
        return peek(rules, key, scope, self.store)

    def reset(self, key: Any, *, route: str | None = None, name: str | None = None, endpoint: Any = None) -> int:
        """Gives `key` full buckets in those limits; how many held it."""
        rules, scope = self._admin(route, name, endpoint)
        return reset(rules, key, scope, self.store)

    async def get_async(
        self, key: Any, *, route: str | None = None, name: str | None = None, endpoint: Any = None
    ) -> Decision | None:
        """``get`` for an async admin endpoint: on Redis the event loop never waits for the
        server."""
        rules, scope = self._admin(route, name, endpoint)
        return await _peek_async(rules, key, scope, self.store)

    async def reset_async(
        self, key: Any, *, route: str | None = None, name: str | None = None, endpoint: Any = None
    ) -> int:
        """``reset`` for an async admin endpoint (run off the event loop)."""
        rules, scope = self._admin(route, name, endpoint)
        return await _reset_async(rules, key, scope, self.store)

    def _admin(self, route: str | None, name: str | None, endpoint: Any) -> tuple[Sequence[Rule], str | None]:
        if sum(x is not None for x in (route, name, endpoint)) != 1:
            raise TypeError("give one of route=, name= or endpoint=")
        if name is not None:
            return self._shared.get(name, []), None
        if endpoint is not None:
            return getattr(endpoint, _LIMITS, None) or [], None
        return self.defaults, route

    def _check(self, rules: Sequence[Rule], request: Request, scope: str) -> Outcome:
        """The rules' outcome, decided on the loop (an in-process or shm store; Redis:
        ``_check_async``). What rules with a `deduct_when` took is left in the scope for the
        middleware."""
        taken: Taken = []
        held = request.scope.setdefault(_HELD, [])
        outcome = check(rules, request, self.key_func, scope, self.store, taken, held)
        if taken:
            request.scope.setdefault(_TAKEN, []).extend(taken)
        return outcome

    async def _check_async(self, rules: Sequence[Rule], request: Request, scope: str) -> Outcome:
        """``_check`` awaited (Redis: the round trips happen off the loop)."""
        taken: Taken = []
        held = request.scope.setdefault(_HELD, [])
        outcome = await check_async(rules, request, self.key_func, scope, self.store, taken, held)
        if taken:
            request.scope.setdefault(_TAKEN, []).extend(taken)
        return outcome

    async def _settle(self, scope: Scope, response: Any) -> None:
        taken = scope.pop(_TAKEN, None)
        if taken:
            if self._remote:
                await settle_async(taken, response)
            else:
                settle(taken, response)

    async def _give_back_held(self, scope: Scope) -> None:
        """A check rejected the request: what earlier checks of it took goes back (and is
        no longer settled by the response)."""
        held = scope.pop(_HELD, None)
        if not held:
            return
        taken = scope.get(_TAKEN)
        if taken:
            scope[_TAKEN] = unsettled(taken, held)
        if self._remote:
            await refund_all_async(held)
        else:
            refund_all(held)

    def _headers(self, decision: Decision, rule: Rule | None) -> dict[str, str]:
        return fields(decision, self.style, (rule and rule.policy) or self.policy)

    def _raw_headers(self, decision: Decision, rule: Rule | None) -> list[tuple[bytes, bytes]]:
        """``_headers`` as ASGI header lines (lower-case names)."""
        return field_lines(decision, self.style, (rule and rule.policy) or self.policy)


class RateLimit:
    """A FastAPI dependency made by ``Sluicegate.dependency``: awaits its limits for the
    request, and raises ``HTTPException(429)`` when one rejects it. On a WebSocket route (the
    dependency of a router or of the app reaches those too) it decides when the client
    connects, and a refused connection is closed before it is accepted
    (``WebSocketException``, code 1008, policy violation), as ``@limit`` on a WebSocket
    endpoint is."""

    def __init__(self, limiter: Sluicegate, rules: list[Rule], tag: str = "") -> None:
        self.limiter = limiter
        self.rules = rules
        # After the route in this dependency's keys: each unnamed dependency is a limit of its
        # own (two of one rate on a route were one bucket charged twice on shm and Redis,
        # where their region is one), told apart by its place among them, which every process
        # makes alike; the first has none, as before.
        self._tag = tag
        # The dependency most apps declare: one rule that counts every admitted request at a
        # fixed cost. ``check`` decides it by its first branch; ``__call__`` inlines that
        # branch (this runs on every request, and three calls fewer are a fifth of its time).
        only = rules[0] if len(rules) == 1 else None
        plain = only is not None and only.deduct_when is None and not only.shadow and not callable(only.cost)
        self._plain = only if plain else None
        # A limit that counts by the response is settled by the middleware, which sees it.
        self._settled = any(rule.deduct_when is not None for rule in rules)

    # ``HTTPConnection``: FastAPI gives a WebSocket route's connection to it too (a ``Request``
    # parameter is left out there, which failed every WebSocket under an app-wide dependency).
    async def __call__(self, request: HTTPConnection, response: Response) -> Decision | None:
        limiter = self.limiter
        if not limiter.enabled or (limiter.skip is not None and await _skipped(limiter, request)):
            return None
        scope = request.scope
        # (A WebSocket's handshake has no response to judge: a deduct_when limit counts it.)
        if self._settled and _DECISIONS not in scope and scope["type"] != "websocket":
            # Without the middleware nothing would give the tokens back: every response
            # would count, whatever deduct_when says (DRF's throttles refuse the same).
            raise RuntimeError(
                "a dependency with deduct_when needs RateLimitMiddleware, which refunds by the "
                "response: app.add_middleware(RateLimitMiddleware, limiter=limiter)"
            )
        scope[_LIMITER] = limiter
        rule = self._plain
        if limiter._awaits:
            decision, rule, allowed = await limiter._check_async(self.rules, request, _route_name(scope) + self._tag)  # type: ignore[arg-type]
        elif rule is not None:  # check's first branch, inlined
            key = (rule.key_func or limiter.key_func)(request)  # type: ignore[arg-type]
            if type(key) is not str and inspect.isawaitable(key):  # a sync function's awaitable
                key = await key
            if rule.scoped:
                path = scope.get(_TEMPLATE)  # _route_name's, inlined
                if path is None:
                    path = _route_name(scope)
                path += self._tag
                key = f"{path}\x00{key}" if type(key) is str else scoped_key(path, key)
            store = limiter.store
            keyed = rule._limiters.get(store)
            if keyed is None:
                keyed = rule.limiter(store)
            # `plain` above: a fixed cost, never a function of the request.
            try:
                decision = keyed.try_acquire(key, rule.cost)  # type: ignore[arg-type]
            except (KeyStoreFull, InsufficientCapacity) as error:  # a fixed cost, a burst since changed
                decision = refusal(rule, error, rule.cost)  # type: ignore[arg-type]
            allowed = decision.allowed
            if allowed:
                held = scope.get(_HELD)
                if held is None:
                    scope[_HELD] = [(keyed, key, rule.cost)]
                else:
                    held.append((keyed, key, rule.cost))
        else:
            decision, rule, allowed = limiter._check(self.rules, request, _route_name(scope) + self._tag)  # type: ignore[arg-type]
        assert decision is not None
        if not allowed:
            await limiter._give_back_held(scope)
            if scope["type"] == "websocket":  # closed before it is accepted, as @limit's
                raise WebSocketException(code=1008, reason="rate limited")
            if limiter in _SERVING.get():
                # This limiter's middleware answers, as it answers its own rejections
                # (``on_breach``), in place of what the app's handler of the HTTPException
                # below answers (a mounted app's handler too: an exception of another class
                # would be its 500).
                scope[_REJECTED] = (RateLimited(decision), rule)
            elif limiter.on_breach is not None:
                raise RuntimeError(
                    "on_breach answers a dependency's rejections through RateLimitMiddleware, which "
                    "does not serve this request: app.add_middleware(RateLimitMiddleware, limiter=limiter)"
                )
            raise HTTPException(429, message(decision).strip(), headers=limiter._headers(decision, rule))
        # (A WebSocket's admitted handshake writes its fields to FastAPI's response of the
        # dependencies, which nothing sends: the answer to a handshake is its accept.)
        if limiter.headers_on_allowed:
            if response.raw_headers:  # fields set before (another dependency's): replaced
                response.headers.update(limiter._headers(decision, rule))
            else:  # what headers.update would append, without its scans
                policy = (rule and rule.policy) or limiter.policy
                response.raw_headers.extend(field_lines(decision, limiter.style, policy))
        # For the middleware's fields (the fewest tokens left of its limits and these); it
        # puts the list in the scope, and nothing else reads it.
        decisions = scope.get(_DECISIONS)
        if decisions is not None:
            decisions.append((decision, rule))
        return decision

    def get(self, key: Any, route: str | None = None) -> Decision | None:
        """What this dependency would say of `key` on the route with path template `route`
        (None for a named, shared one) now, taking nothing."""
        return peek(self.rules, key, self._route(route), self.limiter.store)

    def reset(self, key: Any, route: str | None = None) -> int:
        """Gives `key` full buckets in this dependency's limits on `route`."""
        return reset(self.rules, key, self._route(route), self.limiter.store)

    async def get_async(self, key: Any, route: str | None = None) -> Decision | None:
        """``get`` for an async admin endpoint: on Redis the event loop never waits."""
        return await _peek_async(self.rules, key, self._route(route), self.limiter.store)

    async def reset_async(self, key: Any, route: str | None = None) -> int:
        """``reset`` for an async admin endpoint (run off the event loop)."""
        return await _reset_async(self.rules, key, self._route(route), self.limiter.store)

    def _route(self, route: str | None) -> str | None:
        return None if route is None else route + self._tag

    def __repr__(self) -> str:
        return f"RateLimit({self.rules!r})"


class RateLimitMiddleware:
    """The ASGI middleware: ``app.add_middleware(RateLimitMiddleware, limiter=limiter)``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limiter: Sluicegate) -> None:
        self.app = app
        self.limiter = limiter
        # Per route object: whether it has FastAPI dependencies of ours (found once).
        self._has_dependency: dict[int, bool] = {}
        # The rules and path template of each (method, path, root_path) seen, while the app's
        # route list stays the one (with the same routes) they were found in (`_resolve`).
        self._resolved: dict[tuple[str, str, str], tuple[Sequence[Rule], str]] = {}
        self._routes: Any = None
        self._snapshot: list[Any] | None = None
        self._cacheable = False
        # Whether the routes were looked at for a ``@limit`` above the route's decorator.
        self._looked = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limiter = self.limiter
        kind = scope["type"]
        if (kind != "http" and kind != "websocket") or not limiter.enabled:
            await self.app(scope, receive, send)
            return
        # For the endpoints of `@limit`: their limits are applied here.
        serving = _SERVING.set((*_SERVING.get(), limiter))
        try:
            if kind == "websocket":
                await self._websocket(scope, receive, send)
            else:
                await self._http(scope, receive, send)
        finally:
            _SERVING.reset(serving)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limiter = self.limiter
        request = Request(scope, receive)
        try:
            if limiter.skip is not None and await _skipped(limiter, request):
                await self.app(scope, receive, send)
                return
        except HTTPException as error:  # raised by `skip`: answered as the app answers it
            await self._http_exception(request, error, scope, receive, send)
            return
        rules, template = self._resolve(scope)
        if not self._looked:
            self._looked = True
            self._look_for_misplaced_limits(scope)
        scope[_TEMPLATE] = template
        scope[_LIMITER] = limiter
        found: tuple[Decision, Rule | None] | None = None
        scope[_DECISIONS] = []  # what the app's `Depends` limits decide (RateLimit.__call__)
        if rules:
            try:
                if limiter._awaits:
                    decision, rule, allowed = await limiter._check_async(rules, request, template)
                else:
                    decision, rule, allowed = limiter._check(rules, request, template)
            except HTTPException as error:
                # A key or cost function's (a missing API key's 401): the answer the app's
                # handler of it gives (FastAPI's JSON ``detail``), as in a dependency, not a
                # 500 (this middleware runs outside the app's ExceptionMiddleware). The check
                # took nothing.
                await self._http_exception(request, error, scope, receive, send)
                return
            assert decision is not None
            if not allowed:
                await self._too_many(request, RateLimited(decision), rule, scope, receive, send)
                return
            found = (decision, rule)
        started = False
        replacing = False

        async def send_with_headers(msg: Message) -> None:
            nonlocal started, replacing
            if replacing:
                # The app's answer to a dependency's rejection (its HTTPException handler's):
                # this middleware's own is sent instead, once the app's has ended.
                if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                    replacing = False
                    error, rule = scope.pop(_REJECTED)
                    await self._too_many(request, error, rule, scope, receive, send)
                return
            if msg["type"] == "http.response.start":
                started = True
                if _REJECTED in scope:
                    replacing = True
                    if scope.get(_TAKEN):
                        await limiter._settle(scope, _Sent(429, Headers()))
                    return
                lines = msg.get("headers", [])
                if not isinstance(lines, list):  # any iterable of pairs (ASGI): read it once
                    lines = msg["headers"] = list(lines)
                if scope.get(_TAKEN):  # rules with a deduct_when took tokens: settle them
                    await limiter._settle(scope, _Sent(msg["status"], Headers(raw=lines)))
                more = scope.get(_DECISIONS)
                best = _fewest_remaining(found, more) if more else found
                if best is not None and limiter.headers_on_allowed:
                    present = {name.lower() for name, _ in lines}
                    msg["headers"] = [
                        *lines, *(line for line in limiter._raw_headers(*best) if line[0] not in present)
                    ]
            await send(msg)

        try:
            await self.app(scope, receive, send_with_headers)
        except RateLimited as error:
            if started:
                raise
            await limiter._settle(scope, _Sent(429, Headers()))
            await self._too_many(request, error, None, scope, receive, send)
        except BaseException:
            if not started:
                await limiter._settle(scope, _Sent(500, Headers()))
            raise
        else:
            # An app that returned without starting a response: the server answers 500.
            if not started:
                await limiter._settle(scope, _Sent(500, Headers()))

    def _resolve(self, scope: Scope) -> tuple[Sequence[Rule], str]:
        """The rules the middleware applies to `scope` and the path template its per-route
        limits count by. Found by matching the app's routes (``_find_route``), once per
        method and path when that is what decides the match: every route a plain Starlette
        or FastAPI one (no ``Host``, no route class with a ``matches`` of its own, no mounted
        app with routes of its own) and the route list unchanged (the same list holding the
        same routes: one added, removed or replaced in place clears what was found). Kept for
        at most ``_RESOLVED`` paths at a time."""
        if getattr(scope.get("app"), "router", None) is None:
            # In front of the app (``RateLimitMiddleware(app, limiter=...)``): Starlette sets
            # the scope's app once the request reaches it, so it is found here, behind this.
            app = self._inner_app()
            if app is not None:
                scope = {**scope, "app": app}
        routes = getattr(getattr(scope.get("app"), "router", None), "routes", None)
        # `!=` on two lists compares their items in C, by identity first: a fraction of a
        # microsecond for an app's few dozen routes.
        if routes is not self._routes or (routes is not None and routes != self._snapshot):
            self._resolved.clear()
            self._routes = routes
            self._snapshot = None if routes is None else list(routes)
            # A mounted app's routes are matched every time (its route list is not watched).
            self._cacheable = routes is not None and all(
                _plain_route(r) and not (isinstance(r, Mount) and getattr(r, "routes", None)) for r in routes
            )
        if not self._cacheable or _ROUTER_STATE in scope:
            route, template = _find_route(scope)
            return self._rules_of(route, scope), template
        at = (scope["method"], scope["path"], scope.get("root_path", ""))
        found = self._resolved.get(at)
        if found is None:
            route, template = _find_route(scope)
            found = self._rules_of(route, scope), template
            if len(self._resolved) >= _RESOLVED:
                self._resolved.clear()
            if len(at[1]) <= _RESOLVED_PATH:
                self._resolved[at] = found
        return found

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket route's own limits (``@limit`` on its endpoint), decided when the client
        connects: a refused connection is closed before it is accepted (code 1008, policy
        violation; the client sees its handshake refused). The default limits count HTTP
        requests only."""
        limiter = self.limiter
        connection = HTTPConnection(scope, receive)
        found = scope
        if getattr(scope.get("app"), "router", None) is None:
            app = self._inner_app()
            if app is not None:
                found = {**scope, "app": app}
        route, template = _find_route(found)
        rules = getattr(getattr(route, "endpoint", None), _LIMITS, None)
        # (A WebSocket route's connection: a `skip` typed for Requests reads what it has.)
        if not rules or (limiter.skip is not None and await _skipped(limiter, connection)):
            await self.app(scope, receive, send)
            return
        scope[_LIMITER] = limiter
        if limiter._awaits:
            _, _, allowed = await limiter._check_async(rules, connection, template)  # type: ignore[arg-type]
        else:
            _, _, allowed = limiter._check(rules, connection, template)  # type: ignore[arg-type]
        if allowed:
            await self.app(scope, receive, send)
            return
        message = await receive()
        if message.get("type") == "websocket.connect":
            await send({"type": "websocket.close", "code": 1008, "reason": "rate limited"})

    def _look_for_misplaced_limits(self, scope: Scope) -> None:
        """Warns (once, at the first request, on the ``sluicegate`` logger) of each
        ``@limiter.limit`` put above ``@app.get(...)``: the route was registered with the
        function before the decorator wrapped it, so its limits never apply (the default
        limits do)."""
        app = scope.get("app")
        if getattr(app, "router", None) is None:
            app = self._inner_app()
        with self.limiter._made_lock:
            wrappers = list(self.limiter._wrappers)
        if not wrappers or app is None:
            return
        endpoints = _route_endpoints(getattr(getattr(app, "router", None), "routes", ()), _MOUNTS)
        for wrapper in wrappers:
            original = wrapper.__dict__.get(_WRAPPED)
            if id(wrapper) not in endpoints and id(original) in endpoints:
                _log.warning(
                    "sluicegate: @limiter.limit on %s is above the route's decorator (@app.get(...)): the route "
                    "was registered without it and its limits do not apply; put @limiter.limit below @app.get(...)",
                    getattr(original, "__qualname__", original),
                )

    def _inner_app(self) -> Any:
        """The Starlette or FastAPI app this middleware is in front of (following the
        ``app`` of the middleware between), or None."""
        app: Any = self.app
        for _ in range(_MOUNTS * 4):
            if getattr(app, "router", None) is not None:
                return app
            app = getattr(app, "app", None)
            if app is None:
                return None
        return None

    def _rules_of(self, route: Any, scope: Scope) -> Sequence[Rule]:
        """The rules the middleware applies to `route` (None: no route matched) for the
        scope's method: an ``HTTPEndpoint``'s handler of that method may have its own."""
        endpoint = getattr(route, "endpoint", None)
        if isinstance(endpoint, type):
            # An HTTPEndpoint: the handler it will call (HEAD runs `get` when it has no `head`).
            method = str(scope.get("method", "")).lower()
            if method == "head" and not hasattr(endpoint, "head"):
                method = "get"
            handler = getattr(endpoint, method, None)
            own = getattr(handler, _LIMITS, None)
            if own:
                return own  # type: ignore[no-any-return]
            if getattr(handler, _EXEMPT, False):
                return ()
        own = getattr(endpoint, _LIMITS, None)
        if own:
            return own  # type: ignore[no-any-return]
        if getattr(endpoint, _EXEMPT, False) or (route is not None and self._dependency_of(route)):
            return ()
        return self.limiter.defaults

    def _dependency_of(self, route: Any) -> bool:
        """Whether a FastAPI route has a ``RateLimit`` among its dependencies (its own limit,
        which replaces the default limits)."""
        found = self._has_dependency.get(id(route))
        if found is None:
            found = _has_rate_limit(getattr(route, "dependant", None))
            self._has_dependency[id(route)] = found
        return found

    async def _too_many(
        self, request: Request, error: RateLimited, rule: Rule | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        limiter = self.limiter
        fields = limiter._headers(error.decision, rule)
        response: Any = None
        on_breach = limiter.on_breach
        if on_breach is not None:
            response = on_breach(request, error)
            if inspect.isawaitable(response):  # an async def handler
                response = await response
            if response is not None:  # None: a notification only, the default 429 answers
                if not isinstance(response, Response):
                    raise TypeError(
                        f"on_breach {getattr(on_breach, '__qualname__', on_breach)!r} returned "
                        f"{type(response).__name__}: it must return a starlette Response (JSONResponse, "
                        "PlainTextResponse, ...; any status, a success made 429) or None (the default 429)"
                    )
                if response.status_code < 400:  # a rejection is never answered as a success
                    response.status_code = 429
        if response is None:
            response = PlainTextResponse(message(error.decision), status_code=429)
        response.headers.update(fields)
        await response(scope, receive, send)

    async def _http_exception(
        self, request: Request, error: HTTPException, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answers an ``HTTPException`` that a key or cost function or ``skip`` raised before
        the app ran, as the app's ExceptionMiddleware would: its handler of the status or of
        the exception's class (FastAPI's: JSON ``{"detail": ...}``), else Starlette's plain
        text."""
        app = scope.get("app")
        if getattr(app, "router", None) is None:
            app = self._inner_app()
        handler = _http_exception_handler(getattr(app, "exception_handlers", None), error)
        if handler is None:
            response: Any = _starlette_http_exception(error)
        elif inspect.iscoroutinefunction(handler):
            response = await handler(request, error)
        else:  # Starlette runs a plain handler in its thread pool
            from starlette.concurrency import run_in_threadpool

            response = await run_in_threadpool(handler, request, error)
        await response(scope, receive, send)


def _route_endpoints(routes: Any, depth: int) -> set[int]:
    """The ids of the routes' endpoints (an ``HTTPEndpoint``'s handlers too), in mounted
    routers `depth` deep."""
    found: set[int] = set()
    for route in routes or ():
        endpoint = getattr(route, "endpoint", None)
        if endpoint is not None:
            found.add(id(endpoint))
            if isinstance(endpoint, type):
                methods = ("get", "head", "post", "put", "patch", "delete", "options")
                found.update(id(getattr(endpoint, m)) for m in methods if hasattr(endpoint, m))
        inner = getattr(route, "routes", None) if isinstance(route, Mount) else None
        if inner and depth > 0:
            found |= _route_endpoints(inner, depth - 1)
    return found


def _http_exception_handler(handlers: Any, error: HTTPException) -> Any:
    """The app's handler of `error` as Starlette's ExceptionMiddleware finds it (by status,
    then by class), or None. A 500 or ``Exception`` handler belongs to the server error
    middleware, which this is inside of: not looked at."""
    if not isinstance(handlers, dict):
        return None
    if error.status_code != 500 and error.status_code in handlers:
        return handlers[error.status_code]
    for cls in type(error).__mro__:
        if cls is Exception:
            break
        if cls in handlers:
            return handlers[cls]
    return None


def _starlette_http_exception(error: HTTPException) -> Response:
    """Starlette's own answer to an HTTPException (its ExceptionMiddleware's)."""
    if error.status_code in (204, 304):
        return Response(status_code=error.status_code, headers=error.headers)
    return PlainTextResponse(error.detail, status_code=error.status_code, headers=error.headers)


class _Sent:
    """What ``deduct_when`` sees of a response under ASGI: its status and fields."""

    __slots__ = ("headers", "status_code")

    def __init__(self, status_code: int, headers: Headers) -> None:
        self.status_code = status_code
        self.headers = headers


def _find_route(scope: Scope) -> tuple[Any, str]:
    """The route Starlette's router will pick for `scope` and its whole path template: the
    first full match, and within a ``Mount`` of an app or router with routes (``app.mount``
    of a sub-application) the route the mounted router will pick, its template the mounts'
    and its own (``/v1`` and ``/items/{id}``: ``/v1/items/{id}``). A mount whose app has no
    routes of its own (static files, a WSGI app), or none that match, is the route itself.
    (None, the unmatched scope) when nothing matches, or the app has no router."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", ())
    found: Any = None
    template = ""
    for _ in range(_MOUNTS):
        for route in routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                break
        else:
            break
        included = _included(route, scope)
        if included is not None:
            return included[0], template + included[1]
        found = route
        template += getattr(route, "path", "") if isinstance(getattr(route, "path", None), str) else ""
        inner = getattr(route, "routes", None) if isinstance(route, Mount) else None
        if not inner:
            break
        scope = {**scope, **child}
        routes = inner
    if found is None:
        return None, _UNMATCHED
    return found, template or _route_path(found, scope)


def _included(route: Any, scope: Scope) -> tuple[Any, str] | None:
    """For a router FastAPI included (``app.include_router``, which FastAPI matches as one
    route of its own): the route it will pick and that route's whole template (the include
    prefixes and its path, which the route object alone does not hold). None for any other
    route, or when nothing in it matches fully."""
    for _ in range(_MOUNTS):
        pick = getattr(route, "_match", None)
        if not callable(pick) or not hasattr(route, "original_router"):
            return None
        match, _child, inner, context = pick(dict(scope))
        if match is not Match.FULL or inner is None:
            return None
        if hasattr(inner, "original_router"):  # a router included in an included router
            route = inner
            continue
        path = getattr(context, "path", None)
        if not isinstance(path, str) or not path:
            path = _route_path(inner, scope)
        return inner, path
    return None


#: How deep mounts within mounts are followed.
_MOUNTS = 8


#: At most this many paths' routes are kept (``RateLimitMiddleware._resolve``), each path at
#: most this long: a client inventing paths costs a match, never memory.
_RESOLVED = 1024
_RESOLVED_PATH = 256
#: Where FastAPI's routers leave their state in a scope (``APIRoute.matches`` reads it): a
#: scope that carries it, as a mounted app's does, is matched every time.
_ROUTER_STATE = "fastapi"


def _plain_route(route: Any) -> bool:
    """Whether `route` matches a request by its type, method and path alone: a Starlette
    ``Route``, ``Mount`` or ``WebSocketRoute``, or FastAPI's ``APIRoute`` or
    ``APIWebSocketRoute`` (not a ``Host``, which reads the headers, nor a class with a
    ``matches`` of its own)."""
    matches = getattr(type(route), "matches", None)
    return matches in _plain_matches() and "matches" not in getattr(route, "__dict__", {})


def _plain_matches() -> set[Any]:
    found: set[Any] = {Route.matches, Mount.matches, WebSocketRoute.matches}
    fastapi_routing = sys.modules.get("fastapi.routing")
    if fastapi_routing is not None:
        found.update(
            getattr(getattr(fastapi_routing, name, None), "matches", None) for name in ("APIRoute", "APIWebSocketRoute")
        )
    found.discard(None)
    return found


def _route_path(route: Any, scope: Scope) -> str:
    """What a per-route limit's keys carry: the route's path template (``/items/{id}``: one
    bucket per client for every item), or one name for every unmatched path (a client cannot
    make buckets by inventing paths)."""
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else _UNMATCHED


#: The scope of every path no route matches.
_UNMATCHED = "<unmatched>"


def _route_name(scope: Scope) -> str:
    """The path template of the route a dependency runs in: the one the middleware matched
    (``_find_route``'s: mounts' and included routers' templates in it). Without the
    middleware, the route's own, with an included router's prefix and the path of the mounts
    it went through (a mount with a path parameter adds the path it matched: put the
    middleware in front to count by the template)."""
    found = scope.get(_TEMPLATE)
    if isinstance(found, str):
        return found
    path = _effective_path(scope)
    if path is None:
        path = _route_path(scope.get("route"), scope)
    return path if path is _UNMATCHED else _mount_prefix(scope) + path


def _effective_path(scope: Scope) -> str | None:
    """The whole template of a route FastAPI matched within an included router (its prefix
    and the route's path), which the route object alone does not hold."""
    state = scope.get(_ROUTER_STATE)
    context = state.get("effective_route_context") if isinstance(state, dict) else None
    path = getattr(context, "path", None)
    return path if isinstance(path, str) and path else None


def _mount_prefix(scope: Scope) -> str:
    """The paths of the mounts a scope went through: what ``Mount`` added to the root path
    after the application's own (``app_root_path``, which the first mount records). A mount
    with a path parameter adds the path it matched."""
    root = scope.get("root_path", "")
    base = scope.get("app_root_path", root)
    return root[len(base) :] if root.startswith(base) else ""


def _has_rate_limit(dependant: Any) -> bool:
    if dependant is None:
        return False
    if isinstance(getattr(dependant, "call", None), RateLimit):
        return True
    return any(_has_rate_limit(d) for d in getattr(dependant, "dependencies", ()))


def _fewest_remaining(
    found: tuple[Decision, Rule | None] | None, more: list[tuple[Decision, Rule | None]] | None
) -> tuple[Decision, Rule | None] | None:
    """The decision the fields report: the one with the fewest tokens left."""
    candidates = ([found] if found is not None else []) + (more or [])
    return min(candidates, key=lambda d: d[0].remaining, default=None)
