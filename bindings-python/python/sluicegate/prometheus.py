"""A ``prometheus_client`` collector of limiters' counters (docs/OPERATIONS.md, "Metrics").

``prometheus_client`` is an optional dependency (``pip install prometheus-client``), imported
when a collector is made. Without it, ``sluicegate.render_prometheus`` renders the same
families as text::

    from prometheus_client import CollectorRegistry, generate_latest
    from sluicegate import KeyedLimiter
    from sluicegate.prometheus import SluicegateCollector

    users = KeyedLimiter("100/min", metrics=True)
    registry = CollectorRegistry()
    SluicegateCollector({"users": users}, registry=registry)
    print(generate_latest(registry).decode())

Each scrape reads every limiter's ``metrics()`` snapshot; the families, names and help texts
are the core's (``sluicegate_decisions_total{outcome=...}``, ``sluicegate_keys``, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Union

from sluicegate._native import KeyedLimiter, Limiter, Metrics

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

_Source = Union[Limiter, KeyedLimiter]
_log = logging.getLogger("sluicegate")
_Sources = Union[Mapping[str, _Source], Iterable[tuple[Mapping[str, str], _Source]]]

# (name without _total, help, field): the counters, as the core names them.
_COUNTERS = (
    (
        "sluicegate_keys_evicted",
        "Keys evicted by a keyed rate limiter (full buckets, or the fullest at the key bound).",
        "keys_evicted",
    ),
    ("sluicegate_key_store_full", "New keys refused at the key bound of a keyed rate limiter.", "key_store_full"),
    ("sluicegate_store_errors", "Calls of a rate limiter that failed with an error of its store.", "store_errors"),
    ("sluicegate_reconfigurations", "Quotas set on a rate limiter by live reconfiguration.", "reconfigurations"),
)
_DECISIONS_HELP = (
    "Decisions made by a rate limiter, by outcome (allowed, rejected, or shadow_rejected: let "
    "through by shadow mode)."
)


def _checked(limiters: _Sources) -> tuple[list[str], list[tuple[dict[str, str], _Source]]]:
    """The label names and ``(labels, limiter)`` pairs of `limiters`, checked."""
    if isinstance(limiters, Mapping):
        series = [({"limiter": name}, limiter) for name, limiter in limiters.items()]
    else:
        series = [(dict(labels), limiter) for labels, limiter in limiters]
    names: list[str] | None = None
    for labels, limiter in series:
        if not isinstance(limiter, (Limiter, KeyedLimiter)):
            raise TypeError(f"SluicegateCollector takes Limiter or KeyedLimiter objects, not {type(limiter).__name__}")
        if limiter.metrics() is None:
            raise ValueError(f"{limiter!r} counts nothing: build it with metrics=True")
        if names is None:
            names = list(labels)
        elif list(labels) != names:
            raise ValueError(f"every label set must have the names {names}, not {list(labels)}")
        if "outcome" in labels:
            raise ValueError("the label name 'outcome' is the decisions family's own")
    return names or [], series


class SluicegateCollector:
    """Collects the counters of limiters built with ``metrics=True``.

    ``limiters`` is a dict ``{name: limiter}`` (label ``limiter="name"``), an iterable of
    ``(labels, limiter)`` pairs, ``labels`` a dict of str, or a function returning either,
    called at each scrape (not before): a web integration's ``limiters`` (``ext.limiters``),
    whose limits appear as they are made. Every label set must have the same names. A fixed
    set is checked here; a function's answer at each scrape, and when it fails (raises, or
    gives what this refuses) the scrape gets none of these families and the error is logged
    on the ``sluicegate`` logger, so that the registry's other metrics are still served. With
    ``registry``, the collector registers itself there.
    """

    def __init__(
        self,
        limiters: _Sources | Callable[[], _Sources],
        registry: CollectorRegistry | None = None,
    ) -> None:
        import prometheus_client.core  # noqa: F401  (fails here, not at the first scrape)

        self._source: Callable[[], _Sources] | None = None
        self._fixed: tuple[list[str], list[tuple[dict[str, str], _Source]]] | None = None
        if callable(limiters):
            self._source = limiters
        else:
            self._fixed = _checked(limiters)  # a mistake fails here, not at a scrape
        if registry is not None:
            registry.register(self)

    def _snapshots(self) -> tuple[list[str], list[tuple[list[str], Metrics]]] | None:
        if self._source is None:
            assert self._fixed is not None
            names, series = self._fixed
        else:
            try:
                names, series = _checked(self._source())
            except Exception:
                _log.exception("SluicegateCollector: the limiters' function failed; no sluicegate series this scrape")
                return None
        out = []
        for labels, limiter in series:
            m = limiter.metrics()
            if m is None:  # a function's limiter checked above: counting cannot be turned off
                continue
            out.append(([labels[n] for n in names], m))
        return names, out

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        got = self._snapshots()
        if got is None:
            return
        names, snapshots = got
        decisions = CounterMetricFamily("sluicegate_decisions", _DECISIONS_HELP, labels=[*names, "outcome"])
        for values, m in snapshots:
            for outcome in ("allowed", "rejected", "shadow_rejected"):
                decisions.add_metric([*values, outcome], getattr(m, outcome))
        yield decisions
        for name, help_text, field in _COUNTERS:
            family = CounterMetricFamily(name, help_text, labels=names)
            for values, m in snapshots:
                family.add_metric(values, getattr(m, field))
            yield family
        keys = GaugeMetricFamily("sluicegate_keys", "Keys held by a keyed rate limiter.", labels=names)
        for values, m in snapshots:
            if m.keys is not None:
                keys.add_metric(values, m.keys)
        yield keys
        shadow = GaugeMetricFamily(
            "sluicegate_shadow_mode", "1 while a rate limiter is in shadow (dry-run) mode, else 0.", labels=names
        )
        for values, m in snapshots:
            shadow.add_metric(values, 1 if m.shadow else 0)
        yield shadow


__all__ = ["SluicegateCollector"]
