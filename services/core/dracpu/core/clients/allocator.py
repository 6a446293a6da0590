"""The allocator's client, the one every caller uses: the dra-plugin (prepare, unprepare and
the lists, retried across allocator restarts), the nri-plugin (the container calls and the
shared pool, one try each within the runtime's time) and the api (reads, on the read-only
socket).

Every call is keyed by claim UID or container ID and safe to repeat, so a call retried while
the allocator restarts (`deadline`) changes nothing twice. A call the allocator does not answer
within its deadline fails with `AllocatorUnavailableError` naming all the time it had and the
allocator's last reason; the dra-plugin returns it to the kubelet as UNAVAILABLE, which tries
again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc

from dracpu.core import rpc
from dracpu.core.clients.base import PeerUnansweredError, ServiceClient
from dracpu.core.cpuset import CPUSet
from dracpu.core.sockets import ALLOCATOR_READ_ONLY_SOCKET, socket_file
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc

_LIST_CLAIMS = "/dracpu.allocator.v1.Allocator/ListClaims"


class AllocatorUnavailableError(PeerUnansweredError):
    """The allocator did not answer within the time the call had: try again later."""


class ContainerAllocator(Protocol):
    """The allocator calls the nri-plugin makes (its tests stand in for the allocator here)."""

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


def _cpusets(claims: Mapping[str, CPUSet]) -> dict[str, str]:
    return {uid: cpus.format() for uid, cpus in claims.items()}


class AllocatorClient(ServiceClient):
    """The allocator's gRPC service. `deadline` (None: one try) is how long a call is retried
    by default while the allocator is unavailable; a method's `deadline` overrides it."""

    service = "allocator"
    unanswered = AllocatorUnavailableError

    def _make_stub(self, channel: grpc.aio.Channel) -> Any:
        return allocator_pb2_grpc.AllocatorStub(channel)

    def target(self) -> str:
        """An allocator of an older release has no read-only socket: when the read-only socket
        is absent and the allocator's own socket beside it exists, that one is dialled (an
        older allocator gives it the mode the read-only socket has now)."""
        path = Path(self.socket_path)
        if path.name == ALLOCATOR_READ_ONLY_SOCKET and not path.exists():
            full = path.with_name(socket_file("allocator"))
            if full.exists():
                return str(full)
        return self.socket_path

    # ---- claims: the dra-plugin ----------------------------------------------------------

    async def prepare(
        self, request: allocator_pb2.PrepareRequest, deadline: float | None = None
    ) -> allocator_pb2.PrepareResponse:
        reply: allocator_pb2.PrepareResponse = await self.unary(
            "allocator",
            lambda stub, t: stub.Prepare(request, timeout=t, wait_for_ready=self.wait_for_ready),
            deadline=deadline,
        )
        return reply

    async def unprepare(
        self, claim_uid: str, deadline: float | None = None
    ) -> allocator_pb2.UnprepareResponse:
        request = allocator_pb2.UnprepareRequest(claim_uid=claim_uid)
        reply: allocator_pb2.UnprepareResponse = await self.unary(
            "allocator",
            lambda stub, t: stub.Unprepare(request, timeout=t, wait_for_ready=self.wait_for_ready),
            deadline=deadline,
        )
        return reply

    # ---- reads: the dra-plugin and the api -------------------------------------------------

    async def list_devices(self, deadline: float | None = None) -> allocator_pb2.DeviceList:
        reply: allocator_pb2.DeviceList = await self.unary(
            "Allocator.ListDevices",
            lambda stub, t: stub.ListDevices(
                allocator_pb2.ListDevicesRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
            deadline=deadline,
        )
        return reply

    async def watch_devices(self) -> AsyncIterator[allocator_pb2.DeviceList]:
        """Every device list the allocator publishes, from the current one on; an allocator of
        an older release raises `UnimplementedError`. An allocator not answering fails it at
        once (the caller opens it again), rather than have it wait unbounded."""
        call = self.stub.WatchDevices(allocator_pb2.WatchDevicesRequest(), wait_for_ready=False)
        async for devices in rpc.stream(call, "watch the allocator's devices"):
            yield devices

    async def list_claims(
        self, namespace: str = "", deadline: float | None = None
    ) -> allocator_pb2.ClaimList:
        request = allocator_pb2.ListClaimsRequest(namespace=namespace)
        reply: allocator_pb2.ClaimList = await self.unary(
            "Allocator.ListClaims",
            lambda stub, t: stub.ListClaims(request, timeout=t, wait_for_ready=self.wait_for_ready),
            deadline=deadline,
        )
        return reply

    async def list_claims_serialized(self, namespace: str = "") -> bytes:
        """ListClaims with the reply left serialised, so an unchanged reply can be recognised
        without parsing it."""

        def invoke(stub: Any, timeout: float) -> Any:
            method = self._connected().channel.unary_unary(
                _LIST_CLAIMS,
                request_serializer=allocator_pb2.ListClaimsRequest.SerializeToString,
                response_deserializer=None,
            )
            return method(
                allocator_pb2.ListClaimsRequest(namespace=namespace),
                timeout=timeout,
                wait_for_ready=self.wait_for_ready,
            )

        return bytes(await self.unary("Allocator.ListClaims", invoke))

    async def claim(self, uid: str) -> allocator_pb2.Claim:
        request = allocator_pb2.GetClaimRequest(claim_uid=uid)
        reply: allocator_pb2.Claim = await self.unary(
            "Allocator.GetClaim",
            lambda stub, t: stub.GetClaim(request, timeout=t, wait_for_ready=self.wait_for_ready),
        )
        return reply

    async def summary(self) -> allocator_pb2.Summary:
        reply: allocator_pb2.Summary = await self.unary(
            "Allocator.GetSummary",
            lambda stub, t: stub.GetSummary(
                allocator_pb2.GetSummaryRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
        )
        return reply

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        reply: allocator_pb2.SharedPool = await self.unary(
            "get the shared pool",
            lambda stub, t: stub.GetSharedPool(
                allocator_pb2.GetSharedPoolRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
        )
        return reply

    async def watch_shared_pool(self) -> AsyncIterator[allocator_pb2.SharedPool]:
        """Every shared pool the allocator publishes, from the current one on."""
        call = self.stub.WatchSharedPool(
            allocator_pb2.WatchSharedPoolRequest(), wait_for_ready=self.wait_for_ready
        )
        async for pool in rpc.stream(call, "watch the shared pool"):
            yield pool

    # ---- containers: the nri-plugin --------------------------------------------------------

    async def attach(
        self,
        container: allocator_pb2.ContainerRef,
        claims: Mapping[str, CPUSet],
        timeout: float | None = None,
    ) -> allocator_pb2.AttachContainerResponse:
        """`timeout`: what the runtime's request leaves for it (default: the client's)."""
        request = allocator_pb2.AttachContainerRequest(
            container=container,
            claims=_cpusets(claims),
            # The nri-plugin sets a memory claim's memory nodes and hugepage limits.
            enforces_memory=True,
        )
        reply: allocator_pb2.AttachContainerResponse = await self.unary(
            f"attach container {container.container_id} to claims {sorted(claims)}",
            lambda stub, t: stub.AttachContainer(
                request, timeout=t, wait_for_ready=self.wait_for_ready
            ),
            timeout=timeout,
        )
        return reply

    async def detach(self, container_id: str) -> None:
        request = allocator_pb2.DetachContainerRequest(container_id=container_id)
        await self.unary(
            f"detach container {container_id}",
            lambda stub, t: stub.DetachContainer(
                request, timeout=t, wait_for_ready=self.wait_for_ready
            ),
        )

    async def reconcile(self, live_container_ids: Sequence[str]) -> list[str]:
        """Tell the allocator every live container; it detaches the ones it held as running
        that are gone, and says which. An older allocator without the call detaches nothing."""
        request = allocator_pb2.ReconcileContainersRequest(live_container_ids=live_container_ids)
        try:
            reply = await self.stub.ReconcileContainers(
                request, timeout=self.timeout, wait_for_ready=self.wait_for_ready
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return []
            raise rpc.error_of(exc, "reconcile containers") from None
        return list(reply.detached_container_ids)

    async def adopt(
        self, container: allocator_pb2.ContainerRef, claims: Mapping[str, CPUSet]
    ) -> allocator_pb2.AdoptResponse:
        request = allocator_pb2.AdoptRequest(container=container, claims=_cpusets(claims))
        reply: allocator_pb2.AdoptResponse = await self.unary(
            f"adopt claims of container {container.container_id}",
            lambda stub, t: stub.Adopt(request, timeout=t, wait_for_ready=self.wait_for_ready),
        )
        return reply
