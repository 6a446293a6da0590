"""The NRI Plugin service, the runtime's side of a plugin: every request the runtime sends on a
connection (Configure, Synchronize whole or chunked, CreateContainer and the other lifecycle
events, Shutdown) decoded, handed to the plugin's handlers (`PluginHandlers`), and answered.
Nothing here knows about CPUs, nor about the connection it serves (`transport.stub`).

Each request is one operation (`dracpu.core.operation`): its log lines, and those of the
allocator for the calls it makes, carry the same `opID`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from google.protobuf.message import DecodeError, Message

from dracpu.core import operation
from dracpu.core.errors import DracpuError, InvalidInputError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.transport.container_names import container_name
from dracpu.nri_plugin.transport.ttrpc import Handler
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

M = TypeVar("M", bound=Message)

# Runtime defaults when Configure carries none (NRI <= v0.6 has no timeout fields).
DEFAULT_REGISTRATION_TIMEOUT: Final = 5.0
DEFAULT_REQUEST_TIMEOUT: Final = 2.0


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What the runtime said about itself in Configure."""

    name: str
    version: str
    nri_version: str  # "" before NRI v0.12
    registration_timeout: float
    request_timeout: float

    @classmethod
    def from_configure(cls, req: api_pb2.ConfigureRequest) -> RuntimeInfo:
        return cls(
            name=req.runtime_name,
            version=req.runtime_version,
            nri_version=req.NRI_version,
            registration_timeout=(req.registration_timeout / 1000.0)
            or DEFAULT_REGISTRATION_TIMEOUT,
            request_timeout=(req.request_timeout / 1000.0) or DEFAULT_REQUEST_TIMEOUT,
        )


class PluginHandlers(Protocol):
    """The events a plugin reacts to. Raising DracpuError refuses the request with its code."""

    def configure(self, runtime: RuntimeInfo) -> int:
        """Remember the runtime; return the event subscription mask."""
        ...

    async def synchronize(
        self, pods: Sequence[api_pb2.PodSandbox], containers: Sequence[api_pb2.Container]
    ) -> list[api_pb2.ContainerUpdate]: ...

    async def create_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse: ...

    async def post_start_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> None: ...

    async def update_container(
        self,
        pod: api_pb2.PodSandbox,
        container: api_pb2.Container,
        resources: api_pb2.LinuxResources,
    ) -> list[api_pb2.ContainerUpdate]:
        """Another party asked the runtime for `resources`; an update of this container in the
        answer replaces what it asked for (its other fields go through)."""
        ...

    async def stop_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> list[api_pb2.ContainerUpdate]: ...

    async def remove_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> None: ...

    def disconnected(self, reason: str, *, requested: bool = False) -> None:
        """The connection ended; `requested`: the plugin closed it to register again."""
        ...


