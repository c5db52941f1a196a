"""Hostile inputs (issue 9), one test each: every one gets a clear typed exception or a correct
decision, never a crash, a hang or unbounded memory."""

from __future__ import annotations

import gc
import math
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

import sluicegate
from sluicegate import (
    ClockOutOfRange,
    Composite,
    InsufficientCapacity,
    InvalidQuotaError,
    KeyedLimiter,
    KeyStoreFull,
    Limiter,
    ManualClock,
    Quota,
)

U64_MAX = 2**64 - 1
EDGES = (2**64, 2**63, 2**63 - 1, U64_MAX, -1, -(2**63), -(2**64))


def rss_bytes() -> int:
    """The resident set now (Linux), or the peak where /proc is missing."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def test_zero_negative_nan_infinite_and_huge_rates() -> None:
    for rate in ("0/s", "-1/s", "nan/s", "inf/s", "1e3/s", "18446744073709551616/s", "1/0s",
                 "1/s; burst=0", "1/s; burst=-1", "1/s; burst=18446744073709551616",
                 "18446744073709551615/ns", "1/18446744073709551615ns",
                 "1/d; burst=18446744073709551615", "2/s; initial=3"):
        with pytest.raises(InvalidQuotaError):
            Limiter(rate)
    # The keyword form: the same domain, with the Python type named.
    for kwargs, exc in (
        (dict(count=0, period=1), InvalidQuotaError),
        (dict(count=1, period=0), InvalidQuotaError),
        (dict(count=1, period_ns=0), InvalidQuotaError),
        (dict(count=1, period=1, burst=0), InvalidQuotaError),
        (dict(count=-1, period=1), ValueError),
        (dict(count=1, period=-1), ValueError),
        (dict(count=1, period=math.nan), ValueError),
        (dict(count=1, period=math.inf), OverflowError),
        (dict(count=1, period=-math.inf), ValueError),
        (dict(count=1, period=1e300), OverflowError),
        (dict(count=math.nan, period=1), TypeError),
        (dict(count=1.5, period=1), TypeError),
        (dict(count=2**64, period=1), OverflowError),
        (dict(count=1, period=1, burst=2**64), OverflowError),
        (dict(count=1, period=1, algorithm="leaky_queue", max_delay=math.inf), OverflowError),
        (dict(count=1, period=1, algorithm="leaky_queue", max_delay=-1), ValueError),
        (dict(count=1, period=1, algorithm="leaky_queue", max_delay=math.nan), ValueError),
        (dict(count=2**62, period_ns=1, algorithm="sliding_log"), InvalidQuotaError),
        (dict(count=1, period_ns=2**63, algorithm="fixed_window"), InvalidQuotaError),
    ):
        with pytest.raises(exc):
            Quota(**kwargs)  # type: ignore[arg-type]
    # Huge but valid rates decide exactly.
    clock = ManualClock(0)
    fast = Limiter("1000000000/ns; burst=1", clock=clock)
    assert fast.try_acquire()
    again = fast.try_acquire()  # no time passed: a 1e-9 ns token still takes the next whole ns
    assert not again and again.retry_after_ns == 1
    clock.advance_ns(1)
    assert fast.try_acquire()
    slow = Limiter(Quota(count=1, period_ns=U64_MAX // 4, burst=1), clock=ManualClock(0))
    assert slow.try_acquire()
    denied = slow.try_acquire()
    assert not denied and denied.retry_after_ns == U64_MAX // 4
    long_queue = Limiter(Quota(count=1, period=1, algorithm="leaky_queue", max_delay=1e9))
    assert long_queue.try_acquire()


def test_zero_negative_nan_infinite_and_huge_costs() -> None:
    clock = ManualClock(0)
    limiter = Limiter("10/s", clock=clock)
    keyed = KeyedLimiter("10/s", clock=clock)
    both = Composite([limiter])
    calls = (
        limiter.try_acquire, limiter.refund, limiter.reserve, both.try_acquire, both.refund,
        lambda c: keyed.try_acquire("k", c), lambda c: keyed.refund("k", c),
        lambda c: limiter.acquire(c, timeout=0),
    )
    for call in calls:
        for cost, exc in ((-1, ValueError), (math.nan, TypeError), (math.inf, TypeError),
                          (1.0, TypeError), (True, TypeError), (None, TypeError), ("1", TypeError),
                          (2**64, OverflowError), (10**100, OverflowError), (-(10**100), ValueError)):
            with pytest.raises(exc, match="cost"):
                call(cost)
    for cost in (11, 2**63, U64_MAX):
        with pytest.raises(InsufficientCapacity) as info:
            limiter.try_acquire(cost)
        assert info.value.cost == cost and info.value.capacity == 10
    zero = limiter.try_acquire(0)  # a peek
    assert zero and zero.remaining == 10
    limiter.refund(U64_MAX)  # capped at the burst: nothing to give back
    assert limiter.try_acquire(10) and limiter.peek().remaining == 0
    limiter.refund(U64_MAX)
    assert limiter.peek().remaining == 10


def test_empty_and_enormous_keys() -> None:
    limiter = KeyedLimiter("2/h", clock=ManualClock(0))
    big = "k" * (1 << 20)
    for key in ("", b"", big, big.encode(), b"\x00" * (1 << 20)):
        assert limiter.try_acquire(key)
    assert not limiter.try_acquire("", 2)  # "" and b"" are one key
    assert limiter.try_acquire(big.encode()).remaining == 0  # str and its UTF-8 bytes: one key
    assert not limiter.try_acquire(big)
    assert len(limiter) == 3
    assert limiter.remove(big) and limiter.peek(big).remaining == 2


def test_non_utf8_and_unencodable_keys() -> None:
    limiter = KeyedLimiter("1/h", clock=ManualClock(0))
    raw = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80" * 64, bytes(range(256))]
    for key in raw:
        assert limiter.try_acquire(key)
        assert not limiter.try_acquire(key)
    assert len(limiter) == len(raw)
    # A str holding a lone surrogate has no UTF-8 form: a typed error (a ValueError), no bucket.
    with pytest.raises(UnicodeEncodeError):
        limiter.try_acquire("\ud800")
    with pytest.raises(ValueError):
        limiter.reserve("a\udcffb")
    for key in (None, 1.5, (1,), bytearray(b"a"), memoryview(b"a"), True, object()):
        with pytest.raises(TypeError, match="key must be"):
            limiter.try_acquire(key)  # type: ignore[arg-type]
    assert len(limiter) == len(raw)


def test_rate_strings_with_junk() -> None:
    junk = [
        "", " ", ";", "/", "10", "10/", "/s", "10//s", "10/s;", "10/s;;", "10/s; burst", "10/s; burst=",
        "10/s; bogus=1", "10/s; burst=1; burst=2", "10/fortnight", "10/-1s", "10/1.5s", "1e1/s",
        "10\x00/s", "10/s\x00", "\x1b[31m10/s", "10/s\x07", "10/s\r\nX-Injected: 1", "\t\n\v\f",
        "١٠/s",  # Arabic-Indic digits are not ASCII digits
        "10/ｓ",  # a fullwidth letter
        "１０/s",  # fullwidth digits
        "10/s; algorithm=nope", "10/s; algorithm=leaky_queue; max_delay=1", "10/s; max_delay=1s",
        "1" * (1 << 20) + "/s",  # 1 MiB of digits
        "10/s" + "; burst=10" * 100_000,  # ~1 MiB of repeated options
        "10/s;" + " " * (1 << 20),
    ]
    start = time.monotonic()
    for rate in junk:
        with pytest.raises(InvalidQuotaError) as info:
            Quota(rate)
        assert isinstance(info.value, ValueError) and info.value.code in ("parse_error", "invalid_quota")
        # The core's message quotes the whole input (escaped): linear in it, never more.
        assert len(str(info.value)) < 8 * len(rate) + 512
    assert time.monotonic() - start < 10  # linear-time parsing, no pathological input
    with pytest.raises(UnicodeEncodeError):
        Quota("\ud800/s")
    for not_str in (b"10/s", 10, None, ["10/s"]):
        with pytest.raises(TypeError):
            Quota(not_str)  # type: ignore[arg-type]
    # Whitespace and case are free (docs/SEMANTICS.md): these are fine.
    assert Quota("  10 PER Second ;  BURST = 20 ") == Quota("10/s; burst=20")


@pytest.mark.parametrize("on_full", ["evict", "reject"])
def test_a_million_distinct_keys_against_a_bounded_store(on_full: str) -> None:
    max_keys = 1000
    limiter = KeyedLimiter("1/h", clock=ManualClock(0), max_keys=max_keys, on_full=on_full)
    n = 1_000_000 if on_full == "evict" else 200_000  # a refusal raises: slower per call
    gc.collect()
    before = rss_bytes()
    refused = 0
    for i in range(n):
        key = f"client-{i}" if i % 2 else i
        try:
            limiter.try_acquire(key)
        except KeyStoreFull:
            refused += 1
        if i % 100_000 == 0:
            assert len(limiter) <= max_keys  # one store: str, bytes and int keys alike
    gc.collect()
    grown = rss_bytes() - before
    assert len(limiter) <= max_keys
    if on_full == "reject":
        assert refused == n - len(limiter)
    assert grown < 64 << 20, f"RSS grew by {grown / 2**20:.1f} MiB"
    limiter.clear()
    assert len(limiter) == 0


def test_clock_jumps_backwards_and_far_forwards() -> None:
    clock = ManualClock(10**12)
    limiter = Limiter("2/s; burst=2", clock=clock)
    keyed = KeyedLimiter("2/s; burst=2", clock=clock)
    assert limiter.try_acquire(2) and keyed.try_acquire("k", 2)
    # Backwards: clamped, never an extra admission.
    for back in (10**12 - 1, 1, 0):
        clock.set_ns(back)
        assert not limiter.try_acquire() and not keyed.try_acquire("k")
    # Far forwards, within the horizon: the bucket is full again.
    clock.set_ns(sluicegate.CENTURY_NS)
    assert limiter.try_acquire(2) and keyed.try_acquire("k", 2)
    # Past the horizon: a typed error that names the reading, nothing changes.
    for reading in (U64_MAX - 1, U64_MAX):
        clock.set_ns(reading)
        for call in (limiter.try_acquire, limiter.peek, limiter.refund, limiter.reserve,
                     lambda: limiter.acquire(timeout=0), lambda: keyed.try_acquire("k"),
                     lambda: keyed.try_acquire("new"), lambda: keyed.refund("k"),
                     Composite([limiter]).try_acquire):
            with pytest.raises(ClockOutOfRange) as info:
                call()
            assert info.value.now_ns == reading and info.value.horizon_ns < reading
    clock.advance_ns(U64_MAX)  # saturates, no wrap
    assert clock.now_ns() == U64_MAX
    clock.advance(timedelta(days=10**6))
    assert clock.now_ns() == U64_MAX
    with pytest.raises(OverflowError):
        clock.advance(1e300)
    with pytest.raises(ClockOutOfRange):
        limiter.try_acquire_at(U64_MAX)
    # And back: the state was not touched by the refused readings.
    clock.set_ns(sluicegate.CENTURY_NS)
    assert not limiter.try_acquire() and limiter.peek().remaining == 0


def test_overflow_at_integer_edges() -> None:
    clock = ManualClock(0)
    limiter = Limiter("1/s", clock=clock)
    keyed = KeyedLimiter("1/s", clock=clock)
    for value in EDGES:
        ok = 0 <= value <= U64_MAX
        for name, call in (
            ("ns", clock.set_ns), ("ns", clock.advance_ns), ("start_ns", ManualClock),
            ("now_ns", limiter.try_acquire_at), ("now_ns", lambda v: keyed.try_acquire_at("k", v)),
            ("count", lambda v: Quota(count=v, period=1)), ("period_ns", lambda v: Quota(count=1, period_ns=v)),
            ("max_keys", lambda v: KeyedLimiter("1/s", max_keys=v)),
            ("shards", lambda v: KeyedLimiter("1/s", shards=v)),
            ("remaining", lambda v: sluicegate.Decision.from_figures(allowed=True, limit=1, remaining=v)),
        ):
            clock.set_ns(0)
            if name == "shards":
                # 1 to 4096 (as Node checks it): a ValueError, never a silent clamp.
                with pytest.raises(ValueError, match="shards must be an integer between 1 and 4096"):
                    call(value)
                continue
            if ok:
                try:
                    call(value)
                except (InvalidQuotaError, ClockOutOfRange):
                    pass  # a domain error from the core, typed
                continue
            with pytest.raises(OverflowError if value > 0 else ValueError, match=name):
                call(value)
    # An int key of any size is its decimal digits: every edge is an ordinary key.
    for key in (-(2**63), 2**63 - 1, 0, -1, 2**63, -(2**63) - 1, 2**64, U64_MAX, 2**127,
                -(2**127) - 1, 10**100):
        assert keyed.try_acquire(key), key
        assert not keyed.try_acquire(str(key)), key
    # Timedelta and second edges.
    for timeout in (timedelta.max, U64_MAX, 1e19):
        assert limiter.reserve(max_wait=timeout) is not None
    for too_long in (2**64, 2.0**64, math.inf):
        with pytest.raises(OverflowError):
            limiter.acquire(timeout=too_long)
    with pytest.raises(ValueError):
        limiter.acquire(timeout=timedelta.min)


def test_shards_out_of_range_are_refused_not_clamped() -> None:
    # The core would clamp to 1..4096 (and round up to a power of two) without a word: Node
    # refuses these, and so does Python, with Node's message.
    for bad in (0, 4097, 10**6, 2**63, 2**64, -1):
        with pytest.raises(ValueError, match="shards must be an integer between 1 and 4096"):
            KeyedLimiter("1/s", shards=bad)
    for bad_type in (True, 1.0, "8"):
        with pytest.raises(TypeError):
            KeyedLimiter("1/s", shards=bad_type)  # type: ignore[arg-type]
    for good in (1, 3, 64, 4096):
        keyed = KeyedLimiter("1/s", clock=ManualClock(0), shards=good)
        assert keyed.try_acquire("k") and not keyed.try_acquire("k")
