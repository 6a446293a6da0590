"""dracpu.core.tasks.within: a wait with a time limit that hands back the result, gives up with
TimeoutError, and never loses the caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from dracpu.core.tasks import within


async def test_the_result_comes_back_when_it_is_in_time() -> None:
    assert await within(asyncio.sleep(0, "done"), 5) == "done"


async def test_a_late_result_is_a_timeout_and_the_wait_is_cancelled() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await within(never, 0.01)
    assert never.cancelled()


async def test_a_cancellation_arriving_as_the_awaitable_completes_is_kept() -> None:
    """The caller cancelled in the same turn of the loop as the awaited future completes:
    asyncio.wait_for on Python 3.11 returns the result then, and a loop around it never ends."""
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(answer, 10))
    await asyncio.sleep(0)  # `waiting` now awaits the answer
    answer.set_result("late")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
