"""`dracpu-api`: the read-only HTTP sidecar on uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Iterator, Sequence

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from dracpu.api.app import create_app
from dracpu.api.backends import DEFAULT_TIMEOUT, Backends
from dracpu.core import config as driver_config
from dracpu.core import log as dracpu_log
from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.errors import ConfigError
from dracpu.core.rpc import DEFAULT_SOCKETS, check_socket_path

log = dracpu_log.get_logger("api")

DEFAULT_BIND_ADDRESS = ":8080"


def parse_bind_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[V6]:PORT`, as the reference's flag takes."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"--bind-address {text!r}: expected HOST:PORT with a port 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port_text)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="dracpu-api", description="Read-only HTTP view of the dra.cpu services on this node."
    )
    parser.add_argument(
        "--bind-address",
        default=DEFAULT_BIND_ADDRESS,
        metavar="HOST:PORT",
        help=f"address the HTTP server listens on (default {DEFAULT_BIND_ADDRESS})",
    )
    for service, path in DEFAULT_SOCKETS.items():
        parser.add_argument(
            f"--{service}-socket", metavar="PATH", default=path, help=f"{service} socket"
        )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request headers take longer than this (default 10)",
    )
    parser.add_argument(
        "--backend-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline of every call to a service (default {DEFAULT_TIMEOUT:g})",
    )
    driver_config.add_config_flags(parser)
    return parser


class HeaderDeadline(H11Protocol):  # type: ignore[misc]
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers: a client that
    opens a connection, or starts a request, and then trickles (or withholds) its header bytes
    is disconnected instead of holding the connection forever. Idle keep-alive connections
    stay uvicorn's timeout_keep_alive."""

    header_timeout = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            if self._header_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after a graceful shutdown; a clean stop should exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.handle_exit, signum, None)
        try:
            yield
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio turns on TCP_NODELAY for accepted connections only then, and
    # without it a keep-alive response waits out the peer's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--bind-address {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(256)
    sock.setblocking(False)
    return sock


async def _serve(args: argparse.Namespace) -> int:
    if not 0 < args.header_timeout <= 600:
        raise ConfigError(f"--header-timeout {args.header_timeout:g}: expected 0 < seconds <= 600")
    if not 0 < args.backend_timeout <= 60:
        raise ConfigError(f"--backend-timeout {args.backend_timeout:g}: expected 0 < seconds <= 60")
    host, port = parse_bind_address(args.bind_address)
    sockets = {
        service: check_socket_path(getattr(args, f"{service.replace('-', '_')}_socket"))
        for service in DEFAULT_SOCKETS
    }
    config = driver_config.load(args)
    # Everything is checked before the first log line, so bad input yields one line.
    driver_config.log_effective(config)
    listener = _listen(host, port)
    backends = Backends.from_sockets(sockets, timeout=args.backend_timeout)
    app = create_app(backends, config)
    bound_host, bound_port = listener.getsockname()[:2]
    log.info(0, "listening", address=f"http://{bound_host}:{bound_port}", **sockets)
    protocol = type("HeaderDeadline", (HeaderDeadline,), {"header_timeout": args.header_timeout})
    server = _Server(
        uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="on", loop="asyncio", http=protocol
        )
    )
    await server.serve(sockets=[listener])
    log.info(2, "stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    dracpu_log.setup(args.verbosity, "api")
    # uvicorn's own loggers: errors only; requests are counted in /metrics instead.
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    return run_async(lambda: _serve(args), "dracpu-api")


if __name__ == "__main__":
    raise SystemExit(main())
