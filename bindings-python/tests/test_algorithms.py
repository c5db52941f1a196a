"""conformance/algorithms.json through the Python API: every algorithm (from its rate string,
and from keywords) and composite limits, on the manual clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

import sluicegate
from sluicegate import Composite, Decision, KeyedLimiter, Limiter, ManualClock, Quota

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "algorithms.json"
DATA = json.loads(VECTORS.read_text())
assert DATA["format"] == 1, f"unknown vectors format {DATA['format']!r}"
CASES = [c for c in DATA["cases"] if not c["keyed"]]
KEYED = [c for c in DATA["cases"] if c["keyed"]]
COMPOSITE = DATA["composite_cases"]
ALGORITHMS = ("token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log", "leaky_queue")


def as_expect(d: Decision) -> dict[str, object]:
    return {
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ns": d.retry_after_ns,
        "reset_after_ns": d.reset_after_ns,
    }


def play(
    case: dict,
    clock: ManualClock,
    acquire: Callable[[int], Decision],
    refund: Callable[[int], None],
) -> None:
    for i, step in enumerate(case["steps"]):
        clock.set_ns(step["t_ns"])
        where = f"{case['name']} step {i} ({step})"
        if step["op"] == "refund":
            refund(step["cost"])
            continue
        assert step["op"] == "acquire", where
        expect = step["expect"]
        if "error" in expect:
            assert expect["error"] == "insufficient_capacity", where
            with pytest.raises(sluicegate.InsufficientCapacity) as info:
                acquire(step["cost"])
            assert info.value.code == "insufficient_capacity"
            continue
        decision = acquire(step["cost"])
        assert as_expect(decision) == expect, where
        assert bool(decision) is expect["allowed"], where


def test_the_vectors_cover_every_algorithm_and_composites() -> None:
    assert all(not c["keyed"] for c in COMPOSITE)
    seen = {Quota(c["quota"]).algorithm for c in CASES}
    assert seen >= set(ALGORITHMS) - {"token_bucket"}  # the token bucket is vectors.json's
    keyed = {Quota(c["quota"]).algorithm for c in KEYED}
    assert keyed >= set(ALGORITHMS) - {"token_bucket"}
    assert all(len({s["key"] for s in c["steps"]}) >= 2 for c in KEYED)
    assert COMPOSITE and all(len(c["quotas"]) >= 2 for c in COMPOSITE)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_limiter(case: dict) -> None:
    clock = ManualClock(case["start_ns"])
    limiter = Limiter(case["quota"], clock=clock)
    play(case, clock, limiter.try_acquire, limiter.refund)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_limiter_reserve_and_cancel(case: dict) -> None:
    """The same steps through the core's reservation API: reserve = acquire, cancel = refund."""
    clock = ManualClock(case["start_ns"])
    limiter = Limiter(case["quota"], clock=clock)
    play(case, clock, lambda c: limiter.reserve(c).decision, lambda c: Limiter.refund(limiter, c))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_keyed_limiter(case: dict) -> None:
    """A KeyedLimiter's bucket decides as the Limiter does, next to a noisy neighbour key. The
    key's bucket is created at the case's start by a cost-0 request (a request creates its
    bucket; a Limiter's is created with it). Every algorithm, the sliding log included (kept in
    a store of logs of its own)."""
    clock = ManualClock(case["start_ns"])
    limiter = KeyedLimiter(case["quota"], clock=clock)
    limiter.try_acquire("neighbour")
    assert limiter.try_acquire("key", 0)

    def acquire(cost: int) -> Decision:
        return limiter.try_acquire(b"key", cost)

    play(case, clock, acquire, lambda c: limiter.refund("key", c))


@pytest.mark.parametrize("case", KEYED, ids=[c["name"] for c in KEYED])
def test_keyed_cases(case: dict) -> None:
    """The keyed cases: several keys of one KeyedLimiter, each created at its first request."""
    clock = ManualClock(case["start_ns"])
    limiter = KeyedLimiter(case["quota"], clock=clock)
    steps = iter(case["steps"])

    def acquire(cost: int) -> Decision:
        return limiter.try_acquire(current["key"], cost)

    def refund(cost: int) -> None:
        limiter.refund(current["key"], cost)

    current: dict[str, Any] = {}
    for i, step in enumerate(steps):
        current["key"] = step["key"]
        play({"name": f"{case['name']} step {i}", "steps": [step]}, clock, acquire, refund)
    assert len(limiter) == len({s["key"] for s in case["steps"] if s["op"] == "acquire"
                                and "error" not in s["expect"]})


def keywords_of(q: Quota) -> dict[str, Any]:
    kw: dict[str, Any] = {"count": q.count, "period_ns": q.period_ns, "algorithm": q.algorithm}
    if q.algorithm in ("token_bucket", "gcra"):
        kw.update(burst=q.burst, initial=q.initial, refill=q.refill)
    if q.max_delay_ns is not None:
        kw["max_delay"] = q.max_delay_ns / 1e9
    return kw


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_quota_keywords_round_trip(case: dict) -> None:
    q = Quota(case["quota"])
    again = Quota(**keywords_of(q))
    if q.max_delay_ns is None or q.max_delay_ns % 1000 == 0:  # float seconds: exact to the us
        assert again == q and str(again) == str(q)
    assert Quota(str(q)) == q


@pytest.mark.parametrize("case", COMPOSITE, ids=[c["name"] for c in COMPOSITE])
def test_composite(case: dict) -> None:
    clock = ManualClock(case["start_ns"])
    parts = [Limiter(q, clock=clock) for q in case["quotas"]]
    both = Composite(parts)
    assert len(both) == len(parts) and list(both.parts) == parts
    play(case, clock, both.try_acquire, both.refund)


@pytest.mark.parametrize("case", COMPOSITE, ids=[c["name"] for c in COMPOSITE])
def test_composite_at(case: dict) -> None:
    """The same through explicit clock readings (the clock itself stays at the start)."""
    clock = ManualClock(case["start_ns"])
    both = Composite([Limiter(q, clock=clock) for q in case["quotas"]])
    now = {"t": case["start_ns"]}

    class At:
        def set_ns(self, t: int) -> None:
            now["t"] = t

    play(
        case,
        At(),  # type: ignore[arg-type]
        lambda c: both.try_acquire_at(now["t"], c),
        lambda c: both.refund_at(now["t"], c),
    )
