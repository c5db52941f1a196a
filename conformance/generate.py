#!/usr/bin/env python3
"""Generate conformance/vectors.json from an independent reference of docs/SEMANTICS.md.

The reference below is deliberately plain: exact rationals (fractions.Fraction), no floats,
one class per refill mode, each line traceable to a numbered step of SEMANTICS.md.
The test cases are hand-written inputs only; every expected decision is computed here.

    python3 conformance/generate.py          # (re)write conformance/vectors.json
    python3 conformance/generate.py --check  # exit 1 if the committed file has drifted

Standard library only (Python 3.11+).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

FORMAT = 1
VECTORS = Path(__file__).resolve().parent / "vectors.json"

NS, US, MS, S = 1, 10**3, 10**6, 10**9
MINUTE, HOUR, DAY = 60 * S, 3600 * S, 86400 * S


# --------------------------------------------------------------------------------------
# Rate strings:  COUNT ( "/" | "per" ) [N] UNIT ( ";" OPTION )*
# --------------------------------------------------------------------------------------

UNITS = {
    "ns": NS, "us": US, "ms": MS,
    "s": S, "sec": S, "second": S, "seconds": S,
    "m": MINUTE, "min": MINUTE, "minute": MINUTE, "minutes": MINUTE,
    "h": HOUR, "hr": HOUR, "hour": HOUR, "hours": HOUR,
    "d": DAY, "day": DAY, "days": DAY,
}

_WS = r"[ \t\r\n]*"  # "whitespace is free": ASCII whitespace between tokens
_HEAD = re.compile(_WS + r"([0-9]+)" + _WS + r"(?:/|per)" + _WS + r"([0-9]*)" + _WS + r"([a-z]+)" + _WS)
_OPTION = re.compile(_WS + r"([a-z]+)" + _WS + r"=" + _WS + r"([0-9]+|[a-z]+)" + _WS)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class QuotaError(Exception):
    def __init__(self, kind: str, detail: str):
        assert kind in ("parse_error", "invalid_quota")
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class Quota:
    k: int      # tokens per period
    P: int      # period, ns
    b: int      # burst (capacity)
    i: int      # initial tokens
    mode: str   # "continuous" | "interval"


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
        if o is None or o.group(1) not in ("burst", "initial", "refill") or o.group(1) in opts:
            raise QuotaError("parse_error", f"bad option {option!r}")
        name, value = o.group(1), o.group(2)
        if (name == "refill") != (value in ("continuous", "interval")) or (name != "refill" and not value.isdigit()):
            raise QuotaError("parse_error", f"bad value in {option!r}")
        opts[name] = value
    b = int(opts.get("burst", k))
    i = int(opts.get("initial", b))
    mode = opts.get("refill", "continuous")
    if k < 1 or P < 1 or b < 1 or not 0 <= i <= b:
        raise QuotaError("invalid_quota", f"k={k} P={P} b={b} i={i}")
    return Quota(k, P, b, i, mode)


# --------------------------------------------------------------------------------------
# Reference buckets (SEMANTICS.md, "Continuous refill" and "Interval refill")
# --------------------------------------------------------------------------------------

def floor_q(x: Fraction) -> int:
    return x.numerator // x.denominator


def ceil_ns(x: Fraction) -> int:
    assert x >= 0
    return -(-x.numerator // x.denominator)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def decision(q: Quota, allowed: bool, remaining: int, retry: int, reset: int) -> dict:
    assert 0 <= remaining <= q.b and retry >= 0 and reset >= 0
    assert (retry == 0) == allowed
    return {"allowed": allowed, "limit": q.b, "remaining": remaining,
            "retry_after_ns": retry, "reset_after_ns": reset}


INSUFFICIENT = {"error": "insufficient_capacity"}


class Continuous:
    """State: the single instant F at which the bucket is (or was) full."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.q, self.r = q, Fraction(q.k, q.P)
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
        return decision(self.q, allowed, remaining, retry, reset)

    def refund(self, t: int, c: int) -> None:
        if c == 0 or self.F <= t:                                     # full: nothing changes
            return
        self.F = max(self.F - min(c, self.q.b) / self.r, Fraction(t))


class Interval:
    """State (n, tau): tau whole tokens as of period n of the grid anchored at origin o."""

    def __init__(self, q: Quota, origin: int, t0: int):
        self.q, self.o = q, origin
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
        return decision(q, allowed, remaining, retry, reset)

    def refund(self, t: int, c: int) -> None:
        p_e, _, tokens = self.view(t)
        if min(self.q.b, tokens + c) != tokens:                       # else nothing changes
            self.n, self.tau = p_e, min(self.q.b, tokens + c)


def new_bucket(q: Quota, origin: int, t0: int):
    return (Continuous if q.mode == "continuous" else Interval)(q, origin, t0)


# --------------------------------------------------------------------------------------
# Self-checks run on every decision (they test the reference against itself)
# --------------------------------------------------------------------------------------

def exact_view(bucket, t: int) -> tuple[Fraction, Fraction]:
    """(t_e, tokens available) for either mode."""
    if isinstance(bucket, Continuous):
        return bucket.view(t)
    _, t_e, tokens = bucket.view(t)
    return Fraction(t_e), Fraction(tokens)


