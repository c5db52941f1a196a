"""An independent reference of docs/SEMANTICS.md, for conformance/generate.py.

Deliberately plain: exact integers and rationals (fractions.Fraction), never floats, one class
per algorithm, each line traceable to a numbered step of SEMANTICS.md. Readability over speed.
Nothing here is shared with the Rust core or its test models.

Every limiter class has the same small interface:

    limit                   the decision's `limit` (burst, N, or the leaky queue's Q)
    acquire(t, c) -> dict   the decision (or INSUFFICIENT), updating the state
    refund(t, c)            gives c back (a cancel, for the leaky queue)
    view(t)                 step 1 and what follows from it (the clamped instant t_e and the
                            state as of t_e), read-only; the tuple's shape is the class's own
    is_full(t) -> bool      SEMANTICS "When a bucket is full": indistinguishable from a new one
    admitted_bound(t0, t_max) -> Fraction
                            the most cost that can ever be admitted between a creation at t0
                            and the latest reading t_max, refunds not counted (conservation)

Standard library only (Python 3.11+).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from fractions import Fraction

NS, US, MS, S = 1, 10**3, 10**6, 10**9
MINUTE, HOUR, DAY = 60 * S, 3600 * S, 86400 * S

# A Julian century of nanoseconds. Every quota the parser accepts covers clock readings up to
# here (SEMANTICS, "Bounds" and "State encodings").
CENTURY_NS = 3_155_760_000_000_000_000


# --------------------------------------------------------------------------------------
# Rate strings:  COUNT ( "/" | "per" ) [N] UNIT ( ";" OPTION )*
# --------------------------------------------------------------------------------------

UNITS = {
    "ns": NS, "us": US, "ms": MS,
    "s": S, "sec": S, "second": S, "seconds": S,
    "m": MINUTE, "min": MINUTE, "minute": MINUTE, "minutes": MINUTE,
    "h": HOUR, "hr": HOUR, "hour": HOUR, "hours": HOUR,
    "d": DAY, "day": DAY, "days": DAY,
    "w": 7 * DAY, "week": 7 * DAY, "weeks": 7 * DAY,
}

ALGORITHMS = {
    "token_bucket": "token_bucket",
    "gcra": "gcra", "leaky_meter": "gcra",
    "fixed_window": "fixed_window",
    "sliding_window": "sliding_window", "sliding_window_counter": "sliding_window",
    "sliding_log": "sliding_log",
    "leaky_queue": "leaky_queue", "shaper": "leaky_queue",
}
WINDOWS = ("fixed_window", "sliding_window", "sliding_log")

_WS = r"[ \t\r\n]*"  # "whitespace is free": ASCII whitespace between tokens
_HEAD = re.compile(_WS + r"([0-9]+)" + _WS + r"(?:/|per)" + _WS + r"([0-9]*)" + _WS + r"([a-z]+)" + _WS)
_OPTION = re.compile(_WS + r"([a-z_]+)" + _WS + r"=" + _WS + r"(.*?)" + _WS)
_DELAY = re.compile(r"([0-9]+)" + _WS + r"([a-z]+)")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class QuotaError(Exception):
    def __init__(self, kind: str, detail: str):
        assert kind in ("parse_error", "invalid_quota")
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class Quota:
    k: int                             # tokens (COUNT) per period
    P: int                             # period, ns (the window W of the window algorithms)
    b: int                             # burst (capacity); COUNT for windows and the queue
    i: int                             # initial tokens
    mode: str                          # "continuous" | "interval" (token bucket only)
    algorithm: str = "token_bucket"    # canonical name
    max_delay: int | None = None       # leaky queue: D in ns, None = the default (P)

    @property
    def D(self) -> int:
        return self.P if self.max_delay is None else self.max_delay


def bits(n: int) -> int:
    """Bits for the values 0..=n (SEMANTICS "State encodings": bits(N))."""
    return n.bit_length()


def packing_covers_a_century(q: Quota) -> bool:
    """Windows: the word `j << fields*bits(N) | counts` (u64, else u128) must hold the window
    index of every clock reading up to a century: 2^(128 - fields*bits(N)) windows of W ns."""
    fields = {"fixed_window": 1, "sliding_window": 2}[q.algorithm]
    index_bits = 128 - fields * bits(q.k)
    return index_bits >= 64 or (1 << index_bits) * q.P - 1 >= CENTURY_NS


def parse_rate(text: str) -> Quota:
    head, *options = text.translate(_ASCII_LOWER).split(";")
    m = _HEAD.fullmatch(head)
    if m is None or m.group(3) not in UNITS:
        raise QuotaError("parse_error", f"bad rate {head!r}")
    k = int(m.group(1))
    P = (int(m.group(2)) if m.group(2) else 1) * UNITS[m.group(3)]
    opts: dict[str, str] = {}
    for option in options:
        o = _OPTION.fullmatch(option)
        known = ("burst", "initial", "refill", "algorithm", "max_delay")
        # A duplicate option is refused here; SEMANTICS does not say, and no vector relies on it.
        if o is None or o.group(1) not in known or o.group(1) in opts:
            raise QuotaError("parse_error", f"bad option {option!r}")
        name, value = o.group(1), o.group(2)
        ok = {
            "burst": value.isdigit(),
            "initial": value.isdigit(),
            "refill": value in ("continuous", "interval"),
            "algorithm": value in ALGORITHMS,
            "max_delay": (d := _DELAY.fullmatch(value)) is not None and d.group(2) in UNITS,
        }[name]
        if not ok or not value.isascii():
            raise QuotaError("parse_error", f"bad value in {option!r}")
        opts[name] = value
    algorithm = ALGORITHMS[opts.get("algorithm", "token_bucket")]
    b = int(opts.get("burst", k))
    i = int(opts.get("initial", b))
    mode = opts.get("refill", "continuous")
    max_delay = None
    if "max_delay" in opts:
        d = _DELAY.fullmatch(opts["max_delay"])
        max_delay = int(d.group(1)) * UNITS[d.group(2)]
    q = Quota(k, P, b, i, mode, algorithm, max_delay)

    def invalid(why: str):
        raise QuotaError("invalid_quota", f"{text!r}: {why}")

    if k < 1 or P < 1 or b < 1 or not 0 <= i <= b:
        invalid(f"k={k} P={P} b={b} i={i}")
    # "Options that do not apply are InvalidQuota errors, not ignored"
    if mode == "interval" and algorithm != "token_bucket":
        invalid("refill=interval is for the token bucket only")
    if max_delay is not None and algorithm != "leaky_queue":
        invalid("max_delay is for leaky_queue only")
    if algorithm in WINDOWS + ("leaky_queue",):
        if b != k:
            invalid("no burst other than COUNT")
        if "initial" in opts:
            invalid("no initial")
    # "Bounds (else InvalidQuota)"
    if algorithm in ("fixed_window", "sliding_window"):
        if not (k < 2**62 and P < 2**62):
            invalid("N and W must be below 2^62")
        if not packing_covers_a_century(q):
            invalid("the packing does not cover a century of readings")
    if algorithm == "sliding_log" and k > 2**20:
        invalid("N <= 2^20")
    if algorithm == "leaky_queue":
        g = gcd(k, P)
        if not q.D * (k // g) + P // g < 2**62:
            invalid("D*k/g + P/g must be below 2^62")
    return q


def gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


# --------------------------------------------------------------------------------------
# Arithmetic and the decision
# --------------------------------------------------------------------------------------

def floor_q(x: Fraction) -> int:
    x = Fraction(x)
    return x.numerator // x.denominator


def ceil_ns(x: Fraction) -> int:
    """Rounds a non-negative rational number of nanoseconds up to an integer."""
    x = Fraction(x)
    assert x >= 0
    return -(-x.numerator // x.denominator)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def decision(limit: int, allowed: bool, remaining: int, retry: int, reset: int,
             wait_on_admission: bool = False) -> dict:
    assert 0 <= remaining <= limit and retry >= 0 and reset >= 0
    # retry_after is 0 when allowed, except a leaky-queue admission (its wait)
    assert allowed or retry > 0
    assert wait_on_admission or not allowed or retry == 0
    return {"allowed": allowed, "limit": limit, "remaining": remaining,
            "retry_after_ns": retry, "reset_after_ns": reset}


INSUFFICIENT = {"error": "insufficient_capacity"}


# --------------------------------------------------------------------------------------
# Token bucket, continuous refill (SEMANTICS "Continuous refill")
# --------------------------------------------------------------------------------------

class Continuous:
    """State: the single instant F at which the bucket is (or was) full."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.q, self.r = q, Fraction(q.k, q.P)
        self.limit = q.b
        self.F = t0 + (q.b - q.i) / self.r

    def view(self, t: int | Fraction) -> tuple[Fraction, Fraction]:
        t_e = max(Fraction(t), self.F - self.q.b / self.r)          # step 1 (the clamp)
        avail = self.q.b - self.r * max(0, self.F - t_e)              # step 2
        assert 0 <= avail <= self.q.b
        return t_e, avail

    def acquire(self, t: int, c: int) -> dict:
        if c > self.q.b:
            return INSUFFICIENT
        t_e, avail = self.view(t)
        allowed = c == 0 or avail >= c                                # step 3
        if allowed and c > 0:
            self.F = max(self.F, t_e) + c / self.r
        remaining = floor_q(avail - c) if allowed else floor_q(avail)  # step 4
        retry = 0 if allowed else ceil_ns((c - avail) / self.r)      # step 5
        reset = ceil_ns(max(Fraction(0), self.F - t_e))               # step 6
        return decision(self.q.b, allowed, remaining, retry, reset)

    def refund(self, t: int, c: int) -> None:
        if c == 0 or self.F <= t:                                     # full: nothing changes
            return
        self.F = max(self.F - min(c, self.q.b) / self.r, Fraction(t))

    def is_full(self, t: int | Fraction) -> bool:
        return self.view(t)[1] == self.q.b

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        return self.q.i + self.r * (t_max - t0)


