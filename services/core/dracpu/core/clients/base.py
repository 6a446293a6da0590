"""What every client of a dracpu service shares: the channel to its unix socket, one call with
a timeout, one call retried until a deadline, and the Health and Info services every dracpu
server carries.

Channels come from `dracpu.core.channels` and failures are mapped by `dracpu.core.rpc.call`
(the peer's status message kept in the error), so what those add to every call applies here.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, ClassVar, Self

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dracpu.core import channels, rpc
from dracpu.core.errors import UnavailableError
from dracpu.core.log import get_logger
from dracpu.core.retry import RetryExhaustedError, retry
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc

log = get_logger(__name__)

# A call's timeout when the caller gives none.
DEFAULT_TIMEOUT = 5.0
# The least time one try of a call retried until a deadline is given.
_MIN_TRY = 0.01

# A call: the service's stub (or the Health/Info stub) and the try's timeout in, the reply out.
Invoke = Callable[[Any, float], Awaitable[Any]]


class PeerUnansweredError(RetryExhaustedError):
    """A call retried until its deadline that the peer never answered: try again later."""


class _Connection:
    """A channel and its stubs; a grpc.aio channel belongs to the event loop that opened it."""

    def __init__(self, target: str, make_stub: Callable[[grpc.aio.Channel], Any]) -> None:
        self.loop = asyncio.get_running_loop()
        self.target = target
        self.channel = channels.channel(target)
        self.stub = make_stub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.info = info_pb2_grpc.InfoStub(self.channel)


class ServiceClient:
    """One dracpu service on its unix socket.

    `timeout` bounds a single call; `deadline` (None: one try) is how long a call is retried
    by default while the service is unavailable (restarting, not started yet). With
    `wait_for_ready` a call waits, up to its timeout, for a channel still backing off from a
    restart of the peer instead of failing at once: the peer may already serve again.
    """

    service: ClassVar[str] = "service"
    unanswered: ClassVar[type[PeerUnansweredError]] = PeerUnansweredError

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        deadline: float | None = None,
        wait_for_ready: bool = True,
    ) -> None:
        self.socket_path = os.fspath(socket_path)
        self.timeout = timeout
        self.deadline = deadline
        self.wait_for_ready = wait_for_ready
        self._connection: _Connection | None = None

    def _make_stub(self, channel: grpc.aio.Channel) -> Any:
        """The stub of the service this client speaks; subclasses name theirs."""
        return None

    def target(self) -> str:
        """The socket to dial (a subclass may choose another when this one is absent)."""
        return self.socket_path

    def _connected(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = self._connection
        if connection is None or connection.loop is not loop:
            connection = self._connection = _Connection(self.target(), self._make_stub)
        return connection

    def redial(self) -> None:
        """Dial `target()` again on the next call (its choice of socket may have changed)."""
        self._connection = None

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.loop is asyncio.get_running_loop():
            await connection.channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def stub(self) -> Any:
        return self._connected().stub

    async def unary(
        self,
        what: str,
        invoke: Invoke,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        stub: Callable[[_Connection], Any] | None = None,
    ) -> Any:
        """`invoke(stub, timeout)` once, or retried until `deadline` (default: the client's)
        while the service is unavailable. Each try of a retried call is given the time the
        deadline leaves. Failures are DracpuErrors carrying the peer's reason; a deadline that
        passes is `unanswered`."""
        pick = stub or (lambda connection: connection.stub)
        budget = self.deadline if deadline is None else deadline
        if budget is None:
            try_timeout = timeout or self.timeout
            return await rpc.call(invoke(pick(self._connected()), try_timeout), what)
        started = time.monotonic()
        end = started + budget

        async def once() -> Any:
            left = max(end - time.monotonic(), _MIN_TRY)
            try:
                return await rpc.call(invoke(pick(self._connected()), left), what)
            except UnavailableError as exc:
                log.info(4, "call failed, retrying", service=self.service, error=str(exc))
                raise

        try:
            return await retry(once, what=what, deadline=budget)
        except RetryExhaustedError as exc:
            last = exc.__cause__ or exc
            raise self.unanswered(
                f"{self.service} at {self.socket_path} did not answer in "
                f"{time.monotonic() - started:.1f} s, all the time this call had "
                f"(last: {last}); try again"
            ) from None

    # ---- what every dracpu service serves ------------------------------------------------

    async def health(self, *, timeout: float | None = None) -> str:
        """The gRPC health status name of the whole server ("" service)."""
        reply = await self.unary(
            "Health.Check",
            lambda health, t: health.Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=t,
                wait_for_ready=self.wait_for_ready,
            ),
            timeout=timeout,
            stub=lambda connection: connection.health,
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def watch_health(self) -> AsyncIterator[str]:
        """The whole server's health status name now and at every change (grpc.health.v1
        Watch), for as long as the server runs."""
        call = self._connected().health.Watch(health_pb2.HealthCheckRequest(service=""))
        async for reply in rpc.stream(call, "watch the health"):
            yield str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def version(self) -> info_pb2.VersionInfo:
        reply: info_pb2.VersionInfo = await self.unary(
            "Info.GetVersion",
            lambda info, t: info.GetVersion(
                info_pb2.GetVersionRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
            stub=lambda connection: connection.info,
        )
        return reply

    async def metrics(self) -> str:
        """The service's metrics in the Prometheus text exposition format."""
        reply = await self.unary(
            "Info.GetMetrics",
            lambda info, t: info.GetMetrics(
                info_pb2.GetMetricsRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
            stub=lambda connection: connection.info,
        )
        return str(reply.text)

    async def loops(self) -> info_pb2.LoopList:
        """The service's supervised loops and how each one is doing (`Info.GetLoops`)."""
        reply: info_pb2.LoopList = await self.unary(
            "Info.GetLoops",
            lambda info, t: info.GetLoops(
                info_pb2.GetLoopsRequest(), timeout=t, wait_for_ready=self.wait_for_ready
            ),
            stub=lambda connection: connection.info,
        )
        return reply
