"""The tests' waits: a wait returns what its check found or says what it saw last, and `never`
fails as soon as the event shows, waits for its positive marker, and looks once more after it."""

from __future__ import annotations

import pytest
from harness.waits import Happened, WaitTimeout, eventually, never, wait_for


def test_wait_for_returns_the_checks_value_and_counts_an_assertion_as_not_yet() -> None:
    calls: list[int] = []

    def third() -> list[int] | None:
        calls.append(len(calls))
        assert len(calls) >= 3, f"only {len(calls)}"
        return calls

    assert wait_for(third, "a third call", timeout=5, interval=0) == [0, 1, 2]


def test_wait_for_says_what_it_saw_last_when_the_budget_ends() -> None:
    def never_holds() -> None:
        raise AssertionError("pool still 0-3")

    with pytest.raises(WaitTimeout, match=r"for the pool to shrink; last seen: .*pool still 0-3"):
        wait_for(never_holds, "the pool to shrink", timeout=0.05, interval=0.01)


async def test_eventually_awaits_a_coroutine_check() -> None:
    seen: list[str] = []

    async def grows() -> int:
        seen.append("x")
        return len(seen) if len(seen) >= 2 else 0

    assert await eventually(grows, "two looks", timeout=5, interval=0) == 2


async def test_never_fails_at_once_when_the_event_happens() -> None:
    rounds: list[int] = []

    def written() -> str:
        rounds.append(1)
        return "slice-a rewritten" if len(rounds) >= 2 else ""

    with pytest.raises(Happened, match="a rewrite: 'slice-a rewritten'"):
        await never(written, "a rewrite", until=lambda: len(rounds) >= 1000, interval=0)
    assert len(rounds) == 2  # not at the marker: as soon as it showed


async def test_never_returns_at_its_marker_when_nothing_happened() -> None:
    polls: list[int] = []

    def marker() -> bool:
        polls.append(1)
        return len(polls) >= 5

    await never(lambda: "", "a rewrite", until=marker, interval=0)
    assert len(polls) == 5


async def test_never_looks_once_more_after_the_marker() -> None:
    """The event that lands with the marker (in the same round) is still seen."""
    rounds: list[int] = []
    written: list[str] = []

    def marker() -> bool:
        rounds.append(1)
        if len(rounds) == 3:
            written.append("written in the last round")
            return True
        return False

    with pytest.raises(Happened, match="written in the last round"):
        await never(lambda: written, "a write", until=marker, interval=0)


async def test_never_with_a_marker_that_does_not_come_is_a_timeout() -> None:
    with pytest.raises(WaitTimeout, match="the marker after which a write would have been seen"):
        await never(lambda: "", "a write", until=lambda: False, within=0.05, interval=0.01)


async def test_never_without_a_marker_watches_its_whole_window() -> None:
    polls: list[int] = []

    def looked() -> str:
        polls.append(1)
        return ""

    await never(looked, "a write", within=0.05, interval=0.01)
    assert len(polls) >= 2
