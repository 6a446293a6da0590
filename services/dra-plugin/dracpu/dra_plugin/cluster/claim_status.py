"""What the node did with a claim, written into its ResourceClaim's `status.devices`.

One AllocatedDeviceStatus (resource.k8s.io/v1, KEP-4817) per device of ours in the claim's
allocation, keyed as the API keys the list: driver, pool, device and, for a shared device,
the allocation result's shareID. `data` holds the CPUs the device's result received, where
they lie and the memory the claim holds; a `Ready` condition says whether the prepare
succeeded. Pure functions: no I/O (`dracpu.dra_plugin.cluster.status_writer` does the
writing).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from dracpu.core import __version__
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError
from dracpu.pb.allocator.v1 import allocator_pb2

Entry = dict[str, Any]
Key = tuple[str, str, str, str]  # driver, pool, device, shareID ("" when none)

READY = "Ready"
PREPARED = "Prepared"
PREPARE_FAILED = "PrepareFailed"
# resource.k8s.io/v1 limits: AllocatedDeviceStatusDataMaxLength, AllocatedDeviceStatusMaxConditions
# and metav1.Condition's message length.
MAX_DATA = 10 * 1024
MAX_CONDITIONS = 8
MAX_MESSAGE = 32768
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")


def key_of(entry: Mapping[str, Any]) -> Key:
    return (
        str(entry.get("driver") or ""),
        str(entry.get("pool") or ""),
        str(entry.get("device") or ""),
        str(entry.get("shareID") or ""),
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(driver: str, pool: str, device: str, share_id: str) -> Entry:
    entry: Entry = {"driver": driver, "pool": pool, "device": device}
    if share_id:
        entry["shareID"] = share_id
    return entry


def _existing(claim: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    status = claim.get("status")
    devices = status.get("devices") if isinstance(status, Mapping) else None
    out: dict[Key, Mapping[str, Any]] = {}
    for item in devices if isinstance(devices, list) else []:
        if isinstance(item, Mapping):
            out[key_of(item)] = item
    return out


def _generation(claim: Mapping[str, Any]) -> int:
    metadata = claim.get("metadata")
    value = metadata.get("generation") if isinstance(metadata, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _condition(claim: Mapping[str, Any], key: Key, ready: bool, reason: str, message: str) -> Entry:
    """A metav1.Condition; its lastTransitionTime is kept from the entry already stored when
    the status did not change (a prepare repeated after a restart)."""
    status = "True" if ready else "False"
    since = _now()
    previous = _existing(claim).get(key)
    for old in (previous or {}).get("conditions") or []:
        if isinstance(old, Mapping) and old.get("type") == READY and old.get("status") == status:
            since = str(old.get("lastTransitionTime") or since)
    condition: Entry = {
        "type": READY,
        "status": status,
        "reason": reason if _REASON.fullmatch(reason) else PREPARE_FAILED,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": since,
    }
    generation = _generation(claim)
    if generation:
        condition["observedGeneration"] = generation
    return condition


def memory_data(memory: Iterable[allocator_pb2.ClaimMemory]) -> list[dict[str, Any]]:
    """What the claim holds of memory devices, one entry per NUMA node and kind, as the
    allocator records it: `{numaNode, kind, bytes}`."""
    return [{"numaNode": m.numa_node, "kind": m.kind, "bytes": m.bytes} for m in memory]


def placement_data(
    device: allocator_pb2.PreparedDevice,
    policy: str,
    memory_nodes: str = "",
    memory: Iterable[allocator_pb2.ClaimMemory] = (),
) -> dict[str, Any]:
    """`data` of a prepared device: its exact CPUs and, from an allocator that reports them,
    the NUMA nodes, sockets and L3 caches they lie on and whether they are whole cores; the
    claim's memory nodes where its memory is placed, and the memory it holds of memory
    devices."""
    data: dict[str, Any] = {"cpuset": device.cpus}
    if device.topology_known:
        data["numaNodes"] = list(device.numa_nodes)
        data["sockets"] = list(device.sockets)
        data["l3Caches"] = list(device.l3_caches)
        data["wholeCores"] = device.whole_cores
    if memory_nodes:
        with contextlib.suppress(CPUSetError):  # an allocator's garbage is left out
            data["memoryNodes"] = CPUSet.parse(memory_nodes).sorted()
    held = memory_data(memory)
    if held:
        data["memory"] = held
    chosen = device.policy or policy
    if chosen:
        data["policy"] = chosen
    data["driverVersion"] = __version__
    if len(json.dumps(data, separators=(",", ":"))) > MAX_DATA:
        # Only a cpuset of thousands of scattered CPUs gets here; the claim view has it all.
        data = {"cpuCount": len(CPUSet.parse(device.cpus)), "truncated": True,
                "driverVersion": __version__}  # fmt: skip
    return data


def prepared_entries(
    driver: str,
    claim: Mapping[str, Any],
    response: allocator_pb2.PrepareResponse,
    shares: Mapping[tuple[str, str, str], str],
) -> list[Entry]:
    """One Ready entry per prepared device result (a device of two requests is one entry
    unless they hold different shares of it)."""
    entries: dict[Key, Entry] = {}
    for device in response.devices:
        share = next(
            (
                shares[(name, device.pool_name, device.device_name)]
                for name in device.request_names
                if (name, device.pool_name, device.device_name) in shares
            ),
            "",
        )
        key = (driver, device.pool_name, device.device_name, share)
        entry = entries.get(key)
        if entry is None:
            entry = _entry(*key)
            entry["conditions"] = [
                _condition(claim, key, True, PREPARED, f"CPUs {device.cpus} pinned")
            ]
            entry["data"] = placement_data(
                device, response.claim.policy, response.claim.memory_nodes, response.claim.memory
            )
            entries[key] = entry
        else:  # the same share of a device for another request: one entry, CPUs merged
            merged = CPUSet.parse(entry["data"].get("cpuset", "")) | CPUSet.parse(device.cpus)
            entry["data"]["cpuset"] = merged.format()
    return list(entries.values())


def failed_entries(driver: str, claim: Mapping[str, Any], error: str) -> list[Entry]:
    """Ready=False, with the reason, for each device of ours the claim was allocated."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    entries: dict[Key, Entry] = {}
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, Mapping) or result.get("driver") != driver:
            continue
        key = key_of(result)
        if key in entries:
            continue
        entry = _entry(*key)
        entry["conditions"] = [_condition(claim, key, False, PREPARE_FAILED, error)]
        entry["data"] = {"driverVersion": __version__}
        entries[key] = entry
    return list(entries.values())
