"""Per-call cost of sluicegate's try_acquire next to limits, pyrate-limiter, a locked
pure-Python token bucket and an empty pyo3 call; and requests/s of a small Flask app with our
extension, with flask-limiter, and with no limiter. Everything runs in one process, in
interleaved rounds (each round measures every case once; the reported figure is the median
of the rounds, the spread is min-max), and the result is written as a Markdown fragment to
bench/RESULTS.md.

    pip install -r bindings-python/requirements-bench.txt
    python bindings-python/bench/bench.py [--rounds 7] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import timeit
from pathlib import Path

import sluicegate

HERE = Path(__file__).resolve().parent
ALWAYS = "1000000000/s; burst=1000000000"  # never rejects during a run
NEVER = "1/h; burst=1"  # drained first: every call rejects
KEYS = 100_000


class LockedBucket:
    """The textbook pure-Python token bucket: a lock, float tokens, time.monotonic()."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.last = burst, time.monotonic()
        self.lock = threading.Lock()

    def try_acquire(self, cost: float = 1) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= cost:
                self.tokens -= cost
                return True
            return False


def call_cases() -> dict[str, tuple[str, dict, int]]:
    """name -> (statement, globals, calls per statement)."""
    from limits import RateLimitItemPerHour, RateLimitItemPerSecond
    from limits.storage import MemoryStorage
    from limits.strategies import (
        FixedWindowRateLimiter,
        MovingWindowRateLimiter,
        SlidingWindowCounterRateLimiter,
    )
    import pyrate_limiter as pyrate

    allow = sluicegate.Limiter(ALWAYS)
    reject = sluicegate.Limiter(NEVER)
    reject.try_acquire()
    kallow = sluicegate.KeyedLimiter(ALWAYS)
    kreject = sluicegate.KeyedLimiter(NEVER)
    kreject.try_acquire("k")
    many = sluicegate.KeyedLimiter(ALWAYS)
    keys = [f"client-{i}" for i in range(KEYS)]
    for k in keys:
        many.try_acquire(k)
    many_reject = sluicegate.KeyedLimiter(NEVER)
    for k in keys:
        many_reject.try_acquire(k)
    int_keys = list(range(KEYS))
    many_int = sluicegate.KeyedLimiter(ALWAYS)
    for k in int_keys:
        many_int.try_acquire(k)

    cases: dict[str, tuple[str, dict, int]] = {
        "empty pyo3 method (`Limiter._noop`), the floor": ("f()", {"f": allow._noop}, 1),
        "sluicegate `Limiter.try_acquire()`, allowed": ("f()", {"f": allow.try_acquire}, 1),
        "sluicegate `Limiter.try_acquire()`, rejected": ("f()", {"f": reject.try_acquire}, 1),
        "sluicegate `Limiter.allow()` (bool, no Decision), allowed": ("f()", {"f": allow.allow}, 1),
        "sluicegate `Limiter.allow()` (bool, no Decision), rejected": ("f()", {"f": reject.allow}, 1),
        "sluicegate `KeyedLimiter.try_acquire(key)`, one key, allowed": ("f('k')", {"f": kallow.try_acquire}, 1),
        "sluicegate `KeyedLimiter.try_acquire(key)`, one key, rejected": ("f('k')", {"f": kreject.try_acquire}, 1),
        f"sluicegate `KeyedLimiter`, {KEYS:,} str keys round-robin, allowed": (
            "for k in keys: f(k)",
            {"f": many.try_acquire, "keys": keys},
            KEYS,
        ),
        f"sluicegate `KeyedLimiter`, {KEYS:,} str keys round-robin, rejected": (
            "for k in keys: f(k)",
            {"f": many_reject.try_acquire, "keys": keys},
            KEYS,
        ),
        f"sluicegate `KeyedLimiter`, {KEYS:,} int keys round-robin, allowed": (
            "for k in keys: f(k)",
            {"f": many_int.try_acquire, "keys": int_keys},
            KEYS,
        ),
        f"empty loop over {KEYS:,} keys calling `_noop` (loop floor)": (
            "for k in keys: f()",
            {"f": allow._noop, "keys": keys},
            KEYS,
        ),
        "pure-Python locked token bucket": ("f()", {"f": LockedBucket(1e9, 1e9).try_acquire}, 1),
    }
    big = RateLimitItemPerSecond(1_000_000_000)
    small = RateLimitItemPerHour(1)
    for label, cls in (
        ("fixed window", FixedWindowRateLimiter),
        ("moving window", MovingWindowRateLimiter),
        ("sliding window counter", SlidingWindowCounterRateLimiter),
    ):
        lim = cls(MemoryStorage())
        cases[f"limits {label}, memory, allowed"] = ("f(item, 'k')", {"f": lim.hit, "item": big}, 1)
        lim_r = cls(MemoryStorage())
        lim_r.hit(small, "k")
        cases[f"limits {label}, memory, rejected"] = ("f(item, 'k')", {"f": lim_r.hit, "item": small}, 1)
    p_allow = pyrate.Limiter(pyrate.Rate(1_000_000_000, pyrate.Duration.SECOND))
    p_reject = pyrate.Limiter(pyrate.Rate(1, pyrate.Duration.HOUR))
    p_reject.try_acquire("k", blocking=False)
    cases["pyrate-limiter in-memory, allowed"] = ("f('k', blocking=False)", {"f": p_allow.try_acquire}, 1)
    cases["pyrate-limiter in-memory, rejected"] = ("f('k', blocking=False)", {"f": p_reject.try_acquire}, 1)
    return cases


