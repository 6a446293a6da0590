#!/usr/bin/env python3
"""Forward TCP connections from one local address to another:
tcp-forward.py LISTEN TARGET [LABEL] (LABEL is ignored: it lets the caller recognise its process).
tcp-forward.py - TARGET relays one connection already open on stdin/stdout (a socket) to TARGET
and exits when either side ends: what qemu's user-mode network runs for each connection a guest
opens to a `guestfwd=...-cmd:` address (stderr is that socket too, so this mode prints nothing).
tcp-forward.py connect SOCKET HOST:PORT=TARGET... is an HTTP CONNECT proxy on the unix socket
SOCKET: a `CONNECT HOST:PORT` named in a mapping is answered 200 and relayed to its TARGET, any
other gets 403 and one line saying why. It is what the API server's egress selector
(`proxyProtocol: HTTPConnect`, `transport: uds`) dials for the cluster's traffic: the big-node
guest's kubelet at its node address, relayed to qemu's forward of it on the host's loopback.

The one-node cluster has no kube-proxy and no iptables: pods reach the API server through the
`kubernetes` Service address (KUBERNETES_SERVICE_HOST, e.g. 10.96.0.1:443), which
tools/cluster.sh puts on a bridge it creates; this relays it to the API server on loopback.
Bytes pass through unchanged (TLS ends at the API server). Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import socket
import sys
from typing import NoReturn


def _usage(reason: str) -> NoReturn:
    print(f"tcp-forward: error: {reason}", file=sys.stderr)
    sys.exit(2)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        _usage(f"{text!r} is not HOST:PORT")
    return host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction until its end, passed on as a half-close."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Both directions, each to its own end; then both connections closed."""
    try:
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
    finally:
        writer.close()
        upstream_writer.close()


async def main(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError as exc:
            print(f"tcp-forward: cannot reach {target[0]}:{target[1]}: {exc}", file=sys.stderr)
            writer.close()
            return
        await _splice(reader, writer, upstream_reader, upstream_writer)

    server = await asyncio.start_server(relay, *listen, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"tcp-forward: {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


MAX_REQUEST = 8192  # a CONNECT request's head; the API server sends two short lines


async def _connect_head(reader: asyncio.StreamReader) -> str:
    """The authority of a `CONNECT HOST:PORT HTTP/1.x` request, its head read to the blank line;
    ValueError with the reason for anything else."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise ValueError(f"request head longer than {MAX_REQUEST} bytes") from None
    except asyncio.IncompleteReadError:
        raise ValueError("connection closed before the end of the request head") from None
    words = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(words) != 3 or words[0] != "CONNECT" or not words[2].startswith("HTTP/1."):
        raise ValueError(f"not a CONNECT request: {' '.join(words)[:200]!r}")
    return words[1]


def _refuse(writer: asyncio.StreamWriter, status: str, reason: str) -> None:
    print(f"tcp-forward: {status}: {reason}", file=sys.stderr, flush=True)
    writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
    writer.close()


async def connect_proxy(path: str, mapping: dict[str, tuple[str, int]]) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            authority = await _connect_head(reader)
        except ValueError as exc:
            _refuse(writer, "400 Bad Request", str(exc))
            return
        target = mapping.get(authority)
        if target is None:
            _refuse(writer, "403 Forbidden", f"CONNECT {authority}: not a mapped address")
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError as exc:
            reason = f"CONNECT {authority}: cannot reach {target[0]}:{target[1]}: {exc}"
            _refuse(writer, "502 Bad Gateway", reason)
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _splice(reader, writer, upstream_reader, upstream_writer)

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = await asyncio.start_unix_server(serve, path, limit=MAX_REQUEST)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    for authority, target in mapping.items():
        print(f"tcp-forward: CONNECT {authority} on {path} -> {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


def _mapping(texts: list[str]) -> dict[str, tuple[str, int]]:
    mapping = {}
    for text in texts:
        authority, equals, target = text.partition("=")
        if not equals:
            _usage(f"{text!r} is not HOST:PORT=TARGET_HOST:PORT")
        host, port = _address(authority)
        mapping[f"{host}:{port}"] = _address(target)
    return mapping


def relay_stdio(target: tuple[str, int]) -> int:
    """Bytes from fd 0 to TARGET and from TARGET to fd 1 until TARGET closes."""
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        return 1
    upstream.settimeout(None)
    with selectors.DefaultSelector() as selector, upstream:
        selector.register(0, selectors.EVENT_READ)
        selector.register(upstream, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                try:
                    if key.fileobj == 0:
                        data = os.read(0, 65536)
                        if not data:  # the guest closed its side: pass the half-close on
                            selector.unregister(0)
                            upstream.shutdown(socket.SHUT_WR)
                        else:
                            upstream.sendall(data)
                        continue
                    data = upstream.recv(65536)
                    if not data:
                        return 0
                    while data:
                        data = data[os.write(1, data) :]
                except OSError:
                    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "-":
        sys.exit(relay_stdio(_address(sys.argv[2])))
    if len(sys.argv) >= 4 and sys.argv[1] == "connect":
        asyncio.run(connect_proxy(sys.argv[2], _mapping(sys.argv[3:])))
        sys.exit(0)
    if len(sys.argv) not in (3, 4):
        _usage(
            "usage: tcp-forward.py LISTEN_HOST:PORT TARGET_HOST:PORT [LABEL] "
            "| - TARGET_HOST:PORT | connect SOCKET HOST:PORT=TARGET_HOST:PORT..."
        )
    asyncio.run(main(_address(sys.argv[1]), _address(sys.argv[2])))
