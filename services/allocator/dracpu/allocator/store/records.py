"""The allocator's saved state: one record file per prepared claim, so a mutation writes only
the claims it changes, whatever the number of claims on the node.

Layout under the state dir:

- `claims/<uid>.json`: one claim record (format version + SHA-256 checksum), written
  atomically (temp file, fdatasync, rename, fsync of the directory) and removed on unprepare.
- `node.json`: what belongs to the node rather than a claim (device generation and
  fingerprint, the configuration it was built with), written at start and on topology changes.
- `generations`: the pool and claims generations, overwritten in place on every change
  without fsync. Their readers (the nri-plugin's watch, the api) keep them in memory only, so
  they must not go backwards across a restart of the allocator, which the page cache already
  guarantees; after a power cut every reader starts afresh too.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dracpu.allocator.claims.model import Allocation, ClaimRecord, MemoryAmount
from dracpu.allocator.store.durable import FileWrite, write_file
from dracpu.core.containers import Owner
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import load_json, read_regular
from dracpu.core.errors import CPUSetError, StateError
from dracpu.core.files import remove_durable, write_atomic

FORMAT_VERSION = 1
CLAIMS_DIR = "claims"
SUFFIX = ".json"
NODE_FILE = "node.json"
GENERATIONS_FILE = "generations"
# A claim record is a few kilobytes at most (names are bounded where they arrive); a larger
# file, or one that is not a regular file (a FIFO would block the start), is not trusted.
MAX_RECORD = 1024 * 1024


class CorruptRecordError(StateError):
    """A saved file exists but cannot be trusted."""


def digest(body: object) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def record_to_json(record: ClaimRecord) -> dict[str, Any]:
    owner = record.owner
    body: dict[str, Any] = {
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
    if record.pods_known:
        # Absent from records of an older dra-plugin, which still load (and older builds
        # reading this record ignore the key).
        body["reservedFor"] = list(record.pods)
    if record.memory_nodes:
        # Likewise absent from older records (read as not placed) and ignored by older builds.
        body["memoryNodes"] = record.memory_nodes.format()
    if record.shares_pool:
        # Absent from older records (read as exclude) and ignored by older builds.
        body["sharedPool"] = "include"
    if record.memory:
        # What its memory devices gave; absent from older records (read as none).
        body["memory"] = [
            {"numaNode": m.node, "kind": m.kind, "bytes": m.bytes} for m in record.memory
        ]
    return body


def _memory_from_json(items: object) -> tuple[MemoryAmount, ...]:
    if not isinstance(items, list):
        raise TypeError("memory is not a list")
    amounts = []
    for item in items:
        node, kind, size = item["numaNode"], item["kind"], item["bytes"]
        if not (isinstance(node, int) and isinstance(kind, str) and isinstance(size, int)):
            raise TypeError("memory entry is not {numaNode: int, kind: str, bytes: int}")
        if node < 0 or size < 0:
            raise ValueError("memory entry has a negative node or size")
        amounts.append(MemoryAmount(node, kind, size))
    return tuple(amounts)


def record_from_json(item: dict[str, Any]) -> ClaimRecord:
    """KeyError, TypeError, ValueError or CPUSetError on malformed content."""
    owner = item["owner"]
    pods = item.get("reservedFor")
    if pods is not None and not (isinstance(pods, list) and all(isinstance(p, str) for p in pods)):
        raise TypeError("reservedFor is not a list of pod UIDs")
    memory = item.get("memoryNodes", "")
    if not isinstance(memory, str):
        raise TypeError("memoryNodes is not a node list")
    shared_pool = item.get("sharedPool", "exclude")
    if shared_pool not in ("include", "exclude"):
        raise ValueError("sharedPool is neither include nor exclude")
    return ClaimRecord(
        shares_pool=shared_pool == "include",
        memory_nodes=CPUSet.parse(memory),
        memory=_memory_from_json(item.get("memory", [])),
        pods=tuple(pods or ()),
        pods_known=pods is not None,
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


def _document(body: dict[str, Any]) -> bytes:
    document = {"formatVersion": FORMAT_VERSION, "checksum": digest(body), "body": body}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def _body(data: bytes, source: str) -> Any:
    """The checked body of a document; CorruptRecordError naming `source` if untrustworthy."""
    return checked_payload(data, source, key="body", error=CorruptRecordError)


def checked_payload(
    data: bytes, source: str, *, key: str, error: type[StateError], version: int = FORMAT_VERSION
) -> Any:
    """The payload under `key` of a versioned, checksummed JSON document; `error` naming
    `source` when the document is not JSON, of another format version, or fails its checksum."""
    document = load_json(data, source, error=error)
    if not isinstance(document, dict):
        raise error(f"{source}: not a JSON object")
    found = document.get("formatVersion")
    if found != version:
        raise error(f"{source}: unknown format version {found!r} (this build reads {version})")
    payload = document.get(key)
    if document.get("checksum") != digest(payload):
        raise error(f"{source}: checksum mismatch")
    return payload


# ---- claim records ---------------------------------------------------------------------------


def claims_dir(state_dir: Path) -> Path:
    return state_dir / CLAIMS_DIR


def record_path(state_dir: Path, uid: str) -> Path:
    # uids are checked against the CDI device-name alphabet before anything is written
    # (cdi.check_uid): no '/', so the name stays inside the directory.
    return claims_dir(state_dir) / f"{uid}{SUFFIX}"


def encode_record(record: ClaimRecord) -> bytes:
    return _document(record_to_json(record))


def decode_record(data: bytes, source: str, uid: str) -> ClaimRecord:
    body = _body(data, f"claim record {source}")
    try:
        if not isinstance(body, dict):
            raise TypeError("body is not an object")
        record = record_from_json(body)
    except (KeyError, TypeError, ValueError, CPUSetError) as exc:
        raise CorruptRecordError(f"claim record {source}: malformed content ({exc!r})") from None
    if record.uid != uid:
        raise CorruptRecordError(f"claim record {source}: holds claim {record.uid!r}, not {uid!r}")
    return record


def record_file(state_dir: Path, record: ClaimRecord) -> FileWrite:
    """The record of `record.uid`, as a file to write."""
    return FileWrite(
        record_path(state_dir, record.uid), encode_record(record), "claim record", 0o600
    )


def write_record(state_dir: Path, record: ClaimRecord) -> None:
    write_file(record_file(state_dir, record))


def remove_record(state_dir: Path, uid: str) -> bool:
    path = record_path(state_dir, uid)
    try:
        return remove_durable(path)
    except OSError as exc:
        raise StateError(f"cannot remove claim record {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record file that cannot be trusted; the claim is rebuilt from its CDI spec."""

    uid: str
    path: Path
    error: str


