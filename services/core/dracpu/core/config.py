"""Driver configuration: a flat YAML file (`--config`) plus flags; an explicit flag wins.

The file's fields follow the reference driver's `driverConfig`; unknown fields are refused.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import read_yaml_file
from dracpu.core.errors import ConfigError, CPUSetError
from dracpu.core.flags import add_config_flags as add_config_flags
from dracpu.core.flags import verbosity as verbosity
from dracpu.core.log import get_logger

CONFIG_API_VERSION = "v1alpha1"

# Where a claimed container's memory comes from: `local` confines it (cpuset.mems) to the NUMA
# nodes of its claim's CPUs, `none` leaves every node. The driver-wide default, and the values
# of the claims' opaque `cpuConfig.memoryPlacement`.
MEMORY_PLACEMENTS: tuple[str, ...] = ("local", "none")
MemoryPlacement = Literal["local", "none"]

log = get_logger(__name__)

# Field name -> (file spelling, allowed values or the type). Read by hand rather than with a
# schema library: every service and command reads this at start, and the check is small.
_SPEC: dict[str, tuple[str, tuple[str, ...] | type]] = {
    "api_version": ("apiVersion", (CONFIG_API_VERSION,)),
    "cpu_device_mode": ("cpuDeviceMode", ("grouped", "individual")),
    "group_by": ("groupBy", ("numanode", "socket", "machine")),
    # Who picks a grouped claim's CPUs: the driver's placement, or an external allocator (a
    # scheduler plugin) that writes them in the claim's opaque `cpuConfig.cpuset`.
    "allocator": ("allocator", ("cpumanager", "external")),
    "reserved_cpus": ("reservedCPUs", str),
    "hostname_override": ("hostnameOverride", str),
    "kubeconfig": ("kubeconfig", str),
    "publish_node_allocatable_resource_mapping": ("publishNodeAllocatableResourceMapping", bool),
    "sysfs_root": ("sysfsRoot", str),
    # A YAML file of sysfs overrides applied over the tree (dracpu.topology.overlay).
    "sysfs_overlay": ("sysfsOverlay", str),
    # CPUs never published nor handed out, so shared containers always have somewhere to run.
    "min_shared_cpus": ("minSharedCPUs", int),
    # The memory placement of claims whose opaque configuration does not choose one.
    "memory_placement": ("memoryPlacement", MEMORY_PLACEMENTS),
    # One memory device per NUMA node with memory, beside the CPU devices.
    "publish_memory_devices": ("publishMemoryDevices", bool),
}


class _FieldError(ValueError):
    """One field's value is unusable; the message says why."""


@dataclass(frozen=True)
class DriverConfig:
    """The effective driver configuration every service shares."""

    api_version: Literal["v1alpha1"] | None = None
    cpu_device_mode: Literal["grouped", "individual"] = "grouped"
    group_by: Literal["numanode", "socket", "machine"] = "numanode"
    allocator: Literal["cpumanager", "external"] = "cpumanager"
    reserved_cpus: str = ""
    hostname_override: str = ""
    kubeconfig: str = ""
    publish_node_allocatable_resource_mapping: bool = False
    sysfs_root: str = ""
    sysfs_overlay: str = ""
    min_shared_cpus: int = 1
    memory_placement: MemoryPlacement = "none"
    publish_memory_devices: bool = False

    @classmethod
    def model_validate(cls, data: Mapping[str, Any]) -> DriverConfig:
        """A configuration from its file spelling (field names are accepted too); raises
        ConfigError naming the first bad field."""
        return parse_document(data, "configuration")

    @property
    def reserved(self) -> CPUSet:
        return CPUSet.parse(self.reserved_cpus)

    def effective_sysfs_root(self) -> Path:
        """`sysfsRoot` if set, else `$HOST_ROOT/sys`, else `/sys`."""
        if self.sysfs_root:
            return Path(self.sysfs_root)
        host_root = os.environ.get("HOST_ROOT", "")
        return Path(host_root) / "sys" if host_root else Path("/sys")

    def node_name(self) -> str:
        """`hostnameOverride`, else $NODE_NAME, else the host name."""
        return self.hostname_override or os.environ.get("NODE_NAME", "") or os.uname().nodename

    def to_document(self) -> dict[str, Any]:
        """The configuration as the file would spell it, every field present."""
        values = asdict(self)
        document = {
            _SPEC[f.name][0]: values[f.name] for f in fields(self) if f.name != "api_version"
        }
        return document | {"apiVersion": CONFIG_API_VERSION}


def _check(name: str, value: object) -> object:
    _, allowed = _SPEC[name]
    if isinstance(allowed, tuple):
        if value not in allowed or not isinstance(value, str):
            choices = [repr(choice) for choice in allowed]
            spelled = choices[0] if len(choices) == 1 else ", ".join(choices[:-1])
            if len(choices) > 1:
                spelled += f" or {choices[-1]}"
            raise _FieldError(f"Input should be {spelled}")
        return value
    if allowed is bool:
        # Strict: only a YAML/JSON boolean; "yes", "1" or "on" as strings are refused.
        if isinstance(value, bool):
            return value
        raise _FieldError("Input should be a valid boolean")
    if allowed is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _FieldError("Input should be a valid integer")
        if value < 0:
            raise _FieldError("Input should be greater than or equal to 0")
        if value > 65536:
            raise _FieldError("Input should be less than or equal to 65536")
        return value
    if not isinstance(value, str):
        raise _FieldError("Input should be a valid string")
    if name == "reserved_cpus":
        try:
            return CPUSet.parse(value).format()
        except CPUSetError as exc:
            raise _FieldError(str(exc)) from None
    return value


# flag dest -> (file field, deprecated?)
_FLAG_FIELDS: dict[str, tuple[str, bool]] = {
    "kubeconfig": ("kubeconfig", False),
    "cpu_device_mode": ("cpuDeviceMode", True),
    "group_by": ("groupBy", True),
    "allocator": ("allocator", False),
    "reserved_cpus": ("reservedCPUs", True),
    "hostname_override": ("hostnameOverride", True),
    "sysfs_root": ("sysfsRoot", False),
    "sysfs_overlay": ("sysfsOverlay", False),
    "memory_placement": ("memoryPlacement", False),
    "publish_memory_devices": ("publishMemoryDevices", False),
}


def parse_document(data: object, source: str) -> DriverConfig:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a YAML mapping, got {type(data).__name__}")
    by_spelling = {spelled: name for name, (spelled, _) in _SPEC.items()}
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = by_spelling.get(key, key if key in _SPEC else None)
        if name is None:
            raise ConfigError(f"{source}: unknown field {str(key)!r}")
        if value is None and name == "api_version":
            continue
        try:
            values[name] = _check(name, value)
        except _FieldError as exc:
            raise ConfigError(f"{source}: field {_SPEC[name][0]!r}: {exc}") from None
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
    for dest, (field, deprecated) in _FLAG_FIELDS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if deprecated:
            flag = "--" + dest.replace("_", "-")
            log.warning("deprecated flag used", flag=flag, replacement=field)
        document[field] = value
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
