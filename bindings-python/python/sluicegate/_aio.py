"""asyncio support for ``acquire_async`` (the native methods return this coroutine)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional


async def acquire(try_acquire: Callable[..., Any], args: tuple, timeout: Optional[float]) -> Any:
    """Calls ``try_acquire(*args)``, and awaits the core's ``retry_after`` between tries, until
    admitted or until the next wait would overrun ``timeout`` seconds; returns the last
    decision."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        decision = try_acquire(*args)
        if decision:
            return decision
        wait = decision.retry_after
        if deadline is not None and time.monotonic() + wait > deadline:
            return decision
        await asyncio.sleep(max(wait, 1e-6))
