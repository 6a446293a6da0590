"""The allocator's device list as it changes, for the slice publisher and the device health.

Followed on the allocator's WatchDevices stream, so nothing is asked while nothing changes. An
allocator of an older release answers UNIMPLEMENTED: its list is then asked every
`poll_interval` seconds, until the allocator restarts (it may come back a newer release, so the
watch is tried again). A stream that breaks is opened again with the one backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from dracpu.core.changes import Changes
from dracpu.core.errors import DracpuError, UnimplementedError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.dra_plugin.common.intervals import LIST_DEVICES_DEADLINE, POLL_INTERVAL
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger(__name__)

MAX_BACKOFF = 5.0


class DeviceSource(Protocol):
    """What the feed asks of the allocator (`AllocatorClient`; tests stand in for it)."""

    async def list_devices(self, deadline: float | None = None) -> allocator_pb2.DeviceList: ...

    def watch_devices(self) -> AsyncIterator[allocator_pb2.DeviceList]: ...


class DeviceFeed:
    """`latest` is the allocator's last device list (None until it answered); `changes` wakes
    every consumer when a new one arrives."""

    def __init__(self, allocator: DeviceSource, poll_interval: float = POLL_INTERVAL):
        self.allocator = allocator
        self.poll_interval = poll_interval
        self.latest: allocator_pb2.DeviceList | None = None
        self.changes = Changes()
        self.mode = "watch"  # "poll" against an allocator without WatchDevices
        self.last_error = ""

    def _note(self, devices: allocator_pb2.DeviceList) -> None:
        self.last_error = ""
        if self.latest is not None and self.latest == devices:
            return
        self.latest = devices
        self.changes.notify()

    async def run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=MAX_BACKOFF)
        while True:
            try:
                if self.mode == "watch":
                    async for devices in self.allocator.watch_devices():
                        backoff.reset()
                        self._note(devices)
                    self.last_error = "the allocator ended the device watch"
                else:
                    self._note(await self.allocator.list_devices(LIST_DEVICES_DEADLINE))
                    backoff.reset()
                    await asyncio.sleep(self.poll_interval)
                    continue
            except UnimplementedError:
                log.info(
                    0,
                    "the allocator has no device watch (an older release); asking for its "
                    "devices periodically instead",
                    interval_s=self.poll_interval,
                )
                self.mode = "poll"
                continue
            except DracpuError as exc:
                self.last_error = str(exc)
                # A restarted allocator may be a newer release: try its watch again.
                self.mode = "watch"
            delay = backoff.next_delay()
            log.info(2, "device watch ended; opening it again", error=self.last_error,
                     retry_in=delay)  # fmt: skip
            await asyncio.sleep(delay)
