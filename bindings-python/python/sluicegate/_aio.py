"""asyncio support for ``acquire_async`` (the native methods return this coroutine)."""

from __future__ import annotations

import asyncio

from sluicegate._native import Decision, _Acquire


async def acquire(plan: _Acquire) -> Decision:
    """The async twin of the native blocking ``acquire``: the core's acquire steps, awaited
    with ``asyncio.sleep``. Every decision (what to reserve, how long to wait, when to give up)
    comes from ``plan.poll()``; an admission with a wait (a leaky queue's slot) is awaited, and
    given back if the task is cancelled. Returns the admitting decision, or the rejection."""
    while True:
        step, decision = plan.poll()
        if step == "retry":
            await asyncio.sleep(decision.retry_after)
            continue
        if step == "admit" and decision.retry_after_ns:
            try:
                await asyncio.sleep(decision.retry_after)
            except BaseException:
                plan.cancel()
                raise
        return decision
