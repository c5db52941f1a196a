"""The shared conformance vectors (conformance/vectors.json), run through the manual clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sluicegate

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors.json"
DATA = json.loads(VECTORS.read_text())
assert DATA["format"] == 1, f"unknown vectors format {DATA['format']!r}"
CASES = DATA["cases"]
SINGLE = [c for c in CASES if "steps" in c and not c["keyed"]]
KEYED = [c for c in CASES if "steps" in c and c["keyed"]]
QUOTA_ERRORS = [c for c in CASES if "quota_error" in c]


def test_every_case_is_classified() -> None:
    assert len(SINGLE) + len(KEYED) + len(QUOTA_ERRORS) == len(CASES)
    assert SINGLE and KEYED and QUOTA_ERRORS


def as_expect(d: sluicegate.Decision) -> dict[str, object]:
    return {
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "retry_after_ns": d.retry_after_ns,
        "reset_after_ns": d.reset_after_ns,
    }


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_single_bucket(case: dict) -> None:
    clock = sluicegate.ManualClock(case["start_ns"])
    limiter = sluicegate.Limiter(sluicegate.Quota(case["quota"]), clock=clock)
    for i, step in enumerate(case["steps"]):
        clock.set_ns(step["t_ns"])
        where = f"{case['name']} step {i} ({step})"
        if step["op"] == "refund":
            limiter.refund(step["cost"])
            continue
        assert step["op"] == "acquire", where
        expect = step["expect"]
        if "error" in expect:
            assert expect["error"] == "insufficient_capacity", where
            with pytest.raises(sluicegate.InsufficientCapacity) as info:
                limiter.try_acquire(step["cost"])
            assert info.value.code == "insufficient_capacity"
            continue
        decision = limiter.try_acquire(step["cost"])
        assert as_expect(decision) == expect, where
        assert bool(decision) is expect["allowed"], where


def run(case: dict, limiter, clock: sluicegate.ManualClock, keyed: bool, key_of) -> None:
    for i, step in enumerate(case["steps"]):
        clock.set_ns(step["t_ns"])
        where = f"{case['name']} step {i} ({step})"
        args = (key_of(step["key"]),) if keyed else ()
        if step["op"] == "refund":
            limiter.refund(*args, step["cost"])
            continue
        assert step["op"] == "acquire", where
        expect = step["expect"]
        if "error" in expect:
            assert expect["error"] == "insufficient_capacity", where
            with pytest.raises(sluicegate.InsufficientCapacity):
                limiter.try_acquire(*args, step["cost"])
            continue
        decision = limiter.try_acquire(*args, step["cost"])
        assert as_expect(decision) == expect, where


# Each keyed case runs three times: keys as str, as their UTF-8 bytes, and as ints (each
# distinct key mapped to a distinct int), so every key path of the binding meets the vectors.
KEY_FORMS = {
    "str": lambda case: (lambda k: k),
    "bytes": lambda case: (lambda k: k.encode()),
    "int": lambda case: (
        lambda k, ids={k: i - 2**40 for i, k in enumerate(sorted({s["key"] for s in case["steps"]}))}: ids[k]
    ),
}


@pytest.mark.parametrize("form", sorted(KEY_FORMS))
@pytest.mark.parametrize("case", KEYED, ids=[c["name"] for c in KEYED])
def test_keyed(case: dict, form: str) -> None:
    clock = sluicegate.ManualClock(case["start_ns"])
    limiter = sluicegate.KeyedLimiter(case["quota"], clock=clock)
    run(case, limiter, clock, True, KEY_FORMS[form](case))


@pytest.mark.parametrize("case", QUOTA_ERRORS, ids=[c["name"] for c in QUOTA_ERRORS])
def test_quota_errors(case: dict) -> None:
    with pytest.raises(sluicegate.InvalidQuotaError) as info:
        sluicegate.Quota(case["quota"])
    assert info.value.code == case["quota_error"]
    assert isinstance(info.value, ValueError)
    # The message quotes the offending text.
    assert repr(case["quota"])[1:-1] in str(info.value) or case["quota"] in str(info.value)
