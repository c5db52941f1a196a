"""acquire / acquire_async of Limiter, KeyedLimiter and Composite: the core's acquire policy
(start_acquire / poll_acquire) with Python's sleeps. Time running out is the rejection
Decision, never an exception; a leaky queue's slot is admitted with a wait; an interrupted
(Ctrl-C) or cancelled (asyncio) wait gives the slot back."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import sluicegate
from sluicegate import Composite, Decision, KeyedLimiter, Limiter, ManualClock, _aio

QUEUE = "2/s; algorithm=leaky_queue; max_delay=10s"


class Target:
    """One kind of limiter behind one calling convention: `acquire(cost, timeout)`,
    `acquire_async(cost, timeout)`, `try_acquire(cost)` and `reserve_delay()` (the delay a
    new 1-cost reservation of a queue would get, taken back at once)."""

    def __init__(self, kind: str, rate: str, clock: ManualClock | None = None) -> None:
        self.kind = kind
        if kind == "limiter":
            self.limiter: Any = Limiter(rate, clock=clock)
            self.args: tuple = ()
        elif kind == "keyed":
            self.limiter = KeyedLimiter(rate, clock=clock)
            self.args = ("k",)
        else:
            # A composite whose first part is the limit under test; the second never binds.
            self.part = Limiter(rate, clock=clock)
            self.limiter = Composite([self.part, Limiter("1000000/s", clock=clock)])
            self.args = ()

    def acquire(self, cost: int = 1, timeout: Any = None) -> Decision:
        return self.limiter.acquire(*self.args, cost, timeout)

    def acquire_async(self, cost: int = 1, timeout: Any = None) -> Any:
        return self.limiter.acquire_async(*self.args, cost, timeout)

    def try_acquire(self, cost: int = 1) -> Decision:
        return self.limiter.try_acquire(*self.args, cost)

    def reserve_delay(self) -> float:
        one = self.part if self.kind == "composite" else self.limiter
        r = one.reserve(*self.args)
        assert r.cancel()
        return r.delay


KINDS = ["limiter", "keyed", "composite"]


@pytest.mark.parametrize("kind", KINDS)
def test_time_running_out_is_the_rejection_decision(kind: str) -> None:
    clock = ManualClock(0)
    t = Target(kind, "1/h; burst=1", clock)
    assert t.acquire(timeout=0)
    start = time.monotonic()
    d = t.acquire(timeout=0.05)
    assert isinstance(d, Decision) and not d and d.retry_after > 3000
    assert time.monotonic() - start < 1  # the wait could never fit: no sleeping
    d = asyncio.run(t.acquire_async(timeout=0.05))
    assert isinstance(d, Decision) and not d and d.retry_after > 3000


@pytest.mark.parametrize("kind", KINDS)
def test_a_manual_clock_nobody_moves_ends_in_the_rejection(kind: str) -> None:
    # No deadline, and a clock that does not follow real time: the core gives the rejection
    # after one wait instead of sleeping forever.
    clock = ManualClock(0)
    t = Target(kind, "10/s; burst=1", clock)
    assert t.try_acquire()
    start = time.monotonic()
    d = t.acquire()
    assert not d and d.retry_after_ns == 100_000_000
    assert 0.09 <= time.monotonic() - start < 2
    assert not asyncio.run(t.acquire_async())


@pytest.mark.parametrize("kind", KINDS)
def test_acquire_retries_until_the_clock_admits(kind: str) -> None:
    clock = ManualClock(0)
    t = Target(kind, "1/s; burst=1", clock)
    assert t.try_acquire()
    threading.Timer(0.05, lambda: clock.advance(1)).start()
    assert t.acquire(timeout=5)
    threading.Timer(0.05, lambda: clock.advance(1)).start()
    assert asyncio.run(t.acquire_async(timeout=5))


@pytest.mark.parametrize("kind", KINDS)
def test_a_queue_slot_is_admitted_with_its_wait(kind: str) -> None:
    # Slots 1 s apart: each acquire below waits (up to 1 s) unless this thread stalls a whole
    # second between two of them, which would let the queue drain.
    t = Target(kind, "1/s; algorithm=leaky_queue; max_delay=10s")
    assert t.acquire()
    start = time.monotonic()
    d = t.acquire()
    elapsed = time.monotonic() - start
    assert d and 0 < d.retry_after <= 1  # admitted, with the slot's wait ...
    assert elapsed >= d.retry_after - 0.001  # ... which acquire slept
    d = asyncio.run(t.acquire_async())
    assert d and 0 < d.retry_after <= 1


@contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """Raises KeyboardInterrupt in the main thread after `seconds` (a Ctrl-C)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_wait_gives_the_slot_back(kind: str) -> None:
    t = Target(kind, QUEUE)
    assert t.acquire()
    start = time.monotonic()
    with interrupted_after(0.05), pytest.raises(KeyboardInterrupt):
        t.acquire(3)  # admitted: slots 0.5, 1.0, 1.5 s away
    assert time.monotonic() - start < 0.5  # seen within a sleep slice
    assert t.reserve_delay() <= 0.5  # the 3 slots were given back


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupt_whose_give_back_fails_is_still_the_interrupt(kind: str) -> None:
    """A give-back that fails (here a clock read past the horizon, as a StoreError on Redis
    under on_error=error) is a RuntimeWarning: Ctrl-C is what propagates, as a cancelled
    task's cancellation does (test_a_give_back_that_fails_keeps_the_cancellation)."""
    clock = ManualClock(0)
    t = Target(kind, QUEUE, clock)
    assert t.try_acquire()

    def interrupt(signum: int, frame: object) -> None:
        clock.set_ns(2**64 - 1)  # the give-back at this reading fails: ClockOutOfRange
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.warns(RuntimeWarning, match="could not give back.*ClockOutOfRange"):
            with pytest.raises(KeyboardInterrupt):
                t.acquire(3)  # admitted: slots 0.5, 1.0, 1.5 s away
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancelled_task_gives_the_slot_back(kind: str) -> None:
    t = Target(kind, QUEUE)
    assert t.try_acquire()

    async def cancelled() -> None:
        task = asyncio.ensure_future(t.acquire_async(4))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert t.reserve_delay() <= 0.5  # the task's slots were given back


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_retry_takes_nothing(kind: str) -> None:
    clock = ManualClock(0)
    t = Target(kind, "1/s; burst=2", clock)
    assert t.try_acquire(2)
    with interrupted_after(0.05), pytest.raises(KeyboardInterrupt):
        t.acquire(timeout=5)  # rejected: sleeping toward the retry
    clock.advance(1)
    assert t.try_acquire().remaining == 0  # one token back, none of it taken by the acquire


