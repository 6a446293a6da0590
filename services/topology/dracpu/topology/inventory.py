"""The topology service's inventory: the current discovery result, rediscovered on request and
whenever the kernel's online, isolated or nohz_full list changes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.pb.topology.v1 import topology_pb2
from dracpu.topology.discovery import CPU_DIR, discover
from dracpu.topology.overlay import SysfsOverlay
from dracpu.topology.sysfs import SysfsReader

# The files whose change means the inventory may have changed.
WATCHED = ("online", "isolated", "nohz_full")

log = get_logger(__name__)


class Inventory:
    """The current discovery result; replaced as a whole, so readers never see a mix."""

    def __init__(self, root: Path, machine: Machine, overlay: SysfsOverlay | None = None) -> None:
        self.root = root
        self.overlay = overlay
        self._lock = asyncio.Lock()
        self._message = self._encode(machine)

    @staticmethod
    def _encode(machine: Machine) -> topology_pb2.Inventory:
        message = machine.to_proto()
        message.discovered_at_unix = int(time.time())
        return message

    @property
    def message(self) -> topology_pb2.Inventory:
        return self._message

    async def rediscover(self) -> topology_pb2.Inventory:
        async with self._lock:
            previous = self._message.fingerprint
            machine = await asyncio.to_thread(discover, self.root, self.overlay)
            self._message = self._encode(machine)
            if machine.fingerprint != previous:
                log.info(0, "inventory changed", previous=previous, fingerprint=machine.fingerprint)
            return self._message

    def _watched(self, reader: SysfsReader) -> tuple[str, ...]:
        return tuple(str(reader.text(f"{CPU_DIR}/{name}")) for name in WATCHED)

    async def watch(self, interval: float) -> None:
        """Rediscover whenever a watched list changes; a failed read keeps the last inventory
        (callers of Rediscover see the error) and is retried at the next change."""
        reader = SysfsReader(self.root, self.overlay)
        last = self._watched(reader)
        while True:
            await asyncio.sleep(interval)
            seen = self._watched(reader)
            if seen == last:
                continue
            last = seen
            try:
                await self.rediscover()
            except DracpuError as exc:
                log.warning("topology refresh failed; keeping the last inventory", error=str(exc))
