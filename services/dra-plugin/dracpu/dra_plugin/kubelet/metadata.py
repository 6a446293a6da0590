"""Device metadata for containers (API group metadata.resource.k8s.io, KEP-5304).

Per prepared request we write a metadata file under the plugin's data dir and a CDI spec that
bind-mounts it read-only at the well-known path inside the container; the CDI id goes to the
kubelet with the request's first device. Layout as kubernetes/dynamic-resource-allocation
kubeletplugin/metadata.go writes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dracpu.core import cdi
from dracpu.core.errors import StateError
from dracpu.core.files import write_atomic
from dracpu.core.names import check_namespace, check_object_name
from dracpu.dra_plugin.common.claim_request import base_request
from dracpu.dra_plugin.common.resource_claim import ClaimRef
from dracpu.dra_plugin.kubelet.metadata_versions import DEFAULT_METADATA_VERSIONS
from dracpu.pb.allocator.v1 import allocator_pb2

METADATA_GROUP = "metadata.resource.k8s.io"

CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


@dataclass(frozen=True)
class MetadataDevice:
    pool: str
    name: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


def attribute_json(value: allocator_pb2.AttributeValue) -> dict[str, Any]:
    """resource.k8s.io/v1 DeviceAttribute JSON for one attribute value."""
    kind = value.WhichOneof("value")
    if kind in ("strings", "ints"):
        return {kind: list(getattr(value, kind).values)}
    if kind is None:
        return {}
    return {kind: getattr(value, kind)}


def _make_dir(path: Path, mode: int = 0o755) -> None:
    """mkdir -p with the common case (parent already there) in one system call."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True, mode=mode)


def _dumps(obj: Any) -> str:
    # Compact: the C encoder (indent falls back to the pure-Python one, slow for big lists).
    return json.dumps(obj, separators=(",", ":"))


class MetadataWriter:
    """Writes and removes one claim's metadata files and their CDI specs."""

    def __init__(
        self,
        driver: str,
        metadata_dir: Path,
        cdi_dir: Path,
        versions: Sequence[str] = DEFAULT_METADATA_VERSIONS,
    ) -> None:
        self.driver = driver
        self.metadata_dir = metadata_dir
        self.cdi_dir = cdi_dir
        self.versions = tuple(versions)

    def claim_dir(self, namespace: str, name: str) -> Path:
        # Checked here as well as where the kubelet's names arrive: this path is removed
        # recursively on unprepare, so it must never leave the metadata dir.
        check_namespace(namespace, "claim namespace")
        check_object_name(name, "claim name")
        return self.metadata_dir / f"{namespace}_{name}"

    @property
    def cdi_kind(self) -> str:
        return f"{self.driver}/metadata"

    def cdi_file(self, uid: str, request: str) -> Path:
        return self.cdi_dir / f"{self.driver}_metadata_{uid}_{request}.json"

    def container_path(self, claim: ClaimRef, pod_claim: str | None, request: str) -> str:
        sub = f"resourceclaimtemplates/{pod_claim}" if pod_claim else f"resourceclaims/{claim.name}"
        return f"{CONTAINER_DIR}/{sub}/{request}/{self.driver}-metadata.json"

    def document(
        self,
        claim: ClaimRef,
        pod_claim: str | None,
        request: str,
        devices: Sequence[MetadataDevice],
        version: str,
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": "DeviceMetadata",
            "apiVersion": f"{METADATA_GROUP}/{version}",
            "metadata": {
                "name": claim.name,
                "namespace": claim.namespace,
                "uid": claim.uid,
                "generation": 1,
            },
        }
        if pod_claim:
            doc["podClaimName"] = pod_claim
        entries = []
        for device in devices:
            entry: dict[str, Any] = {
                "driver": self.driver,
                "pool": device.pool,
                "name": device.name,
            }
            if device.attributes:
                entry["attributes"] = dict(sorted(device.attributes.items()))
            entries.append(entry)
        doc["requests"] = [{"name": request, "devices": entries}]
        return doc

    def write(
        self,
        claim: ClaimRef,
        pod_claim: str | None,
        by_request: Mapping[str, Sequence[MetadataDevice]],
    ) -> dict[str, str]:
        """Write every request's files, one after another; returns base request name ->
        metadata CDI device id."""
        files, ids = self._files(claim, pod_claim, by_request)
        try:
            for path, data in files:
                # Atomic, not durable: after a power cut the kubelet prepares every claim
                # again (a claim read back from its checkpoint counts as not prepared) and
                # these files are written anew before any container gets the CDI id.
                write_atomic(path, data, durable=False, mode=0o644)
        except OSError as exc:
            raise StateError(f"claim {claim}: write device metadata: {exc}") from None
        return ids

    async def write_off_loop(
        self,
        claim: ClaimRef,
        pod_claim: str | None,
        by_request: Mapping[str, Sequence[MetadataDevice]],
    ) -> dict[str, str]:
        """`write`, off the event loop."""
        return await asyncio.to_thread(self.write, claim, pod_claim, by_request)

    def _files(
        self,
        claim: ClaimRef,
        pod_claim: str | None,
        by_request: Mapping[str, Sequence[MetadataDevice]],
    ) -> tuple[list[tuple[Path, bytes]], dict[str, str]]:
        """Each request's metadata file and its CDI spec, as (path, content), their folders
        made; and base request name -> metadata CDI device id."""
        files: list[tuple[Path, bytes]] = []
        ids: dict[str, str] = {}
        try:
            claim_dir = self.claim_dir(claim.namespace, claim.name)
            # Intermediate directories get the default mode, the request's own 0755.
            _make_dir(claim_dir, 0o777)
            for request_ref, devices in by_request.items():
                request = base_request(request_ref)
                stream = "".join(
                    _dumps(self.document(claim, pod_claim, request_ref, devices, v)) + "\n"
                    for v in self.versions
                )
                host_path = claim_dir / request / "metadata.json"
                _make_dir(host_path.parent)
                files.append((host_path, stream.encode()))
                device = cdi.Device(
                    f"{claim.uid}_{request}",
                    mounts=(
                        cdi.Mount(str(host_path), self.container_path(claim, pod_claim, request)),
                    ),
                )
                files.append(
                    (self.cdi_file(claim.uid, request), cdi.spec_bytes(self.cdi_kind, [device]))
                )
                ids[request] = cdi.device_id(self.cdi_kind, device.name)
        except OSError as exc:
            raise StateError(f"claim {claim}: write device metadata: {exc}") from None
        return files, ids

    def remove(self, claim: ClaimRef) -> None:
        """Remove the claim's metadata; nothing there is fine."""
        try:
            shutil.rmtree(self.claim_dir(claim.namespace, claim.name), ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StateError(f"claim {claim}: remove device metadata: {exc}") from None
        # A plain prefix/suffix scan: the CDI dir also holds every claim's allocator spec, and
        # glob's pattern matching per entry was most of an unprepare's cost.
        prefix, suffix = f"{self.driver}_metadata_{claim.uid}_", ".json"
        try:
            with os.scandir(self.cdi_dir) as entries:
                names = [
                    e.name
                    for e in entries
                    if e.name.startswith(prefix)
                    and e.name.endswith(suffix)
                    and len(e.name) >= len(prefix) + len(suffix)
                ]
            for name in names:
                (self.cdi_dir / name).unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StateError(f"claim {claim}: remove metadata CDI spec: {exc}") from None
