"""An unexpected error injected into one long-running loop of a service running in this process,
and what the service shows of it: the log line with the traceback, its gRPC health, its
`Info.GetLoops`, the restart counter, and the api's `/readyz`.

The services run their real `serve` (each module's `stop_event` replaced by an event the test
sets), on short temporary unix sockets. Every loop a service starts through
`dracpu.core.supervisor.Supervisor.start` is recorded; the one under test is wrapped so that its
first run fails with RuntimeError when the test says so, and runs as written after that. The
restart waits until the test releases it, so "NOT_SERVING while restarting" is seen without a
race against the backoff delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.core import supervisor
from dracpu.core.retry import Backoff
from dracpu.core.rpc import call, channel, check_health
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.topology.fixtures import write_fixture
from harness.log_lines import LogLines
from harness.waits import eventually

NODE = "node-a"
FIXTURE = "single-4c8t"
INJECTED = "injected fault"


@dataclass
class HeldBackoff(Backoff):
    """Restart delays that last until the test releases them."""

    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self) -> float:
        await self.released.wait()
        return 0.0


@dataclass
class LoopFault:
    """The fault for loop `loop` of service `service`, and every loop the services started."""

    service: str
    loop: str
    trigger: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)  # restarts may go on
    started: dict[str, list[str]] = field(default_factory=dict)
    injected: bool = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = supervisor.Supervisor.start
        fault = self

        def start(
            self: supervisor.Supervisor,
            name: str,
            run: Callable[[], Awaitable[None]],
            *,
            once: bool = False,
        ) -> None:
            fault.started.setdefault(self.service, []).append(name)
            if (self.service, name) == (fault.service, fault.loop):
                run = fault.wrap(run)
            original(self, name, run, once=once)

        def restart_backoff() -> Backoff:
            return HeldBackoff(initial=1.0, maximum=1.0, released=self.released)

        monkeypatch.setattr(supervisor.Supervisor, "start", start)
        monkeypatch.setattr(supervisor, "restart_backoff", restart_backoff)

    def wrap(self, run: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def faulty() -> None:
            if self.injected:
                await run()
                return
            work = asyncio.ensure_future(run())
            trigger = asyncio.ensure_future(self.trigger.wait())
            await asyncio.wait({work, trigger}, return_when=asyncio.FIRST_COMPLETED)
            if work.done() and work.exception() is not None:
                trigger.cancel()
                await work  # an error of its own: not what this test injects
            await trigger  # a one-shot loop that finished first fails at its end
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            self.injected = True
            raise RuntimeError(f"{INJECTED} in {self.loop}")

        return faulty


@dataclass
class RunningService:
    name: str
    socket: Path
    task: asyncio.Task[int]
    stop: asyncio.Event


class Services:
    """Services running in this process on sockets in a short temporary directory."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.root = Path(tempfile.mkdtemp(prefix="lf", dir="/tmp"))
        self.running: list[RunningService] = []
        self.config = self.root / "config.yaml"
        self.config.write_text(yaml.safe_dump({"apiVersion": "v1alpha1", "hostnameOverride": NODE}))
        self.sysfs = write_fixture(FIXTURE, self.root / "sys")

    def sock(self, name: str) -> Path:
        return self.root / f"{name}.sock"

    def sockets(self) -> dict[str, str]:
        return {
            "topology": str(self.sock("topology")),
            "allocator": str(self.sock("allocator-ro")),
            "dra-plugin": str(self.sock("dra-plugin")),
            "nri-plugin": str(self.sock("nri-plugin")),
        }

    async def start(self, name: str, runtime: ModuleType, parser: Any, argv: list[str]) -> None:
        """Run `runtime.serve` with `argv` until `stop_all`; return once it is SERVING."""
        stop = asyncio.Event()
        self.monkeypatch.setattr(runtime, "stop_event", lambda: stop)
        args = parser.parse_args(["--config", str(self.config), *argv])
        task = asyncio.create_task(runtime.serve(args), name=f"serve {name}")
        service = RunningService(name, self.sock(name), task, stop)
        self.running.append(service)

        async def serving() -> bool:
            if task.done():
                task.result()  # its error, if it failed
                raise AssertionError(f"{name} returned before serving")
            return await check_health(service.socket) == "SERVING"

        await eventually(serving, f"{name} serving", timeout=30)

    async def topology(self) -> None:
        from dracpu.topology import flags, runtime

        argv = ["--socket", str(self.sock("topology")), "--sysfs-root", str(self.sysfs),
                "--watch-interval", "0.2"]  # fmt: skip
        await self.start("topology", runtime, flags.build_parser(), argv)

    async def allocator(self) -> None:
        from dracpu.allocator import flags, runtime

        argv = [
            "--socket", str(self.sock("allocator")),
            "--read-only-socket", str(self.sock("allocator-ro")),
            "--topology-socket", str(self.sock("topology")),
            "--state-dir", str(self.root / "state"), "--cdi-dir", str(self.root / "cdi"),
            "--topology-refresh", "0.5",
        ]  # fmt: skip
        await self.start("allocator", runtime, flags.build_parser(), argv)

    async def dra_plugin(self, kubeconfig: Path) -> None:
        from dracpu.dra_plugin import flags, runtime

        # A pod to write Events on: the nri-plugin's prerequisites are relayed only then.
        self.monkeypatch.setenv("POD_NAME", "dracpu-node-a")
        self.monkeypatch.setenv("POD_NAMESPACE", "kube-system")
        argv = [
            "--socket", str(self.sock("dra-plugin")),
            "--allocator-socket", str(self.sock("allocator")),
            "--nri-plugin-socket", str(self.sock("nri-plugin")),
            "--kubelet-root-dir", str(self.root / "k"), "--cdi-dir", str(self.root / "cdi"),
            "--kubeconfig", str(kubeconfig), "--poll-interval", "0.2",
        ]  # fmt: skip
        await self.start("dra-plugin", runtime, flags.build_parser(), argv)

    async def nri_plugin(self) -> None:
        from dracpu.nri_plugin import flags, runtime

        argv = [
            "--socket", str(self.sock("nri-plugin")),
            "--allocator-socket", str(self.sock("allocator")),
            "--nri-socket", str(self.sock("nri")),
        ]  # fmt: skip
        await self.start("nri-plugin", runtime, flags.build_parser(), argv)

    async def stop_all(self) -> None:
        for service in reversed(self.running):
            service.stop.set()
            assert await asyncio.wait_for(service.task, 30) == 0
        self.running.clear()

    def close(self) -> None:
        for service in self.running:
            service.task.cancel()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.asynccontextmanager