class PluginService:
    """The Plugin service of one connection. What the connection learns from it: the runtime
    configured the plugin (`configured`), a Synchronize was answered (`synchronized`), the
    runtime asked the plugin to go (`shutdown`, called before the answer goes out)."""

    def __init__(
        self,
        handlers: PluginHandlers,
        *,
        configured: Callable[[RuntimeInfo], None],
        synchronized: Callable[[], None],
        shutdown: Callable[[], None],
    ) -> None:
        self._handlers = handlers
        self._configured = configured
        self._synchronized = synchronized
        self._shutdown_requested = shutdown
        # The chunks of a Synchronize so far (NRI >= v0.7 may send it in several).
        self._sync_pods: list[api_pb2.PodSandbox] = []
        self._sync_containers: list[api_pb2.Container] = []
        self._sync_chunks = 0

    def methods(self) -> dict[str, Handler]:
        handlers: dict[str, Handler] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "CreateContainer": self._create_container,
            "PostStartContainer": self._post_start_container,
            "UpdateContainer": self._update_container,
            "StopContainer": self._stop_container,
            "RemoveContainer": self._remove_container,
            "StateChange": self._state_change,
        }
        return {name: _one_operation(handler) for name, handler in handlers.items()}

    async def _configure(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.ConfigureRequest, payload)
        info = RuntimeInfo.from_configure(request)
        self._configured(info)
        events = self._handlers.configure(info)
        log.info(
            2,
            "configured by runtime",
            runtime=info.name,
            version=info.version,
            nri=info.nri_version or "unknown",
            events=f"{events:#x}",
        )
        return api_pb2.ConfigureResponse(events=events).SerializeToString()

    async def _synchronize(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.SynchronizeRequest, payload)
        self._sync_pods.extend(request.pods)
        self._sync_containers.extend(request.containers)
        self._sync_chunks += 1
        if request.more:
            # Chunked form (NRI >= v0.7): intermediate chunks must be answered with no
            # updates and more=true, else the runtime drops the plugin.
            return api_pb2.SynchronizeResponse(more=True).SerializeToString()
        pods, containers = self._sync_pods, self._sync_containers
        log.info(
            2,
            "synchronize request",
            pods=len(pods),
            containers=len(containers),
            chunks=self._sync_chunks,
        )
        self._sync_pods, self._sync_containers, self._sync_chunks = [], [], 0
        try:
            updates = await self._handlers.synchronize(pods, containers)
        except DracpuError as exc:
            log.error("refused Synchronize; the runtime will drop us", reason=str(exc))
            raise
        self._synchronized()
        return api_pb2.SynchronizeResponse(update=updates, more=False).SerializeToString()

    async def _shutdown(self, payload: bytes) -> bytes:
        log.info(2, "runtime asked the plugin to shut down; will reconnect")
        self._shutdown_requested()
        return api_pb2.Empty().SerializeToString()

    async def _create_container(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.CreateContainerRequest, payload)
        pod, ctr = request.pod, request.container
        try:
            response = await self._handlers.create_container(pod, ctr)
        except DracpuError as exc:
            # The runtime shows this reason to the kubelet; say it here too, where the
            # operator of this plugin looks.
            log.warning(
                "refused container",
                reason=str(exc),
                code=exc.grpc_code.name,
                container=container_name(ctr),
                container_id=ctr.id,
                pod=f"{pod.namespace}/{pod.name}",
            )
            raise
        return response.SerializeToString()

    async def _post_start_container(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.PodContainerRequest, payload)
        await self._handlers.post_start_container(request.pod, request.container)
        return api_pb2.Empty().SerializeToString()

    async def _update_container(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.UpdateContainerRequest, payload)
        updates = await self._handlers.update_container(
            request.pod, request.container, request.linux_resources
        )
        return api_pb2.UpdateContainerResponse(update=updates).SerializeToString()

    async def _stop_container(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.StopContainerRequest, payload)
        updates = await self._handlers.stop_container(request.pod, request.container)
        return api_pb2.StopContainerResponse(update=updates).SerializeToString()

    async def _remove_container(self, payload: bytes) -> bytes:
        request = _parse(api_pb2.RemoveContainerRequest, payload)
        await self._handlers.remove_container(request.pod, request.container)
        return api_pb2.RemoveContainerResponse().SerializeToString()

    async def _state_change(self, payload: bytes) -> bytes:
        # NRI <= v0.11 reports removal (and other lifecycle steps) this way; v0.12 falls
        # back to it when RemoveContainer is unimplemented.
        event = _parse(api_pb2.StateChangeEvent, payload)
        if event.event == api_pb2.REMOVE_CONTAINER:
            await self._handlers.remove_container(event.pod, event.container)
        elif event.event == api_pb2.POST_START_CONTAINER:
            await self._handlers.post_start_container(event.pod, event.container)
        else:
            log.info(6, "state change ignored", event=api_pb2.Event.Name(event.event))
        return api_pb2.Empty().SerializeToString()


def _one_operation(handler: Handler) -> Handler:
    """`handler`, each request it serves a new operation."""

    async def serve(payload: bytes) -> bytes:
        with operation.bound(operation.new_id()):
            return await handler(payload)

    return serve


def _parse(kind: type[M], payload: bytes) -> M:
    message = kind()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise InvalidInputError(f"undecodable {kind.__name__}: {exc}") from None
    return message
