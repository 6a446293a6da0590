"""The topology service's client: the allocator's source of the CPU inventory, and the api's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from dracpu.core import rpc
from dracpu.core.clients.base import ServiceClient
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc


class TopologyClient(ServiceClient):
    service = "topology service"

    def _make_stub(self, channel: grpc.aio.Channel) -> Any:
        return topology_pb2_grpc.TopologyStub(channel)

    async def inventory(self, *, rediscover: bool = False) -> topology_pb2.Inventory:
        """The CPU inventory; with `rediscover`, after the service re-read sysfs (CPUs may have
        gone offline or come back since it started)."""
        if rediscover:
            reply: topology_pb2.Inventory = await self.unary(
                "Topology.Rediscover",
                lambda stub, t: stub.Rediscover(
                    topology_pb2.RediscoverRequest(), timeout=t, wait_for_ready=self.wait_for_ready
                ),
            )
        else:
            reply = await self.unary(
                "Topology.GetInventory",
                lambda stub, t: stub.GetInventory(
                    topology_pb2.GetInventoryRequest(),
                    timeout=t,
                    wait_for_ready=self.wait_for_ready,
                ),
            )
        return reply

    async def watch_inventory(self) -> AsyncIterator[topology_pb2.Inventory]:
        """The inventory now and at every change; a topology service of an older release
        raises `UnimplementedError`."""
        call = self.stub.WatchInventory(
            topology_pb2.WatchInventoryRequest(), wait_for_ready=self.wait_for_ready
        )
        async for inventory in rpc.stream(call, "watch the topology"):
            yield inventory
