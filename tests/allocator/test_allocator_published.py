"""The allocator process never publishes a CPU it cannot give: a restart in another device mode
keeps the CPUs of claims prepared before out of ListDevices until they are released, and the
shared pool keeps its floor however many claims the published devices allow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from allocator_process import spawn, stop
from harness.requests import prepare_request
from harness.services import wait_serving

from dracpu.core.cpuset import CPUSet
from dracpu.core.machine import Machine
from dracpu.core.rpc import channel
from dracpu.pb.allocator.v1 import allocator_pb2 as pb
from dracpu.pb.allocator.v1 import allocator_pb2_grpc

Machines = Callable[[str], Machine]


class Allocator:
    """One allocator process over a state and CDI directory that outlive it."""

    def __init__(self, base: Path, topology: Path, config: dict[str, Any]) -> None:
        self.base = base
        (base / "config.yaml").write_text(json.dumps(config))
        self.process = spawn(
            "dracpu.allocator.main",
            [
                "--socket",
                str(base / "a.sock"),
                "--state-dir",
                str(base / "state"),
                "--cdi-dir",
                str(base / "cdi"),
                "--topology-file",
                str(topology),
                "--config",
                str(base / "config.yaml"),
            ],
            base / "allocator.log",
        )
        self.channel = channel(base / "a.sock")
        self.stub = allocator_pb2_grpc.AllocatorStub(self.channel)

    async def __aenter__(self) -> Allocator:
        await wait_serving(
            self.base / "a.sock", self.process, what="the allocator", timeout=20, interval=0.02
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.channel.close()
        assert stop(self.process) == 0

    async def offered(self) -> tuple[dict[str, str], int]:
        listed = await self.stub.ListDevices(pb.ListDevicesRequest())
        return {d.name: d.cpus for d in listed.devices}, listed.generation


@pytest.fixture
def topology(short_tmp: Path, machines: Machines) -> Path:
    path = short_tmp / "topo.json"
    path.write_text(json.dumps({"cpus": machines("single-4c8t").to_report_cpus()}))
    return path


async def test_mode_change_with_a_claim_held(short_tmp: Path, topology: Path) -> None:
    async with Allocator(short_tmp, topology, {}) as grouped_node:
        devices, _ = await grouped_node.offered()
        assert devices == {"cpudevnuma000": "1-7"}  # CPU 0 is the shared pool's floor
        held = (
            await grouped_node.stub.Prepare(prepare_request("g", 2, namespace="ns", name="g"))
        ).claim.cpus

    async with Allocator(short_tmp, topology, {"cpuDeviceMode": "individual"}) as node:
        devices, generation = await node.offered()
        cpus = {CPUSet.parse(c) for c in devices.values()}
        assert all(c.isdisjoint(CPUSet.parse(held)) for c in cpus), (held, devices)
        assert all(c.isdisjoint(CPUSet.parse("0")) for c in cpus), devices
        assert len(devices) == 8 - 1 - len(CPUSet.parse(held))

        # What the scheduler might still pick from an older slice is refused, not doubled.
        held_device = next(
            f"cpudev{n:03d}" for n, cpu in enumerate([0, 4, 1, 5, 2, 6, 3, 7]) if cpu == 1
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await node.stub.Prepare(
                prepare_request("new", None, device=held_device, namespace="ns", name="new")
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "overlapping device assignment" in (refused.value.details() or "")
        assert "held by claim g" in (refused.value.details() or "")

        await node.stub.Unprepare(pb.UnprepareRequest(claim_uid="g"))
        again, moved = await node.offered()
        assert moved > generation
        assert again[held_device] == "1"
        assert len(again) == 7


async def test_claims_never_empty_the_shared_pool(short_tmp: Path, topology: Path) -> None:
    async with Allocator(short_tmp, topology, {"cpuDeviceMode": "individual"}) as node:
        devices, _ = await node.offered()
        assert "cpudev000" not in devices and len(devices) == 7
        for name in sorted(devices):
            await node.stub.Prepare(
                prepare_request(f"c-{name}", None, device=name, namespace="ns", name=f"c-{name}")
            )
        pool = await node.stub.GetSharedPool(pb.GetSharedPoolRequest())
        assert pool.cpus == "0"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await node.stub.Prepare(
                prepare_request(
                    "one-more", None, device="cpudev000", namespace="ns", name="one-more"
                )
            )
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "kept for the shared pool" in (refused.value.details() or "")
        # Claimed devices stay published: the scheduler counts them as allocated itself.
        assert (await node.offered())[0] == devices
    log = (short_tmp / "allocator.log").read_text()
    assert "claim refused" in log and "one-more" in log
