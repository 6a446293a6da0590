"""The nri-plugin service: registers with the runtime over NRI as `dra.cpu` (index 00), pins
containers' cpusets from the allocator's answers, and serves a read-only view over gRPC.

Health is SERVING while the plugin is registered and synchronized with the runtime; the gRPC
view keeps answering while it reconnects.
"""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.cli import run_async
from dracpu.core.log import setup
from dracpu.nri_plugin.flags import PROG, build_parser, check_plugin_index


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the plugin are imported: --help and bad flags
    # answer at once.
    parser = build_parser()
    args = parser.parse_args(argv)
    check_plugin_index(parser, args)
    setup(args.verbosity, "nri-plugin", fmt=args.logging_format)
    from dracpu.nri_plugin.runtime import serve

    return run_async(lambda: serve(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
