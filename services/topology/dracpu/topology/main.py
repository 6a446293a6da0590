"""The topology service: discovers the CPU inventory at start and serves it over a unix socket.

Health turns SERVING only once discovery succeeded; `Rediscover` re-reads sysfs and keeps the
previous inventory if the new read fails. Between calls the service watches the kernel's online,
isolated and nohz_full lists (three small reads per interval) and rediscovers when one changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import service_main
from dracpu.topology.flags import build_parser, check_watch_interval


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(
        argv, build_parser(), "topology", "dracpu.topology.runtime", check_watch_interval
    )


if __name__ == "__main__":
    raise SystemExit(main())
