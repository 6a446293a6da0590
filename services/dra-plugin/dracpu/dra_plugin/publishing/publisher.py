"""Keeps the node's ResourceSlices equal to the allocator's devices.

Follows the allocator's device list (`common.device_feed`: pushed by the allocator, nothing
asked while nothing changes) and applies the plan from `publishing.slices` whenever the devices
or the slices change. Against the API server
the slices are known from a list + watch (`publishing.slice_watch`): a change by
someone else wakes the publisher at once, and the periodic resync only re-plans against that
cache and re-reads the Node, so a quiet node costs the API server one watch request every few
minutes. A cluster given without a watch (the unit tests' in-memory ones) is listed at every
resync instead.

The Node's UID is the slices' owner (they are garbage-collected with it). It is read again
whenever someone else deleted our slices (the garbage collector does when the Node was
recreated), at each resync, and every OWNER_RETRY seconds while there is no Node; a new UID is
written into every slice. Fields the API server lacks are left out once it shows it lacks them
(`cluster.api_features`); nothing is published while the API server lacks what the devices
need (`cluster.api_prerequisites`), nor while the kubelet's own CPU or Memory Manager places
containers (`kubelet.resource_managers`, read again every poll interval: slices already written are
then deleted, and published again once the kubelet runs neither). Devices the node cannot give
carry the driver's taints (`publishing.taints`), unless the server drops taints. Failures and
write conflicts are retried with exponential backoff. Slices are left in place at shutdown: the
kubelet wipes them once the driver has been gone for 30 s (PROTOCOLS.md §1.5).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.errors import DracpuError, InvalidInputError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.prerequisites import Prerequisite
from dracpu.core.retry import Backoff
from dracpu.dra_plugin.cluster.api_features import DEVICE_TAINTS, FeatureSupport, MissingFeature
from dracpu.dra_plugin.cluster.api_prerequisites import APIPrerequisites
from dracpu.dra_plugin.cluster.objects import Cluster, Object
from dracpu.dra_plugin.common.device_feed import DeviceFeed, DeviceSource
from dracpu.dra_plugin.common.intervals import (
    POLL_INTERVAL,
    RESYNC_INTERVAL,
    WATCH_RESYNC_INTERVAL,
)
from dracpu.dra_plugin.common.waits import wait_any, wait_set
from dracpu.dra_plugin.kubelet.resource_managers import ResourceManagers
from dracpu.dra_plugin.publishing.gate import PublishGate
from dracpu.dra_plugin.publishing.owner import NodeOwner
from dracpu.dra_plugin.publishing.slice_watch import SliceWatch
from dracpu.dra_plugin.publishing.slices import Owner, Plan, chunk_documents, device_json, plan
from dracpu.dra_plugin.publishing.taints import tainted
from dracpu.pb.allocator.v1 import allocator_pb2

log = get_logger(__name__)

OWNER_RETRY = 30.0
MAX_BACKOFF = 60.0
# While the API server lacks what the devices need, look again this often.
PREREQUISITES_RECHECK = 2.0


@dataclass
class PublishState:
    published_generation: int = 0  # allocator device generation of the last good publish
    slice_count: int = 0
    pool_generation: int = 0
    last_error: str = ""
    last_published_at: float = 0.0
    syncs: int = 0
    writes: int = 0
    owner_uid: str = ""
    missing_features: list[MissingFeature] = field(default_factory=list)


class SlicePublisher:
    def __init__(
        self,
        *,
        driver: str,
        node: str,
        cluster: Cluster,
        allocator: AllocatorClient | DeviceSource | None = None,
        feed: DeviceFeed | None = None,
        on_devices: Callable[[Sequence[str]], None] = lambda names: None,
        poll_interval: float = POLL_INTERVAL,
        resync_interval: float | None = None,
        watch: SliceWatch | None = None,
        features: FeatureSupport | None = None,
        owner_retry: float = OWNER_RETRY,
        prerequisites: APIPrerequisites | None = None,
        resource_managers: ResourceManagers | None = None,
    ) -> None:
        self.driver = driver
        self.node = node
        self.cluster = cluster
        self.on_devices = on_devices
        self._owns_feed = feed is None  # then the publisher follows the allocator itself
        self.feed = feed or _feed_of(allocator, poll_interval)
        self.kubelet_recheck = poll_interval  # the kubelet's checkpoints are read this often
        default_resync = WATCH_RESYNC_INTERVAL if watch is not None else RESYNC_INTERVAL
        self.resync_interval = resync_interval or default_resync
        self.watch = watch
        self.features = features or FeatureSupport()
        self.prerequisites = prerequisites
        self.resource_managers = resource_managers
        self.gate = PublishGate(self.features, prerequisites, resource_managers)
        self.state = PublishState()
        self.owner = NodeOwner(cluster, node, owner_retry)
        self._fingerprint = b""
        self._next_resync = 0.0
        self._again = False  # a feature turned out missing, or a sync failed: sync once more
        # Device name -> the device as last published: the taints' timeAdded, and the devices
        # withdrawn for offline CPUs, come from it (from the slices found, after a restart).
        self._published: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()  # the resync's timing changed

    def resync_every(self, seconds: float) -> None:
        """Resync every `seconds` from now on, the first at once."""
        self.resync_interval = seconds
        self._next_resync = 0.0
        self._wake.set()

    @property
    def mode(self) -> str:
        return "watch" if self.watch is not None else "resync"

    async def run(self) -> None:
        """Publish until cancelled, with the slice watch (and the device feed, when the
        publisher owns it) alongside: an unexpected error of one ends all (the supervisor
        starts them again)."""
        async with asyncio.TaskGroup() as tasks:
            if self._owns_feed:
                tasks.create_task(self.feed.run(), name="device-feed")
            if self.watch is not None:
                tasks.create_task(self.watch.run(), name="slice-watch")
            tasks.create_task(self._publish_loop(), name="slice-publish")

    async def _devices(self) -> tuple[allocator_pb2.DeviceList, asyncio.Event]:
        """The allocator's latest devices (waiting for the first), and the event set when the
        next arrive."""
        while True:
            changed = self.feed.changes.next()
            if self.feed.latest is not None:
                return self.feed.latest, changed
            await wait_set(changed, 1.0)
            if self.feed.latest is None and self.feed.last_error:
                self.state.last_error = self.feed.last_error

    async def _publish_loop(self) -> None:
        backoff = Backoff(initial=1.0, maximum=MAX_BACKOFF)
        while True:
            devices, next_devices = await self._devices()
            try:
                if not self._kubelet_allows():
                    await self._withdraw()
                    await wait_set(next_devices, self.kubelet_recheck)
                    continue
                fingerprint = devices.SerializeToString(deterministic=True)
                now = time.monotonic()
                resync = now >= self._next_resync
                if (
                    fingerprint != self._fingerprint
                    or resync
                    or self._again
                    or self._slices_changed()
                    or self.owner.missing_due(now)
                ):
                    if not await self._prerequisites_met(devices):
                        await wait_set(next_devices, PREREQUISITES_RECHECK)
                        continue
                    await self.sync(devices, reread_owner=resync)
                    self._fingerprint = fingerprint
                    if resync:
                        self._next_resync = time.monotonic() + self.resync_interval
                backoff.reset()
                await self._pause(next_devices)
            except DracpuError as exc:
                self.state.last_error = str(exc)
                self._again = True  # whatever woke us was consumed: try again regardless
                delay = backoff.next_delay()
                log.warning(
                    "publishing ResourceSlices failed; retrying", error=str(exc), retry_in=delay
                )
                await asyncio.sleep(delay)

    async def _prerequisites_met(self, devices: allocator_pb2.DeviceList) -> bool:
        refusal = await self.gate.api_refusal(devices)
        self._note_features()
        if refusal is not None:
            self.state.last_error = refusal
        return refusal is None

    def _kubelet_allows(self) -> bool:
        """When the kubelet does not, the next allowed round publishes what changed meanwhile."""
        refusal = self.gate.kubelet_refusal()
        if refusal is not None:
            self.state.last_error = refusal
            self._again = True
        return refusal is None

    async def _withdraw(self) -> None:
        """Delete the node's slices (claims already prepared keep their CPUs)."""
        existing = await self._existing()
        if not existing:
            return
        await self._apply(Plan(generation=0, delete=list(existing)))
        log.info(2, "ResourceSlices withdrawn while the kubelet places containers itself",
                 pool=self.node, deleted=len(existing))  # fmt: skip
        self.state.slice_count = 0
        self._fingerprint = b""

    def _slices_changed(self) -> bool:
        return self.watch is not None and self.watch.changed.is_set()

    async def _pause(self, next_devices: asyncio.Event) -> None:
        """Wait for new devices, a change of the slices by someone else, or the next periodic
        duty (the resync; the Node's owner reference while it is missing)."""
        if self._again:
            return
        now = time.monotonic()
        due = self._next_resync
        look = self.owner.next_look()
        if look is not None:
            due = min(due, look)
        if self.resource_managers is not None:
            due = min(due, now + self.kubelet_recheck)  # the kubelet's checkpoints, read again
        events = [next_devices, self._wake]
        if self.watch is not None:
            events.append(self.watch.changed)
        await wait_any(events, max(0.0, due - now))
        self._wake.clear()

    async def _owner_reference(self, reread: bool) -> Owner | None:
        watch = self.watch
        if watch is not None and watch.deleted_by_others:
            reread = True  # the garbage collector deletes our slices when the Node is replaced
            watch.deleted_by_others = False
        owner = await self.owner.reference(reread, first=self.state.syncs == 0)
        self.state.owner_uid = owner.uid if owner else ""
        return owner

    async def _existing(self) -> list[Object]:
        return await existing_slices(self.cluster, self.watch, self.driver, self.node)

    async def sync(self, devices: allocator_pb2.DeviceList, *, reread_owner: bool = False) -> None:
        if self.watch is not None:
            self.watch.changed.clear()
        self._again = False
        owner = await self._owner_reference(reread_owner)
        if not self._published:
            found = [d for s in await self._existing() for d in _devices(s)]
            self._published = {str(d.get("name")): d for d in found}
        while True:
            documents = tainted(
                [device_json(d) for d in devices.devices],
                devices,
                self._published,
                time.time(),
                keep_withdrawn=self.features.supports(DEVICE_TAINTS),
            )
            sent = self.features.devices(documents)
            chunks = chunk_documents(sent, self.features.advanced(sent))
            todo = plan(
                await self._existing(),
                chunks,
                driver=self.driver,
                node=self.node,
                pool=self.node,
                owner=owner,
            )
            try:
                await self._apply(todo)
            except (InvalidInputError, UnavailableError) as exc:
                # 422 or 403 naming a feature this server lacks: once more without it.
                if self.features.refused(str(exc), sent) is None:
                    raise
                self._note_features()
                continue
            break
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
        self._published = {str(d.get("name")): d for d in sent}
        state.published_generation = devices.generation
        state.slice_count = len(chunks)
        state.pool_generation = todo.generation
        state.last_error = ""
        state.last_published_at = time.time()
        state.syncs += 1
        self.on_devices([d.name for d in devices.devices])

    async def _apply(self, todo: Plan) -> None:
        await apply_plan(self.cluster, self.watch, todo, deleted=self._deleted, stored=self._stored)

    def _deleted(self) -> None:
        self.state.writes += 1

    def _stored(self, sent: Object, stored: Object) -> None:
        self.state.writes += 1
        if self.watch is not None:
            self.watch.remember(stored)
        if self.features.dropped(_devices(sent), _devices(stored)):
            # Compare against what the server keeps from now on, or every resync rewrites it.
            self._note_features()
            self._again = True

    def _note_features(self) -> None:
        self.state.missing_features = list(self.features.missing.values())
        self.gate.taints_seen_dropped()


