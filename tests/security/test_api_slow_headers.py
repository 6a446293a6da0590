"""The api disconnects a client whose request headers never complete (a slow-header client
would otherwise hold its connection forever), and still answers complete requests."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from harness.nri_bed import BIN
from harness.waits import wait_for

pytestmark = pytest.mark.security

PORT = 21080


def connect() -> socket.socket:
    """A connection to the api, once it listens."""
    return wait_for(
        lambda: socket.create_connection(("127.0.0.1", PORT), timeout=5),
        f"the api listening on {PORT}",
        timeout=30,
        interval=0.05,
    )


def test_slow_headers_are_cut_off(short_tmp: Path) -> None:
    process = subprocess.Popen(
        [
            str(BIN / "dracpu-api"),
            "--bind-address",
            f"127.0.0.1:{PORT}",
            "--header-timeout",
            "0.5",
            *(
                arg
                for name in ("topology", "allocator", "dra-plugin", "nri-plugin")
                for arg in (f"--{name}-socket", str(short_tmp / f"{name}.sock"))
            ),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        slow = [connect() for _ in range(5)]
        for index, client in enumerate(slow):
            if index % 2:
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            client.settimeout(30)
        for client in slow:
            assert client.recv(1024) == b"", "the server closes the connection"
            client.close()
        with connect() as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            client.settimeout(30)
            assert client.recv(1024).startswith(b"HTTP/1.1 ")
    finally:
        process.terminate()
        process.wait(timeout=10)
