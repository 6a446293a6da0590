"""ttrpc over one logical connection: unary calls out, unary handlers in.

Wire format (containerd/ttrpc channel.go, request.proto): each message is a 10-byte header
`length:u32be | stream_id:u32be | type:u8 | flags:u8` and `length` bytes of protobuf, a
`ttrpc.Request` or `ttrpc.Response`. Clients number their streams 1, 3, 5, ...; the response
carries the request's stream id. Errors travel as a google.rpc.Status-shaped status with gRPC
codes. Messages over 4 MiB are refused by the sender and skipped by the receiver.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import grpc
from google.protobuf.message import DecodeError

from dracpu.core.errors import DracpuError, ProtocolError
from dracpu.core.log import get_logger
from dracpu.nri_plugin.transport.mux import Mux
from dracpu.pb.ttrpc import ttrpc_pb2

log = get_logger(__name__)

MESSAGE_HEADER: Final = struct.Struct(">IIBB")
MAX_MESSAGE: Final = 4 << 20
TYPE_REQUEST: Final = 0x01
TYPE_RESPONSE: Final = 0x02
TYPE_DATA: Final = 0x03

# gRPC status codes as ttrpc uses them (numeric values are the wire contract).
OK: Final = 0
UNKNOWN: Final = grpc.StatusCode.UNKNOWN.value[0]
INVALID_ARGUMENT: Final = grpc.StatusCode.INVALID_ARGUMENT.value[0]
DEADLINE_EXCEEDED: Final = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
NOT_FOUND: Final = grpc.StatusCode.NOT_FOUND.value[0]
RESOURCE_EXHAUSTED: Final = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNIMPLEMENTED: Final = grpc.StatusCode.UNIMPLEMENTED.value[0]
INTERNAL: Final = grpc.StatusCode.INTERNAL.value[0]
UNAVAILABLE: Final = grpc.StatusCode.UNAVAILABLE.value[0]

_CODE_NAMES: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}


def code_name(code: int) -> str:
    return _CODE_NAMES.get(code, str(code))


class TtrpcError(Exception):
    """A call that ended with a non-OK status (from the peer or from this side)."""

    def __init__(self, code: int, message: str, *, remote: bool = False) -> None:
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message
        # True: the peer answered with this status. False: raised here (timeout, closed
        # connection, oversized message), which a runtime treats as the plugin failing.
        self.remote = remote


Handler = Callable[[bytes], Awaitable[bytes]]
# service name -> method name -> handler taking and returning serialized protobuf
Services = Mapping[str, Mapping[str, Handler]]


@dataclass(frozen=True, slots=True)
class Message:
    stream_id: int
    type: int
    flags: int
    payload: bytes | None  # None: the message was over the size limit and was skipped


def encode_message(stream_id: int, msg_type: int, payload: bytes, flags: int = 0) -> bytes:
    if len(payload) > MAX_MESSAGE:
        raise TtrpcError(
            RESOURCE_EXHAUSTED,
            f"message length {len(payload)} exceeds maximum message size of {MAX_MESSAGE}",
        )
    return MESSAGE_HEADER.pack(len(payload), stream_id, msg_type, flags) + payload


class MessageDecoder:
    """Incremental ttrpc message parser over a logical connection's byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip = 0  # bytes of an oversized message still to discard

    def feed(self, data: bytes) -> Iterator[Message]:
        self._buffer += data
        while True:
            if self._skip:
                dropped = min(self._skip, len(self._buffer))
                del self._buffer[:dropped]
                self._skip -= dropped
                if self._skip:
                    return
            if len(self._buffer) < MESSAGE_HEADER.size:
                return
            length, stream_id, msg_type, flags = MESSAGE_HEADER.unpack_from(self._buffer)
            if msg_type not in (TYPE_REQUEST, TYPE_RESPONSE, TYPE_DATA):
                raise ProtocolError(
                    f"ttrpc message on stream {stream_id} has unknown type {msg_type:#04x}"
                )
            if length > MAX_MESSAGE:
                # As the Go channel does: skip the bytes, fail only that stream.
                del self._buffer[: MESSAGE_HEADER.size]
                self._skip = length
                yield Message(stream_id, msg_type, flags, None)
                continue
            end = MESSAGE_HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[MESSAGE_HEADER.size : end])
            del self._buffer[:end]
            yield Message(stream_id, msg_type, flags, payload)


def status_of(exc: BaseException) -> tuple[int, str]:
    """The ttrpc status for an error raised by a handler."""
    if isinstance(exc, TtrpcError):
        return exc.code, exc.message
    if isinstance(exc, DracpuError):
        return exc.grpc_code.value[0], str(exc)
    return UNKNOWN, f"{type(exc).__name__}: {exc}"


