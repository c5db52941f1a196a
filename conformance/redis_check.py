#!/usr/bin/env python3
"""Prove the Redis store's Lua scripts exact against a real redis-server.

    python3 conformance/redis_check.py            # every check below; exit 1 on any mismatch
    python3 conformance/redis_check.py --quick    # the same without the extra cases
    python3 conformance/redis_check.py --bench [--rounds N]   # also measure calls/s (SCRIPTS.md)
    python3 conformance/redis_check.py --dump-extra FILE   # write the extra cases as JSON

It starts its own `redis-server` (from PATH, or $REDIS_SERVER) on a free loopback port with
no persistence, loads both forms of the script of core/src/store/redis/scripts/ (FUNCTION LOAD
and EVAL, assembled as SCRIPTS.md specifies), stops the server at the end, and:

1. checks the exact-integer library (int.lua) against Python's integers on random operands
   of 1 to 80 digits, and on the edges around 2^53 and the limb base;
2. runs every case of conformance/vectors.json and conformance/algorithms.json (composite
   cases included) with the test clock in nanoseconds, each case on fresh keys, once by FCALL
   with the fast paths and once by EVALSHA on the exact (limb) path only (the tb and gcra
   cases' plain acquisitions also through the one-bucket functions and their short replies,
   on the fast path and on the exact path), and compares every
   decision field with the vector, each part of a composite with the model below, and after
   every step the key's whole Redis value and its expiry (PEXPIRETIME) with the model's state
   encoding and full-at instant; a rejection, a peek and a cost-0 request must leave the key as
   it was (besides creating an absent bucket, which even a cost-0 request does); every acquire is also sent
   first as the read-only `peek` op, which must agree and write nothing;
3. runs extra cases kept here (readings from 2^52 ns to the century horizon, large reduced
   rates such as 1000003/hour and 1000/7s, counts near 2^62, costs above 2^53, bounded
   leaky-queue reservations: a step's optional `max_wait_ns`), with expectations from the
   models, which the vectors above validate;
4. replays every monotonic case whose buckets start full with Redis expiry simulated (a key is
   deleted once its PEXPIRETIME has passed on the test clock): decisions must not change, so
   expiry never loses state;
5. checks the production clock (TIME): the reading, states and PEXPIREAT on real time, a key
   really expiring, the EVALSHA -> NOSCRIPT -> EVAL and FCALL -> FUNCTION LOAD fallbacks,
   FCALL_RO, and malformed calls.

Standard library only (Python 3.11+). The models below are the Rust core's codecs
(core/src/algorithm.rs, gcra.rs, window.rs, queue.rs, log.rs) in Python integers, with the
store's rules for absent keys; they compute what the in-process engine computes.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from math import gcd
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "core" / "src" / "store" / "redis" / "scripts"
# Both forms of the script are these files' bytes concatenated in this order, then a tail
# (SCRIPTS.md, "Loading").
LIBRARY_FILES = ["int.lua", "token_bucket.lua", "gcra.lua", "window.lua", "queue.lua", "log.lua", "main.lua", "fast.lua"]

EPOCH_S = 1704067200          # production tick 0: 2024-01-01T00:00:00Z
EPOCH_MS = EPOCH_S * 1000
TICK_NS = 1000                # production tick: 1 microsecond
CENTURY_NS = 3_155_760_000_000_000_000
TEST_TPM = 1_000_000          # the test clock counts nanoseconds: 10^6 ticks per ms

NS, US, MS, S = 1, 10**3, 10**6, 10**9
UNITS = {
    "ns": NS, "us": US, "ms": MS,
    "s": S, "sec": S, "second": S, "seconds": S,
    "m": 60 * S, "min": 60 * S, "minute": 60 * S, "minutes": 60 * S,
    "h": 3600 * S, "hr": 3600 * S, "hour": 3600 * S, "hours": 3600 * S,
    "d": 86400 * S, "day": 86400 * S, "days": 86400 * S,
    "w": 7 * 86400 * S, "week": 7 * 86400 * S, "weeks": 7 * 86400 * S,
}
ALIASES = {"leaky_meter": "gcra", "sliding_window_counter": "sliding_window", "shaper": "leaky_queue"}


# ------------------------------------------------------------------------------------------
# A tiny RESP2 client
# ------------------------------------------------------------------------------------------

class RedisError(Exception):
    pass


def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def close(self) -> None:
        self.rf.close()
        self.sock.close()

    def _read(self):
        line = self.rf.readline()
        if not line:
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            return data[:-2].decode()
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._read() for _ in range(n)]
        raise ConnectionError(f"bad reply line {line!r}")

    def pipeline(self, cmds: list) -> list:
        self.sock.sendall(b"".join(_encode(c) for c in cmds))
        return [self._read() for _ in cmds]

    def call(self, *args):
        r = self.pipeline([args])[0]
        if isinstance(r, RedisError):
            raise r
        return r


class Server:
    """redis-server on a free loopback port, no persistence; stopped by stop()."""

    def __init__(self):
        exe = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
        if not exe:
            sys.exit("redis-server not found (Debian: apt-get install -y redis-server; or set REDIS_SERVER)")
        self.dir = tempfile.mkdtemp(prefix="sluicegate-redis-")
        for _ in range(5):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            self.proc = subprocess.Popen(
                [exe, "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--daemonize", "no", "--dir", self.dir, "--logfile", "", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    c = Conn(self.port)
                    if c.call("PING") == "PONG":
                        self.version = c.call("INFO", "server")
                        c.close()
                        return
                except OSError:
                    time.sleep(0.05)
            self.stop()
        sys.exit("could not start redis-server")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                c = Conn(self.port)
                c.sock.sendall(_encode(["SHUTDOWN", "NOSAVE"]))
                c.close()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def script_text() -> str:
    """The EVAL form."""
    return "".join((SCRIPTS / f).read_text() for f in LIBRARY_FILES + ["entry_eval.lua"])


def function_name() -> str:
    return "sluicegate_" + hashlib.sha1(script_text().encode()).hexdigest()[:16]


def library_text() -> str:
    """The FUNCTION LOAD form."""
    name = function_name()
    body = "".join((SCRIPTS / f).read_text() for f in ["head_function.lua"] + LIBRARY_FILES + ["entry_function.lua"])
    return f"#!lua name={name}\n" + body.replace("SLUICEGATE_NAME", name)


class Function:
    """FCALL, loading the library on 'Function not found' (a restarted or new node)."""

    def __init__(self, conn: Conn):
        self.conn, self.text, self.name = conn, library_text(), function_name()
        self.fallbacks = 0

    def load(self) -> None:
        r = self.conn.pipeline([["FUNCTION", "LOAD", self.text]])[0]
        if isinstance(r, RedisError) and "already exists" not in str(r):
            raise r

    def __call__(self, keys: list, args: list, fn: str = "FCALL", suffix: str = ""):
        cmd = [fn, self.name + suffix, len(keys), *keys, *args]
        r = self.conn.pipeline([cmd])[0]
        if isinstance(r, RedisError) and "Function not found" in str(r):
            self.fallbacks += 1
            self.load()
            r = self.conn.pipeline([cmd])[0]
        if isinstance(r, RedisError):
            raise r
        return r


class Script:
    """EVALSHA, falling back to EVAL on NOSCRIPT (which also caches the script again)."""

    def __init__(self, conn: Conn, text: str):
        self.conn, self.text = conn, text
        self.sha = hashlib.sha1(text.encode()).hexdigest()
        self.fallbacks = 0

    def load(self) -> None:
        sha = self.conn.call("SCRIPT", "LOAD", self.text)
        assert sha == self.sha, (sha, self.sha)

    def __call__(self, keys: list, args: list):
        r = self.conn.pipeline([["EVALSHA", self.sha, len(keys), *keys, *args]])[0]
        if isinstance(r, RedisError) and str(r).startswith("NOSCRIPT"):
            self.fallbacks += 1
            r = self.conn.pipeline([["EVAL", self.text, len(keys), *keys, *args]])[0]
        if isinstance(r, RedisError):
            raise r
        return r


# A read of a key's whole value and expiry in one round trip (test helper, not the store's).
SNAPSHOT_LUA = """
local out = {}
for i, k in ipairs(KEYS) do
  local ty = redis.call('TYPE', k).ok
  local v = false
  if ty == 'string' then v = redis.call('GET', k)
  elseif ty == 'list' then v = table.concat(redis.call('LRANGE', k, 0, -1), '|') end
  out[#out + 1] = ty
  out[#out + 1] = v
  out[#out + 1] = redis.call('PEXPIRETIME', k)
end
return out
"""


# ------------------------------------------------------------------------------------------
# Rate strings (SEMANTICS.md, "Rate strings"): only what a valid quota needs.
# ------------------------------------------------------------------------------------------

def parse_quota(text: str) -> dict:
    head, *opts = text.lower().split(";")
    m = re.fullmatch(r"\s*(\d+)\s*(?:/|per)\s*(\d*)\s*([a-z]+)\s*", head)
    if m is None or m.group(3) not in UNITS:
        raise ValueError(f"bad rate {text!r}")
    q = {"k": int(m.group(1)), "P": (int(m.group(2)) if m.group(2) else 1) * UNITS[m.group(3)],
         "mode": "continuous", "algo": "token_bucket", "D": None}
    burst = initial = None
    for o in opts:
        om = re.fullmatch(r"\s*([a-z_]+)\s*=\s*(.*?)\s*", o)
        if om is None:
            raise ValueError(f"bad option {o!r} in {text!r}")
        name, val = om.groups()
        if name == "burst":
            burst = int(val)
        elif name == "initial":
            initial = int(val)
        elif name == "refill":
            q["mode"] = val
        elif name == "algorithm":
            q["algo"] = ALIASES.get(val, val)
        elif name == "max_delay":
            dm = re.fullmatch(r"(\d+)\s*([a-z]+)", val)
            q["D"] = int(dm.group(1)) * UNITS[dm.group(2)]
        else:
            raise ValueError(f"unknown option {name!r}")
    q["b"] = burst if burst is not None else q["k"]
    q["i"] = initial if initial is not None else q["b"]
    if q["D"] is None:
        q["D"] = q["P"]
    return q


# ------------------------------------------------------------------------------------------
# Models: the Rust core's codecs in Python integers. A decision is
# (allowed, limit, remaining, retry_after, reset_after) in ticks.
# ------------------------------------------------------------------------------------------

def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TBm:
    """Continuous token bucket: state F*k (core/src/algorithm.rs, Continuous)."""
    creates_when_fresh = True

    def __init__(self, k, p, b, i):
        self.k, self.p, self.b, self.i = k, p, b, i
        self.bp, self.init = b * p, (b - i) * p

    def spec(self): return f"tb {self.k} {self.p} {self.b} {self.i}"
    def cap(self): return self.b
    def creates(self): return self.i < self.b
    def fresh(self, t): return t * self.k + self.init
    def full_at(self, f): return f, self.k
    def is_full(self, f, t): return f <= t * self.k
    def enc(self, f): return ("string", str(f))

    def decide(self, f, t, c, bound=None):
        tk = t * self.k
        deficit = min(f - tk, self.bp) if f > tk else 0
        avail, need = self.bp - deficit, c * self.p
        if need <= avail:
            new = max(f, tk) + need if c else None
            return (True, self.b, (avail - need) // self.p, 0, cdiv(deficit + need, self.k)), new
        return (False, self.b, avail // self.p, cdiv(need - avail, self.k), cdiv(deficit, self.k)), None

    def refund(self, f, t, c):
        tk = t * self.k
        if f <= tk or c == 0:
            return None
        return max(max(f - min(c, self.b) * self.p, 0), tk)


class GCm(TBm):
    """GCRA in its own terms (core/src/gcra.rs): TAT*k, emission interval T, tolerance tau."""

    def spec(self): return f"gcra {self.k} {self.p} {self.b} {self.i}"

    def decide(self, tat, t, c, bound=None):
        k, T, b, tau = self.k, self.p, self.b, self.bp
        now = t * k
        arrival = max(now, max(tat - tau, 0))
        start = max(tat, arrival)
        new_tat = start + c * T
        backlog, after = start - arrival, new_tat - arrival
        if after <= tau:
            return (True, b, (tau - after) // T, 0, cdiv(after, k)), (new_tat if c else None)
        return (False, b, (tau - backlog) // T, cdiv(after - tau, k), cdiv(backlog, k)), None


class TIm:
    """Interval token bucket: state (n, tau) on the grid o + j*P (Interval)."""

    def __init__(self, k, p, b, i, o):
        self.k, self.p, self.b, self.i, self.o = k, p, b, i, o

    def spec(self): return f"ti {self.k} {self.p} {self.b} {self.i} {self.o}"
    def cap(self): return self.b
    def creates(self): return self.i < self.b
    def index(self, t): return max(0, t - self.o) // self.p
    def boundary(self, n): return self.o + n * self.p
    def fresh(self, t): return (self.index(t), self.i)
    def enc(self, s): return ("string", f"{s[0]} {s[1]}")

    def at(self, s, t):
        n, tau = s
        start = self.boundary(n)
        if t < start + self.p:
            return n, tau, max(t, start)
        pe = self.index(t)
        return pe, min(tau + self.k * (pe - n), self.b), t

    def wait(self, pe, need, te):
        return 0 if need == 0 else self.boundary(pe) + cdiv(need, self.k) * self.p - te

    def decide(self, s, t, c, bound=None):
        pe, tokens, te = self.at(s, t)
        if tokens >= c:
            rem = tokens - c
            return (True, self.b, rem, 0, self.wait(pe, self.b - rem, te)), ((pe, rem) if c else None)
        return (False, self.b, tokens, self.wait(pe, c - tokens, te), self.wait(pe, self.b - tokens, te)), None

    def refund(self, s, t, c):
        pe, tokens, _ = self.at(s, t)
        nt = min(tokens + c, self.b)
        return (pe, nt) if nt != tokens else None

    def full_at(self, s):
        n, tau = s
        if tau >= self.b:
            return self.boundary(n), 1
        return self.boundary(n + cdiv(self.b - tau, self.k)), 1

    def is_full(self, s, t): return self.at(s, t)[1] == self.b


class FWm:
    """Fixed window: state (j, used) (window.rs)."""

    def __init__(self, n, w): self.n, self.w = n, w
    def spec(self): return f"fw {self.n} {self.w}"
    def cap(self): return self.n
    def creates(self): return False
    def fresh(self, t): return (t // self.w, 0)
    def enc(self, s): return ("string", f"{s[0]} {s[1]}")

    def at(self, s, t):
        j, used = s
        index = t // self.w
        if index >= j:
            return index, (used if index == j else 0), t
        return j, used, j * self.w

    def decide(self, s, t, c, bound=None):
        index, used, te = self.at(s, t)
        to_next = (index + 1) * self.w - te
        if used + c <= self.n:
            u2 = used + c
            return (True, self.n, self.n - u2, 0, 0 if u2 == 0 else to_next), ((index, u2) if c else None)
        return (False, self.n, self.n - used, to_next, to_next), None

    def refund(self, s, t, c):
        index, used, _ = self.at(s, t)
        left = used - min(used, c)
        return (index, left) if left != used else None

    def full_at(self, s): return ((s[0] + 1) * self.w if s[1] else s[0] * self.w), 1
    def is_full(self, s, t): return t // self.w >= s[0] and self.at(s, t)[1] == 0


class SWm:
    """Sliding window counter: state (j, prev, curr) (window.rs)."""

    def __init__(self, n, w): self.n, self.w = n, w
    def spec(self): return f"sw {self.n} {self.w}"
    def cap(self): return self.n
    def creates(self): return False
    def fresh(self, t): return (t // self.w, 0, 0)
    def enc(self, s): return ("string", f"{s[0]} {s[1]} {s[2]}")

    def view(self, s, t):
        j, sp, sc = s
        index = t // self.w
        te = t
        if index < j:
            index, te = j, j * self.w
        prev, curr = {0: (sp, sc), 1: (sc, 0)}.get(index - j, (0, 0))
        return index, prev, curr, te - index * self.w, te

    def decide(self, s, t, c, bound=None):
        n, w = self.n, self.w
        index, prev, curr, e, te = self.view(s, t)

        def remaining(cu):
            return max(0, n - cu - cdiv(prev * (w - e), w))

        def reset(pv, cu):
            ends = 2 if cu > 0 else (1 if pv > 0 else 0)
            return 0 if ends == 0 else (index + ends) * w - te

        if prev * (w - e) + (curr + c) * w <= n * w:
            cu = curr + c
            return (True, n, remaining(cu), 0, reset(prev, cu)), ((index, prev, cu) if c else None)
        if curr + c <= n:
            e2 = w - min((n - curr - c) * w // prev, w)
            retry = index * w + e2 - te
        else:
            e2 = w - min((n - c) * w // curr, w)
            retry = (index + 1) * w + e2 - te
        return (False, n, remaining(curr), retry, reset(prev, curr)), None

    def refund(self, s, t, c):
        index, prev, curr, _, _ = self.view(s, t)
        cu = curr - min(curr, c)
        return (index, prev, cu) if cu != curr else None

    def full_at(self, s):
        j, prev, curr = s
        return (j + (2 if curr else 1 if prev else 0)) * self.w, 1

    def is_full(self, s, t):
        _, prev, curr, _, _ = self.view(s, t)
        return t // self.w >= s[0] and prev == 0 and curr == 0


class LQm:
    """Leaky queue: state (L + Q/r)*k (queue.rs)."""

    def __init__(self, k, p, d):
        self.k, self.p, self.d = k, p, d
        self.dk = d * k
        self.q = 1 + self.dk // p
        self.qp = self.q * p

    def spec(self): return f"lq {self.k} {self.p} {self.d}"
    def cap(self): return self.q
    def creates(self): return False
    def fresh(self, t): return t * self.k
    def enc(self, s): return ("string", str(s))
    def full_at(self, s): return s, self.k
    def is_full(self, s, t): return s <= t * self.k

    def _decision(self, allowed, s, te, retry):
        ahead = max(s - te, 0)
        room = max(self.dk + self.qp - max(ahead, self.qp - self.p), 0)
        return (allowed, self.q, room // self.p, cdiv(retry, self.k), cdiv(ahead, self.k))

    def decide(self, s, t, c, bound=None):
        limit = self.dk if bound is None else min(bound * self.k, self.dk)
        now = t * self.k
        te = max(now, max(s - (self.qp + self.dk), 0))
        x = max(s - te, 0)
        wait = max(x + c * self.p - self.qp, 0)
        if c == 0:
            return self._decision(True, s, te, 0), None
        if wait <= limit:
            s2 = te + self.qp + wait
            return self._decision(True, s2, te, wait), s2
        return self._decision(False, s, te, wait - limit), None

    def refund(self, s, t, c):
        now = t * self.k
        if s <= now or c == 0:
            return None
        return max(max(s - min(c, self.q) * self.p, 0), now)


class SLm:
    """Sliding log: state (last, total, runs, base) with runs ((ts, units), ...) oldest first
    (log.rs); base, the units of the runs dropped so far, is the store's running count."""

    def __init__(self, n, w): self.n, self.w = n, w
    def spec(self): return f"sl {self.n} {self.w}"
    def cap(self): return self.n
    def creates(self): return False
    def fresh(self, t): return (t, 0, (), 0)

    def enc(self, s):
        last, _, runs, base = s
        out, cum = [f"{last} {base}"], base
        for ts, u in runs:
            cum += u
            out.append(f"{ts} {cum}")
        return ("list", "|".join(out))

    def expired(self, runs, te):
        units = 0
        for i, (ts, u) in enumerate(runs):
            if ts + self.w > te:
                return i, units
            units += u
        return len(runs), units

    def newest_expiry(self, runs, te):
        return max(runs[-1][0] + self.w - te, 0) if runs else 0

    def decide(self, s, t, c, bound=None):
        last, total, runs, base = s
        te = max(t, last)
        gone_runs, gone = self.expired(runs, te)
        live = total - gone
        if live + c <= self.n:
            after = live + c
            reset = 0 if after == 0 else (self.w if c > 0 else self.newest_expiry(runs, te))
            new = None
            if c > 0:
                r = list(runs[gone_runs:])
                if r and r[-1][0] == te:
                    r[-1] = (te, r[-1][1] + c)
                else:
                    r.append((te, c))
                new = (te, after, tuple(r), base + gone)
            return (True, self.n, self.n - after, 0, reset), new
        need = live + c - self.n
        expiry = te
        for ts, u in runs[gone_runs:]:
            if u >= need:
                expiry = ts
                break
            need -= u
        return (False, self.n, self.n - live, expiry + self.w - te, self.newest_expiry(runs, te)), None

    def refund(self, s, t, c):
        last, total, runs, base = s
        te = max(t, last)
        live = total - self.expired(runs, te)[1]
        left = min(c, live)
        if left == 0:
            return None
        r = list(runs)
        total -= left
        while left > 0:
            ts, u = r[-1]
            if u > left:
                r[-1] = (ts, u - left)
                break
            left -= u
            r.pop()
        return (last, total, tuple(r), base)

    def full_at(self, s):
        last, _, runs, _ = s
        return (max(last, runs[-1][0] + self.w) if runs else last), 1

    def is_full(self, s, t):
        return t >= s[0] and self.newest_expiry(s[2], t) == 0


def make_model(q: dict, origin: int, tick: int = 1):
    """The model (and so the spec) of a quota, in ticks of `tick` ns; None if a length is not
    a whole number of ticks (the store refuses such quotas, SCRIPTS.md "Refused quotas")."""
    algo, k, P = q["algo"], q["k"], q["P"]
    if algo in ("token_bucket", "gcra", "leaky_queue") and not (algo == "token_bucket" and q["mode"] == "interval"):
        g = gcd(k * tick, P)
        kk, pp = k * tick // g, P // g          # the rate k/P per ns is kk/pp per tick
        if algo == "token_bucket":
            return TBm(kk, pp, q["b"], q["i"])
        if algo == "gcra":
            return GCm(kk, pp, q["b"], q["i"])
        if q["D"] % tick:
            return None
        return LQm(kk, pp, q["D"] // tick)
    if P % tick or origin % tick:
        return None
    if algo == "token_bucket":
        return TIm(k, P // tick, q["b"], q["i"], origin // tick)
    return {"fixed_window": FWm, "sliding_window": SWm, "sliding_log": SLm}[algo](k, P // tick)


# ------------------------------------------------------------------------------------------
# The store's protocol over models: what the script must do, step for step
# ------------------------------------------------------------------------------------------

def model_request(models, states, t, c, op, bound=None):
    """Applies one call to `states` (a list: a state or None for an absent key) like the
    script must; returns (reply, written) where reply is ('cap', index, capacity), ('ok',) for
    a refund, or ('dec', combined, [per part]), and written is the set of parts written."""
    n = len(models)
    written = set()
    if op == "refund":
        for i, m in enumerate(models):
            if states[i] is not None:
                new = m.refund(states[i], t, c)
                if new is not None:
                    states[i] = new
                    written.add(i)
        return ("ok",), written
    for i, m in enumerate(models):
        if c > m.cap():
            return ("cap", i + 1, m.cap()), written
    cur = [s if s is not None else m.fresh(t) for m, s in zip(models, states)]
    ds, news, writes, j = [None] * n, [None] * n, {}, None
    for i, m in enumerate(models):
        d, new = m.decide(cur[i], t, c, bound)
        ds[i] = d
        if not d[0]:
            j = i
            break
        news[i] = new
    if j is None:
        writes = {i: s for i, s in enumerate(news) if s is not None}
    else:
        for i in range(j):
            m, view = models[i], cur[i]
            if news[i] is not None:
                fin = m.refund(news[i], t, c)
                fin = news[i] if fin is None else fin
                if m.enc(fin) != m.enc(cur[i]):
                    writes[i] = fin
                    view = fin
            ds[i] = m.decide(view, t, 0, bound)[0]
        for i in range(j + 1, n):
            ds[i] = models[i].decide(cur[i], t, c, bound)[0]
    if op == "acquire":
        for i, m in enumerate(models):
            if states[i] is None and i not in writes and (m.creates() or not isinstance(m, SLm)):
                writes[i] = cur[i]
        for i, s in writes.items():
            states[i] = s
            written.add(i)
    tight = ds[0]
    for d in ds[1:]:
        if d[2] < tight[2]:
            tight = d
    combined = (j is None, tight[1], tight[2], max(d[3] for d in ds), max(d[4] for d in ds))
    return ("dec", combined, ds), written


def parse_reply(r) -> tuple:
    if r[0] == 1:
        return ("cap", r[2], int(r[3]))
    if len(r) == 2:
        return ("ok",)
    combined = (r[2] == 1, int(r[3]), int(r[4]), int(r[5]), int(r[6]))
    if len(r) == 7:
        return ("dec", combined, [combined])      # one bucket: no per-part figures
    parts = []
    for i in range(7, len(r), 5):
        parts.append((r[i] == 1, int(r[i + 1]), int(r[i + 2]), int(r[i + 3]), int(r[i + 4])))
    return ("dec", combined, parts)


def is_figure(x) -> bool:
    """An integer reply, or a bulk string of decimal digits (a figure at or above 2^53)."""
    if isinstance(x, int):
        return x >= 0 and not isinstance(x, bool)
    return isinstance(x, str) and x.isascii() and x.isdigit()


def parse_short(r, limit: int) -> tuple:
    """A one-bucket function's reply (SCRIPTS.md, "Replies") to a bucket of capacity `limit`,
    as parse_reply reads the general call's: [capacity], [remaining, reset_after] (admitted),
    [remaining, retry_after, reset_after] (rejected); anything else fails the check."""
    assert isinstance(r, list) and 1 <= len(r) <= 3 and all(map(is_figure, r)), f"not a short reply: {r!r}"
    f = [int(x) for x in r]
    # An integer reply below 2^53, else a string (SCRIPTS.md, "Replies").
    assert all((x < 2**53) == isinstance(y, int) for x, y in zip(f, r)), f"a figure in the wrong form: {r!r}"
    if len(f) == 1:
        return ("cap", 1, f[0])
    d = (True, limit, f[0], 0, f[1]) if len(f) == 2 else (False, limit, *f)
    return ("dec", d, [d])


def as_expect(d) -> dict:
    return {"allowed": d[0], "limit": d[1], "remaining": d[2], "retry_after_ns": d[3], "reset_after_ns": d[4]}


# ------------------------------------------------------------------------------------------
# Running cases against the server
# ------------------------------------------------------------------------------------------

def one_bucket(case: dict) -> bool:
    """Whether the case's acquisitions can go through a one-bucket function (NAME_tb, NAME_gcra)."""
    if "quotas" in case and len(case["quotas"]) != 1:
        return False
    q = case.get("quota") or case["quotas"][0]
    return make_model(parse_quota(q), case["start_ns"]).spec().split()[0] in ("tb", "gcra")


class Checker:
    def __init__(self, conn: Conn, mode: str, exact: bool):
        self.conn, self.exact = conn, exact
        # Mode "one": every plain acquisition (one bucket, no bound) goes through the one-bucket
        # function of its algorithm (fast.lua), everything else through NAME; "one-exact" the
        # same on the exact path only, so that fast.lua hands every call to run and shortens
        # run's reply.
        self.one = mode in ("one", "one-exact")
        if mode in ("function", "one", "one-exact"):
            self.script = Function(conn)
        else:
            self.script = Script(conn, script_text())
        self.script.load()
        self.snap = Script(conn, SNAPSHOT_LUA)
        self.snap.load()
        # Test expiries are PXAT base + ceil(full_at / 10^6): a day ahead of real time, so no
        # key expires during the run unless a test deletes it (the expiry simulation).
        self.base = int(time.time() * 1000) + 86_400_000
        self.failures: list[str] = []
        self.case_no = 0
        self.stats = {"cases": 0, "steps": 0, "script_calls": 0, "decisions_compared": 0,
                      "rejections_unchanged": 0, "rejections_created": 0, "peeks_unchanged": 0,
                      "states_compared": 0, "expiries_compared": 0, "simulated_expiries": 0,
                      "model_vs_vector_mismatches": 0, "bounded_reservations": 0, "one_bucket_calls": 0}

    def clock(self, t: int) -> str:
        return f"{t} {TEST_TPM} {self.base}{' exact' if self.exact else ''}"

    def snapshot(self, keys: list) -> list:
        r = self.snap(keys, [])
        return [(r[3 * i], r[3 * i + 1], r[3 * i + 2]) for i in range(len(keys))]

    def expected(self, m, s, wrote_at: int = 0) -> tuple:
        if s is None:
            return ("none", None, -2)
        typ, val = m.enc(s)
        num, den = m.full_at(s)
        # Never before the millisecond of the reading that wrote the state (main.lua).
        return (typ, val, self.base + max(cdiv(num, den * TEST_TPM), cdiv(wrote_at, TEST_TPM)))

    def run_case(self, case: dict, simulate_expiry: bool = False) -> bool:
        """Plays a vectors-format case; True if it matched throughout."""
        self.case_no += 1
        self.stats["cases"] += 1
        name = case["name"] + (" (expiry simulated)" if simulate_expiry else "")
        quotas = case.get("quotas") or [case["quota"]]
        start = case["start_ns"]
        buckets: dict = {}

        def bucket(key):
            if key not in buckets:
                models = [make_model(parse_quota(q), start) for q in quotas]
                tag = f"sg:{{c{self.case_no}}}:{key if key is not None else '-'}"
                buckets[key] = ([f"{tag}:{i}" for i in range(len(models))], models, [None] * len(models),
                                [0] * len(models))
            return buckets[key]

        try:
            if not case["keyed"]:
                # The bucket is created at start_ns (conformance/README.md): a cost-0 request.
                self.step(name, -1, bucket(None), start, "acquire", 0, None, False)
            for n, s in enumerate(case["steps"]):
                self.step(name, n, bucket(s.get("key")), s["t_ns"], s["op"], s["cost"], s.get("expect"),
                          simulate_expiry, s.get("max_wait_ns"))
        except AssertionError as e:
            self.failures.append(f"{name}: {e}")
            return False
        return True

    def step(self, name, n, b, t, op, c, expect, simulate, bound=None):
        keys, models, states, wrote = b
        self.stats["steps"] += 1
        self.stats["bounded_reservations"] += bound is not None
        where = f"step {n} (t={t}, {op} {c}{'' if bound is None else f' within {bound}'})"
        if simulate:
            for i, m in enumerate(models):
                if states[i] is not None:
                    num, den = m.full_at(states[i])
                    at = max(cdiv(num, den * TEST_TPM), cdiv(wrote[i], TEST_TPM))
                    if t // TEST_TPM > at:   # Redis: expired when now_ms > at
                        self.conn.call("DEL", keys[i])
                        states[i] = None
                        self.stats["simulated_expiries"] += 1
        specs = [m.spec() for m in models]
        before = self.snapshot(keys)

        def call(o):
            self.stats["script_calls"] += 1
            b = "" if bound is None else bound
            if self.one and o == "acquire" and bound is None and len(specs) == 1:
                algo, *quota = specs[0].split()
                if algo in ("tb", "gcra"):
                    self.stats["one_bucket_calls"] += 1
                    r = self.script(keys, [c, *quota, self.clock(t)], suffix="_" + algo)
                    return parse_short(r, models[0].cap())
            return parse_reply(self.script(keys, [o, c, b, self.clock(t), *specs]))

        if op == "acquire":
            want, _ = model_request(models, list(states), t, c, "peek", bound)
            got = call("peek")
            assert got == want, f"{where}: peek gave {got}, the model {want}"
            assert self.snapshot(keys) == before, f"{where}: peek wrote"
            self.stats["peeks_unchanged"] += 1
        want, written = model_request(models, states, t, c, op, bound)
        for i in written:
            wrote[i] = t
        got = call(op)
        assert got == want, f"{where}: {op} gave {got}, the model {want}"
        if expect is not None:
            self.stats["decisions_compared"] += 1
            mine = {"error": "insufficient_capacity"} if got[0] == "cap" else as_expect(got[1])
            if "error" not in expect and (want[0] != "dec" or as_expect(want[1]) != expect):
                self.stats["model_vs_vector_mismatches"] += 1
            assert mine == expect, f"{where}: got {mine}, the vector expects {expect}"
        after = self.snapshot(keys)
        for i, m in enumerate(models):
            self.stats["states_compared"] += 1
            self.stats["expiries_compared"] += after[i][0] != "none"
            exp = self.expected(m, states[i], wrote[i])
            assert after[i] == exp, f"{where}: key {keys[i]} holds {after[i]}, the model {exp}"
            if states[i] is not None:
                # The expiry instant is when the bucket is full, and not a tick earlier.
                num, den = m.full_at(states[i])
                full = cdiv(num, den)
                assert m.is_full(states[i], full), f"{where}: not full at its full_at"
                if not m.is_full(states[i], t):
                    assert not m.is_full(states[i], full - 1), f"{where}: full before full_at"
        if op == "acquire" and got[0] != "ok":
            rejected = got[0] == "cap" or not got[1][0]
            if rejected or c == 0:
                for i in range(len(models)):
                    if i in written:
                        assert before[i][0] == "none" or (got[0] == "dec" and not got[1][0]), where
                        continue
                    assert after[i] == before[i], f"{where}: a {'rejection' if rejected else 'cost-0 request'} wrote"
                if rejected:
                    key = "rejections_created" if written else "rejections_unchanged"
                    self.stats[key] += 1


def load_cases(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    if doc.get("format") != 1:
        raise SystemExit(f"{path}: unknown format {doc.get('format')!r}")
    return doc["cases"] + doc.get("composite_cases", [])


def monotonic(case: dict) -> bool:
    ts = [case["start_ns"]] + [s["t_ns"] for s in case["steps"]]
    return all(a <= b for a, b in zip(ts, ts[1:]))


def starts_full(case: dict) -> bool:
    return all(not make_model(parse_quota(q), case["start_ns"]).creates()
               for q in case.get("quotas") or [case["quota"]])


# ------------------------------------------------------------------------------------------
# 1. The exact-integer library against Python's integers
# ------------------------------------------------------------------------------------------

INT_TEST_LUA = """
local out = {}
local function canon(x)
  if type(x) == 'number' then return S(x) .. ':n' end
  return S(x) .. ':t'
end
for i = 1, #ARGV, 3 do
  local op, a, b = ARGV[i], N(ARGV[i + 1]), N(ARGV[i + 2])
  local r
  if op == 'add' then r = canon(add(a, b))
  elseif op == 'sub' then r = canon(sub(a, b))
  elseif op == 'ssub' then r = canon(ssub(a, b))
  elseif op == 'mul' then r = canon(mul(a, b))
  elseif op == 'divmod' then local q, m = divmod(a, b); r = canon(q) .. ' ' .. canon(m)
  elseif op == 'cdiv' then r = canon(cdiv(a, b))
  elseif op == 'cmp' then r = tostring(cmp(a, b))
  elseif op == 'id' then r = canon(a)
  end
  out[#out + 1] = r
end
return out
"""


def int_operand(rng: random.Random) -> int:
    edges = [0, 1, 2, 3, 7, 9_999_999, 10**7, 10**7 + 1, 2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2,
             10**14, 10**14 - 1, 10**21, 10**21 - 1, 10**21 + 1, 2**63 - 1, 2**64 - 1, 2**64,
             2**127, 2**128 - 1, 10**35 - 1, 9_007_199_254_740_993 * 10**7, 10**28 * 9_999_999]
    r = rng.random()
    if r < 0.25:
        return max(0, rng.choice(edges) + rng.choice([-1, 0, 0, 1]))
    if r < 0.35:
        return rng.getrandbits(rng.randint(50, 56))
    digits = rng.choice([1, 3, 7, 8, 14, 15, 16, 17, 20, 25, 30, 39, 40, 60, 80])
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits)


def check_int_library(conn: Conn, failures: list, rounds: int = 40, per_round: int = 500) -> int:
    text = (SCRIPTS / "int.lua").read_text() + INT_TEST_LUA
    script = Script(conn, text)
    rng = random.Random(20240101)
    done = 0
    for _ in range(rounds):
        ops = []
        for _ in range(per_round):
            a, b = max(int_operand(rng), 0), max(int_operand(rng), 0)
            op = rng.choice(["add", "sub", "ssub", "mul", "divmod", "divmod", "cdiv", "cmp", "id"])
            if op == "sub" and a < b:
                a, b = b, a
            if op in ("divmod", "cdiv"):
                if b == 0:
                    b = 1
                if rng.random() < 0.3:  # quotients near an integer, small divisors
                    b = max(1, b // rng.choice([1, 10**7, 2**53, 10**20]))
                    a = b * rng.getrandbits(rng.choice([3, 30, 53, 64, 90])) + rng.choice([0, 1, b - 1, b // 2])
            ops.append((op, a, b))
        got = script([], [x for op in ops for x in (op[0], op[1], op[2])])
        for (op, a, b), g in zip(ops, got):
            done += 1

            def c(x):
                return f"{x}:{'n' if x < 2**53 else 't'}"

            want = {"add": lambda: c(a + b), "sub": lambda: c(a - b), "ssub": lambda: c(max(a - b, 0)),
                    "mul": lambda: c(a * b), "divmod": lambda: f"{c(a // b)} {c(a % b)}",
                    "cdiv": lambda: c(cdiv(a, b)), "cmp": lambda: str((a > b) - (a < b)),
                    "id": lambda: c(a)}[op]()
            if g != want:
                failures.append(f"int.lua: {op}({a}, {b}) gave {g}, expected {want}")
                if len(failures) > 20:
                    return done
    return done


# ------------------------------------------------------------------------------------------
# 3. Extra cases: large clocks and large reduced rates, expectations from the models
# ------------------------------------------------------------------------------------------

TWO52, TWO53 = 2**52, 2**53

EXTRA_QUOTAS = [
    "1000003/hour", "1000003/hour; burst=2000000; initial=5", "1000/7s", "1000/7s; burst=3; initial=0",
    "7/ms; burst=20", "999999937/d; burst=100000", "3/s; burst=5; initial=0", "1/ns; burst=4",
    "2 per 3 minutes", "1000000007/s; burst=9000000000",
    "5/2s; refill=interval", "1000003/hour; refill=interval; burst=3000000; initial=7",
    "7/ms; refill=interval; burst=10; initial=0", "1000/7s; refill=interval",
    "1000003/hour; algorithm=gcra", "1000/7s; burst=3; initial=1; algorithm=gcra",
    "1000000007/s; burst=9000000000; algorithm=gcra",
    "1000003/hour; algorithm=fixed_window", "1000/7s; algorithm=fixed_window", "3/ns; algorithm=fixed_window",
    "4611686018427387903/ms; algorithm=fixed_window",
    "1000003/hour; algorithm=sliding_window", "1000/7s; algorithm=sliding_window",
    "3/ns; algorithm=sliding_window", "1099511627791/s; algorithm=sliding_window",
    "20/7s; algorithm=sliding_log", "1000/7s; algorithm=sliding_log", "3/ns; algorithm=sliding_log",
    "64/hour; algorithm=sliding_log",
    "1000003/hour; algorithm=leaky_queue; max_delay=10s", "1000/7s; algorithm=leaky_queue; max_delay=700ms",
    "7/ms; algorithm=leaky_queue; max_delay=0ns", "1000000007/s; algorithm=leaky_queue; max_delay=4s",
]

EXTRA_COMPOSITES = [
    ["1000003/hour", "1000/7s; algorithm=sliding_window", "20/7s; algorithm=sliding_log"],
    ["5/2s; refill=interval", "1000003/hour; algorithm=leaky_queue; max_delay=10s",
     "1000003/hour; algorithm=fixed_window"],
    ["1000000007/s; burst=9000000000; algorithm=gcra", "4611686018427387903/ms; algorithm=fixed_window"],
    ["3/s; burst=5; initial=0", "7/ms; burst=20", "64/hour; algorithm=sliding_log"],
]


def _scale(q: dict) -> int:
    """A characteristic time of the quota in ns: its period, at least a few tokens' worth."""
    return max(q["P"], 3 * q["P"] // max(q["k"], 1), q["D"] if q["algo"] == "leaky_queue" else 1, 2)


def walk(rng: random.Random, quotas: list, start: int, n: int, keys=None) -> list:
    qs = [parse_quota(q) for q in quotas]
    models = [make_model(q, start) for q in qs]
    cap = min(m.cap() for m in models)
    scale = min(_scale(q) for q in qs)
    token = max(1, min(q["P"] // q["k"] for q in qs))
    steps, t, seen, first = [], start, set(), {}
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            dt = 0
        elif r < 0.3:
            dt = rng.choice([1, token - 1, token, token + 1])
        elif r < 0.55:
            dt = rng.randrange(1, token + 2)
        elif r < 0.85:
            dt = rng.randrange(1, scale + 2)
        else:
            dt = rng.randrange(scale, 4 * scale + 2)
        t = t + max(dt, 0)
        if rng.random() < 0.08:                       # a reading from the past (never before start)
            t_step = max(start, t - rng.randrange(1, scale + 2))
        else:
            t_step = t
        t_step = min(t_step, CENTURY_NS)
        key = rng.choice(keys) if keys else None
        if keys:
            # Never earlier than the key's first request: an absent key whose first request
            # leaves it full writes nothing, so the store does not clamp such a reading as the
            # in-process keyed limiter does (SCRIPTS.md, "Absent keys").
            t_step = max(t_step, first.setdefault(key, t_step))
        r = rng.random()
        if r < 0.12:
            cost = rng.randint(1, cap)
            s = {"t_ns": t_step, "op": "refund", "cost": cost}
        else:
            if r < 0.25:
                cost = 0
            elif r < 0.6:
                cost = 1
            elif r < 0.63 and (not keys or key in seen):
                cost = cap + 1                          # insufficient capacity
            else:
                cost = rng.randint(1, cap) if rng.random() < 0.5 else rng.randint(1, max(1, cap // 8))
            s = {"t_ns": t_step, "op": "acquire", "cost": cost}
            if len(qs) == 1 and not keys and qs[0]["algo"] == "leaky_queue" and rng.random() < 0.4:
                s["max_wait_ns"] = rng.choice([0, 1, rng.randrange(qs[0]["D"] + 2), qs[0]["D"] * 2 + 1])
        if keys:
            s["key"] = key
            if key not in seen and s["op"] == "refund":
                s = {"t_ns": t_step, "op": "acquire", "cost": 1, "key": key}
            seen.add(key)
        steps.append(s)
    return steps


def log_walk(rng: random.Random, quota: str, start: int, n: int) -> list:
    """Mostly unit requests a little apart, so that a sliding log holds hundreds of runs; now
    and then a large request (its wait found deep in the log), a refund, or a gap that expires
    part of the log."""
    q = parse_quota(quota)
    N, W = q["k"], q["P"]
    steps, t = [], start
    for _ in range(n):
        r = rng.random()
        if r < 0.03:
            t += rng.randrange(W // 4, W)
        else:
            t += rng.randrange(1, max(2, 2 * W // N))
        if r < 0.88:
            s = {"t_ns": t, "op": "acquire", "cost": 1}
        elif r < 0.91:
            s = {"t_ns": t, "op": "acquire", "cost": rng.randint(2, N)}
        elif r < 0.94:
            s = {"t_ns": t, "op": "refund", "cost": rng.randint(1, N // 10)}
        else:
            s = {"t_ns": max(start, t - rng.randrange(W)), "op": "acquire", "cost": rng.choice([0, 1])}
        steps.append(s)
    return steps


def expect_steps(quotas: list, start: int, keyed: bool, steps: list) -> list:
    """The model's decisions for a case (vectors format), the store's creation rule included."""
    buckets = {}

    def bucket(key):
        if key not in buckets:
            models = [make_model(parse_quota(q), start) for q in quotas]
            buckets[key] = (models, [None] * len(models))
        return buckets[key]

    if not keyed:
        models, states = bucket(None)
        model_request(models, states, start, 0, "acquire")
    out = []
    for s in steps:
        models, states = bucket(s.get("key"))
        reply, _ = model_request(models, states, s["t_ns"], s["cost"], s["op"], s.get("max_wait_ns"))
        s = dict(s)
        if s["op"] == "acquire":
            s["expect"] = {"error": "insufficient_capacity"} if reply[0] == "cap" else as_expect(reply[1])
        out.append(s)
    return out


def extra_cases() -> list[dict]:
    rng = random.Random(53)
    cases = []

    def add(name, quotas, start, keyed, steps):
        c = {"name": name, "description": "Extra case of conformance/redis_check.py.", "keyed": keyed,
             "start_ns": start, "steps": expect_steps(quotas, start, keyed, steps)}
        if len(quotas) == 1:
            c["quota"] = quotas[0]
        else:
            c["quotas"] = quotas
        cases.append(c)

    for qi, quota in enumerate(EXTRA_QUOTAS):
        q = parse_quota(quota)
        span = 40 * 4 * _scale(q) + 10
        m = make_model(q, 0)
        starts = [TWO52 + rng.randrange(10**6), TWO53 - _scale(q) - rng.randrange(1000),
                  10**18 + rng.randrange(10**9), CENTURY_NS - span]
        k = getattr(m, "k", 1)
        if k > 1 and TWO53 // k > _scale(q):         # scaled instants t*k cross 2^53 in the walk
            starts.append(TWO53 // k - _scale(q))
        for si, start in enumerate(starts):
            add(f"extra_{qi}_{si}", [quota], start, False, walk(rng, [quota], start, 40))
        start = 100 * TWO53 + rng.randrange(10**12)
        add(f"extra_{qi}_keyed", [quota], start, True, walk(rng, [quota], start, 45, ["a", "b", "c"]))
    # Long logs: hundreds of runs, so that the binary searches over runs go deep.
    for li, (quota, start) in enumerate([("1000/7s; algorithm=sliding_log", TWO52 + 99),
                                         ("500/s; algorithm=sliding_log", 10**18 + 3),
                                         ("300/min; algorithm=sliding_log", TWO53 - 10**9)]):
        add(f"extra_long_log_{li}", [quota], start, False, log_walk(rng, quota, start, 700))
    for ci, quotas in enumerate(EXTRA_COMPOSITES):
        span = 40 * 4 * max(_scale(parse_quota(q)) for q in quotas) + 10
        for si, start in enumerate([TWO52 + 12345, TWO53 - 777, 2 * 10**18 + 1, CENTURY_NS - span]):
            add(f"extra_composite_{ci}_{si}", quotas, start, False, walk(rng, quotas, start, 40))
    return cases


# ------------------------------------------------------------------------------------------
# 5. The production clock (TIME), real expiry, and the NOSCRIPT fallback
# ------------------------------------------------------------------------------------------

def check_production(conn: Conn, failures: list, mode: str) -> int:
    script = Function(conn) if mode == "function" else Script(conn, script_text())
    checks = 0

    def ok(cond, what):
        nonlocal checks
        checks += 1
        if not cond:
            failures.append(f"production [{mode}]: {what}")

    def prod(keys, op, cost, quotas):
        models = [make_model(parse_quota(q), 0, TICK_NS) for q in quotas]
        return models, script(keys, [op, cost, "", "", *[m.spec() for m in models]])

    # A reading of TIME in microseconds since 2024-01-01, and PEXPIREAT on real time.
    key = "sg:{prod}:tb"
    wall = (time.time() - EPOCH_S) * 1e6
    # Quotas slow enough that no refill between two calls matters on a loaded machine.
    (m,), r = prod([key], "acquire", 3, ["10/min"])
    t = int(r[1])
    ok(abs(t - wall) < 5e6, f"reading {t} far from the wall clock {wall:.0f}")
    ok(parse_reply(r)[1] == (True, 10, 7, 0, 18_000_000), f"10/min, 3 from a fresh bucket: {r}")
    ok(conn.call("GET", key) == str(t * m.k + 3 * m.p), "state")
    ok(conn.call("PEXPIRETIME", key) == EPOCH_MS + cdiv(t * m.k + 3 * m.p, m.k * 1000), "PEXPIREAT")
    ok(conn.call("PTTL", key) <= 18_001, "PTTL within the 18 s until full")

    # Rejections write nothing, on real time too.
    before = (conn.call("GET", key), conn.call("PEXPIRETIME", key))
    (m,), r = prod([key], "acquire", 10, ["10/min"])
    ok(r[2] == 0 and (conn.call("GET", key), conn.call("PEXPIRETIME", key)) == before, "rejection wrote")

    # A key really goes when its bucket is full: 1000/s, 300 taken, full 300 ms later (a
    # margin for the two round trips that see it first; 30 ms was too little under load).
    key = "sg:{prod}:short"
    prod([key], "acquire", 300, ["1000/s"])
    ok(conn.call("EXISTS", key) == 1 and 0 < conn.call("PTTL", key) <= 301, "short expiry set")
    time.sleep(0.5)
    ok(conn.call("EXISTS", key) == 0, "key still there after its bucket filled")

    # A refund that fills the bucket sets the expiry to the current millisecond (rounded up):
    # the key goes within 2 ms.
    key = "sg:{prod}:refund"
    prod([key], "acquire", 2, ["10/min"])
    ok(conn.call("EXISTS", key) == 1, "refund key created")
    (m,), r = prod([key], "refund", 5, ["10/min"])
    ok(conn.call("PEXPIRETIME", key) in (-2, EPOCH_MS + cdiv(int(r[1]), 1000)), "refund to full: expiry")
    time.sleep(0.01)
    ok(conn.call("EXISTS", key) == 0, "a refund to full left the key")

    # Every algorithm on real time: state written, expiry = the instant it is full.
    for quota in ["5/s; algorithm=gcra", "5/s; refill=interval", "5/s; algorithm=fixed_window",
                  "5/s; algorithm=sliding_window", "5/s; algorithm=sliding_log",
                  "5/s; algorithm=leaky_queue; max_delay=1s"]:
        key = "sg:{prod}:" + quota.replace(" ", "")
        (m,), r = prod([key], "acquire", 2, [quota])
        t = int(r[1])
        state, _ = model_request([m], [None], t, 2, "acquire")
        ok(parse_reply(r) == state, f"{quota}: {r} vs the model {state}")
        st = [None]
        model_request([m], st, t, 2, "acquire")
        typ, val = m.enc(st[0])
        got = conn.call("GET", key) if typ == "string" else "|".join(conn.call("LRANGE", key, 0, -1))
        ok(got == val, f"{quota}: state {got} vs {val}")
        num, den = m.full_at(st[0])
        ok(conn.call("PEXPIRETIME", key) == EPOCH_MS + cdiv(num, den * 1000), f"{quota}: expiry")

    # Composite on real time: one reading for every part.
    keys = ["sg:{prod-c}:a", "sg:{prod-c}:b"]
    models, r = prod(keys, "acquire", 1, ["10/s", "3/s; algorithm=fixed_window"])
    ok(r[0] == 0 and r[2] == 1 and r[4] == 2 and len(r) == 17, f"composite {r}")

    if mode == "eval":
        # EVALSHA -> NOSCRIPT -> EVAL.
        conn.call("SCRIPT", "FLUSH")
        n = script.fallbacks
        (m,), r = prod(["sg:{prod}:flush"], "acquire", 1, ["10/s"])
        ok(script.fallbacks == n + 1 and r[0] == 0, "NOSCRIPT fallback")
        ok(conn.call("SCRIPT", "EXISTS", script.sha) == [1], "EVAL cached the script again")
    else:
        # FCALL -> 'Function not found' -> FUNCTION LOAD -> FCALL; loading twice is refused.
        conn.call("FUNCTION", "FLUSH")
        n = script.fallbacks
        (m,), r = prod(["sg:{prod}:flush"], "acquire", 1, ["10/s"])
        ok(script.fallbacks == n + 1 and r[0] == 0, "Function not found fallback")
        again = conn.pipeline([["FUNCTION", "LOAD", script.text]])[0]
        ok(isinstance(again, RedisError) and "already exists" in str(again), f"second load: {again}")
        # The read-only variant peeks (a replica may serve it) and refuses anything else.
        spec = make_model(parse_quota("10/s"), 0, TICK_NS).spec()
        r = script(["sg:{prod}:flush"], ["peek", 1, "", "", spec], "FCALL_RO", "_ro")
        ok(r[0] == 0 and r[2] == 1 and r[4] == 8, f"FCALL_RO peek (one taken, one asked): {r}")
        try:
            script(["sg:{prod}:flush"], ["acquire", 1, "", "", spec], "FCALL_RO", "_ro")
            ok(False, "FCALL_RO acquired")
        except RedisError as e:
            ok("only peeks" in str(e), f"FCALL_RO acquire: {e}")

    # Malformed calls are errors naming sluicegate, and write nothing.
    for args in (["take", 1, "", ""], ["acquire", "x", "", ""], ["acquire", 1, "", "", "tb 0 1 1 1"],
                 ["acquire", 1, "", "", "nope 1 2"], ["acquire", 1, "", "bad clock"]):
        keys = ["sg:{prod}:bad"]
        if len(args) == 4:
            args = args + ["tb 1 1 1 1"]
        try:
            script(keys, args)
            ok(False, f"{args} was accepted")
        except RedisError as e:
            ok("sluicegate" in str(e), f"{args}: {e}")
    try:
        script(["sg:{prod}:bad", "sg:{prod}:bad"], ["acquire", 1, "", "", "tb 1 1 1 1", "tb 1 1 1 1"])
        ok(False, "a composite of one key twice was accepted")
    except RedisError as e:
        ok("twice" in str(e), f"one key twice: {e}")
    ok(conn.call("EXISTS", "sg:{prod}:bad") == 0, "a malformed call wrote")

    if mode == "function":
        # The one-bucket functions on the production clock. Their replies name no reading, so
        # each call is sent between two TIMEs in one pipeline: a reading t between them must
        # give the model's decision, state and expiry (as the general call's, checked above);
        # the model goes on from the first such t (another would have written the same).
        # Slow refills, so that no key expires between two calls (1000003/hour, beyond 2^53 in
        # scaled units, takes the exact path).
        def micros(r):
            return (int(r[0]) - EPOCH_S) * 1_000_000 + int(r[1])

        def short(r, limit):
            try:
                return parse_short(r, limit)
            except AssertionError as e:
                ok(False, str(e))
                return ("bad",)

        for algo, q, unit in (("tb", "10/m", 1), ("gcra", "10/m; algorithm=gcra", 1), ("tb", "5/h; burst=9", 1),
                              ("tb", "1000003/hour", 100_000), ("gcra", "7/m; burst=3", 1)):
            m = make_model(parse_quota(q), 0, TICK_NS)
            quota = m.spec().split()[1:]
            key, states, wrote = f"sg:{{prod}}:one-{algo}-{q}", [None], 0
            for cost in (3 * unit, 0, 20 * unit, unit, 2 * unit):
                call = ["FCALL", script.name + "_" + algo, 1, key, cost, *quota]
                t0, r, t1, value, expiry = conn.pipeline([["TIME"], call, ["TIME"], ["GET", key], ["PEXPIRETIME", key]])
                got = short(r, m.cap())
                for t in range(micros(t0), micros(t1) + 1):
                    after = list(states)
                    want, written = model_request([m], after, t, cost, "acquire")
                    w = t if written else wrote
                    num, den = m.full_at(after[0])
                    at = EPOCH_MS + max(cdiv(num, den * 1000), cdiv(w, 1000))
                    if got == want and value == m.enc(after[0])[1] and expiry == at:
                        states, wrote = after, w
                        break
                else:
                    ok(False, f"{algo} {q} cost {cost}: {r}, {value}, {expiry}: the model's at no reading "
                              f"from {micros(t0)} to {micros(t1)}")
                    break
                ok(True, f"{algo} {q} cost {cost}")
        # Malformed: the general call's errors (it decides whatever the fast path cannot take),
        # and no write. Each after a valid call with the quota arguments '1 1 1 1', which the
        # function then knows as checked (fast.lua): what it skips for them, it still checks
        # of everything else.
        for args in (["x", 1, 1, 1, 1], [1, 0, 1, 1, 1], [1, 1, 1, 1, 2], [1, 1, 1, 1],
                     [1, 1, 1, 1, 1, "bad clock"], [1.5, 1, 1, 1, 1], [-1, 1, 1, 1, 1]):
            r = script(["sg:{prod}:good"], [1, 1, 1, 1, 1], suffix="_tb")
            ok(short(r, 1)[0] == "dec", f"a valid call: {r}")
            try:
                script(["sg:{prod}:bad"], args, suffix="_tb")
                ok(False, f"_tb {args} was accepted")
            except RedisError as e:
                ok("sluicegate" in str(e), f"_tb {args}: {e}")
        ok(conn.call("EXISTS", "sg:{prod}:bad") == 0, "a malformed one-bucket call wrote")
        try:
            script(["sg:{prod}:good"], [1, 1, 1, 1, 1], suffix="_tb")
            script(["sg:{prod}:a", "sg:{prod}:b"], [1, 1, 1, 1, 1], suffix="_tb")
            ok(False, "_tb with two keys was accepted")
        except RedisError as e:
            ok("sluicegate" in str(e), f"_tb with two keys: {e}")
        # A stored value beyond 2^53 (or not an integer Lua reads) takes the exact path.
        conn.call("SET", "sg:{prod}:big", str(2**60))
        r = script(["sg:{prod}:big"], [1, 1, 1, 5, 5], suffix="_tb")
        d = short(r, 5)
        ok(d[0] == "dec" and not d[1][0] and conn.call("GET", "sg:{prod}:big") == str(2**60), f"a state beyond 2^53: {r}")
        # A cost above the capacity: the capacity alone, from the fast path and from run (a
        # quota with b*p >= 2^51), and no write.
        ok(script(["sg:{prod}:cap"], [6, 1, 1, 5, 5], suffix="_tb") == [5], "the capacity reply")
        ok(script(["sg:{prod}:cap"], [2**60, 1, 2**52, 5, 5], suffix="_gcra") == [5], "the capacity reply from run")
        ok(conn.call("EXISTS", "sg:{prod}:cap") == 0, "an insufficient capacity wrote")
        conn.call("SET", "sg:{prod}:big", "12.5")
        try:
            script(["sg:{prod}:big"], [1, 1, 1, 5, 5], suffix="_tb")
            ok(False, "a corrupt state was read")
        except RedisError as e:
            ok("sluicegate" in str(e), f"corrupt state: {e}")
    return checks


# ------------------------------------------------------------------------------------------
# Benchmark (--bench): decisions/s of EVALSHA, this script against a plain float GCRA
# ------------------------------------------------------------------------------------------

# A GCRA in the style of go-redis/redis_rate, written here from its idea for comparison only:
# float seconds since a recent epoch, no exactness, one key per limit.
PLAIN_GCRA_LUA = """
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tm = redis.call('TIME')
local now = (tonumber(tm[1]) - 1704067200) + tonumber(tm[2]) / 1e6
local interval = period / rate
local tolerance = interval * burst
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + cost * interval
local allow_at = new_tat - tolerance
if now < allow_at then
  local room = now - (tat - tolerance)
  return {0, math.floor(room / interval), tostring(allow_at - now), tostring(tat - now)}
end
local reset = new_tat - now
if cost > 0 then redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(reset * 1000)) end
return {1, math.floor((now - allow_at) / interval), '0', tostring(reset)}
"""


def bench(conn: Conn, port: int, rounds: int = 1) -> list[str]:
    """redis-benchmark, 8 clients, pipelines of 16, keys drawn from 10 000; requests/s, and the
    server's own microseconds a call (INFO commandstats), which leaves out the client. With
    several rounds the subjects take turns, and each figure is the median (range in brackets)."""
    rb = shutil.which("redis-benchmark")
    if rb is None:
        return ["redis-benchmark not found"]
    script = Script(conn, script_text())
    script.load()
    fn = Function(conn)
    fn.load()
    plain = Script(conn, PLAIN_GCRA_LUA)
    plain.load()

    def spec(q):
        return make_model(parse_quota(q), 0, TICK_NS).spec()

    tb, big = spec("1000000/s; burst=1000000"), spec("1000003/hour")
    gc = spec("1000000/s; algorithm=gcra")
    subjects = [
        ("FCALL   NAME_tb 1000000/s (one-bucket function)", ["FCALL", fn.name + "_tb", 1, "sg:{b}:__rand_int__", 1, *tb.split()[1:]]),
        ("FCALL   NAME_gcra 1000000/s (one-bucket function)", ["FCALL", fn.name + "_gcra", 1, "sg:{b}:__rand_int__", 1, *gc.split()[1:]]),
        ("FCALL   token bucket 1000000/s (fast path)", ["FCALL", fn.name, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", tb]),
        ("EVALSHA token bucket 1000000/s (fast path)", ["EVALSHA", script.sha, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", tb]),
        ("FCALL   token bucket 1000003/hour (limbs)", ["FCALL", fn.name, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", big]),
        ("FCALL   gcra 1000000/s", ["FCALL", fn.name, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", spec("1000000/s; algorithm=gcra")]),
        ("FCALL   sliding window 1000000/s", ["FCALL", fn.name, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", spec("1000000/s; algorithm=sliding_window")]),
        ("FCALL   sliding log 1000/s", ["FCALL", fn.name, 1, "sg:{b}:__rand_int__", "acquire", 1, "", "", spec("1000/s; algorithm=sliding_log")]),
        ("FCALL   composite token bucket + fixed window", ["FCALL", fn.name, 2, "{b__rand_int__}:a", "{b__rand_int__}:b", "acquire", 1, "", "", tb, spec("1000000/s; algorithm=fixed_window")]),
        ("EVALSHA plain float GCRA (redis_rate style)", ["EVALSHA", plain.sha, 1, "pg:{b}:__rand_int__", 1000000, 1000000, 1, 1]),
        ("PING", ["PING"]),
    ]
    got: dict = {name: ([], []) for name, _ in subjects}
    for _ in range(rounds):
        for name, cmd in subjects:
            conn.call("FLUSHALL")
            conn.call("CONFIG", "RESETSTAT")
            args = [rb, "-h", "127.0.0.1", "-p", str(port), "-n", "100000", "-c", "8", "-P", "16", "-r", "10000",
                    "--csv", *[str(a) for a in cmd]]
            out = subprocess.run(args, capture_output=True, text=True, timeout=300).stdout.strip().splitlines()
            got[name][0].append(float(out[-1].split(",")[1].strip('"')) if out else 0.0)
            stats = conn.call("INFO", "commandstats")
            m = re.search(r"cmdstat_" + cmd[0].lower() + r":calls=\d+,usec=\d+,usec_per_call=([0-9.]+)", stats)
            got[name][1].append(float(m.group(1)) if m else float("nan"))
    conn.call("FLUSHALL")

    def med(v: list) -> str:
        v = sorted(v)
        mid = v[len(v) // 2]
        return f"{mid:,.2f}" if len(v) == 1 else f"{mid:,.2f} ({v[0]:,.2f}-{v[-1]:,.2f})"

    return [f"{name}: {med(rps)} requests/s, {med(us)} us a call in the server" for name, (rps, us) in got.items()]


# ------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", action="store_true", help="also measure decisions/s with redis-benchmark")
    ap.add_argument("--rounds", type=int, default=1, help="--bench: rounds, subjects taking turns (medians)")
    ap.add_argument("--dump-extra", metavar="FILE", help="write the extra cases (vectors format) to FILE")
    ap.add_argument("--quick", action="store_true", help="skip the extra cases")
    args = ap.parse_args()
    extras = [] if args.quick else extra_cases()
    if args.dump_extra:
        Path(args.dump_extra).write_text(json.dumps(
            {"format": 1, "cases": [c for c in extras if "quota" in c],
             "composite_cases": [c for c in extras if "quotas" in c]}, indent=1) + "\n")
    vector_cases, skipped = [], 0
    for f in ("vectors.json", "algorithms.json"):
        for c in load_cases(ROOT / "conformance" / f):
            if "quota_error" in c:
                skipped += 1          # the rate-string parser is the Rust side's, not the script's
            else:
                vector_cases.append(c)
    sim = [c for c in vector_cases + extras if monotonic(c) and starts_full(c)]

    server = Server()
    t0 = time.monotonic()
    failures: list[str] = []
    try:
        conn = Conn(server.port)
        version = re.search(r"redis_version:(\S+)", server.version)
        valkey = re.search(r"valkey_version:(\S+)", server.version)
        name = f"valkey-server {valkey.group(1)}" if valkey else f"redis-server {version.group(1) if version else '?'}"
        print(f"{name} on 127.0.0.1:{server.port}")
        print(f"library: {function_name()}, EVAL form {len(script_text())} bytes")
        n = check_int_library(conn, failures)
        print(f"int.lua: {n} random operations against Python integers, {len(failures)} wrong")
        # FCALL with the fast paths (doubles where every value is below 2^53), EVALSHA with
        # the exact path only (test clock ' exact'): every case proves both paths.
        for mode in ("function", "one", "one-exact", "eval"):
            chk = Checker(conn, mode, exact=mode in ("eval", "one-exact"))
            keep = one_bucket if chk.one else (lambda c: True)
            for c in filter(keep, vector_cases):
                chk.run_case(c)
            s = dict(chk.stats)
            print(f"[{mode}{', exact path only' if chk.exact else ', fast paths'}] vectors: {s['cases']} cases, {s['steps']} steps, {s['decisions_compared']} "
                  f"decisions equal to the vectors ({skipped} quota_error cases are the parser's, not run); "
                  f"{len(chk.failures)} cases failed")
            for c in filter(keep, extras):
                chk.run_case(c)
            print(f"[{mode}] extra: {len(list(filter(keep, extras)))} cases (clocks 2^52 ns .. the century, large reduced rates), "
                  f"{chk.stats['steps'] - s['steps']} steps; {len(chk.failures)} cases failed so far")
            for c in filter(keep, sim):
                chk.run_case(c, simulate_expiry=True)
            print(f"[{mode}] expiry simulated: {len(list(filter(keep, sim)))} monotonic cases replayed with keys deleted once "
                  f"expired ({chk.stats['simulated_expiries']} deletions); {len(chk.failures)} cases failed so far")
            print(f"[{mode}] " + ", ".join(f"{k} {v}" for k, v in chk.stats.items()))
            failures += [f"[{mode}] {f}" for f in chk.failures]
            conn.call("FLUSHALL")
        for mode in ("function", "eval"):
            n = check_production(conn, failures, mode)
            print(f"[{mode}] production clock: {n} checks")
            conn.call("FLUSHALL")
        if args.bench:
            for line in bench(conn, server.port, args.rounds):
                print("bench: " + line)
        conn.close()
    finally:
        server.stop()
    for f in failures[:40]:
        print("FAIL " + f)
    print(f"{time.monotonic() - t0:.1f} s")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