async def existing_slices(
    cluster: Cluster, watch: SliceWatch | None, driver: str, node: str
) -> list[Object]:
    """The node's slices: the watch's cache once it has listed (waiting a moment for the first
    list), or a list where there is no watch."""
    if watch is None:
        return await cluster.list_slices(driver, node)
    if not watch.synced.is_set():
        await wait_set(watch.synced, 5)
    if not watch.synced.is_set():
        reason = watch.stats.last_error or "no answer yet"
        raise UnavailableError(f"ResourceSlices not listed yet: {reason}")
    return watch.snapshot()


async def apply_plan(
    cluster: Cluster,
    watch: SliceWatch | None,
    todo: Plan,
    *,
    deleted: Callable[[], None],
    stored: Callable[[Object, Object], None],
) -> None:
    """Write a plan: its deletes (each counted by `deleted`), then its updates and creates
    (each handed to `stored` with the server's copy)."""
    for obsolete in todo.delete:
        meta = obsolete.get("metadata") or {}
        name = str(meta.get("name"))
        await cluster.delete_slice(name, str(meta.get("uid")), str(meta.get("resourceVersion")))
        deleted()
        if watch is not None:
            watch.forget(name)
        log.info(4, "deleted ResourceSlice", name=name)
    for updated in todo.update:
        stored(updated, await cluster.update_slice(updated))
        log.info(4, "updated ResourceSlice", name=(updated.get("metadata") or {}).get("name"))
    for created in todo.create:
        copy = await cluster.create_slice(created)
        stored(created, copy)
        log.info(4, "created ResourceSlice", name=(copy.get("metadata") or {}).get("name"))


def _feed_of(allocator: AllocatorClient | DeviceSource | None, poll_interval: float) -> DeviceFeed:
    if allocator is None:
        raise ValueError("a slice publisher needs an allocator or a device feed")
    return DeviceFeed(allocator, poll_interval)


def _devices(obj: Object) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    return list(spec.get("devices") or []) if isinstance(spec, dict) else []


def verdicts(publisher: SlicePublisher) -> list[Prerequisite]:
    """Every prerequisite judged before publishing: the API server's and the kubelet's."""
    found: dict[str, Prerequisite] = {}
    for source in (publisher.prerequisites, publisher.resource_managers):
        if source is not None:
            found.update((p.name, p) for p in source.prerequisites.all())
    return [found[name] for name in sorted(found)]
