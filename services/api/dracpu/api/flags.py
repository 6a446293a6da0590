"""The command line of `dracpu-api`: its argument parser and the checks of its flags' values.

Light imports only, so `--help` and bad flags answer before gRPC, FastAPI and uvicorn load."""

from __future__ import annotations

import argparse

from dracpu.api.deadlines import DEFAULT_TIMEOUT, HEADER_TIMEOUT
from dracpu.core.cli import ArgumentParser
from dracpu.core.errors import ConfigError
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS

PROG = "dracpu-api"
DEFAULT_BIND_ADDRESS = ":8080"


def parse_bind_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[V6]:PORT`, as the reference's flag takes."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"--bind-address {text!r}: expected HOST:PORT with a port 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port_text)


def check_timeouts(args: argparse.Namespace) -> None:
    """--header-timeout and --backend-timeout within their bounds, or a ConfigError."""
    if not 0 < args.header_timeout <= 600:
        raise ConfigError(f"--header-timeout {args.header_timeout:g}: expected 0 < seconds <= 600")
    if not 0 < args.backend_timeout <= 60:
        raise ConfigError(f"--backend-timeout {args.backend_timeout:g}: expected 0 < seconds <= 60")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, description="Read-only HTTP view of the dra.cpu services on this node."
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
