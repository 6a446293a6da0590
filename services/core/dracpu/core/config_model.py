"""The driver configuration, each field declared once: `DriverConfig` names it, types it (the
allowed values of a choice are its Literal) and gives its default; the field's metadata gives its
config-file spelling, one-line help, flag and chart value. `FIELDS` reads them back for what is
derived from them: the check of a document's fields (`parse_document`, here), the flags
(dracpu.core.flags), the JSON Schemas of the api's answer and of the chart's values
(dracpu.core.config_schema).

Light imports only: every service's `--help` builds its flags from this module.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dracpu.core.cpuset import MAX_CPUS, CPUSet
from dracpu.core.errors import ConfigError, CPUSetError

CONFIG_API_VERSION = "v1alpha1"

# Where a claimed container's memory comes from: `local` confines it (cpuset.mems) to the NUMA
# nodes of its claim's CPUs, `none` leaves every node. The driver-wide default, and the values
# of the claims' opaque `cpuConfig.memoryPlacement`.
MEMORY_PLACEMENTS: tuple[str, ...] = ("local", "none")
MemoryPlacement = Literal["local", "none"]

# Where the chart takes the config file's fields: `driverConfig.<field>`; the deprecated flags'
# values, which the chart folds into the file, are `args.<field>`.
CHART_CONFIG = "driverConfig"
CHART_DEPRECATED = "args"


@dataclass(frozen=True)
class Flag:
    """A field's command-line flag, `--<name with dashes>`; a deprecated one warns when used."""

    metavar: str | None = None
    deprecated: bool = False


