"""The dracpu-dra-plugin command line: its argument parser and the checks argparse cannot make.

Light imports only: `--help` and bad flags are answered without gRPC or the plugin.
"""

from __future__ import annotations

import argparse

from dracpu.core.cli import ArgumentParser
from dracpu.core.flags import add_config_flags, add_probe_flag
from dracpu.core.sockets import DEFAULT_SOCKETS
from dracpu.dra_plugin.common.intervals import (
    POLL_INTERVAL,
    REGISTRATION_TIMEOUT,
    RESEND_INTERVAL,
    WATCH_RESYNC_INTERVAL,
)
from dracpu.dra_plugin.kubelet.metadata_versions import DEFAULT_METADATA_VERSIONS, parse_versions
from dracpu.dra_plugin.paths import DEFAULT_KUBELET_ROOT

PROG = "dracpu-dra-plugin"
DESCRIPTION = f"{PROG}: the kubelet- and API-server-facing service."
# The flags (as argparse dests) that take a duration in seconds, which must be positive.
POSITIVE = ("registration_timeout", "health_interval", "poll_interval", "resync_interval")


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--socket", default=DEFAULT_SOCKETS["dra-plugin"], help="status socket")
    p.add_argument("--allocator-socket", default=DEFAULT_SOCKETS["allocator"])
    p.add_argument(
        "--nri-plugin-socket",
        default=DEFAULT_SOCKETS["nri-plugin"],
        help="the nri-plugin's status socket: its missing prerequisites become Events on the pod",
    )
    p.add_argument("--kubelet-root-dir", default=DEFAULT_KUBELET_ROOT, metavar="DIR")
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
    p.add_argument(
        "--poll-interval",
        type=float,
        default=POLL_INTERVAL,
        metavar="SECONDS",
        help="how often to ask an allocator without the device watch (an older release) for "
        "its devices",
    )
    p.add_argument(
        "--resync-interval",
        type=float,
        metavar="SECONDS",
        help=f"re-check the slices this often (default {WATCH_RESYNC_INTERVAL:g}: a watch "
        "reports changes at once)",
    )
    p.add_argument(
        "--metadata-versions",
        type=_versions,
        default=DEFAULT_METADATA_VERSIONS,
        metavar="LIST",
        help="versions in each device metadata file, comma-separated (default v1beta1: one "
        "document; more make a versioned stream, e.g. v1beta1,v1alpha1)",
    )
    add_probe_flag(p)
    add_config_flags(p)
    return p


def _versions(text: str) -> tuple[str, ...]:
    try:
        return parse_versions(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_positive(p: ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2) a duration flag that is zero or negative."""
    for name in POSITIVE:
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
