"""Every error path: the exception tree, core errors, and wrong types or values."""

from __future__ import annotations

import asyncio
import math

import pytest

import sluicegate
from sluicegate import (
    ClockOutOfRange,
    Error,
    InsufficientCapacity,
    InvalidOptionError,
    InvalidQuotaError,
    KeyedLimiter,
    KeyStoreFull,
    Limiter,
    ManualClock,
    Quota,
    RateLimited,
)


ALL = (InvalidQuotaError, InvalidOptionError, InsufficientCapacity, KeyStoreFull, ClockOutOfRange, RateLimited)


def test_tree() -> None:
    for cls in ALL:
        assert issubclass(cls, Error) and cls.__module__ == "sluicegate"
    assert issubclass(InvalidQuotaError, ValueError) and issubclass(InvalidOptionError, ValueError)
    assert not issubclass(InvalidOptionError, InvalidQuotaError)
    assert issubclass(Error, Exception) and not issubclass(Error, ValueError)
    codes = {c.code for c in ALL}
    assert codes == {"invalid_quota", "invalid_option", "insufficient_capacity", "key_store_full",
                     "clock_out_of_range", "rate_limited"}


@pytest.mark.parametrize(
    ("call", "option", "value", "expected"),
    [
        (lambda: Quota(count=1, period=1, refill="sometimes"), "refill", "sometimes",
         '"continuous" or "interval"'),
        (lambda: Quota(count=1, period=1, algorithm="magic"), "algorithm", "magic",
         'one of "token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log", "leaky_queue"'),
        (lambda: KeyedLimiter("1/s", on_full="drop"), "on_full", "drop", '"reject" or "evict"'),
        (lambda: Limiter("1/s").peek().headers("rfc"), "style", "rfc",
         'one of "ietf", "draft6", "draft7", "legacy", "none"'),
    ],
)
def test_invalid_options_name_the_option_and_the_choices(call, option: str, value: str, expected: str) -> None:
    # The core's table and message (Error::InvalidOption), mapped to InvalidOptionError.
    with pytest.raises(InvalidOptionError) as info:
        call()
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, Error)
    assert (err.code, err.option, err.value, err.expected) == ("invalid_option", option, value, expected)
    assert str(err) == f"{option} must be {expected}, not {value!r}".replace("'", '"')


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ("10/fortnight", "parse_error", "fortnight"),
        ("", "parse_error", "end of input"),
        ("ten/s", "parse_error", "ten"),
        ("10/s; burst=", "parse_error", "end of input"),
        ("10/s; colour=red", "parse_error", "colour"),
        ("1.5/s", "parse_error", "1."),
        ("0/s", "invalid_quota", None),
        ("10/s; burst=0", "invalid_quota", None),
        ("10/s; burst=5; initial=6", "invalid_quota", None),
        ("1/d; burst=18446744073709551615", "invalid_quota", None),
    ],
)
def test_quota_errors_quote_the_text(text: str, code: str, fragment: str | None) -> None:
    with pytest.raises(InvalidQuotaError) as info:
        Quota(text)
    err = info.value
    assert isinstance(err, ValueError) and err.code == code
    assert text in str(err)
    if code == "parse_error":
        assert err.input == text and err.fragment == fragment and isinstance(err.offset, int)
    else:  # as the stubs say: present, and None
        assert (err.input, err.offset, err.fragment) == (None, None, None)
    # A Limiter given the string refuses it the same way.
    with pytest.raises(InvalidQuotaError):
        Limiter(text)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"count": 0, "period": 1},
        {"count": 1, "period": 0},
        {"count": 1, "period_ns": 0},
        {"count": 1, "period": 1, "burst": 0},
        {"count": 1, "period": 1, "burst": 2, "initial": 3},
        {"count": 1, "period": 1e-12},
    ],
)
def test_keyword_quota_errors(kwargs: dict) -> None:
    with pytest.raises(InvalidQuotaError):
        Quota(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc"),
    [
        ((), {}, TypeError),
        ((10,), {}, TypeError),
        ((b"10/s",), {}, TypeError),
        (("10/s",), {"burst": 2}, TypeError),
        ((), {"count": 1}, TypeError),
        ((), {"count": 1, "period": 1, "period_ns": 1}, TypeError),
        ((), {"count": -1, "period": 1}, ValueError),
        ((), {"count": 1.0, "period": 1}, TypeError),
        ((), {"count": 2**64, "period": 1}, OverflowError),
        ((), {"count": 1, "period": -1}, ValueError),
        ((), {"count": 1, "period": math.nan}, ValueError),
        ((), {"count": 1, "period": math.inf}, OverflowError),
        ((), {"count": 1, "period": "1s"}, TypeError),
        ((), {"count": 1, "period": True}, TypeError),
        ((), {"count": 1, "period": 1, "refill": "sometimes"}, InvalidOptionError),
        ((), {"count": 1, "period": 1, "refill": 1}, TypeError),
    ],
)
def test_quota_argument_errors(args: tuple, kwargs: dict, exc: type) -> None:
    with pytest.raises(exc):
        Quota(*args, **kwargs)


