"""`dracpu-allocator`: the allocator service process."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS

PROG = "dracpu-allocator"


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
        help="reads only (the api's): mode 0660; default: <socket dir>/allocator-ro.sock",
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
        help="publish resource.kubernetes.io/pcieRoot on devices",
    )
    parser.add_argument(
        "--topology-refresh",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to have the topology service re-read sysfs for changes (0: never)",
    )
    add_config_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the allocator are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0 <= args.verbosity <= 10:
        parser.error(f"argument -v: verbosity must be 0-10, got {args.verbosity}")
    if args.topology_refresh < 0:
        parser.error("argument --topology-refresh: must not be negative")
    from dracpu.allocator.serving import serve
    from dracpu.core import log

    log.setup(args.verbosity, "allocator")

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