def probe(before, after, t: int, c: int, d: dict) -> None:
    """Check retry_after and reset_after against the decision rule itself.

    Both are waits measured from the (possibly clamped) instant t_e of the request.
    """
    q = after.q
    t_e, _ = exact_view(before, t)
    if not d["allowed"]:
        w = d["retry_after_ns"]  # the least wait after which the same request succeeds
        assert copy.deepcopy(before).acquire(t_e + w, c)["allowed"], "retry_after too short"
        assert not copy.deepcopy(before).acquire(t_e + w - 1, c)["allowed"], "retry_after too long"
    w = d["reset_after_ns"]  # the least wait after which the bucket is full again
    assert exact_view(after, t_e + w)[1] == q.b, "reset_after too short"
    if w > 0:
        assert exact_view(after, t_e + w - 1)[1] < q.b, "reset_after too long"


class Ledger:
    """Conservation bound: admitted <= initial + refunded + refill up to the latest reading."""

    def __init__(self, bucket, t0: int):
        self.bucket, self.t0, self.t_max = bucket, t0, t0
        self.admitted = self.refunded = 0

    def check(self, t: int) -> None:
        self.t_max = max(self.t_max, t)
        b = self.bucket
        if isinstance(b, Continuous):
            refill = b.r * (self.t_max - self.t0)
        else:
            refill = b.q.k * (b.period(self.t_max) - b.period(self.t0))
        assert self.admitted <= b.q.i + self.refunded + refill, "conservation violated"


# --------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------

SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def run_case(case: dict) -> dict:
    name = case["name"]
    assert SNAKE.fullmatch(name), name
    desc = case["description"]
    assert desc.endswith(".") and desc.count(". ") == 0, f"{name}: description must be one sentence"
    if "quota_error" in case:
        try:
            parse_rate(case["quota"])
        except QuotaError as e:
            assert e.kind == case["quota_error"], f"{name}: {e}"
            return dict(case)
        raise AssertionError(f"{name}: quota {case['quota']!r} was accepted")

    q = parse_rate(case["quota"])
    start = case["start_ns"]
    keyed = any("key" in s for s in case["steps"])
    assert all(("key" in s) == keyed for s in case["steps"]), f"{name}: keys on some steps only"
    buckets: dict[str | None, object] = {}
    ledgers: dict[str | None, Ledger] = {}
    if not keyed:
        buckets[None] = new_bucket(q, start, start)
        ledgers[None] = Ledger(buckets[None], start)
    out_steps = []
    for s in case["steps"]:
        t, op, c, key = s["t_ns"], s["op"], s["cost"], s.get("key")
        assert isinstance(t, int) and t >= start, f"{name}: readings before start_ns are not covered"
        assert isinstance(c, int) and c >= 0
        if key not in buckets:
            # A key's bucket is created by its first step.  Vectors never make that first
            # step an insufficient_capacity error (SEMANTICS.md does not say whether an
            # erroring request creates the bucket).
            assert not (op == "acquire" and c > q.b), f"{name}: first step of {key!r} errors"
            buckets[key] = new_bucket(q, start, t)
            ledgers[key] = Ledger(buckets[key], t)
        bucket = buckets[key]
        step = dict(s)
        if op == "acquire":
            before = copy.deepcopy(bucket)
            d = bucket.acquire(t, c)
            if "error" not in d:
                probe(before, bucket, t, c, d)
                if c > 0 and d["allowed"]:
                    ledgers[key].admitted += c
            step["expect"] = d
        elif op == "refund":
            assert 1 <= c <= q.b, f"{name}: refunds in vectors have 1 <= cost <= burst"
            bucket.refund(t, c)
            ledgers[key].refunded += c
        else:
            raise AssertionError(f"{name}: unknown op {op!r}")
        ledgers[key].check(t)
        out_steps.append(step)
    return {"name": name, "description": desc, "quota": case["quota"], "start_ns": start,
            "keyed": keyed, "steps": out_steps}


# --------------------------------------------------------------------------------------
# Hand-written cases (inputs only)
# --------------------------------------------------------------------------------------

def acq(t: int, cost: int = 1, key: str | None = None) -> dict:
    s = {"t_ns": t, "op": "acquire", "cost": cost}
    if key is not None:
        s["key"] = key
    return s


def peek(t: int, key: str | None = None) -> dict:
    return acq(t, 0, key)


def refund(t: int, cost: int, key: str | None = None) -> dict:
    s = acq(t, cost, key)
    s["op"] = "refund"
    return s


CASES: list[dict] = []


def case(name: str, description: str, quota: str, steps: list[dict], start_ns: int = 0) -> None:
    CASES.append({"name": name, "description": description, "quota": quota,
                  "start_ns": start_ns, "steps": steps})


def bad(name: str, description: str, quota: str, error: str) -> None:
    CASES.append({"name": name, "description": description, "quota": quota, "quota_error": error})


# ---- continuous: worked examples ---------------------------------------------------------

case("cont_worked_burst_then_idle",
     "Capacity 5 at 1 token/s: 7 instant requests give 5 allowed and 2 rejected, then after 2 s idle 2 are allowed and the 3rd rejected.",
     "1/s; burst=5",
     [acq(0) for _ in range(7)] + [acq(2 * S) for _ in range(3)])

case("cont_worked_empty_start",
     "An empty bucket (initial=0, capacity 5, 1 token/s) that waits 2 s admits 2 of 4 requests.",
     "1/s; burst=5; initial=0",
     [acq(2 * S) for _ in range(4)])

