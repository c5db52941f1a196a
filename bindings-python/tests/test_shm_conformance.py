"""The shared conformance vectors (conformance/vectors.json and algorithms.json) through the
shared-memory store: every case on a fresh region, read through a manual clock, must decide
exactly as the memory store does (the vectors' expectations), at every step.

A region keeps a 95-bit state per key, exact for a century of readings from its creation. It
refuses (StoreError kind "unsupported") only the sliding log, whose state is a log of up to
`count` timestamps, and quotas whose exact state outgrows 95 bits (in the vectors, one sliding
window counting to 2^48 - 1); any other refusal fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import test_algorithms
import test_conformance

from sluicegate import Decision, KeyedLimiter, Limiter, ManualClock, StoreError

SINGLE = test_conformance.SINGLE + test_algorithms.CASES
KEYED = test_conformance.KEYED + test_algorithms.KEYED
CASES = SINGLE + KEYED


def on_region(make: Callable[[str], object], regions: Path, name: str = "case") -> object | StoreError:
    """`make(store)` on a fresh region, or the region's refusal ("unsupported")."""
    try:
        return make(f"shm:{regions}/{name}")
    except StoreError as e:
        if e.kind != "unsupported":
            raise
        return e


#: The quotas a region refuses, besides every sliding log: two 48-bit window counts leave a
#: 95-bit state no room for the window's index.
BEYOND_95_BITS = {"281474976710655/s; algorithm=sliding_window"}


def refusable(quota: str) -> bool:
    return "sliding_log" in quota or quota in BEYOND_95_BITS


def refused(case: dict, error: StoreError, regions: Path) -> None:
    """A refused case: one a region cannot keep exactly; it said why, made nothing, and the
    memory store takes it."""
    assert refusable(case["quota"]), f"a region refused {case['quota']!r}: {error}"
    assert error.code == "store_unsupported" and error.reason, error
    assert not list(regions.iterdir())
    assert KeyedLimiter(case["quota"]).peek("k").limit >= 1


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_limiter(case: dict, regions: Path) -> None:
    """A Limiter's one bucket in a region (a region of one key), made with the region, as a
    memory Limiter makes it at construction."""
    clock = ManualClock(case["start_ns"])
    limiter = on_region(lambda s: Limiter(case["quota"], clock=clock, store=s), regions)
    if isinstance(limiter, StoreError):
        return refused(case, limiter, regions)
    assert isinstance(limiter, Limiter)
    test_algorithms.play(case, clock, limiter.try_acquire, limiter.refund)


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_keyed_limiter(case: dict, regions: Path) -> None:
    """The same bucket as one key of a keyed region, next to a noisy neighbour (its bucket
    created at the case's start by a cost-0 request, as in test_algorithms)."""
    clock = ManualClock(case["start_ns"])
    limiter = on_region(lambda s: KeyedLimiter(case["quota"], clock=clock, store=s, max_keys=8), regions)
    if isinstance(limiter, StoreError):
        return refused(case, limiter, regions)
    assert isinstance(limiter, KeyedLimiter)
    limiter.try_acquire("neighbour")
    assert limiter.try_acquire("key", 0)

    def acquire(cost: int) -> Decision:
        return limiter.try_acquire(b"key", cost)

    test_algorithms.play(case, clock, acquire, lambda c: limiter.refund("key", c))


@pytest.mark.parametrize("case", KEYED, ids=[c["name"] for c in KEYED])
def test_keyed_cases(case: dict, regions: Path) -> None:
    """The keyed cases: several keys of one region, each created at its first request."""
    clock = ManualClock(case["start_ns"])
    limiter = on_region(lambda s: KeyedLimiter(case["quota"], clock=clock, store=s, max_keys=64), regions)
    if isinstance(limiter, StoreError):
        return refused(case, limiter, regions)
    assert isinstance(limiter, KeyedLimiter)
    test_conformance.run(case, limiter, clock, True, lambda k: k)


def test_every_case_a_region_can_keep_runs_through_one(regions: Path) -> None:
    """Every case whose quota is not a sliding log (or the one 95-bit extreme) makes a region;
    those are well over 85% of the vectors."""
    refusals: list[str] = []
    for i, case in enumerate(CASES):
        clock = ManualClock(case["start_ns"])
        made = on_region(lambda s: KeyedLimiter(case["quota"], clock=clock, store=s, max_keys=8), regions, f"c{i}")
        if isinstance(made, StoreError):
            assert refusable(case["quota"]), f"{case['name']}: a region refused {case['quota']!r}"
            refusals.append(case["name"])
    assert len(CASES) - len(refusals) > 0.85 * len(CASES), refusals
