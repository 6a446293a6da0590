"""Concurrent identical reads share backend calls, and no answer predates its request."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dracpu.api.coalesce import Coalescer


class Backend:
    """A read whose calls the test finishes one at a time; each answer is its call number."""

    def __init__(self) -> None:
        self.started: list[asyncio.Event] = []
        self.release: list[asyncio.Event] = []
        self.clock = 0  # bumps on every arrival and every call start
        self.call_started_at: list[int] = []

    async def read(self) -> int:
        number = len(self.started)
        self.clock += 1
        self.call_started_at.append(self.clock)
        self.started.append(asyncio.Event())
        self.release.append(asyncio.Event())
        self.started[number].set()
        await self.release[number].wait()
        return number


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_burst_costs_two_calls_and_nobody_gets_an_older_call() -> None:
    backend, coalescer = Backend(), Coalescer[int]()
    first = asyncio.ensure_future(coalescer.fetch("k", backend.read))
    await settle()
    later = [asyncio.ensure_future(coalescer.fetch("k", backend.read)) for _ in range(5)]
    await settle()
    assert len(backend.started) == 1  # the five wait for the call after the running one
    backend.release[0].set()
    assert await first == 0
    await settle()
    assert len(backend.started) == 2
    backend.release[1].set()
    assert await asyncio.gather(*later) == [1] * 5


async def test_keys_do_not_share() -> None:
    backend, coalescer = Backend(), Coalescer[int]()
    a = asyncio.ensure_future(coalescer.fetch("ns-a", backend.read))
    b = asyncio.ensure_future(coalescer.fetch("ns-b", backend.read))
    await settle()
    assert len(backend.started) == 2
    for event in backend.release:
        event.set()
    assert sorted(await asyncio.gather(a, b)) == [0, 1]


async def test_a_failure_reaches_every_sharer_and_the_next_read_starts_fresh() -> None:
    coalescer = Coalescer[int]()
    gate = asyncio.Event()
    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        raise RuntimeError("backend down")

    sharers = [asyncio.ensure_future(coalescer.fetch("k", failing)) for _ in range(3)]
    await settle()
    gate.set()
    results = await asyncio.gather(*sharers, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert calls == 2

    async def healthy() -> int:
        return 7

    assert await coalescer.fetch("k", healthy) == 7


async def test_a_caller_going_away_does_not_cancel_the_others() -> None:
    backend, coalescer = Backend(), Coalescer[int]()
    leaving = asyncio.ensure_future(coalescer.fetch("k", backend.read))
    staying = asyncio.ensure_future(coalescer.fetch("k", backend.read))
    await settle()
    leaving.cancel()
    await settle()
    backend.release[0].set()
    await settle()
    backend.release[1].set()
    assert await staying == 1
    with pytest.raises(asyncio.CancelledError):
        await leaving


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["arrive", "finish"]), max_size=30))
def test_every_answer_comes_from_a_call_started_after_its_request(steps: list[str]) -> None:
    async def run() -> None:
        backend, coalescer = Backend(), Coalescer[int]()
        requests: list[tuple[int, asyncio.Future[int]]] = []
        finished = 0
        for step in steps:
            if step == "arrive":
                backend.clock += 1
                requests.append(
                    (backend.clock, asyncio.ensure_future(coalescer.fetch("k", backend.read)))
                )
            elif finished < len(backend.release):
                backend.release[finished].set()
                finished += 1
            await settle()
        while any(not future.done() for _, future in requests):
            for event in backend.release:
                event.set()
            await settle()
        for arrived, future in requests:
            call = future.result()
            assert backend.call_started_at[call] > arrived
        # Never more calls than requests.
        assert len(backend.started) <= len(requests)

    asyncio.run(run())
