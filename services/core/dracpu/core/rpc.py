"""gRPC plumbing shared by the services: unix-socket servers with health and Info, clients,
and the one mapping between DracpuError and gRPC statuses, each way (`status_of` on the
server, `error_of` on the client).

A status carries the error's code and message, and in its trailing metadata the name of its
class (`dracpu-error-class`, `dracpu.core.errors.wire_class`): the client raises the same class
(a TopologyError stays a TopologyError, though a ConflictError has its code too). A status
without the name (another program, an older release) is mapped by its code alone."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dracpu.core import __version__, probes
from dracpu.core.channels import channel as channel
from dracpu.core.errors import (
    DracpuError,
    InvalidInputError,
    UnavailableError,
    from_grpc_code,
    wire_class,
)
from dracpu.core.interceptors import OperationServerInterceptor
from dracpu.core.log import get_logger
from dracpu.core.probes import ProbeListener
from dracpu.core.sockets import DEFAULT_RUN_DIR as DEFAULT_RUN_DIR
from dracpu.core.sockets import DEFAULT_SOCKETS as DEFAULT_SOCKETS
from dracpu.core.sockets import MAX_SOCKET_PATH as MAX_SOCKET_PATH
from dracpu.core.sockets import check_socket_path as check_socket_path
from dracpu.core.supervisor import Supervisor
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc

log = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def remove_stale_socket(path: Path) -> None:
    """Make room for a new socket at `path`: a stale socket is removed; anything else there
    (a directory, a regular file) is refused, never deleted."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InvalidInputError(f"unix socket path {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise InvalidInputError(
            f"unix socket path {path} exists and is not a socket; refusing to replace it"
        )
    try:
        path.unlink()
    except OSError as exc:
        raise InvalidInputError(
            f"cannot remove stale socket {path}: {exc.strerror or exc}"
        ) from None


# A status message travels in the trailers, which a peer caps (8 KiB by default): past it the
# caller would see RESOURCE_EXHAUSTED instead of the reason.
MAX_STATUS_MESSAGE = 4096


# The trailing metadata key naming a DracpuError's class.
ERROR_CLASS_KEY = "dracpu-error-class"

Trailers = tuple[tuple[str, str], ...]


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, Trailers]:
    """The status a handler's error leaves as: code, message and the trailing metadata naming
    its class (none for an unexpected error: the client sees INTERNAL)."""
    trailers: Trailers = ()
    if isinstance(exc, DracpuError):
        code, message = exc.grpc_code, str(exc)
        trailers = ((ERROR_CLASS_KEY, wire_class(exc).__name__),)
    else:
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    if len(message) > MAX_STATUS_MESSAGE:
        message = message[: MAX_STATUS_MESSAGE - 40] + f"... ({len(message)} characters)"
    return code, message, trailers


def error_of(exc: grpc.aio.AioRpcError, what: str) -> DracpuError:
    """The DracpuError a client raises for a failed call: the class the server named, else the
    one of the status code; the message is `what: the status's message`."""
    detail = exc.details() or exc.code().name
    named = ""
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_CLASS_KEY and isinstance(value, str):
            named = value
    return from_grpc_code(exc.code(), f"{what}: {detail}", named)


def rpc_errors(method: F) -> F:
    """Map DracpuError (and anything unexpected) to a precise status; the server keeps serving.

    Works on unary coroutine methods and on server-streaming async generators.
    """
    name = method.__qualname__

    def _report(exc: BaseException) -> tuple[grpc.StatusCode, str, Trailers]:
        code, message, trailers = status_of(exc)
        if not isinstance(exc, DracpuError):
            log.error("unexpected error in handler", method=name, error=repr(exc), exc_info=True)
        else:
            log.info(4, "handler refused", method=name, code=code.name, error=message)
        return code, message, trailers

    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for item in method(self, request, context):
                    yield item
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:
                code, message, trailers = _report(exc)
                await context.abort(code, message, trailing_metadata=trailers)

        return stream  # type: ignore[return-value]

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message, trailers = _report(exc)
            await context.abort(code, message, trailing_metadata=trailers)

    return unary  # type: ignore[return-value]


