#!/usr/bin/env python3
"""Generate every conformance vector file from an independent reference of docs/SEMANTICS.md.

    conformance/vectors.json     the token bucket (both refill modes, keyed), rate-string errors
    conformance/algorithms.json  GCRA, fixed window, sliding window counter, sliding log,
                                 leaky queue (single and keyed), and composite limits

The reference (conformance/reference.py) is deliberately plain: exact integers and rationals
(fractions.Fraction), no floats, one class per algorithm, each line traceable to a numbered
step of SEMANTICS.md. The test cases below are hand-written inputs only (or seeded
pseudo-random walks); every expected decision is computed by the reference, and checked
against the reference's own rules (see "Self-checks").

    python3 conformance/generate.py          # (re)write both files
    python3 conformance/generate.py --check  # exit 1 if a committed file has drifted

Standard library only (Python 3.11+).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from fractions import Fraction
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the vectors
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import (  # noqa: E402
    CENTURY_NS, DAY, HOUR, MINUTE, MS, S, US,
    Composite, Continuous, Gcra, Interval, LeakyQueue, Quota, QuotaError,
    ceil_div, gcd, new_limiter, parse_rate,
)

FORMAT = 1
HERE = Path(__file__).resolve().parent
VECTORS = HERE / "vectors.json"
ALGORITHMS = HERE / "algorithms.json"
# Each file keeps its layout: sorted keys, this indent, a trailing newline.
INDENT = {VECTORS: 1, ALGORITHMS: 2}

# The largest clock reading in any vector: one below a Julian century, which every quota
# accepts (a keyed limiter refuses its codec's last instant, which is never below the century).
MAX_READING = CENTURY_NS - 1


# --------------------------------------------------------------------------------------
# Self-checks run on every decision (they test the reference against itself)
# --------------------------------------------------------------------------------------

def t_effective(limiter, t: int) -> Fraction | int:
    """The request's effective instant t_e (SEMANTICS: the clamped reading)."""
    v = limiter.view(t)
    return v[1] if isinstance(limiter, Interval) else v[0]


def probe(before, after, t: int, c: int, d: dict) -> None:
    """Check retry_after and reset_after against the decision rule itself.

    Both are waits measured from the (possibly clamped) instant t_e of the request.
    """
    t_e = t_effective(before, t)
    if not d["allowed"]:
        w = d["retry_after_ns"]  # the least wait after which the same request succeeds
        assert copy.deepcopy(before).acquire(t_e + w, c)["allowed"], "retry_after too short"
        assert not copy.deepcopy(before).acquire(t_e + w - 1, c)["allowed"], "retry_after too long"
    w = d["reset_after_ns"]  # the least wait after which the bucket is full again
    assert after.is_full(t_e + w), "reset_after too short"
    if w > 0:
        assert not after.is_full(t_e + w - 1), "reset_after too long"


def check_remaining(after, t: int, d: dict, most: int = 200) -> None:
    """`remaining` is how many more unit requests the same reading would admit."""
    if d["remaining"] > most:
        return
    trial = copy.deepcopy(after)
    n = 0
    while n <= d["remaining"] and trial.acquire(t, 1)["allowed"]:
        n += 1
    assert n == d["remaining"], f"remaining {d['remaining']} but {n} unit requests pass"


class Ledger:
    """Conservation bound: admitted <= what the algorithm can ever admit between the bucket's
    creation and the latest reading (initial tokens + refill, or N per window, ...) + refunds."""

    def __init__(self, limiter, t0: int):
        self.limiter, self.t0, self.t_max = limiter, t0, t0
        self.admitted = self.refunded = 0

    def check(self, t: int) -> None:
        self.t_max = max(self.t_max, t)
        bound = self.limiter.admitted_bound(self.t0, self.t_max)
        assert self.admitted <= bound + self.refunded, "conservation violated"


def as_token_bucket(q: Quota) -> Quota:
    return Quota(q.k, q.P, q.b, q.i, "continuous")


# --------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------

SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
U63 = 2**63  # every number in a vector fits i64 and u64


def check_header(case: dict) -> None:
    name = case["name"]
    assert SNAKE.fullmatch(name), name
    desc = case["description"]
    assert desc.endswith(".") and desc.count(". ") == 0, f"{name}: description must be one sentence"


def check_numbers(name: str, steps: list[dict]) -> None:
    for s in steps:
        for v in [s["t_ns"], s["cost"], *s.get("expect", {}).values()]:
            assert isinstance(v, bool) or (isinstance(v, int) and 0 <= v < U63) or isinstance(v, str), (name, s)
        assert s["t_ns"] <= MAX_READING, f"{name}: reading past the century"


