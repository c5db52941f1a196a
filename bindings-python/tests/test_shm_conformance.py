"""The shared conformance vectors (conformance/vectors.json and algorithms.json) through the
shared-memory store: every case on a fresh region, read through a manual clock, must decide
exactly as the memory store does (the vectors' expectations).

A region refuses what it cannot keep exactly in one 64-bit word per key (StoreError kind
"unsupported"): such a case checks that refusal instead, and the cases that run whole must be
more than 80% of them all. A region's readings count from its creation and reach about 83
years: a case that steps past that is played up to it, and its next step must be a
ClockOutOfRange.

When this was written, 148 of the 176 cases ran whole. Refused (26 cases):
* every sliding log (15 cases: "10/s", "2/s", "3/s", "4/s", "5/s", "5/2s", "7/ms", "20/m",
  "2/h", "1000/7s"; algorithm=sliding_log): its log holds up to `count` timestamps;
* rates whose exact state outgrows 64 bits within ten years (11 cases): "999/s; burst=3",
  "1000003/hour" (and burst=3, burst=5 gcra, burst=7, the leaky queue), "1000000007/s" (and
  its gcra), "281474976710655/s; algorithm=sliding_window",
  "4611686018427387903/h; algorithm=fixed_window".
Cut at the horizon (2 cases): cont_backwards_near_century, keyed_walk_large_leaky_queue.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import test_algorithms
import test_conformance

from sluicegate import ClockOutOfRange, Decision, KeyedLimiter, Limiter, ManualClock, StoreError

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


def refused(case: dict, error: StoreError, regions: Path) -> None:
    """A refused case: the region said why, made nothing, and the memory store takes it."""
    assert error.code == "store_unsupported" and error.reason, error
    assert not list(regions.iterdir())
    assert KeyedLimiter(case["quota"]).peek("k").limit >= 1


def region_horizon(case: dict, regions: Path) -> int:
    """The last reading a region made at the case's start serves: its readings count from its
    creation and its words are 64 bits, so it reaches about 83 years past its creation, where
    the memory store reaches past a century. Probed on a scratch region created at reading 0
    (removed afterwards), whose horizon is then on the clock itself."""
    scratch = regions / "horizon"
    try:
        limiter = KeyedLimiter(case["quota"], clock=ManualClock(0), store=f"shm:{scratch}", max_keys=1)
        limiter.try_acquire_at("probe", 2**64 - 1, 0)
        reach = 2**64 - 1
    except ClockOutOfRange as e:
        reach = e.horizon_ns
    finally:
        scratch.unlink()
    return min(case["start_ns"] + reach, 2**64 - 1)


def within_horizon(case: dict, regions: Path) -> tuple[dict, dict | None]:
    """The case cut before its first step past the region's horizon, and that step (None when
    every step is within it)."""
    horizon = region_horizon(case, regions)
    steps = case["steps"]
    cut = next((i for i, step in enumerate(steps) if step["t_ns"] > horizon), len(steps))
    return {**case, "steps": steps[:cut]}, (steps[cut] if cut < len(steps) else None)


def past_horizon(step: dict | None, request: Callable[[int], object]) -> None:
    """The first step past the region's horizon is a ClockOutOfRange (the memory store's
    horizon is further: the vectors expect a decision there)."""
    if step is not None:
        with pytest.raises(ClockOutOfRange):
            request(step["cost"])


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_limiter(case: dict, regions: Path) -> None:
    """A Limiter's one bucket in a region (a region of one key). A region makes its bucket at
    the first request, where a memory Limiter makes it at construction: a cost-0 request at
    the case's start makes it then (it matters when `initial` is below the burst)."""
    clock = ManualClock(case["start_ns"])
    limiter = on_region(lambda s: Limiter(case["quota"], clock=clock, store=s), regions)
    if isinstance(limiter, StoreError):
        return refused(case, limiter, regions)
    assert isinstance(limiter, Limiter)
    assert limiter.try_acquire(0)
    within, beyond = within_horizon(case, regions)
    test_algorithms.play(within, clock, limiter.try_acquire, limiter.refund)
    past_horizon(beyond, lambda c: limiter.try_acquire_at(beyond["t_ns"], c))


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

    within, beyond = within_horizon(case, regions)
    test_algorithms.play(within, clock, acquire, lambda c: limiter.refund("key", c))
    past_horizon(beyond, lambda c: limiter.try_acquire_at("key", beyond["t_ns"], c))


@pytest.mark.parametrize("case", KEYED, ids=[c["name"] for c in KEYED])
def test_keyed_cases(case: dict, regions: Path) -> None:
    """The keyed cases: several keys of one region, each created at its first request."""
    clock = ManualClock(case["start_ns"])
    limiter = on_region(lambda s: KeyedLimiter(case["quota"], clock=clock, store=s, max_keys=64), regions)
    if isinstance(limiter, StoreError):
        return refused(case, limiter, regions)
    assert isinstance(limiter, KeyedLimiter)
    within, beyond = within_horizon(case, regions)
    test_conformance.run(within, limiter, clock, True, lambda k: k)
    past_horizon(beyond, lambda c: limiter.try_acquire_at(beyond["key"], beyond["t_ns"], c))


def test_most_cases_run_through_a_region(regions: Path) -> None:
    """More than 80% of the cases run whole through a region; the message lists the quotas
    the core's regions refuse, and the cases cut at a region's horizon."""
    refusals: dict[str, list[str]] = {}
    cut: list[str] = []
    for i, case in enumerate(CASES):
        clock = ManualClock(case["start_ns"])
        made = on_region(lambda s: KeyedLimiter(case["quota"], clock=clock, store=s, max_keys=8), regions, f"c{i}")
        if isinstance(made, StoreError):
            refusals.setdefault(case["quota"], []).append(case["name"])
        elif within_horizon(case, regions)[1] is not None:
            cut.append(case["name"])
    ran = len(CASES) - sum(len(names) for names in refusals.values()) - len(cut)
    listing = "; ".join(f"{q!r}: {', '.join(names)}" for q, names in sorted(refusals.items()))
    assert ran > 0.8 * len(CASES), (
        f"{ran} of {len(CASES)} cases run whole through a region; refused: {listing}; cut at the horizon: {cut}"
    )
