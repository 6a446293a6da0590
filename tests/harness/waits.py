"""The wait helpers: poll a condition until it holds (`wait_for`, and `eventually` on the event
loop), or make sure an event does not happen (`never`). Every deadline loop of the tests is here.

A check returns something truthy when the condition holds; an AssertionError, OSError,
DracpuError or httpx.HTTPError it raises counts as "not yet", and the last one is reported.
The timeout is the budget on a nominal machine, scaled to this one (`harness.speed`); at the
end WaitTimeout says what was waited for, how long, and what was seen last. A wait returns the
check's last value, so a check can hand back what it found.

An event that must not happen is never waited out with a fixed sleep (on a slow machine the
sleep ends before the system got to it, and the test passes having tested nothing): `never`
polls for the event until a positive marker proves the system went past the point where it
would have happened (a later event seen, a counter moved), or, with no such marker, for a
window scaled to the machine like every budget.
"""

from __future__ import annotations

import asyncio
import inspect
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


class Happened(AssertionError):
    """An event a test made sure of not seeing was seen."""


class _Budget:
    """One wait's budget: whether a check's value ends it, or the time is up."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.start = time.monotonic()
        self.limit = budget(timeout)

    def settled(self, value: Any) -> bool:
        """True when `value` (a check's result, or the "not yet" it raised) holds."""
        if value and not isinstance(value, BaseException):
            return True
        waited = time.monotonic() - self.start
        if waited >= self.limit:
            raise WaitTimeout(f"waited {waited:.1f} s for {self.what}; last seen: {value!r}")
        return False


def wait_for(
    check: Callable[[], T | None], what: str, *, timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Poll `check` every `interval` s until it returns something truthy, and return that."""
    clock = _Budget(what, timeout)
    while True:
        try:
            value: Any = check()
        except NOT_YET as exc:
            value = exc
        if clock.settled(value):
            return value  # type: ignore[no-any-return]
        time.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: str,
    *,
    timeout: float = 15.0,
    interval: float = 0.05,
) -> T:
    """wait_for without blocking the event loop; `check` may be a coroutine function or a
    plain one (a plain one must not block)."""
    clock = _Budget(what, timeout)
    while True:
        try:
            value: Any = check()
            if inspect.isawaitable(value):
                value = await value
        except NOT_YET as exc:
            value = exc
        if clock.settled(value):
            return value  # type: ignore[no-any-return]
        await asyncio.sleep(interval)


async def _value(check: Callable[[], Awaitable[T | None] | T | None]) -> Any:
    value: Any = check()
    if inspect.isawaitable(value):
        value = await value
    return value


async def never(
    happened: Callable[[], Awaitable[object] | object],
    what: str,
    *,
    until: Callable[[], Awaitable[object] | object] | None = None,
    within: float = 15.0,
    interval: float = 0.05,
) -> None:
    """Make sure `what` does not happen: poll `happened` (plain or coroutine function; what it
    returns is truthy once the event happened) until `until`, a positive marker, holds (polled
    as `eventually` polls, WaitTimeout when it does not within `within` nominal seconds) and
    once more after it; with no marker, for `within` nominal seconds. Happened, naming `what`
    and what `happened` returned, as soon as the event is seen."""
    clock = _Budget(f"the marker after which {what} would have been seen", within)
    while True:
        seen = await _value(happened)
        if seen:
            raise Happened(f"{what}: {seen!r}")
        if until is None:
            if time.monotonic() - clock.start >= clock.limit:
                return
        else:
            try:
                marker: Any = await _value(until)
            except NOT_YET as exc:
                marker = exc
            if clock.settled(marker):
                seen = await _value(happened)
                if seen:
                    raise Happened(f"{what}: {seen!r}")
                return
        await asyncio.sleep(interval)
