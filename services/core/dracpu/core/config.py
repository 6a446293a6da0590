"""Driver configuration: a flat YAML file (`--config`) plus flags; an explicit flag wins.

The file's fields follow the reference driver's `driverConfig`; unknown fields are refused.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import read_yaml_file
from dracpu.core.errors import ConfigError, CPUSetError
from dracpu.core.log import get_logger

CONFIG_API_VERSION = "v1alpha1"

log = get_logger("config")


class DriverConfig(BaseModel):
    """The effective driver configuration every service shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["v1alpha1"] | None = Field(default=None, alias="apiVersion")
    cpu_device_mode: Literal["grouped", "individual"] = Field(
        default="grouped", alias="cpuDeviceMode"
    )
    group_by: Literal["numanode", "socket", "machine"] = Field(default="numanode", alias="groupBy")
    reserved_cpus: str = Field(default="", alias="reservedCPUs")
    hostname_override: str = Field(default="", alias="hostnameOverride")
    kubeconfig: str = Field(default="", alias="kubeconfig")
    # Strict: only a YAML/JSON boolean; "yes", "1" or "on" as strings are refused.
    publish_node_allocatable_resource_mapping: StrictBool = Field(
        default=False, alias="publishNodeAllocatableResourceMapping"
    )
    sysfs_root: str = Field(default="", alias="sysfsRoot")

    @field_validator("reserved_cpus")
    @classmethod
    def _valid_cpuset(cls, value: str) -> str:
        try:
            return CPUSet.parse(value).format()
        except CPUSetError as exc:
            raise ValueError(str(exc)) from None

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
        return self.model_dump(by_alias=True, exclude={"api_version"}) | {
            "apiVersion": CONFIG_API_VERSION
        }


# flag dest -> (file field, deprecated?)
_FLAG_FIELDS: dict[str, tuple[str, bool]] = {
    "kubeconfig": ("kubeconfig", False),
    "cpu_device_mode": ("cpuDeviceMode", True),
    "group_by": ("groupBy", True),
    "reserved_cpus": ("reservedCPUs", True),
    "hostname_override": ("hostnameOverride", True),
    "sysfs_root": ("sysfsRoot", False),
}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every service accepts. Defaults are None so an explicit flag is detectable."""
    group = parser.add_argument_group("driver configuration")
    group.add_argument("--config", metavar="FILE", help="YAML driver configuration file")
    group.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig for out-of-cluster use")
    group.add_argument(
        "--sysfs-root", metavar="DIR", help="sysfs root (default $HOST_ROOT/sys or /sys)"
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


def verbosity(text: str) -> int:
    """The -v level: 0-10 (argparse turns the ValueError into a one-line usage error)."""
    if not text.isascii() or not text.isdigit() or len(text) > 2 or int(text) > 10:
        raise argparse.ArgumentTypeError(f"verbosity must be 0-10, got {text[:12]!r}")
    return int(text)


def _describe(error: ValidationError, source: str) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top level)"
    if first["type"] == "extra_forbidden":
        return f"{source}: unknown field {location!r}"
    message = first["msg"].removeprefix("Value error, ")
    return f"{source}: field {location!r}: {message}"


def parse_document(data: object, source: str) -> DriverConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a YAML mapping, got {type(data).__name__}")
    try:
        return DriverConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


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
    return parse_document(document, f"config file {config_path}" if config_path else "flags")


def log_effective(config: DriverConfig) -> None:
    log.info(0, "effective configuration", **config.to_document())
