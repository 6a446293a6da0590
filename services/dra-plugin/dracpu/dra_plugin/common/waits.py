"""Waiting for an asyncio.Event with a time limit, without losing a cancellation."""

from __future__ import annotations

import asyncio


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