@dataclass(frozen=True)
class ConfigField:
    """One field of the configuration, as everything derived from it needs it."""

    name: str  # the attribute of DriverConfig and the flag's argparse dest
    spelling: str  # the config file's key
    kind: type  # str, bool or int; a choice is a str with `choices`
    choices: tuple[str, ...]
    nullable: bool  # the file may say null (apiVersion: then the current version)
    default: Any
    help: str
    flag: Flag | None
    chart: bool  # the chart takes it as driverConfig.<spelling>
    chart_deprecated: bool  # and as args.<spelling>, folded into the file
    chart_note: str  # what the chart's schema says besides the help
    minimum: int | None
    maximum: int | None
    cpu_list: bool  # a string that must parse as a Linux CPU list

    @property
    def flag_name(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def values_key(self) -> str | None:
        """The chart's values key of the field, None when the chart owns it."""
        return f"{CHART_CONFIG}.{self.spelling}" if self.chart else None

    @property
    def document_default(self) -> Any:
        """The default as the effective configuration spells it (apiVersion: the version)."""
        if self.default is None and self.nullable and len(self.choices) == 1:
            return self.choices[0]
        return self.default


def _about(
    spelling: str,
    help: str,
    *,
    flag: Flag | None = None,
    chart: bool = True,
    chart_deprecated: bool = False,
    chart_note: str = "",
    minimum: int | None = None,
    maximum: int | None = None,
    cpu_list: bool = False,
) -> dict[str, Any]:
    """A DriverConfig field's metadata: what FIELDS says of it besides its type and default."""
    return {
        "spelling": spelling,
        "help": help,
        "flag": flag,
        "chart": chart,
        "chart_deprecated": chart_deprecated,
        "chart_note": chart_note,
        "minimum": minimum,
        "maximum": maximum,
        "cpu_list": cpu_list,
    }


@dataclass(frozen=True)
class DriverConfig:
    """The effective driver configuration every service shares."""

    api_version: Literal["v1alpha1"] | None = dataclasses.field(
        default=None, metadata=_about("apiVersion", "the version of the configuration's format")
    )
    cpu_device_mode: Literal["grouped", "individual"] = dataclasses.field(
        default="grouped",
        metadata=_about(
            "cpuDeviceMode",
            "one device per group of CPUs, or one device per CPU; individual is deprecated: use "
            "grouped with allocator external",
            flag=Flag(deprecated=True),
            chart_deprecated=True,
        ),
    )
    group_by: Literal["numanode", "socket", "machine"] = dataclasses.field(
        default="numanode",
        metadata=_about(
            "groupBy",
            "the group of CPUs of a grouped device; machine needs allocator external",
            flag=Flag(deprecated=True),
            chart_deprecated=True,
        ),
    )
    allocator: Literal["cpumanager", "external"] = dataclasses.field(
        default="cpumanager",
        metadata=_about(
            "allocator",
            "who picks a grouped claim's CPUs: the driver (cpumanager) or an external allocator "
            "writing them in the claim's opaque cpuConfig.cpuset",
            flag=Flag(),
        ),
    )
    reserved_cpus: str = dataclasses.field(
        default="",
        metadata=_about(
            "reservedCPUs",
            "CPUs never published nor handed out, a Linux CPU list such as 0-1",
            flag=Flag(metavar="CPUSET", deprecated=True),
            chart_deprecated=True,
            cpu_list=True,
        ),
    )
    hostname_override: str = dataclasses.field(
        default="",
        metadata=_about(
            "hostnameOverride",
            "the node's name; empty: $NODE_NAME, else the host name",
            flag=Flag(metavar="NAME", deprecated=True),
            chart_deprecated=True,
        ),
    )
    kubeconfig: str = dataclasses.field(
        default="",
        metadata=_about(
            "kubeconfig",
            "kubeconfig for out-of-cluster use; empty: the in-cluster service account",
            flag=Flag(metavar="FILE"),
            chart_note="A path inside the pod: mount it with extraVolumes.",
        ),
    )
    publish_node_allocatable_resource_mapping: bool = dataclasses.field(
        default=False,
        metadata=_about(
            "publishNodeAllocatableResourceMapping",
            "map claimed CPUs and memory devices to the node-allocatable cpu, memory and hugepages "
            "resources; needs the DRANodeAllocatableResources feature gate",
        ),
    )
    sysfs_root: str = dataclasses.field(
        default="",
        metadata=_about(
            "sysfsRoot",
            "sysfs root; empty: $HOST_ROOT/sys, else /sys",
            flag=Flag(metavar="DIR"),
            chart=False,
        ),
    )
    # Read by dracpu.topology.overlay.
    sysfs_overlay: str = dataclasses.field(
        default="",
        metadata=_about(
            "sysfsOverlay",
            "YAML file of sysfs overrides applied over the sysfs root",
            flag=Flag(metavar="FILE"),
            chart_note="A path inside the pod: mount it with extraVolumes.",
        ),
    )
    # So that shared containers always have somewhere to run.
    min_shared_cpus: int = dataclasses.field(
        default=1,
        metadata=_about(
            "minSharedCPUs",
            "CPUs kept for the shared pool, never published nor handed out",
            minimum=0,
            maximum=MAX_CPUS,
        ),
    )
    memory_placement: MemoryPlacement = dataclasses.field(
        default="none",
        metadata=_about(
            "memoryPlacement",
            "memory of claimed containers whose claim does not choose (cpuConfig.memoryPlacement): "
            "local confines it (cpuset.mems) to the NUMA nodes of the claim's CPUs, none leaves "
            "every node",
            flag=Flag(),
        ),
    )
    publish_memory_devices: bool = dataclasses.field(
        default=False,
        metadata=_about(
            "publishMemoryDevices",
            "publish one memory device per NUMA node with memory, its memory and hugepage pools as "
            "capacity, claimable with CPUs",
            flag=Flag(),
            chart_note="The chart then also creates the dra.cpu-memory DeviceClass.",
        ),
    )

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
        """The effective configuration as the file would spell it, every field present."""
        document = {f.spelling: getattr(self, f.name) for f in FIELDS if f.name != "api_version"}
        return document | {"apiVersion": CONFIG_API_VERSION}

    def as_given(self) -> dict[str, Any]:
        """Every field as the file would spell it, apiVersion null when none was given."""
        return {f.spelling: getattr(self, f.name) for f in FIELDS}


def _describe(declared: dataclasses.Field[Any], annotation: Any) -> ConfigField:
    """A ConfigField from a DriverConfig field: the type from its annotation (a Literal is a
    choice, `| None` nullable), the rest from its metadata."""
    nullable = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(members) < len(typing.get_args(annotation))
        (annotation,) = members
    choices: tuple[str, ...] = ()
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        annotation = str
    if annotation not in (str, bool, int):
        raise TypeError(f"DriverConfig.{declared.name}: unsupported type {annotation!r}")
    meta = declared.metadata
    return ConfigField(
        name=declared.name,
        spelling=meta["spelling"],
        kind=annotation,
        choices=choices,
        nullable=nullable,
        default=declared.default,
        help=meta["help"],
        flag=meta["flag"],
        chart=meta["chart"],
        chart_deprecated=meta["chart_deprecated"],
        chart_note=meta["chart_note"],
        minimum=meta["minimum"],
        maximum=meta["maximum"],
        cpu_list=meta["cpu_list"],
    )


def _fields() -> tuple[ConfigField, ...]:
    hints = typing.get_type_hints(DriverConfig)
    return tuple(_describe(f, hints[f.name]) for f in dataclasses.fields(DriverConfig))


# Every field of the configuration, in DriverConfig's order.
FIELDS: tuple[ConfigField, ...] = _fields()
BY_NAME: dict[str, ConfigField] = {f.name: f for f in FIELDS}
BY_SPELLING: dict[str, ConfigField] = {f.spelling: f for f in FIELDS}


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
