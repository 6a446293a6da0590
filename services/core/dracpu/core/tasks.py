"""Asyncio plumbing the services share: work that runs to its end whatever its caller does,
a finished task's error consumed, a wait with a time limit that keeps a cancellation, and
blocking I/O in the loop's thread pool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def retrieve(task: asyncio.Future[Any]) -> None:
    """A done callback: a task whose caller left still ends with a result or an error; consume
    it, so an error is not reported as "never retrieved" (a caller that waited saw it)."""
    if not task.cancelled():
        task.exception()


async def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end even when the caller goes away (a client timeout cancels the
    handler): a mutation whose files are written must be published, its lock held until then."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(retrieve)
    return await asyncio.shield(task)


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """`awaitable`'s result, or TimeoutError after `timeout` seconds (None: no limit).

    asyncio.timeout rather than asyncio.wait_for: on Python 3.11, wait_for hands back the
    result of an awaitable that completes just as the caller is cancelled, and the cancellation
    is lost, so a loop or a shutdown waiting that way may never end."""
    async with asyncio.timeout(timeout):
        return await awaitable


async def io(func: Callable[..., T], *args: Any) -> T:
    """`func(*args)`, blocking I/O, in the loop's thread pool."""
    return await asyncio.to_thread(func, *args)
