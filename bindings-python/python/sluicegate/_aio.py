"""asyncio support: the coroutines of ``acquire_async`` and of the ``*_async`` methods whose
core call blocks (the native methods return these coroutines)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from sluicegate._native import Decision, _Acquire

T = TypeVar("T")

#: Give-backs that outlived the task that started them (cancelled again while it waited for
#: one): held here until they end, since the loop keeps only weak references to tasks.
_settling: set[asyncio.Future[None]] = set()


async def call(method: Callable[..., T], remote: bool, *args: Any) -> T:
    """``method(*args)``: at once for an in-process store, whose call never blocks; for a
    store outside the process (Redis), whose call is a round trip made with the GIL released,
    on a thread of the running loop's default executor, so that the loop never waits for
    the server."""
    if not remote:
        return method(*args)
    return await asyncio.get_running_loop().run_in_executor(None, method, *args)


async def acquire(plan: _Acquire) -> Decision:
    """The async twin of the native blocking ``acquire``: the core's acquire steps, awaited
    with ``asyncio.sleep``. Every decision (what to reserve, how long to wait, when to give up)
    comes from ``plan.poll()``; an admission with a wait (a leaky queue's slot) is awaited.
    A task cancelled meanwhile gives back what its acquire was admitted, and the
    cancellation propagates: one cancelled during its wait, and one cancelled while a poll
    ran on an executor thread (Redis), which a cancellation cannot stop: that poll is waited
    for, and what it admitted (nobody will receive it) is given back. Returns the admitting
    decision, or the rejection."""
    while True:
        step, decision = await _poll(plan)
        if step == "retry":
            await asyncio.sleep(decision.retry_after)
            continue
        # An admission that shadow mode let through carries the rejection's figures and
        # took nothing: it never waits (the core's Next::wait).
        if step == "admit" and decision.retry_after_ns and not decision.shadow_rejected:
            try:
                await asyncio.sleep(decision.retry_after)
            except BaseException:
                await _shielded(_give_back(plan))
                raise
        return decision


async def _poll(plan: _Acquire) -> tuple[Literal["admit", "reject", "retry"], Decision]:
    """``plan.poll()`` (on Redis, on an executor thread). Cancelled while the thread polls,
    it waits for that poll (shielded) and gives back what it admitted, then re-raises the
    cancellation."""
    if not plan.remote:
        return plan.poll()
    polled = asyncio.get_running_loop().run_in_executor(None, plan.poll)
    try:
        return await asyncio.shield(polled)
    except asyncio.CancelledError:
        await _shielded(_settle(polled, plan))
        raise


async def _settle(polled: Awaitable[object], plan: _Acquire) -> None:
    """Waits for a poll whose caller was cancelled, and gives back what it admitted."""
    try:
        await polled
    except Exception:
        return  # the poll failed: it admitted nothing
    await _give_back(plan)


async def _give_back(plan: _Acquire) -> None:
    """Gives back the cost the plan's last poll admitted (nothing if it did not admit). A
    failure (a StoreError on Redis) is a RuntimeWarning, never raised: the caller is
    propagating the cancellation (or error) that made it give back, which stays the one
    raised."""
    try:
        await call(plan.cancel, plan.remote)
    except Exception as e:
        warnings.warn(
            f"sluicegate: a cancelled acquire_async could not give back the cost it was "
            f"admitted ({type(e).__name__}: {e}); the tokens stay taken",
            RuntimeWarning,
            stacklevel=2,
        )


async def _shielded(work: Awaitable[None]) -> None:
    """Awaits ``work`` as a task of its own that a cancellation of the caller does not stop:
    cancelled again meanwhile, the caller's cancellation propagates and the task goes on."""
    task = asyncio.ensure_future(work)
    _settling.add(task)
    task.add_done_callback(_settling.discard)
    await asyncio.shield(task)
