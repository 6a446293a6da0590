"""The NRI connection multiplexer: several logical byte streams over one unix socket.

Wire format (containerd/nri pkg/net/multiplex/mux.go): every byte on the socket belongs to a
frame `conn_id:u32be | length:u32be | payload`. Logical connections need no handshake; both
ends simply use ids 1 (the plugin's service) and 2 (the runtime's service). This module knows
nothing about ttrpc or CPUs: it cuts and joins frames and hands payload bytes to a sink per id.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterator
from typing import Final, Protocol

from dracpu.core.errors import ProtocolError
from dracpu.core.log import get_logger

log = get_logger(__name__)

FRAME_HEADER: Final = struct.Struct(">II")
PLUGIN_SERVICE_CONN: Final = 1
RUNTIME_SERVICE_CONN: Final = 2

# The Go mux caps a frame payload at one full ttrpc message: 10-byte header + 4 MiB.
MAX_FRAME_PAYLOAD: Final = 10 + (4 << 20)

# The Go receiver hands each frame whole to the caller's buffer and fails with ENOMEM when it
# does not fit; ttrpc reads through a 4096-byte bufio.Reader, so a message is safe only when cut
# the way Go's own bufio.Writer cuts it: the first 4096 bytes, then the rest in one frame.
GO_READ_BUFFER: Final = 4096


def frame_message(conn_id: int, message: bytes) -> list[bytes]:
    """The frames (header + payload each) that carry one whole message on a logical conn."""
    if not 0 < conn_id <= 0xFFFFFFFF:
        raise ProtocolError(f"mux connection id {conn_id} is out of range 1-4294967295")
    frames: list[bytes] = []
    head, rest = message[:GO_READ_BUFFER], message[GO_READ_BUFFER:]
    frames.append(FRAME_HEADER.pack(conn_id, len(head)) + head)
    for start in range(0, len(rest), MAX_FRAME_PAYLOAD):
        chunk = rest[start : start + MAX_FRAME_PAYLOAD]
        frames.append(FRAME_HEADER.pack(conn_id, len(chunk)) + chunk)
    return frames


class FrameDecoder:
    """Incremental frame parser: feed it any slices of the socket byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Yield (conn_id, payload) for every frame completed by `data`."""
        self._buffer += data
        while len(self._buffer) >= FRAME_HEADER.size:
            conn_id, length = FRAME_HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME_PAYLOAD:
                raise ProtocolError(
                    f"mux frame for connection {conn_id} announces {length} bytes; "
                    f"the limit is {MAX_FRAME_PAYLOAD} (garbage on the NRI socket?)"
                )
            end = FRAME_HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[FRAME_HEADER.size : end])
            del self._buffer[:end]
            yield conn_id, payload

    @property
    def pending(self) -> int:
        return len(self._buffer)


class Sink(Protocol):
    """What a logical connection offers the mux: bytes in, and the end of the trunk."""

    def feed(self, data: bytes) -> None: ...

    def closed(self, reason: Exception) -> None: ...


class Mux:
    """One socket, several logical connections. `run()` reads until the socket ends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._sinks: dict[int, Sink] = {}
        self._decoder = FrameDecoder()
        self._closed: Exception | None = None
        self._done = asyncio.Event()

    def attach(self, conn_id: int, sink: Sink) -> None:
        if conn_id == 0:
            raise ProtocolError("mux connection id 0 is reserved")
        self._sinks[conn_id] = sink

    async def send(self, conn_id: int, message: bytes) -> None:
        """Write one message; its frames go out back to back (no await between them)."""
        if self._closed is not None:
            raise ConnectionError(f"NRI connection is closed: {self._closed}")
        try:
            self._writer.writelines(frame_message(conn_id, message))
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.close(ConnectionError(f"write to NRI socket failed: {exc}"))
            raise ConnectionError(f"write to NRI socket failed: {exc}") from None

    async def run(self) -> Exception:
        """Demultiplex until EOF or a protocol error; returns why the trunk ended."""
        try:
            while True:
                data = await self._reader.read(1 << 16)
                if not data:
                    raise ConnectionResetError("NRI socket closed by peer")
                for conn_id, payload in self._decoder.feed(data):
                    sink = self._sinks.get(conn_id)
                    if sink is None:
                        # Same as the Go mux: frames for ids nobody opened are dropped.
                        log.info(6, "dropping frame for unknown connection", conn=conn_id)
                        continue
                    sink.feed(payload)
        except ProtocolError as exc:
            log.error("closing NRI connection: protocol error", error=str(exc))
            self.close(exc)
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            self.close(ConnectionResetError(str(exc) or type(exc).__name__))
        except asyncio.CancelledError:
            self.close(ConnectionAbortedError("NRI connection cancelled"))
            raise
        assert self._closed is not None
        return self._closed

    def close(self, reason: Exception | None = None) -> None:
        if self._closed is not None:
            return
        self._closed = reason or ConnectionAbortedError("NRI connection closed locally")
        for sink in list(self._sinks.values()):
            sink.closed(self._closed)
        self._writer.close()
        self._done.set()

    async def wait_closed(self) -> None:
        await self._done.wait()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
