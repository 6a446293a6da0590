"""The NRI transport on its own: mux frames, ttrpc messages, and how a connection survives
partial reads, interleaved calls, oversized and garbage input, and its peer going away."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.waits import eventually
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.errors import NotFoundError, ProtocolError
from dracpu.core.retry import Backoff
from dracpu.dev.runtime_sim import RuntimeSim
from dracpu.nri_plugin.transport import mux as muxmod
from dracpu.nri_plugin.transport.mux import FrameDecoder, Mux, frame_message
from dracpu.nri_plugin.transport.plugin_service import RuntimeInfo
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.nri_plugin.transport.ttrpc import (
    DEADLINE_EXCEEDED,
    INVALID_ARGUMENT,
    MAX_MESSAGE,
    NOT_FOUND,
    RESOURCE_EXHAUSTED,
    TYPE_REQUEST,
    UNAVAILABLE,
    UNIMPLEMENTED,
    UNKNOWN,
    Channel,
    MessageDecoder,
    TtrpcError,
    encode_message,
)
from dracpu.pb.nri import api_pb2
from dracpu.pb.ttrpc import ttrpc_pb2

# ---- frames ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "frames"),
    [
        pytest.param(0, [0], id="empty"),
        pytest.param(10, [10], id="header-only"),
        pytest.param(4096, [4096], id="exactly-4096"),
        pytest.param(4097, [4096, 1], id="one-over"),
        pytest.param(20_000, [4096, 15_904], id="two-frames"),
        pytest.param(
            4096 + muxmod.MAX_FRAME_PAYLOAD + 5, [4096, muxmod.MAX_FRAME_PAYLOAD, 5], id="huge"
        ),
    ],
)
def test_messages_are_cut_like_gos_bufio_writer(size: int, frames: list[int]) -> None:
    cut = frame_message(2, b"x" * size)
    assert [struct.unpack(">II", f[:8]) for f in cut] == [(2, n) for n in frames]


@given(
    messages=st.lists(st.binary(max_size=9000), min_size=1, max_size=6),
    splits=st.lists(st.integers(min_value=1, max_value=5000), max_size=40),
)
def test_frames_reassemble_from_any_slicing(messages: list[bytes], splits: list[int]) -> None:
    wire = b"".join(f for i, m in enumerate(messages) for f in frame_message(i % 3 + 1, m))
    decoder = FrameDecoder()
    got: dict[int, bytearray] = {}
    pos = 0
    for step in [*splits, len(wire)]:
        for conn, payload in decoder.feed(wire[pos : pos + step]):
            got.setdefault(conn, bytearray()).extend(payload)
        pos += step
    want: dict[int, bytearray] = {}
    for i, m in enumerate(messages):
        want.setdefault(i % 3 + 1, bytearray()).extend(m)
    assert {k: bytes(v) for k, v in got.items() if v} == {k: bytes(v) for k, v in want.items() if v}
    assert decoder.pending == 0


def test_a_frame_longer_than_any_message_is_garbage() -> None:
    with pytest.raises(ProtocolError, match="garbage on the NRI socket"):
        list(FrameDecoder().feed(b"\x00\x00\x00\x01\x7f\xff\xff\xff"))


@given(
    payloads=st.lists(st.binary(max_size=3000), min_size=1, max_size=5),
    step=st.integers(min_value=1, max_value=700),
)
def test_ttrpc_messages_reassemble_from_any_slicing(payloads: list[bytes], step: int) -> None:
    wire = b"".join(encode_message(2 * i + 1, TYPE_REQUEST, p) for i, p in enumerate(payloads))
    decoder = MessageDecoder()
    got = [m for pos in range(0, len(wire), step) for m in decoder.feed(wire[pos : pos + step])]
    assert [(m.stream_id, m.payload) for m in got] == [
        (2 * i + 1, p) for i, p in enumerate(payloads)
    ]


def test_an_oversized_ttrpc_message_is_skipped_and_the_stream_goes_on() -> None:
    header = struct.pack(">IIBB", MAX_MESSAGE + 1, 7, TYPE_REQUEST, 0)
    after = encode_message(9, TYPE_REQUEST, b"next")
    decoder = MessageDecoder()
    got = list(decoder.feed(header + b"z" * 1000))
    got += list(decoder.feed(b"z" * (MAX_MESSAGE + 1 - 1000) + after))
    assert [(m.stream_id, m.payload) for m in got] == [(7, None), (9, b"next")]


def test_an_unknown_message_type_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unknown type 0x09"):
        list(MessageDecoder().feed(struct.pack(">IIBB", 0, 1, 9, 0)))


def test_the_sender_refuses_messages_over_4_mib() -> None:
    with pytest.raises(TtrpcError) as refused:
        encode_message(1, TYPE_REQUEST, b"x" * (MAX_MESSAGE + 1))
    assert refused.value.code == RESOURCE_EXHAUSTED


# ---- channels over a real socket pair -------------------------------------------------------


@dataclass
class Pair:
    server: Mux
    client: Mux
    served: Channel
    caller: Channel
    raw: socket.socket | None = None


async def _mux(sock: socket.socket) -> Mux:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    return Mux(reader, writer)


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server, client = await _mux(a), await _mux(b)
    release = asyncio.Event()
    order: list[int] = []

    async def echo(payload: bytes) -> bytes:
        return payload[::-1]

    async def slow_first(payload: bytes) -> bytes:
        # The first call waits for the last one: answers leave out of order.
        n = int(payload)
        if n == 0:
            await release.wait()
        order.append(n)
        if n == 49:
            release.set()
        return payload

    async def missing(payload: bytes) -> bytes:
        raise NotFoundError(f"no claim {payload.decode()}")

    async def broken(payload: bytes) -> bytes:
        raise RuntimeError("boom")

    async def never(payload: bytes) -> bytes:
        await asyncio.Event().wait()
        return b""

    served = Channel(
        server,
        1,
        {
            "svc": {
                "Echo": echo,
                "Slow": slow_first,
                "Missing": missing,
                "Broken": broken,
                "Never": never,
            }
        },
    )
    caller = Channel(client, 1)
    tasks = [asyncio.create_task(server.run()), asyncio.create_task(client.run())]
    yield Pair(server, client, served, caller)
    server.close()
    client.close()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_unary_call_round_trips(pair: Pair) -> None:
    assert await pair.caller.call("svc", "Echo", b"abc", timeout=5) == b"cba"


async def test_interleaved_concurrent_calls_get_their_own_answers(pair: Pair) -> None:
    answers = await asyncio.gather(
        *(pair.caller.call("svc", "Slow", str(n).encode(), timeout=10) for n in range(50))
    )
    assert answers == [str(n).encode() for n in range(50)]


async def test_large_messages_both_ways(pair: Pair) -> None:
    big = bytes(range(256)) * 8000  # ~2 MB
    assert await pair.caller.call("svc", "Echo", big, timeout=10) == big[::-1]


@pytest.mark.parametrize(
    ("method", "code", "text"),
    [
        pytest.param("Nope", UNIMPLEMENTED, "method Nope", id="unknown-method"),
        pytest.param("Missing", NOT_FOUND, "no claim c1", id="dracpu-error"),
        pytest.param("Broken", UNKNOWN, "RuntimeError: boom", id="unexpected-error"),
    ],
)
async def test_errors_travel_as_status(pair: Pair, method: str, code: int, text: str) -> None:
    with pytest.raises(TtrpcError) as failed:
        await pair.caller.call("svc", method, b"c1", timeout=5)
    assert (failed.value.code, failed.value.message) == (code, text)
    assert await pair.caller.call("svc", "Echo", b"ok", timeout=5) == b"ko"


async def test_unknown_service(pair: Pair) -> None:
    with pytest.raises(TtrpcError, match="service other"):
        await pair.caller.call("other", "Echo", b"", timeout=5)


async def test_a_call_without_answer_times_out(pair: Pair) -> None:
    with pytest.raises(TtrpcError) as failed:
        await pair.caller.call("svc", "Never", b"", timeout=0.05)
    assert failed.value.code == DEADLINE_EXCEEDED


async def test_pending_calls_fail_when_the_peer_goes_away(pair: Pair) -> None:
    pending = asyncio.create_task(pair.caller.call("svc", "Never", b"", timeout=10))
    await eventually(lambda: pair.caller._pending, "call in flight", timeout=10)
    pair.server.close()
    with pytest.raises(TtrpcError) as failed:
        await pending
    assert failed.value.code == UNAVAILABLE


@pytest.mark.parametrize("timeout", [pytest.param(10.0, id="with-deadline"), None])
async def test_a_cancelled_call_is_cancelled_even_when_its_connection_closes_at_once(
    pair: Pair, timeout: float | None
) -> None:
    # A loop that calls the runtime (the pool pusher) is cancelled as the plugin stops, in the
    # same turn of the event loop that closes the connection: the call must end cancelled, not
    # with the connection's error, or the loop goes round again and never ends.
    pending = asyncio.create_task(pair.caller.call("svc", "Never", b"", timeout=timeout))
    await eventually(lambda: pair.caller._pending, "call in flight", timeout=10)
    pair.caller.closed(ConnectionAbortedError("plugin stopping"))
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending


async def _raw_client() -> tuple[socket.socket, asyncio.Task[Exception]]:
    """A serving channel on one end of a socket pair; the test speaks raw bytes on the other."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    async def echo(payload: bytes) -> bytes:
        return payload

    server = await _mux(a)
    Channel(server, 1, {"svc": {"Echo": echo}})
    b.setblocking(False)
    return b, asyncio.create_task(server.run())


