"""The allocator's live state, as its callers (the servicers, the run time) see it: one
serialized writer around the pure claim rules (`claims`), making every change durable (CDI
spec, claim record) before it is published or acknowledged.

`NodeAllocator` is the facade; the work lives with its seams: `live_state` (the published
state, its lock, the published devices, device health, watchers), `startup` (recovery at
start), `batches` (prepare and unprepare, taken together), `attachments` (running containers)
and `topology_refresh` (a new inventory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dracpu.allocator import claims
from dracpu.allocator.domain.device_health import HealthBook
from dracpu.allocator.domain.devices import DeviceModel, DeviceOptions
from dracpu.allocator.live import attachments, startup, topology_refresh
from dracpu.allocator.live.batches import PrepareBatches, UnprepareBatches
from dracpu.allocator.live.state import LiveState, SharedPoolView, pool_view
from dracpu.core.cpuset import CPUSet
from dracpu.core.log import get_logger
from dracpu.core.machine import Machine
from dracpu.core.tasks import run_to_end

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = get_logger(__name__)


class NodeAllocator:
    """The node's allocation state: snapshots to read, and the mutations, each durable before
    it is published or acknowledged, and each run to its end even when its caller goes away."""

    # Prepare and unprepare are the batches' own (`batches`: taken together while others are
    # written); a call goes straight to them.
    prepare: Callable[[claims.PrepareInput], Awaitable[claims.PrepareOutcome]]
    unprepare: Callable[[str], Awaitable[claims.ClaimRecord | None]]

    def __init__(
        self,
        *,
        state_dir: Path,
        cdi_dir: Path,
        options: DeviceOptions,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.options = options
        self._live = LiveState(
            state_dir=state_dir, cdi_dir=cdi_dir, options=options, registry=registry, clock=clock
        )
        self.prepare = PrepareBatches(self._live).prepare
        self.unprepare = UnprepareBatches(self._live).unprepare

    # ---- reads: snapshots of the published state ------------------------------------------

    @property
    def ready(self) -> bool:
        return self._live.ready

    @property
    def state(self) -> claims.NodeState:
        return self._live.state

    @property
    def devices(self) -> tuple[DeviceModel, int]:
        """The devices to publish and their generation, which moves whenever they change."""
        published = self._live.devices
        return published.of(self.state), published.generation

    def shared_pool(self) -> SharedPoolView:
        return pool_view(self.state)

    @property
    def device_health(self) -> HealthBook:
        return self._live.health

    def devices_changed(self) -> asyncio.Event:
        """Set at the next change of the devices or their health (take it before reading)."""
        return self._live.device_changes.next()

    # ---- start-up and topology ---------------------------------------------------------------

    async def start(self, machine: Machine) -> None:
        live = self._live
        async with live.lock:
            state = await asyncio.to_thread(startup.recover, live, machine)
            live.publish(state)
            live.assess_health(state)
        log.info(
            0,
            "allocator state loaded",
            claims=len(state.records),
            exclusive=state.exclusive.format(),
            shared=state.shared.format(),
            devices=len(state.devices.devices),
            devices_generation=live.devices.generation,
        )

    async def topology_unreadable(self, error: str) -> None:
        """A topology refresh failed: devices are Unknown until one succeeds."""
        await topology_refresh.topology_unreadable(self._live, error)

    async def update_topology(self, machine: Machine) -> bool:
        """A new inventory: rebuild the devices; True if they changed."""
        return await run_to_end(topology_refresh.update_topology(self._live, machine))

    # ---- mutations ---------------------------------------------------------------------------

    async def attach(
        self,
        container: claims.Container,
        presented: Mapping[str, CPUSet],
        enforces_memory: bool = False,
    ) -> claims.AttachOutcome:
        """`enforces_memory`: the caller sets a memory claim's memory nodes and hugepage limits
        (an older nri-plugin does not say so, and its containers of such claims are refused)."""
        return await run_to_end(
            attachments.attach(self._live, container, presented, enforces_memory)
        )

    async def detach(self, container_id: str) -> list[str]:
        return await run_to_end(attachments.detach(self._live, container_id))

    async def reconcile(self, live: set[str]) -> list[str]:
        """Detach every container held as running that the runtime no longer runs; returns
        their ids."""
        return await attachments.reconcile(self._live, live)

    async def adopt(
        self, container: claims.Container, presented: Mapping[str, CPUSet]
    ) -> claims.AdoptOutcome:
        return await run_to_end(attachments.adopt(self._live, container, presented))

    # ---- shared pool watchers ------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[SharedPoolView]:
        return self._live.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[SharedPoolView]) -> None:
        self._live.unsubscribe(queue)
