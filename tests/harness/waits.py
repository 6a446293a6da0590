"""The wait helpers, one synchronous and one asynchronous: poll a condition until it holds.

A check returns something truthy when the condition holds; an AssertionError, OSError,
DracpuError or httpx.HTTPError it raises counts as "not yet", and the last one is reported.
The timeout is the budget on a nominal machine, scaled to this one (`harness.speed`); at the
end WaitTimeout says what was waited for, how long, and what was seen last.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from dracpu.core.errors import DracpuError
from harness.speed import budget

T = TypeVar("T")
NOT_YET: tuple[type[BaseException], ...] = (AssertionError, OSError, DracpuError, httpx.HTTPError)


class WaitTimeout(AssertionError):
    """A condition that did not hold within its budget."""


def _timed_out(what: str, waited: float, last: Any) -> WaitTimeout:
    return WaitTimeout(f"waited {waited:.1f} s for {what}; last seen: {last!r}")


def wait_for(
    check: Callable[[], T | None],
    what: str,
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    scale: bool = True,
) -> T:
    """Poll `check` every `interval` s until it returns something truthy, and return that."""
    start = time.monotonic()
    limit = budget(timeout) if scale else timeout
    last: Any = None
    while True:
        try:
            last = check()
        except NOT_YET as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last  # type: ignore[no-any-return]
        waited = time.monotonic() - start
        if waited >= limit:
            raise _timed_out(what, waited, last)
        time.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    timeout: float = 15.0,
    interval: float = 0.05,
    scale: bool = True,
) -> T:
    """wait_for for a coroutine check, without blocking the event loop."""
    start = time.monotonic()
    limit = budget(timeout) if scale else timeout
    last: Any = None
    while True:
        try:
            last = await check()
        except NOT_YET as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last  # type: ignore[no-any-return]
        waited = time.monotonic() - start
        if waited >= limit:
            raise _timed_out(what, waited, last)
        await asyncio.sleep(interval)
