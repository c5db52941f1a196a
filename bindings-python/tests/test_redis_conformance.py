"""The shared conformance vectors (conformance/vectors.json and algorithms.json) through a real
redis-server on the test clock: every case, single limiters, keyed limiters and composites,
blocking and asyncio, must decide bit for bit as the in-process engine does (the vectors'
expectations).

``?clock=test`` makes the server's scripts read the limiter's own clock (a ManualClock here)
instead of the server's TIME. It exists only in an extension built with the cargo feature
``redis-test-clock``, which ci/check.d/20-python.sh builds for the tests and the released wheel
does not have (test_redis.py checks both). A single limiter's (or composite part's) bucket is
made at the case's start by a cost-0 request, as conformance/README.md says; a keyed bucket at
its key's first request. The negative cache is off (it answers a repeated rejection with its
own figures) and so is every fail policy (``on_error=error``: a failure is an error here).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_algorithms
import test_conformance
from redis_server import RedisServer

from sluicegate import Composite, Decision, KeyedLimiter, Limiter, ManualClock, _native

assert _native._REDIS_TEST_CLOCK, (
    "this extension was built without the cargo feature redis-test-clock: build the test "
    "extension as ci/check.d/20-python.sh does"
)

SINGLE = test_conformance.SINGLE + test_algorithms.CASES
KEYED = test_conformance.KEYED + test_algorithms.KEYED
COMPOSITE = test_algorithms.COMPOSITE
MODES = ["blocking", "asyncio"]
_NAMES = itertools.count()


def store(server: RedisServer) -> Callable[[], str]:
    """A maker of test-clock URLs on `server`, each with a key prefix of its own."""
    # A 5 s timeout: on a loaded machine the default 50 ms can pass, an error here.
    return lambda: f"{server.url}/0?clock=test&negative_cache=off&on_error=error&timeout=5s&prefix=v{next(_NAMES)}"


def sync(mode: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` as `play` calls it: the blocking method itself, or its ``_async`` twin run
    to completion on a loop of its own."""
    if mode == "blocking":
        return method
    twin = getattr(method.__self__, f"{method.__name__}_async")
    loop = asyncio.new_event_loop()
    LOOPS.append(loop)
    return lambda *args: loop.run_until_complete(twin(*args))


LOOPS: list[asyncio.AbstractEventLoop] = []


@pytest.fixture(autouse=True)
def close_loops() -> Iterator[None]:
    yield
    while LOOPS:
        LOOPS.pop().close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_limiter(case: dict, mode: str, redis_server: RedisServer) -> None:
    clock = ManualClock(case["start_ns"])
    limiter = Limiter(case["quota"], clock=clock, store=store(redis_server)())
    assert limiter.try_acquire(0)
    before = decided(limiter)
    test_algorithms.play(case, clock, sync(mode, limiter.try_acquire), sync(mode, limiter.refund))
    # The server decided them: every step, but those refused before a round trip.
    asked = [s for s in case["steps"] if s["op"] == "refund" or "error" not in s["expect"]]
    assert decided(limiter) - before >= len(asked)


def decided(limiter: Limiter) -> int:
    stats = limiter.redis_stats()
    assert stats is not None
    return stats["decided"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_keyed_limiter(case: dict, mode: str, redis_server: RedisServer) -> None:
    """The same bucket as one key of a keyed limiter on Redis, next to a noisy neighbour (its
    bucket made at the case's start by a cost-0 request, as in test_algorithms)."""
    clock = ManualClock(case["start_ns"])
    limiter = KeyedLimiter(case["quota"], clock=clock, store=store(redis_server)())
    limiter.try_acquire("neighbour")
    assert limiter.try_acquire("key", 0)
    acquire, refund = sync(mode, limiter.try_acquire), sync(mode, limiter.refund)

    def acquire_key(cost: int) -> Decision:
        return acquire(b"key", cost)  # type: ignore[no-any-return]

    test_algorithms.play(case, clock, acquire_key, lambda c: refund("key", c))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", sorted(test_conformance.KEY_FORMS))
@pytest.mark.parametrize("case", KEYED, ids=[c["name"] for c in KEYED])
def test_keyed_cases(case: dict, form: str, mode: str, redis_server: RedisServer) -> None:
    """The keyed cases: several keys of one limiter on Redis (keys as str, bytes and ints),
    each bucket made at its key's first request."""
    clock = ManualClock(case["start_ns"])
    limiter = KeyedLimiter(case["quota"], clock=clock, store=store(redis_server)())

    class Through:
        try_acquire = staticmethod(sync(mode, limiter.try_acquire))
        refund = staticmethod(sync(mode, limiter.refund))

    test_conformance.run(case, Through, clock, True, test_conformance.KEY_FORMS[form](case))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", COMPOSITE, ids=[c["name"] for c in COMPOSITE])
def test_composite(case: dict, mode: str, redis_server: RedisServer) -> None:
    """A composite of limiters on one server: one script call decides every part."""
    clock = ManualClock(case["start_ns"])
    make = store(redis_server)
    parts = [Limiter(q, clock=clock, store=make()) for q in case["quotas"]]
    for part in parts:
        assert part.try_acquire(0)
    both = Composite(parts)
    test_algorithms.play(case, clock, sync(mode, both.try_acquire), sync(mode, both.refund))


def test_every_vector_runs_through_redis() -> None:
    """Nothing is left out: every case with steps of both files is one of the above."""
    assert len(SINGLE) + len(KEYED) + len(COMPOSITE) >= 190
    assert sum(len(c["steps"]) for c in SINGLE + KEYED + COMPOSITE) >= 2600
