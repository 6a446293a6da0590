"""Driver configuration: a flat YAML file (`--config`) plus flags; an explicit flag wins.

The file's fields follow the reference driver's `driverConfig`; unknown fields are refused. The
fields, their types, defaults and checks are those of the model (dracpu.core.config_model); this
module reads the file, merges the flags into it and checks the rules between fields.
"""

from __future__ import annotations

import argparse
from typing import Any

from dracpu.core.config_model import CONFIG_API_VERSION as CONFIG_API_VERSION
from dracpu.core.config_model import FIELDS
from dracpu.core.config_model import MEMORY_PLACEMENTS as MEMORY_PLACEMENTS
from dracpu.core.config_model import DriverConfig as DriverConfig
from dracpu.core.config_model import MemoryPlacement as MemoryPlacement
from dracpu.core.config_model import parse_document as parse_document
from dracpu.core.documents import read_yaml_file
from dracpu.core.errors import ConfigError
from dracpu.core.flags import add_config_flags as add_config_flags
from dracpu.core.flags import verbosity as verbosity
from dracpu.core.log import get_logger

log = get_logger(__name__)


def check_combination(config: DriverConfig, source: str) -> DriverConfig:
    """The rules between fields, checked once the file and the flags are merged."""
    if config.cpu_device_mode != "grouped":
        if config.allocator == "external":
            raise ConfigError(
                f"{source}: allocator 'external' needs cpuDeviceMode 'grouped' "
                f"(got {config.cpu_device_mode!r})"
            )
        return config
    if config.group_by == "machine" and config.allocator != "external":
        raise ConfigError(
            f"{source}: groupBy 'machine' needs allocator 'external' "
            f"(got {config.allocator!r}): an external allocator picks the CPUs of the one "
            "machine device"
        )
    return config


def read_file(path: str) -> dict[str, Any]:
    data = read_yaml_file(path, "config file", error=ConfigError)
    parse_document(data, f"config file {path}")
    return dict(data or {})


def load(args: argparse.Namespace) -> DriverConfig:
    """Merge the config file and explicit flags; warn about deprecated flags."""
    document: dict[str, Any] = {}
    config_path = getattr(args, "config", None)
    if config_path:
        document = read_file(config_path)
    for field in FIELDS:
        value = getattr(args, field.name, None) if field.flag else None
        if value is None:
            continue
        if field.flag and field.flag.deprecated:
            log.warning("deprecated flag used", flag=field.flag_name, replacement=field.spelling)
        document[field.spelling] = value
    source = f"config file {config_path}" if config_path else "flags"
    return check_combination(parse_document(document, source), source)


def log_effective(config: DriverConfig) -> None:
    log.info(0, "effective configuration", **config.to_document())


def warn_deprecated(config: DriverConfig) -> None:
    """Deprecated settings, said once at start by the service that owns the devices."""
    if config.cpu_device_mode == "individual":
        log.warning(
            "cpuDeviceMode 'individual' is deprecated: use cpuDeviceMode 'grouped' with "
            "allocator 'external' to keep scheduler-chosen CPUs "
            "(docs/user/configuration.md#migrate-from-individual-mode)",
            cpuDeviceMode=config.cpu_device_mode,
        )