@pytest.mark.parametrize("kind", KINDS)
def test_errors_are_raised_not_returned(kind: str) -> None:
    t = Target(kind, "1/s; burst=2", ManualClock(0))
    for call in (lambda: t.acquire(3), lambda: asyncio.run(t.acquire_async(3))):
        with pytest.raises(sluicegate.InsufficientCapacity):
            call()
    for bad, exc in ((-1, ValueError), ("soon", TypeError), (float("nan"), ValueError)):
        with pytest.raises(exc, match="timeout"):
            t.acquire(1, bad)
        with pytest.raises(exc, match="timeout"):
            t.acquire_async(1, bad)  # refused when called, before any await
    assert t.try_acquire(2)


@pytest.mark.parametrize("kind", KINDS)
def test_no_timeout_and_huge_timeouts_mean_no_deadline(kind: str) -> None:
    t = Target(kind, "1000/s; burst=1")
    for timeout in (None, 2**64 - 1, 1e18):
        assert t.acquire(timeout=timeout) and t.acquire(timeout=timeout)


class FakePlan:
    """An `_Acquire` stand-in for `sluicegate._aio.acquire`: each poll answers the next of
    `steps` (after `gate` opens, when given, on the executor thread of a `remote` plan);
    `cancel` records its calls, and raises `cancel_error` when given."""

    def __init__(
        self,
        steps: list[tuple[str, Decision]],
        *,
        remote: bool,
        gate: threading.Event | None = None,
        cancel_error: Exception | None = None,
    ) -> None:
        self.steps = steps
        self.remote = remote
        self.gate = gate
        self.cancel_error = cancel_error
        self.polling = threading.Event()  # a poll began
        self.polled: list[float] = []  # when each poll ended (time.monotonic)
        self.admitted = False
        self.cancels = 0

    def poll(self) -> tuple[str, Decision]:
        self.polling.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        step = self.steps.pop(0)
        self.admitted = step[0] == "admit"
        self.polled.append(time.monotonic())
        return step

    def cancel(self) -> bool:
        self.cancels += 1
        if self.cancel_error is not None:
            raise self.cancel_error
        admitted, self.admitted = self.admitted, False
        return admitted


