"""asyncio support for ``Limiter.acquire_async`` (the native method returns this coroutine)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional


async def acquire(limiter: Any, cost: int, timeout: Optional[float]) -> Any:
    """Tries, and awaits the core's ``retry_after`` between tries, until admitted or until the
    next wait would overrun ``timeout`` seconds; returns the last decision."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        decision = limiter.try_acquire(cost)
        if decision:
            return decision
        wait = decision.retry_after
        if deadline is not None and time.monotonic() + wait > deadline:
            return decision
        await asyncio.sleep(max(wait, 1e-6))