@pytest.mark.parametrize(
    ("cost", "exc", "words"),
    [
        (-1, ValueError, "cost must be >= 0"),
        (1.0, TypeError, "not float"),
        (math.nan, TypeError, "not float"),
        (math.inf, TypeError, "not float"),
        (2**64, OverflowError, "too large"),
        (-(2**70), ValueError, ">= 0"),
        (None, TypeError, "NoneType"),
        (True, TypeError, "bool"),
        ("1", TypeError, "str"),
    ],
)
def test_bad_costs(cost: object, exc: type, words: str) -> None:
    limiter = Limiter("10/s")
    for call in (
        limiter.try_acquire,
        limiter.refund,
        limiter.reserve,
        lambda c: limiter.try_acquire_at(0, c),
        lambda c: limiter.acquire(c, timeout=0),
    ):
        with pytest.raises(exc, match=words):
            call(cost)
    assert limiter.peek().remaining == 10  # nothing was taken


def test_int_like_costs_are_accepted() -> None:
    class Two:
        def __index__(self) -> int:
            return 2

    class BigInt(int):
        pass

    limiter = Limiter("10/minute")  # no token comes back between the two calls
    assert limiter.try_acquire(Two()).remaining == 8
    assert limiter.try_acquire(BigInt(3)).remaining == 5


def test_insufficient_capacity() -> None:
    limiter = Limiter("1/s; burst=5")
    for call in (limiter.try_acquire, limiter.reserve, lambda c: limiter.acquire(c, timeout=1)):
        with pytest.raises(InsufficientCapacity) as info:
            call(6)
        assert (info.value.cost, info.value.capacity, info.value.code) == (6, 5, "insufficient_capacity")
        assert "exceeds the capacity 5" in str(info.value)
    with pytest.raises(InsufficientCapacity):
        asyncio.run(limiter.acquire_async(6))
    assert limiter.try_acquire(5)


def test_clock_out_of_range() -> None:
    clock = ManualClock(0)
    limiter = Limiter("1/s", clock=clock)
    clock.set_ns(2**64 - 1)
    with pytest.raises(ClockOutOfRange) as info:
        limiter.try_acquire()
    assert info.value.now_ns == 2**64 - 1 and info.value.horizon_ns >= sluicegate.CENTURY_NS
    with pytest.raises(ClockOutOfRange):
        limiter.refund()
    with pytest.raises(ClockOutOfRange):
        Limiter("1/s", clock=clock)


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda l: l.try_acquire_at(-1), ValueError),
        (lambda l: l.try_acquire_at(1.5), TypeError),
        (lambda l: l.refund_at(None), TypeError),
        (lambda l: l.acquire(timeout=-1), ValueError),
        (lambda l: l.acquire(timeout=math.nan), ValueError),
        (lambda l: l.acquire(timeout="soon"), TypeError),
        (lambda l: l.acquire_async(timeout=-0.5), ValueError),
        (lambda l: l.peek().headers("rfc"), ValueError),
        (lambda l: l.peek().headers(1), TypeError),
        (lambda l: l.peek().header_lines("rfc"), ValueError),
        (lambda l: l.peek().header_lines(policy=b"x"), TypeError),
        (lambda l: l.try_acquire(1, 2), TypeError),
        (lambda l: l.try_acquire(price=1), TypeError),
    ],
)
def test_bad_arguments(call, exc: type) -> None:
    with pytest.raises(exc):
        call(Limiter("10/s"))


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda: Limiter(None), TypeError),
        (lambda: Limiter(3), TypeError),
        (lambda: Limiter("1/s", clock=object()), TypeError),
        (lambda: ManualClock(-1), ValueError),
        (lambda: ManualClock(1.0), TypeError),
        (lambda: ManualClock().set_ns(2**64), OverflowError),
        (lambda: ManualClock().advance(-1), ValueError),
        (lambda: ManualClock().advance(math.nan), ValueError),
        (lambda: ManualClock().advance_ns("1"), TypeError),
    ],
)
def test_bad_constructor_and_clock_arguments(call, exc: type) -> None:
    with pytest.raises(exc):
        call()


def test_rate_limited_carries_the_decision() -> None:
    limiter = Limiter("1/s; burst=1")
    limiter.try_acquire()
    denied = limiter.try_acquire()
    err = RateLimited(denied)
    assert err.decision is denied and err.retry_after == denied.retry_after
    assert err.code == "rate_limited" and "retry after" in str(err)
    assert str(RateLimited(denied, "slow down")) == "slow down"
    with pytest.raises(Error):
        raise err
    # copy rebuilds it from the decision and the message (the message was taken for the
    # decision: AttributeError 'str' object has no attribute 'retry_after').
    import copy

    again = copy.copy(err)
    assert again.decision is denied and str(again) == str(err)


def test_a_quota_pickles_as_its_canonical_rate() -> None:
    import pickle

    for rate in ("10/s; burst=50", "3/minute; algorithm=sliding_window", "7/250ms; refill=interval"):
        q = Quota(rate)
        assert pickle.loads(pickle.dumps(q)) == q


def test_nothing_is_picklable_by_accident_or_mutable() -> None:
    d = Limiter("1/s").peek()
    with pytest.raises(AttributeError):
        d.allowed = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        Limiter("1/s").__class__("1/s", "extra")  # type: ignore[misc]
