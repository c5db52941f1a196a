"""Real pre-forking servers: gunicorn with 4 worker processes on 127.0.0.1, serving the apps of
gunicorn_flask.py, gunicorn_django.py and gunicorn_drf.py, 200 requests from plain HTTP clients.

On the shm store and on the Redis store a ``10/minute`` limit admits exactly 10 of them,
whichever workers serve them (with and without ``--preload``); on the memory store each worker
has limiters of its own, and the same limit admits 10 per worker: 40. That difference is why
the shared stores exist. Every server is stopped in a ``finally`` block and every wait is
bounded.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis_server import RedisServer

from sluicegate import Quota
from sluicegate._web import region_suffix

TESTS = Path(__file__).resolve().parent
WORKERS = 4
REQUESTS = 200
#: Both apps' limits are 10/minute: a token every 6 s. The 200 requests (20 ms each, 4 at a
#: time) take about a second; more than this many seconds would let a refill in, and the test
#: says so.
WINDOW = 6.0


@dataclass
class Server:
    url: str
    master: int
    log: Path


@contextmanager
def gunicorn(app: str, store: str, *options: str) -> Iterator[Server]:
    """`gunicorn -w 4` serving `app` on 127.0.0.1, its limits on `store`."""
    command = [
        sys.executable, "-m", "gunicorn",
        "--workers", str(WORKERS),
        "--bind", "fd://{fd}",
        "--chdir", str(TESTS),
        "--graceful-timeout", "2",
        "--timeout", "30",
        "--error-logfile", "-",
        *options,
        app,
    ]  # fmt: skip
    with serve(command, store, wait_ready) as server:
        yield server


@contextmanager
def serve(command: list[str], store: str, ready: Callable[[Server, subprocess.Popen], None]) -> Iterator[Server]:
    """`command` (``{fd}`` standing for the socket's descriptor) serving on a listening socket
    of 127.0.0.1 made here (a free port, no race for it), its limits on `store`, once
    `ready` returns; stopped (the whole process group) on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    port = sock.getsockname()[1]
    log = Path(tempfile.mkstemp(prefix="sluicegate-server-", suffix=".log")[1])
    env = {**os.environ, "SLUICEGATE_TEST_STORE": store}
    proc = None
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [part.replace("{fd}", str(sock.fileno())) for part in command], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=(sock.fileno(),), start_new_session=True,
            )  # fmt: skip
        sock.close()
        server = Server(f"http://127.0.0.1:{port}", proc.pid, log)
        ready(server, proc)
        yield server
    finally:
        sock.close()
        if proc is not None:
            stop(proc)
        log.unlink(missing_ok=True)


def wait_ready(server: Server, proc: subprocess.Popen, timeout: float = 60, workers: int = WORKERS) -> None:
    """Until `workers` gunicorn workers have booted (0: any server) and the app answers;
    fails past `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        text = server.log.read_text(errors="replace")
        assert proc.poll() is None, f"the server exited with {proc.returncode}:\n{text}"
        if len(re.findall(r"Booting worker with pid", text)) >= workers:
            try:
                if get(f"{server.url}/ready")[0] == 200:
                    return
            except OSError:
                pass
        assert time.monotonic() < deadline, f"the server is not ready after {timeout} s:\n{text}"
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the master (a graceful stop of 2 s at most), then SIGKILL to whatever of
    its process group is left."""
    try:
        proc.terminate()
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=15)


def get(url: str) -> tuple[int, dict[str, str]]:
    """One GET on a connection of its own: the status and the response's fields."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, dict(e.headers)


def hammer(url: str) -> tuple[Counter[int], Counter[str], set[str], float]:
    """200 GETs from 8 client threads, so that gunicorn spreads them over its workers:
    the statuses, the admissions per worker, the importing processes, the seconds taken."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(get, [url] * REQUESTS, timeout=120))
    elapsed = time.monotonic() - start
    statuses = Counter(status for status, _ in results)
    admitted = Counter(headers["X-Worker"] for status, headers in results if status == 200)
    imported_in = {headers["X-Imported-In"] for _, headers in results}
    seen = {headers["X-Worker"] for _, headers in results}
    assert len(seen) == WORKERS, f"gunicorn spread the requests over {sorted(seen)} only"
    assert elapsed < WINDOW, f"{REQUESTS} requests took {elapsed:.1f} s: a token may have refilled"
    return statuses, admitted, imported_in, elapsed


