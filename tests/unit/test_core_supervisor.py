"""The supervisor of a service's long-running loops: an unexpected error is logged with its
traceback, counted and restarted after a backoff delay; readiness follows the loops; a
one-shot loop ends, a forever loop that returns is restarted; shutdown cancels cleanly and
drops no error unlogged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from harness.log_lines import LogLines, captured
from harness.loop_faults import HeldBackoff
from harness.waits import eventually
from prometheus_client import CollectorRegistry

from dracpu.core.retry import Backoff
from dracpu.core.rpc import Health
from dracpu.core.supervisor import LoopState, Supervisor


def quick() -> Backoff:
    return Backoff(initial=0.01, maximum=0.01, jitter=0.0)


@dataclass
class Gate:
    """A readiness gate that remembers what it was told."""

    seen: list[bool] = field(default_factory=list)

    async def block(self, reason: str, blocked: bool) -> None:
        assert reason == "loops"
        self.seen.append(blocked)


@pytest.fixture
def lines() -> Iterator[LogLines]:
    with captured() as handler:
        yield handler


def restarts(registry: CollectorRegistry, loop: str) -> float | None:
    return registry.get_sample_value(
        "dra_cpu_loop_restarts_total", {"service": "svc", "loop": loop}
    )


async def test_an_unexpected_error_is_logged_with_its_traceback_counted_and_restarted(
    lines: LogLines,
) -> None:
    registry = CollectorRegistry()
    runs: list[int] = []
    steady = asyncio.Event()

    async def publish() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("slices lost")
        steady.set()
        await asyncio.Event().wait()

    loops = Supervisor("svc", registry=registry, backoff=quick)
    loops.start("publisher", publish)
    assert restarts(registry, "publisher") == 0  # the series exists before any restart
    await asyncio.wait_for(steady.wait(), 5)
    (failed,) = lines.said("loop failed; restarting it")
    assert failed["loop"] == "publisher"
    assert failed["service"] == "svc"
    assert failed["error"] == "RuntimeError: slices lost"
    assert (failed["restarts"], failed["failures_in_row"]) == (1, 1)
    assert "Traceback (most recent call last)" in failed["stacktrace"]
    assert 'raise RuntimeError("slices lost")' in failed["stacktrace"]
    assert restarts(registry, "publisher") == 1
    (status,) = loops.loops()
    assert (status.state, status.ready, status.restarts) == (LoopState.RUNNING, True, 1)
    assert status.last_error == "RuntimeError: slices lost"
    assert status.last_error_at > 0
    await loops.stop()


async def test_the_service_is_unready_while_a_loop_waits_to_be_restarted() -> None:
    backoff = HeldBackoff(initial=1.0, maximum=1.0)
    fail = asyncio.Event()
    gate = Gate()

    async def watch() -> None:
        await fail.wait()
        fail.clear()
        raise RuntimeError("watch broke")

    loops = Supervisor("svc", backoff=lambda: backoff)
    await loops.attach(gate)
    loops.start("watch", watch)
    await eventually(lambda: gate.seen[-1:] == [False], "the loop running, ready")
    fail.set()
    await eventually(lambda: not loops.ready, "the loop restarting")
    assert gate.seen[-1] is True
    (status,) = loops.unready()
    assert (status.name, status.state) == ("watch", LoopState.RESTARTING)
    backoff.released.set()
    await eventually(lambda: loops.ready, "the loop restarted")
    assert gate.seen[-1] is False
    await loops.stop()


async def test_health_is_not_serving_while_a_supervisor_blocks_it() -> None:
    health = Health([])
    await health.set(True)
    assert health.serving
    await health.block("loops", True)
    assert not health.serving
    await health.set(True)  # the service's own verdict does not override a blocked gate
    assert not health.serving
    await health.block("loops", False)
    assert health.serving
    await health.set(False)
    assert not health.serving


async def test_a_loop_failing_more_than_the_limit_in_a_row_stays_unready_until_stable() -> None:
    failures = 3

    async def flaky() -> None:
        nonlocal failures
        if failures:
            failures -= 1
            raise RuntimeError("flaky")
        await asyncio.Event().wait()

    loops = Supervisor("svc", backoff=quick, failure_limit=2, stable_after=0.3)
    loops.start("flaky", flaky)
    # The third restart is counted when it is scheduled; running comes after its back-off.
    await eventually(
        lambda: loops.loops()[0].restarts == 3 and loops.loops()[0].state is LoopState.RUNNING,
        "three failures, then running again",
    )
    (status,) = loops.loops()
    assert status.failures_in_row == 3
    assert not status.ready  # running, but failed more than twice in a row
    await eventually(lambda: loops.ready, "the loop counted stable again", timeout=5)
    assert loops.loops()[0].failures_in_row == 0
    await loops.stop()


async def test_a_loop_within_the_limit_is_ready_once_running_again() -> None:
    failed = False

    async def once_flaky() -> None:
        nonlocal failed
        if not failed:
            failed = True
            raise RuntimeError("once")
        await asyncio.Event().wait()

    loops = Supervisor("svc", backoff=quick, failure_limit=1, stable_after=60)
    loops.start("loop", once_flaky)
    await eventually(lambda: loops.loops()[0].restarts == 1, "one failure")
    await eventually(lambda: loops.loops()[0].state is LoopState.RUNNING, "running again")
    assert loops.ready
    assert loops.loops()[0].failures_in_row == 1
    await loops.stop()


async def test_a_one_shot_loop_that_returns_is_done(lines: LogLines) -> None:
    loops = Supervisor("svc", backoff=quick)

    async def catch_up() -> None:
        return None

    loops.start("catch-up", catch_up, once=True)
    await eventually(lambda: loops.loops()[0].state is LoopState.DONE, "the loop done")
    assert loops.ready
    assert loops.loops()[0].restarts == 0
    assert lines.said("loop ended; restarting it") == []
    await loops.stop()
    assert loops.loops()[0].state is LoopState.DONE


async def test_a_forever_loop_that_returns_is_restarted(lines: LogLines) -> None:
    registry = CollectorRegistry()
    runs = 0

    async def follow() -> None:
        nonlocal runs
        runs += 1
        if runs > 1:
            await asyncio.Event().wait()

    loops = Supervisor("svc", registry=registry, backoff=quick)
    loops.start("follow", follow)
    await eventually(lambda: runs == 2, "the loop started again")
    (ended,) = lines.said("loop ended; restarting it")
    assert (ended["loop"], ended["restarts"]) == ("follow", 1)
    assert loops.loops()[0].last_error == "the loop returned"
    assert restarts(registry, "follow") == 1
    await loops.stop()


async def test_a_one_shot_loop_that_fails_is_restarted_until_it_completes() -> None:
    runs = 0

    async def catch_up() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("first try")

    loops = Supervisor("svc", backoff=quick)
    loops.start("catch-up", catch_up, once=True)
    await eventually(lambda: loops.loops()[0].state is LoopState.DONE, "the loop done")
    assert (runs, loops.loops()[0].restarts) == (2, 1)
    await loops.stop()


async def test_stopping_cancels_every_loop_without_an_error_line(lines: LogLines) -> None:
    cleaned: list[str] = []

    async def loop(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(name)

    loops = Supervisor("svc", backoff=quick)
    loops.start("a", lambda: loop("a"))
    loops.start("b", lambda: loop("b"))
    await asyncio.sleep(0.05)
    await loops.stop()
    assert sorted(cleaned) == ["a", "b"]
    assert [s.state for s in loops.loops()] == [LoopState.STOPPED, LoopState.STOPPED]
    assert [r for r in lines.records if r.levelname == "ERROR"] == []
    with pytest.raises(RuntimeError, match="after svc began stopping"):
        loops.start("c", lambda: loop("c"))


async def test_an_error_a_loop_raises_while_it_stops_is_logged(lines: LogLines) -> None:
    async def untidy() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("socket already gone")

    loops = Supervisor("svc", backoff=quick)
    loops.start("untidy", untidy)
    await asyncio.sleep(0.05)
    await loops.stop()
    (line,) = lines.said("loop failed while stopping")
    assert (line["loop"], line["error"]) == ("untidy", "OSError: socket already gone")
    assert "OSError: socket already gone" in line["stacktrace"]


async def test_a_loop_that_ignores_cancellation_is_named_at_shutdown(lines: LogLines) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    loops = Supervisor("svc", backoff=quick)
    loops.start("stubborn", stubborn)
    await asyncio.sleep(0.05)
    await loops.stop(grace=0.1)
    (line,) = lines.said("loop did not stop when cancelled")
    assert line["loop"] == "stubborn"
    release.set()
    await asyncio.sleep(0.05)


async def test_a_loop_name_is_started_once() -> None:
    loops = Supervisor("svc", backoff=quick)

    async def idle() -> None:
        await asyncio.Event().wait()

    loops.start("idle", idle)
    with pytest.raises(ValueError, match="started twice"):
        loops.start("idle", idle)
    await loops.stop()
