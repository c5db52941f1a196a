"""What the web integrations share: rules, several rules at once, refunds by response, 429s.

Framework-free on purpose; ``sluicegate.flask``, ``sluicegate.django``, ``sluicegate.drf`` and
``sluicegate.starlette`` adapt it. Every
decision comes from the native limiter: this module only picks keys and combines decisions.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Union

from sluicegate._native import (
    ClientResolver,
    Decision,
    InsufficientCapacity,
    InvalidOptionError,
    KeyedLimiter,
    KeyStoreFull,
    Quota,
    _store_kind,
    _store_shown,
    _store_with_suffix,
)

#: A key function takes the framework's request (Flask: no argument needed, but the request
#: is passed anyway) and returns a str, bytes or int key.
KeyFunc = Callable[[Any], Union[str, bytes, int]]
Rates = Union[str, Quota, Iterable[Union[str, Quota]]]


#: The store every integration uses unless configured otherwise: each process's own memory.
MEMORY = "memory"


def region_suffix(quota: Quota, scope: str, max_keys: int | None = None) -> str:
    """The stable suffix that names one limit's store: 16 hex digits of the SHA-256 of the
    quota's canonical text, the rule's scope and, when one is given, the key bound that names
    its region (``region_bound``). Every process (and host) of a deployment computes the same
    one, and another rate, another view or another region capacity gives another region (shm)
    or key prefix (Redis): a region keeps the capacity it was made with, so a redeploy with a
    new ``MAX_KEYS`` or ``?capacity=N`` must not open the old one (every worker failed to boot
    on its mismatch)."""
    text = f"{quota}\n{scope}" if max_keys is None else f"{quota}\n{scope}\n{max_keys}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def region_bound(store: str, max_keys: int | None) -> int | None:
    """The key bound that names a limit on `store` (``region_suffix``): on a shared-memory
    store the capacity its region is made with, the store string's ``?capacity=N`` when given
    (a `max_keys` besides it must be the same), else `max_keys`; None on Redis, which keeps no
    key bound (another ``MAX_KEYS`` must not move every client's count to a new key prefix);
    `max_keys` in memory, where it names nothing outside the process."""
    kind = _store_kind(store)
    if kind == "redis":
        return None
    if kind == "shm":
        # The core prints a region as ``shm:NAME`` or ``shm:NAME?capacity=N`` (a name has no ``?``).
        shown = _store_shown(store)
        if "?capacity=" in shown:
            return int(shown.rsplit("?capacity=", 1)[1])
    return max_keys


def setting_flag(value: Any, name: str) -> bool:
    """A boolean setting as a configuration gives it: a bool or 0/1, or a string from the
    environment (``"false"``, ``"0"``, ``"off"``, ``"no"`` are False: ``bool("false")`` was
    True, so ``ENABLED=os.environ[...]`` could never turn limiting off). Anything else is a
    ValueError naming the setting."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off", ""):
            return False
    raise ValueError(f"{name} must be True or False (or 1/0, \"true\"/\"false\", \"on\"/\"off\"), not {value!r}")


def setting_count(value: Any, name: str) -> int | None:
    """A whole-number setting as a configuration gives it: an int, None (unset), or a string
    of digits from the environment (``MAX_KEYS=os.environ[...]``). Anything else (a bool, a
    fraction, words) is a ValueError naming the setting; the range is the core's to check."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value.strip())
    raise ValueError(f"{name} must be a whole number (an int or a string of digits), not {value!r}")


def checked_store(store: str) -> str:
    """`store`, checked when the app is configured rather than at its first request: the core
    parses it (a bad one raises InvalidOptionError, a ValueError)."""
    _store_with_suffix(store, "check")
    return store


def opens_early(store: str) -> bool:
    """Whether the integrations open a limit's store when the app is configured (so that a
    server forking after it, like ``gunicorn --preload``, shares regions opened before the
    fork), or at the limit's first request in each process (a Redis store: a bad URL found at
    the first request, and no connection from a master that serves none)."""
    return _store_kind(store) != "redis"


#: The client identity of a key function used outside a configured app: the peer address,
#: IPv6 by /64 (forwarding headers are never believed; a request from a private peer that
#: carries one is warned about once).
PEER_ONLY = ClientResolver()


def client_resolver(
    trusted_proxies: Any = None, ipv6_prefix: int | None = None, proxy_header: str | None = None
) -> ClientResolver:
    """The core's resolver of an app's configuration (checked at once: a bad value raises
    InvalidOptionError or TypeError): `trusted_proxies` None (the peer is the client), a hop
    count, or addresses / CIDR ranges / "loopback", "private", "linklocal"; `ipv6_prefix`
    the bits an IPv6 client is keyed by (64); `proxy_header` the header the trusted proxies
    write, "x-forwarded-for" (the default) or "forwarded" (RFC 7239)."""
    return ClientResolver(
        trusted_proxies=trusted_proxies,
        ipv6_prefix=64 if ipv6_prefix is None else ipv6_prefix,
        header="x-forwarded-for" if proxy_header is None else proxy_header,
    )


def is_async(fn: Any) -> bool:
    """Whether calling `fn` gives an awaitable to await: a coroutine function (``async def``,
    a partial of one, an object whose ``__call__`` is one)."""
    if fn is None:
        return False
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def refuse_async(fn: Any, what: str, where: str) -> None:
    """A TypeError, when the app is configured, for an async callable that `where` (a path
    that cannot await: Flask's ``before_request``, a sync Django view) would call: its
    coroutine, never awaited, was the bucket key (its repr), a truthy ``skip`` or a cost."""
    if is_async(fn):
        raise TypeError(
            f"{what} {_named(fn)} is async (a coroutine function), and {where} calls it synchronously: "
            "give a plain function (def, not async def)"
        )


def _named(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def not_awaitable(value: Any, fn: Any, what: str) -> None:
    """A TypeError for an awaitable `value` that `fn` (a sync function that returned one, or
    an async one on a path that cannot await) gave where a key, a cost or a skip answer was
    due: it is closed (never awaited) and named, never taken as the answer."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise TypeError(
            f"{what} {_named(fn)} returned an awaitable ({type(value).__name__}), which this synchronous "
            "path cannot await: give a plain function, or an async one (async def) where the "
            "integration awaits (Starlette, an async Django view or middleware)"
        )


