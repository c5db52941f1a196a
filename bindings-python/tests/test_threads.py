"""Real threads on one bucket, on the real (TSC) clock: admitted <= initial + k*d/P over the run.

The module declares ``gil_used = false``: the core's atomics, not the GIL, keep the count
exact (on a free-threaded interpreter these threads run in parallel). As in
core/tests/stress.rs, the bound comes from clock readings the threads passed to the limiter,
never from wall-clock assumptions.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

import sluicegate
from sluicegate import Limiter, Quota

RUN_S = 0.3


def hammer(rate: str, threads: int, cost: int, explicit: bool) -> tuple[int, int, int, int, Limiter]:
    quota = Quota(rate)
    probe = Limiter("1/s")  # every system-clock limiter reads the same process-wide timeline
    t0 = probe.now_ns()
    limiter = Limiter(quota)
    t0_after = probe.now_ns()
    stop = threading.Event()
    admitted = [0] * threads
    last = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        mine = latest = 0
        barrier.wait()
        while not stop.is_set():
            for _ in range(64):
                if explicit:
                    now = limiter.now_ns()
                    if limiter.try_acquire_at(now, cost):
                        mine += cost
                    latest = max(latest, now)
                else:
                    if limiter.try_acquire(cost):
                        mine += cost
            if not explicit:
                latest = limiter.now_ns()  # read after every try of this batch
        admitted[i] = mine
        last[i] = latest

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    time.sleep(RUN_S)
    stop.set()
    for w in workers:
        w.join()
    t_last = max(last)
    total = sum(admitted)
    bound = quota.initial + quota.count * (t_last - t0) // quota.period_ns
    assert total <= bound, f"{rate}: admitted {total} > bound {bound}"
    return total, bound, t_last, t0_after, limiter


@pytest.mark.parametrize("explicit", [False, True], ids=["own_clock", "explicit_readings"])
@pytest.mark.parametrize(
    ("rate", "cost"),
    [
        ("100000/s; burst=100", 1),
        ("50000/s; burst=1000; initial=0", 1),
        ("3/ms; burst=7", 2),
        ("1000/ms; burst=10; refill=interval", 1),
        ("20000/s; burst=100000; initial=0", 1),
    ],
)
def test_threads_never_over_admit(rate: str, cost: int, explicit: bool) -> None:
    quota = Quota(rate)
    total, bound, t_last, t0_after, limiter = hammer(rate, threads=4, cost=cost, explicit=explicit)
    assert total > 0
    if quota.initial + bound < quota.burst:
        # The bucket never filled, so no token overflowed: every token that accrued by the
        # last reading was admitted or is still in the bucket (within one token).
        left = limiter.try_acquire_at(t_last, 0).remaining
        accrued = quota.initial + quota.count * (t_last - t0_after) // quota.period_ns
        assert total + left + 1 >= accrued, (total, left, accrued)


def test_one_token_many_threads() -> None:
    limiter = Limiter("1/h; burst=1")
    wins = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(1000):
            if limiter.try_acquire():
                wins.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_module_declares_no_gil_dependency() -> None:
    # On a free-threaded build, importing a module that needs the GIL would re-enable it.
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if is_gil_enabled is not None and "free-threading" in sys.version:
        assert not is_gil_enabled()
    assert sluicegate.Limiter("1/s").try_acquire()
