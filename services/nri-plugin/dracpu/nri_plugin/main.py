"""The nri-plugin service: registers with the runtime over NRI as `dra.cpu` (index 00), pins
containers' cpusets from the allocator's answers, and serves a read-only view over gRPC.

Health is SERVING while the plugin is registered and synchronized with the runtime; the gRPC
view keeps answering while it reconnects.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import service_main
from dracpu.nri_plugin.flags import build_parser, check_plugin_index


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(
        argv, build_parser(), "nri-plugin", "dracpu.nri_plugin.runtime", check_plugin_index
    )


if __name__ == "__main__":
    raise SystemExit(main())
