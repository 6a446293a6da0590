"""The topology service: discovers the CPU inventory at start and serves it over a unix socket.

Health turns SERVING only once discovery succeeded; `Rediscover` re-reads sysfs and keeps the
previous inventory if the new read fails. Between calls the service watches the kernel's online,
isolated and nohz_full lists (three small reads per interval) and rediscovers when one changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS

PROG = "dracpu-topology"
WATCH_INTERVAL = 2.0


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
        help=f"how often to check the online, isolated and nohz_full lists for changes "
        f"(0: never; default {WATCH_INTERVAL})",
    )
    add_config_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the service are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.verbosity <= 10:
        parser.error(f"argument -v: verbosity must be 0-10, got {args.verbosity}")
    if not args.watch_interval >= 0:
        parser.error("argument --watch-interval: must not be negative")
    from dracpu.core import log
    from dracpu.topology.serving import serve

    log.setup(args.verbosity, "topology")

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
