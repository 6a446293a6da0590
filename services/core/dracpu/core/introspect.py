"""`dracpu introspect metrics`: JSON metadata of every dra_cpu_* metric, no service needed."""

from __future__ import annotations

import json
from collections.abc import Sequence

from dracpu.core import metrics
from dracpu.core.cli import ArgumentParser, run

SUMMARY = "describe the driver's metrics"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="dracpu introspect", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True, metavar="{metrics}")
    sub.add_parser("metrics", help="describe every dra_cpu_* metric as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        if args.what == "metrics":
            print(json.dumps(metrics.describe(), indent=2))
        return 0

    return run(body, "dracpu introspect")
