"""reserve / cancel / acquire over the core's reservation API (the leaky queue admits with a
delay), Decision as timedelta and from figures, and Composite's own surface (the acquire outcomes of
every kind: test_acquire.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

import sluicegate
from sluicegate import Composite, Decision, KeyedLimiter, Limiter, ManualClock, Quota

QUEUE = "10/s; algorithm=leaky_queue; max_delay=250ms"


def test_reserve_on_a_leaky_queue_gives_delays_and_cancel_gives_the_slot_back() -> None:
    # The core's own doc example, through Python.
    limiter = Limiter(QUEUE, clock=ManualClock(0))
    delays = [limiter.reserve().delay for _ in range(3)]
    assert delays == [0.0, 0.1, 0.2]
    full = limiter.reserve()
    assert not full and full.delay == 0.0 and full.cancel() is False
    assert not limiter.reserve(max_wait=0.5)  # still full: max_wait never raises the queue bound
    r = limiter.reserve(max_wait=timedelta(milliseconds=100))
    assert not r and r.decision.retry_after_ns == 200_000_000  # its slot is 300 ms away


def test_cancel_is_the_cores_cancel() -> None:
    limiter = Limiter(QUEUE, clock=ManualClock(0))
    rs = [limiter.reserve() for _ in range(3)]
    assert rs[2].cancel() is True and rs[2].cancel() is False
    assert limiter.reserve().delay == 0.2  # the slot given back is taken again


def test_reserve_within_rejects_a_longer_delay_and_reserves_nothing() -> None:
    limiter = Limiter(QUEUE, clock=ManualClock(0))
    assert limiter.reserve().delay == 0.0
    r = limiter.reserve(max_wait=0.05)  # its slot is 100 ms away
    assert not r and r.decision.retry_after_ns == 50_000_000
    assert limiter.reserve(max_wait=0.1).delay == 0.1  # nothing was left behind


def test_keyed_reserve_within_matches_the_limiter() -> None:
    clock = ManualClock(0)
    one = Limiter(QUEUE, clock=clock)
    keyed = KeyedLimiter(QUEUE, clock=clock)
    for max_wait in (None, 0.05, 0.1, 0.0, 0.3, 0.15, None, 0.2, 1.0, 0.0):
        a = one.reserve(max_wait=max_wait)
        b = keyed.reserve("k", max_wait=max_wait)
        assert a.decision == b.decision, max_wait
        assert a.delay == b.delay
    clock.advance(0.07)
    assert one.reserve(max_wait=0.01).decision == keyed.reserve("k", max_wait=0.01).decision


def test_other_algorithms_reserve_is_try_acquire() -> None:
    for rate in ("2/s", "2/s; algorithm=gcra", "2/s; algorithm=fixed_window",
                 "2/s; algorithm=sliding_window", "2/s; algorithm=sliding_log"):
        clock = ManualClock(0)
        a, b = Limiter(rate, clock=clock), Limiter(rate, clock=clock)
        for max_wait in (None, 10.0, None):
            r = a.reserve(max_wait=max_wait)
            assert r.decision == b.try_acquire() and r.delay == 0.0, rate


def test_acquire_on_a_queue_sleeps_until_its_slot() -> None:
    limiter = Limiter("20/s; algorithm=leaky_queue; max_delay=1s")
    start = time.monotonic()
    decisions = [limiter.acquire() for _ in range(4)]
    elapsed = time.monotonic() - start
    assert all(decisions)
    assert 0.14 <= elapsed < 2, elapsed  # slots at 0, 50, 100, 150 ms


def test_acquire_on_a_queue_with_a_short_timeout_returns_at_once() -> None:
    # Slots 5 s apart: the checks below hold unless this thread stalls for seconds.
    limiter = Limiter("1/5s; algorithm=leaky_queue; max_delay=20s")
    assert limiter.acquire()
    start = time.monotonic()
    d = limiter.acquire(timeout=0.05)  # its slot is ~5 s away
    assert not d and time.monotonic() - start < 2.5
    # Nothing was left behind (a slot kept by the rejected acquire would put the next one
    # ~10 s away) and nothing more given back: the next slot is still ~5 s away.
    assert 2.5 < limiter.reserve().delay <= 5


def test_acquire_async_on_a_queue() -> None:
    limiter = Limiter("20/s; algorithm=leaky_queue; max_delay=1s")

    async def main() -> list[Decision]:
        return [await limiter.acquire_async() for _ in range(3)]

    start = time.monotonic()
    assert all(asyncio.run(main()))
    assert time.monotonic() - start >= 0.09


def test_keyed_acquire_on_a_queue() -> None:
    limiter = KeyedLimiter("20/s; algorithm=leaky_queue; max_delay=1s")
    start = time.monotonic()
    assert all(limiter.acquire("k") for _ in range(3))
    assert time.monotonic() - start >= 0.09
    assert not limiter.acquire("k", cost=10, timeout=0.01)


def test_decision_timedeltas_round_up_to_microseconds() -> None:
    limiter = Limiter("3/s; burst=1", clock=ManualClock(0))
    limiter.try_acquire()
    d = limiter.try_acquire()
    assert d.retry_after_ns == 333_333_334
    assert d.retry_after_td == timedelta(microseconds=333_334)
    assert d.reset_after_td == timedelta(microseconds=333_334)
    ok = limiter.peek()
    assert ok.retry_after_td == timedelta(0)
    assert isinstance(ok.reset_after_td, timedelta)


def test_decision_from_figures_renders_headers_in_the_core() -> None:
    limiter = Limiter("5/minute", clock=ManualClock(0))
    for _ in range(5):
        limiter.try_acquire()
    real = limiter.try_acquire()
    again = Decision.from_figures(
        allowed=real.allowed, limit=real.limit, remaining=real.remaining,
        retry_after_ns=real.retry_after_ns, reset_after_ns=real.reset_after_ns,
        window_secs=real.window_secs,
    )
    assert again == real
    for style in ("ietf", "draft6", "draft7", "legacy", "none"):
        assert again.headers(style, "api") == real.headers(style, "api")
    assert Decision.from_figures(allowed=True, limit=1, remaining=1).headers() == {
        "RateLimit-Policy": '"default";q=1;w=1',
        "RateLimit": '"default";r=1;t=0',
    }
    with pytest.raises(TypeError, match="allowed"):
        Decision.from_figures(allowed=1, limit=1, remaining=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="remaining"):
        Decision.from_figures(allowed=True, limit=1, remaining=-1)
    with pytest.raises(OverflowError, match="limit"):
        Decision.from_figures(allowed=True, limit=2**64, remaining=0)


def test_decisions_pickle_and_copy_with_every_figure() -> None:
    import copy
    import pickle

    clock = ManualClock(0)
    limiter = Limiter("3/minute", clock=clock)
    shadow = Limiter("1/minute", clock=clock, shadow=True)
    shadow.try_acquire()
    decisions = [limiter.try_acquire(2), limiter.try_acquire(2), shadow.try_acquire()]
    assert [d.allowed for d in decisions] == [True, False, True]
    assert decisions[2].shadow_rejected
    for d in decisions:
        for back in (pickle.loads(pickle.dumps(d)), copy.copy(d), copy.deepcopy(d)):
            assert type(back) is Decision and back == d and repr(back) == repr(d)
            assert back.window_secs == d.window_secs == 60
            assert back.shadow_rejected == d.shadow_rejected
            for style in ("ietf", "draft6", "legacy", "none"):
                assert back.headers(style) == d.headers(style)
    # The figures a shadow rejection crossed a boundary with make it again.
    d = decisions[2]
    again = Decision.from_figures(
        allowed=True, limit=d.limit, remaining=d.remaining, retry_after_ns=d.retry_after_ns,
        reset_after_ns=d.reset_after_ns, window_secs=60, shadow_rejected=True,
    )
    assert again == d and again.allowed and again.shadow_rejected
    with pytest.raises(ValueError, match="allowed must be True"):
        Decision.from_figures(allowed=False, limit=1, remaining=0, shadow_rejected=True)
    with pytest.raises(TypeError, match="shadow_rejected must be a bool"):
        Decision.from_figures(allowed=True, limit=1, remaining=0, shadow_rejected=1)  # type: ignore[arg-type]
    # A hostile pickle stream gets the same checks.
    with pytest.raises(ValueError, match="allowed must be True"):
        Decision._from_pickle(False, 1, 0, 0, 0, 1, True)  # type: ignore[attr-defined]


def test_quota_algorithm_keywords() -> None:
    q = Quota(count=10, period=1, algorithm="shaper", max_delay=timedelta(milliseconds=250))
    assert q == Quota(QUEUE) and q.algorithm == "leaky_queue" and q.max_delay_ns == 250_000_000
    assert Quota("10/s").algorithm == "token_bucket" and Quota("10/s").max_delay_ns is None
    assert Quota(count=5, period=60, algorithm="SLIDING_WINDOW_COUNTER") == Quota("5/m; algorithm=sliding_window")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        Quota(count=1, period=1, algorithm="magic")
    with pytest.raises(sluicegate.InvalidQuotaError, match="max_delay"):
        Quota(count=1, period=1, max_delay=1)  # only for the leaky queue
    with pytest.raises(sluicegate.InvalidQuotaError):
        Quota(count=1, period=1, burst=5, algorithm="fixed_window")
    with pytest.raises(TypeError):
        Quota("10/s", algorithm="gcra")


def test_composite_errors_and_surface() -> None:
    clock = ManualClock(0)
    user = Limiter("2/s", clock=clock)
    tenant = Limiter("3/s; algorithm=fixed_window", clock=clock)
    both = Composite([user, tenant])
    assert repr(both) == 'Composite(["2/s", "3/s; algorithm=fixed_window"])'
    with pytest.raises(sluicegate.InsufficientCapacity):
        both.try_acquire(3)  # above the user's capacity: nothing consumed anywhere
    assert tenant.peek().remaining == 3 and user.peek().remaining == 2
    assert both.peek().remaining == 2
    assert both.try_acquire(2) and not both.try_acquire(1)
    assert tenant.peek().remaining == 1  # refunded
    both.refund(2)
    assert user.peek().remaining == 2 and tenant.peek().remaining == 3
    with pytest.raises(ValueError, match="at least one"):
        Composite([])
    with pytest.raises(TypeError, match="Limiter"):
        Composite([user, KeyedLimiter("1/s")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        Composite(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one clock"):
        Composite([user, Limiter("1/s")])
    with pytest.raises(ValueError, match="one clock"):
        Composite([user, Limiter("1/s", clock=ManualClock(0))])
    assert Composite(iter([Limiter("1/s"), Limiter("2/s")])).try_acquire()
    with pytest.raises(sluicegate.ClockOutOfRange):
        both.try_acquire_at(2**64 - 1)
    with pytest.raises(sluicegate.ClockOutOfRange):
        both.refund_at(2**64 - 1)


def test_composite_is_thread_safe() -> None:
    clock = ManualClock(0)
    both = Composite([Limiter("1000/h", clock=clock), Limiter("300/h; algorithm=sliding_window", clock=clock)])
    admitted = []

    def worker() -> None:
        admitted.append(sum(bool(both.try_acquire()) for _ in range(500)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 300


def test_allow_is_try_acquire_as_a_bool() -> None:
    clock = ManualClock(0)
    for rate in ("2/s", "2/s; algorithm=sliding_log", "2/s; algorithm=leaky_queue"):
        a, b = Limiter(rate, clock=clock), Limiter(rate, clock=clock)
        for cost in (1, 0, 1, 1, 2):
            assert a.allow(cost) is bool(b.try_acquire(cost)), rate
        with pytest.raises(sluicegate.InsufficientCapacity):
            a.allow(100)
    keyed, other = KeyedLimiter("2/s", clock=clock), KeyedLimiter("2/s", clock=clock)
    for key in ("a", b"a", 7, "a", 7, 7):
        assert keyed.allow(key) is bool(other.try_acquire(key))
    with pytest.raises(TypeError, match="key"):
        keyed.allow(None)  # type: ignore[arg-type]
    both = Composite([Limiter("2/s", clock=clock), Limiter("1/s", clock=clock)])
    assert both.allow() is True and both.allow() is False
    assert both.parts[0].peek().remaining == 1  # the rejection was refunded
    with pytest.raises(ValueError, match="cost"):
        both.allow(-1)


def test_shadow_mode_never_waits_and_gives_back_nothing_it_did_not_take() -> None:
    """A request shadow mode lets through took nothing and goes ahead at once: `acquire` (and
    `acquire_async`) slept the rejection's wait, a cancel during it, or of a reservation,
    gave back tokens never taken, and a reservation's `delay` was the rejection's wait."""
    clock = ManualClock(0)
    res = Limiter("2/s", clock=clock, shadow=True)
    assert res.try_acquire() and res.try_acquire()
    r = res.reserve(1)
    assert r and r.decision.shadow_rejected and r.delay == 0.0
    assert not r.cancel()
    res.shadow = False
    assert not res.try_acquire(), "the shadow reservation's cancel gave back a token"

    slow = Limiter("1/10s", shadow=True)
    assert slow.try_acquire()
    t0 = time.monotonic()
    d = slow.acquire(timeout=20)
    assert d.allowed and d.shadow_rejected and time.monotonic() - t0 < 2

    async def cancelled() -> None:
        two = Limiter("2/10s", shadow=True)
        assert two.try_acquire(2)
        t0 = time.monotonic()
        d = await two.acquire_async(2)
        assert d.shadow_rejected and time.monotonic() - t0 < 2
        task = asyncio.ensure_future(two.acquire_async(2))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        two.shadow = False
        assert not two.try_acquire(2), "the cancelled shadow acquire gave back tokens"

    asyncio.run(cancelled())
