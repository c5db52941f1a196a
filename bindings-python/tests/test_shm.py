"""The shared-memory store through the Python API: ``store="shm:..."`` on Limiter and
KeyedLimiter, its errors, processes forked after a region is mapped, and the regions the web
integrations name. Regions live in the ``regions`` fixture's private temporary directory."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import flask
import pytest
from django.test import Client, override_settings

import sluicegate
from sluicegate import InvalidOptionError, KeyedLimiter, Limiter, ManualClock, Quota, StoreError
from sluicegate._web import region_suffix
from sluicegate.flask import Sluicegate
from test_redis import ticks_during


def test_limiters_on_one_region_share_its_buckets(regions: Path) -> None:
    store = f"shm:{regions}/shared"
    a = KeyedLimiter("10/minute", store=store, max_keys=100)
    b = KeyedLimiter("10/minute", store=store)  # an opener without max_keys takes the region's
    assert (a.max_keys, b.max_keys) == (100, 100)
    admitted = sum(bool((a if i % 2 else b).try_acquire("alice")) for i in range(30))
    assert admitted == 10
    assert b.try_acquire(42) and a.peek("42").remaining == 9  # the one key rule, across limiters
    assert (len(a), len(b)) == (2, 2)
    assert a.remove(b"42") and b.peek(42).remaining == 10
    # The region is a private file, named as given.
    assert (regions / "shared").stat().st_mode & 0o777 == 0o600


def test_a_single_limiter_shares_its_one_bucket(regions: Path) -> None:
    store = f"shm:{regions}/one"
    clock = ManualClock(0)
    a = Limiter("1/s; burst=3", store=store, clock=clock)
    b = Limiter("1/s; burst=3", store=store, clock=clock)
    assert a.try_acquire(2).remaining == 1
    assert b.try_acquire().remaining == 0 and not a.try_acquire()
    clock.advance(1)
    assert b.peek().remaining == 1
    b.refund(2)
    assert a.is_full()


def test_memory_is_the_default_and_can_be_named() -> None:
    assert KeyedLimiter("1/s", store="memory").try_acquire("k")
    assert Limiter("1/s", store=" Memory ").try_acquire()
    assert Limiter("1/s", store=None).try_acquire()


@pytest.mark.parametrize(
    ("store", "why"),
    [
        ("shm:", "a region needs a name or path"),
        ("shm:/x?capacity=0", "capacity is a whole number of keys, from 1 to 469762048"),
        ("shm:/x?capacity=469762049", "capacity is a whole number of keys, from 1 to 469762048"),
        ("shm:/x?capacity=+10", "capacity is a whole number of keys, from 1 to 469762048"),
        ("shm:/x?size=3", "the only option is capacity=N, given once"),
        ("", "an unknown store"),
    ],
)
def test_a_bad_store_string_is_an_invalid_option(store: str, why: str) -> None:
    for make in (lambda: KeyedLimiter("1/s", store=store), lambda: Limiter("1/s", store=store)):
        with pytest.raises(InvalidOptionError) as info:
            make()
        err = info.value
        assert isinstance(err, ValueError)
        assert (err.code, err.option, err.value) == ("invalid_option", "store", store)
        assert err.expected == f'"memory", "shm:NAME[?capacity=N]" or a Redis URL ({why})'


def test_a_store_that_is_not_a_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        KeyedLimiter("1/s", store=Path("/dev/shm/x"))  # type: ignore[arg-type]


def test_another_quota_or_capacity_is_a_mismatch_naming_both(regions: Path) -> None:
    store = f"shm:{regions}/mismatch"
    KeyedLimiter("10/minute", store=store, max_keys=50)
    with pytest.raises(StoreError) as info:
        KeyedLimiter("20/minute", store=store)
    err = info.value
    assert (err.kind, err.code, err.store) == ("mismatch", "store_mismatch", str(regions / "mismatch"))
    assert "10/m" in err.reason and "20/m" in err.reason and err.reason in str(err)
    with pytest.raises(StoreError) as info:
        KeyedLimiter("10/minute", store=store, max_keys=51)
    assert info.value.kind == "mismatch"
    # A single limiter's region holds one key: a keyed limiter of another capacity is refused.
    Limiter("10/minute", store=f"shm:{regions}/single")
    with pytest.raises(StoreError) as info:
        KeyedLimiter("10/minute", store=f"shm:{regions}/single", max_keys=2)
    assert info.value.kind == "mismatch"


def test_a_region_open_to_other_users_or_a_link_is_refused(regions: Path) -> None:
    store = f"shm:{regions}/perm"
    KeyedLimiter("5/s", store=store, max_keys=8)
    os.chmod(regions / "perm", 0o644)
    with pytest.raises(StoreError) as info:
        KeyedLimiter("5/s", store=store)
    assert (info.value.kind, info.value.code) == ("permission", "store_permission")
    assert "644" in info.value.reason
    os.chmod(regions / "perm", 0o600)
    os.symlink(regions / "perm", regions / "link")
    with pytest.raises(StoreError) as info:
        Limiter("5/s", store=f"shm:{regions}/link")
    assert info.value.kind == "permission"


def test_what_a_region_cannot_keep_exactly_is_unsupported(regions: Path) -> None:
    for quota in ("10/s; algorithm=sliding_log", "281474976710655/s; algorithm=sliding_window"):
        with pytest.raises(StoreError) as info:
            KeyedLimiter(quota, store=f"shm:{regions}/refused")
        assert (info.value.kind, info.value.code) == ("unsupported", "store_unsupported")
        assert KeyedLimiter(quota).try_acquire("k")  # the memory store takes it
    assert not (regions / "refused").exists()
    # A region keeps fingerprints, not keys: nothing to list; the rest works.
    limiter = KeyedLimiter("5/s", store=f"shm:{regions}/ops", max_keys=8)
    limiter.try_acquire("a")
    assert limiter.sweep() == 0 and len(limiter) == 1
    limiter.clear()
    assert len(limiter) == 0


def test_a_region_mapped_before_fork_serves_every_child(regions: Path) -> None:
    """4 children of one process share the region their parent opened: together they admit
    exactly the burst (no refill within the test: 1 token an hour)."""
    limiter = KeyedLimiter("1/hour; burst=25", store=f"shm:{regions}/forked", max_keys=16)
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    children: list[int] = []
    try:
        for _ in range(4):
            pid = os.fork()
            if pid == 0:  # the child: wait for the start, try 50 times, report, exit
                code = 1
                try:
                    os.close(go_w)
                    os.read(go_r, 1)
                    admitted = sum(limiter.allow("client") for _ in range(50))
                    os.write(out_w, f"{os.getpid()} {admitted}\n".encode())
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        os.close(out_w)
        out_w = -1
        os.write(go_w, b"x" * len(children))  # all start at once
        statuses = wait_all(children, timeout=30)
        assert all(os.waitstatus_to_exitcode(s) == 0 for s in statuses.values()), statuses
        lines = read_all(out_r).decode().split()
        counts = dict(zip(lines[::2], map(int, lines[1::2])))
        assert len(counts) == 4 and sum(counts.values()) == 25, counts
        assert limiter.peek("client").remaining == 0  # the parent sees what they took
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        for fd in (go_r, go_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)


@pytest.mark.parametrize("kind", ["keyed", "single"])
def test_opening_a_region_being_initialised_waits_with_the_gil_released(regions: Path, kind: str) -> None:
    """An opener waits (up to 3 s) for a region's creator to finish initialising it: other
    threads of the process keep running meanwhile. The file here is one whose creator
    stopped before claiming the initialisation (a page of zeros): the opener waits its 3 s,
    then takes the initialisation over."""
    path = regions / f"unready-{kind}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.ftruncate(fd, 4096)
    finally:
        os.close(fd)
    made: list[object] = []
    store = f"shm:{path}"

    def open_it() -> None:
        made.append(KeyedLimiter("5/s", store=store, max_keys=8) if kind == "keyed" else Limiter("5/s", store=store))

    gap, took = ticks_during(open_it)
    assert made, "the region was not opened"
    assert took >= 2.5, took  # the opener waited for the creator ...
    assert gap < 1.0, (gap, took)  # ... while this thread kept running


def wait_all(pids: list[int], timeout: float) -> dict[int, int]:
    """Each pid's wait status; fails past `timeout` seconds."""
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(statuses) < len(pids):
        for pid in pids:
            if pid not in statuses:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    statuses[pid] = status
        assert time.monotonic() < deadline, f"children still running after {timeout} s"
        time.sleep(0.01)
    return statuses


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


