"""tools/tcp-forward.py: the relay the one-node cluster (a listening forward) and the big-node
guest (one connection on stdin/stdout, as qemu's user-mode network hands it over) use to reach
the API server on the host's loopback, and the CONNECT proxy the API server's egress selector
dials to reach the guest's kubelet."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "tcp-forward.py"


def upper_case_server() -> tuple[socket.socket, list[bytes]]:
    """A server that answers each connection with what it read, upper-cased, after the client's
    half-close, then closes; `seen` collects what it read."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            seen.append(data)
            conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server, seen


def test_one_connection_on_stdin_and_stdout_is_relayed_both_ways_with_its_half_close() -> None:
    server, seen = upper_case_server()
    port = server.getsockname()[1]
    ours, theirs = socket.socketpair()
    with server, ours:
        relay = subprocess.Popen(
            [sys.executable, str(TOOL), "-", f"127.0.0.1:{port}"],
            stdin=theirs,
            stdout=theirs,
            stderr=theirs,  # qemu hands the same socket as stderr: nothing may be printed
        )
        theirs.close()
        payload = b"GET /readyz\r\n" * 10000  # more than one read
        ours.sendall(payload)
        ours.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := ours.recv(65536):
            answer += chunk
        assert relay.wait(10) == 0
    assert seen == [payload]
    assert answer == payload.upper()


def test_an_unreachable_target_ends_the_connection_without_a_word() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: refused
        ours, theirs = socket.socketpair()
        with ours:
            relay = subprocess.run(
                [sys.executable, str(TOOL), "-", f"127.0.0.1:{port}"],
                stdin=theirs,
                stdout=theirs,
                stderr=theirs,
                timeout=20,
                check=False,
            )
            theirs.close()
            assert relay.returncode == 1
            assert ours.recv(100) == b""


def test_a_bad_address_is_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "-", "nowhere"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["tcp-forward: error: 'nowhere' is not HOST:PORT"]


@pytest.fixture
def connect_proxy(tmp_path: Path) -> Iterator[tuple[Path, list[bytes], subprocess.Popen[str]]]:
    """The CONNECT proxy on a unix socket, 198.51.100.7:10250 mapped to an upper-casing server;
    yields the socket, what the server read and the proxy (its stderr a pipe)."""
    server, seen = upper_case_server()
    path = tmp_path / "egress.sock"
    target = f"127.0.0.1:{server.getsockname()[1]}"
    proxy = subprocess.Popen(
        [sys.executable, str(TOOL), "connect", str(path), f"198.51.100.7:10250={target}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with server:
        assert proxy.stdout is not None
        # Its one line says it listens.
        assert proxy.stdout.readline().strip() == (
            f"tcp-forward: CONNECT 198.51.100.7:10250 on {path} -> {target}"
        )
        try:
            yield path, seen, proxy
        finally:
            proxy.terminate()
            assert proxy.wait(10) == 0


def connect(path: Path, request: bytes) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(10)
    conn.connect(str(path))
    conn.sendall(request)
    return conn


def read_all(conn: socket.socket) -> bytes:
    answer = b""
    while chunk := conn.recv(65536):
        answer += chunk
    return answer


def test_a_connect_to_a_mapped_address_is_answered_200_and_relayed_both_ways(
    connect_proxy: tuple[Path, list[bytes], subprocess.Popen[str]],
) -> None:
    path, seen, _ = connect_proxy
    # What the API server's egress dialer sends: the request head, then the tunnelled bytes.
    with connect(path, b"CONNECT 198.51.100.7:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as conn:
        conn.sendall(b"tls bytes")
        conn.shutdown(socket.SHUT_WR)
        answer = read_all(conn)
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\nTLS BYTES"
    assert seen == [b"tls bytes"]


def test_an_address_not_mapped_is_refused_403_with_a_line_saying_which(
    connect_proxy: tuple[Path, list[bytes], subprocess.Popen[str]],
) -> None:
    path, seen, proxy = connect_proxy
    with connect(path, b"CONNECT 10.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as conn:
        assert read_all(conn) == b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
    with connect(path, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as conn:
        assert read_all(conn) == b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    proxy.terminate()
    _, errors = proxy.communicate(timeout=10)
    assert errors.splitlines() == [
        "tcp-forward: 403 Forbidden: CONNECT 10.0.0.1:22: not a mapped address",
        "tcp-forward: 400 Bad Request: not a CONNECT request: 'GET / HTTP/1.1'",
    ]
    assert seen == []


def test_a_bad_mapping_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "connect", str(tmp_path / "s"), "10.0.0.1:22"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tcp-forward: error: '10.0.0.1:22' is not HOST:PORT=TARGET_HOST:PORT"
    ]
