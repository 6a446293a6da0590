"""`dracpu gatherinfo`: a YAML report of the node's CPU topology and the effective driver
configuration, for bug reports and as the topology input of `dracpu simulate`.

The layout follows the reference driver's report (layoutVersion v1) and adds what a faithful
replay needs: every SMT sibling, PCIe roots, the online set and skipped CPUs.
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
LAYOUT_VERSION = "v1"


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

    config = load(args)
    machine = discover(config.effective_sysfs_root())
    text = render(build_report(machine, config))
    if args.stdout:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    print(write_report(text, Path(args.output_dir or os.getcwd())))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup(args.verbosity, "gatherinfo")
    return run(lambda: _gather(args), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
