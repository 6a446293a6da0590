"""The allocator's checkpoint: its claim records, written atomically with a format version and
a checksum, so a torn or edited file is detected instead of trusted."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dracpu.allocator.claims import Allocation, ClaimRecord, Owner
from dracpu.allocator.durable import write_atomic
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError, StateError

FORMAT_VERSION = 1
FILE_NAME = "allocator-checkpoint.json"


class CorruptCheckpointError(StateError):
    """The checkpoint exists but cannot be trusted."""


@dataclass(frozen=True)
class Checkpoint:
    records: tuple[ClaimRecord, ...]
    pool_generation: int = 1
    claims_generation: int = 1
    devices_generation: int = 1
    devices_fingerprint: str = ""
    written_at_ns: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def _digest(state: object) -> str:
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _record_to_json(record: ClaimRecord) -> dict[str, Any]:
    owner = record.owner
    return {
        "uid": record.uid,
        "namespace": record.namespace,
        "name": record.name,
        "cpus": record.cpus.format(),
        "preparedAtNs": record.prepared_at_ns,
        "recovered": record.recovered,
        "containerID": record.container_id,
        "owner": None
        if owner is None
        else {
            "podUID": owner.pod_uid,
            "containerName": owner.container_name,
            "podNamespace": owner.pod_namespace,
            "podName": owner.pod_name,
        },
        "allocations": [
            {
                "request": a.request,
                "pool": a.pool,
                "device": a.device,
                "cpus": a.cpus.format(),
                "count": a.count,
                "policy": a.policy,
            }
            for a in record.allocations
        ],
    }


def _record_from_json(item: dict[str, Any]) -> ClaimRecord:
    owner = item["owner"]
    return ClaimRecord(
        uid=str(item["uid"]),
        namespace=str(item["namespace"]),
        name=str(item["name"]),
        cpus=CPUSet.parse(item["cpus"]),
        prepared_at_ns=int(item["preparedAtNs"]),
        recovered=bool(item["recovered"]),
        container_id=str(item["containerID"]),
        owner=None
        if owner is None
        else Owner(
            pod_uid=str(owner["podUID"]),
            container_name=str(owner["containerName"]),
            pod_namespace=str(owner["podNamespace"]),
            pod_name=str(owner["podName"]),
        ),
        allocations=tuple(
            Allocation(
                request=str(a["request"]),
                pool=str(a["pool"]),
                device=str(a["device"]),
                cpus=CPUSet.parse(a["cpus"]),
                count=int(a["count"]),
                policy=str(a["policy"]),
            )
            for a in item["allocations"]
        ),
    )


def encode(checkpoint: Checkpoint) -> bytes:
    state = {
        "claims": [_record_to_json(r) for r in sorted(checkpoint.records, key=lambda r: r.uid)],
        "poolGeneration": checkpoint.pool_generation,
        "claimsGeneration": checkpoint.claims_generation,
        "devicesGeneration": checkpoint.devices_generation,
        "devicesFingerprint": checkpoint.devices_fingerprint,
        "writtenAtNs": checkpoint.written_at_ns or time.time_ns(),
        "meta": checkpoint.meta,
    }
    document = {"formatVersion": FORMAT_VERSION, "checksum": _digest(state), "state": state}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def decode(data: bytes, source: str) -> Checkpoint:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"checkpoint {source}: not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptCheckpointError(f"checkpoint {source}: not a JSON object")
    version = document.get("formatVersion")
    if version != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"checkpoint {source}: unknown format version {version!r} "
            f"(this build reads {FORMAT_VERSION})"
        )
    state = document.get("state")
    if document.get("checksum") != _digest(state):
        raise CorruptCheckpointError(f"checkpoint {source}: checksum mismatch")
    try:
        assert isinstance(state, dict)
        records = tuple(_record_from_json(item) for item in state["claims"])
        checkpoint = Checkpoint(
            records=records,
            pool_generation=int(state["poolGeneration"]),
            claims_generation=int(state["claimsGeneration"]),
            devices_generation=int(state["devicesGeneration"]),
            devices_fingerprint=str(state["devicesFingerprint"]),
            written_at_ns=int(state["writtenAtNs"]),
            meta=dict(state.get("meta") or {}),
        )
    except (AssertionError, KeyError, TypeError, ValueError, CPUSetError) as exc:
        raise CorruptCheckpointError(f"checkpoint {source}: malformed content ({exc!r})") from None
    uids = [r.uid for r in records]
    if len(set(uids)) != len(uids):
        raise CorruptCheckpointError(f"checkpoint {source}: duplicate claim uids")
    return checkpoint


def write(state_dir: Path, checkpoint: Checkpoint) -> None:
    path = path_in(state_dir)
    try:
        write_atomic(path, encode(checkpoint), mode=0o600)
    except OSError as exc:
        raise StateError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None


def load(state_dir: Path) -> Checkpoint | None:
    """The checkpoint, None if there is none; CorruptCheckpointError if it cannot be trusted."""
    path = path_in(state_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    return decode(data, str(path))


def move_aside(state_dir: Path) -> Path:
    """Keep a bad checkpoint for inspection under a new name; returns that name."""
    path = path_in(state_dir)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{time.time_ns() % 1_000_000:06d}")
    path.rename(target)
    return target