# --------------------------------------------------------------------------------------
# Token bucket, interval refill (SEMANTICS "Interval refill")
# --------------------------------------------------------------------------------------

class Interval:
    """State (n, tau): tau whole tokens as of period n of the grid anchored at origin o."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.q, self.o = q, origin
        self.limit = q.b
        self.n, self.tau = self.period(t0), q.i

    def period(self, t: int) -> int:
        return max(0, t - self.o) // self.q.P

    def view(self, t: int) -> tuple[int, int, int]:
        q = self.q
        p_e = max(self.period(t), self.n)                             # step 1
        t_e = max(t, self.o + self.n * q.P)
        tokens = min(q.b, self.tau + q.k * (p_e - self.n))           # step 2
        return p_e, t_e, tokens

    def acquire(self, t: int, c: int) -> dict:
        q = self.q
        if c > q.b:
            return INSUFFICIENT
        p_e, t_e, tokens = self.view(t)
        allowed = c == 0 or tokens >= c                               # step 3
        if allowed and c > 0:
            self.n, self.tau = p_e, tokens - c
        remaining = tokens - c if allowed else tokens                 # step 4
        retry = 0 if allowed else self.o + (p_e + ceil_div(c - tokens, q.k)) * q.P - t_e          # step 5
        reset = 0 if remaining == q.b else self.o + (p_e + ceil_div(q.b - remaining, q.k)) * q.P - t_e  # 6
        return decision(q.b, allowed, remaining, retry, reset)

    def refund(self, t: int, c: int) -> None:
        p_e, _, tokens = self.view(t)
        if min(self.q.b, tokens + c) != tokens:                       # else nothing changes
            self.n, self.tau = p_e, min(self.q.b, tokens + c)

    def is_full(self, t: int) -> bool:
        return self.view(t)[2] == self.q.b

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        return Fraction(self.q.i + self.q.k * (self.period(t_max) - self.period(t0)))


# --------------------------------------------------------------------------------------
# GCRA (SEMANTICS "GCRA"): written in its own terms, not through the token bucket
# --------------------------------------------------------------------------------------

class Gcra:
    """State: the theoretical arrival time TAT. Emission interval T = P/k, tolerance tau = b*T."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.q = q
        self.limit = q.b
        self.T = Fraction(q.P, q.k)
        self.tau = q.b * self.T
        self.TAT = t0 + (q.b - q.i) * self.T

    def view(self, t: int | Fraction, c: int = 0) -> tuple[Fraction, Fraction, Fraction]:
        t_e = max(Fraction(t), self.TAT - self.tau)                   # step 1
        start = max(self.TAT, t_e)
        new = start + c * self.T
        return t_e, start, new

    def acquire(self, t: int, c: int) -> dict:
        if c > self.q.b:
            return INSUFFICIENT
        t_e, start, new = self.view(t, c)
        if new - t_e <= self.tau:                                     # step 2
            if c > 0:
                self.TAT = new
            return decision(self.q.b, True,                           # step 3
                            floor_q((self.tau - (new - t_e)) / self.T), 0, ceil_ns(new - t_e))
        return decision(self.q.b, False,
                        floor_q((self.tau - (start - t_e)) / self.T),
                        ceil_ns(new - t_e - self.tau), ceil_ns(start - t_e))

    def refund(self, t: int, c: int) -> None:                         # step 4
        if c > 0 and self.TAT > t:
            self.TAT = max(self.TAT - min(c, self.q.b) * self.T, Fraction(t))

    def is_full(self, t: int | Fraction) -> bool:
        return self.TAT <= t

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        return self.q.i + (t_max - t0) / self.T


