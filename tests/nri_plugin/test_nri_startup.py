"""Before registering with the runtime the plugin waits for the allocator, so the runtime never
sees a Synchronize fail because the allocator is still starting."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from dracpu.core.errors import UnavailableError
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.pb.allocator.v1 import allocator_pb2


@dataclass
class StartingAllocator:
    unavailable_for: int  # calls answered UNAVAILABLE before the first pool
    calls: int = 0

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        self.calls += 1
        if self.calls <= self.unavailable_for:
            raise UnavailableError("the allocator is starting")
        return allocator_pb2.SharedPool(cpus="0-7", generation=4)


async def test_waits_until_the_allocator_answers_then_knows_the_pool() -> None:
    allocator = StartingAllocator(unavailable_for=3)
    plugin = CPUPlugin(allocator, unsolicited=UnsolicitedMode.OFF)  # type: ignore[arg-type]
    await asyncio.wait_for(plugin.wait_for_allocator(retry_delay=0.001, max_delay=0.01), 5)
    assert allocator.calls == 4
    assert plugin.shared_pool is not None and plugin.shared_pool.format() == "0-7"
    assert plugin.pool_generation == 4


async def test_an_allocator_that_answers_at_once_costs_one_call() -> None:
    allocator = StartingAllocator(unavailable_for=0)
    plugin = CPUPlugin(allocator, unsolicited=UnsolicitedMode.OFF)  # type: ignore[arg-type]
    await plugin.wait_for_allocator()
    assert allocator.calls == 1
