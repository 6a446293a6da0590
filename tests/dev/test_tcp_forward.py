"""tools/tcp-forward.py: the relay the one-node cluster (a listening forward) and the big-node
guest (one connection on stdin/stdout, as qemu's user-mode network hands it over) use to reach
the API server on the host's loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

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
