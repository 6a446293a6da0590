"""The topology service's inventory: the current discovery result, rediscovered on request,
whenever the kernel announces a CPU, NUMA node or memory change (`uevents`), and at a slow
safety re-read; every change wakes the WatchInventory streams."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dracpu.core.changes import Changes
from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.pb.topology.v1 import topology_pb2
from dracpu.topology.discovery import discover
from dracpu.topology.overlay import SysfsOverlay

log = get_logger(__name__)


class Inventory:
    """The current discovery result; replaced as a whole, so readers never see a mix."""

    def __init__(self, root: Path, machine: Machine, overlay: SysfsOverlay | None = None) -> None:
        self.root = root
        self.overlay = overlay
        self._lock = asyncio.Lock()
        self._message = self._encode(machine)
        self.changes = Changes()
        # Why the last rediscovery failed ("" when it did not); `message` is then the last
        # inventory read.
        self.unreadable = ""

    @staticmethod
    def _encode(machine: Machine) -> topology_pb2.Inventory:
        message = machine.to_proto()
        message.discovered_at_unix = int(time.time())
        return message

    @property
    def message(self) -> topology_pb2.Inventory:
        return self._message

    def watched(self) -> topology_pb2.Inventory:
        """What WatchInventory sends: the inventory, and why sysfs is unreadable if it is."""
        if not self.unreadable:
            return self._message
        message = topology_pb2.Inventory()
        message.CopyFrom(self._message)
        message.unreadable = self.unreadable
        return message

    @staticmethod
    def _content(message: topology_pb2.Inventory) -> bytes:
        """What a watcher is told about: everything but the time of discovery."""
        copy = topology_pb2.Inventory()
        copy.CopyFrom(message)
        copy.discovered_at_unix = 0
        return copy.SerializeToString(deterministic=True)

    async def rediscover(self) -> topology_pb2.Inventory:
        async with self._lock:
            previous = self._message
            try:
                machine = await asyncio.to_thread(discover, self.root, self.overlay)
            except DracpuError as exc:
                if self.unreadable != str(exc):
                    self.unreadable = str(exc)
                    self.changes.notify()
                raise
            if self.unreadable:
                self.unreadable = ""
                self.changes.notify()
            self._message = self._encode(machine)
            if machine.fingerprint != previous.fingerprint:
                log.info(0, "inventory changed", previous=previous.fingerprint,
                         fingerprint=machine.fingerprint)  # fmt: skip
            if self._content(self._message) != self._content(previous):
                self.changes.notify()
            return self._message

    async def watch(self, kernel: asyncio.Event | None, interval: float) -> None:
        """Rediscover whenever the kernel announces a change (`kernel`, set by
        `uevents.KernelEvents`; None where uevents cannot be read) and every `interval` seconds
        (0: never) as a safety net for what no uevent says. A failed read keeps the last
        inventory (callers of Rediscover see the error) and is tried again at the next cue."""
        if kernel is None and not interval:
            return
        while True:
            if kernel is None:
                await asyncio.sleep(interval)
            else:
                try:
                    async with asyncio.timeout(interval or None):
                        await kernel.wait()
                except TimeoutError:
                    pass
                kernel.clear()
            try:
                await self.rediscover()
            except DracpuError as exc:
                log.warning("topology refresh failed; keeping the last inventory", error=str(exc))