def number_for(stmt: str, g: dict, per: int, budget: float) -> int:
    t = timeit.Timer(stmt, globals=g)
    n = 1
    while True:
        if t.timeit(n) * 1 >= budget / 4 or n * per >= 50_000_000:
            return n
        n *= 4


def measure_calls(rounds: int, budget: float) -> dict[str, list[float]]:
    cases = call_cases()
    numbers = {name: number_for(s, g, per, budget) for name, (s, g, per) in cases.items()}
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (stmt, g, per) in cases.items():
            n = numbers[name]
            t = timeit.Timer(stmt, globals=g).timeit(n)
            out[name].append(t / (n * per) * 1e9)
    return out


def flask_apps():
    from flask import Flask
    from flask_limiter import Limiter as FlaskLimiter
    from flask_limiter.util import get_remote_address

    from sluicegate.flask import Sluicegate

    def app_with(setup) -> Flask:
        app = Flask(f"bench-{setup.__name__}")

        @app.get("/")
        def index() -> str:
            return "ok"

        setup(app)
        return app

    def none(app: Flask) -> None:
        pass

    def sluicegate_ext(app: Flask) -> None:
        app.config["SLUICEGATE_DEFAULT_LIMITS"] = [ALWAYS]
        Sluicegate(app)

    def flask_limiter(app: Flask) -> None:
        FlaskLimiter(
            get_remote_address,
            app=app,
            default_limits=["1000000000 per second"],
            storage_uri="memory://",
            headers_enabled=True,
        )

    return {
        "no limiter": app_with(none),
        "sluicegate.flask (default limit + headers)": app_with(sluicegate_ext),
        "flask-limiter 4 (default limit + headers, memory://)": app_with(flask_limiter),
    }


def measure_flask(rounds: int, requests: int) -> dict[str, list[float]]:
    apps = flask_apps()
    clients = {name: app.test_client() for name, app in apps.items()}
    for name, c in clients.items():  # warm up, and check each variant answers 200
        for _ in range(200):
            assert c.get("/").status_code == 200, name
    out: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, c in clients.items():
            start = time.perf_counter()
            for _ in range(requests):
                c.get("/")
            out[name].append(requests / (time.perf_counter() - start))
    return out


def fmt_ns(v: list[float]) -> str:
    return f"{statistics.median(v):,.0f} ns ({min(v):,.0f}-{max(v):,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget", type=float, default=0.2, help="seconds per case per round")
    ap.add_argument("--requests", type=int, default=2000, help="Flask requests per variant per round")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    calls = measure_calls(args.rounds, args.budget)
    web = measure_flask(args.rounds, args.requests)

    med = {k: statistics.median(v) for k, v in calls.items()}
    floor = med["empty pyo3 method (`Limiter._noop`), the floor"]
    ours = med["sluicegate `Limiter.try_acquire()`, allowed"]
    ours_r = med["sluicegate `Limiter.try_acquire()`, rejected"]
    competitors = {k: v for k, v in med.items() if k.startswith(("limits", "pyrate"))}
    fastest_comp = min(competitors.values())
    rps = {k: statistics.median(v) for k, v in web.items()}
    base = 1e6 / rps["no limiter"]
    over = {k: 1e6 / v - base for k, v in rps.items()}
    ours_over = over["sluicegate.flask (default limit + headers)"]
    fl_over = over["flask-limiter 4 (default limit + headers, memory://)"]

    lines = [
        "## Python bindings (`bindings-python/bench/bench.py`)",
        "",
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d')}, load average {load_before:.1f} at start / "
        f"{os.getloadavg()[0]:.1f} at end (a shared machine: absolute figures move with the load, "
        "ratios within a round much less); "
        f"{args.rounds} interleaved rounds, median (min-max). "
        "Per-call figures include the `timeit` loop (tens of ns); the 100 000-key rows include "
        "a Python `for` loop, whose floor is the `_noop` loop row.",
        "",
        "| per call | time |",
        "|---|---|",
    ]
    for name, v in calls.items():
        lines.append(f"| {name} | {fmt_ns(v)} |")
    lines += [
        "",
        "| Flask app, one route, test client | requests/s | added per request |",
        "|---|---|---|",
    ]
    for name, v in web.items():
        added = "-" if name == "no limiter" else f"{over[name]:,.1f} us"
        lines.append(f"| {name} | {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f}) | {added} |")
    lines += [
        "",
        "Against the targets of issue 6:",
        "",
        f"* `try_acquire` allowed / rejected: {ours:,.0f} / {ours_r:,.0f} ns against an empty pyo3 "
        f"method's {floor:,.0f} ns: {ours / floor:.1f}x / {ours_r / floor:.1f}x the floor (target: "
        "<= 1.5 x (floor + the Rust decision, ~15-20 ns)).",
        f"* The fastest `limits` / pyrate-limiter case is {fastest_comp:,.0f} ns: sluicegate is "
        f"{fastest_comp / ours:.0f}x faster allowed, {fastest_comp / ours_r:.0f}x rejected (target: >= 30x).",
        f"* Flask: sluicegate adds {ours_over:,.1f} us a request, flask-limiter {fl_over:,.1f} us: "
        f"{ours_over / fl_over:.2f} of flask-limiter's overhead (target: < 1/3).",
        "",
    ]
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
