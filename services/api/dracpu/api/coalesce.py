"""Sharing one backend read among concurrent identical requests, without serving anything
older than the request.

A request never joins a call that started before it arrived (that reply could predate a change
the caller already saw happen). It either starts the call, or waits for the one call queued to
start when the running one ends; every request arriving meanwhile shares that queued call. So
a burst of N identical reads costs at most two backend calls, and each answer is fresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _consume(task: asyncio.Future[Any]) -> None:
    # Every sharer may have gone away; the outcome is still retrieved, so nothing is logged
    # as "never retrieved".
    if not task.cancelled():
        task.exception()


class Coalescer(Generic[T]):
    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[T]] = {}
        self._queued: dict[Hashable, asyncio.Future[T]] = {}

    async def fetch(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        running = self._running.get(key)
        if running is None:
            return await asyncio.shield(self._start(key, read))
        queued = self._queued.get(key)
        if queued is None:
            queued = asyncio.ensure_future(self._after(key, running, read))
            queued.add_done_callback(_consume)
            self._queued[key] = queued
        # Shielded: one caller going away must not cancel the others' answer.
        return await asyncio.shield(queued)

    def _start(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        task = asyncio.ensure_future(read())
        self._running[key] = task

        def done(finished: asyncio.Future[T]) -> None:
            if self._running.get(key) is finished:
                del self._running[key]

        task.add_done_callback(done)
        task.add_done_callback(_consume)
        return task

    async def _after(
        self, key: Hashable, running: asyncio.Future[T], read: Callable[[], Awaitable[T]]
    ) -> T:
        await asyncio.wait([running])
        # From here on a newcomer arrived after this call starts: it queues behind it.
        if self._queued.get(key) is asyncio.current_task():
            del self._queued[key]
        return await self._start(key, read)
