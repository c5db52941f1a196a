"""The Redis store through the Python API, against real redis-server processes these tests
start (tests/redis_server.py, fixtures in conftest.py): decisions on the server's clock, the
key rule, batches, the URL forms the core parses, errors, each fail policy with a killed or
paused server, the GIL released while a call waits, asyncio calls that never block the event
loop, and processes forked after a store was opened.

Liveness checks ("the loop kept ticking") compare gaps with the store's timeout, with wide
margins; no test asserts a speed (bench/redis_bench.py measures)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer

from sluicegate import (
    Composite,
    Decision,
    InsufficientCapacity,
    InvalidOptionError,
    KeyedLimiter,
    Limiter,
    StoreError,
    _native,
    render_prometheus,
)

ROOT = Path(__file__).resolve().parents[1]
_NAMES = itertools.count()


def url(server: RedisServer, **options: str) -> str:
    """`server`'s URL with a key prefix of its own and `options` in the query. The timeout is
    5 s unless given: on a loaded machine the default 50 ms can pass, and `on_error=error`
    would make that a failure of the test."""
    options = {"prefix": f"t{os.getpid()}x{next(_NAMES)}", "timeout": "5s", **options}
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{server.url}/0?{query}"


def prefix_of(store: str) -> str:
    return store.split("prefix=")[1].split("&")[0]


def test_a_keyed_limiter_on_redis_decides_on_the_server(redis_server: RedisServer) -> None:
    store = url(redis_server, on_error="error")
    limiter = KeyedLimiter("5/minute", store=store)
    assert [bool(limiter.try_acquire("alice")) for _ in range(6)] == [True] * 5 + [False]
    denied = limiter.try_acquire("alice")
    assert not denied and denied.limit == 5 and denied.remaining == 0
    assert 11e9 < denied.retry_after_ns <= 12e9  # one token per 12 s, on the server's clock
    # The key rule: 42, "42" and b"42" are one bucket.
    assert limiter.try_acquire(42, 3).remaining == 2
    assert limiter.try_acquire("42", 2).remaining == 0
    assert not limiter.try_acquire(b"42")
    # Another limiter on the same URL and quota (another process, another host) shares them.
    assert not KeyedLimiter("5/minute", store=store).try_acquire("alice")
    # No key bound of its own (the server's memory bounds the keys): none in its repr, which
    # showed 2^64 - 1.
    assert repr(KeyedLimiter("5/minute", store=store, max_keys=10)) == 'KeyedLimiter("5/m")'
    # A peek creates nothing; each bucket is one key, under the prefix.
    assert limiter.peek("nobody").remaining == 5
    assert len(redis_server.keys(f"{prefix_of(store)}:*")) == 2 == len(limiter)
    assert limiter.remove("alice") and not limiter.remove("alice")
    assert limiter.try_acquire("alice").remaining == 4
    limiter.clear()
    assert redis_server.keys(f"{prefix_of(store)}:*") == [] and len(limiter) == 0
    assert limiter.sweep() == 0  # full buckets expire on the server by themselves


def test_a_limiter_and_a_composite_on_redis(redis_server: RedisServer) -> None:
    single = Limiter("2/minute", store=url(redis_server, on_error="error"))
    assert [bool(single.try_acquire()) for _ in range(3)] == [True, True, False]
    assert single.peek().remaining == 0 and not single.is_full()
    single.refund(2)
    assert single.is_full()
    reservation = single.reserve(2)  # the core's reserve and cancel, on the server
    assert reservation and single.peek().remaining == 0
    assert reservation.cancel() and not reservation.cancel() and single.is_full()
    # Slots 10 s apart, to the nearest 10 s: only round trips of seconds could change them.
    queue = KeyedLimiter("1/10s; algorithm=leaky_queue; max_delay=25s", store=url(redis_server, on_error="error"))
    assert [round(queue.reserve("q").delay, -1) for _ in range(3)] == [0, 10, 20]
    assert not queue.reserve("q") and not queue.reserve("q", max_wait=0.05)
    per_user = Limiter("2/minute", store=url(redis_server, on_error="error"))
    tenant = Limiter("3/minute; algorithm=fixed_window", store=url(redis_server, on_error="error"))
    both = Composite([per_user, tenant])
    assert both.try_acquire().remaining == 1
    assert both.try_acquire()
    assert not both.try_acquire()  # per_user rejects: the tenant's window is not charged
    assert tenant.peek().remaining == 1
    both.refund(1)
    assert per_user.peek().remaining == 1 and tenant.peek().remaining == 2


def test_a_batch_is_one_call_with_one_outcome_each(redis_server: RedisServer) -> None:
    limiter = KeyedLimiter("3/minute", store=url(redis_server, on_error="error"))
    before = limiter.redis_stats()
    assert before is not None
    out = limiter.try_acquire_many(["a", ("a", 2), ("a", 1), ("b", 9), (7, 1)])
    assert [type(o) for o in out] == [Decision, Decision, Decision, InsufficientCapacity, Decision]
    assert [o.remaining for o in out if isinstance(o, Decision)] == [2, 0, 0, 2]
    assert not out[2] and out[3].code == "insufficient_capacity"
    stats = limiter.redis_stats()
    assert stats is not None and stats["decided"] - before["decided"] == 4
    # Bad requests fail before anything is sent.
    for bad, error in ([None], TypeError), ([("a", -1)], ValueError), ([("a", 1, 2)], TypeError), (5, TypeError):
        with pytest.raises(error):
            limiter.try_acquire_many(bad)  # type: ignore[arg-type]
    assert limiter.peek("a").remaining == 0
    # Other stores take batches too (a loop).
    assert [bool(d) for d in KeyedLimiter("1/minute").try_acquire_many(["x", "x"])] == [True, False]


def test_redis_stats_count_each_outcome(own_redis: RedisServer) -> None:
    limiter = KeyedLimiter("1/minute", store=url(own_redis, on_error="open"))
    assert limiter.try_acquire("k") and not limiter.try_acquire("k")
    for _ in range(3):
        assert not limiter.try_acquire("k")  # the negative cache: no round trip
    stats = limiter.redis_stats()
    assert stats is not None
    # Two connections: the shared multiplexed one (opened with the store) and the one the
    # blocking calls drove themselves.
    assert (stats["decided"], stats["cached_rejections"], stats["connects"]) == (2, 3, 2)
    own_redis.kill()
    assert limiter.try_acquire("other")  # on_error=open
    stats = limiter.redis_stats()
    assert stats is not None and stats["failed_open"] == 1 and stats["unavailable"] == 1
    assert set(stats) == {
        "decided", "cached_rejections", "failed_open", "failed_closed", "failed_local", "failed_error",
        "timeouts", "unavailable", "server_errors", "connects", "script_loads", "redirects",
    }  # fmt: skip
    assert KeyedLimiter("1/s").redis_stats() is None and Limiter("1/s").redis_stats() is None


def test_every_url_form_goes_through_the_core(redis_server: RedisServer) -> None:
    """The unix socket reaches the same server (and the same buckets) as TCP; rediss://,
    redis+cluster:// and redis+sentinel:// are the core's clients (here pointed at a plain
    server, which each refuses in its own words)."""
    tcp = url(redis_server, on_error="error")
    over_unix = tcp.replace(f"{redis_server.url}/0?", f"{redis_server.unix_url}?db=0&")
    assert KeyedLimiter("2/minute", store=tcp).try_acquire("k", 2)
    assert not KeyedLimiter("2/minute", store=over_unix).try_acquire("k")
    for form, why in [
        (f"rediss://127.0.0.1:{redis_server.port}", "not connected"),  # no TLS there
        (f"redis+cluster://127.0.0.1:{redis_server.port}", "cluster support disabled"),
        (f"redis+sentinel://127.0.0.1:{redis_server.port}/mymaster", "sentinel"),
    ]:
        limiter = KeyedLimiter("2/minute", store=f"{form}?on_error=error&timeout=200ms")
        with pytest.raises(StoreError) as info:
            limiter.try_acquire("k")
        assert info.value.kind == "unavailable" and why in info.value.reason, info.value
        assert info.value.store == f"{form}?prefix=sluicegate"  # the URL and its key prefix


def test_rediss_speaks_tls_and_checks_the_certificate() -> None:
    """rediss:// (rustls): against a TLS server whose certificate authority the process
    trusts (``SSL_CERT_FILE``, read by the system's certificate loader), decisions as over
    TCP; without that trust, the certificate is refused. In subprocesses, so that the variable
    is there before any certificate is loaded."""
    server = RedisServer(tls=True)
    try:
        code = (
            "import sys, sluicegate\n"
            "k = sluicegate.KeyedLimiter('2/minute', store=sys.argv[1] + '/0?prefix=tls&on_error=error')\n"
            "try:\n"
            "    print([bool(k.try_acquire('a')) for _ in range(3)])\n"
            "except sluicegate.StoreError as e:\n"
            "    print(e.kind, e.reason)\n"
        )

        def run(env: dict[str, str]) -> str:
            done = subprocess.run(
                [sys.executable, "-c", code, server.tls_url], env={**os.environ, **env},
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        assert run({"SSL_CERT_FILE": str(server.ca)}) == "[True, True, False]"
        refused = run({"SSL_CERT_FILE": "/dev/null"})
        assert refused.startswith("unavailable") and "certificate" in refused, refused
    finally:
        server.stop()


@pytest.mark.parametrize(
    "store",
    [
        "redis://",
        "redis://h?bogus=1",
        "redis://h?timeout=5",
        "redis://h?on_error=maybe",
        "redis://h?hosts=0",
        "redis://h?prefix=a{b}",
        "redis://h?prefix=a&prefix=b",
        "redis://h?negative_cache=maybe",
        "redis://h?scripts=lua",
        "redis://h?clock=wall",
    ],
)
def test_a_bad_redis_url_is_an_invalid_option(store: str) -> None:
    for make in (lambda: KeyedLimiter("1/s", store=store), lambda: Limiter("1/s", store=store)):
        with pytest.raises(InvalidOptionError) as info:
            make()
        assert isinstance(info.value, ValueError) and info.value.code == "invalid_option"
        assert info.value.option in ("store", "on_error")


def test_url_errors_never_show_the_password() -> None:
    with pytest.raises(InvalidOptionError) as info:
        KeyedLimiter("1/s", store="redis://user:hunter2@h/0?bogus=1")
    assert "hunter2" not in str(info.value) and "hunter2" not in info.value.value
    with pytest.raises(StoreError) as bad:
        KeyedLimiter("1/s", store="redis://user:hunter2@127.0.0.1:1/0?on_error=error").try_acquire("k")
    assert bad.value.kind == "unavailable" and "hunter2" not in str(bad.value) + bad.value.store
    # A count the server cannot give is an error, not 0 keys.
    with pytest.raises(StoreError):
        len(KeyedLimiter("1/s", store="redis://127.0.0.1:1/0?timeout=100ms"))
    with pytest.raises(InvalidOptionError) as sentinel:  # a store string the client cannot read
        KeyedLimiter("1/s", store="redis+sentinel://127.0.0.1:1")  # no master named
    assert sentinel.value.option == "store" and "MASTER" in str(sentinel.value)
    with pytest.raises(InvalidOptionError):
        KeyedLimiter("1/s", store="redis://127.0.0.1:99999/0")


def test_a_composite_peek_on_a_server_that_is_not_there_is_a_store_error() -> None:
    """A composite's peek looks at each part, as a Limiter's does: a part on a server that does
    not answer is a `StoreError` whatever `on_error` says (it was a request of cost 0, which
    the policy answered)."""
    for policy in ("open", "closed", "local"):
        far = Limiter("1/s", store=f"redis://127.0.0.1:1/0?on_error={policy}&timeout=20ms")
        both = Composite([Limiter("5/s"), far])
        with pytest.raises(StoreError) as info:
            both.peek()
        assert info.value.kind == "unavailable", policy
        with pytest.raises(StoreError):
            asyncio.run(both.peek_async())
        # Its requests are still the policy's.
        assert both.try_acquire().allowed == (policy != "closed")


def test_the_released_build_sends_no_client_time() -> None:
    """The test clock (client timestamps) is a cargo feature that only the test build turns
    on: the wheel's build (pyproject.toml) and the crate's defaults leave it off."""
    maturin = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["maturin"]
    assert "redis-test-clock" not in maturin.get("features", [])
    crate = tomllib.loads((ROOT / "Cargo.toml").read_text())
    assert "redis-test-clock" not in crate["features"].get("default", [])
    assert crate["features"]["redis-test-clock"] == ["sluicegate/redis-test-clock"]
    assert _native._REDIS_TEST_CLOCK  # this extension is the test build


# -- faults --------------------------------------------------------------------------------------

#: What each policy answers, three times in a row, while the server is down: allowed?
DOWN = {"open": [True, True, True], "closed": [False, False, False], "local": [True, True, False]}


@pytest.mark.parametrize("policy", ["open", "closed", "local", "error"])
def test_the_fail_policy_decides_while_the_server_is_down(own_redis: RedisServer, policy: str) -> None:
    """A killed server: `on_error=open|closed|local` decide every request (never an exception;
    `local`: an in-process bucket of the quota), `error` raises StoreError; a peek raises it
    under every policy. After a restart
    the server decides again, and its bound holds."""
    limiter = KeyedLimiter("2/minute", store=url(own_redis, on_error=policy))
    assert limiter.try_acquire("k")
    own_redis.kill()
    if policy == "error":
        for _ in range(3):
            with pytest.raises(StoreError) as info:
                limiter.try_acquire("k")
            assert info.value.kind == "unavailable" and info.value.code == "store_unavailable"
        with pytest.raises(StoreError):
            asyncio.run(limiter.try_acquire_async("k"))
    else:
        decisions = [limiter.try_acquire("k") for _ in range(3)]
        assert [bool(d) for d in decisions] == DOWN[policy]
        if policy == "closed":
            assert decisions[0].retry_after == 1.0 and decisions[0].limit == 2
        limiter.refund("k")  # a refund never raises either
        with pytest.raises(StoreError):  # a peek is not a decision: the policy does not answer it
            limiter.peek("k")
        assert asyncio.run(limiter.try_acquire_async("k2")) is not None
    own_redis.start()  # empty: no persistence
    deadline = time.monotonic() + 10
    while True:  # the store reconnects in the background (backoff up to 1 s)
        stats = limiter.redis_stats()
        assert stats is not None
        before = stats["decided"]
        try:
            first = limiter.try_acquire("k", 0)
        except StoreError:  # on_error=error, until the store has reconnected
            pass
        stats = limiter.redis_stats()
        assert stats is not None
        if stats["decided"] > before:
            break
        assert time.monotonic() < deadline, f"no reconnection within 10 s: {stats}"
        time.sleep(0.05)
    assert first.remaining == 2
    assert [bool(limiter.try_acquire("k")) for _ in range(3)] == [True, True, False]


def test_a_paused_server_times_out(own_redis: RedisServer) -> None:
    limiter = KeyedLimiter("2/minute", store=url(own_redis, on_error="error", timeout="1s"))
    assert limiter.try_acquire("k")
    own_redis.pause()
    try:
        start = time.monotonic()
        with pytest.raises(StoreError) as info:
            limiter.try_acquire("k")
        assert info.value.kind == "timeout" and info.value.code == "store_timeout"
        assert time.monotonic() - start < 5
    finally:
        own_redis.resume()


def ticks_during(work: Callable[[], Any]) -> tuple[float, float]:
    """Runs `work` on a thread while this one ticks every 5 ms: (the longest gap between two
    ticks, the seconds `work` took). A thread that held the GIL through a network wait would
    leave a gap as long as the wait. The tests wait 2 s for a paused server and allow gaps
    under 1 s: far longer than a stall of a loaded machine, far shorter than the wait."""
    took: list[float] = []

    def run() -> None:
        start = time.monotonic()
        work()
        took.append(time.monotonic() - start)

    worker = threading.Thread(target=run)
    # From before the start: `start()` itself waits for the GIL if the worker keeps it.
    last, gap = time.monotonic(), 0.0
    worker.start()
    while worker.is_alive():
        time.sleep(0.005)
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    worker.join()
    return gap, took[0]


def test_blocking_calls_release_the_gil(own_redis: RedisServer) -> None:
    # Two timeouts, two connections: a timeout drops its connection, and the calls after it
    # fail at once until a new one is made.
    limiter = KeyedLimiter("2/minute", store=url(own_redis, on_error="open", timeout="2000ms"))
    single = Limiter("2/minute", store=url(own_redis, on_error="open", timeout="2050ms"))
    assert limiter.try_acquire("k") and single.try_acquire()
    own_redis.pause()
    try:
        for work in (lambda: limiter.try_acquire("k"), lambda: single.acquire(timeout=1)):
            gap, took = ticks_during(work)
            assert took >= 1.9, took  # the call waited for the paused server ...
            assert gap < 1, (gap, took)  # ... while this thread kept running
    finally:
        own_redis.resume()


async def ticking(stop: asyncio.Event, ticks: list[float]) -> None:
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.005)


async def while_ticking(work: Coroutine[Any, Any, Any]) -> tuple[Any, float, float]:
    """Awaits `work` while a task ticks every 5 ms on the same loop: (its result, the
    longest gap between two ticks, the seconds it took). As with ticks_during, the tests
    wait 2 s for a paused server and allow gaps under 1 s."""
    stop, ticks = asyncio.Event(), [time.monotonic()]
    ticker = asyncio.create_task(ticking(stop, ticks))
    start = time.monotonic()
    try:
        result = await work
    finally:
        stop.set()
        await ticker
    took = time.monotonic() - start
    ticks.append(time.monotonic())
    return result, max(b - a for a, b in zip(ticks, ticks[1:])), took


def test_asyncio_calls_never_block_the_loop(own_redis: RedisServer) -> None:
    """100 awaits in flight against a SIGSTOPped server until its timeout (and the other async
    methods: a batch, an acquire, a composite): a ticker on the same loop keeps ticking, and
    every request gets the policy's answer (open: admitted)."""
    store = url(own_redis, on_error="open", timeout="2s")
    limiter = KeyedLimiter("2/minute", store=store)
    parts = [Limiter("5/minute", store=url(own_redis, on_error="open", timeout="2s")) for _ in range(2)]
    both = Composite(parts)
    assert limiter.try_acquire("warm") and both.try_acquire()
    own_redis.pause()
    try:

        async def flood() -> list[Any]:
            return await asyncio.gather(
                *(limiter.try_acquire_async(f"k{i}") for i in range(100)),
                limiter.try_acquire_many_async([("a", 1), ("b", 1)]),
                limiter.acquire_async("c", 1, timeout=4),
                both.try_acquire_async(),
            )

        results, gap, took = asyncio.run(while_ticking(flood()))
        assert took >= 1.9, took  # in flight until the timeout
        assert gap < 1, (gap, took)  # the loop kept running meanwhile
        assert all(results[:100]) and all(results[100]) and results[101] and results[102]
        stats = limiter.redis_stats()
        # In flight together: each timed out on its own (see test_redis_web.py).
        assert stats is not None and stats["failed_open"] >= 100 and stats["timeouts"] >= 100, stats
    finally:
        own_redis.resume()


def test_asyncio_methods(redis_server: RedisServer) -> None:
    limiter = KeyedLimiter("3/minute", store=url(redis_server, on_error="error"))
    single = Limiter("2/minute", store=url(redis_server, on_error="error"))
    both = Composite([single, Limiter("5/minute", store=url(redis_server, on_error="error"))])

    async def main() -> None:
        assert (await limiter.try_acquire_async("k", 2)).remaining == 1
        assert (await limiter.peek_async("k")).remaining == 1
        await limiter.refund_async("k", 1)
        assert (await limiter.peek_async(b"k")).remaining == 2
        many = await limiter.try_acquire_many_async(["k", ("k", 5)])
        assert many[0] and isinstance(many[1], InsufficientCapacity)
        with pytest.raises(InsufficientCapacity):
            await limiter.try_acquire_async("k", 4)
        with pytest.raises(TypeError):
            await limiter.try_acquire_async(None)  # type: ignore[arg-type]
        assert (await single.try_acquire_async()).remaining == 1
        assert (await single.peek_async()).remaining == 1
        await single.refund_async()
        assert (await both.try_acquire_async()).remaining == 1
        assert (await both.peek_async()).remaining == 1
        await both.refund_async()
        assert (await both.acquire_async(1, timeout=1)).remaining == 1
        # The same methods on the memory store answer at once.
        memory = KeyedLimiter("1/minute")
        assert await memory.try_acquire_async("m") and not await memory.try_acquire_async("m")

    asyncio.run(main())


class _NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch a file descriptor for others (as a proactor loop cannot)."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
        raise NotImplementedError


@pytest.mark.parametrize("loop", ["asyncio", "no add_reader"])
def test_awaited_calls_wake_their_loop_on_every_loop_and_thread(redis_server: RedisServer, loop: str) -> None:
    """A call's reply wakes the loop that awaits it: its own wake channel, watched by the loop
    (or, where the loop cannot watch one, the relay thread). Loops one after another in a
    thread, loops in several threads at once, many calls in flight on each: every call is
    decided, exactly (each key admits its quota and no more)."""
    limiter = KeyedLimiter("5/minute", store=url(redis_server, on_error="error"))
    new_loop = asyncio.new_event_loop if loop == "asyncio" else _NoReaderLoop

    def run(tag: str) -> list[bool]:
        async def main() -> list[bool]:
            calls = [limiter.try_acquire_async(f"{tag}-{i % 4}") for i in range(40)]
            return [bool(d) for d in await asyncio.gather(*calls, return_exceptions=False)]

        admitted: list[bool] = []
        for _ in range(3):  # a new loop each time, in the same thread
            with asyncio.Runner(loop_factory=new_loop) as runner:
                admitted += runner.run(main())
        return admitted

    results: dict[str, list[bool]] = {}
    threads = [threading.Thread(target=lambda t=t: results.__setitem__(t, run(t))) for t in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == ["a", "b", "c"]
    # 4 keys a thread, 30 calls each over 3 loops: 5 admitted a key.
    assert all(sum(r) == 20 and len(r) == 120 for r in results.values()), results


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")
def test_loops_taking_turns_in_a_thread_keep_one_wake_channel_each(redis_server: RedisServer) -> None:
    """A thread that runs two loops in turn (a long-lived one and `asyncio.run`'s, or two of
    its own) gives each one wake channel: switching loops must not leave another socket pair
    watched by the loop that was switched from, or a long-lived loop gathers two descriptors
    a switch until the process runs out of them."""
    limiter = KeyedLimiter("1000000/s", store=url(redis_server, on_error="error"))

    async def call() -> bool:
        return bool(await limiter.try_acquire_async("k"))

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first.run_until_complete(call())
        second.run_until_complete(call())
        before = open_fds()
        for _ in range(100):
            assert first.run_until_complete(call())
            assert second.run_until_complete(call())
            assert asyncio.run(call())
        # A few descriptors of the loops' own may come and go; two a switch is a leak.
        assert open_fds() - before < 10, (before, open_fds())
        # One loop run by other threads in turn: still its one channel.
        before = open_fds()
        for _ in range(50):
            t = threading.Thread(target=lambda: first.run_until_complete(call()))
            t.start()
            t.join(timeout=30)
            assert first.run_until_complete(call())
        assert open_fds() - before < 10, (before, open_fds())
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("loop", ["asyncio", "no add_reader"])
def test_a_program_that_awaited_calls_exits_cleanly(redis_server: RedisServer, loop: str) -> None:
    """Waking a coroutine from a thread of ours that calls into Python raced the interpreter's
    exit: when CPython had begun to finalize as that thread asked for the GIL back, it ended
    the thread with pthread_exit, and the process died of SIGABRT (several runs in ten). The
    loop's own thread now does the waking, and the relay thread (for loops that cannot watch
    a file descriptor) stops before the interpreter finalizes."""
    program = f"""
import asyncio, sluicegate
class NoReader(asyncio.SelectorEventLoop):
    def add_reader(self, fd, callback, *args):
        raise NotImplementedError
limiter = sluicegate.KeyedLimiter("1000000/s", store={url(redis_server, on_error="error")!r})
async def main():
    for i in range(300):
        await limiter.try_acquire_async(f"k{{i % 10}}")
with asyncio.Runner(loop_factory={"NoReader" if loop != "asyncio" else "asyncio.new_event_loop"}) as r:
    r.run(main())
"""
    for _ in range(12):
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60)
        assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])