def header_key(name: str, fallback: KeyFunc) -> KeyFunc:
    """Keys by a request header (``request.headers.get(name)``, as Django and Starlette
    requests have it); `fallback` when it is absent."""

    def key(request: Any) -> Any:
        value = request.headers.get(name)
        return f"{name}:{value}" if value else fallback(request)

    key.__name__ = f"header_{name}"
    return key


def named_key(spec: str | KeyFunc, named: dict[str, KeyFunc], header: Callable[[str], KeyFunc]) -> KeyFunc:
    """A key function from a callable, one of `named`, or "header:NAME"."""
    if callable(spec):
        return spec
    found = named.get(spec)
    if found is not None:
        return found
    if spec.startswith("header:") and len(spec) > len("header:"):
        return header(spec[len("header:") :])
    names = ", ".join(f'"{n}"' for n in named)
    raise ValueError(f'unknown key function {spec!r} (use {names} or "header:NAME")')


#: Where shadow rules report the requests they would have rejected.
_log = logging.getLogger("sluicegate")


class Rule:
    """One limit: its quota, the key function that picks its bucket, and a cost.

    `scope` names the limit among the app's limits (the view it decorates and its place
    there, or a default limit's place): on a shared-memory store the limit's buckets live in
    a region of its own, ``<store name>.<region_suffix(quota, scope)>``; on Redis under a key
    prefix of its own, ``<prefix>:<region_suffix(quota, scope)>``. `policy` names it in the
    IETF RateLimit fields (None: the integration's default); `scoped` rules count each view
    separately (default limits). `deduct_when`, a function of the response, says whether an
    admitted request counts: when it returns False the request's tokens are refunded (the
    core's refund) once the response is known. A `shadow` rule decides and counts as an
    enforcing one but lets every request through (the core's shadow mode): a request it
    would have rejected is logged on the ``sluicegate`` logger. Rules given one `memory_pool`
    share their limiter where a shared store would share their buckets (the same region or
    prefix), on every store: the memory store then counts as the others do. `awaits`: its key
    or cost function is async (``async def``), which only an async path can call."""

    __slots__ = (
        "_limiters", "_lock", "awaits", "cost", "deduct_when", "fallback_max_keys", "key_func", "max_keys",
        "memory_pool", "policy", "quota", "scope", "scoped", "shadow",
    )  # fmt: skip

    def __init__(
        self,
        rate: str | Quota,
        key_func: KeyFunc | None,
        *,
        scope: str,
        cost: int | Callable[[Any], int] = 1,
        policy: str | None = None,
        scoped: bool = False,
        max_keys: int | None = None,
        deduct_when: Callable[[Any], bool] | None = None,
        shadow: bool = False,
        memory_pool: dict[tuple[str, str, bool], KeyedLimiter] | None = None,
    ) -> None:
        self.quota = rate if isinstance(rate, Quota) else Quota(rate)
        if self.quota.algorithm == "leaky_queue":
            # A leaky queue admits with a wait the caller must let pass first (a shaper): a
            # web limit that went on at once would serve a burst the queue spreads out.
            expected = "a web limit's algorithm: any but leaky_queue (gcra refuses at once where it delays)"
            error = InvalidOptionError(
                f"a web limit cannot use {str(self.quota)!r}: a leaky queue delays what it admits, "
                "which a web limit does not; use algorithm=gcra for the same rate and burst refused "
                "at once, or Limiter.acquire to shape"
            )
            error.option, error.value, error.expected = "algorithm", "leaky_queue", expected
            raise error
        self.deduct_when = deduct_when
        self.shadow = shadow
        self.key_func = key_func
        self.scope = scope
        self.cost = cost
        self.awaits = is_async(key_func) or (callable(cost) and is_async(cost))
        self.policy = policy
        self.scoped = scoped
        self.max_keys = max_keys
        self.memory_pool = memory_pool
        #: The integration's key bound (``SLUICEGATE_MAX_KEYS``, ``MAX_KEYS``), for a rule that
        #: sets none of its own: ``use_max_keys``.
        self.fallback_max_keys: int | None = None
        self._limiters: dict[str, KeyedLimiter] = {}
        self._lock = threading.Lock()

    def open_early(self, store: str) -> None:
        """Opens this limit's limiter on `store` now, unless the store is opened at the first
        request (``opens_early``)."""
        if opens_early(store):
            self.limiter(store)

    def use_max_keys(self, max_keys: int | None) -> None:
        """The integration's key bound, for this rule when it sets none of its own (its
        limiters made before are made again, with it)."""
        if max_keys != self.fallback_max_keys:
            with self._lock:
                self.fallback_max_keys = max_keys
                if self.max_keys is None:
                    self._limiters = {}

    def limiter(self, store: str = MEMORY) -> KeyedLimiter:
        """This limit's keyed limiter on `store`, made on first use (once per process and
        store; on "memory", a limiter of this rule's own)."""
        found = self._limiters.get(store)
        if found is None:
            with self._lock:
                found = self._limiters.get(store)
                if found is None:
                    bound = self.max_keys if self.max_keys is not None else self.fallback_max_keys
                    suffix = region_suffix(self.quota, self.scope, region_bound(store, bound))
                    pool = self.memory_pool
                    if pool is not None:
                        # One limiter for the pool's rules of one region (in memory, what a
                        # shared store shares; on a shared store, one opener and one count).
                        with _POOL_LOCK:
                            found = pool.get((store, suffix, self.shadow))
                            if found is None:
                                region = None if store == MEMORY else _store_with_suffix(store, suffix)
                                found = KeyedLimiter(
                                    self.quota, max_keys=bound, store=region, shadow=self.shadow, metrics=True
                                )
                                pool[(store, suffix, self.shadow)] = found
                    else:
                        region = _store_with_suffix(store, suffix)
                        found = KeyedLimiter(
                            self.quota, max_keys=bound, store=region, shadow=self.shadow, metrics=True
                        )
                    self._limiters[store] = found
                    _watch_store(found, store)
        return found

    def made(self, store: str) -> KeyedLimiter | None:
        """This limit's limiter on `store` if this process has made it (None before); never
        waits for one being made (a Redis store's first connection)."""
        found = self._limiters.get(store)
        if found is None and self.memory_pool is not None:
            # Another rule of the pool may have made the one this rule would use.
            bound = self.max_keys if self.max_keys is not None else self.fallback_max_keys
            suffix = region_suffix(self.quota, self.scope, region_bound(store, bound))
            found = self.memory_pool.get((store, suffix, self.shadow))
        return found

    def __repr__(self) -> str:
        return f"Rule({str(self.quota)!r}, scope={self.scope!r}, policy={self.policy!r})"


