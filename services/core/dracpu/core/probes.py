"""The kubelet's probes of a gRPC service over HTTP (`--probe-address HOST:PORT`).

The services listen on unix sockets, which the kubelet's own gRPC probe cannot dial, and an
exec probe (`dracpu health`) starts a Python process per run: on a loaded or emulated node it
can take longer than any sensible probe timeout. This listener answers the kubelet's httpGet
probe from inside the service, without a process: each request asks the service's own gRPC
server, over its unix socket, for its grpc.health.v1 status, so an answer means what
`dracpu health --socket` would say.

- GET /livez: 200 when the gRPC server answers at all (NOT_SERVING included: a service waiting
  for a restarting peer must not be killed for it), as `dracpu health --live`; else 503.
- GET /readyz: 200 when the server reports SERVING, else 503.

Only GET and HEAD of those two paths; a request whose head does not arrive within
HEAD_TIMEOUT seconds, or is larger than MAX_HEAD bytes, is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from dracpu.core.errors import ConfigError
from dracpu.core.log import get_logger
from dracpu.core.tasks import within

log = get_logger(__name__)

HEAD_TIMEOUT = 5.0
MAX_HEAD = 8192
# The kubelet gives up after the probe's timeoutSeconds; the check itself waits this long.
CHECK_DEADLINE = 30.0
PATHS = ("/livez", "/readyz")


def parse_address(text: str, flag: str = "--probe-address") -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[V6]:PORT`."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"{flag} {text!r}: expected HOST:PORT with a port 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port_text)


class ProbeListener:
    """The HTTP listener of one service; `status` is the health check of its gRPC socket."""

    def __init__(self, socket_path: str | os.PathLike[str]) -> None:
        self._socket = os.fspath(socket_path)
        self._server: asyncio.Server | None = None
        self._channel: object | None = None

    @property
    def port(self) -> int:
        """The bound port (the one asked for, or the kernel's pick for port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, address: str) -> None:
        host, port = parse_address(address)
        try:
            self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD)
        except OSError as exc:
            raise ConfigError(
                f"--probe-address {address}: cannot listen: {exc.strerror or exc}"
            ) from None
        log.info(2, "probe listener", address=f"{host}:{self.port}", socket=self._socket)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await within(self._server.wait_closed(), 2)
            self._server = None
        channel, self._channel = self._channel, None
        if channel is not None:
            import grpc

            assert isinstance(channel, grpc.aio.Channel)
            await channel.close()

    async def status(self) -> tuple[str | None, str]:
        """(the server's status name, '') when it answered, else (None, why not)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from dracpu.core.channels import channel

        if self._channel is None:
            self._channel = channel(self._socket)
        assert isinstance(self._channel, grpc.aio.Channel)
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=CHECK_DEADLINE
            )
        except grpc.aio.AioRpcError as exc:
            return None, f"health of {self._socket}: {exc.details() or exc.code().name}"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)), ""

    async def answer(self, method: str, path: str) -> tuple[int, str]:
        """(HTTP status, body) of one request."""
        if path not in PATHS:
            return 404, f"{path}: not found (probes: {', '.join(PATHS)})"
        if method not in ("GET", "HEAD"):
            return 405, f"{method}: only GET and HEAD"
        status, problem = await self.status()
        if status is None:
            return 503, problem
        if path == "/livez" or status == "SERVING":
            return 200, status
        return 503, status

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await within(_read_head(reader), HEAD_TIMEOUT)
            if request is None:
                code, body = 400, "malformed request"
                method = "GET"
            else:
                method, path = request
                code, body = await self.answer(method, path)
            payload = (body + "\n").encode()
            head = (
                f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + (b"" if method == "HEAD" else payload))
            await writer.drain()
        except (
            TimeoutError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ):
            pass  # a slow, oversized or vanished client: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """(method, path without query) of a request whose head ends with an empty line."""
    head = await reader.readuntil(b"\r\n\r\n")
    first = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = first.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    return parts[0], parts[1].split("?", 1)[0]


async def start(address: str | None, socket_path: str | os.PathLike[str]) -> ProbeListener | None:
    """A started listener for `socket_path`'s server, or None when no address is given."""
    if not address:
        return None
    listener = ProbeListener(socket_path)
    await listener.start(address)
    return listener
