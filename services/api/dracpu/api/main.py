"""`dracpu-api`, the console script: parse the flags, set up logging, serve the read-only HTTP
sidecar on uvicorn."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dracpu.api.flags import PROG, build_parser
from dracpu.core.cli import run_async
from dracpu.core.log import setup


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC, FastAPI and uvicorn are imported: --help and bad flags
    # answer at once.
    args = build_parser().parse_args(argv)

    from dracpu.api.runtime import serve

    setup(args.verbosity, "api", fmt=args.logging_format)
    # uvicorn's own loggers: errors only; requests are counted in /metrics instead.
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
