"""The CPU behaviour of the NRI plugin: pin claimed containers, keep the rest on the shared pool.

Every decision about CPUs comes from the allocator; this module keeps the registry of running
containers and turns allocator answers into NRI adjustments and updates. State changes happen
under one lock; calls back into the runtime (UpdateContainers) are made with the lock released,
because a runtime blocked in a lifecycle call to us may need its own lock to apply our update.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from dracpu.core.containers import Container
from dracpu.core.cpuset import EMPTY, CPUSet
from dracpu.core.errors import (
    DracpuError,
    InsufficientCPUsError,
    InvalidInputError,
    UnavailableError,
)
from dracpu.core.log import get_logger
from dracpu.nri_plugin.allocator_client import CALL_TIMEOUT, AllocatorAPI
from dracpu.nri_plugin.claim_env import parse_claim_env
from dracpu.nri_plugin.compat import Decision, UnsolicitedMode, decide
from dracpu.nri_plugin.detaches import PendingDetaches
from dracpu.nri_plugin.events import SUBSCRIBED_EVENTS
from dracpu.nri_plugin.pacing import UpdatePacer
from dracpu.nri_plugin.plugin_metrics import NRIMetrics
from dracpu.nri_plugin.registry import ContainerRecord, Registry
from dracpu.nri_plugin.stub import RuntimeInfo
from dracpu.nri_plugin.ttrpc import DEADLINE_EXCEEDED, TtrpcError
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

# Sends plugin-initiated updates, waiting at most the given seconds for the answer; returns
# the ones the runtime could not apply. Raises TtrpcError (remote, or a local timeout).
PushUpdates = Callable[
    [Sequence[api_pb2.ContainerUpdate], float], Awaitable[list[api_pb2.ContainerUpdate]]
]

_STATES = {
    api_pb2.CONTAINER_CREATED: "created",
    api_pb2.CONTAINER_PAUSED: "paused",
    api_pb2.CONTAINER_RUNNING: "running",
    api_pb2.CONTAINER_STOPPED: "stopped",
}


def cpuset_update(container_id: str, cpus: CPUSet, mems: CPUSet = EMPTY) -> api_pb2.ContainerUpdate:
    """An update to `cpus`, and to the memory nodes `mems` when there are any (none leaves the
    container's memory nodes as they are)."""
    update = api_pb2.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.cpus = cpus.format()
    if mems:
        update.linux.resources.cpu.mems = mems.format()
    return update


def runtime_container(pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> Container:
    """The container as the runtime describes it in an NRI event."""
    return Container.of(ctr.id, pod.uid, pod.namespace, pod.name, ctr.name)


def container_ref(pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> allocator_pb2.ContainerRef:
    return allocator_pb2.ContainerRef(**runtime_container(pod, ctr).fields())


class Outcome(Enum):
    APPLIED = "applied"
    FAILED = "failed"  # the runtime listed it as failed: it runs on what it had
    UNKNOWN = "unknown"  # no answer: it may run on either cpuset


@dataclass(frozen=True)
class LatePin:
    """A claimed container found running on other CPUs than its claim's, and pinned now."""

    record: ContainerRecord
    ran_on: str  # the cpuset the runtime reported ("" = none set: every CPU)
    cause: str  # why it was not pinned at CreateContainer, as far as the plugin can tell


@dataclass
class PushResult:
    applied: int = 0
    failed: int = 0
    unknown: int = 0
    pending: int = 0  # shared containers still not confirmed on the pool afterwards


@dataclass
class PushStats:
    pushes: int = 0
    updates: int = 0
    applied: int = 0
    failed: int = 0
    unknown: int = 0
    pending: int = 0
    last_push_seconds: float = 0.0


class CPUPlugin:
    """PluginHandlers for exclusive CPUs (see dracpu.nri_plugin.stub.PluginHandlers)."""

    def __init__(
        self,
        allocator: AllocatorAPI,
        *,
        unsolicited: UnsolicitedMode = UnsolicitedMode.AUTO,
        batch_size: int = 500,
        metrics: NRIMetrics | None = None,
    ) -> None:
        if batch_size < 1:
            raise InvalidInputError(f"update batch size must be >= 1, got {batch_size}")
        self.registry = Registry()
        self.shared_pool: CPUSet | None = None
        self.pool_generation = -1
        self.unsolicited = Decision(False, "runtime not configured yet")
        self.push_stats = PushStats()
        self._allocator = allocator
        self._mode = unsolicited
        self.pacer = UpdatePacer(max_batch=batch_size)
        self.metrics = metrics or NRIMetrics()
        self._synchronized = False  # a connection got as far as Synchronize
        self._disconnected_at: float | None = None  # monotonic; None while connected
        self._lock = asyncio.Lock()
        self._pool_changed = asyncio.Event()
        self._push: PushUpdates | None = None
        self._watching = False  # the WatchSharedPool stream is delivering
        # Containers whose CreateContainer answer the runtime did not take (id -> why): we
        # answered after its request timeout, or it dropped the connection first; kept until
        # the next Synchronize finds them.
        self._overdue: dict[str, str] = {}
        # Stopped containers whose detach the allocator did not take: sent again (its run()).
        self.detaches = PendingDetaches(allocator)

    def set_pusher(self, push: PushUpdates | None) -> None:
        self._push = push

    # -- lifecycle from the stub --------------------------------------------------------------

    def configure(self, runtime: RuntimeInfo) -> int:
        self.unsolicited = decide(self._mode, runtime.name, runtime.version, runtime.nri_version)
        self.pacer.request_timeout = runtime.request_timeout
        log.info(
            0,
            "unsolicited UpdateContainers " + ("on" if self.unsolicited.enabled else "off"),
            runtime=runtime.name,
            version=runtime.version,
            reason=self.unsolicited.reason,
        )
        return SUBSCRIBED_EVENTS

    def disconnected(self, reason: str) -> None:
        # The registry stays as last known (the view keeps showing it); the next
        # Synchronize rebuilds it from what the runtime reports.
        if self._synchronized:
            # From now until the next Synchronize the runtime creates containers without
            # asking us: they start on whatever cpuset their spec has (unpinned).
            self._synchronized = False
            self._disconnected_at = time.monotonic()
            self.metrics.disconnected()
            log.warning(
                "runtime connection lost; containers created until it is back run unpinned",
                reason=reason,
            )
        else:
            log.info(2, "runtime connection gone", reason=reason)

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> list[api_pb2.ContainerUpdate]:
        started = time.perf_counter()
        async with self._lock:
            pods_by_id = {pod.id: pod for pod in pods}
            registry = Registry()
            running_on = {ctr.id: ctr.linux.resources.cpu.cpus for ctr in containers}
            for ctr in containers:
                if ctr.state == api_pb2.CONTAINER_STOPPED:
                    continue
                pod = pods_by_id.get(ctr.pod_sandbox_id, api_pb2.PodSandbox())
                record = await self._recover(pod, ctr)
                if record is not None:
                    registry.put(record)
            await self._reconcile(
                [ctr.id for ctr in containers if ctr.state != api_pb2.CONTAINER_STOPPED]
            )
            pool = await self._fetch_pool()
            updates: list[api_pb2.ContainerUpdate] = []
            repinned: list[ContainerRecord] = []
            late: list[LatePin] = []
            for record in list(registry):
                target = record.cpus if record.exclusive else pool
                if not target:
                    log.error(
                        "shared pool is empty; shared container left as it is",
                        container=record.container_id,
                    )
                    continue
                mems = record.mems if record.exclusive else EMPTY
                updates.append(cpuset_update(record.container_id, target, mems))
                ran_on = running_on.get(record.container_id, "")
                if not _same_cpus(ran_on, target):
                    repinned.append(record)
                    if record.exclusive and record.state != "created":
                        late.append(LatePin(record, ran_on, self._late_cause(record)))
                registry.set_cpus(record.container_id, target)
            self.registry = registry
            self._overdue.clear()
        log.info(
            0,
            "synchronized with the runtime",
            containers=len(containers),
            tracked=len(registry),
            updates=len(updates),
            ms=round((time.perf_counter() - started) * 1e3, 1),
        )
        self._report_repinned(repinned)
        self._report_late_pins(late)
        return updates

    def _report_late_pins(self, late: Sequence[LatePin]) -> None:
        """Claimed containers that ran before they were pinned: the runtime started them
        without our CreateContainer adjustment (its plugin_request_timeout expired, or no
        plugin was connected), on the CPUs their cgroup parent allows. Each one is named."""
        self.metrics.late_pinned(len(late))
        for pin in late:
            container = pin.record.container
            log.warning(
                "claimed container pinned late: it ran on other CPUs until now",
                container=f"{container.pod_namespace}/{container.pod_name}/"
                f"{container.container_name}",
                container_id=pin.record.container_id,
                claims=",".join(pin.record.claims),
                cpus=pin.record.cpus,
                ran_on=pin.ran_on or "any (no cpuset)",
                why=pin.cause,
            )

    def _late_cause(self, record: ContainerRecord) -> str:
        overdue = self._overdue.get(record.container_id)
        if overdue is not None:
            return overdue
        if self.registry.get(record.container_id) is not None:
            return "the runtime did not keep the cpuset of our CreateContainer answer"
        return "created while the plugin was not connected to the runtime (or before it started)"

    async def _reconcile(self, live: list[str]) -> None:
        """Containers that stopped while we were away: the allocator learns it here (their
        claims' CPUs held for them go back to the pool)."""
        try:
            gone = await self._allocator.reconcile(live)
        except DracpuError as exc:
            log.error("reconcile with the allocator failed", error=str(exc))
            return
        self.detaches.settled(set(live))  # every container not live is detached now
        if gone:
            log.info(2, "containers stopped while disconnected detached", containers=",".join(gone))

    def _report_repinned(self, repinned: Sequence[ContainerRecord]) -> None:
        window = 0.0
        if self._disconnected_at is not None:
            window = time.monotonic() - self._disconnected_at
        self._disconnected_at = None
        self._synchronized = True
        self.metrics.resynchronized(window, len(repinned))
        if not repinned:
            return
        names = [
            f"{r.container.pod_namespace}/{r.container.pod_name}/{r.container.container_name}"
            for r in repinned
        ]
        shown = ",".join(names[:_NAMES_LOGGED])
        if len(names) > _NAMES_LOGGED:
            shown += f",... ({len(names) - _NAMES_LOGGED} more)"
        log.warning(
            "re-pinned containers the runtime ran on other CPUs",
            count=len(repinned),
            unpinned_window_s=round(window, 3),
            containers=shown,
        )

    async def _recover(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> ContainerRecord | None:
        try:
            claims = parse_claim_env(ctr.env)
        except InvalidInputError as exc:
            log.error(
                "container with malformed DRA env left alone", container=ctr.id, error=str(exc)
            )
            return None
        record = _record(pod, ctr, (), EMPTY)
        if not claims:
            return record
        try:
            reply = await self._allocator.adopt(container_ref(pod, ctr), claims)
        except DracpuError as exc:
            log.error("adopt failed; container left as it is", container=ctr.id, error=str(exc))
            return None
        accepted = tuple(sorted(o.claim_uid for o in reply.outcomes if o.accepted))
        # Claims the allocator has no record of: it took no CPUs for them, so they stay in the
        # shared pool and a prepare of another claim may take them. Pinning the container to
        # the CPUs its env names would let it keep them next to that claim's container: it
        # runs on the shared pool instead, and is tracked with them so its stop reaches the
        # allocator. A prepare that confirms such a claim takes effect when the container
        # starts again (CreateContainer attaches it).
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
        self._note_pool(reply.shared_pool)
        if not accepted:
            return replace(record, quarantined=held)
        return replace(
            _record(pod, ctr, accepted, CPUSet.parse(reply.cpus)),
            quarantined=held,
            mems=_memory_nodes(reply.memory_nodes, ctr.id),
        )

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
            timeout = self.pacer.request_timeout
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
                self._overdue[ctr.id] = why
                log.warning(
                    "CreateContainer took longer than the runtime waits "
                    "(plugin_request_timeout); the container starts without its cpuset",
                    container=f"{pod.namespace}/{pod.name}/{ctr.name}",
                    container_id=ctr.id,
                    took_s=round(took, 3),
                    request_timeout_s=timeout,
                    why=why,
                )

    async def _create_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        claims = parse_claim_env(ctr.env)  # malformed -> refused, nothing changes
        async with self._lock:
            if claims:
                # As long as the runtime waits for this answer (its plugin_request_timeout),
                # not a fixed time: a slow allocator then pins the container instead of
                # refusing it.
                budget = self.pacer.call_budget(CALL_TIMEOUT)
                reply = await self._allocator.attach(container_ref(pod, ctr), claims, budget)
                cpus = CPUSet.parse(reply.cpus)
                if not cpus:
                    raise InsufficientCPUsError(
                        f"allocator gave container {ctr.id} an empty cpuset for {sorted(claims)}"
                    )
                self._note_pool(reply.shared_pool)
                mems = _memory_nodes(reply.memory_nodes, ctr.id)
                record = replace(_record(pod, ctr, tuple(sorted(claims)), cpus), mems=mems)
                log.info(
                    2,
                    "pinned container",
                    container=ctr.id,
                    claims=",".join(record.claims),
                    cpus=cpus,
                    mems=mems.format() or "all",
                )
            else:
                # The watched pool may lag a Prepare by a moment; a shared container that gets
                # the older, larger pool is moved when the claim's own container is created
                # (its response updates every shared container off the pool).
                cached = self.shared_pool
                cpus = cached if self._watching and cached is not None else await self._fetch_pool()
                if not cpus:
                    raise InsufficientCPUsError(
                        f"shared pool is empty; refusing container {ctr.name} of pod "
                        f"{pod.namespace}/{pod.name} rather than run it without CPUs"
                    )
                record = _record(pod, ctr, (), cpus)
                log.info(4, "shared container", container=ctr.id, cpus=cpus)
            self.registry.put(record)
            response = api_pb2.CreateContainerResponse()
            response.adjust.linux.resources.cpu.cpus = cpus.format()
            if record.mems:
                # The claims' memory placement; shared containers keep every memory node.
                response.adjust.linux.resources.cpu.mems = record.mems.format()
            # Every shared container not on the current pool: the shrink this claim caused, or
            # a growth not pushed yet (this is the next solicited chance).
            response.update.extend(self._shared_updates(exclude=ctr.id))
        return response

    async def post_start_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        async with self._lock:
            if self.registry.set_state(ctr.id, "running"):
                log.info(6, "container running", container=ctr.id)

    async def stop_container(
        self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container
    ) -> list[api_pb2.ContainerUpdate]:
        await self._forget(pod, ctr, "stopped")
        return []

    async def remove_container(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        await self._forget(pod, ctr, "removed")

    async def _forget(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container, why: str) -> None:
        async with self._lock:
            record = self.registry.remove(ctr.id, pod.uid)
            if record is None:
                log.info(4, "event for unknown container ignored", container=ctr.id, event=why)
                return
            log.info(2, f"container {why}", container=ctr.id, claims=",".join(record.claims))
            if record.exclusive or record.quarantined:
                # The claim keeps its CPUs until unprepare; the allocator only learns that
                # this container no longer runs, so a restart may attach again (and a
                # quarantined claim of it is forgotten).
                try:
                    await self._allocator.detach(ctr.id)
                except DracpuError as exc:
                    log.warning("detach failed; sending it again", container=ctr.id, error=str(exc))
                    self.detaches.add(ctr.id)

    # -- the shared pool ----------------------------------------------------------------------

    def _note_pool(self, pool: allocator_pb2.SharedPool) -> CPUSet:
        cpus = CPUSet.parse(pool.cpus)
        if pool.generation >= self.pool_generation or self.shared_pool is None:
            if cpus != self.shared_pool:
                self._pool_changed.set()
            self.shared_pool = cpus
            self.pool_generation = pool.generation
        return self.shared_pool

    async def _fetch_pool(self) -> CPUSet:
        try:
            return self._note_pool(await self._allocator.shared_pool())
        except DracpuError as exc:
            if self.shared_pool is not None:
                log.warning("allocator unreachable; using last shared pool", error=str(exc))
                return self.shared_pool
            raise UnavailableError(f"shared pool unknown: {exc}") from None

    def _shared_updates(self, exclude: str = "") -> list[api_pb2.ContainerUpdate]:
        pool = self.shared_pool
        if not pool:
            return []
        stale = self.registry.stale_shared(pool, exclude)
        for record in stale:
            self.registry.set_cpus(record.container_id, pool)
        return [cpuset_update(r.container_id, pool) for r in stale]

    async def wait_for_allocator(self, retry_delay: float = 0.1, max_delay: float = 2.0) -> None:
        """Until the allocator answers with the shared pool. Registering with the runtime
        before that would only fail its Synchronize (and log errors on the runtime side)."""
        delay = retry_delay
        waited = False
        while True:
            try:
                async with self._lock:
                    pool = self._note_pool(await self._allocator.shared_pool())
            except DracpuError as exc:
                if not waited:
                    log.info(0, "waiting for the allocator before registering", error=str(exc))
                waited = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_delay)
                continue
            log.info(2, "allocator answers", shared_pool=pool)
            return

    async def watch_pool(self, retry_delay: float = 0.5) -> None:
        """Follow the allocator's shared pool forever; reconnects with backoff."""
        delay = retry_delay
        while True:
            try:
                async for pool in self._allocator.watch_shared_pool():
                    delay = retry_delay
                    async with self._lock:
                        self._note_pool(pool)
                        self._watching = True
            except DracpuError as exc:
                log.info(2, "shared pool watch ended; retrying", error=str(exc), delay_s=delay)
            finally:
                self._watching = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def push_pool_changes(self, retry_delay: float = 0.5, max_delay: float = 10.0) -> None:
        """Forever: when the pool changes, move shared containers with UpdateContainers
        (only where the runtime is safe for it; otherwise the next solicited call does).
        Until every shared container is confirmed on the pool, push again with backoff."""
        delay = retry_delay
        while True:
            await self._pool_changed.wait()
            self._pool_changed.clear()
            result = await self.push_once()
            if result.pending and self._push is not None and self.unsolicited.enabled:
                # Not converged (unknown or failed outcomes): try again unless a new pool
                # change wakes us first.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._pool_changed.wait(), delay)
                self._pool_changed.set()
                delay = min(delay * 2, max_delay)
            else:
                delay = retry_delay

    async def push_once(self) -> PushResult:
        """One fan-out of the current pool to the shared containers not confirmed on it.

        Each container's outcome is recorded: applied (the runtime answered without listing
        it), failed (listed as failed: it still runs on what it had), unknown (no answer in
        time, or the connection went: it may run on either). Failed and unknown ones stay
        stale and are sent again by the next push.
        """
        push = self._push
        if push is None or not self.unsolicited.enabled:
            return PushResult()
        async with self._lock:
            pool = self.shared_pool
            if not pool:
                return PushResult()
            planned = {r.container_id: r for r in self.registry.stale_shared(pool)}
        if not planned:
            return PushResult()
        started = time.perf_counter()
        outcomes: dict[str, Outcome] = {}
        ids = sorted(planned)
        position = 0
        while position < len(ids):
            size = self.pacer.batch_size()
            batch = ids[position : position + size]
            position += size
            await self._push_batch(push, batch, pool, outcomes)
        result = PushResult()
        async with self._lock:
            for cid, before in planned.items():
                outcome = outcomes.get(cid, Outcome.UNKNOWN)
                if outcome is Outcome.APPLIED:
                    self.registry.set_cpus(cid, pool, expected=before)
                    result.applied += 1
                elif outcome is Outcome.FAILED:
                    result.failed += 1
                else:
                    self.registry.set_cpus(cid, pool, expected=before, confirmed=False)
                    result.unknown += 1
            result.pending = len(self.registry.stale_shared(pool))
        elapsed = time.perf_counter() - started
        stats = self.push_stats
        stats.pushes += 1
        stats.updates += len(planned)
        stats.applied += result.applied
        stats.failed += result.failed
        stats.unknown += result.unknown
        stats.last_push_seconds = elapsed
        stats.pending = result.pending
        self.metrics.pushed(
            result.applied, result.failed, result.unknown, result.pending, self.pacer.cost
        )
        log.info(
            2,
            "pushed shared pool",
            cpus=pool,
            containers=len(planned),
            applied=result.applied,
            failed=result.failed,
            unknown=result.unknown,
            pending=result.pending,
            batch=self.pacer.batch_size(),
            cost_ms=round(self.pacer.cost * 1e3, 1),
            ms=round(elapsed * 1e3, 1),
        )
        return result

    async def _push_batch(
        self, push: PushUpdates, batch: Sequence[str], pool: CPUSet, outcomes: dict[str, Outcome]
    ) -> None:
        deadline = self.pacer.deadline(len(batch))
        started = time.perf_counter()
        try:
            failed = await push([cpuset_update(cid, pool) for cid in batch], deadline)
        except TtrpcError as exc:
            if exc.remote and exc.code != DEADLINE_EXCEEDED:
                # The runtime answered with an error and no list (containerd returns its
                # failed list only alongside an error, which ttrpc drops): split the batch
                # to learn which containers failed. Re-sending an applied update is harmless.
                if len(batch) == 1:
                    outcomes[batch[0]] = Outcome.FAILED
                    log.warning(
                        "runtime refused a shared pool update",
                        container=batch[0],
                        cpus=pool,
                        error=exc.message,
                    )
                    return
                half = len(batch) // 2
                await self._push_batch(push, batch[:half], pool, outcomes)
                await self._push_batch(push, batch[half:], pool, outcomes)
                return
            if exc.code == DEADLINE_EXCEEDED:
                self.pacer.observe_timeout()
            log.warning(
                "UpdateContainers outcome unknown; will re-send",
                containers=len(batch),
                error=str(exc),
                deadline_s=round(deadline, 3),
            )
            for cid in batch:
                outcomes[cid] = Outcome.UNKNOWN
            return
        except Exception as exc:  # anything else from the transport: nothing is known
            log.warning("UpdateContainers failed; will re-send", error=repr(exc))
            for cid in batch:
                outcomes[cid] = Outcome.UNKNOWN
            return
        self.pacer.observe(len(batch), time.perf_counter() - started)
        failed_ids = {u.container_id for u in failed}
        for cid in batch:
            outcomes[cid] = Outcome.FAILED if cid in failed_ids else Outcome.APPLIED


_NAMES_LOGGED = 20


def _memory_nodes(text: str, container_id: str) -> CPUSet:
    """The allocator's memory nodes for a container; one it cannot have meant (a garbled list)
    is logged and leaves the container's memory nodes alone rather than fail the container."""
    try:
        return CPUSet.parse(text)
    except DracpuError as exc:
        log.error(
            "allocator sent unusable memory nodes; left unset",
            container=container_id,
            error=str(exc),
        )
        return EMPTY


def _same_cpus(text: str, cpus: CPUSet) -> bool:
    try:
        return CPUSet.parse(text) == cpus if text else False
    except DracpuError:
        return False


def _record(
    pod: api_pb2.PodSandbox, ctr: api_pb2.Container, claims: tuple[str, ...], cpus: CPUSet
) -> ContainerRecord:
    return ContainerRecord(
        container=runtime_container(pod, ctr),
        claims=claims,
        cpus=cpus,
        state=_STATES.get(ctr.state, "created" if ctr.state == 0 else "unknown"),
    )