def region(regions: Path, rate: str, scope: str) -> Path:
    """Where the integrations put a limit's region (the naming the README documents)."""
    return regions / f"limits.{region_suffix(Quota(rate), scope)}"


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_flask_on_the_shm_store_admits_exactly_the_limit(regions: Path, preload: bool) -> None:
    with gunicorn("gunicorn_flask:app", f"shm:{regions}/limits", *(["--preload"] if preload else [])) as server:
        statuses, admitted, imported_in, _ = hammer(f"{server.url}/limited")
        assert statuses == {200: 10, 429: 190}, (statuses, admitted)
        if preload:  # the limiter was made (its region opened) in the master, before the fork
            assert imported_in == {str(server.master)}
        else:
            assert str(server.master) not in imported_in
    assert [p.name for p in regions.iterdir()] == [region(regions, "10/minute", "gunicorn_flask.limited#0").name]


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_django_on_the_shm_store_admits_exactly_the_limit(regions: Path, preload: bool) -> None:
    with gunicorn("gunicorn_django:application", f"shm:{regions}/limits", *(["--preload"] if preload else [])) as server:
        for path in ("limited", "plain"):  # the decorator's limit, and the middleware's default
            statuses, admitted, imported_in, _ = hammer(f"{server.url}/{path}")
            assert statuses == {200: 10, 429: 190}, (path, statuses, admitted)
            assert (imported_in == {str(server.master)}) is preload
    assert sorted(p.name for p in regions.iterdir()) == sorted([
        region(regions, "10/minute", "gunicorn_django.limited#0").name,
        region(regions, "10/minute", "default#0").name,
    ])


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_drf_on_the_shm_store_admits_exactly_the_limit(regions: Path, preload: bool) -> None:
    """A DRF throttle's limiter is made at the first request it sees, in each worker, on one
    region that every worker opens. A throttle whose every admitted request fails, with a
    ``deduct_when`` that counts only successes, gets every token back (from the middleware,
    in the worker that served the request): it never rejects."""
    with gunicorn("gunicorn_drf:application", f"shm:{regions}/limits", *(["--preload"] if preload else [])) as server:
        statuses, admitted, imported_in, _ = hammer(f"{server.url}/limited")
        assert statuses == {200: 10, 429: 190}, (statuses, admitted)
        assert (imported_in == {str(server.master)}) is preload
        statuses, _, _, _ = hammer(f"{server.url}/failing")
        assert statuses == {503: REQUESTS}, statuses
    assert sorted(p.name for p in regions.iterdir()) == sorted([
        # (A DRF rate without options is a sliding window counter.)
        region(regions, "10/minute; algorithm=sliding_window", "drf:anon").name,
        region(regions, "10/minute; algorithm=sliding_window", "drf:failing").name,
    ])


def test_the_memory_store_admits_the_limit_once_per_worker(regions: Path) -> None:
    """Why the shm store exists: on the memory store each of the 4 workers enforces its own
    10/minute, and the server admits 40."""
    with gunicorn("gunicorn_flask:app", "memory") as server:
        statuses, admitted, _, _ = hammer(f"{server.url}/limited")
        assert statuses == {200: 40, 429: 160}, (statuses, admitted)
        assert sorted(admitted.values()) == [10] * WORKERS
    assert not list(regions.iterdir())


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_flask_on_the_redis_store_admits_exactly_the_limit(redis_server: RedisServer, preload: bool) -> None:
    """The workers' limits are keys of one server, each limit under a prefix of its own, its
    connections opened in each worker (after the fork, also under ``--preload``)."""
    prefix = f"gf{os.getpid()}{int(preload)}"
    store = f"{redis_server.url}/0?prefix={prefix}&on_error=error&timeout=5s"
    with gunicorn("gunicorn_flask:app", store, *(["--preload"] if preload else [])) as server:
        statuses, admitted, _, _ = hammer(f"{server.url}/limited")
        assert statuses == {200: 10, 429: 190}, (statuses, admitted)
    limit = f"{prefix}:{region_suffix(Quota('10/minute'), 'gunicorn_flask.limited#0')}"
    assert {k.rsplit(":", 2)[0] for k in redis_server.keys(f"{prefix}:*")} == {limit}


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_a_redis_limiter_made_at_import_admits_exactly_the_limit(redis_server: RedisServer, preload: bool) -> None:
    """A `KeyedLimiter` on Redis made at import, a module's global: under ``--preload`` in the
    master, before the fork, and each worker opens its own connections at its first call."""
    prefix = f"gr{os.getpid()}{int(preload)}"
    store = f"{redis_server.url}/0?prefix={prefix}&on_error=error&timeout=5s"
    with gunicorn("gunicorn_flask:app", store, *(["--preload"] if preload else [])) as server:
        statuses, admitted, imported_in, _ = hammer(f"{server.url}/raw")
        assert statuses == {200: 10, 429: 190}, (statuses, admitted)
        assert (imported_in == {str(server.master)}) is preload


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_django_on_the_redis_store_admits_exactly_the_limit(redis_server: RedisServer, preload: bool) -> None:
    prefix = f"gd{os.getpid()}{int(preload)}"
    store = f"{redis_server.url}/0?prefix={prefix}&on_error=error&timeout=5s"
    with gunicorn("gunicorn_django:application", store, *(["--preload"] if preload else [])) as server:
        for path in ("limited", "plain"):
            statuses, admitted, _, _ = hammer(f"{server.url}/{path}")
            assert statuses == {200: 10, 429: 190}, (path, statuses, admitted)
    assert {k.rsplit(":", 2)[0] for k in redis_server.keys(f"{prefix}:*")} == {
        f"{prefix}:{region_suffix(Quota('10/minute'), 'gunicorn_django.limited#0')}",
        f"{prefix}:{region_suffix(Quota('10/minute'), 'default#0')}",
    }