def _request(stream: int, payload: bytes) -> bytes:
    body = ttrpc_pb2.Request(service="svc", method="Echo", payload=payload).SerializeToString()
    return b"".join(frame_message(1, encode_message(stream, TYPE_REQUEST, body)))


async def _read_response(sock: socket.socket) -> ttrpc_pb2.Response:
    loop = asyncio.get_running_loop()
    decoder, messages = FrameDecoder(), MessageDecoder()
    while True:
        data = await loop.sock_recv(sock, 65536)
        assert data, "connection closed"
        for _, payload in decoder.feed(data):
            for msg in messages.feed(payload):
                response = ttrpc_pb2.Response()
                response.ParseFromString(msg.payload or b"")
                return response


async def test_a_request_dribbled_one_byte_at_a_time() -> None:
    raw, task = await _raw_client()
    loop = asyncio.get_running_loop()
    for byte in _request(1, b"slow"):
        await loop.sock_sendall(raw, bytes([byte]))
    response = await _read_response(raw)
    assert response.payload == b"slow" and response.status.code == 0
    raw.close()
    await task


@pytest.mark.parametrize(
    ("stream", "text"),
    [
        pytest.param(4, "StreamID must be odd", id="even-stream"),
        pytest.param(3, "StreamID cannot be re-used and must increment", id="re-used"),
        pytest.param(1, "StreamID cannot be re-used and must increment", id="going-back"),
    ],
)
async def test_bad_stream_ids_are_refused(stream: int, text: str) -> None:
    raw, task = await _raw_client()
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(raw, _request(3, b"first"))
    assert (await _read_response(raw)).payload == b"first"
    await loop.sock_sendall(raw, _request(stream, b"x"))
    response = await _read_response(raw)
    assert (response.status.code, response.status.message) == (INVALID_ARGUMENT, text)
    raw.close()
    await task