#: What an integration's ``limiters()`` returns: ``(labels, limiter)`` pairs, the form
#: ``render_prometheus`` and ``SluicegateCollector`` take.
Series = list[tuple[dict[str, str], KeyedLimiter]]


def limiter_series(rules: Iterable[Rule], store: str) -> Series:
    """The limiters that `rules` made on `store` in this process, each once, labelled by the
    limit's scope (``limit``: a view's dotted name and the limit's place there, ``default#0``,
    ``shared:NAME#0``, ...) and its canonical quota (``quota``). Every web limiter counts its
    decisions (``metrics=True``); a limit appears once it has a limiter (a Redis store's at its
    first request in the process). Two rules of one scope and quota with limiters of their
    own (a shadow and an enforcing one) are told apart by a `` (2)`` after the scope of the
    later one, numbered over every rule given, made or not, so that a limit keeps its labels
    from scrape to scrape."""
    out: Series = []
    seen: set[int] = set()
    places: dict[tuple[str, str], int] = {}
    for rule in rules:
        quota = str(rule.quota)
        limiter = rule.made(store)
        if limiter is not None and id(limiter) in seen:
            continue  # a pooled limiter, listed with the first rule that has it
        n = places.get((rule.scope, quota), 0) + 1
        places[(rule.scope, quota)] = n
        if limiter is None:
            continue
        seen.add(id(limiter))
        limit = rule.scope if n == 1 else f"{rule.scope} ({n})"
        out.append(({"limit": limit, "quota": quota}, limiter))
    return out


#: Guards every rule's `memory_pool`.
_POOL_LOCK = threading.Lock()

#: The Redis stores this process's web limits use, each watched for outages (one watch per
#: configured store: every limit of a store shares its connection and counters; two store
#: strings for one server, with another prefix or on_error, share the counters too, and each
#: watch reports what it sees of them).
_WATCHES: dict[str, _Watch] = {}

#: How often a store's counters are looked at (seconds), by the requests of its limits.
WATCH_EVERY = 1.0


