"""`dracpu-api`, the console script: parse the flags, set up logging, serve the read-only HTTP
sidecar on uvicorn."""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.api.flags import build_parser
from dracpu.core.cli import service_main


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(argv, build_parser(), "api", "dracpu.api.runtime")


if __name__ == "__main__":
    raise SystemExit(main())