@dataclass
class LoadedRecords:
    records: dict[str, ClaimRecord] = field(default_factory=dict)
    bad: list[BadRecord] = field(default_factory=list)


def load_records(state_dir: Path) -> LoadedRecords | None:
    """Every record file; None when the claims directory does not exist (nothing saved)."""
    directory = claims_dir(state_dir)
    loaded = LoadedRecords()
    try:
        entries = sorted(e.name for e in os.scandir(directory) if e.name.endswith(SUFFIX))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(
            f"cannot list claim records in {directory}: {exc.strerror or exc}"
        ) from None
    for name in entries:
        path = directory / name
        uid = name.removesuffix(SUFFIX)
        try:
            data = read_regular(path, "claim record", limit=MAX_RECORD, error=CorruptRecordError)
            loaded.records[uid] = decode_record(data, str(path), uid)
        except FileNotFoundError:
            continue
        except CorruptRecordError as exc:
            loaded.bad.append(BadRecord(uid=uid, path=path, error=str(exc)))
    return loaded


def move_aside(path: Path) -> Path:
    """Keep a file that cannot be trusted for inspection, under a name no loader reads."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}-{time.time_ns() % 1_000_000:06d}")
    path.rename(target)
    return target


# ---- the node file -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFile:
    pool_generation: int = 0
    claims_generation: int = 0
    devices_generation: int = 0
    devices_fingerprint: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def node_path(state_dir: Path) -> Path:
    return state_dir / NODE_FILE


def write_node(state_dir: Path, node: NodeFile) -> None:
    path = node_path(state_dir)
    body = {
        "poolGeneration": node.pool_generation,
        "claimsGeneration": node.claims_generation,
        "devicesGeneration": node.devices_generation,
        "devicesFingerprint": node.devices_fingerprint,
        "writtenAtNs": time.time_ns(),
        "meta": node.meta,
    }
    try:
        write_atomic(path, _document(body), durable=True, mode=0o600)
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None


def load_node(state_dir: Path) -> NodeFile | None:
    """None when absent; CorruptRecordError when it cannot be trusted."""
    path = node_path(state_dir)
    try:
        data = read_regular(path, "node file", limit=MAX_RECORD, error=CorruptRecordError)
    except FileNotFoundError:
        return None
    body = _body(data, str(path))
    try:
        if not isinstance(body, dict):
            raise TypeError("body is not an object")
        return NodeFile(
            pool_generation=int(body["poolGeneration"]),
            claims_generation=int(body["claimsGeneration"]),
            devices_generation=int(body["devicesGeneration"]),
            devices_fingerprint=str(body["devicesFingerprint"]),
            meta=dict(body.get("meta") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"{path}: malformed content ({exc!r})") from None


# ---- generations -------------------------------------------------------------------------------

# One fixed-width line, so an overwrite in place never leaves a tail of an older value.
_GENERATIONS = "dracpu-generations v1 pool={:019d} claims={:019d} crc={:08x}\n"


def _generations_line(pool: int, claims: int) -> bytes:
    crc = zlib.crc32(f"{pool}:{claims}".encode())
    return _GENERATIONS.format(pool, claims, crc).encode()


def read_generations(state_dir: Path) -> tuple[int, int] | None:
    """(pool, claims) as last saved; None when absent or unreadable (a power cut may tear it)."""
    try:
        text = (state_dir / GENERATIONS_FILE).read_text(encoding="ascii")
        fields = dict(part.split("=", 1) for part in text.split()[2:])
        pool, claims = int(fields["pool"]), int(fields["claims"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError):
        return None
    if text.encode() != _generations_line(pool, claims):
        return None
    return pool, claims


def save_generations(state_dir: Path, pool: int, claims: int, *, durable: bool = False) -> None:
    """Durable: atomically, with fsync (at start). Otherwise one pwrite over the fixed-width
    line, which a kill -9 cannot cut in half."""
    path = state_dir / GENERATIONS_FILE
    line = _generations_line(pool, claims)
    try:
        if durable:
            write_atomic(path, line, durable=True, mode=0o600)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, line, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror or exc}") from None