class Channel:
    """One logical connection speaking ttrpc; serves `services` and makes calls."""

    def __init__(self, mux: Mux, conn_id: int, services: Services | None = None) -> None:
        self._mux = mux
        self._conn_id = conn_id
        self._services: Services = services or {}
        self._decoder = MessageDecoder()
        self._next_stream = 1
        self._last_request_stream = 0
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed: Exception | None = None
        mux.attach(conn_id, self)

    # -- client side --------------------------------------------------------------------------

    async def call(
        self, service: str, method: str, payload: bytes, timeout: float | None = None
    ) -> bytes:
        """A unary call; returns the response payload or raises TtrpcError."""
        if self._closed is not None:
            raise TtrpcError(UNAVAILABLE, f"connection closed: {self._closed}")
        stream_id = self._next_stream
        self._next_stream += 2
        request = ttrpc_pb2.Request(
            service=service,
            method=method,
            payload=payload,
            timeout_nano=int(timeout * 1e9) if timeout else 0,
        )
        data = encode_message(stream_id, TYPE_REQUEST, request.SerializeToString())
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = future
        try:
            await self._send(data)
            # asyncio.timeout, not wait_for: a wait_for whose future completes (an answer, a
            # closed connection) as the calling task is cancelled returns that outcome and
            # loses the cancellation, and a loop around the call never ends.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise TtrpcError(
                DEADLINE_EXCEEDED, f"{service}/{method} got no answer in {timeout:.3f}s"
            ) from None
        finally:
            self._pending.pop(stream_id, None)

    def _on_response(self, msg: Message) -> None:
        future = self._pending.get(msg.stream_id)
        if future is None or future.done():
            log.info(4, "response for unknown stream dropped", stream=msg.stream_id)
            return
        if msg.payload is None:
            future.set_exception(
                TtrpcError(RESOURCE_EXHAUSTED, "response exceeds the 4 MiB message limit")
            )
            return
        response = ttrpc_pb2.Response()
        try:
            response.ParseFromString(msg.payload)
        except DecodeError as exc:
            future.set_exception(TtrpcError(INTERNAL, f"undecodable ttrpc response: {exc}"))
            return
        if response.HasField("status") and response.status.code != OK:
            future.set_exception(
                TtrpcError(response.status.code, response.status.message, remote=True)
            )
        else:
            future.set_result(response.payload)

    # -- server side --------------------------------------------------------------------------

    def _on_request(self, msg: Message) -> None:
        if msg.stream_id % 2 != 1:
            self._respond_later(msg.stream_id, INVALID_ARGUMENT, "StreamID must be odd")
            return
        if msg.stream_id <= self._last_request_stream:
            self._respond_later(
                msg.stream_id, INVALID_ARGUMENT, "StreamID cannot be re-used and must increment"
            )
            return
        self._last_request_stream = msg.stream_id
        if msg.payload is None:
            self._respond_later(
                msg.stream_id, RESOURCE_EXHAUSTED, "request exceeds the 4 MiB message limit"
            )
            return
        request = ttrpc_pb2.Request()
        try:
            request.ParseFromString(msg.payload)
        except DecodeError as exc:
            self._respond_later(msg.stream_id, INVALID_ARGUMENT, f"unmarshal request: {exc}")
            return
        methods = self._services.get(request.service)
        if methods is None:
            self._respond_later(msg.stream_id, UNIMPLEMENTED, f"service {request.service}")
            return
        handler = methods.get(request.method)
        if handler is None:
            self._respond_later(msg.stream_id, UNIMPLEMENTED, f"method {request.method}")
            return
        self._spawn(self._serve(msg.stream_id, f"{request.method}", handler, request.payload))

    async def _serve(self, stream_id: int, method: str, handler: Handler, payload: bytes) -> None:
        started = time.perf_counter()
        try:
            result = await handler(payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code, message = status_of(exc)
            if not isinstance(exc, DracpuError | TtrpcError):
                log.error("NRI handler failed", method=method, error=repr(exc), exc_info=True)
            await self._respond(stream_id, code, message)
            return
        response = ttrpc_pb2.Response(payload=result)
        try:
            data = encode_message(stream_id, TYPE_RESPONSE, response.SerializeToString())
        except TtrpcError as exc:
            await self._respond(stream_id, exc.code, exc.message)
            return
        await self._send_quietly(data)
        log.info(6, "served", method=method, ms=round((time.perf_counter() - started) * 1e3, 3))

    def _respond_later(self, stream_id: int, code: int, message: str) -> None:
        self._spawn(self._respond(stream_id, code, message))

    async def _respond(self, stream_id: int, code: int, message: str) -> None:
        response = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=message))
        await self._send_quietly(
            encode_message(stream_id, TYPE_RESPONSE, response.SerializeToString())
        )

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- plumbing -----------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        try:
            await self._mux.send(self._conn_id, data)
        except ConnectionError as exc:
            raise TtrpcError(UNAVAILABLE, str(exc)) from None

    async def _send_quietly(self, data: bytes) -> None:
        try:
            await self._mux.send(self._conn_id, data)
        except ConnectionError as exc:
            log.info(4, "response not sent, connection gone", error=str(exc))

    def feed(self, data: bytes) -> None:
        for msg in self._decoder.feed(data):
            if msg.type == TYPE_REQUEST:
                self._on_request(msg)
            elif msg.type == TYPE_RESPONSE:
                self._on_response(msg)
            else:
                log.info(4, "ttrpc data message ignored (no streaming calls)", stream=msg.stream_id)

    def closed(self, reason: Exception) -> None:
        self._closed = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(TtrpcError(UNAVAILABLE, f"connection closed: {reason}"))
        for task in list(self._tasks):
            task.cancel()
