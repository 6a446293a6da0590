"""The supervisor starts processes in order, restarts crashed ones, and stops all of them."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import paths
from harness.speed import budget
from harness.waits import eventually

from dracpu.dev.readiness import Readiness, is_ready
from dracpu.dev.supervisor import ProcessSpec, StartError, Supervisor

TOY = Path(__file__).with_name("toy_service.py")


@pytest.fixture
def workdir() -> Iterator[Path]:
    with paths.short_tmp("sv-") as path:
        yield path


def toy(workdir: Path, name: str, *extra: str) -> ProcessSpec:
    socket = workdir / f"{name}.sock"
    return ProcessSpec(
        name=name,
        argv=[sys.executable, str(TOY), "--socket", str(socket), *extra],
        readiness=Readiness(grpc_socket=socket),
        log_file=workdir / "logs" / f"{name}.log",
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except OSError:
        return False
    return state != "Z"


async def test_starts_in_order_each_ready_before_the_next(workdir: Path) -> None:
    started = workdir / "started"
    specs = [toy(workdir, name, "--started-file", str(started)) for name in ("a", "b", "c")]
    lines: list[str] = []
    supervisor = Supervisor(specs, report=lines.append)
    try:
        assert await supervisor.start()
        assert started.read_text().split() == [str(workdir / f"{n}.sock") for n in "abc"]
        for spec in specs:
            assert await is_ready(spec.readiness)
        assert [line.split()[0] for line in lines if " ready " in line] == ["a", "b", "c"]
    finally:
        await supervisor.stop()


async def test_a_killed_process_is_restarted_and_ready_again(workdir: Path) -> None:
    specs = [toy(workdir, "a"), toy(workdir, "b")]
    lines: list[str] = []
    supervisor = Supervisor(specs, report=lines.append)
    try:
        assert await supervisor.start()
        old = supervisor.pids()["b"]
        assert old is not None
        os.kill(old, signal.SIGKILL)

        async def restarted() -> bool:
            return any("b restarted" in line for line in lines)

        await eventually(restarted, "restart of b", timeout=20)
        new = supervisor.pids()["b"]
        assert new not in (None, old)
        assert await is_ready(specs[1].readiness)
        assert any("killed by SIGKILL" in line for line in lines)
    finally:
        await supervisor.stop()


async def test_stop_leaves_no_process_even_one_ignoring_sigterm(workdir: Path) -> None:
    specs = [toy(workdir, "a"), toy(workdir, "stubborn", "--ignore-sigterm")]
    lines: list[str] = []
    supervisor = Supervisor(specs, report=lines.append, stop_timeout=0.5)
    assert await supervisor.start()
    pids = [pid for pid in supervisor.pids().values() if pid is not None]
    await supervisor.stop()
    assert not [pid for pid in pids if alive(pid)]
    assert "stubborn ignored SIGTERM; killing it" in lines
    assert not (workdir / "a.sock").exists()


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        pytest.param(["--exit-code", "2"], "exited during start (exit code 2)", id="exits"),
        pytest.param(["--never-ready"], "not ready after", id="never-ready"),
    ],
)
async def test_a_failed_start_stops_what_started_and_says_why(
    workdir: Path, extra: list[str], problem: str
) -> None:
    specs = [toy(workdir, "first"), toy(workdir, "broken", *extra), toy(workdir, "never")]
    # Long enough for `first` to start on this machine, short for the one never ready.
    ready_timeout = budget(3.0)
    supervisor = Supervisor(specs, report=lambda _line: None, ready_timeout=ready_timeout)
    with pytest.raises(StartError) as failure:
        await supervisor.start()
    if extra[0] == "--never-ready":
        problem = f"{problem} {ready_timeout:.0f}s"
    assert f"broken {problem}" in str(failure.value)
    assert supervisor.pids()["never"] is None
    first = supervisor.pids()["first"]
    assert first is not None and not alive(first)
    if extra[0] == "--exit-code":
        assert "toy: refusing to start: exit 2" in str(failure.value)


async def test_a_stop_request_during_start_starts_nothing_more(workdir: Path) -> None:
    specs = [toy(workdir, "slow", "--never-ready"), toy(workdir, "next")]
    supervisor = Supervisor(specs, report=lambda _line: None, ready_timeout=30.0)
    starting = asyncio.create_task(supervisor.start())

    async def spawned() -> bool:
        return supervisor.pids()["slow"] is not None

    await eventually(spawned, "first spawn", timeout=20)
    supervisor.request_stop()
    assert await asyncio.wait_for(starting, 10) is False
    await supervisor.stop()
    slow = supervisor.pids()["slow"]
    assert slow is not None and not alive(slow)
    assert supervisor.pids()["next"] is None


async def test_a_missing_program_is_a_start_error(workdir: Path) -> None:
    missing = ProcessSpec(
        name="ghost",
        argv=[str(workdir / "no-such-program")],
        readiness=Readiness(grpc_socket=workdir / "ghost.sock"),
        log_file=workdir / "logs" / "ghost.log",
    )
    supervisor = Supervisor([toy(workdir, "a"), missing], report=lambda _line: None)
    with pytest.raises(StartError, match=r"ghost: cannot run .*no-such-program: No such file"):
        await supervisor.start()
    first = supervisor.pids()["a"]
    assert first is not None and not alive(first)
