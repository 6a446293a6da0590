"""dracpu-dra-plugin: the kubelet- and API-server-facing service.

Serves the DRA node service (v1 and v1beta1) and device health on
<kubelet-root>/plugins/dra.cpu/dra.sock, registers through
<kubelet-root>/plugins_registry/dra.cpu/dra.cpu-reg.sock, publishes the allocator's devices as
ResourceSlices, and answers the read-only DRAPluginView on --socket.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import service_main
from dracpu.dra_plugin.flags import build_parser, check_positive


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(
        argv, build_parser(), "dra-plugin", "dracpu.dra_plugin.runtime", check_positive
    )


if __name__ == "__main__":
    raise SystemExit(main())
