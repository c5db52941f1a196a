"""Overhead per request of the Python web integrations on real servers under a real HTTP load
generator: Flask, Django and DRF under gunicorn, FastAPI under uvicorn, each next to the
framework with no limiter and to its best-known peer (flask-limiter, django-ratelimit, DRF's
cache throttle, slowapi), in one run.

Every subject is a server of its own on 127.0.0.1 (one worker process: gunicorn's ``gthread``
worker with four threads, which keeps connections alive, or uvicorn with httptools and uvloop,
as ``uvicorn[standard]`` deploys it), loaded in turn by
``wrk`` (one thread, 8 keep-alive connections) for ``--secs`` seconds a round, the subjects
a framework's subjects one after another each round, in rotated orders, so that each subject
is measured close in time to its framework with no limiter. The figure is the **server's CPU
time per request** (user and system time of the server's processes, from ``/proc``, over the
requests ``wrk`` completed): what the limiter costs the server, which the load generator and
other jobs on a shared machine disturb far less than requests per second. A subject's
overhead is, in each round, its figure less its framework's with no limiter in that round;
the table gives the median over the rounds, and the ratio of ours over the peer's.

Clients: each request carries ``X-Forwarded-For`` with one of 1000 addresses (a ``wrk``
script), and every server runs behind the usual proxy fix (werkzeug's ``ProxyFix`` around the
WSGI app, uvicorn's ``--proxy-headers``), so that every limiter keys by its own default, the
remote address, and sees 1000 clients, as behind a load balancer: one client would give the
peers that keep a history per client (DRF's throttle) a history of every request. Limits of
``10000/minute`` admit every request; a subject with any response other than a 200 fails the
run.

With ``--instructions`` the servers run under callgrind instead, one at a time, and the
figure is the server's user-space instructions per request (its Python and native code, not
the kernel's): moved by the machine's load far less than CPU time, which on a shared 2-core
machine moves by more than a limiter's whole overhead.

    pip install -r bindings-python/requirements-bench.txt   # and wrk (and valgrind) on the PATH
    python bindings-python/bench/http_bench.py [--rounds 5] [--secs 2] [--quick]
    python bindings-python/bench/http_bench.py --instructions [--rounds 2] [--secs 6]

Writes a Markdown fragment to bench/HTTP_RESULTS.md (bench/HTTP_INSTRUCTIONS.md). The servers import this module
(``HTTP_BENCH_SUBJECT`` names the subject): ``wsgi_app()`` and ``asgi_app()`` are their
factories.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import argparse
import importlib.util
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RATE = "10000/minute"
CLIENTS = 1000

# framework -> [(subject, what it is)], the first with no limiter, the last the peer.
SUBJECTS: dict[str, list[tuple[str, str]]] = {
    "flask": [
        ("none", "Flask, no limiter"),
        ("sluicegate", "sluicegate.flask (default limit + headers)"),
        ("flask-limiter", "flask-limiter 4 (default limit + headers, memory://)"),
    ],
    "django": [
        ("none", "Django, no limiter"),
        ("sluicegate", "sluicegate.django RateLimitMiddleware (default limit + headers)"),
        ("sluicegate-nofields", "sluicegate.django RateLimitMiddleware, no fields on allowed responses "
         "(`HEADERS_ON_ALLOWED: False`: django-ratelimit sends none)"),
        ("django-ratelimit", "django-ratelimit 4 (`@ratelimit(key='ip')`, locmem cache)"),
    ],
    "drf": [
        ("none", "DRF APIView, no throttle"),
        ("sluicegate", "sluicegate.drf.AnonRateThrottle"),
        ("drf", "DRF AnonRateThrottle (locmem cache)"),
    ],
    "fastapi": [
        ("none", "FastAPI, no limiter"),
        ("middleware", "sluicegate.starlette RateLimitMiddleware"),
        ("dependency", "sluicegate.starlette dependency (Depends)"),
        ("noop-dependency", "a no-op dependency (Depends), for reference"),
        ("slowapi", "slowapi 0.1 (limits, memory storage)"),
    ],
}
PATHS = {"flask": "/", "django": "/", "drf": "/", "fastapi": "/items/1"}

# Django's URLconf (ROOT_URLCONF is this module): set by `wsgi_app` before the first request.
urlpatterns: list[Any] = []


# -- the servers' side: the apps ----------------------------------------------------------------


def _subject() -> tuple[str, str]:
    fw, _, name = os.environ["HTTP_BENCH_SUBJECT"].partition(":")
    return fw, name


def flask_app(name: str) -> Any:
    from flask import Flask

    app = Flask(f"bench-{name}")

    @app.get("/")
    def index() -> str:
        return "ok"

    if name == "sluicegate":
        from sluicegate.flask import Sluicegate

        app.config["SLUICEGATE_DEFAULT_LIMITS"] = [RATE]
        Sluicegate(app)
    elif name == "flask-limiter":
        from flask_limiter import Limiter
        from flask_limiter.util import get_remote_address

        Limiter(get_remote_address, app=app, default_limits=[RATE], storage_uri="memory://", headers_enabled=True)
    return app


def django_app(fw: str, name: str) -> Any:
    import web_bench

    ours = fw == "django" and name.startswith("sluicegate")
    middleware = ["sluicegate.django.RateLimitMiddleware"] if ours else []
    web_bench.setup_django(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=middleware,
        SLUICEGATE={"STORAGE": "memory", "DEFAULT_LIMITS": [RATE], "HEADERS_ON_ALLOWED": name != "sluicegate-nofields"},
    )
    from django.core.wsgi import get_wsgi_application
    from django.http import HttpResponse
    from django.urls import path

    if fw == "django":

        def index(request: Any) -> Any:
            return HttpResponse("ok")

        if name == "django-ratelimit":
            from django_ratelimit.decorators import ratelimit

            index = ratelimit(key="ip", rate="10000/m", block=True)(index)
        view = index
    else:
        from rest_framework import throttling
        from rest_framework.response import Response
        from rest_framework.views import APIView

        import sluicegate.drf

        throttles = {"none": [], "sluicegate": [sluicegate.drf.AnonRateThrottle], "drf": [throttling.AnonRateThrottle]}[name]

        class Item(APIView):
            throttle_classes = throttles

            def get(self, request: Any) -> Any:
                return Response({"item": 1})

        view = Item.as_view()
    urlpatterns[:] = [path("", view)]
    return get_wsgi_application()


def wsgi_app() -> Any:
    """gunicorn's factory: the subject's WSGI app behind werkzeug's ProxyFix."""
    from werkzeug.middleware.proxy_fix import ProxyFix

    fw, name = _subject()
    app = flask_app(name) if fw == "flask" else django_app(fw, name)
    return ProxyFix(app, x_for=1)