def _watch_store(limiter: KeyedLimiter, store: str) -> None:
    """Watches a Redis store (once per store and process): a store whose first connection
    failed (a wrong host or port, a server down) is reported at once, as nothing else would
    say that its limits are decided by the URL's ``on_error`` policy in this process until it
    connects (``local``, the default: each process alone); later outages when they begin."""
    stats = limiter.redis_stats()
    if stats is None or store in _WATCHES:
        return
    down = stats.get("connects", 1) == 0
    _WATCHES[store] = _Watch(limiter, store, stats, down)
    if down:
        _log.warning(
            "cannot reach the Redis store %s: its limits are decided by its on_error policy in this "
            "process (%s) until it connects",
            _store_shown(store),  # as the core prints it: the password never shown
            _policy_said(store),
        )


#: What each ``on_error`` policy does to a request while the server does not answer.
_POLICIES = {
    "local": "by each process alone, with its share of the quota",
    "open": "every request admitted",
    "closed": "every request refused",
    "error": "every request an error",
}


def _policy_said(store: str) -> str:
    """The `on_error` policy of a Redis store string, and what it does (``local`` when the
    URL names none)."""
    policy, given = "local", False
    for pair in store.partition("?")[2].split("&"):
        name, _, value = pair.partition("=")
        if name == "on_error":  # in any case, as the core reads it
            policy, given = value.lower(), True
    return f"on_error={policy}{'' if given else ', the default'}: {_POLICIES.get(policy, 'as the URL says')}"


def _failures(stats: dict[str, int]) -> int:
    """The calls a Redis store did not decide: each decided by its ``on_error`` policy (or
    raised, under ``error``)."""
    return stats["failed_open"] + stats["failed_closed"] + stats["failed_local"] + stats["failed_error"]


class _Watch:
    """Reports a Redis store's outages on the ``sluicegate`` logger, once each: a warning when
    its calls begin to fail (each then decided by the URL's ``on_error`` policy, or raised
    under ``on_error=error``), another when the server decides again. The store's
    counters (``redis_stats()``) are read at most every `WATCH_EVERY` seconds, by a request of
    one of its limits (a clock reading a request the rest of the time)."""

    __slots__ = ("_decided", "_failed", "_failing", "_limiter", "_lock", "_next", "_policy", "_shown")

    def __init__(self, limiter: KeyedLimiter, store: str, stats: dict[str, int], failing: bool) -> None:
        self._limiter = limiter
        self._shown = _store_shown(store)
        self._policy = _policy_said(store)
        self._failed, self._decided = _failures(stats), stats["decided"]
        self._failing = failing
        self._next = time.monotonic() + WATCH_EVERY
        self._lock = threading.Lock()

    def tick(self) -> None:
        """Looks at the counters if it is time (one thread at a time; the others go on)."""
        if time.monotonic() < self._next or not self._lock.acquire(blocking=False):
            return
        try:
            now = time.monotonic()
            if now < self._next:  # another thread looked while this one came to the lock
                return
            self._next = now + WATCH_EVERY
            stats = self._limiter.redis_stats()
            if stats is None:
                return
            failed, decided = _failures(stats), stats["decided"]
            if failed > self._failed and not self._failing:
                self._failing = True
                _log.warning(
                    "the Redis store %s is failing (%d calls not decided by it since the last look; "
                    "in all %d timeouts, %d unavailable, %d server errors): its limits are decided by "
                    "its on_error policy in this process (%s) until it answers again",
                    self._shown, failed - self._failed, stats["timeouts"], stats["unavailable"],
                    stats["server_errors"], self._policy,
                )  # fmt: skip
            elif self._failing and decided > self._decided and failed == self._failed:
                self._failing = False
                # A warning as the outage's start was: a log that shows one shows the other.
                _log.warning("the Redis store %s answers again: its limits are decided by it", self._shown)
            self._failed, self._decided = failed, decided
        finally:
            self._lock.release()


def view_rules(
    view: Any,
    existing: Sequence[Rule],
    quotas: Sequence[Quota],
    key_func: KeyFunc | None,
    label: str | None = None,
    **options: Any,
) -> list[Rule]:
    """The rules of one decorator on `view`, which already has `existing` (the decorators
    below it). A rule's scope is the view's dotted name (`label` when the integration names
    it) and the rule's place among the view's rules counted from the innermost decorator,
    which every process computes alike."""
    name = view_name(view) if label is None else label
    return [Rule(q, key_func, scope=f"{name}#{len(existing) + i}", **options) for i, q in enumerate(quotas)]


def view_name(view: Any) -> str:
    """A view's dotted name, the same in every process. The view function of a class-based
    view is a closure that ``as_view`` made, the same qualified name for every class: it is
    named by its class (Django's ``view_class``) or, while Flask's ``as_view`` decorates it
    (``decorators = [...]``), by the endpoint name it was given. Any other view by its
    qualified name."""
    module = getattr(view, "__module__", "")
    cls = getattr(view, "view_class", None)
    if cls is not None:
        return f"{getattr(cls, '__module__', module)}.{getattr(cls, '__qualname__', repr(cls))}.as_view"
    qualname = getattr(view, "__qualname__", None)
    if not isinstance(qualname, str):
        # A partial or a callable object: by what it calls (a repr would hold an address,
        # different in every process).
        if isinstance(view, functools.partial):
            return f"{view_name(view.func)}(partial)"
        return f"{type(view).__module__}.{type(view).__qualname__}()"
    if qualname.endswith("as_view.<locals>.view"):
        return f"{module}.{qualname}:{getattr(view, '__name__', '')}"
    return f"{module}.{qualname}"


