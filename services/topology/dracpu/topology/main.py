"""The topology service: discovers the CPU inventory at start and serves it over a unix socket.

Health turns SERVING only once discovery succeeded; `Rediscover` re-reads sysfs and keeps the
previous inventory if the new read fails. Between calls the service watches the kernel's online,
isolated and nohz_full lists (three small reads per interval) and rediscovers when one changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import run_async
from dracpu.core.log import setup
from dracpu.topology.flags import PROG, build_parser, check_watch_interval


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the service are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(argv)
    check_watch_interval(parser, args)
    setup(args.verbosity, "topology", fmt=args.logging_format)
    from dracpu.topology.runtime import serve

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