async def services(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Services]:
    running = Services(monkeypatch)
    try:
        yield running
        await running.stop_all()
    finally:
        running.close()


async def loops_of(socket: Path) -> list[info_pb2.Loop]:
    async with channel(socket) as chan:
        reply = await call(
            info_pb2_grpc.InfoStub(chan).GetLoops(info_pb2.GetLoopsRequest(), timeout=5),
            "Info.GetLoops",
        )
    return list(reply.loops)


async def metrics_of(socket: Path) -> str:
    async with channel(socket) as chan:
        reply = await call(
            info_pb2_grpc.InfoStub(chan).GetMetrics(info_pb2.GetMetricsRequest(), timeout=5),
            "Info.GetMetrics",
        )
    return str(reply.text)


async def readyz(running: Services) -> httpx.Response:
    backends = Backends.from_sockets(running.sockets(), timeout=2.0)
    transport = httpx.ASGITransport(app=create_app(backends))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.get("/readyz")
    finally:
        await backends.close()


async def survives(running: Services, fault: LoopFault, lines: LogLines) -> None:
    """Inject the fault into the running service and follow it through: NOT_SERVING with the
    loop named while it waits to restart, SERVING once restarted, counted once, logged once
    with the traceback."""
    socket = running.sock(fault.service)
    assert await check_health(socket) == "SERVING"
    fault.trigger.set()

    async def unready() -> bool:
        return await check_health(socket) == "NOT_SERVING"

    await eventually(unready, f"{fault.service} NOT_SERVING while {fault.loop} restarts")
    (loop,) = [entry for entry in await loops_of(socket) if entry.name == fault.loop]
    assert (loop.state, loop.ready, loop.restarts) == ("restarting", False, 1)
    assert loop.last_error == f"RuntimeError: {INJECTED} in {fault.loop}"
    reply = await readyz(running)
    assert reply.status_code == 503
    body = reply.json()
    assert body["services"][fault.service] == "NOT_SERVING"
    assert [(e["service"], e["loop"], e["state"]) for e in body["loops"]] == [
        (fault.service, fault.loop, "restarting")
    ]
    (line,) = lines.said("loop failed; restarting it")
    assert (line["service"], line["loop"]) == (fault.service, fault.loop)
    assert line["error"] == f"RuntimeError: {INJECTED} in {fault.loop}"
    assert line["stacktrace"].startswith("Traceback (most recent call last)")
    assert f"RuntimeError: {INJECTED} in {fault.loop}" in line["stacktrace"]

    fault.released.set()

    async def serving() -> bool:
        return await check_health(socket) == "SERVING"

    await eventually(serving, f"{fault.service} SERVING once {fault.loop} restarted")
    (loop,) = [entry for entry in await loops_of(socket) if entry.name == fault.loop]
    assert loop.ready and loop.restarts == 1
    assert loop.state in ("running", "done")
    series = f'dra_cpu_loop_restarts_total{{loop="{fault.loop}",service="{fault.service}"}} 1.0'
    assert series in (await metrics_of(socket)).splitlines()
    assert lines.said("loop failed; restarting it") == [line]  # once: the restart held


def no_shutdown_errors(lines: LogLines) -> None:
    for message in ("loop failed while stopping", "loop did not stop when cancelled",
                    "loop supervision failed"):  # fmt: skip
        assert lines.said(message) == [], message
