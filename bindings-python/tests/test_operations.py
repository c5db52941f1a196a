"""Operating a limiter (docs/OPERATIONS.md): set_quota's carry rule, shadow mode, counters,
the rejection hook, the Prometheus text and the prometheus_client collector. Every figure
comes from a known sequence of decisions on a ManualClock."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import sluicegate
from sluicegate import (
    Composite,
    InvalidOptionError,
    KeyedLimiter,
    Limiter,
    ManualClock,
    Metrics,
    Quota,
    Rejection,
    StoreError,
    render_prometheus,
)
from sluicegate.prometheus import SluicegateCollector

S = 1_000_000_000


def test_set_quota_keeps_the_tokens_and_refills_at_the_new_rate() -> None:
    clock = ManualClock()
    limiter = Limiter("10/min; burst=10", clock=clock, metrics=True)
    for _ in range(8):
        assert limiter.try_acquire()
    limiter.set_quota("20/min; burst=20")
    assert limiter.quota == Quota("20/min; burst=20")
    # The 2 tokens left are kept (not 4, a fraction of the new burst), and not refilled.
    assert limiter.try_acquire().remaining == 1
    assert limiter.try_acquire().remaining == 0
    d = limiter.try_acquire()
    assert not d and d.limit == 20
    assert d.retry_after_ns == 3 * S  # one token per 3 s at 20/min
    clock.advance(3)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    m = limiter.metrics()
    assert m is not None and (m.allowed, m.rejected, m.reconfigurations) == (11, 2, 1)


def test_lowering_the_burst_clamps_and_set_quota_at_uses_the_reading_given() -> None:
    clock = ManualClock()
    limiter = Limiter("10/s; burst=10", clock=clock)
    limiter.set_quota_at(Quota("1/s; burst=3"), 0)
    assert [bool(limiter.try_acquire()) for _ in range(4)] == [True, True, True, False]
    keyed = KeyedLimiter("10/min; burst=10", clock=clock)
    for _ in range(8):
        assert keyed.try_acquire("a")
    keyed.set_quota(Quota("20/min; burst=20"))
    assert keyed.try_acquire("a").remaining == 1
    assert keyed.try_acquire("b").remaining == 19  # a new key starts fresh under the new quota
    assert keyed.quota.burst == 20


def test_set_quota_refuses_another_algorithm_and_bad_arguments() -> None:
    limiter = Limiter("10/s")
    with pytest.raises(InvalidOptionError) as e:
        limiter.set_quota("10/s; algorithm=gcra")
    assert e.value.option == "quota"
    assert limiter.quota == Quota("10/s")
    with pytest.raises(TypeError):
        limiter.set_quota(10)  # type: ignore[arg-type]
    with pytest.raises(sluicegate.InvalidQuotaError):
        limiter.set_quota("0/s")


@pytest.mark.parametrize("keyed", [False, True])
def test_shadow_never_rejects_and_flags_what_enforcement_would(keyed: bool) -> None:
    clock = ManualClock()

    def make(shadow: bool) -> Limiter | KeyedLimiter:
        if keyed:
            return KeyedLimiter("3/s; burst=3", clock=clock, shadow=shadow, metrics=True)
        return Limiter("3/s; burst=3", clock=clock, shadow=shadow, metrics=True)

    enforcing, shadow = make(False), make(True)
    assert shadow.shadow and not enforcing.shadow
    costs = [1, 2, 1, 1, 3, 1, 2, 1, 1, 1, 3, 1]
    for i, cost in enumerate(costs):
        if i % 4 == 3:
            clock.advance_ns(S // 3)
        args = ("k", cost) if keyed else (cost,)
        e = enforcing.try_acquire(*args)  # type: ignore[arg-type]
        s = shadow.try_acquire(*args)  # type: ignore[arg-type]
        assert s.allowed
        assert s.shadow_rejected == (not e.allowed)
        assert not e.shadow_rejected
        assert (s.remaining, s.retry_after_ns) == (e.remaining, e.retry_after_ns)
    em, sm = enforcing.metrics(), shadow.metrics()
    assert em is not None and sm is not None
    assert em.rejected > 0
    assert (sm.allowed, sm.rejected, sm.shadow_rejected) == (em.allowed, 0, em.rejected)
    assert sm.shadow and not em.shadow
    shadow.shadow = False
    assert not shadow.shadow and shadow.metrics().shadow is False  # type: ignore[union-attr]


def test_metrics_are_off_by_default_and_count_each_outcome() -> None:
    assert Limiter("1/s").metrics() is None
    assert KeyedLimiter("1/s").metrics() is None
    clock = ManualClock()
    keyed = KeyedLimiter("2/s; burst=2", clock=clock, metrics=True, max_keys=2)
    for key in ["a", "a", "a", b"b", 7, 7, 7, 7]:
        try:
            keyed.try_acquire(key)
        except sluicegate.KeyStoreFull:
            pass
    keyed.peek("a")
    keyed.refund("a")
    m = keyed.metrics()
    assert m == keyed.metrics()
    assert isinstance(m, Metrics)
    assert (m.allowed, m.rejected, m.shadow_rejected, m.key_store_full, m.keys) == (3, 1, 0, 4, 2)
    assert (m.keys_evicted, m.store_errors, m.reconfigurations, m.shadow) == (0, 0, 0, False)
    assert m._asdict()["key_store_full"] == 4
    assert repr(m).startswith("Metrics(allowed=3, rejected=1, shadow_rejected=0,")
    evicting = KeyedLimiter("2/s", clock=clock, metrics=True, max_keys=1, on_full="evict")
    evicting.try_acquire("a", 0)
    evicting.try_acquire("b", 0)
    assert evicting.metrics().keys_evicted == 1  # type: ignore[union-attr]


def test_counters_are_exact_under_threads() -> None:
    # A rate that never refills within the run: exactly `burst` admissions in all.
    limiter = Limiter("1000/h; burst=1000", metrics=True)
    keyed = KeyedLimiter("1000/h; burst=1000", metrics=True)
    threads, calls = 8, 400
    barrier = threading.Barrier(threads)
    admitted = [0] * threads

    def worker(i: int) -> None:
        barrier.wait()
        n = 0
        for j in range(calls):
            n += limiter.allow()
            n += keyed.allow(j % 3)
        admitted[i] = n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    m, k = limiter.metrics(), keyed.metrics()
    assert m is not None and k is not None
    assert (m.allowed, m.rejected) == (1000, threads * calls - 1000)
    assert (k.allowed, k.rejected) == (3 * 1000, threads * calls - 3000)
    assert sum(admitted) == m.allowed + k.allowed


def test_the_hook_sees_each_rejection_once_with_its_key() -> None:
    clock = ManualClock()
    seen: list[Rejection] = []
    keyed = KeyedLimiter("1/s; burst=1", clock=clock, on_reject=seen.append)
    for key in ["a", "a", 42, "42", b"b", "a"]:
        keyed.try_acquire(key)
    assert [(r.key, r.cost, r.decision.allowed) for r in seen] == [(b"a", 1, False), (b"42", 1, False), (b"a", 1, False)]
    keyed.shadow = True
    keyed.try_acquire("a", 1)
    assert seen[-1].decision.shadow_rejected and seen[-1].decision.allowed and len(seen) == 4
    single: list[Rejection] = []
    limiter = Limiter("1/s; burst=1", clock=clock, on_reject=single.append)
    limiter.try_acquire()
    limiter.try_acquire(1)
    assert [(r.key, r.cost) for r in single] == [(None, 1)]
    assert "Rejection(key=None, cost=1" in repr(single[0])


def test_a_failing_hook_is_unraisable_and_the_decision_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    def boom(r: Rejection) -> None:
        raise RuntimeError("hook failed")

    limiter = Limiter("1/s; burst=1", clock=ManualClock(), on_reject=boom, metrics=True)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert [str(e) for e in reported] == ["hook failed"]
    assert limiter.metrics().rejected == 1  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        Limiter("1/s", on_reject=3)  # type: ignore[arg-type]


def test_the_hook_may_call_the_limiter_back() -> None:
    clock = ManualClock()
    limiter: list[Limiter] = []

    def relax(r: Rejection) -> None:
        limiter[0].set_quota("2/s; burst=2")

    limiter.append(Limiter("1/s; burst=1", clock=clock, on_reject=relax))
    assert limiter[0].try_acquire()
    assert not limiter[0].try_acquire()
    assert limiter[0].quota.burst == 2
    del limiter
    gc.collect()


def test_a_limiter_whose_hook_refers_to_it_is_collected() -> None:
    """A hook that refers to its own limiter is a cycle the collector frees: the hook was
    held by the native limiter alone, a reference no traversal reported, so such a limiter
    (one per tenant, made on the fly) and its native state lived for ever."""
    import weakref

    calls: list[int] = []

    def make(keyed: bool) -> weakref.ref[Any]:
        if keyed:

            def hook(r: Rejection) -> None:
                calls.append(len(k))

            k = KeyedLimiter("1/minute", on_reject=hook)
            assert k.try_acquire("a") and not k.try_acquire("a")
        else:

            def hook(r: Rejection) -> None:
                calls.append(int(one.peek().remaining))

            one = Limiter("1/minute", on_reject=hook)
            assert one.try_acquire() and not one.try_acquire()
        return weakref.ref(hook)

    hooks = [make(keyed) for keyed in (False, True) for _ in range(5)]
    assert calls == [0] * 5 + [1] * 5
    gc.collect()
    assert [h() for h in hooks] == [None] * 10


def test_cycles_through_a_composite_a_reservation_or_an_acquire_are_collected() -> None:
    """A service object holding a limiter whose hook is its own method, and a Composite of
    it (or a reservation, or an acquire not awaited): the composite's, the reservation's and
    the acquire's references to the limiter went unreported to the collector, so the cycle
    and the limiter's native state were kept for ever."""
    import weakref

    class Service:
        def __init__(self, hold: str) -> None:
            self.per_user = Limiter("10/s", on_reject=self.log)
            self.held: Any = None
            if hold == "composite":
                self.held = Composite([self.per_user, Limiter("100/s")])
            elif hold == "reservation":
                self.held = self.per_user.reserve(1)
            elif hold == "acquire":
                self.held = self.per_user.acquire_async(1)
                self.held.close()  # never awaited; the coroutine still refers to the plan

        def log(self, r: Rejection) -> None:
            pass

    refs = []
    for hold in ("composite", "reservation", "acquire"):
        refs.append((hold, weakref.ref(Service(hold))))
    gc.collect()
    assert [(hold, r() is None) for hold, r in refs] == [(hold, True) for hold, _ in refs]


