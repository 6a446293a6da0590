"""The dracpu-nri-plugin command line: its argument parser and the checks argparse cannot make.

Light imports only: `--help` and bad flags are answered without gRPC, the NRI messages or the
plugin.
"""

from __future__ import annotations

import argparse

from dracpu.core.cli import ArgumentParser
from dracpu.core.flags import add_config_flags, add_probe_flag
from dracpu.core.sockets import DEFAULT_SOCKETS
from dracpu.nri_plugin.transport.identity import DEFAULT_NRI_SOCKET, valid_plugin_index

PROG = "dracpu-nri-plugin"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Pin container cpusets through NRI.")
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKETS["nri-plugin"],
        metavar="PATH",
        help=f"unix socket of the gRPC view (default {DEFAULT_SOCKETS['nri-plugin']})",
    )
    parser.add_argument(
        "--allocator-socket",
        default=DEFAULT_SOCKETS["allocator"],
        metavar="PATH",
        help=f"allocator socket (default {DEFAULT_SOCKETS['allocator']})",
    )
    parser.add_argument(
        "--nri-socket",
        default=DEFAULT_NRI_SOCKET,
        metavar="PATH",
        help=f"the runtime's NRI socket (default {DEFAULT_NRI_SOCKET})",
    )
    parser.add_argument(
        "--cri-socket",
        default="",
        metavar="PATH",
        help="the runtime's CRI socket, asked for the runtime's name and version when its NRI "
        "socket is absent, to name them in what the plugin says (default: none)",
    )
    parser.add_argument(
        "--nri-plugin-index",
        default="00",
        metavar="NN",
        help="two-digit NRI plugin index; plugins run in ascending order (default 00)",
    )
    parser.add_argument(
        "--unsolicited-updates",
        default="auto",
        metavar="auto|on|off",
        help="push shared-pool growth with UpdateContainers: auto decides from the runtime's "
        "name and version (see docs/user/installation.md), on/off force it (default auto)",
    )
    add_probe_flag(parser)
    add_config_flags(parser)
    return parser


def check_plugin_index(parser: ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2) an --nri-plugin-index the runtime would refuse."""
    if not valid_plugin_index(args.nri_plugin_index):
        parser.error(f"argument --nri-plugin-index: {args.nri_plugin_index!r} is not two digits")
