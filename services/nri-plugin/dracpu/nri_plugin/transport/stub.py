"""The plugin side of NRI: connect, register, serve the Plugin service, reconnect.

Mirrors what containerd/nri pkg/stub does for a Go plugin, without knowing anything about CPUs:
the event handlers are an object passed in (`PluginHandlers`), served on each connection by
dracpu.nri_plugin.transport.plugin_service. Order on connect matters: the Plugin service (conn 1) is
served before RegisterPlugin goes out on conn 2, because the runtime sends Configure as soon as
it has accepted the registration, possibly before we read its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dracpu.core.driver import DRIVER_NAME
from dracpu.core.errors import InvalidInputError
from dracpu.core.log import get_logger
from dracpu.core.retry import Backoff
from dracpu.nri_plugin.transport.identity import DEFAULT_NRI_SOCKET as DEFAULT_NRI_SOCKET
from dracpu.nri_plugin.transport.identity import valid_plugin_index, valid_plugin_name
from dracpu.nri_plugin.transport.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from dracpu.nri_plugin.transport.plugin_service import (
    DEFAULT_REGISTRATION_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    PluginHandlers,
    PluginService,
    RuntimeInfo,
)
from dracpu.nri_plugin.transport.runtime_prerequisites import RuntimePrerequisites
from dracpu.nri_plugin.transport.ttrpc import Channel, TtrpcError
from dracpu.pb.nri import api_pb2

log = get_logger(__name__)

PLUGIN_SERVICE: Final = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE: Final = "nri.pkg.api.v1alpha1.Runtime"
# The NRI API release whose messages and lifecycle calls this plugin speaks (proto/dracpu/pb/nri);
# sent in RegisterPlugin so the runtime logs and can reason about it (NRI >= v0.12 reads it).
PLUGIN_NRI_VERSION: Final = "v0.12.3"


@dataclass
class StubStatus:
    connected: bool = False  # registered with the runtime
    synchronized_at: float = 0.0
    runtime: RuntimeInfo | None = None
    last_error: str = ""
    connects: int = 0


class PluginStub:
    """Keeps one registered NRI connection alive for `handlers`."""

    def __init__(
        self,
        socket_path: str,
        handlers: PluginHandlers,
        *,
        name: str = DRIVER_NAME,
        index: str = "00",
        backoff: Backoff | None = None,
        prerequisites: RuntimePrerequisites | None = None,
    ) -> None:
        if not valid_plugin_name(name):
            raise InvalidInputError(f"NRI plugin name {name!r} must be [a-zA-Z0-9_.+-]+")
        if not valid_plugin_index(index):
            raise InvalidInputError(f"NRI plugin index {index!r} must be two digits")
        self.socket_path = socket_path
        self.name = name
        self.index = index
        self.status = StubStatus()
        self._handlers = handlers
        self._backoff = backoff or Backoff()
        self._prerequisites = prerequisites
        self._mux: Mux | None = None
        self._runtime_channel: Channel | None = None
        self._ready = asyncio.Event()
        self._ready_changed = asyncio.Condition()
        self._notifications: set[asyncio.Task[None]] = set()
        self._stopping = False
        # The plugin closed the connection itself to register again (`resynchronize`).
        self._resynchronizing = False

    # -- public -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, and reconnect with backoff until cancelled or `stop()`."""
        while not self._stopping:
            reason = await self._serve_once()
            if not self.status.connected and self._prerequisites is not None:
                self._prerequisites.connection_failed(reason)
            requested, self._resynchronizing = self._resynchronizing, False
            self._mark_disconnected(reason, requested=requested)
            if self._stopping:
                return
            if requested:
                continue  # register again at once: the runtime is there
            delay = self._backoff.next_delay()
            log.info(2, "reconnecting to NRI", socket=self.socket_path, delay_s=delay)
            await asyncio.sleep(delay)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready_change(self, current: bool) -> bool:
        """Wait until `ready` differs from `current`; return the new value."""
        async with self._ready_changed:
            await self._ready_changed.wait_for(lambda: self.ready != current)
        return self.ready

    def _set_ready(self, ready: bool) -> None:
        if ready:
            self._ready.set()
        else:
            self._ready.clear()

        async def notify() -> None:
            async with self._ready_changed:
                self._ready_changed.notify_all()

        task = asyncio.get_running_loop().create_task(notify())
        self._notifications.add(task)
        task.add_done_callback(self._notifications.discard)

    def stop(self) -> None:
        self._stopping = True
        if self._mux is not None:
            self._mux.close(ConnectionAbortedError("plugin stopping"))

    def resynchronize(self, reason: str) -> bool:
        """Close the registered connection so that the plugin registers again at once and the
        runtime sends a new Synchronize; False when there is no such connection (the next one
        synchronizes anyway). Readiness holds meanwhile: the runtime is still there."""
        mux = self._mux
        if mux is None or not self.status.connected or self._stopping:
            return False
        self._resynchronizing = True
        mux.close(ConnectionAbortedError(f"resynchronizing: {reason}"))
        return True

    async def update_containers(
        self, updates: Sequence[api_pb2.ContainerUpdate], timeout: float | None = None
    ) -> list[api_pb2.ContainerUpdate]:
        """Plugin-initiated updates; returns the ones the runtime reports as failed."""
        channel = self._runtime_channel
        if channel is None or not self.status.connected:
            raise TtrpcError(14, "not connected to the runtime")
        request = api_pb2.UpdateContainersRequest(update=list(updates))
        runtime = self.status.runtime
        limit = timeout or (runtime.request_timeout if runtime else DEFAULT_REQUEST_TIMEOUT)
        payload = await channel.call(
            RUNTIME_SERVICE, "UpdateContainers", request.SerializeToString(), limit
        )
        response = api_pb2.UpdateContainersResponse()
        response.ParseFromString(payload)
        return list(response.failed)

    # -- one connection -----------------------------------------------------------------------

    async def _serve_once(self) -> str:
        try:
            reader, writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError as exc:
            return f"cannot connect to {self.socket_path}: {exc.strerror or exc}"
        mux = Mux(reader, writer)
        self._mux = mux
        service = PluginService(
            self._handlers,
            configured=self._configured,
            synchronized=self._synchronized,
            shutdown=self._shutdown,
        )
        Channel(mux, PLUGIN_SERVICE_CONN, {PLUGIN_SERVICE: service.methods()})
        runtime = Channel(mux, RUNTIME_SERVICE_CONN)
        self._runtime_channel = runtime
        self.status.connects += 1
        reader_task = asyncio.create_task(mux.run())
        try:
            request = api_pb2.RegisterPluginRequest(
                plugin_name=self.name, plugin_idx=self.index, NRI_version=PLUGIN_NRI_VERSION
            )
            await runtime.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                request.SerializeToString(),
                DEFAULT_REGISTRATION_TIMEOUT,
            )
            log.info(
                2,
                "registered with the runtime",
                name=self.name,
                index=self.index,
                nri_version=PLUGIN_NRI_VERSION,
            )
            self.status.connected = True
            if self._prerequisites is not None:
                self._prerequisites.registered()
            reason = await reader_task
            return str(reason)
        except TtrpcError as exc:
            mux.close(ConnectionAbortedError(f"registration failed: {exc}"))
            await asyncio.gather(reader_task, return_exceptions=True)
            return f"registration failed: {exc}"
        except asyncio.CancelledError:
            mux.close(ConnectionAbortedError("plugin cancelled"))
            reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader_task
            raise
        finally:
            await mux.wait_closed()

    def _mark_disconnected(self, reason: str, *, requested: bool = False) -> None:
        was_connected = self.status.connected
        self.status.connected = False
        self.status.last_error = reason
        if not requested:
            self._set_ready(False)
        self._runtime_channel = None
        self._mux = None
        if requested:
            log.info(2, "NRI connection closed to register again", reason=reason)
        elif was_connected:
            log.warning("NRI connection lost", socket=self.socket_path, reason=reason)
        else:
            log.info(2, "no NRI connection", socket=self.socket_path, reason=reason)
        self._handlers.disconnected(reason, requested=requested)

    # -- what the Plugin service tells of the connection ---------------------------------------

    def _configured(self, runtime: RuntimeInfo) -> None:
        self.status.runtime = runtime

    def _synchronized(self) -> None:
        self.status.synchronized_at = time.time()
        self._set_ready(True)
        # Only a connection that got this far resets the delay: a runtime that keeps
        # rejecting us (say, the allocator is down during Synchronize) is retried slowly.
        self._backoff.reset()

    def _shutdown(self) -> None:
        mux = self._mux
        if mux is not None:
            # Answer first, then drop the connection so the reconnect loop takes over.
            asyncio.get_running_loop().call_soon(
                mux.close, ConnectionAbortedError("runtime requested shutdown")
            )