def shared_rules(
    registry: dict[str, list[Rule]], name: str, quotas: Sequence[Quota], key_func: KeyFunc | None, **options: Any
) -> list[Rule]:
    """The rules of the shared limit `name` (in `registry`, made on first use): one set of
    buckets for every view that names it. Naming it again with other rates is a ValueError."""
    rules = registry.get(name)
    if rules is None:
        rules = [Rule(q, key_func, scope=f"shared:{name}#{i}", **options) for i, q in enumerate(quotas)]
        registry[name] = rules
    elif [r.quota for r in rules] != list(quotas):
        raise ValueError(f"the shared limit {name!r} already has other rates")
    else:
        # The first declaration's options serve every view that names it: one that says
        # otherwise would be silently ignored (a dry run enforced, another cost charged).
        first = rules[0]
        cost = options.get("cost", 1)
        said = {
            "shadow": (first.shadow, options.get("shadow", False)),
            "policy": (first.policy, options.get("policy")),
            "max_keys": (first.max_keys, options.get("max_keys")),
            "cost": (first.cost, cost) if not callable(cost) and not callable(first.cost) else (0, 0),
        }
        differ = [f"{k}={b!r} (first {a!r})" for k, (a, b) in said.items() if a != b]
        if differ:
            raise ValueError(
                f"the shared limit {name!r} was declared with other options: {', '.join(differ)}; "
                "give every view that names it the same ones (the key function and deduct_when "
                "are the first declaration's)"
            )
    return rules


def default_rules(rates: Rates | None, max_keys: int | None) -> list[Rule]:
    """The default limits (applied per view: their keys carry the view)."""
    return [
        Rule(rate, None, scope=f"default#{i}", scoped=True, max_keys=max_keys)
        for i, rate in enumerate(rate_list(rates))
    ]


def quotas(rates: Rates, cost: int | Callable[[Any], int] = 1) -> list[Quota]:
    """The quotas of a decorator's rates, parsed when the decorator is (errors at import),
    and its `cost` checked against each when it is fixed."""
    parsed = [r if isinstance(r, Quota) else Quota(r) for r in rate_list(rates)]
    if not callable(cost):
        for quota in parsed:
            _check_cost(cost, quota)
    return parsed


def rate_list(rates: Rates | None) -> list[str | Quota]:
    """One rate, or several: a rate string holds `;` itself, so several come as a list."""
    if rates is None:
        return []
    if isinstance(rates, (str, Quota)):
        return [rates]
    return list(rates)


Outcome = tuple[Union[Decision, None], Union[Rule, None], bool]

#: How long a client refused for a full key store is told to wait.
FULL_RETRY_NS = 1_000_000_000


def store_full(quota: Quota) -> Decision:
    """The answer to a new key that a limit's store has no room for (``KeyStoreFull``: every
    bucket in use at the key bound, none full to evict): a rejection, retry in a second (as
    sluicegate-tower answers), not an error page. The limiter's metrics count it
    (``key_store_full``)."""
    return Decision.from_figures(
        allowed=False, limit=quota.burst, remaining=0, retry_after_ns=FULL_RETRY_NS, window_secs=quota.window_secs
    )
def over_capacity(quota: Quota) -> Decision:
    """The answer to a request whose cost (a function of the request: a batch's size) is more
    than the limit's burst (``InsufficientCapacity``), which no wait would admit: a rejection,
    as the peers answer (limits, rate-limiter-flexible), not an error page a client could fill
    the error log with. It tells the client to come back after the time an empty bucket takes
    to fill (the policy's window), though only a smaller request will be admitted then; the
    ``sluicegate`` logger says so (info)."""
    return Decision.from_figures(
        allowed=False,
        limit=quota.burst,
        remaining=0,
        retry_after_ns=quota.window_secs * 1_000_000_000,
        window_secs=quota.window_secs,
    )


def refusal(rule: Rule, error: KeyStoreFull | InsufficientCapacity, cost: int) -> Decision:
    """``store_full`` or ``over_capacity``, by `error`."""
    if isinstance(error, KeyStoreFull):
        return store_full(rule.quota)
    _log.info("a request of cost %d is more than limit %s can ever admit: refused", cost, rule)
    return over_capacity(rule.quota)


def shadow_pass(rule: Rule, key: Any, error: KeyStoreFull | InsufficientCapacity) -> Decision:
    """A shadow rule's answer where the store refused (``refusal``): the request goes on, and
    the refusal is logged as a shadow rejection is."""
    _log.info("shadow limit %s would have rejected key %r: %s", rule, key, error)
    return Decision.from_figures(
        allowed=True, limit=rule.quota.burst, remaining=0, window_secs=rule.quota.window_secs
    )


