"""Keeps the node's ResourceSlices equal to the allocator's devices.

Polls the allocator's device list; when it changes (or a periodic resync is due, which also
repairs slices someone else changed or deleted) it lists the pool's slices and applies the
plan from `dracpu.dra_plugin.slices`. Failures and write conflicts are retried with
exponential backoff. Slices are left in place at shutdown: the kubelet wipes them once the
driver has been gone for 30 s (PROTOCOLS.md §1.5).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.dra_plugin.allocator_client import AllocatorClient
from dracpu.dra_plugin.cluster import Cluster
from dracpu.dra_plugin.slices import Owner, chunk_devices, plan
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger("slices")

POLL_INTERVAL = 2.0
RESYNC_INTERVAL = 30.0
MAX_BACKOFF = 60.0


@dataclass
class PublishState:
    published_generation: int = 0  # allocator device generation of the last good publish
    slice_count: int = 0
    pool_generation: int = 0
    last_error: str = ""
    last_published_at: float = 0.0
    syncs: int = 0


class SlicePublisher:
    def __init__(
        self,
        *,
        driver: str,
        node: str,
        cluster: Cluster,
        allocator: AllocatorClient,
        on_devices: Callable[[Sequence[str]], None] = lambda names: None,
        poll_interval: float = POLL_INTERVAL,
        resync_interval: float = RESYNC_INTERVAL,
    ) -> None:
        self.driver = driver
        self.node = node
        self.cluster = cluster
        self.allocator = allocator
        self.on_devices = on_devices
        self.poll_interval = poll_interval
        self.resync_interval = resync_interval
        self.state = PublishState()
        self._owner: Owner | None = None
        self._fingerprint = b""
        self._next_resync = 0.0

    async def run(self) -> None:
        backoff = 1.0
        while True:
            try:
                devices = await self.allocator.list_devices()
                fingerprint = devices.SerializeToString(deterministic=True)
                if fingerprint != self._fingerprint or time.monotonic() >= self._next_resync:
                    await self.sync(devices)
                    self._fingerprint = fingerprint
                    self._next_resync = time.monotonic() + self.resync_interval
                backoff = 1.0
                await asyncio.sleep(self.poll_interval)
            except DracpuError as exc:
                self.state.last_error = str(exc)
                log.warning(
                    "publishing ResourceSlices failed; retrying", error=str(exc), retry_in=backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _owner_reference(self) -> Owner | None:
        if self._owner is None:
            uid = await self.cluster.node_uid(self.node)
            if uid:
                self._owner = Owner(self.node, uid)
            else:
                log.info(2, "no Node object found; slices carry no owner reference", node=self.node)
        return self._owner

    async def sync(self, devices: allocator_pb2.DeviceList) -> None:
        owner = await self._owner_reference()
        chunks = chunk_devices(devices)
        existing = await self.cluster.list_slices(self.driver, self.node)
        todo = plan(
            existing, chunks, driver=self.driver, node=self.node, pool=self.node, owner=owner
        )
        for obsolete in todo.delete:
            meta = obsolete.get("metadata") or {}
            await self.cluster.delete_slice(
                str(meta.get("name")), str(meta.get("uid")), str(meta.get("resourceVersion"))
            )
            log.info(4, "deleted ResourceSlice", name=meta.get("name"))
        for updated in todo.update:
            await self.cluster.update_slice(updated)
            log.info(4, "updated ResourceSlice", name=(updated.get("metadata") or {}).get("name"))
        for created in todo.create:
            stored = await self.cluster.create_slice(created)
            log.info(4, "created ResourceSlice", name=(stored.get("metadata") or {}).get("name"))
        state = self.state
        if not todo.empty or state.published_generation != devices.generation:
            log.info(
                2,
                "ResourceSlices published",
                pool=self.node,
                devices=len(devices.devices),
                slices=len(chunks),
                pool_generation=todo.generation,
                device_generation=devices.generation,
                deleted=len(todo.delete),
                updated=len(todo.update),
                created=len(todo.create),
            )
        state.published_generation = devices.generation
        state.slice_count = len(chunks)
        state.pool_generation = todo.generation
        state.last_error = ""
        state.last_published_at = time.time()
        state.syncs += 1
        self.on_devices([d.name for d in devices.devices])
