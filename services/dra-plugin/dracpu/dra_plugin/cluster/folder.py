"""A local folder standing in for the API server.

    DIR/resourceclaims/<namespace>/<name>.yaml   ResourceClaims, read; status.devices written
    DIR/resourceslices/<name>.yaml               ResourceSlices, written here
    DIR/nodes/<name>.yaml                        optional Node objects (their metadata.uid)

Slices get what the API server would give them: a name from generateName, a UID and a
resourceVersion that preconditions are checked against. A claim's status.devices entries
are kept per field manager as server-side apply keeps them (`DIR/.status-owners/<namespace>/
<name>.yaml` names each entry's manager), so applying ours never touches another's
(`dracpu.core.status_apply`, the merge the tests' API server fake does too).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dracpu.core.cluster_folder import ClusterFolderLayout
from dracpu.core.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from dracpu.core.files import write_atomic
from dracpu.core.status_apply import DeviceKey, apply_devices, device_key
from dracpu.dra_plugin.cluster.objects import Object

# The API server's name generator (k8s.io/apiserver pkg/storage/names): the prefix is cut to
# 58 characters, then 5 characters from this alphabet (no vowels) are appended.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_PREFIX = 58
# libyaml when present: slices of 128 devices are slow to parse in pure Python.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _read_yaml(path: Path, what: str) -> Object:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"{what} not found ({path})") from None
    except OSError as exc:
        raise UnavailableError(f"read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        raise InvalidInputError(f"{path}: not valid YAML") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path}: expected a YAML mapping")
    return data


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    # Whole, not durable: a development stand-in its readers re-read (`dracpu.core.files`).
    text = yaml.dump(dict(data), Dumper=_Dumper, sort_keys=False)
    write_atomic(path, text.encode("utf-8"), durable=False)


def _joined(key: DeviceKey) -> str:
    """A status.devices entry's key as the owners file names it."""
    return "/".join(key)


def _split(joined: str) -> DeviceKey:
    driver, pool, device, share = ([*joined.split("/", 3), "", "", ""])[:4]
    return driver, pool, device, share


class ClusterFolder:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.layout = ClusterFolderLayout(self.root)
        self.slice_dir = self.layout.slices_dir
        # One writer at a time inside this process; the folder has no other slice writer.
        self._lock = asyncio.Lock()

    def describe(self) -> str:
        return f"cluster-dir:{self.root}"

    async def get_claim(self, namespace: str, name: str) -> Object:
        path = self.layout.claim_file(namespace, name)
        return _read_yaml(path, f"resourceclaims {namespace}/{name}")

    async def apply_claim_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        # Off the event loop: thousands of these (a node drained at once) must not hold up the
        # kubelet's calls while their YAML is read and written.
        async with self._lock:
            return await asyncio.to_thread(
                self._apply_claim_status, namespace, name, uid, manager, devices
            )

    def _apply_claim_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        with self.layout.claims_locked():
            return self._apply_claim_status_locked(namespace, name, uid, manager, devices)

    def _apply_claim_status_locked(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Object]
    ) -> Object:
        path = self.layout.claim_file(namespace, name)
        claim = _read_yaml(path, f"resourceclaims {namespace}/{name}")
        found = str((claim.get("metadata") or {}).get("uid") or "")
        if found != uid:
            raise ConflictError(
                f"resourceclaims {namespace}/{name}: Precondition failed: UID in "
                f"precondition: {uid}, UID in object meta: {found}"
            )
        owners_path = self.root / ".status-owners" / namespace / f"{name}.yaml"
        status = dict(claim.get("status") or {})
        current = list(status.get("devices") or [])
        stored: dict[str, str] = {}
        if owners_path.exists():
            stored = {str(k): str(v) for k, v in _read_yaml(owners_path, "owners").items()}
        # The owners file names entries by their joined key; the entries themselves give the
        # exact key back (a pool name may hold a slash).
        keys = {_joined(device_key(e)): device_key(e) for e in current}
        owners = {keys.get(k) or _split(k): v for k, v in stored.items()}
        # The plugin's applies are forced, as it sends them to the API server.
        applied = apply_devices(current, owners, manager, devices, force=True)
        if applied.devices:
            status["devices"] = applied.devices
        else:
            status.pop("devices", None)
        claim["status"] = status
        _write_yaml(path, claim)
        _write_yaml(owners_path, {_joined(k): v for k, v in applied.owners.items()})
        return claim

    async def node_uid(self, name: str) -> str | None:
        path = self.layout.node_file(name)
        if not path.exists():
            return None
        metadata = _read_yaml(path, f"node {name}").get("metadata") or {}
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return str(uid) if uid else None

    def _load_all(self) -> list[Object]:
        if not self.slice_dir.is_dir():
            return []
        slices = []
        for path in sorted(self.slice_dir.glob("*.yaml")):
            try:
                slices.append(_read_yaml(path, "resourceslice"))
            except NotFoundError:
                continue  # removed between listing and reading
        return slices

    async def list_slices(self, driver: str, node: str) -> list[Object]:
        return [
            s
            for s in self._load_all()
            if (s.get("spec") or {}).get("driver") == driver
            and (s.get("spec") or {}).get("nodeName") == node
        ]

    def _path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise InvalidInputError(f"invalid ResourceSlice name {name!r}")
        return self.layout.slice_file(name)

    async def create_slice(self, obj: Mapping[str, Any]) -> Object:
        async with self._lock:
            stored = dict(obj)
            metadata = dict(stored.get("metadata") or {})
            name = metadata.get("name")
            if not name:
                prefix = str(metadata.pop("generateName", ""))
                suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
                name = prefix[:_MAX_PREFIX] + suffix
            path = self._path(name)
            if path.exists():
                raise ConflictError(f"resourceslice {name} already exists")
            metadata.update(name=name, uid=str(uuid.uuid4()), resourceVersion="1")
            stored["metadata"] = metadata
            _write_yaml(path, stored)
            return stored

    async def update_slice(self, obj: Mapping[str, Any]) -> Object:
        async with self._lock:
            metadata = dict(obj.get("metadata") or {})
            name = str(metadata.get("name", ""))
            path = self._path(name)
            current = _read_yaml(path, f"resourceslice {name}")
            current_meta = current.get("metadata") or {}
            if str(current_meta.get("resourceVersion")) != str(metadata.get("resourceVersion")):
                raise ConflictError(f"resourceslice {name} was modified; resourceVersion differs")
            metadata["uid"] = current_meta.get("uid")
            metadata["resourceVersion"] = str(int(current_meta.get("resourceVersion", 0)) + 1)
            stored = dict(obj)
            stored["metadata"] = metadata
            _write_yaml(path, stored)
            return stored

    async def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        async with self._lock:
            path = self._path(name)
            try:
                current = _read_yaml(path, f"resourceslice {name}")
            except NotFoundError:
                return
            meta = current.get("metadata") or {}
            if str(meta.get("uid")) != uid or str(meta.get("resourceVersion")) != resource_version:
                raise ConflictError(f"resourceslice {name} changed since it was read")
            path.unlink(missing_ok=True)