def admitted_now() -> Decision:
    d = Limiter("1/s").try_acquire()
    assert d and d.retry_after_ns == 0
    return d


def admitted_with_a_wait() -> Decision:
    queue = Limiter(QUEUE)
    assert queue.try_acquire()
    d = queue.reserve().decision
    assert d and d.retry_after_ns > 0
    return d


def test_a_task_cancelled_while_its_poll_runs_on_a_thread_gives_the_admission_back() -> None:
    """On Redis a poll runs on an executor thread, which a cancellation cannot stop: the
    cancelled task waits for it, and gives back what it admitted (nobody receives it) before
    the cancellation propagates."""
    for decision in (admitted_now(), admitted_with_a_wait()):
        gate = threading.Event()
        plan = FakePlan([("admit", decision)], remote=True, gate=gate)

        async def cancelled() -> float:
            task = asyncio.ensure_future(_aio.acquire(plan))  # type: ignore[arg-type]
            assert await asyncio.get_running_loop().run_in_executor(None, plan.polling.wait, 10)
            task.cancel()
            threading.Timer(0.1, gate.set).start()  # the poll admits after the cancellation
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic()

        raised = asyncio.run(cancelled())
        assert plan.polled and plan.polled[0] <= raised  # the poll was waited for ...
        assert plan.cancels == 1 and not plan.admitted  # ... and its admission given back


def test_a_task_cancelled_while_its_poll_runs_keeps_a_rejection_or_retry_untouched() -> None:
    rejected = Limiter("1/h; burst=1", clock=ManualClock(0))
    assert rejected.try_acquire()
    d = rejected.try_acquire()
    for step in ("reject", "retry"):
        gate = threading.Event()
        plan = FakePlan([(step, d)], remote=True, gate=gate)

        async def cancelled() -> None:
            task = asyncio.ensure_future(_aio.acquire(plan))  # type: ignore[arg-type]
            assert await asyncio.get_running_loop().run_in_executor(None, plan.polling.wait, 10)
            task.cancel()
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancelled())
        assert len(plan.polled) == 1 and not plan.admitted  # polled once, admitted nothing


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "executor"])
def test_a_give_back_that_fails_keeps_the_cancellation(remote: bool) -> None:
    """A give-back that fails (a StoreError on Redis) is a RuntimeWarning: the task's
    cancellation is what propagates, not the give-back's error."""
    plan = FakePlan(
        [("admit", admitted_with_a_wait())], remote=remote, cancel_error=ValueError("server gone")
    )

    async def cancelled() -> None:
        task = asyncio.ensure_future(_aio.acquire(plan))  # type: ignore[arg-type]
        for _ in range(200):  # until it sleeps toward its slot
            await asyncio.sleep(0.005)
            if plan.polled:
                break
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with pytest.warns(RuntimeWarning, match="could not give back.*server gone"):
        asyncio.run(cancelled())
    assert plan.cancels == 1
