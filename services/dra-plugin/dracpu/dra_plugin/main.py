"""dracpu-dra-plugin: the kubelet- and API-server-facing service.

Serves the DRA node service (v1 and v1beta1) and device health on
<kubelet-root>/plugins/dra.cpu/dra.sock, registers through
<kubelet-root>/plugins_registry/dra.cpu/dra.cpu-reg.sock, publishes the allocator's devices as
ResourceSlices, and answers the read-only DRAPluginView on --socket.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import run_async
from dracpu.core.log import setup
from dracpu.dra_plugin.flags import PROG, build_parser, check_positive


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the plugin are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(argv)
    check_positive(parser, args)
    setup(args.verbosity, "dra-plugin", fmt=args.logging_format)
    from dracpu.dra_plugin.runtime import serve

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
