"""Clients for the four services the api reads, each call bounded by a short deadline.

Every failure except "not found" becomes `BackendUnavailable` naming the service and the
reason, and is remembered as the service's last error for /v1/health.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dracpu.api.deadlines import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from dracpu.core.errors import DracpuError, NotFoundError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.rpc import DEFAULT_SOCKETS, call, channel
from dracpu.core.sockets import ALLOCATOR_READ_ONLY_SOCKET, socket_file
from dracpu.pb.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2, nri_plugin_pb2_grpc
from dracpu.pb.topology.v1 import topology_pb2, topology_pb2_grpc

log = get_logger(__name__)

T = TypeVar("T")

# Slack on top of the gRPC deadline before the api gives up on its own.
_BACKSTOP = 0.5


class BackendUnavailable(UnavailableError):
    """A service could not answer; `service` says which."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(f"{service} unavailable: {reason}")
        self.service = service
        self.reason = reason


class Backend:
    """One peer service: its socket, a channel opened on first use, the last error seen."""

    def __init__(self, service: str, socket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.service = service
        self.socket = socket
        self.timeout = timeout
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def channel(self) -> grpc.aio.Channel:
        # A grpc.aio channel belongs to the event loop that opened it.
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            self._channel = channel(self.target())
            self._loop = loop
        return self._channel

    def target(self) -> str:
        """The socket to dial. An allocator of an older release has no read-only socket: when
        the allocator's read-only socket is absent and its own socket beside it exists, that one
        is used (an older allocator gives it the mode the read-only socket has now)."""
        path = Path(self.socket)
        if path.name == ALLOCATOR_READ_ONLY_SOCKET and not path.exists():
            full = path.with_name(socket_file("allocator"))
            if full.exists():
                return str(full)
        return self.socket

    async def close(self) -> None:
        if self._channel is not None and self._loop is asyncio.get_running_loop():
            await self._channel.close()
        self._channel = None
        self._loop = None

    async def request(
        self, what: str, invoke: Callable[[grpc.aio.Channel, float], Awaitable[T]]
    ) -> T:
        """Run one unary call with the deadline; map every failure but NotFound to unavailable."""
        try:
            async with asyncio.timeout(self.timeout + _BACKSTOP):
                return await call(invoke(self.channel(), self.timeout), what)
        except NotFoundError:
            raise
        except DracpuError as exc:
            raise self._failed(str(exc)) from None
        except TimeoutError:
            raise self._failed(f"{what}: no answer within {self.timeout:g}s") from None
        except Exception as exc:  # a broken channel must not turn into a 500
            raise self._failed(f"{what}: {type(exc).__name__}: {exc}") from None

    def _failed(self, reason: str) -> BackendUnavailable:
        if self.target() != self.socket:
            self._channel = None  # dial again: the allocator may have been upgraded meanwhile
        self.last_error = reason
        self.last_error_at = time.time()
        log.info(2, "backend call failed", service=self.service, error=reason)
        return BackendUnavailable(self.service, reason)

    # ---- what every dracpu service serves --------------------------------------------------

    async def health(self) -> str:
        """The gRPC health status name of the whole server ("" service)."""

        def invoke(chan: grpc.aio.Channel, timeout: float) -> Awaitable[Any]:
            stub = health_pb2_grpc.HealthStub(chan)
            return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)  # type: ignore[no-any-return]

        reply = await self.request("Health.Check", invoke)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def version(self) -> info_pb2.VersionInfo:
        return await self.request(
            "Info.GetVersion",
            lambda chan, timeout: info_pb2_grpc.InfoStub(chan).GetVersion(
                info_pb2.GetVersionRequest(), timeout=timeout
            ),
        )

    async def metrics(self) -> str:
        reply = await self.request(
            "Info.GetMetrics",
            lambda chan, timeout: info_pb2_grpc.InfoStub(chan).GetMetrics(
                info_pb2.GetMetricsRequest(), timeout=timeout
            ),
        )
        return str(reply.text)

    async def loops(self) -> info_pb2.LoopList:
        """The service's supervised loops (`Info.GetLoops`)."""
        return await self.request(
            "Info.GetLoops",
            lambda chan, timeout: info_pb2_grpc.InfoStub(chan).GetLoops(
                info_pb2.GetLoopsRequest(), timeout=timeout
            ),
        )


class TopologyBackend(Backend):
    async def inventory(self) -> topology_pb2.Inventory:
        return await self.request(
            "Topology.GetInventory",
            lambda chan, timeout: topology_pb2_grpc.TopologyStub(chan).GetInventory(
                topology_pb2.GetInventoryRequest(), timeout=timeout
            ),
        )