def test_a_limiter_made_before_fork_works_in_the_child(redis_server: RedisServer) -> None:
    """The core's Redis connections and thread belong to the process that opened them: a
    limiter made before `fork()` (gunicorn --preload, uwsgi's master) opens its own in the
    child at its first call there, and decides on the server's buckets as the parent does (a
    pooled connection shared with the parent read the parent's replies; then the child was
    refused). New limiters, async calls, counters and Prometheus work there too; the parent
    goes on, and sees what the child spent."""
    store = url(redis_server, on_error="error", connections="1")
    limiter = KeyedLimiter("5/minute", store=store, metrics=True)
    assert limiter.try_acquire("k")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        signal.alarm(30)  # a call that hung would end the child, not the test run
        report = []
        try:
            # Threads whose first calls in this process come at once: each waits for the one
            # connection attempt (with on_error=error, a call that found no connection yet
            # would raise).
            with ThreadPoolExecutor(8) as pool:
                firsts = list(pool.map(lambda i: limiter.try_acquire(f"t{i}").allowed, range(8)))
            report.append(all(firsts))
            report.append(limiter.try_acquire("k").remaining)  # 3: the parent's one is spent
            report.append(asyncio.run(limiter.try_acquire_async("k")).remaining)
            fresh = KeyedLimiter("1/minute", store=url(redis_server, on_error="error"))
            report.append([fresh.try_acquire("f").allowed, fresh.try_acquire("f").allowed])
            metrics = limiter.metrics()
            report.append(metrics is not None and metrics.allowed >= 2)
            report.append("sluicegate_decisions_total" in render_prometheus({"keyed": limiter}))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            report.append(repr(e))
        os.write(write, repr(report).encode())
        os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            assert pipe.read() == repr([True, 3, 2, [True, False], True, True])
    finally:
        assert os.waitpid(pid, 0)[1] == 0
    # The parent's one, the child's two: this is the fourth of five.
    assert limiter.try_acquire("k").remaining == 1
    metrics = limiter.metrics()
    assert metrics is not None and metrics.allowed == 2


