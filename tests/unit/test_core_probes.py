"""The HTTP probe listener of a gRPC service (`--probe-address`): what the kubelet's httpGet
probe gets, against a real gRPC server on a unix socket, over real TCP on loopback."""

from __future__ import annotations

import asyncio
import shutil
import socket as socketlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from dracpu.core import probes
from dracpu.core.errors import ConfigError
from dracpu.core.probes import ProbeListener, parse_address
from dracpu.core.rpc import Health, start_server, stop_server


@dataclass
class Served:
    socket: str
    server: grpc.aio.Server
    health: Health

    @property
    def port(self) -> int:
        assert self.health.probe is not None
        return self.health.probe.port


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    folder = tempfile.mkdtemp(dir="/tmp", prefix="pl")
    path = f"{folder}/svc.sock"
    server, health = await start_server(
        path,
        lambda _: None,
        service="probe-target",
        api_version="dracpu.test.v1",
        probe_address="127.0.0.1:0",
    )
    try:
        yield Served(path, server, health)
    finally:
        await stop_server(server, health, path)
        shutil.rmtree(folder, ignore_errors=True)


async def request(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return reply


async def get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    raw = f"{method} {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.37\r\n\r\n"
    reply = await request(port, raw.encode())
    head, _, body = reply.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"Connection: close" in head
    assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) == len(body) or not body
    return status, body.decode().strip()


async def test_a_starting_service_is_live_but_not_ready(served: Served) -> None:
    assert await get(served.port, "/livez") == (200, "NOT_SERVING")
    assert await get(served.port, "/readyz") == (503, "NOT_SERVING")


async def test_a_serving_service_is_live_and_ready(served: Served) -> None:
    await served.health.set(True)
    assert await get(served.port, "/livez") == (200, "SERVING")
    assert await get(served.port, "/readyz?verbose") == (200, "SERVING")
    assert await get(served.port, "/livez", "HEAD") == (200, "")


async def test_a_grpc_server_that_does_not_answer_fails_both(served: Served) -> None:
    await served.server.stop(None)  # the HTTP listener lives on; the gRPC socket is dead
    for path in ("/livez", "/readyz"):
        status, body = await get(served.port, path)
        assert status == 503
        assert body.startswith(f"health of {served.socket}: ")


async def test_only_the_two_probe_paths_and_reads_are_answered(served: Served) -> None:
    status, body = await get(served.port, "/metrics")
    assert (status, body) == (404, "/metrics: not found (probes: /livez, /readyz)")
    assert await get(served.port, "/livez", "POST") == (405, "POST: only GET and HEAD")
    reply = await request(served.port, b"nonsense\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_a_slow_or_oversized_head_is_closed_without_answer(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        oversized = await request(served.port, b"GET /livez HTTP/1.1\r\n" + b"X: y\r\n" * 2000)
    except ConnectionResetError:
        oversized = b""  # closed while the head was still arriving
    assert oversized == b""
    monkeypatch.setattr(probes, "HEAD_TIMEOUT", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"GET /livez HTTP/1.1\r\n")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert await get(served.port, "/livez") == (200, "NOT_SERVING")


async def test_stopping_the_server_closes_the_listener(served: Served) -> None:
    port = served.port
    await stop_server(served.server, served.health, served.socket)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_no_address_means_no_listener() -> None:
    assert await probes.start(None, "/tmp/x.sock") is None
    assert await probes.start("", "/tmp/x.sock") is None


@pytest.mark.parametrize(
    ("text", "wanted"),
    [(":8091", ("0.0.0.0", 8091)), ("127.0.0.1:1", ("127.0.0.1", 1)), ("[::1]:9", ("::1", 9))],
)
def test_addresses(text: str, wanted: tuple[str, int]) -> None:
    assert parse_address(text) == wanted


@pytest.mark.parametrize("text", ["8091", ":http", ":65536", ""])
def test_a_bad_address_is_one_precise_error(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--probe-address .*: expected HOST:PORT"):
        parse_address(text)


async def test_a_taken_port_is_refused_naming_the_address() -> None:
    taken = socketlib.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(ConfigError, match=f"--probe-address 127.0.0.1:{port}: cannot listen"):
            await ProbeListener("/tmp/x.sock").start(f"127.0.0.1:{port}")
    finally:
        taken.close()
