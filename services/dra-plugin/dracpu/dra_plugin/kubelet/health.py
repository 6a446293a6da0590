"""Device health for the kubelet: what DRAResourceHealth (v1alpha1 and v1, in
dracpu.dra_plugin.servicer) streams.

The allocator judges health from the topology (its DeviceList `health` map): Unhealthy while
CPUs of a device are offline or gone, Unknown while the topology cannot be read, Healthy
otherwise. The plugin follows that map (`common.device_feed`) and streams it; against an
allocator that predates the map, every published device is Healthy. The kubelet marks a device
Unknown when it is not refreshed within health_check_timeout_seconds, so full snapshots go out
every 10 s with a 20 s lease (the reference driver's numbers), and at once when anything
changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from dracpu.core.log import get_logger
from dracpu.dra_plugin.common.device_feed import DeviceFeed
from dracpu.dra_plugin.common.intervals import RESEND_INTERVAL
from dracpu.dra_plugin.common.waits import wait_set

log = get_logger(__name__)

MESSAGE = "device initialized"
# The allocator's status words -> the enum value names of both API versions.
_STATUS = {"Healthy": "HEALTHY", "Unhealthy": "UNHEALTHY", "Unknown": "UNKNOWN"}


class DeviceHealth:
    """Device name -> (status, message), and a signal for every change of it."""

    def __init__(self, pool: str, interval: float = RESEND_INTERVAL) -> None:
        self.pool = pool
        self.interval = interval
        self.devices: tuple[str, ...] = ()
        # From the allocator's health map; None until an allocator that has one answered.
        self.reported: dict[str, tuple[str, str]] | None = None
        self._changed = asyncio.Event()
        self._stopped = False

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def set_devices(self, names: Sequence[str]) -> None:
        """The published device names (every one Healthy unless the allocator says more)."""
        names = tuple(names)
        if names == self.devices:
            return
        self.devices = names
        self._signal()

    def set_reported(self, health: dict[str, tuple[str, str]] | None) -> None:
        if health == self.reported:
            return
        before = self.reported or {}
        for name, (status, message) in sorted((health or {}).items()):
            if before.get(name, ("HEALTHY", ""))[0] != status:
                log.info(2, "device health", device=name, health=status, reason=message)
        self.reported = health
        self._signal()

    def current(self) -> dict[str, tuple[str, str]]:
        """Device name -> (HEALTHY | UNHEALTHY | UNKNOWN, message)."""
        if self.reported is not None:
            return dict(self.reported)
        return {name: ("HEALTHY", MESSAGE) for name in self.devices}

    async def follow(self, feed: DeviceFeed) -> None:
        """Take the health of every device list the allocator publishes; an unreachable
        allocator leaves the last answer in place (the topology, not the allocator, decides a
        device's health)."""
        while not self._stopped:
            changed = feed.changes.next()
            reply = feed.latest
            if reply is not None and reply.health:
                self.set_reported(
                    {
                        name: (_STATUS.get(entry.status, "UNKNOWN"), entry.message)
                        for name, entry in reply.health.items()
                    }
                )
            elif reply is not None:
                self.set_reported(None)
            await changed.wait()

    def stop(self) -> None:
        self._stopped = True
        self._changed.set()

    async def snapshots(self, module: Any) -> AsyncIterator[Any]:
        """Snapshot now, then on every change and at least every interval, until stopped."""
        while not self._stopped:
            changed = self._changed
            yield self.snapshot(module)
            await wait_set(changed, self.interval)

    def snapshot(self, module: Any) -> Any:
        now = int(time.time())
        lease = int(2 * self.interval) or 1
        return module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name=self.pool, device_name=name),
                    health=getattr(module, status),
                    last_updated_time=now,
                    health_check_timeout_seconds=lease,
                    message=message,
                )
                for name, (status, message) in sorted(self.current().items())
            ]
        )
