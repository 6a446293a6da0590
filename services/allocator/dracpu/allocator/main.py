"""`dracpu-allocator`: the allocator service process's console script."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dracpu.allocator.flags import PROG, build_parser
from dracpu.core.cli import run_async
from dracpu.core.log import setup


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the allocator are imported: --help and bad flags
    # answer at once.
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from dracpu.allocator.runtime import serve

    setup(args.verbosity, "allocator", fmt=args.logging_format)
    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
