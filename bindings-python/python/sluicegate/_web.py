"""What the Flask and Django integrations share: rules, checking several rules at once, 429s.

Framework-free on purpose; ``sluicegate.flask`` and ``sluicegate.django`` adapt it. Every
decision comes from the native limiter: this module only picks keys and combines decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Union

from sluicegate._native import Decision, KeyedLimiter, Quota

#: A key function takes the framework's request (Flask: no argument needed, but the request
#: is passed anyway) and returns a str, bytes or int key.
KeyFunc = Callable[[Any], Union[str, bytes, int]]
Rates = Union[str, Quota, Iterable[Union[str, Quota]]]


class Rule:
    """One limit: a keyed limiter, the key function that picks its bucket, and a cost.

    `policy` names it in the IETF RateLimit fields (None: the integration's default);
    `scoped` rules count each view separately (default limits)."""

    __slots__ = ("cost", "key_func", "limiter", "policy", "scoped")

    def __init__(
        self,
        rate: str | Quota,
        key_func: KeyFunc | None,
        *,
        cost: int | Callable[[Any], int] = 1,
        policy: str | None = None,
        scoped: bool = False,
        max_keys: int | None = None,
    ) -> None:
        self.limiter = KeyedLimiter(rate, max_keys=max_keys)
        self.key_func = key_func
        self.cost = cost
        self.policy = policy
        self.scoped = scoped

    def __repr__(self) -> str:
        return f"Rule({str(self.limiter.quota)!r}, policy={self.policy!r})"


def rate_list(rates: Rates | None) -> list[str | Quota]:
    """One rate, or several: a rate string holds `;` itself, so several come as a list."""
    if rates is None:
        return []
    if isinstance(rates, (str, Quota)):
        return [rates]
    return list(rates)


def check(
    rules: Sequence[Rule],
    request: Any,
    default_key: KeyFunc,
    scope: str | None = None,
) -> tuple[Decision | None, Rule | None, bool]:
    """Asks every rule; returns (decision to report, its rule, allowed).

    All rules must admit the request. When one rejects, the tokens the earlier ones took are
    refunded, so a rejected request costs nothing anywhere. The decision reported when all
    admit is the one with the fewest tokens left (the binding policy).
    """
    taken: list[tuple[Rule, Any, int]] = []
    best: Decision | None = None
    best_rule: Rule | None = None
    for rule in rules:
        key = (rule.key_func or default_key)(request)
        if rule.scoped and scope is not None:
            key = f"{scope}\x00{key}"
        cost = rule.cost(request) if callable(rule.cost) else rule.cost
        decision = rule.limiter.try_acquire(key, cost)
        if not decision:
            for r, k, c in taken:
                r.limiter.refund(k, c)
            return decision, rule, False
        taken.append((rule, key, cost))
        if best is None or decision.remaining < best.remaining:
            best, best_rule = decision, rule
    return best, best_rule, True


def header_style(style: str) -> str:
    """`style`, checked when the app is configured rather than at its first request: the
    core knows the names (an unknown one raises InvalidOptionError, a ValueError)."""
    _PROBE.headers(style)
    return style


_PROBE = Decision.from_figures(allowed=True, limit=1, remaining=1)


def message(decision: Decision) -> str:
    return f"Too Many Requests: retry after {decision.retry_after_header} s\n"