case("cont_worked_60rps_against_10rps_burst_50",
     "60 req/s against 10/s with burst 50 for 180 requests (request j at t = j*10^9 // 60 ns, exact integer floor): 59 allowed, the 60th rejected, the 61st allowed, 79 allowed in all.",
     "10/s; burst=50",
     [acq(j * S // 60) for j in range(180)])

# ---- continuous: basics, peeks, weights --------------------------------------------------

case("cont_first_acquire_5ps",
     "A full 5/s bucket reports remaining 4 and a 200 ms reset after one token, a refund restores tokens and cost above burst is an error.",
     "5/s; burst=5",
     [acq(0), acq(10), refund(10, 2), peek(15), acq(20, 9), peek(30)])

case("cont_peek_full_and_idle",
     "Peeks on a full bucket report remaining=burst and reset 0 and never change state, even long after creation.",
     "10/s; burst=10",
     [peek(0), peek(0), peek(5 * S), acq(5 * S), peek(5 * S), peek(5 * S + 50 * MS), peek(5 * S + 100 * MS)])

case("cont_peek_does_not_consume",
     "Repeated cost-0 peeks neither consume nor refill tokens and report the state at their own time.",
     "1/s; burst=1",
     [peek(0), peek(0), acq(0), peek(0), peek(0), peek(500 * MS), acq(500 * MS), peek(999_999_999), peek(S)])

case("cont_weighted_costs",
     "Weighted costs draw several tokens at once and a rejected weighted request reports the wait for all of its tokens.",
     "10/s; burst=10",
     [acq(0, 3), acq(0, 4), acq(0, 4), acq(0, 3), acq(0, 1), acq(250 * MS, 3), acq(250 * MS, 2), acq(250 * MS, 1), peek(300 * MS)])

case("cont_cost_exceeds_burst",
     "A cost greater than the burst is an insufficient_capacity error whatever the bucket holds, and it changes nothing.",
     "10/s; burst=5",
     [acq(0, 6), peek(0), acq(0, 5), acq(0, 6), acq(0, 100), peek(0), acq(500 * MS, 5), acq(500 * MS, 6)])

case("cont_cost_equals_burst_waits_for_full",
     "A request for exactly the burst is allowed only once the bucket is completely full again.",
     "1/s; burst=3",
     [acq(0), acq(0, 3), acq(999_999_999, 3), acq(S, 3), acq(S, 3)])

case("cont_initial_defaults_to_burst",
     "With burst given and initial omitted the bucket starts with burst tokens, not COUNT tokens.",
     "10/s; burst=3",
     [peek(0), acq(0, 3), acq(0), peek(100 * MS), peek(300 * MS)])

case("cont_burst_below_count",
     "Burst below COUNT caps the bucket at the burst however long it idles.",
     "10/s; burst=2",
     [acq(0), acq(0), acq(0), acq(100 * MS), peek(10 * S), acq(10 * S, 2), acq(10 * S)])

case("cont_burst_above_count",
     "Burst above COUNT lets an empty bucket accumulate for burst/rate seconds before it is full.",
     "1/s; burst=10; initial=0",
     [peek(4 * S), acq(4 * S, 10), acq(10 * S - 1, 10), acq(10 * S, 10), peek(100 * S)])

# ---- continuous: exact boundaries and fractional accrual ----------------------------------

case("cont_boundary_1ps",
     "At 1 token/s a token becomes available exactly 10^9 ns after the last one was taken, not one nanosecond earlier.",
     "1/s; burst=1",
     [acq(0), acq(999_999_999), acq(S), acq(S), acq(2 * S - 1), acq(2 * S)])

case("cont_boundary_3ps",
     "At 3/s a token takes 333333333.33 ns so the boundary is at 333333334 ns and the reset is rounded up.",
     "3/s; burst=1",
     [acq(0), acq(333_333_333), acq(333_333_334), acq(666_666_667), acq(666_666_668)])

case("cont_reset_rounding_3ps",
     "Each token taken from a full 3/s bucket pushes reset_after out by a third of a second, rounded up to whole ns.",
     "3/s; burst=3",
     [acq(0), acq(0), acq(0), acq(0), peek(1), peek(333_333_334), peek(S)])

case("cont_fractional_accrual_2ps",
     "At 2/s an empty bucket holds 0.5 token after 250 ms, reported as remaining 0, and the token is whole at exactly 500 ms.",
     "2/s; burst=2; initial=0",
     [peek(250 * MS), acq(250 * MS), peek(499_999_999), acq(499_999_999), acq(500 * MS), peek(S), peek(1500 * MS)])

case("cont_fractional_accrual_weighted",
     "Fractional tokens count toward weighted requests and the fraction left after an admission is kept.",
     "4/s; burst=4; initial=0",
     [peek(625 * MS), acq(625 * MS, 3), acq(625 * MS, 2), peek(625 * MS), acq(749_999_999), acq(750 * MS), peek(750 * MS)])

# ---- continuous: non-divisible rates and units --------------------------------------------

case("cont_nondivisible_7_per_ms",
     "At 7 tokens/ms one token takes 142857.14 ns so retry_after rounds up to 142858 ns.",
     "7/ms; burst=7",
     [acq(0, 7), acq(0), acq(142_857), acq(142_858), acq(142_858), peek(MS), acq(MS, 7)])

case("cont_nondivisible_999ps",
     "At 999/s one token takes 1001001.001 ns and three take 3003003.003 ns, both rounded up.",
     "999/s; burst=3",
     [acq(0, 3), acq(0), acq(1_001_001), acq(1_001_002), acq(1_001_002), peek(3_003_003), peek(3_003_004)])

case("cont_five_per_two_seconds",
     "The rate 5/2s means 5 tokens per 2 s, one every 400 ms.",
     "5/2s",
     [acq(0, 5), acq(0), acq(399_999_999), acq(400 * MS), acq(400 * MS), peek(S), peek(2 * S + 400 * MS)])

case("cont_100_per_minute",
     "The rate 100/minute refills one token every 600 ms with a default burst of 100.",
     "100/minute",
     [acq(0, 100), acq(0), acq(599_999_999), acq(600 * MS), peek(30 * S), acq(30 * S, 50), peek(90 * S)])

case("cont_100_per_minute_words",
     "The spelling '100 per minute' parses like 100/minute and burst overrides the capacity.",
     "100 per minute; burst=10",
     [acq(0, 10), acq(0), peek(3 * S), acq(3 * S, 5), acq(3 * S, 1)])

case("cont_per_n_minutes_words",
     "The spelling '2 per 3 minutes' gives 2 tokens per 180 s, one every 90 s.",
     "2 per 3 minutes",
     [acq(0, 2), acq(0), acq(90 * S - 1), acq(90 * S), peek(90 * S), peek(180 * S)])

case("cont_unit_m_is_minute",
     "The unit m means minutes, so 10/m refills one token every 6 s.",
     "10/m; burst=1",
     [acq(0), acq(6 * S - 1), acq(6 * S)])

case("cont_seconds_word_with_count",
     "The spelling '4 per 2 seconds' gives 2 tokens/s, one every 500 ms.",
     "4 per 2 seconds; burst=2",
     [acq(0, 2), acq(0), acq(500 * MS), peek(750 * MS)])

case("cont_per_hour",
     "At 3/h one token takes 1200 s.",
     "3/h",
     [acq(0, 3), acq(0), acq(1200 * S - 1), acq(1200 * S), peek(1200 * S)])

case("cont_per_day",
     "At 1/d with burst 2 the bucket is full again 2 days after being emptied.",
     "1/d; burst=2",
     [acq(0, 2), acq(0), peek(DAY), acq(DAY), peek(DAY)])

case("cont_per_ns",
     "At 1 token/ns the bucket refills a token every nanosecond.",
     "1/ns; burst=4",
     [acq(0, 4), acq(0), acq(1), acq(1), acq(3, 2), peek(3), peek(7)])

case("cont_per_us_nondivisible",
     "At 3/us one token takes 333.33 ns, rounded up to 334 ns.",
     "3/us; burst=2",
     [acq(0, 2), acq(0), acq(333), acq(334), acq(334), peek(1000)])

case("cont_whitespace_and_case",
     "Whitespace around every token and any letter case are accepted in a rate string.",
     "  10 / S ; BURST = 3 ; Initial = 1 ; REFILL = Continuous  ",
     [peek(0), acq(0), acq(0), acq(100 * MS), peek(200 * MS)])

case("cont_options_any_order",
     "Options may come in any order and initial is checked against the given burst.",
     "10/s; initial=2; burst=5",
     [peek(0), acq(0, 2), acq(0), peek(300 * MS)])

# ---- continuous: initial tokens, start offset ---------------------------------------------

case("cont_initial_below_burst",
     "A bucket created with 3 of 10 tokens reports 3 and fills at the normal rate.",
     "10/s; burst=10; initial=3",
     [peek(0), acq(0, 3), acq(0), acq(100 * MS), peek(150 * MS), peek(S)])

case("cont_initial_zero",
     "A bucket created empty rejects at once and admits the first token one period-per-token later.",
     "5/s; burst=5; initial=0",
     [acq(0), acq(199_999_999), acq(200 * MS), peek(200 * MS), acq(S, 4)])

case("cont_start_offset",
     "A limiter created at a non-zero instant measures refill from its creation instant.",
     "2/s; burst=3; initial=1",
     [peek(1_234_567_890_123), acq(1_234_567_890_123), acq(1_234_567_890_123),
      acq(1_234_567_890_123 + 499_999_999), acq(1_234_567_890_123 + 500 * MS), peek(1_234_567_890_123 + 2 * S)],
     start_ns=1_234_567_890_123)

# ---- continuous: refunds ------------------------------------------------------------------

case("cont_refund_basic",
     "A refund returns tokens that a later peek and acquire can see.",
     "1/s; burst=5",
     [acq(0, 3), refund(0, 2), peek(0), acq(0, 4), acq(0)])

case("cont_refund_capped_at_burst",
     "A refund larger than the missing tokens fills the bucket and no more.",
     "1/s; burst=5",
     [acq(0), refund(0, 3), peek(0), acq(0, 5), acq(0)])

case("cont_refund_on_full_bucket",
     "A refund on a full bucket leaves it full and adds no extra tokens.",
     "1/s; burst=3",
     [refund(S, 2), peek(S), acq(S, 3), acq(S), peek(2 * S)])

case("cont_refund_after_partial_refill",
     "A refund adds to the tokens accrued since the bucket was emptied.",
     "2/s; burst=4",
     [acq(0, 4), peek(500 * MS), refund(500 * MS, 2), peek(500 * MS), acq(500 * MS, 3), acq(500 * MS)])

case("cont_refund_fractional",
     "A refund adds whole tokens to a fractional level and the reset stays exact.",
     "3/s; burst=3",
     [acq(0, 3), refund(100 * MS, 1), peek(100 * MS), acq(100 * MS), acq(100 * MS), peek(S)])

case("cont_refund_cap_then_backwards",
     "A refund is capped at the instant of the refund, so a later backwards reading still sees only the tokens the state proves.",
     "1/s; burst=5",
     [acq(10 * S), refund(10 * S, 3), peek(10 * S), peek(6 * S), acq(6 * S, 2)])

case("cont_refund_on_full_changes_nothing",
     "A refund on a full bucket writes nothing, like a peek, so an earlier reading afterwards still sees what it saw before.",
     "1/s; burst=3",
     [peek(10 * S), peek(8 * S), refund(10 * S, 1), peek(10 * S), peek(8 * S), acq(8 * S, 2)])

# ---- continuous: clock going backwards ----------------------------------------------------

case("cont_backwards_after_drain",
     "A reading earlier than a drain sees the drained bucket, and its retry_after is measured from the clamped instant.",
     "1/s; burst=5",
     [acq(10 * S, 5), acq(8 * S), peek(8 * S), acq(12 * S), peek(12 * S)])

case("cont_backwards_sees_fewer",
     "Each reading earlier than a previous one sees fewer tokens than that reading did, never more, and never fewer than zero.",
     "1/s; burst=5",
     [acq(10 * S), peek(9 * S), acq(9 * S), peek(10 * S), acq(7 * S, 3), acq(4 * S), peek(12 * S)])

case("cont_backwards_after_full",
     "After a bucket refilled and was drawn at a later instant, an earlier reading sees only what the state proves.",
     "1/s; burst=2",
     [acq(0, 2), peek(10 * S), acq(10 * S), peek(5 * S), acq(5 * S), peek(11 * S)])

# ---- continuous: large times --------------------------------------------------------------

case("cont_large_time_1e15",
     "Decisions at 10^15 ns (about 11.6 days) are exact.",
     "5/s; burst=5",
     [acq(10**15, 5), acq(10**15), acq(10**15 + 199_999_999), acq(10**15 + 200 * MS), peek(10**15 + S)])

case("cont_large_time_1e15_999ps",
     "A non-divisible rate at 10^15 ns keeps exact rounding.",
     "999/s; burst=3",
     [acq(10**15, 3), acq(10**15), acq(10**15 + 1_001_001), acq(10**15 + 1_001_002), peek(10**15 + 1_001_002)])

case("cont_large_time_3e18",
     "Decisions at 3*10^18 ns (about 95 years) are exact for a non-divisible rate.",
     "3/s; burst=3",
     [acq(3 * 10**18, 3), acq(3 * 10**18), acq(3 * 10**18 + 333_333_333), acq(3 * 10**18 + 333_333_334),
      peek(3 * 10**18 + 333_333_334)])

case("cont_large_start_3e18",
     "A limiter created empty at 3*10^18 ns refills from that instant.",
     "1/s; burst=2; initial=0",
     [acq(3 * 10**18), acq(3 * 10**18 + S - 1), acq(3 * 10**18 + S), peek(3 * 10**18 + 3 * S)],
     start_ns=3 * 10**18)

# ---- interval -----------------------------------------------------------------------------

case("int_worked_example",
     "Interval 1/s with burst 4 and 1 initial token: 0 ms allowed, 1 ms rejected, and at 4001-4005 ms four allowed then one rejected.",
     "1/s; burst=4; initial=1; refill=interval",
     [acq(0), acq(1 * MS)] + [acq(t * MS) for t in (4001, 4002, 4003, 4004, 4005)])

case("int_basic_5ps",
     "Interval 5/s adds all 5 tokens at each whole second and none in between.",
     "5/s; refill=interval",
     [acq(0, 5), acq(0), acq(500 * MS), acq(999_999_999), acq(S), peek(S), acq(S, 4), peek(1500 * MS)])

case("int_boundary_last_ns",
     "The last nanosecond of a period sees no refill and the first nanosecond of the next sees the whole refill.",
     "1/s; burst=1; refill=interval",
     [acq(0), acq(999_999_999), acq(S), acq(2 * S - 1), peek(2 * S)])

case("int_grid_not_relative_to_request",
     "Interval refill happens on the grid anchored at creation, not one period after a request.",
     "1/s; burst=1; initial=0; refill=interval",
     [acq(900 * MS), acq(S), acq(1500 * MS), acq(2 * S)])

case("int_grid_start_offset",
     "With a non-zero creation instant the period grid is anchored there.",
     "1/s; burst=2; initial=0; refill=interval",
     [acq(1200 * MS), acq(1300 * MS), peek(1300 * MS), peek(3299 * MS), peek(3300 * MS), acq(3300 * MS, 2)],
     start_ns=300 * MS)

case("int_weighted_multi_period",
     "A weighted request waits for as many whole periods as its missing tokens need.",
     "10/s; burst=30; initial=0; refill=interval",
     [acq(0, 25), acq(2500 * MS, 25), acq(3 * S, 25), peek(3 * S), acq(5 * S, 30), acq(6 * S, 30)])

case("int_k_not_dividing_burst",
     "When k does not divide the burst the refill that fills the bucket is capped at the burst.",
     "3/s; burst=5; refill=interval",
     [acq(0, 5), peek(S), peek(2 * S), acq(2 * S, 4), peek(2 * S), peek(3 * S)])

case("int_cost_exceeds_burst",
     "In interval mode too a cost above the burst is an insufficient_capacity error that changes nothing.",
     "5/s; burst=3; refill=interval",
     [acq(0, 4), acq(0, 3), acq(0, 4), peek(0), acq(S, 3)])

case("int_peek_does_not_advance",
     "Peeks in interval mode report the refilled tokens without consuming or moving the state.",
     "2/s; burst=4; initial=0; refill=interval",
     [peek(0), peek(1500 * MS), peek(2500 * MS), acq(2500 * MS), peek(2500 * MS), peek(3 * S)])

case("int_refund_basic",
     "An interval-mode refund returns whole tokens at once.",
     "5/s; burst=5; refill=interval",
     [acq(0, 4), refund(100 * MS, 2), peek(100 * MS), acq(100 * MS, 3), acq(100 * MS)])

case("int_refund_capped_at_burst",
     "An interval-mode refund larger than the missing tokens fills the bucket and no more.",
     "5/s; burst=5; refill=interval",
     [acq(0), refund(0, 3), peek(0), acq(0, 5), acq(0)])

case("int_refund_on_full_bucket",
     "An interval-mode refund on a full bucket leaves it full.",
     "5/s; burst=5; refill=interval",
     [refund(2500 * MS, 2), peek(2500 * MS), acq(2500 * MS, 5), acq(2500 * MS), acq(3 * S)])

case("int_refund_in_later_period",
     "A refund in a later period first applies the refills due since the state's period.",
     "2/s; burst=4; initial=0; refill=interval",
     [refund(1500 * MS, 1), peek(1500 * MS), peek(2 * S), acq(2 * S, 4)])

case("int_backwards_clock",
     "A reading in an earlier period than the state sees the state's period and measures waits from its start.",
     "1/s; burst=3; initial=0; refill=interval",
     [acq(2500 * MS), acq(1500 * MS), acq(500 * MS), peek(500 * MS), acq(3 * S), peek(2 * S)])

case("int_backwards_within_period",
     "A backwards reading within the state's period is measured from its own time.",
     "1/s; burst=2; refill=interval",
     [acq(2900 * MS, 2), acq(2100 * MS), peek(2100 * MS), acq(3 * S)])

case("int_initial_zero",
     "An empty interval bucket gets its first tokens at the next grid point.",
     "1/s; burst=1; initial=0; refill=interval",
     [acq(0), peek(0), acq(S), acq(S)])

case("int_five_per_two_seconds",
     "Interval 5/2s adds 5 tokens every 2 s.",
     "5/2s; refill=interval",
     [acq(0, 5), acq(S), acq(2 * S - 1), acq(2 * S, 5), peek(5 * S)])

case("int_100_per_minute",
     "Interval 100/minute with burst 150 refills 100 per minute, capped at 150.",
     "100/minute; burst=150; initial=0; refill=interval",
     [acq(59_999_999_999), peek(MINUTE), acq(MINUTE, 150), peek(2 * MINUTE), acq(2 * MINUTE, 150), peek(10 * MINUTE)])

case("int_999ps_nondivisible_reset",
     "Interval 999/s with burst 1000 needs two periods to refill more than 999 missing tokens.",
     "999/s; burst=1000; refill=interval",
     [acq(0), acq(0, 999), peek(S), acq(S, 1000), acq(2 * S, 1000)])

case("int_7_per_ms",
     "Interval 7/ms with burst 10 refills 7 tokens each millisecond.",
     "7/ms; burst=10; refill=interval",
     [acq(0, 10), acq(999_999), acq(MS, 8), acq(MS, 7), peek(2 * MS), peek(3 * MS)])

case("int_words_and_case",
     "A rate string with 'per', a long unit name and upper-case option values selects interval refill.",
     "3 PER Second ; refill = INTERVAL",
     [acq(0, 3), acq(10), peek(S)])

case("int_large_time_1e15",
     "Interval decisions at 10^15 ns are exact and the bucket is full after a long idle.",
     "1/s; burst=5; initial=0; refill=interval",
     [peek(10**15), acq(10**15, 5), acq(10**15), acq(10**15 + S)])

case("int_large_time_3e18",
     "Interval decisions at 3*10^18 ns plus an offset on the grid are exact.",
     "7/ms; burst=10; refill=interval",
     [acq(3 * 10**18 + 123, 10), acq(3 * 10**18 + 123), acq(3 * 10**18 + MS - 1), acq(3 * 10**18 + MS, 7)])

# ---- keyed ----------------------------------------------------------------------------------

case("keyed_independent_continuous",
     "Draining one key leaves other keys untouched.",
     "2/s; burst=2",
     [acq(0, key="a"), acq(0, key="a"), acq(0, key="a"), acq(0, key="b"), peek(0, key="c"),
      acq(0, key="b"), acq(0, key="b"), peek(0, key="a"), acq(500 * MS, key="a"), acq(500 * MS, key="b")])

case("keyed_initial_per_key_at_first_request",
     "Each key's bucket is created with the initial tokens at that key's first request, not at limiter creation.",
     "1/s; burst=3; initial=0",
     [acq(0, key="a"), peek(2 * S, key="b"), peek(2 * S, key="a"), acq(2 * S, 2, key="a"),
      acq(2 * S, key="b"), acq(3 * S, key="b"), peek(5 * S, key="b")])

case("keyed_late_key_continuous",
     "A key first seen later fills from its own creation instant.",
     "1/s; burst=2; initial=0",
     [acq(0, key="a"), acq(S, key="b"), peek(2 * S, key="a"), peek(2 * S, key="b"), acq(3 * S, 2, key="b"), acq(3 * S, 2, key="a")])

case("keyed_interval_grid_shared",
     "In interval mode every key uses the grid anchored at limiter creation, so a late key refills at the next shared grid point.",
     "1/s; burst=2; initial=0; refill=interval",
     [acq(500 * MS, key="a"), acq(1700 * MS, key="b"), peek(1700 * MS, key="a"), acq(2 * S, key="b"),
      acq(2 * S, 2, key="a"), acq(2 * S, key="b"), peek(2 * S, key="a")])

case("keyed_interval_grid_offset_start",
     "With the grid anchored at a non-zero start, a key created mid-period refills at the shared grid point, not one period after its creation.",
     "2/s; burst=2; initial=1; refill=interval",
     [acq(250 * MS, key="x"), acq(250 * MS, key="x"), acq(900 * MS, key="y"), acq(900 * MS, key="y"),
      acq(1_249_999_999, key="y"), acq(1250 * MS, key="y"), peek(1250 * MS, key="y"), acq(1250 * MS, 2, key="x"),
      acq(1250 * MS, key="x"), peek(2250 * MS, key="y")],
     start_ns=250 * MS)

case("keyed_three_keys_weighted",
     "Three interleaved keys with weighted costs, including a cost above burst on an existing key, keep separate balances.",
     "10/s; burst=10",
     [acq(0, 6, key="a"), acq(0, 6, key="b"), peek(0, key="c"), acq(0, 11, key="c"), acq(0, 6, key="a"),
      acq(0, 10, key="c"), acq(0, 4, key="b"), acq(200 * MS, 6, key="a"), acq(200 * MS, 3, key="b"),
      acq(200 * MS, 3, key="c"), peek(S, key="c")])

case("keyed_refunds_per_key",
     "A refund on one key restores only that key's tokens.",
     "1/s; burst=3",
     [acq(0, 3, key="a"), acq(0, 3, key="b"), refund(0, 2, key="a"), peek(0, key="a"), peek(0, key="b"),
      acq(0, 2, key="a"), acq(0, key="b"), refund(0, 3, key="b"), peek(0, key="b")])

case("keyed_backwards_clock_per_key",
     "A backwards reading on one key is clamped by that key's state only, and a key first seen at an earlier time starts full.",
     "1/s; burst=2",
     [acq(10 * S, 2, key="a"), acq(5 * S, key="b"), acq(8 * S, key="a"), acq(5 * S, key="b"),
      acq(5 * S, key="b"), acq(11 * S, key="a"), peek(4 * S, key="b"), peek(6 * S, key="b")])

case("keyed_interval_backwards_per_key",
     "In interval mode a backwards reading, even one earlier than the key's creation, uses that key's own state period while the grid stays shared.",
     "1/s; burst=2; initial=0; refill=interval",
     [acq(3500 * MS, key="a"), acq(1500 * MS, key="b"), acq(1200 * MS, key="a"), acq(1200 * MS, key="b"),
      peek(2 * S, key="b"), peek(3 * S, key="a")])

# ---- quota errors ---------------------------------------------------------------------------

for _name, _quota, _err, _desc in [
    ("empty", "", "parse_error", "The empty string is not a rate."),
    ("count_only", "10", "parse_error", "A count without a unit is refused."),
    ("unknown_unit", "10/fortnight", "parse_error", "An unknown unit is refused."),
    ("plural_abbreviation", "10/secs", "parse_error", "Only the listed unit spellings are accepted."),
    ("words_for_count", "ten/s", "parse_error", "The count must be digits."),
    ("negative_count", "-5/s", "parse_error", "A signed count is refused."),
    ("decimal_count", "1.5/s", "parse_error", "A decimal count is refused."),
    ("missing_unit_after_n", "5/2", "parse_error", "A period multiplier needs a unit."),
    ("missing_semicolon", "10/s burst=5", "parse_error", "Options must be separated by semicolons."),
    ("trailing_semicolon", "10/s;", "parse_error", "A semicolon must be followed by an option."),
    ("unknown_option", "10/s; bogus=1", "parse_error", "An unknown option is refused."),
    ("bad_refill_mode", "10/s; refill=sometimes", "parse_error", "Only continuous and interval refill modes exist."),
    ("non_numeric_burst", "10/s; burst=abc", "parse_error", "A burst must be digits."),
    ("negative_initial", "10/s; initial=-1", "parse_error", "A signed initial is refused."),
    ("zero_count", "0/s", "invalid_quota", "A zero count is a valid parse but an invalid quota."),
    ("zero_period", "10/0s", "invalid_quota", "A zero period multiplier is a valid parse but an invalid quota."),
    ("zero_burst", "10/s; burst=0", "invalid_quota", "A zero burst is an invalid quota."),
    ("initial_above_burst", "10/s; burst=5; initial=6", "invalid_quota", "Initial tokens above the burst are an invalid quota."),
    ("initial_above_default_burst", "10/s; initial=11", "invalid_quota", "Initial tokens above the default burst (COUNT) are an invalid quota."),
    ("zero_count_with_burst", "0/s; burst=5", "invalid_quota", "A zero count is invalid even with a burst."),
]:
    bad("quota_" + _name, _desc, _quota, _err)


# --------------------------------------------------------------------------------------
# Internal consistency: parser spot checks and the worked examples of the brief/spec
# --------------------------------------------------------------------------------------

def self_test_parser() -> None:
    assert parse_rate("100/minute") == Quota(100, 60 * S, 100, 100, "continuous")
    assert parse_rate("100 per minute") == Quota(100, 60 * S, 100, 100, "continuous")
    assert parse_rate("5/2s") == Quota(5, 2 * S, 5, 5, "continuous")
    assert parse_rate("10/s; burst=3") == Quota(10, S, 3, 3, "continuous")
    assert parse_rate("10/s; initial=0") == Quota(10, S, 10, 0, "continuous")
    assert parse_rate(" 1 / S ; REFILL = Interval ") == Quota(1, S, 1, 1, "interval")
    assert parse_rate("2 per 3 minutes") == Quota(2, 180 * S, 2, 2, "continuous")
    assert parse_rate("7/ms").P == MS and parse_rate("3/us").P == US and parse_rate("1/ns").P == 1
    assert parse_rate("1/d").P == DAY and parse_rate("1/hr").P == HOUR and parse_rate("1/m").P == MINUTE


def allowed_flags(result: dict) -> list[bool]:
    return [s["expect"]["allowed"] for s in result["steps"] if "expect" in s]


def assert_worked_examples(results: dict[str, dict]) -> list[str]:
    notes = []
    a = allowed_flags(results["cont_worked_burst_then_idle"])
    assert a == [True] * 5 + [False] * 2 + [True, True, False], a
    notes.append("1/s burst 5: 7 instant -> 5 allowed, 2 rejected; +2 s -> 2 allowed, 3rd rejected")

    a = allowed_flags(results["cont_worked_empty_start"])
    assert a == [True, True, False, False], a
    notes.append("1/s burst 5 initial 0: wait 2 s, 4 requests -> 2 allowed")

    a = allowed_flags(results["cont_worked_60rps_against_10rps_burst_50"])
    assert len(a) == 180
    assert all(a[:59]), "first 59 must be allowed"
    assert a[59] is False, "60th must be rejected"
    assert a[60] is True, "61st must be allowed"
    assert sum(a) == 79, sum(a)
    notes.append("10/s burst 50 at 60 req/s: first 59 allowed, 60th rejected, 61st allowed, 79/180 allowed")

    r = results["int_worked_example"]["steps"]
    a = allowed_flags(results["int_worked_example"])
    assert a == [True, False, True, True, True, True, False], a
    assert r[1]["expect"]["retry_after_ns"] == 999 * MS
    notes.append("interval 1/s burst 4 initial 1: 0 ms allowed, 1 ms rejected (retry 999 ms), 4001-4004 ms allowed, 4005 ms rejected")

    first = results["cont_first_acquire_5ps"]["steps"][0]["expect"]
    assert first == {"allowed": True, "limit": 5, "remaining": 4, "retry_after_ns": 0, "reset_after_ns": 200 * MS}
    frac = results["cont_fractional_accrual_2ps"]["steps"][0]["expect"]
    assert frac["remaining"] == 0 and frac["reset_after_ns"] == 750 * MS  # 0.5 token held at 250 ms, full at 1 s
    assert results["cont_fractional_accrual_2ps"]["steps"][1]["expect"]["retry_after_ns"] == 250 * MS
    assert results["cont_nondivisible_7_per_ms"]["steps"][1]["expect"]["retry_after_ns"] == 142_858
    assert results["cont_boundary_3ps"]["steps"][0]["expect"]["reset_after_ns"] == 333_333_334
    # the clock going backwards never shows more tokens than a later reading did
    b = results["cont_backwards_sees_fewer"]["steps"]
    assert b[0]["expect"]["remaining"] == 4 and b[1]["expect"]["remaining"] == 3
    return notes


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------

def generate() -> tuple[dict, list[str]]:
    self_test_parser()
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    results = [run_case(c) for c in CASES]
    by_name = {r["name"]: r for r in results}
    notes = assert_worked_examples(by_name)
    acquire_cases = [r for r in results if "steps" in r]
    assert len(acquire_cases) >= 40 and sum(r["keyed"] for r in acquire_cases) >= 6
    return {"format": FORMAT, "cases": results}, notes


def render(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"


def check(doc: dict) -> int:
    expected = render(doc)
    try:
        actual = VECTORS.read_text(encoding="utf-8")
    except FileNotFoundError:
        print(f"{VECTORS} is missing; run conformance/generate.py", file=sys.stderr)
        return 1
    if actual == expected:
        print(f"{VECTORS.name} is up to date ({len(doc['cases'])} cases)")
        return 0
    print(f"{VECTORS.name} differs from what generate.py produces:", file=sys.stderr)
    try:
        committed = json.loads(actual)
    except json.JSONDecodeError as e:
        print(f"  committed file is not valid JSON: {e}", file=sys.stderr)
        return 1
    if committed.get("format") != doc["format"]:
        print(f"  format: committed {committed.get('format')!r}, generated {doc['format']!r}", file=sys.stderr)
    old = {c.get("name"): c for c in committed.get("cases", [])}
    new = {c["name"]: c for c in doc["cases"]}
    for name in new:
        if name not in old:
            print(f"  case {name}: missing from the committed file", file=sys.stderr)
        elif old[name] != new[name]:
            fields = sorted(f for f in set(old[name]) | set(new[name]) if old[name].get(f) != new[name].get(f))
            print(f"  case {name}: differs in {', '.join(fields)}", file=sys.stderr)
            o_steps, n_steps = old[name].get("steps", []), new[name].get("steps", [])
            if len(o_steps) != len(n_steps):
                print(f"    {len(o_steps)} steps committed, {len(n_steps)} generated", file=sys.stderr)
            for i, (o, n) in enumerate(zip(o_steps, n_steps)):
                if o != n:
                    print(f"    step {i}: committed {json.dumps(o, sort_keys=True)}", file=sys.stderr)
                    print(f"    step {i}: generated {json.dumps(n, sort_keys=True)}", file=sys.stderr)
                    break
    for name in old:
        if name not in new:
            print(f"  case {name}: not generated any more", file=sys.stderr)
    if list(old) != list(new) and set(old) == set(new):
        print("  case order differs", file=sys.stderr)
    if json.loads(expected) == committed:
        print("  (content equal; only the layout differs: sorted keys, indent=1, trailing newline)", file=sys.stderr)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if vectors.json is not what this script generates")
    args = ap.parse_args()
    if not __debug__:
        sys.exit("generate.py relies on assert for its self-checks; run it without -O")
    doc, notes = generate()
    if args.check:
        return check(doc)
    VECTORS.write_text(render(doc), encoding="utf-8", newline="\n")
    print(f"wrote {VECTORS} ({len(doc['cases'])} cases)")
    for n in notes:
        print(f"  ok: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