def test_async_first_calls_after_fork_are_decided_by_the_server(redis_server: RedisServer) -> None:
    """In a child, an async limiter's first call opens the child's connection on a thread of
    its own: the event loop (and every other coroutine) runs meanwhile."""
    limiter = KeyedLimiter("5/minute", store=url(redis_server, on_error="error"))
    assert limiter.try_acquire("k")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        signal.alarm(30)

        async def main() -> list[object]:
            results = await asyncio.gather(*(limiter.try_acquire_async(f"a{i}") for i in range(8)))
            return [all(d.allowed for d in results), (await limiter.try_acquire_async("k")).remaining]

        try:
            report: object = asyncio.run(main())
        except Exception as e:  # noqa: BLE001 - reported to the parent
            report = repr(e)
        os.write(write, repr(report).encode())
        os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            assert pipe.read() == repr([True, 3])
    finally:
        assert os.waitpid(pid, 0)[1] == 0


def test_keyed_metrics_wait_for_the_server_with_the_gil_released(own_redis: RedisServer) -> None:
    """`KeyedLimiter.metrics()` and `render_prometheus` are calls on the store like any other
    (the core counted the keys with a SCAN, which waits for a paused server)."""
    limiter = KeyedLimiter("2/minute", store=url(own_redis, on_error="open", timeout="2s"), metrics=True)
    assert limiter.try_acquire("k")
    own_redis.pause()
    try:
        for work in (limiter.metrics, lambda: render_prometheus({"keyed": limiter})):
            gap, took = ticks_during(work)
            assert gap < 1, (gap, took)  # this thread kept running meanwhile
    finally:
        own_redis.resume()
    metrics = limiter.metrics()
    assert metrics is not None and metrics.allowed == 1 and metrics.keys is None