def _check_cost(cost: Any, quota: Quota) -> None:
    """A fixed cost: a whole number of tokens, at most the burst (else every request would be
    refused), checked when the limit is declared."""
    if type(cost) is bool or not isinstance(cost, int) or cost < 0:
        expected = "a whole number of tokens, 0 or more, or a function of the request"
        error = InvalidOptionError(f"cost must be {expected}, not {cost!r}")
        error.option, error.value, error.expected = "cost", str(cost), expected
        raise error
    if cost > quota.burst:
        expected = f"at most the burst, {quota.burst}"
        error = InvalidOptionError(
            f"cost {cost} is more than {str(quota)!r} can ever admit (its burst is {quota.burst}): "
            "every request would be refused"
        )
        error.option, error.value, error.expected = "cost", str(cost), expected
        raise error


#: What an admitted request took from the limits that count it only by its response:
#: (limiter, key, cost, the limit's `deduct_when`). A rule's, or a DRF throttle's, whose
#: limiter is shared by throttles that may count by other functions.
Taken = list[tuple[KeyedLimiter, Any, int, Callable[[Any], bool]]]


#: What an admitted request took from every limit that counts it: (limiter, key, cost).
Held = list[tuple[KeyedLimiter, Any, int]]


def check(
    rules: Sequence[Rule],
    request: Any,
    default_key: KeyFunc,
    scope: str | None = None,
    store: str = MEMORY,
    taken: Taken | None = None,
    held: Held | None = None,
) -> Outcome:
    """Asks every rule, on `store`; returns (decision to report, its rule, allowed).

    All rules must admit the request. When one rejects, the tokens the earlier ones took are
    refunded, so a rejected request costs nothing anywhere. The decision reported when all
    admit is the one with the fewest tokens left (the binding policy). On Redis each call
    waits for the server with the GIL released. An admitted request's tokens from rules with
    a `deduct_when` are added to `taken`, for ``settle`` once the response is known, and
    every rule's to `held` (for a later check of the same request that rejects it, which
    gives them back).
    """
    if len(rules) == 1 and rules[0].deduct_when is None and not rules[0].shadow:
        # The common case, one rule that counts every admitted request: nothing to refund or
        # settle, and its decision is the one to report.
        rule = rules[0]
        limiter, key, cost = _call(rule, request, default_key, scope, store)
        try:
            decision = limiter.try_acquire(key, cost)
        except (KeyStoreFull, InsufficientCapacity) as error:
            decision = refusal(rule, error, cost)
        if held is not None and decision:
            held.append((limiter, key, cost))
        return decision, rule, bool(decision)
    tally = _Tally()
    try:
        for rule in rules:
            limiter, key, cost = _call(rule, request, default_key, scope, store)
            try:
                decision = limiter.try_acquire(key, cost)
            except (KeyStoreFull, InsufficientCapacity) as error:
                if rule.shadow:  # a shadow limit never refuses: what it would have done is logged
                    tally.seen(rule, shadow_pass(rule, key, error))
                    continue
                decision = refusal(rule, error, cost)
            if not tally.admits(rule, limiter, key, cost, decision):
                tally.give_back()
                return decision, rule, False
    except BaseException:
        # A later rule's key or cost function, or its store, raised: the request goes no
        # further, so what the earlier rules took goes back (all or nothing).
        tally.give_back()
        raise
    return tally.outcome(taken, held)


async def check_async(
    rules: Sequence[Rule],
    request: Any,
    default_key: KeyFunc,
    scope: str | None = None,
    store: str = MEMORY,
    taken: Taken | None = None,
    held: Held | None = None,
) -> Outcome:
    """`check` for async views: every call awaited (on Redis without blocking the event
    loop; an in-process store answers at once)."""
    tally = _Tally()
    try:
        for rule in rules:
            if store not in rule._limiters and not opens_early(store):
                # A Redis store is opened at a worker's first request: connecting blocks, so
                # off the event loop.
                await asyncio.to_thread(rule.limiter, store)
            kf = rule.key_func or default_key
            aio = getattr(kf, "aio", None)
            if aio is not None:
                # The key function's own async form (Django's "user": request.auser()).
                key = await aio(request)
            else:
                key = kf(request)
                if inspect.isawaitable(key):  # an async key function
                    key = await key
            cost = rule.cost
            if callable(cost):
                cost = cost(request)
                if inspect.isawaitable(cost):  # an async cost function
                    cost = await cost
            limiter, key, cost = _call(rule, request, default_key, scope, store, key, cost)
            try:
                decision = await limiter.try_acquire_async(key, cost)
            except (KeyStoreFull, InsufficientCapacity) as error:
                if rule.shadow:  # a shadow limit never refuses: what it would have done is logged
                    tally.seen(rule, shadow_pass(rule, key, error))
                    continue
                decision = refusal(rule, error, cost)
            if not tally.admits(rule, limiter, key, cost, decision):
                await tally.give_back_async()
                return decision, rule, False
    except BaseException:
        # As in `check`. Shielded: a cancelled request (CancelledError) still gives back what
        # was taken before the cancel, though its own await is cut short.
        await asyncio.shield(tally.give_back_async())
        raise
    return tally.outcome(taken, held)


