"""The one CDI spec writer: every spec dracpu hands a runtime is built and written here.

Two specs exist: the allocator's per claim (kind `dra.k8s.io/cpu`, device `claim-<uid>`, one
`env` entry with the claim's cpuset) and the dra-plugin's device metadata (kind
`<driver>/metadata`, device `<uid>_<request>`, one read-only bind `mounts` entry).

Both are written at cdiVersion 0.5.0, the oldest version that carries what they use. CDI's
Go library (`specs-go` `MinimumRequiredVersion`) names what each version added:

- 0.3.0: `containerEdits` with `env`, `deviceNodes`, `mounts` (hostPath, containerPath,
  options) and `hooks`, kind `<vendor>/<class>`; a device name must start with a letter;
- 0.4.0: a mount's `type`;
- 0.5.0: a device name may start with a digit; a device node's `hostPath`;
- 0.6.0: annotations on the spec or a device, dots in the kind's class;
- 0.7.0: `intelRdt`, `additionalGids`; 0.8.0 later fields still.

The metadata device is named by the claim's UID, which may start with a digit: 0.5.0 is needed,
and nothing past it is used. A runtime's CDI library refuses a spec whose version is newer than
it knows, and the runtimes still supported bundle old libraries (containerd 1.7 the 0.5 line,
CRI-O 1.30 a later one), so the newest version is never chosen only because it is newest.
`check_spec` refuses a spec that uses more than `CDI_VERSION` carries, so a later field cannot
slip in without the version moving with it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.errors import InvalidInputError
from dracpu.core.files import write_atomic

CDI_VERSION = "0.5.0"

# The CDI parser's names: a vendor is a domain-like label, a class one label (no dots before
# 0.6.0), a device name letters, digits and `-_.:` between two alphanumerics.
_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_ENV = re.compile(r"[^=\x00]+=[^\x00]*")

# The containerEdits fields 0.5.0 knows, and a mount's.
_EDITS = frozenset({"env", "deviceNodes", "hooks", "mounts"})
_MOUNT = frozenset({"hostPath", "containerPath", "options", "type"})


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount of a host file into the container."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "bind")

    def to_json(self) -> dict[str, Any]:
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True, slots=True)
class Device:
    """One CDI device: its name and what requesting it does to the container."""

    name: str
    env: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def to_json(self) -> dict[str, Any]:
        edits: dict[str, Any] = {}
        if self.env:
            edits["env"] = list(self.env)
        if self.mounts:
            edits["mounts"] = [m.to_json() for m in self.mounts]
        return {"name": self.name, "containerEdits": edits}


def device_id(kind: str, name: str) -> str:
    """The fully qualified CDI device id the kubelet passes to the runtime."""
    return f"{kind}={name}"


def spec_document(kind: str, devices: Sequence[Device]) -> dict[str, Any]:
    """The spec of `devices` under `kind`, checked against `CDI_VERSION`."""
    document: dict[str, Any] = {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [d.to_json() for d in devices],
    }
    check_spec(document)
    return document


def spec_bytes(kind: str, devices: Sequence[Device]) -> bytes:
    """The spec as the file holds it."""
    return json.dumps(spec_document(kind, devices), indent=2).encode() + b"\n"


def write_spec(path: str | os.PathLike[str], kind: str, devices: Sequence[Device]) -> None:
    """Replace the spec file at `path` whole (`dracpu.core.files.write_atomic`): the runtime's
    CDI cache never loads a partial spec (the temp name ends in .tmp, which it skips). Not
    durable: see `dracpu.core.files` for why no CDI spec is. A missing folder is made."""
    write_atomic(path, spec_bytes(kind, devices), durable=False, mode=0o644)


def check_spec(document: Mapping[str, Any]) -> None:
    """Refuse a spec that `CDI_VERSION` cannot carry or that misses a required field."""
    if document.get("cdiVersion") != CDI_VERSION:
        raise InvalidInputError(f"CDI spec: cdiVersion is not {CDI_VERSION}")
    kind = document.get("kind")
    vendor, _, klass = kind.partition("/") if isinstance(kind, str) else ("", "", "")
    if not (_VENDOR.fullmatch(vendor) and _CLASS.fullmatch(klass)):
        raise InvalidInputError(f"CDI spec: kind {kind!r} is not <vendor>/<class>")
    if "annotations" in document:
        raise InvalidInputError(f"CDI spec: annotations need a CDI version past {CDI_VERSION}")
    devices = document.get("devices")
    if not isinstance(devices, list) or not devices:
        raise InvalidInputError("CDI spec: no devices")
    for device in devices:
        _check_device(device)


def _check_device(device: Any) -> None:
    name = device.get("name") if isinstance(device, dict) else None
    if not isinstance(name, str) or not _DEVICE.fullmatch(name):
        raise InvalidInputError(f"CDI spec: device name {name!r} is not a CDI device name")
    if set(device) - {"name", "containerEdits"}:
        raise InvalidInputError(
            f"CDI spec: device {name} has fields {CDI_VERSION} does not carry: "
            f"{sorted(set(device) - {'name', 'containerEdits'})}"
        )
    edits = device.get("containerEdits")
    if not isinstance(edits, dict) or not edits:
        raise InvalidInputError(f"CDI spec: device {name} edits nothing")
    if set(edits) - _EDITS:
        raise InvalidInputError(
            f"CDI spec: device {name} edits {sorted(set(edits) - _EDITS)}, which "
            f"{CDI_VERSION} does not carry"
        )
    for entry in edits.get("env", []):
        if not isinstance(entry, str) or not _ENV.fullmatch(entry):
            raise InvalidInputError(f"CDI spec: device {name}: env entry {entry!r} is not K=V")
    for mount in edits.get("mounts", []):
        if (
            not isinstance(mount, dict)
            or set(mount) - _MOUNT
            or not all(str(mount.get(k, "")).startswith("/") for k in ("hostPath", "containerPath"))
        ):
            raise InvalidInputError(f"CDI spec: device {name}: mount {mount!r} is not valid")
