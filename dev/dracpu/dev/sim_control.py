"""The control channel of the simulators: how `dev claim` asks the running kubelet and runtime
simulators to act. gRPC on a unix socket (so it gets the standard health service and Info like
every dracpu socket), with JSON bodies: it is a development tool's private channel, not a
contract between services, so it carries no proto of its own."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from dracpu.core.errors import UnavailableError
from dracpu.core.rpc import call, channel

Body = dict[str, Any]
Handler = Callable[[Body, grpc.aio.ServicerContext], Awaitable[Body]]

KUBELET_SERVICE = "dracpu.dev.v1.KubeletSimulator"
RUNTIME_SERVICE = "dracpu.dev.v1.RuntimeSimulator"
CONTROL_TIMEOUT = 60.0


def _dumps(body: Body) -> bytes:
    return json.dumps(body).encode()


def _loads(data: bytes) -> Body:
    loaded = json.loads(data or b"{}")
    return loaded if isinstance(loaded, dict) else {}


def control_handler(service: str, methods: Mapping[str, Handler]) -> grpc.GenericRpcHandler:
    """A generic gRPC handler serving `methods` (already wrapped with rpc_errors)."""
    return grpc.method_handlers_generic_handler(
        service,
        {
            name: grpc.unary_unary_rpc_method_handler(
                method, request_deserializer=_loads, response_serializer=_dumps
            )
            for name, method in methods.items()
        },
    )


class ControlClient:
    """Calls one simulator's control service; failures arrive as DracpuError."""

    def __init__(self, socket: str | os.PathLike[str], service: str, what: str) -> None:
        self._socket = os.fspath(socket)
        self._service = service
        self._what = what

    async def request(self, method: str, body: Body) -> Body:
        if not os.path.exists(self._socket):
            raise UnavailableError(f"{self._what} is not running (no socket {self._socket})")
        async with channel(self._socket) as chan:
            stub = chan.unary_unary(
                f"/{self._service}/{method}",
                request_serializer=_dumps,
                response_deserializer=_loads,
            )
            reply: Body = await call(
                stub(body, timeout=CONTROL_TIMEOUT, wait_for_ready=True), f"{self._what} {method}"
            )
            return reply
