"""Containers the plugin learns of after their creation, and the way each reaches its cpuset.

A running container's claims are reported to the allocator (Adopt) wherever the plugin first
meets it: in a Synchronize, or at an event for a container the registry does not know. The
second happens where the runtime does not hold container creation while a plugin registers
(CRI-O): a container whose CreateContainer went out before the plugin was registered, and whose
creation was still in flight when the runtime took the Synchronize snapshot, is in neither. The
plugin first hears of it at PostStartContainer, when it already runs on whatever CPUs its spec
allowed: every CPU, a claimed one included.

Such a container is adopted at once (its claims attached, as at Synchronize) and moved onto its
cpuset in bounded time: by the plugin's own UpdateContainers where the runtime takes them
safely, else by a resynchronization (the connection closed and registered again: the new
Synchronize answer carries an update for every container), never "at the next CreateContainer".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from dracpu.core.clients.allocator import ContainerAllocator
from dracpu.core.clients.base import PeerUnansweredError
from dracpu.core.cpuset import EMPTY, CPUSet
from dracpu.core.errors import DracpuError, InvalidInputError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.events.pool_pushes import PushUpdates
from dracpu.nri_plugin.state.claim_env import parse_claim_env
from dracpu.nri_plugin.state.conversions import (
    container_record,
    container_ref,
    cpuset_update,
    memory_nodes,
    same_cpus,
)
from dracpu.nri_plugin.state.plugin_state import PluginState
from dracpu.nri_plugin.state.registry import ContainerRecord
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

# The allocator's silence: a call it did not answer (restarting, or not within the deadline).
UNANSWERED: tuple[type[DracpuError], ...] = (UnavailableError, PeerUnansweredError)
# Closes the runtime connection so that the plugin registers again; the argument says why.
Resynchronize = Callable[[str], bool]

# Adoptions that arrive together (a pod's containers start together) wait this long for each
# other, so one update or one resynchronization carries them all.
SETTLE_SECONDS = 0.05
# Resynchronizations are at least this far apart: each one is a registration, and a runtime
# creating containers without pause would otherwise keep the plugin reconnecting.
MIN_RESYNC_INTERVAL = 1.0
# How long a requested resynchronization may take before it is asked for again.
RESYNC_WAIT = 10.0


async def recover(
    state: PluginState,
    allocator: ContainerAllocator,
    pod: api_pb2.PodSandbox,
    ctr: api_pb2.Container,
    *,
    allocator_silent: bool = False,
) -> ContainerRecord | None:
    """The registry record of a running container the plugin meets for the first time, its
    claims reported to the allocator (Adopt); None when it is to be left alone (malformed DRA
    env, or claims the allocator refuses). Raises one of `UNANSWERED` when the allocator did
    not answer, at once for a claimed container when `allocator_silent` (it did not answer an
    earlier call of the same Synchronize). Called under the lock."""
    try:
        claims = parse_claim_env(ctr.env)
    except InvalidInputError as exc:
        log.error("container with malformed DRA env left alone", container=ctr.id, error=str(exc))
        return None
    if state.prerequisites is not None:
        where = f"{pod.namespace}/{pod.name}/{ctr.name}"
        state.prerequisites.container_seen(where, claims, ctr)
    record = container_record(pod, ctr, (), EMPTY)
    if not claims:
        return record
    if allocator_silent:
        raise UnavailableError(f"adopt claims of container {ctr.id}: the allocator is silent")
    try:
        reply = await allocator.adopt(container_ref(pod, ctr), claims)
    except UNANSWERED:
        raise
    except DracpuError as exc:
        log.error("adopt failed; container left as it is", container=ctr.id, error=str(exc))
        return None
    accepted = tuple(sorted(o.claim_uid for o in reply.outcomes if o.accepted))
    # Claims the allocator has no record of: it took no CPUs for them, so they stay in the
    # shared pool and a prepare of another claim may take them. Pinning the container to the
    # CPUs its env names would let it keep them next to that claim's container: it runs on the
    # shared pool instead, and is tracked with them so its stop reaches the allocator. A
    # prepare that confirms such a claim takes effect when the container starts again
    # (CreateContainer attaches it).
    held = tuple(sorted(o.claim_uid for o in reply.outcomes if o.quarantined))
    for outcome in reply.outcomes:
        if outcome.accepted:
            log.info(2, "claim adopted", claim=outcome.claim_uid, recovered=outcome.recovered)
        elif outcome.quarantined:
            log.warning(
                "claim on running container quarantined",
                container=ctr.id,
                claim=outcome.claim_uid,
                reason=outcome.error,
            )
        else:
            log.error(
                "claim on running container not accepted",
                container=ctr.id,
                claim=outcome.claim_uid,
                error=outcome.error,
            )
    state.pool.note(reply.shared_pool)
    if not accepted:
        return replace(record, quarantined=held)
    cpus = CPUSet.parse(reply.cpus)
    return replace(
        container_record(pod, ctr, accepted, cpus),
        quarantined=held,
        mems=memory_nodes(reply.memory_nodes, ctr.id),
        # With the shared pool included its cpuset is these CPUs and the pool: recorded on
        # these alone, it is stale against every pool until a move puts it on one.
        own=cpus if reply.shared_pool_claims else EMPTY,
    )


@dataclass(frozen=True)
class Adoption:
    """A container adopted after its creation, until it is known to run on its cpuset."""

    name: str  # namespace/pod/container
    ran_on: str  # the cpuset the runtime reported at the event ("" = none: every CPU)
    seen_at: float  # monotonic, when the plugin adopted it
    started_at: float  # wall clock, when the runtime started it (0: not reported)
    # False: a container the plugin knew, sent its cpuset again once running (move_again).
    adopted: bool = True

    def window(self) -> float:
        """Seconds the container has run off its cpuset: from its start when the runtime
        reports it, else from its adoption."""
        if self.started_at > 0:
            return max(0.0, time.time() - self.started_at)
        return time.monotonic() - self.seen_at


def target_of(record: ContainerRecord, pool: CPUSet | None) -> tuple[CPUSet, CPUSet]:
    """The cpuset and memory nodes a container is to run on (EMPTY cpus: not known yet)."""
    return record.target(pool), record.mems if record.exclusive else EMPTY


class LateAdoptions:
    """Containers first met after their creation (see the module docstring): adopted under
    the lock by the event that revealed them, moved onto their cpusets by `run()`."""

    def __init__(self, state: PluginState, allocator: ContainerAllocator) -> None:
        self._state = state
        self._allocator = allocator
        self._pending: dict[str, Adoption] = {}
        self._wake = asyncio.Event()
        self._synchronized = asyncio.Event()
        self._push: PushUpdates | None = None
        self._resynchronize: Resynchronize | None = None
        self._last_resync = float("-inf")

    @property
    def state(self) -> PluginState:
        return self._state

    @property
    def allocator(self) -> ContainerAllocator:
        return self._allocator

    def set_pusher(self, push: PushUpdates | None) -> None:
        self._push = push

    def set_resynchronizer(self, resynchronize: Resynchronize | None) -> None:
        self._resynchronize = resynchronize

    @property
    def pending(self) -> Mapping[str, Adoption]:
        return self._pending

    async def adopt(
        self,
        pod: api_pb2.PodSandbox,
        ctr: api_pb2.Container,
        event: str,
        why: str = "the runtime created it while the plugin was registering",
    ) -> None:
        """A container the registry does not know, revealed by `event` (`why` it is unknown):
        adopt it and, unless it already runs on its cpuset, have it moved there. Raises one
        of `UNANSWERED` when the allocator did not answer. Called under the lock."""
        if ctr.state == api_pb2.CONTAINER_STOPPED:
            return
        state = self._state
        record = await recover(state, self._allocator, pod, ctr)
        if record is None:
            return
        record = replace(record, state="running")
        cpus, mems = target_of(record, state.pool.cpus)
        ran_on = ctr.linux.resources.cpu.cpus
        name = record.name
        on_target = bool(cpus) and same_cpus(ran_on, cpus) and not mems
        state.metrics.adopted()
        log.warning(
            f"container unknown to the plugin adopted at {event}: {why}",
            container=name,
            container_id=ctr.id,
            claims=",".join(record.claims),
            ran_on=ran_on or "any (no cpuset)",
            cpus=cpus,
            moving="no" if on_target else "yes",
        )
        if on_target:
            state.registry.put(replace(record, cpus=cpus))
            return
        # A shared one is recorded as on no cpuset yet (one with the pool included, on its
        # claims' CPUs alone): it is stale against any pool, so a solicited answer or a pool
        # push moves it too if they come first.
        state.registry.put(record if record.exclusive else replace(record, cpus=EMPTY))
        started = ctr.started_at / 1e9 if ctr.started_at > 0 else 0.0
        self._pending[ctr.id] = Adoption(name, ran_on, time.monotonic(), started)
        self._wake.set()

    def move_again(self, record: ContainerRecord) -> None:
        """A container the plugin knows, whose cpuset it sent while the runtime was creating
        or starting it (`ContainerRecord.moved_before_start`): it may run on its creation's
        cpuset, so it is moved onto its own now that it runs, as an adoption is. Called under
        the lock."""
        log.info(2, "cpuset sent before its start: sending it again", container=record.name,
                 container_id=record.container_id, cpus=record.cpus)  # fmt: skip
        self._pending[record.container_id] = Adoption(
            record.name, "", time.monotonic(), 0.0, adopted=False
        )
        self._wake.set()

    def forget(self, container_id: str) -> None:
        """The container stopped or was removed: nothing to move any more."""
        self._pending.pop(container_id, None)

    def cause(self, container_id: str) -> str | None:
        """Why a pending adopted container runs off its cpuset; None when it is not one."""
        if container_id not in self._pending:
            return None
        return "created while the plugin was registering (adopted at its start)"

    def synchronized(self, present: Mapping[str, ContainerRecord]) -> None:
        """A Synchronize answered with an update for every container: each pending adoption
        it listed is on its cpuset now; one it did not list is gone. Called under the lock."""
        for cid, adoption in list(self._pending.items()):
            if cid in present:
                self._settled(cid, adoption, "resynchronization")
            else:
                log.info(2, "adopted container gone before its move", container=adoption.name)
                del self._pending[cid]
        self._synchronized.set()

    def _settled(self, cid: str, adoption: Adoption, how: str) -> None:
        del self._pending[cid]
        record = self._state.registry.get(cid)
        log.warning(
            "adopted container now on its cpuset; it ran off it until now"
            if adoption.adopted
            else "container moved again once running; it may have run off its cpuset until now",
            container=adoption.name,
            container_id=cid,
            cpus=record.cpus if record is not None else "",
            ran_on=adoption.ran_on or "any (no cpuset)",
            window_s=round(adoption.window(), 3),
            by=how,
        )

    async def run(
        self,
        settle: float = SETTLE_SECONDS,
        min_interval: float = MIN_RESYNC_INTERVAL,
        resync_wait: float = RESYNC_WAIT,
    ) -> None:
        """Forever: move the pending adoptions onto their cpusets (see the module docstring)."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(settle)
            self._wake.clear()
            async with self._state.lock:
                self._moved_meanwhile()
            if not self._pending:
                continue
            push = self._push if self._state.unsolicited.enabled else None
            if push is not None and await self._push_pending(push):
                continue
            await asyncio.sleep(max(0.0, self._last_resync + min_interval - time.monotonic()))
            if not self._pending or self._resynchronize is None:
                continue
            self._synchronized.clear()
            self._last_resync = time.monotonic()
            names = ",".join(sorted(a.name for a in self._pending.values()))
            if self._resynchronize(f"to move adopted containers onto their cpusets: {names}"):
                # asyncio.timeout, not wait_for: see transport.ttrpc's call.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(resync_wait):
                        await self._synchronized.wait()
            if self._pending:
                self._wake.set()  # not settled yet: try again (paced above)

    def _moved_meanwhile(self) -> None:
        """Shared ones an answer to the runtime moved already (a CreateContainer's answer
        carries every shared container not on the pool). Called under the lock."""
        pool = self._state.pool.cpus
        for cid, adoption in list(self._pending.items()):
            record = self._state.registry.get(cid)
            if record is None:
                del self._pending[cid]  # gone
            elif (
                record.follows_pool
                and record.confirmed
                and pool
                and record.cpus == record.target(pool)
            ):
                self._settled(cid, adoption, "answer")

    async def _push_pending(self, push: PushUpdates) -> bool:
        """The pending moves as one UpdateContainers; False when the runtime did not take
        every one of them (a resynchronization then settles them)."""
        state = self._state
        async with state.lock:
            planned: dict[str, tuple[ContainerRecord, CPUSet]] = {}
            updates: list[api_pb2.ContainerUpdate] = []
            for cid in self._pending:
                record = state.registry.get(cid)
                if record is None:
                    continue
                cpus, mems = target_of(record, state.pool.cpus)
                if cpus:
                    planned[cid] = (record, cpus)
                    updates.append(cpuset_update(cid, cpus, mems))
        if not updates:
            return False
        try:
            failed = await push(updates, state.pacer.deadline(len(updates)))
        except Exception as exc:  # the transport's error or a timeout: nothing is known
            log.warning("UpdateContainers for adopted containers failed", error=repr(exc))
            return False
        failed_ids = {u.container_id for u in failed}
        async with state.lock:
            for update in updates:
                cid = update.container_id
                adoption = self._pending.get(cid)
                if cid in failed_ids or adoption is None:
                    continue
                record, cpus = planned[cid]
                if record.follows_pool:
                    state.registry.set_cpus(cid, cpus, expected=record)
                if record.exclusive:
                    state.metrics.late_pinned(1)
                self._settled(cid, adoption, "update")
            return not self._pending
