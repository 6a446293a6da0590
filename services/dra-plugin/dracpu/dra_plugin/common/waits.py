"""Waiting for asyncio.Events with a time limit, without losing a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds pass (None: no limit); True when set.

    asyncio.timeout rather than asyncio.wait_for: on Python 3.11, wait_for returns the inner
    result when a cancellation arrives just as the event is set, and the cancellation is lost,
    so a loop waiting this way may never end once cancelled."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def wait_any(events: Sequence[asyncio.Event], timeout: float | None) -> bool:
    """Wait until one of `events` is set or `timeout` seconds pass; True when one is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)