def test_peek_async_is_not_counted() -> None:
    """`peek_async` counted a decision of cost 0 as allowed (its twin `peek` counts nothing)."""
    import asyncio

    limiter = Limiter("5/s", metrics=True)
    limiter.peek()
    asyncio.run(limiter.peek_async())
    assert limiter.metrics().allowed == 0


def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scenario() -> tuple[Limiter, KeyedLimiter]:
    clock = ManualClock()
    api = Limiter("2/s; burst=2", clock=clock, metrics=True, shadow=True)
    users = KeyedLimiter("1/s; burst=1", clock=clock, metrics=True)
    for _ in range(5):
        api.try_acquire()
    for key in ["a", "a", "b", "b", "a"]:
        users.try_acquire(key)
    return api, users


def test_render_prometheus_parses_with_prometheus_client() -> None:
    api, users = scenario()
    text = render_prometheus({"api": api, "users": users})
    # Any mapping, as the stub says (only a dict was taken).
    from collections import UserDict
    from types import MappingProxyType

    assert render_prometheus(MappingProxyType({"api": api, "users": users})) == text
    assert render_prometheus(UserDict({"api": api, "users": users})) == text
    samples = parsed(text)
    assert samples[("sluicegate_decisions_total", (("limiter", "api"), ("outcome", "shadow_rejected")))] == 3
    assert samples[("sluicegate_decisions_total", (("limiter", "api"), ("outcome", "allowed")))] == 2
    assert samples[("sluicegate_decisions_total", (("limiter", "users"), ("outcome", "rejected")))] == 3
    assert samples[("sluicegate_keys", (("limiter", "users"),))] == 2
    assert samples[("sluicegate_shadow_mode", (("limiter", "api"),))] == 1
    assert ("sluicegate_keys", (("limiter", "api"),)) not in samples
    # Explicit label sets, escapes, and snapshots taken earlier.
    text = render_prometheus([({"app": 'a"b\\c\nd', "zone": "x"}, api.metrics()), ({"app": "u", "zone": "x"}, users)])
    samples = parsed(text)
    assert samples[("sluicegate_reconfigurations_total", (("app", 'a"b\\c\nd'), ("zone", "x")))] == 0


