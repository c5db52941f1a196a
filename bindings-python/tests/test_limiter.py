"""The Python API over the core: quotas, decisions, clocks, refunds, reservations, waits."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

import sluicegate
from sluicegate import Decision, Limiter, ManualClock, Quota


def manual(rate: str, start_ns: int = 0) -> tuple[Limiter, ManualClock]:
    clock = ManualClock(start_ns)
    return Limiter(rate, clock=clock), clock


def test_package_shape() -> None:
    assert sluicegate.Limiter is sluicegate._native.Limiter
    assert set(sluicegate.__all__) <= set(dir(sluicegate))
    assert sluicegate.SluicegateError is sluicegate.Error
    assert isinstance(sluicegate.__version__, str)


def test_quota_from_string_and_keywords() -> None:
    q = Quota("10/s; burst=50")
    assert (q.count, q.period_ns, q.burst, q.initial, q.refill) == (10, 10**9, 50, 50, "continuous")
    assert str(q) == "10/s; burst=50"
    assert repr(q) == 'Quota("10/s; burst=50")'
    assert q == Quota(count=10, period=1, burst=50)
    assert q == Quota(count=10, period=timedelta(seconds=1), burst=50)
    assert q == Quota(count=10, period_ns=10**9, burst=50)
    assert q == Quota("10 per second; burst=50")
    assert hash(q) == hash(Quota("10 per second; burst=50"))
    assert q != Quota("10/s")
    assert Quota(count=5, period=2.0) == Quota("5/2s")
    assert Quota("100/minute").period == 60.0
    assert Quota(count=1, period=1, burst=4, initial=1, refill="interval") == Quota(
        "1/s; burst=4; initial=1; refill=interval"
    )
    assert Quota("10/s; burst=50").window_secs == 5


def test_decision_fields_and_headers() -> None:
    limiter, clock = manual("10/s; burst=2")
    first = limiter.try_acquire()
    assert first and first.allowed
    assert (first.limit, first.remaining, first.retry_after, first.retry_after_ns) == (2, 1, 0.0, 0)
    assert first.reset_after_ns == 100_000_000 and first.reset_after == pytest.approx(0.1)
    assert first.retry_after_header is None
    assert limiter.try_acquire()
    denied = limiter.try_acquire()
    assert not denied and not denied.allowed
    assert denied.retry_after_ns == 100_000_000
    assert denied.retry_after == pytest.approx(0.1)
    assert denied.retry_after_header == 1
    assert denied.headers() == {
        "RateLimit-Policy": '"default";q=2;w=1',
        "RateLimit": '"default";r=0;t=1',
        "Retry-After": "1",
    }
    assert denied.headers("draft6")["RateLimit-Limit"] == "2"
    assert denied.headers("draft7", policy="x")["RateLimit"] == "limit=2, remaining=0, reset=1"
    assert denied.headers(style="legacy")["X-RateLimit-Remaining"] == "0"
    assert denied.headers("none") == {"Retry-After": "1"}
    assert first.headers("ietf", 'a"b')["RateLimit"] == '"a\\"b";r=1;t=1'
    # The same fields as raw header lines (what an ASGI server takes), in every style.
    for style in ("ietf", "draft6", "draft7", "legacy", "none"):
        assert denied.header_lines(style, 'a"b') == [
            (name.lower().encode(), value.encode()) for name, value in denied.headers(style, 'a"b').items()
        ]
    assert denied.header_lines()[2] == (b"retry-after", b"1")
    assert repr(denied).startswith("Decision(allowed=False, limit=2, remaining=0")
    assert denied == limiter.try_acquire()
    assert denied != first and denied != "x"
    clock.advance(0.1)
    assert limiter.try_acquire()


def test_peek_refund_is_full_and_explicit_readings() -> None:
    limiter, clock = manual("1/s; burst=3")
    assert limiter.is_full()
    assert limiter.try_acquire(3).remaining == 0
    assert not limiter.is_full()
    assert limiter.peek().remaining == 0
    limiter.refund(2)
    assert limiter.peek().remaining == 2
    limiter.refund(10)  # capped at the burst
    assert limiter.peek().remaining == 3 and limiter.is_full()
    assert limiter.try_acquire(0).remaining == 3  # cost 0 is a peek
    assert limiter.try_acquire_at(5 * 10**9, 3)
    assert not limiter.try_acquire_at(5 * 10**9, 1)
    limiter.refund_at(5 * 10**9, 1)
    assert limiter.try_acquire_at(5 * 10**9, 1)
    assert limiter.now_ns() == clock.now_ns() == 0
    assert limiter.clock is clock
    assert Limiter("1/s").clock is None
    assert limiter.quota == Quota("1/s; burst=3")
    assert repr(limiter) == 'Limiter("1/s; burst=3")'


def test_manual_clock() -> None:
    clock = ManualClock()
    assert clock.now_ns() == 0
    clock.advance(1.5)
    clock.advance(timedelta(milliseconds=250))
    clock.advance_ns(5)
    assert clock.now_ns() == 1_750_000_005
    clock.set_ns(10)
    assert clock.now_ns() == 10
    assert repr(clock) == "ManualClock(start_ns=10)"
    assert ManualClock(start_ns=7).now_ns() == 7


def test_clock_going_backwards_never_admits_more() -> None:
    limiter, clock = manual("1/s; burst=1", start_ns=10 * 10**9)
    assert limiter.try_acquire()
    clock.set_ns(0)
    assert not limiter.try_acquire()


def test_system_clock_moves() -> None:
    limiter = Limiter(Quota("1000/s; burst=1"))
    a = limiter.now_ns()
    time.sleep(0.002)
    assert limiter.now_ns() > a
    assert limiter.try_acquire()


def test_reserve_and_cancel() -> None:
    limiter, _ = manual("1/s; burst=2")
    r = limiter.reserve(2)
    assert r and r.decision.allowed and r.cost == 2
    assert not limiter.try_acquire()
    assert r.cancel() is True
    assert r.cancel() is False  # only once
    assert limiter.peek().remaining == 2
    limiter.try_acquire(2)
    denied = limiter.reserve()
    assert not denied and denied.cancel() is False


def test_acquire_waits_with_the_gil_released() -> None:
    # A 1 s wait: a stall of a loaded machine cannot use it all up, and the ticker, if the GIL
    # is free meanwhile, ticks far more often than the few times it could around a wait that
    # kept the GIL.
    limiter = Limiter("1/s; burst=1")
    start = time.monotonic()  # before the first acquire: the second is 1 s after it
    assert limiter.acquire()
    ticks = []
    stop = threading.Event()

    def ticker() -> None:  # runs only if acquire releases the GIL while it sleeps
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    d = limiter.acquire(timeout=5.0)
    stop.set()
    t.join()
    assert d
    elapsed = time.monotonic() - start
    assert 0.95 <= elapsed < 4, elapsed
    assert len(ticks) >= 10, len(ticks)


def test_acquire_async() -> None:
    limiter = Limiter("50/s; burst=1")

    async def main() -> list[Decision]:
        return [await limiter.acquire_async() for _ in range(3)]

    start = time.monotonic()
    assert all(asyncio.run(main()))
    assert time.monotonic() - start >= 0.03
    slow, _ = manual("1/h; burst=1")
    slow.try_acquire()
    assert not asyncio.run(slow.acquire_async(timeout=0.01))
