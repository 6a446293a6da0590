"""The allocator calls the NRI plugin makes, over gRPC. Errors arrive as DracpuError."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

import grpc

from dracpu.core import rpc
from dracpu.core.cpuset import CPUSet
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

# An allocator call's timeout when no runtime request bounds it (and the least one gets).
CALL_TIMEOUT = 1.5


class AllocatorAPI(Protocol):
    async def attach(
        self,
        container: allocator_pb2.ContainerRef,
        claims: Mapping[str, CPUSet],
        timeout: float | None = None,
    ) -> allocator_pb2.AttachContainerResponse: ...

    async def detach(self, container_id: str) -> None: ...

    async def reconcile(self, live_container_ids: Sequence[str]) -> list[str]: ...

    async def adopt(
        self, container: allocator_pb2.ContainerRef, claims: Mapping[str, CPUSet]
    ) -> allocator_pb2.AdoptResponse: ...

    async def shared_pool(self) -> allocator_pb2.SharedPool: ...

    def watch_shared_pool(self) -> AsyncIterator[allocator_pb2.SharedPool]: ...


class AllocatorClient:
    """AllocatorAPI over a unix-socket channel; gRPC reconnects by itself. Calls wait for the
    channel (up to their timeout) instead of failing at once while it is still backing off
    from an allocator restart: the allocator may already serve again."""

    def __init__(self, socket_path: str, timeout: float = CALL_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.aio.Channel = rpc.channel(socket_path)
        self._stub = allocator_pb2_grpc.AllocatorStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def attach(
        self,
        container: allocator_pb2.ContainerRef,
        claims: Mapping[str, CPUSet],
        timeout: float | None = None,
    ) -> allocator_pb2.AttachContainerResponse:
        """`timeout`: what the runtime's request leaves for it (default: the client's)."""
        request = allocator_pb2.AttachContainerRequest(
            container=container,
            claims={uid: cpus.format() for uid, cpus in claims.items()},
            # This plugin sets a memory claim's memory nodes and hugepage limits.
            enforces_memory=True,
        )
        reply: allocator_pb2.AttachContainerResponse = await rpc.call(
            self._stub.AttachContainer(
                request, timeout=timeout or self.timeout, wait_for_ready=True
            ),
            f"attach container {container.container_id} to claims {sorted(claims)}",
        )
        return reply

    async def detach(self, container_id: str) -> None:
        request = allocator_pb2.DetachContainerRequest(container_id=container_id)
        await rpc.call(
            self._stub.DetachContainer(request, timeout=self.timeout, wait_for_ready=True),
            f"detach container {container_id}",
        )

    async def reconcile(self, live_container_ids: Sequence[str]) -> list[str]:
        """Tell the allocator every live container; it detaches the ones it held as running
        that are gone. An older allocator without the call detaches nothing."""
        request = allocator_pb2.ReconcileContainersRequest(live_container_ids=live_container_ids)
        try:
            reply = await self._stub.ReconcileContainers(
                request, timeout=self.timeout, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return []
            raise rpc.error_of(exc, "reconcile containers") from None
        return list(reply.detached_container_ids)

    async def adopt(
        self, container: allocator_pb2.ContainerRef, claims: Mapping[str, CPUSet]
    ) -> allocator_pb2.AdoptResponse:
        request = allocator_pb2.AdoptRequest(
            container=container, claims={uid: cpus.format() for uid, cpus in claims.items()}
        )
        reply: allocator_pb2.AdoptResponse = await rpc.call(
            self._stub.Adopt(request, timeout=self.timeout, wait_for_ready=True),
            f"adopt claims of container {container.container_id}",
        )
        return reply

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        reply: allocator_pb2.SharedPool = await rpc.call(
            self._stub.GetSharedPool(
                allocator_pb2.GetSharedPoolRequest(), timeout=self.timeout, wait_for_ready=True
            ),
            "get the shared pool",
        )
        return reply

    async def watch_shared_pool(self) -> AsyncIterator[allocator_pb2.SharedPool]:
        call = self._stub.WatchSharedPool(
            allocator_pb2.WatchSharedPoolRequest(), wait_for_ready=True
        )
        async for pool in rpc.stream(call, "watch the shared pool"):
            yield pool
