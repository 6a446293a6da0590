"""The runtime's container lifecycle requests: CreateContainer pins a claimed container to its
claims' CPUs (the allocator attaches it), with the shared pool too when a claim includes it
(`cpuConfig.sharedPool`), and puts any other on the shared pool; PostStart marks
it running, and adopts one the plugin never heard of (dracpu.nri_plugin.events.adoption); an
update another party asks of the runtime keeps the container's cpuset; Stop and Remove forget it,
and tell the allocator a claimed one no longer runs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from dracpu.core.clients.allocator import ContainerAllocator
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import shared_cpuset_env_name
from dracpu.core.errors import InsufficientCPUsError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.events.adoption import UNANSWERED, LateAdoptions
from dracpu.nri_plugin.events.detaches import PendingDetaches
from dracpu.nri_plugin.events.pool_pushes import PoolPushes
from dracpu.nri_plugin.events.unanswered import Unanswered
from dracpu.nri_plugin.state.claim_env import parse_claim_env
from dracpu.nri_plugin.state.conversions import (
    container_record,
    container_ref,
    cpuset_update,
    hugepage_limits,
    memory_nodes,
    same_cpus,
)
from dracpu.nri_plugin.state.pacing import ALLOCATOR_CALL_TIMEOUT
from dracpu.nri_plugin.state.plugin_state import PluginState
from dracpu.nri_plugin.transport.container_names import container_name
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)


class ContainerEvents:
    """The container events of dracpu.nri_plugin.transport.plugin_service.PluginHandlers."""

    def __init__(
        self,
        state: PluginState,
        allocator: ContainerAllocator,
        pushes: PoolPushes,
        detaches: PendingDetaches,
        adoptions: LateAdoptions,
        unanswered: Unanswered,
    ) -> None:
        self._state = state
        self._allocator = allocator
        self._pushes = pushes
        self._detaches = detaches
        self._adoptions = adoptions
        self._unanswered = unanswered

    async def create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        started = time.monotonic()
        cut_off = False
        try:
            return await self._create_container(pod, ctr)
        except asyncio.CancelledError:
            # The connection closed under the call: the runtime gave up on it. It sent the
            # request before our clock started, so its timeout can end before ours does.
            cut_off = True
            raise
        finally:
            took = time.monotonic() - started
            timeout = self._state.pacer.request_timeout
            if cut_off:
                why = (
                    f"the runtime dropped the connection {took:.1f}s into its CreateContainer "
                    f"(its plugin_request_timeout ({timeout:g}s) expired, or it went away)"
                )
            elif took > timeout:
                why = (
                    f"its CreateContainer took {took:.1f}s, longer than the runtime's "
                    f"plugin_request_timeout ({timeout:g}s)"
                )
            else:
                why = ""
            if why:
                # The runtime stopped waiting: it starts the container without this answer,
                # and the next Synchronize finds it on other CPUs.
                self._state.overdue[ctr.id] = why
                log.warning(
                    "CreateContainer took longer than the runtime waits "
                    "(plugin_request_timeout); the container starts without its cpuset",
                    container=f"{pod.namespace}/{pod.name}/{container_name(ctr)}",
                    container_id=ctr.id,
                    took_s=round(took, 3),
                    request_timeout_s=timeout,
                    why=why,
                )

    async def _create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        state = self._state
        claims = parse_claim_env(ctr.env)  # malformed -> refused, nothing changes
        if state.prerequisites is not None:
            where = f"{pod.namespace}/{pod.name}/{ctr.name}"
            state.prerequisites.container_seen(where, claims, ctr)
        env: list[api_pb2.KeyValue] = []
        async with state.lock:
            if claims:
                # As long as the runtime waits for this answer (its plugin_request_timeout),
                # not a fixed time: a slow allocator then pins the container instead of
                # refusing it.
                budget = state.pacer.call_budget(ALLOCATOR_CALL_TIMEOUT)
                reply = await self._allocator.attach(container_ref(pod, ctr), claims, budget)
                cpus = CPUSet.parse(reply.cpus)
                if not cpus:
                    raise InsufficientCPUsError(
                        f"allocator gave container {ctr.id} an empty cpuset for {sorted(claims)}"
                    )
                pool = state.pool.note(reply.shared_pool)
                mems = memory_nodes(reply.memory_nodes, ctr.id)
                limits = hugepage_limits(reply.hugepage_limits)
                record = replace(container_record(pod, ctr, tuple(sorted(claims)), cpus), mems=mems)
                sharing = tuple(reply.shared_pool_claims)
                if sharing:
                    # Its claims' CPUs and the pool as it is now; pool pushes follow the pool.
                    record = replace(record, own=cpus, cpus=cpus | pool)
                    shown = pool.format()
                    env = [
                        api_pb2.KeyValue(key=shared_cpuset_env_name(uid), value=shown)
                        for uid in sharing
                    ]
                log.info(
                    2,
                    "pinned container",
                    container=ctr.id,
                    claims=",".join(record.claims),
                    cpus=record.cpus,
                    shared_pool=pool if sharing else "excluded",
                    mems=mems.format() or "all",
                )
            else:
                # The watched pool may lag a Prepare by a moment; a shared container that gets
                # the older, larger pool is moved when the claim's own container is created
                # (its response updates every shared container off the pool).
                cpus = await state.pool.current()
                if not cpus:
                    raise InsufficientCPUsError(
                        f"shared pool is empty; refusing container {container_name(ctr)} of pod "
                        f"{pod.namespace}/{pod.name} rather than run it without CPUs"
                    )
                record = container_record(pod, ctr, (), cpus)
                limits = []
                log.info(4, "shared container", container=ctr.id, cpus=cpus)
            state.registry.put(record)
            response = api_pb2.CreateContainerResponse()
            response.adjust.linux.resources.cpu.cpus = record.cpus.format()
            # With the pool included: which of its CPUs are the shared pool, as at creation.
            response.adjust.env.extend(env)
            if record.mems:
                # The claims' memory placement; shared containers keep every memory node.
                response.adjust.linux.resources.cpu.mems = record.mems.format()
            # The hugepages its claims hold, per page size; none leaves the pod's own limits.
            response.adjust.linux.resources.hugepage_limits.extend(limits)
            # Every shared container not on the current pool: the shrink this claim caused, or
            # a growth not pushed yet (this is the next solicited chance).
            response.update.extend(self._pushes.solicited(exclude=ctr.id))
        return response

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        async with self._state.lock:
            if self._state.registry.set_state(ctr.id, "running"):
                log.info(6, "container running", container=ctr.id)
                self._move_again_if_moved_before_start(ctr.id)
            else:
                # Neither its CreateContainer nor a Synchronize listed it: it was created while
                # the plugin registered, and runs on whatever its spec allowed.
                try:
                    await self._adoptions.adopt(pod, ctr, "PostStartContainer")
                except UNANSWERED as exc:
                    log.warning("allocator did not answer an adopt; asked again once it answers",
                                container=ctr.id, error=str(exc))  # fmt: skip
                    self._unanswered.adopt(pod, ctr)

    def _move_again_if_moved_before_start(self, container_id: str) -> None:
        """A container whose cpuset was sent while it was being created or started may run on
        its creation's (`ContainerRecord.moved_before_start`): now that it runs, it is moved
        again, by the plugin's own UpdateContainers or a resynchronization as an adopted
        container is (`adoption.LateAdoptions.move_again`). Called under the lock."""
        registry = self._state.registry
        record = registry.get(container_id)
        if record is None or not record.moved_before_start:
            return
        record = replace(record, moved_before_start=False, confirmed=False)
        registry.put(record)  # not known to run on it: no answer to the runtime settles it
        self._adoptions.move_again(record)

    async def update_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container, resources: api_pb2.LinuxResources
    ) -> list[api_pb2.ContainerUpdate]:
        """Another party updates a container through the runtime (the kubelet's CPU Manager
        reconciling its cpusets, `crictl update`, an in-place resize). A cpuset or memory nodes
        other than the plugin's for a container it knows are answered with its own (its
        claims' CPUs and memory nodes, or the shared pool): what else the update asks (CPU
        shares, quota, memory limits) goes through. An update that names no cpuset and no
        memory nodes, or the container's own, or one of a container the plugin does not know,
        goes through as asked. Never refused: the runtime would fail the other party's update."""
        asked = resources.cpu
        if not asked.cpus and not asked.mems:
            return []
        async with self._state.lock:
            record = self._state.registry.get(ctr.id)
            if record is None:
                log.info(4, "update of unknown container passed", container=ctr.id)
                return []
            own = record.target(self._state.pool.cpus)
            if not own:
                return []  # a shared container while the pool is not known yet
            cpus_kept = bool(asked.cpus) and not same_cpus(asked.cpus, own)
            mems_kept = bool(asked.mems and record.mems) and not same_cpus(asked.mems, record.mems)
            if not cpus_kept and not mems_kept:
                return []
            self._state.metrics.update_kept()
        log.info(
            2,
            "kept container on its cpuset against an update",
            container=record.name,
            container_id=ctr.id,
            claims=",".join(record.claims) or "shared",
            asked_cpus=asked.cpus or "unchanged",
            asked_mems=asked.mems or "unchanged",
            cpus=own,
            mems=record.mems.format() or "all",
        )
        return [cpuset_update(ctr.id, own, record.mems)]

    async def stop_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> list[api_pb2.ContainerUpdate]:
        await self._forget(pod, ctr, "stopped")
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._forget(pod, ctr, "removed")

    async def _forget(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container, why: str) -> None:
        async with self._state.lock:
            record = self._state.registry.remove(ctr.id, pod.uid)
            if record is None:
                if await self._unanswered.stopped(ctr.id):
                    log.info(2, f"container {why} before the allocator adopted it",
                             container=ctr.id)  # fmt: skip
                else:
                    log.info(4, "event for unknown container ignored", container=ctr.id,
                             event=why)  # fmt: skip
                return
            self._adoptions.forget(ctr.id)
            log.info(2, f"container {why}", container=ctr.id, claims=",".join(record.claims))
            if record.exclusive or record.quarantined:
                # The claim keeps its CPUs until unprepare; the allocator only learns that
                # this container no longer runs, so a restart may attach again (and a
                # quarantined claim of it is forgotten).
                await self._detaches.detach(ctr.id)
