"""KeyedLimiter: str, bytes and int keys (one key rule: a key is a byte string), the key bound,
and wrong keys."""

from __future__ import annotations

import asyncio
import threading

import pytest

import sluicegate
from sluicegate import KeyedLimiter, KeyStoreFull, ManualClock


def manual(rate: str, **kw) -> tuple[KeyedLimiter, ManualClock]:
    clock = ManualClock(0)
    return KeyedLimiter(rate, clock=clock, **kw), clock


def test_keys_have_their_own_buckets() -> None:
    limiter, clock = manual("1/s; burst=2")
    assert limiter.try_acquire("alice", 2)
    assert not limiter.try_acquire("alice")
    assert limiter.try_acquire("bob")
    assert limiter.try_acquire(42, 2) and not limiter.try_acquire(42)
    assert limiter.try_acquire(-7)
    assert len(limiter) == 4
    clock.advance(1)
    assert limiter.try_acquire("alice")
    assert limiter.peek("alice").remaining == 0
    assert limiter.peek("nobody").remaining == 2
    assert len(limiter) == 4  # a peek creates no bucket


def test_str_and_its_utf8_bytes_are_one_key() -> None:
    limiter, _ = manual("1/s; burst=1")
    assert limiter.try_acquire("café")
    assert not limiter.try_acquire("café".encode())
    assert not limiter.try_acquire(b"caf\xc3\xa9")
    assert limiter.try_acquire(b"\xff\x00 not utf-8")


def test_an_int_key_is_its_decimal_digits() -> None:
    # The one key rule of every language: 42, "42" and b"42" name one bucket.
    limiter, _ = manual("1/s; burst=3")
    assert limiter.try_acquire(42)
    assert limiter.try_acquire("42")
    assert limiter.try_acquire(b"42")
    assert not limiter.try_acquire(42) and not limiter.allow("42")
    assert len(limiter) == 1
    assert limiter.peek(b"42").remaining == 0
    assert limiter.remove("42") and not limiter.remove(42)
    assert len(limiter) == 0
    # Negative ints, ints past 64 and 128 bits, and int subclasses: their decimal digits.
    class Id(int):
        def __str__(self) -> str:
            return "not digits"

    for n in (-7, 0, 2**63, -(2**63) - 1, 2**64, 2**127 - 1, -(2**127), 2**200, -(10**100), Id(5)):
        assert limiter.try_acquire(n, 3), n
        assert not limiter.try_acquire(int.__repr__(n)), n
        assert not limiter.try_acquire(int.__repr__(n).encode()), n
    assert len(limiter) == 10
    # Past Python's int-to-str digit limit an int has no decimal form here: a ValueError.
    with pytest.raises(ValueError, match="digits"):
        limiter.try_acquire(10**5000)
    assert len(limiter) == 10


def test_an_int_and_its_text_count_once_toward_max_keys() -> None:
    limiter, _ = manual("1/s; burst=2", max_keys=1)
    assert limiter.try_acquire(7)
    assert limiter.try_acquire("7")  # the same key: no second bucket to refuse
    assert len(limiter) == 1
    with pytest.raises(KeyStoreFull):
        limiter.try_acquire(8)


def test_refund_remove_sweep_clear() -> None:
    limiter, clock = manual("1/s; burst=3")
    limiter.try_acquire("k", 3)
    limiter.refund("k", 2)
    assert limiter.peek("k").remaining == 2
    assert limiter.try_acquire_at("k", 0, 2)
    limiter.refund_at("k", 0, 1)
    assert limiter.peek("k").remaining == 1
    assert limiter.remove("k") is True and limiter.remove("k") is False
    assert limiter.peek("k").remaining == 3
    limiter.try_acquire("a")
    limiter.try_acquire(b"b")
    limiter.try_acquire(3)
    assert len(limiter) == 3
    assert limiter.sweep() == 0
    clock.advance(1)
    assert limiter.sweep() == 3 and len(limiter) == 0
    limiter.try_acquire("a")
    limiter.clear()
    assert len(limiter) == 0
    assert limiter.quota == sluicegate.Quota("1/s; burst=3")
    assert limiter.clock is clock and limiter.now_ns() == 10**9
    assert repr(limiter).startswith('KeyedLimiter("1/s; burst=3"')


