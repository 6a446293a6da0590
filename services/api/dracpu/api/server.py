"""`dracpu-api`: the read-only HTTP sidecar on uvicorn."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dracpu.api.deadlines import DEFAULT_TIMEOUT, HEADER_TIMEOUT
from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.errors import ConfigError
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS

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
        default=HEADER_TIMEOUT,
        metavar="SECONDS",
        help=f"close a connection whose request headers take longer than this "
        f"(default {HEADER_TIMEOUT:g})",
    )
    parser.add_argument(
        "--backend-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline of every call to a service (default {DEFAULT_TIMEOUT:g})",
    )
    add_config_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC, FastAPI and uvicorn are imported: --help and bad flags
    # answer at once.
    args = _parser().parse_args(argv)

    import logging

    from dracpu.api.serving import serve
    from dracpu.core import log

    log.setup(args.verbosity, "api")
    # uvicorn's own loggers: errors only; requests are counted in /metrics instead.
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    return run_async(lambda: serve(args), "dracpu-api")


if __name__ == "__main__":
    raise SystemExit(main())
