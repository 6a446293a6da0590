"""`dracpu health`, the container probe: run as a process against a real gRPC server on a unix
socket and a real HTTP server on loopback, as the kubelet's exec probe runs it."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dracpu.core.rpc import Health, start_server

DRACPU = str(Path(sys.executable).parent / "dracpu")


async def probe(*argv: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        DRACPU,
        "health",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Health]]:
    folder = tempfile.mkdtemp(dir="/tmp", prefix="hc")
    socket = f"{folder}/svc.sock"
    server, health = await start_server(
        socket, lambda _: None, service="probe-target", api_version="dracpu.test.v1"
    )
    try:
        yield socket, health
    finally:
        await server.stop(None)
        shutil.rmtree(folder, ignore_errors=True)


async def test_serving_is_ready_and_live(served: tuple[str, Health]) -> None:
    socket, health = served
    await health.set(True)
    assert await probe("--socket", socket) == (0, "")
    assert await probe("--live", "--socket", socket) == (0, "")


async def test_not_serving_is_live_but_not_ready(served: tuple[str, Health]) -> None:
    socket, health = served
    await health.set(False)
    code, stderr = await probe("--socket", socket)
    assert code == 1
    assert stderr == f"dracpu health: unhealthy: {socket}: NOT_SERVING\n"
    assert await probe("--live", "--socket", socket) == (0, "")


async def test_no_server_is_neither() -> None:
    folder = tempfile.mkdtemp(dir="/tmp", prefix="hc")
    try:
        for argv in (("--socket",), ("--live", "--socket")):
            code, stderr = await probe(*argv, f"{folder}/absent.sock")
            assert code == 1
            assert stderr.startswith("dracpu health: unhealthy: health of ")
            assert stderr.count("\n") == 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Status(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/healthz" else 503
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_http_2xx_is_healthy_other_status_is_not(http_base: str) -> None:
    assert await probe("--url", f"{http_base}/healthz") == (0, "")
    code, stderr = await probe("--url", f"{http_base}/readyz")
    assert (code, stderr) == (1, f"dracpu health: unhealthy: {http_base}/readyz: HTTP 503\n")


USAGE = {
    "no-target": ((), "one of the arguments --socket --url is required"),
    "both-targets": (("--socket", "/x", "--url", "http://y"), "not allowed with argument"),
    "live-with-url": (("--live", "--url", "http://127.0.0.1:1/"), "--live applies to --socket"),
    "zero-timeout": (("--socket", "/x", "--timeout", "0"), "--timeout must be positive"),
}


@pytest.mark.parametrize("argv, message", USAGE.values(), ids=USAGE.keys())
async def test_bad_usage_is_one_line_and_exit_2(argv: tuple[str, ...], message: str) -> None:
    code, stderr = await probe(*argv)
    assert code == 2
    assert message in stderr
    assert stderr.count("\n") == 1
