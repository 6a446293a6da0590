"""dracpu-dra-plugin: the kubelet- and API-server-facing service.

Serves the DRA node service (v1 and v1beta1) and device health on
<kubelet-root>/plugins/dra.cpu/dra.sock, registers through
<kubelet-root>/plugins_registry/dra.cpu/dra.cpu-reg.sock, publishes the allocator's devices as
ResourceSlices, and answers the read-only DRAPluginView on --socket.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.flags import add_config_flags
from dracpu.core.sockets import DEFAULT_SOCKETS
from dracpu.dra_plugin.intervals import (
    POLL_INTERVAL,
    REGISTRATION_TIMEOUT,
    RESEND_INTERVAL,
    RESYNC_INTERVAL,
    WATCH_RESYNC_INTERVAL,
)
from dracpu.dra_plugin.paths import DEFAULT_KUBELET_ROOT


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="dracpu-dra-plugin", description=__doc__.splitlines()[0])
    p.add_argument("--socket", default=DEFAULT_SOCKETS["dra-plugin"], help="status socket")
    p.add_argument("--allocator-socket", default=DEFAULT_SOCKETS["allocator"])
    p.add_argument("--kubelet-root-dir", default=DEFAULT_KUBELET_ROOT, metavar="DIR")
    p.add_argument(
        "--cluster-dir",
        metavar="DIR",
        help="local cluster folder (claims read, slices written) instead of the API server",
    )
    p.add_argument("--cdi-dir", default="/var/run/cdi", metavar="DIR", help="metadata CDI specs")
    p.add_argument(
        "--registration-timeout",
        type=float,
        default=REGISTRATION_TIMEOUT,
        metavar="SECONDS",
        help="warn when the kubelet has not registered the plugin by then",
    )
    p.add_argument(
        "--health-interval",
        type=float,
        default=RESEND_INTERVAL,
        metavar="SECONDS",
        help="device health resend interval (the lease is twice this)",
    )
    p.add_argument("--poll-interval", type=float, default=POLL_INTERVAL, metavar="SECONDS")
    p.add_argument(
        "--resync-interval",
        type=float,
        metavar="SECONDS",
        help=f"re-check the slices this often (default {WATCH_RESYNC_INTERVAL:g} against the API "
        f"server, where a watch reports changes at once; {RESYNC_INTERVAL:g} with --cluster-dir)",
    )
    add_config_flags(p)
    return p


def _positive(p: ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("registration_timeout", "health_interval", "poll_interval", "resync_interval"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")


def main(argv: Sequence[str] | None = None) -> int:
    # Arguments are parsed before gRPC and the plugin are imported: --help and bad flags
    # answer at once.
    p = parser()
    args = p.parse_args(argv)
    _positive(p, args)
    from dracpu.core import log
    from dracpu.dra_plugin.serving import serve

    log.setup(args.verbosity, "dra-plugin")

    return run_async(lambda: serve(args), "dracpu-dra-plugin")


if __name__ == "__main__":
    raise SystemExit(main())
