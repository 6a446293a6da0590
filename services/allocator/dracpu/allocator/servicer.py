"""`dracpu.allocator.v1.Allocator` over gRPC: the servicer of the mutating socket and the
read-only one. Each handler turns its request into the node allocator's terms (`wire`) and the
answer back; every refusal leaves as a precise status (dracpu.core.rpc.rpc_errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from dracpu.allocator import claims
from dracpu.allocator.live.node import NodeAllocator
from dracpu.allocator.rpc import wire
from dracpu.core import names
from dracpu.core.errors import ForbiddenError, InvalidInputError, NotFoundError
from dracpu.core.rpc import rpc_errors
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

SERVICE_NAME = "dracpu.allocator.v1.Allocator"
API_VERSION = "dracpu.allocator.v1"


class AllocatorServicer(allocator_pb2_grpc.AllocatorServicer):  # type: ignore[misc]
    def __init__(self, node: NodeAllocator) -> None:
        self.node = node

    @rpc_errors
    async def ListDevices(
        self, request: allocator_pb2.ListDevicesRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.DeviceList:
        model, generation = self.node.devices
        return wire.device_list(model, generation, self.node.device_health)

    @rpc_errors
    async def WatchDevices(
        self, request: allocator_pb2.WatchDevicesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[allocator_pb2.DeviceList]:
        last = b""
        while True:
            changed = self.node.devices_changed()
            model, generation = self.node.devices
            current = wire.device_list(model, generation, self.node.device_health)
            encoded = current.SerializeToString(deterministic=True)
            if encoded != last:
                last = encoded
                yield current
            await changed.wait()

    @rpc_errors
    async def Prepare(
        self, request: allocator_pb2.PrepareRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.PrepareResponse:
        outcome = await self.node.prepare(wire.prepare_input(request))
        return wire.prepare_response(outcome)

    @rpc_errors
    async def Unprepare(
        self, request: allocator_pb2.UnprepareRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.UnprepareResponse:
        if not request.claim_uid:
            raise InvalidInputError("claim uid is empty")
        names.check_uid(request.claim_uid)
        record = await self.node.unprepare(request.claim_uid)
        if record is None:
            return allocator_pb2.UnprepareResponse(was_prepared=False)
        return allocator_pb2.UnprepareResponse(
            was_prepared=True, released_cpus=record.cpus.format()
        )

    @rpc_errors
    async def GetClaim(
        self, request: allocator_pb2.GetClaimRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.Claim:
        record = self.node.state.records.get(request.claim_uid)
        if record is None:
            raise NotFoundError(
                f"claim {names.echo(request.claim_uid)} is not prepared on this node"
            )
        return wire.claim_to_proto(record)

    @rpc_errors
    async def ListClaims(
        self, request: allocator_pb2.ListClaimsRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.ClaimList:
        state = self.node.state
        return allocator_pb2.ClaimList(
            claims=[wire.claim_to_proto(r) for r in claims.list_claims(state, request.namespace)],
            generation=state.claims_generation,
        )

    @rpc_errors
    async def GetSharedPool(
        self, request: allocator_pb2.GetSharedPoolRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.SharedPool:
        return wire.pool_to_proto(self.node.shared_pool())

    @rpc_errors
    async def WatchSharedPool(
        self, request: allocator_pb2.WatchSharedPoolRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[allocator_pb2.SharedPool]:
        queue = self.node.subscribe()
        try:
            current = self.node.shared_pool()
            yield wire.pool_to_proto(current)
            last = current.generation
            while True:
                view = await queue.get()
                if view.generation <= last:
                    continue
                last = view.generation
                yield wire.pool_to_proto(view)
        finally:
            self.node.unsubscribe(queue)

    @rpc_errors
    async def AttachContainer(
        self, request: allocator_pb2.AttachContainerRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.AttachContainerResponse:
        container = wire.container_from_proto(request.container)
        wire.check_presented(request.claims)
        outcome = await self.node.attach(
            container, claims.parse_claim_cpus(request.claims), request.enforces_memory
        )
        return allocator_pb2.AttachContainerResponse(
            cpus=outcome.cpus.format(),
            shared_pool=wire.pool_to_proto(self.node.shared_pool()),
            newly_bound=outcome.newly_bound,
            memory_nodes=outcome.memory_nodes.format(),
            hugepage_limits=outcome.hugepage_limits,
            shared_pool_claims=outcome.shared_pool_claims,
        )

    @rpc_errors
    async def DetachContainer(
        self, request: allocator_pb2.DetachContainerRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.DetachContainerResponse:
        if not request.container_id:
            raise InvalidInputError("container id is empty")
        names.check_bounded(request.container_id, "container id")
        return allocator_pb2.DetachContainerResponse(
            claim_uids=await self.node.detach(request.container_id)
        )

    @rpc_errors
    async def ReconcileContainers(
        self,
        request: allocator_pb2.ReconcileContainersRequest,
        context: grpc.aio.ServicerContext,
    ) -> allocator_pb2.ReconcileContainersResponse:
        live = set(request.live_container_ids)
        for container_id in live:
            names.check_bounded(container_id, "container id")
        detached = await self.node.reconcile(live)
        return allocator_pb2.ReconcileContainersResponse(detached_container_ids=detached)

    @rpc_errors
    async def Adopt(
        self, request: allocator_pb2.AdoptRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.AdoptResponse:
        container = wire.container_from_proto(request.container)
        wire.check_presented(request.claims)
        outcome = await self.node.adopt(container, claims.parse_claim_cpus(request.claims))
        return wire.adopt_response(outcome, self.node.shared_pool())

    @rpc_errors
    async def GetSummary(
        self, request: allocator_pb2.GetSummaryRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.Summary:
        return wire.summary_to_proto(claims.summary(self.node.state))


class ReadOnlyAllocatorServicer(AllocatorServicer):
    """The allocator's reads only, for the read-only socket the api uses: every mutating call
    is refused with PERMISSION_DENIED, so a caller that can reach only this socket (the
    network-facing api) cannot prepare, unprepare, attach, detach or adopt."""

    @staticmethod
    def _refuse(method: str) -> ForbiddenError:
        return ForbiddenError(
            f"{method} is not served on the allocator's read-only socket; only the dra-plugin "
            f"and nri-plugin, on the allocator's own socket, may change allocation state"
        )

    @rpc_errors
    async def Prepare(
        self, request: allocator_pb2.PrepareRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.PrepareResponse:
        raise self._refuse("Prepare")

    @rpc_errors
    async def Unprepare(
        self, request: allocator_pb2.UnprepareRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.UnprepareResponse:
        raise self._refuse("Unprepare")

    @rpc_errors
    async def AttachContainer(
        self, request: allocator_pb2.AttachContainerRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.AttachContainerResponse:
        raise self._refuse("AttachContainer")

    @rpc_errors
    async def DetachContainer(
        self, request: allocator_pb2.DetachContainerRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.DetachContainerResponse:
        raise self._refuse("DetachContainer")

    @rpc_errors
    async def Adopt(
        self, request: allocator_pb2.AdoptRequest, context: grpc.aio.ServicerContext
    ) -> allocator_pb2.AdoptResponse:
        raise self._refuse("Adopt")

    @rpc_errors
    async def ReconcileContainers(
        self,
        request: allocator_pb2.ReconcileContainersRequest,
        context: grpc.aio.ServicerContext,
    ) -> allocator_pb2.ReconcileContainersResponse:
        raise self._refuse("ReconcileContainers")
