"""asyncio support for ``acquire_async`` (the native methods return this coroutine)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional


async def acquire(reserve: Callable[..., Any], args: tuple, timeout: Optional[float], queue: bool) -> Any:
    """The async twin of the native blocking ``acquire``: ``reserve(*args, max_wait=left)``
    until admitted, awaiting the core's ``retry_after`` between tries; an admission with a
    delay (a leaky queue's slot) is awaited, and given back if the task is cancelled. Returns
    the admitting decision, or the rejection once the next wait would overrun ``timeout``
    seconds (for a queue: at once when a timeout is set)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        reservation = reserve(*args, max_wait=left)
        decision = reservation.decision
        if reservation:
            if reservation.delay > 0:
                try:
                    await asyncio.sleep(reservation.delay)
                except BaseException:
                    reservation.cancel()
                    raise
            return decision
        wait = decision.retry_after
        if left is not None and (queue or wait > left):
            return decision
        await asyncio.sleep(max(wait, 1e-6))
