"""The four services the api reads, each through its client in `dracpu.core.clients`, each
call bounded by a short deadline.

Every failure except "not found" becomes `BackendUnavailable` naming the service and the
reason, and is remembered as the service's last error for /v1/health. Each service's health is
followed on its Health.Watch stream, so /readyz, which the kubelet asks every few seconds,
calls no service while the streams are open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from dracpu.api.deadlines import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from dracpu.core.clients.allocator import AllocatorClient
from dracpu.core.clients.base import ServiceClient
from dracpu.core.clients.dra_plugin import DRAPluginClient
from dracpu.core.clients.nri_plugin import NRIPluginClient
from dracpu.core.clients.topology import TopologyClient
from dracpu.core.errors import DracpuError, NotFoundError, UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.core.rpc import DEFAULT_SOCKETS
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.common.v1 import info_pb2
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2
from dracpu.pb.topology.v1 import topology_pb2

log = get_logger(__name__)

T = TypeVar("T")

# Slack on top of the gRPC deadline before the api gives up on its own.
_BACKSTOP = 0.5
# The longest wait before a broken health watch is opened again (meanwhile /readyz asks).
HEALTH_WATCH_MAX_DELAY = 5.0


class BackendUnavailable(UnavailableError):
    """A service could not answer; `service` says which."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(f"{service} unavailable: {reason}")
        self.service = service
        self.reason = reason


class Backend:
    """One peer service: its client (`dracpu.core.clients`, on the socket, one short try per
    call: the api answers at once that a service is down rather than wait for it), and the
    last error seen."""

    def __init__(self, service: str, client: ServiceClient, timeout: float) -> None:
        self.service = service
        self.client = client
        self.socket = client.socket_path
        self.timeout = timeout
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        # The health status the service last pushed on its Health.Watch stream; None while
        # no stream is open (then `health` asks).
        self.pushed_health: str | None = None

    def target(self) -> str:
        """The socket dialled (the allocator's client may choose another, see its `target`)."""
        return self.client.target()

    async def close(self) -> None:
        await self.client.close()

    async def request(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """One call with the deadline; every failure but NotFound becomes BackendUnavailable."""
        try:
            async with asyncio.timeout(self.timeout + _BACKSTOP):
                return await call()
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
            self.client.redial()  # the allocator may have been upgraded meanwhile
        self.last_error = reason
        self.last_error_at = time.time()
        log.info(2, "backend call failed", service=self.service, error=reason)
        return BackendUnavailable(self.service, reason)

    # ---- what every dracpu service serves --------------------------------------------------

    async def health(self) -> str:
        """The gRPC health status name of the whole server ("" service)."""
        return await self.request("Health.Check", self.client.health)

    async def follow_health(self) -> None:
        """Keep `pushed_health` current from the service's Health.Watch stream, opened again
        with backoff whenever it breaks."""
        backoff = Backoff(initial=0.2, maximum=HEALTH_WATCH_MAX_DELAY)
        while True:
            try:
                async for status in self.client.watch_health():
                    backoff.reset()
                    self.pushed_health = status
                error = "the service ended the health watch"
            except DracpuError as exc:
                error = str(exc)
            self.pushed_health = None
            delay = backoff.next_delay()
            log.info(4, "health watch ended; opening it again", service=self.service,
                     error=error, retry_in=delay)  # fmt: skip
            await asyncio.sleep(delay)

    async def version(self) -> info_pb2.VersionInfo:
        return await self.request("Info.GetVersion", self.client.version)

    async def metrics(self) -> str:
        return await self.request("Info.GetMetrics", self.client.metrics)

    async def loops(self) -> info_pb2.LoopList:
        """The service's supervised loops (`Info.GetLoops`)."""
        return await self.request("Info.GetLoops", self.client.loops)


class TopologyBackend(Backend):
    def __init__(self, service: str, socket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.topology = TopologyClient(socket, timeout=timeout, wait_for_ready=False)
        super().__init__(service, self.topology, timeout)

    async def inventory(self) -> topology_pb2.Inventory:
        return await self.request("Topology.GetInventory", self.topology.inventory)


class AllocatorBackend(Backend):
    def __init__(self, service: str, socket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        # The api only reads: it is given the allocator's read-only socket.
        self.allocator = AllocatorClient(socket, timeout=timeout, wait_for_ready=False)
        super().__init__(service, self.allocator, timeout)

    async def devices(self) -> allocator_pb2.DeviceList:
        return await self.request("Allocator.ListDevices", self.allocator.list_devices)

    async def claims(self, namespace: str = "") -> allocator_pb2.ClaimList:
        return await self.request(
            "Allocator.ListClaims", lambda: self.allocator.list_claims(namespace)
        )

    async def claims_bytes(self, namespace: str = "") -> bytes:
        """ListClaims with the reply left serialised, so an unchanged reply can be recognised."""
        return await self.request(
            "Allocator.ListClaims", lambda: self.allocator.list_claims_serialized(namespace)
        )

    async def claim(self, uid: str) -> allocator_pb2.Claim:
        return await self.request("Allocator.GetClaim", lambda: self.allocator.claim(uid))

    async def shared_pool(self) -> allocator_pb2.SharedPool:
        return await self.request("Allocator.GetSharedPool", self.allocator.shared_pool)

    async def summary(self) -> allocator_pb2.Summary:
        return await self.request("Allocator.GetSummary", self.allocator.summary)


class DRAPluginBackend(Backend):
    def __init__(self, service: str, socket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.dra_plugin = DRAPluginClient(socket, timeout=timeout, wait_for_ready=False)
        super().__init__(service, self.dra_plugin, timeout)

    async def status(self) -> dra_plugin_pb2.PluginStatus:
        return await self.request("DRAPluginView.GetStatus", self.dra_plugin.status)


class NRIPluginBackend(Backend):
    def __init__(self, service: str, socket: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.nri_plugin = NRIPluginClient(socket, timeout=timeout, wait_for_ready=False)
        super().__init__(service, self.nri_plugin, timeout)

    async def containers(self) -> nri_plugin_pb2.ContainerList:
        return await self.request("NRIPluginView.ListContainers", self.nri_plugin.containers)

    async def status(self) -> nri_plugin_pb2.PluginStatus:
        return await self.request("NRIPluginView.GetStatus", self.nri_plugin.status)


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

    async def follow_health(self) -> None:
        """Every service's pushed health (`Backend.follow_health`), until cancelled."""
        async with asyncio.TaskGroup() as group:
            for backend in self:
                group.create_task(backend.follow_health(), name=f"health-watch-{backend.service}")

    async def close(self) -> None:
        for backend in self:
            await backend.close()