# -- the regions the web integrations name ------------------------------------------------


def test_store_with_suffix() -> None:
    suffixed = sluicegate._native._store_with_suffix
    assert suffixed("shm:/myapp", "abc") == "shm:/myapp.abc"
    assert suffixed("shm:/srv/limits/app?capacity=10", "abc") == "shm:/srv/limits/app.abc?capacity=10"
    assert suffixed("memory", "abc") == "memory"
    with pytest.raises(InvalidOptionError):
        suffixed("shm:", "abc")


def test_a_region_suffix_is_stable_and_tells_limits_apart() -> None:
    q = Quota("10/minute")
    assert region_suffix(q, "app.view#0") == region_suffix(Quota("10/m"), "app.view#0")
    assert len(region_suffix(q, "app.view#0")) == 16
    assert len({region_suffix(q, "app.view#0"), region_suffix(q, "app.view#1"),
                region_suffix(q, "app.other#0"), region_suffix(Quota("11/minute"), "app.view#0")}) == 4


def test_flask_names_one_region_per_limit(regions: Path) -> None:
    app = flask.Flask(__name__)
    app.config.update(SLUICEGATE_STORAGE=f"shm:{regions}/app", SLUICEGATE_DEFAULT_LIMITS=["3/minute"])
    limiter = Sluicegate(app)

    @app.get("/a")
    @limiter.limit("2/minute")
    def a() -> str:
        return "a"

    @app.get("/b")
    @limiter.limit("2/minute")
    @limiter.limit("100/minute")
    def b() -> str:
        return "b"

    @app.get("/c")
    def c() -> str:
        return "c"

    name = f"{__name__}.test_flask_names_one_region_per_limit.<locals>"
    expected = {
        f"app.{region_suffix(Quota('3/minute'), 'default#0')}",
        f"app.{region_suffix(Quota('2/minute'), f'{name}.a#0')}",
        f"app.{region_suffix(Quota('100/minute'), f'{name}.b#0')}",
        f"app.{region_suffix(Quota('2/minute'), f'{name}.b#1')}",
    }
    # Opened when the app is configured and the views decorated, before any request.
    assert {p.name for p in regions.iterdir()} == expected
    client = app.test_client()
    assert [client.get("/a").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/b").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/c").status_code for _ in range(4)] == [200, 200, 200, 429]
    # Another app (another process, in production) on the same store shares the counts.
    again = flask.Flask(__name__)
    again.config.update(SLUICEGATE_STORAGE=f"shm:{regions}/app", SLUICEGATE_DEFAULT_LIMITS=["3/minute"])
    Sluicegate(again)
    again.add_url_rule("/c", view_func=c)
    assert again.test_client().get("/c").status_code == 429
    assert {p.name for p in regions.iterdir()} == expected


