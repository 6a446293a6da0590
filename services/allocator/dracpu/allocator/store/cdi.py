"""The CDI spec of each prepared claim: it injects `DRA_CPUSET_<claimUID>=<cpuset>`.

One file per claim, `<cdi-dir>/dra.k8s.io-cpu_claim-<uid>.json` (the CDI library's transient
spec name), kind `dra.k8s.io/cpu`, device `claim-<uid>`, built and checked by the one CDI
writer (`dracpu.core.cdi`, which says why its cdiVersion). Specs an older release wrote at
another cdiVersion are read back alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dracpu.allocator.store.durable import FileWrite, write_file
from dracpu.core import cdi as cdi_spec
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import decode, read_regular
from dracpu.core.driver import (
    CDI_CLASS,
    CDI_KIND,
    CDI_VENDOR,
    cdi_device_name,
    cpuset_env_entry,
    cpuset_env_name,
)
from dracpu.core.errors import CPUSetError, DracpuError, StateError
from dracpu.core.files import TEMP_SUFFIX, remove_durable
from dracpu.core.names import check_uid as check_uid  # a uid that can name a CDI device

# One claim's spec is well under a kilobyte; anything much larger is not ours.
MAX_SPEC = 1024 * 1024

FILE_PREFIX = f"{CDI_VENDOR}-{CDI_CLASS}_{cdi_device_name('')}"


def spec_path(cdi_dir: Path, uid: str) -> Path:
    # GenerateTransientSpecName: <vendor>-<class>_<id> with '/' replaced by '_'.
    return cdi_dir / f"{FILE_PREFIX}{uid.replace('/', '_')}.json"


def spec_device(uid: str, cpus: CPUSet) -> cdi_spec.Device:
    return cdi_spec.Device(cdi_device_name(uid), env=(cpuset_env_entry(uid, cpus.format()),))


def spec_file(cdi_dir: Path, uid: str, cpus: CPUSet) -> FileWrite:
    """The spec of claim `uid` holding `cpus`, as a file to write."""
    path = spec_path(cdi_dir, check_uid(uid))
    data = cdi_spec.spec_bytes(CDI_KIND, [spec_device(uid, cpus)])
    # The temp name must not end in .json/.yaml, so runtimes never load a partial spec. Not
    # durable: the claim record is, and a start writes again the spec of every record whose
    # spec is missing or differs (store.recovery), before the kubelet, itself restarted after
    # a power cut, prepares its claims again.
    return FileWrite(path, data, "CDI spec", mode=0o644, temp_suffix=TEMP_SUFFIX, durable=False)


def write_spec(cdi_dir: Path, uid: str, cpus: CPUSet) -> Path:
    file = spec_file(cdi_dir, uid, cpus)
    write_file(file)
    return file.path


def remove_spec(cdi_dir: Path, uid: str) -> bool:
    path = spec_path(cdi_dir, uid)
    try:
        return remove_durable(path)
    except OSError as exc:
        raise StateError(f"cannot remove CDI spec {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class SpecOnDisk:
    uid: str
    cpus: CPUSet
    path: Path


def parse_spec(path: Path, text: str) -> SpecOnDisk:
    """Read back one of our specs; anything else is a StateError naming the file."""
    uid = path.name.removeprefix(FILE_PREFIX).removesuffix(".json")
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("kind") != CDI_KIND:
            raise ValueError(f"kind is not {CDI_KIND}")
        devices = document.get("devices")
        if not isinstance(devices, list) or len(devices) != 1 or not isinstance(devices[0], dict):
            raise ValueError("expected exactly one device")
        if devices[0].get("name") != cdi_device_name(uid):
            raise ValueError(f"device name is not {cdi_device_name(uid)}")
        env = devices[0].get("containerEdits", {}).get("env", [])
        key = f"{cpuset_env_name(uid)}="
        values = [e for e in env if isinstance(e, str) and e.startswith(key)]
        if len(values) != 1:
            raise ValueError(f"expected one {key}... entry")
        cpus = CPUSet.parse(values[0].removeprefix(key))
    except (ValueError, AttributeError, CPUSetError, RecursionError) as exc:
        raise StateError(f"CDI spec {path} is not a claim spec of this driver: {exc}") from None
    if not cpus:
        raise StateError(f"CDI spec {path} has an empty cpuset")
    return SpecOnDisk(uid=uid, cpus=cpus, path=path)


def read_specs(cdi_dir: Path) -> Iterator[SpecOnDisk | StateError]:
    """Every claim spec in the directory, in uid order; unreadable ones as errors."""
    if not cdi_dir.is_dir():
        return
    for path in sorted(cdi_dir.glob(f"{FILE_PREFIX}*.json")):
        try:
            text = decode(
                read_regular(path, "CDI spec", limit=MAX_SPEC, error=StateError), str(path)
            )
        except FileNotFoundError:
            continue
        except DracpuError as exc:
            yield StateError(f"cannot read CDI spec {path}: {exc}")
            continue
        try:
            yield parse_spec(path, text)
        except StateError as exc:
            yield exc
