"""Pool pushes: when the shared pool shrinks or grows, every shared container is moved onto it,
and every claimed container with the pool included onto its claims' CPUs and the new pool.

The moves ride on the answer to the runtime's next CreateContainer (solicited), and, where the
runtime is safe for it (dracpu.nri_plugin.transport.compat), go out at once as the plugin's own
UpdateContainers calls, in batches paced to the runtime's cost (dracpu.nri_plugin.state.pacing).
Until every shared container is confirmed on the pool, the pushes are sent again with backoff;
there, a solicited move counts as confirmed only once a push of the same cpuset was answered,
since the runtime reports nothing of the moves it applies with an answer. A claimed container
that a Synchronize answer pinned (it had run on other CPUs) is pushed to its claims' CPUs the
same way until the runtime confirms them (dracpu.nri_plugin.events.resync).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.nri_plugin.state.conversions import record_update
from dracpu.nri_plugin.state.plugin_state import PluginState
from dracpu.nri_plugin.transport.ttrpc import DEADLINE_EXCEEDED, TtrpcError
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

# Sends plugin-initiated updates, waiting at most the given seconds for the answer; returns
# the ones the runtime could not apply. Raises TtrpcError (remote, or a local timeout).
PushUpdates = Callable[
    [Sequence[api_pb2.ContainerUpdate], float], Awaitable[list[api_pb2.ContainerUpdate]]
]


class Outcome(Enum):
    APPLIED = "applied"
    FAILED = "failed"  # the runtime listed it as failed: it runs on what it had
    UNKNOWN = "unknown"  # no answer: it may run on either cpuset


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


class PoolPushes:
    """The shared containers' moves onto the shared pool; see the module docstring."""

    def __init__(self, state: PluginState) -> None:
        self.stats = PushStats()
        self._state = state
        self._push: PushUpdates | None = None

    def set_pusher(self, push: PushUpdates | None) -> None:
        self._push = push

    def solicited(self, exclude: str = "") -> list[api_pb2.ContainerUpdate]:
        """The updates of every shared container not on the current pool but `exclude`, for
        the answer to a runtime request. Called under the lock.

        The runtime applies them after the answer and tells nobody how that went: one it
        cannot apply (a container whose task does not answer in time under load) is only
        logged on its side, and the container runs on its old cpuset. Where the plugin may
        send its own UpdateContainers, whose answer lists the updates that failed, they are
        recorded as not confirmed and the pusher sends them again (harmless where they were
        applied) until the runtime has confirmed each; elsewhere nothing could confirm them,
        and they are recorded as applied."""
        state = self._state
        pool = state.pool.cpus
        if pool is None:
            return []
        stale = state.registry.stale(pool, exclude)
        confirm = self._push is not None and state.unsolicited.enabled
        updates = [record_update(r, pool) for r in stale]
        for record in stale:
            state.registry.set_cpus(record.container_id, record.target(pool), confirmed=not confirm)
        if stale and confirm:
            state.pool.changed.set()  # wakes the pusher (run)
        return updates

    async def run(self, retry_delay: float = 0.5, max_delay: float = 10.0) -> None:
        """Forever: when the pool changes, move shared containers with UpdateContainers
        (only where the runtime is safe for it; otherwise the next solicited call does).
        Until every shared container is confirmed on the pool, push again with backoff."""
        changed = self._state.pool.changed
        backoff = Backoff(initial=retry_delay, maximum=max_delay)
        while True:
            await changed.wait()
            changed.clear()
            result = await self.push_once()
            if result.pending and self._push is not None and self._state.unsolicited.enabled:
                # Not converged (unknown or failed outcomes): try again unless a new pool
                # change wakes us first (asyncio.timeout: see transport.ttrpc's call).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff.next_delay()):
                        await changed.wait()
                changed.set()
            else:
                backoff.reset()

    async def push_once(self) -> PushResult:
        """One fan-out of the current pool to the shared containers not confirmed on it.

        Each container's outcome is recorded: applied (the runtime answered without listing
        it), failed (listed as failed: it still runs on what it had), unknown (no answer in
        time, or the connection went: it may run on either). Failed and unknown ones stay
        stale and are sent again by the next push.
        """
        state = self._state
        push = self._push
        if push is None or not state.unsolicited.enabled:
            return PushResult()
        async with state.lock:
            pool = state.pool.cpus
            if pool is None:
                return PushResult()
            planned = {r.container_id: r for r in state.registry.stale(pool)}
        if not planned:
            return PushResult()
        targets = {cid: record.target(pool) for cid, record in planned.items()}
        updates = {cid: record_update(record, pool) for cid, record in planned.items()}
        started = time.perf_counter()
        outcomes: dict[str, Outcome] = {}
        ids = sorted(planned)
        position = 0
        while position < len(ids):
            size = state.pacer.batch_size()
            batch = ids[position : position + size]
            position += size
            await self._push_batch(push, batch, updates, outcomes)
        result = PushResult()
        async with state.lock:
            for cid, before in planned.items():
                outcome = outcomes.get(cid, Outcome.UNKNOWN)
                if outcome is Outcome.APPLIED:
                    state.registry.set_cpus(cid, targets[cid], expected=before)
                    result.applied += 1
                elif outcome is Outcome.FAILED:
                    result.failed += 1
                else:
                    state.registry.set_cpus(cid, targets[cid], expected=before, confirmed=False)
                    result.unknown += 1
            result.pending = len(state.registry.stale(pool))
        elapsed = time.perf_counter() - started
        self._count(len(planned), result, elapsed)
        log.info(
            2,
            "pushed shared pool",
            cpus=pool,
            containers=len(planned),
            applied=result.applied,
            failed=result.failed,
            unknown=result.unknown,
            pending=result.pending,
            batch=state.pacer.batch_size(),
            cost_ms=round(state.pacer.cost * 1e3, 1),
            ms=round(elapsed * 1e3, 1),
        )
        return result

    def _count(self, updates: int, result: PushResult, elapsed: float) -> None:
        stats = self.stats
        stats.pushes += 1
        stats.updates += updates
        stats.applied += result.applied
        stats.failed += result.failed
        stats.unknown += result.unknown
        stats.last_push_seconds = elapsed
        stats.pending = result.pending
        self._state.metrics.pushed(
            result.applied, result.failed, result.unknown, result.pending, self._state.pacer.cost
        )

    async def _push_batch(
        self,
        push: PushUpdates,
        batch: Sequence[str],
        updates: Mapping[str, api_pb2.ContainerUpdate],
        outcomes: dict[str, Outcome],
    ) -> None:
        pacer = self._state.pacer
        deadline = pacer.deadline(len(batch))
        started = time.perf_counter()
        try:
            failed = await push([updates[cid] for cid in batch], deadline)
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
                        cpus=updates[batch[0]].linux.resources.cpu.cpus,
                        error=exc.message,
                    )
                    return
                half = len(batch) // 2
                await self._push_batch(push, batch[:half], updates, outcomes)
                await self._push_batch(push, batch[half:], updates, outcomes)
                return
            if exc.code == DEADLINE_EXCEEDED:
                pacer.observe_timeout()
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
        pacer.observe(len(batch), time.perf_counter() - started)
        failed_ids = {u.container_id for u in failed}
        for cid in batch:
            outcomes[cid] = Outcome.FAILED if cid in failed_ids else Outcome.APPLIED
