"""The flags every service accepts: the driver configuration, -v and --version. argparse only,
so a service answers --help and bad flags before it loads anything it needs to run."""

from __future__ import annotations

import argparse

from dracpu.core import __version__


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every service accepts. Defaults are None so an explicit flag is detectable."""
    group = parser.add_argument_group("driver configuration")
    group.add_argument("--config", metavar="FILE", help="YAML driver configuration file")
    group.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for out-of-cluster use")
    group.add_argument(
        "--sysfs-root", metavar="DIR", help="sysfs root (default $HOST_ROOT/sys or /sys)"
    )
    group.add_argument(
        "--sysfs-overlay",
        metavar="FILE",
        help="YAML file of sysfs overrides applied over the sysfs root",
    )
    group.add_argument(
        "--cpu-device-mode",
        choices=["grouped", "individual"],
        help="DEPRECATED: use cpuDeviceMode in the config file",
    )
    group.add_argument(
        "--group-by",
        choices=["numanode", "socket", "machine"],
        help="DEPRECATED: use groupBy in the config file",
    )
    group.add_argument(
        "--allocator",
        choices=["cpumanager", "external"],
        help="who picks a grouped claim's CPUs: the driver (cpumanager, default) or an external "
        "allocator writing them in the claim's opaque cpuConfig.cpuset (config field allocator)",
    )
    group.add_argument(
        "--memory-placement",
        choices=["local", "none"],
        help="memory of claimed containers: local (the NUMA nodes of the claim's CPUs) or none "
        "(every node, default); a claim's opaque cpuConfig.memoryPlacement overrides it "
        "(config field memoryPlacement)",
    )
    group.add_argument(
        "--publish-memory-devices",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="publish one memory device per NUMA node with memory, with its memory and hugepage "
        "pools as capacity; claiming them is not yet enforced (config field "
        "publishMemoryDevices, default off)",
    )
    group.add_argument(
        "--reserved-cpus", metavar="CPUSET", help="DEPRECATED: use reservedCPUs in the config file"
    )
    group.add_argument(
        "--hostname-override",
        metavar="NAME",
        help="DEPRECATED: use hostnameOverride in the config file",
    )
    parser.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=verbosity,
        default=0,
        metavar="N",
        help="log verbosity: 0, 2 (lifecycle), 4 (allocation), 6 (debug)",
    )
    parser.add_argument(
        "--logging-format",
        choices=["text", "json", "logfmt"],
        default="text",
        help="log format: text (klog), json (component-base JSON) or logfmt (for people)",
    )
    parser.add_argument("--version", action="version", version=__version__)


def add_probe_flag(parser: argparse.ArgumentParser) -> None:
    """`--probe-address` of a gRPC service (the listener: dracpu.core.probes)."""
    parser.add_argument(
        "--probe-address",
        metavar="HOST:PORT",
        help="serve /livez and /readyz over HTTP on this address for the kubelet's httpGet "
        "probes (:PORT is every address; default: no listener)",
    )


def verbosity(text: str) -> int:
    """The -v level: 0-10 (argparse turns the ValueError into a one-line usage error)."""
    if not text.isascii() or not text.isdigit() or len(text) > 2 or int(text) > 10:
        raise argparse.ArgumentTypeError(f"verbosity must be 0-10, got {text[:12]!r}")
    return int(text)
