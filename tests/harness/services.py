"""Waiting for a service process to serve: its gRPC health on a unix socket (or another probe)
says so, or it fails at once, with its log's tail, when the process has exited."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

from dracpu.core import rpc
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from harness.waits import WaitTimeout, eventually

# A service process: started by subprocess, by asyncio, or known by its PID only.
Process = subprocess.Popen[bytes] | asyncio.subprocess.Process | int
TAIL = 2000  # characters of the log shown when a service does not come up


class ServiceExited(RuntimeError):
    """A service's process ended before it served."""


def exited(process: Process | None) -> str:
    """How the process ended ("exited with 1", "exited"), or "" while it runs."""
    if process is None:
        return ""
    if isinstance(process, int):
        try:
            os.kill(process, 0)
        except ProcessLookupError:
            return "exited"
        return ""
    code = process.poll() if isinstance(process, subprocess.Popen) else process.returncode
    return "" if code is None else f"exited with {code}"


def log_tail(log: Path | None) -> str:
    """The end of `log`, on lines of its own after the message it ends; "" without one."""
    if log is None:
        return ""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return f"\n--- {log} (end) ---\n{text[-TAIL:]}" if text else ""


async def wait_serving(
    socket: Path | str,
    process: Process | None,
    *,
    what: str,
    log: Path | None = None,
    timeout: float = 30.0,
    status: str = "SERVING",
    probe: Callable[[], object] | None = None,
    interval: float = 0.05,
) -> None:
    """Wait until the gRPC health service on `socket` reports `status`, or, given `probe` (a
    plain or coroutine function), until it returns something truthy; `socket` then only names
    where the service listens. ServiceExited as soon as `process` has ended, WaitTimeout
    after `timeout` nominal seconds, each with the tail of `log`."""

    async def served() -> bool:
        ended = exited(process)
        if ended:
            raise ServiceExited(f"{what} {ended} before serving on {socket}{log_tail(log)}")
        if probe is not None:
            answer = probe()
            if inspect.isawaitable(answer):
                answer = await answer
            return bool(answer)
        # gRPC only for those that ask it (a memory benchmark imports none of it otherwise).
        if status == "SERVING":  # what `dracpu dev up` itself waits for, by its own code
            from dracpu.dev.readiness import Readiness, is_ready

            return await is_ready(Readiness(grpc_socket=Path(socket)))
        if not Path(socket).exists():
            return False
        from dracpu.core.rpc import check_health

        return await check_health(socket, timeout=1.0) == status

    try:
        await eventually(served, f"{what} {status} on {socket}", timeout=timeout, interval=interval)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}{log_tail(log)}") from None


@contextlib.asynccontextmanager
async def served_in_process(
    socket: Path, add: Callable[[grpc.aio.Server], None]
) -> AsyncIterator[grpc.aio.Channel]:
    """A dracpu gRPC server run in the test's process on `socket` (its servicers added by
    `add`, with the health and info services every dracpu server carries), and a channel to it;
    the server stopped after the block."""
    server, health = await rpc.start_server(socket, add, service="test", api_version="test")
    try:
        async with rpc.channel(socket) as chan:
            yield chan
    finally:
        await rpc.stop_server(server, health, socket)


async def serving_pid(socket: Path | str) -> int:
    """The process ID the service on `socket` gives in its Info.GetVersion."""
    async with rpc.channel(socket) as chan:
        info = await rpc.call(
            info_pb2_grpc.InfoStub(chan).GetVersion(info_pb2.GetVersionRequest()), "version"
        )
    return int(info.pid)
