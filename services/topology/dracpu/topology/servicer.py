"""The topology service's gRPC servicer: `dracpu.topology.v1.Topology` over the Inventory."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from dracpu.core.rpc import rpc_errors
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc
from dracpu.topology.inventory import Inventory


class TopologyServicer(topology_pb2_grpc.TopologyServicer):  # type: ignore[misc]
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    @rpc_errors
    async def GetInventory(
        self, request: topology_pb2.GetInventoryRequest, context: grpc.aio.ServicerContext
    ) -> topology_pb2.Inventory:
        return self._inventory.message

    @rpc_errors
    async def Rediscover(
        self, request: topology_pb2.RediscoverRequest, context: grpc.aio.ServicerContext
    ) -> topology_pb2.Inventory:
        return await self._inventory.rediscover()

    @rpc_errors
    async def WatchInventory(
        self, request: topology_pb2.WatchInventoryRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[topology_pb2.Inventory]:
        while True:
            changed = self._inventory.changes.next()
            yield self._inventory.watched()
            await changed.wait()
