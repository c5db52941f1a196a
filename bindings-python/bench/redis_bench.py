"""Decisions per second and latency (p50, p99) of rate-limit decisions on one redis-server, from
Python: sluicegate's Redis store (blocking calls from threads, ``try_acquire_async`` from
asyncio tasks, and ``try_acquire_many`` batches) next to the ``limits`` library's Redis
strategies (``FixedWindowRateLimiter`` and ``MovingWindowRateLimiter``, blocking over redis-py
and their ``limits.aio`` twins over redis-py's asyncio client), at 1 and 50 concurrent callers.

Everything runs in one process against one redis-server that this script starts (on a free
loopback port, no persistence) and stops: the cases run in interleaved rounds (each round
measures every case once), and the figures are the median of the rounds (decisions/s with its
min-max; p50 and p99 of every decision's latency, in microseconds, pooled over the rounds).
Every case decides over 1000 keys round-robin under a quota that admits them all (each
decision a round trip: nothing is answered from a local cache), with a 1 s timeout
(sluicegate's `on_error=error`: a failure would stop the run). The result is written as a
Markdown fragment to bench/REDIS_RESULTS.md.

    pip install -r bindings-python/requirements-bench.txt
    python bindings-python/bench/redis_bench.py [--rounds 5] [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import sluicegate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redis_server import RedisServer  # noqa: E402

RATE = "1000000/s"  # admits every request of a run (as the Rust and Node benchmarks)
KEYS = [f"user{i}" for i in range(1000)]
BATCH = 50


def threaded(call: Callable[[str], object], callers: int, calls: int) -> tuple[float, list[int]]:
    """`calls` decisions from `callers` threads at once: (decisions/s, latencies in ns)."""
    per = calls // callers
    lat: list[list[int]] = [[] for _ in range(callers)]
    start_line = threading.Barrier(callers + 1)

    def run(i: int) -> None:
        out = lat[i]
        start_line.wait()
        for n in range(per):
            t = time.perf_counter_ns()
            call(KEYS[(i * per + n) % len(KEYS)])
            out.append(time.perf_counter_ns() - t)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    start_line.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    return per * callers / took, [x for xs in lat for x in xs]


def tasks(call: Callable[[str], Awaitable[object]], callers: int, calls: int) -> tuple[float, list[int]]:
    """`calls` decisions from `callers` asyncio tasks at once, on one loop."""
    per = calls // callers

    async def run(i: int, out: list[int]) -> None:
        for n in range(per):
            t = time.perf_counter_ns()
            await call(KEYS[(i * per + n) % len(KEYS)])
            out.append(time.perf_counter_ns() - t)

    async def main() -> tuple[float, list[int]]:
        lat: list[list[int]] = [[] for _ in range(callers)]
        await call(KEYS[0])  # connect first
        t0 = time.perf_counter()
        await asyncio.gather(*(run(i, lat[i]) for i in range(callers)))
        return per * callers / (time.perf_counter() - t0), [x for xs in lat for x in xs]

    return asyncio.run(main())


def cases(server: RedisServer) -> dict[str, Callable[[int, int], tuple[float, list[int]]]]:
    """name -> run(callers, calls)."""
    from limits import parse
    from limits.aio import storage as aio_storage
    from limits.aio import strategies as aio_strategies
    from limits.storage import RedisStorage
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    url = f"{server.url}/0"
    ours = sluicegate.KeyedLimiter(RATE, store=f"{url}?prefix=bench&on_error=error&timeout=1s")
    item = parse("1000000/second")
    # Each case its own key prefix (a fixed window's key and a moving window's would collide).
    fixed = FixedWindowRateLimiter(RedisStorage(url, key_prefix="LIMITS-FIXED"))
    moving = MovingWindowRateLimiter(RedisStorage(url, key_prefix="LIMITS-MOVING"))

    def batched(callers: int, calls: int) -> tuple[float, list[int]]:
        # One call decides BATCH keys: the figures are per decision (a call's latency is its
        # batch's).
        def call(key: str) -> object:
            return ours.try_acquire_many(KEYS[:BATCH])

        rate, lat = threaded(call, callers, max(callers, calls // BATCH))
        return rate * BATCH, lat

    def aio(kind: type, prefix: str) -> Callable[[int, int], tuple[float, list[int]]]:
        # The async storage's connections belong to the loop that made them: one per run.
        def run(callers: int, calls: int) -> tuple[float, list[int]]:
            made: list[object] = []

            async def call(key: str) -> object:
                if not made:
                    store = aio_storage.RedisStorage(f"async+{url}", implementation="redispy", key_prefix=prefix)
                    made.append(kind(store))
                return await made[0].hit(item, key)  # type: ignore[attr-defined]

            return tasks(call, callers, calls)

        return run

    return {
        "sluicegate `KeyedLimiter.try_acquire`, threads": lambda c, n: threaded(ours.try_acquire, c, n),
        "limits `FixedWindowRateLimiter` (redis-py), threads": lambda c, n: threaded(
            lambda k: fixed.hit(item, k), c, n
        ),
        "limits `MovingWindowRateLimiter` (redis-py), threads": lambda c, n: threaded(
            lambda k: moving.hit(item, k), c, n
        ),
        "sluicegate `KeyedLimiter.try_acquire_async`, asyncio tasks": lambda c, n: tasks(
            ours.try_acquire_async, c, n
        ),
        "limits.aio `FixedWindowRateLimiter` (redis-py asyncio), asyncio tasks": aio(
            aio_strategies.FixedWindowRateLimiter, "LIMITS-AIO-FIXED"
        ),
        "limits.aio `MovingWindowRateLimiter` (redis-py asyncio), asyncio tasks": aio(
            aio_strategies.MovingWindowRateLimiter, "LIMITS-AIO-MOVING"
        ),
        f"sluicegate `KeyedLimiter.try_acquire_many`, {BATCH} keys a call, threads": batched,
    }


def pct(xs: list[int], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3000, help="decisions per case per round")
    ap.add_argument("--out", default=str(HERE / "REDIS_RESULTS.md"))
    args = ap.parse_args()

    server = RedisServer()
    try:
        version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
        load_before = os.getloadavg()[0]
        runs = cases(server)
        rates: dict[tuple[str, int], list[float]] = {}
        lats: dict[tuple[str, int], list[int]] = {}
        for r in range(args.rounds):
            for callers in (1, 50):
                for name, run in runs.items():
                    rate, lat = run(callers, args.calls)
                    rates.setdefault((name, callers), []).append(rate)
                    lats.setdefault((name, callers), []).extend(lat)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        load_after = os.getloadavg()[0]
        # The server's own time per script call: FCALL is sluicegate's (FUNCTION LOAD),
        # EVALSHA limits'.
        stats = dict(re.findall(r"cmdstat_(fcall|evalsha):.*?usec_per_call=([0-9.]+)", server.cli("INFO", "commandstats")))
    finally:
        server.stop()

    lines = [
        "## Python on Redis (`bindings-python/bench/redis_bench.py`)",
        "",
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, redis-server "
        f"{version} on loopback (the same process and server for every case), {time.strftime('%Y-%m-%d')}, "
        f"load average {load_before:.1f} at start / {load_after:.1f} at end (a shared machine: the "
        f"client, the server and other work share its CPUs); {args.rounds} interleaved rounds of "
        f"{args.calls} decisions a case over {len(KEYS)} keys, every one admitted (a round trip each). "
        "Decisions/s: median of the rounds (min-max); latency: p50 and p99 of every decision, in us.",
        "",
        "| case | callers | decisions/s | p50 us | p99 us |",
        "|---|---|---|---|---|",
    ]
    for (name, callers), v in rates.items():
        lat = lats[(name, callers)]
        lines.append(
            f"| {name} | {callers} | {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f}) "
            f"| {pct(lat, 0.5):,.0f} | {pct(lat, 0.99):,.0f} |"
        )
    med = {k: statistics.median(v) for k, v in rates.items()}

    def best(prefix: str, callers: int) -> float:
        return max(v for (n, c), v in med.items() if c == callers and n.startswith(prefix))

    lines += [
        "",
        f"The server's time per script call (`INFO commandstats`): {float(stats.get('fcall', 0)):.1f} us for "
        f"sluicegate's (FCALL), {float(stats.get('evalsha', 0)):.1f} us for `limits`' (EVALSHA, both strategies). "
        "A blocking call hands its request to the core's Redis thread and waits with the GIL released; an "
        "asyncio call's reply wakes the event loop's own thread (a byte on a socket pair the loop "
        "watches), so one awaited decision crosses two threads (the loop and the core's Redis thread), "
        "where `limits.aio` reads its socket in the loop; with many callers those hops overlap and the "
        "core pipelines every caller's calls on one connection.",
    ]
    lines += ["", "Reading it (medians of decisions/s):", ""]
    for callers in (1, 50):
        threads = med[("sluicegate `KeyedLimiter.try_acquire`, threads", callers)]
        aio = med[("sluicegate `KeyedLimiter.try_acquire_async`, asyncio tasks", callers)]
        lines.append(
            f"* {callers} caller{'s' if callers > 1 else ''}: sluicegate's blocking calls "
            f"{threads / best('limits `', callers):.2f}x the faster `limits` strategy's, its asyncio calls "
            f"{aio / best('limits.aio', callers):.2f}x the faster `limits.aio` strategy's; batches of {BATCH} "
            f"{med[(f'sluicegate `KeyedLimiter.try_acquire_many`, {BATCH} keys a call, threads', callers)] / threads:.1f}x "
            "its single calls."
        )
    lines.append("")
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