def test_flask_storage_from_the_constructor_and_a_bad_one(regions: Path) -> None:
    app = flask.Flask(__name__)
    app.config["SLUICEGATE_STORAGE"] = "memory"
    limiter = Sluicegate(storage=f"shm:{regions}/ctor")

    @app.get("/x")
    @limiter.limit("1/minute")
    def x() -> str:
        return "x"

    assert not list(regions.iterdir())  # no app yet: nothing opened
    limiter.init_app(app)  # the constructor's argument wins over app.config
    assert [p.name.split(".")[0] for p in regions.iterdir()] == ["ctor"]
    client = app.test_client()
    assert [client.get("/x").status_code for _ in range(2)] == [200, 429]
    with pytest.raises(InvalidOptionError):
        Sluicegate(flask.Flask(__name__), storage="shm:")
    bad = flask.Flask(__name__)
    bad.config["SLUICEGATE_STORAGE"] = "disk:/x"
    with pytest.raises(InvalidOptionError):
        Sluicegate(bad)


def test_django_storage_setting(regions: Path) -> None:
    with override_settings(SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"], "STORAGE": f"shm:{regions}/dj"}):
        client = Client()
        assert [client.get("/plain").status_code for _ in range(3)] == [200, 200, 429]
        assert [client.get("/limited", HTTP_X_API_KEY="k").status_code for _ in range(4)] == [200] * 3 + [429]
        names = sorted(p.name for p in regions.iterdir())
        assert names == sorted([
            f"dj.{region_suffix(Quota('2/minute'), 'default#0')}",
            f"dj.{region_suffix(Quota('1/minute; burst=3'), 'django_app.limited#0')}",
        ])
    with override_settings(SLUICEGATE={"STORAGE": "shm:/x?capacity=none"}):
        with pytest.raises(InvalidOptionError):
            Client().get("/plain")