#: `_call`'s key or cost not given: the key or cost function is called.
_NO_KEY: Any = object()


def _call(
    rule: Rule,
    request: Any,
    default_key: KeyFunc,
    scope: str | None,
    store: str,
    key: Any = _NO_KEY,
    cost: Any = _NO_KEY,
) -> tuple[KeyedLimiter, Any, int]:
    """The limiter, stored key and cost of `request` under `rule` (`key`, `cost`: the key and
    cost functions' answers, when the caller has them: awaited by ``check_async``). Called
    here, a function that answers an awaitable is a TypeError (``not_awaitable``)."""
    if key is _NO_KEY:
        key = (rule.key_func or default_key)(request)
        if type(key) is not str:
            not_awaitable(key, rule.key_func or default_key, "the key function")
    if key is None:
        # (The core's TypeError named neither the function nor the limit.)
        kf = rule.key_func or default_key
        raise TypeError(
            f"the key function {getattr(kf, '__qualname__', repr(kf))} of the limit {rule.scope!r} returned "
            "None for this request: return a str, bytes or int (for example the client's address when "
            "the request has no key of its own)"
        )
    if rule.scoped and scope is not None:
        key = scoped_key(scope, key)
    if cost is _NO_KEY:
        cost = rule.cost
        if callable(cost):
            fn, cost = cost, cost(request)
            if type(cost) is not int:
                not_awaitable(cost, fn, "the cost function")
    limiter = rule._limiters.get(store)
    if store != MEMORY:  # (inline: the memory store pays a comparison, not a call)
        watch(store)
    return rule.limiter(store) if limiter is None else limiter, key, cost


def watch(store: str) -> None:
    """A request of a limit on `store` is about to be decided: a Redis store's watch looks at
    its counters if it is time (``_Watch``; other stores have none)."""
    found = _WATCHES.get(store)
    if found is not None:
        found.tick()


class _Tally:
    """What `check` and `check_async` gather over the rules: what each admitting rule took
    (refunded if a later one rejects) and the decision to report, the one with the fewest
    tokens left."""

    __slots__ = ("best", "rule", "took")

    def __init__(self) -> None:
        #: (limiter, key, cost, the rule's deduct_when, None when every admission counts).
        self.took: list[tuple[KeyedLimiter, Any, int, Callable[[Any], bool] | None]] = []
        self.best: Decision | None = None
        self.rule: Rule | None = None

    def admits(self, rule: Rule, limiter: KeyedLimiter, key: Any, cost: int, decision: Decision) -> bool:
        """Records `rule`'s decision; False when it rejects."""
        if decision.shadow_rejected:  # admitted, and a would-be rejection takes nothing
            _log.info(
                "shadow limit %s would have rejected key %r (retry after %.3f s)", rule, key, decision.retry_after
            )
        elif not decision:
            return False
        else:
            self.took.append((limiter, key, cost, rule.deduct_when))
        self.seen(rule, decision)
        return True

    def seen(self, rule: Rule, decision: Decision) -> None:
        """Keeps `decision` as the one to report if it has the fewest tokens left."""
        if self.best is None or decision.remaining < self.best.remaining:
            self.best, self.rule = decision, rule

    def give_back(self) -> None:
        """The request goes no further: what the rules took so far goes back (every refund
        tried, the first failure raised after)."""
        took, self.took = self.took, []
        refund_all((lim, k, c) for lim, k, c, _ in took)

    async def give_back_async(self) -> None:
        """``give_back``, every refund awaited."""
        took, self.took = self.took, []
        await refund_all_async((lim, k, c) for lim, k, c, _ in took)

    def outcome(self, taken: Taken | None, held: Held | None = None) -> Outcome:
        """Every rule admitted: the outcome; what the rules with a `deduct_when` took is added
        to `taken` (settled by the response), what every rule took to `held`."""
        if taken is not None:
            taken.extend([(lim, k, c, when) for lim, k, c, when in self.took if when is not None])
        if held is not None:
            held.extend([(lim, k, c) for lim, k, c, _ in self.took])
        return self.best, self.rule, True


def scoped_key(scope: str, key: Any) -> Any:
    """A per-route (per-view) rule's stored key: the scope, a NUL, the key. A bytes key stays
    bytes, so that it is the bucket of the text with those UTF-8 bytes, as the core's keys are
    (formatted, it would have read "b'...'")."""
    if type(key) is not str and isinstance(key, (bytes, bytearray, memoryview)):
        return scope.encode() + b"\x00" + bytes(key)
    return f"{scope}\x00{key}"


def _stored_key(rule: Rule, key: Any, scope: str | None) -> Any:
    return scoped_key(scope, key) if rule.scoped and scope is not None else key


def peek(rules: Sequence[Rule], key: Any, scope: str | None = None, store: str = MEMORY) -> Decision | None:
    """What `rules` would say of `key` now, taking nothing (the core's peek): the decision
    with the fewest tokens left, or None without rules. `key` is what the rules' key
    function returns (a client, an API key); `scope` the view or route of per-view limits."""
    found = [rule.limiter(store).peek(_stored_key(rule, key, scope)) for rule in rules]
    return min(found, key=lambda d: (d.allowed, d.remaining), default=None)


