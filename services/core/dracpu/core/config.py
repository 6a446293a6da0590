"""Driver configuration: a flat YAML file (`--config`) plus flags; an explicit flag wins.

The file's fields follow the reference driver's `driverConfig`; unknown fields are refused. The
fields, their types and defaults are those of the model (dracpu.core.config_model); this module
reads and checks a file and the flags by it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from dracpu.core.config_model import BY_NAME, BY_SPELLING, FIELDS, ConfigField
from dracpu.core.config_model import CONFIG_API_VERSION as CONFIG_API_VERSION
from dracpu.core.config_model import MEMORY_PLACEMENTS as MEMORY_PLACEMENTS
from dracpu.core.config_model import DriverConfig as DriverConfig
from dracpu.core.config_model import MemoryPlacement as MemoryPlacement
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import read_yaml_file
from dracpu.core.errors import ConfigError, CPUSetError
from dracpu.core.flags import add_config_flags as add_config_flags
from dracpu.core.flags import verbosity as verbosity
from dracpu.core.log import get_logger

log = get_logger(__name__)


class _FieldError(ValueError):
    """One field's value is unusable; the message says why."""


# Read by hand from the model rather than with a schema library: every service and command
# reads the file at start, and the check is small.
def _check(field: ConfigField, value: object) -> object:
    if field.choices:
        if value not in field.choices or not isinstance(value, str):
            choices = [repr(choice) for choice in field.choices]
            spelled = choices[0] if len(choices) == 1 else ", ".join(choices[:-1])
            if len(choices) > 1:
                spelled += f" or {choices[-1]}"
            raise _FieldError(f"Input should be {spelled}")
        return value
    if field.kind is bool:
        # Strict: only a YAML/JSON boolean; "yes", "1" or "on" as strings are refused.
        if isinstance(value, bool):
            return value
        raise _FieldError("Input should be a valid boolean")
    if field.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _FieldError("Input should be a valid integer")
        if field.minimum is not None and value < field.minimum:
            raise _FieldError(f"Input should be greater than or equal to {field.minimum}")
        if field.maximum is not None and value > field.maximum:
            raise _FieldError(f"Input should be less than or equal to {field.maximum}")
        return value
    if not isinstance(value, str):
        raise _FieldError("Input should be a valid string")
    if field.cpu_list:
        try:
            return CPUSet.parse(value).format()
        except CPUSetError as exc:
            raise _FieldError(str(exc)) from None
    return value


def parse_document(data: object, source: str) -> DriverConfig:
    """A configuration from its file spelling (field names are accepted too); raises
    ConfigError naming the source and the first bad field."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a YAML mapping, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        field = BY_SPELLING.get(key) or BY_NAME.get(key)
        if field is None:
            raise ConfigError(f"{source}: unknown field {str(key)!r}")
        if value is None and field.nullable:
            continue
        try:
            values[field.name] = _check(field, value)
        except _FieldError as exc:
            raise ConfigError(f"{source}: field {field.spelling!r}: {exc}") from None
    return DriverConfig(**values)


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
