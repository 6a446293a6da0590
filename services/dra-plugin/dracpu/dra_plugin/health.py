"""Device health for the kubelet (DRAResourceHealth v1alpha1 and v1).

CPUs have no failure signal we could watch, so every published device is Healthy for as long
as the driver runs. What matters is the lease: the kubelet marks a device Unknown when it is
not refreshed within health_check_timeout_seconds, so full snapshots go out every 10 s with a
20 s lease (the reference driver's numbers), and at once when the device set changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from dracpu.core.log import get_logger
from dracpu.core.rpc import rpc_errors
from dracpu.pb.kubelet.dra_health.v1 import api_pb2 as v1
from dracpu.pb.kubelet.dra_health.v1 import api_pb2_grpc as v1_grpc
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2 as v1alpha1
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2_grpc as v1alpha1_grpc

log = get_logger("health")

RESEND_INTERVAL = 10.0
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
MESSAGE = "device initialized"


class DeviceHealth:
    """The current device set and a signal for every change of it."""

    def __init__(self, pool: str, interval: float = RESEND_INTERVAL) -> None:
        self.pool = pool
        self.interval = interval
        self.devices: tuple[str, ...] = ()
        self._changed = asyncio.Event()
        self._stopped = False

    def set_devices(self, names: Sequence[str]) -> None:
        names = tuple(names)
        if names == self.devices:
            return
        self.devices = names
        self._changed.set()
        self._changed = asyncio.Event()

    def stop(self) -> None:
        self._stopped = True
        self._changed.set()

    async def snapshots(self, module: Any) -> AsyncIterator[Any]:
        """Snapshot now, then on every change and at least every interval, until stopped."""
        while not self._stopped:
            changed = self._changed
            yield self.snapshot(module)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=self.interval)

    def snapshot(self, module: Any) -> Any:
        now = int(time.time())
        lease = int(2 * self.interval) or 1
        return module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name=self.pool, device_name=name),
                    health=module.HEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=lease,
                    message=MESSAGE,
                )
                for name in self.devices
            ]
        )


class HealthWatch:
    """NodeWatchResources for one health API version; both versions stream the same snapshots,
    spelled in their own generated messages."""

    def __init__(self, health: DeviceHealth, api: Any, name: str) -> None:
        self.health = health
        self.api = api
        self.name = name

    @rpc_errors
    async def NodeWatchResources(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        log.info(2, "kubelet watches device health", api=self.name)
        async for item in self.health.snapshots(self.api):
            yield item


def add_to_server(server: grpc.aio.Server, health: DeviceHealth) -> None:
    v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
        HealthWatch(health, v1alpha1, "v1alpha1"), server
    )
    v1_grpc.add_DRAResourceHealthServicer_to_server(HealthWatch(health, v1, "v1"), server)
