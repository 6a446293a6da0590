"""The flags every service accepts: the driver configuration (derived from its model,
dracpu.core.config_model), -v and --version. argparse only, so a service answers --help and bad
flags before it loads anything it needs to run."""

from __future__ import annotations

import argparse
from typing import Any

from dracpu.core import __version__
from dracpu.core.config_model import FIELDS, ConfigField


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every service accepts: `--config` and one flag per field of the model that has
    one. Defaults are None so an explicit flag is detectable."""
    group = parser.add_argument_group("driver configuration")
    group.add_argument("--config", metavar="FILE", help="YAML driver configuration file")
    for field in FIELDS:
        if field.flag is None:
            continue
        options: dict[str, Any] = {"help": flag_help(field), "default": None}
        if field.kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif field.choices:
            options["choices"] = list(field.choices)
        else:
            options["metavar"] = field.flag.metavar
        group.add_argument(field.flag_name, **options)
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


def flag_help(field: ConfigField) -> str:
    """A field's flag help: the deprecation, or the field's help, name and default."""
    if field.flag is not None and field.flag.deprecated:
        return f"DEPRECATED: use {field.spelling} in the config file"
    default = field.default
    if isinstance(default, bool):
        default = "on" if default else "off"
    shown = f", default {default}" if default not in ("", None) else ""
    # argparse formats help with %: a literal one is doubled.
    return f"{field.help} (config field {field.spelling}{shown})".replace("%", "%%")


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