def reset(rules: Sequence[Rule], key: Any, scope: str | None = None, store: str = MEMORY) -> int:
    """Forgets `key` in `rules` (a full bucket again); how many of them held it."""
    return sum(bool(rule.limiter(store).remove(_stored_key(rule, key, scope))) for rule in rules)


async def peek_async(rules: Sequence[Rule], key: Any, scope: str | None = None, store: str = MEMORY) -> Decision | None:
    """``peek`` for async code: on Redis the round trips are awaited, never waited for on the
    event loop (a limit not made yet in this process is made off the loop: its first
    connection)."""
    found = []
    for rule in rules:
        limiter = rule.made(store)
        if limiter is None:
            limiter = await asyncio.to_thread(rule.limiter, store)
        found.append(await limiter.peek_async(_stored_key(rule, key, scope)))
    return min(found, key=lambda d: (d.allowed, d.remaining), default=None)


async def reset_async(rules: Sequence[Rule], key: Any, scope: str | None = None, store: str = MEMORY) -> int:
    """``reset`` for async code, off the event loop."""
    return await asyncio.to_thread(reset, rules, key, scope, store)


def _unearned(taken: Taken | None, response: Any) -> list[tuple[KeyedLimiter, Any, int]]:
    """The tokens of `taken` whose limit does not count this response."""
    return [(lim, k, c) for lim, k, c, when in taken or () if not when(response)]


def settle(taken: Taken | None, response: Any) -> None:
    """Refunds what the limits with a `deduct_when` took, where it returns False for
    `response` (on Redis, a round trip with the GIL released)."""
    refund_all(_unearned(taken, response))


async def settle_async(taken: Taken | None, response: Any) -> None:
    """``settle`` for async code: every refund awaited."""
    await refund_all_async(_unearned(taken, response))


def unsettled(taken: Taken, given_back: Held) -> Taken:
    """`taken` without what `given_back` gave back already (a request rejected by a later
    check of its own): its response must not refund those a second time."""
    gone = [(id(lim), k, c) for lim, k, c in given_back]
    out: Taken = []
    for entry in taken:
        mark = (id(entry[0]), entry[1], entry[2])
        if mark in gone:
            gone.remove(mark)
        else:
            out.append(entry)
    return out


def refund_all(refunds: Iterable[tuple[KeyedLimiter, Any, int]]) -> None:
    """Gives back each (limiter, key, cost). Every refund is tried; the first that failed (a
    store under ``on_error="error"``) is raised after the others."""
    failed: BaseException | None = None
    for lim, k, c in refunds:
        try:
            lim.refund(k, c)
        except Exception as err:
            failed = failed or err
    if failed is not None:
        raise failed


async def refund_all_async(refunds: Iterable[tuple[KeyedLimiter, Any, int]]) -> None:
    """``refund_all``, every refund awaited."""
    failed: BaseException | None = None
    for lim, k, c in refunds:
        try:
            await lim.refund_async(k, c)
        except Exception as err:
            failed = failed or err
    if failed is not None:
        raise failed


def header_style(style: str) -> str:
    """`style`, checked when the app is configured rather than at its first request: the
    core knows the names (an unknown one raises InvalidOptionError, a ValueError). In lower
    case (the core reads any case), so that ``fields`` knows "legacy" at once."""
    _PROBE.headers(style)  # checked by the core, which knows the names
    return style.lower()


#: The legacy style, whose ``X-RateLimit-Reset`` the integrations send as a Unix time.
LEGACY = "legacy"
_RESET = "X-RateLimit-Reset"
_RESET_LINE = b"x-ratelimit-reset"


def legacy_reset(decision: Decision) -> str:
    """``X-RateLimit-Reset`` as slowapi and flask-limiter send it (and the Node Express
    integration): the Unix time in seconds, rounded up, when the bucket is full again (a
    rejection: when the request could be admitted, at least a second away), where the core
    renders the seconds from now."""
    wait = decision.reset_after_ns if decision.allowed else max(decision.retry_after_ns, 1_000_000_000)
    return str(-(-(time.time_ns() + wait) // 1_000_000_000))


def fields(decision: Decision, style: str, policy: str) -> dict[str, str]:
    """The decision's header fields in `style` (``header_style``'s): the core's, with the
    legacy ``X-RateLimit-Reset`` a Unix time."""
    found = decision.headers(style, policy)
    if style == LEGACY and _RESET in found:
        found[_RESET] = legacy_reset(decision)
    return found


def field_lines(decision: Decision, style: str, policy: str) -> list[tuple[bytes, bytes]]:
    """``fields`` as ASGI header lines (lower-case names)."""
    lines = decision.header_lines(style, policy)
    if style == LEGACY:
        reset = legacy_reset(decision).encode()
        lines = [(name, reset if name == _RESET_LINE else value) for name, value in lines]
    return lines


_PROBE = Decision.from_figures(allowed=True, limit=1, remaining=1)


def message(decision: Decision) -> str:
    return f"Too Many Requests: retry after {decision.retry_after_header} s\n"