# --------------------------------------------------------------------------------------
# Fixed window (SEMANTICS "Fixed window")
# --------------------------------------------------------------------------------------

class FixedWindow:
    """State (j, used): `used` admitted in window j = [j*W, (j+1)*W) of the clock's epoch."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.N, self.W = q.k, q.P
        self.limit = self.N
        self.j, self.used = t0 // self.W, 0

    def view(self, t: int) -> tuple[int, int, int]:
        t_e = max(t, self.j * self.W)                                 # step 1
        x = t_e // self.W
        u = self.used if x == self.j else 0
        return t_e, x, u

    def acquire(self, t: int, c: int) -> dict:
        N, W = self.N, self.W
        if c > N:
            return INSUFFICIENT
        t_e, x, u = self.view(t)
        allowed = u + c <= N                                          # step 2
        if allowed and c > 0:
            self.j, self.used = x, u + c
        u2 = u + c if allowed else u                                  # step 3
        retry = 0 if allowed else (x + 1) * W - t_e                   # step 4
        reset = 0 if u2 == 0 else (x + 1) * W - t_e                   # step 5
        return decision(N, allowed, N - u2, retry, reset)

    def refund(self, t: int, c: int) -> None:                         # step 6
        _, x, u = self.view(t)
        if u - min(u, c) != u:
            self.j, self.used = x, u - min(u, c)

    def is_full(self, t: int) -> bool:
        return t // self.W >= self.j and self.view(t)[2] == 0

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        return Fraction(self.N * (t_max // self.W - t0 // self.W + 1))


# --------------------------------------------------------------------------------------
# Sliding window counter (SEMANTICS "Sliding window counter")
# --------------------------------------------------------------------------------------

class SlidingWindow:
    """State (j, prev, curr): curr admitted in window j, prev in window j - 1."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.N, self.W = q.k, q.P
        self.limit = self.N
        self.j, self.prev, self.curr = t0 // self.W, 0, 0

    def view(self, t: int) -> tuple[int, int, int, int, int]:
        W = self.W
        t_e = max(t, self.j * W)                                      # step 1
        x = t_e // W
        e = t_e - x * W
        if x == self.j:
            p, q = self.prev, self.curr
        elif x == self.j + 1:
            p, q = self.curr, 0
        else:
            p, q = 0, 0
        return t_e, x, e, p, q

    def acquire(self, t: int, c: int) -> dict:
        N, W = self.N, self.W
        if c > N:
            return INSUFFICIENT
        t_e, x, e, p, q = self.view(t)
        allowed = p * (W - e) + (q + c) * W <= N * W                  # step 2
        if allowed and c > 0:
            self.j, self.prev, self.curr = x, p, q + c
        q2 = q + c if allowed else q                                  # step 3
        remaining = max(0, floor_q(N - q2 - Fraction(p * (W - e), W)))
        if allowed:                                                   # step 4
            retry = 0
        elif q + c <= N:
            assert p > 0
            e2 = W - (N - q - c) * W // p
            retry = x * W + e2 - t_e
        else:
            assert q > 0
            e2 = W - min(W, (N - c) * W // q)
            retry = (x + 1) * W + e2 - t_e
        if q2 > 0:                                                    # step 5
            reset = (x + 2) * W - t_e
        elif p > 0:
            reset = (x + 1) * W - t_e
        else:
            reset = 0
        return decision(N, allowed, remaining, retry, reset)

    def refund(self, t: int, c: int) -> None:                         # step 6
        _, x, _, p, q = self.view(t)
        if q - min(q, c) != q:
            self.j, self.prev, self.curr = x, p, q - min(q, c)

    def is_full(self, t: int) -> bool:
        _, _, _, p, q = self.view(t)
        return t // self.W >= self.j and p == 0 and q == 0

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        # curr never exceeds N (the estimate includes it whole), one curr per window
        return Fraction(self.N * (t_max // self.W - t0 // self.W + 1))


# --------------------------------------------------------------------------------------
# Sliding log (SEMANTICS "Sliding log")
# --------------------------------------------------------------------------------------

class SlidingLog:
    """State: the multiset of admitted unit timestamps, and `last` (the newest admission's t_e,
    or the creation instant)."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.N, self.W = q.k, q.P
        self.limit = self.N
        self.log: list[int] = []          # one entry per admitted unit, ascending
        self.last = t0

    def window(self, t_e: int) -> list[int]:
        """The timestamps in (t_e - W, t_e], oldest first."""
        return sorted(s for s in self.log if s > t_e - self.W)

    def view(self, t: int) -> tuple[int, list[int]]:
        t_e = max(t, self.last)                                       # step 1
        return t_e, self.window(t_e)

    def acquire(self, t: int, c: int) -> dict:
        N, W = self.N, self.W
        if c > N:
            return INSUFFICIENT
        t_e, inside = self.view(t)
        count = len(inside)
        allowed = count + c <= N                                      # step 2
        if allowed and c > 0:
            self.log = inside + [t_e] * c      # timestamps <= t_e - W are forgotten here
            self.last = t_e
        count2 = count + c if allowed else count                      # step 3
        if allowed:                                                   # step 4
            retry = 0
        else:
            m = count + c - N                  # the m-th oldest must leave first (1-based)
            retry = inside[m - 1] + W - t_e
        now_inside = self.window(t_e)                                 # step 5
        assert len(now_inside) == count2
        reset = 0 if count2 == 0 else now_inside[-1] + W - t_e
        return decision(N, allowed, N - count2, retry, reset)

    def refund(self, t: int, c: int) -> None:                         # step 6
        t_e, inside = self.view(t)
        drop = min(c, len(inside))
        if drop:
            keep = sorted(self.log)
            self.log = keep[: len(keep) - drop]  # the newest units are the window's newest

    def is_full(self, t: int) -> bool:
        return t >= self.last and not self.window(t)

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        # any W ns of admissions hold at most N units that are never refunded
        return Fraction(self.N * ceil_div(t_max - t0 + 1, self.W))


# --------------------------------------------------------------------------------------
# Leaky bucket as a queue (SEMANTICS "Leaky bucket as a queue")
# --------------------------------------------------------------------------------------

class LeakyQueue:
    """State: L, the last admitted request's slot. Q = 1 + floor(D*r) is the limit."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.r = Fraction(q.k, q.P)
        self.D = q.D
        self.Q = 1 + floor_q(self.D * self.r)
        self.limit = self.Q
        self.L = t0 - self.Q / self.r                                 # idle

    def view(self, t: int | Fraction, c: int = 0) -> tuple[Fraction, Fraction, Fraction]:
        t_e = max(Fraction(t), self.L - self.D)                       # step 1
        L_e = max(self.L, t_e - self.Q / self.r)
        s = max(t_e, L_e + c / self.r)
        return t_e, s, s - t_e

    def acquire(self, t: int, c: int, bound: int | None = None) -> dict:
        """`bound` is reserve_within's m (None: plain reserve, bounded by D)."""
        if c > self.Q:
            return INSUFFICIENT
        D = self.D if bound is None else min(self.D, bound)
        t_e, s, w = self.view(t, c)
        allowed = c == 0 or w <= D                                    # step 2
        if allowed and c > 0:
            self.L = s
        if c == 0:                                                    # step 3
            retry = 0
        elif allowed:
            retry = ceil_ns(w)
        else:
            retry = ceil_ns(w - D)
        L2 = self.L
        remaining = floor_q(self.r * max(0, t_e + self.D - max(L2, t_e - 1 / self.r)))  # step 4
        reset = ceil_ns(max(Fraction(0), L2 + self.Q / self.r - t_e))                  # step 5
        return decision(self.Q, allowed, remaining, retry, reset, wait_on_admission=True)

    def refund(self, t: int, c: int) -> None:                         # step 6 (cancel)
        idle_at = t - self.Q / self.r
        if c > 0 and self.L > idle_at:
            self.L = max(self.L - min(c, self.Q) / self.r, idle_at)

    def is_full(self, t: int | Fraction) -> bool:
        return self.L <= t - self.Q / self.r

    def admitted_bound(self, t0: int, t_max: int) -> Fraction:
        # each admitted unit moves L by 1/r; L starts at t0 - Q/r and stays within t + D
        return self.Q + self.r * (t_max - t0 + self.D)


CLASSES = {
    "gcra": Gcra, "fixed_window": FixedWindow, "sliding_window": SlidingWindow,
    "sliding_log": SlidingLog, "leaky_queue": LeakyQueue,
}


def new_limiter(q: Quota, origin: int, t0: int):
    """One bucket of quota q created at t0 on a limiter created at origin (the interval grid's
    anchor; the window algorithms use the clock's epoch instead)."""
    if q.algorithm == "token_bucket":
        return (Continuous if q.mode == "continuous" else Interval)(q, origin, t0)
    return CLASSES[q.algorithm](q, origin, t0)


# --------------------------------------------------------------------------------------
# Composite limits (SEMANTICS "Composite limits")
# --------------------------------------------------------------------------------------

class Composite:
    def __init__(self, parts: list):
        self.parts = parts

    def acquire(self, t: int, c: int) -> dict:
        if any(c > part.limit for part in self.parts):               # step 1
            return INSUFFICIENT
        seen = []
        for j, part in enumerate(self.parts):                         # step 2
            d = part.acquire(t, c)
            if d["allowed"]:
                seen.append(d)
                continue
            for earlier in self.parts[:j]:                            # step 3
                earlier.refund(t, c)
            seen = [peek_copy(earlier, t, 0) for earlier in self.parts[:j]]
            seen.append(d)
            seen += [peek_copy(later, t, c) for later in self.parts[j + 1:]]
            return combine(False, seen)
        return combine(True, seen)

    def refund(self, t: int, c: int) -> None:
        # SEMANTICS does not define a composite refund; this is every part's own refund
        # (what the bindings' Composite.refund does), see conformance/README.md.
        for part in self.parts:
            part.refund(t, c)


def peek_copy(part, t: int, c: int) -> dict:
    """The decision `part` would give to (t, c), changing nothing."""
    return copy.deepcopy(part).acquire(t, c)


def combine(allowed: bool, seen: list[dict]) -> dict:                 # step 4
    tightest = seen[0]
    for d in seen:
        if d["remaining"] < tightest["remaining"]:                   # the first on ties
            tightest = d
    return {"allowed": allowed, "limit": tightest["limit"], "remaining": tightest["remaining"],
            "retry_after_ns": max(d["retry_after_ns"] for d in seen),
            "reset_after_ns": max(d["reset_after_ns"] for d in seen)}