def test_render_prometheus_refuses_what_the_core_refuses() -> None:
    api, users = scenario()
    with pytest.raises(InvalidOptionError):
        render_prometheus([({"outcome": "x"}, api)])
    with pytest.raises(InvalidOptionError):
        render_prometheus([({"a": "1"}, api), ({"a": "1"}, users)])
    with pytest.raises(ValueError, match="metrics=True"):
        render_prometheus({"off": Limiter("1/s")})
    with pytest.raises(TypeError):
        render_prometheus({"x": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        render_prometheus([({"a": 1}, api)])  # type: ignore[dict-item]


def test_the_collector_matches_render_prometheus() -> None:
    api, users = scenario()
    registry = CollectorRegistry()
    SluicegateCollector({"api": api, "users": users}, registry=registry)
    exported = parsed(generate_latest(registry).decode())
    assert exported == parsed(render_prometheus({"api": api, "users": users}))
    users.try_acquire("c")  # each scrape reads a fresh snapshot
    again = parsed(generate_latest(registry).decode())
    assert again[("sluicegate_decisions_total", (("limiter", "users"), ("outcome", "allowed")))] == 3
    with pytest.raises(ValueError, match="metrics=True"):
        SluicegateCollector({"off": Limiter("1/s")})
    with pytest.raises(ValueError, match="names"):
        SluicegateCollector([({"a": "1"}, api), ({"b": "1"}, users)])


def test_shm_and_redis_refuse_set_quota(regions: Path, request: pytest.FixtureRequest) -> None:
    shm = KeyedLimiter("10/s", store=f"shm:{regions}/ops", max_keys=16, metrics=True)
    with pytest.raises(StoreError) as e:
        shm.set_quota("20/s")
    assert e.value.kind == "unsupported"
    assert shm.quota == Quota("10/s")
    single = Limiter("10/s", store=f"shm:{regions}/ops1")
    with pytest.raises(StoreError) as e:
        single.set_quota("20/s")
    assert e.value.kind == "unsupported"
    url = request.getfixturevalue("redis_server").url
    remote = Limiter("10/s", store=f"{url}?prefix=ops")
    with pytest.raises(StoreError) as e:
        remote.set_quota("20/s")
    assert e.value.kind == "unsupported"
