"""Every backend call has a deadline: a service that accepts the call and never answers makes
the api answer 503 quickly, not hang."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from harness.speed import budget

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.core.rpc import start_server
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.topology.v1 import topology_pb2_grpc

# The deadline of every backend call here (health's too), scaled to the machine so a loaded
# host does not miss the health call the test then reads.
TIMEOUT = budget(0.5)


class StuckTopology(topology_pb2_grpc.TopologyServicer):  # type: ignore[misc]
    async def GetInventory(self, request: Any, context: Any) -> Any:
        await asyncio.Event().wait()  # never answers


class StuckAllocator(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    async def ListClaims(self, request: Any, context: Any) -> Any:
        await asyncio.Event().wait()


@pytest.fixture
async def stuck() -> AsyncIterator[dict[str, str]]:
    """topology and allocator servers that are up and healthy but never answer their calls."""
    workdir = Path(tempfile.mkdtemp(prefix="api-stuck-", dir="/tmp"))
    sockets = {name: str(workdir / f"{name}.sock") for name in ("topology", "allocator")}

    def topology(server: grpc.aio.Server) -> None:
        topology_pb2_grpc.add_TopologyServicer_to_server(StuckTopology(), server)

    def allocator(server: grpc.aio.Server) -> None:
        allocator_pb2_grpc.add_AllocatorServicer_to_server(StuckAllocator(), server)

    servers = []
    for name, register in (("topology", topology), ("allocator", allocator)):
        server, health = await start_server(
            sockets[name], register, service=name, api_version=f"dracpu.{name}.v1"
        )
        await health.set(True)
        servers.append(server)
    try:
        yield sockets
    finally:
        for server in servers:
            await server.stop(grace=0)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize(
    ("path", "service"),
    [
        pytest.param("/v1/topology", "topology", id="topology"),
        pytest.param("/v1/claims", "allocator", id="allocator"),
    ],
)
async def test_a_stuck_service_is_unavailable_after_the_deadline(
    stuck: dict[str, str], path: str, service: str
) -> None:
    backends = Backends.from_sockets(stuck, timeout=TIMEOUT)
    transport = httpx.ASGITransport(app=create_app(backends))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        started = time.monotonic()
        reply = await client.get(path)
        elapsed = time.monotonic() - started
        assert reply.status_code == 503
        assert reply.json()["service"] == service
        assert "DEADLINE_EXCEEDED" in reply.json()["detail"] or "Deadline" in reply.json()["detail"]
        assert elapsed < TIMEOUT + budget(1.0)
        # Health still answers: the server itself is up, only the call is stuck.
        health = (await client.get("/v1/health")).json()
        entry = next(s for s in health["services"] if s["service"] == service)
        assert entry["status"] == "SERVING"
        assert entry["last_error"] == reply.json()["detail"].split(" unavailable: ", 1)[1]
    await backends.close()


class GarbledAllocator(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    """Answers, but with cpusets that break the contract."""

    async def ListClaims(self, request: Any, context: Any) -> Any:
        claim = allocator_pb2.Claim(uid="uid-1", namespace="ns", name="c", cpus="3-1")
        return allocator_pb2.ClaimList(claims=[claim], generation=1)

    async def GetSharedPool(self, request: Any, context: Any) -> Any:
        return allocator_pb2.SharedPool(cpus="0-3", reserved="x", online="0-3")


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        pytest.param("/v1/claims", "allocator sent an invalid cpuset for claim uid-1", id="claims"),
        pytest.param(
            "/v1/shared-pool", "allocator sent an invalid cpuset for the reserved CPUs", id="pool"
        ),
    ],
)
async def test_a_garbled_reply_is_a_502_naming_the_service(path: str, detail: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="api-bad-", dir="/tmp"))
    socket = str(workdir / "allocator.sock")

    def register(server: grpc.aio.Server) -> None:
        allocator_pb2_grpc.add_AllocatorServicer_to_server(GarbledAllocator(), server)

    server, health = await start_server(
        socket, register, service="allocator", api_version="dracpu.allocator.v1"
    )
    await health.set(True)
    backends = Backends.from_sockets({"allocator": socket}, timeout=TIMEOUT)
    try:
        transport = httpx.ASGITransport(app=create_app(backends))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            reply = await client.get(path)
        assert reply.status_code == 502
        assert reply.headers["content-type"] == "application/problem+json"
        assert reply.json()["detail"].startswith(detail)
    finally:
        await backends.close()
        await server.stop(grace=0)
        shutil.rmtree(workdir, ignore_errors=True)
