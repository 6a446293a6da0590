"""A stopped container's detach, sent again until it lands if the allocator did not take it.

When a claimed container stops, the nri-plugin tells the allocator (DetachContainer). If the
allocator is restarting, or too busy to answer within the call's deadline, that news would be
lost: the allocator would keep the container as running, and a claim unprepared after it would
keep its CPUs out of the shared pool (and out of the published devices) for good. Such
containers wait here, oldest first, and are sent again with backoff. A detach of a container the
allocator does not hold is a no-op there, so sending one twice is harmless.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from typing import Protocol

from dracpu.core.errors import DracpuError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff

log = get_logger(__name__)


class Detacher(Protocol):
    async def detach(self, container_id: str) -> None: ...


class PendingDetaches:
    """Stopped containers the allocator has not been told of yet; see the module docstring."""

    def __init__(self, allocator: Detacher) -> None:
        self._allocator = allocator
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self._wake = asyncio.Event()

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    async def detach(self, container_id: str) -> None:
        """Tell the allocator a container stopped; one it does not take waits here."""
        try:
            await self._allocator.detach(container_id)
        except DracpuError as exc:
            log.warning("detach failed; sending it again", container=container_id, error=str(exc))
            self.add(container_id)

    def add(self, container_id: str) -> None:
        self._pending[container_id] = None
        self._wake.set()

    def settled(self, live: Container[str]) -> None:
        """The allocator detached every container not in `live` (a reconcile): those are
        done."""
        for container_id in [c for c in self._pending if c not in live]:
            del self._pending[container_id]

    async def run(self, retry_delay: float = 0.5, max_delay: float = 10.0) -> None:
        """Forever: send every pending detach again, oldest first; back off while the
        allocator refuses, up to `max_delay` between rounds."""
        backoff = Backoff(initial=retry_delay, maximum=max_delay)
        delay = backoff.next_delay()
        while True:
            await self._wake.wait()
            await asyncio.sleep(delay)
            for container_id in list(self._pending):
                try:
                    await self._allocator.detach(container_id)
                except DracpuError as exc:
                    delay = backoff.next_delay()
                    log.info(2, "detach failed again", container=container_id, error=str(exc),
                             retry_s=delay)  # fmt: skip
                    break
                self._pending.pop(container_id, None)
                log.info(2, "container detached on a later try", container=container_id)
            else:
                backoff.reset()
                delay = backoff.next_delay()
                if not self._pending:
                    self._wake.clear()