def test_a_task_cancelled_while_its_poll_waits_gives_the_slot_back(own_redis: RedisServer) -> None:
    """acquire_async polls on an executor thread, which a cancellation cannot stop: a task
    cancelled while its poll waits for the server waits for that poll, and gives back the
    slots it reserved before the cancellation propagates."""
    limiter = Limiter("2/s; algorithm=leaky_queue; max_delay=10s", store=url(own_redis, on_error="error"))
    assert limiter.try_acquire()

    async def cancelled() -> None:
        own_redis.pause()
        try:
            task = asyncio.ensure_future(limiter.acquire_async(4))  # 4 slots: 2 s of queue
            await asyncio.sleep(0.3)  # its poll waits for the paused server
            task.cancel()
            asyncio.get_running_loop().call_later(0.2, own_redis.resume)  # then it reserves
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            own_redis.resume()

    asyncio.run(cancelled())  # (which waits for the executor's threads)
    r = limiter.reserve()
    assert r and r.delay <= 0.5, r  # the 4 slots were given back
    assert r.cancel()


def test_a_reservation_whose_give_back_failed_can_cancel_again(own_redis: RedisServer) -> None:
    limiter = KeyedLimiter("3/minute", store=url(own_redis, on_error="error", timeout="500ms"))
    r = limiter.reserve("k", 2)
    assert r and limiter.peek("k").remaining == 1
    own_redis.pause()
    try:
        with pytest.raises(StoreError):
            r.cancel()
    finally:
        own_redis.resume()
    deadline = time.monotonic() + 10
    while True:  # the next calls may fail until the client has reconnected
        try:
            assert r.cancel()  # still open: the tokens go back now
            break
        except StoreError:
            assert time.monotonic() < deadline, "no reconnection within 10 s"
            time.sleep(0.05)
    assert not r.cancel()  # once
    assert limiter.peek("k").remaining == 3


def test_store_suffix_names_a_prefix_per_limit() -> None:
    """The web integrations' naming: a Redis URL's prefix gets the limit's suffix; everything
    else, a password included, stays as given."""
    assert _native._store_with_suffix("redis://u:pw@h:1/0?on_error=open&prefix=app", "ab12") == (
        "redis://u:pw@h:1/0?on_error=open&prefix=app:ab12"
    )
    assert _native._store_with_suffix("redis://h", "ab12") == "redis://h?prefix=sluicegate:ab12"
    assert _native._store_kind(" redis+unix:///run/r.sock ") == "redis"
    assert (_native._store_kind("memory"), _native._store_kind("shm:/x")) == ("memory", "shm")
    with pytest.raises(InvalidOptionError):
        _native._store_with_suffix("redis://h?prefix=" + "p" * 200, "ab12")  # too long
