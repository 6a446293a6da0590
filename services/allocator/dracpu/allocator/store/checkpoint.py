"""The single-file checkpoint that held every claim record before the per-claim record files
(`records`). Read once at start to migrate a node that ran an older build; `encode` stays so
tests can write one. Format version + checksum: a torn or edited file is detected, not trusted."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dracpu.allocator.claims.model import ClaimRecord
from dracpu.allocator.store.records import checked_payload, digest, record_from_json, record_to_json
from dracpu.core.documents import read_regular
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


def encode(checkpoint: Checkpoint) -> bytes:
    state = {
        "claims": [record_to_json(r) for r in sorted(checkpoint.records, key=lambda r: r.uid)],
        "poolGeneration": checkpoint.pool_generation,
        "claimsGeneration": checkpoint.claims_generation,
        "devicesGeneration": checkpoint.devices_generation,
        "devicesFingerprint": checkpoint.devices_fingerprint,
        "writtenAtNs": checkpoint.written_at_ns or time.time_ns(),
        "meta": checkpoint.meta,
    }
    document = {"formatVersion": FORMAT_VERSION, "checksum": digest(state), "state": state}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def decode(data: bytes, source: str) -> Checkpoint:
    state = checked_payload(
        data,
        f"checkpoint {source}",
        key="state",
        error=CorruptCheckpointError,
        version=FORMAT_VERSION,
    )
    try:
        assert isinstance(state, dict)
        records = tuple(record_from_json(item) for item in state["claims"])
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


def load(state_dir: Path) -> Checkpoint | None:
    """The checkpoint, None if there is none; CorruptCheckpointError if it cannot be trusted."""
    path = path_in(state_dir)
    try:
        data = read_regular(path, "cannot read checkpoint", error=StateError)
    except FileNotFoundError:
        return None
    return decode(data, str(path))
