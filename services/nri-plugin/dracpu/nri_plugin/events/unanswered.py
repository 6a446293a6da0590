"""What the allocator did not answer when the plugin met the runtime's containers, asked again
until it does.

At a Synchronize the plugin reports every running claimed container to the allocator (Adopt)
and tells it which containers no longer run (Reconcile); a container first met at its start is
adopted the same way. An allocator that is restarting, or too busy to answer within the call's
deadline, misses them, and nothing else would tell it:

- a claimed container it did not adopt is left out of the registry, so its cpuset is not
  enforced and its stop is an event for an unknown container;
- a container that stopped while the plugin was away stays attached there, and a claim
  unprepared after it is held as still in use: its CPUs stay out of the shared pool and out of
  the published devices for good.

Both wait here and are asked again with backoff once the allocator answers: each container
still waiting is adopted (and moved onto its cpuset as a container adopted at its start is),
then the allocator is reconciled with the containers the registry holds as running. One that
stops before its adoption is detached instead (a no-op where the allocator does not hold it).
A Synchronize starts it all again: what it cannot ask comes back here.
"""

from __future__ import annotations

import asyncio

from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.nri_plugin.events.adoption import UNANSWERED, LateAdoptions
from dracpu.nri_plugin.events.detaches import PendingDetaches
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)


class Unanswered:
    """Adoptions and the reconcile the allocator has not answered; see the module docstring."""

    def __init__(self, adoptions: LateAdoptions, detaches: PendingDetaches) -> None:
        self._adoptions = adoptions  # adopts as a container first met at its start is
        self._state = adoptions.state
        self._allocator = adoptions.allocator
        self._detaches = detaches
        self._adopts: dict[str, tuple[api_pb2.PodSandbox, api_pb2.Container]] = {}
        self._reconcile = False
        self._wake = asyncio.Event()

    @property
    def adopts(self) -> list[str]:
        """The containers waiting for their adoption, oldest first."""
        return list(self._adopts)

    @property
    def reconcile_owed(self) -> bool:
        return self._reconcile

    def synchronizing(self) -> None:
        """A Synchronize asks for all of it again. Called under the lock."""
        self._adopts.clear()
        self._reconcile = False

    def adopt(self, pod: api_pb2.PodSandbox, ctr: api_pb2.Container) -> None:
        """A claimed container the allocator did not adopt. Called under the lock."""
        self._adopts[ctr.id] = (pod, ctr)
        self._wake.set()

    def reconcile(self) -> None:
        """A reconcile the allocator did not answer. Called under the lock."""
        self._reconcile = True
        self._wake.set()

    async def reconcile_now(self, live: list[str], *, later: bool = False) -> bool:
        """The allocator told which containers run (`live`), the others detached there; False
        when it did not answer, and the reconcile then waits here. Called under the lock."""
        try:
            gone = await self._allocator.reconcile(live)
        except UNANSWERED as exc:
            log.warning("allocator did not answer the reconcile; asked again once it answers",
                        error=str(exc))  # fmt: skip
            self.reconcile()
            return False
        except DracpuError as exc:
            log.error("reconcile with the allocator failed", error=str(exc))
            self._reconcile = False
            return True
        self._reconcile = False
        self._detaches.settled(set(live))  # every container not live is detached now
        if later:
            log.warning("reconciled with the allocator on a later try",
                        detached=",".join(gone[:20]), count=len(gone))  # fmt: skip
        elif gone:
            log.info(2, "containers stopped while disconnected detached", containers=",".join(gone))
        return True

    async def stopped(self, container_id: str) -> bool:
        """A container stopped or was removed: if it waited for its adoption, the allocator
        is told it no longer runs (it may hold it from before). Called under the lock."""
        if self._adopts.pop(container_id, None) is None:
            return False
        await self._detaches.detach(container_id)
        return True

    async def run(self, retry_delay: float = 0.5, max_delay: float = 10.0) -> None:
        """Forever: once something waits and the allocator answers, ask for it again."""
        backoff = Backoff(initial=retry_delay, maximum=max_delay)
        while True:
            await self._wake.wait()
            await asyncio.sleep(backoff.next_delay())
            if await self._ask_again():
                backoff.reset()
                if not self._adopts and not self._reconcile:
                    self._wake.clear()

    async def _ask_again(self) -> bool:
        """True when everything that waited was answered."""
        try:
            # Not under the lock: the runtime's requests are not held while it is silent.
            await self._allocator.shared_pool()
        except DracpuError as exc:
            log.info(2, "allocator still not answering", error=str(exc))
            return False
        async with self._state.lock:
            for container_id, (pod, ctr) in list(self._adopts.items()):
                if self._state.registry.get(container_id) is not None:
                    del self._adopts[container_id]  # adopted meanwhile (at its start)
                    continue
                try:
                    await self._adoptions.adopt(
                        pod, ctr, "a later try", why="the allocator had not answered its adoption"
                    )
                except UNANSWERED as exc:
                    log.info(2, "adopt not answered again", container=container_id, error=str(exc))
                    return False
                del self._adopts[container_id]
            if self._reconcile:
                live = [record.container_id for record in self._state.registry]
                if not await self.reconcile_now(live, later=True):
                    return False
        return True
