"""asyncio support: the coroutines of ``acquire_async`` and of the ``*_async`` methods whose
core call blocks (the native methods return these coroutines)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from sluicegate._native import Decision, _Acquire

T = TypeVar("T")


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
    comes from ``plan.poll()``; an admission with a wait (a leaky queue's slot) is awaited, and
    given back if the task is cancelled. Returns the admitting decision, or the rejection."""
    while True:
        step, decision = await call(plan.poll, plan.remote)
        if step == "retry":
            await asyncio.sleep(decision.retry_after)
            continue
        if step == "admit" and decision.retry_after_ns:
            try:
                await asyncio.sleep(decision.retry_after)
            except BaseException:
                await asyncio.shield(call(plan.cancel, plan.remote))
                raise
        return decision
