"""The operation ID across gRPC: every client channel sends the caller's operation
(`dracpu.core.operation`) as the metadata key `dracpu-op-id`, and every server runs each call's
handler as that operation, or as a new one when the call brought none (the kubelet's calls, a
call made outside any operation, a peer of an older release).

`dracpu.core.channels.channel` installs the client side, `dracpu.core.rpc.start_server` the
server side: no client or servicer handles the ID itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from dracpu.core import operation

OPERATION_METADATA_KEY = "dracpu-op-id"


def _with_operation(details: Any) -> Any:
    """The call's details with the caller's operation in its metadata (unchanged when there is
    none, or when the caller named one itself)."""
    op_id = operation.current()
    if op_id is None:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    if OPERATION_METADATA_KEY in metadata:
        return details
    metadata.add(OPERATION_METADATA_KEY, op_id)
    return details._replace(metadata=metadata)


# A channel files an interceptor under the first kind it is (grpc.aio's Channel): one class
# per kind of call, so that streamed calls carry the operation too.
class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_operation(details), request)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_operation(details), request)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_operation(details), requests)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_operation(details), requests)


def client_interceptors() -> list[Any]:
    """A channel's interceptors that send the caller's operation ID with every call."""
    return [_UnaryUnary(), _UnaryStream(), _StreamUnary(), _StreamStream()]


def received_operation(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The operation ID a call brought in its metadata, if a usable one."""
    for key, value in metadata or ():
        if key == OPERATION_METADATA_KEY and isinstance(value, str) and operation.valid(value):
            return value
    return None


def _bound(behavior: Any, op_id: str) -> Any:
    """A handler's behavior run as operation `op_id`."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: Any) -> Any:
            with operation.bound(op_id):
                async for item in behavior(request, context):
                    yield item

        return stream
    if inspect.iscoroutinefunction(behavior):

        async def unary(request: Any, context: Any) -> Any:
            with operation.bound(op_id):
                return await behavior(request, context)

        return unary
    return behavior  # a synchronous handler: none of the services has one


_BEHAVIORS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


class OperationServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Runs each call's handler as the operation the call brought, or as a new one."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None  # no such method: gRPC answers UNIMPLEMENTED
        op_id = received_operation(handler_call_details.invocation_metadata) or operation.new_id()
        return handler._replace(
            **{
                name: _bound(getattr(handler, name), op_id)
                for name in _BEHAVIORS
                if getattr(handler, name) is not None
            }
        )
