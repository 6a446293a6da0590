"""`dracpu-allocator`: the allocator service process's console script."""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.allocator.flags import build_parser
from dracpu.core.cli import service_main


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(argv, build_parser(), "allocator", "dracpu.allocator.runtime")


if __name__ == "__main__":
    raise SystemExit(main())
