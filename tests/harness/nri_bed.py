"""Helpers of the nri-plugin test bed: the real allocator as a process (on a topology fixture), the
runtime stand-in (dracpu.dev.runtime_sim) on a temporary NRI socket, and the plugin itself.

Fixture machine `single-4c8t`: one socket, 4 cores x 2 threads, CPUs 0-7 (siblings n, n+4),
one NUMA node, so the grouped device is `cpudevnuma000` with capacity dra.cpu/cpu = 8.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.cpuset import CPUSet
from dracpu.core.memory import HugepagePool, NodeMemory
from dracpu.core.retry import Backoff
from dracpu.core.rpc import call, channel
from dracpu.dev.runtime_sim import RuntimeSim
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.state.pacing import ALLOCATOR_CALL_TIMEOUT
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.topology.discovery import discover
from dracpu.topology.fixtures import write_fixture
from harness import paths
from harness.requests import prepare_request
from harness.services import wait_serving
from harness.waits import eventually

FIXTURE = "single-4c8t"
ONLINE = CPUSet.parse("0-7")
START_DEADLINE = 30.0
BIN = Path(sys.executable).parent
T = TypeVar("T")


# The one NUMA node's memory: published as the device memory-node-0 (publishMemoryDevices).
MEMORY = NodeMemory(0, 8 << 20, (HugepagePool(2048, 64, 64), HugepagePool(1 << 20, 1, 1)))


def write_topology_report(root: Path) -> Path:
    machine = discover(write_fixture(FIXTURE, root / "sys"))
    report = root / "topology.json"
    document = {"cpus": machine.to_report_cpus(), "memory": [MEMORY.to_report()]}
    report.write_text(json.dumps(document))
    return report


def start_process(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Allocator:
    """The real allocator process and a client to prepare/unprepare claims like the kubelet."""

    socket: Path
    root: Path
    process: subprocess.Popen[bytes]

    async def restart(self) -> None:
        """Stop the allocator if it runs and start it again on the same state folder."""
        stop_process(self.process)
        log = self.root / "allocator.log"
        command = allocator_command(self.root, self.socket, self.root / "topology.json")
        self.process = start_process(command, log)
        await wait_serving(
            self.socket, self.process, what="the allocator", log=log, timeout=START_DEADLINE
        )

    async def prepare(
        self,
        count: int,
        uid: str = "",
        memory_placement: str = "",
        memory: Mapping[str, str] | None = None,
        shared_pool: str = "",
    ) -> tuple[str, CPUSet]:
        """Prepare a claim of `count` CPUs; `memory_placement` and `shared_pool` set the
        claim's opaque cpuConfig.memoryPlacement and cpuConfig.sharedPool (unset: the driver's
        default, exclude); `memory` adds a result of memory-node-0 consuming those capacities."""
        uid = uid or str(uuid.uuid4())
        fields = {"memoryPlacement": memory_placement, "sharedPool": shared_pool}
        placement = {key: value for key, value in fields.items() if value} or None
        request = prepare_request(uid, count, cpu_config=placement, memory=memory)
        async with channel(self.socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            reply = await call(stub.Prepare(request, timeout=5), f"prepare {uid}")
        return uid, CPUSet.parse(reply.claim.cpus)

    async def unprepare(self, uid: str) -> None:
        async with channel(self.socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            await call(
                stub.Unprepare(allocator_pb2.UnprepareRequest(claim_uid=uid), timeout=5),
                f"unprepare {uid}",
            )

    async def shared(self) -> CPUSet:
        async with channel(self.socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            pool = await call(
                stub.GetSharedPool(allocator_pb2.GetSharedPoolRequest(), timeout=5), "pool"
            )
        return CPUSet.parse(pool.cpus)

    async def claim(self, uid: str) -> allocator_pb2.Claim:
        async with channel(self.socket) as chan:
            stub = allocator_pb2_grpc.AllocatorStub(chan)
            return await call(
                stub.GetClaim(allocator_pb2.GetClaimRequest(claim_uid=uid), timeout=5), "claim"
            )


def allocator_command(root: Path, socket: Path, report: Path) -> list[str]:
    # No shared-pool floor: these tests drive the plugin's own defences, an empty pool included.
    config = root / "allocator-config.yaml"
    config.write_text("minSharedCPUs: 0\npublishMemoryDevices: true\n")
    return [
        str(BIN / "dracpu-allocator"),
        "--config",
        str(config),
        "--socket",
        str(socket),
        "--topology-file",
        str(report),
        "--state-dir",
        str(root / "state"),
        "--cdi-dir",
        str(root / "cdi"),
        "--topology-refresh",
        "0",
    ]


@dataclass
class Bed:
    """Runtime stand-in + plugin wired to the real allocator, all on temp sockets."""

    runtime: RuntimeSim
    plugin: CPUPlugin
    stub: PluginStub
    allocator: Allocator
    client: AllocatorClient
    tasks: list[asyncio.Task[None]]


def new_plugin(
    allocator: Allocator, nri_socket: Path, mode: UnsolicitedMode
) -> tuple[CPUPlugin, PluginStub, AllocatorClient, list[asyncio.Task[None]]]:
    client = AllocatorClient(str(allocator.socket), timeout=ALLOCATOR_CALL_TIMEOUT)
    plugin = CPUPlugin(client, unsolicited=mode, batch_size=64)
    stub = PluginStub(str(nri_socket), plugin, backoff=Backoff(initial=0.02, maximum=0.2))
    plugin.set_pusher(stub.update_containers)
    plugin.set_resynchronizer(stub.resynchronize)
    tasks = [
        asyncio.create_task(stub.run()),
        asyncio.create_task(plugin.watch_pool(retry_delay=0.05)),
        asyncio.create_task(plugin.push_pool_changes()),
        asyncio.create_task(plugin.detaches.run(retry_delay=0.05)),
        asyncio.create_task(plugin.unanswered.run(retry_delay=0.05, max_delay=0.5)),
        asyncio.create_task(plugin.move_adopted()),
    ]
    return plugin, stub, client, tasks


async def stop_tasks(stub: PluginStub, tasks: list[asyncio.Task[None]]) -> None:
    stub.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def claim_env(*claims: tuple[str, CPUSet]) -> list[str]:
    return ["PATH=/usr/bin", *(f"DRA_CPUSET_{uid}={cpus.format()}" for uid, cpus in claims)]


async def prepare_seen(bed: Bed, count: int) -> tuple[str, CPUSet]:
    """Prepare a claim and wait until the plugin's watched pool reflects it (the pool watch
    is asynchronous; a test that creates shared containers right after wants it settled)."""
    uid, cpus = await bed.allocator.prepare(count)
    pool = await bed.allocator.shared()
    await eventually(lambda: bed.plugin.shared_pool == pool, "plugin to see the pool", timeout=10)
    return uid, cpus


# ---- fixtures shared by the conftests that use this bed (nri_plugin, security) ----------------


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """Unix socket paths must fit in 107 bytes: keep the directory short."""
    with paths.short_tmp("bed-") as path:
        yield path


@pytest.fixture
async def allocator(short_tmp: Path) -> AsyncIterator[Allocator]:
    """The real allocator process on a short temporary socket."""
    report = write_topology_report(short_tmp)
    socket = short_tmp / "alloc.sock"
    log = short_tmp / "allocator.log"
    process = start_process(allocator_command(short_tmp, socket, report), log)
    running = Allocator(socket, short_tmp, process)
    try:
        await wait_serving(socket, process, what="the allocator", log=log, timeout=START_DEADLINE)
        yield running
    finally:
        stop_process(running.process)  # the one started last