async def test_an_oversized_request_gets_resource_exhausted_and_the_link_survives() -> None:
    raw, task = await _raw_client()
    loop = asyncio.get_running_loop()
    body = b"y" * (MAX_MESSAGE + 100)
    huge = struct.pack(">IIBB", len(body), 1, TYPE_REQUEST, 0) + body
    await loop.sock_sendall(raw, b"".join(frame_message(1, huge)))
    response = await _read_response(raw)
    assert response.status.code == RESOURCE_EXHAUSTED
    await loop.sock_sendall(raw, _request(3, b"still here"))
    assert (await _read_response(raw)).payload == b"still here"
    raw.close()
    await task


# ---- the plugin stub's connection -----------------------------------------------------------


class QuietHandlers:
    """Plugin handlers that accept everything (the transport is under test here)."""

    def __init__(self) -> None:
        self.disconnects: list[str] = []

    def configure(self, runtime: RuntimeInfo) -> int:
        return 0x608

    async def synchronize(self, pods: object, containers: object) -> list[api_pb2.ContainerUpdate]:
        return []

    async def create_container(self, pod: object, ctr: object) -> api_pb2.CreateContainerResponse:
        return api_pb2.CreateContainerResponse()

    async def stop_container(self, pod: object, ctr: object) -> list[api_pb2.ContainerUpdate]:
        return []

    async def remove_container(self, pod: object, ctr: object) -> None:
        return None

    def disconnected(self, reason: str, *, requested: bool = False) -> None:
        self.disconnects.append(reason)


@pytest.fixture
def nri_path(short_tmp: Path) -> Path:
    return short_tmp / "nri.sock"


async def test_garbage_from_the_runtime_closes_with_a_clear_error_then_reconnects(
    nri_path: Path,
) -> None:
    runtime = RuntimeSim(str(nri_path))
    await runtime.start()
    handlers = QuietHandlers()
    stub = PluginStub(str(nri_path), handlers, backoff=Backoff(initial=0.01, maximum=0.05))
    task = asyncio.create_task(stub.run())
    try:
        plugin = await runtime.wait_plugin()
        plugin.mux._writer.write(b"\x00\x00\x00\x01\xff\xff\xff\xffgarbage")
        await eventually(lambda: handlers.disconnects, "disconnect", timeout=10)
        assert "garbage on the NRI socket" in handlers.disconnects[0]
        await eventually(
            lambda: stub.status.connects >= 2 and stub.ready, "re-register", timeout=10
        )
        assert stub.status.connected
    finally:
        stub.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop()


async def test_no_runtime_yet_means_retrying_with_backoff(nri_path: Path) -> None:
    handlers = QuietHandlers()
    stub = PluginStub(str(nri_path), handlers, backoff=Backoff(initial=0.01, maximum=0.05))
    task = asyncio.create_task(stub.run())
    try:
        await eventually(lambda: len(handlers.disconnects) >= 3, "retries", timeout=10)
        assert "cannot connect" in handlers.disconnects[0]
        runtime = RuntimeSim(str(nri_path))
        await runtime.start()
        await runtime.wait_plugin()
        await runtime.stop()
    finally:
        stub.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
