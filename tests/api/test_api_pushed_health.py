"""The api follows each service's health as the service pushes it (gRPC Health.Watch), so the
kubelet's readiness probe calls no service while the watches are open; a service gone falls
back to asking, and says UNAVAILABLE."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import paths
from harness.waits import eventually

from dracpu.api.backends import TopologyBackend
from dracpu.api.routers.health import _health
from dracpu.core import rpc

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def socket() -> Iterator[Path]:
    with paths.short_tmp("apih") as path:
        yield path / "t.sock"


async def test_readiness_follows_the_pushed_health_without_asking(socket: Path) -> None:
    server, health = await rpc.start_server(
        socket, lambda server: None, service="test", api_version="test"
    )
    backend = TopologyBackend("topology", str(socket), timeout=1.0)
    follower = asyncio.create_task(backend.follow_health())
    stopped = False
    try:
        await eventually(lambda: backend.pushed_health == "NOT_SERVING", "the first status")
        await health.set(True)
        await eventually(lambda: backend.pushed_health == "SERVING", "SERVING pushed")

        async def no_call() -> str:
            raise AssertionError("the service was asked although its health was pushed")

        backend.health = no_call  # type: ignore[method-assign]
        assert await _health(backend) == "SERVING"
        del backend.health  # the class's own again

        await rpc.stop_server(server, health, socket)
        stopped = True
        await eventually(lambda: backend.pushed_health is None, "the watch's end noticed")
        assert await _health(backend) == "UNAVAILABLE"
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await backend.close()
        if not stopped:
            await rpc.stop_server(server, health, socket)
