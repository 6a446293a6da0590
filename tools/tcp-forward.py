#!/usr/bin/env python3
"""Forward TCP connections from one local address to another:
tcp-forward.py LISTEN TARGET [LABEL] (LABEL is ignored: it lets the caller recognise its process).
tcp-forward.py - TARGET relays one connection already open on stdin/stdout (a socket) to TARGET
and exits when either side ends: what qemu's user-mode network runs for each connection a guest
opens to a `guestfwd=...-cmd:` address (stderr is that socket too, so this mode prints nothing).

The one-node cluster has no kube-proxy and no iptables: pods reach the API server through the
`kubernetes` Service address (KUBERNETES_SERVICE_HOST, e.g. 10.96.0.1:443), which
tools/cluster.sh puts on a bridge it creates; this relays it to the API server on loopback.
Bytes pass through unchanged (TLS ends at the API server). Standard library only.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket
import sys


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        print(f"tcp-forward: error: {text!r} is not HOST:PORT", file=sys.stderr)
        sys.exit(2)
    return host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError as exc:
            print(f"tcp-forward: cannot reach {target[0]}:{target[1]}: {exc}", file=sys.stderr)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(relay, *listen, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"tcp-forward: {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


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
    if len(sys.argv) not in (3, 4):
        print(
            "tcp-forward: error: usage: tcp-forward.py LISTEN_HOST:PORT TARGET_HOST:PORT [LABEL]",
            file=sys.stderr,
        )
        sys.exit(2)
    asyncio.run(main(_address(sys.argv[1]), _address(sys.argv[2])))
