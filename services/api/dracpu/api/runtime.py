"""The api at run time: uvicorn serving the FastAPI application on a socket opened here, with
a deadline for each request's headers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Iterator
from email.utils import formatdate
from types import FrameType

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.api.deadlines import HEADER_TIMEOUT
from dracpu.api.flags import check_timeouts, parse_bind_address
from dracpu.core import config as driver_config
from dracpu.core.errors import ConfigError
from dracpu.core.log import get_logger
from dracpu.core.rpc import DEFAULT_SOCKETS, check_socket_path

log = get_logger(__name__)


class HeaderDeadline(H11Protocol):  # type: ignore[misc]
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers: a client that
    opens a connection, or starts a request, and then trickles (or withholds) its header bytes
    is disconnected instead of holding the connection forever. Idle keep-alive connections
    stay uvicorn's timeout_keep_alive."""

    header_timeout = HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        _refresh_date(self.server_state, self.config)
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


def _refresh_date(state: ServerState, config: uvicorn.Config) -> None:
    """The Date header of the responses, refreshed as requests arrive rather than by a timer
    (uvicorn's wakes the process ten times a second)."""
    now = int(time.time())
    if now != _date_second[0]:
        _date_second[0] = now
        date = [(b"date", formatdate(now, usegmt=True).encode())] if config.date_header else []
        state.default_headers = date + config.encoded_headers


_date_second = [-1]


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after a graceful shutdown; a clean stop should exit 0. Its
    main loop wakes ten times a second to refresh the Date header and look for an exit; here
    it sleeps until told to exit (the Date header follows the requests, `_refresh_date`)."""

    _exit: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._exit = asyncio.Event()
        while not await self.on_tick(0):
            await self._exit.wait()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._exit is not None:
            self._exit.set()

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


async def serve(args: argparse.Namespace) -> int:
    # uvicorn's own loggers: errors only; requests are counted in /metrics instead.
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    check_timeouts(args)
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
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            loop="asyncio",
            http=protocol,
            ws="none",  # no WebSocket routes: never load a WebSocket library
        )
    )
    await server.serve(sockets=[listener])
    log.info(2, "stopped")
    return 0