def check_quota_bounds(name: str, q: Quota) -> None:
    """The core refuses token buckets and GCRA quotas whose burst x time per token (scaled,
    after the gcd) reaches 2^63; SEMANTICS does not state that bound, so no case goes near it."""
    if q.algorithm in ("token_bucket", "gcra"):
        g = gcd(q.k, q.P)
        if q.mode == "interval":
            assert (q.b // q.k + 2) * q.P < 2**62, name
        else:
            assert q.b * (q.P // g) < 2**62, name


INSUFFICIENT_ERROR = {"error": "insufficient_capacity"}


def run_keyed(q: Quota, start: int, steps: list[dict], error_creates: bool) -> list[dict]:
    """Keyed steps: one bucket per key, created by the key's first acquire at its t_ns
    (SEMANTICS "Keyed limiters": a cost-0 request creates it too), with the quota's initial
    tokens. A refund of an absent key does nothing. Whether a request that is an
    insufficient_capacity error creates the bucket SEMANTICS does not say: `error_creates`
    picks one answer, and the vectors must not depend on it."""
    buckets: dict[str, object] = {}
    out = []
    for s in steps:
        t, op, c, key = s["t_ns"], s["op"], s["cost"], s["key"]
        step = dict(s)
        if key not in buckets and op == "acquire":
            fresh = new_limiter(q, start, t)
            d = copy.deepcopy(fresh).acquire(t, c)
            if "error" not in d or error_creates:
                buckets[key] = fresh
        if key in buckets:
            bucket = buckets[key]
            if op == "acquire":
                step["expect"] = bucket.acquire(t, c)
            else:
                bucket.refund(t, c)
        elif op == "acquire":
            step["expect"] = dict(INSUFFICIENT_ERROR)
        out.append(step)
    return out



def run_case(case: dict) -> dict:
    check_header(case)
    name = case["name"]
    desc = case["description"]
    if "quota_error" in case:
        try:
            parse_rate(case["quota"])
        except QuotaError as e:
            assert e.kind == case["quota_error"], f"{name}: {e}"
            return dict(case)
        raise AssertionError(f"{name}: quota {case['quota']!r} was accepted")

    q = parse_rate(case["quota"])
    check_quota_bounds(name, q)
    start = case["start_ns"]
    keyed = any("key" in s for s in case["steps"])
    assert all(("key" in s) == keyed for s in case["steps"]), f"{name}: keys on some steps only"
    for s in case["steps"]:
        t, c = s["t_ns"], s["cost"]
        assert isinstance(t, int) and t >= start, f"{name}: readings before start_ns are not covered"
        assert isinstance(c, int) and c >= 0
        assert s["op"] in ("acquire", "refund"), f"{name}: unknown op {s['op']!r}"
        if s["op"] == "refund":
            assert c >= 1, f"{name}: refunds of cost 0 are not covered"
            if q.algorithm == "token_bucket":
                assert c <= q.b, f"{name}: token-bucket refunds in vectors have cost <= burst"

    # The self-checked run: every key's bucket (one bucket at start_ns when not keyed).
    buckets: dict[str | None, object] = {}
    ledgers: dict[str | None, Ledger] = {}
    twins: dict[str | None, object] = {}  # GCRA: the continuous token bucket of the same quota
    if not keyed:
        buckets[None] = new_limiter(q, start, start)
    out_steps = []
    for s in case["steps"]:
        t, op, c, key = s["t_ns"], s["op"], s["cost"], s.get("key")
        step = dict(s)
        if key not in buckets:
            if op == "refund":  # a refund of an absent key does nothing
                out_steps.append(step)
                continue
            fresh = new_limiter(q, start, t)
            if "error" in copy.deepcopy(fresh).acquire(t, c):
                step["expect"] = dict(INSUFFICIENT_ERROR)
                out_steps.append(step)
                continue
            buckets[key] = fresh
        bucket = buckets[key]
        if key not in ledgers:
            ledgers[key] = Ledger(bucket, t if keyed else start)
            if isinstance(bucket, Gcra):
                twins[key] = Continuous(as_token_bucket(q), start, t if keyed else start)
        if op == "acquire":
            before = copy.deepcopy(bucket)
            d = bucket.acquire(t, c)
            if "error" not in d:
                probe(before, bucket, t, c, d)
                check_remaining(bucket, t, d)
                if c > 0 and d["allowed"]:
                    ledgers[key].admitted += c
            if key in twins:  # SEMANTICS: GCRA decides call for call as the token bucket
                assert twins[key].acquire(t, c) == d, f"{name}: GCRA differs from the token bucket"
            step["expect"] = d
        else:
            bucket.refund(t, c)
            ledgers[key].refunded += c
            if key in twins:
                twins[key].refund(t, c)
        ledgers[key].check(t)
        out_steps.append(step)
    if keyed:
        # The same expectations whichever way an erroring first request went.
        for error_creates in (False, True):
            again = run_keyed(q, start, case["steps"], error_creates)
            assert again == out_steps, f"{name}: depends on whether an error creates a bucket"
    check_numbers(name, out_steps)
    return {"name": name, "description": desc, "quota": case["quota"], "start_ns": start,
            "keyed": keyed, "steps": out_steps}


def run_composite_case(case: dict) -> dict:
    check_header(case)
    name = case["name"]
    start = case["start_ns"]
    quotas = [parse_rate(r) for r in case["quotas"]]
    assert len(quotas) >= 2, name
    for q in quotas:
        check_quota_bounds(name, q)
    both = Composite([new_limiter(q, start, start) for q in quotas])
    out_steps = []
    for s in case["steps"]:
        t, op, c = s["t_ns"], s["op"], s["cost"]
        assert "key" not in s and t >= start and c >= 0, name
        step = dict(s)
        if op == "acquire":
            alone = [copy.deepcopy(p).acquire(t, c) for p in both.parts]
            d = both.acquire(t, c)
            if "error" in d:
                assert any("error" in a for a in alone), name
            else:
                # all or nothing: admitted iff every part alone would admit
                assert d["allowed"] == all(a["allowed"] for a in alone), name
            step["expect"] = d
        else:
            assert op == "refund" and c >= 1, name
            both.refund(t, c)
        out_steps.append(step)
    check_numbers(name, out_steps)
    return {"name": name, "description": case["description"], "quotas": case["quotas"],
            "start_ns": start, "keyed": False, "steps": out_steps}


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


# The token bucket's cases (and every quota error) go to vectors.json, the other algorithms'
# to algorithms.json, in the order they are written here.
CASES: dict[Path, list[dict]] = {VECTORS: [], ALGORITHMS: []}
COMPOSITE_CASES: list[dict] = []


def case(name: str, description: str, quota: str, steps: list[dict], start_ns: int = 0) -> None:
    target = VECTORS if parse_rate(quota).algorithm == "token_bucket" else ALGORITHMS
    CASES[target].append({"name": name, "description": description, "quota": quota,
                          "start_ns": start_ns, "steps": steps})


def bad(name: str, description: str, quota: str, error: str) -> None:
    CASES[VECTORS].append({"name": name, "description": description, "quota": quota, "quota_error": error})


def composite(name: str, description: str, quotas: list[str], steps: list[dict], start_ns: int = 0) -> None:
    COMPOSITE_CASES.append({"name": name, "description": description, "quotas": quotas,
                            "start_ns": start_ns, "steps": steps})


def tuples(steps: list[tuple]) -> list[dict]:
    """Steps written as (t_ns, 'a' | 'r', cost) or (t_ns, 'a' | 'r', key, cost)."""
    out = []
    for s in steps:
        t, op, *key, c = s
        step = acq(t, c, *key) if op == "a" else refund(t, c, *key)
        out.append(step)
    return out


def at(t: int, n: int, c: int = 1) -> list[tuple]:
    """n requests of cost c at t."""
    return [(t, "a", c)] * n


def cat(*parts: list[tuple]) -> list[tuple]:
    return [s for p in parts for s in p]


M64 = 2**64 - 1


def xorshift(seed: int):
    """A deterministic 64-bit xorshift stream (the walks' source of choices)."""
    x = (seed * 0x9E37_79B9_7F4A_7C15 & M64) | 1

    def step() -> int:
        nonlocal x
        x ^= (x << 13) & M64
        x ^= x >> 7
        x ^= (x << 17) & M64
        return x
    return step


def walk(seed: int, start: int, span: int, most: int, n: int) -> list[tuple]:
    """A pseudo-random walk: times move forward by 0..span (sometimes stay, sometimes go back,
    never before start), costs 0..=most+1 (most+1 may be above the limit: an error), one step
    in eight a refund of 1..=most."""
    rand = xorshift(seed)
    t = start
    out = []
    for _ in range(n):
        r = rand() % 6
        if r == 0:
            pass
        elif r == 1:
            t = max(max(t - rand() % span, 0), start)
        else:
            t = t + rand() % span
        if rand() % 8 == 0:
            out.append((t, "r", 1 + rand() % most))
        else:
            out.append((t, "a", rand() % (most + 2)))
    return out


def keyed_walk(seed: int, keys: list[str], span: int, most: int, n: int, start: int = 0) -> list[tuple]:
    """A keyed walk: times only move forward (a keyed store may drop a full bucket, and a key
    re-created later starts no earlier than the drop), keys drawn from `keys`, costs 0..=most+1,
    one step in eight a refund."""
    rand = xorshift(seed)
    t = start
    out = []
    for _ in range(n):
        if rand() % 3 != 0:
            t += rand() % span
        key = keys[rand() % len(keys)]
        if rand() % 8 == 0:
            out.append((t, "r", key, 1 + rand() % most))
        else:
            out.append((t, "a", key, rand() % (most + 2)))
    return out


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

case("cont_per_week",
     "At 2/week (w, week or weeks: 7 days) one token takes 3.5 days.",
     "2/week",
     [acq(0, 2), acq(0), acq(7 * DAY // 2 - 1), acq(7 * DAY // 2), peek(7 * DAY // 2), peek(7 * DAY)])

case("cont_per_n_weeks_short",
     "1/2w is one token per 14 days.",
     "1/2w",
     [acq(0), acq(14 * DAY - 1), acq(14 * DAY)])

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

# ---- large clock values and large reduced rates ----------------------------------------------
#
# Readings around 2^53 ns (the last integer an IEEE double holds exactly; odd readings above it
# have no double), 2^60 and the last nanosecond before a Julian century; rates whose reduced
# k = k/gcd(k, P) is large (1000003/hour: one token every 3599989.2 ns, 1000000007/s: just over
# one token per ns), so that every scaled state (F*k, TAT*k, p*(W - e), ...) is far beyond 2^53
# and often beyond 2^64. A store that computes in doubles (a Redis Lua script) must either be
# exact here or refuse the quota.

T52, T53, T60 = 2**52, 2**53, 2**60
B53 = (T53 // S + 1) * S          # 9007200000000000: the first whole second above 2^53
LAST = MAX_READING                # 3155759999999999999: the century's last nanosecond
HOUR_BEFORE_CENTURY = CENTURY_NS - HOUR  # a Julian century is 876600 whole hours
TOKEN_1000003_PER_HOUR = 3_599_990  # ceil(3.6e12 / 1000003): one token of 1000003/hour, in whole ns
FIXED_7S_2P60 = ceil_div(T60, 7 * S) * 7 * S  # the first 7 s window boundary above 2^60

case("cont_2p53_token_at_odd_ns",
     "At 1/s a token taken at 2^53 + 1 - 10^9 ns is back at exactly 2^53 + 1 ns (an odd reading no double holds), not at 2^53.",
     "1/s; burst=1",
     [acq(T53 + 1 - S), acq(T53 - 1), acq(T53), acq(T53 + 1), peek(T53 + 1), acq(T53 + 2)],
     start_ns=T53 + 1 - S)

case("cont_2p52_to_2p53_7ps",
     "At 7/s an empty bucket created at 2^52 ns accrues fractional tokens, and after an idle jump past 2^53 the boundaries still round up exactly.",
     "7/s; burst=3; initial=0",
     [peek(T52 + 1), acq(T52 + 142_857_142), acq(T52 + 142_857_143), peek(T52 + 142_857_143),
      peek(T53 + 1), acq(T53 + 1, 3), acq(T53 + 142_857_143), acq(T53 + 142_857_144), peek(T53 + 142_857_144),
      refund(T53 + 142_857_144, 2), peek(T53 + 142_857_144), acq(T53 + 142_857_144, 3)],
     start_ns=T52)

case("cont_large_k_1000003_per_hour_2p60",
     "At 1000003/hour (reduced k = 1000003, a token every 3599989.2 ns) a drained bucket at 2^60 ns refills its first token at 3599990 ns, and refunds and peeks stay exact.",
     "1000003/hour",
     [acq(T60, 1_000_003), acq(T60 + TOKEN_1000003_PER_HOUR - 1), acq(T60 + TOKEN_1000003_PER_HOUR),
      peek(T60 + TOKEN_1000003_PER_HOUR), refund(T60 + TOKEN_1000003_PER_HOUR, 500_000),
      peek(T60 + TOKEN_1000003_PER_HOUR), acq(T60 + TOKEN_1000003_PER_HOUR, 500_001),
      acq(T60 + TOKEN_1000003_PER_HOUR, 1), peek(T60 + HOUR), peek(T60 + HOUR + 1_000), peek(LAST)])

case("cont_large_k_near_century",
     "At 1000003/hour with burst 7 the boundaries in the last hours before a century of nanoseconds are exact to the nanosecond.",
     "1000003/hour; burst=7",
     [acq(CENTURY_NS - 2 * HOUR, 7), acq(CENTURY_NS - 2 * HOUR + 25_199_924, 7),
      acq(CENTURY_NS - 2 * HOUR + 25_199_925, 7), peek(LAST - 1), acq(LAST, 7), peek(LAST),
      refund(LAST, 2), peek(LAST), acq(LAST, 3)])

case("cont_billion_per_second_at_century",
     "At 1000000007/s (just over one token per ns) the tokens accrued over single nanoseconds just before a century are counted exactly.",
     "1000000007/s",
     [acq(LAST - 10, 1_000_000_007), acq(LAST - 9, 2), acq(LAST - 8, 2), peek(LAST - 8), peek(LAST - 7),
      acq(LAST - 1, 6), peek(LAST)])

case("cont_backwards_near_century",
     "Readings that go back by seconds just before a century see only what the state proves, and a refund there is capped at its own reading.",
     "7/s; burst=5",
     [acq(LAST, 5), acq(LAST - 5 * S), peek(LAST - 3 * S), refund(LAST, 5), peek(LAST - 1), acq(LAST - 2 * S), peek(LAST)])

case("cont_peek_refund_at_2p53",
     "Cost-0 peeks and refunds at odd readings just above 2^53 report the state at their own nanosecond.",
     "3/s; burst=2",
     [acq(T53 + 1, 2), peek(T53 + 1), peek(T53 + 3), peek(T53 + 333_333_334), refund(T53 + 333_333_335, 1),
      peek(T53 + 333_333_335), acq(T53 + 333_333_335, 2), peek(T53 + 666_666_669), peek(T53 + 666_666_670)],
     start_ns=T53 - 1)

case("int_2p53_grid_odd",
     "With the interval grid anchored at 2^53 + 1 - 10^9 ns the refill lands at exactly 2^53 + 1 ns, not at 2^53.",
     "1/s; burst=2; initial=0; refill=interval",
     [acq(T53 - 1), acq(T53), acq(T53 + 1), peek(T53 + 1), acq(T53 + S), acq(T53 + 1 + S), peek(T53 + 1 + 3 * S),
      acq(T53 + 1 + 3 * S, 2)],
     start_ns=T53 + 1 - S)

case("int_large_k_near_century",
     "Interval 1000003/hour with burst 2000006 refills a million tokens at the last whole hour before a century of nanoseconds.",
     "1000003/hour; burst=2000006; refill=interval",
     [acq(HOUR_BEFORE_CENTURY - 1, 2_000_006), acq(HOUR_BEFORE_CENTURY - 1), acq(HOUR_BEFORE_CENTURY, 1_000_003),
      acq(HOUR_BEFORE_CENTURY), peek(LAST), refund(LAST, 1_000_003), peek(LAST), acq(LAST, 1_000_004),
      acq(LAST, 1_000_003)])

case("int_7ps_large_start",
     "Interval 7/s with its grid anchored at 2^60 + 123456789 ns refills 7 tokens at each whole second after that instant.",
     "7/s; burst=10; initial=3; refill=interval",
     [acq(T60 + 123_456_789, 3), acq(T60 + 123_456_789 + S - 1), acq(T60 + 123_456_789 + S, 7),
      acq(T60 + 123_456_789 + S), peek(T60 + 123_456_789 + 3 * S + 5), acq(T60 + 123_456_789 + 3 * S + 5, 10),
      refund(T60 + 123_456_789 + 3 * S + 5, 4), peek(T60 + 123_456_789 + 3 * S + 5), peek(LAST)],
     start_ns=T60 + 123_456_789)

case("keyed_large_times_continuous",
     "Three keys of 1000003/hour with burst 3 interleaved at 2^60 and just before a century, one first seen at the century's last nanosecond, with a refund of an absent key that does nothing.",
     "1000003/hour; burst=3",
     [acq(T60, 3, key="a"), acq(T60 + 1, key="b"), peek(T60 + 1, key="a"), refund(T60 + 2, 2, key="c"),
      acq(T60 + TOKEN_1000003_PER_HOUR - 1, key="a"), acq(T60 + TOKEN_1000003_PER_HOUR, key="a"),
      acq(T60 + TOKEN_1000003_PER_HOUR, 3, key="b"), acq(T60 + TOKEN_1000003_PER_HOUR, 2, key="b"),
      peek(T60 + TOKEN_1000003_PER_HOUR, key="c"), acq(LAST, 3, key="c"), peek(LAST, key="a"),
      refund(LAST, 1, key="c"), peek(LAST, key="c"), acq(LAST, 2, key="b")])

case("keyed_interval_large_start",
     "Interval keys on a grid anchored at 2^53 + 1 ns each start empty at their own first request and all refill at the shared grid points.",
     "7/s; burst=7; initial=0; refill=interval",
     [acq(T53 + 1 + S // 2, key="x"), acq(T53 + 3 * S, key="y"), acq(T53 + 1 + S, 7, key="x"),
      peek(T53 + 1 + 3 * S - 1, key="y"), acq(T53 + 1 + 3 * S, 7, key="y"), peek(T53 + 1 + 3 * S, key="x"),
      acq(T53 + 1 + 3 * S, 8, key="x"), acq(T53 + 1 + 3 * S, 7, key="x"), refund(T53 + 1 + 3 * S, 2, key="y"),
      peek(T53 + 1 + 3 * S, key="y")],
     start_ns=T53 + 1)

case("keyed_walk_large_continuous",
     "Three keys of 7/s with burst 5 in a pseudo-random walk of requests, peeks and refunds starting a second below 2^53 ns.",
     "7/s; burst=5",
     tuples(keyed_walk(71, ["alice", "bob", "carol"], 300 * MS, 5, 30, start=T53 - S)),
     start_ns=T53 - S)

case("keyed_walk_large_interval",
     "Three interval keys of 3/h with burst 5 and 1 initial token in a pseudo-random walk just before a century of nanoseconds.",
     "3/h; burst=5; initial=1; refill=interval",
     tuples(keyed_walk(72, ["alice", "bob", "carol"], 20 * MINUTE, 5, 30, start=CENTURY_NS - 8 * HOUR)),
     start_ns=CENTURY_NS - 8 * HOUR)

# ---- quota errors ---------------------------------------------------------------------------

for _name, _quota, _err, _desc in [
    ("empty", "", "parse_error", "The empty string is not a rate."),
    ("count_only", "10", "parse_error", "A count without a unit is refused."),
    ("unknown_unit", "10/fortnight", "parse_error", "An unknown unit is refused."),
    ("month_unit", "1000/month", "parse_error", "A month is no fixed duration: refused (give days)."),
    ("year_unit", "1/year", "parse_error", "A year is no fixed duration: refused (give days)."),
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

# The algorithm options, and the bounds SEMANTICS gives for exact arithmetic: a store must
# refuse these quotas rather than decide inexactly.
for _name, _quota, _err, _desc in [
    ("unknown_algorithm", "10/s; algorithm=bogus", "parse_error", "An unknown algorithm name is refused."),
    ("max_delay_without_unit", "10/s; algorithm=leaky_queue; max_delay=5", "parse_error", "A max_delay needs a time unit."),
    ("interval_gcra", "10/s; algorithm=gcra; refill=interval", "invalid_quota", "Interval refill is for the token bucket only."),
    ("burst_on_window", "10/s; algorithm=fixed_window; burst=5", "invalid_quota", "A window algorithm takes no burst other than its count."),
    ("initial_on_window", "10/s; algorithm=sliding_window; initial=3", "invalid_quota", "A window algorithm takes no initial."),
    ("burst_on_leaky_queue", "10/s; algorithm=leaky_queue; burst=20", "invalid_quota", "The leaky queue takes no burst other than its count."),
    ("max_delay_on_token_bucket", "10/s; max_delay=1s", "invalid_quota", "A max_delay is for the leaky queue only."),
    ("sliding_log_count_above_2p20", "1048577/s; algorithm=sliding_log", "invalid_quota", "A sliding log counts at most 2^20 per window."),
    ("fixed_window_count_2p62", "4611686018427387904/h; algorithm=fixed_window", "invalid_quota", "A window count must be below 2^62."),
    ("sliding_window_period_2p62", "1/4611686018427387904ns; algorithm=sliding_window", "invalid_quota", "A window must be shorter than 2^62 ns."),
    ("leaky_queue_delay_rate_2h", "1000003/hour; algorithm=leaky_queue; max_delay=2h", "invalid_quota", "A leaky queue with D*k/g + P/g of 2^62 or more is refused (2 h at 1000003/hour)."),
    ("sliding_window_packing_2p48", "281474976710656/s; algorithm=sliding_window", "invalid_quota",
     "A sliding window count of 2^48 per second leaves no packing that covers a century of windows."),
]:
    bad("quota_" + _name, _desc, _quota, _err)

# =============================================================================================
# algorithms.json: every algorithm besides the token bucket, and composite limits
# =============================================================================================

# ---- GCRA -------------------------------------------------------------------------------------

case("gcra_worked_burst_then_idle",
     "GCRA, capacity 5 at 1/s: 7 instant requests give 5 allowed; after 2 s idle 2 more.",
     "1/s; burst=5; algorithm=gcra",
     tuples(cat(at(0, 7), at(2 * S, 3))))

case("gcra_fractional_accrual_2ps",
     "GCRA at 2/s from empty: 0.5 token after 250 ms is not enough; 1 at 500 ms is.",
     "2/s; burst=1; initial=0; algorithm=gcra",
     tuples([(250 * MS, "a", 1), (500 * MS, "a", 1), (500 * MS, "a", 1)]))

case("gcra_nondivisible_7_per_ms",
     "GCRA at 7/ms: emission interval 142857.14 ns, waits rounded up to the ns.",
     "7/ms; burst=2; algorithm=gcra",
     tuples([(0, "a", 2), (1, "a", 1), (142_858, "a", 1), (200_000, "a", 2)]))

case("gcra_backwards_clock",
     "GCRA: a reading earlier than the state proves is clamped, never a refund.",
     "1/s; burst=2; algorithm=gcra",
     tuples([(10 * S, "a", 2), (10 * S, "a", 1), (10 * S + S // 2, "a", 1), (11 * S, "a", 1)]),
     start_ns=10 * S)

case("gcra_refund_capped",
     "GCRA: refunds give tokens back, capped at the burst.",
     "1/s; burst=3; algorithm=gcra",
     tuples([(0, "a", 2), (0, "a", 2), (0, "r", 3), (0, "a", 0), (0, "a", 3)]))

case("gcra_cost_above_capacity",
     "GCRA: a cost above the burst is an error, not a rejection.",
     "10/s; burst=5; algorithm=gcra",
     tuples([(0, "a", 6), (0, "a", 5), (0, "a", 1)]))

for _i, (_rate, _span, _most) in enumerate([
    ("3/s; burst=7; algorithm=gcra", S, 7),
    ("100/m; burst=10; algorithm=gcra", 3 * S, 10),
    ("5/2s; burst=3; initial=1; algorithm=gcra", S, 3),
    ("7/ms; burst=20; algorithm=gcra", 2 * MS, 20),
    ("1/h; burst=4; algorithm=gcra", 900 * S, 4),
]):
    case(f"gcra_walk_{_i}", "GCRA: a pseudo-random walk of weighted requests and refunds.",
         _rate, tuples(walk(_i + 1, 0, _span, _most, 40)))

# ---- fixed window -----------------------------------------------------------------------------

case("fixed_boundary_burst",
     "Fixed window 10/s: 10 at 999 ms and 10 more at 1 s pass (2x the limit across the boundary).",
     "10/s; algorithm=fixed_window",
     tuples(cat(at(999 * MS, 11), at(S, 11))))

case("fixed_epoch_aligned",
     "Fixed window 3/s created at 2.5 s: windows stay on the clock's epoch, the first ends at 3 s.",
     "3/s; algorithm=fixed_window",
     tuples(cat(at(2500 * MS, 4), at(3 * S, 4))),
     start_ns=2500 * MS)

case("fixed_weighted",
     "Fixed window 10/m with weighted costs: retry_after is the time to the next window.",
     "10/m; algorithm=fixed_window",
     tuples([(5 * S, "a", 6), (10 * S, "a", 5), (10 * S, "a", 4), (59 * S, "a", 1), (60 * S, "a", 10)]))

case("fixed_refund",
     "Fixed window: a refund returns cost to the current window, never below zero.",
     "5/s; algorithm=fixed_window",
     tuples([(0, "a", 5), (0, "r", 2), (0, "a", 3), (MS, "r", 9), (MS, "a", 0), (S, "r", 1), (S, "a", 5)]))

case("fixed_backwards_clock",
     "Fixed window: a reading in an earlier window is seen at the start of the state's window.",
     "2/s; algorithm=fixed_window",
     tuples([(5 * S + 10, "a", 2), (4 * S, "a", 1), (4 * S, "a", 0), (6 * S, "a", 2)]))

case("fixed_cost_above_limit",
     "Fixed window: a cost above the limit is an error.",
     "4/s; algorithm=fixed_window",
     tuples([(0, "a", 5), (0, "a", 4)]))

for _i, (_rate, _span, _most) in enumerate([
    ("3/s; algorithm=fixed_window", S, 3),
    ("100/m; algorithm=fixed_window", 30 * S, 100),
    ("5/2s; algorithm=fixed_window", S, 5),
    ("7/ms; algorithm=fixed_window", MS, 7),
    ("1/h; algorithm=fixed_window", 900 * S, 1),
]):
    case(f"fixed_walk_{_i}", "Fixed window: a pseudo-random walk of weighted requests and refunds.",
         _rate, tuples(walk(_i + 11, 0, _span, _most, 40)))

# ---- sliding window counter -------------------------------------------------------------------

case("sliding_window_75_percent_at_25_percent",
     "Sliding window 50/m: 42 in the previous minute, 18 in this one; 18 arrive 15 s in, when the previous weighs 75%: 49.5, so 1 more is rejected until 15.714 s (18 at 1 s in would be rejected).",
     "50/m; algorithm=sliding_window",
     tuples([(10 * S, "a", 42), (61 * S, "a", 18), (75 * S, "a", 18), (75 * S, "a", 0), (75 * S, "a", 1),
             (75 * S + 714_285_714, "a", 1), (75 * S + 714_285_715, "a", 1)]))

case("sliding_window_exact_thirds",
     "Sliding window 3/3s: two thirds into the next window, a third of 3 is exactly 1.",
     "3/3s; algorithm=sliding_window",
     tuples([(0, "a", 3), (5 * S, "a", 0), (5 * S, "a", 2), (5 * S, "a", 1)]))

case("sliding_window_retry_next_window",
     "Sliding window: when the current window alone is too full, the wait reaches into the next window.",
     "10/s; algorithm=sliding_window",
     tuples([(100 * MS, "a", 9), (200 * MS, "a", 2), (1100 * MS, "a", 5), (1600 * MS, "a", 5)]))

case("sliding_window_skips_windows",
     "Sliding window: after two idle windows nothing weighs.",
     "4/s; algorithm=sliding_window",
     tuples([(0, "a", 4), (2500 * MS, "a", 4), (2500 * MS, "a", 1)]))

case("sliding_window_refund",
     "Sliding window: a refund returns cost to the current window's count.",
     "5/s; algorithm=sliding_window",
     tuples([(0, "a", 5), (S // 2, "r", 2), (S // 2, "a", 2), (S + S // 2, "r", 1), (S + S // 2, "a", 3)]))

case("sliding_window_backwards_clock",
     "Sliding window: a reading in an earlier window is seen at the start of the state's window.",
     "3/s; algorithm=sliding_window",
     tuples([(2 * S + 5, "a", 3), (S, "a", 1), (3 * S + S // 2, "a", 2), (3 * S, "a", 0)]))

case("sliding_window_cost_above_limit",
     "Sliding window: a cost above the limit is an error.",
     "3/s; algorithm=sliding_window",
     tuples([(0, "a", 4), (0, "a", 3)]))

for _i, (_rate, _span, _most) in enumerate([
    ("3/s; algorithm=sliding_window", S // 2, 3),
    ("100/m; algorithm=sliding_window", 20 * S, 100),
    ("5/2s; algorithm=sliding_window", S, 5),
    ("7/ms; algorithm=sliding_window", MS // 2, 7),
    ("2/h; algorithm=sliding_window", 1200 * S, 2),
]):
    case(f"sliding_window_walk_{_i}", "Sliding window: a pseudo-random walk of weighted requests and refunds.",
         _rate, tuples(walk(_i + 21, 0, _span, _most, 40)))

# ---- sliding log ------------------------------------------------------------------------------

case("sliding_log_same_instant",
     "Sliding log 3/s: three requests at the same nanosecond each count; all leave together 1 s later.",
     "3/s; algorithm=sliding_log",
     tuples(cat(at(5 * MS, 4), [(S + 5 * MS - 1, "a", 1)], at(S + 5 * MS, 4))))

case("sliding_log_no_boundary_burst",
     "Sliding log 10/s: 10 at 999 ms; none at 1 s (unlike the fixed window); 10 at 1.999 s.",
     "10/s; algorithm=sliding_log",
     tuples(cat(at(999 * MS, 11), at(S, 2), at(1999 * MS, 11))))

case("sliding_log_weighted_retry",
     "Sliding log 5/s: the wait is until the m-th oldest unit leaves.",
     "5/s; algorithm=sliding_log",
     tuples([(0, "a", 2), (300 * MS, "a", 2), (600 * MS, "a", 1), (700 * MS, "a", 3), (S, "a", 3), (1300 * MS, "a", 3)]))

case("sliding_log_refund_newest",
     "Sliding log: a refund removes the newest units in the window.",
     "3/s; algorithm=sliding_log",
     tuples([(0, "a", 1), (500 * MS, "a", 2), (600 * MS, "r", 1), (600 * MS, "a", 0), (S, "a", 2), (S, "a", 1)]))

case("sliding_log_backwards_clock",
     "Sliding log: a reading before the newest admission is clamped to it.",
     "2/s; algorithm=sliding_log",
     tuples([(5 * S, "a", 2), (5 * S + 10, "a", 0), (4 * S, "a", 1), (6 * S, "a", 2)]))

case("sliding_log_cost_above_limit",
     "Sliding log: a cost above the limit is an error.",
     "2/s; algorithm=sliding_log",
     tuples([(0, "a", 3), (0, "a", 2)]))

for _i, (_rate, _span, _most) in enumerate([
    ("3/s; algorithm=sliding_log", S // 2, 3),
    ("20/m; algorithm=sliding_log", 10 * S, 20),
    ("5/2s; algorithm=sliding_log", S, 5),
    ("7/ms; algorithm=sliding_log", MS // 3, 7),
    ("2/h; algorithm=sliding_log", 1200 * S, 2),
]):
    case(f"sliding_log_walk_{_i}", "Sliding log: a pseudo-random walk of weighted requests and refunds.",
         _rate, tuples(walk(_i + 31, 0, _span, _most, 40)))

# ---- leaky queue ------------------------------------------------------------------------------

case("leaky_queue_constant_drain",
     "Leaky queue 10/s, max_delay 1 s: a burst of 13 gets slots 100 ms apart, 11 admitted; 500 ms later 5 more.",
     "10/s; algorithm=leaky_queue; max_delay=1s",
     tuples(cat(at(0, 13), at(500 * MS, 7))))

case("leaky_queue_cancel",
     "Leaky queue 4/s, max_delay 500 ms: waits 0, 250, 500 ms; the 4th is rejected; a cancel gives a slot back.",
     "4/s; algorithm=leaky_queue; max_delay=500ms",
     tuples([(0, "a", 1), (0, "a", 1), (0, "a", 1), (0, "a", 1), (0, "r", 1), (0, "a", 1), (0, "a", 0)]))

case("leaky_queue_weighted",
     "Leaky queue: a request of cost c waits c/r after the previous slot.",
     "10/s; algorithm=leaky_queue; max_delay=1s",
     tuples([(0, "a", 5), (0, "a", 5), (0, "a", 3), (0, "a", 6), (200 * MS, "a", 2), (2 * S, "a", 11)]))

case("leaky_queue_no_delay",
     "Leaky queue with max_delay 0: a strict meter spacing requests 1/r apart.",
     "5/s; algorithm=leaky_queue; max_delay=0ns",
     tuples([(0, "a", 1), (0, "a", 1), (100 * MS, "a", 1), (200 * MS, "a", 1), (400 * MS, "a", 1)]))

case("leaky_queue_backwards_clock",
     "Leaky queue: a reading earlier than the state proves is clamped to L - D.",
     "10/s; algorithm=leaky_queue; max_delay=300ms",
     tuples([(5 * S, "a", 3), (5 * S, "a", 1), (S, "a", 1), (S, "r", 1), (5 * S + 50 * MS, "a", 1)]))

case("leaky_queue_nondivisible",
     "Leaky queue 3/s: slots 333333333.3 ns apart, waits rounded up.",
     "3/s; algorithm=leaky_queue; max_delay=1s",
     tuples([(0, "a", 1), (0, "a", 1), (0, "a", 1), (1, "a", 1), (0, "a", 1)]))

case("leaky_queue_cost_above_limit",
     "Leaky queue: a cost above 1 + floor(D r) is an error.",
     "2/s; algorithm=leaky_queue; max_delay=1s",
     tuples([(0, "a", 4), (0, "a", 3)]))

for _i, (_rate, _span, _most) in enumerate([
    ("3/s; algorithm=leaky_queue; max_delay=2s", S, 7),
    ("100/m; algorithm=leaky_queue; max_delay=10s", 5 * S, 17),
    ("5/2s; algorithm=leaky_queue; max_delay=700ms", S, 2),
    ("7/ms; algorithm=leaky_queue; max_delay=1ms", MS, 8),
]):
    case(f"leaky_queue_walk_{_i}", "Leaky queue: a pseudo-random walk of weighted reservations and cancellations.",
         _rate, tuples(walk(_i + 41, 0, _span, _most, 40)))

# ---- keyed: several keys of one keyed limiter, each deciding as its own bucket ----------------

for _i, (_rate, _span, _most) in enumerate([
    ("4/s; algorithm=sliding_log", 300 * MS, 4),
    ("5/s; algorithm=sliding_window", 300 * MS, 5),
    ("2/s; burst=4; algorithm=gcra", 400 * MS, 4),
    ("3/s; algorithm=fixed_window", 400 * MS, 3),
    ("2/s; algorithm=leaky_queue; max_delay=1s", 300 * MS, 3),
]):
    case(f"keyed_walk_{_i + 1}",
         f"Keyed {parse_rate(_rate).algorithm}: three keys interleaved, each bucket created at its key's first request.",
         _rate, tuples(keyed_walk(_i + 61, ["alice", "bob", "carol"], _span, _most, 45)))

# ---- composite ----------------------------------------------------------------------------------

composite("composite_refund_partial",
          "User 5/s, tenant 3/s fixed window, global 100/s sliding log: the second request of 2 is rejected by the tenant and refunded to the user.",
          ["5/s", "3/s; algorithm=fixed_window", "100/s; algorithm=sliding_log"],
          tuples([(0, "a", 2), (0, "a", 2), (0, "a", 0), (0, "a", 1), (S, "a", 2)]))

composite("composite_error_consumes_nothing",
          "A cost above any part's capacity is an error.",
          ["10/s", "3/s; algorithm=sliding_window"],
          tuples([(0, "a", 4), (0, "a", 3)]))

composite("composite_longest_retry",
          "The rejection reports the longest retry_after among the parts that cannot admit.",
          ["1/s; burst=2", "2/m; algorithm=fixed_window"],
          tuples([(0, "a", 2), (10 * MS, "a", 1), (S, "a", 1), (60 * S, "a", 1)]))

_COMPOSITE_SETS = [
    ["3/s", "5/2s; algorithm=sliding_window"],
    ["4/s; algorithm=gcra", "10/m; algorithm=fixed_window", "6/s; algorithm=sliding_log"],
    ["5/s; burst=5; refill=interval", "2/s; algorithm=leaky_queue; max_delay=1s"],
    ["10/s; algorithm=sliding_log", "3/s"],
]
for _i in range(8):
    composite(f"composite_walk_{_i}", "Composite: a pseudo-random walk.",
              _COMPOSITE_SETS[_i % 4], tuples(walk(_i + 51, 0, S, 3, 40)))

# ---- large clock values and large reduced rates (see the token bucket's section) --------------

case("gcra_2p53_token_at_odd_ns",
     "GCRA at 1/s: a token taken at 2^53 + 1 - 10^9 ns is back at exactly 2^53 + 1 ns (an odd reading no double holds), not at 2^53.",
     "1/s; burst=1; algorithm=gcra",
     [acq(T53 + 1 - S), acq(T53 - 1), acq(T53), acq(T53 + 1), peek(T53 + 1), acq(T53 + 2)],
     start_ns=T53 + 1 - S)

case("gcra_large_k_near_century",
     "GCRA at 1000003/hour (emission interval 3599989.2 ns) in the last hour before a century of nanoseconds: waits, refunds and peeks exact to the ns.",
     "1000003/hour; burst=5; algorithm=gcra",
     [acq(HOUR_BEFORE_CENTURY, 5), acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR - 1),
      acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR), peek(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR),
      refund(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR, 2), acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR, 3),
      acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR, 1), peek(LAST), acq(LAST, 5), refund(LAST, 1), peek(LAST)])

case("gcra_billion_per_second_2p60",
     "GCRA at 1000000007/s (emission interval just under 1 ns) at 2^60 ns: fractions of a token per ns count, and a backwards reading is clamped.",
     "1000000007/s; burst=10; algorithm=gcra",
     [acq(T60, 10), acq(T60 + 1, 2), acq(T60 + 2, 2), acq(T60 - 5 * S, 1), peek(T60 + 2), peek(T60 + 12)],
     start_ns=T60 - 5 * S)

case("fixed_2p53_boundary",
     "Fixed window 5/s at the first whole second above 2^53: the window's last ns (an odd reading no double holds) still belongs to it.",
     "5/s; algorithm=fixed_window",
     [acq(B53 - 2, 5), acq(B53 - 1), peek(B53 - 1), acq(B53, 5), acq(B53), refund(B53 + 1, 2), peek(B53 + 1),
      acq(B53 + 1, 2), acq(B53 + 1), acq(B53 - 3)])

case("fixed_large_k_near_century",
     "Fixed window 1000003/hour: the windows around the last whole hour before a century of nanoseconds, with refunds and peeks at its last ns.",
     "1000003/hour; algorithm=fixed_window",
     [acq(HOUR_BEFORE_CENTURY - 1, 1_000_003), acq(HOUR_BEFORE_CENTURY - 1), acq(HOUR_BEFORE_CENTURY),
      peek(LAST), refund(LAST, 1), peek(LAST), acq(LAST, 1_000_003), acq(LAST), peek(HOUR_BEFORE_CENTURY - 1)])

case("fixed_7s_window_2p60",
     "Fixed window 1000/7s: windows of 7 s on the clock's epoch around the first boundary above 2^60 ns.",
     "1000/7s; algorithm=fixed_window",
     [acq(FIXED_7S_2P60 - 1, 1000), acq(FIXED_7S_2P60 - 1), acq(FIXED_7S_2P60 + 3 * S, 999),
      acq(FIXED_7S_2P60 + 3 * S, 2), refund(FIXED_7S_2P60 + 3 * S, 500), peek(FIXED_7S_2P60 + 3 * S),
      acq(FIXED_7S_2P60 - 5, 501), peek(FIXED_7S_2P60 + 7 * S - 1), peek(FIXED_7S_2P60 + 7 * S)])

case("fixed_count_2p62_minus_1",
     "Fixed window with the largest count, 2^62 - 1 per hour: whole-window costs across the last whole hour before a century.",
     "4611686018427387903/h; algorithm=fixed_window",
     [acq(HOUR_BEFORE_CENTURY - 1, 2**62 - 1), acq(HOUR_BEFORE_CENTURY - 1), peek(HOUR_BEFORE_CENTURY),
      acq(HOUR_BEFORE_CENTURY, 2**62 - 2), peek(LAST), acq(LAST, 2), refund(LAST, 2**62 - 1), peek(LAST)])

case("sliding_window_2p53_boundary",
     "Sliding window 10/s around the first whole second above 2^53: the previous window's weight decides to the ns.",
     "10/s; algorithm=sliding_window",
     [acq(B53 - 1, 10), peek(B53), acq(B53 + 99_999_999), acq(B53 + 100_000_000), acq(B53 + 100_000_001),
      refund(B53 + 100_000_001, 1), peek(B53 + 100_000_001), acq(B53 + S // 2, 5), acq(B53 + S // 2), acq(B53 - 7),
      peek(B53 + 2 * S - 1), peek(B53 + 2 * S)])

case("sliding_window_large_k_near_century",
     "Sliding window 1000003/hour: after a full last-but-one hour before a century, one more fits only 3599990 ns into the last hour.",
     "1000003/hour; algorithm=sliding_window",
     [acq(HOUR_BEFORE_CENTURY - 1, 1_000_003), peek(HOUR_BEFORE_CENTURY), acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR - 1),
      acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR), acq(HOUR_BEFORE_CENTURY + TOKEN_1000003_PER_HOUR, 2),
      peek(CENTURY_NS - HOUR // 2), acq(CENTURY_NS - HOUR // 2, 500_000), acq(CENTURY_NS - HOUR // 2, 2),
      peek(LAST), refund(LAST, 3), peek(LAST)])

case("sliding_window_count_2p48_minus_1",
     "Sliding window with 2^48 - 1 per second, the largest count whose packing covers a century: the previous window's weight is exact in the last seconds before it.",
     "281474976710655/s; algorithm=sliding_window",
     [acq(CENTURY_NS - 2 * S + 5, 2**48 - 1), acq(CENTURY_NS - S), acq(CENTURY_NS - S + 1),
      acq(CENTURY_NS - S + 1, 281_474), acq(CENTURY_NS - S + 2, 281_476), peek(CENTURY_NS - S // 2),
      acq(CENTURY_NS - S // 2, 2**47), refund(LAST, 3), peek(LAST)])

case("sliding_log_2p53_distinct_readings",
     "Sliding log 3/s: admissions at 2^53 - 1, 2^53 and 2^53 + 1 ns are three timestamps that leave one ns apart, which doubles cannot tell apart.",
     "3/s; algorithm=sliding_log",
     [acq(T53 - 1), acq(T53), acq(T53 + 1), acq(T53 + 1), acq(T53 + S - 2), acq(T53 + S - 1), acq(T53 + S - 1),
      acq(T53 + S), peek(T53 + S), refund(T53 + S, 1), peek(T53 + S), acq(T53 + 2), peek(T53 + 2 * S + 1)])

case("sliding_log_7s_near_century",
     "Sliding log 1000/7s in the last 7 s before a century: the oldest units leave at their own ns, and a refund removes the newest.",
     "1000/7s; algorithm=sliding_log",
     [acq(LAST - 7 * S + 1, 600), acq(LAST - 3 * S, 400), acq(LAST - 1), acq(LAST), peek(LAST), refund(LAST, 100),
      peek(LAST), acq(LAST, 100), acq(LAST - 10), peek(LAST)],
     start_ns=LAST - 8 * S)

case("leaky_queue_2p53",
     "Leaky queue 1/s with max_delay 2 s at odd readings around 2^53: slots, waits, cancels and the clamp exact to the ns.",
     "1/s; algorithm=leaky_queue; max_delay=2s",
     [acq(T53 - 1), acq(T53 - 1), acq(T53 + 1), acq(T53 + 1), peek(T53 + 1), refund(T53 + 1, 1), peek(T53 + 1),
      acq(T53 + 1), acq(T53 - S), peek(T53 + 3 * S), peek(T53 + 4 * S - 1)])

case("leaky_queue_large_k_near_century",
     "Leaky queue 1000003/hour with max_delay 1 h (limit 1000004) in the last hour before a century: slots 3599989.2 ns apart, exact.",
     "1000003/hour; algorithm=leaky_queue; max_delay=1h",
     [acq(HOUR_BEFORE_CENTURY, 1_000_003), acq(HOUR_BEFORE_CENTURY), acq(HOUR_BEFORE_CENTURY, 2),
      peek(HOUR_BEFORE_CENTURY + 1), refund(HOUR_BEFORE_CENTURY + 1, 1_000_000), peek(HOUR_BEFORE_CENTURY + 1),
      acq(HOUR_BEFORE_CENTURY + 1, 1_000_004), acq(HOUR_BEFORE_CENTURY + 1, 3), peek(LAST)])

case("leaky_queue_7ps_2p60",
     "Leaky queue 7/s with max_delay 1 s (limit 8) at 2^60 ns: eight slots 142857142.9 ns apart, a cancel, and a backwards reading clamped to L - D.",
     "7/s; algorithm=leaky_queue; max_delay=1s",
     [*[acq(T60) for _ in range(9)], refund(T60, 3), peek(T60), acq(T60, 3), acq(T60 - 2 * S), peek(T60 + S),
      peek(T60 + 2 * S)])

for _seed, (_name, _rate, _span, _most, _start) in enumerate([
    ("gcra", "7/s; burst=3; algorithm=gcra", 200 * MS, 3, T53 - S),
    ("fixed_window", "5/7s; algorithm=fixed_window", 2 * S, 5, FIXED_7S_2P60 - 20 * S),
    ("sliding_window", "1000003/hour; algorithm=sliding_window", 20 * MINUTE, 400_000, CENTURY_NS - 9 * HOUR),
    ("sliding_log", "4/s; algorithm=sliding_log", 300 * MS, 4, T53 - 2 * S),
    ("leaky_queue", "7/s; algorithm=leaky_queue; max_delay=1s", 150 * MS, 4, LAST - 8 * S),
], start=91):
    case(f"keyed_walk_large_{_name}",
         f"Keyed {_name} at large readings: three keys interleaved in a pseudo-random walk of requests, peeks and refunds.",
         _rate, tuples(keyed_walk(_seed, ["alice", "bob", "carol"], _span, _most, 24, start=_start)),
         start_ns=_start)

case("keyed_fixed_window_peek_creates_at_2p53",
     "Keyed fixed window 2/s above 2^53: a key's first request, even a peek, creates its window, so an earlier reading on that key is clamped while another key's is not.",
     "2/s; algorithm=fixed_window",
     [peek(B53 + 5, key="a"), acq(B53 - 3, key="b"), acq(B53 - 3, key="a"), acq(B53 - 3, 2, key="b"),
      acq(B53 - 2, key="a"), acq(B53 - 1, key="a"), refund(B53 - 1, 1, key="c"), peek(B53 - 1, key="c"),
      acq(B53, 2, key="b")])

composite("composite_2p53",
          "GCRA 1/s burst 2, sliding log 3/s and interval 5/s at odd readings around 2^53: all or nothing, each part exact to the ns.",
          ["1/s; burst=2; algorithm=gcra", "3/s; algorithm=sliding_log", "5/s; burst=5; refill=interval"],
          [acq(T53 - 1), acq(T53), acq(T53 + 1), acq(T53 + 1), peek(T53 + 1), refund(T53 + 1, 1), peek(T53 + 1),
           acq(T53 + S - 1), acq(T53 + S + 1), peek(T53 + 2 * S)],
          start_ns=T53 - S)

composite("composite_large_k_near_century",
          "Token bucket and sliding window at 1000003/hour and a 7/s leaky queue just before a century: rejections refunded, peeks and refunds exact.",
          ["1000003/hour; burst=10", "1000003/hour; algorithm=sliding_window", "7/s; algorithm=leaky_queue; max_delay=1s"],
          [acq(LAST - S, 8), acq(LAST - S, 2), acq(LAST - S), peek(LAST - S), acq(LAST - S + TOKEN_1000003_PER_HOUR),
           refund(LAST - S + TOKEN_1000003_PER_HOUR, 5), peek(LAST - S + TOKEN_1000003_PER_HOUR),
           acq(LAST - S + TOKEN_1000003_PER_HOUR, 5), acq(LAST - S + TOKEN_1000003_PER_HOUR, 11), peek(LAST)])

for _i, _start in enumerate([T53 - S, LAST - 30 * S]):
    composite(f"composite_walk_large_{_i}", "Composite: a pseudo-random walk at large readings.",
              ["7/s; burst=3", "1000003/hour; burst=3; algorithm=gcra", "3/s; algorithm=fixed_window",
               "5/2s; algorithm=sliding_window", "4/s; algorithm=sliding_log", "7/s; algorithm=leaky_queue; max_delay=1s"],
              tuples(walk(_i + 81, _start, S // 2, 3, 24)), start_ns=_start)


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
    # algorithms, their aliases and max_delay
    assert parse_rate("10/s; algorithm=GCRA") == Quota(10, S, 10, 10, "continuous", "gcra")
    assert parse_rate("10/s; algorithm=leaky_meter").algorithm == "gcra"
    assert parse_rate("10/s; algorithm=sliding_window_counter").algorithm == "sliding_window"
    assert parse_rate("10/s; algorithm=shaper").algorithm == "leaky_queue"
    assert parse_rate("4/s; algorithm=leaky_queue").D == S
    assert parse_rate("4/s; max_delay = 500 ms; algorithm=leaky_queue").D == 500 * MS
    assert parse_rate("3/s; algorithm=fixed_window; burst=3").b == 3
    q = parse_rate("10/s; algorithm=leaky_queue; max_delay=1s")
    assert LeakyQueue(q, 0, 0).Q == 11  # 1 + floor(D r)
    for bad_text, kind in [
        ("10/s; algorithm=bogus", "parse_error"),
        ("10/s; max_delay=5", "parse_error"),
        ("10/s; algorithm=gcra; refill=interval", "invalid_quota"),
        ("10/s; algorithm=fixed_window; burst=5", "invalid_quota"),
        ("10/s; algorithm=sliding_log; initial=3", "invalid_quota"),
        ("10/s; max_delay=1s", "invalid_quota"),
        ("1048577/s; algorithm=sliding_log", "invalid_quota"),
    ]:
        try:
            parse_rate(bad_text)
            raise AssertionError(f"{bad_text!r} accepted")
        except QuotaError as e:
            assert e.kind == kind, (bad_text, e)


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


def assert_algorithm_examples(results: dict[str, dict], composites: dict[str, dict]) -> list[str]:
    notes = []
    a = allowed_flags(results["gcra_worked_burst_then_idle"])
    assert a == [True] * 5 + [False] * 2 + [True, True, False], a
    notes.append("GCRA 1/s burst 5: the token bucket's worked example, decision for decision")

    r = results["sliding_window_75_percent_at_25_percent"]["steps"]
    assert [s["expect"]["allowed"] for s in r] == [True, False, True, True, False, False, True]  # 18 at 1 s in: 41.3 + 18 > 50
    assert r[3]["expect"]["remaining"] == 0 and r[3]["expect"]["limit"] == 50
    assert r[4]["expect"]["retry_after_ns"] == 714_285_715
    notes.append("sliding window 50/m, 42 + 18, 15 s in: remaining 0, one more after 714285715 ns")

    a = allowed_flags(results["fixed_boundary_burst"])
    assert a == ([True] * 10 + [False]) * 2, a
    notes.append("fixed window 10/s: 10 at 999 ms and 10 at 1 s (2N across the boundary)")

    a = allowed_flags(results["sliding_log_no_boundary_burst"])
    assert a == [True] * 10 + [False] * 3 + [True] * 10 + [False], a
    notes.append("sliding log 10/s: none at 1 s after 10 at 999 ms, 10 at 1.999 s")

    r = results["leaky_queue_constant_drain"]["steps"]
    assert allowed_flags(results["leaky_queue_constant_drain"]) == [True] * 11 + [False] * 2 + [True] * 5 + [False] * 2
    assert [s["expect"]["retry_after_ns"] for s in r[:11]] == [j * 100 * MS for j in range(11)]
    assert all(s["expect"]["limit"] == 11 for s in r)
    notes.append("leaky queue 10/s, max_delay 1 s: limit 11, waits 0, 100, ..., 1000 ms")

    r = composites["composite_refund_partial"]["steps"]
    assert [s["expect"]["allowed"] for s in r] == [True, False, True, True, True]
    notes.append("composite 5/s + 3/s fixed + 100/s log: the tenant's rejection is refunded to the user")
    return notes


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------

def generate() -> tuple[dict[Path, dict], list[str]]:
    self_test_parser()
    every = CASES[VECTORS] + CASES[ALGORITHMS] + COMPOSITE_CASES
    names = [c["name"] for c in every]
    assert len(names) == len(set(names)), "duplicate case names"
    vectors = [run_case(c) for c in CASES[VECTORS]]
    algorithms = [run_case(c) for c in CASES[ALGORITHMS]]
    composites = [run_composite_case(c) for c in COMPOSITE_CASES]
    by_name = {r["name"]: r for r in vectors + algorithms}
    notes = assert_worked_examples(by_name)
    notes += assert_algorithm_examples(by_name, {r["name"]: r for r in composites})
    acquire_cases = [r for r in vectors if "steps" in r]
    assert len(acquire_cases) >= 40 and sum(r["keyed"] for r in acquire_cases) >= 6
    assert all(parse_rate(r["quota"]).algorithm != "token_bucket" for r in algorithms)
    docs = {
        VECTORS: {"format": FORMAT, "cases": vectors},
        ALGORITHMS: {"format": FORMAT, "cases": algorithms, "composite_cases": composites},
    }
    return docs, notes


def render(path: Path, doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, indent=INDENT[path]) + "\n"


def check(path: Path, doc: dict) -> int:
    expected = render(path, doc)
    n = len(doc["cases"]) + len(doc.get("composite_cases", []))
    try:
        actual = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        print(f"{path.name} is missing; run conformance/generate.py", file=sys.stderr)
        return 1
    if actual == expected:
        print(f"{path.name} is up to date ({n} cases)")
        return 0
    print(f"{path.name} differs from what generate.py produces:", file=sys.stderr)
    try:
        committed = json.loads(actual)
    except json.JSONDecodeError as e:
        print(f"  committed file is not valid JSON: {e}", file=sys.stderr)
        return 1
    if committed.get("format") != doc["format"]:
        print(f"  format: committed {committed.get('format')!r}, generated {doc['format']!r}", file=sys.stderr)
    for group in ("cases", "composite_cases"):
        if group not in doc and group not in committed:
            continue
        old = {c.get("name"): c for c in committed.get(group, [])}
        new = {c["name"]: c for c in doc.get(group, [])}
        for name in new:
            if name not in old:
                print(f"  {group} {name}: missing from the committed file", file=sys.stderr)
            elif old[name] != new[name]:
                fields = sorted(f for f in set(old[name]) | set(new[name]) if old[name].get(f) != new[name].get(f))
                print(f"  {group} {name}: differs in {', '.join(fields)}", file=sys.stderr)
                o_steps, n_steps = old[name].get("steps", []), new[name].get("steps", [])
                if len(o_steps) != len(n_steps):
                    print(f"    {len(o_steps)} steps committed, {len(n_steps)} generated", file=sys.stderr)
                for i, (o, s) in enumerate(zip(o_steps, n_steps)):
                    if o != s:
                        print(f"    step {i}: committed {json.dumps(o, sort_keys=True)}", file=sys.stderr)
                        print(f"    step {i}: generated {json.dumps(s, sort_keys=True)}", file=sys.stderr)
                        break
        for name in old:
            if name not in new:
                print(f"  {group} {name}: not generated any more", file=sys.stderr)
        if list(old) != list(new) and set(old) == set(new):
            print(f"  {group}: case order differs", file=sys.stderr)
    if json.loads(expected) == committed:
        print(f"  (content equal; only the layout differs: sorted keys, indent={INDENT[path]}, trailing newline)",
              file=sys.stderr)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a vector file is not what this script generates")
    args = ap.parse_args()
    if not __debug__:
        sys.exit("generate.py relies on assert for its self-checks; run it without -O")
    docs, notes = generate()
    if args.check:
        return max(check(path, doc) for path, doc in docs.items())
    for path, doc in docs.items():
        path.write_text(render(path, doc), encoding="utf-8", newline="\n")
        n = len(doc["cases"]) + len(doc.get("composite_cases", []))
        print(f"wrote {path.name} ({n} cases)")
    for n in notes:
        print(f"  ok: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