class InfoServicer(info_pb2_grpc.InfoServicer):  # type: ignore[misc]
    """Version and metrics of the service this process runs."""

    def __init__(
        self,
        service: str,
        api_version: str,
        metrics: Callable[[], str] | None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._version = info_pb2.VersionInfo(
            service=service,
            version=__version__,
            api_version=api_version,
            python_version=sys.version.split()[0],
            started_at_unix=int(time.time()),
            pid=os.getpid(),
        )
        self._metrics = metrics
        self._supervisor = supervisor

    async def GetVersion(
        self, request: info_pb2.GetVersionRequest, context: grpc.aio.ServicerContext
    ) -> info_pb2.VersionInfo:
        return self._version

    async def GetMetrics(
        self, request: info_pb2.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> info_pb2.MetricsText:
        return info_pb2.MetricsText(text=self._metrics() if self._metrics else "")

    async def GetLoops(
        self, request: info_pb2.GetLoopsRequest, context: grpc.aio.ServicerContext
    ) -> info_pb2.LoopList:
        statuses = self._supervisor.loops() if self._supervisor is not None else []
        return info_pb2.LoopList(
            loops=[
                info_pb2.Loop(
                    name=s.name,
                    state=s.state.value,
                    ready=s.ready,
                    restarts=s.restarts,
                    failures_in_row=s.failures_in_row,
                    last_error=s.last_error,
                    last_error_at_unix=int(s.last_error_at),
                )
                for s in statuses
            ]
        )


class Health:
    """The standard grpc.health.v1 service; '' is the whole server.

    SERVING when the service says so (`set`) and nothing blocks it (`block`: a supervised loop
    restarting, `dracpu.core.supervisor`)."""

    def __init__(self, services: Sequence[str]) -> None:
        self.servicer = health.aio.HealthServicer()
        self._services = ["", *services]
        self._serving = False
        self._blocked: set[str] = set()
        # The HTTP listener answering the kubelet's probes about this server (--probe-address).
        self.probe: ProbeListener | None = None

    @property
    def serving(self) -> bool:
        return self._serving and not self._blocked

    async def set(self, serving: bool) -> None:
        self._serving = serving
        await self._publish()

    async def block(self, reason: str, blocked: bool) -> None:
        """Report NOT_SERVING for `reason` while `blocked`, whatever `set` said."""
        if blocked:
            self._blocked.add(reason)
        else:
            self._blocked.discard(reason)
        await self._publish()

    async def _publish(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self._services:
            await self.servicer.set(name, status)


async def start_server(
    socket_path: str | os.PathLike[str],
    register: Callable[[grpc.aio.Server], None],
    *,
    service: str,
    api_version: str,
    health_names: Sequence[str] = (),
    metrics: Callable[[], str] | None = None,
    mode: int = 0o660,
    probe_address: str | None = None,
    supervisor: Supervisor | None = None,
) -> tuple[grpc.aio.Server, Health]:
    """Listen on a unix socket (replacing a stale one) with health and Info registered, and
    with `probe_address`, an HTTP listener for the kubelet's probes of it
    (`dracpu.core.probes`).

    Health starts NOT_SERVING; the caller flips it once the service is ready. With
    `supervisor`, a loop of it that is not ready keeps the health NOT_SERVING, and
    `Info.GetLoops` says which.
    """
    path = Path(check_socket_path(socket_path))
    remove_stale_socket(path)
    if not os.access(path.parent, os.W_OK | os.X_OK):
        # gRPC would fail to bind with a message naming no reason.
        raise UnavailableError(
            f"cannot listen on {path}: {path.parent} is not writable (mount a writable "
            "volume there or pass --socket)"
        )
    server = grpc.aio.server(
        options=[("grpc.so_reuseport", 0)],
        # Each call's handler runs as the caller's operation, or a new one.
        interceptors=[OperationServerInterceptor()],
    )
    register(server)
    health_state = Health(health_names)
    health_pb2_grpc.add_HealthServicer_to_server(health_state.servicer, server)
    info_pb2_grpc.add_InfoServicer_to_server(
        InfoServicer(service, api_version, metrics, supervisor), server
    )
    try:
        bound = server.add_insecure_port(f"unix://{path}")
    except RuntimeError as exc:
        bound = 0
        reason = str(exc)
    else:
        reason = "the socket could not be bound"
    if bound == 0:
        await server.stop(None)
        raise UnavailableError(f"cannot listen on {path}: {reason}")
    await server.start()
    os.chmod(path, mode)
    await health_state.set(False)
    if supervisor is not None:
        await supervisor.attach(health_state)
    try:
        health_state.probe = await probes.start(probe_address, path)
    except BaseException:
        await server.stop(None)
        raise
    log.info(2, "listening", socket=str(path), service=service)
    return server, health_state


async def stop_server(
    server: grpc.aio.Server, health: Health, socket_path: str | os.PathLike[str]
) -> None:
    """Undo start_server: report NOT_SERVING, finish in-flight calls, remove the socket."""
    await health.set(False)
    if health.probe is not None:
        await health.probe.close()
    await server.stop(grace=2)
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(socket_path).st_mode):
            os.unlink(socket_path)


T = TypeVar("T")


async def call(awaitable: Awaitable[T], what: str) -> T:
    """Await a client call, turning a gRPC failure into the matching DracpuError."""
    try:
        return await awaitable
    except grpc.aio.AioRpcError as exc:
        raise error_of(exc, what) from None


async def stream(iterator: AsyncIterator[T], what: str) -> AsyncIterator[T]:
    try:
        async for item in iterator:
            yield item
    except grpc.aio.AioRpcError as exc:
        raise error_of(exc, what) from None


async def check_health(socket_path: str | os.PathLike[str], timeout: float = 1.0) -> str:
    """The peer's overall health status name (SERVING, NOT_SERVING, ...)."""
    async with channel(socket_path) as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        reply = await call(
            stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout),
            f"health of {os.fspath(socket_path)}",
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
