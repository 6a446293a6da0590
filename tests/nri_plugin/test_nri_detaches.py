"""The nri-plugin's pending detaches: a stopped container's detach that the allocator did not
take is sent again, oldest first, with backoff, until it lands; a reconcile settles the ones it
covered."""

from __future__ import annotations

import asyncio

from harness.waits import eventually

from dracpu.core.errors import UnavailableError
from dracpu.nri_plugin.events.detaches import PendingDetaches


class Allocator:
    """Refuses the first `failures` detaches, then takes them; records what it took."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []
        self.taken: list[str] = []

    async def detach(self, container_id: str) -> None:
        self.calls.append(container_id)
        if self.failures:
            self.failures -= 1
            raise UnavailableError(f"detach container {container_id}: Deadline Exceeded")
        self.taken.append(container_id)


async def test_refused_detaches_are_sent_again_in_order_until_taken() -> None:
    allocator = Allocator(failures=2)
    detaches = PendingDetaches(allocator)
    task = asyncio.create_task(detaches.run(retry_delay=0.01, max_delay=0.02))
    try:
        detaches.add("c1")
        detaches.add("c2")
        await eventually(lambda: not detaches.pending, "both detaches taken", timeout=10)
        assert allocator.taken == ["c1", "c2"]
        assert allocator.calls == ["c1", "c1", "c1", "c2"]  # the oldest first, every round
        detaches.add("c3")  # the loop sleeps until there is something again
        await eventually(lambda: allocator.taken[-1:] == ["c3"], "a later one taken", timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_reconcile_settles_the_containers_it_did_not_find_live() -> None:
    detaches = PendingDetaches(Allocator(failures=0))
    for container_id in ("gone", "back", "also-gone"):
        detaches.add(container_id)
    detaches.settled({"back", "another"})
    assert detaches.pending == ["back"]