class AllocatorBackend(Backend):
    def _stub(self, chan: grpc.aio.Channel) -> Any:
        return allocator_pb2_grpc.AllocatorStub(chan)

    async def devices(self) -> allocator_pb2.DeviceList:
        return await self.request(
            "Allocator.ListDevices",
            lambda chan, timeout: self._stub(chan).ListDevices(
                allocator_pb2.ListDevicesRequest(), timeout=timeout
            ),
        )

    async def claims(self, namespace: str = "") -> allocator_pb2.ClaimList:
        return await self.request(
            "Allocator.ListClaims",
            lambda chan, timeout: self._stub(chan).ListClaims(
                allocator_pb2.ListClaimsRequest(namespace=namespace), timeout=timeout
            ),
        )

    async def claims_bytes(self, namespace: str = "") -> bytes:
        """ListClaims with the reply left serialised, so an unchanged reply can be recognised."""

        def invoke(chan: grpc.aio.Channel, timeout: float) -> Awaitable[bytes]:
            method = chan.unary_unary(
                "/dracpu.allocator.v1.Allocator/ListClaims",
                request_serializer=allocator_pb2.ListClaimsRequest.SerializeToString,
                response_deserializer=None,
            )
            return method(allocator_pb2.ListClaimsRequest(namespace=namespace), timeout=timeout)  # type: ignore[no-any-return]

        return bytes(await self.request("Allocator.ListClaims", invoke))

    async def claim(self, uid: str) -> allocator_pb2.Claim:
        return await self.request(
            "Allocator.GetClaim",
            lambda chan, timeout: self._stub(chan).GetClaim(
                allocator_pb2.GetClaimRequest(claim_uid=uid), timeout=timeout
            ),
        )

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        return await self.request(
            "Allocator.GetSharedPool",
            lambda chan, timeout: self._stub(chan).GetSharedPool(
                allocator_pb2.GetSharedPoolRequest(), timeout=timeout
            ),
        )

    async def summary(self) -> allocator_pb2.Summary:
        return await self.request(
            "Allocator.GetSummary",
            lambda chan, timeout: self._stub(chan).GetSummary(
                allocator_pb2.GetSummaryRequest(), timeout=timeout
            ),
        )


class DRAPluginBackend(Backend):
    async def status(self) -> dra_plugin_pb2.PluginStatus:
        return await self.request(
            "DRAPluginView.GetStatus",
            lambda chan, timeout: dra_plugin_pb2_grpc.DRAPluginViewStub(chan).GetStatus(
                dra_plugin_pb2.GetStatusRequest(), timeout=timeout
            ),
        )


class NRIPluginBackend(Backend):
    def _stub(self, chan: grpc.aio.Channel) -> Any:
        return nri_plugin_pb2_grpc.NRIPluginViewStub(chan)

    async def containers(self) -> nri_plugin_pb2.ContainerList:
        return await self.request(
            "NRIPluginView.ListContainers",
            lambda chan, timeout: self._stub(chan).ListContainers(
                nri_plugin_pb2.ListContainersRequest(), timeout=timeout
            ),
        )

    async def status(self) -> nri_plugin_pb2.PluginStatus:
        return await self.request(
            "NRIPluginView.GetStatus",
            lambda chan, timeout: self._stub(chan).GetStatus(
                nri_plugin_pb2.GetStatusRequest(), timeout=timeout
            ),
        )


@dataclass(frozen=True)
class Backends:
    topology: TopologyBackend
    allocator: AllocatorBackend
    dra_plugin: DRAPluginBackend
    nri_plugin: NRIPluginBackend

    @classmethod
    def from_sockets(
        cls, sockets: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> Backends:
        """Sockets keyed by service name; missing ones take the defaults."""
        paths = {**DEFAULT_SOCKETS, **(sockets or {})}
        return cls(
            topology=TopologyBackend("topology", paths["topology"], timeout),
            allocator=AllocatorBackend("allocator", paths["allocator"], timeout),
            dra_plugin=DRAPluginBackend("dra-plugin", paths["dra-plugin"], timeout),
            nri_plugin=NRIPluginBackend("nri-plugin", paths["nri-plugin"], timeout),
        )

    def __iter__(self) -> Iterator[Backend]:
        return iter((self.topology, self.allocator, self.dra_plugin, self.nri_plugin))

    async def close(self) -> None:
        for backend in self:
            await backend.close()
