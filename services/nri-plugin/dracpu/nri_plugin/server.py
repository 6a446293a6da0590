"""The nri-plugin service: registers with the runtime over NRI as `dra.cpu` (index 00), pins
containers' cpusets from the allocator's answers, and serves a read-only view over gRPC.

Health is SERVING while the plugin is registered and synchronized with the runtime; the gRPC
view keeps answering while it reconnects.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS
from dracpu.nri_plugin.identity import DEFAULT_NRI_SOCKET, valid_plugin_index

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
        "name and version (see README), on/off force it (default auto)",
    )
    add_config_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the plugin are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.verbosity <= 10:
        parser.error(f"argument -v: verbosity must be 0-10, got {args.verbosity}")
    if not valid_plugin_index(args.nri_plugin_index):
        parser.error(f"argument --nri-plugin-index: {args.nri_plugin_index!r} is not two digits")

    from dracpu.core import log
    from dracpu.nri_plugin.serving import serve

    log.setup(args.verbosity, "nri-plugin")

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