def asgi_app() -> Any:
    """uvicorn's factory (``--factory``): the subject's FastAPI app, ``web_bench.py``'s own."""
    import web_bench

    _, name = _subject()
    labels = {"none": "FastAPI, no limiter", "middleware": "sluicegate.starlette RateLimitMiddleware",
              "dependency": "sluicegate.starlette dependency (Depends)",
              "noop-dependency": "a no-op dependency (Depends), for reference",
              "slowapi": "slowapi 0.1.10 (limits, memory storage)"}  # fmt: skip
    assert web_bench.RATE == RATE
    return web_bench.fastapi_subjects()[labels[name]]


# -- the benchmark's side -----------------------------------------------------------------------

WRK_SCRIPT = """
local n = 0
request = function()
  n = n + 1
  local i = n %% %d
  return wrk.format("GET", nil, {["X-Forwarded-For"] = "11." .. math.floor(i / 250) .. "." .. (i %% 250) .. ".1"})
end
""" % CLIENTS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One subject's server: started, waited for (bounded), its CPU time read, stopped."""

    def __init__(self, fw: str, name: str, callgrind: Path | None = None) -> None:
        self.fw, self.name, self.port = fw, name, free_port()
        env = dict(os.environ, HTTP_BENCH_SUBJECT=f"{fw}:{name}", PYTHONPATH=str(HERE))
        bind = f"127.0.0.1:{self.port}"
        bindir = Path(sys.executable).parent
        if fw == "fastapi" or callgrind is not None:
            # Under callgrind a WSGI app is served by uvicorn too (its WSGI interface: one
            # process), since callgrind_control does not reach gunicorn's fork()ed workers.
            factory = "http_bench:asgi_app" if fw == "fastapi" else "http_bench:wsgi_app"
            iface = ["--interface", "wsgi"] if fw != "fastapi" else []
            cmd = [str(bindir / "uvicorn"), "--factory", factory, *iface, "--host", "127.0.0.1",
                   "--port", str(self.port), "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1",
                   "--log-level", "warning", "--no-access-log"]
        else:
            cmd = [str(bindir / "gunicorn"), "-w", "1", "-k", "gthread", "--threads", "4", "-b", bind,
                   "--log-level", "warning", "http_bench:wsgi_app()"]
        if callgrind is not None:
            # Uninstrumented until `instructions` switches it on (a server's start under full
            # instrumentation takes minutes); fork()ed workers are followed.
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
                   f"--callgrind-out-file={callgrind}/cg.%p"] + cmd
        self.proc = subprocess.Popen(cmd, env=env, cwd=HERE, start_new_session=True)
        wait_s = 30 if callgrind is None else 300
        deadline = time.monotonic() + wait_s
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{fw}:{name}: the server exited ({self.proc.returncode})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"{fw}:{name}: the server did not listen within {wait_s} s") from None
                time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """User + system time of the server's processes (the worker and any master)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid, ppid, sid = int(stat.parent.name), int(fields[1]), int(fields[3])
            if sid == self.proc.pid or pid == self.proc.pid or ppid == self.proc.pid:
                total += int(fields[11]) + int(fields[12])
        return total / tick

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def wrk(server: Server, secs: float, script: str, connections: int = 8) -> int:
    """`wrk` against `server` for `secs`: the requests it completed (every one a 200)."""
    url = f"http://127.0.0.1:{server.port}{PATHS[server.fw]}"
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{secs:g}s", "-s", script, url],
                         capture_output=True, text=True, timeout=secs + 120, check=True).stdout
    m = re.search(r"(\d+) requests in", out)
    if not m or "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"{server.fw}:{server.name}: a failed load:\n{out}")
    return int(m.group(1))


def load(server: Server, secs: float, script: str) -> float:
    """One round of `wrk` against `server`: the server's CPU µs per request."""
    before = server.cpu_seconds()
    n = wrk(server, secs, script)
    return (server.cpu_seconds() - before) * 1e6 / n


