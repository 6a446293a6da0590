"""Resynchronizing with the runtime after a (re)connect, a plugin restart or a runtime restart,
or a registration the plugin asked for itself (dracpu.nri_plugin.events.adoption).

The runtime's Synchronize lists every container it runs: the registry is rebuilt from it, each
container's claims are reported to the allocator (Adopt, which recovers state it lost), the
allocator learns which containers stopped meanwhile (Reconcile), and every cpuset is applied
again. Containers the runtime ran on other CPUs are named; claimed ones that ran before they
were pinned are late pins. Between a lost connection and the next Synchronize the runtime
creates containers without asking: that window is measured.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dracpu.core.clients.allocator import ContainerAllocator
from dracpu.core.log import get_logger
from dracpu.nri_plugin.events.adoption import UNANSWERED, LateAdoptions, recover
from dracpu.nri_plugin.events.detaches import PendingDetaches
from dracpu.nri_plugin.events.unanswered import Unanswered
from dracpu.nri_plugin.state.conversions import record_update, same_cpus
from dracpu.nri_plugin.state.plugin_state import PluginState
from dracpu.nri_plugin.state.registry import ContainerRecord, Registry
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

_NAMES_LOGGED = 20


@dataclass(frozen=True)
class LatePin:
    """A claimed container found running on other CPUs than its claim's, and pinned now."""

    record: ContainerRecord
    ran_on: str  # the cpuset the runtime reported ("" = none set: every CPU)
    cause: str  # why it was not pinned at CreateContainer, as far as the plugin can tell


