"""Serving the API-server fake: in a thread of the caller (`fake_apiserver`, for tests that
reach into the `Store`), or as its own process until SIGTERM (`main`: `dracpu dev apiserver`,
`python -m dracpu.dev.apiserver`). Either way it writes a kubeconfig its clients load."""

from __future__ import annotations

import argparse
import signal
import ssl
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import FrameType

import yaml

from dracpu.core.cli import ArgumentParser
from dracpu.core.files import write_atomic
from dracpu.dev.apiserver.handler import Handler
from dracpu.dev.apiserver.store import Store

PROG = "dracpu dev apiserver"


def kubeconfig_text(server: str) -> str:
    """A kubeconfig whose one cluster is `server`, with no credentials."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    })  # fmt: skip


class Server:
    """The fake listening on `address` ((host, port); port 0 picks one), serving `store`."""

    def __init__(
        self, store: Store, address: tuple[str, int], tls: ssl.SSLContext | None = None
    ) -> None:
        self.store = store
        handler = type("BoundHandler", (Handler,), {"store": store})
        self.http = ThreadingHTTPServer(address, handler)
        self.http.daemon_threads = True
        if tls is not None:
            self.http.socket = tls.wrap_socket(self.http.socket, server_side=True)
        host, port = self.http.server_address[:2]
        self.url = f"{'https' if tls is not None else 'http'}://{host!s}:{port}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Open watches end, then the listener closes."""
        with self.store.lock:
            self.store.closed = True
            self.store.changed.notify_all()
        self.http.shutdown()
        self.http.server_close()


@contextmanager
def fake_apiserver(
    directory: Path, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[Store, Path]]:
    """Serve on 127.0.0.1 in this process (https with `tls`); yields the store and a kubeconfig
    file pointing at it (with no CA: tests that use TLS write their own)."""
    server = Server(Store(), ("127.0.0.1", 0), tls)
    server.start()
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(server.url))
    try:
        yield server.store, kubeconfig
    finally:
        server.stop()


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port 0-65535, got {text!r}")
    return host or "0.0.0.0", int(port)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="an in-memory Kubernetes API server for the driver's development runs: "
        "the ResourceSlices, ResourceClaims, Nodes and Events the driver uses",
    )
    p.add_argument(
        "--address",
        type=_address,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:0, a free port)",
    )
    p.add_argument(
        "--kubeconfig", required=True, metavar="FILE", help="write a kubeconfig for clients here"
    )
    p.add_argument(
        "--server-url",
        metavar="URL",
        help="the server the kubeconfig names (default the address listened on; set it when "
        "clients reach it by another name, as compose's services do)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        server = Server(Store(), args.address)
    except OSError as exc:
        host, port = args.address
        print(f"{PROG}: error: cannot listen on {host}:{port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.start()
    url = args.server_url or server.url
    # Written once listening, atomically: a client that finds the file can connect.
    write_atomic(Path(args.kubeconfig), kubeconfig_text(url).encode(), durable=False)
    print(f"{PROG}: serving {server.url}; kubeconfig {args.kubeconfig}", flush=True)
    stopping.wait()
    server.stop()
    return 0
