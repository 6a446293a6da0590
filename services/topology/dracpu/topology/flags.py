"""The dracpu-topology command line: its argument parser and the checks argparse cannot make.

Light imports only: `--help` and bad flags are answered without gRPC or discovery.
"""

from __future__ import annotations

import argparse

from dracpu.core.cli import ArgumentParser
from dracpu.core.flags import add_config_flags, add_probe_flag
from dracpu.core.sockets import DEFAULT_SOCKETS

PROG = "dracpu-topology"
# The safety re-read: the kernel's uevents announce CPU changes; this catches what none says.
WATCH_INTERVAL = 60.0


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Serve the node's CPU topology over gRPC.")
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKETS["topology"],
        metavar="PATH",
        help=f"unix socket to listen on (default {DEFAULT_SOCKETS['topology']})",
    )
    parser.add_argument(
        "--watch-interval",
        type=float,
        default=WATCH_INTERVAL,
        metavar="SECONDS",
        help=f"how often to re-read sysfs besides the kernel's CPU uevents "
        f"(0: never; default {WATCH_INTERVAL})",
    )
    add_probe_flag(parser)
    add_config_flags(parser)
    return parser


def check_watch_interval(parser: ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2) a negative --watch-interval (or NaN)."""
    if not args.watch_interval >= 0:
        parser.error("argument --watch-interval: must not be negative")