class Resync:
    """Synchronize and the connection's loss, of `transport.plugin_service.PluginHandlers`; see
    the module docstring."""

    def __init__(
        self,
        state: PluginState,
        allocator: ContainerAllocator,
        detaches: PendingDetaches,
        adoptions: LateAdoptions,
        unanswered: Unanswered,
    ) -> None:
        self._state = state
        self._allocator = allocator
        self._detaches = detaches
        self._adoptions = adoptions
        self._unanswered = unanswered
        self._synchronized = False  # a connection got as far as Synchronize
        self._disconnected_at: float | None = None  # monotonic; None while connected

    def disconnected(self, reason: str, *, requested: bool = False) -> None:
        # The registry stays as last known (the view keeps showing it); the next
        # Synchronize rebuilds it from what the runtime reports.
        if self._synchronized and requested:
            # Not lost: the plugin closed it to register again (the window is measured too).
            self._synchronized = False
            self._disconnected_at = time.monotonic()
            log.info(0, "resynchronizing with the runtime", reason=reason)
        elif self._synchronized:
            # From now until the next Synchronize the runtime creates containers without
            # asking us: they start on whatever cpuset their spec has (unpinned).
            self._synchronized = False
            self._disconnected_at = time.monotonic()
            self._state.metrics.disconnected()
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
        state = self._state
        async with state.lock:
            pods_by_id = {pod.id: pod for pod in pods}
            registry = Registry()
            running_on = {ctr.id: ctr.linux.resources.cpu.cpus for ctr in containers}
            unanswered = self._unanswered
            unanswered.synchronizing()
            # Once the allocator misses a call, the rest of its calls wait for it (`unanswered`)
            # rather than hold the Synchronize a deadline each: the runtime drops a plugin whose
            # registration takes too long.
            silent = False
            for ctr in containers:
                if ctr.state == api_pb2.CONTAINER_STOPPED:
                    continue
                pod = pods_by_id.get(ctr.pod_sandbox_id, api_pb2.PodSandbox())
                try:
                    record = await recover(
                        state, self._allocator, pod, ctr, allocator_silent=silent
                    )
                except UNANSWERED as exc:
                    if not silent:
                        log.warning(
                            "allocator did not answer an adopt; claimed containers are adopted "
                            "once it answers, and run as they are until then",
                            container=ctr.id,
                            error=str(exc),
                        )
                    silent = True
                    unanswered.adopt(pod, ctr)
                    continue
                if record is not None:
                    registry.put(record)
            live = [ctr.id for ctr in containers if ctr.state != api_pb2.CONTAINER_STOPPED]
            if silent:
                unanswered.reconcile()
            else:
                await unanswered.reconcile_now(live)
            pool = await state.pool.fetch()
            # The runtime applies the answer's updates after it and drops those that fail
            # (ignore_failure) telling nobody: where the plugin may push its own updates, whose
            # answer says which failed, a container moved here (a shared one onto the pool, a
            # claimed one onto its claims' CPUs) is not confirmed until a push of the same
            # cpuset is answered (dracpu.nri_plugin.events.pool_pushes).
            confirm_by_push = state.unsolicited.enabled
            updates: list[api_pb2.ContainerUpdate] = []
            repinned: list[ContainerRecord] = []
            late: list[LatePin] = []
            for record in list(registry):
                target = record.target(pool)
                if not target:
                    log.error(
                        "shared pool is empty; shared container left as it is",
                        container=record.container_id,
                    )
                    continue
                update = record_update(record, pool)
                # A container stopping while the runtime answers ("container not running")
                # must not fail the Synchronize: containerd and CRI-O drop a plugin whose
                # Synchronize updates fail, and every container created until it registers
                # again runs unpinned.
                update.ignore_failure = True
                updates.append(update)
                ran_on = running_on.get(record.container_id, "")
                needs_move = not same_cpus(ran_on, target)
                if needs_move:
                    repinned.append(record)
                    if record.exclusive and record.state != "created":
                        late.append(LatePin(record, ran_on, self._late_cause(record)))
                confirmed = not (needs_move and confirm_by_push)
                registry.set_cpus(record.container_id, target, confirmed=confirmed)
                if record.state == "created" and needs_move:
                    # Being created or started: the update may reach its spec alone, which
                    # a start that read the spec already does not see; sent again at its start.
                    moved = registry.get(record.container_id)
                    if moved is not None:
                        registry.put(replace(moved, moved_before_start=True))
            state.registry = registry
            state.overdue.clear()
            self._adoptions.synchronized({r.container_id: r for r in registry})
            if any(not r.confirmed for r in registry):
                state.pool.changed.set()  # the pusher sends them again until confirmed
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
        self._state.metrics.late_pinned(len(late))
        for pin in late:
            log.warning(
                "claimed container pinned late: it ran on other CPUs until now",
                container=pin.record.name,
                container_id=pin.record.container_id,
                claims=",".join(pin.record.claims),
                cpus=pin.record.cpus,
                ran_on=pin.ran_on or "any (no cpuset)",
                why=pin.cause,
            )

    def _late_cause(self, record: ContainerRecord) -> str:
        """Why a claimed container was not pinned; asked before the registry is replaced."""
        adopted = self._adoptions.cause(record.container_id)
        if adopted is not None:
            return adopted
        overdue = self._state.overdue.get(record.container_id)
        if overdue is not None:
            return overdue
        if self._state.registry.get(record.container_id) is not None:
            return "the runtime did not keep the cpuset of our CreateContainer answer"
        return "created while the plugin was not connected to the runtime (or before it started)"

    def _report_repinned(self, repinned: Sequence[ContainerRecord]) -> None:
        window = 0.0
        if self._disconnected_at is not None:
            window = time.monotonic() - self._disconnected_at
        self._disconnected_at = None
        self._synchronized = True
        self._state.metrics.resynchronized(window, len(repinned))
        if not repinned:
            return
        names = [r.name for r in repinned]
        shown = ",".join(names[:_NAMES_LOGGED])
        if len(names) > _NAMES_LOGGED:
            shown += f",... ({len(names) - _NAMES_LOGGED} more)"
        log.warning(
            "re-pinned containers the runtime ran on other CPUs",
            count=len(repinned),
            unpinned_window_s=round(window, 3),
            containers=shown,
        )
