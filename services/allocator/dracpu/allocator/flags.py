"""The allocator's command line: `build_parser` and its argument validators (light imports
only, so `--help` and bad flags answer without loading gRPC or the allocator)."""

from __future__ import annotations

import argparse

from dracpu.core.cli import ArgumentParser
from dracpu.core.driver import ATTR_PCIE_ROOT
from dracpu.core.flags import add_config_flags, add_probe_flag
from dracpu.core.sockets import ALLOCATOR_READ_ONLY_SOCKET, DEFAULT_SOCKETS

PROG = "dracpu-allocator"


def refresh_interval(text: str) -> float:
    """--topology-refresh: seconds, not negative (0: never)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, description="The allocator: the node's CPU allocation state."
    )
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKETS["allocator"],
        metavar="PATH",
        help="every call, mutating ones included: mode 0600, for the dra-plugin and nri-plugin",
    )
    parser.add_argument(
        "--read-only-socket",
        metavar="PATH",
        help="reads only (the api's): mode 0660; "
        f"default: <socket dir>/{ALLOCATOR_READ_ONLY_SOCKET}",
    )
    parser.add_argument("--topology-socket", default=DEFAULT_SOCKETS["topology"], metavar="PATH")
    parser.add_argument(
        "--topology-file",
        metavar="REPORT",
        help="read the inventory from a gatherinfo report instead of the topology service",
    )
    parser.add_argument("--state-dir", default="/var/lib/dracpu", metavar="DIR")
    parser.add_argument("--cdi-dir", default="/var/run/cdi", metavar="DIR")
    parser.add_argument(
        "--expose-pcie-roots",
        action="store_true",
        help=f"publish {ATTR_PCIE_ROOT} on devices",
    )
    parser.add_argument(
        "--topology-refresh",
        type=refresh_interval,
        default=30.0,
        metavar="SECONDS",
        help="how often to have a topology service without the inventory watch (an older "
        "release) re-read sysfs (0: follow no topology changes)",
    )
    add_probe_flag(parser)
    add_config_flags(parser)
    return parser
