"""A kubelet stand-in for DRA plugins: registration, prepare/unprepare and health, spoken over
the real gRPC contracts on a kubelet root directory.

It does what the kubelet's plugin manager and DRA manager do, minus pods: find the plugin's
registration socket under <root>/plugins_registry, ask GetInfo, check the plugin type and pick
the DRA service version (the first of the plugin's list the kubelet supports), report the
outcome with NotifyRegistrationStatus, then call NodePrepareResources /
NodeUnprepareResources on the advertised endpoint and watch device health.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dracpu.core.errors import NotFoundError, ProtocolError, UnavailableError
from dracpu.pb.kubelet.dra.v1 import api_pb2 as dra_v1
from dracpu.pb.kubelet.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2 as dra_v1beta1
from dracpu.pb.kubelet.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dracpu.pb.kubelet.dra_health.v1 import api_pb2 as health_v1
from dracpu.pb.kubelet.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dracpu.pb.kubelet.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2 as reg
from dracpu.pb.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc

DRA_PLUGIN_TYPE = "DRAPlugin"
# What a current kubelet supports, in its own terms (k8s.io/kubelet pkg/apis/dra*/types.go).
KUBELET_DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
KUBELET_HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
# Kubelet timeouts: GetInfo 1 s, NotifyRegistrationStatus 5 s, DRA calls 45 s.
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
DRA_CALL_TIMEOUT = 45.0

_DRA = {"v1": (dra_v1, dra_v1_grpc), "v1beta1": (dra_v1beta1, dra_v1beta1_grpc)}
_HEALTH = {"v1": (health_v1, health_v1_grpc), "v1alpha1": (health_v1alpha1, health_v1alpha1_grpc)}


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str


@dataclass
class Device:
    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    share_id: str | None = None  # v1 only


@dataclass
class PrepareResult:
    devices: list[Device] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True)
class HealthEntry:
    pool: str
    device: str
    health: str  # UNKNOWN, HEALTHY, UNHEALTHY
    lease_seconds: int
    message: str
    last_updated: int


def _channel(path: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"unix://{path}")


class RegisteredPlugin:
    """A plugin the stand-in registered: its info and the versions it chose to speak."""

    def __init__(
        self,
        info: Any,
        registration_socket: Path,
        dra_version: str,
        health_version: str | None,
    ) -> None:
        self.info = info
        self.name: str = info.name
        self.registration_socket = registration_socket
        self.endpoint = info.endpoint or str(registration_socket)
        self.dra_version = dra_version
        self.health_version = health_version
        self._channel = _channel(self.endpoint)

    async def close(self) -> None:
        await self._channel.close()

    def _dra(self, version: str | None) -> tuple[Any, Any]:
        module, grpc_module = _DRA[version or self.dra_version]
        return module, grpc_module.DRAPluginStub(self._channel)

    async def prepare(
        self,
        claims: Iterable[Claim],
        *,
        version: str | None = None,
        timeout: float = DRA_CALL_TIMEOUT,
    ) -> dict[str, PrepareResult]:
        """NodePrepareResources with the kubelet's deadline (`timeout`); a gRPC error is raised
        as grpc.aio.AioRpcError, as the kubelet sees it. Checks the completeness rules the
        kubelet applies to the answer."""
        claims = list(claims)
        module, stub = self._dra(version)
        request = module.NodePrepareResourcesRequest(
            claims=[module.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await stub.NodePrepareResources(request, timeout=timeout)
        _check_complete(claims, response.claims, "NodePrepareResources")
        return {
            uid: PrepareResult(
                devices=[
                    Device(
                        request_names=list(d.request_names),
                        pool_name=d.pool_name,
                        device_name=d.device_name,
                        cdi_device_ids=list(d.cdi_device_ids),
                        share_id=d.share_id
                        if "share_id" in d.DESCRIPTOR.fields_by_name and d.HasField("share_id")
                        else None,
                    )
                    for d in entry.devices
                ],
                error=entry.error,
            )
            for uid, entry in response.claims.items()
        }

    async def unprepare(
        self,
        claims: Iterable[Claim],
        *,
        version: str | None = None,
        timeout: float = DRA_CALL_TIMEOUT,
    ) -> dict[str, str]:
        """NodeUnprepareResources: claim UID -> error ("" on success)."""
        claims = list(claims)
        module, stub = self._dra(version)
        request = module.NodeUnprepareResourcesRequest(
            claims=[module.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await stub.NodeUnprepareResources(request, timeout=timeout)
        _check_complete(claims, response.claims, "NodeUnprepareResources")
        return {uid: entry.error for uid, entry in response.claims.items()}

    async def watch_health(self, *, version: str | None = None) -> AsyncIterator[list[HealthEntry]]:
        """NodeWatchResources: each streamed snapshot as a list of entries."""
        chosen = version or self.health_version
        if chosen is None:
            raise NotFoundError(f"plugin {self.name} advertises no health service")
        module, grpc_module = _HEALTH[chosen]
        stub = grpc_module.DRAResourceHealthStub(self._channel)
        call = stub.NodeWatchResources(module.NodeWatchResourcesRequest())
        try:
            async for response in call:
                yield [
                    HealthEntry(
                        pool=d.device.pool_name,
                        device=d.device.device_name,
                        health=module.HealthStatus.Name(d.health),
                        lease_seconds=d.health_check_timeout_seconds,
                        message=d.message,
                        last_updated=d.last_updated_time,
                    )
                    for d in response.devices
                ]
        finally:
            call.cancel()


def _check_complete(claims: Sequence[Claim], answered: Any, what: str) -> None:
    wanted = {c.uid for c in claims}
    missing = wanted - set(answered.keys())
    unknown = set(answered.keys()) - wanted
    if missing:
        raise ProtocolError(f"{what}: skipped {len(missing)} ResourceClaims: {sorted(missing)}")
    if unknown:
        raise ProtocolError(f"{what}: answered unknown claim UIDs {sorted(unknown)}")


class KubeletSim:
    """The kubelet's side of plugin registration on one kubelet root directory."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        dra_services: Sequence[str] = KUBELET_DRA_SERVICES,
        health_services: Sequence[str] = KUBELET_HEALTH_SERVICES,
    ) -> None:
        self.root = Path(root)
        self.registrar_dir = self.root / "plugins_registry"
        self.dra_services = tuple(dra_services)
        self.health_services = tuple(health_services)

    def sockets(self) -> list[Path]:
        """Candidate registration sockets, as the plugin watcher sees them."""
        if not self.registrar_dir.is_dir():
            return []
        found = []
        for path in sorted(self.registrar_dir.rglob("*")):
            if path.name.startswith(".") or not path.is_socket():
                continue
            found.append(path)
        return found

    async def register(
        self, driver: str, *, timeout: float = 10.0, reject: str | None = None
    ) -> RegisteredPlugin:
        """Wait for the driver's socket, then register it (or reject it with `reject`)."""
        deadline = time.monotonic() + timeout
        last_error = "no registration socket"
        while True:
            for socket in self.sockets():
                try:
                    return await self._register_socket(socket, driver, reject)
                except _OtherPlugin:
                    continue
                except (grpc.aio.AioRpcError, UnavailableError) as exc:
                    last_error = str(exc)
            if time.monotonic() >= deadline:
                raise UnavailableError(
                    f"plugin {driver} did not register under {self.registrar_dir} "
                    f"within {timeout:g}s: {last_error}"
                )
            await asyncio.sleep(0.05)

    async def _register_socket(
        self, socket: Path, driver: str, reject: str | None
    ) -> RegisteredPlugin:
        async with _channel(str(socket)) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT)
            if info.name != driver:
                raise _OtherPlugin
            failure = reject or self._validate(info)
            if failure:
                # The plugin may answer a rejection with an error; the kubelet ignores it.
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await stub.NotifyRegistrationStatus(
                        reg.RegistrationStatus(plugin_registered=False, error=failure),
                        timeout=NOTIFY_TIMEOUT,
                    )
                raise PluginRejected(failure)
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT
            )
        dra = next(v for v in info.supported_versions if v in self.dra_services)
        health = next((v for v in self.health_services if v in info.supported_versions), None)
        return RegisteredPlugin(
            info,
            socket,
            dra.split(".", 1)[0],
            health.split(".", 1)[0] if health else None,
        )

    def _validate(self, info: Any) -> str:
        """The kubelet's checks, with its messages (pkg/kubelet/cm/dra/plugin,
        validateSupportedServices)."""
        if info.type != DRA_PLUGIN_TYPE:
            return f"no handler registered for plugin type: {info.type}"
        if not info.supported_versions:
            return "empty list of supported gRPC services (aka supported versions)"
        if not any(v in self.dra_services for v in info.supported_versions):
            ours = ", ".join(f'"{v}"' for v in info.supported_versions)
            theirs = ", ".join(f'"{v}"' for v in self.dra_services)
            return (
                f"none of services supported by the plugin ([{ours}]) are supported by the "
                f"kubelet ([{theirs}])"
            )
        return ""


class _OtherPlugin(Exception):
    """A registration socket that belongs to another driver."""


class PluginRejected(Exception):
    """The stand-in refused the plugin (and told it so)."""
