"""`dracpu gatherinfo`: a YAML report of the node's CPU topology, each NUMA node's memory and
the effective driver configuration, for bug reports and as the topology input of `dracpu simulate`.

The layout follows the reference driver's report (layoutVersion v1) and adds what a faithful
replay needs: every SMT sibling, PCIe roots, the online set and skipped CPUs.

Given no configuration flag, it reports the configuration the driver runs with when a driver
service runs in the same container (PID 1 in a pod's container): its config file and flags,
read from its command line, as the reference's gatherinfo does. Otherwise the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dracpu.core import __version__
from dracpu.core.cli import ArgumentParser, run
from dracpu.core.config import DriverConfig, add_config_flags, load
from dracpu.core.errors import StateError
from dracpu.core.log import setup

if TYPE_CHECKING:
    from dracpu.core.machine import Machine

PROG = "dracpu gatherinfo"
SUMMARY = "write a report of the node's CPU topology"
LAYOUT_VERSION = "v1"


# The services whose command line carries the driver configuration.
DRIVER_COMMANDS = frozenset(
    f"dracpu-{name}" for name in ("topology", "allocator", "dra-plugin", "nri-plugin", "api")
)
# The configuration flags a report can be asked for explicitly (dests of add_config_flags).
_CONFIG_DESTS = (
    "config",
    "kubeconfig",
    "sysfs_root",
    "sysfs_overlay",
    "cpu_device_mode",
    "group_by",
    "reserved_cpus",
    "hostname_override",
)


# Where the driver's process is read from (a test points this at a folder of its own).
PROC = Path("/proc")


def driver_command_line(proc: Path | None = None, pid: int = 1) -> list[str] | None:
    """The arguments of the driver service running as `pid` (after its program, which may be
    run by a Python interpreter), or None when that process is not a driver service."""
    try:
        raw = ((proc or PROC) / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0")]
    if argv and argv[-1] == "":
        argv.pop()
    for index, item in enumerate(argv[:2]):
        if os.path.basename(item) in DRIVER_COMMANDS:
            return argv[index + 1 :]
    return None


def driver_config_args(args: argparse.Namespace, proc: Path | None = None) -> list[str]:
    """The running driver's arguments when `args` names no configuration, else []."""
    if any(getattr(args, dest, None) is not None for dest in _CONFIG_DESTS):
        return []
    return driver_command_line(proc) or []


def _driver_namespace(argv: list[str]) -> argparse.Namespace:
    """The configuration flags of a driver command line; its other flags are ignored."""
    parser = ArgumentParser(prog="driver", add_help=False)
    add_config_flags(parser)
    known, _ = parser.parse_known_args(argv)
    return known


def build_report(machine: Machine, config: DriverConfig) -> dict[str, Any]:
    """The report as plain data, keys in the order they are written."""
    return {
        "toolVersion": {
            "version": __version__,
            "pythonVersion": sys.version.split()[0],
        },
        "layoutVersion": LAYOUT_VERSION,
        "sysfsRoot": machine.sysfs_root,
        "cpuDetails": {
            "topology": machine.summary(),
            "online": machine.online.format(),
            "smtControl": machine.smt_control,
            "skipped": list(machine.skipped),
            "isolated": machine.isolated.format(),
            "nohzFull": machine.nohz_full.format(),
            "fingerprint": machine.fingerprint,
            "cpus": machine.to_report_cpus(),
        },
        # Per NUMA node: MemTotal (null when unreadable) and the hugepage pools.
        "memory": [node.to_report() for node in machine.memory],
        "driverConfig": config.to_document(),
    }


def render(report: dict[str, Any]) -> str:
    """YAML starting with `---`, so reports from many nodes concatenate into one stream."""
    import yaml

    body = yaml.safe_dump(report, sort_keys=False, default_flow_style=False, width=1000)
    return "---\n" + body


def report_file_name(now: float, pid: int) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"dracpu-gatherinfo-{stamp}-{pid}.yaml"


def write_report(text: str, directory: Path) -> Path:
    """Write a new file under `directory` (created if needed); never overwrite one."""
    path = directory / report_file_name(time.time(), os.getpid())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise StateError(f"report file {path} already exists") from None
    except OSError as exc:
        raise StateError(f"cannot write report to {directory}: {exc.strerror or exc}") from None
    return path


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Write a YAML report of this node's CPU topology and driver configuration.",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--stdout", action="store_true", help="write the report to stdout")
    target.add_argument(
        "--output-dir",
        metavar="DIR",
        help="directory for the report file (default: the current directory)",
    )
    add_config_flags(parser)
    return parser


def _gather(args: argparse.Namespace) -> int:
    from dracpu.topology.discovery import discover  # `--help` needs no discovery
    from dracpu.topology.overlay import read as read_overlay

    running = driver_config_args(args)
    config = load(_driver_namespace(running) if running else args)
    machine = discover(config.effective_sysfs_root(), read_overlay(config.sysfs_overlay))
    report = build_report(machine, config)
    if running:
        report["driverCommandLine"] = running
    text = render(report)
    if args.stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    print(write_report(text, Path(args.output_dir or os.getcwd())))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup(args.verbosity, "gatherinfo", fmt=args.logging_format)
    return run(lambda: _gather(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