def test_key_bound() -> None:
    limiter, clock = manual("1/s; burst=1", max_keys=2)
    assert limiter.max_keys == 2
    limiter.try_acquire("a")
    limiter.try_acquire("b")
    with pytest.raises(KeyStoreFull) as info:
        limiter.try_acquire("c")
    assert info.value.max_keys == 2 and info.value.code == "key_store_full"
    clock.advance(1)  # a and b are full again: evictable, losslessly
    assert limiter.try_acquire("c")
    evicting, _ = manual("1/s; burst=1", max_keys=2, on_full="evict")
    for k in "abcdef":
        assert evicting.try_acquire(k)
    assert len(evicting) <= 2
    assert sluicegate.DEFAULT_MAX_KEYS == KeyedLimiter("1/s").max_keys


@pytest.mark.parametrize(
    ("key", "exc"),
    [
        (None, TypeError),
        (1.5, TypeError),
        (("a", 1), TypeError),
        (True, TypeError),
        (bytearray(b"a"), TypeError),
        (b"a".decode, TypeError),
        ("\ud800", UnicodeEncodeError),
    ],
)
def test_bad_keys(key: object, exc: type) -> None:
    limiter, _ = manual("1/s")
    for call in (
        limiter.try_acquire,
        limiter.peek,
        limiter.refund,
        limiter.remove,
        limiter.reserve,
        lambda k: limiter.acquire(k, timeout=0),
        limiter.acquire_async,
        lambda k: limiter.try_acquire_at(k, 0),
    ):
        with pytest.raises(exc):
            call(key)
    assert len(limiter) == 0


def test_bad_constructor_arguments() -> None:
    with pytest.raises(sluicegate.InvalidOptionError) as bound:
        KeyedLimiter("1/s", max_keys=0)
    assert (bound.value.option, bound.value.value) == ("max_keys", "0")
    with pytest.raises(sluicegate.InvalidOptionError) as info:
        KeyedLimiter("1/s", on_full="drop")
    assert (info.value.option, info.value.value) == ("on_full", "drop")
    assert str(info.value) == 'on_full must be "reject" or "evict", not "drop"'
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError):
        KeyedLimiter("1/s", max_keys=-1)
    with pytest.raises(sluicegate.InvalidQuotaError):
        KeyedLimiter("0/s")
    with pytest.raises(sluicegate.InsufficientCapacity):
        KeyedLimiter("1/s").try_acquire("k", 2)


def test_reserve_acquire_and_async() -> None:
    limiter, clock = manual("1/s; burst=2")
    r = limiter.reserve("k", 2)
    assert r and not limiter.try_acquire("k")
    assert r.cancel() and not r.cancel()
    assert limiter.peek("k").remaining == 2
    limiter.try_acquire("k", 2)
    assert not limiter.acquire("k", timeout=0.01)
    threading.Timer(0.05, lambda: clock.advance(1)).start()
    assert limiter.acquire("k", timeout=5)
    fast = KeyedLimiter("100/s; burst=1")

    async def main() -> list[sluicegate.Decision]:
        return [await fast.acquire_async(b"k") for _ in range(3)]

    assert all(asyncio.run(main()))


def test_threads_over_many_keys_never_over_admit() -> None:
    limiter = KeyedLimiter("1/h; burst=3")
    wins: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        mine: dict[int, int] = {}
        for _ in range(3):
            for k in range(2000):
                if limiter.try_acquire(k):
                    mine[k] = mine.get(k, 0) + 1
        with lock:
            for k, n in mine.items():
                wins[k] = wins.get(k, 0) + n

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 2000 and set(wins.values()) == {3}
