"""The CPU behaviour of the NRI plugin: pin claimed containers, keep the rest on the shared pool.

Every decision about CPUs comes from the allocator; the plugin keeps the registry of running
containers and turns allocator answers into NRI adjustments and updates. Its parts share one
state (`state.plugin_state`, which says how its lock is held): the container events
(`events.container_events`), the resync with the runtime (`events.resync`), the containers met
only after their creation (`events.adoption`), the shared pool and its pushes
(`state.shared_pool`, `events.pool_pushes`) and the detaches the allocator did not take
(`events.detaches`). The wire to the runtime is `transport`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dracpu.core.clients.allocator import ContainerAllocator
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.events.adoption import LateAdoptions, Resynchronize
from dracpu.nri_plugin.events.container_events import ContainerEvents
from dracpu.nri_plugin.events.detaches import PendingDetaches
from dracpu.nri_plugin.events.pool_pushes import PoolPushes, PushResult, PushUpdates
from dracpu.nri_plugin.events.resync import Resync
from dracpu.nri_plugin.events.unanswered import Unanswered
from dracpu.nri_plugin.state.pacing import UpdatePacer
from dracpu.nri_plugin.state.plugin_metrics import NRIMetrics
from dracpu.nri_plugin.state.plugin_state import PluginState
from dracpu.nri_plugin.state.registry import Registry
from dracpu.nri_plugin.state.shared_pool import SharedPool
from dracpu.nri_plugin.transport.compat import Decision, UnsolicitedMode, decide
from dracpu.nri_plugin.transport.event_masks import SUBSCRIBED_EVENTS
from dracpu.nri_plugin.transport.plugin_service import RuntimeInfo
from dracpu.nri_plugin.transport.runtime_prerequisites import RuntimePrerequisites
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)


class CPUPlugin:
    """PluginHandlers for exclusive CPUs (see `transport.plugin_service.PluginHandlers`),
    and the loops that keep it current: the pool watch, the pool pushes, the detach retry."""

    def __init__(
        self,
        allocator: ContainerAllocator,
        *,
        unsolicited: UnsolicitedMode = UnsolicitedMode.AUTO,
        batch_size: int = 500,
        metrics: NRIMetrics | None = None,
        prerequisites: RuntimePrerequisites | None = None,
    ) -> None:
        if batch_size < 1:
            raise InvalidInputError(f"update batch size must be >= 1, got {batch_size}")
        lock = asyncio.Lock()
        self.state = PluginState(
            lock=lock,
            pool=SharedPool(allocator, lock),
            pacer=UpdatePacer(max_batch=batch_size),
            metrics=metrics or NRIMetrics(),
            prerequisites=prerequisites,
        )
        self._mode = unsolicited
        # Stopped containers whose detach the allocator did not take: sent again (its run()).
        self.detaches = PendingDetaches(allocator)
        self.pushes = PoolPushes(self.state)
        # Containers first met after their creation, moved onto their cpusets (its run()).
        self.adoptions = LateAdoptions(self.state, allocator)
        # What the allocator did not answer at a Synchronize or an adoption (its run()).
        self.unanswered = Unanswered(self.adoptions, self.detaches)
        self.events = ContainerEvents(
            self.state, allocator, self.pushes, self.detaches, self.adoptions, self.unanswered
        )
        self.resync = Resync(self.state, allocator, self.detaches, self.adoptions, self.unanswered)

    # -- what the view shows ------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        return self.state.registry

    @property
    def shared_pool(self) -> CPUSet | None:
        return self.state.pool.cpus

    @property
    def pool_generation(self) -> int:
        return self.state.pool.generation

    @property
    def unsolicited(self) -> Decision:
        return self.state.unsolicited

    @property
    def pacer(self) -> UpdatePacer:
        return self.state.pacer

    @property
    def metrics(self) -> NRIMetrics:
        return self.state.metrics

    # -- lifecycle from the stub --------------------------------------------------------------

    def configure(self, runtime: RuntimeInfo) -> int:
        state = self.state
        state.unsolicited = decide(self._mode, runtime.name, runtime.version, runtime.nri_version)
        state.pacer.request_timeout = runtime.request_timeout
        log.info(
            0,
            "unsolicited UpdateContainers " + ("on" if state.unsolicited.enabled else "off"),
            runtime=runtime.name,
            version=runtime.version,
            reason=state.unsolicited.reason,
        )
        return SUBSCRIBED_EVENTS

    def disconnected(self, reason: str, *, requested: bool = False) -> None:
        self.resync.disconnected(reason, requested=requested)

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> list[api_pb2.ContainerUpdate]:
        return await self.resync.synchronize(pods, containers)

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        return await self.events.create_container(pod, ctr)

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self.events.post_start_container(pod, ctr)

    async def update_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container, resources: api_pb2.LinuxResources
    ) -> list[api_pb2.ContainerUpdate]:
        return await self.events.update_container(pod, ctr, resources)

    async def stop_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> list[api_pb2.ContainerUpdate]:
        return await self.events.stop_container(pod, ctr)

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self.events.remove_container(pod, ctr)

    # -- the shared pool ----------------------------------------------------------------------

    def set_pusher(self, push: PushUpdates | None) -> None:
        self.pushes.set_pusher(push)
        self.adoptions.set_pusher(push)

    def set_resynchronizer(self, resynchronize: Resynchronize | None) -> None:
        """How the plugin closes its runtime connection to register again (the stub's)."""
        self.adoptions.set_resynchronizer(resynchronize)

    async def move_adopted(self) -> None:
        await self.adoptions.run()

    async def wait_for_allocator(self, retry_delay: float = 0.1, max_delay: float = 2.0) -> None:
        await self.state.pool.wait_for_allocator(retry_delay, max_delay)

    async def watch_pool(self, retry_delay: float = 0.5) -> None:
        await self.state.pool.watch(retry_delay)

    async def push_pool_changes(self, retry_delay: float = 0.5, max_delay: float = 10.0) -> None:
        await self.pushes.run(retry_delay, max_delay)

    async def push_once(self) -> PushResult:
        return await self.pushes.push_once()