def instructions(fw: str, name: str, secs: float, script: str) -> float:
    """The server's instructions per request (callgrind, user space: the server's Python and
    native code, not the kernel's): started under callgrind uninstrumented, warmed up
    instrumented, then counted over `secs` of one connection's requests."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        server = Server(fw, name, callgrind=out)
        try:
            ctl = lambda *a: subprocess.run(["callgrind_control", *a], capture_output=True, timeout=120, check=True)  # noqa: E731
            ctl("-i", "on")
            wrk(server, 3, script, connections=1)
            ctl("-z")
            n = wrk(server, secs, script, connections=1)
            ctl("-d")
        finally:
            server.stop()
        total = 0
        for f in out.glob("cg.*"):
            for line in f.read_text(errors="replace").splitlines():
                if line.startswith(("totals:", "summary:")):
                    total += int(line.split()[1])
                    break
        return total / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1 s")
    ap.add_argument("--instructions", action="store_true",
                    help="count the servers' instructions per request under callgrind instead "
                    "(valgrind on the PATH; --rounds servers of each subject, --secs of requests each)")
    ap.add_argument("--only", choices=sorted(SUBJECTS), action="append",
                    help="only this framework's subjects (repeatable; default: all)")
    ap.add_argument("--out", default=None, help="default: bench/HTTP_RESULTS.md (bench/HTTP_INSTRUCTIONS.md)")
    args = ap.parse_args()
    if args.only:
        for fw in [fw for fw in SUBJECTS if fw not in args.only]:
            del SUBJECTS[fw]
    if args.quick:
        args.rounds, args.secs = 2, 1.0
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on the PATH (Debian: apt-get install wrk)")
    if args.instructions:
        count_instructions(args)
        return
    args.out = args.out or str(HERE / "HTTP_RESULTS.md")
    subjects = [(fw, name) for fw, names in SUBJECTS.items() for name, _ in names]
    load_start = os.getloadavg()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT)
        script = f.name
    servers: dict[tuple[str, str], Server] = {}
    results: dict[tuple[str, str], list[float]] = {s: [] for s in subjects}
    try:
        for s in subjects:
            servers[s] = Server(*s)
            load(servers[s], 1, script)  # warm-up
        fws = list(SUBJECTS)
        for r in range(args.rounds):
            # A framework's subjects one after another (in a rotated order), so that each is
            # measured close in time to its framework with no limiter.
            for fw in fws[r % len(fws):] + fws[:r % len(fws)]:
                names = [name for name, _ in SUBJECTS[fw]]
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    results[(fw, name)].append(load(servers[(fw, name)], args.secs, script))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for srv in servers.values():
            srv.stop()
        os.unlink(script)
    load_end = os.getloadavg()

    lines = [
        "## Python web integrations on real servers (`bindings-python/bench/http_bench.py`)",
        "",
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load_start[0]:.1f} at the start and {load_end[0]:.1f} at the end; {time.strftime('%Y-%m-%d')}. "
        f"gunicorn (one `gthread` worker, 4 threads) or uvicorn (one worker; {uvicorn_stack()}) on 127.0.0.1, each loaded by "
        f"`wrk -t1 -c8` for {args.secs:g} s a round, {args.rounds} rounds (a framework's subjects one after "
        f"another, in rotated orders), {CLIENTS} clients by `X-Forwarded-For` behind the proxy fix; limits of "
        f"`{RATE}` that admit every request. Server CPU µs per request: median (range over the rounds); "
        "overhead: each round's figure less the same round's with no limiter, median (range).",
    ]
    for fw, names in SUBJECTS.items():
        base = results[(fw, names[0][0])]

        def over(name: str) -> list[float]:
            # Each round's figure less the same round's with no limiter (measured close to it).
            return [x - b for x, b in zip(results[(fw, name)], base)]

        peer_over = statistics.median(over(names[-1][0]))
        lines += ["", "| subject | server CPU µs per request | overhead µs | overhead / the peer's |",
                  "|---|---:|---:|---:|"]
        for name, label in names:
            v = results[(fw, name)]
            cell = f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"
            if name == names[0][0]:
                lines.append(f"| {label} | {cell} |  |  |")
                continue
            o = over(name)
            ratio = f"{statistics.median(o) / peer_over:.2f}×" if peer_over > 0 else "-"
            lines.append(f"| {label} | {cell} | {statistics.median(o):.1f} ({min(o):.1f}–{max(o):.1f}) | {ratio} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


def uvicorn_stack() -> str:
    """What uvicorn serves with here: httptools and uvloop where installed (``uvicorn[standard]``,
    how it is deployed; requirements-bench.txt pins them), else its pure-Python h11 and asyncio,
    whose checks of each response field cost a server several times more."""
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} and {loop}"


def count_instructions(args: argparse.Namespace) -> None:
    """``--instructions``: each subject's server instructions per request, its servers one
    after another (``--rounds`` of them, each counted over ``--secs`` of requests)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (callgrind) is not on the PATH (Debian: apt-get install valgrind)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT)
        script = f.name
    counts: dict[tuple[str, str], list[float]] = {}
    try:
        for r in range(args.rounds):
            for fw, names in SUBJECTS.items():
                for name, _ in names:
                    counts.setdefault((fw, name), []).append(instructions(fw, name, args.secs, script))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        os.unlink(script)
    lines = [
        "## Python web integrations on real servers, in instructions (`http_bench.py --instructions`)",
        "",
        f"Python {platform.python_version()}, {platform.machine()}; {time.strftime('%Y-%m-%d')}. The apps of "
        "the wall-clock table (behind the proxy fix; "
        f"{CLIENTS} clients by `X-Forwarded-For`; limits of `{RATE}`) served by uvicorn ({uvicorn_stack()}; its WSGI interface for "
        "Flask, Django and DRF: one process, which callgrind follows) under callgrind, warmed up for 3 s, then "
        f"counted over {args.secs:g} s of `wrk -t1 -c1` requests: the server's user-space instructions (its "
        "Python and native code; not the kernel's) per request, which the machine's load moves far less than CPU time. "
        f"{args.rounds} servers of each subject; median (range).",
    ]
    for fw, names in SUBJECTS.items():
        base = statistics.median(counts[(fw, names[0][0])])
        peer_over = statistics.median(counts[(fw, names[-1][0])]) - base
        lines += ["", "| subject | instructions per request | overhead | overhead / the peer's |",
                  "|---|---:|---:|---:|"]
        for name, label in names:
            v = counts[(fw, name)]
            med = statistics.median(v)
            cell = f"{med:,.0f} ({min(v):,.0f}–{max(v):,.0f})"
            if name == names[0][0]:
                lines.append(f"| {label} | {cell} |  |  |")
            else:
                lines.append(f"| {label} | {cell} | {med - base:+,.0f} | {(med - base) / peer_over:.2f}× |")
    text = "\n".join(lines) + "\n"
    Path(args.out or HERE / "HTTP_INSTRUCTIONS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
